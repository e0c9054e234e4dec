//! What a run reported and went through, read side: outputs, key-value
//! state, checkpoints, usage, tool calls, events, logs, and the debug
//! bundle that gathers them. The target writes them over the SDK
//! (`routes::sdk_runs`).
//!
//! Lists of records page by id like every list; outputs, checkpoints,
//! usage and tool calls come newest first, logs and events oldest first
//! (they read as a story).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::run_record::LOG_LEVELS;
use switchyard_shared::store::{self, run_records as rec, Run};

use super::{load_run, view_from_row, Tag};
use crate::auth::Auth;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{self, Page, Window};
use crate::state::AppState;
use crate::views::{run_view, Checkpoint, JobRun, RunOutput, ToolCall, UsageRecord};

pub struct RunRecordsApi;

/// Sums over every usage record of the run.
#[derive(Object, Default)]
pub struct UsageTotals {
    pub records: i64,
    pub cost_microusd: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cpu_ms: i64,
}

/// A page of usage records with the totals of all of them.
#[derive(Object)]
pub struct RunUsage {
    pub run_id: String,
    pub totals: UsageTotals,
    pub data: Vec<UsageRecord>,
    pub has_more: bool,
    #[oai(skip_serializing_if_is_none)]
    pub next_cursor: Option<String>,
}

/// One log line a run sent.
#[derive(Object)]
pub struct LogLine {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    /// debug, info, warn or error.
    pub level: String,
    pub message: String,
    pub fields: Value,
    /// When the target wrote it.
    pub timestamp: DateTime<Utc>,
    /// When it arrived.
    pub created_at: DateTime<Utc>,
}

/// All key-value pairs of the run's state store.
#[derive(Object)]
pub struct RunState {
    pub run_id: String,
    pub state: BTreeMap<String, Value>,
}

/// One entry of a run's history: a status transition, or a finished
/// dispatch attempt with what the target answered.
#[derive(Object)]
pub struct RunEvent {
    /// `transition` or `attempt`.
    #[oai(rename = "type")]
    pub type_: String,
    /// When it happened (an attempt: when it ended).
    pub at: DateTime<Utc>,
    pub attempt: i32,
    /// transition: the status left (absent for the first event).
    #[oai(skip_serializing_if_is_none)]
    pub from_status: Option<String>,
    /// transition: the status entered.
    #[oai(skip_serializing_if_is_none)]
    pub to_status: Option<String>,
    /// transition: why (an error message, `triggered`, `due`...).
    #[oai(skip_serializing_if_is_none)]
    pub reason: Option<String>,
    /// attempt: the status the attempt ended the run in.
    #[oai(skip_serializing_if_is_none)]
    pub outcome: Option<String>,
    /// attempt: the target's HTTP status.
    #[oai(skip_serializing_if_is_none)]
    pub status_code: Option<i32>,
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub endpoint_url: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub started_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub duration_ms: Option<i64>,
}

view_from_row!(rec::UsageTotals => UsageTotals { records, cost_microusd, tokens_in, tokens_out, cpu_ms });
view_from_row!(rec::LogLine => LogLine { id, run_id, attempt, level, message, fields, timestamp, created_at });

pub(crate) fn event_view(r: rec::Event) -> RunEvent {
    let duration_ms = match (&r.kind[..], r.started_at) {
        ("attempt", Some(s)) => Some((r.at - s).num_milliseconds().max(0)),
        _ => None,
    };
    RunEvent {
        type_: r.kind,
        at: r.at,
        attempt: r.attempt,
        from_status: r.from_status,
        to_status: r.to_status,
        reason: r.reason,
        outcome: r.outcome,
        status_code: r.status_code,
        error: r.error,
        endpoint_url: r.endpoint_url.filter(|u| !u.is_empty()),
        started_at: r.started_at,
        duration_ms,
    }
}

/// The run's job version, as the debug bundle shows it.
#[derive(Object)]
pub struct BundleJobVersion {
    pub id: String,
    pub job_id: String,
    pub version: i32,
    pub name: String,
    /// The definition the run was triggered on; `webhook_secret` is left out
    /// and job secrets are never part of a definition.
    pub definition: Value,
}

