//! The expirer: runs that have not started by their `expires_at` (the job's
//! run_ttl_secs after they were due) become `expired`, and their queue
//! entries are dropped.
//!
//! Only runs that never started expire (`pending` or `queued`, no
//! `started_at`): a retry or a redelivery of a started run does not. The
//! worker's claim refuses an expired run too (it marks it `expired`), so a
//! run cannot start between two passes. Several schedulers share the work
//! (`FOR UPDATE SKIP LOCKED`).
//!
//! The loop does not poll: after a pass it sleeps until the earliest
//! `expires_at` still ahead (`flow::next_expiry`), at most `max_sleep`.
//! Whatever makes a run with an `expires_at` publishes a wake-up with that
//! time (`Queue::wake`), which brings the next pass forward if it is sooner.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::queue::Queue;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::flow;

use crate::alarm::Alarm;
use crate::error::{check_batch, check_max_sleep, check_positive, Error, OptionsError};
use crate::pace::{self, Next, Pacing};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpirerOptions {
    /// Least time between passes (default 1 s): how late past its
    /// `expires_at` a run may expire, at most.
    pub interval: Duration,
    /// Longest sleep (default 30 s): bounds the delay when a wake-up is lost.
    pub max_sleep: Duration,
    /// Runs expired per statement (default 500); a full batch is followed
    /// by another at once.
    pub batch_size: usize,
}

impl Default for ExpirerOptions {
    fn default() -> Self {
        ExpirerOptions { interval: Duration::from_secs(1), max_sleep: Duration::from_secs(30), batch_size: 500 }
    }
}

impl ExpirerOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("expirer.interval", self.interval)?;
        check_max_sleep("expirer.max_sleep", self.max_sleep, "expirer.interval", self.interval)?;
        check_batch("expirer.batch_size", self.batch_size)
    }
}

#[derive(Clone)]
pub struct Expirer {
    pool: PgPool,
    queue: Queue,
    opts: ExpirerOptions,
    alarm: Arc<Alarm>,
}

impl Expirer {
    pub fn new(pool: PgPool, queue: Queue, opts: ExpirerOptions) -> Result<Expirer, OptionsError> {
        opts.validate()?;
        Ok(Expirer { pool, queue, opts, alarm: Arc::default() })
    }

    /// What brings the next pass forward (rung by the wake-up listener).
    pub fn alarm(&self) -> &Arc<Alarm> {
        &self.alarm
    }

    /// One batch at `now`; returns how many runs expired.
    pub async fn expire_once(&self, now: DateTime<Utc>) -> Result<usize, Error> {
        let expired = flow::expire_due(&self.pool, now, self.opts.batch_size as i64).await?;
        for run in expired.iter().map(|c| &c.run) {
            // A leftover entry is harmless (the claim skips a run that is
            // not queued), so a failed removal is only logged.
            if let Err(e) = self.queue.remove(&run.entry()).await {
                tracing::debug!(run_id = %run.id, error = %e, "could not drop an expired run's entry");
            }
        }
        if !expired.is_empty() {
            tracing::info!(count = expired.len(), "expired runs that did not start within their ttl");
        }
        Ok(expired.len())
    }

    /// One pass of the loop: a batch, then when the next run expires.
    async fn pass(&self) -> Result<Next, Error> {
        if self.expire_once(Utc::now()).await? >= self.opts.batch_size {
            return Ok(Next::Now);
        }
        Ok(flow::next_expiry(&self.pool).await?.map_or(Next::Idle, Next::At))
    }

    /// Runs passes until shutdown, each when a run may be due (see the
    /// module doc).
    pub async fn run(&self, shutdown: Shutdown) {
        let pacing = Pacing { min_gap: self.opts.interval, max_sleep: self.opts.max_sleep };
        pace::paced_passes("expiry pass", pacing, &self.alarm, &shutdown, || self.pass()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        assert!(ExpirerOptions::default().validate().is_ok());
        let e = ExpirerOptions { batch_size: 0, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "expirer.batch_size");
        let e = ExpirerOptions { max_sleep: Duration::from_millis(10), ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "expirer.max_sleep");
    }
}
