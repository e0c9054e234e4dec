//! Reporting reads (analytics, usage, queue history) and the rollup that
//! keeps them fast (migration 0018 says why rollups and what they hold).
//!
//! [`roll_up`] is the scheduler's once-a-minute pass: in one transaction
//! it folds what ended (runs, workflow runs) or was recorded (usage) in
//! `[watermark, now - grace)` into the hourly rollups and the per-minute
//! queue history, samples the unfinished runs of every job into that
//! history, and moves the watermark. Passes serialize on the watermark row
//! (`FOR UPDATE`), so any number of schedulers may run them.
//!
//! A report reads, in one repeatable-read snapshot, the watermark, the
//! rollup rows of its hours and the rows that ended at or after the
//! watermark: the same figures as a read of the runs alone, at the cost of
//! the rollup rows plus a minute or two of runs. Every window starts on a
//! whole hour (UTC), so no rollup row is cut.
//!
//! Durations are in milliseconds, `finished_at - started_at` (a run's last
//! attempt; a workflow run from its start), for the runs that started;
//! percentiles are nearest-rank ([`percentile`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};

/// A run's duration in ms, as an int4 (runs of more than 24 days are
/// counted as 24 days), NULL when it never started (GREATEST and LEAST
/// skip NULLs, hence the CASE).
const DURATION_MS: &str = "CASE WHEN started_at IS NOT NULL THEN
     LEAST(GREATEST(round(extract(epoch FROM finished_at - started_at) * 1000), 0), 2147483647)::int4 END";

/// The terminal statuses of a job run and of a workflow run.
const RUN_ENDED: &str = concat!("status IN ", crate::run_ended_sql!());
/// The unfinished statuses of a job run, as the partial index of unfinished
/// runs states them (the planner matches the text).
const RUN_UNFINISHED: &str = concat!("status IN ", crate::run_active_sql!());
const WORKFLOW_RUN_ENDED: &str = concat!("status IN ", crate::workflow_run_ended_sql!());

/// The longest period of an analytics report, in hours (30 days: the
/// default retention of runs).
pub const MAX_PERIOD_HOURS: i64 = 720;
/// How long job and workflow rollups are kept: the longest report period
/// and a day.
pub const RUN_ROLLUP_KEEP_HOURS: i64 = MAX_PERIOD_HOURS + 24;
/// Usage rollups outlive the runs (a bill is asked for months later).
pub const USAGE_ROLLUP_KEEP_DAYS: i64 = 400;
/// The queue history is a dashboard's last hour; a day is kept.
pub const QUEUE_HISTORY_KEEP_HOURS: i64 = 24;

/// What one rollup pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RollupReport {
    /// The span folded in, `[from, upto)`; `None` when there was nothing
    /// to do (the watermark is already at `now - grace`).
    pub span: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// Job runs folded in.
    pub runs: u64,
    /// Whether the watermark reached `now - grace` (false: call again).
    pub caught_up: bool,
}

/// One rollup pass at `now`: folds in what ended from the watermark up
/// to `now - grace` (at most `max_span` of it), samples the queues, and
/// prunes old rollup rows when an hour was crossed. The first pass starts
/// at the oldest ended run, workflow run or usage record.
pub async fn roll_up(
    pool: &PgPool,
    now: DateTime<Utc>,
    grace: Duration,
    max_span: Duration,
) -> Result<RollupReport, sqlx::Error> {
    let limit = now - chrono::Duration::from_std(grace).unwrap_or_default();
    let span = chrono::Duration::from_std(max_span).unwrap_or(chrono::Duration::hours(1));
    let mut tx = pool.begin().await?;
    let upto: Option<DateTime<Utc>> =
        sqlx::query_scalar("SELECT upto FROM analytics_watermark FOR UPDATE").fetch_one(&mut *tx).await?;
    let from = match upto {
        Some(t) => t,
        None => sqlx::query_scalar::<_, Option<DateTime<Utc>>>(
            "SELECT LEAST((SELECT min(finished_at) FROM job_runs WHERE finished_at IS NOT NULL),
                          (SELECT min(finished_at) FROM workflow_runs WHERE finished_at IS NOT NULL),
                          (SELECT min(created_at) FROM job_run_usage))",
        )
        .fetch_one(&mut *tx)
        .await?
        .unwrap_or(limit)
        .min(limit),
    };
    sample_queues(&mut tx, now).await?;
    if from >= limit {
        set_watermark(&mut tx, from).await?;
        tx.commit().await?;
        return Ok(RollupReport { span: None, runs: 0, caught_up: true });
    }
    let to = (from + span).min(limit);
    let runs = fold_job_runs(&mut tx, from, to).await?;
    fold_workflow_runs(&mut tx, from, to).await?;
    fold_usage(&mut tx, from, to).await?;
    fold_queue_endings(&mut tx, from, to).await?;
    set_watermark(&mut tx, to).await?;
    if hour_of(from) != hour_of(to) {
        prune(&mut tx, now).await?;
    }
    tx.commit().await?;
    Ok(RollupReport { span: Some((from, to)), runs, caught_up: to >= limit })
}

