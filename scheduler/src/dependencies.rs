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
//! chain, one pass per level. Runs are polled rather than woken, so a
//! dependency finishing while a pass looks at its dependents is seen by the
//! next pass: nothing waits forever.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::domain::schedule;
use switchyard_shared::queue::Queue;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::flow::{self, Resolution, Resolvable};

use crate::error::{check_batch, check_positive, Error, OptionsError};
use crate::pace;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DependencyOptions {
    /// Time between passes (default 500 ms): how long a run may wait after
    /// its last dependency completed.
    pub interval: Duration,
    /// Runs resolved per transaction (default 500); a full batch is
    /// followed by another at once.
    pub batch_size: usize,
}

impl Default for DependencyOptions {
    fn default() -> Self {
        DependencyOptions { interval: Duration::from_millis(500), batch_size: 500 }
    }
}

impl DependencyOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("dependencies.interval", self.interval)?;
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
}

impl DependencyResolver {
    pub fn new(pool: PgPool, queue: Queue, opts: DependencyOptions) -> Result<DependencyResolver, OptionsError> {
        opts.validate()?;
        Ok(DependencyResolver { pool, queue, opts })
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
            let due_ms = match run.status.as_str() {
                "failed" => {
                    report.failed += 1;
                    continue;
                }
                "queued" => {
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

    /// Runs passes until shutdown.
    pub async fn run(&self, shutdown: Shutdown) {
        pace::batch_passes("dependency pass", self.opts.interval, &shutdown, || async {
            self.resolve_once(Utc::now()).await.map(|r| r.total() >= self.opts.batch_size)
        })
        .await
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
    }
}
