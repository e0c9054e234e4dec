//! The SDK's run records and endings: logs, checkpoints,
//! progress, outputs, usage, tool calls, key-value state, and `complete` /
//! `fail` of an async run. Authorisation is the run token's (see
//! `routes::sdk`: a `RunToken` row in the scope table for each operation).
//!
//! Which calls need the run to be running:
//!
//! | call | needs |
//! |---|---|
//! | logs, usage, tool-calls | nothing: they record what happened, even late |
//! | checkpoints, progress, outputs, state PUT/DELETE, complete, fail | the run `running`, on the token's attempt (409 otherwise) |
//! | reads (latest checkpoint, state GET) | nothing |
//!
//! The token's attempt matters for the second row: after a retry, a late
//! call from the previous attempt's process must not finish or change the
//! attempt in flight. Records carry the attempt that wrote them.
//!
//! Per-run caps keep one chatty target from filling the database: 10,000
//! log lines, usage records and tool calls each, 1,000 outputs and state
//! keys; only the 100 newest checkpoints are kept.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::result::{scrub, scrub_str, MAX_RESULT_BYTES};
use switchyard_shared::domain::retry::AttemptEnd;
use switchyard_shared::domain::run_record::{
    self as rec_rules, check_amount, check_text, check_value_size, is_valid_state_key, json_len, LOG_LEVELS,
    MAX_OUTPUT_BYTES_PER_RUN, MAX_STATE_BYTES_PER_RUN,
};
use switchyard_shared::domain::{FieldErrors, JobSpec, RunStatus};
use switchyard_shared::store::run_records::{self as rec, Kind, NewLogLine, NewToolCall, NewUsage};
use switchyard_shared::store::settle;
use switchyard_shared::store::{self, Run};

use super::{sdk_run, sdk_run_for_write, Created, Done, Tag};
use crate::auth::{Auth, CredentialKind};
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::strict_json::JsonBody;
use crate::views::{run_view, Checkpoint, JobRun, RunOutput, ToolCall, UsageRecord};

pub struct SdkRunsApi;

pub const MAX_LINES_PER_CALL: usize = 100;
const MAX_LOG_LINES: i64 = 10_000;
const MAX_USAGE_RECORDS: i64 = 10_000;
const MAX_TOOL_CALLS: i64 = 10_000;
const MAX_OUTPUTS: i64 = 1_000;
const MAX_STATE_KEYS: i64 = 1_000;
const KEEP_CHECKPOINTS: i64 = 100;
/// The most bytes of JSON a log line's `fields` may take.
const MAX_FIELDS_BYTES: usize = 16 * 1024;

/// The attempt the caller's run token was minted for (the authenticator
/// read it from the verified claims); other credentials act on the run's
/// current attempt.
fn caller_attempt(auth: &Auth, run: &Run) -> i32 {
    match auth.0.kind {
        CredentialKind::RunToken => auth.0.run_attempt.unwrap_or(run.attempt),
        _ => run.attempt,
    }
}

/// 409 unless the run is running on the caller's attempt.
fn require_running(run: &Run, attempt: i32) -> ApiResult<()> {
    if run.status.is_terminal() {
        return Err(super::ended(run));
    }
    if run.status != RunStatus::Running {
        return Err(ApiError::conflict(format!("the run is {}, not running", run.status)));
    }
    if attempt != run.attempt {
        return Err(ApiError::conflict(format!(
            "the run token is for attempt {attempt}, but the run is on attempt {}",
            run.attempt
        )));
    }
    Ok(())
}

fn over_quota(what: &str, bytes: i64) -> ApiError {
    ApiError::invalid_field("body", format!("the run's {what} would hold more than {bytes} bytes together"), None)
}

fn at_cap(what: &str, cap: i64) -> ApiError {
    ApiError::invalid_field("body", format!("the run already has the most {what} it may keep ({cap})"), None)
}

// ---- bodies ----

