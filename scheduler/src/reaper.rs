//! The lease reaper: takes back the runs of workers that died or stalled.
//!
//! A worker leases an entry (`leases`, scored by expiry) and renews the
//! lease while its dispatch is in flight, so a lease expires only when its
//! worker is gone or frozen. Each pass takes the expired leases out of Redis
//! (`reap.lua`, atomic: one scheduler gets each) and asks Postgres what each
//! run needs:
//!
//! ```text
//! running   --requeue_lost-->  queued, same attempt  --> ready (redelivery)
//! queued                                             --> ready
//! retrying                                           --> scheduled at next_retry_at
//!                                                        (the promoter flips it when due)
//! terminal, gone, or running again under a new claim --> nothing
//! ```
//!
//! The redelivery steps the attempt number back, so the next claim lands on
//! the same attempt and the target sees the same idempotency key. A late
//! outcome from the stalled worker is fenced off by the run's dispatch token.
//!
//! Postgres is pinged before leases are taken: while it is down the leases
//! stay in Redis. If the process dies between taking a lease and requeueing
//! its run, the run stays `running` with no lease, which the reconciler
//! recovers. A pass first looks (a plain Redis read) whether any lease
//! expired at all, so an idle reaper costs Postgres nothing.

use std::time::Duration;

use sqlx::PgPool;
use switchyard_shared::queue::{Entry, Queue};
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::runs;

use crate::error::{check_batch, check_positive, Error, OptionsError};
use crate::pace;
use crate::placement::{placement, restore, Placement};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReaperOptions {
    /// Time between passes (default 1 s). A lost run waits at most the lease
    /// plus this before it is redelivered.
    pub interval: Duration,
    /// Expired leases taken per pass (default 200); a full batch is followed
    /// by another pass at once.
    pub batch_size: usize,
}

impl Default for ReaperOptions {
    fn default() -> Self {
        ReaperOptions { interval: Duration::from_secs(1), batch_size: 200 }
    }
}

impl ReaperOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("reaper.interval", self.interval)?;
        check_batch("reaper.batch_size", self.batch_size)
    }
}

/// What one pass did with the expired leases it took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReapReport {
    pub expired: usize,
    /// Running runs put back to `queued` for a redelivery of their attempt.
    pub redelivered: usize,
    /// Runs already queued or retrying, whose entries were put back.
    pub requeued: usize,
    /// Runs that need nothing: finished, deleted, or claimed again.
    pub released: usize,
    /// Entries whose handling failed; the reconciler recovers their runs.
    pub failed: usize,
}

#[derive(Clone)]
pub struct Reaper {
    pool: PgPool,
    queue: Queue,
    opts: ReaperOptions,
}

enum Handled {
    Redelivered,
    Requeued,
    Released,
}

impl Reaper {
    pub fn new(pool: PgPool, queue: Queue, opts: ReaperOptions) -> Result<Reaper, OptionsError> {
        opts.validate()?;
        Ok(Reaper { pool, queue, opts })
    }

    pub fn options(&self) -> &ReaperOptions {
        &self.opts
    }

    /// One pass: takes the leases expired by `now_ms` and puts each run where
    /// Postgres says it belongs.
    pub async fn reap_once(&self, now_ms: i64) -> Result<ReapReport, Error> {
        if !self.queue.any_lease_expired(now_ms).await? {
            return Ok(ReapReport::default());
        }
        switchyard_shared::store::ping(&self.pool).await?;
        let expired = self.queue.reap(now_ms, self.opts.batch_size).await?;
        let mut report = ReapReport { expired: expired.len(), ..ReapReport::default() };
        for entry in expired {
            match self.handle(&entry, now_ms).await {
                Ok(Handled::Redelivered) => report.redelivered += 1,
                Ok(Handled::Requeued) => report.requeued += 1,
                Ok(Handled::Released) => report.released += 1,
                Err(e) => {
                    report.failed += 1;
                    tracing::warn!(run_id = %entry.run_id, error = %e,
                        "could not requeue a run whose lease expired; the reconciler will");
                }
            }
        }
        if report.redelivered > 0 || report.requeued > 0 {
            tracing::info!(
                redelivered = report.redelivered,
                requeued = report.requeued,
                released = report.released,
                "took back expired leases"
            );
        }
        Ok(report)
    }

    async fn handle(&self, entry: &Entry, now_ms: i64) -> Result<Handled, Error> {
        if runs::requeue_lost(&self.pool, &entry.run_id).await?.is_some() {
            tracing::debug!(run_id = %entry.run_id, "lease expired; redelivering the attempt");
            self.queue.enqueue(entry, 0, now_ms).await?;
            return Ok(Handled::Redelivered);
        }
        // Not running any more: the worker recorded an outcome before its
        // lease ran out, or the run was cancelled, deleted or claimed anew.
        let Some(run) = runs::get(&self.pool, &entry.run_id).await? else {
            return Ok(Handled::Released);
        };
        match placement(&run) {
            p @ (Placement::Ready | Placement::Scheduled { .. }) => {
                restore(&self.queue, entry, p, now_ms).await?;
                Ok(Handled::Requeued)
            }
            Placement::Running | Placement::Blocked | Placement::Finished => Ok(Handled::Released),
        }
    }

    /// Runs passes until shutdown. A pass in progress finishes first: its
    /// leases are already out of Redis.
    pub async fn run(&self, shutdown: Shutdown) {
        pace::batch_passes("reaper pass", self.opts.interval, &shutdown, || async {
            self.reap_once(pace::now_ms()).await.map(|r| r.expired >= self.opts.batch_size)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        assert!(ReaperOptions::default().validate().is_ok());
        let e = ReaperOptions { interval: Duration::ZERO, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "reaper.interval");
        let e = ReaperOptions { batch_size: 100_000, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "reaper.batch_size");
    }
}
