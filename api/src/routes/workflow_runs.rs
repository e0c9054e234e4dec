//! Workflow runs: trigger, read, list, cancel, pause, resume, step retry
//! and replay, the decisions behind a run (`explain`), and the runs per
//! version of a workflow. The engine that moves runs is the scheduler's;
//! every move here is one store call that leaves it an event.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::step::Steps;
use switchyard_shared::domain::workflow_plan::critical_path;
use switchyard_shared::domain::workflow_run::{self, Decision, Inputs, StepNow, WorkflowRunStatus};
use switchyard_shared::domain::FieldErrors;
use switchyard_shared::store::workflow_moves::{self, Decider, Moved, Refused, StepDecision};
use switchyard_shared::store::workflow_runs::{
    self, NewWorkflowRun, RunFilter, StepRun, Triggered, WorkflowRun as RunRow,
};
use switchyard_shared::store::{self, Tenant};

use super::{check_id, load_workflow, load_workflow_for_trigger, project_of, tenant, Tag};
use crate::audit::{self, Change};
use crate::auth::{Auth, Principal};
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

pub struct WorkflowRunsApi;

/// Most tags on a run, and the longest idempotency key.
/// Most tags of a workflow trigger; a tag's key and value.
pub const MAX_TAGS: usize = 50;
pub const TAG_TEXT: Text = Text::stored(0, usize::MAX);
/// A workflow trigger's idempotency_key and a step decision's comment.
pub const IDEMPOTENCY_KEY: Text = Text::stored(1, 255);
pub const COMMENT: Text = Text::stored(0, 2000);

/// A decision on a waiting step.
#[derive(Object, Debug, Default)]
#[oai(deny_unknown_fields)]
pub struct StepDecisionRequest {
    /// Why; kept on the step run, in explain and in the audit trail (at
    /// most 2,000 characters).
    pub comment: Option<String>,
}

#[derive(Object, Debug, Default)]
#[oai(deny_unknown_fields)]
pub struct TriggerWorkflowRequest {
    /// The run's input: every step's payload unless the step sets its own,
    /// and `payload` in conditions.
    pub payload: Option<Value>,
    /// A second trigger with the same key returns the first run (200).
    pub idempotency_key: Option<String>,
    pub tags: Option<HashMap<String, String>>,
}

/// The value rules of TriggerWorkflowRequest and StepDecisionRequest (see
/// `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{map, text};
    use Place::Property;
    let mut r = vec![(Property("TriggerWorkflowRequest", "idempotency_key"), text(&IDEMPOTENCY_KEY))];
    r.extend(map("TriggerWorkflowRequest", "tags", MAX_TAGS, &TAG_TEXT, &TAG_TEXT));
    r.push((Property("StepDecisionRequest", "comment"), text(&COMMENT)));
    r
}

/// One step of a run.
#[derive(Object, Debug, Clone)]
pub struct WorkflowStepRun {
    pub id: String,
    pub step_ref: String,
    pub step_type: String,
    /// pending, running, waiting, completed, failed, skipped, cancelled,
    /// timed_out or compensated.
    pub status: String,
    /// How many times the step was started (a step retry starts it again;
    /// a job step's own retries are its job run's attempts).
    pub attempt: i32,
    #[oai(skip_serializing_if_is_none)]
    pub job_run_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub child_workflow_run_id: Option<String>,
    /// The job run of the step's compensation (compensation_job_id), once
    /// its run's saga started it.
    #[oai(skip_serializing_if_is_none)]
    pub compensation_job_run_id: Option<String>,
    /// The event the step emitted when it completed (event_emit_key).
    #[oai(skip_serializing_if_is_none)]
    pub emitted_event_id: Option<String>,
    /// The step's output after its output_transform. A cost gate's says
    /// what it compared: {action, cost_microusd, threshold_microusd}.
    #[oai(skip_serializing_if_is_none)]
    pub output: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
    /// When a sleeping step wakes, or a waiting one times out.
    #[oai(skip_serializing_if_is_none)]
    pub wake_at: Option<DateTime<Utc>>,
    /// approved, rejected or skipped, when a person decided the step.
    #[oai(skip_serializing_if_is_none)]
    pub decision: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub decided_by: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub decision_comment: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub decided_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub started_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub finished_at: Option<DateTime<Utc>>,
}

