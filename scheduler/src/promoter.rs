//! The delayed promoter: moves entries whose time has come (retries, delayed
//! triggers) from `scheduled` to `ready`, Postgres first.
//!
//! A worker claims a run only while Postgres says `queued`, so an entry must
//! never reach `ready` before its run does. Each pass:
//!
//! 1. reads up to `batch_size` due entries (a plain read: nothing moves);
//! 2. holds the runs of jobs whose execution window is closed: their
//!    scheduled_at / next_retry_at and their entries move to the window's
//!    next opening (`hold_until`, `reschedule.lua`), so every run of such a
//!    job (delayed, retried, cron-made or released by its dependencies)
//!    becomes `queued` only inside the window;
//! 3. flips the other runs `retrying`/`pending` -> `queued` (`mark_due_queued`);
//! 4. moves to `ready` the entries whose runs are now `queued`: those just
//!    flipped plus any that already were (a pass that died after step 3);
//! 5. drops the entries whose runs finished, vanished or are running (a
//!    running run is a lease's business, or the reconciler's if it was lost),
//!    and moves those of debounced runs whose window a trigger moved on
//!    since to their new time (`one_per_key::pushed_back`);
//! 6. sleeps until the next entry is due, between `min_sleep` and `max_sleep`.
//!
//! A crash at any point leaves Postgres ahead of Redis, never behind, and the
//! next pass finishes the job. Several schedulers may run this at once: the
//! flip locks its rows, and the Redis moves and drops act only on entries
//! still in `scheduled` and still due, so one entry moves once and a retry
//! scheduled again in the meantime is left alone.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::domain::{schedule, RunStatus};
use switchyard_shared::ids::{JobId, RunId};
use switchyard_shared::queue::{Entry, Queue};
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::{flow, one_per_key, runs};

use crate::error::{check_batch, check_positive, Error, OptionsError};
use crate::pace;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromoterOptions {
    /// Due entries handled per pass. Default 500.
    pub batch_size: usize,
    /// Longest sleep between passes (default 1 s): bounds how late an entry
    /// scheduled by another process while this one sleeps is promoted.
    pub max_sleep: Duration,
    /// Shortest sleep between passes (default 20 ms), so a backlog is worked
    /// through in steady batches rather than a busy loop.
    pub min_sleep: Duration,
}

impl Default for PromoterOptions {
    fn default() -> Self {
        PromoterOptions { batch_size: 500, max_sleep: Duration::from_secs(1), min_sleep: Duration::from_millis(20) }
    }
}

impl PromoterOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_batch("promoter.batch_size", self.batch_size)?;
        check_positive("promoter.min_sleep", self.min_sleep)?;
        if self.max_sleep < self.min_sleep {
            return Err(OptionsError::new("promoter.max_sleep", "must not be shorter than promoter.min_sleep"));
        }
        Ok(())
    }

    /// How long to sleep when the next entry is due in `next_due`.
    pub fn sleep_for(&self, next_due: Option<Duration>) -> Duration {
        next_due.unwrap_or(self.max_sleep).clamp(self.min_sleep, self.max_sleep)
    }
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromoteReport {
    /// Due entries read from `scheduled`.
    pub due: usize,
    /// Entries moved to `ready`.
    pub promoted: usize,
    /// Entries dropped because their runs need no dispatch.
    pub dropped: usize,
    /// Entries held back until their job's execution window opens.
    pub held: usize,
    /// Entries of debounced runs moved to the later time a trigger gave.
    pub pushed_back: usize,
    /// Time until the first entry left in `scheduled` is due (zero when one
    /// is due already); `None` when `scheduled` is empty.
    pub next_due: Option<Duration>,
}

/// What to do with one due entry, from its run's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Promote,
    Drop,
    Leave,
}

