//! The moves people ask for through the api on a workflow run: trigger,
//! cancel, pause, resume, a decision on a waiting step, a step's retry and
//! a subtree's replay. Each locks the run, asks its pure transition
//! (`engine::moves`) whether it applies and what changes, and writes that
//! in one transaction.
//!
//! A trigger makes the run's first pass in its own transaction
//! ([`trigger`]); every other move that may let a run go on writes a
//! `workflow_outbox` row for it in its own transaction (migration 0010):
//! the engine hears of it at commit, or finds the row later, and does the
//! rest. This module sits above both the rows (`workflow_runs`) and the
//! engine's pass (`workflow_engine`), so neither imports the other back.

use chrono::Utc;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::transitions::{self, Changed};
use super::workflow_engine::{self, Versions};
use super::workflow_runs::{
    self, get, record_many, wake, NewWorkflowRun, StepRun, Triggered, WorkflowRun, RUN_COLUMNS, STEP_COLUMNS,
};
use super::workflows::WorkflowRecord;
use super::Tenant;
use crate::domain::workflow_run::{subtree, StepStatus, WorkflowRunStatus};
use crate::engine::moves::{self, ResetRun};
pub use crate::engine::moves::{Decider, Refused, StepDecision};
use crate::engine::StepView;
use crate::ids::WorkflowRunId;
use crate::queue::Queue;

/// Triggers a run of `wf` (its current version) in one transaction, which
/// also makes the engine's first pass over it: the steps that can start
/// at once are started, their job runs inserted, and enqueued after the
/// commit (as `workflow_engine::advance` does). A run created `pending`
/// waits for a slot, and is started by the run that frees it.
pub async fn trigger(
    pool: &PgPool,
    queue: &Queue,
    versions: &Versions,
    wf: &WorkflowRecord,
    new: &NewWorkflowRun,
) -> Result<Triggered, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let (t, steps) = workflow_runs::create_unannounced_in(&mut tx, wf, new).await?;
    let started = match &t {
        Triggered::Created(run) if run.status == WorkflowRunStatus::Running => {
            workflow_engine::advance_new_in(&mut tx, versions, run, wf, steps, Utc::now()).await?
        }
        _ => None,
    };
    if let Some(p) = &started {
        p.tell_scheduler(&mut tx).await?;
    }
    tx.commit().await?;
    let Some(started) = started else { return Ok(t) };
    let ended = started.after_commit(queue).await.ended.is_some();
    // A run can end in its first pass (every step skipped, a step that
    // fails at once): the answer shows it as it is.
    match t {
        Triggered::Created(run) if ended => {
            Ok(Triggered::Created(get(pool, Tenant::Project(&run.project_id), &run.id).await?.unwrap_or(run)))
        }
        t => Ok(t),
    }
}

/// [`trigger`] for many triggers that `workflow_runs::batchable` allows,
/// in one transaction: one statement creates the runs, one their steps,
/// and their first passes are written together (`advance_new_many_in`).
/// An api under load sends its workflow triggers here in groups, so a run
/// costs a share of a few statements and of one commit instead of its
/// own. Each run comes with its steps as the first pass left them (one
/// read for the group, so the answers need none of their own). In input
/// order; the whole group fails together (the caller tries its triggers
/// one by one when a row is refused).
pub async fn trigger_many(
    pool: &PgPool,
    queue: &Queue,
    versions: &Versions,
    items: &[(&WorkflowRecord, &NewWorkflowRun)],
) -> Result<Vec<(WorkflowRun, Vec<StepRun>)>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let created = workflow_runs::create_many_unannounced_in(&mut tx, items).await?;
    let runs: Vec<WorkflowRun> = created.iter().map(|(r, _)| r.clone()).collect();
    let firsts = created.into_iter().zip(items).map(|((run, steps), (wf, _))| (run, *wf, steps)).collect();
    let started = workflow_engine::advance_new_many_in(&mut tx, versions, firsts, Utc::now()).await?;
    for p in started.iter().flatten() {
        p.tell_scheduler(&mut tx).await?;
    }
    let ids: Vec<WorkflowRunId> = runs.iter().map(|r| r.id.clone()).collect();
    let mut steps_of: std::collections::HashMap<WorkflowRunId, Vec<StepRun>> = std::collections::HashMap::new();
    for s in workflow_runs::steps_of_in(&mut tx, &ids).await? {
        steps_of.entry(s.workflow_run_id.as_str().into()).or_default().push(s);
    }
    tx.commit().await?;
    let ended: Vec<bool> = started.iter().map(|p| p.as_ref().is_some_and(|p| p.advanced.ended.is_some())).collect();
    workflow_engine::Pending::after_commit_all(queue, started.into_iter().flatten().collect()).await;
    let mut out = Vec::with_capacity(runs.len());
    for (run, ended) in runs.into_iter().zip(ended) {
        let steps = steps_of.remove(&run.id).unwrap_or_default();
        // A run can end in its first pass: the answer shows it as it is.
        let run = if ended { get(pool, Tenant::Project(&run.project_id), &run.id).await?.unwrap_or(run) } else { run };
        out.push((run, steps));
    }
    Ok(out)
}

