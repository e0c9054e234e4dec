//! Group-committed triggers.
//!
//! A trigger is accepted once its run is committed in Postgres. Under load
//! many triggers arrive at once, and one commit each is what bounds the
//! api's rate (Postgres pays per statement and per commit). So plain
//! triggers go through a [`GroupCommit`]: whatever is waiting is written in
//! one multi-row insert and one commit, and the new entries go to Redis in
//! one script call. An idle api still writes each trigger at once; nothing
//! waits for a batch to fill. Triggers with dependencies or a dedup window
//! take the transactional path of `store::flow::create` instead.
//!
//! Workflow triggers are grouped the same way ([`WorkflowIntake`]): a
//! group's runs, their steps and their first engine passes are written in
//! one transaction (`workflow_moves::trigger_many`). Only triggers with
//! nothing to look up or count go there (`workflow_runs::batchable`); one
//! with an idempotency key, or of a workflow with skip_if_running or
//! max_concurrent_runs, takes its own transaction.

use std::sync::Arc;
use std::time::SystemTime;

use sqlx::PgPool;
use switchyard_shared::queue::Queue;
use switchyard_shared::store::group::{GroupCommit, GroupError};
use switchyard_shared::store::runs::{self, NewRun, Run};
use switchyard_shared::store::workflow_engine::Versions;
use switchyard_shared::store::workflow_moves;
use switchyard_shared::store::workflow_runs::{self, NewWorkflowRun, StepRun, Triggered, WorkflowRun};
use switchyard_shared::store::workflows::WorkflowRecord;
use switchyard_shared::traces::{self, Attr, Place, SpanRecord};

/// Concurrent batches in flight: while one commits, the next fills.
const WRITERS: usize = 4;
/// Rows per insert: bounds one statement's size and the wait of its callers.
const MAX_BATCH: usize = 128;

/// A run to insert, and when its entry is due in Redis (0 = now).
type Item = (NewRun, i64);

/// Each trigger's own result: a row that Postgres refuses fails only its
/// own trigger, not the others of its batch.
type Written = Result<(Run, bool), sqlx::Error>;

#[derive(Clone)]
pub struct Intake {
    commit: GroupCommit<Item, Written>,
}

impl Intake {
    /// Starts the writer tasks (needs a Tokio runtime).
    pub fn spawn(pool: PgPool, queue: Queue) -> Intake {
        let commit = GroupCommit::spawn(WRITERS, MAX_BATCH, move |items: Vec<Item>| {
            let (pool, queue) = (pool.clone(), queue.clone());
            async move { write(&pool, &queue, items).await }
        });
        Intake { commit }
    }

    /// Inserts the run (or finds the one holding its idempotency key) and
    /// enqueues it. Returns `(run, created)` once the insert has committed.
    pub async fn submit(&self, run: NewRun, due_ms: i64) -> Result<(Run, bool), sqlx::Error> {
        self.commit.submit((run, due_ms)).await.map_err(GroupError::into_sqlx)?
    }
}

async fn write(pool: &PgPool, queue: &Queue, items: Vec<Item>) -> Result<Vec<Written>, sqlx::Error> {
    let (new, dues): (Vec<NewRun>, Vec<i64>) = items.into_iter().unzip();
    let began = SystemTime::now();
    let group = runs::insert_many(pool, &new).await;
    let inserted = SystemTime::now();
    let new = &new;
    let written = each_alone(new.len(), group, |i| async move {
        runs::insert_many(pool, std::slice::from_ref(&new[i])).await.map(|mut w| w.remove(0))
    })
    .await?;
    let entries: Vec<_> = written
        .iter()
        .zip(&dues)
        .filter_map(|(w, due)| match w {
            Ok((run, true)) if !run.awaiting_dependencies => Some((run.entry(), *due)),
            _ => None,
        })
        .collect();
    let refs: Vec<_> = entries.iter().map(|(e, due)| (e, *due)).collect();
    // The runs are durable now; if Redis misses them the reconciler enqueues
    // them later, so a failure here is not the trigger's failure.
    if let Err(e) = queue.enqueue_many(&refs, chrono::Utc::now().timestamp_millis()).await {
        tracing::warn!(runs = refs.len(), error = %e, "enqueue failed; the runs are durable and the reconciler will enqueue them");
    }
    if traces::enabled() {
        let enqueued = SystemTime::now();
        for r in new.iter() {
            let place = Place::of(&r.id, r.traceparent.as_deref());
            if place.sampled {
                let batch = Attr::new("switchyard.batch_size", new.len() as i64);
                traces::record(SpanRecord::child(&place, "run.insert", began, inserted).attr(batch.clone()));
                traces::record(SpanRecord::child(&place, "run.enqueue", inserted, enqueued).attr(batch));
            }
        }
    }
    Ok(written)
}

