//! Workflows (definitions only): create, read, list, update (a new version
//! whenever anything changes), delete, versions, and the project's
//! workflow policy that every save must satisfy.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::cancel_on::{self, CancelOn};
use switchyard_shared::domain::workflow::{self as wf, Policy, References, SavedStep, Settings, StepRequest};
use switchyard_shared::domain::FieldErrors;
use switchyard_shared::queue::WakeLoop;
use switchyard_shared::store;
use switchyard_shared::store::workflows::{NewVersion, Updated, WorkflowRecord, WorkflowVersionRow, WorkflowWrite};

use super::{check_id, name_rule, patch, project_of, slug_rule, slugify, visible, Created, Tag};
use crate::audit::{self, Change};
use crate::auth::policy;
use crate::auth::Auth;
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;
use crate::views::CancelOnBody;

pub struct WorkflowsApi;

/// One step of a workflow as sent. Only `step_ref` is required. When
/// `step_type` is absent it is inferred from the one field that implies
/// it: job_id (job), sub_workflow_id (sub_workflow), sleep_duration_secs
/// (sleep), event_key (wait_for_event), approval_approvers (approval),
/// cost_gate_* (cost_gate). A step_type contradicting its fields is 422.
#[derive(Object, Clone)]
#[oai(deny_unknown_fields)]
pub struct WorkflowStepRequest {
    /// The step's name within the workflow, used in depends_on: 1 to 64 of
    /// `a-z 0-9 _ -`, unique in the workflow.
    pub step_ref: String,
    /// job, sub_workflow, sleep, wait_for_event, approval or cost_gate.
    pub step_type: Option<String>,
    /// A live job of the same project; required for job steps.
    pub job_id: Option<String>,
    /// A live workflow of the same project; required for sub_workflow steps.
    pub sub_workflow_id: Option<String>,
    /// step_refs this step waits for; no cycles.
    pub depends_on: Option<Vec<String>>,
    /// fail_workflow (default), continue, skip_dependents or compensate.
    /// compensate: when this step fails, the run cancels its steps under
    /// way and runs the compensation_job_id of every completed step that
    /// has one, one at a time, latest completed first; then it ends
    /// failed, with the saga in its `compensation`.
    pub on_failure: Option<String>,
    /// JSONLogic over {payload, steps: {ref: {status, output}}}; false
    /// skips the step. At most 4096 characters as JSON.
    pub condition: Option<Value>,
    /// The step's payload (the run's payload when absent).
    pub payload: Option<Value>,
    /// JMESPath applied to the step's output; at most 4096 characters.
    pub output_transform: Option<String>,
    /// Where the step's stage changes are sent, through the delivery
    /// outbox: `{"urls": [...], "subscription_ids": [...], "stages": [...]}`.
    /// urls (at most 5, http or https) get it signed with the project's
    /// signing secret (deliveries of kind step_stage; GET
    /// /v1/projects/{project_id}/signing-secret); subscription_ids (at
    /// most 5, webhook subscriptions of the project) get it signed with
    /// their secret, whatever their event_types. stages: any of started, waiting,
    /// completed, failed (failed or timed out), skipped, cancelled,
    /// compensated; default the first four. Each notification is
    /// {event_type: workflow_step.<stage>, occurred_at, project_id, data:
    /// {workflow_run_id, workflow_id, step_run_id, step_ref, step_type,
    /// stage, status, attempt, output, error}}.
    pub stage_notifications: Option<Value>,
    /// Job steps only; at most 256 characters.
    pub concurrency_key: Option<String>,
    /// Job steps only; at most 64 characters.
    pub resource_class: Option<String>,
    /// 0 to 30 days.
    pub expected_duration_secs: Option<i64>,
    /// Job and sub_workflow steps; 1 to 86400.
    pub timeout_secs_override: Option<i64>,
    /// sub_workflow steps: how many levels of workflows may nest below
    /// this one (the child counts 1); 1 to 10, default 5.
    pub max_nesting_depth: Option<i64>,
    /// Job steps: fixed, linear, exponential, custom or none.
    pub retry_backoff: Option<String>,
    /// Job steps; 0 to 86400.
    pub retry_initial_delay_secs: Option<i64>,
    /// Job steps; 1 to 100.
    pub retry_max_attempts: Option<i64>,
    /// Job steps; 0 to 604800.
    pub retry_max_delay_secs: Option<i64>,
    /// Required for sleep steps; 1 to 30 days.
    pub sleep_duration_secs: Option<i64>,
    /// Required for wait_for_event steps; at most 256 characters.
    pub event_key: Option<String>,
    /// When the step completes, an event with this key and the step's
    /// output as payload is dispatched in the project, in the transaction
    /// that records the completion: it resumes the wait_for_event steps
    /// waiting for the key and triggers the matching event sources (job
    /// triggers apply the job's payload_schema, not its dedup window).
    /// Once per completion. An event key: at most 256 characters, no `*`.
    pub event_emit_key: Option<String>,
    /// wait_for_event steps: where the event-trigger notification is sent,
    /// signed with the project's signing secret.
    pub event_notify_url: Option<String>,
    /// wait_for_event steps; 1 to 30 days.
    pub event_timeout_secs: Option<i64>,
    /// Required for approval steps: 1 to 50 approvers.
    pub approval_approvers: Option<Vec<String>>,
    /// Approval steps; 1 to 30 days.
    pub approval_timeout_secs: Option<i64>,
    /// Job and sub_workflow steps: a live job of the same project, run
    /// when a later step with on_failure compensate fails, with payload
    /// {workflow_run_id, step_ref, payload, output, failed_step, error}
    /// under the job's own retry policy.
    pub compensation_job_id: Option<String>,
    /// The compensation job run's timeout; 1 to 86400.
    pub compensation_timeout_secs: Option<i64>,
    /// Cost gate steps (required): micro-dollars, 0 to 10^15. When the
    /// gate is reached, the run's cost so far (cost_microusd of the SDK
    /// usage records of its job runs and its child runs') is compared with
    /// it: at most the threshold, the gate completes at once; over it, the
    /// gate waits for approve, reject or skip.
    pub cost_gate_threshold_microusd: Option<i64>,
    /// Cost gate steps: how long a gate over its threshold waits; 1 to 30
    /// days. Without it, it waits until decided.
    pub cost_gate_timeout_secs: Option<i64>,
    /// Cost gate steps: what a gate does at cost_gate_timeout_secs,
    /// proceed (completes) or fail (default).
    pub cost_gate_default_action: Option<String>,
}

