//! The status changes a person asks for through the api: cancelling runs
//! (by id, with their descendants, or all of a deleted job's) and
//! restarting a finished run. The processes' own moves live beside the
//! rows they read: outcomes in [`runs::finish_many`] and [`settle`],
//! dispatch marks, retries falling due, expiry at claim and lease recovery
//! in [`runs`], expiry and dependency releases in [`flow`].
//!
//! Every function here writes the new status and its `job_run_events` row
//! in one statement (a restart also deletes the checkpoints, state and
//! outputs of the run's earlier life; a cancel's notifications follow in
//! the same transaction), returns each run it moved with the
//! status it left ([`Changed`]), and counts the move in
//! `svc_run_transitions_total` under that status. Queue entries are the
//! caller's to move once the rows are committed ([`drop_entries`] for
//! cancelled runs).
//!
//! ```text
//! pending / queued / running / retrying ── cancel ──► cancelled
//! completed / failed / timed_out / cancelled / expired ── restart ──► queued (attempt 0)
//! ```
//!
//! [`settle`]: super::settle
//! [`flow`]: super::flow

use sqlx::{PgConnection, PgPool};

use super::runs::{self, Run, RUN_COLUMNS};
use crate::domain::RunStatus;
use crate::queue::Queue;
use crate::telemetry::BULK_CHILD_CANCELLATIONS;

/// Descendants are looked for this many generations down, at most.
pub const MAX_LINEAGE_DEPTH: i32 = 64;

/// A run a call moved, as it is after the move, and the status it left.
#[derive(Clone, Debug)]
pub struct Changed {
    pub run: Run,
    pub from: RunStatus,
}

#[derive(sqlx::FromRow)]
struct ChangedRow {
    #[sqlx(flatten)]
    run: Run,
    from_status: RunStatus,
}

/// Counts each move of `changed`, once committed.
fn counted(changed: Vec<Changed>) -> Vec<Changed> {
    count(&changed);
    changed
}

fn count(changed: &[Changed]) {
    for c in changed {
        crate::telemetry::transition(c.run.job_id.as_str(), Some(c.from.as_str()), c.run.status.as_str());
    }
}

/// Moves made inside a caller's transaction: counted only once the caller
/// says it committed, so a rolled-back move is never counted.
#[must_use = "call `committed` after the transaction commits, so the moves are counted"]
pub struct Staged(Vec<Changed>);

impl Staged {
    /// No moves.
    pub fn none() -> Staged {
        Staged(Vec::new())
    }

    /// The moves, for what the caller writes in the same transaction.
    pub fn changes(&self) -> &[Changed] {
        &self.0
    }

    /// Adds `other`'s moves to these.
    pub fn extend(&mut self, other: Staged) {
        self.0.extend(other.0);
    }

    /// Counts the moves; call after the transaction committed.
    pub fn committed(self) -> Vec<Changed> {
        count(&self.0);
        self.0
    }
}

/// The cancellation of `old` (a CTE of `id, status` rows, locked), with
/// the reason `$2`, returning every moved run and its old status. Its
/// notifications are [`cancelled`]'s to write, in the same transaction.
fn cancel_sql(old: &str) -> String {
    format!(
        "WITH {old}, u AS (
            UPDATE job_runs r SET status = 'cancelled', finished_at = now(), error = $2, next_retry_at = NULL
            FROM old WHERE r.id = old.id
            RETURNING r.*, old.status AS from_status
         ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, from_status, 'cancelled', attempt, $2 FROM u
         ), {streamed}
         SELECT {RUN_COLUMNS}, from_status FROM u",
        streamed = super::streams::log_runs_cte("streamed", "u")
    )
}

/// Writes the notifications of the runs a [`cancel_sql`] statement
/// cancelled, in its transaction.
async fn cancelled(conn: &mut PgConnection, rows: Vec<ChangedRow>) -> Result<Vec<Changed>, sqlx::Error> {
    super::deliveries::runs_ended(conn, rows.iter().map(|r| &r.run)).await?;
    Ok(rows.into_iter().map(|r| Changed { run: r.run, from: r.from_status }).collect())
}

