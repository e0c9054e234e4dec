//! The engine's pass: one [`advance`] of one workflow run, in one
//! transaction under the run's row lock ([`advance_in`] makes it in the
//! caller's: a trigger's, or the worker's as it records step outcomes).
//! The decisions are the pure transitions of `crate::engine`; this module
//! reads what they need and writes what they return.
//!
//! A pass consumes the run's outbox rows, reads its steps with the
//! status of their job runs and child runs, brings each step up to date
//! (a job run that ended ends its step, a sleep that is over completes),
//! ends the run at its deadline, asks `domain::workflow_run::next` what
//! comes next, and writes it: steps skipped, failed or started (a job
//! step's job run is inserted in the same transaction, a sub-workflow's
//! child run too), the run ended, and the decisions made. After the commit
//! the new job runs are enqueued; if that fails, or the process dies first,
//! the runs are `queued` in Postgres and the reconciler enqueues them.
//!
//! Nothing is lost or doubled when several schedulers advance at once or
//! one dies midway: a step is started by an update of its own row under
//! the run's lock, and an outbox row is deleted only by the transaction
//! that read the run after it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::postgres::PgArguments;
use sqlx::types::Json;
use sqlx::{Arguments, PgConnection, PgPool};

use super::recent::JobCache;
use super::runs::{self, NewRun, Run};
use super::transitions::{self, Changed, Staged};
use super::workflow_runs::{
    self, record, wake, NewDecision, StepRun, Triggered, WorkflowRun, RUN_COLUMNS, STEP_COLUMNS,
};
use super::{events, jobs, workflows, Tenant};
use crate::domain::step::{Step, StepKind, Steps};
use crate::domain::workflow::StepType;
use crate::domain::workflow_run::{
    self, Compensable, Decision, Inputs, SagaMove, StepNow, StepStatus, WorkflowRunStatus,
};
use crate::domain::RunStatus;
use crate::engine::step_ended::{step_ended, Seen};
use crate::engine::step_start::{self, step_start, ChildRequest, Facts, RunView};
use crate::engine::{run_end, version_move, EventNotice, StepView, StepWrite};
use crate::ids::{JobId, StepRunId, WorkflowRunId};
use crate::queue::Queue;

/// The Postgres channel an outbox row's insert notifies with its run's id
/// (migration 0010); the scheduler's workflow loop listens on it.
pub const CHANNEL: &str = "switchyard_workflows";

pub use crate::engine::Decided;

/// What one advance did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Advanced {
    /// The run had nothing to do (no outbox row, nothing due), or another
    /// process holds it.
    pub idle: bool,
    pub steps_started: usize,
    pub job_runs_enqueued: usize,
    /// The status the run ended with, when it ended.
    pub ended: Option<String>,
    /// When the run must be looked at next without an event (a sleep's
    /// end, its deadline), as the pass left it.
    pub wake_at: Option<DateTime<Utc>>,
}

/// What an engine keeps between passes: the steps of workflow versions
/// already read (a version never changes once saved, so they are kept
/// until `CAP` versions, then it starts afresh), and the jobs its passes
/// start steps of, for at most a second ([`JobCache`]).
#[derive(Default)]
pub struct Versions {
    steps: std::sync::Mutex<HashMap<String, Arc<Steps>>>,
    jobs: Arc<JobCache>,
}

impl Versions {
    const CAP: usize = 1024;

    async fn get(&self, conn: &mut PgConnection, version_id: &str) -> Result<Arc<Steps>, sqlx::Error> {
        if let Some(s) = self.steps.lock().expect("versions").get(version_id) {
            return Ok(s.clone());
        }
        let steps = Arc::new(Steps::of(&workflow_runs::version_steps_in(conn, version_id).await?));
        let mut map = self.steps.lock().expect("versions");
        if map.len() >= Self::CAP {
            map.clear();
        }
        map.insert(version_id.to_string(), steps.clone());
        Ok(steps)
    }

    /// An engine whose passes read jobs through `jobs`: the api's, shared
    /// with its triggers, so that a change it makes applies to both at once.
    pub fn with_jobs(jobs: Arc<JobCache>) -> Versions {
        Versions { steps: Default::default(), jobs }
    }
}

/// A step row with what its job run or child run says now.
#[derive(sqlx::FromRow)]
struct StepRow {
    #[sqlx(flatten)]
    step: StepRun,
    job_status: Option<RunStatus>,
    job_result: Option<Json<Value>>,
    job_error: Option<String>,
    child_status: Option<WorkflowRunStatus>,
    child_output: Option<Json<Value>>,
    child_error: Option<String>,
    /// Its compensation job run's status, once the saga started one.
    comp_status: Option<RunStatus>,
}

impl StepRow {
    /// A step row just inserted: nothing has run for it.
    fn fresh(step: StepRun) -> StepRow {
        StepRow {
            step,
            job_status: None,
            job_result: None,
            job_error: None,
            child_status: None,
            child_output: None,
            child_error: None,
            comp_status: None,
        }
    }
}

/// A step row as the engine's transitions see it.
pub(super) fn view(s: &StepRun) -> StepView<'_> {
    StepView {
        id: &s.id,
        step_ref: &s.step_ref,
        step_type: &s.step_type,
        status: s.status,
        attempt: s.attempt,
        job_run_id: s.job_run_id.as_deref(),
        child_workflow_run_id: s.child_workflow_run_id.as_deref(),
        wake_at: s.wake_at,
        output: s.output.as_ref().map(|o| &o.0),
        error: s.error.as_deref(),
    }
}

/// The run as a step's start sees it.
fn run_view(r: &WorkflowRun) -> RunView<'_> {
    RunView {
        id: &r.id,
        project_id: &r.project_id,
        payload: r.payload.as_ref().map(|p| &p.0),
        created_by: r.created_by.as_deref(),
        tags: &r.tags.0,
        depth: r.depth,
        traceparent: r.traceparent.as_deref(),
    }
}

/// What one pass writes at its end.
struct PassWrite {
    run_id: WorkflowRunId,
    writes: Vec<StepWrite>,
    decisions: Vec<NewDecision>,
    /// The run's wake-up time as the pass leaves it, when the pass is over.
    wake: Option<Option<DateTime<Utc>>>,
}

/// Writes what passes decided, of one run or of many, in one statement:
/// step rows, decisions (in order), and each run's `wake_at` when its pass
/// says what it is now (it is written only when it moves: most passes
/// leave it as it was, and an update would write the run's row and its
/// indexes again). The stage deliveries of the steps it changed follow in
/// a second statement, when a step has stage_notifications.
async fn write_passes(conn: &mut PgConnection, passes: &[PassWrite]) -> Result<(), sqlx::Error> {
    if passes.iter().all(|p| p.writes.is_empty() && p.decisions.is_empty() && p.wake.is_none()) {
        return Ok(());
    }
    let mut args = PgArguments::default();
    pass_args(&mut args, passes).map_err(sqlx::Error::Encode)?;
    let sql = format!("WITH {} SELECT {}", pass_ctes(0), super::deliveries::stage_changes("steps"));
    let stages = sqlx::query_scalar_with(&sql, args).fetch_one(&mut *conn).await?;
    super::deliveries::step_stages(conn, stages).await
}

/// The job runs that passes start and the passes' writes
/// ([`write_passes`]), in one statement: a round trip fewer on the path
/// from a step's end to the next step's dispatch. For job runs that claim
/// no key (a step's never does); returns each one's `(run, created)`.
async fn insert_and_write_passes(
    conn: &mut PgConnection,
    made: &[NewRun],
    passes: &[PassWrite],
) -> Result<Vec<(Run, bool)>, sqlx::Error> {
    let created_at = runs::insert_time();
    let mut args = PgArguments::default();
    runs::new_run_args(&mut args, made, created_at).map_err(sqlx::Error::Encode)?;
    pass_args(&mut args, passes).map_err(sqlx::Error::Encode)?;
    let sql = runs::insert_many_then(
        &pass_ctes(runs::NEW_RUN_PARAMS),
        &format!("ARRAY(SELECT id FROM ins), {}", super::deliveries::stage_changes("steps")),
    );
    let (inserted, stages): (Vec<String>, Option<Json<Vec<super::deliveries::StageChange>>>) =
        sqlx::query_as_with(&sql, args).fetch_one(&mut *conn).await?;
    let runs = runs::inserted_runs(conn, made, inserted, created_at).await?;
    super::deliveries::step_stages(conn, stages).await?;
    Ok(runs)
}

