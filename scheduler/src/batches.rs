//! The batch closer: makes the run of each open trigger batch whose time is
//! up (`store::trigger_batches`; a batch that fills is closed by the
//! trigger that fills it). Several schedulers share the batches
//! (`FOR UPDATE SKIP LOCKED`). The loop sleeps until the soonest close; the
//! api wakes it (`WakeLoop::Batches`) with the close of each batch it
//! opens, and `max_sleep` bounds the delay when a wake-up is lost.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::queue::Queue;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::{runs, trigger_batches};

use crate::alarm::Alarm;
use crate::error::{check_batch, check_max_sleep, check_positive, Error, OptionsError};
use crate::pace::{self, Next, Pacing};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    /// Shortest time between passes (default 100 ms).
    pub interval: Duration,
    /// Longest sleep (default 30 s): how late a batch may close when its
    /// wake-up was lost.
    pub max_sleep: Duration,
    /// Batches closed per transaction (default 100).
    pub batch_size: usize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions { interval: Duration::from_millis(100), max_sleep: Duration::from_secs(30), batch_size: 100 }
    }
}

impl BatchOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("batches.interval", self.interval)?;
        check_max_sleep("batches.max_sleep", self.max_sleep, "batches.interval", self.interval)?;
        check_batch("batches.batch_size", self.batch_size)
    }
}

#[derive(Clone)]
pub struct BatchCloser {
    pool: PgPool,
    queue: Queue,
    opts: BatchOptions,
    alarm: Arc<Alarm>,
}

impl BatchCloser {
    pub fn new(pool: PgPool, queue: Queue, opts: BatchOptions) -> Result<BatchCloser, OptionsError> {
        opts.validate()?;
        Ok(BatchCloser { pool, queue, opts, alarm: Arc::default() })
    }

    /// Closes the batches due at `now` (one transaction) and enqueues their
    /// runs; returns how many runs it made.
    pub async fn close_once(&self, now: DateTime<Utc>) -> Result<usize, Error> {
        let made = trigger_batches::close_due(&self.pool, now, self.opts.batch_size as i64).await?;
        runs::enqueue_made(&self.queue, &made).await;
        if !made.is_empty() {
            tracing::debug!(runs = made.len(), "closed trigger batches whose time was up");
        }
        Ok(made.len())
    }

    /// At idle one cheap read (the soonest close, over an index of open
    /// batches only); the closing transaction only when one is due.
    async fn pass(&self) -> Result<Next, Error> {
        match trigger_batches::next_close(&self.pool).await? {
            None => Ok(Next::Idle),
            Some(at) if at > Utc::now() => Ok(Next::At(at)),
            Some(_) => {
                self.close_once(Utc::now()).await?;
                Ok(Next::Now)
            }
        }
    }

    pub fn alarm(&self) -> &Arc<Alarm> {
        &self.alarm
    }

    pub async fn run(&self, shutdown: Shutdown) {
        let pacing = Pacing { min_gap: self.opts.interval, max_sleep: self.opts.max_sleep };
        pace::paced_passes("batch pass", pacing, &self.alarm, &shutdown, || self.pass()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        assert!(BatchOptions::default().validate().is_ok());
        let e = BatchOptions { batch_size: 0, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "batches.batch_size");
    }
}
