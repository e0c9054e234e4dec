//! Audit events (docs/contract.md, "Audit events"): one row per mutation,
//! written in the mutation's own transaction where it has one, so the trail
//! never misses a committed change. Actions are `<resource>.<verb>`:
//! `job.created`, `job.updated`, `job.deleted`, `job.paused`, `job.resumed`,
//! `job_group.*`, `run.cancelled`,
//! `project.created`, `project.settings_updated`, `api_key.created`,
//! `api_key.revoked`, `api_key.rotated`, `role.*`, `member.assigned`,
//! `member.removed`, `resource_policy.*`, `tag_policy.*`, `run.restarted`,
//! `run.metadata_updated`, `run.debug_mode_set`, `run.bulk_cancelled`,
//! `environment.created`, `environment.deleted`, `job_secret.set`,
//! `job_secret.deleted` (secret names only, never values), `workflow.created`,
//! `workflow.updated`, `workflow.updated_breaking`, `workflow.deleted`,
//! `workflow_policy.updated`, `workflow_run.cancelled`, `workflow_run.paused`,
//! `workflow_run.resumed`, `workflow_run.step_retried`,
//! `workflow_run.subtree_replayed`, `webhook_subscription.*`,
//! `webhook_delivery.retried`, `event_source.*`, `log_drain.*`.
//!
//! Run triggers are deliberately not audited: they are the hottest write of
//! the service and each is already recorded (with created_by) as the run
//! row and its first run event.

use serde_json::Value;
use switchyard_shared::store::{self, Run};

use crate::auth::Principal;

/// What changed.
pub struct Change<'a> {
    pub project_id: &'a str,
    pub action: &'a str,
    pub resource_type: &'a str,
    pub resource_id: &'a str,
    pub details: Value,
}

impl<'a> Change<'a> {
    /// `action` (`<resource>.<verb>`) on the resource `(type, id)` of the project.
    pub fn new(project_id: &'a str, action: &'a str, resource: (&'a str, &'a str), details: Value) -> Self {
        Change { project_id, action, resource_type: resource.0, resource_id: resource.1, details }
    }

    /// `action` on a run, in the run's project.
    pub fn run(run: &'a Run, action: &'a str, details: Value) -> Self {
        Change::new(&run.project_id, action, ("run", &run.id), details)
    }
}

pub async fn record<'e, E: sqlx::PgExecutor<'e>>(ex: E, who: &Principal, c: Change<'_>) -> Result<(), sqlx::Error> {
    let event = store::audit::NewEvent {
        project_id: c.project_id,
        actor_id: who.actor_id.as_deref(),
        actor_type: who.actor_type.as_str(),
        action: c.action,
        resource_type: c.resource_type,
        resource_id: c.resource_id,
        request_id: who.request_id.as_deref(),
        details: c.details,
    };
    store::audit::insert(ex, event).await
}
