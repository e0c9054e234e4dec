//! Reading job definitions.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::JobSpec;

/// A job as stored: identity, current definition, state.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct JobRecord {
    pub id: String,
    pub project_id: String,
    pub group_id: Option<String>,
    pub name: String,
    pub slug: String,
    pub enabled: bool,
    pub paused: bool,
    pub spec: sqlx::types::Json<JobSpec>,
    pub version: i32,
    pub version_id: String,
    pub created_by: Option<String>,
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

pub const JOB_COLUMNS: &str = "id, project_id, group_id, name, slug, enabled, paused, spec, version, version_id, \
     created_by, updated_by, created_at, updated_at";

/// The live (not deleted) job with this id.
pub async fn get(pool: &PgPool, id: &str) -> Result<Option<JobRecord>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND deleted_at IS NULL"))
        .bind(id)
        .fetch_optional(pool)
        .await
}

/// The definition a run dispatches with: its own version's snapshot when the
/// policy is `pin`, the job's current one when it is `latest`.
pub async fn spec_for_run(pool: &PgPool, job_id: &str, version_id: &str) -> Result<Option<JobSpec>, sqlx::Error> {
    let row: Option<(sqlx::types::Json<JobSpec>, sqlx::types::Json<JobSpec>)> = sqlx::query_as(
        "SELECT v.spec, j.spec FROM job_versions v JOIN jobs j ON j.id = v.job_id WHERE v.id = $1 AND j.id = $2",
    )
    .bind(version_id)
    .bind(job_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(pinned, current)| if pinned.0.version_policy == "latest" { current.0 } else { pinned.0 }))
}

/// The definition snapshot of one job version (versions are immutable).
pub async fn version_spec(pool: &PgPool, version_id: &str) -> Result<Option<JobSpec>, sqlx::Error> {
    let row: Option<sqlx::types::Json<JobSpec>> =
        sqlx::query_scalar("SELECT spec FROM job_versions WHERE id = $1").bind(version_id).fetch_optional(pool).await?;
    Ok(row.map(|s| s.0))
}

/// What a job's entry in the Redis `limits` hash is built from.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct JobLimits {
    pub id: String,
    pub project_id: String,
    pub spec: sqlx::types::Json<JobSpec>,
    pub paused: bool,
}

impl JobLimits {
    /// The value for [`crate::queue::Queue::set_limits`].
    pub fn field(&self) -> Option<String> {
        self.spec.limits_field(&self.project_id, self.paused)
    }
}

/// Live (not deleted) jobs in id order after `after`, at most `limit`: the
/// reconciler pushes their limits back to Redis page by page.
pub async fn limits_page(pool: &PgPool, after: &str, limit: i64) -> Result<Vec<JobLimits>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, project_id, spec, paused FROM jobs WHERE deleted_at IS NULL AND id > $1 ORDER BY id LIMIT $2",
    )
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}
