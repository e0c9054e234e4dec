//! Identifiers: `<prefix>_<uuidv7 hex>`. The prefix tells a reader what an id
//! names; UUIDv7 makes ids sort by creation time, which keyset pagination
//! relies on (`ORDER BY id DESC`).

use uuid::Uuid;

use crate::domain::rules::Text;

pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", Uuid::now_v7().simple())
}

pub fn run_id() -> String {
    new_id("run")
}
pub fn job_id() -> String {
    new_id("job")
}
pub fn job_version_id() -> String {
    new_id("jobv")
}
pub fn workflow_id() -> String {
    new_id("wf")
}
pub fn workflow_version_id() -> String {
    new_id("wfv")
}
pub fn workflow_step_id() -> String {
    new_id("wfs")
}
pub fn workflow_run_id() -> String {
    new_id("wfr")
}
pub fn step_run_id() -> String {
    new_id("wsr")
}
pub fn group_id() -> String {
    new_id("grp")
}
pub fn project_id() -> String {
    new_id("prj")
}
pub fn batch_id() -> String {
    new_id("bat")
}
pub fn event_id() -> String {
    new_id("evt")
}
pub fn event_source_id() -> String {
    new_id("evs")
}
pub fn log_drain_id() -> String {
    new_id("drn")
}

/// An id supplied by a client (project ids, path parameters) must be short,
/// printable and free of the characters the Redis entry format reserves.
/// [`EXTERNAL_ID`] is the same rule as the document states it.
pub fn is_valid_external_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// [`is_valid_external_id`] as a rule the document states: every id a
/// client names (in a path, a query, a body) and a project's own id.
pub const EXTERNAL_ID: Text = Text::form(1, 64, "^[A-Za-z0-9_.-]+$", is_valid_external_id);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_external_id_rule_is_its_check() {
        assert_eq!(crate::domain::rules::agrees(&EXTERNAL_ID, &["run_01abc", "acme-prod_1", "a.b"]), Ok(()));
    }

    #[test]
    fn ids_sort_by_creation() {
        let a = run_id();
        let b = run_id();
        assert!(a < b, "{a} !< {b}");
        assert!(a.starts_with("run_") && a.len() == 36);
    }

    #[test]
    fn external_ids_are_checked() {
        assert!(is_valid_external_id("acme-prod_1"));
        assert!(!is_valid_external_id(""));
        assert!(!is_valid_external_id("a|b"));
        assert!(!is_valid_external_id("{x}"));
        assert!(!is_valid_external_id(&"x".repeat(65)));
    }
}
