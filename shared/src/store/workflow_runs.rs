//! Workflow runs and their steps: the rows and the reads. The engine's
//! pass is [`workflow_engine`], the moves people ask for through the api
//! are [`workflow_moves`]; both build on this module, which imports
//! neither. The rules they follow are in `domain::workflow_run` and
//! `engine`.
//!
//! [`workflow_engine`]: super::workflow_engine
//! [`workflow_moves`]: super::workflow_moves

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::workflows::WorkflowRecord;
use super::Tenant;
use crate::domain::workflow::SavedStep;
use crate::domain::workflow_run::{StepStatus, WorkflowRunStatus};
use crate::ids::{self, EventId, StepRunId, WorkflowId, WorkflowRunId};

/// A workflow run row.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct WorkflowRun {
    pub id: WorkflowRunId,
    pub project_id: String,
    pub workflow_id: WorkflowId,
    pub version_id: String,
    pub version: i32,
    pub started_version_id: String,
    pub version_policy: String,
    pub status: WorkflowRunStatus,
    pub payload: Option<Json<Value>>,
    pub output: Option<Json<Value>>,
    pub error: Option<String>,
    /// `compensation_failed` when a compensation job failed for good.
    pub error_class: Option<String>,
    /// The saga's record once a step with on_failure `compensate` failed
    /// (migration 0016).
    pub compensation: Option<Json<Value>>,
    pub idempotency_key: Option<String>,
    pub tags: Json<BTreeMap<String, String>>,
    pub triggered_by: String,
    pub created_by: Option<String>,
    pub parent_step_run_id: Option<StepRunId>,
    pub depth: i32,
    pub cron_tick: Option<DateTime<Utc>>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub wake_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// The trace context the run descends from (`crate::traces`); NULL:
    /// it began its own trace.
    pub traceparent: Option<String>,
}

impl WorkflowRun {
    /// Where the run sits in its trace.
    pub fn trace(&self) -> crate::traces::Place {
        crate::traces::Place::of(&self.id, self.traceparent.as_deref())
    }
}

pub const RUN_COLUMNS: &str = "id, project_id, workflow_id, version_id, version, started_version_id, version_policy, \
    status, payload, output, error, error_class, compensation, idempotency_key, tags, triggered_by, created_by, parent_step_run_id, depth, \
    cron_tick, deadline_at, wake_at, created_at, started_at, finished_at, updated_at, traceparent";

/// One step of a run.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct StepRun {
    pub id: StepRunId,
    pub workflow_run_id: String,
    pub step_ref: String,
    pub step_id: String,
    pub step_type: String,
    pub status: StepStatus,
    pub attempt: i32,
    pub job_run_id: Option<String>,
    pub child_workflow_run_id: Option<String>,
    /// The job run of its compensation, once the saga started one.
    pub compensation_job_run_id: Option<String>,
    /// The event it emitted on completing (event_emit_key).
    pub emitted_event_id: Option<EventId>,
    pub output: Option<Json<Value>>,
    pub error: Option<String>,
    pub wake_at: Option<DateTime<Utc>>,
    pub ended_by_run: bool,
    /// approved, rejected or skipped, when a person decided.
    pub decision: Option<String>,
    pub decided_by: Option<String>,
    pub decision_comment: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    /// An approval's approvers as they were when it started waiting.
    pub approvers: Option<Json<Vec<String>>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

pub const STEP_COLUMNS: &str = "id, workflow_run_id, step_ref, step_id, step_type, status, attempt, job_run_id, \
    child_workflow_run_id, compensation_job_run_id, emitted_event_id, output, error, wake_at, ended_by_run, decision, decided_by, decision_comment, decided_at, \
    approvers, started_at, finished_at, created_at, updated_at";

/// A decision the engine or a person made about a run, as recorded.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Decision {
    pub id: i64,
    pub workflow_run_id: String,
    pub step_ref: Option<String>,
    pub decision_type: String,
    pub reason: String,
    pub details: Json<Value>,
    pub created_at: DateTime<Utc>,
}

/// What a trigger asks for.
#[derive(Clone, Debug, Default)]
pub struct NewWorkflowRun {
    pub payload: Option<Value>,
    pub idempotency_key: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub triggered_by: String,
    pub created_by: Option<String>,
    pub parent_step_run_id: Option<StepRunId>,
    pub depth: i32,
    pub cron_tick: Option<DateTime<Utc>>,
    /// The trace context it descends from (the trigger request's, or its
    /// parent step's); `None`: it begins its own trace.
    pub traceparent: Option<String>,
}

