//! What a workflow's definition says before any run: its plan (levels and
//! critical path, with per-step overrides), a simulated run under assumed
//! outcomes, and the diff of two versions. Read-only: the rules are in
//! `switchyard_shared::domain::workflow_plan`.

use std::collections::{BTreeMap, HashMap};

use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::workflow::MAX_WORKFLOW_TIMEOUT_SECS;
use switchyard_shared::domain::workflow_plan::{self as plan, Assumptions, Outcome, PlanOverride};
use switchyard_shared::domain::{child, FieldErrors};
use switchyard_shared::store;
use switchyard_shared::store::workflows::WorkflowRecord;

use super::{found, Tag};
use crate::auth::Auth;
use crate::document::rules::Place;
use crate::error::ApiResult;
use crate::state::AppState;
use crate::strict_json::OptionalBody;

pub struct WorkflowPlansApi;

/// What the plan assumes of one step instead of its definition.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct WorkflowPlanOverride {
    /// Leave the step out: its dependents wait for what it waited for.
    pub skip: Option<bool>,
    /// Replaces the step's expected_duration_secs; 0 to 30 days.
    pub expected_duration_secs: Option<i64>,
}

/// The value rules of WorkflowPlanOverride (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::range;
    vec![(Place::Property("WorkflowPlanOverride", "expected_duration_secs"), range((0, MAX_WORKFLOW_TIMEOUT_SECS)))]
}

/// A plan request; the body may be left out.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct WorkflowPlanRequest {
    /// By step_ref; a ref that names no step is 422 at
    /// `body.overrides/<ref>`.
    pub overrides: Option<BTreeMap<String, WorkflowPlanOverride>>,
}

/// The steps of one level: they may run at once.
#[derive(Object)]
pub struct WorkflowPlanLevel {
    /// 0 for steps without dependencies, else one more than the step's
    /// highest dependency.
    pub level: i64,
    /// In definition order.
    pub step_refs: Vec<String>,
}

/// The chain of dependent steps with the largest total expected duration.
#[derive(Object)]
pub struct WorkflowCriticalPath {
    /// From first to last.
    pub step_refs: Vec<String>,
    /// The sum of the steps' expected_duration_secs (a step without one
    /// counts 0).
    pub estimated_duration_secs: f64,
}

/// A workflow's current version as it would run: by level, with its
/// critical path.
#[derive(Object)]
pub struct WorkflowPlan {
    pub workflow_id: String,
    pub version_id: String,
    pub version: i64,
    /// Steps that run (skipped ones are not counted).
    pub step_count: i64,
    pub levels: Vec<WorkflowPlanLevel>,
    /// The most steps of one level.
    pub max_parallelism: i64,
    pub critical_path: WorkflowCriticalPath,
}

/// What a simulation assumes; the body may be left out.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct WorkflowSimulateRequest {
    /// The run's payload, as conditions see it (default null).
    pub payload: Option<Value>,
    /// By step_ref: completed (default), failed or timed_out.
    pub outcomes: Option<BTreeMap<String, String>>,
    /// By step_ref: what the step produces; its output_transform is
    /// applied before later conditions see it.
    pub outputs: Option<BTreeMap<String, Value>>,
}

/// One step's predicted fate.
#[derive(Object)]
pub struct WorkflowSimulatedStep {
    pub step_ref: String,
    /// completed, failed, timed_out, skipped or not_reached.
    pub predicted_status: String,
    /// Why it was skipped or not reached, or why it failed without running
    /// (its condition or output_transform failed).
    #[oai(skip_serializing_if_is_none)]
    pub reason: Option<String>,
}

/// A dry run of the workflow's current version.
#[derive(Object)]
pub struct WorkflowSimulation {
    pub workflow_id: String,
    pub version_id: String,
    pub version: i64,
    /// The steps that would run (completed, failed or timed out), level by
    /// level, in definition order within a level.
    pub predicted_order: Vec<String>,
    /// The length of predicted_order.
    pub step_count: i64,
    /// Every step, in the same order as predicted_order.
    pub steps: Vec<WorkflowSimulatedStep>,
    /// completed, or failed when a step fails under fail_workflow or
    /// compensate.
    pub predicted_status: String,
}

/// A step in both versions whose definition differs.
#[derive(Object)]
pub struct WorkflowStepChange {
    pub step_ref: String,
    /// The definition fields whose value differs, alphabetical.
    pub fields: Vec<String>,
}

/// What changed between two versions of a workflow, by step_ref.
#[derive(Object)]
pub struct WorkflowVersionDiff {
    pub workflow_id: String,
    pub from_version_id: String,
    pub from_version: i64,
    pub to_version_id: String,
    pub to_version: i64,
    /// Steps only in the "to" version, in its definition order.
    pub added: Vec<String>,
    /// Steps only in the "from" version, in its definition order.
    pub removed: Vec<String>,
    pub changed: Vec<WorkflowStepChange>,
}

/// The workflow, if it exists and the caller may see it (404 otherwise).
async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<WorkflowRecord> {
    super::load_workflow(state, auth, id).await
}