/// What a person's move did: the run after it, and the job runs it
/// cancelled (their queue entries are the caller's to drop).
#[derive(Clone, Debug)]
pub struct Moved {
    pub run: WorkflowRun,
    pub cancelled: Vec<Changed>,
}

type MoveResult = Result<Result<Moved, Refused>, sqlx::Error>;

/// Records a person's decision on a waiting step (`engine::moves::decide`
/// says who may make it and how the step ends).
pub async fn decide_step(
    pool: &PgPool,
    tenant: Tenant<'_>,
    id: &str,
    step_ref: &str,
    decision: StepDecision,
    who: &Decider<'_>,
    comment: Option<&str>,
) -> MoveResult {
    let mut tx = pool.begin().await?;
    let Some(run) = lock(&mut tx, tenant, id).await? else { return Ok(Err(Refused::NotFound)) };
    let step: Option<StepRun> = sqlx::query_as(&format!(
        "SELECT {STEP_COLUMNS} FROM workflow_step_runs WHERE workflow_run_id = $1 AND step_ref = $2"
    ))
    .bind(id)
    .bind(step_ref)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(step) = step else { return Ok(Err(Refused::NotFound)) };
    // The approvers it started waiting with: a later version (under
    // version_policy latest) does not change who decides a pending approval.
    let approvers = match step.approvers.clone() {
        Some(Json(fixed)) => fixed,
        // Only a waiting step is decided: another is refused below.
        None if step.status == StepStatus::Waiting => workflow_runs::version_steps_in(&mut tx, &run.version_id)
            .await?
            .iter()
            .find(|s| s.def.step_ref == step_ref)
            .and_then(|s| s.def.approval_approvers.clone())
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let d = match moves::decide(&workflow_engine::view(&step), &approvers, decision, who, comment) {
        Ok(d) => d,
        Err(refused) => return Ok(Err(refused)),
    };
    let stages = sqlx::query_scalar(&format!(
        "WITH d AS (
            UPDATE workflow_step_runs s SET status = $2, output = $3, error = $4, wake_at = NULL, finished_at = now(),
                decision = $5, decided_by = $6, decision_comment = $7, decided_at = now()
             WHERE id = $1
             RETURNING {}
         )
         SELECT {}",
        super::deliveries::STAGE_RETURNING,
        super::deliveries::stage_changes("d")
    ))
    .bind(&step.id)
    .bind(d.status)
    .bind(d.output.as_ref().map(Json))
    .bind(&d.error)
    .bind(decision.as_str())
    .bind(&d.by)
    .bind(comment)
    .fetch_one(&mut *tx)
    .await?;
    super::deliveries::step_stages(&mut tx, stages).await?;
    record_many(&mut tx, id, std::slice::from_ref(&d.note)).await?;
    wake(&mut tx, id).await?;
    let run = reread(&mut tx, id).await?;
    tx.commit().await?;
    Ok(Ok(Moved { run, cancelled: Vec::new() }))
}

/// Cancels an active run: its running steps and their job runs (and child
/// workflow runs) are cancelled with it.
pub async fn cancel(pool: &PgPool, tenant: Tenant<'_>, id: &str, reason: &str) -> MoveResult {
    let mut tx = pool.begin().await?;
    let Some(run) = lock(&mut tx, tenant, id).await? else { return Ok(Err(Refused::NotFound)) };
    let decided = match moves::cancel(run.status, reason) {
        Ok(d) => d,
        Err(refused) => return Ok(Err(refused)),
    };
    let staged = workflow_engine::end_run(&mut tx, &run, decided).await?;
    let run = reread(&mut tx, id).await?;
    tx.commit().await?;
    Ok(Ok(Moved { run, cancelled: staged.committed() }))
}