/// [`write_passes`]' CTEs (`steps`, `decisions`, `woke`), their
/// parameters numbered from `after + 1`.
fn pass_ctes(after: usize) -> String {
    shift_params(
        &format!(
            "steps AS (
            UPDATE workflow_step_runs s SET status = t.status, output = t.output, error = t.error,
                job_run_id = t.job_run_id, child_workflow_run_id = t.child_id, wake_at = t.wake_at,
                attempt = s.attempt + CASE WHEN t.start THEN 1 ELSE 0 END,
                started_at = CASE WHEN t.start THEN now() ELSE s.started_at END,
                finished_at = CASE WHEN t.finish THEN now() WHEN t.start THEN NULL ELSE s.finished_at END,
                ended_by_run = t.ended_by_run,
                approvers = CASE WHEN t.start THEN t.approvers ELSE s.approvers END
             FROM UNNEST($1::text[], $2::text[], $3::jsonb[], $4::text[], $5::text[], $6::text[], $7::timestamptz[],
                         $8::bool[], $9::bool[], $10::bool[], $11::jsonb[])
                  AS t (id, status, output, error, job_run_id, child_id, wake_at, start, finish, ended_by_run, approvers)
             WHERE s.id = t.id
             RETURNING {}
         ), decisions AS (
            INSERT INTO workflow_decisions (workflow_run_id, step_ref, decision_type, reason, details)
            SELECT t.run_id, t.step_ref, t.decision_type, t.reason, t.details
              FROM UNNEST($12::text[], $13::text[], $14::text[], $15::text[], $16::jsonb[]) WITH ORDINALITY
                   AS t (run_id, step_ref, decision_type, reason, details, n)
             ORDER BY t.n
         ), woke AS (
            UPDATE workflow_runs r SET wake_at = t.wake_at
              FROM UNNEST($17::text[], $18::timestamptz[]) AS t (id, wake_at)
             WHERE r.id = t.id AND r.wake_at IS DISTINCT FROM t.wake_at
         )",
            super::deliveries::STAGE_RETURNING,
        ),
        after,
    )
}

/// The parameters of [`pass_ctes`], in its order.
fn pass_args(args: &mut PgArguments, passes: &[PassWrite]) -> Result<(), sqlx::error::BoxDynError> {
    let w: Vec<&StepWrite> = passes.iter().flat_map(|p| &p.writes).collect();
    let d: Vec<(&str, &NewDecision)> =
        passes.iter().flat_map(|p| p.decisions.iter().map(|d| (p.run_id.as_str(), d))).collect();
    let woke: Vec<(&str, Option<DateTime<Utc>>)> =
        passes.iter().filter_map(|p| p.wake.map(|t| (p.run_id.as_str(), t))).collect();
    macro_rules! col {
        ($v:expr, $f:expr) => {
            $v.iter().map($f).collect::<Vec<_>>()
        };
    }
    args.add(col!(w, |s| s.id.as_str()))?;
    args.add(col!(w, |s| s.status.as_str()))?;
    args.add(col!(w, |s| s.output.as_ref().map(Json)))?;
    args.add(col!(w, |s| s.error.as_deref()))?;
    args.add(col!(w, |s| s.job_run_id.as_deref()))?;
    args.add(col!(w, |s| s.child_id.as_deref()))?;
    args.add(col!(w, |s| s.wake_at))?;
    args.add(col!(w, |s| s.start))?;
    args.add(col!(w, |s| s.finish))?;
    args.add(col!(w, |s| s.ended_by_run))?;
    args.add(col!(w, |s| s.approvers.as_ref().map(Json)))?;
    args.add(col!(d, |(r, _)| *r))?;
    args.add(col!(d, |(_, d)| d.step_ref.as_deref()))?;
    args.add(col!(d, |(_, d)| d.decision_type.as_str()))?;
    args.add(col!(d, |(_, d)| d.reason.as_str()))?;
    args.add(col!(d, |(_, d)| Json(if d.details.is_null() { json!({}) } else { d.details.clone() })))?;
    args.add(col!(woke, |(r, _)| *r))?;
    args.add(col!(woke, |(_, t)| *t))?;
    Ok(())
}

/// `sql` with every parameter `$n` renumbered `$(n + by)`, so that
/// statements written on their own can be joined into one.
fn shift_params(sql: &str, by: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '$' {
            continue;
        }
        let mut n = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            n.push(*d);
            chars.next();
        }
        match n.parse::<usize>() {
            Ok(n) => out.push_str(&(n + by).to_string()),
            Err(_) => out.push_str(&n),
        }
    }
    out
}

/// Runs with work: those with outbox rows and those whose wake-up time has
/// come, at most `limit`.
pub async fn runs_with_work(pool: &PgPool, now: DateTime<Utc>, limit: i64) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "(SELECT DISTINCT workflow_run_id FROM workflow_outbox LIMIT $2)
         UNION
         (SELECT id FROM workflow_runs WHERE wake_at <= $1 ORDER BY wake_at LIMIT $2)",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The earliest wake-up time of any run (a sleep's end, a deadline).
pub async fn next_wake(pool: &PgPool) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar("SELECT min(wake_at) FROM workflow_runs WHERE wake_at IS NOT NULL").fetch_one(pool).await
}

/// Advances one run at `now`, in a transaction of its own. Another process
/// holding the run's lock makes this a no-op (`idle`): that process sees
/// every event committed before it read, and hears the notification of
/// every one after.
pub async fn advance(
    pool: &PgPool,
    queue: &Queue,
    versions: &Versions,
    run_id: &WorkflowRunId,
    now: DateTime<Utc>,
) -> Result<Advanced, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let Some(pending) = advance_in(&mut tx, versions, run_id, now, false).await? else {
        // Held by another process, or gone: rows of a deleted run go too.
        let gone: bool = sqlx::query_scalar("SELECT NOT EXISTS (SELECT 1 FROM workflow_runs WHERE id = $1)")
            .bind(run_id)
            .fetch_one(&mut *tx)
            .await?;
        if gone {
            sqlx::query("DELETE FROM workflow_outbox WHERE workflow_run_id = $1")
                .bind(run_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        return Ok(Advanced { idle: true, ..Default::default() });
    };
    if pending.advanced.idle {
        // Nothing was written: the lock goes with the rollback.
        return Ok(pending.advanced);
    }
    tx.commit().await?;
    Ok(pending.after_commit(queue).await)
}

/// An advance written in a transaction that has yet to commit, with what
/// is left to do after the commit (enqueue the job runs it created, drop
/// the queue entries of those it cancelled).
#[must_use = "after the commit, `after_commit` enqueues the job runs the advance created"]
pub struct Pending {
    pub run_id: WorkflowRunId,
    pub advanced: Advanced,
    /// The pass moved the run's `wake_at` to this ([`Pending::tell_scheduler`]).
    pub woke: Option<DateTime<Utc>>,
    new_runs: Vec<Run>,
    staged: Vec<Staged>,
    /// The spans of the steps the pass ended, and of the run when it
    /// ended: exported once the pass commits.
    spans: Vec<crate::traces::SpanRecord>,
}

impl Pending {
    /// Tells the scheduler, at commit, of the wake-up time this pass gave
    /// the run (it sleeps until the earliest one it knows of): for a pass
    /// made outside it, in a trigger's or a step outcome's transaction.
    pub async fn tell_scheduler(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        if self.woke.is_some() {
            sqlx::query("SELECT pg_notify($1, $2)").bind(CHANNEL).bind(&self.run_id).execute(conn).await?;
        }
        Ok(())
    }

    /// Enqueues the job runs the advance created; if that fails, or the
    /// process dies first, they are `queued` in Postgres and the
    /// reconciler enqueues them.
    pub async fn after_commit(self, queue: &Queue) -> Advanced {
        let Pending { mut advanced, new_runs, staged, spans, .. } = self;
        spans.into_iter().for_each(crate::traces::record);
        let cancelled: Vec<Changed> = staged.into_iter().flat_map(Staged::committed).collect();
        transitions::drop_entries(queue, &cancelled).await;
        advanced.job_runs_enqueued = runs::enqueue_made(queue, &new_runs).await;
        advanced
    }

    /// [`Pending::after_commit`] for many advances, with one call to Redis
    /// for the job runs they all created.
    pub async fn after_commit_all(queue: &Queue, pending: Vec<Pending>) {
        let mut cancelled: Vec<Changed> = Vec::new();
        let mut made: Vec<Run> = Vec::new();
        for p in pending {
            p.spans.into_iter().for_each(crate::traces::record);
            cancelled.extend(p.staged.into_iter().flat_map(Staged::committed));
            made.extend(p.new_runs);
        }
        transitions::drop_entries(queue, &cancelled).await;
        runs::enqueue_made(queue, &made).await;
    }
}

/// [`advance`] in the caller's transaction. `None` when another process
/// holds the run (or it is gone): nothing was done. `force` advances the
/// run although no outbox row asks for it, for a caller that made the
/// event itself in this transaction (a trigger, a step's outcome).
pub async fn advance_in(
    tx: &mut PgConnection,
    versions: &Versions,
    run_id: &WorkflowRunId,
    now: DateTime<Utc>,
    force: bool,
) -> Result<Option<Pending>, sqlx::Error> {
    let mut advanced = advance_many_in(tx, versions, std::slice::from_ref(run_id), now, force).await?;
    Ok(advanced.pop().and_then(|(_, p)| p))
}

/// [`advance_in`] for many runs at once, in as few statements as the runs
/// allow: one locks them all (`SKIP LOCKED`, in id order) and consumes
/// their outbox rows, one reads all their steps, and the passes that go on
/// without an event to emit write their step rows, decisions and new job
/// runs together at the end (one insert, one update), and so do the passes
/// that end their runs with nothing left to halt (`end_settled_runs`). A
/// pass that ends its run otherwise, starts a saga or emits an event
/// writes its own as it goes, in the order those need. Returns each run with its advance, in input
/// order; `None` for a run another process holds (or that is gone).
pub async fn advance_many_in(
    tx: &mut PgConnection,
    versions: &Versions,
    run_ids: &[WorkflowRunId],
    now: DateTime<Utc>,
    force: bool,
) -> Result<Vec<(WorkflowRunId, Option<Pending>)>, sqlx::Error> {
    // Lock the runs and consume their events in one statement: whatever
    // commits after it leaves a row for the next advance.
    let locked: Vec<Locked> =
        sqlx::query_as(&lock_sql("", "r.id = ANY($1)", "")).bind(run_ids).fetch_all(&mut *tx).await?;
    advance_locked(tx, versions, run_ids, locked, None, now, force).await
}

/// [`advance_many_in`] for the runs of steps whose job runs this
/// transaction ended (`step_outcomes`), found by the statement that locks
/// them. A run another process holds gets the outbox row the job-run
/// trigger would have written (migration 0010), in that same statement,
/// so its holder or the scheduler advances it. Returns the advances made.
pub async fn advance_ended_steps_in(
    tx: &mut PgConnection,
    versions: &Versions,
    step_run_ids: &[&StepRunId],
    now: DateTime<Utc>,
) -> Result<Vec<Pending>, sqlx::Error> {
    if step_run_ids.is_empty() {
        return Ok(Vec::new());
    }
    let locked: Vec<Locked> = sqlx::query_as(&lock_sql(
        "want (id) AS (SELECT DISTINCT workflow_run_id FROM workflow_step_runs WHERE id = ANY($1)),",
        "r.id IN (SELECT id FROM want)",
        ", held AS (
            INSERT INTO workflow_outbox (workflow_run_id)
            SELECT id FROM want WHERE id NOT IN (SELECT id FROM r)
         )",
    ))
    .bind(step_run_ids)
    .fetch_all(&mut *tx)
    .await?;
    let ids: Vec<WorkflowRunId> = locked.iter().map(|l| l.run.id.clone()).collect();
    let advanced = advance_locked(tx, versions, &ids, locked, None, now, true).await?;
    Ok(advanced.into_iter().filter_map(|(_, p)| p).collect())
}