/// What [`cancel`] did to one run.
#[derive(Clone, Debug)]
pub enum Cancel {
    Cancelled(Changed),
    /// The run had already finished; it is returned unchanged.
    Finished(Run),
}

/// Cancels one run that has not finished. `None`: no such run.
pub async fn cancel(pool: &PgPool, run_id: &crate::ids::RunId, reason: &str) -> Result<Option<Cancel>, sqlx::Error> {
    let ids = [run_id.to_string()];
    if let Some(c) = cancel_many(pool, &ids, &RunStatus::ACTIVE, reason).await?.pop() {
        return Ok(Some(Cancel::Cancelled(c)));
    }
    Ok(runs::get(pool, run_id).await?.map(Cancel::Finished))
}

/// Cancels those of the runs `ids` whose status is one of `statuses`
/// (unfinished ones only: a terminal status in `statuses` matches
/// nothing). Returns the runs cancelled.
pub async fn cancel_many(
    pool: &PgPool,
    ids: &[String],
    statuses: &[RunStatus],
    reason: &str,
) -> Result<Vec<Changed>, sqlx::Error> {
    let statuses: Vec<RunStatus> = statuses.iter().copied().filter(|s| !s.is_terminal()).collect();
    let mut tx = pool.begin().await?;
    let rows: Vec<ChangedRow> = sqlx::query_as(&cancel_sql(
        "old AS (SELECT id, status FROM job_runs WHERE id = ANY($1) AND status = ANY($3) FOR UPDATE)",
    ))
    .bind(ids)
    .bind(reason)
    .bind(&statuses)
    .fetch_all(&mut *tx)
    .await?;
    let changed = cancelled(&mut tx, rows).await?;
    tx.commit().await?;
    Ok(counted(changed))
}

/// [`cancel_many`] of unfinished runs in the caller's transaction (a
/// workflow run ending takes its steps' job runs with it).
pub async fn cancel_in(conn: &mut PgConnection, ids: &[String], reason: &str) -> Result<Staged, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Staged(Vec::new()));
    }
    let rows: Vec<ChangedRow> = sqlx::query_as(&cancel_sql(concat!(
        "old AS (SELECT id, status FROM job_runs WHERE id = ANY($1)
                   AND status IN ",
        crate::run_active_sql!(),
        " FOR UPDATE)"
    )))
    .bind(ids)
    .bind(reason)
    .fetch_all(&mut *conn)
    .await?;
    Ok(Staged(cancelled(conn, rows).await?))
}

/// Cancels the unfinished descendants of the runs `parents` (parent_run_id,
/// recursively, at most [`MAX_LINEAGE_DEPTH`] generations down), recording
/// `reason` with "(with its parent run)". Returns the runs cancelled, also
/// counted in `svc_bulk_child_cancellations_total`.
pub async fn cancel_descendants(
    pool: &PgPool,
    parents: &[crate::ids::RunId],
    reason: &str,
) -> Result<Vec<Changed>, sqlx::Error> {
    if parents.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = pool.begin().await?;
    let rows: Vec<ChangedRow> = sqlx::query_as(&cancel_sql(concat!(
        "RECURSIVE tree (id, depth) AS (
            SELECT id, 1 FROM job_runs WHERE parent_run_id = ANY($1)
            UNION ALL
            SELECT r.id, t.depth + 1 FROM job_runs r JOIN tree t ON r.parent_run_id = t.id WHERE t.depth < $3
         ), old AS (
            SELECT r.id, r.status FROM job_runs r WHERE r.id IN (SELECT id FROM tree)
              AND r.status IN ",
        crate::run_active_sql!(),
        " FOR UPDATE OF r
         )"
    )))
    .bind(parents)
    .bind(format!("{reason} (with its parent run)"))
    .bind(MAX_LINEAGE_DEPTH)
    .fetch_all(&mut *tx)
    .await?;
    let changed = cancelled(&mut tx, rows).await?;
    tx.commit().await?;
    let changed = counted(changed);
    if !changed.is_empty() {
        metrics::counter!(BULK_CHILD_CANCELLATIONS).increment(changed.len() as u64);
    }
    Ok(changed)
}

