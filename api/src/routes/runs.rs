//! Job runs: trigger (via the job), get, list, cancel (SPEC §2.6, DECISIONS §2).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::{Map, Value};
use switchyard_shared::domain::{schedule, trigger, RunStatus};
use switchyard_shared::queue::WakeLoop;
use switchyard_shared::store::flow::{self, CreateOptions};
use switchyard_shared::store::{self, JobRecord, NewRun, Run};

use super::{check_id, project_of, visible, Tag};
use crate::auth::{Auth, Principal};
use crate::error::{ApiError, ApiResult};
use crate::pagination::{self, Page};
use crate::state::AppState;

pub struct RunsApi;

/// Measured timings of the last attempt, in milliseconds.
#[derive(Object, Default)]
pub struct ExecutionTrace {
    pub connect_ms: i64,
    pub dequeue_ms: i64,
    pub dispatch_ms: i64,
    pub queue_wait_ms: i64,
    pub total_ms: i64,
    pub transfer_ms: i64,
    pub ttfb_ms: i64,
}

/// A job run (SPEC §2.6).
#[derive(Object)]
pub struct JobRun {
    pub id: String,
    pub project_id: String,
    pub job_id: String,
    pub job_version: i64,
    #[oai(skip_serializing_if_is_none)]
    pub job_version_id: Option<String>,
    /// pending, queued, running, retrying, completed, failed, timed_out, cancelled or expired.
    pub status: String,
    /// The current or last attempt, from 1; 0 before the first dispatch.
    pub attempt: i64,
    pub priority: i64,
    /// api, bulk, cron, replay, workflow or event.
    pub triggered_by: String,
    pub debug_mode: bool,
    pub lineage_depth: i64,
    pub created_at: DateTime<Utc>,
    #[oai(skip_serializing_if_is_none)]
    pub batch_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub concurrency_key: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub continuation_of: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub error_class: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub execution_mode: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub idempotency_key: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub machine_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub parent_run_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub retry_backoff: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub workflow_step_run_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub max_attempts_override: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub retry_initial_delay_secs: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub retry_max_delay_secs: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub timeout_secs_override: Option<i64>,
    pub metadata: Value,
    pub tags: Value,
    #[oai(skip_serializing_if_is_none)]
    pub payload: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub result: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub expires_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub finished_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub heartbeat_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub next_retry_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub scheduled_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub started_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub execution_trace: Option<ExecutionTrace>,
    /// small, medium or large: the machine preset of the last restart.
    #[oai(skip_serializing_if_is_none)]
    pub resource_class: Option<String>,
    /// The last progress the target reported over the SDK, 0 to 1.
    #[oai(skip_serializing_if_is_none)]
    pub progress: Option<f64>,
    #[oai(skip_serializing_if_is_none)]
    pub progress_message: Option<String>,
}

pub fn run_view(r: Run) -> JobRun {
    let trace = r.execution_trace.map(|t| {
        let g = |k: &str| t.0.get(k).and_then(Value::as_i64).unwrap_or(0);
        ExecutionTrace {
            connect_ms: g("connect_ms"),
            dequeue_ms: g("dequeue_ms"),
            dispatch_ms: g("dispatch_ms"),
            queue_wait_ms: g("queue_wait_ms"),
            total_ms: g("total_ms"),
            transfer_ms: g("transfer_ms"),
            ttfb_ms: g("ttfb_ms"),
        }
    });
    JobRun {
        id: r.id,
        project_id: r.project_id,
        job_id: r.job_id,
        job_version: r.job_version.into(),
        job_version_id: Some(r.job_version_id),
        status: r.status.as_str().to_string(),
        attempt: r.attempt.into(),
        priority: r.priority.into(),
        triggered_by: r.triggered_by,
        debug_mode: r.debug_mode,
        lineage_depth: r.lineage_depth.into(),
        created_at: r.created_at,
        batch_id: r.batch_id,
        concurrency_key: r.concurrency_key,
        continuation_of: r.continuation_of,
        created_by: r.created_by,
        error: r.error,
        error_class: r.error_class,
        execution_mode: Some(r.execution_mode),
        idempotency_key: r.idempotency_key,
        machine_id: r.machine_id,
        parent_run_id: r.parent_run_id,
        retry_backoff: r.retry_backoff,
        workflow_step_run_id: r.workflow_step_run_id,
        max_attempts_override: r.max_attempts_override.map(Into::into),
        retry_initial_delay_secs: r.retry_initial_delay_secs.map(Into::into),
        retry_max_delay_secs: r.retry_max_delay_secs.map(Into::into),
        timeout_secs_override: r.timeout_secs_override.map(Into::into),
        metadata: r.metadata.0,
        tags: r.tags.0,
        payload: r.payload.map(|p| p.0),
        result: r.result.map(|p| p.0),
        expires_at: r.expires_at,
        finished_at: r.finished_at,
        heartbeat_at: r.heartbeat_at,
        next_retry_at: r.next_retry_at,
        scheduled_at: r.scheduled_at,
        started_at: r.started_at,
        execution_trace: trace,
        resource_class: r.resource_class,
        progress: r.progress,
        progress_message: r.progress_message,
    }
}