/// The statement that locks the runs `which` picks (`SKIP LOCKED`, in id
/// order) and consumes their outbox rows; `before` and `more`: CTEs before
/// and after those.
fn lock_sql(before: &str, which: &str, more: &str) -> String {
    format!(
        "WITH {before} r AS (
            SELECT {}, w.version_id AS wf_version_id, w.version AS wf_version, w.max_parallel_steps
              FROM workflow_runs r LEFT JOIN workflows w ON w.id = r.workflow_id AND w.deleted_at IS NULL
             WHERE {which} ORDER BY r.id FOR UPDATE OF r SKIP LOCKED
         ), consumed AS (
            DELETE FROM workflow_outbox WHERE workflow_run_id IN (SELECT id FROM r) RETURNING workflow_run_id
         ){more}
         SELECT r.*, (SELECT count(*) FROM consumed c WHERE c.workflow_run_id = r.id) AS consumed FROM r",
        RUN_COLUMNS.split(", ").map(|c| format!("r.{}", c.trim())).collect::<Vec<_>>().join(", ")
    )
}

/// The first pass of a run this transaction just created
/// (`workflow_moves::trigger`), from what the creation returned: the run
/// is the transaction's own, so nothing is locked or read again.
pub async fn advance_new_in(
    tx: &mut PgConnection,
    versions: &Versions,
    run: &WorkflowRun,
    wf: &super::workflows::WorkflowRecord,
    steps: Vec<StepRun>,
    now: DateTime<Utc>,
) -> Result<Option<Pending>, sqlx::Error> {
    let mut advanced = advance_new_many_in(tx, versions, vec![(run.clone(), wf, steps)], now).await?;
    Ok(advanced.pop().flatten())
}

/// [`advance_new_in`] for many runs, their passes written together as
/// [`advance_many_in`] writes them. In input order.
pub async fn advance_new_many_in(
    tx: &mut PgConnection,
    versions: &Versions,
    runs: Vec<(WorkflowRun, &super::workflows::WorkflowRecord, Vec<StepRun>)>,
    now: DateTime<Utc>,
) -> Result<Vec<Option<Pending>>, sqlx::Error> {
    let ids: Vec<WorkflowRunId> = runs.iter().map(|(r, _, _)| r.id.clone()).collect();
    let mut locked = Vec::with_capacity(runs.len());
    let mut rows = Vec::new();
    for (run, wf, steps) in runs {
        locked.push(Locked {
            run,
            wf_version_id: Some(wf.version_id.clone()),
            wf_version: Some(wf.version),
            max_parallel_steps: wf.max_parallel_steps,
            consumed: 0,
        });
        rows.extend(steps.into_iter().map(StepRow::fresh));
    }
    let advanced = advance_locked(tx, versions, &ids, locked, Some(rows), now, true).await?;
    Ok(advanced.into_iter().map(|(_, p)| p).collect())
}

/// The passes over locked runs (see [`advance_many_in`]); `rows`: the
/// steps of those runs, when the caller has them.
async fn advance_locked(
    tx: &mut PgConnection,
    versions: &Versions,
    run_ids: &[WorkflowRunId],
    locked: Vec<Locked>,
    rows: Option<Vec<StepRow>>,
    now: DateTime<Utc>,
    force: bool,
) -> Result<Vec<(WorkflowRunId, Option<Pending>)>, sqlx::Error> {
    // Steps are read only for the runs that get a pass (see the loop below).
    let live: Vec<&str> =
        locked.iter().filter(|l| !l.idle(now, force) && l.live()).map(|l| l.run.id.as_str()).collect();
    let mut rows_of: HashMap<WorkflowRunId, Vec<StepRow>> = HashMap::new();
    let rows = match rows {
        Some(rows) => rows,
        None => step_rows(tx, &live).await?,
    };
    for row in rows {
        rows_of.entry(row.step.workflow_run_id.as_str().into()).or_default().push(row);
    }
    let mut done: HashMap<WorkflowRunId, Pending> = HashMap::with_capacity(locked.len());
    let mut deferred: Vec<(PassWrite, Vec<NewRun>)> = Vec::new();
    let mut jobs: HashMap<JobId, Arc<jobs::JobRecord>> = HashMap::new();
    let mut ends: Vec<(WorkflowRun, Decided)> = Vec::new();
    let traced = crate::traces::enabled();
    for l in locked {
        let (idle, live) = (l.idle(now, force), l.live());
        let Locked { run, wf_version_id, wf_version, max_parallel_steps, .. } = l;
        let run_id = run.id.clone();
        let pending = |advanced: Advanced| Pending {
            run_id: run_id.clone(),
            advanced,
            woke: None,
            new_runs: Vec::new(),
            staged: Vec::new(),
            spans: Vec::new(),
        };
        if idle {
            // The run's wake-up time goes back to a scheduler told of it by a
            // pass made elsewhere (`finish_steps`).
            let idle = pending(Advanced { idle: true, wake_at: run.wake_at, ..Default::default() });
            done.insert(run_id, idle);
            continue;
        }
        if !live {
            sqlx::query("UPDATE workflow_runs SET wake_at = NULL WHERE id = $1 AND wake_at IS NOT NULL")
                .bind(&run_id)
                .execute(&mut *tx)
                .await?;
            done.insert(run_id.clone(), pending(Advanced::default()));
            continue;
        }
        let current = wf_version_id.zip(wf_version);
        let before = run.wake_at;
        let step_starts = match rows_of.get(&run_id).filter(|_| traced) {
            Some(rows) => super::workflow_traces::StepStarts::of(rows.iter().map(|r| &r.step)),
            None => Default::default(),
        };
        let mut engine = Pass {
            run,
            now,
            versions,
            current,
            max_parallel_steps,
            writes: Vec::new(),
            flushed: 0,
            new_runs: Vec::new(),
            staged: Vec::new(),
            ended: None,
            decisions: Vec::new(),
            event_notices: Vec::new(),
            emissions: Vec::new(),
            wake_at: None,
            deferred_runs: Vec::new(),
            deferred: None,
            deferred_end: None,
            jobs: std::mem::take(&mut jobs),
        };
        engine.go(tx, rows_of.remove(&run_id)).await?;
        let Pass {
            run,
            new_runs,
            staged,
            ended,
            writes,
            wake_at,
            deferred_runs,
            deferred: left,
            deferred_end,
            jobs: read,
            ..
        } = engine;
        jobs = read;
        let spans = if traced { super::workflow_traces::pass(&run, &writes, &step_starts, ended) } else { Vec::new() };
        if let Some(d) = deferred_end {
            ends.push((run, d));
        }
        if let Some(w) = left {
            deferred.push((w, deferred_runs));
        }
        let advanced = Advanced {
            idle: false,
            steps_started: writes.iter().filter(|w| w.start).count(),
            job_runs_enqueued: 0,
            ended: ended.map(|s| s.as_str().to_string()),
            wake_at,
        };
        let woke = wake_at.filter(|t| ended.is_none() && before != Some(*t));
        done.insert(run_id.clone(), Pending { run_id, advanced, woke, new_runs, staged, spans });
    }
    // The passes' last writes, together: the job runs first (the steps
    // name them), then the step rows, decisions and wake-up times.
    let mut passes = Vec::with_capacity(deferred.len());
    let (mut made, mut owners): (Vec<NewRun>, Vec<WorkflowRunId>) = (Vec::new(), Vec::new());
    for (pass, runs) in deferred {
        owners.extend(std::iter::repeat_n(pass.run_id.clone(), runs.len()));
        made.extend(runs);
        passes.push(pass);
    }
    if made.is_empty() {
        write_passes(tx, &passes).await?;
    } else {
        let inserted = if made.iter().any(NewRun::claims_a_key) {
            let inserted = runs::insert_many_in(tx, &made).await?;
            write_passes(tx, &passes).await?;
            inserted
        } else {
            insert_and_write_passes(tx, &made, &passes).await?
        };
        // In input order, so each run's owner is the one beside it.
        for ((run, created), owner) in inserted.into_iter().zip(&owners) {
            if let Some(p) = done.get_mut(owner).filter(|_| created) {
                p.new_runs.push(run);
            }
        }
    }
    end_settled_runs(tx, &ends).await?;
    Ok(run_ids.iter().map(|id| (id.clone(), done.remove(id))).collect())
}