/// A run of a workflow.
#[derive(Object, Debug, Clone)]
pub struct WorkflowRun {
    pub id: String,
    pub project_id: String,
    pub workflow_id: String,
    /// The version the run follows now (under version_policy `latest`, the
    /// newest it has seen at a step boundary).
    pub version_id: String,
    pub version: i32,
    /// The version it started on.
    pub started_version_id: String,
    pub version_policy: String,
    /// pending, running, paused, completed, failed, cancelled or timed_out.
    pub status: String,
    #[oai(skip_serializing_if_is_none)]
    pub payload: Option<Value>,
    /// A completed run's output: each completed step's output by step_ref.
    #[oai(skip_serializing_if_is_none)]
    pub output: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
    /// `compensation_failed` when a compensation job failed for good.
    #[oai(skip_serializing_if_is_none)]
    pub error_class: Option<String>,
    /// The saga, once a step with on_failure `compensate` failed:
    /// {status: running, completed, failed or interrupted (the run was
    /// cancelled meanwhile), failed_step, error, started_at, finished_at,
    /// steps: [{step_ref, status: compensated, failed or not_compensated,
    /// job_run_id}] in the order undone}.
    #[oai(skip_serializing_if_is_none)]
    pub compensation: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub idempotency_key: Option<String>,
    pub tags: HashMap<String, String>,
    /// api, cron, event (an event source) or workflow (a sub-workflow step's
    /// child run).
    pub triggered_by: String,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    /// A child run's parent step run.
    #[oai(skip_serializing_if_is_none)]
    pub parent_step_run_id: Option<String>,
    /// When the run times out (started_at + the workflow's timeout_secs).
    #[oai(skip_serializing_if_is_none)]
    pub deadline_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    #[oai(skip_serializing_if_is_none)]
    pub started_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub finished_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// The W3C trace id of the run's trace (its steps' job runs share it):
    /// its trigger request's, or the caller's `traceparent`'s, else one
    /// the run began.
    pub trace_id: String,
    /// The run's steps (absent in listings).
    #[oai(skip_serializing_if_is_none)]
    pub steps: Option<Vec<WorkflowStepRun>>,
}

pub(crate) fn step_view(s: StepRun) -> WorkflowStepRun {
    WorkflowStepRun {
        id: s.id.into_string(),
        step_ref: s.step_ref,
        step_type: s.step_type,
        status: s.status.as_str().into(),
        attempt: s.attempt,
        job_run_id: s.job_run_id,
        child_workflow_run_id: s.child_workflow_run_id,
        compensation_job_run_id: s.compensation_job_run_id,
        emitted_event_id: s.emitted_event_id.map(String::from),
        output: s.output.map(|o| o.0),
        error: s.error,
        wake_at: s.wake_at,
        decision: s.decision,
        decided_by: s.decided_by,
        decision_comment: s.decision_comment,
        decided_at: s.decided_at,
        started_at: s.started_at,
        finished_at: s.finished_at,
    }
}

pub(crate) fn run_view(r: RunRow, steps: Option<Vec<StepRun>>) -> WorkflowRun {
    let trace_id = r.trace().trace_id.to_string();
    WorkflowRun {
        trace_id,
        id: r.id.into_string(),
        project_id: r.project_id,
        workflow_id: r.workflow_id.into_string(),
        version_id: r.version_id,
        version: r.version,
        started_version_id: r.started_version_id,
        version_policy: r.version_policy,
        status: r.status.as_str().into(),
        payload: r.payload.map(|p| p.0),
        output: r.output.map(|o| o.0),
        error: r.error,
        error_class: r.error_class,
        compensation: r.compensation.map(|c| c.0),
        idempotency_key: r.idempotency_key,
        tags: r.tags.0.into_iter().collect(),
        triggered_by: r.triggered_by,
        created_by: r.created_by,
        parent_step_run_id: r.parent_step_run_id.map(String::from),
        deadline_at: r.deadline_at,
        created_at: r.created_at,
        started_at: r.started_at,
        finished_at: r.finished_at,
        updated_at: r.updated_at,
        steps: steps.map(|s| s.into_iter().map(step_view).collect()),
    }
}

