//! Committing what a dispatch found, through Postgres and Redis blips.
//!
//! Order matters: the outcome goes to Postgres first (the record), then the
//! entry is acked in Redis. A worker that dies in between leaves a lease
//! that lapses; the reaper then finds the run already finished in Postgres.
//!
//! An outcome is never dropped because Postgres is briefly away: the write
//! is retried with backoff while the lease keeps being renewed (the dispatch
//! is still in flight). Only shutdown stops it, by aborting the dispatch,
//! after which the lease lapses and the scheduler redelivers.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::domain::RunStatus;
use switchyard_shared::queue::{Entry, Queue};
use switchyard_shared::store::{self, Outcome};

use crate::leases::Held;
use crate::now_ms;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Redis acks are retried this many times; after that the lease lapses and
/// the reaper, asking Postgres, does what the ack would have done.
const ACK_TRIES: u32 = 5;

/// Whether an error may go away by itself (connection lost, Postgres
/// restarting, pool exhausted) rather than being a property of the data.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed => true,
        // SQLSTATE classes: 08 connection, 40 serialization/deadlock,
        // 53 resources, 57 operator intervention (restart), 58 system.
        sqlx::Error::Database(d) => {
            d.code().is_some_and(|c| ["08", "40", "53", "57", "58"].iter().any(|p| c.starts_with(p)))
        }
        _ => false,
    }
}

/// Runs `op` until it succeeds or fails for a reason retrying cannot fix.
pub async fn with_db_retry<T, F, Fut>(what: &str, mut op: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    let mut backoff = FIRST_BACKOFF;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if is_transient(&e) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "{what}: postgres unavailable");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Records the outcome (group-committed with other dispatches' outcomes);
/// false when the run is no longer this dispatch's (cancelled meanwhile, or
/// its lease was lost and it was handed on).
pub(crate) async fn finish_attempt(
    finisher: &crate::worker::Finisher,
    run_id: &switchyard_shared::ids::RunId,
    token: i64,
    outcome: &Outcome,
) -> bool {
    let recorded = with_db_retry("recording an outcome", || async {
        finisher.submit((run_id.clone(), token, outcome.clone())).await.map_err(|e| e.into_sqlx())
    })
    .await;
    match recorded {
        Ok(recorded) => recorded,
        Err(e) => {
            tracing::error!(run_id = %run_id, error = %e, "the outcome could not be recorded; the run will be redelivered");
            false
        }
    }
}

/// Releases the entry's lease (and schedules it again when `retry_due_ms`).
pub async fn ack(queue: &Queue, entry: &Entry, retry_due_ms: Option<i64>) {
    let mut backoff = FIRST_BACKOFF;
    for i in 1..=ACK_TRIES {
        match queue.ack(entry, retry_due_ms).await {
            Ok(_) => return,
            Err(e) if i == ACK_TRIES => {
                tracing::error!(run_id = %entry.run_id, error = %e, "ack failed; leaving the lease to lapse");
            }
            Err(e) => {
                tracing::warn!(run_id = %entry.run_id, error = %e, "ack failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// [`ack`] through the worker's batcher, so the dispatches that end
/// together release their leases in one script call. On a failure the
/// entry goes the one-by-one way, with its retries.
pub(crate) async fn ack_grouped(w: &crate::worker::Inner, entry: &Entry, retry_due_ms: Option<i64>) {
    if w.acker.submit((entry.clone(), retry_due_ms)).await.is_err() {
        ack(&w.queue, entry, retry_due_ms).await;
    }
}

/// Gives back an entry whose dispatch was cut short (shutdown deadline, or a
/// panic) so that another worker redelivers the same attempt. The run is
/// looked up first, so a run that has moved on is left as it is now.
pub async fn hand_back(pool: &PgPool, queue: &Queue, held: &Held) {
    let entry = &held.entry;
    let run = match store::runs::get(pool, &entry.run_id).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(run_id = %entry.run_id, error = %e, "cannot hand the run back; its lease will lapse");
            return;
        }
    };
    let Some(run) = run else {
        ack(queue, entry, None).await;
        return;
    };
    match run.status {
        RunStatus::Running if held.token.is_none_or(|t| t == run.dispatch_token) => {
            match store::runs::requeue_lost(pool, &run.id).await {
                Ok(Some(_)) => {
                    ack(queue, entry, None).await;
                    if let Err(e) = queue.enqueue(entry, 0, now_ms()).await {
                        tracing::warn!(run_id = %run.id, error = %e, "re-enqueue failed; the reconciler will restore it");
                    }
                    tracing::info!(run_id = %run.id, "dispatch cut short; the attempt goes back to the queue");
                }
                Ok(None) => ack(queue, entry, None).await,
                Err(e) => {
                    tracing::warn!(run_id = %run.id, error = %e, "cannot hand the run back; its lease will lapse")
                }
            }
        }
        // Another worker holds it now (our lease was lost): its lease is the
        // same entry, so this worker must not touch it.
        RunStatus::Running => {}
        RunStatus::Queued => {
            // Dequeued but never claimed: put the entry back where it was.
            ack(queue, entry, None).await;
            if let Err(e) = queue.enqueue(entry, 0, now_ms()).await {
                tracing::warn!(run_id = %run.id, error = %e, "re-enqueue failed; the reconciler will restore it");
            }
        }
        // The outcome was recorded but the ack never ran.
        RunStatus::Retrying => ack(queue, entry, run.next_retry_at.map(|t: DateTime<Utc>| t.timestamp_millis())).await,
        _ => ack(queue, entry, None).await,
    }
}
