//! The reconciler: rebuilds Redis from Postgres.
//!
//! Redis holds no truth: Postgres records every run, Redis only its queue
//! entries, leases and limits, so Redis may be lost. When it loses data (a
//! flush, a restart without persistence, a failover) or a process dies
//! between its Postgres write and its Redis write, the reconciler puts back
//! what is missing. A sweep:
//!
//! 1. pushes every live job's limits (`limits` hash) first, so no run of a
//!    paused or capped job is dispatched before its limits are back;
//! 2. pages through every non-terminal run in id order and enqueues it where
//!    [`placement`](crate::placement) says: `queued` to `ready`, retrying and
//!    delayed runs to `scheduled` (even when due: the promoter flips them to
//!    `queued` first). `enqueue.lua` leaves an entry that is present anywhere
//!    alone, so nothing is ever queued twice;
//! 3. recovers `running` runs that hold no lease and have shown no sign of
//!    life (heartbeat, else start) for longer than the lease: their worker
//!    died and the lease went with Redis. They go back to `queued` for a
//!    redelivery of the same attempt;
//! 4. sets the "initialised" marker (the epoch) if it was missing when the
//!    sweep began. If the marker vanished during the sweep (Redis lost
//!    again), it is left unset, so the next check sweeps once more;
//! 5. drops the key ends fair queueing no longer needs (`lua/fair_sweep.lua`):
//!    dequeue leaves them behind so that a lease costs no lookup of its key.
//!
//! Caps and rate limits through a loss. The in-flight counts lived in
//! Redis, and Postgres cannot rebuild them: a worker records `running` only
//! with the outcome or after 500 ms. The workers can: each renews its
//! leases with the epoch it leased them under, and takes a lease Redis lost
//! back with its slots (`lua/extend_leases.lua`). So the new epoch carries
//! a hold of half a lease (workers renew every third of one), and until it
//! passes dequeue keeps capped and rate-limited jobs' entries back; before
//! the epoch exists it keeps them back too, and a job whose limits are not
//! pushed yet is parked whatever they are (`lua/dequeue.lua`). For the
//! same reason the sweep that rebuilds leaves `running` runs alone (step 3):
//! their workers may still hold them, and the next sweep sees their leases.
//!
//! When: at start, every `interval`, and within `check_interval` of the
//! marker disappearing. Leadership is a Redis lock (`SET NX PX`) named
//! `reconcile`, held for one interval and never released: whoever takes it
//! sweeps, the others skip until it expires. A flush removes the lock with
//! the marker, so a rebuild never waits for it. The lock only saves
//! duplicated work; concurrent sweeps are harmless, since every step is
//! idempotent or conditional on the run's status.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::domain::RunStatus;
use switchyard_shared::queue::{Queue, RATE_GUARD_MS};
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::{jobs, runs, Run};

use crate::error::{check_batch, check_positive, Error, OptionsError};
use crate::pace;
use crate::placement::{placement, restore, Placement};

/// Name of the leadership lock (`<prefix>:lock:reconcile`).
pub const LOCK_NAME: &str = "reconcile";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcilerOptions {
    /// Time between regular sweeps (`RECONCILE_INTERVAL_SECS`, default 30 s);
    /// also how long the leadership lock is held.
    pub interval: Duration,
    /// How often to look for the initialised marker (default 1 s): bounds
    /// how long a Redis that lost its data stays empty.
    pub check_interval: Duration,
    /// Runs and jobs read per query (default 500).
    pub page_size: usize,
    /// A `running` run without a lease and silent for longer than this is
    /// lost (`LEASE_SECS`, default 30 s: the lease a live worker renews).
    pub lease: Duration,
}

impl Default for ReconcilerOptions {
    fn default() -> Self {
        ReconcilerOptions {
            interval: Duration::from_secs(30),
            check_interval: Duration::from_secs(1),
            page_size: 500,
            lease: Duration::from_secs(30),
        }
    }
}

impl ReconcilerOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("reconciler.interval", self.interval)?;
        check_positive("reconciler.check_interval", self.check_interval)?;
        check_positive("reconciler.lease", self.lease)?;
        check_batch("reconciler.page_size", self.page_size)
    }
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Non-terminal runs looked at.
    pub runs_seen: usize,
    /// Entries put back because they were missing from Redis.
    pub re_enqueued: usize,
    /// Running runs whose worker was lost, put back for redelivery.
    pub recovered_running: usize,
    /// Jobs whose limits were written to Redis.
    pub limits_pushed: usize,
    /// Sends put back into rate-limit logs by a rebuild.
    pub rate_sends_restored: usize,
    /// The sweep set the initialised marker (it was missing at the start).
    pub marked_initialised: bool,
    /// Redis lost its data again during the sweep; another sweep follows.
    pub lost_during_sweep: bool,
    /// Key ends of fair queueing dropped (lua/fair_sweep.lua).
    pub fair_ends_dropped: usize,
}