/// `flipped`: this pass moved the run to `queued`. `status`: the run's
/// status otherwise, `None` when the run no longer exists.
fn decide(flipped: bool, status: Option<&str>) -> Action {
    if flipped {
        return Action::Promote;
    }
    let Some(status) = status else {
        return Action::Drop;
    };
    match status.parse::<RunStatus>() {
        Ok(RunStatus::Queued) => Action::Promote,
        Ok(RunStatus::Running) => Action::Drop,
        Ok(s) if s.is_terminal() => Action::Drop,
        // pending/retrying again (re-scheduled since the flip), or a status
        // this build does not know: the next pass looks again.
        _ => Action::Leave,
    }
}

#[derive(Clone)]
pub struct Promoter {
    pool: PgPool,
    queue: Queue,
    opts: PromoterOptions,
}

impl Promoter {
    pub fn new(pool: PgPool, queue: Queue, opts: PromoterOptions) -> Result<Promoter, OptionsError> {
        opts.validate()?;
        Ok(Promoter { pool, queue, opts })
    }

    pub fn options(&self) -> &PromoterOptions {
        &self.opts
    }

    /// One pass at `now_ms` (see the module doc).
    pub async fn promote_once(&self, now_ms: i64) -> Result<PromoteReport, Error> {
        let due = self.queue.due_scheduled(now_ms, self.opts.batch_size).await?;
        let mut report = PromoteReport { due: due.len(), ..PromoteReport::default() };
        let (mut promote, mut drop, mut left) = (Vec::new(), Vec::new(), Vec::new());
        let held = self.hold_for_windows(&due, now_ms).await?;
        report.held = held.len();
        let due: Vec<Entry> = due.into_iter().filter(|e| !held.contains(&e.run_id)).collect();
        if !due.is_empty() {
            let mut ids: Vec<RunId> = due.iter().map(|e| e.run_id.clone()).collect();
            ids.sort();
            ids.dedup();
            let flipped: HashSet<RunId> = runs::mark_due_queued(&self.pool, &ids).await?.into_iter().collect();
            let rest: Vec<RunId> = ids.into_iter().filter(|id| !flipped.contains(id)).collect();
            let statuses = statuses(&self.pool, &rest).await?;
            for entry in due {
                let flip = flipped.contains(&entry.run_id);
                match decide(flip, statuses.get(&entry.run_id).map(String::as_str)) {
                    Action::Promote => promote.push(entry),
                    Action::Drop => drop.push(entry),
                    Action::Leave => left.push(entry),
                }
            }
        }
        report.pushed_back = self.push_back(&left).await?;
        // Drop first, so the wait promote reports ignores what was dropped.
        report.dropped = self.queue.remove_scheduled(&drop, now_ms).await?;
        let (moved, next_due) = self.queue.promote(&promote, now_ms).await?;
        report.promoted = moved;
        report.next_due = next_due;
        if report.promoted > 0 || report.dropped > 0 {
            tracing::debug!(promoted = report.promoted, dropped = report.dropped, "promoted due runs");
        }
        Ok(report)
    }

    /// Gives the entries of debounced runs whose window a trigger moved on
    /// the run's new time, so they are not read again until then. Returns
    /// how many moved.
    async fn push_back(&self, left: &[Entry]) -> Result<usize, Error> {
        if left.is_empty() {
            return Ok(0);
        }
        let ids: Vec<RunId> = left.iter().map(|e| e.run_id.clone()).collect();
        let due: HashMap<RunId, DateTime<Utc>> =
            one_per_key::pushed_back(&self.pool, &ids).await?.into_iter().collect();
        let mut moved = 0;
        for e in left {
            if let Some(at) = due.get(&e.run_id) {
                moved += self.queue.reschedule(std::slice::from_ref(e), at.timestamp_millis()).await?;
            }
        }
        Ok(moved)
    }