/// What a trigger did.
#[derive(Clone, Debug)]
pub enum Triggered {
    /// A new run, `running`, or `pending` when max_concurrent_runs are.
    Created(WorkflowRun),
    /// The run that holds the idempotency key (or cron tick); nothing new.
    Existing(WorkflowRun),
    /// skip_if_running: this run was active, so none was made.
    Skipped { active_run_id: String },
}

/// Triggers a run of `wf` (its current version) in the caller's
/// transaction, with an outbox row: the engine takes the run up when it
/// commits. A sub-workflow step starts its child this way, in the
/// transaction that starts the step, and so does an event.
pub async fn trigger_in(
    conn: &mut PgConnection,
    wf: &WorkflowRecord,
    new: &NewWorkflowRun,
) -> Result<Triggered, sqlx::Error> {
    Ok(create_in(conn, wf, new, true).await?.0)
}

/// Creates a run of `wf` without telling the engine: the caller makes the
/// run's first pass in this transaction (`workflow_moves::trigger`), with
/// the step rows returned (those of a run it created).
pub async fn create_unannounced_in(
    conn: &mut PgConnection,
    wf: &WorkflowRecord,
    new: &NewWorkflowRun,
) -> Result<(Triggered, Vec<StepRun>), sqlx::Error> {
    create_in(conn, wf, new, false).await
}

/// Creates the run; `wake`: with an outbox row for the engine (otherwise
/// the caller advances the run in this transaction).
async fn create_in(
    conn: &mut PgConnection,
    wf: &WorkflowRecord,
    new: &NewWorkflowRun,
    wake_engine: bool,
) -> Result<(Triggered, Vec<StepRun>), sqlx::Error> {
    if let Some(run) = holder(conn, &wf.id, new).await? {
        return Ok((Triggered::Existing(run), Vec::new()));
    }
    let cap = wf.max_concurrent_runs.filter(|n| *n > 0);
    let mut status = WorkflowRunStatus::Running;
    if wf.skip_if_running || cap.is_some() {
        // Triggers of one workflow take turns here, so two cannot both see
        // a free slot (or no active run) and both start.
        sqlx::query("SELECT 1 FROM workflows WHERE id = $1 FOR UPDATE").bind(&wf.id).execute(&mut *conn).await?;
        let (active, started): (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE status <> 'pending')
               FROM workflow_runs WHERE workflow_id = $1 AND status IN ('pending', 'running', 'paused')",
        )
        .bind(&wf.id)
        .fetch_one(&mut *conn)
        .await?;
        if wf.skip_if_running && active > 0 {
            let active_run_id: String = sqlx::query_scalar(
                "SELECT id FROM workflow_runs WHERE workflow_id = $1 AND status IN ('pending', 'running', 'paused')
                 ORDER BY id LIMIT 1",
            )
            .bind(&wf.id)
            .fetch_one(&mut *conn)
            .await?;
            // A cron tick has nobody to answer: the run it gave way to says so.
            if let Some(tick) = new.cron_tick {
                let reason = format!("cron tick {} skipped: this run is active (skip_if_running)", tick.to_rfc3339());
                record(conn, &active_run_id, None, "tick_skipped", &reason, serde_json::json!({ "tick": tick }))
                    .await?;
            }
            return Ok((Triggered::Skipped { active_run_id }, Vec::new()));
        }
        if cap.is_some_and(|c| started >= c as i64) {
            status = WorkflowRunStatus::Pending;
        }
    }
    let id = ids::workflow_run_id();
    let running = status == WorkflowRunStatus::Running;
    let inserted: Option<WorkflowRun> = sqlx::query_as(&format!(
        "INSERT INTO workflow_runs (id, project_id, workflow_id, version_id, version, started_version_id,
            version_policy, status, payload, idempotency_key, tags, triggered_by, created_by, parent_step_run_id,
            depth, cron_tick, started_at, deadline_at, traceparent)
         VALUES ($1, $2, $3, $4, $5, $4, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
            CASE WHEN $16 THEN now() END,
            CASE WHEN $16 AND $17::int IS NOT NULL THEN now() + make_interval(secs => $17) END, $18)
         ON CONFLICT DO NOTHING
         RETURNING {RUN_COLUMNS}"
    ))
    .bind(&id)
    .bind(&wf.project_id)
    .bind(&wf.id)
    .bind(&wf.version_id)
    .bind(wf.version)
    .bind(&wf.version_policy)
    .bind(status)
    .bind(new.payload.as_ref().map(Json))
    .bind(&new.idempotency_key)
    .bind(Json(&new.tags))
    .bind(&new.triggered_by)
    .bind(&new.created_by)
    .bind(&new.parent_step_run_id)
    .bind(new.depth)
    .bind(new.cron_tick)
    .bind(running)
    .bind(wf.timeout_secs.filter(|t| *t > 0))
    .bind(&new.traceparent)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(run) = inserted else {
        // Another trigger with the same key committed in between.
        let run = holder(conn, &wf.id, new).await?.ok_or(sqlx::Error::RowNotFound)?;
        return Ok((Triggered::Existing(run), Vec::new()));
    };
    let steps = insert_steps_of(conn, &[(run.id.as_str(), wf.steps.0.as_slice())], Rows::New).await?;
    if running {
        if wake_engine {
            wake(conn, &run.id).await?;
        }
    } else {
        record(
            conn,
            &run.id,
            None,
            "run_pending",
            &format!("max_concurrent_runs ({}) runs of the workflow are running", cap.unwrap_or(0)),
            Value::Null,
        )
        .await?;
    }
    Ok((Triggered::Created(run), steps))
}

