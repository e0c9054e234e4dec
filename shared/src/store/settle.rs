//! Ending an attempt that no worker holds: an async run the target finishes
//! over the SDK (`complete`, `fail`), or one whose heartbeats stopped.
//!
//! The rules are the worker's: the job's retry policy (with the run's
//! overrides) decides between `retrying` and the final status through the
//! one retry decision (`domain::retry::decide`), the outcome
//! is recorded by [`runs::finish_attempt`] fenced by the run's dispatch
//! token, and then the queue entry is acked with the retry's due time. After
//! a 202 the worker already released the lease, so that ack frees no
//! concurrency slot: an async run holds none once its target accepted it. It
//! only puts the entry in `scheduled` when the run is retrying.
//!
//! ```text
//! running (async, accepted) ─ complete ──────────────► completed
//!                           ─ fail, retryable ───────► retrying (policy allows) ─► queued when due
//!                           ─ fail / no heartbeat ───► failed / timed_out (attempts exhausted)
//! ```

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::types::Json;
use sqlx::PgPool;

use crate::domain::limits::{MAX_ATTEMPTS_LIMIT, MAX_TIMEOUT_SECS};
use crate::domain::retry::{decide, AttemptEnd};
use crate::domain::{JobSpec, RetryPolicy, RetryStrategy};
use crate::queue::Queue;
use crate::store::runs::{self, Outcome, Run, RUN_COLUMNS};

/// The error class of an async run whose heartbeats stopped.
pub const HEARTBEAT_TIMEOUT: &str = "heartbeat_timeout";

/// The job's retry policy with the run's overrides applied.
pub fn retry_policy(spec: &JobSpec, run: &Run) -> RetryPolicy {
    let mut p = spec.retry_policy();
    if let Some(n) = run.max_attempts_override.filter(|n| *n > 0) {
        p.max_attempts = (n as i64).min(MAX_ATTEMPTS_LIMIT) as u32;
    }
    if let Some(s) = run.retry_backoff.as_deref().and_then(|s| s.parse::<RetryStrategy>().ok()) {
        p.strategy = s;
    }
    if let Some(d) = run.retry_initial_delay_secs.filter(|d| *d >= 0) {
        p.initial_delay = Duration::from_secs(d as u64);
    }
    if let Some(d) = run.retry_max_delay_secs.filter(|d| *d >= 0) {
        p.max_delay = Duration::from_secs(d as u64);
    }
    p
}

/// The run's own timeout when it sets one, else the job's.
pub fn attempt_timeout(spec: &JobSpec, run: &Run) -> Duration {
    match run.timeout_secs_override {
        Some(s) if s > 0 => Duration::from_secs((s as i64).min(MAX_TIMEOUT_SECS) as u64),
        _ => spec.timeout(),
    }
}

/// Records `ending` for the run's current attempt if the run is still
/// running under the same claim, then acks its queue entry (scheduling the
/// retry). `None`: the run moved on meanwhile (finished, cancelled,
/// claimed again) and nothing was written.
///
/// A failed ack is logged, not returned: the outcome is committed, and the
/// reconciler puts a retrying run missing from `scheduled` back.
pub async fn settle(
    pool: &PgPool,
    queue: &Queue,
    run: &Run,
    spec: &JobSpec,
    ending: AttemptEnd<String>,
) -> Result<Option<(Outcome, Run)>, sqlx::Error> {
    let now = Utc::now();
    let d = decide(ending, run.attempt.max(1) as u32, &retry_policy(spec, run), now, rand::random::<f64>());
    let outcome = Outcome {
        status: d.status,
        result: d.result,
        error: d.error,
        error_class: d.error_class,
        status_code: None,
        endpoint_url: String::new(),
        next_retry_at: d.next_retry_at,
        attempt_started_at: run.started_at.unwrap_or(now),
        trace: run.execution_trace.as_ref().map(|t| t.0.clone()).unwrap_or_else(|| json!({})),
        webhook_url: spec.webhook_url.clone().filter(|u| !u.is_empty()),
        job_id: run.job_id.clone(),
        project_id: run.project_id.clone(),
        attempt: run.attempt,
        workflow_step_run_id: None,
    };
    if !runs::finish_attempt(pool, &run.id, run.dispatch_token, &outcome).await? {
        return Ok(None);
    }
    if outcome.status.is_terminal() {
        run.trace_end(outcome.status.as_str(), outcome.error.as_deref());
    }
    let retry_due = outcome.next_retry_at.map(|t| t.timestamp_millis());
    if let Err(e) = queue.ack(&run.entry(), retry_due).await {
        tracing::warn!(run_id = %run.id, error = %e, "ack after settling failed; the reconciler will restore the entry");
    }
    let after = runs::get(pool, &run.id).await?.unwrap_or_else(|| run.clone());
    Ok(Some((outcome, after)))
}

