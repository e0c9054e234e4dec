//! Retention: finished work older than its project's `retention_days` is
//! deleted, so that the tables stay the size of the retention window. Runs,
//! their attempts and events are also partitioned by week (migration
//! 0019): a week's partitions are dropped once retention has emptied them,
//! and new runs go to a partition that holds only their week, so that a
//! system that has processed a billion runs writes like a new one.
//!
//! Each call deletes at most one batch of one kind, in its own statement:
//! the rows are picked `FOR UPDATE SKIP LOCKED`, so a batch never waits on a
//! row something else holds, and several schedulers may prune at once. Only
//! ended work goes: terminal runs and workflow runs by `finished_at`,
//! delivered or dead deliveries and completed events by their creation,
//! closed trigger batches by their closing.
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
    TriggerBatches,
}

impl Kind {
    pub const ALL: [Kind; 5] =
        [Kind::JobRuns, Kind::WorkflowRuns, Kind::Deliveries, Kind::Events, Kind::TriggerBatches];

    /// The kind's table, id prefix, what makes a row ended and old (`$3`
    /// the cutoff), what the deletion returns, and what else goes with its
    /// rows (CTEs over `gone`).
    fn parts(self) -> (&'static str, &'static str, &'static str, &'static str, &'static str) {
        match self {
            // Attempts and transition events have no foreign key (migration
            // 0007 dropped them from the hot path): they go in the same
            // statement. The SDK's records go by ON DELETE CASCADE. The
            // group totals lose the runs the rollup counted (those that
            // ended before its watermark, `$5`; migration 0020).
            Kind::JobRuns => (
                "job_runs",
                "run",
                concat!("status IN ", crate::run_ended_sql!(), " AND finished_at < $3"),
                "id, job_id, status, finished_at",
                ", attempts AS (DELETE FROM job_run_attempts WHERE run_id IN (SELECT id FROM gone))
                 , events AS (DELETE FROM job_run_events WHERE run_id IN (SELECT id FROM gone))
                 , keys AS (DELETE FROM job_run_keys WHERE run_id IN (SELECT id FROM gone))
                 , totals AS (
                    UPDATE job_run_totals t SET n = t.n - d.n
                      FROM (SELECT job_id, status, count(*) AS n FROM gone WHERE finished_at < $5
                             GROUP BY job_id, status) d
                     WHERE t.job_id = d.job_id AND t.status = d.status)",
            ),
            Kind::WorkflowRuns => (
                "workflow_runs",
                "wfr",
                concat!("status IN ", crate::workflow_run_ended_sql!(), " AND finished_at < $3"),
                "id",
                "",
            ),
            Kind::Deliveries => {
                ("webhook_deliveries", "whd", "status IN ('delivered', 'dead') AND created_at < $3", "id", "")
            }
            Kind::Events => ("events", "evt", "completed_at IS NOT NULL AND created_at < $3", "id", ""),
            // Their items go by ON DELETE CASCADE.
            Kind::TriggerBatches => ("trigger_batches", "tbat", "closed_at < $3", "id", ""),
        }
    }

    pub fn as_str(self) -> &'static str {
        self.parts().0
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
    let (table, prefix, ended, returning, with) = kind.parts();
    let sql = format!(
        "WITH gone AS (
            DELETE FROM {table} WHERE id IN (
                SELECT id FROM {table} WHERE project_id = $1 AND id < $2 AND {ended}
                 LIMIT $4 FOR UPDATE SKIP LOCKED)
            RETURNING {returning}
         ){with}
         SELECT count(*) FROM gone"
    );
    let before = format!("{prefix}_{:012x}", cutoff.timestamp_millis().max(0));
    let mut tx = pool.begin().await?;
    let mut q = sqlx::query_scalar(&sql).bind(project_id).bind(before).bind(cutoff).bind(batch);
    if kind == Kind::JobRuns {
        q = q.bind(super::analytics::hold_watermark(&mut tx).await?);
    }
    let n: i64 = q.fetch_one(&mut *tx).await?;
    tx.commit().await?;
    Ok(n as u64)
}

/// Makes the weekly partitions of runs, attempts and events for every week
/// from the one holding `from` through the one holding `to` that has none
/// yet (migration 0019, `sy_ensure_run_partitions`); how many it made.
pub async fn ensure_partitions(pool: &PgPool, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT sy_ensure_run_partitions($1, $2)").bind(from).bind(to).fetch_one(pool).await
}

/// Drops the weeks' partitions that end before the week holding `before`
/// once retention has emptied them (`sy_drop_empty_run_partitions`); how
/// many weeks it dropped.
pub async fn drop_empty_partitions(pool: &PgPool, before: DateTime<Utc>) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT sy_drop_empty_run_partitions($1)").bind(before).fetch_one(pool).await
}

/// Writes finished runs `rows` (of `total`) of `job`, with one attempt
/// each, created evenly over `span_ms` from `oldest_ms`: the history the
/// benchmark's phase (r) measures latency and pruning against. Ids are
/// shaped as the product makes them (UUIDv7: creation ms first), so the
/// pruner's id bound applies to them as to real runs.
pub async fn write_history(
    pool: &PgPool,
    project_id: &str,
    job_id: &str,
    (version, version_id): (i32, &str),
    rows: std::ops::Range<usize>,
    (oldest_ms, span_ms): (i64, i64),
    total: usize,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "WITH s AS (
            SELECT i, $6::bigint + (i * $7::bigint / $8::bigint) AS ms FROM generate_series($4::bigint, $5::bigint) i
         ), r AS (
            INSERT INTO job_runs (id, project_id, job_id, job_version, job_version_id, status, attempt,
                                  triggered_by, payload, created_at, updated_at, started_at, finished_at)
            SELECT 'run_' || lpad(to_hex(ms), 12, '0') || '7' || substr(md5(i::text), 1, 19), $1, $2, $3, $9,
                   'completed', 1, 'api', '{\"n\": 1}'::jsonb, to_timestamp(ms / 1000.0), to_timestamp(ms / 1000.0),
                   to_timestamp(ms / 1000.0), to_timestamp((ms + 5) / 1000.0)
              FROM s
            RETURNING id, created_at
         )
         INSERT INTO job_run_attempts (run_id, attempt, outcome, status_code, endpoint_url, started_at, finished_at)
         SELECT id, 1, 'success', 200, 'http://127.0.0.1/ok', created_at, created_at FROM r",
    )
    .bind(project_id)
    .bind(job_id)
    .bind(version)
    .bind(rows.start as i64)
    .bind(rows.end as i64 - 1)
    .bind(oldest_ms)
    .bind(span_ms)
    .bind(total as i64)
    .bind(version_id)
    .execute(pool)
    .await?;
    Ok(())
}
