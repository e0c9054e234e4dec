//! What each operation requires: ONE table, keyed by method and path
//! template. The authenticator reads it on every request (through the path
//! pattern the router matched) and the served OpenAPI document reads it to
//! write `x-required-scope` and a line of each operation's description.
//!
//! An operation missing from the table is refused to every credential but
//! the internal secret (it fails closed), and the test
//! `every_operation_is_in_the_table` fails until it is added.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::Value;

/// Every scope a key or role may hold (what each grants: docs/contract.md,
/// "Access control"). `*` grants everything.
pub const SCOPES: &[&str] = &[
    "*",
    "jobs:read",
    "jobs:write",
    "jobs:trigger",
    "runs:read",
    "runs:write",
    "workflows:read",
    "workflows:write",
    "workflows:trigger",
    "secrets:read",
    "secrets:write",
    "api-keys:manage",
    "rbac:manage",
    "stats:read",
];

pub fn is_scope(s: &str) -> bool {
    SCOPES.contains(&s)
}

/// Whether `held` (a key's scopes or a role's permissions) grants `wanted`.
pub fn covers(held: &[String], wanted: &str) -> bool {
    held.iter().any(|h| h == "*" || h == wanted)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// No credential (health, readiness, metrics).
    Public,
    /// The internal secret only (projects).
    Internal,
    /// A credential whose scopes or role grant this scope; the internal
    /// secret always passes.
    Scope(&'static str),
    /// A run token whose subject is the path's `{run_id}`; the internal
    /// secret passes too (it reaches every operation).
    RunToken,
}

impl Requirement {
    /// The value of `x-required-scope` in the OpenAPI document.
    pub fn label(&self) -> &'static str {
        match self {
            Requirement::Public => "none",
            Requirement::Internal => "internal",
            Requirement::Scope(s) => s,
            Requirement::RunToken => "run-token",
        }
    }

    fn sentence(&self) -> String {
        match self {
            Requirement::Public => "Credential: none.".into(),
            Requirement::Internal => "Credential: the internal secret only.".into(),
            Requirement::Scope(s) => format!("Required scope: `{s}`."),
            Requirement::RunToken => {
                "Credential: the run token of the run in the path (or the internal secret).".into()
            }
        }
    }
}

use Requirement::{Internal, Public, RunToken, Scope};