/// One saved step of a workflow version.
#[derive(Object)]
pub struct WorkflowStep {
    pub id: String,
    pub workflow_id: String,
    pub step_ref: String,
    pub step_type: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub job_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub sub_workflow_id: Option<String>,
    pub depends_on: Vec<String>,
    pub on_failure: String,
    #[oai(skip_serializing_if_is_none)]
    pub condition: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub payload: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub output_transform: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub stage_notifications: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub concurrency_key: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub resource_class: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub expected_duration_secs: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub timeout_secs_override: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub max_nesting_depth: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub retry_backoff: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub retry_initial_delay_secs: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub retry_max_attempts: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub retry_max_delay_secs: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub sleep_duration_secs: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub event_key: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub event_emit_key: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub event_notify_url: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub event_timeout_secs: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub approval_approvers: Option<Vec<String>>,
    #[oai(skip_serializing_if_is_none)]
    pub approval_timeout_secs: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub compensation_job_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub compensation_timeout_secs: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub cost_gate_default_action: Option<String>,
    /// Micro-dollars.
    #[oai(skip_serializing_if_is_none)]
    pub cost_gate_threshold_microusd: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub cost_gate_timeout_secs: Option<i64>,
    /// When the version holding this step was made.
    pub created_at: DateTime<Utc>,
}

/// A workflow: its settings and the steps of its current version.
#[derive(Object)]
pub struct Workflow {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub slug: String,
    pub enabled: bool,
    /// Moves by one with every change of the workflow, of its settings or
    /// of its steps.
    pub version: i64,
    pub steps: Vec<WorkflowStep>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version_id: String,
    #[oai(skip_serializing_if_is_none)]
    pub description: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub cron: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub cron_timezone: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub max_concurrent_runs: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub max_parallel_steps: Option<i64>,
    pub skip_if_running: bool,
    pub cancel_on: Vec<CancelOnBody>,
    #[oai(skip_serializing_if_is_none)]
    pub timeout_secs: Option<i64>,
    pub tags: HashMap<String, String>,
    pub version_policy: String,
    pub backwards_compatible: bool,
    /// The actor that created it.
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    /// The actor that last changed it.
    #[oai(skip_serializing_if_is_none)]
    pub updated_by: Option<String>,
    /// In a PATCH answer that made a new version while runs were active on
    /// the one it replaced: that version.
    #[oai(skip_serializing_if_is_none)]
    pub previous_version_id: Option<String>,
    /// ...and how many runs are active on it (they keep it under
    /// version_policy `pin`, and move at their next step under `latest`).
    #[oai(skip_serializing_if_is_none)]
    pub active_runs_on_previous_version: Option<i64>,
}