/// The answer of `GET /v1/runs/{runID}/dependency-status`.
#[derive(Object)]
pub struct DependencyStatus {
    pub run_id: String,
    /// Every dependency has completed (true without dependencies).
    pub unblocked: bool,
    /// In the order the trigger's `depends_on` named them.
    pub dependencies: Vec<DependencyState>,
}

/// One dependency of a run.
#[derive(Object)]
pub struct DependencyState {
    pub run_id: String,
    /// The dependency's current status.
    pub status: String,
    /// It has completed.
    pub satisfied: bool,
}

/// Trigger a run (DECISIONS §2). Every field is optional.
#[derive(Object, Default)]
#[oai(deny_unknown_fields)]
pub struct TriggerRequest {
    /// Sent to the target as `payload`. Must satisfy the job's
    /// `payload_schema`, if it has one (else 422 with one `errors[]` entry
    /// per violation, located at `body.payload/<json pointer>`).
    pub payload: Option<Value>,
    /// Higher runs first; -1000 to 1000, default 0.
    pub priority: Option<i64>,
    /// A second trigger of the job with the same key returns the first run
    /// (200) and creates nothing.
    pub idempotency_key: Option<String>,
    pub tags: Option<HashMap<String, String>>,
    /// Merged over the job's default_run_metadata.
    pub metadata: Option<HashMap<String, String>>,
    /// Runs sharing a key share the job's max_concurrency_per_key.
    pub concurrency_key: Option<String>,
    /// Do not start before this time (the run is `pending` until then).
    pub scheduled_at: Option<DateTime<Utc>>,
    /// Do not start for this many seconds.
    pub delay_secs: Option<i64>,
    /// Up to 100 run ids of the same project that must complete first: the
    /// run stays `pending` until all have completed, and fails with
    /// error_class `dependency_failed` if one ends failed, cancelled,
    /// timed_out or expired. An unknown id or another project's run is 422.
    pub depends_on: Option<Vec<String>>,
    pub debug_mode: Option<bool>,
    pub max_attempts_override: Option<i64>,
    pub timeout_secs_override: Option<i64>,
    /// fixed, linear, exponential, custom or none.
    pub retry_backoff: Option<String>,
    pub retry_initial_delay_secs: Option<i64>,
    pub retry_max_delay_secs: Option<i64>,
    /// sync (default) or async.
    pub execution_mode: Option<String>,
    /// Makes this run a child of another run of the project.
    pub parent_run_id: Option<String>,
}

impl From<TriggerRequest> for trigger::Request {
    fn from(b: TriggerRequest) -> Self {
        trigger::Request {
            payload: b.payload,
            priority: b.priority,
            idempotency_key: b.idempotency_key,
            tags: b.tags,
            metadata: b.metadata,
            concurrency_key: b.concurrency_key,
            scheduled_at: b.scheduled_at,
            delay_secs: b.delay_secs,
            depends_on: b.depends_on,
            debug_mode: b.debug_mode,
            max_attempts_override: b.max_attempts_override,
            timeout_secs_override: b.timeout_secs_override,
            retry_backoff: b.retry_backoff,
            retry_initial_delay_secs: b.retry_initial_delay_secs,
            retry_max_delay_secs: b.retry_max_delay_secs,
            execution_mode: b.execution_mode,
            parent_run_id: b.parent_run_id,
        }
    }
}

/// Looks up the runs a trigger names (`depends_on`, `parent_run_id`), for
/// the checks of `domain::trigger::validate`.
async fn references(state: &AppState, project_id: &str, b: &trigger::Request) -> ApiResult<trigger::References> {
    let ids = trigger::ids_to_look_up(b);
    let runs = if ids.is_empty() { Default::default() } else { flow::runs_brief(&state.pool, &ids).await? };
    let parent = match &b.parent_run_id {
        Some(id) => store::runs::get(&state.pool, id).await?.map(|p| (p.project_id, p.lineage_depth)),
        None => None,
    };
    Ok(trigger::References {
        project_id: project_id.to_string(),
        runs: runs.into_iter().map(|(id, (project, status))| (id, (project, status == "completed"))).collect(),
        parent,
    })
}

