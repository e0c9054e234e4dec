//! Audit events (DECISIONS §6): one row per mutation, written in the
//! mutation's own transaction where it has one, so the trail never misses a
//! committed change. Actions are `<resource>.<verb>`: `job.created`,
//! `job.updated`, `job.deleted`, `job_group.*`, `run.cancelled`,
//! `project.created`, `project.settings_updated`, `api_key.created`,
//! `api_key.revoked`, `api_key.rotated`, `role.*`, `member.assigned`,
//! `member.removed`, `resource_policy.*`, `tag_policy.*`, `run.restarted`,
//! `run.metadata_updated`, `run.debug_mode_set`, `run.bulk_cancelled`,
//! `environment.created`, `environment.deleted`, `job_secret.set`,
//! `job_secret.deleted` (secret names only, never values).
//!
//! Run triggers are deliberately not audited: they are the hottest write of
//! the service and each is already recorded (with created_by) as the run
//! row and its first run event.

use serde_json::Value;

use crate::auth::Principal;

/// What changed.
pub struct Change<'a> {
    pub project_id: &'a str,
    pub action: &'a str,
    pub resource_type: &'a str,
    pub resource_id: &'a str,
    pub details: Value,
}

pub async fn record<'e, E: sqlx::PgExecutor<'e>>(ex: E, who: &Principal, c: Change<'_>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO audit_events (id, project_id, actor_id, actor_type, action, resource_type, resource_id, request_id, details)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(switchyard_shared::ids::new_id("aud"))
    .bind(c.project_id)
    .bind(who.actor())
    .bind(who.actor_type.as_str())
    .bind(c.action)
    .bind(c.resource_type)
    .bind(c.resource_id)
    .bind(&who.request_id)
    .bind(sqlx::types::Json(c.details))
    .execute(ex)
    .await?;
    Ok(())
}