/// The run that already holds the trigger's idempotency key or cron tick.
async fn holder(
    conn: &mut PgConnection,
    workflow_id: &str,
    new: &NewWorkflowRun,
) -> Result<Option<WorkflowRun>, sqlx::Error> {
    if new.idempotency_key.is_none() && new.cron_tick.is_none() {
        return Ok(None);
    }
    sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM workflow_runs
         WHERE workflow_id = $1 AND (($2::text IS NOT NULL AND idempotency_key = $2)
            OR ($2::text IS NULL AND cron_tick = $3))"
    ))
    .bind(workflow_id)
    .bind(&new.idempotency_key)
    .bind(new.cron_tick)
    .fetch_optional(conn)
    .await
}

/// One pending row per step of `steps` that the run does not have yet (a
/// version move adds the steps of the version it moves to).
pub(super) async fn insert_steps(
    conn: &mut PgConnection,
    run_id: &str,
    steps: &[SavedStep],
) -> Result<Vec<StepRun>, sqlx::Error> {
    insert_steps_of(conn, &[(run_id, steps)], Rows::MayExist).await
}

/// Whether the runs of [`insert_steps_of`] may already have some of the steps.
#[derive(Clone, Copy, PartialEq)]
enum Rows {
    /// Runs this transaction is creating: a plain insert, which costs less
    /// than one ready for a conflict (a speculative insert writes an extra
    /// WAL record per row to confirm it).
    New,
    MayExist,
}

/// [`insert_steps`] for many runs in one statement.
async fn insert_steps_of(
    conn: &mut PgConnection,
    runs: &[(&str, &[SavedStep])],
    rows: Rows,
) -> Result<Vec<StepRun>, sqlx::Error> {
    let steps: Vec<(&str, &SavedStep)> = runs.iter().flat_map(|(r, s)| s.iter().map(move |s| (*r, s))).collect();
    if steps.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<StepRunId> = steps.iter().map(|_| ids::step_run_id()).collect();
    let run_ids: Vec<&str> = steps.iter().map(|(r, _)| *r).collect();
    let refs: Vec<&str> = steps.iter().map(|(_, s)| s.def.step_ref.as_str()).collect();
    let step_ids: Vec<&str> = steps.iter().map(|(_, s)| s.id.as_str()).collect();
    let types: Vec<&str> = steps.iter().map(|(_, s)| s.step_type().map_or("job", |t| t.as_str())).collect();
    // Copied so that the statements that change a step read no version
    // for its stage deliveries (`deliveries::stage_changes`).
    let stages: Vec<Option<Json<&Value>>> =
        steps.iter().map(|(_, s)| s.def.stage_notifications.as_ref().map(Json)).collect();
    sqlx::query_as(&format!(
        "INSERT INTO workflow_step_runs (id, workflow_run_id, step_ref, step_id, step_type, status, stage_notifications)
         SELECT t.id, t.run_id, t.step_ref, t.step_id, t.step_type, 'pending', t.stages
           FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[])
                AS t (id, run_id, step_ref, step_id, step_type, stages)
         {}
         RETURNING {STEP_COLUMNS}",
        if rows == Rows::MayExist { "ON CONFLICT (workflow_run_id, step_ref) DO NOTHING" } else { "" }
    ))
    .bind(&ids)
    .bind(&run_ids)
    .bind(&refs)
    .bind(&step_ids)
    .bind(&types)
    .bind(&stages)
    .fetch_all(conn)
    .await
}

