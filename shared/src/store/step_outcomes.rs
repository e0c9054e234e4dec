//! A step's job run ending moves its workflow run on in the same
//! transaction.
//!
//! The worker records outcomes in groups ([`runs::finish_many`]). When a
//! group holds the outcome of a workflow step's job run, the group is
//! written by [`finish_steps`] instead: the outcomes, then the advances
//! of the workflow runs whose steps ended, together
//! (`workflow_engine::advance_ended_steps_in`: one statement finds and
//! locks them, one reads their steps, one inserts the job runs they start
//! and one writes their steps and decisions), then one commit. The next
//! step's job run is inserted by that commit and enqueued by the worker right after, so the common case of a chain costs
//! one write transaction per step, with no outbox row, no notification and
//! no pass of the scheduler.
//!
//! The scheduler stays the engine of last resort, and nothing is lost when
//! the shortcut is not taken: a workflow run another process holds (its
//! lock is taken with `SKIP LOCKED`) gets the outbox row the job-run
//! trigger would have written (migration 0010), so its holder or the
//! scheduler advances it; and if the transaction fails for any reason, the
//! caller writes the same outcomes the plain way, where the trigger writes
//! every outbox row. A pass that leaves a run with a wake-up time (a
//! sleep's end, the run's deadline) notifies the scheduler, which sleeps
//! until the earliest one it knows.
//!
//! The setting `switchyard.inline_steps` (migration 0027), set for the
//! transaction by its `BEGIN`, keeps the job-run trigger from writing the
//! outbox rows: this transaction advances those runs itself.

use chrono::Utc;
use sqlx::PgPool;

use super::runs::{self, Outcome};
use super::workflow_engine::{self, Pending, Versions};
use crate::ids::{RunId, StepRunId};
use crate::queue::Queue;

/// Records `items` as [`runs::finish_many`] does and advances the workflow
/// runs whose steps' job runs they end, in one transaction. Returns, in
/// input order, whether each outcome was recorded, and the advances to
/// finish after the commit ([`after_commit`]).
pub async fn finish_steps(
    pool: &PgPool,
    versions: &Versions,
    items: Vec<(RunId, i64, Outcome)>,
) -> Result<(Vec<bool>, Vec<Pending>), sqlx::Error> {
    let steps: Vec<Option<StepRunId>> =
        items.iter().map(|(_, _, o)| o.workflow_step_run_id.clone().filter(|_| o.status.is_terminal())).collect();
    // The setting holds for the whole transaction: a pass below that
    // cancels job runs cancels only its own run's (and its children's,
    // which it ends itself), so no outbox row it keeps back is wanted.
    let mut tx = pool.begin_with("BEGIN; SET LOCAL switchyard.inline_steps = 'on'").await?;
    let recorded = runs::finish_many_in(&mut tx, items).await?;
    let ended: Vec<&StepRunId> =
        steps.iter().zip(&recorded).filter(|(_, r)| **r).filter_map(|(s, _)| s.as_ref()).collect();
    let pending = workflow_engine::advance_ended_steps_in(&mut tx, versions, &ended, Utc::now()).await?;
    for p in &pending {
        p.tell_scheduler(&mut tx).await?;
    }
    tx.commit().await?;
    Ok((recorded, pending))
}

/// Enqueues what the advances of a committed [`finish_steps`] created
/// (one call to Redis for them all).
pub async fn after_commit(queue: &Queue, pending: Vec<Pending>) {
    Pending::after_commit_all(queue, pending).await;
}