/// Ends the runs whose passes in a batch ended them settled (no step
/// running or waiting, no compensation job run, no parent step to tell:
/// nothing to halt or cancel), after the batch wrote their steps and
/// decisions, their `run_ended` among them: one statement for the runs, their
/// subscriptions' deliveries, and the look for runs of their workflows
/// waiting for a slot (which [`admit_waiting`] then admits). [`end_runs`]
/// does the same for one run.
async fn end_settled_runs(tx: &mut PgConnection, ends: &[(WorkflowRun, Decided)]) -> Result<(), sqlx::Error> {
    if ends.is_empty() {
        return Ok(());
    }
    let rows: Vec<(&str, &Decided)> = ends.iter().map(|(r, d)| (r.id.as_str(), d)).collect();
    let told: Vec<super::deliveries::WorkflowEnded> = ends
        .iter()
        .map(|(r, d)| super::deliveries::WorkflowEnded {
            project_id: &r.project_id,
            workflow_id: &r.workflow_id,
            run_id: &r.id,
            status: d.status.as_str(),
            error: d.error.as_deref(),
        })
        .collect();
    let mut args = PgArguments::default();
    write_ends_args(&mut args, &rows, false).map_err(sqlx::Error::Encode)?;
    super::deliveries::workflow_runs_ended_args(&mut args, &told).map_err(sqlx::Error::Encode)?;
    let sql = format!(
        "WITH {WRITE_ENDS}, told AS ({})
         SELECT DISTINCT e.workflow_id FROM ended e
          WHERE EXISTS (SELECT 1 FROM workflow_runs w WHERE w.workflow_id = e.workflow_id AND w.status = 'pending')",
        shift_params(&super::deliveries::workflow_runs_ended_sql(), WRITE_ENDS_PARAMS)
    );
    let waiting: Vec<String> = sqlx::query_scalar_with(&sql, args).fetch_all(&mut *tx).await?;
    for w in waiting {
        admit(tx, &w).await?;
    }
    Ok(())
}

/// A run's row as [`write_ends`] left it.
#[derive(sqlx::FromRow)]
struct EndedRun {
    workflow_id: String,
    parent_step_run_id: Option<StepRunId>,
    project_id: String,
}

/// [`write_ends`]' CTEs (`t`, `ended`, `decided`): each run of the ends
/// moved to its end (its status, error and output, `finished_at`, no
/// wake-up, and a compensation under way marked interrupted unless the end
/// says how the saga ended), with its `run_ended` decision when `$8`.
const WRITE_ENDS: &str = "t AS (
        SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::jsonb[], $7::text[])
               WITH ORDINALITY AS t (id, status, error, output, error_class, compensation, reason, n)
     ), ended AS (
        UPDATE workflow_runs r SET status = t.status, error = t.error, output = t.output, finished_at = now(),
            wake_at = NULL, error_class = t.error_class,
            compensation = coalesce(t.compensation, CASE WHEN r.compensation->>'status' = 'running'
                THEN r.compensation || jsonb_build_object('status', 'interrupted') ELSE r.compensation END)
          FROM t WHERE r.id = t.id
         RETURNING r.workflow_id, r.parent_step_run_id, r.project_id
     ), decided AS (
        INSERT INTO workflow_decisions (workflow_run_id, step_ref, decision_type, reason, details)
        SELECT t.id, NULL, 'run_ended', t.reason, jsonb_build_object('status', t.status) FROM t WHERE $8
         ORDER BY t.n
     )";
/// The parameters of [`WRITE_ENDS`].
const WRITE_ENDS_PARAMS: usize = 8;

fn write_ends_args(
    args: &mut PgArguments,
    ends: &[(&str, &Decided)],
    decide: bool,
) -> Result<(), sqlx::error::BoxDynError> {
    macro_rules! col {
        ($f:expr) => {
            ends.iter().map($f).collect::<Vec<_>>()
        };
    }
    args.add(col!(|(id, _)| *id))?;
    args.add(col!(|(_, d)| d.status.as_str()))?;
    args.add(col!(|(_, d)| d.error.as_deref()))?;
    args.add(col!(|(_, d)| d.output.as_ref().map(Json)))?;
    args.add(col!(|(_, d)| d.error_class.as_deref()))?;
    args.add(col!(|(_, d)| d.compensation.as_ref().map(Json)))?;
    args.add(col!(|(_, d)| d.reason.as_str()))?;
    args.add(decide)?;
    Ok(())
}

/// Moves each run of `ends` to its end in one statement ([`WRITE_ENDS`]);
/// with its `run_ended` decision when `decide` (a batch writes those with
/// its passes). The runs that were there to update, in no particular order.
async fn write_ends(
    tx: &mut PgConnection,
    ends: &[(&str, &Decided)],
    decide: bool,
) -> Result<Vec<EndedRun>, sqlx::Error> {
    let mut args = PgArguments::default();
    write_ends_args(&mut args, ends, decide).map_err(sqlx::Error::Encode)?;
    sqlx::query_as_with(&format!("WITH {WRITE_ENDS} SELECT * FROM ended"), args).fetch_all(&mut *tx).await
}

/// The steps of runs, each with what its job run, child run and
/// compensation run say now.
async fn step_rows(tx: &mut PgConnection, run_ids: &[&str]) -> Result<Vec<StepRow>, sqlx::Error> {
    if run_ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(&format!(
        // Each join a probe by primary key per step (OFFSET 0 keeps the
        // planner from turning them into joins over every partition of
        // job_runs: a merge join sorting all of them was one of its
        // plans, and the read averaged 276 µs in the closed loop).
        "SELECT {}, j.status AS job_status, j.result AS job_result, j.error AS job_error,
                c.status AS child_status, c.output AS child_output, c.error AS child_error,
                cj.status AS comp_status
           FROM workflow_step_runs s
           LEFT JOIN LATERAL (SELECT status, result, error FROM job_runs WHERE id = s.job_run_id OFFSET 0) j
             ON true
           LEFT JOIN LATERAL (SELECT status, output, error FROM workflow_runs WHERE id = s.child_workflow_run_id
                               OFFSET 0) c ON true
           LEFT JOIN LATERAL (SELECT status FROM job_runs WHERE id = s.compensation_job_run_id OFFSET 0) cj
             ON true
          WHERE s.workflow_run_id = ANY($1)",
        STEP_COLUMNS.split(", ").map(|c| format!("s.{c}")).collect::<Vec<_>>().join(", ")
    ))
    .bind(run_ids)
    .fetch_all(&mut *tx)
    .await
}

/// A run locked for an advance, with what it needs of its workflow (none
/// when the workflow was deleted: the run finishes on what it has).
#[derive(sqlx::FromRow)]
struct Locked {
    #[sqlx(flatten)]
    run: WorkflowRun,
    wf_version_id: Option<String>,
    wf_version: Option<i32>,
    max_parallel_steps: Option<i32>,
    /// Outbox rows the advance consumed.
    consumed: i64,
}

impl Locked {
    /// Nothing asks for a pass: no event consumed, no wake-up due, and the
    /// caller did not make one itself.
    fn idle(&self, now: DateTime<Utc>, force: bool) -> bool {
        let due = self.run.wake_at.is_some_and(|w| w <= now);
        self.consumed == 0 && !due && !force
    }

    /// Steps may still move (an ended run's pass only clears its wake-up).
    fn live(&self) -> bool {
        matches!(self.run.status, WorkflowRunStatus::Running | WorkflowRunStatus::Paused)
    }
}

