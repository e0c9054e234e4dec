//! Identifiers: `<prefix>_<uuidv7 hex>`. The prefix tells a reader what an id
//! names; UUIDv7 makes ids sort by creation time, which keyset pagination
//! relies on (`ORDER BY id DESC`).
//!
//! The ids of runs, jobs, workflows, workflow runs, workflow step runs,
//! events, bulk trigger batches and job groups are types of their own
//! ([`RunId`], [`JobId`], [`WorkflowId`], [`WorkflowRunId`], [`StepRunId`],
//! [`EventId`], [`BatchId`], [`GroupId`]), so one cannot stand in for
//! another:
//!
//! ```
//! use switchyard_shared::ids::{self, RunId};
//! fn wants_a_run(_: &RunId) {}
//! wants_a_run(&ids::run_id());
//! ```
//!
//! ```compile_fail
//! use switchyard_shared::ids::{self, RunId};
//! fn wants_a_run(_: &RunId) {}
//! wants_a_run(&ids::job_id()); // a job id is not a run id
//! ```
//!
//! Still text: project ids, the version ids (`jobv_`, `wfv_`), and the ids
//! of step definitions (`wfs_`), event sources (`evs_`) and log drains
//! (`drn_`).

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::rules::Text;

/// An id that names one kind of thing, so that one kind cannot be passed
/// where another is wanted: a function taking a `&RunId` refuses a
/// `&JobId` at compile time. Each reads as `&str` (`Deref`), is
/// serialized as its text (`serde(transparent)`) and stored as `text`
/// (`sqlx(transparent)`). Text from outside (a path, a column read as
/// text, a test's literal) becomes one with `From`, a deliberate step.
macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type)]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_string())
            }
        }

        impl From<&String> for $name {
            fn from(s: &String) -> Self {
                $name(s.clone())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl redis::ToRedisArgs for $name {
            fn write_redis_args<W>(&self, out: &mut W)
            where
                W: ?Sized + redis::RedisWrite,
            {
                self.0.write_redis_args(out)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

typed_id!(
    /// A job run (`run_…`).
    RunId
);
typed_id!(
    /// A job (`job_…`).
    JobId
);
typed_id!(
    /// A workflow (`wf_…`).
    WorkflowId
);
typed_id!(
    /// A workflow run (`wfr_…`).
    WorkflowRunId
);
typed_id!(
    /// A step of a workflow run (`wsr_…`).
    StepRunId
);
typed_id!(
    /// An event (`evt_…`).
    EventId
);
typed_id!(
    /// A bulk trigger's batch (`bat_…`).
    BatchId
);
typed_id!(
    /// A job group (`grp_…`).
    GroupId
);
typed_id!(
    /// A batch of a batching job's triggers (`tbat_…`), made into one run.
    TriggerBatchId
);

pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", Uuid::now_v7().simple())
}

pub fn run_id() -> RunId {
    RunId(new_id("run"))
}
pub fn job_id() -> JobId {
    JobId(new_id("job"))
}
pub fn job_version_id() -> String {
    new_id("jobv")
}
pub fn workflow_id() -> WorkflowId {
    WorkflowId(new_id("wf"))
}
pub fn workflow_version_id() -> String {
    new_id("wfv")
}
pub fn workflow_step_id() -> String {
    new_id("wfs")
}
pub fn workflow_run_id() -> WorkflowRunId {
    WorkflowRunId(new_id("wfr"))
}
pub fn step_run_id() -> StepRunId {
    StepRunId(new_id("wsr"))
}
pub fn group_id() -> GroupId {
    GroupId(new_id("grp"))
}
pub fn project_id() -> String {
    new_id("prj")
}
pub fn batch_id() -> BatchId {
    BatchId(new_id("bat"))
}
pub fn trigger_batch_id() -> TriggerBatchId {
    TriggerBatchId(new_id("tbat"))
}
/// One trigger taken into a batch (`trg_…`).
pub fn trigger_id() -> String {
    new_id("trg")
}
pub fn event_id() -> EventId {
    EventId(new_id("evt"))
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
