//! The heartbeat sweep: async runs whose target went quiet.
//!
//! After an async target answers 202 the worker lets go of the run: no lease,
//! no concurrency slot (see `store::settle`). From then on the target keeps
//! it alive with SDK heartbeats (`POST /sdk/v1/runs/{id}/heartbeat`), and
//! finishes it with `complete` or `fail`. A run whose last heartbeat (or
//! acceptance) is older than its attempt timeout is ended here as if the
//! attempt had timed out:
//!
//! ```text
//! running (async, silent > timeout) ── policy allows ──► retrying ─► queued when due (promoter)
//!                                   └─ exhausted ──────► timed_out (+ terminal webhook)
//! ```
//!
//! Safe with many schedulers: the outcome is written fenced by the run's
//! dispatch token and only while it is still running, so of two sweeps (or
//! a sweep and a late `complete`) exactly one lands.
//!
//! The loop does not poll: after a pass it sleeps until the first running
//! async run would go overdue (`settle::next_async_deadline`; heartbeats
//! only push that later, so waking then is never late), at most
//! `max_sleep`. A worker that records an acceptance, and the api when a job
//! changes (its timeout may be shorter), publish a wake-up (`Queue::wake`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::domain::retry::AttemptEnd;
use switchyard_shared::domain::RunStatus;
use switchyard_shared::queue::Queue;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::settle::{self, HEARTBEAT_TIMEOUT};
use switchyard_shared::store::{jobs, runs};

use crate::alarm::Alarm;
use crate::error::{check_batch, check_max_sleep, check_positive, Error, OptionsError};
use crate::pace::{self, Next, Pacing};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatOptions {
    /// Least time between passes (default 1 s): how late past its timeout
    /// a silent run is noticed, at most.
    pub interval: Duration,
    /// Longest sleep (default 30 s): bounds the delay when a wake-up is lost.
    pub max_sleep: Duration,
    /// Overdue runs handled per pass (default 200); a full batch is followed
    /// by another pass at once.
    pub batch_size: usize,
}

impl Default for HeartbeatOptions {
    fn default() -> Self {
        HeartbeatOptions { interval: Duration::from_secs(1), max_sleep: Duration::from_secs(30), batch_size: 200 }
    }
}

impl HeartbeatOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("heartbeats.interval", self.interval)?;
        check_max_sleep("heartbeats.max_sleep", self.max_sleep, "heartbeats.interval", self.interval)?;
        check_batch("heartbeats.batch_size", self.batch_size)
    }
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatReport {
    /// Silent async runs found.
    pub overdue: usize,
    /// Of those, put back for another attempt.
    pub retrying: usize,
    /// Of those, ended (`timed_out`, or `failed` when their job is gone).
    pub ended: usize,
    /// Finished, cancelled or heard from between the query and the write.
    pub skipped: usize,
}

#[derive(Clone)]
pub struct HeartbeatSweeper {
    pool: PgPool,
    queue: Queue,
    opts: HeartbeatOptions,
    alarm: Arc<Alarm>,
}

impl HeartbeatSweeper {
    pub fn new(pool: PgPool, queue: Queue, opts: HeartbeatOptions) -> Result<HeartbeatSweeper, OptionsError> {
        opts.validate()?;
        Ok(HeartbeatSweeper { pool, queue, opts, alarm: Arc::default() })
    }

    /// What brings the next pass forward (rung by the wake-up listener).
    pub fn alarm(&self) -> &Arc<Alarm> {
        &self.alarm
    }

    pub fn options(&self) -> &HeartbeatOptions {
        &self.opts
    }

    /// One pass at `now`: ends every async run silent for longer than its timeout.
    pub async fn sweep_once(&self, now: DateTime<Utc>) -> Result<HeartbeatReport, Error> {
        let overdue = settle::overdue_async(&self.pool, now, self.opts.batch_size as i64).await?;
        let mut report = HeartbeatReport { overdue: overdue.len(), ..HeartbeatReport::default() };
        for run in overdue {
            // The page may be a moment old: a heartbeat that just arrived wins.
            let Some(fresh) = runs::get(&self.pool, &run.id).await? else {
                report.skipped += 1;
                continue;
            };
            if fresh.dispatch_token != run.dispatch_token
                || fresh.heartbeat_at != run.heartbeat_at
                || fresh.status != RunStatus::Running
            {
                report.skipped += 1;
                continue;
            }
            let spec = jobs::spec_for_run(&self.pool, &run.job_id, &run.job_version_id).await?;
            let (spec, ending) = match spec {
                Some(spec) => {
                    let secs = settle::attempt_timeout(&spec, &run).as_secs();
                    let ending = AttemptEnd::Failed {
                        class: HEARTBEAT_TIMEOUT.to_string(),
                        error: format!("no heartbeat from the target for {secs}s (the attempt timeout)"),
                        retryable: true,
                        retry_after: None,
                        timed_out: true,
                    };
                    (spec, ending)
                }
                None => {
                    let ending = AttemptEnd::Failed {
                        class: "job_missing".to_string(),
                        error: format!("job {} (version {}) no longer exists", run.job_id, run.job_version_id),
                        retryable: false,
                        retry_after: None,
                        timed_out: false,
                    };
                    (switchyard_shared::domain::JobSpec::default(), ending)
                }
            };
            match settle::settle(&self.pool, &self.queue, &fresh, &spec, ending).await? {
                None => report.skipped += 1,
                Some((outcome, after)) if outcome.status == RunStatus::Retrying => {
                    tracing::info!(run_id = %after.id, attempt = after.attempt, "async run went silent; retrying");
                    report.retrying += 1;
                }
                Some((outcome, after)) => {
                    tracing::warn!(run_id = %after.id, status = outcome.status.as_str(), "async run went silent; ended");
                    report.ended += 1;
                }
            }
        }
        Ok(report)
    }

    /// One pass of the loop: a sweep, then when the next run goes overdue.
    async fn pass(&self) -> Result<Next, Error> {
        if self.sweep_once(Utc::now()).await?.overdue >= self.opts.batch_size {
            return Ok(Next::Now);
        }
        Ok(settle::next_async_deadline(&self.pool).await?.map_or(Next::Idle, Next::At))
    }

    /// Runs passes until shutdown, each when a run may be overdue (see the
    /// module doc).
    pub async fn run(&self, shutdown: Shutdown) {
        let pacing = Pacing { min_gap: self.opts.interval, max_sleep: self.opts.max_sleep };
        pace::paced_passes("heartbeat sweep", pacing, &self.alarm, &shutdown, || self.pass()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        assert!(HeartbeatOptions::default().validate().is_ok());
        let e = HeartbeatOptions { interval: Duration::ZERO, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "heartbeats.interval");
        let e = HeartbeatOptions { batch_size: 0, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "heartbeats.batch_size");
        let e = HeartbeatOptions { max_sleep: Duration::from_millis(10), ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "heartbeats.max_sleep");
    }
}