/// Cancels every unfinished run of the job `job_id`, in the caller's
/// transaction (the job's deletion).
pub async fn cancel_job_runs(conn: &mut PgConnection, job_id: &str, reason: &str) -> Result<Staged, sqlx::Error> {
    let rows: Vec<ChangedRow> = sqlx::query_as(&cancel_sql(concat!(
        "old AS (
            SELECT id, status FROM job_runs
            WHERE job_id = $1 AND status IN ",
        crate::run_active_sql!(),
        " FOR UPDATE
         )"
    )))
    .bind(job_id)
    .bind(reason)
    .fetch_all(&mut *conn)
    .await?;
    Ok(Staged(cancelled(conn, rows).await?))
}

/// Drops the queue entries of cancelled runs, once their rows are
/// committed. A leftover entry is harmless (a worker skips a run that is
/// not queued), so a failed removal is logged with the run, not returned.
pub async fn drop_entries(queue: &Queue, cancelled: &[Changed]) {
    for c in cancelled {
        if let Err(e) = queue.remove(&c.run.entry()).await {
            tracing::warn!(run_id = %c.run.id, error = %e, "could not remove a cancelled run from redis; a worker will skip it");
        }
    }
}

/// Restarts a finished run from the beginning, on the same run id: it
/// becomes `queued` on attempt 0 with `resource_class`; its result, error,
/// timings, progress and schedule are cleared, and its checkpoints, state
/// and outputs deleted (logs, usage, tool calls, attempts and events stay
/// as history). `None`: no such run, or it has not finished.
///
/// A run the analytics rollup already counted among its job's ended runs
/// (it ended before the watermark) is taken back out of the group totals
/// (migration 0020), under [`analytics::hold_watermark`](super::analytics::hold_watermark).
pub async fn restart(
    pool: &PgPool,
    run_id: &str,
    resource_class: &str,
    reason: &str,
) -> Result<Option<Changed>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let upto = super::analytics::hold_watermark(&mut tx).await?;
    let rows: Vec<ChangedRow> = sqlx::query_as(&format!(
        "WITH old AS (
            SELECT id, status, finished_at FROM job_runs WHERE id = $1 FOR UPDATE
         ), u AS (
            UPDATE job_runs r SET status = 'queued', attempt = 0, result = NULL, error = NULL,
                error_class = NULL, started_at = NULL, finished_at = NULL, heartbeat_at = NULL,
                next_retry_at = NULL, execution_trace = NULL, progress = NULL, progress_message = NULL,
                async_accepted_at = NULL, scheduled_at = NULL, expires_at = NULL, resource_class = $2
            FROM old WHERE r.id = old.id
                AND old.status IN {ended}
            RETURNING r.*, old.status AS from_status, old.finished_at AS from_finished_at
         ), totals AS (
            UPDATE job_run_totals t SET n = t.n - 1 FROM u
             WHERE t.job_id = u.job_id AND t.status = u.from_status AND u.from_finished_at < $4
         ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, from_status, 'queued', 0, $3 FROM u
         ), c AS (
            DELETE FROM job_run_checkpoints WHERE run_id IN (SELECT id FROM u)
         ), s AS (
            DELETE FROM job_run_state WHERE run_id IN (SELECT id FROM u)
         ), o AS (
            DELETE FROM job_run_outputs WHERE run_id IN (SELECT id FROM u)
         ), {streamed}
         SELECT {RUN_COLUMNS}, from_status FROM u",
        ended = crate::run_ended_sql!(),
        streamed = super::streams::log_runs_cte("streamed", "u")
    ))
    .bind(run_id)
    .bind(resource_class)
    .bind(reason)
    .bind(upto)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(counted(rows.into_iter().map(|r| Changed { run: r.run, from: r.from_status }).collect()).pop())
}