    /// Holds the due runs of jobs whose execution window is closed at
    /// `now_ms` until it opens. Returns the ids of the runs held.
    async fn hold_for_windows(&self, due: &[Entry], now_ms: i64) -> Result<HashSet<RunId>, Error> {
        let mut held = HashSet::new();
        if due.is_empty() {
            return Ok(held);
        }
        let mut jobs: Vec<JobId> = due.iter().map(|e| e.job_id.clone()).collect();
        jobs.sort();
        jobs.dedup();
        let windows = flow::windows_of(&self.pool, &jobs).await?;
        if windows.is_empty() {
            return Ok(held);
        }
        let Some(now) = DateTime::<Utc>::from_timestamp_millis(now_ms) else {
            return Ok(held);
        };
        let mut by_opening: HashMap<DateTime<Utc>, Vec<&Entry>> = HashMap::new();
        for e in due {
            let Some((window, tz)) = windows.get(&e.job_id) else { continue };
            // A window that never opens again cannot be saved; should one
            // appear anyway, its runs are not held forever.
            if let Ok(open) = schedule::admit_at(Some(window), tz.as_deref(), now) {
                if open > now {
                    by_opening.entry(open).or_default().push(e);
                }
            }
        }
        for (open, entries) in by_opening {
            let ids: Vec<RunId> = entries.iter().map(|e| e.run_id.clone()).collect();
            let changed: HashSet<RunId> = flow::hold_until(&self.pool, &ids, open).await?.into_iter().collect();
            let moved: Vec<Entry> = entries.into_iter().filter(|e| changed.contains(&e.run_id)).cloned().collect();
            self.queue.reschedule(&moved, open.timestamp_millis()).await?;
            held.extend(changed);
        }
        Ok(held)
    }

    /// Runs passes until shutdown. A pass in progress finishes first.
    pub async fn run(&self, shutdown: Shutdown) {
        let mut failures = 0;
        loop {
            let pause = match self.promote_once(pace::now_ms()).await {
                Ok(report) => {
                    failures = 0;
                    self.opts.sleep_for(report.next_due)
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, failures, "promoter pass failed");
                    pace::error_backoff(failures)
                }
            };
            if !pace::sleep(pause, &shutdown).await {
                return;
            }
        }
    }
}

/// Status of each run among `ids` that still exists, in one query.
async fn statuses(pool: &PgPool, ids: &[RunId]) -> Result<HashMap<RunId, String>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    switchyard_shared::store::runs::statuses(pool, ids).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_queued_runs_are_promoted() {
        assert_eq!(decide(true, None), Action::Promote, "flipped by this pass");
        assert_eq!(decide(false, Some("queued")), Action::Promote, "flipped by an earlier pass");
        assert_eq!(decide(false, None), Action::Drop, "run deleted");
        for s in ["completed", "failed", "timed_out", "cancelled", "expired", "running"] {
            assert_eq!(decide(false, Some(s)), Action::Drop, "{s}");
        }
        for s in ["pending", "retrying", "unknown"] {
            assert_eq!(decide(false, Some(s)), Action::Leave, "{s}");
        }
    }

    #[test]
    fn sleep_is_bounded() {
        let o = PromoterOptions::default();
        assert_eq!(o.sleep_for(None), Duration::from_secs(1));
        assert_eq!(o.sleep_for(Some(Duration::ZERO)), Duration::from_millis(20));
        assert_eq!(o.sleep_for(Some(Duration::from_millis(300))), Duration::from_millis(300));
        assert_eq!(o.sleep_for(Some(Duration::from_secs(3600))), Duration::from_secs(1));
    }

    #[test]
    fn options_are_validated() {
        assert!(PromoterOptions::default().validate().is_ok());
        let e = PromoterOptions { batch_size: 0, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "promoter.batch_size");
        let e = PromoterOptions { min_sleep: Duration::ZERO, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "promoter.min_sleep");
        let e = PromoterOptions { max_sleep: Duration::from_millis(5), ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "promoter.max_sleep");
    }
}
