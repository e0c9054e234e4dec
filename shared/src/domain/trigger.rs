//! The checks of a trigger request, as one pure function: every rule a
//! trigger body must satisfy before a run is written, for the single
//! trigger, each item of a bulk trigger and a replay alike.
//!
//! Two rules need facts from the database (that `depends_on` and
//! `parent_run_id` name runs of the job's project). The caller looks them
//! up first ([`ids_to_look_up`]) and hands them in as [`References`], so
//! that the checks themselves do no I/O and report every problem at once,
//! in the order of the request's fields.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::field_errors::{FieldError, FieldErrors};
use super::limits::{
    map_ok, KEY, MAX_ATTEMPTS_OVERRIDE, MAX_MAP_ENTRIES, MAX_MAP_KEY_LEN, MAX_MAP_VALUE_LEN, MAX_PRIORITY,
    MIN_PRIORITY, RETRY_INITIAL_DELAY_SECS, RETRY_MAX_DELAY_SECS, TIMEOUT_SECS_OVERRIDE,
};
use super::{payload_schema, ExecutionMode, JobSpec, RetryStrategy};

/// Most run ids one trigger may depend on.
pub const MAX_DEPENDENCIES: usize = 100;
pub const DELAY_SECS: (i64, i64) = (0, 86_400 * 366);

/// A trigger's body: every field is optional.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub payload: Option<Value>,
    pub priority: Option<i64>,
    pub idempotency_key: Option<String>,
    pub tags: Option<HashMap<String, String>>,
    pub metadata: Option<HashMap<String, String>>,
    pub concurrency_key: Option<String>,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub delay_secs: Option<i64>,
    pub depends_on: Option<Vec<String>>,
    pub debug_mode: Option<bool>,
    pub max_attempts_override: Option<i64>,
    pub timeout_secs_override: Option<i64>,
    pub retry_backoff: Option<String>,
    pub retry_initial_delay_secs: Option<i64>,
    pub retry_max_delay_secs: Option<i64>,
    pub execution_mode: Option<String>,
    pub parent_run_id: Option<String>,
}

/// What the database knows about the runs a request names.
#[derive(Clone, Debug, Default)]
pub struct References {
    /// The job's project: named runs must belong to it.
    pub project_id: String,
    /// Each run of [`ids_to_look_up`] that exists: its project and whether
    /// it has completed.
    pub runs: HashMap<crate::ids::RunId, (String, bool)>,
    /// The run `parent_run_id` names, when it exists: its project and
    /// lineage depth.
    pub parent: Option<(String, i32)>,
}

/// The request's values in the types a run stores, once every check passed.
#[derive(Clone, Debug, PartialEq)]
pub struct Validated {
    pub priority: i32,
    pub max_attempts_override: Option<i32>,
    pub timeout_secs_override: Option<i32>,
    pub retry_initial_delay_secs: Option<i32>,
    pub retry_max_delay_secs: Option<i32>,
    pub delay_secs: Option<i32>,
    pub execution_mode: ExecutionMode,
    /// `depends_on` without repeats, in the order first named.
    pub depends_on: Vec<String>,
    /// Every dependency has completed already (true without dependencies).
    pub dependencies_met: bool,
    /// One more than the parent's, 0 without a parent.
    pub lineage_depth: i32,
}

/// The ids of `depends_on` worth looking up: none when the list is too
/// long (that alone is the error), each well-formed id once.
pub fn ids_to_look_up(req: &Request) -> Vec<String> {
    let Some(raw) = req.depends_on.as_ref().filter(|d| !d.is_empty() && d.len() <= MAX_DEPENDENCIES) else {
        return vec![];
    };
    let mut ids: Vec<String> = Vec::with_capacity(raw.len());
    for id in raw.iter().filter(|id| crate::ids::is_valid_external_id(id)) {
        if !ids.contains(id) {
            ids.push(id.clone());
        }
    }
    ids
}