/// A recorded decision of the engine (or a person) about a run.
#[derive(Object, Debug, Clone)]
pub struct WorkflowDecision {
    pub id: i64,
    #[oai(skip_serializing_if_is_none)]
    pub step_ref: Option<String>,
    /// scheduled, waiting, held, skipped, failed, step_completed,
    /// step_failed, step_timed_out, step_cancelled, step_retried,
    /// subtree_replayed, paused, resumed, version_moved, run_pending,
    /// run_started, run_ended; approved, rejected, skipped (a person's
    /// decision), event_received, event_emitted, cost_gate_passed (details:
    /// cost_microusd, threshold_microusd; a gate over its threshold records
    /// them on its `waiting`), compensation_started, compensating,
    /// step_compensated, compensation_failed.
    pub decision_type: String,
    pub reason: String,
    /// What the decision was made on (a skipped step's condition and the
    /// input it was evaluated over, a started step's job run).
    pub details: Value,
    pub created_at: DateTime<Utc>,
}

#[derive(Object, Debug)]
pub struct Explanation {
    pub workflow_run_id: String,
    /// Oldest first.
    pub decisions: Vec<WorkflowDecision>,
    pub has_more: bool,
    /// Pass as `cursor` for the next decisions; present when has_more.
    #[oai(skip_serializing_if_is_none)]
    pub next_cursor: Option<String>,
}

/// A step in the runtime graph.
#[derive(Object, Debug)]
pub struct GraphNode {
    pub step_ref: String,
    pub step_type: String,
    pub status: String,
    pub attempt: i32,
    pub depends_on: Vec<String>,
    #[oai(skip_serializing_if_is_none)]
    pub job_run_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub child_workflow_run_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub started_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub finished_at: Option<DateTime<Utc>>,
    /// What the definition expects.
    #[oai(skip_serializing_if_is_none)]
    pub expected_duration_secs: Option<i64>,
    /// How long it took (an ended step) or has taken so far (a running one).
    #[oai(skip_serializing_if_is_none)]
    pub observed_duration_secs: Option<f64>,
}

#[derive(Object, Debug)]
pub struct GraphEdge {
    /// The step depended on.
    pub from: String,
    /// The step that waits for it.
    pub to: String,
}

#[derive(Object, Debug)]
pub struct CriticalPath {
    pub step_refs: Vec<String>,
    /// The path's length: observed durations for steps that ran (so far,
    /// for running ones), expected_duration_secs for the rest (0 without).
    pub estimated_duration_secs: f64,
}

#[derive(Object, Debug)]
pub struct WorkflowRunGraph {
    pub workflow_run_id: String,
    pub version_id: String,
    pub status: String,
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<GraphEdge>,
    /// Pending steps whose dependencies are satisfied now (held by
    /// max_parallel_steps, or a pause, or about to start).
    pub runnable: Vec<String>,
    pub critical_path: CriticalPath,
}

#[derive(Object, Debug)]
pub struct VersionCounts {
    pub version_id: String,
    pub version: i32,
    pub pending: i64,
    pub running: i64,
    pub paused: i64,
}

#[derive(Object, Debug)]
pub struct ActiveVersions {
    pub workflow_id: String,
    /// Every version with active runs, newest first.
    pub versions: Vec<VersionCounts>,
}

#[derive(Object, Debug)]
pub struct VersionImpact {
    pub workflow_id: String,
    pub version_id: String,
    /// Active (pending, running, paused) runs following the version.
    pub active_runs: i64,
    /// Up to 20 of them, newest first.
    pub sample_run_ids: Vec<String>,
}

#[derive(ApiResponse)]
pub enum TriggeredRun {
    /// A new run: `running`, or `pending` while max_concurrent_runs are.
    #[oai(status = 201)]
    Created(Json<WorkflowRun>),
    /// The idempotency key matched an earlier run, which is returned;
    /// nothing was created.
    #[oai(status = 200)]
    Existing(Json<WorkflowRun>),
}