/// Validates a trigger, writes the run to Postgres, then enqueues it in
/// Redis. The run is durable once the insert commits; if Redis is down the
/// reconciler enqueues it later, so an accepted run is never lost.
pub async fn trigger(
    state: &AppState,
    who: &Principal,
    job: &JobRecord,
    b: TriggerRequest,
    triggered_by: &str,
    batch_id: Option<String>,
) -> ApiResult<(JobRun, bool)> {
    if !job.enabled {
        return Err(ApiError::conflict("the job is disabled; enable it to trigger runs"));
    }
    let b = trigger::Request::from(b);
    let refs = references(state, &job.project_id, &b).await?;
    let valid = trigger::validate(&b, &job.spec.0, &refs)?;
    let spec = &job.spec.0;
    let mut metadata: Map<String, Value> =
        spec.default_run_metadata.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    for (k, v) in b.metadata.unwrap_or_default() {
        metadata.insert(k, Value::String(v));
    }
    let now = Utc::now();
    let requested = b.scheduled_at.or(valid.delay_secs.map(|d| now + chrono::Duration::seconds(d.into())));
    let awaiting = !valid.depends_on.is_empty() && !valid.dependencies_met;
    let admitted = schedule::admission(spec, now, requested, awaiting).map_err(ApiError::conflict)?;
    let new = NewRun {
        id: switchyard_shared::ids::run_id(),
        project_id: job.project_id.clone(),
        job_id: job.id.clone(),
        job_version: job.version,
        job_version_id: job.version_id.clone(),
        status: admitted.status,
        priority: valid.priority,
        triggered_by: triggered_by.into(),
        created_by: who.actor(),
        payload: b.payload,
        idempotency_key: b.idempotency_key,
        concurrency_key: b.concurrency_key,
        batch_id,
        parent_run_id: b.parent_run_id,
        lineage_depth: valid.lineage_depth,
        debug_mode: b.debug_mode.unwrap_or(false),
        execution_mode: valid.execution_mode.as_str().into(),
        retry_backoff: b.retry_backoff,
        max_attempts_override: valid.max_attempts_override,
        retry_initial_delay_secs: valid.retry_initial_delay_secs,
        retry_max_delay_secs: valid.retry_max_delay_secs,
        timeout_secs_override: valid.timeout_secs_override,
        metadata: Value::Object(metadata),
        tags: serde_json::to_value(b.tags.unwrap_or_default()).unwrap_or_default(),
        scheduled_at: admitted.scheduled_at,
        expires_at: admitted.expires_at,
        awaiting_dependencies: awaiting,
        ..NewRun::default()
    };
    // A replay asks for a new run of an earlier payload on purpose: the
    // dedup window does not fold it into the run it repeats.
    let dedup_window_secs = if triggered_by == "replay" { 0 } else { spec.dedup_window_secs };
    let due_ms = match admitted.status {
        RunStatus::Pending => admitted.scheduled_at.map_or(0, |t| t.timestamp_millis()),
        _ => 0,
    };
    let (run, created) = if valid.depends_on.is_empty() && dedup_window_secs <= 0 {
        // The common case: group-committed and enqueued with its batch.
        state.intake.submit(new, due_ms).await?
    } else {
        let opts = CreateOptions { dedup_window_secs, depends_on: valid.depends_on };
        let (run, created) = flow::create(&state.pool, new, &opts).await?;
        if created && !run.awaiting_dependencies {
            if let Err(e) = state.queue.enqueue(&run.entry(), due_ms, now.timestamp_millis()).await {
                tracing::warn!(run_id = %run.id, error = %e, "enqueue failed; the run is durable and the reconciler will enqueue it");
            }
        }
        (run, created)
    };
    // The scheduler loops that watch such runs sleep until their next
    // deadline; these runs may be due sooner (throttled per process).
    if created && run.awaiting_dependencies {
        state.queue.wake(WakeLoop::Dependencies, None);
    }
    if created && run.expires_at.is_some() {
        state.queue.wake(WakeLoop::Expirer, run.expires_at);
    }
    Ok((run_view(run), created))
}

