//! The pruner: deletes finished work older than its project's
//! `retention_days` (`store::retention`), so the tables stay the size of
//! the retention window however long the system runs.
//!
//! A pass walks every project and every kind, one batch per statement,
//! until a batch comes back short; between batches it rests three times as
//! long as the batch took (and at least `breather`), so that a large
//! backlog (the first pass after a retention is shortened) keeps at most a
//! quarter of one Postgres backend busy and never crowds out the hot path:
//! measured by the benchmark's phase (r), deleting at full speed tripled
//! p99 trigger→terminal latency at 500 runs/s. Passes run every `interval`. Whoever
//! takes the `prune` lock for the interval prunes, the others skip; two
//! pruners at once would only share the work (`SKIP LOCKED`).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use switchyard_shared::queue::Queue;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::retention::{self, Kind};

use crate::alarm::Alarm;
use crate::error::{check_batch, check_positive, Error, OptionsError};
use crate::pace::{self, Next, Pacing};

/// How long to rest after a batch that took `took`: three times that, at
/// least `breather` (see the module doc).
pub fn rest_after(took: Duration, breather: Duration) -> Duration {
    (took * 3).max(breather)
}

/// Name of the leadership lock (`<prefix>:lock:prune`).
pub const LOCK_NAME: &str = "prune";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrunerOptions {
    /// Time between passes (default 10 min).
    pub interval: Duration,
    /// Rows deleted per statement (default 250: a smaller batch is a shorter
    /// WAL flush for the commits queued behind it).
    pub batch_size: usize,
    /// Pause between two batches (default 50 ms).
    pub breather: Duration,
}

impl Default for PrunerOptions {
    fn default() -> Self {
        PrunerOptions { interval: Duration::from_secs(600), batch_size: 250, breather: Duration::from_millis(50) }
    }
}

impl PrunerOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("pruner.interval", self.interval)?;
        check_batch("pruner.batch_size", self.batch_size)
    }
}

/// What one pass deleted, per kind (`Kind::ALL` order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub deleted: [u64; 5],
    /// Past weeks whose (emptied) partitions of runs were dropped.
    pub weeks_dropped: i32,
}

/// How far ahead each pass makes the weekly partitions of runs: two weeks,
/// so that a scheduler stopped for a week still finds them made.
const PARTITIONS_AHEAD: chrono::Duration = chrono::Duration::weeks(2);

#[derive(Clone)]
pub struct Pruner {
    pool: PgPool,
    queue: Queue,
    opts: PrunerOptions,
    holder: String,
    alarm: Arc<Alarm>,
}

impl Pruner {
    pub fn new(pool: PgPool, queue: Queue, opts: PrunerOptions) -> Result<Pruner, OptionsError> {
        opts.validate()?;
        let holder = switchyard_shared::ids::new_id("sched");
        Ok(Pruner { pool, queue, opts, holder, alarm: Arc::default() })
    }

    /// One pass over every project, without the lock: the coming weeks'
    /// partitions first (so that new runs never land in the default one),
    /// then the deletes, then the past weeks' partitions they emptied.
    pub async fn prune_once(&self) -> Result<PruneReport, Error> {
        let now = Utc::now();
        let made = retention::ensure_partitions(&self.pool, now, now + PARTITIONS_AHEAD).await?;
        if made > 0 {
            tracing::info!(made, "made the coming weeks' partitions of runs");
        }
        let mut report = PruneReport::default();
        for (project, days) in retention::projects(&self.pool).await? {
            let cutoff = now - chrono::Duration::days(days.into());
            for (i, kind) in Kind::ALL.into_iter().enumerate() {
                loop {
                    let started = std::time::Instant::now();
                    let n = retention::prune(&self.pool, kind, &project, cutoff, self.opts.batch_size as i64).await?;
                    report.deleted[i] += n;
                    if n < self.opts.batch_size as u64 {
                        break;
                    }
                    tokio::time::sleep(rest_after(started.elapsed(), self.opts.breather)).await;
                }
            }
        }
        report.weeks_dropped = retention::drop_empty_partitions(&self.pool, now).await?;
        if report.weeks_dropped > 0 {
            tracing::info!(weeks = report.weeks_dropped, "dropped the emptied partitions of past weeks' runs");
        }
        if report.deleted.iter().any(|n| *n > 0) {
            let by_kind: Vec<String> =
                Kind::ALL.iter().zip(report.deleted).map(|(k, n)| format!("{}={n}", k.as_str())).collect();
            tracing::info!(deleted = %by_kind.join(" "), "pruned finished work past its project's retention");
        }
        Ok(report)
    }

    async fn pass(&self) -> Result<Next, Error> {
        if self.queue.try_lock(LOCK_NAME, &self.holder, self.opts.interval).await? {
            self.prune_once().await?;
        }
        Ok(Next::Idle)
    }

    /// Passes every `interval` until shutdown.
    pub async fn run(&self, shutdown: Shutdown) {
        let pacing = Pacing { min_gap: self.opts.interval, max_sleep: self.opts.interval };
        pace::paced_passes("prune pass", pacing, &self.alarm, &shutdown, || self.pass()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rests_three_times_the_batch_at_least_the_breather() {
        let b = Duration::from_millis(50);
        assert_eq!(rest_after(Duration::from_millis(100), b), Duration::from_millis(300));
        assert_eq!(rest_after(Duration::from_millis(5), b), b);
    }
}
