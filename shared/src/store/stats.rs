//! Counts for operators: how much work each job of a project has waiting.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// One live job of a project and its unfinished runs by status.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct JobBacklog {
    pub job_id: String,
    pub slug: String,
    pub name: String,
    pub pending: i64,
    pub queued: i64,
    pub running: i64,
    pub retrying: i64,
    /// When the longest-waiting `queued` run became due: the latest of its
    /// creation, its `scheduled_at` and its `next_retry_at`.
    pub oldest_queued_at: Option<DateTime<Utc>>,
}

/// Every live job of the project, by id, with its unfinished runs counted.
pub async fn backlog(pool: &PgPool, project_id: &str) -> Result<Vec<JobBacklog>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT j.id AS job_id, j.slug, j.name,
                count(r.id) FILTER (WHERE r.status = 'pending') AS pending,
                count(r.id) FILTER (WHERE r.status = 'queued') AS queued,
                count(r.id) FILTER (WHERE r.status = 'running') AS running,
                count(r.id) FILTER (WHERE r.status = 'retrying') AS retrying,
                min(GREATEST(r.created_at, r.scheduled_at, r.next_retry_at))
                    FILTER (WHERE r.status = 'queued') AS oldest_queued_at
           FROM jobs j
           LEFT JOIN job_runs r ON r.job_id = j.id AND r.project_id = j.project_id
                AND r.status IN ",
        crate::run_active_sql!(),
        "
          WHERE j.project_id = $1 AND j.deleted_at IS NULL
          GROUP BY j.id, j.slug, j.name
          ORDER BY j.id"
    ))
    .bind(project_id)
    .fetch_all(pool)
    .await
}

/// The `queued` runs of one job, for the queue gauges.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct QueuedByJob {
    pub project_id: String,
    pub job_id: String,
    pub queued: i64,
    /// When the longest-waiting of them became due (as in [`JobBacklog`]).
    pub oldest_queued_at: Option<DateTime<Utc>>,
}

/// Every job, of every project, that has `queued` runs: how many, and the
/// oldest one's due time. Reads only unfinished runs (through the partial
/// index `job_runs_active_idx`), so it costs the backlog, not the history.
pub async fn queued_by_job(pool: &PgPool) -> Result<Vec<QueuedByJob>, sqlx::Error> {
    sqlx::query_as(
        "SELECT project_id, job_id, count(*) AS queued,
                min(GREATEST(created_at, scheduled_at, next_retry_at)) AS oldest_queued_at
           FROM job_runs
          WHERE status = 'queued'
          GROUP BY project_id, job_id",
    )
    .fetch_all(pool)
    .await
}