fn hour_of(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(3600)
}

async fn set_watermark(tx: &mut Transaction<'_, Postgres>, upto: DateTime<Utc>) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE analytics_watermark SET upto = $1").bind(upto).execute(&mut **tx).await?;
    Ok(())
}

async fn fold_job_runs(
    tx: &mut Transaction<'_, Postgres>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<u64, sqlx::Error> {
    let sql = format!(
        "WITH ended AS (
            SELECT project_id, date_trunc('hour', finished_at, 'UTC') AS hour, job_id, job_version,
                   job_version_id, status, {DURATION_MS} AS ms
              FROM job_runs WHERE finished_at >= $1 AND finished_at < $2 AND {RUN_ENDED}
         ), ins AS (
            INSERT INTO job_run_rollups AS r (project_id, hour, job_id, job_version, job_version_id, completed,
                                              failed, timed_out, cancelled, expired, durations_ms)
            SELECT project_id, hour, job_id, job_version, max(job_version_id),
                   count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'failed'),
                   count(*) FILTER (WHERE status = 'timed_out'), count(*) FILTER (WHERE status = 'cancelled'),
                   count(*) FILTER (WHERE status = 'expired'),
                   COALESCE(array_agg(ms) FILTER (WHERE ms IS NOT NULL), '{{}}')
              FROM ended GROUP BY project_id, hour, job_id, job_version
            ON CONFLICT (project_id, hour, job_id, job_version) DO UPDATE SET
                completed = r.completed + excluded.completed, failed = r.failed + excluded.failed,
                timed_out = r.timed_out + excluded.timed_out, cancelled = r.cancelled + excluded.cancelled,
                expired = r.expired + excluded.expired, durations_ms = r.durations_ms || excluded.durations_ms
         ), totals AS (
            INSERT INTO job_run_totals AS t (job_id, status, n)
            SELECT job_id, status, count(*) FROM ended GROUP BY job_id, status
            ON CONFLICT (job_id, status) DO UPDATE SET n = t.n + excluded.n
         )
         SELECT count(*) FROM ended"
    );
    let n: i64 = sqlx::query_scalar(&sql).bind(from).bind(to).fetch_one(&mut **tx).await?;
    Ok(n as u64)
}

async fn fold_workflow_runs(
    tx: &mut Transaction<'_, Postgres>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "INSERT INTO workflow_run_rollups AS r (project_id, hour, workflow_id, completed, failed, cancelled,
                                                timed_out, durations_ms)
         SELECT project_id, hour, workflow_id,
                count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'failed'),
                count(*) FILTER (WHERE status = 'cancelled'), count(*) FILTER (WHERE status = 'timed_out'),
                COALESCE(array_agg(ms) FILTER (WHERE ms IS NOT NULL), '{{}}')
           FROM (SELECT project_id, date_trunc('hour', finished_at, 'UTC') AS hour, workflow_id, status,
                        {DURATION_MS} AS ms
                   FROM workflow_runs WHERE finished_at >= $1 AND finished_at < $2 AND {WORKFLOW_RUN_ENDED}) e
          GROUP BY project_id, hour, workflow_id
         ON CONFLICT (project_id, hour, workflow_id) DO UPDATE SET
             completed = r.completed + excluded.completed, failed = r.failed + excluded.failed,
             cancelled = r.cancelled + excluded.cancelled, timed_out = r.timed_out + excluded.timed_out,
             durations_ms = r.durations_ms || excluded.durations_ms"
    );
    sqlx::query(&sql).bind(from).bind(to).execute(&mut **tx).await?;
    Ok(())
}