/// The worker's note that the target accepted the run asynchronously (202):
/// fenced like an outcome (see `runs::finish_many`), so only the dispatch
/// that sent the attempt may write it; a run not yet marked running is
/// marked now. The heartbeat clock starts now. Returns whether it was
/// recorded.
pub async fn mark_async_accepted(pool: &PgPool, run_id: &str, token: i64, trace: &Value) -> Result<bool, sqlx::Error> {
    let row: Option<(i32, bool)> = sqlx::query_as(&format!(
        "WITH u AS (
            UPDATE job_runs r SET async_accepted_at = now(), heartbeat_at = now(), execution_trace = $3,
                status = 'running', dispatch_token = $2,
                attempt = CASE WHEN r.status = 'queued' THEN r.attempt + 1 ELSE r.attempt END,
                started_at = CASE WHEN r.status = 'queued' THEN now() ELSE r.started_at END,
                next_retry_at = NULL
            FROM job_runs o
            WHERE r.id = $1 AND o.id = r.id
              AND CASE r.status WHEN 'queued' THEN r.dispatch_token = $2 - 1
                                WHEN 'running' THEN r.dispatch_token = $2 END
            RETURNING r.id, r.attempt, o.status = 'queued' AS from_queued, r.project_id, r.job_id, r.status
        ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, 'queued', 'running', attempt, NULL FROM u WHERE from_queued
            UNION ALL
            SELECT id, 'running', 'running', attempt, 'accepted by the target (HTTP 202); finished over the SDK' FROM u
        ), {}
        SELECT attempt, from_queued FROM u",
        super::streams::log_runs_cte("streamed", "(SELECT * FROM u WHERE from_queued)")
    ))
    .bind(run_id)
    .bind(token)
    .bind(Json(trace))
    .fetch_optional(pool)
    .await?;
    Ok(row.is_some())
}

/// The attempt timeout of an async run `r` (with `v` its version and `j`
/// its job) in SQL, as [`attempt_timeout`] computes it.
fn async_timeout_sql() -> String {
    format!(
        "make_interval(secs => LEAST(GREATEST(COALESCE(
                 NULLIF(r.timeout_secs_override, 0),
                 ((CASE WHEN v.spec->>'version_policy' = 'latest' THEN j.spec ELSE v.spec END)->>'timeout_secs')::int,
                 30), 1), {MAX_TIMEOUT_SECS}))"
    )
}

/// Running async runs whose last heartbeat (or acceptance) is older than
/// their attempt timeout at `now`, oldest first, at most `limit`.
pub async fn overdue_async(pool: &PgPool, now: DateTime<Utc>, limit: i64) -> Result<Vec<Run>, sqlx::Error> {
    let cols = RUN_COLUMNS.split(", ").map(|c| format!("r.{}", c.trim())).collect::<Vec<_>>().join(", ");
    sqlx::query_as(&format!(
        "SELECT {cols} FROM job_runs r
           JOIN job_versions v ON v.id = r.job_version_id
           JOIN jobs j ON j.id = r.job_id
         WHERE r.status = 'running' AND r.async_accepted_at IS NOT NULL
           AND r.heartbeat_at < $1 - {}
         ORDER BY r.heartbeat_at LIMIT $2",
        async_timeout_sql()
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// When the first running async run goes overdue if no heartbeat comes:
/// the earliest last heartbeat plus timeout. `None` when no async run is
/// running. Heartbeats only move this later, so a sweep that sleeps until
/// then is never late, at worst early.
pub async fn next_async_deadline(pool: &PgPool) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar(&format!(
        "SELECT min(r.heartbeat_at + {}) FROM job_runs r
           JOIN job_versions v ON v.id = r.job_version_id
           JOIN jobs j ON j.id = r.job_id
         WHERE r.status = 'running' AND r.async_accepted_at IS NOT NULL",
        async_timeout_sql()
    ))
    .fetch_one(pool)
    .await
}