/// One advance's working state.
struct Pass<'v> {
    run: WorkflowRun,
    now: DateTime<Utc>,
    versions: &'v Versions,
    /// The workflow's current version (id, number).
    current: Option<(String, i32)>,
    max_parallel_steps: Option<i32>,
    writes: Vec<StepWrite>,
    /// How many of `writes` are written: a pass that begins a saga flushes
    /// twice, and a write must not undo what the halt did in between.
    flushed: usize,
    new_runs: Vec<Run>,
    staged: Vec<Staged>,
    ended: Option<WorkflowRunStatus>,
    /// Decisions made, written with the step rows (one statement).
    decisions: Vec<NewDecision>,
    /// Event waits that timed out and name an event_notify_url.
    event_notices: Vec<EventNotice>,
    /// Events to emit with the writes (event_emit_key): step run id, step
    /// ref, key, the step's output.
    emissions: Vec<(StepRunId, String, String, Option<Value>)>,
    wake_at: Option<DateTime<Utc>>,
    /// Job runs the pass started, not yet inserted.
    deferred_runs: Vec<NewRun>,
    /// The pass's last writes, left to its batch ([`advance_locked`]).
    deferred: Option<PassWrite>,
    /// In a batch: the run's end, when the pass ended it settled
    /// ([`end_settled_runs`] writes the batch's together).
    deferred_end: Option<Decided>,
    /// The jobs read so far in this batch, by id.
    jobs: HashMap<JobId, Arc<jobs::JobRecord>>,
}