/// Sums saturate at bigint's largest value instead of failing the whole
/// fold: one tenant's extreme records must not stop everyone's rollups.
async fn fold_usage(
    tx: &mut Transaction<'_, Postgres>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO usage_rollups AS u (project_id, hour, job_id, records, cost_microusd, tokens_in, tokens_out,
                                         cpu_ms)
         SELECT r.project_id, date_trunc('hour', x.created_at, 'UTC'), r.job_id, count(*),
                least(sum(x.cost_microusd), 9223372036854775807)::int8, least(sum(x.tokens_in), 9223372036854775807)::int8,
                least(sum(x.tokens_out), 9223372036854775807)::int8, least(sum(x.cpu_ms), 9223372036854775807)::int8
           FROM job_run_usage x JOIN job_runs r ON r.id = x.run_id
          WHERE x.created_at >= $1 AND x.created_at < $2
          GROUP BY 1, 2, 3
         ON CONFLICT (project_id, hour, job_id) DO UPDATE SET
             records = u.records + excluded.records,
             cost_microusd = least(u.cost_microusd::numeric + excluded.cost_microusd, 9223372036854775807)::int8,
             tokens_in = least(u.tokens_in::numeric + excluded.tokens_in, 9223372036854775807)::int8,
             tokens_out = least(u.tokens_out::numeric + excluded.tokens_out, 9223372036854775807)::int8,
             cpu_ms = least(u.cpu_ms::numeric + excluded.cpu_ms, 9223372036854775807)::int8",
    )
    .bind(from)
    .bind(to)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn fold_queue_endings(
    tx: &mut Transaction<'_, Postgres>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "INSERT INTO queue_history AS q (project_id, minute, job_id, finished, completed, failed)
         SELECT project_id, date_trunc('minute', finished_at, 'UTC'), job_id, count(*),
                count(*) FILTER (WHERE status = 'completed'),
                count(*) FILTER (WHERE status IN ('failed', 'timed_out'))
           FROM job_runs WHERE finished_at >= $1 AND finished_at < $2 AND finished_at >= $3 AND {RUN_ENDED}
          GROUP BY 1, 2, 3
         ON CONFLICT (project_id, minute, job_id) DO UPDATE SET
             finished = q.finished + excluded.finished, completed = q.completed + excluded.completed,
             failed = q.failed + excluded.failed"
    );
    // A backfill's older minutes would be pruned at once: skip them.
    let keep = to - chrono::Duration::hours(QUEUE_HISTORY_KEEP_HOURS);
    sqlx::query(&sql).bind(from).bind(to).bind(keep).execute(&mut **tx).await?;
    Ok(())
}