/// The run, if it exists and the caller may see it (404 otherwise).
async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<RunRow> {
    super::load_workflow_run(state, auth, id).await
}

async fn with_steps(state: &AppState, run: RunRow) -> ApiResult<WorkflowRun> {
    let steps = workflow_runs::steps(&state.pool, &run.id).await?;
    Ok(run_view(run, Some(steps)))
}

/// The answer to a trigger made in a transaction of its own.
async fn triggered(state: &AppState, t: Triggered) -> ApiResult<TriggeredRun> {
    match t {
        Triggered::Created(run) => Ok(TriggeredRun::Created(Json(with_steps(state, run).await?))),
        Triggered::Existing(run) => Ok(TriggeredRun::Existing(Json(with_steps(state, run).await?))),
        Triggered::Skipped { active_run_id } => Err(ApiError::conflict(format!(
            "skipped: the workflow has skip_if_running and run {active_run_id} is active; no run was created"
        ))),
    }
}

fn who(p: &Principal) -> String {
    p.actor().unwrap_or_else(|| "the internal secret".into())
}

/// Answers a person's move: 404, 409 with the reason, or the run with its
/// steps after an audit event of `action`.
async fn moved(
    state: &AppState,
    auth: &Auth,
    result: Result<Moved, Refused>,
    id: &str,
    action: &str,
    details: Value,
) -> ApiResult<Json<WorkflowRun>> {
    let m = match result {
        Ok(m) => m,
        Err(Refused::NotFound) => return Err(ApiError::not_found("workflow run", id)),
        Err(Refused::Conflict(why)) => return Err(ApiError::conflict(why)),
        Err(Refused::Forbidden(why)) => return Err(ApiError::forbidden(why)),
    };
    workflow_moves::drop_entries(&state.queue, &m).await;
    audit::record(&state.pool, &auth.0, Change::new(&m.run.project_id, action, ("workflow_run", &m.run.id), details))
        .await?;
    Ok(Json(with_steps(state, m.run).await?))
}

fn check_trigger(b: &TriggerWorkflowRequest) -> ApiResult<()> {
    let mut e = FieldErrors::new();
    if let Some(k) = &b.idempotency_key {
        e.check(
            IDEMPOTENCY_KEY.ok(k),
            "body.idempotency_key",
            format!("must be {}, no NUL", IDEMPOTENCY_KEY.length_words()),
            Some(k.clone().into()),
        );
    }
    let tags = b.tags.as_ref().map_or(0, HashMap::len);
    e.check(tags <= MAX_TAGS, "body.tags", format!("at most {MAX_TAGS} tags"), None);
    let storable = b.tags.iter().flatten().all(|(k, v)| TAG_TEXT.ok(k) && TAG_TEXT.ok(v));
    e.check(storable, "body.tags", "keys and values without NUL", None);
    Ok(e.finish()?)
}

#[OpenApi(tag = "Tag::WorkflowRuns")]
impl WorkflowRunsApi {
    /// Trigger a run of a workflow's current version. 201 with the run
    /// (`running`, or `pending` while the workflow's max_concurrent_runs
    /// are running); 200 with the earlier run when `idempotency_key`
    /// matches one. A workflow with skip_if_running and an active run
    /// answers 409 naming that run, and nothing is created. A disabled
    /// workflow is 409.
    #[oai(path = "/v1/workflows/:workflow_id/trigger", method = "post", operation_id = "triggerWorkflow")]
    async fn trigger(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_id: Path<String>,
        body: JsonBody<TriggerWorkflowRequest>,
    ) -> ApiResult<TriggeredRun> {
        let wf = load_workflow_for_trigger(&state, &auth, &workflow_id).await?;
        if !wf.enabled {
            return Err(ApiError::conflict("the workflow is disabled; enable it to trigger runs"));
        }
        let b = body.0;
        check_trigger(&b)?;
        let new = NewWorkflowRun {
            payload: b.payload,
            idempotency_key: b.idempotency_key,
            tags: b.tags.unwrap_or_default().into_iter().collect(),
            triggered_by: "api".into(),
            created_by: auth.0.actor(),
            traceparent: switchyard_shared::traces::request::current(),
            ..NewWorkflowRun::default()
        };
        match state.workflow_intake.trigger(&state.engine_pool, &state.queue, &state.versions, wf, new).await? {
            (Triggered::Created(run), Some(steps)) => Ok(TriggeredRun::Created(Json(run_view(run, Some(steps))))),
            (t, _) => triggered(&state, t).await,
        }
    }