impl Pass<'_> {
    fn note(&mut self, step_ref: Option<&str>, decision_type: &str, reason: &str, details: Value) {
        self.decisions.push(NewDecision {
            step_ref: step_ref.map(str::to_string),
            decision_type: decision_type.to_string(),
            reason: reason.to_string(),
            details,
        });
    }

    /// The pass over the run; `rows`: its steps as read with its lock, if
    /// they were.
    async fn go(&mut self, tx: &mut PgConnection, rows: Option<Vec<StepRow>>) -> Result<(), sqlx::Error> {
        let run_id = self.run.id.clone();
        let mut steps = self.versions.get(tx, &self.run.version_id).await?;
        let mut rows = match rows {
            Some(rows) => rows,
            None => step_rows(tx, &[run_id.as_str()]).await?,
        };
        if let Some((id, n)) =
            self.current.clone().filter(|(id, _)| self.run.version_policy == "latest" && *id != self.run.version_id)
        {
            steps = self.move_to_version(tx, &id, n, &mut rows).await?;
        }
        let defs: HashMap<&str, &Step> = steps.iter().map(|s| (s.step_ref.as_str(), s)).collect();
        let mut now_of: HashMap<String, StepNow> = HashMap::new();
        let mut rows_by_ref: HashMap<String, StepRun> = HashMap::new();
        let mut comp_of: HashMap<String, RunStatus> = HashMap::new();
        for row in rows {
            let synced = self.sync(&row, defs.get(row.step.step_ref.as_str()).copied());
            now_of.insert(row.step.step_ref.clone(), synced);
            if let Some(c) = row.comp_status {
                comp_of.insert(row.step.step_ref.clone(), c);
            }
            rows_by_ref.insert(row.step.step_ref.clone(), row.step);
        }

        // A compensating run answers to its saga only: no step starts, and
        // its deadline no longer cuts it short (each compensation is
        // bounded by compensation_timeout_secs and its job's retries).
        if self.run.compensation.as_ref().is_some_and(|c| c.0["status"] == "running") {
            return self.saga(tx, &steps, &rows_by_ref, &comp_of).await;
        }

        if self.run.deadline_at.is_some_and(|d| d <= self.now) {
            self.emits(&defs, &rows_by_ref, &now_of);
            self.flush(tx, None).await?;
            let reason = "the workflow run passed its timeout_secs";
            self.staged.push(end_run(tx, &self.run, Decided::ended(WorkflowRunStatus::TimedOut, reason)).await?);
            self.ended = Some(WorkflowRunStatus::TimedOut);
            return Ok(());
        }

        let payload = self.run.payload.as_ref().map(|p| p.0.clone()).unwrap_or(Value::Null);
        let max_parallel = self.max_parallel_steps.map(i64::from);
        let mut held_before: Option<HashSet<String>> = None;
        // Starting a step can fail at once (its job is gone): the rules
        // then see the failure on the next round, bounded by the step count.
        for _ in 0..=steps.len() {
            let next = workflow_run::next(&Inputs {
                steps: &steps,
                now: &now_of,
                payload: &payload,
                paused: self.run.status == WorkflowRunStatus::Paused,
                max_parallel_steps: max_parallel,
            });
            // A step that ended as it started (its job is gone, a cost gate
            // under its threshold) lets the rules look again in this pass.
            let mut settled_at_start = false;
            let mut starts: Vec<(&Step, &StepRun)> = Vec::new();
            for d in &next.decisions {
                match d {
                    Decision::Skip { step_ref, reason, details } => {
                        let s = &rows_by_ref[step_ref];
                        self.writes.push(StepWrite::finish(&view(s), StepStatus::Skipped, None, None));
                        now_of.insert(
                            step_ref.clone(),
                            StepNow { status: StepStatus::Skipped, output: None, error: None },
                        );
                        self.note(Some(step_ref), "skipped", reason, details.clone());
                    }
                    Decision::Fail { step_ref, error } => {
                        let s = &rows_by_ref[step_ref];
                        self.writes.push(StepWrite::finish(&view(s), StepStatus::Failed, None, Some(error.clone())));
                        now_of.insert(
                            step_ref.clone(),
                            StepNow { status: StepStatus::Failed, output: None, error: Some(error.clone()) },
                        );
                        self.note(Some(step_ref), "failed", error, Value::Null);
                    }
                    Decision::Held { step_ref, reason } => {
                        if held_before.is_none() {
                            held_before = Some(held_steps(tx, &run_id).await?);
                        }
                        if held_before.as_mut().is_some_and(|h| h.insert(step_ref.clone())) {
                            self.note(Some(step_ref), "held", reason, Value::Null);
                        }
                    }
                    Decision::Start { step_ref } => starts.push((defs[step_ref.as_str()], &rows_by_ref[step_ref])),
                }
            }
            let starts: Vec<(Step, StepRun)> = starts.into_iter().map(|(d, r)| (d.clone(), r.clone())).collect();
            for (status, step_ref, output, error) in self.start(tx, &starts).await? {
                if status.is_terminal() {
                    settled_at_start = true;
                }
                now_of.insert(step_ref, StepNow { status, output, error });
            }
            if let Some(ending) = next.ending {
                self.emits(&defs, &rows_by_ref, &now_of);
                let settled = now_of.values().all(|n| !matches!(n.status, StepStatus::Running | StepStatus::Waiting))
                    && rows_by_ref.values().all(|r| r.compensation_job_run_id.is_none());
                let quiet = self.emissions.is_empty() && self.event_notices.is_empty();
                if let Some(decided) = run_end::decided(&ending, &now_of)
                    .filter(|_| settled && quiet && self.run.parent_step_run_id.is_none())
                {
                    // The chain's last pass: its writes and the run's end
                    // wait for the batch's statements.
                    self.ended = Some(decided.status);
                    self.note(None, "run_ended", &decided.reason, json!({ "status": decided.status.as_str() }));
                    let from = std::mem::replace(&mut self.flushed, self.writes.len());
                    self.deferred = Some(self.pass_write(from, None));
                    self.deferred_end = Some(decided);
                    return Ok(());
                }
                self.flush(tx, None).await?;
                let Some(decided) = run_end::decided(&ending, &now_of) else {
                    let workflow_run::Ending::Compensate { step_ref, error } = ending else {
                        unreachable!("run_end::decided decides every other ending")
                    };
                    self.begin_saga(tx, &step_ref, &error).await?;
                    // Steps the halt cancelled are read again by the saga.
                    return Box::pin(self.go(tx, None)).await;
                };
                self.ended = Some(decided.status);
                self.staged.push(end_runs(tx, &run_id, decided, true, settled).await?);
                return Ok(());
            }
            if !settled_at_start {
                break;
            }
        }
        self.emits(&defs, &rows_by_ref, &now_of);
        // The next moment the run must be looked at without an event: the
        // earliest end of a waiting step's wait, or the run's deadline.
        let written: HashMap<&StepRunId, Option<DateTime<Utc>>> =
            self.writes.iter().map(|w| (&w.id, w.wake_at)).collect();
        let wake_at = rows_by_ref
            .iter()
            .filter(|(r, _)| now_of.get(*r).is_some_and(|n| n.status == StepStatus::Waiting))
            .filter_map(|(_, row)| written.get(&row.id).copied().unwrap_or(row.wake_at))
            .chain(self.run.deadline_at)
            .min();
        self.end(tx, wake_at).await?;
        self.wake_at = wake_at;
        Ok(())
    }

    /// Queues the event of each completed step with an event_emit_key that
    /// has not emitted one for this completion (a step completes in a pass,
    /// or by a decision or an event between passes).
    fn emits(
        &mut self,
        defs: &HashMap<&str, &Step>,
        rows: &HashMap<String, StepRun>,
        now_of: &HashMap<String, StepNow>,
    ) {
        let mut due: Vec<(StepRunId, String, String, Option<Value>)> = now_of
            .iter()
            .filter(|(_, n)| n.status == StepStatus::Completed)
            .filter_map(|(r, n)| {
                let key = defs.get(r.as_str())?.event_emit_key.clone()?;
                let row = rows.get(r).filter(|row| row.emitted_event_id.is_none())?;
                Some((row.id.clone(), r.clone(), key, n.output.clone()))
            })
            .collect();
        due.sort_by(|a, b| a.1.cmp(&b.1));
        self.emissions.extend(due);
    }

    /// Writes what the pass decided so far; `wake`: the run's wake-up time
    /// as the pass leaves it, when the pass is over.
    async fn flush(&mut self, tx: &mut PgConnection, wake: Option<Option<DateTime<Utc>>>) -> Result<(), sqlx::Error> {
        // What follows may touch the job runs this pass started (an ending
        // cancels them): they are written first.
        if !self.deferred_runs.is_empty() {
            let made = runs::insert_many_in(tx, &std::mem::take(&mut self.deferred_runs)).await?;
            self.new_runs.extend(made.into_iter().filter(|(_, created)| *created).map(|(r, _)| r));
        }
        let from = std::mem::replace(&mut self.flushed, self.writes.len());
        if self.emissions.is_empty() && self.event_notices.is_empty() {
            // The common pass: one statement.
            let pass = self.pass_write(from, wake);
            return write_passes(tx, std::slice::from_ref(&pass)).await;
        }
        let pass = PassWrite {
            run_id: self.run.id.clone(),
            writes: self.writes[from..].to_vec(),
            decisions: Vec::new(),
            wake: None,
        };
        write_passes(tx, std::slice::from_ref(&pass)).await?;
        for (step_run_id, step_ref, key, output) in std::mem::take(&mut self.emissions) {
            let new = events::NewEvent {
                id: crate::ids::event_id(),
                project_id: self.run.project_id.clone(),
                event_key: key.clone(),
                payload: output,
                idempotency_key: None,
                created_by: self.run.created_by.clone(),
            };
            let (event, made) = events::emit_in(tx, &new).await?;
            sqlx::query("UPDATE workflow_step_runs SET emitted_event_id = $2 WHERE id = $1")
                .bind(&step_run_id)
                .bind(&event.id)
                .execute(&mut *tx)
                .await?;
            self.new_runs.extend(made);
            let details = json!({
                "event_id": event.id, "event_key": key, "resumed_steps": event.resumed_steps,
                "triggered_runs": event.triggered_runs.0.len(),
            });
            self.note(Some(&step_ref), "event_emitted", &format!("event {key} emitted on completion"), details);
        }
        for n in std::mem::take(&mut self.event_notices) {
            super::deliveries::event_trigger_timed_out(
                tx,
                &self.run.project_id,
                &n.url,
                &self.run.id,
                &n.step_run_id,
                &n.step_ref,
                &n.event_key,
            )
            .await?;
        }
        let pass = PassWrite {
            run_id: self.run.id.clone(),
            writes: Vec::new(),
            decisions: std::mem::take(&mut self.decisions),
            wake,
        };
        write_passes(tx, std::slice::from_ref(&pass)).await
    }

    /// The writes from `from` on and the decisions made, as one pass's.
    fn pass_write(&mut self, from: usize, wake: Option<Option<DateTime<Utc>>>) -> PassWrite {
        PassWrite {
            run_id: self.run.id.clone(),
            writes: self.writes[from..].to_vec(),
            decisions: std::mem::take(&mut self.decisions),
            wake,
        }
    }

    /// Ends a pass that goes on: its writes wait for the batch's one
    /// statement ([`advance_locked`]), unless it has events to
    /// emit or notices to write, which need their statements in order.
    async fn end(&mut self, tx: &mut PgConnection, wake: Option<DateTime<Utc>>) -> Result<(), sqlx::Error> {
        if self.emissions.is_empty() && self.event_notices.is_empty() {
            let from = std::mem::replace(&mut self.flushed, self.writes.len());
            self.deferred = Some(self.pass_write(from, Some(wake)));
            return Ok(());
        }
        self.flush(tx, Some(wake)).await
    }

    /// Brings one step up to date with its job run, child run or wait
    /// (`engine::step_ended`).
    fn sync(&mut self, row: &StepRow, def: Option<&Step>) -> StepNow {
        let s = &row.step;
        let seen = Seen {
            job: row.job_status.map(|j| (j, row.job_result.as_ref().map(|r| &r.0), row.job_error.as_deref())),
            child: row.child_status.map(|c| (c, row.child_output.as_ref().map(|o| &o.0), row.child_error.as_deref())),
        };
        match step_ended(&view(s), &seen, def, self.now) {
            Some(e) => {
                self.writes.push(e.write);
                self.decisions.push(e.note);
                self.event_notices.extend(e.notice);
                e.now
            }
            None => {
                StepNow { status: s.status, output: s.output.as_ref().map(|o| o.0.clone()), error: s.error.clone() }
            }
        }
    }

    /// Starts steps (`engine::step_start`); returns each one's status
    /// after (running, waiting, failed when it could not start, completed
    /// for a cost gate under its threshold) with its output and error.
    async fn start(
        &mut self,
        tx: &mut PgConnection,
        starts: &[(Step, StepRun)],
    ) -> Result<Vec<(StepStatus, String, Option<Value>, Option<String>)>, sqlx::Error> {
        let mut out = Vec::with_capacity(starts.len());
        let job_of = |d: &Step| match &d.kind {
            StepKind::Job { job_id, .. } => Some(job_id.clone()),
            _ => None,
        };
        // Jobs read once per batch of passes (the runs of one workflow
        // start the same few), and kept a second between batches
        // (`JobCache`).
        let missing: Vec<String> =
            starts.iter().filter_map(|(d, _)| job_of(d)).filter(|id| !self.jobs.contains_key(id.as_str())).collect();
        if !missing.is_empty() {
            let read = self.versions.jobs.get_many_in(tx, &missing).await?;
            self.jobs.extend(read.into_iter().map(|j| (j.id.clone(), j)));
        }
        // Taken out while the starts borrow the pass (an error loses only the cache).
        let jobs = std::mem::take(&mut self.jobs);
        let cost = if starts.iter().any(|(d, _)| d.step_type() == Some(StepType::CostGate)) {
            Some(run_cost(tx, &self.run.id).await?)
        } else {
            None
        };
        let mut new_runs = Vec::new();
        for (def, row) in starts {
            let facts =
                Facts { job: job_of(def).and_then(|id| jobs.get(id.as_str())).map(|j| &**j), cost_microusd: cost };
            let started = step_start(def, &view(row), &run_view(&self.run), &facts, self.now);
            let mut w = started.write;
            new_runs.extend(started.job_run);
            if let Some(c) = started.child {
                match self.child(tx, &c, row).await? {
                    Ok(child) => w.child_id = Some(child),
                    Err(e) => w.fail(e),
                }
            }
            self.decisions.push(step_start::start_note(def, &view(row), &w, &started.figures));
            out.push((w.status, row.step_ref.clone(), w.output.clone(), w.error.clone()));
            self.writes.push(w);
        }
        self.jobs = jobs;
        // Inserted with the pass's other writes: at its end, or before
        // whatever needs them in the database first (`flush`).
        self.deferred_runs.extend(new_runs);
        Ok(out)
    }

    /// Starts a sub-workflow step's child run under the sub-workflow's
    /// rules; `Err` with the reason when it cannot start.
    async fn child(
        &mut self,
        tx: &mut PgConnection,
        c: &ChildRequest,
        row: &StepRun,
    ) -> Result<Result<String, String>, sqlx::Error> {
        let sub_id = &c.sub_workflow_id;
        let Some(sub) = workflows::get_in(tx, Tenant::Project(&self.run.project_id), sub_id).await? else {
            return Ok(Err(format!("the sub-workflow {sub_id} does not exist any more")));
        };
        if !sub.enabled {
            return Ok(Err(format!("the sub-workflow {sub_id} is disabled")));
        }
        let new = workflow_runs::NewWorkflowRun {
            payload: c.payload.clone(),
            idempotency_key: Some(c.idempotency_key.clone()),
            tags: self.run.tags.0.clone(),
            triggered_by: "workflow".into(),
            created_by: self.run.created_by.clone(),
            parent_step_run_id: Some(row.id.clone()),
            depth: c.depth,
            cron_tick: None,
            traceparent: Some(crate::traces::step_parent(&self.run.id, self.run.traceparent.as_deref(), &row.id)),
        };
        Ok(match workflow_runs::trigger_in(tx, &sub, &new).await? {
            Triggered::Created(r) | Triggered::Existing(r) => Ok(r.id.into_string()),
            Triggered::Skipped { active_run_id } => {
                Err(format!("the sub-workflow skips a run while one is active (skip_if_running): {active_run_id}"))
            }
        })
    }

    /// A step with on_failure `compensate` failed (`error`): the steps under
    /// way are cancelled with their job runs and child runs, and the run's
    /// saga begins (its record on the run says so from here on).
    async fn begin_saga(&mut self, tx: &mut PgConnection, failed_step: &str, error: &str) -> Result<(), sqlx::Error> {
        let (jobs, children) = halt_steps(tx, &self.run.id, "the workflow run is compensating").await?;
        for c in children {
            let d = Decided::ended(WorkflowRunStatus::Cancelled, "its parent workflow run is compensating");
            self.staged.push(end_runs(tx, &c, d, false, false).await?);
        }
        self.staged.push(transitions::cancel_in(tx, &jobs, "cancelled: its workflow run is compensating").await?);
        let record = run_end::saga_record(failed_step, error, self.now);
        sqlx::query("UPDATE workflow_runs SET compensation = $2 WHERE id = $1")
            .bind(&self.run.id)
            .bind(Json(&record))
            .execute(&mut *tx)
            .await?;
        self.run.compensation = Some(Json(record));
        let reason = format!("step {failed_step} failed with on_failure compensate: its completed steps are undone");
        self.note(Some(failed_step), "compensation_started", &reason, json!({ "error": error }));
        Ok(())
    }

    /// One move of a compensating run's saga (`domain::workflow_run::saga`):
    /// steps whose compensation completed become `compensated`, the next
    /// compensation job starts, or the run ends failed.
    async fn saga(
        &mut self,
        tx: &mut PgConnection,
        steps: &[Step],
        rows: &HashMap<String, StepRun>,
        comp_of: &HashMap<String, RunStatus>,
    ) -> Result<(), sqlx::Error> {
        let list: Vec<Compensable> = steps
            .iter()
            .filter(|d| d.compensation.is_some())
            .filter_map(|d| rows.get(&d.step_ref))
            .filter(|r| matches!(r.status, StepStatus::Completed | StepStatus::Compensated))
            .map(|r| Compensable {
                step_ref: r.step_ref.clone(),
                status: r.status,
                finished_at: r.finished_at,
                job: comp_of.get(&r.step_ref).copied(),
            })
            .collect();
        let next = workflow_run::saga(&list);
        let mut done: HashSet<String> =
            list.iter().filter(|c| c.status == StepStatus::Compensated).map(|c| c.step_ref.clone()).collect();
        for r in &next.compensated {
            let row = &rows[r];
            let mut w =
                StepWrite::finish(&view(row), StepStatus::Compensated, row.output.as_ref().map(|o| o.0.clone()), None);
            // finished_at stays the step's completion: the saga's order.
            w.finish = false;
            self.writes.push(w);
            let details = json!({ "job_run_id": row.compensation_job_run_id });
            self.note(Some(r), "step_compensated", "its compensation job completed", details);
            done.insert(r.clone());
        }
        let mut then = next.then;
        if let SagaMove::Start(r) = &then {
            let def = steps.iter().find(|d| d.step_ref == *r).expect("a compensable step is in the version");
            match self.start_compensation(tx, def, &rows[r]).await? {
                Ok(job_run_id) => {
                    let reason = "its compensation job started";
                    self.note(Some(r), "compensating", reason, json!({ "job_run_id": job_run_id }));
                }
                Err(e) => {
                    self.note(Some(r), "compensation_failed", &e, Value::Null);
                    then = SagaMove::Failed(r.clone());
                }
            }
        } else if let SagaMove::Failed(r) = &then {
            // Its compensation job failed for good: explain says so, as it
            // does for one that could not start.
            let details = json!({ "job_run_id": rows.get(r).and_then(|x| x.compensation_job_run_id.clone()) });
            self.note(Some(r), "compensation_failed", "its compensation job failed", details);
        }
        self.flush(tx, None).await?;
        let ending = match &then {
            SagaMove::Done => None,
            SagaMove::Failed(r) => Some(r.clone()),
            SagaMove::Start(_) | SagaMove::Wait => {
                // Only the compensation jobs' ends move the saga on.
                sqlx::query("UPDATE workflow_runs SET wake_at = NULL WHERE id = $1 AND wake_at IS NOT NULL")
                    .bind(&self.run.id)
                    .execute(&mut *tx)
                    .await?;
                return Ok(());
            }
        };
        let record = self.run.compensation.as_ref().map(|c| c.0.clone()).unwrap_or(Value::Null);
        let job_run_of = |r: &str| rows.get(r).and_then(|x| x.compensation_job_run_id.clone());
        let decided = run_end::saga_ended(record, &list, &done, ending.as_deref(), job_run_of, self.now);
        self.ended = Some(WorkflowRunStatus::Failed);
        self.staged.push(end_run(tx, &self.run, decided).await?);
        Ok(())
    }

    /// Starts a step's compensation job (`Err` with the reason when it
    /// cannot): the job's own retry policy, compensation_timeout_secs as
    /// its timeout, and a payload naming the step, its payload and output.
    async fn start_compensation(
        &mut self,
        tx: &mut PgConnection,
        def: &Step,
        row: &StepRun,
    ) -> Result<Result<String, String>, sqlx::Error> {
        let Some(job_id) = def.compensation.as_ref().map(|c| c.job_id.clone()) else {
            return Ok(Err("the step names no compensation_job_id".into()));
        };
        let job = jobs::get_many_in(tx, std::slice::from_ref(&job_id)).await?.into_iter().next();
        let job = match job.filter(|j| j.project_id == self.run.project_id) {
            None => return Ok(Err(format!("the compensation job {job_id} does not exist any more"))),
            Some(j) if !j.enabled => return Ok(Err(format!("the compensation job {job_id} is disabled"))),
            Some(j) => j,
        };
        let saga = self.run.compensation.as_ref().map(|c| c.0.clone()).unwrap_or(Value::Null);
        let payload = json!({
            "workflow_run_id": self.run.id,
            "step_ref": row.step_ref,
            "payload": def.payload.clone().or_else(|| self.run.payload.as_ref().map(|p| p.0.clone())),
            "output": row.output.as_ref().map(|o| &o.0),
            "failed_step": saga["failed_step"],
            "error": saga["error"],
        });
        let key = format!("{}:{}:compensation", row.id, row.attempt);
        let mut new = match step_start::new_run(&job, &run_view(&self.run), &view(row), key, Some(payload), self.now) {
            Ok(n) => n,
            Err(e) => return Ok(Err(e)),
        };
        new.timeout_secs_override =
            def.compensation.as_ref().and_then(|c| c.timeout_secs).map(|t| t.clamp(1, i32::MAX as i64) as i32);
        if let Value::Object(m) = &mut new.metadata {
            m.insert("compensation".into(), Value::String("true".into()));
        }
        let written = runs::insert_many_in(tx, std::slice::from_ref(&new)).await?;
        let Some((run, created)) = written.into_iter().next() else {
            return Ok(Err("the compensation job run could not be written".into()));
        };
        sqlx::query("UPDATE workflow_step_runs SET compensation_job_run_id = $2 WHERE id = $1")
            .bind(&row.id)
            .bind(&run.id)
            .execute(&mut *tx)
            .await?;
        let id = run.id.to_string();
        if created {
            self.new_runs.push(run);
        }
        Ok(Ok(id))
    }

    /// Under version_policy `latest`: the run follows the workflow's newest
    /// version from here on (`engine::version_move`); `rows` become the
    /// run's steps on it.
    async fn move_to_version(
        &mut self,
        tx: &mut PgConnection,
        version_id: &str,
        version: i32,
        rows: &mut Vec<StepRow>,
    ) -> Result<Arc<Steps>, sqlx::Error> {
        let steps = self.versions.get(tx, version_id).await?;
        // New steps' rows need the stored definitions (their stage_notifications).
        let saved = workflow_runs::version_steps_in(tx, version_id).await?;
        let views: Vec<StepView> = rows.iter().map(|r| view(&r.step)).collect();
        let m = version_move::move_to(&views, &self.run.version_id, &saved, version_id, version);
        if !m.drop.is_empty() {
            sqlx::query("DELETE FROM workflow_step_runs WHERE id = ANY($1) AND status = 'pending'")
                .bind(&m.drop)
                .execute(&mut *tx)
                .await?;
            rows.retain(|r| !m.drop.contains(&r.step.id));
        }
        let added = workflow_runs::insert_steps(tx, &self.run.id, &m.add).await?;
        rows.extend(added.into_iter().map(StepRow::fresh));
        sqlx::query("UPDATE workflow_runs SET version_id = $2, version = $3 WHERE id = $1")
            .bind(&self.run.id)
            .bind(version_id)
            .bind(version)
            .execute(&mut *tx)
            .await?;
        self.decisions.push(m.note);
        self.run.version_id = version_id.to_string();
        self.run.version = version;
        Ok(steps)
    }
}