#[OpenApi(tag = "Tag::Workflows")]
impl WorkflowPlansApi {
    /// The plan of the workflow's current version: its steps by level
    /// (level 0: no dependencies; the steps of a level may run at once),
    /// the largest level, and the critical path, the chain with the largest
    /// total `expected_duration_secs` (a step without one counts 0).
    /// `overrides` skips steps (removed from the plan; their dependents
    /// wait for what they waited for) or replaces expected durations. The
    /// body may be left out.
    #[oai(path = "/v1/workflows/:workflow_id/plan", method = "post", operation_id = "planWorkflow")]
    async fn plan(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_id: Path<String>,
        body: OptionalBody<WorkflowPlanRequest>,
    ) -> ApiResult<Json<WorkflowPlan>> {
        let w = load(&state, &auth, &workflow_id).await?;
        let overrides = body.0.and_then(|b| b.overrides).unwrap_or_default();
        let steps = &w.steps.0;
        let mut errors = FieldErrors::new();
        errors.extend(plan::unknown_refs(steps, "body.overrides", overrides.keys()));
        let mut wanted: HashMap<String, PlanOverride> = HashMap::new();
        for (r, o) in overrides {
            let at = child(&child("body.overrides", &r), "expected_duration_secs");
            let expected_duration_secs = errors.in_range(&at, o.expected_duration_secs, 0, MAX_WORKFLOW_TIMEOUT_SECS);
            wanted.insert(r, PlanOverride { skip: o.skip.unwrap_or(false), expected_duration_secs });
        }
        errors.finish()?;
        let p = plan::plan(steps, &wanted);
        Ok(Json(WorkflowPlan {
            workflow_id: w.id.into_string(),
            version_id: w.version_id,
            version: w.version.into(),
            step_count: p.step_count as i64,
            max_parallelism: p.max_parallelism as i64,
            levels: (0..).zip(p.levels).map(|(level, step_refs)| WorkflowPlanLevel { level, step_refs }).collect(),
            critical_path: WorkflowCriticalPath {
                step_refs: p.critical_path,
                estimated_duration_secs: p.estimated_duration_secs,
            },
        }))
    }

    /// A dry run of the workflow's current version under the engine's own
    /// rules: a step starts once each dependency completed, was skipped,
    /// or failed under on_failure `continue`, and the steps that can start
    /// together start together. A failure under `skip_dependents` skips
    /// every step below it; one under `fail_workflow` or `compensate` (no
    /// compensation is simulated) fails the run, and the steps not started
    /// by then are `not_reached`. Conditions are evaluated over
    /// `{payload, steps: {ref: {status, output}}}` (steps not started yet
    /// are `pending`); false skips the step, and a condition that cannot be
    /// evaluated fails it. Each reason is the one the run's `explain`
    /// would give.
    /// Every step completes unless `outcomes` says otherwise; `outputs`
    /// are what steps produce, before their output_transform. Nothing is
    /// run or stored. The body may be left out.
    #[oai(path = "/v1/workflows/:workflow_id/simulate", method = "post", operation_id = "simulateWorkflow")]
    async fn simulate(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_id: Path<String>,
        body: OptionalBody<WorkflowSimulateRequest>,
    ) -> ApiResult<Json<WorkflowSimulation>> {
        let w = load(&state, &auth, &workflow_id).await?;
        let (payload, outcomes, outputs) = match body.0 {
            Some(b) => (b.payload, b.outcomes.unwrap_or_default(), b.outputs.unwrap_or_default()),
            None => (None, BTreeMap::new(), BTreeMap::new()),
        };
        let steps = &w.steps.0;
        let mut errors = FieldErrors::new();
        errors.extend(plan::unknown_refs(steps, "body.outcomes", outcomes.keys()));
        errors.extend(plan::unknown_refs(steps, "body.outputs", outputs.keys()));
        let mut given = Assumptions { payload: payload.unwrap_or(Value::Null), ..Assumptions::default() };
        for (r, o) in outcomes {
            match o.parse::<Outcome>() {
                Ok(o) => {
                    given.outcomes.insert(r, o);
                }
                Err(message) => errors.push(child("body.outcomes", r), message, Some(o.into())),
            }
        }
        errors.finish()?;
        given.outputs = outputs.into_iter().collect();
        let sim = plan::simulate(steps, &given);
        Ok(Json(WorkflowSimulation {
            workflow_id: w.id.into_string(),
            version_id: w.version_id,
            version: w.version.into(),
            step_count: sim.order.len() as i64,
            predicted_order: sim.order,
            steps: sim
                .steps
                .into_iter()
                .map(|p| WorkflowSimulatedStep {
                    step_ref: p.step_ref,
                    predicted_status: p.status.as_str().into(),
                    reason: p.reason,
                })
                .collect(),
            predicted_status: if sim.failed { "failed" } else { "completed" }.into(),
        }))
    }

    /// What changed from one version of the workflow to another: the
    /// step_refs added and removed, and for each step in both, the
    /// definition fields whose value differs (a step's id is not compared;
    /// depends_on is compared as a set). Either version may be the older.
    /// A version of another workflow is 404.
    #[oai(
        path = "/v1/workflows/:workflow_id/versions/:from_version_id/diff/:to_version_id",
        method = "get",
        operation_id = "diffWorkflowVersions"
    )]
    async fn diff(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_id: Path<String>,
        from_version_id: Path<String>,
        to_version_id: Path<String>,
    ) -> ApiResult<Json<WorkflowVersionDiff>> {
        let w = load(&state, &auth, &workflow_id).await?;
        let (from_id, to_id) = (&from_version_id.0, &to_version_id.0);
        let from = found("workflow version", from_id, store::workflows::version(&state.pool, &w.id, from_id)).await?;
        let to = found("workflow version", to_id, store::workflows::version(&state.pool, &w.id, to_id)).await?;
        let d = plan::diff(&from.steps.0, &to.steps.0);
        Ok(Json(WorkflowVersionDiff {
            workflow_id: w.id.into_string(),
            from_version_id: from.id,
            from_version: from.version.into(),
            to_version_id: to.id,
            to_version: to.version.into(),
            added: d.added,
            removed: d.removed,
            changed: d
                .changed
                .into_iter()
                .map(|c| WorkflowStepChange { step_ref: c.step_ref, fields: c.fields })
                .collect(),
        }))
    }
}