/// Whether a trigger can be written with others in one statement
/// ([`create_many_unannounced_in`]): it has nothing to look up first (no
/// idempotency key or cron tick to find a holder of, no parent step) and
/// no slot to count (no skip_if_running, no max_concurrent_runs), so its
/// run starts `running` whatever else commits meanwhile.
pub fn batchable(wf: &WorkflowRecord, new: &NewWorkflowRun) -> bool {
    new.idempotency_key.is_none()
        && new.cron_tick.is_none()
        && new.parent_step_run_id.is_none()
        && !wf.skip_if_running
        && wf.max_concurrent_runs.filter(|n| *n > 0).is_none()
}

/// Creates the runs of [`batchable`] triggers, `running`, with their step
/// rows, in two statements, without telling the engine (the caller makes
/// their first passes in this transaction). In input order.
pub async fn create_many_unannounced_in(
    conn: &mut PgConnection,
    items: &[(&WorkflowRecord, &NewWorkflowRun)],
) -> Result<Vec<(WorkflowRun, Vec<StepRun>)>, sqlx::Error> {
    debug_assert!(items.iter().all(|(wf, new)| batchable(wf, new)));
    if items.is_empty() {
        return Ok(Vec::new());
    }
    macro_rules! col {
        ($f:expr) => {
            items.iter().map($f).collect::<Vec<_>>()
        };
    }
    let ids: Vec<WorkflowRunId> = col!(|_| ids::workflow_run_id());
    let rows: Vec<WorkflowRun> = sqlx::query_as(&format!(
        "INSERT INTO workflow_runs (id, project_id, workflow_id, version_id, version, started_version_id,
            version_policy, status, payload, tags, triggered_by, created_by, depth, started_at, deadline_at,
            traceparent)
         SELECT t.id, t.project_id, t.workflow_id, t.version_id, t.version, t.version_id, t.version_policy,
                'running', t.payload, t.tags, t.triggered_by, t.created_by, t.depth, now(),
                CASE WHEN t.timeout IS NOT NULL THEN now() + make_interval(secs => t.timeout) END, t.traceparent
           FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int4[], $6::text[], $7::jsonb[],
                       $8::jsonb[], $9::text[], $10::text[], $11::int4[], $12::int4[], $13::text[])
                AS t (id, project_id, workflow_id, version_id, version, version_policy, payload, tags,
                      triggered_by, created_by, depth, timeout, traceparent)
         RETURNING {RUN_COLUMNS}"
    ))
    .bind(&ids)
    .bind(col!(|(wf, _)| wf.project_id.as_str()))
    .bind(col!(|(wf, _)| wf.id.as_str()))
    .bind(col!(|(wf, _)| wf.version_id.as_str()))
    .bind(col!(|(wf, _)| wf.version))
    .bind(col!(|(wf, _)| wf.version_policy.as_str()))
    .bind(col!(|(_, new)| new.payload.as_ref().map(Json)))
    .bind(col!(|(_, new)| Json(&new.tags)))
    .bind(col!(|(_, new)| new.triggered_by.as_str()))
    .bind(col!(|(_, new)| new.created_by.as_deref()))
    .bind(col!(|(_, new)| new.depth))
    .bind(col!(|(wf, _)| wf.timeout_secs.filter(|t| *t > 0)))
    .bind(col!(|(_, new)| new.traceparent.as_deref()))
    .fetch_all(&mut *conn)
    .await?;
    let mut by_id: HashMap<WorkflowRunId, WorkflowRun> = rows.into_iter().map(|r| (r.id.clone(), r)).collect();
    let runs: Vec<(&str, &[SavedStep])> =
        ids.iter().zip(items).map(|(id, (wf, _))| (id.as_str(), wf.steps.0.as_slice())).collect();
    let mut steps_of: HashMap<String, Vec<StepRun>> = HashMap::new();
    for s in insert_steps_of(conn, &runs, Rows::New).await? {
        steps_of.entry(s.workflow_run_id.clone()).or_default().push(s);
    }
    ids.iter()
        .map(|id| {
            let run = by_id.remove(id).ok_or(sqlx::Error::RowNotFound)?;
            Ok((run, steps_of.remove(id.as_str()).unwrap_or_default()))
        })
        .collect()
}

