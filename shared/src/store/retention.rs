//! Retention: finished work older than its project's `retention_days` is
//! deleted, so that a system that has processed a billion runs reads and
//! writes like a new one (migration 0017 says why batches, not partitions).
//!
//! Each call deletes at most one batch of one kind, in its own statement:
//! the rows are picked `FOR UPDATE SKIP LOCKED`, so a batch never waits on a
//! row something else holds, and several schedulers may prune at once. Only
//! ended work goes: terminal runs and workflow runs by `finished_at`,
//! delivered or dead deliveries and completed events by their creation.
//! Ids begin with their creation time (UUIDv7), so `id < <prefix>_<cutoff>`
//! bounds each scan to the old end of the project's id index.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// What a retention pass may delete, one kind per statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    JobRuns,
    WorkflowRuns,
    Deliveries,
    Events,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::JobRuns, Kind::WorkflowRuns, Kind::Deliveries, Kind::Events];

    fn sql(self) -> (&'static str, &'static str) {
        match self {
            Kind::JobRuns => (
                "run",
                // Attempts and transition events have no foreign key (migration
                // 0007 dropped them from the hot path): they go in the same
                // statement. The SDK's records go by ON DELETE CASCADE.
                "WITH gone AS (
                    DELETE FROM job_runs WHERE id IN (
                        SELECT id FROM job_runs WHERE project_id = $1 AND id < $2
                           AND status IN ('completed', 'failed', 'timed_out', 'cancelled', 'expired') AND finished_at < $3
                         LIMIT $4 FOR UPDATE SKIP LOCKED)
                    RETURNING id
                 ), attempts AS (
                    DELETE FROM job_run_attempts WHERE run_id IN (SELECT id FROM gone)
                 ), events AS (
                    DELETE FROM job_run_events WHERE run_id IN (SELECT id FROM gone)
                 )
                 SELECT count(*) FROM gone",
            ),
            Kind::WorkflowRuns => (
                "wfr",
                "WITH gone AS (DELETE FROM workflow_runs WHERE id IN (
                    SELECT id FROM workflow_runs WHERE project_id = $1 AND id < $2
                       AND status IN ('completed', 'failed', 'cancelled', 'timed_out') AND finished_at < $3
                     LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING id)
                 SELECT count(*) FROM gone",
            ),
            Kind::Deliveries => (
                "whd",
                "WITH gone AS (DELETE FROM webhook_deliveries WHERE id IN (
                    SELECT id FROM webhook_deliveries WHERE project_id = $1 AND id < $2
                       AND status IN ('delivered', 'dead') AND created_at < $3
                     LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING id)
                 SELECT count(*) FROM gone",
            ),
            Kind::Events => (
                "evt",
                "WITH gone AS (DELETE FROM events WHERE id IN (
                    SELECT id FROM events WHERE project_id = $1 AND id < $2
                       AND completed_at IS NOT NULL AND created_at < $3
                     LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING id)
                 SELECT count(*) FROM gone",
            ),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::JobRuns => "job_runs",
            Kind::WorkflowRuns => "workflow_runs",
            Kind::Deliveries => "webhook_deliveries",
            Kind::Events => "events",
        }
    }
}

/// Every project with its retention, in id order.
pub async fn projects(pool: &PgPool) -> Result<Vec<(String, i32)>, sqlx::Error> {
    sqlx::query_as("SELECT id, retention_days FROM projects ORDER BY id").fetch_all(pool).await
}

/// Deletes at most `batch` rows of `kind` of the project that ended before
/// `cutoff`; how many it deleted.
pub async fn prune(
    pool: &PgPool,
    kind: Kind,
    project_id: &str,
    cutoff: DateTime<Utc>,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let (prefix, sql) = kind.sql();
    let before = format!("{prefix}_{:012x}", cutoff.timestamp_millis().max(0));
    let n: i64 = sqlx::query_scalar(sql).bind(project_id).bind(before).bind(cutoff).bind(batch).fetch_one(pool).await?;
    Ok(n as u64)
}