/// The unfinished runs of every job by status, as the minute of `now`'s
/// depth (the partial index of unfinished runs serves it).
async fn sample_queues(tx: &mut Transaction<'_, Postgres>, now: DateTime<Utc>) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO queue_history AS q (project_id, minute, job_id, pending, queued, running, retrying)
         SELECT project_id, date_trunc('minute', $1::timestamptz, 'UTC'), job_id,
                count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'queued'),
                count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'retrying')
           FROM job_runs WHERE {RUN_UNFINISHED}
          GROUP BY project_id, job_id
         ON CONFLICT (project_id, minute, job_id) DO UPDATE SET
             pending = excluded.pending, queued = excluded.queued, running = excluded.running,
             retrying = excluded.retrying"
    ))
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn prune(tx: &mut Transaction<'_, Postgres>, now: DateTime<Utc>) -> Result<(), sqlx::Error> {
    let runs = now - chrono::Duration::hours(RUN_ROLLUP_KEEP_HOURS);
    let usage = now - chrono::Duration::days(USAGE_ROLLUP_KEEP_DAYS);
    let queues = now - chrono::Duration::hours(QUEUE_HISTORY_KEEP_HOURS);
    sqlx::query(
        "WITH a AS (DELETE FROM job_run_rollups WHERE hour < $1),
              b AS (DELETE FROM workflow_run_rollups WHERE hour < $1),
              c AS (DELETE FROM usage_rollups WHERE hour < $2)
         DELETE FROM queue_history WHERE minute < $3",
    )
    .bind(runs)
    .bind(usage)
    .bind(queues)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Empties the rollups and the queue history and sets the watermark back,
/// so that the next pass folds everything in again from the oldest row:
/// for rows written into the past (the benchmark's seeding), which a pass
/// that already went by them would never see.
pub async fn forget_rollups(pool: &PgPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT upto FROM analytics_watermark FOR UPDATE").execute(&mut *tx).await?;
    sqlx::query(
        "WITH a AS (DELETE FROM job_run_rollups), b AS (DELETE FROM workflow_run_rollups),
              c AS (DELETE FROM usage_rollups), d AS (DELETE FROM queue_history), e AS (DELETE FROM job_run_totals)
         UPDATE analytics_watermark SET upto = NULL",
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// Whether no pass has run since [`forget_rollups`] (or ever).
pub async fn watermark_unset(pool: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT upto IS NULL FROM analytics_watermark").fetch_one(pool).await
}

/// Holds the watermark row until `tx` ends (`FOR SHARE`: holders do not
/// wait for one another, only for a rollup pass) and returns it. Whoever
/// takes runs back out of `job_run_totals` (migration 0020) holds it, so
/// that a pass folds either before (its watermark says which runs it
/// counted) or after (it no longer sees them), never in between.
pub async fn hold_watermark(tx: &mut Transaction<'_, Postgres>) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar("SELECT upto FROM analytics_watermark FOR SHARE").fetch_one(&mut **tx).await
}

/// A snapshot for a report: repeatable read (the watermark and the rollup
/// rows agree), read only, and custom plans, so the tail's time bound is
/// planned as the few recent rows it selects.
async fn report_tx(pool: &PgPool) -> Result<(Transaction<'_, Postgres>, Option<DateTime<Utc>>), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").execute(&mut *tx).await?;
    sqlx::query("SET LOCAL plan_cache_mode = force_custom_plan").execute(&mut *tx).await?;
    let upto = sqlx::query_scalar("SELECT upto FROM analytics_watermark").fetch_one(&mut *tx).await?;
    Ok((tx, upto))
}

/// Run counts by status over every run of the group's jobs (statuses
/// without runs absent): the ended runs the rollup counted in
/// `job_run_totals` (migration 0020), those that ended since its
/// watermark, and the unfinished ones, in one snapshot.
pub async fn group_run_counts(
    pool: &PgPool,
    group_id: &crate::ids::GroupId,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let (mut tx, upto) = report_tx(pool).await?;
    let sql = format!(
        "WITH jobs AS (SELECT id FROM jobs WHERE group_id = $1)
         SELECT status, sum(n)::int8 FROM (
            SELECT status, n FROM job_run_totals WHERE job_id IN (SELECT id FROM jobs)
            UNION ALL
            SELECT status, count(*) FROM job_runs
             WHERE finished_at >= $2 AND {RUN_ENDED} AND job_id IN (SELECT id FROM jobs) GROUP BY status
            UNION ALL
            SELECT status, count(*) FROM job_runs
             WHERE {RUN_UNFINISHED} AND job_id IN (SELECT id FROM jobs)
             GROUP BY status
         ) c GROUP BY status"
    );
    let from = upto.unwrap_or(DateTime::UNIX_EPOCH);
    let rows = sqlx::query_as(&sql).bind(group_id).bind(from).fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows)
}

/// Where a report's read of the runs themselves starts: the watermark, or
/// the window's start when that is later.
fn tail_from(upto: Option<DateTime<Utc>>, from: DateTime<Utc>) -> DateTime<Utc> {
    upto.map_or(from, |u| u.max(from))
}

/// Job runs that ended in one hour, of one job version.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct JobHour {
    pub hour: DateTime<Utc>,
    pub job_id: String,
    pub job_version: i32,
    pub job_version_id: String,
    pub completed: i32,
    pub failed: i32,
    pub timed_out: i32,
    pub cancelled: i32,
    pub expired: i32,
    pub durations_ms: Vec<i32>,
}

/// Every (hour, job version) of the project's job runs that ended at or
/// after `from` (a whole hour), from the rollups and the runs since the
/// watermark. An hour and version may come twice (rollup and tail).
pub async fn job_hours(pool: &PgPool, project_id: &str, from: DateTime<Utc>) -> Result<Vec<JobHour>, sqlx::Error> {
    let (mut tx, upto) = report_tx(pool).await?;
    let mut rows: Vec<JobHour> = sqlx::query_as(
        "SELECT hour, job_id, job_version, job_version_id, completed, failed, timed_out, cancelled, expired,
                durations_ms
           FROM job_run_rollups WHERE project_id = $1 AND hour >= $2",
    )
    .bind(project_id)
    .bind(from)
    .fetch_all(&mut *tx)
    .await?;
    let sql = format!(
        "SELECT date_trunc('hour', finished_at, 'UTC') AS hour, job_id, job_version,
                max(job_version_id) AS job_version_id,
                (count(*) FILTER (WHERE status = 'completed'))::int4 AS completed,
                (count(*) FILTER (WHERE status = 'failed'))::int4 AS failed,
                (count(*) FILTER (WHERE status = 'timed_out'))::int4 AS timed_out,
                (count(*) FILTER (WHERE status = 'cancelled'))::int4 AS cancelled,
                (count(*) FILTER (WHERE status = 'expired'))::int4 AS expired,
                COALESCE(array_agg({DURATION_MS}) FILTER (WHERE started_at IS NOT NULL), '{{}}') AS durations_ms
           FROM job_runs
          WHERE finished_at >= $2 AND project_id = $1 AND {RUN_ENDED}
          GROUP BY 1, 2, 3"
    );
    let tail: Vec<JobHour> =
        sqlx::query_as(&sql).bind(project_id).bind(tail_from(upto, from)).fetch_all(&mut *tx).await?;
    tx.commit().await?;
    rows.extend(tail);
    Ok(rows)
}

/// Workflow runs that ended in one hour, of one workflow.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct WorkflowHour {
    pub hour: DateTime<Utc>,
    pub workflow_id: String,
    pub completed: i32,
    pub failed: i32,
    pub cancelled: i32,
    pub timed_out: i32,
    pub durations_ms: Vec<i32>,
}