/// Create a workflow. `name` and `steps` are required.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateWorkflow {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    /// 1 to 200 characters.
    pub name: String,
    /// Unique among the project's workflows; derived from the name when absent.
    pub slug: Option<String>,
    /// At most 4000 characters.
    pub description: Option<String>,
    /// Default true.
    pub enabled: Option<bool>,
    /// At most 2000 steps, linked by depends_on into a DAG.
    pub steps: Vec<WorkflowStepRequest>,
    /// 5 fields, or 6 with seconds first.
    pub cron: Option<String>,
    /// IANA zone of cron (default UTC).
    pub cron_timezone: Option<String>,
    /// Runs in flight at once; 0 to 10000, absent or 0: no cap.
    pub max_concurrent_runs: Option<i64>,
    /// Steps of one run in flight at once; 0 to 1000, absent or 0: no cap.
    pub max_parallel_steps: Option<i64>,
    /// Default false.
    pub skip_if_running: Option<bool>,
    /// Up to 10 rules: an event dispatched with a rule's key cancels the
    /// workflow's unfinished runs its `match` holds for (`run` is the
    /// run's payload), as `POST /v1/workflow-runs/{id}/cancel` would.
    pub cancel_on: Option<Vec<CancelOnBody>>,
    /// 1 to 30 days.
    pub timeout_secs: Option<i64>,
    pub tags: Option<HashMap<String, String>>,
    /// pin (default: a run keeps the version it started on) or latest.
    pub version_policy: Option<String>,
    /// Default true.
    pub backwards_compatible: Option<bool>,
}

/// Change a workflow: absent fields keep their value, `null` clears an
/// optional one. Any change makes a new version; a body that changes
/// nothing (the same values, or none) keeps the version.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UpdateWorkflow {
    pub backwards_compatible: Option<bool>,
    /// Acknowledges a breaking change: recorded in the `workflow.updated`
    /// audit event and, when runs are active on the version replaced, in
    /// `workflow.updated_breaking`. It changes nothing by itself.
    pub breaking_change: Option<bool>,
    #[oai(nullable)]
    pub cron: MaybeUndefined<String>,
    #[oai(nullable)]
    pub cron_timezone: MaybeUndefined<String>,
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
    pub enabled: Option<bool>,
    #[oai(nullable)]
    pub max_concurrent_runs: MaybeUndefined<i64>,
    #[oai(nullable)]
    pub max_parallel_steps: MaybeUndefined<i64>,
    pub name: Option<String>,
    pub skip_if_running: Option<bool>,
    /// Replaces the rules; `[]` removes them.
    pub cancel_on: Option<Vec<CancelOnBody>>,
    pub slug: Option<String>,
    pub steps: Option<Vec<WorkflowStepRequest>>,
    pub tags: Option<HashMap<String, String>>,
    #[oai(nullable)]
    pub timeout_secs: MaybeUndefined<i64>,
    pub version_policy: Option<String>,
}

/// One version of a workflow: its steps as they were.
#[derive(Object)]
pub struct WorkflowVersion {
    pub id: String,
    pub workflow_id: String,
    pub version: i64,
    pub steps: Vec<WorkflowStep>,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A project's workflow policy: the rules every workflow save must keep.
/// Each is optional; absent means no rule.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct WorkflowPolicyBody {
    /// Most steps per workflow; 1 to the most a workflow may have (see maximum).
    pub max_steps: Option<i64>,
    /// Longest depends_on chain, in steps (a step without dependencies is
    /// at depth 1); 1 to the most steps a workflow may have.
    pub max_depth: Option<i64>,
    /// Most steps that may depend on one step; 1 to the most steps a workflow may have.
    pub max_fan_out: Option<i64>,
    /// The step types the project's workflows may use.
    pub allowed_step_types: Option<Vec<String>>,
    /// Step types that need an approval step among the steps they
    /// (directly or indirectly) depend on.
    pub approval_required_before: Option<Vec<String>>,
}

/// The value rules of a workflow's create and update, of its steps
/// (WorkflowStepRequest) and of WorkflowPolicyBody (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{count, map, range, text};
    use switchyard_shared::domain::{event_key, limits};
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::{Items, Property};
    let mut r = vec![(Property("CreateWorkflow", "project_id"), text(&ID))];
    for schema in ["CreateWorkflow", "UpdateWorkflow"] {
        r.push((Property(schema, "name"), text(&super::NAME)));
        r.push((Property(schema, "slug"), text(&super::SLUG)));
        r.push((Property(schema, "description"), text(&wf::DESCRIPTION)));
        r.push((Property(schema, "max_concurrent_runs"), range((0, wf::MAX_CONCURRENT_RUNS))));
        r.push((Property(schema, "max_parallel_steps"), range((0, wf::MAX_PARALLEL_STEPS))));
        r.push((Property(schema, "timeout_secs"), range((1, wf::MAX_WORKFLOW_TIMEOUT_SECS))));
        r.push((Property(schema, "steps"), count(0, wf::MAX_STEPS)));
        r.extend(map(schema, "tags", limits::MAX_MAP_ENTRIES, &limits::MAP_KEY, &limits::MAP_VALUE));
    }
    let step = "WorkflowStepRequest";
    r.push((Property(step, "step_ref"), text(&wf::STEP_REF)));
    r.push((Items(step, "depends_on"), text(&wf::STEP_REF)));
    for (field, bounds) in wf::STEP_BOUNDS {
        r.push((Property(step, field), range(bounds)));
    }
    r.push((Property(step, "concurrency_key"), text(&limits::KEY)));
    r.push((Property(step, "resource_class"), text(&wf::RESOURCE_CLASS)));
    r.push((Property(step, "event_key"), text(&wf::STEP_EVENT_KEY)));
    r.push((Property(step, "event_emit_key"), text(&event_key::KEY)));
    r.push((Property(step, "approval_approvers"), count(1, wf::MAX_APPROVERS)));
    r.push((Items(step, "approval_approvers"), text(&wf::APPROVER)));
    for prop in ["max_steps", "max_depth", "max_fan_out"] {
        r.push((Property("WorkflowPolicyBody", prop), range((1, wf::MAX_STEPS as i64))));
    }
    r
}