#[derive(Clone)]
pub struct Reconciler {
    pool: PgPool,
    queue: Queue,
    opts: ReconcilerOptions,
    /// This process's name on the lock.
    holder: String,
}

impl Reconciler {
    pub fn new(pool: PgPool, queue: Queue, opts: ReconcilerOptions) -> Result<Reconciler, OptionsError> {
        opts.validate()?;
        let holder = switchyard_shared::ids::new_id("sched");
        Ok(Reconciler { pool, queue, opts, holder })
    }

    pub fn options(&self) -> &ReconcilerOptions {
        &self.opts
    }

    /// One full sweep at `now`, without the lock (see the module doc).
    pub async fn sweep(&self, now: DateTime<Utc>) -> Result<ReconcileReport, Error> {
        let now_ms = now.timestamp_millis();
        let was_initialised = self.queue.is_initialised().await?;
        let mut report = ReconcileReport::default();
        let page = self.opts.page_size as i64;

        // Rate-limit buckets to refill when this sweep rebuilds: bucket ->
        // (max, window ms, the jobs that send into it, their project: a
        // bucket belongs to one project).
        let mut buckets: HashMap<String, (i64, i64, Vec<String>, String)> = HashMap::new();
        let mut after = String::new();
        loop {
            let jobs = jobs::limits_page(&self.pool, &after, page).await?;
            for job in &jobs {
                self.queue.set_limits(&job.project_id, &job.id, job.field().as_deref()).await?;
                report.limits_pushed += 1;
                if !was_initialised {
                    for (b, max, window_ms) in job.spec.rate_buckets(&job.id, &job.project_id) {
                        let e = buckets.entry(b).or_insert_with(|| (0, 0, Vec::new(), job.project_id.clone()));
                        (e.0, e.1) = (e.0.max(max), e.1.max(window_ms));
                        e.2.push(job.id.clone());
                    }
                }
            }
            match jobs.last() {
                Some(last) if jobs.len() as i64 == page => after = last.id.clone(),
                _ => break,
            }
        }

        // Each bucket restarts with the sends Postgres recorded in its window
        // (the newest `max` are all admission looks at); dispatches still in
        // flight are logged by their workers when they take their leases
        // back (lua/extend_leases.lua).
        for (bucket, (max, window_ms, job_ids, project_id)) in &buckets {
            let since = now - chrono::Duration::milliseconds(window_ms + RATE_GUARD_MS);
            let sends = runs::recent_sends(&self.pool, job_ids, since, *max).await?;
            report.rate_sends_restored += self.queue.seed_rate(project_id, bucket, &sends).await?;
        }

        let mut after = String::new();
        loop {
            let runs = runs::active_page(&self.pool, &after, page).await?;
            report.runs_seen += runs.len();
            for run in &runs {
                match placement(run) {
                    p @ (Placement::Ready | Placement::Scheduled { .. }) => {
                        if restore(&self.queue, &run.entry(), p, now_ms).await? {
                            report.re_enqueued += 1;
                        }
                    }
                    Placement::Running if was_initialised => {
                        if self.recover_if_lost(run, now).await? {
                            report.recovered_running += 1;
                        }
                    }
                    Placement::Running | Placement::Blocked | Placement::Finished => {}
                }
            }
            match runs.last() {
                Some(last) if runs.len() as i64 == page => after = last.id.to_string(),
                _ => break,
            }
        }

        if !was_initialised {
            let hold_until = now_ms + (self.opts.lease / 2).as_millis() as i64;
            self.queue.mark_initialised(hold_until).await?;
            report.marked_initialised = true;
        } else if !self.queue.is_initialised().await? {
            report.lost_during_sweep = true;
        }
        // Redis work only: the key ends fair queueing leaves behind.
        report.fair_ends_dropped = self.queue.sweep_fair().await?;
        if report.re_enqueued > 0 || report.recovered_running > 0 || report.marked_initialised {
            tracing::info!(
                re_enqueued = report.re_enqueued,
                recovered_running = report.recovered_running,
                limits_pushed = report.limits_pushed,
                rate_sends_restored = report.rate_sends_restored,
                runs_seen = report.runs_seen,
                rebuilt = report.marked_initialised,
                "reconciled redis with postgres"
            );
        } else {
            tracing::debug!(runs_seen = report.runs_seen, limits_pushed = report.limits_pushed, "redis in step");
        }
        Ok(report)
    }