/// [`job_hours`] for workflow runs.
pub async fn workflow_hours(
    pool: &PgPool,
    project_id: &str,
    from: DateTime<Utc>,
) -> Result<Vec<WorkflowHour>, sqlx::Error> {
    let (mut tx, upto) = report_tx(pool).await?;
    let mut rows: Vec<WorkflowHour> = sqlx::query_as(
        "SELECT hour, workflow_id, completed, failed, cancelled, timed_out, durations_ms
           FROM workflow_run_rollups WHERE project_id = $1 AND hour >= $2",
    )
    .bind(project_id)
    .bind(from)
    .fetch_all(&mut *tx)
    .await?;
    let sql = format!(
        "SELECT date_trunc('hour', finished_at, 'UTC') AS hour, workflow_id,
                (count(*) FILTER (WHERE status = 'completed'))::int4 AS completed,
                (count(*) FILTER (WHERE status = 'failed'))::int4 AS failed,
                (count(*) FILTER (WHERE status = 'cancelled'))::int4 AS cancelled,
                (count(*) FILTER (WHERE status = 'timed_out'))::int4 AS timed_out,
                COALESCE(array_agg({DURATION_MS}) FILTER (WHERE started_at IS NOT NULL), '{{}}') AS durations_ms
           FROM workflow_runs
          WHERE finished_at >= $2 AND project_id = $1 AND {WORKFLOW_RUN_ENDED}
          GROUP BY 1, 2"
    );
    let tail: Vec<WorkflowHour> =
        sqlx::query_as(&sql).bind(project_id).bind(tail_from(upto, from)).fetch_all(&mut *tx).await?;
    tx.commit().await?;
    rows.extend(tail);
    Ok(rows)
}

/// The project's unfinished workflow runs: (workflow id, status, count).
pub async fn active_workflow_runs(pool: &PgPool, project_id: &str) -> Result<Vec<(String, String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT workflow_id, status, count(*) FROM workflow_runs
          WHERE project_id = $1 AND status IN ('pending', 'running', 'paused')
          GROUP BY 1, 2",
    )
    .bind(project_id)
    .fetch_all(pool)
    .await
}

/// A workflow's or a job's id, slug and name, for a report's rows
/// (deleted ones included: their runs still count).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Named {
    pub id: String,
    pub slug: String,
    pub name: String,
}

