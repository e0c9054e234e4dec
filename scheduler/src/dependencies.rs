//! The dependency resolver: releases or fails runs that wait for the runs
//! their trigger named in `depends_on`.
//!
//! A run with unmet dependencies is `pending` with `awaiting_dependencies`
//! and has no queue entry. Each pass locks (`FOR UPDATE SKIP LOCKED`, so
//! several schedulers share the work) the waiting runs whose dependencies
//! have all finished or one has failed, and:
//!
//! ```text
//! a dependency failed/cancelled/timed_out/expired --> failed (error_class dependency_failed)
//! all completed, due, window open                 --> queued  --> `ready`
//! all completed, delayed or window closed         --> pending --> `scheduled` at that time
//! ```
//!
//! A failed run is itself a failed dependency, so failures cascade down a
//! chain, one pass per level. While any run waits, its dependencies are
//! polled every `interval` rather than woken (they finish on the workers'
//! hot path, which publishes nothing), so a dependency finishing while a
//! pass looks at its dependents is seen by the next pass: nothing waits
//! forever. While no run waits, the loop sleeps (at most `max_sleep`) until
//! the api publishes a wake-up for a trigger that made one (`Queue::wake`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::domain::{schedule, RunStatus};
use switchyard_shared::queue::Queue;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::flow::{self, Resolution, Resolvable};

use crate::alarm::Alarm;
use crate::error::{check_batch, check_max_sleep, check_positive, Error, OptionsError};
use crate::pace::{self, Next, Pacing};

/// How long a probe that found a run waiting holds: meanwhile the loop
/// polls without probing again.
const REPROBE_AFTER: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DependencyOptions {
    /// Time between passes while a run waits (default 500 ms): how long a
    /// run may wait after its last dependency completed.
    pub interval: Duration,
    /// Longest sleep while no run waits (default 30 s): bounds the delay
    /// when a wake-up is lost.
    pub max_sleep: Duration,
    /// Runs resolved per transaction (default 500); a full batch is
    /// followed by another at once.
    pub batch_size: usize,
}

impl Default for DependencyOptions {
    fn default() -> Self {
        DependencyOptions { interval: Duration::from_millis(500), max_sleep: Duration::from_secs(30), batch_size: 500 }
    }
}

impl DependencyOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("dependencies.interval", self.interval)?;
        check_max_sleep("dependencies.max_sleep", self.max_sleep, "dependencies.interval", self.interval)?;
        check_batch("dependencies.batch_size", self.batch_size)
    }
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolveReport {
    pub queued: usize,
    pub scheduled: usize,
    pub failed: usize,
}

impl ResolveReport {
    fn total(&self) -> usize {
        self.queued + self.scheduled + self.failed
    }
}

/// The resolution of one run at `now`.
pub fn decide(r: &Resolvable, now: DateTime<Utc>) -> Resolution {
    if let Some(dep) = &r.failed_dependency {
        let (id, status) = dep.split_once(' ').unwrap_or((dep.as_str(), "failed"));
        return Resolution::Fail { error: format!("dependency {id} ended {status}") };
    }
    let due = r.scheduled_at.filter(|t| *t > now).unwrap_or(now);
    let start = schedule::admit_at(r.execution_window_cron.as_deref(), r.timezone.as_deref(), due).unwrap_or(due);
    if start > now {
        Resolution::Schedule { at: start }
    } else {
        Resolution::Queue
    }
}

#[derive(Clone)]
pub struct DependencyResolver {
    pool: PgPool,
    queue: Queue,
    opts: DependencyOptions,
    alarm: Arc<Alarm>,
}

impl DependencyResolver {
    pub fn new(pool: PgPool, queue: Queue, opts: DependencyOptions) -> Result<DependencyResolver, OptionsError> {
        opts.validate()?;
        Ok(DependencyResolver { pool, queue, opts, alarm: Arc::default() })
    }

    /// What brings the next pass forward (rung by the wake-up listener).
    pub fn alarm(&self) -> &Arc<Alarm> {
        &self.alarm
    }