/// One log line.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct LogLineIn {
    /// debug, info (default), warn or error.
    pub level: Option<String>,
    /// At most 16 KiB.
    pub message: String,
    /// When it was written; default: when it arrives.
    pub timestamp: Option<DateTime<Utc>>,
    /// Structured context (a JSON object).
    pub fields: Option<Value>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct LogsRequest {
    /// 1 to 100 lines.
    pub lines: Vec<LogLineIn>,
}

#[derive(Object)]
pub struct LogsAccepted {
    pub accepted: i64,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CheckpointRequest {
    /// Required (not null): what the next attempt needs to resume, handed to
    /// it as the dispatch body's `checkpoint`. At most 256 KiB of JSON.
    pub data: Value,
    pub label: Option<String>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct ProgressRequest {
    /// 0 to 1.
    pub progress: f64,
    /// At most 1024 characters.
    pub message: Option<String>,
}

#[derive(Object)]
pub struct ProgressResponse {
    pub run_id: String,
    pub progress: f64,
    #[oai(skip_serializing_if_is_none)]
    pub message: Option<String>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct OutputRequest {
    /// 1 to 256 characters.
    pub name: String,
    pub data: Option<Value>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UsageRequest {
    /// Micro-dollars, 0 to 10^12.
    pub cost_microusd: Option<i64>,
    pub tokens_in: Option<i64>,
    pub tokens_out: Option<i64>,
    pub model: Option<String>,
    pub cpu_ms: Option<i64>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct ToolCallRequest {
    /// 1 to 256 characters.
    pub name: String,
    pub input: Option<Value>,
    pub output: Option<Value>,
    pub duration_ms: Option<i64>,
    /// For example `ok` or `error`; at most 64 characters.
    pub status: Option<String>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct StatePut {
    pub value: Value,
}

/// One key of the run's state store.
#[derive(Object)]
pub struct StateEntry {
    pub key: String,
    pub value: Value,
    pub updated_at: DateTime<Utc>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CompleteRequest {
    /// The run's result.
    pub result: Option<Value>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct FailRequest {
    /// What went wrong; at most 4096 characters.
    pub error: String,
    /// Recorded as the run's error_class (default `target_failed`): the
    /// target's own classification, free-form, e.g. `ProviderDown` or
    /// `provider.down`. 1 to 200 printable characters (no control
    /// characters), not blank.
    pub error_class: Option<String>,
    /// Whether another attempt may help (default false). The job's retry
    /// policy still decides: `retrying` while attempts remain, else `failed`.
    pub retryable: Option<bool>,
}

/// The value rules of the bodies above (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{count, text};
    use serde_json::json;
    use switchyard_shared::domain::error_class;
    use Place::Property;
    let mut r = vec![
        (Property("LogLineIn", "fields"), json!({"type": "object"})),
        (
            Property("CheckpointRequest", "data"),
            json!({"type": ["object", "array", "string", "number", "boolean"], "items": {}}),
        ),
        (Property("LogsRequest", "lines"), count(1, MAX_LINES_PER_CALL)),
        (Property("LogLineIn", "message"), text(&rec_rules::LOG_MESSAGE)),
        (Property("CheckpointRequest", "label"), text(&rec_rules::CHECKPOINT_LABEL)),
        (Property("ProgressRequest", "progress"), json!({"minimum": 0, "maximum": 1})),
        (Property("ProgressRequest", "message"), text(&rec_rules::PROGRESS_MESSAGE)),
        (Property("OutputRequest", "name"), text(&rec_rules::NAME)),
    ];
    let amount = json!({"minimum": 0, "maximum": rec_rules::MAX_AMOUNT});
    for prop in ["cost_microusd", "tokens_in", "tokens_out", "cpu_ms"] {
        r.push((Property("UsageRequest", prop), amount.clone()));
    }
    r.push((Property("UsageRequest", "model"), text(&rec_rules::NAME)));
    r.push((Property("ToolCallRequest", "name"), text(&rec_rules::NAME)));
    r.push((Property("ToolCallRequest", "status"), text(&rec_rules::TOOL_STATUS)));
    r.push((Property("ToolCallRequest", "duration_ms"), amount));
    r.push((Property("FailRequest", "error"), text(&rec_rules::ERROR)));
    r.push((Property("FailRequest", "error_class"), text(&error_class::RULE)));
    r
}

#[OpenApi(tag = "Tag::Sdk")]
impl SdkRunsApi {
    /// Append 1 to 100 log lines to the run's log. Accepted in any status
    /// (a target may flush its logs after finishing).
    #[oai(path = "/sdk/v1/runs/:run_id/logs", method = "post", operation_id = "sdkWriteLogs")]
    async fn logs(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<LogsRequest>,
    ) -> ApiResult<Json<LogsAccepted>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let lines = body.0.lines;
        if lines.is_empty() || lines.len() > MAX_LINES_PER_CALL {
            return Err(ApiError::invalid_field(
                "body.lines",
                format!("must hold 1 to {MAX_LINES_PER_CALL} lines"),
                Some((lines.len() as i64).into()),
            ));
        }
        let mut errors = FieldErrors::new();
        for (i, l) in lines.iter().enumerate() {
            if let Some(level) = &l.level {
                errors.check(
                    LOG_LEVELS.contains(&level.as_str()),
                    format!("body.lines/{i}/level"),
                    "must be debug, info, warn or error",
                    Some(level.clone().into()),
                );
            }
            check_text(&mut errors, &format!("body.lines/{i}/message"), &l.message, &rec_rules::LOG_MESSAGE);
            if let Some(f) = &l.fields {
                let loc = format!("body.lines/{i}/fields");
                if !f.is_object() {
                    errors.push(loc, "must be a JSON object", None);
                } else if json_len(f) > MAX_FIELDS_BYTES {
                    errors.push(loc, format!("at most {MAX_FIELDS_BYTES} bytes of JSON"), None);
                }
            }
        }
        errors.finish()?;
        if rec::count(&state.pool, Kind::Logs, &run.id).await? + lines.len() as i64 > MAX_LOG_LINES {
            return Err(at_cap("log lines", MAX_LOG_LINES));
        }
        let attempt = caller_attempt(&auth, &run);
        let now = Utc::now();
        let n = lines.len();
        let lines = lines
            .into_iter()
            .map(|l| NewLogLine {
                level: l.level.unwrap_or_else(|| "info".into()),
                message: scrub_str(l.message),
                fields: scrub(l.fields.unwrap_or_else(|| Value::Object(Default::default()))),
                logged_at: l.timestamp.unwrap_or(now),
            })
            .collect();
        rec::append_logs(&state.pool, &run.id, attempt, lines).await?;
        Ok(Json(LogsAccepted { accepted: n as i64 }))
    }

    /// Save a checkpoint. The newest checkpoint of the run is handed to its
    /// next attempt in the dispatch body (`checkpoint`); the 100 newest are kept.
    #[oai(path = "/sdk/v1/runs/:run_id/checkpoints", method = "post", operation_id = "sdkSaveCheckpoint")]
    async fn checkpoint(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<CheckpointRequest>,
    ) -> ApiResult<Created<Checkpoint>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let b = body.0;
        let mut errors = FieldErrors::new();
        if let Some(l) = &b.label {
            check_text(&mut errors, "body.label", l, &rec_rules::CHECKPOINT_LABEL);
        }
        errors.check(!b.data.is_null(), "body.data", "required: any JSON value but null", None);
        check_value_size(&mut errors, "body.data", &b.data);
        errors.finish()?;
        let attempt = caller_attempt(&auth, &run);
        require_running(&run, attempt)?;
        let label = b.label.map(scrub_str);
        let cp = rec::save_checkpoint(&state.pool, &run.id, attempt, label, scrub(b.data), KEEP_CHECKPOINTS).await?;
        Ok(Created::Created(Json(cp.into())))
    }

    /// The run's newest checkpoint; 404 when it has none.
    #[oai(path = "/sdk/v1/runs/:run_id/checkpoints/latest", method = "get", operation_id = "sdkGetLatestCheckpoint")]
    async fn latest_checkpoint(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
    ) -> ApiResult<Json<Checkpoint>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let cp = rec::latest_checkpoint(&state.pool, &run.id).await?;
        cp.map(|c| Json(c.into())).ok_or_else(|| {
            ApiError::NotFound(Json(Box::new(crate::error::Problem::new(404, "the run has no checkpoint"))))
        })
    }

    /// Report progress (0 to 1) with an optional message; shown on the run
    /// as `progress` and `progress_message`.
    #[oai(path = "/sdk/v1/runs/:run_id/progress", method = "post", operation_id = "sdkReportProgress")]
    async fn progress(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<ProgressRequest>,
    ) -> ApiResult<Json<ProgressResponse>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let b = body.0;
        let mut errors = FieldErrors::new();
        errors.check(
            (0.0..=1.0).contains(&b.progress),
            "body.progress",
            "must be between 0 and 1",
            Some(b.progress.into()),
        );
        if let Some(m) = &b.message {
            check_text(&mut errors, "body.message", m, &rec_rules::PROGRESS_MESSAGE);
        }
        errors.finish()?;
        let attempt = caller_attempt(&auth, &run);
        require_running(&run, attempt)?;
        let message = b.message.map(scrub_str);
        if !store::run_updates::record_progress(&state.pool, &run.id, attempt, b.progress, message.as_deref()).await? {
            return Err(ApiError::conflict("the run is no longer running on this attempt"));
        }
        Ok(Json(ProgressResponse { run_id: run.id.to_string(), progress: b.progress, message }))
    }

    /// Record a named structured output of the run.
    #[oai(path = "/sdk/v1/runs/:run_id/outputs", method = "post", operation_id = "sdkWriteOutput")]
    async fn output(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<OutputRequest>,
    ) -> ApiResult<Created<RunOutput>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let b = body.0;
        let mut errors = FieldErrors::new();
        check_text(&mut errors, "body.name", &b.name, &rec_rules::NAME);
        if let Some(d) = &b.data {
            check_value_size(&mut errors, "body.data", d);
        }
        errors.finish()?;
        let attempt = caller_attempt(&auth, &run);
        require_running(&run, attempt)?;
        if rec::count(&state.pool, Kind::Outputs, &run.id).await? >= MAX_OUTPUTS {
            return Err(at_cap("outputs", MAX_OUTPUTS));
        }
        let adding = b.data.as_ref().map_or(0, json_len) as i64;
        if rec::output_bytes(&state.pool, &run.id).await? + adding > MAX_OUTPUT_BYTES_PER_RUN {
            return Err(over_quota("outputs", MAX_OUTPUT_BYTES_PER_RUN));
        }
        let out = rec::add_output(&state.pool, &run.id, attempt, scrub_str(b.name), b.data.map(scrub)).await?;
        Ok(Created::Created(Json(out.into())))
    }

    /// Record resources a step of the run used (cost in micro-dollars,
    /// tokens, CPU time). Accepted in any status; `GET /v1/runs/{run_id}/usage`
    /// sums them.
    #[oai(path = "/sdk/v1/runs/:run_id/usage", method = "post", operation_id = "sdkReportUsage")]
    async fn usage(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<UsageRequest>,
    ) -> ApiResult<Created<UsageRecord>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let b = body.0;
        let mut errors = FieldErrors::new();
        check_amount(&mut errors, "body.cost_microusd", b.cost_microusd);
        check_amount(&mut errors, "body.tokens_in", b.tokens_in);
        check_amount(&mut errors, "body.tokens_out", b.tokens_out);
        check_amount(&mut errors, "body.cpu_ms", b.cpu_ms);
        if let Some(m) = &b.model {
            check_text(&mut errors, "body.model", m, &rec_rules::NAME);
        }
        errors.finish()?;
        if rec::count(&state.pool, Kind::Usage, &run.id).await? >= MAX_USAGE_RECORDS {
            return Err(at_cap("usage records", MAX_USAGE_RECORDS));
        }
        let attempt = caller_attempt(&auth, &run);
        let usage = NewUsage {
            cost_microusd: b.cost_microusd.unwrap_or(0),
            tokens_in: b.tokens_in.unwrap_or(0),
            tokens_out: b.tokens_out.unwrap_or(0),
            model: b.model.map(scrub_str),
            cpu_ms: b.cpu_ms.unwrap_or(0),
        };
        let made = rec::add_usage(&state.pool, &run.id, attempt, usage).await?;
        Ok(Created::Created(Json(made.into())))
    }

    /// Record a tool the run called, with its input, output and duration.
    /// Accepted in any status.
    #[oai(path = "/sdk/v1/runs/:run_id/tool-calls", method = "post", operation_id = "sdkRecordToolCall")]
    async fn tool_call(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<ToolCallRequest>,
    ) -> ApiResult<Created<ToolCall>> {
        let run = sdk_run_for_write(&state, &auth, &run_id).await?;
        let b = body.0;
        let mut errors = FieldErrors::new();
        check_text(&mut errors, "body.name", &b.name, &rec_rules::NAME);
        if let Some(s) = &b.status {
            check_text(&mut errors, "body.status", s, &rec_rules::TOOL_STATUS);
        }
        check_amount(&mut errors, "body.duration_ms", b.duration_ms);
        for (location, v) in [("body.input", &b.input), ("body.output", &b.output)] {
            if let Some(v) = v {
                check_value_size(&mut errors, location, v);
            }
        }
        errors.finish()?;
        if rec::count(&state.pool, Kind::ToolCalls, &run.id).await? >= MAX_TOOL_CALLS {
            return Err(at_cap("tool calls", MAX_TOOL_CALLS));
        }
        let attempt = caller_attempt(&auth, &run);
        let call = NewToolCall {
            name: scrub_str(b.name),
            input: b.input.map(scrub),
            output: b.output.map(scrub),
            duration_ms: b.duration_ms,
            status: b.status.map(scrub_str),
        };
        let made = rec::add_tool_call(&state.pool, &run.id, attempt, call).await?;
        Ok(Created::Created(Json(made.into())))
    }

    /// One key of the run's state store; 404 when unset.
    #[oai(path = "/sdk/v1/runs/:run_id/state/:key", method = "get", operation_id = "sdkGetState")]
    async fn state_get(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        key: Path<String>,
    ) -> ApiResult<Json<StateEntry>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let row = if is_valid_state_key(&key) { rec::state_get(&state.pool, &run.id, &key).await? } else { None };
        let (value, updated_at) = row.ok_or_else(|| ApiError::not_found("state key", &key))?;
        Ok(Json(StateEntry { key: key.0, value, updated_at }))
    }