/// Every operation: (method, path as in the OpenAPI document, requirement).
pub const OPERATIONS: &[(&str, &str, Requirement)] = &[
    ("GET", "/health", Public),
    ("GET", "/health/ready", Public),
    ("GET", "/metrics", Public),
    // Projects are managed by the operator; a project's own credentials
    // may read the project and its settings with the basic read scope.
    ("POST", "/v1/projects", Internal),
    ("GET", "/v1/projects", Internal),
    ("GET", "/v1/projects/{project_id}", Scope("jobs:read")),
    ("GET", "/v1/projects/{project_id}/settings", Scope("jobs:read")),
    // The key that signs the project's notifications is a secret: whoever
    // holds it can forge them, so `viewer` (everything but secrets) may not.
    ("GET", "/v1/projects/{project_id}/signing-secret", Scope("secrets:read")),
    ("PATCH", "/v1/projects/{project_id}/settings", Internal),
    ("GET", "/v1/job-groups", Scope("jobs:read")),
    ("POST", "/v1/job-groups", Scope("jobs:write")),
    ("GET", "/v1/job-groups/{group_id}", Scope("jobs:read")),
    ("PATCH", "/v1/job-groups/{group_id}", Scope("jobs:write")),
    ("DELETE", "/v1/job-groups/{group_id}", Scope("jobs:write")),
    ("GET", "/v1/job-groups/{group_id}/jobs", Scope("jobs:read")),
    ("POST", "/v1/job-groups/{group_id}/pause-all", Scope("jobs:write")),
    ("POST", "/v1/job-groups/{group_id}/resume-all", Scope("jobs:write")),
    ("GET", "/v1/job-groups/{group_id}/stats", Scope("jobs:read")),
    ("POST", "/v1/jobs", Scope("jobs:write")),
    ("GET", "/v1/jobs", Scope("jobs:read")),
    ("GET", "/v1/jobs/{job_id}", Scope("jobs:read")),
    ("PATCH", "/v1/jobs/{job_id}", Scope("jobs:write")),
    ("DELETE", "/v1/jobs/{job_id}", Scope("jobs:write")),
    ("POST", "/v1/jobs/{job_id}/pause", Scope("jobs:write")),
    ("POST", "/v1/jobs/{job_id}/resume", Scope("jobs:write")),
    ("GET", "/v1/jobs/{job_id}/versions", Scope("jobs:read")),
    ("POST", "/v1/jobs/{job_id}/trigger", Scope("jobs:trigger")),
    ("POST", "/v1/jobs/{job_id}/trigger/bulk", Scope("jobs:trigger")),
    ("GET", "/v1/jobs/{job_id}/secrets", Scope("secrets:read")),
    ("POST", "/v1/jobs/{job_id}/secrets", Scope("secrets:write")),
    ("DELETE", "/v1/jobs/{job_id}/secrets/{name}", Scope("secrets:write")),
    ("GET", "/v1/environments", Scope("jobs:read")),
    ("POST", "/v1/environments", Scope("jobs:write")),
    ("GET", "/v1/environments/{environment_id}", Scope("jobs:read")),
    ("DELETE", "/v1/environments/{environment_id}", Scope("jobs:write")),
    // Log drains are configuration of the project's jobs' output.
    ("POST", "/v1/log-drains", Scope("jobs:write")),
    ("GET", "/v1/log-drains", Scope("jobs:read")),
    ("GET", "/v1/log-drains/{log_drain_id}", Scope("jobs:read")),
    ("PATCH", "/v1/log-drains/{log_drain_id}", Scope("jobs:write")),
    ("DELETE", "/v1/log-drains/{log_drain_id}", Scope("jobs:write")),
    ("GET", "/v1/runs", Scope("runs:read")),
    ("GET", "/v1/runs/dead-letters", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}", Scope("runs:read")),
    ("POST", "/v1/runs/{run_id}/cancel", Scope("runs:write")),
    ("POST", "/v1/runs/{run_id}/replay", Scope("runs:write")),
    ("POST", "/v1/runs/{run_id}/restart", Scope("runs:write")),
    ("PATCH", "/v1/runs/{run_id}/metadata", Scope("runs:write")),
    ("PUT", "/v1/runs/{run_id}/debug-mode", Scope("runs:write")),
    ("GET", "/v1/runs/{run_id}/events", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/logs", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/checkpoints", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/outputs", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/state", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/usage", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/tool-calls", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/debug-bundle", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/dependency-status", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/stream", Scope("runs:read")),
    ("GET", "/v1/stream", Scope("runs:read")),
    ("POST", "/v1/runs/bulk-cancel", Scope("runs:write")),
    ("POST", "/v1/runs/bulk-cancel-all", Scope("runs:write")),
    ("POST", "/v1/runs/bulk-replay", Scope("runs:write")),
    ("POST", "/v1/runs/bulk-dlq-replay", Scope("runs:write")),
    ("GET", "/v1/batch-operations", Scope("runs:read")),
    ("GET", "/v1/batch-operations/{batch_id}", Scope("runs:read")),
    ("POST", "/v1/api-keys", Scope("api-keys:manage")),
    ("GET", "/v1/api-keys", Scope("api-keys:manage")),
    ("GET", "/v1/api-keys/{key_id}", Scope("api-keys:manage")),
    ("DELETE", "/v1/api-keys/{key_id}", Scope("api-keys:manage")),
    ("POST", "/v1/api-keys/{key_id}/rotate", Scope("api-keys:manage")),
    // Roles, members and policies are the project's access control: all
    // of it, reading included, is `rbac:manage`.
    ("POST", "/v1/roles", Scope("rbac:manage")),
    ("GET", "/v1/roles", Scope("rbac:manage")),
    ("GET", "/v1/roles/{role_id}", Scope("rbac:manage")),
    ("PATCH", "/v1/roles/{role_id}", Scope("rbac:manage")),
    ("DELETE", "/v1/roles/{role_id}", Scope("rbac:manage")),
    ("POST", "/v1/members", Scope("rbac:manage")),
    ("POST", "/v1/members/bulk", Scope("rbac:manage")),
    ("GET", "/v1/members", Scope("rbac:manage")),
    ("DELETE", "/v1/members/{user_id}", Scope("rbac:manage")),
    ("POST", "/v1/resource-policies", Scope("rbac:manage")),
    ("GET", "/v1/resource-policies", Scope("rbac:manage")),
    ("GET", "/v1/resource-policies/{policy_id}", Scope("rbac:manage")),
    ("PATCH", "/v1/resource-policies/{policy_id}", Scope("rbac:manage")),
    ("DELETE", "/v1/resource-policies/{policy_id}", Scope("rbac:manage")),
    ("POST", "/v1/tag-policies", Scope("rbac:manage")),
    ("GET", "/v1/tag-policies", Scope("rbac:manage")),
    ("GET", "/v1/tag-policies/{policy_id}", Scope("rbac:manage")),
    ("PATCH", "/v1/tag-policies/{policy_id}", Scope("rbac:manage")),
    ("DELETE", "/v1/tag-policies/{policy_id}", Scope("rbac:manage")),
    ("GET", "/v1/stats/queues", Scope("stats:read")),
    // Reports are aggregates, with no run's contents: read with the queue
    // statistics (SPEC 5.2's scope list and system roles are fixed, and
    // `viewer` and `operator` hold it).
    ("GET", "/v1/analytics/workflows/summary", Scope("stats:read")),
    ("GET", "/v1/analytics/jobs/by-version", Scope("stats:read")),
    ("GET", "/v1/analytics/performance", Scope("stats:read")),
    ("GET", "/v1/usage/projects", Scope("stats:read")),
    ("POST", "/v1/workflows", Scope("workflows:write")),
    ("GET", "/v1/workflows", Scope("workflows:read")),
    ("GET", "/v1/workflows/{workflow_id}", Scope("workflows:read")),
    ("PATCH", "/v1/workflows/{workflow_id}", Scope("workflows:write")),
    ("DELETE", "/v1/workflows/{workflow_id}", Scope("workflows:write")),
    ("GET", "/v1/workflows/{workflow_id}/versions", Scope("workflows:read")),
    // Plans, simulations and diffs only read the definition.
    ("POST", "/v1/workflows/{workflow_id}/plan", Scope("workflows:read")),
    ("POST", "/v1/workflows/{workflow_id}/simulate", Scope("workflows:read")),
    ("GET", "/v1/workflows/{workflow_id}/versions/{from_version_id}/diff/{to_version_id}", Scope("workflows:read")),
    ("GET", "/v1/workflows/{workflow_id}/active-versions", Scope("workflows:read")),
    ("GET", "/v1/workflows/{workflow_id}/versions/{version_id}/impact", Scope("workflows:read")),
    // Runs: triggering and retrying steps is `trigger`; stopping, pausing
    // and resuming a run is `write`, like the other changes of a workflow.
    ("POST", "/v1/workflows/{workflow_id}/trigger", Scope("workflows:trigger")),
    ("GET", "/v1/workflow-runs", Scope("workflows:read")),
    ("GET", "/v1/workflow-runs/{workflow_run_id}", Scope("workflows:read")),
    ("GET", "/v1/workflow-runs/{workflow_run_id}/stream", Scope("workflows:read")),
    ("GET", "/v1/workflow-runs/{workflow_run_id}/explain", Scope("workflows:read")),
    ("GET", "/v1/workflow-runs/{workflow_run_id}/graph", Scope("workflows:read")),
    ("POST", "/v1/workflow-runs/{workflow_run_id}/cancel", Scope("workflows:write")),
    ("POST", "/v1/workflow-runs/{workflow_run_id}/pause", Scope("workflows:write")),
    ("POST", "/v1/workflow-runs/{workflow_run_id}/resume", Scope("workflows:write")),
    ("POST", "/v1/workflow-runs/{workflow_run_id}/steps/{step_ref}/retry", Scope("workflows:trigger")),
    ("POST", "/v1/workflow-runs/{workflow_run_id}/steps/{step_ref}/approve", Scope("workflows:write")),
    ("POST", "/v1/workflow-runs/{workflow_run_id}/steps/{step_ref}/reject", Scope("workflows:write")),
    ("POST", "/v1/workflow-runs/{workflow_run_id}/steps/{step_ref}/skip", Scope("workflows:write")),
    ("POST", "/v1/workflow-runs/{workflow_run_id}/steps/{step_ref}/replay-subtree", Scope("workflows:trigger")),
    // The project's DAG governance is read with the workflows it governs
    // and changed by those who may change them.
    ("GET", "/v1/workflow-policies/{project_id}", Scope("workflows:read")),
    ("PUT", "/v1/workflow-policies/{project_id}", Scope("workflows:write")),
    // Subscriptions are project configuration, like jobs; deliveries are
    // records of runs, like run events.
    ("POST", "/v1/webhooks/subscriptions", Scope("jobs:write")),
    ("GET", "/v1/webhooks/subscriptions", Scope("jobs:read")),
    ("GET", "/v1/webhooks/subscriptions/{subscription_id}", Scope("jobs:read")),
    ("PATCH", "/v1/webhooks/subscriptions/{subscription_id}", Scope("jobs:write")),
    ("DELETE", "/v1/webhooks/subscriptions/{subscription_id}", Scope("jobs:write")),
    ("GET", "/v1/webhook-deliveries", Scope("runs:read")),
    ("GET", "/v1/webhook-deliveries/{delivery_id}", Scope("runs:read")),
    ("POST", "/v1/webhook-deliveries/{delivery_id}/retry", Scope("runs:write")),
    // Events: a dispatch triggers runs, whatever its sources' targets (a
    // source may name a workflow only for those holding workflows:trigger);
    // an event is the record of the runs it triggered; sources are
    // definitions kept with the jobs.
    ("POST", "/v1/events/dispatch", Scope("jobs:trigger")),
    ("GET", "/v1/events", Scope("runs:read")),
    ("GET", "/v1/events/{event_id}", Scope("runs:read")),
    // A trigger batch is the record of the triggers a run was made of.
    ("GET", "/v1/trigger-batches/{batch_id}", Scope("runs:read")),
    ("POST", "/v1/event-sources", Scope("jobs:write")),
    ("GET", "/v1/event-sources", Scope("jobs:read")),
    ("GET", "/v1/event-sources/{event_source_id}", Scope("jobs:read")),
    ("PATCH", "/v1/event-sources/{event_source_id}", Scope("jobs:write")),
    ("DELETE", "/v1/event-sources/{event_source_id}", Scope("jobs:write")),
    // The audit trail is an access-control record.
    ("GET", "/v1/audit-events", Scope("rbac:manage")),
    ("POST", "/sdk/v1/runs/{run_id}/heartbeat", RunToken),
    // Bulk operations, run records and actions.
    ("POST", "/v1/jobs/{job_id}/trigger/bulk", Scope("jobs:trigger")),
    ("POST", "/v1/runs/bulk-cancel", Scope("runs:write")),
    ("POST", "/v1/runs/bulk-replay", Scope("runs:write")),
    ("POST", "/v1/runs/bulk-dlq-replay", Scope("runs:write")),
    ("POST", "/v1/runs/bulk-cancel-all", Scope("runs:write")),
    ("GET", "/v1/batch-operations", Scope("runs:read")),
    ("GET", "/v1/batch-operations/{batch_id}", Scope("runs:read")),
    ("POST", "/v1/runs/{run_id}/replay", Scope("runs:write")),
    ("POST", "/v1/runs/{run_id}/restart", Scope("runs:write")),
    ("PATCH", "/v1/runs/{run_id}/metadata", Scope("runs:write")),
    ("PUT", "/v1/runs/{run_id}/debug-mode", Scope("runs:write")),
    ("GET", "/v1/runs/{run_id}/outputs", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/state", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/checkpoints", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/usage", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/tool-calls", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/events", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/logs", Scope("runs:read")),
    ("GET", "/v1/runs/{run_id}/debug-bundle", Scope("runs:read")),
    ("GET", "/v1/environments", Scope("jobs:read")),
    ("POST", "/v1/environments", Scope("jobs:write")),
    ("GET", "/v1/environments/{environment_id}", Scope("jobs:read")),
    ("DELETE", "/v1/environments/{environment_id}", Scope("jobs:write")),
    ("GET", "/v1/jobs/{job_id}/secrets", Scope("secrets:read")),
    ("POST", "/v1/jobs/{job_id}/secrets", Scope("secrets:write")),
    ("DELETE", "/v1/jobs/{job_id}/secrets/{name}", Scope("secrets:write")),
    ("POST", "/sdk/v1/runs/{run_id}/logs", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/checkpoints", RunToken),
    ("GET", "/sdk/v1/runs/{run_id}/checkpoints/latest", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/progress", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/outputs", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/usage", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/tool-calls", RunToken),
    ("GET", "/sdk/v1/runs/{run_id}/state/{key}", RunToken),
    ("PUT", "/sdk/v1/runs/{run_id}/state/{key}", RunToken),
    ("DELETE", "/sdk/v1/runs/{run_id}/state/{key}", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/complete", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/fail", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/logs", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/checkpoints", RunToken),
    ("GET", "/sdk/v1/runs/{run_id}/checkpoints/latest", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/progress", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/outputs", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/usage", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/tool-calls", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/complete", RunToken),
    ("POST", "/sdk/v1/runs/{run_id}/fail", RunToken),
    ("GET", "/sdk/v1/runs/{run_id}/state/{key}", RunToken),
    ("PUT", "/sdk/v1/runs/{run_id}/state/{key}", RunToken),
    ("DELETE", "/sdk/v1/runs/{run_id}/state/{key}", RunToken),
];

/// One row of [`OPERATIONS`].
#[derive(Clone, Copy, Debug)]
pub struct Operation {
    pub method: &'static str,
    pub path: &'static str,
    pub requirement: Requirement,
}

impl Operation {
    /// The position of `{name}` among the path's segments.
    pub fn param_index(&self, name: &str) -> Option<usize> {
        let want = format!("{{{name}}}");
        self.path.split('/').filter(|s| !s.is_empty()).position(|s| s == want)
    }
}

/// `/v1/jobs/{job_id}` and the router's `/v1/jobs/:param0` both become
/// `/v1/jobs/{}`.
fn normalize(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        out.push('/');
        if seg.starts_with(':') || (seg.starts_with('{') && seg.ends_with('}')) {
            out.push_str("{}");
        } else {
            out.push_str(seg);
        }
    }
    out
}

static TABLE: LazyLock<HashMap<(String, String), Operation>> = LazyLock::new(|| {
    OPERATIONS
        .iter()
        .map(|&(method, path, requirement)| {
            ((method.to_string(), normalize(path)), Operation { method, path, requirement })
        })
        .collect()
});

/// The operation a request was routed to, from the router's path pattern.
pub fn operation(method: &str, pattern: &str) -> Option<Operation> {
    TABLE.get(&(method.to_ascii_uppercase(), normalize(pattern))).copied()
}

/// Writes each operation's requirement into the served document:
/// `x-required-scope` and a sentence appended to its description.
pub fn annotate(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for (method, op) in item.iter_mut() {
            let Some(op) = op.as_object_mut() else { continue };
            let Some(found) = operation(method, path) else { continue };
            let r = found.requirement;
            op.insert("x-required-scope".into(), Value::String(r.label().into()));
            let description = match op.get("description").and_then(Value::as_str) {
                Some(d) if !d.is_empty() => format!("{d}\n\n{}", r.sentence()),
                _ => r.sentence(),
            };
            op.insert("description".into(), Value::String(description));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served_operations() -> Vec<(String, String, bool)> {
        let doc: Value = serde_json::from_str(&crate::api_service().spec()).unwrap();
        let mut out = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                out.push((method.to_ascii_uppercase(), path.clone(), op.get("security").is_some()));
            }
        }
        out
    }

    #[test]
    fn every_operation_is_in_the_table() {
        let served = served_operations();
        let missing: Vec<String> =
            served.iter().filter(|(m, p, _)| operation(m, p).is_none()).map(|(m, p, _)| format!("{m} {p}")).collect();
        assert!(
            missing.is_empty(),
            "operations with no requirement; add them to auth::scopes::OPERATIONS: {missing:#?}"
        );
        for (method, path, secured) in &served {
            let op = operation(method, path).expect("checked above");
            assert_eq!(
                *secured,
                op.requirement != Requirement::Public,
                "{method} {path}: a public operation takes no credential, every other one does"
            );
            if let Requirement::Scope(s) = op.requirement {
                assert!(is_scope(s), "{method} {path}: {s} is not a known scope (SCOPES)");
            }
            if op.requirement == Requirement::RunToken {
                assert!(op.param_index("run_id").is_some(), "{method} {path}: a run-token operation names {{run_id}}");
            }
        }
        for (method, path, _) in OPERATIONS {
            assert!(
                served.iter().any(|(m, p, _)| m == method && p == path),
                "{method} {path} is in the table but no operation serves it"
            );
        }
    }

    #[test]
    fn router_patterns_find_their_operation() {
        let op = operation("post", "/v1/jobs/:param0/trigger").unwrap();
        assert_eq!(op.requirement, Requirement::Scope("jobs:trigger"));
        assert!(operation("GET", "//v1/jobs/:param0").is_some(), "a nested route's double slash is ignored");
        assert!(operation("GET", "/v1/nothing").is_none());
        let sdk = operation("POST", "/sdk/v1/runs/:param0/heartbeat").unwrap();
        assert_eq!(sdk.param_index("run_id"), Some(3));
    }

    #[test]
    fn covers_honours_the_wildcard() {
        let held = vec!["jobs:read".to_string()];
        assert!(covers(&held, "jobs:read"));
        assert!(!covers(&held, "jobs:write"));
        assert!(covers(&["*".to_string()], "rbac:manage"));
    }
}