    /// One batch at `now`: resolves up to `batch_size` runs.
    pub async fn resolve_once(&self, now: DateTime<Utc>) -> Result<ResolveReport, Error> {
        let mut tx = self.pool.begin().await?;
        let found = flow::lock_resolvable(&mut tx, self.opts.batch_size as i64).await?;
        if found.is_empty() {
            tx.rollback().await?;
            return Ok(ResolveReport::default());
        }
        let decisions: Vec<(String, Resolution)> = found.iter().map(|r| (r.id.clone(), decide(r, now))).collect();
        let changed = flow::apply_resolutions(&mut tx, &decisions).await?;
        tx.commit().await?;
        let mut report = ResolveReport::default();
        let now_ms = now.timestamp_millis();
        for run in changed {
            let due_ms = match run.status {
                RunStatus::Failed => {
                    report.failed += 1;
                    continue;
                }
                RunStatus::Queued => {
                    report.queued += 1;
                    0
                }
                _ => {
                    report.scheduled += 1;
                    run.scheduled_at.map_or(now_ms, |t| t.timestamp_millis())
                }
            };
            // The run is released in Postgres; if Redis is away the
            // reconciler enqueues it.
            if let Err(e) = self.queue.enqueue(&run.entry(), due_ms, now_ms).await {
                tracing::warn!(run_id = %run.id, error = %e, "enqueue of a released run failed; the reconciler will");
            }
        }
        tracing::debug!(?report, "resolved run dependencies");
        Ok(report)
    }

    /// One pass of the loop: nothing while no run waits (one index probe),
    /// else a batch and a look again after `interval`. `waiting_seen` is
    /// when a probe last found a run waiting: while that is recent the
    /// probe is skipped, so polling costs no more than it did before the
    /// loop learnt to sleep.
    async fn pass(&self, waiting_seen: &Mutex<Option<Instant>>) -> Result<Next, Error> {
        let seen = *waiting_seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.is_none_or(|t| t.elapsed() >= REPROBE_AFTER) {
            let waiting = flow::any_awaiting_dependencies(&self.pool).await?;
            *waiting_seen.lock().unwrap_or_else(|p| p.into_inner()) = waiting.then(Instant::now);
            if !waiting {
                return Ok(Next::Idle);
            }
        }
        let now = Utc::now();
        if self.resolve_once(now).await?.total() >= self.opts.batch_size {
            return Ok(Next::Now);
        }
        let interval = chrono::Duration::from_std(self.opts.interval).unwrap_or(chrono::Duration::zero());
        Ok(Next::At(now + interval))
    }

    /// Runs passes until shutdown (see the module doc).
    pub async fn run(&self, shutdown: Shutdown) {
        let pacing = Pacing { min_gap: self.opts.interval, max_sleep: self.opts.max_sleep };
        let waiting_seen = Mutex::new(None);
        pace::paced_passes("dependency pass", pacing, &self.alarm, &shutdown, || self.pass(&waiting_seen)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn failure_delay_and_window_decide() {
        let now = utc("2027-01-01T08:00:00Z");
        let mut r = Resolvable {
            id: "run_1".into(),
            scheduled_at: None,
            failed_dependency: Some("run_0 cancelled".into()),
            execution_window_cron: None,
            timezone: None,
        };
        assert_eq!(decide(&r, now), Resolution::Fail { error: "dependency run_0 ended cancelled".into() });
        r.failed_dependency = None;
        assert_eq!(decide(&r, now), Resolution::Queue);
        r.scheduled_at = Some(utc("2027-01-01T08:05:00Z"));
        assert_eq!(decide(&r, now), Resolution::Schedule { at: utc("2027-01-01T08:05:00Z") });
        r.execution_window_cron = Some("* 9 * * *".into());
        assert_eq!(decide(&r, now), Resolution::Schedule { at: utc("2027-01-01T09:00:00Z") });
    }

    #[test]
    fn options_are_validated() {
        assert!(DependencyOptions::default().validate().is_ok());
        let e = DependencyOptions { interval: Duration::ZERO, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "dependencies.interval");
        let short = DependencyOptions { max_sleep: Duration::from_millis(10), ..Default::default() };
        let e = short.validate().unwrap_err();
        assert_eq!(e.field, "dependencies.max_sleep");
    }
}
