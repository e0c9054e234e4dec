//! Job definitions: reading them, and writing a job with its versions.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use crate::domain::JobSpec;
use crate::ids::GroupId;

/// A job as stored: identity, current definition, state.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct JobRecord {
    pub id: crate::ids::JobId,
    pub project_id: String,
    pub group_id: Option<GroupId>,
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

/// The live jobs among `ids`, read in the caller's transaction.
pub async fn get_many_in(conn: &mut PgConnection, ids: &[String]) -> Result<Vec<JobRecord>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ANY($1) AND deleted_at IS NULL"))
        .bind(ids)
        .fetch_all(conn)
        .await
}

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
    Ok(row.map(|(pinned, current)| {
        if pinned.0.version_policy == "latest" {
            current.0
        } else {
            // A version never holds the webhook secret: the key is the job's
            // current one, whichever definition the run pinned.
            JobSpec { webhook_secret: current.0.webhook_secret, ..pinned.0 }
        }
    }))
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

/// One version of a job: the definition as it was.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct JobVersionRow {
    pub id: String,
    pub job_id: String,
    pub version: i32,
    pub name: String,
    pub slug: String,
    pub enabled: bool,
    pub group_id: Option<GroupId>,
    pub spec: sqlx::types::Json<JobSpec>,
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

const VERSION_COLUMNS: &str = "id, job_id, version, name, slug, enabled, group_id, spec, created_by, created_at";

/// What a create or an update writes: the job's row and a new version of it.
#[derive(Clone, Debug)]
pub struct JobWrite<'a> {
    pub id: &'a str,
    pub group_id: Option<&'a str>,
    pub name: &'a str,
    pub slug: &'a str,
    pub enabled: bool,
    pub spec: &'a JobSpec,
    /// The id of the version this write makes.
    pub version_id: &'a str,
    pub actor: Option<&'a str>,
}

/// The definition as a version row keeps it: without the webhook secret,
/// which only the job's row holds (sealed), so a rotated or leaked key is
/// not preserved in every version made while it was set.
fn version_spec_of(spec: &JobSpec) -> JobSpec {
    JobSpec {
        webhook_secret: None,
        has_webhook_secret: spec.webhook_secret.is_some() || spec.has_webhook_secret,
        ..spec.clone()
    }
}

async fn insert_version(conn: &mut PgConnection, w: &JobWrite<'_>, version: i32) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO job_versions (id, job_id, version, name, slug, enabled, group_id, spec, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(w.version_id)
    .bind(w.id)
    .bind(version)
    .bind(w.name)
    .bind(w.slug)
    .bind(w.enabled)
    .bind(w.group_id)
    .bind(sqlx::types::Json(version_spec_of(w.spec)))
    .bind(w.actor)
    .execute(conn)
    .await?;
    Ok(())
}

/// Creates a job of `project_id` at version 1, with that version.
pub async fn create(conn: &mut PgConnection, project_id: &str, w: &JobWrite<'_>) -> Result<JobRecord, sqlx::Error> {
    let rec: JobRecord = sqlx::query_as(&format!(
        "INSERT INTO jobs (id, project_id, group_id, name, slug, enabled, spec, version, version_id, created_by, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9, $9) RETURNING {JOB_COLUMNS}"
    ))
    .bind(w.id)
    .bind(project_id)
    .bind(w.group_id)
    .bind(w.name)
    .bind(w.slug)
    .bind(w.enabled)
    .bind(sqlx::types::Json(w.spec))
    .bind(w.version_id)
    .bind(w.actor)
    .fetch_one(&mut *conn)
    .await?;
    insert_version(conn, w, 1).await?;
    Ok(rec)
}

/// Replaces a live job's definition and records it as its next version.
/// The version number moves under the row lock, so two concurrent updates
/// make versions n+1 and n+2, never two n+1. `None`: no live job.
pub async fn update(conn: &mut PgConnection, w: &JobWrite<'_>) -> Result<Option<JobRecord>, sqlx::Error> {
    let rec: Option<JobRecord> = sqlx::query_as(&format!(
        "UPDATE jobs SET name = $2, slug = $3, group_id = $4, enabled = $5, spec = $6, version = version + 1,
            version_id = $7, updated_by = $8
         WHERE id = $1 AND deleted_at IS NULL RETURNING {JOB_COLUMNS}"
    ))
    .bind(w.id)
    .bind(w.name)
    .bind(w.slug)
    .bind(w.group_id)
    .bind(w.enabled)
    .bind(sqlx::types::Json(w.spec))
    .bind(w.version_id)
    .bind(w.actor)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(rec) = &rec {
        insert_version(conn, w, rec.version).await?;
    }
    Ok(rec)
}

/// Sets the job's `paused` (not a change of its definition: no new
/// version). `None`: no such live job.
pub async fn set_paused(conn: &mut PgConnection, id: &str, paused: bool) -> Result<Option<JobRecord>, sqlx::Error> {
    sqlx::query_as(&format!("UPDATE jobs SET paused = $2 WHERE id = $1 AND deleted_at IS NULL RETURNING {JOB_COLUMNS}"))
        .bind(id)
        .bind(paused)
        .fetch_optional(conn)
        .await
}

/// The project's live jobs and, of those, the enabled ones with a cron,
/// for the project's quotas; `besides` is left out (the job being changed).
pub async fn quota_counts(pool: &PgPool, project_id: &str, besides: Option<&str>) -> Result<(i64, i64), sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE enabled AND spec ? 'cron')
           FROM jobs WHERE project_id = $1 AND deleted_at IS NULL AND id IS DISTINCT FROM $2",
    )
    .bind(project_id)
    .bind(besides)
    .fetch_one(pool)
    .await
}

/// Marks a job deleted (its runs are cancelled by the caller, in the same
/// transaction).
pub async fn soft_delete(conn: &mut PgConnection, id: &str, actor: Option<&str>) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE jobs SET deleted_at = now(), updated_by = $2 WHERE id = $1")
        .bind(id)
        .bind(actor)
        .execute(conn)
        .await?;
    Ok(())
}

/// The project's live jobs (of one group if given), newest first, older
/// than `before`.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    group_id: Option<&str>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<JobRecord>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE project_id = $1 AND deleted_at IS NULL
           AND ($2::text IS NULL OR group_id = $2) AND ($3::text IS NULL OR id < $3)
         ORDER BY id DESC LIMIT $4"
    ))
    .bind(project_id)
    .bind(group_id)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The job's versions, newest first, older than `before`.
pub async fn versions(
    pool: &PgPool,
    job_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<JobVersionRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {VERSION_COLUMNS} FROM job_versions WHERE job_id = $1 AND ($2::text IS NULL OR id < $2)
         ORDER BY id DESC LIMIT $3"
    ))
    .bind(job_id)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// One job version by its id.
pub async fn version(pool: &PgPool, version_id: &str) -> Result<Option<JobVersionRow>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {VERSION_COLUMNS} FROM job_versions WHERE id = $1"))
        .bind(version_id)
        .fetch_optional(pool)
        .await
}