/// Every check of a trigger of the job with `spec`, each failure located
/// at its body field.
pub fn validate(req: &Request, spec: &JobSpec, refs: &References) -> Result<Validated, Vec<FieldError>> {
    let mut errs = FieldErrors::new();
    let narrow = |v: Option<i64>| v.map(|n| n as i32);
    let priority = narrow(errs.in_range("body.priority", req.priority, MIN_PRIORITY.into(), MAX_PRIORITY.into()));
    errs.text("body.idempotency_key", req.idempotency_key.as_deref(), &KEY);
    errs.text("body.concurrency_key", req.concurrency_key.as_deref(), &KEY);
    let mut bounded = |field: &str, v: Option<i64>, (min, max): (i64, i64)| narrow(errs.in_range(field, v, min, max));
    let max_attempts_override = bounded("body.max_attempts_override", req.max_attempts_override, MAX_ATTEMPTS_OVERRIDE);
    let timeout_secs_override = bounded("body.timeout_secs_override", req.timeout_secs_override, TIMEOUT_SECS_OVERRIDE);
    let retry_initial_delay_secs =
        bounded("body.retry_initial_delay_secs", req.retry_initial_delay_secs, RETRY_INITIAL_DELAY_SECS);
    let retry_max_delay_secs = bounded("body.retry_max_delay_secs", req.retry_max_delay_secs, RETRY_MAX_DELAY_SECS);
    let delay_secs = bounded("body.delay_secs", req.delay_secs, DELAY_SECS);
    if let Some(r) = &req.retry_backoff {
        if let Err(m) = r.parse::<RetryStrategy>() {
            errs.push("body.retry_backoff", m, Some(r.clone().into()));
        }
    }
    let execution_mode = match req.execution_mode.as_deref().map(str::parse::<ExecutionMode>) {
        None => ExecutionMode::Sync,
        Some(Ok(m)) => m,
        Some(Err(m)) => {
            errs.push("body.execution_mode", m, req.execution_mode.clone().map(Value::from));
            ExecutionMode::Sync
        }
    };
    errs.check(
        req.scheduled_at.is_none() || req.delay_secs.is_none(),
        "body.delay_secs",
        "give scheduled_at or delay_secs, not both",
        Some(req.delay_secs.into()),
    );
    let (depends_on, dependencies_met) = check_dependencies(&mut errs, req, refs);
    if let Some(schema) = &spec.payload_schema {
        let payload = req.payload.clone().unwrap_or(Value::Null);
        errs.extend(payload_schema::violations(schema, &payload));
    }
    for (field, map) in [("body.tags", &req.tags), ("body.metadata", &req.metadata)] {
        if let Some(m) = map {
            errs.check(
                map_ok(m.len(), m.iter()),
                field,
                format!(
                    "at most {MAX_MAP_ENTRIES} entries; keys 1 to {MAX_MAP_KEY_LEN} characters, values at most {MAX_MAP_VALUE_LEN}"
                ),
                Some(Value::Null),
            );
        }
    }
    let mut lineage_depth = 0;
    if let Some(parent) = &req.parent_run_id {
        match &refs.parent {
            Some((project, depth)) if *project == refs.project_id => lineage_depth = depth + 1,
            _ => errs.push("body.parent_run_id", "no such run in this project", Some(parent.clone().into())),
        }
    }
    errs.finish()?;
    Ok(Validated {
        priority: priority.unwrap_or(0),
        max_attempts_override,
        timeout_secs_override,
        retry_initial_delay_secs,
        retry_max_delay_secs,
        delay_secs,
        execution_mode,
        depends_on,
        dependencies_met,
        lineage_depth,
    })
}

