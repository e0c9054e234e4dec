//! Where a run's entry belongs in Redis, read from its Postgres row, and
//! putting it there. The reaper and the reconciler both use this one rule.
//!
//! | status | placement |
//! |---|---|
//! | queued | `ready` |
//! | retrying | `scheduled` at next_retry_at (now when unset) |
//! | pending, awaiting dependencies | nowhere: the dependency resolver releases it |
//! | pending with scheduled_at | `scheduled` at scheduled_at (a delay, or an execution window's opening) |
//! | pending without | nowhere yet: held by something other than time |
//! | running | held by a worker's lease; only a lost one needs recovery |
//! | terminal | nowhere |
//!
//! Only a `queued` run goes to `ready`: a worker claims nothing else. A
//! retrying or delayed run goes to `scheduled` even when its time has
//! passed, and the promoter flips it to `queued` before moving it on.

use switchyard_shared::domain::RunStatus;
use switchyard_shared::queue::{Entry, Queue, QueueError};
use switchyard_shared::store::Run;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// `queued`: dispatchable now.
    Ready,
    /// Waiting for a time, in ms since the epoch (0: no time recorded, due now).
    Scheduled { due_ms: i64 },
    /// `running`: a worker holds it. The reaper handles an expired lease;
    /// the reconciler a lease that vanished with Redis.
    Running,
    /// `pending` with no time to wait for: blocked by dependencies or an
    /// execution window, which are released elsewhere.
    Blocked,
    /// Terminal: no entry anywhere.
    Finished,
}

pub fn placement(run: &Run) -> Placement {
    match run.status {
        RunStatus::Queued => Placement::Ready,
        RunStatus::Retrying => Placement::Scheduled { due_ms: run.next_retry_at.map_or(0, |t| t.timestamp_millis()) },
        RunStatus::Pending if run.awaiting_dependencies => Placement::Blocked,
        RunStatus::Pending => match run.scheduled_at {
            Some(t) => Placement::Scheduled { due_ms: t.timestamp_millis() },
            None => Placement::Blocked,
        },
        RunStatus::Running => Placement::Running,
        RunStatus::Completed | RunStatus::Failed | RunStatus::TimedOut | RunStatus::Cancelled | RunStatus::Expired => {
            Placement::Finished
        }
    }
}

/// The arguments for `Queue::enqueue` that put an entry where `placement`
/// says: `(due_ms, now_ms)`, or `None` when it belongs nowhere. For a
/// scheduled entry "now" is passed as just before its due time, so one whose
/// time has passed still lands in `scheduled` rather than `ready`.
pub fn enqueue_args(placement: Placement, now_ms: i64) -> Option<(i64, i64)> {
    match placement {
        Placement::Ready => Some((0, now_ms)),
        Placement::Scheduled { due_ms } => {
            let due = if due_ms > 0 { due_ms } else { now_ms };
            Some((due, now_ms.min(due - 1)))
        }
        Placement::Running | Placement::Blocked | Placement::Finished => None,
    }
}

/// Puts `entry` where `placement` says, unless it is already queued
/// somewhere. Returns whether it was added.
pub async fn restore(queue: &Queue, entry: &Entry, placement: Placement, now_ms: i64) -> Result<bool, QueueError> {
    match enqueue_args(placement, now_ms) {
        Some((due, now)) => queue.enqueue(entry, due, now).await,
        None => Ok(false),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    pub(crate) fn run_with(status: &str) -> Run {
        let status = status.parse().unwrap();
        let t = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let new = switchyard_shared::store::runs::NewRun {
            id: "run_1".into(),
            project_id: "prj".into(),
            job_id: "job_1".into(),
            job_version: 1,
            job_version_id: "jobv_1".into(),
            triggered_by: "api".into(),
            execution_mode: "sync".into(),
            metadata: serde_json::json!({}),
            tags: serde_json::json!({}),
            ..Default::default()
        };
        Run { status, ..Run::from_new(new, t) }
    }

    #[test]
    fn each_status_has_its_place() {
        let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 1, 0).unwrap();
        let ms = at.timestamp_millis();
        assert_eq!(placement(&run_with("queued")), Placement::Ready);
        let mut r = run_with("retrying");
        assert_eq!(placement(&r), Placement::Scheduled { due_ms: 0 });
        r.next_retry_at = Some(at);
        assert_eq!(placement(&r), Placement::Scheduled { due_ms: ms });
        let mut p = run_with("pending");
        assert_eq!(placement(&p), Placement::Blocked);
        p.scheduled_at = Some(at);
        assert_eq!(placement(&p), Placement::Scheduled { due_ms: ms });
        p.awaiting_dependencies = true;
        assert_eq!(placement(&p), Placement::Blocked, "a delay waits for the dependencies too");
        assert_eq!(placement(&run_with("running")), Placement::Running);
        for s in ["completed", "failed", "timed_out", "cancelled", "expired"] {
            assert_eq!(placement(&run_with(s)), Placement::Finished, "{s}");
        }
    }

    #[test]
    fn only_queued_runs_are_enqueued_as_ready() {
        let now = 1_000_000;
        // enqueue.lua puts an entry in `scheduled` exactly when due > now.
        let in_scheduled = |p| enqueue_args(p, now).is_some_and(|(due, now)| due > now);
        assert_eq!(enqueue_args(Placement::Ready, now), Some((0, now)));
        assert!(!in_scheduled(Placement::Ready));
        for due_ms in [0, 1, now - 5_000, now, now + 5_000] {
            assert!(in_scheduled(Placement::Scheduled { due_ms }), "due {due_ms}");
        }
        assert_eq!(enqueue_args(Placement::Scheduled { due_ms: now + 5 }, now), Some((now + 5, now)));
        assert_eq!(enqueue_args(Placement::Scheduled { due_ms: 0 }, now), Some((now, now - 1)), "due now");
        assert_eq!(enqueue_args(Placement::Scheduled { due_ms: 7 }, now), Some((7, 6)), "keeps its own time");
        for p in [Placement::Running, Placement::Blocked, Placement::Finished] {
            assert_eq!(enqueue_args(p, now), None);
        }
    }
}