/// Everything needed to understand one run, in one document.
#[derive(Object)]
pub struct DebugBundle {
    pub generated_at: DateTime<Utc>,
    pub run: JobRun,
    #[oai(skip_serializing_if_is_none)]
    pub job_version: Option<BundleJobVersion>,
    /// Names of the job's secrets (never their values).
    pub secret_names: Vec<String>,
    /// The full history, oldest first (at most the last 1000 entries).
    pub events: Vec<RunEvent>,
    /// The last 200 log lines, oldest first.
    pub logs: Vec<LogLine>,
    /// The last 20 checkpoints, newest first.
    pub checkpoints: Vec<Checkpoint>,
    pub state: BTreeMap<String, Value>,
    /// The last 100 outputs, newest first.
    pub outputs: Vec<RunOutput>,
    pub usage_totals: UsageTotals,
    /// The last 100 tool calls, newest first.
    pub tool_calls: Vec<ToolCall>,
}

/// The cursors of a run's events, stated in the document
/// (`document::cursors`): every one is a position `offset_cursor` takes.
pub const OFFSET_CURSOR_PATTERN: &str = "^[0-9]{1,7}$";

/// Events are offsets into the run's append-only history, so the cursor is
/// a position; any other cursor is refused like a bad id.
fn offset_cursor(raw: Option<String>) -> ApiResult<i64> {
    match raw {
        None => Ok(0),
        Some(c) => c.parse::<i64>().ok().filter(|n| *n >= 0 && *n < 10_000_000).ok_or_else(|| {
            ApiError::invalid_field("query.cursor", "not a cursor returned by this API", Some(c.into()))
        }),
    }
}

/// The run a record listing reads, with the page the caller asked for.
async fn listing(
    state: &AppState,
    auth: &Auth,
    run_id: &str,
    limit: Option<i64>,
    cursor: Option<String>,
) -> ApiResult<(Run, Window)> {
    let run = load_run(state, auth, run_id).await?;
    Ok((run, Window::parse(limit, cursor)?))
}