    /// A sweep if this process takes the lock; `None` when another holds it.
    pub async fn sweep_if_leader(&self, now: DateTime<Utc>) -> Result<Option<ReconcileReport>, Error> {
        if !self.queue.try_lock(LOCK_NAME, &self.holder, self.opts.interval).await? {
            return Ok(None);
        }
        self.sweep(now).await.map(Some)
    }

    /// Puts a `running` run back to `queued` when its worker is gone: no
    /// lease in Redis and no sign of life for longer than a lease.
    async fn recover_if_lost(&self, run: &Run, now: DateTime<Utc>) -> Result<bool, Error> {
        let cutoff = chrono::Duration::from_std(self.opts.lease).ok().and_then(|l| now.checked_sub_signed(l));
        let Some(cutoff) = cutoff else {
            return Ok(false);
        };
        // An accepted async run has no lease by design: the heartbeat sweep
        // watches it, with the run's own timeout.
        let stale =
            |r: &Run| r.status == RunStatus::Running && r.async_accepted_at.is_none() && last_sign_of_life(r) < cutoff;
        if !stale(run) || self.queue.is_leased(&run.entry()).await? {
            return Ok(false);
        }
        // The page may be seconds old: look again before taking it back.
        match runs::get(&self.pool, &run.id).await? {
            Some(fresh) if stale(&fresh) => {}
            _ => return Ok(false),
        }
        let Some(requeued) = runs::requeue_lost(&self.pool, &run.id).await? else {
            return Ok(false);
        };
        tracing::warn!(run_id = %run.id, "running run has no lease and no recent heartbeat; redelivering its attempt");
        self.queue.enqueue(&requeued.entry(), 0, now.timestamp_millis()).await?;
        Ok(true)
    }

    /// Sweeps at start, every interval, and as soon as Redis is found empty,
    /// until shutdown. A sweep in progress is abandoned on shutdown, which is
    /// safe: the next sweep redoes whatever it left.
    pub async fn run(&self, shutdown: Shutdown) {
        let mut last_try: Option<Instant> = None;
        let mut failures = 0;
        loop {
            let pause = match self.check(&mut last_try, &shutdown).await {
                Ok(()) => {
                    failures = 0;
                    self.opts.check_interval
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, failures, "reconciler pass failed");
                    pace::error_backoff(failures).max(self.opts.check_interval)
                }
            };
            if shutdown.is_cancelled() || !pace::sleep(pause, &shutdown).await {
                return;
            }
        }
    }

    async fn check(&self, last_try: &mut Option<Instant>, shutdown: &Shutdown) -> Result<(), Error> {
        let lost = !self.queue.is_initialised().await?;
        let due = last_try.is_none_or(|t| t.elapsed() >= self.opts.interval);
        if !lost && !due {
            return Ok(());
        }
        if lost {
            // Logged at info by the sweep itself (`rebuilt`), by whichever
            // process takes the lock.
            tracing::debug!("redis has no initialised marker; rebuilding it from postgres");
        }
        let outcome = tokio::select! {
            r = self.sweep_if_leader(Utc::now()) => r?,
            _ = shutdown.cancelled() => return Ok(()),
        };
        // Someone swept (or holds the lock for this interval): wait for the
        // next one. A missing marker is retried at the next check instead.
        if outcome.is_some() || !lost {
            *last_try = Some(Instant::now());
        }
        Ok(())
    }
}

/// When a running run last showed it was alive.
fn last_sign_of_life(run: &Run) -> DateTime<Utc> {
    run.heartbeat_at.or(run.started_at).unwrap_or(run.updated_at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::tests::run_with;
    use chrono::TimeZone;

    #[test]
    fn sign_of_life_prefers_heartbeat() {
        let t = |m| Utc.with_ymd_and_hms(2026, 1, 1, 0, m, 0).unwrap();
        let mut r = run_with("running");
        assert_eq!(last_sign_of_life(&r), r.updated_at);
        r.started_at = Some(t(1));
        assert_eq!(last_sign_of_life(&r), t(1));
        r.heartbeat_at = Some(t(5));
        assert_eq!(last_sign_of_life(&r), t(5));
    }

    #[test]
    fn options_are_validated() {
        assert!(ReconcilerOptions::default().validate().is_ok());
        for (opts, field) in [
            (ReconcilerOptions { interval: Duration::ZERO, ..Default::default() }, "reconciler.interval"),
            (ReconcilerOptions { check_interval: Duration::ZERO, ..Default::default() }, "reconciler.check_interval"),
            (ReconcilerOptions { lease: Duration::ZERO, ..Default::default() }, "reconciler.lease"),
            (ReconcilerOptions { page_size: 0, ..Default::default() }, "reconciler.page_size"),
        ] {
            assert_eq!(opts.validate().unwrap_err().field, field);
        }
    }
}