/// The project's workflow policy.
#[derive(Object)]
pub struct WorkflowPolicy {
    pub project_id: String,
    #[oai(skip_serializing_if_is_none)]
    pub max_steps: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub max_depth: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub max_fan_out: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub allowed_step_types: Option<Vec<String>>,
    #[oai(skip_serializing_if_is_none)]
    pub approval_required_before: Option<Vec<String>>,
    /// Absent while the project never set a policy.
    #[oai(skip_serializing_if_is_none)]
    pub updated_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub updated_by: Option<String>,
}

#[derive(ApiResponse)]
pub enum Deleted {
    /// Deleted.
    #[oai(status = 204)]
    NoContent,
}

fn step_request(s: WorkflowStepRequest) -> StepRequest {
    StepRequest {
        step_ref: s.step_ref,
        step_type: s.step_type,
        job_id: s.job_id,
        sub_workflow_id: s.sub_workflow_id,
        depends_on: s.depends_on,
        on_failure: s.on_failure,
        condition: s.condition,
        payload: s.payload,
        output_transform: s.output_transform,
        stage_notifications: s.stage_notifications,
        concurrency_key: s.concurrency_key,
        resource_class: s.resource_class,
        expected_duration_secs: s.expected_duration_secs,
        timeout_secs_override: s.timeout_secs_override,
        max_nesting_depth: s.max_nesting_depth,
        retry_backoff: s.retry_backoff,
        retry_initial_delay_secs: s.retry_initial_delay_secs,
        retry_max_attempts: s.retry_max_attempts,
        retry_max_delay_secs: s.retry_max_delay_secs,
        sleep_duration_secs: s.sleep_duration_secs,
        event_key: s.event_key,
        event_emit_key: s.event_emit_key,
        event_notify_url: s.event_notify_url,
        event_timeout_secs: s.event_timeout_secs,
        approval_approvers: s.approval_approvers,
        approval_timeout_secs: s.approval_timeout_secs,
        compensation_job_id: s.compensation_job_id,
        compensation_timeout_secs: s.compensation_timeout_secs,
        cost_gate_threshold_microusd: s.cost_gate_threshold_microusd,
        cost_gate_timeout_secs: s.cost_gate_timeout_secs,
        cost_gate_default_action: s.cost_gate_default_action,
    }
}

fn step_view(workflow_id: &str, created_at: DateTime<Utc>, s: SavedStep) -> WorkflowStep {
    let d = s.def;
    WorkflowStep {
        id: s.id,
        workflow_id: workflow_id.to_string(),
        step_ref: d.step_ref,
        step_type: d.step_type,
        job_id: d.job_id,
        sub_workflow_id: d.sub_workflow_id,
        depends_on: d.depends_on.unwrap_or_default(),
        on_failure: d.on_failure.unwrap_or_else(|| wf::DEFAULT_ON_FAILURE.into()),
        condition: d.condition,
        payload: d.payload,
        output_transform: d.output_transform,
        stage_notifications: d.stage_notifications,
        concurrency_key: d.concurrency_key,
        resource_class: d.resource_class,
        expected_duration_secs: d.expected_duration_secs,
        timeout_secs_override: d.timeout_secs_override,
        max_nesting_depth: d.max_nesting_depth,
        retry_backoff: d.retry_backoff,
        retry_initial_delay_secs: d.retry_initial_delay_secs,
        retry_max_attempts: d.retry_max_attempts,
        retry_max_delay_secs: d.retry_max_delay_secs,
        sleep_duration_secs: d.sleep_duration_secs,
        event_key: d.event_key,
        event_emit_key: d.event_emit_key,
        event_notify_url: d.event_notify_url,
        event_timeout_secs: d.event_timeout_secs,
        approval_approvers: d.approval_approvers,
        approval_timeout_secs: d.approval_timeout_secs,
        compensation_job_id: d.compensation_job_id,
        compensation_timeout_secs: d.compensation_timeout_secs,
        cost_gate_default_action: d.cost_gate_default_action,
        cost_gate_threshold_microusd: d.cost_gate_threshold_microusd,
        cost_gate_timeout_secs: d.cost_gate_timeout_secs,
        created_at,
    }
}