/// The steps a `held` decision was recorded for already.
async fn held_steps(tx: &mut PgConnection, run_id: &str) -> Result<HashSet<String>, sqlx::Error> {
    let refs: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT step_ref FROM workflow_decisions WHERE workflow_run_id = $1 AND decision_type = 'held'",
    )
    .bind(run_id)
    .fetch_all(tx)
    .await?;
    Ok(refs.into_iter().collect())
}

/// Ends a run (and, depth first, the child runs of its running steps):
/// its running and waiting steps are cancelled with their job runs, the
/// run takes `d`'s status, its parent step's run is told, and a run of
/// the same workflow waiting for a slot under max_concurrent_runs starts.
/// The caller holds the run's lock; the job runs cancelled are staged.
pub async fn end_run(tx: &mut PgConnection, run: &WorkflowRun, d: Decided) -> Result<Staged, sqlx::Error> {
    end_runs(tx, &run.id, d, true, false).await
}

/// [`end_run`] by id; `tell_parent`: the run's parent step is told (not
/// when the parent is the one ending it); `settled`: the caller's pass saw
/// no step of the run running or waiting and none with a compensation job
/// run, so there is nothing to halt or cancel (the chain's last pass: two
/// statements fewer).
async fn end_runs(
    tx: &mut PgConnection,
    run_id: &str,
    d: Decided,
    tell_parent: bool,
    settled: bool,
) -> Result<Staged, sqlx::Error> {
    let mut job_runs: Vec<String> = Vec::new();
    let mut todo: Vec<(String, Decided)> = vec![(run_id.to_string(), d)];
    let mut first = tell_parent;
    while let Some((id, d)) = todo.pop() {
        if !(settled && id == run_id) {
            let (jobs, children) = halt_steps(tx, &id, &format!("the workflow run ended ({})", d.status)).await?;
            job_runs.extend(jobs);
            for c in children {
                todo.push((c, Decided::ended(WorkflowRunStatus::Cancelled, "its parent workflow run ended")));
            }
            // A compensation under way ends with the run.
            let compensating: Vec<String> = sqlx::query_scalar(
                "SELECT compensation_job_run_id FROM workflow_step_runs
                  WHERE workflow_run_id = $1 AND status = 'completed' AND compensation_job_run_id IS NOT NULL",
            )
            .bind(&id)
            .fetch_all(&mut *tx)
            .await?;
            job_runs.extend(compensating);
        }
        let Some(ended) = write_ends(tx, &[(id.as_str(), &d)], true).await?.pop() else { continue };
        let told = super::deliveries::WorkflowEnded {
            project_id: &ended.project_id,
            workflow_id: &ended.workflow_id,
            run_id: &id,
            status: d.status.as_str(),
            error: d.error.as_deref(),
        };
        super::deliveries::workflow_runs_ended(tx, std::slice::from_ref(&told)).await?;
        // The parent is told only by the run it started, and only when it
        // is not the one ending this run (a cancel from above).
        if let Some(parent) = ended.parent_step_run_id.filter(|_| first) {
            sqlx::query(
                "INSERT INTO workflow_outbox (workflow_run_id) SELECT workflow_run_id FROM workflow_step_runs WHERE id = $1",
            )
            .bind(&parent)
            .execute(&mut *tx)
            .await?;
        }
        admit_waiting(tx, &ended.workflow_id).await?;
        first = false;
    }
    transitions::cancel_in(tx, &job_runs, "cancelled with its workflow run").await
}

