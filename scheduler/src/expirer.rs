//! The expirer: runs that have not started by their `expires_at` (the job's
//! run_ttl_secs after they were due) become `expired`, and their queue
//! entries are dropped.
//!
//! Only runs that never started expire (`pending` or `queued`, no
//! `started_at`): a retry or a redelivery of a started run does not. The
//! worker's claim refuses an expired run too (it marks it `expired`), so a
//! run cannot start between two passes. Several schedulers share the work
//! (`FOR UPDATE SKIP LOCKED`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::queue::Queue;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::flow;

use crate::error::{check_batch, check_positive, Error, OptionsError};
use crate::pace;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpirerOptions {
    /// Time between passes (default 1 s).
    pub interval: Duration,
    /// Runs expired per statement (default 500); a full batch is followed
    /// by another at once.
    pub batch_size: usize,
}

impl Default for ExpirerOptions {
    fn default() -> Self {
        ExpirerOptions { interval: Duration::from_secs(1), batch_size: 500 }
    }
}

impl ExpirerOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("expirer.interval", self.interval)?;
        check_batch("expirer.batch_size", self.batch_size)
    }
}

#[derive(Clone)]
pub struct Expirer {
    pool: PgPool,
    queue: Queue,
    opts: ExpirerOptions,
}

impl Expirer {
    pub fn new(pool: PgPool, queue: Queue, opts: ExpirerOptions) -> Result<Expirer, OptionsError> {
        opts.validate()?;
        Ok(Expirer { pool, queue, opts })
    }

    /// One batch at `now`; returns how many runs expired.
    pub async fn expire_once(&self, now: DateTime<Utc>) -> Result<usize, Error> {
        let expired = flow::expire_due(&self.pool, now, self.opts.batch_size as i64).await?;
        for (run, _) in &expired {
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

    /// Runs passes until shutdown.
    pub async fn run(&self, shutdown: Shutdown) {
        pace::batch_passes("expiry pass", self.opts.interval, &shutdown, || async {
            self.expire_once(Utc::now()).await.map(|r| r >= self.opts.batch_size)
        })
        .await
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
    }
}