/// Pauses a running run (`pause`: no step starts until it is resumed; the
/// steps under way finish) or resumes a paused one (the steps that became
/// ready meanwhile start).
pub async fn set_paused(pool: &PgPool, tenant: Tenant<'_>, id: &str, pause: bool, who: &str) -> MoveResult {
    let mut tx = pool.begin().await?;
    let Some(run) = lock(&mut tx, tenant, id).await? else { return Ok(Err(Refused::NotFound)) };
    let m = match moves::set_paused(run.status, pause, who) {
        Ok(m) => m,
        Err(refused) => return Ok(Err(refused)),
    };
    sqlx::query("UPDATE workflow_runs SET status = $2 WHERE id = $1").bind(id).bind(m.status).execute(&mut *tx).await?;
    record_many(&mut tx, id, std::slice::from_ref(&m.note)).await?;
    if m.wake {
        wake(&mut tx, id).await?;
    }
    let run = reread(&mut tx, id).await?;
    tx.commit().await?;
    Ok(Ok(Moved { run, cancelled: Vec::new() }))
}

/// Takes ended steps back to pending and the run up again: one step
/// (`retry`) or a step with every step below it (`replay-subtree`). A run
/// that had ended goes back to `running` with a fresh deadline, and the
/// steps its ending cancelled are pending again too.
pub async fn reset_steps(
    pool: &PgPool,
    tenant: Tenant<'_>,
    id: &str,
    step_ref: &str,
    with_descendants: bool,
    who: &str,
) -> MoveResult {
    let mut tx = pool.begin().await?;
    let Some(run) = lock(&mut tx, tenant, id).await? else { return Ok(Err(Refused::NotFound)) };
    let rows: Vec<StepRun> =
        sqlx::query_as(&format!("SELECT {STEP_COLUMNS} FROM workflow_step_runs WHERE workflow_run_id = $1"))
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
    let below = if with_descendants && rows.iter().any(|s| s.step_ref == step_ref) {
        Some(subtree(&workflow_runs::version_steps_in(&mut tx, &run.version_id).await?, step_ref))
    } else {
        None
    };
    let facts = ResetRun { status: run.status, compensated: run.compensation.is_some() };
    let views: Vec<StepView> = rows.iter().map(workflow_engine::view).collect();
    let reset = match moves::reset(facts, &views, step_ref, below, who) {
        Ok(r) => r,
        Err(refused) => return Ok(Err(refused)),
    };
    sqlx::query(
        "UPDATE workflow_step_runs SET status = 'pending', output = NULL, error = NULL, job_run_id = NULL,
            child_workflow_run_id = NULL, emitted_event_id = NULL, wake_at = NULL, finished_at = NULL, ended_by_run = false,
            decision = NULL, decided_by = NULL, decision_comment = NULL, decided_at = NULL
         WHERE workflow_run_id = $1 AND (step_ref = ANY($2) OR ($3 AND ended_by_run))",
    )
    .bind(id)
    .bind(&reset.step_refs)
    .bind(reset.reopen)
    .execute(&mut *tx)
    .await?;
    if reset.reopen {
        sqlx::query(
            "UPDATE workflow_runs r SET status = 'running', finished_at = NULL, error = NULL, output = NULL,
                deadline_at = (SELECT CASE WHEN w.timeout_secs IS NOT NULL THEN now() + make_interval(secs => w.timeout_secs) END
                                 FROM workflows w WHERE w.id = r.workflow_id)
             WHERE id = $1",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
    }
    record_many(&mut tx, id, std::slice::from_ref(&reset.note)).await?;
    wake(&mut tx, id).await?;
    let run = reread(&mut tx, id).await?;
    tx.commit().await?;
    Ok(Ok(Moved { run, cancelled: Vec::new() }))
}

/// Drops the queue entries of the job runs a move cancelled.
pub async fn drop_entries(queue: &Queue, moved: &Moved) {
    transitions::drop_entries(queue, &moved.cancelled).await
}

async fn lock(conn: &mut PgConnection, tenant: Tenant<'_>, id: &str) -> Result<Option<WorkflowRun>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM workflow_runs WHERE id = $1 AND ($2::text IS NULL OR project_id = $2) FOR UPDATE"
    ))
    .bind(id)
    .bind(tenant.filter())
    .fetch_optional(conn)
    .await
}

async fn reread(conn: &mut PgConnection, id: &str) -> Result<WorkflowRun, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {RUN_COLUMNS} FROM workflow_runs WHERE id = $1")).bind(id).fetch_one(conn).await
}