fn workflow_view(r: WorkflowRecord) -> Workflow {
    let (id, at) = (r.id.clone(), r.steps_created_at);
    Workflow {
        steps: r.steps.0.into_iter().map(|s| step_view(&id, at, s)).collect(),
        id: r.id.into_string(),
        project_id: r.project_id,
        name: r.name,
        slug: r.slug,
        enabled: r.enabled,
        version: r.version.into(),
        created_at: r.created_at,
        updated_at: r.updated_at,
        version_id: r.version_id,
        description: r.description,
        cron: r.cron,
        cron_timezone: r.cron_timezone,
        max_concurrent_runs: r.max_concurrent_runs.map(i64::from),
        max_parallel_steps: r.max_parallel_steps.map(i64::from),
        skip_if_running: r.skip_if_running,
        cancel_on: r.cancel_on.0.into_iter().map(Into::into).collect(),
        timeout_secs: r.timeout_secs.map(i64::from),
        tags: r.tags.0.into_iter().collect(),
        version_policy: r.version_policy,
        backwards_compatible: r.backwards_compatible,
        created_by: r.created_by,
        updated_by: r.updated_by,
        previous_version_id: None,
        active_runs_on_previous_version: None,
    }
}

fn policy_view(project_id: String, p: Policy, row: Option<(DateTime<Utc>, Option<String>)>) -> WorkflowPolicy {
    let (updated_at, updated_by) = row.map_or((None, None), |(at, by)| (Some(at), by));
    WorkflowPolicy {
        project_id,
        max_steps: p.max_steps,
        max_depth: p.max_depth,
        max_fan_out: p.max_fan_out,
        allowed_step_types: p.allowed_step_types,
        approval_required_before: p.approval_required_before,
        updated_at,
        updated_by,
    }
}

/// The workflow, if it exists and the caller may see it (404 otherwise).
async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<WorkflowRecord> {
    super::load_workflow(state, auth, id).await
}

/// What the steps' checks need from the database: which named jobs are
/// live jobs of the project, and every workflow the sub-workflow chains
/// reach (looked up level by level, at most one level past the deepest
/// nesting a step may allow).
async fn references(
    state: &AppState,
    project_id: &str,
    own: Option<&str>,
    steps: &[StepRequest],
) -> ApiResult<References> {
    let (jobs, mut todo) = wf::ids_to_look_up(steps);
    let mut refs = References {
        workflow_id: own.map(str::to_string),
        jobs: store::workflows::live_jobs(&state.pool, project_id, &jobs).await?.into_iter().collect(),
        workflows: HashMap::new(),
        subscriptions: store::deliveries::subscriptions_of(
            &state.pool,
            project_id,
            &wf::subscriptions_to_look_up(steps),
        )
        .await?
        .into_iter()
        .collect(),
    };
    // The workflow being saved is checked against its new steps, never
    // against its stored ones.
    let mut absent: HashSet<String> = own.map(str::to_string).into_iter().collect();
    todo.retain(|id| !absent.contains(id));
    for _ in 0..=wf::MAX_NESTING_DEPTH {
        if todo.is_empty() {
            break;
        }
        let found = store::workflows::sub_workflows(&state.pool, project_id, &todo).await?;
        absent.extend(todo.iter().filter(|id| !found.iter().any(|(f, _)| f == *id)).cloned());
        refs.workflows.extend(found);
        todo = refs.missing_workflows(&absent);
    }
    Ok(refs)
}

/// The steps checked against every rule, the project's policy and the
/// database, each failure added to `errors`; `None` when any failed.
async fn checked_steps(
    state: &AppState,
    errors: &mut FieldErrors,
    project_id: &str,
    own: Option<&str>,
    steps: Vec<WorkflowStepRequest>,
) -> ApiResult<Option<Vec<StepRequest>>> {
    let steps: Vec<StepRequest> = steps.into_iter().map(step_request).collect();
    let refs = references(state, project_id, own, &steps).await?;
    let policy = store::workflows::policy(&state.pool, project_id).await?.map(|r| r.policy.0).unwrap_or_default();
    let checked = wf::validate_steps(&steps, &refs, &policy);
    let mut refused = FieldErrors::new();
    let urls = wf::target_urls(&steps);
    super::jobs::refuse_private_targets(state, &mut refused, urls.iter().map(|(at, u)| (at.clone(), u.as_str())));
    let reachable = refused.is_empty();
    match checked {
        Ok(s) if reachable => Ok(Some(s)),
        Ok(_) => {
            errors.extend(refused.into_vec());
            Ok(None)
        }
        Err(e) => {
            errors.extend(e);
            errors.extend(refused.into_vec());
            Ok(None)
        }
    }
}

/// Each checked step with a new id, for a new version.
fn with_ids(steps: Vec<StepRequest>) -> Vec<SavedStep> {
    steps.into_iter().map(|def| SavedStep { id: switchyard_shared::ids::workflow_step_id(), def }).collect()
}