/// Every job of the project, deleted ones included.
pub async fn job_names(pool: &PgPool, project_id: Option<&str>) -> Result<Vec<Named>, sqlx::Error> {
    sqlx::query_as("SELECT id, slug, name FROM jobs WHERE ($1::text IS NULL OR project_id = $1)")
        .bind(project_id)
        .fetch_all(pool)
        .await
}

/// Every workflow of the project, deleted ones included.
pub async fn workflow_names(pool: &PgPool, project_id: &str) -> Result<Vec<Named>, sqlx::Error> {
    sqlx::query_as("SELECT id, slug, name FROM workflows WHERE project_id = $1").bind(project_id).fetch_all(pool).await
}

/// Usage of one job over a span (summed SDK usage records).
#[derive(Clone, Debug, Default, sqlx::FromRow)]
pub struct JobUsage {
    pub project_id: String,
    pub job_id: String,
    pub records: i64,
    pub cost_microusd: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cpu_ms: i64,
}

/// Usage recorded in `[from, to)` (whole hours), per project and job, of
/// one project or (`None`) all; ordered by project and job.
pub async fn usage(
    pool: &PgPool,
    project_id: Option<&str>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<JobUsage>, sqlx::Error> {
    let (mut tx, upto) = report_tx(pool).await?;
    let rows: Vec<JobUsage> = sqlx::query_as(
        "SELECT project_id, job_id, sum(records)::int8 AS records,
                least(sum(cost_microusd), 9223372036854775807)::int8 AS cost_microusd,
                least(sum(tokens_in), 9223372036854775807)::int8 AS tokens_in,
                least(sum(tokens_out), 9223372036854775807)::int8 AS tokens_out, least(sum(cpu_ms), 9223372036854775807)::int8 AS cpu_ms
           FROM (SELECT project_id, job_id, records, cost_microusd, tokens_in, tokens_out, cpu_ms
                   FROM usage_rollups
                  WHERE ($1::text IS NULL OR project_id = $1) AND hour >= $2 AND hour < $3
                 UNION ALL
                 SELECT r.project_id, r.job_id, 1, x.cost_microusd, x.tokens_in, x.tokens_out, x.cpu_ms
                   FROM job_run_usage x JOIN job_runs r ON r.id = x.run_id
                  WHERE x.created_at >= $4 AND x.created_at < $3
                    AND ($1::text IS NULL OR r.project_id = $1)) u
          GROUP BY project_id, job_id
          ORDER BY project_id, job_id",
    )
    .bind(project_id)
    .bind(from)
    .bind(to)
    .bind(tail_from(upto, from))
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows)
}

/// One minute of one job's queue.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct QueueMinute {
    pub job_id: String,
    pub minute: DateTime<Utc>,
    pub pending: i32,
    pub queued: i32,
    pub running: i32,
    pub retrying: i32,
    pub finished: i32,
    pub completed: i32,
    pub failed: i32,
}

/// The project's queue history from `since` on, and how far it goes (the
/// watermark: endings after it are not in it yet).
pub async fn queue_history(
    pool: &PgPool,
    project_id: &str,
    since: DateTime<Utc>,
) -> Result<(Option<DateTime<Utc>>, Vec<QueueMinute>), sqlx::Error> {
    let (mut tx, upto) = report_tx(pool).await?;
    let rows = sqlx::query_as(
        "SELECT job_id, minute, pending, queued, running, retrying, finished, completed, failed
           FROM queue_history WHERE project_id = $1 AND minute >= $2 ORDER BY job_id, minute",
    )
    .bind(project_id)
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok((upto, rows))
}

/// The jobs and workflow whose history [`write_report_history`] writes.
pub struct ReportSeed<'a> {
    pub project_id: &'a str,
    /// Each job's (id, version id); runs go round-robin, alternating
    /// between its version 1 and a version 2 (`<version id>-2`).
    pub jobs: &'a [(String, String)],
    /// (workflow id, version id): every tenth row also writes a workflow
    /// run of it.
    pub workflow: (&'a str, &'a str),
}