/// Workflow runs per group: each brings its steps and its first pass, so
/// a group stays well under the plain triggers' size.
const WORKFLOW_BATCH: usize = 32;

type WorkflowItem = (Arc<WorkflowRecord>, NewWorkflowRun);
type WorkflowWritten = Result<(WorkflowRun, Vec<StepRun>), sqlx::Error>;

/// Group-committed workflow triggers (see the module's comment).
#[derive(Clone)]
pub struct WorkflowIntake {
    commit: GroupCommit<WorkflowItem, WorkflowWritten>,
}

impl WorkflowIntake {
    /// Starts the writer tasks (needs a Tokio runtime). `pool`: the
    /// engine's, as for a trigger alone.
    pub fn spawn(pool: PgPool, queue: Queue, versions: Arc<Versions>) -> WorkflowIntake {
        let commit = GroupCommit::spawn(WRITERS, WORKFLOW_BATCH, move |items: Vec<WorkflowItem>| {
            let (pool, queue, versions) = (pool.clone(), queue.clone(), versions.clone());
            async move { write_workflows(&pool, &queue, &versions, items).await }
        });
        WorkflowIntake { commit }
    }

    /// Triggers a run of `wf`, grouped with other triggers when
    /// `workflow_runs::batchable` allows (the run comes with its steps as
    /// its first pass left them), in a transaction of its own otherwise
    /// (no steps: the caller reads them). Returns once the run and its
    /// first pass have committed.
    pub async fn trigger(
        &self,
        pool: &PgPool,
        queue: &Queue,
        versions: &Versions,
        wf: Arc<WorkflowRecord>,
        new: NewWorkflowRun,
    ) -> Result<(Triggered, Option<Vec<StepRun>>), sqlx::Error> {
        if !workflow_runs::batchable(&wf, &new) {
            return Ok((workflow_moves::trigger(pool, queue, versions, &wf, &new).await?, None));
        }
        let (run, steps) = self.commit.submit((wf, new)).await.map_err(GroupError::into_sqlx)??;
        Ok((Triggered::Created(run), Some(steps)))
    }
}

async fn write_workflows(
    pool: &PgPool,
    queue: &Queue,
    versions: &Versions,
    items: Vec<WorkflowItem>,
) -> Result<Vec<WorkflowWritten>, sqlx::Error> {
    let refs: Vec<(&WorkflowRecord, &NewWorkflowRun)> = items.iter().map(|(wf, new)| (&**wf, new)).collect();
    let began = SystemTime::now();
    let group = workflow_moves::trigger_many(pool, queue, versions, &refs).await;
    let refs = &refs;
    let written = each_alone(refs.len(), group, |i| async move {
        workflow_moves::trigger_many(pool, queue, versions, std::slice::from_ref(&refs[i]))
            .await
            .map(|mut r| r.remove(0))
    })
    .await?;
    if traces::enabled() {
        // The run, its steps and its first pass (the first steps' job runs
        // made and enqueued) are one transaction.
        let done = SystemTime::now();
        for (run, _) in written.iter().flatten() {
            let place = run.trace();
            if place.sampled {
                let batch = Attr::new("switchyard.batch_size", refs.len() as i64);
                traces::record(SpanRecord::child(&place, "workflow_run.insert", began, done).attr(batch));
            }
        }
    }
    Ok(written)
}

/// Each item's result from its group's: an outage fails the group (each
/// caller maps it to 503), but a row Postgres refuses is its own trigger's
/// error, with Postgres's code intact (a data exception is 422, not 500),
/// and must not fail its neighbours: the group's `n` items are then
/// written one at a time (`alone(i)`), so each gets its own answer.
async fn each_alone<O, F, Fut>(
    n: usize,
    group: Result<Vec<O>, sqlx::Error>,
    alone: F,
) -> Result<Vec<Result<O, sqlx::Error>>, sqlx::Error>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<O, sqlx::Error>>,
{
    match group {
        Ok(written) => Ok(written.into_iter().map(Ok).collect()),
        Err(e) if !matches!(e, sqlx::Error::Database(_)) => Err(e),
        Err(e) if n == 1 => Ok(vec![Err(e)]),
        Err(_) => {
            let mut each = Vec::with_capacity(n);
            for i in 0..n {
                each.push(alone(i).await);
            }
            Ok(each)
        }
    }
}