    /// List workflow runs of a project, newest first, optionally of one
    /// workflow and in one status. Steps are not listed; get a run for them.
    #[oai(path = "/v1/workflow-runs", method = "get", operation_id = "listWorkflowRuns")]
    // Each query parameter is an argument: that is how the document learns them.
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        workflow_id: Query<Option<String>>,
        status: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<WorkflowRun>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let status = match status.0.as_deref() {
            None => None,
            Some(s) => Some(s.parse::<WorkflowRunStatus>().map_err(|m| {
                ApiError::invalid_field(
                    "query.status",
                    format!("{m}; one of pending, running, paused, completed, failed, cancelled, timed_out"),
                    Some(s.into()),
                )
            })?),
        };
        let w = Window::parse(limit.0, cursor.0)?;
        let f = RunFilter { project_id: &project_id, workflow_id: workflow_id.0.as_deref(), status };
        let rows = workflow_runs::list(&state.pool, &f, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.to_string(), |r| run_view(r, None))))
    }

    /// Get a workflow run with its steps.
    #[oai(path = "/v1/workflow-runs/:workflow_run_id", method = "get", operation_id = "getWorkflowRun")]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
    ) -> ApiResult<Json<WorkflowRun>> {
        let run = load(&state, &auth, &workflow_run_id).await?;
        Ok(Json(with_steps(&state, run).await?))
    }

    /// Cancel a run that has not ended: its running steps are cancelled
    /// with their job runs and child workflow runs. 409 when it has ended.
    #[oai(path = "/v1/workflow-runs/:workflow_run_id/cancel", method = "post", operation_id = "cancelWorkflowRun")]
    async fn cancel(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
    ) -> ApiResult<Json<WorkflowRun>> {
        load(&state, &auth, &workflow_run_id).await?;
        let reason = format!("cancelled by {}", who(&auth.0));
        let r = workflow_moves::cancel(&state.pool, tenant(&auth.0), &workflow_run_id, &reason).await?;
        moved(&state, &auth, r, &workflow_run_id, "workflow_run.cancelled", Value::Null).await
    }

    /// Pause a running run: no step starts until it is resumed; steps
    /// under way finish. 409 unless it is running.
    #[oai(path = "/v1/workflow-runs/:workflow_run_id/pause", method = "post", operation_id = "pauseWorkflowRun")]
    async fn pause(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
    ) -> ApiResult<Json<WorkflowRun>> {
        load(&state, &auth, &workflow_run_id).await?;
        let r = workflow_moves::set_paused(&state.pool, tenant(&auth.0), &workflow_run_id, true, &who(&auth.0)).await?;
        moved(&state, &auth, r, &workflow_run_id, "workflow_run.paused", Value::Null).await
    }

    /// Resume a paused run: steps that became ready meanwhile start. 409
    /// unless it is paused.
    #[oai(path = "/v1/workflow-runs/:workflow_run_id/resume", method = "post", operation_id = "resumeWorkflowRun")]
    async fn resume(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
    ) -> ApiResult<Json<WorkflowRun>> {
        load(&state, &auth, &workflow_run_id).await?;
        let r =
            workflow_moves::set_paused(&state.pool, tenant(&auth.0), &workflow_run_id, false, &who(&auth.0)).await?;
        moved(&state, &auth, r, &workflow_run_id, "workflow_run.resumed", Value::Null).await
    }

    /// Retry one ended step: it goes back to pending and the run goes on
    /// (a run that had ended runs again, with the steps its ending
    /// cancelled). 409 when the step has not ended; 404 for an unknown
    /// step_ref.
    #[oai(
        path = "/v1/workflow-runs/:workflow_run_id/steps/:step_ref/retry",
        method = "post",
        operation_id = "retryWorkflowStep"
    )]
    async fn retry_step(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
        step_ref: Path<String>,
    ) -> ApiResult<Json<WorkflowRun>> {
        self.reset(&state, &auth, &workflow_run_id, &step_ref, false).await
    }

    /// Replay a step and every step below it: all go back to pending and
    /// the run goes on. 409 when one of them is running or waiting.
    #[oai(
        path = "/v1/workflow-runs/:workflow_run_id/steps/:step_ref/replay-subtree",
        method = "post",
        operation_id = "replayWorkflowSubtree"
    )]
    async fn replay_subtree(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
        step_ref: Path<String>,
    ) -> ApiResult<Json<WorkflowRun>> {
        self.reset(&state, &auth, &workflow_run_id, &step_ref, true).await
    }

    /// Approve a waiting approval (or cost-gate) step: it completes and the
    /// run goes on. When the step names `approval_approvers` (user ids or
    /// role names), only those may decide: anyone else is 403, whatever
    /// their scopes. A step that is not waiting is 409.
    #[oai(
        path = "/v1/workflow-runs/:workflow_run_id/steps/:step_ref/approve",
        method = "post",
        operation_id = "approveWorkflowStep"
    )]
    async fn approve(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
        step_ref: Path<String>,
        body: JsonBody<StepDecisionRequest>,
    ) -> ApiResult<Json<WorkflowRun>> {
        self.decide(&state, &auth, &workflow_run_id, &step_ref, StepDecision::Approve, body.0).await
    }

    /// Reject a waiting approval (or cost-gate) step: it fails, and its
    /// on_failure decides what the run does. Same rules as approve.
    #[oai(
        path = "/v1/workflow-runs/:workflow_run_id/steps/:step_ref/reject",
        method = "post",
        operation_id = "rejectWorkflowStep"
    )]
    async fn reject(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
        step_ref: Path<String>,
        body: JsonBody<StepDecisionRequest>,
    ) -> ApiResult<Json<WorkflowRun>> {
        self.decide(&state, &auth, &workflow_run_id, &step_ref, StepDecision::Reject, body.0).await
    }

    /// Skip a waiting step (any kind): it ends `skipped` and its dependents
    /// run. An approval step's approvers rule applies.
    #[oai(
        path = "/v1/workflow-runs/:workflow_run_id/steps/:step_ref/skip",
        method = "post",
        operation_id = "skipWorkflowStep"
    )]
    async fn skip(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
        step_ref: Path<String>,
        body: JsonBody<StepDecisionRequest>,
    ) -> ApiResult<Json<WorkflowRun>> {
        self.decide(&state, &auth, &workflow_run_id, &step_ref, StepDecision::Skip, body.0).await
    }

    /// The decisions behind a run, oldest first, as they were recorded:
    /// steps scheduled, skipped by their condition (with the condition and
    /// the input it was evaluated over), held by max_parallel_steps,
    /// waiting, completed, failed, retried, the run paused, resumed or
    /// ended. Narrow with `step_ref` and `decision_type`.
    #[oai(path = "/v1/workflow-runs/:workflow_run_id/explain", method = "get", operation_id = "explainWorkflowRun")]
    #[allow(clippy::too_many_arguments)]
    async fn explain(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
        step_ref: Query<Option<String>>,
        decision_type: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Explanation>> {
        let run = load(&state, &auth, &workflow_run_id).await?;
        let limit = crate::pagination::limit(limit.0)?;
        let after = match cursor.0.as_deref() {
            None => None,
            Some(c) => Some(c.parse::<i64>().map_err(|_| {
                ApiError::invalid_field("query.cursor", "not a cursor this listing returned", Some(c.into()))
            })?),
        };
        let mut rows = workflow_runs::decisions(
            &state.pool,
            &run.id,
            step_ref.0.as_deref(),
            decision_type.0.as_deref(),
            after,
            limit + 1,
        )
        .await?;
        let has_more = rows.len() as i64 > limit;
        rows.truncate(limit as usize);
        let next_cursor = if has_more { rows.last().map(|d| d.id.to_string()) } else { None };
        Ok(Json(Explanation {
            workflow_run_id: run.id.into_string(),
            decisions: rows
                .into_iter()
                .map(|d| WorkflowDecision {
                    id: d.id,
                    step_ref: d.step_ref,
                    decision_type: d.decision_type,
                    reason: d.reason,
                    details: d.details.0,
                    created_at: d.created_at,
                })
                .collect(),
            has_more,
            next_cursor,
        }))
    }

    /// The run as a graph: each step with its status and timings, the
    /// dependency edges, the steps runnable now, and the critical path
    /// estimated from observed durations where steps ran and
    /// expected_duration_secs where they have not.
    #[oai(path = "/v1/workflow-runs/:workflow_run_id/graph", method = "get", operation_id = "getWorkflowRunGraph")]
    async fn graph(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
    ) -> ApiResult<Json<WorkflowRunGraph>> {
        let run = load(&state, &auth, &workflow_run_id).await?;
        let defs = workflow_runs::version_steps(&state.pool, &run.version_id).await?;
        let rows: HashMap<String, StepRun> =
            workflow_runs::steps(&state.pool, &run.id).await?.into_iter().map(|s| (s.step_ref.clone(), s)).collect();
        let now = Utc::now();
        let observed = |s: &StepRun| {
            s.started_at.map(|a| (s.finished_at.unwrap_or(now) - a).num_milliseconds().max(0) as f64 / 1000.0)
        };
        let mut durations = HashMap::new();
        let mut states = HashMap::new();
        let mut nodes = Vec::with_capacity(defs.len());
        let mut edges = Vec::new();
        for d in &defs {
            let r = &d.def.step_ref;
            let row = rows.get(r);
            let seen = row.and_then(observed);
            durations.insert(r.clone(), seen.unwrap_or(d.def.expected_duration_secs.unwrap_or(0) as f64));
            if let Some(row) = row {
                states.insert(
                    r.clone(),
                    StepNow {
                        status: row.status,
                        output: row.output.as_ref().map(|o| o.0.clone()),
                        error: row.error.clone(),
                    },
                );
            }
            let deps = d.def.depends_on.clone().unwrap_or_default();
            edges.extend(deps.iter().map(|f| GraphEdge { from: f.clone(), to: r.clone() }));
            nodes.push(GraphNode {
                step_ref: r.clone(),
                step_type: d.def.step_type.clone().unwrap_or_else(|| "job".into()),
                status: row.map_or("pending", |s| s.status.as_str()).into(),
                attempt: row.map_or(0, |s| s.attempt),
                depends_on: deps,
                job_run_id: row.and_then(|s| s.job_run_id.clone()),
                child_workflow_run_id: row.and_then(|s| s.child_workflow_run_id.clone()),
                started_at: row.and_then(|s| s.started_at),
                finished_at: row.and_then(|s| s.finished_at),
                expected_duration_secs: d.def.expected_duration_secs,
                observed_duration_secs: seen,
            });
        }
        let runnable = if run.status.is_terminal() {
            Vec::new()
        } else {
            let payload = run.payload.as_ref().map(|p| p.0.clone()).unwrap_or(Value::Null);
            let next = workflow_run::next(&Inputs {
                steps: &Steps::of(&defs),
                now: &states,
                payload: &payload,
                paused: false,
                max_parallel_steps: None,
            });
            next.decisions
                .into_iter()
                .filter_map(|d| match d {
                    Decision::Start { step_ref } => Some(step_ref),
                    _ => None,
                })
                .collect()
        };
        let (step_refs, estimated_duration_secs) = critical_path(&defs, &durations);
        Ok(Json(WorkflowRunGraph {
            workflow_run_id: run.id.into_string(),
            version_id: run.version_id,
            status: run.status.as_str().into(),
            nodes,
            edges,
            runnable,
            critical_path: CriticalPath { step_refs, estimated_duration_secs },
        }))
    }

    /// Every version of the workflow that active runs follow, with how many
    /// are pending, running and paused on each.
    #[oai(
        path = "/v1/workflows/:workflow_id/active-versions",
        method = "get",
        operation_id = "listActiveWorkflowVersions"
    )]
    async fn active_versions(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_id: Path<String>,
    ) -> ApiResult<Json<ActiveVersions>> {
        let wf = load_workflow(&state, &auth, &workflow_id).await?;
        let rows = workflow_runs::active_versions(&state.pool, &wf.id).await?;
        Ok(Json(ActiveVersions {
            workflow_id: wf.id.into_string(),
            versions: rows
                .into_iter()
                .map(|(version_id, version, pending, running, paused)| VersionCounts {
                    version_id,
                    version,
                    pending,
                    running,
                    paused,
                })
                .collect(),
        }))
    }

    /// How many active runs follow one version of the workflow, with a
    /// sample of them. 404 for a version of another workflow.
    #[oai(
        path = "/v1/workflows/:workflow_id/versions/:version_id/impact",
        method = "get",
        operation_id = "getWorkflowVersionImpact"
    )]
    async fn impact(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_id: Path<String>,
        version_id: Path<String>,
    ) -> ApiResult<Json<VersionImpact>> {
        let wf = load_workflow(&state, &auth, &workflow_id).await?;
        check_id("workflow version", &version_id)?;
        if !store::workflows::has_version(&state.pool, &wf.id, &version_id).await? {
            return Err(ApiError::not_found("workflow version", &version_id));
        }
        let (active_runs, sample) = workflow_runs::on_version(&state.pool, &version_id, 20).await?;
        Ok(Json(VersionImpact {
            workflow_id: wf.id.into_string(),
            version_id: version_id.0,
            active_runs,
            sample_run_ids: sample.into_iter().map(|r| r.id.into_string()).collect(),
        }))
    }
}