#[OpenApi(tag = "Tag::Runs")]
impl RunRecordsApi {
    /// The run's structured outputs, newest first.
    #[oai(path = "/v1/runs/:run_id/outputs", method = "get", operation_id = "listRunOutputs")]
    async fn outputs(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<RunOutput>>> {
        let (run, w) = listing(&state, &auth, &run_id, limit.0, cursor.0).await?;
        let rows = rec::outputs(&state.pool, &run.id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), RunOutput::from)))
    }

    /// Every key-value pair of the run's state store.
    #[oai(path = "/v1/runs/:run_id/state", method = "get", operation_id = "getRunState")]
    async fn state(&self, state: Data<&AppState>, auth: Auth, run_id: Path<String>) -> ApiResult<Json<RunState>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let pairs = rec::state(&state.pool, &run.id).await?;
        Ok(Json(RunState { run_id: run.id.to_string(), state: pairs }))
    }

    /// The run's checkpoints, newest first.
    #[oai(path = "/v1/runs/:run_id/checkpoints", method = "get", operation_id = "listRunCheckpoints")]
    async fn checkpoints(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Checkpoint>>> {
        let (run, w) = listing(&state, &auth, &run_id, limit.0, cursor.0).await?;
        let rows = rec::checkpoints(&state.pool, &run.id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), Checkpoint::from)))
    }

    /// The run's usage records, newest first, with the totals of all of them.
    #[oai(path = "/v1/runs/:run_id/usage", method = "get", operation_id = "getRunUsage")]
    async fn usage(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<RunUsage>> {
        let (run, w) = listing(&state, &auth, &run_id, limit.0, cursor.0).await?;
        let rows = rec::usage(&state.pool, &run.id, w.after(), w.fetch()).await?;
        let totals = rec::usage_totals(&state.pool, &run.id).await?;
        let page = w.page(rows, |r| r.id.clone(), UsageRecord::from);
        Ok(Json(RunUsage {
            run_id: run.id.to_string(),
            totals: totals.into(),
            data: page.data,
            has_more: page.has_more,
            next_cursor: page.next_cursor,
        }))
    }

    /// The run's tool calls, newest first.
    #[oai(path = "/v1/runs/:run_id/tool-calls", method = "get", operation_id = "listRunToolCalls")]
    async fn tool_calls(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<ToolCall>>> {
        let (run, w) = listing(&state, &auth, &run_id, limit.0, cursor.0).await?;
        let rows = rec::tool_calls(&state.pool, &run.id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), ToolCall::from)))
    }

    /// The run's history, oldest first: every status transition (`type:
    /// transition`, with its reason) and every finished dispatch attempt
    /// (`type: attempt`, with the target's answer and duration), in the
    /// order they happened. The cursor is a position in this history.
    #[oai(path = "/v1/runs/:run_id/events", method = "get", operation_id = "listRunEvents")]
    async fn events(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<RunEvent>>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let limit = pagination::limit(limit.0)?;
        let offset = offset_cursor(cursor.0)?;
        let mut rows = rec::events(&state.pool, &run.id, offset, limit + 1).await?;
        let has_more = rows.len() as i64 > limit;
        rows.truncate(limit as usize);
        let next_cursor = has_more.then(|| (offset + limit).to_string());
        Ok(Json(Page { data: rows.into_iter().map(event_view).collect(), has_more, next_cursor }))
    }

    /// The run's log lines, oldest first; `level` keeps one level.
    #[oai(path = "/v1/runs/:run_id/logs", method = "get", operation_id = "listRunLogs")]
    async fn logs(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        /// debug, info, warn or error.
        level: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<LogLine>>> {
        let (run, w) = listing(&state, &auth, &run_id, limit.0, cursor.0).await?;
        if let Some(l) = &level.0 {
            if !LOG_LEVELS.contains(&l.as_str()) {
                return Err(ApiError::invalid_field(
                    "query.level",
                    "must be debug, info, warn or error",
                    Some(l.clone().into()),
                ));
            }
        }
        let rows = rec::logs(&state.pool, &run.id, level.0.as_deref(), w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), LogLine::from)))
    }

    /// One JSON document for debugging a run: the run, the job version it
    /// ran (without secrets), its history (transitions and attempts), its
    /// last logs, checkpoints, state, outputs, usage totals and tool calls.
    #[oai(path = "/v1/runs/:run_id/debug-bundle", method = "get", operation_id = "getRunDebugBundle")]
    async fn debug_bundle(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
    ) -> ApiResult<Json<DebugBundle>> {
        let run: Run = load_run(&state, &auth, &run_id).await?;
        let version = store::jobs::version(&state.pool, &run.job_version_id).await?;
        let job_version = version.map(|v| {
            let mut spec = v.spec.0;
            spec.webhook_secret = None;
            BundleJobVersion {
                id: v.id,
                job_id: v.job_id,
                version: v.version,
                name: v.name,
                definition: serde_json::to_value(spec).unwrap_or(Value::Null),
            }
        });
        let secret_names = store::secrets::names(&state.pool, &run.job_id).await?;
        let total = rec::event_count(&state.pool, &run.id).await?;
        let events = rec::events(&state.pool, &run.id, (total - 1000).max(0), 1000).await?;
        let logs = rec::last_logs(&state.pool, &run.id, 200).await?;
        let checkpoints = rec::checkpoints(&state.pool, &run.id, None, 20).await?;
        let outputs = rec::outputs(&state.pool, &run.id, None, 100).await?;
        let tool_calls = rec::tool_calls(&state.pool, &run.id, None, 100).await?;
        let pairs = rec::state(&state.pool, &run.id).await?;
        let usage_totals = rec::usage_totals(&state.pool, &run.id).await?;
        Ok(Json(DebugBundle {
            generated_at: Utc::now(),
            run: run_view(run),
            job_version,
            secret_names,
            events: events.into_iter().map(event_view).collect(),
            logs: logs.into_iter().map(LogLine::from).collect(),
            checkpoints: checkpoints.into_iter().map(Checkpoint::from).collect(),
            state: pairs,
            outputs: outputs.into_iter().map(RunOutput::from).collect(),
            usage_totals: usage_totals.into(),
            tool_calls: tool_calls.into_iter().map(ToolCall::from).collect(),
        }))
    }
}