/// `depends_on`: at most [`MAX_DEPENDENCIES`] ids, each an existing run of
/// the project (a new run cannot be named, so there are no cycles).
/// Returns the ids without repeats and whether all have completed already.
fn check_dependencies(errs: &mut FieldErrors, req: &Request, refs: &References) -> (Vec<String>, bool) {
    let Some(raw) = req.depends_on.as_ref().filter(|d| !d.is_empty()) else {
        return (vec![], true);
    };
    if raw.len() > MAX_DEPENDENCIES {
        errs.push("body.depends_on", format!("at most {MAX_DEPENDENCIES} runs"), Some(raw.len().into()));
        return (vec![], true);
    }
    let mut all_completed = true;
    for (i, id) in raw.iter().enumerate() {
        match refs.runs.get(id.as_str()) {
            Some((project, completed)) if *project == refs.project_id => all_completed &= completed,
            _ => errs.push(format!("body.depends_on/{i}"), "no such run in this project", Some(id.clone().into())),
        }
    }
    let mut ids: Vec<String> = Vec::with_capacity(raw.len());
    for id in raw {
        if !ids.contains(id) {
            ids.push(id.clone());
        }
    }
    (ids, all_completed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec() -> JobSpec {
        JobSpec::with_endpoint("http://127.0.0.1:9/x")
    }

    fn refs() -> References {
        References { project_id: "prj_1".into(), ..References::default() }
    }

    /// The failures of `req` against the default job, as (location, message).
    fn failures(req: Request) -> Vec<(String, String)> {
        match validate(&req, &spec(), &refs()) {
            Ok(_) => vec![],
            Err(e) => e.into_iter().map(|f| (f.location, f.message)).collect(),
        }
    }

    fn only(req: Request, location: &str, message: &str) {
        assert_eq!(failures(req), [(location.to_string(), message.to_string())]);
    }

    #[test]
    fn an_empty_request_takes_the_defaults() {
        let v = validate(&Request::default(), &spec(), &refs()).unwrap();
        assert_eq!(v.priority, 0);
        assert_eq!(v.execution_mode, ExecutionMode::Sync);
        assert!(v.depends_on.is_empty() && v.dependencies_met);
        assert_eq!(v.lineage_depth, 0);
    }

    #[test]
    fn priority_is_bounded() {
        assert!(failures(Request { priority: Some(1000), ..Request::default() }).is_empty());
        only(Request { priority: Some(1001), ..Request::default() }, "body.priority", "must be between -1000 and 1000");
        only(
            Request { priority: Some(-1001), ..Request::default() },
            "body.priority",
            "must be between -1000 and 1000",
        );
    }

    #[test]
    fn overrides_are_bounded() {
        let r = |f: fn(&mut Request)| {
            let mut r = Request::default();
            f(&mut r);
            r
        };
        only(r(|r| r.max_attempts_override = Some(0)), "body.max_attempts_override", "must be between 1 and 100");
        only(r(|r| r.max_attempts_override = Some(101)), "body.max_attempts_override", "must be between 1 and 100");
        only(r(|r| r.timeout_secs_override = Some(0)), "body.timeout_secs_override", "must be between 1 and 86400");
        only(
            r(|r| r.retry_initial_delay_secs = Some(-1)),
            "body.retry_initial_delay_secs",
            "must be between 0 and 86400",
        );
        only(
            r(|r| r.retry_max_delay_secs = Some(604_801)),
            "body.retry_max_delay_secs",
            "must be between 0 and 604800",
        );
        only(r(|r| r.delay_secs = Some(-1)), "body.delay_secs", "must be between 0 and 31622400");
        let v = validate(&r(|r| r.timeout_secs_override = Some(86_400)), &spec(), &refs()).unwrap();
        assert_eq!(v.timeout_secs_override, Some(86_400));
    }

    #[test]
    fn keys_are_short_printable_text() {
        only(
            Request { idempotency_key: Some(String::new()), ..Request::default() },
            "body.idempotency_key",
            "must be 1 to 256 characters, no control characters",
        );
        only(
            Request { concurrency_key: Some("a\u{7}".into()), ..Request::default() },
            "body.concurrency_key",
            "must be 1 to 256 characters, no control characters",
        );
        assert!(failures(Request { idempotency_key: Some("k".repeat(256)), ..Request::default() }).is_empty());
    }

    #[test]
    fn retry_backoff_and_execution_mode_are_known_names() {
        assert!(failures(Request { retry_backoff: Some("linear".into()), ..Request::default() }).is_empty());
        let f = failures(Request { retry_backoff: Some("sometimes".into()), ..Request::default() });
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].0, "body.retry_backoff");
        let v = validate(&Request { execution_mode: Some("async".into()), ..Request::default() }, &spec(), &refs());
        assert_eq!(v.unwrap().execution_mode, ExecutionMode::Async);
        only(
            Request { execution_mode: Some("later".into()), ..Request::default() },
            "body.execution_mode",
            "unknown execution_mode \"later\"; expected sync or async",
        );
    }

    #[test]
    fn delay_and_scheduled_at_exclude_each_other() {
        only(
            Request { delay_secs: Some(5), scheduled_at: Some(Utc::now()), ..Request::default() },
            "body.delay_secs",
            "give scheduled_at or delay_secs, not both",
        );
        let v = validate(&Request { delay_secs: Some(5), ..Request::default() }, &spec(), &refs()).unwrap();
        assert_eq!(v.delay_secs, Some(5));
    }

    #[test]
    fn depends_on_is_bounded_and_names_runs_of_the_project() {
        let many = Request { depends_on: Some(vec!["run_a".into(); MAX_DEPENDENCIES + 1]), ..Request::default() };
        assert!(ids_to_look_up(&many).is_empty(), "too many: nothing to look up");
        only(many, "body.depends_on", "at most 100 runs");

        let req = Request {
            depends_on: Some(vec!["run_a".into(), "run_b".into(), "run_a".into(), "run_other".into(), "bad id".into()]),
            ..Request::default()
        };
        assert_eq!(ids_to_look_up(&req), ["run_a", "run_b", "run_other"]);
        let mut refs = refs();
        refs.runs.insert("run_a".into(), ("prj_1".into(), true));
        refs.runs.insert("run_b".into(), ("prj_1".into(), false));
        refs.runs.insert("run_other".into(), ("prj_2".into(), true));
        let e = validate(&req, &spec(), &refs).unwrap_err();
        let locs: Vec<_> = e.iter().map(|f| f.location.as_str()).collect();
        assert_eq!(locs, ["body.depends_on/3", "body.depends_on/4"]);

        let req = Request { depends_on: Some(vec!["run_a".into(), "run_b".into(), "run_a".into()]), ..req };
        let v = validate(&req, &spec(), &refs).unwrap();
        assert_eq!(v.depends_on, ["run_a", "run_b"]);
        assert!(!v.dependencies_met, "run_b has not completed");
    }

    #[test]
    fn the_payload_must_satisfy_the_jobs_schema() {
        let mut spec = spec();
        spec.payload_schema = Some(json!({"type": "object", "required": ["user"]}));
        let e = validate(&Request::default(), &spec, &refs()).unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].location, "body.payload");
        let ok = Request { payload: Some(json!({"user": 1})), ..Request::default() };
        assert!(validate(&ok, &spec, &refs()).is_ok());
    }

    #[test]
    fn tags_and_metadata_are_bounded() {
        let big: HashMap<String, String> = (0..65).map(|i| (format!("k{i}"), "v".into())).collect();
        let msg = "at most 64 entries; keys 1 to 128 characters, values at most 1024";
        only(Request { tags: Some(big), ..Request::default() }, "body.tags", msg);
        let long = HashMap::from([("k".to_string(), "v".repeat(1025))]);
        only(Request { metadata: Some(long), ..Request::default() }, "body.metadata", msg);
        let empty_key = HashMap::from([(String::new(), "v".to_string())]);
        only(Request { tags: Some(empty_key), ..Request::default() }, "body.tags", msg);
    }

    #[test]
    fn the_parent_must_be_a_run_of_the_project() {
        let req = Request { parent_run_id: Some("run_p".into()), ..Request::default() };
        only(req.clone(), "body.parent_run_id", "no such run in this project");
        let mut refs = refs();
        refs.parent = Some(("prj_2".into(), 0));
        assert!(validate(&req, &spec(), &refs).is_err(), "another project's run");
        refs.parent = Some(("prj_1".into(), 2));
        assert_eq!(validate(&req, &spec(), &refs).unwrap().lineage_depth, 3);
    }

    #[test]
    fn every_failure_is_reported_in_field_order() {
        let req = Request {
            priority: Some(5000),
            delay_secs: Some(-1),
            execution_mode: Some("x".into()),
            parent_run_id: Some("run_p".into()),
            ..Request::default()
        };
        let locs: Vec<_> = failures(req).into_iter().map(|(l, _)| l).collect();
        assert_eq!(locs, ["body.priority", "body.delay_secs", "body.execution_mode", "body.parent_run_id"]);
    }
}