/// Writes rows `rows` of `total` ended runs for the benchmark's phase (y):
/// ending evenly over the `span_ms` before `newest_ms`, 90 % completed, 6 %
/// failed, 2 % timed out (those ran 50 ms to 2 s, one in fifty 20 s more),
/// 1 % cancelled and 1 % expired (never started); each run that ran with
/// one attempt and one usage record. Ids are shaped as the product makes
/// them (creation ms first).
pub async fn write_report_history(
    pool: &PgPool,
    seed: &ReportSeed<'_>,
    rows: std::ops::Range<usize>,
    (newest_ms, span_ms): (i64, i64),
    total: usize,
) -> Result<(), sqlx::Error> {
    let job_ids: Vec<&str> = seed.jobs.iter().map(|j| j.0.as_str()).collect();
    let version_ids: Vec<&str> = seed.jobs.iter().map(|j| j.1.as_str()).collect();
    sqlx::query(
        "WITH s AS (
            SELECT i, $3::bigint - (i * $4::bigint / $5::bigint) AS end_ms,
                   CASE WHEN i % 100 < 90 THEN 'completed' WHEN i % 100 < 96 THEN 'failed'
                        WHEN i % 100 < 98 THEN 'timed_out' WHEN i % 100 = 98 THEN 'cancelled'
                        ELSE 'expired' END AS status,
                   1 + (i / cardinality($6::text[])) % 2 AS version,
                   1 + i % cardinality($6::text[]) AS k
              FROM generate_series($1::bigint, $2::bigint) i
         ), t AS (
            SELECT s.*, CASE WHEN s.i % 100 < 98
                             THEN 50 + abs(hashtext(s.i::text)) % 1950 + CASE WHEN s.i % 50 = 0 THEN 20000 ELSE 0 END
                        END AS ms
              FROM s
         ), r AS (
            INSERT INTO job_runs (id, project_id, job_id, job_version, job_version_id, status, attempt,
                                  triggered_by, created_at, updated_at, started_at, finished_at)
            SELECT 'run_' || lpad(to_hex(end_ms - COALESCE(ms, 0) - 100), 12, '0') || '7'
                       || substr(md5(i::text), 1, 19),
                   $8, $6[k], version, CASE version WHEN 1 THEN $7[k] ELSE $7[k] || '-2' END, status,
                   CASE WHEN ms IS NULL THEN 0 ELSE 1 END, 'api',
                   to_timestamp((end_ms - COALESCE(ms, 0) - 100) / 1000.0), to_timestamp(end_ms / 1000.0),
                   to_timestamp((end_ms - ms) / 1000.0), to_timestamp(end_ms / 1000.0)
              FROM t
            RETURNING id, started_at, finished_at, status
         ), a AS (
            INSERT INTO job_run_attempts (run_id, attempt, outcome, status_code, endpoint_url, started_at,
                                          finished_at)
            SELECT id, 1, status, 200, 'http://127.0.0.1/ok', started_at, finished_at
              FROM r WHERE started_at IS NOT NULL
         ), u AS (
            INSERT INTO job_run_usage (id, run_id, attempt, cost_microusd, tokens_in, tokens_out, model, cpu_ms,
                                       created_at)
            SELECT 'use_' || substr(id, 5), id, 1, abs(hashtext(id)) % 1000, abs(hashtext(id)) % 500,
                   abs(hashtext(id)) % 300, 'bench', abs(hashtext(id)) % 2000, finished_at
              FROM r WHERE started_at IS NOT NULL
         )
         INSERT INTO workflow_runs (id, project_id, workflow_id, version_id, version, started_version_id,
                                    version_policy, status, triggered_by, created_at, started_at, finished_at)
         SELECT 'wfr_' || lpad(to_hex(end_ms - 10000), 12, '0') || '7' || substr(md5(i::text), 1, 19), $8, $9,
                $10, 1, $10, 'pin',
                CASE status WHEN 'expired' THEN 'cancelled' ELSE status END, 'api',
                to_timestamp((end_ms - 10000) / 1000.0), to_timestamp((end_ms - COALESCE(ms, 0) * 3) / 1000.0),
                to_timestamp(end_ms / 1000.0)
           FROM t WHERE i % 10 = 0",
    )
    .bind(rows.start as i64)
    .bind(rows.end as i64 - 1)
    .bind(newest_ms)
    .bind(span_ms)
    .bind(total as i64)
    .bind(&job_ids)
    .bind(&version_ids)
    .bind(seed.project_id)
    .bind(seed.workflow.0)
    .bind(seed.workflow.1)
    .execute(pool)
    .await?;
    Ok(())
}