fn narrow(v: Option<i64>) -> Option<i32> {
    // Checked against ranges far below i32::MAX before this is called.
    v.map(|n| n as i32)
}

#[OpenApi(tag = "Tag::Workflows")]
impl WorkflowsApi {
    /// Create a workflow at version 1. Every step is checked first: a
    /// duplicate step_ref, a depends_on naming no step, a cycle, a job or
    /// workflow that is not a live one of the project, a step_type that
    /// contradicts its fields, a condition that is not JSONLogic, an
    /// output_transform that is not JMESPath, and each rule of the
    /// project's workflow policy is a 422 located at the step
    /// (`body.steps/3/depends_on`).
    #[oai(path = "/v1/workflows", method = "post", operation_id = "createWorkflow")]
    async fn create(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<CreateWorkflow>,
    ) -> ApiResult<Created<Workflow>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        super::project_exists(&state, &project_id).await?;
        let mut errors = FieldErrors::new();
        name_rule(&mut errors, &b.name);
        let slug = b.slug.clone().unwrap_or_else(|| slugify(&b.name, "workflow"));
        slug_rule(&mut errors, "body.slug", &slug);
        let settings = Settings {
            description: b.description,
            tags: b.tags.unwrap_or_default().into_iter().collect(),
            cron: b.cron,
            cron_timezone: b.cron_timezone,
            max_concurrent_runs: b.max_concurrent_runs,
            max_parallel_steps: b.max_parallel_steps,
            timeout_secs: b.timeout_secs,
            version_policy: b.version_policy.unwrap_or_else(|| "pin".into()),
        };
        errors.extend(settings.validate());
        let cancel_on: Vec<CancelOn> = b.cancel_on.unwrap_or_default().into_iter().map(Into::into).collect();
        cancel_on::validate(&cancel_on, &mut errors);
        let steps = checked_steps(&state, &mut errors, &project_id, None, b.steps).await?;
        errors.finish()?;
        let steps = with_ids(steps.unwrap_or_default());
        policy::enforce_tags(&state.pool, &project_id, "workflow", &settings.tags).await?;
        let new = policy::Resource { kind: "workflow", id: None, tags: &settings.tags };
        policy::check(&state, &auth.0, &project_id, new).await?;
        let id = switchyard_shared::ids::workflow_id();
        let version_id = switchyard_shared::ids::workflow_version_id();
        let actor = auth.0.actor();
        let write = WorkflowWrite {
            id: &id,
            name: b.name.trim(),
            slug: &slug,
            description: settings.description.as_deref(),
            enabled: b.enabled.unwrap_or(true),
            tags: &settings.tags,
            cron: settings.cron.as_deref(),
            cron_timezone: settings.cron_timezone.as_deref(),
            max_concurrent_runs: narrow(settings.max_concurrent_runs),
            max_parallel_steps: narrow(settings.max_parallel_steps),
            skip_if_running: b.skip_if_running.unwrap_or(false),
            cancel_on: &cancel_on,
            timeout_secs: narrow(settings.timeout_secs),
            version_policy: &settings.version_policy,
            backwards_compatible: b.backwards_compatible.unwrap_or(true),
            actor: actor.as_deref(),
        };
        let mut tx = state.pool.begin().await?;
        let rec = store::workflows::create(&mut tx, &project_id, &write, NewVersion { id: &version_id, steps: &steps })
            .await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(
                &project_id,
                "workflow.created",
                ("workflow", &id),
                serde_json::json!({"name": rec.name, "slug": rec.slug, "version": rec.version, "steps": steps.len()}),
            ),
        )
        .await?;
        tx.commit().await?;
        if rec.enabled && rec.cron.is_some() {
            state.queue.wake(WakeLoop::Cron, None);
        }
        Ok(Created::Created(Json(workflow_view(rec))))
    }

    /// List the workflows of a project, newest first.
    #[oai(path = "/v1/workflows", method = "get", operation_id = "listWorkflows")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Workflow>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::workflows::list(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.to_string(), workflow_view)))
    }

    /// Get a workflow with the steps of its current version.
    #[oai(path = "/v1/workflows/:workflow_id", method = "get", operation_id = "getWorkflow")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, workflow_id: Path<String>) -> ApiResult<Json<Workflow>> {
        Ok(Json(workflow_view(load(&state, &auth, &workflow_id).await?)))
    }

    /// Change a workflow. Any change, of a setting or of the steps, makes
    /// a new version (version + 1 and a new version_id); a body that
    /// changes nothing keeps the version and writes nothing. Steps are
    /// checked as on create. When a new version replaces one that active
    /// runs follow, the answer carries previous_version_id and
    /// active_runs_on_previous_version, and with `breaking_change: true`
    /// the audit event `workflow.updated_breaking` is recorded as well
    /// (runs under version_policy `pin` keep the old version; under
    /// `latest` they move to the new one at their next step).
    #[oai(path = "/v1/workflows/:workflow_id", method = "patch", operation_id = "updateWorkflow")]
    async fn update(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_id: Path<String>,
        body: JsonBody<UpdateWorkflow>,
    ) -> ApiResult<Json<Workflow>> {
        let cur = load(&state, &auth, &workflow_id).await?;
        let b = body.0;
        // What the checks read from the database is read before the row
        // is locked: the steps' references and the project's tag rules.
        let mut step_errors = FieldErrors::new();
        let steps = match b.steps {
            Some(s) => checked_steps(&state, &mut step_errors, &cur.project_id, Some(&cur.id), s).await?,
            None => None,
        };
        let tag_rules = store::policies::tag_rules(&state.pool, &cur.project_id, "workflow").await?;
        let mut tx = state.pool.begin().await?;
        // The fields the body leaves out keep the values of the row as it
        // is under its lock, so a PATCH at the same time is not undone.
        let cur =
            store::workflows::lock(&mut tx, &cur.id).await?.ok_or_else(|| ApiError::not_found("workflow", &cur.id))?;
        let mut errors = FieldErrors::new();
        let name = b.name.unwrap_or(cur.name.clone());
        name_rule(&mut errors, &name);
        let slug = b.slug.unwrap_or(cur.slug.clone());
        slug_rule(&mut errors, "body.slug", &slug);
        let settings = Settings {
            description: patch(b.description, cur.description.clone()),
            tags: b.tags.map(|t| t.into_iter().collect()).unwrap_or(cur.tags.0.clone()),
            cron: patch(b.cron, cur.cron.clone()),
            cron_timezone: patch(b.cron_timezone, cur.cron_timezone.clone()),
            max_concurrent_runs: patch(b.max_concurrent_runs, cur.max_concurrent_runs.map(i64::from)),
            max_parallel_steps: patch(b.max_parallel_steps, cur.max_parallel_steps.map(i64::from)),
            timeout_secs: patch(b.timeout_secs, cur.timeout_secs.map(i64::from)),
            version_policy: b.version_policy.unwrap_or(cur.version_policy.clone()),
        };
        errors.extend(settings.validate());
        let cancel_on: Vec<CancelOn> = match b.cancel_on {
            Some(rules) => rules.into_iter().map(Into::into).collect(),
            None => cur.cancel_on.0.clone(),
        };
        cancel_on::validate(&cancel_on, &mut errors);
        errors.extend(step_errors.into_vec());
        errors.finish()?;
        policy::tag_violations(&tag_rules, &settings.tags)?;
        let actor = auth.0.actor();
        let write = WorkflowWrite {
            id: &cur.id,
            name: name.trim(),
            slug: &slug,
            description: settings.description.as_deref(),
            enabled: b.enabled.unwrap_or(cur.enabled),
            tags: &settings.tags,
            cron: settings.cron.as_deref(),
            cron_timezone: settings.cron_timezone.as_deref(),
            max_concurrent_runs: narrow(settings.max_concurrent_runs),
            max_parallel_steps: narrow(settings.max_parallel_steps),
            skip_if_running: b.skip_if_running.unwrap_or(cur.skip_if_running),
            cancel_on: &cancel_on,
            timeout_secs: narrow(settings.timeout_secs),
            version_policy: &settings.version_policy,
            backwards_compatible: b.backwards_compatible.unwrap_or(cur.backwards_compatible),
            actor: actor.as_deref(),
        };
        let updated = store::workflows::update(&mut tx, &write, steps.as_deref()).await?;
        let (rec, replaced) = match updated.ok_or_else(|| ApiError::not_found("workflow", &cur.id))? {
            Updated::Unchanged(rec) => {
                tx.commit().await?;
                return Ok(Json(workflow_view(rec)));
            }
            Updated::Versioned(rec, replaced) => (rec, replaced),
        };
        let breaking = b.breaking_change.unwrap_or(false);
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(
                &rec.project_id,
                "workflow.updated",
                ("workflow", &rec.id),
                serde_json::json!({
                    "version": rec.version, "version_id": rec.version_id,
                    "previous_version_id": replaced.version_id, "changed": replaced.changed,
                    "breaking_change": breaking,
                }),
            ),
        )
        .await?;
        if breaking && replaced.active_runs > 0 {
            audit::record(
                &mut *tx,
                &auth.0,
                Change::new(
                    &rec.project_id,
                    "workflow.updated_breaking",
                    ("workflow", &rec.id),
                    serde_json::json!({
                        "previous_version_id": replaced.version_id, "version_id": rec.version_id,
                        "active_runs_on_previous_version": replaced.active_runs,
                    }),
                ),
            )
            .await?;
        }
        tx.commit().await?;
        state.workflows.forget(&rec.id);
        // The first tick of a new or changed schedule must not wait for
        // the cron loop's longest sleep.
        if rec.enabled && rec.cron.is_some() {
            state.queue.wake(WakeLoop::Cron, None);
        }
        let mut view = workflow_view(rec);
        if replaced.active_runs > 0 {
            view.previous_version_id = Some(replaced.version_id);
            view.active_runs_on_previous_version = Some(replaced.active_runs);
        }
        Ok(Json(view))
    }

    /// Delete a workflow; its slug is free again.
    #[oai(path = "/v1/workflows/:workflow_id", method = "delete", operation_id = "deleteWorkflow")]
    async fn delete(&self, state: Data<&AppState>, auth: Auth, workflow_id: Path<String>) -> ApiResult<Deleted> {
        let cur = load(&state, &auth, &workflow_id).await?;
        let mut tx = state.pool.begin().await?;
        if !store::workflows::soft_delete(&mut tx, &cur.id, auth.0.actor().as_deref()).await? {
            return Err(ApiError::not_found("workflow", &cur.id));
        }
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(
                &cur.project_id,
                "workflow.deleted",
                ("workflow", &cur.id),
                serde_json::json!({"name": cur.name, "version": cur.version}),
            ),
        )
        .await?;
        tx.commit().await?;
        state.workflows.forget(&cur.id);
        Ok(Deleted::NoContent)
    }

    /// Every version of a workflow, newest first, with its steps.
    #[oai(path = "/v1/workflows/:workflow_id/versions", method = "get", operation_id = "listWorkflowVersions")]
    async fn versions(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_id: Path<String>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<WorkflowVersion>>> {
        let cur = load(&state, &auth, &workflow_id).await?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::workflows::versions(&state.pool, &cur.id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(
            rows,
            |r| r.id.clone(),
            |r: WorkflowVersionRow| WorkflowVersion {
                steps: r.steps.0.into_iter().map(|s| step_view(&r.workflow_id, r.created_at, s)).collect(),
                id: r.id,
                workflow_id: r.workflow_id,
                version: r.version.into(),
                created_by: r.created_by,
                created_at: r.created_at,
            },
        )))
    }

    /// The project's workflow policy (no rules while none was set).
    #[oai(path = "/v1/workflow-policies/:project_id", method = "get", operation_id = "getWorkflowPolicy")]
    async fn get_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Path<String>,
    ) -> ApiResult<Json<WorkflowPolicy>> {
        let project_id = policy_project(&state, &auth, &project_id).await?;
        Ok(Json(match store::workflows::policy(&state.pool, &project_id).await? {
            Some(r) => policy_view(r.project_id, r.policy.0, Some((r.updated_at, r.updated_by))),
            None => policy_view(project_id, Policy::default(), None),
        }))
    }

    /// Replace the project's workflow policy. Later saves of workflows
    /// that break a rule are 422, the message naming the rule
    /// (`workflow policy max_fan_out: ...`) at the offending step; saved
    /// workflows are not re-checked.
    #[oai(path = "/v1/workflow-policies/:project_id", method = "put", operation_id = "putWorkflowPolicy")]
    async fn put_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Path<String>,
        body: JsonBody<WorkflowPolicyBody>,
    ) -> ApiResult<Json<WorkflowPolicy>> {
        let project_id = policy_project(&state, &auth, &project_id).await?;
        let b = body.0;
        let p = Policy {
            max_steps: b.max_steps,
            max_depth: b.max_depth,
            max_fan_out: b.max_fan_out,
            allowed_step_types: b.allowed_step_types,
            approval_required_before: b.approval_required_before,
        };
        let mut errors = FieldErrors::new();
        errors.extend(p.validate());
        errors.finish()?;
        let mut tx = state.pool.begin().await?;
        let row = store::workflows::put_policy(&mut tx, &project_id, &p, auth.0.actor().as_deref()).await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(
                &project_id,
                "workflow_policy.updated",
                ("workflow_policy", &project_id),
                serde_json::to_value(&row.policy.0).unwrap_or(Value::Null),
            ),
        )
        .await?;
        tx.commit().await?;
        Ok(Json(policy_view(row.project_id, row.policy.0, Some((row.updated_at, row.updated_by)))))
    }
}

/// The project of a policy path: 404 when it does not exist or is not
/// the credential's.
async fn policy_project(state: &AppState, auth: &Auth, project_id: &str) -> ApiResult<String> {
    check_id("project", project_id)?;
    if !visible(&auth.0, project_id) || !store::projects::exists(&state.pool, project_id).await? {
        return Err(ApiError::not_found("project", project_id));
    }
    Ok(project_id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_step_is_answered_with_its_defaults() {
        let def = StepRequest { step_ref: "a".into(), job_id: Some("job_1".into()), ..StepRequest::default() };
        let v = step_view("wf_1", Utc::now(), SavedStep { id: "wfs_1".into(), def });
        assert_eq!((v.depends_on.len(), v.on_failure.as_str(), v.workflow_id.as_str()), (0, "fail_workflow", "wf_1"));
    }
}