/// Cancels the run's running and waiting steps (`error` says why), with
/// their stage deliveries; returns their job runs, and their child runs
/// still active (locked), for the caller to cancel.
async fn halt_steps(
    tx: &mut PgConnection,
    run_id: &str,
    error: &str,
) -> Result<(Vec<String>, Vec<String>), sqlx::Error> {
    let (jobs, children, stages): (Vec<String>, Vec<String>, _) = sqlx::query_as(&format!(
        "WITH h AS (
            UPDATE workflow_step_runs s SET status = 'cancelled', ended_by_run = true, finished_at = now(),
                wake_at = NULL, error = $2
             WHERE workflow_run_id = $1 AND status IN ('running', 'waiting')
             RETURNING s.job_run_id, s.child_workflow_run_id, {}
         )
         SELECT array(SELECT job_run_id FROM h WHERE job_run_id IS NOT NULL),
                array(SELECT child_workflow_run_id FROM h WHERE child_workflow_run_id IS NOT NULL), {}",
        super::deliveries::STAGE_RETURNING,
        super::deliveries::stage_changes("h")
    ))
    .bind(run_id)
    .bind(error)
    .fetch_one(&mut *tx)
    .await?;
    super::deliveries::step_stages(tx, stages).await?;
    let mut active = Vec::new();
    for child in children {
        // A child that ended already is left as it is.
        let locked: Option<String> = sqlx::query_scalar(
            "SELECT id FROM workflow_runs WHERE id = $1 AND status IN ('pending', 'running', 'paused') FOR UPDATE",
        )
        .bind(&child)
        .fetch_optional(&mut *tx)
        .await?;
        active.extend(locked);
    }
    Ok((jobs, active))
}

/// What a workflow run has spent so far: the cost_microusd of the SDK
/// usage records of every job run of its steps (every attempt of every
/// start, compensations included) and of its child runs', recursively.
async fn run_cost(tx: &mut PgConnection, run_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "WITH RECURSIVE tree (id, depth) AS (
            SELECT $1::text, 0
            UNION ALL
            SELECT s.child_workflow_run_id, t.depth + 1 FROM workflow_step_runs s JOIN tree t ON s.workflow_run_id = t.id
             WHERE s.child_workflow_run_id IS NOT NULL AND t.depth < 64
         )
         SELECT least(coalesce(sum(u.cost_microusd), 0), 9223372036854775807)::bigint
           FROM tree JOIN workflow_step_runs s ON s.workflow_run_id = tree.id
           JOIN job_runs j ON j.workflow_step_run_id = s.id
           JOIN job_run_usage u ON u.run_id = j.id",
    )
    .bind(run_id)
    .fetch_one(tx)
    .await
}

/// [`admit`], when a run of the workflow waits for a slot.
async fn admit_waiting(tx: &mut PgConnection, workflow_id: &str) -> Result<(), sqlx::Error> {
    // Only a workflow with a cap has waiting runs: the others skip the lock.
    let waiting: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM workflow_runs WHERE workflow_id = $1 AND status = 'pending')")
            .bind(workflow_id)
            .fetch_one(&mut *tx)
            .await?;
    if waiting {
        admit(tx, workflow_id).await?;
    }
    Ok(())
}

/// Starts the oldest runs of the workflow that wait for a slot under its
/// max_concurrent_runs, as many as there are free slots.
async fn admit(tx: &mut PgConnection, workflow_id: &str) -> Result<(), sqlx::Error> {
    let admitted: Vec<String> = sqlx::query_scalar(
        "WITH w AS (
            SELECT id, max_concurrent_runs, timeout_secs FROM workflows WHERE id = $1 FOR UPDATE
         ), free AS (
            SELECT CASE WHEN coalesce(w.max_concurrent_runs, 0) = 0 THEN 2147483647
                        ELSE w.max_concurrent_runs - (SELECT count(*) FROM workflow_runs
                              WHERE workflow_id = $1 AND status IN ('running', 'paused')) END AS n
              FROM w
         ), next AS (
            SELECT id FROM workflow_runs WHERE workflow_id = $1 AND status = 'pending'
             ORDER BY id LIMIT (SELECT greatest(n, 0) FROM free) FOR UPDATE SKIP LOCKED
         )
         UPDATE workflow_runs r SET status = 'running', started_at = now(),
             deadline_at = (SELECT CASE WHEN w.timeout_secs IS NOT NULL THEN now() + make_interval(secs => w.timeout_secs) END FROM w)
           FROM next WHERE r.id = next.id
         RETURNING r.id",
    )
    .bind(workflow_id)
    .fetch_all(&mut *tx)
    .await?;
    for id in admitted {
        wake(tx, &id).await?;
        record(tx, &id, None, "run_started", "a slot under max_concurrent_runs came free", Value::Null).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shift_params_renumbers_every_parameter_and_nothing_else() {
        assert_eq!(
            shift_params("a = $1 AND b = ANY($12::text[]) AND c = '$'", 32),
            "a = $33 AND b = ANY($44::text[]) AND c = '$'"
        );
        assert_eq!(shift_params("$9$10", 1), "$10$11");
        assert_eq!(shift_params("no parameters", 5), "no parameters");
    }

    /// The parameter numbers a statement uses.
    fn params_of(sql: &str) -> HashSet<usize> {
        sql.match_indices('$')
            .filter_map(|(i, _)| {
                let n: String = sql[i + 1..].chars().take_while(char::is_ascii_digit).collect();
                n.parse().ok()
            })
            .collect()
    }

    #[test]
    fn the_pass_writes_joined_to_the_insert_number_their_parameters_after_it() {
        let sql = runs::insert_many_then(&pass_ctes(runs::NEW_RUN_PARAMS), "1");
        let want = (1..=runs::NEW_RUN_PARAMS + 18).collect();
        assert_eq!(params_of(&sql), want, "every parameter once in 1..=50, no gap");
    }

    #[test]
    fn the_ends_and_their_deliveries_number_their_parameters_one_after_the_other() {
        assert_eq!(params_of(WRITE_ENDS), (1..=WRITE_ENDS_PARAMS).collect());
        let told = shift_params(&super::super::deliveries::workflow_runs_ended_sql(), WRITE_ENDS_PARAMS);
        assert_eq!(params_of(&told), (WRITE_ENDS_PARAMS + 1..=WRITE_ENDS_PARAMS + 4).collect());
    }
}