    /// Set one key of the run's state store (keys: 1 to 128 of
    /// `A-Z a-z 0-9 _ - . :`; values up to 256 KiB of JSON; 1000 keys per run).
    #[oai(path = "/sdk/v1/runs/:run_id/state/:key", method = "put", operation_id = "sdkPutState")]
    async fn state_put(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        key: Path<String>,
        body: JsonBody<StatePut>,
    ) -> ApiResult<Json<StateEntry>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let mut errors = FieldErrors::new();
        errors.check(
            is_valid_state_key(&key),
            "path.key",
            "1 to 128 characters of A-Z a-z 0-9 _ - . :",
            Some(key.0.clone().into()),
        );
        check_value_size(&mut errors, "body.value", &body.0.value);
        errors.finish()?;
        let attempt = caller_attempt(&auth, &run);
        require_running(&run, attempt)?;
        let adding = json_len(&body.0.value) as i64;
        if rec::state_bytes_besides(&state.pool, &run.id, &key).await? + adding > MAX_STATE_BYTES_PER_RUN {
            return Err(over_quota("state", MAX_STATE_BYTES_PER_RUN));
        }
        let row = rec::state_put(&state.pool, &run.id, &key, scrub(body.0.value), MAX_STATE_KEYS).await?;
        let (value, updated_at) = row.ok_or_else(|| at_cap("state keys", MAX_STATE_KEYS))?;
        Ok(Json(StateEntry { key: key.0, value, updated_at }))
    }

    /// Remove one key of the run's state store; 404 when unset.
    #[oai(path = "/sdk/v1/runs/:run_id/state/:key", method = "delete", operation_id = "sdkDeleteState")]
    async fn state_delete(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        key: Path<String>,
    ) -> ApiResult<Done> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let attempt = caller_attempt(&auth, &run);
        require_running(&run, attempt)?;
        let gone = is_valid_state_key(&key) && rec::state_delete(&state.pool, &run.id, &key).await?;
        if !gone {
            return Err(ApiError::not_found("state key", &key));
        }
        Ok(Done::NoContent)
    }

    /// Finish the attempt successfully with `result` (an async run after
    /// its 202, or any running run). 409 unless the run is running on the
    /// token's attempt.
    #[oai(path = "/sdk/v1/runs/:run_id/complete", method = "post", operation_id = "sdkCompleteRun")]
    async fn complete(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<CompleteRequest>,
    ) -> ApiResult<Json<JobRun>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let result = scrub(body.0.result.unwrap_or(Value::Null));
        if json_len(&result) > MAX_RESULT_BYTES {
            return Err(ApiError::invalid_field("body.result", "too large for a run result", None));
        }
        let attempt = caller_attempt(&auth, &run);
        require_running(&run, attempt)?;
        finish(&state, &run, AttemptEnd::Completed { result }).await
    }

    /// Finish the attempt as failed. With `retryable: true` the job's retry
    /// policy applies as for a failed dispatch (`retrying` with
    /// next_retry_at while attempts remain, then `failed`); otherwise the
    /// run fails now. 409 unless the run is running on the token's attempt.
    #[oai(path = "/sdk/v1/runs/:run_id/fail", method = "post", operation_id = "sdkFailRun")]
    async fn fail(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<FailRequest>,
    ) -> ApiResult<Json<JobRun>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let b = body.0;
        let mut errors = FieldErrors::new();
        check_text(&mut errors, "body.error", &b.error, &rec_rules::ERROR);
        if let Some(c) = &b.error_class {
            if let Err(message) = switchyard_shared::domain::error_class::check(c) {
                errors.push("body.error_class", message, Some(c.clone().into()));
            }
        }
        errors.finish()?;
        let attempt = caller_attempt(&auth, &run);
        require_running(&run, attempt)?;
        let ending = AttemptEnd::Failed {
            class: b.error_class.unwrap_or_else(|| "target_failed".into()),
            error: scrub_str(b.error),
            retryable: b.retryable.unwrap_or(false),
            retry_after: None,
            timed_out: false,
        };
        finish(&state, &run, ending).await
    }
}

/// Records the ending through the same rules as the worker and the
/// heartbeat sweep (`store::settle`), then sends the terminal webhook.
async fn finish(state: &AppState, run: &Run, ending: AttemptEnd<String>) -> ApiResult<Json<JobRun>> {
    let spec = store::jobs::spec_for_run(&state.pool, &run.job_id, &run.job_version_id).await?;
    let spec = spec.unwrap_or_else(|| {
        // The job is gone: no retry policy to apply, the ending stands.
        JobSpec { max_attempts: 1, ..JobSpec::default() }
    });
    // A terminal ending writes the run's webhook delivery with it.
    let Some((_, after)) = settle::settle(&state.pool, &state.queue, run, &spec, ending).await? else {
        return Err(ApiError::conflict("the run is no longer running on this attempt"));
    };
    Ok(Json(run_view(after)))
}
