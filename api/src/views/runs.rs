//! Response and request objects of runs that several route files share: a
//! run as every run operation returns it, and the trigger request (single,
//! bulk and replay triggers build it).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use poem_openapi::Object;
use serde_json::Value;
use switchyard_shared::domain::trigger;
use switchyard_shared::store::Run;

use crate::document::rules::Place;

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

/// A job run: one execution of a job, with its attempts.
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
    /// api, bulk, cron, replay, workflow, event or batch.
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
    /// The W3C trace id of the run's trace: its trigger request's (or the
    /// caller's `traceparent`, or its workflow run's), else one the run
    /// began. Every request Switchyard sends for the run carries it in
    /// `traceparent`.
    pub trace_id: String,
    /// In a trigger's answer only: true when the job's debounce window for
    /// the payload's key was open, so this waiting run took the payload
    /// and its start moved on; nothing was created.
    #[oai(skip_serializing_if_is_none)]
    pub debounced: Option<bool>,
    /// In a trigger's answer only: true when the job is a singleton (mode
    /// `skip`) and this run of the payload's key is unfinished; nothing was
    /// created.
    #[oai(skip_serializing_if_is_none)]
    pub skipped: Option<bool>,
    /// In a trigger's answer only: the unfinished run of the payload's key
    /// that this new run replaced (a singleton in mode `cancel`), now
    /// `cancelled`.
    #[oai(skip_serializing_if_is_none)]
    pub replaced_run_id: Option<String>,
}

pub fn run_view(r: Run) -> JobRun {
    let trace_id = r.trace().trace_id.to_string();
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
        id: r.id.into_string(),
        project_id: r.project_id,
        job_id: r.job_id.into_string(),
        job_version: r.job_version.into(),
        job_version_id: Some(r.job_version_id),
        status: r.status.as_str().to_string(),
        attempt: r.attempt.into(),
        priority: r.priority.into(),
        triggered_by: r.triggered_by,
        debug_mode: r.debug_mode,
        lineage_depth: r.lineage_depth.into(),
        created_at: r.created_at,
        batch_id: r.batch_id.map(String::from),
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
        workflow_step_run_id: r.workflow_step_run_id.map(String::from),
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
        trace_id,
        debounced: None,
        skipped: None,
        replaced_run_id: None,
    }
}

/// Trigger a run. Every field is optional.
#[derive(Object, Default)]
#[oai(deny_unknown_fields)]
pub struct TriggerRequest {
    /// Sent to the target as `payload`. Must satisfy the job's
    /// `payload_schema`, if it has one (else 422 with one `errors[]` entry
    /// per violation, located at `body.payload/<json pointer>`).
    pub payload: Option<Value>,
    /// Higher runs first; -1000 to 1000, default 0.
    #[oai(validator(minimum(value = "-1000"), maximum(value = "1000")))]
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

impl TriggerRequest {
    /// The fields set besides `payload`: what shapes one run.
    pub fn options_set(&self) -> Vec<&'static str> {
        let set = [
            ("priority", self.priority.is_some()),
            ("idempotency_key", self.idempotency_key.is_some()),
            ("tags", self.tags.is_some()),
            ("metadata", self.metadata.is_some()),
            ("concurrency_key", self.concurrency_key.is_some()),
            ("scheduled_at", self.scheduled_at.is_some()),
            ("delay_secs", self.delay_secs.is_some()),
            ("depends_on", self.depends_on.is_some()),
            ("debug_mode", self.debug_mode.is_some()),
            ("max_attempts_override", self.max_attempts_override.is_some()),
            ("timeout_secs_override", self.timeout_secs_override.is_some()),
            ("retry_backoff", self.retry_backoff.is_some()),
            ("retry_initial_delay_secs", self.retry_initial_delay_secs.is_some()),
            ("retry_max_delay_secs", self.retry_max_delay_secs.is_some()),
            ("execution_mode", self.execution_mode.is_some()),
            ("parent_run_id", self.parent_run_id.is_some()),
        ];
        set.into_iter().filter(|(_, on)| *on).map(|(name, _)| name).collect()
    }
}

/// The value rules of TriggerRequest (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{count, map, range, text};
    use switchyard_shared::domain::limits;
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::{Items, Property};
    let mut r = vec![
        (Property("TriggerRequest", "idempotency_key"), text(&limits::KEY)),
        (Property("TriggerRequest", "concurrency_key"), text(&limits::KEY)),
        (Property("TriggerRequest", "max_attempts_override"), range(limits::MAX_ATTEMPTS_OVERRIDE)),
        (Property("TriggerRequest", "timeout_secs_override"), range(limits::TIMEOUT_SECS_OVERRIDE)),
        (Property("TriggerRequest", "retry_initial_delay_secs"), range(limits::RETRY_INITIAL_DELAY_SECS)),
        (Property("TriggerRequest", "retry_max_delay_secs"), range(limits::RETRY_MAX_DELAY_SECS)),
        (Property("TriggerRequest", "delay_secs"), range(trigger::DELAY_SECS)),
        (Property("TriggerRequest", "depends_on"), count(0, trigger::MAX_DEPENDENCIES)),
        (Items("TriggerRequest", "depends_on"), text(&ID)),
        (Property("TriggerRequest", "parent_run_id"), text(&ID)),
    ];
    for prop in ["tags", "metadata"] {
        r.extend(map("TriggerRequest", prop, limits::MAX_MAP_ENTRIES, &limits::MAP_KEY, &limits::MAP_VALUE));
    }
    r
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