/// The nearest-rank `p`-th percentile (0 < p <= 100) of `sorted` (ascending):
/// the smallest value with at least p % of the values at or below it; 0
/// for no values.
pub fn percentile(sorted: &[i32], p: u32) -> i32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() * p as usize).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// Endings tallied over any cut of a report (a job version, a job, a
/// workflow, the whole project): counts by terminal status and every
/// duration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub completed: i64,
    pub failed: i64,
    pub timed_out: i64,
    pub cancelled: i64,
    pub expired: i64,
    pub durations_ms: Vec<i32>,
}

/// Duration percentiles of a [`Tally`], in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Percentiles {
    /// How many durations (runs that started) they are taken over.
    pub count: i64,
    pub p50: i32,
    pub p95: i32,
    pub p99: i32,
    pub max: i32,
}

impl Tally {
    pub fn add_job_hour(&mut self, h: &JobHour) {
        self.completed += i64::from(h.completed);
        self.failed += i64::from(h.failed);
        self.timed_out += i64::from(h.timed_out);
        self.cancelled += i64::from(h.cancelled);
        self.expired += i64::from(h.expired);
        self.durations_ms.extend_from_slice(&h.durations_ms);
    }

    pub fn add_workflow_hour(&mut self, h: &WorkflowHour) {
        self.completed += i64::from(h.completed);
        self.failed += i64::from(h.failed);
        self.timed_out += i64::from(h.timed_out);
        self.cancelled += i64::from(h.cancelled);
        self.durations_ms.extend_from_slice(&h.durations_ms);
    }

    pub fn merge(&mut self, other: &Tally) {
        self.completed += other.completed;
        self.failed += other.failed;
        self.timed_out += other.timed_out;
        self.cancelled += other.cancelled;
        self.expired += other.expired;
        self.durations_ms.extend_from_slice(&other.durations_ms);
    }

    /// Every ending.
    pub fn ended(&self) -> i64 {
        self.completed + self.failed + self.timed_out + self.cancelled + self.expired
    }

    /// Share of endings that completed (0 with none).
    pub fn success_rate(&self) -> f64 {
        ratio(self.completed, self.ended())
    }

    /// Share of endings that failed or timed out (0 with none); cancelled
    /// and expired runs are neither success nor failure.
    pub fn failure_rate(&self) -> f64 {
        ratio(self.failed + self.timed_out, self.ended())
    }

    /// Sorts the durations and reads the percentiles.
    pub fn percentiles(&mut self) -> Percentiles {
        self.durations_ms.sort_unstable();
        let d = &self.durations_ms;
        Percentiles {
            count: d.len() as i64,
            p50: percentile(d, 50),
            p95: percentile(d, 95),
            p99: percentile(d, 99),
            max: d.last().copied().unwrap_or(0),
        }
    }
}

fn ratio(n: i64, of: i64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 / of as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<i32> = (1..=100).collect();
        assert_eq!((percentile(&v, 50), percentile(&v, 95), percentile(&v, 99)), (50, 95, 99));
        let v = [10, 20, 30, 40];
        assert_eq!((percentile(&v, 50), percentile(&v, 95), percentile(&v, 99)), (20, 40, 40));
        assert_eq!(percentile(&[7], 50), 7);
        assert_eq!(percentile(&[], 99), 0);
    }

    #[test]
    fn a_tally_counts_rates_and_percentiles_over_merged_parts() {
        let mut a = Tally { completed: 3, failed: 1, durations_ms: vec![400, 100], ..Tally::default() };
        let b = Tally { timed_out: 1, cancelled: 1, expired: 1, durations_ms: vec![300, 200], ..Tally::default() };
        a.merge(&b);
        assert_eq!(a.ended(), 7);
        assert_eq!(a.success_rate(), 3.0 / 7.0);
        assert_eq!(a.failure_rate(), 2.0 / 7.0);
        let p = a.percentiles();
        assert_eq!(p, Percentiles { count: 4, p50: 200, p95: 400, p99: 400, max: 400 });
        let mut empty = Tally::default();
        assert_eq!(
            (empty.success_rate(), empty.failure_rate(), empty.percentiles()),
            (0.0, 0.0, Percentiles::default())
        );
    }
}