impl WorkflowRunsApi {
    async fn decide(
        &self,
        state: &AppState,
        auth: &Auth,
        run_id: &str,
        step_ref: &str,
        decision: StepDecision,
        body: StepDecisionRequest,
    ) -> ApiResult<Json<WorkflowRun>> {
        if let Some(c) = &body.comment {
            if !COMMENT.ok(c) {
                let message = format!("{}, no NUL", COMMENT.length_words());
                return Err(ApiError::invalid_field("body.comment", message, None));
            }
        }
        load(state, auth, run_id).await?;
        let who =
            Decider { actor: auth.0.actor_id.as_deref(), roles: &auth.0.roles, internal: auth.0.scopes.is_none() };
        let t: Tenant = tenant(&auth.0);
        let r = workflow_moves::decide_step(&state.pool, t, run_id, step_ref, decision, &who, body.comment.as_deref())
            .await?;
        let r = match r {
            Err(Refused::NotFound) if workflow_runs::get(&state.pool, t, &run_id.into()).await?.is_some() => {
                return Err(ApiError::not_found("step", step_ref));
            }
            other => other,
        };
        let action = format!("workflow_run.step_{}", decision.as_str());
        let details = serde_json::json!({ "step_ref": step_ref, "comment": body.comment });
        moved(state, auth, r, run_id, &action, details).await
    }

    async fn reset(
        &self,
        state: &AppState,
        auth: &Auth,
        run_id: &str,
        step_ref: &str,
        with_descendants: bool,
    ) -> ApiResult<Json<WorkflowRun>> {
        load(state, auth, run_id).await?;
        let t: Tenant = tenant(&auth.0);
        let r = workflow_moves::reset_steps(&state.pool, t, run_id, step_ref, with_descendants, &who(&auth.0)).await?;
        let r = match r {
            Err(Refused::NotFound) if workflow_runs::get(&state.pool, t, &run_id.into()).await?.is_some() => {
                return Err(ApiError::not_found("step", step_ref));
            }
            other => other,
        };
        let action = if with_descendants { "workflow_run.subtree_replayed" } else { "workflow_run.step_retried" };
        moved(state, auth, r, run_id, action, serde_json::json!({ "step_ref": step_ref })).await
    }
}

/// The cursors of a run's decisions (`explainWorkflowRun`), stated in the
/// document (`document::cursors`): every one is a decision id the listing
/// parses.
pub const DECISION_CURSOR_PATTERN: &str = "^-?[0-9]{1,18}$";