/// Tells the engine to look at the run (at commit).
pub(super) async fn wake(conn: &mut PgConnection, run_id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO workflow_outbox (workflow_run_id) VALUES ($1)").bind(run_id).execute(conn).await?;
    Ok(())
}

/// Records a decision (what `explain` shows).
pub(super) async fn record(
    conn: &mut PgConnection,
    run_id: &str,
    step_ref: Option<&str>,
    decision_type: &str,
    reason: &str,
    details: Value,
) -> Result<(), sqlx::Error> {
    let one = NewDecision {
        step_ref: step_ref.map(str::to_string),
        decision_type: decision_type.to_string(),
        reason: reason.to_string(),
        details,
    };
    record_many(conn, run_id, std::slice::from_ref(&one)).await
}

/// A decision not yet written.
pub(super) use crate::engine::Note as NewDecision;

/// Records many decisions of one run in one statement, in order.
pub(super) async fn record_many(conn: &mut PgConnection, run_id: &str, d: &[NewDecision]) -> Result<(), sqlx::Error> {
    if d.is_empty() {
        return Ok(());
    }
    let refs: Vec<Option<&str>> = d.iter().map(|d| d.step_ref.as_deref()).collect();
    let types: Vec<&str> = d.iter().map(|d| d.decision_type.as_str()).collect();
    let reasons: Vec<&str> = d.iter().map(|d| d.reason.as_str()).collect();
    let details: Vec<Json<Value>> =
        d.iter().map(|d| Json(if d.details.is_null() { serde_json::json!({}) } else { d.details.clone() })).collect();
    sqlx::query(
        "INSERT INTO workflow_decisions (workflow_run_id, step_ref, decision_type, reason, details)
         SELECT $1, t.step_ref, t.decision_type, t.reason, t.details
           FROM UNNEST($2::text[], $3::text[], $4::text[], $5::jsonb[]) WITH ORDINALITY
                AS t (step_ref, decision_type, reason, details, n)
          ORDER BY t.n",
    )
    .bind(run_id)
    .bind(&refs)
    .bind(&types)
    .bind(&reasons)
    .bind(&details)
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn get(pool: &PgPool, tenant: Tenant<'_>, id: &WorkflowRunId) -> Result<Option<WorkflowRun>, sqlx::Error> {
    super::get_scoped(pool, "workflow_runs", RUN_COLUMNS, tenant, id).await
}

/// The steps of a version of a workflow.
pub async fn version_steps(pool: &PgPool, version_id: &str) -> Result<Vec<SavedStep>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    version_steps_in(&mut conn, version_id).await
}

/// [`version_steps`] in the caller's transaction.
pub async fn version_steps_in(conn: &mut PgConnection, version_id: &str) -> Result<Vec<SavedStep>, sqlx::Error> {
    let steps: Option<Json<Vec<SavedStep>>> = sqlx::query_scalar("SELECT steps FROM workflow_versions WHERE id = $1")
        .bind(version_id)
        .fetch_optional(conn)
        .await?;
    Ok(steps.map(|s| s.0).unwrap_or_default())
}

/// The steps of a run, in the order their rows were made (definition order).
pub async fn steps(pool: &PgPool, run_id: &WorkflowRunId) -> Result<Vec<StepRun>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {STEP_COLUMNS} FROM workflow_step_runs WHERE workflow_run_id = $1 ORDER BY created_at, id"
    ))
    .bind(run_id)
    .fetch_all(pool)
    .await
}

/// [`steps`] of many runs, in the caller's transaction: each run's steps
/// in the order [`steps`] gives them.
pub async fn steps_of_in(conn: &mut PgConnection, run_ids: &[WorkflowRunId]) -> Result<Vec<StepRun>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {STEP_COLUMNS} FROM workflow_step_runs WHERE workflow_run_id = ANY($1)
          ORDER BY workflow_run_id, created_at, id"
    ))
    .bind(run_ids)
    .fetch_all(conn)
    .await
}