pub async fn load_visible(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Run> {
    check_id("run", id)?;
    match store::runs::get(&state.pool, id).await? {
        Some(r) if visible(&auth.0, &r.project_id) => {
            let tags = crate::auth::policy::tags_of(&r.tags.0);
            let res = crate::auth::policy::Resource { kind: "run", id: Some(&r.id), tags: &tags };
            crate::auth::policy::check(state, &auth.0, &r.project_id, res).await?;
            Ok(r)
        }
        _ => Err(ApiError::not_found("run", id)),
    }
}

#[OpenApi(tag = "Tag::Runs")]
impl RunsApi {
    /// List runs of a project, newest first.
    #[oai(path = "/v1/runs", method = "get")]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        job_id: Query<Option<String>>,
        /// One run status.
        status: Query<Option<String>>,
        /// A JSON document the payload must contain (jsonb `@>`), e.g. `{"user":"42"}`.
        payload_contains: Query<Option<String>>,
        batch_id: Query<Option<String>>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<JobRun>>> {
        let project_id = project_of(&auth.0, project_id.0.as_deref())?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        if let Some(s) = &status.0 {
            if let Err(m) = s.parse::<RunStatus>() {
                return Err(ApiError::invalid_field("query.status", m, Some(s.clone().into())));
            }
        }
        let contains: Option<Value> = match &payload_contains.0 {
            None => None,
            Some(raw) => Some(serde_json::from_str(raw).map_err(|e| {
                ApiError::invalid_field("query.payload_contains", format!("not JSON: {e}"), Some(raw.clone().into()))
            })?),
        };
        let rows: Vec<Run> = sqlx::query_as(&format!(
            "SELECT {} FROM job_runs WHERE project_id = $1
               AND ($2::text IS NULL OR job_id = $2) AND ($3::text IS NULL OR status = $3)
               AND ($4::jsonb IS NULL OR payload @> $4) AND ($5::text IS NULL OR batch_id = $5)
               AND ($6::text IS NULL OR id < $6)
             ORDER BY id DESC LIMIT $7",
            store::runs::RUN_COLUMNS
        ))
        .bind(&project_id)
        .bind(&job_id.0)
        .bind(&status.0)
        .bind(contains.map(sqlx::types::Json))
        .bind(&batch_id.0)
        .bind(cursor)
        .bind(limit + 1)
        .fetch_all(&state.pool)
        .await?;
        Ok(Json(pagination::page(rows, limit, |r| r.id.clone(), run_view)))
    }

    /// Get a run.
    #[oai(path = "/v1/runs/:run_id", method = "get")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, run_id: Path<String>) -> ApiResult<Json<JobRun>> {
        Ok(Json(run_view(load_visible(&state, &auth, &run_id).await?)))
    }

    /// Whether a run's dependencies (its trigger's `depends_on`) have
    /// completed. `unblocked` is true when every dependency is `completed`
    /// (and for a run without dependencies); a dependency that ends
    /// `failed`, `cancelled`, `timed_out` or `expired` fails the run with
    /// error_class `dependency_failed`.
    #[oai(path = "/v1/runs/:run_id/dependency-status", method = "get")]
    async fn dependency_status(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
    ) -> ApiResult<Json<DependencyStatus>> {
        let run = load_visible(&state, &auth, &run_id).await?;
        let deps = flow::dependencies_of(&state.pool, &run.id).await?;
        let dependencies: Vec<DependencyState> = deps
            .into_iter()
            .map(|(run_id, status)| DependencyState { satisfied: status == "completed", run_id, status })
            .collect();
        Ok(Json(DependencyStatus { unblocked: dependencies.iter().all(|d| d.satisfied), run_id: run.id, dependencies }))
    }

    /// Cancel a run that has not finished, and its unfinished child runs
    /// (parent_run_id, recursively). A running dispatch is not interrupted,
    /// but its outcome is discarded. 409 when already finished.
    #[oai(path = "/v1/runs/:run_id/cancel", method = "post")]
    async fn cancel(&self, state: Data<&AppState>, auth: Auth, run_id: Path<String>) -> ApiResult<Json<JobRun>> {
        let run = load_visible(&state, &auth, &run_id).await?;
        let reason = super::run_ops::cancel_reason(&auth.0);
        let c = super::run_ops::cancel_with_children(&state, &run.id, &reason)
            .await?
            .ok_or_else(|| ApiError::not_found("run", &run_id))?;
        let after = c.run;
        let Some(from) = c.from else {
            return Err(ApiError::conflict(format!("the run is already {}", after.status)));
        };
        crate::audit::record(
            &state.pool,
            &auth.0,
            crate::audit::Change {
                project_id: &after.project_id,
                action: "run.cancelled",
                resource_type: "run",
                resource_id: &after.id,
                details: serde_json::json!({"job_id": after.job_id, "from_status": from.as_str()}),
            },
        )
        .await?;
        Ok(Json(run_view(after)))
    }
}