/// What a listing of runs is narrowed to.
#[derive(Clone, Debug, Default)]
pub struct RunFilter<'a> {
    pub project_id: &'a str,
    pub workflow_id: Option<&'a str>,
    pub status: Option<WorkflowRunStatus>,
}

/// A page of runs, newest first, older than the cursor `before`.
pub async fn list(
    pool: &PgPool,
    f: &RunFilter<'_>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<WorkflowRun>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM workflow_runs
         WHERE project_id = $1 AND ($2::text IS NULL OR workflow_id = $2) AND ($3::text IS NULL OR status = $3)
           AND ($4::text IS NULL OR id < $4)
         ORDER BY id DESC LIMIT $5"
    ))
    .bind(f.project_id)
    .bind(f.workflow_id)
    .bind(f.status)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The decisions about a run, oldest first, narrowed to one step and one
/// kind when asked, after the cursor `after` (a decision id).
pub async fn decisions(
    pool: &PgPool,
    run_id: &str,
    step_ref: Option<&str>,
    decision_type: Option<&str>,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<Decision>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, workflow_run_id, step_ref, decision_type, reason, details, created_at FROM workflow_decisions
         WHERE workflow_run_id = $1 AND ($2::text IS NULL OR step_ref = $2) AND ($3::text IS NULL OR decision_type = $3)
           AND ($4::bigint IS NULL OR id > $4)
         ORDER BY id LIMIT $5",
    )
    .bind(run_id)
    .bind(step_ref)
    .bind(decision_type)
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Counts of a workflow's active runs per version: (version_id, version,
/// pending, running, paused).
pub async fn active_versions(
    pool: &PgPool,
    workflow_id: &str,
) -> Result<Vec<(String, i32, i64, i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT version_id, max(version), count(*) FILTER (WHERE status = 'pending'),
                count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'paused')
           FROM workflow_runs WHERE workflow_id = $1 AND status IN ('pending', 'running', 'paused')
          GROUP BY version_id ORDER BY max(version) DESC",
    )
    .bind(workflow_id)
    .fetch_all(pool)
    .await
}

/// How many active runs (pending, running or paused) follow the version.
pub async fn active_on_version(conn: &mut PgConnection, version_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM workflow_runs WHERE version_id = $1 AND status IN ('pending', 'running', 'paused')",
    )
    .bind(version_id)
    .fetch_one(conn)
    .await
}

/// How many active runs follow the version, and up to `sample` of them.
pub async fn on_version(pool: &PgPool, version_id: &str, sample: i64) -> Result<(i64, Vec<WorkflowRun>), sqlx::Error> {
    let n = active_on_version(&mut *pool.acquire().await?, version_id).await?;
    let runs = sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM workflow_runs
         WHERE version_id = $1 AND status IN ('pending', 'running', 'paused') ORDER BY id DESC LIMIT $2"
    ))
    .bind(version_id)
    .bind(sample)
    .fetch_all(pool)
    .await?;
    Ok((n, runs))
}

/// Active runs of a workflow on a version other than `version_id` (what a
/// PATCH that makes a new version reports).
pub async fn active_on_other_versions(
    pool: &PgPool,
    workflow_id: &WorkflowId,
    version_id: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM workflow_runs
         WHERE workflow_id = $1 AND version_id <> $2 AND status IN ('pending', 'running', 'paused')",
    )
    .bind(workflow_id)
    .bind(version_id)
    .fetch_one(pool)
    .await
}

/// A workflow with a cron schedule, as the cron loop reads it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct CronWorkflow {
    pub id: String,
    pub cron: String,
    pub cron_timezone: Option<String>,
    pub cron_since: DateTime<Utc>,
    /// The latest tick it has a run for.
    pub last_tick: Option<DateTime<Utc>>,
}

/// A page of live, enabled workflows with a cron schedule, by id.
pub async fn cron_page(pool: &PgPool, after: &str, limit: i64) -> Result<Vec<CronWorkflow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT w.id, w.cron, w.cron_timezone, w.cron_since,
            (SELECT max(r.cron_tick) FROM workflow_runs r WHERE r.workflow_id = w.id AND r.cron_tick IS NOT NULL) AS last_tick
         FROM workflows w
         WHERE w.deleted_at IS NULL AND w.enabled AND w.cron IS NOT NULL AND w.id > $1
         ORDER BY w.id LIMIT $2",
    )
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}
