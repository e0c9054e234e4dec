//! What a run reported and went through, read side (SPEC §4.3, DECISIONS
//! §2): outputs, key-value state, checkpoints, usage, tool calls, events,
//! logs, and the debug bundle that gathers them. The target writes them
//! over the SDK (`routes::sdk`).
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
use switchyard_shared::domain::JobSpec;
use switchyard_shared::store::Run;

use super::run_ops::load_run;
use super::runs::{run_view, JobRun};
use super::Tag;
use crate::auth::Auth;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{self, Page};
use crate::state::AppState;

pub struct RunRecordsApi;

/// A named structured output of a run.
#[derive(Object, sqlx::FromRow)]
pub struct RunOutput {
    pub id: String,
    pub run_id: String,
    /// The attempt that wrote it.
    pub attempt: i32,
    pub name: String,
    #[sqlx(json(nullable))]
    pub data: Option<Value>,
    pub created_at: DateTime<Utc>,
}

/// A snapshot a run saved to resume from; the latest is handed to the next
/// attempt as the dispatch body's `checkpoint`.
#[derive(Object, sqlx::FromRow)]
pub struct Checkpoint {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    #[oai(skip_serializing_if_is_none)]
    pub label: Option<String>,
    #[sqlx(json)]
    pub data: Value,
    pub created_at: DateTime<Utc>,
}

/// Resources one step of a run used.
#[derive(Object, sqlx::FromRow)]
pub struct UsageRecord {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    /// Micro-dollars.
    pub cost_microusd: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    #[oai(skip_serializing_if_is_none)]
    pub model: Option<String>,
    pub cpu_ms: i64,
    pub created_at: DateTime<Utc>,
}

/// Sums over every usage record of the run.
#[derive(Object, sqlx::FromRow, Default)]
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

/// A tool a run called (an AI agent's function call, an API request...).
#[derive(Object, sqlx::FromRow)]
pub struct ToolCall {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    pub name: String,
    #[sqlx(json(nullable))]
    pub input: Option<Value>,
    #[sqlx(json(nullable))]
    pub output: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub duration_ms: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub status: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// One log line a run sent.
#[derive(Object, sqlx::FromRow)]
pub struct LogLine {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    /// debug, info, warn or error.
    pub level: String,
    pub message: String,
    #[sqlx(json)]
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

#[derive(sqlx::FromRow)]
struct EventRow {
    kind: String,
    at: DateTime<Utc>,
    attempt: i32,
    from_status: Option<String>,
    to_status: Option<String>,
    reason: Option<String>,
    outcome: Option<String>,
    status_code: Option<i32>,
    error: Option<String>,
    endpoint_url: Option<String>,
    started_at: Option<DateTime<Utc>>,
}

fn event_view(r: EventRow) -> RunEvent {
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

const EVENTS_SQL: &str = "SELECT * FROM (
        SELECT 'transition' AS kind, at, attempt, from_status, to_status, reason,
               NULL::text AS outcome, NULL::int AS status_code, NULL::text AS error, NULL::text AS endpoint_url,
               NULL::timestamptz AS started_at, 0 AS ord, seq, sub
          FROM job_run_transitions WHERE run_id = $1
        UNION ALL
        SELECT 'attempt', finished_at, attempt, NULL, NULL, NULL, outcome, status_code, error, endpoint_url,
               started_at, 1, 0, 0
          FROM job_run_attempts WHERE run_id = $1
     ) h ORDER BY at, ord, seq, sub, started_at";

async fn events_page(state: &AppState, run_id: &str, offset: i64, limit: i64) -> Result<Vec<EventRow>, sqlx::Error> {
    sqlx::query_as(&format!("{EVENTS_SQL} OFFSET $2 LIMIT $3"))
        .bind(run_id)
        .bind(offset)
        .bind(limit)
        .fetch_all(&state.pool)
        .await
}

async fn state_of(state: &AppState, run_id: &str) -> Result<BTreeMap<String, Value>, sqlx::Error> {
    let rows: Vec<(String, sqlx::types::Json<Value>)> =
        sqlx::query_as("SELECT key, value FROM job_run_state WHERE run_id = $1 ORDER BY key")
            .bind(run_id)
            .fetch_all(&state.pool)
            .await?;
    Ok(rows.into_iter().map(|(k, v)| (k, v.0)).collect())
}

async fn usage_totals(state: &AppState, run_id: &str) -> Result<UsageTotals, sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*) AS records, COALESCE(sum(cost_microusd), 0)::bigint AS cost_microusd,
                COALESCE(sum(tokens_in), 0)::bigint AS tokens_in, COALESCE(sum(tokens_out), 0)::bigint AS tokens_out,
                COALESCE(sum(cpu_ms), 0)::bigint AS cpu_ms
         FROM job_run_usage WHERE run_id = $1",
    )
    .bind(run_id)
    .fetch_one(&state.pool)
    .await
}

const OUTPUT_COLS: &str = "id, run_id, attempt, name, data, created_at";
const CHECKPOINT_COLS: &str = "id, run_id, attempt, label, data, created_at";
const USAGE_COLS: &str = "id, run_id, attempt, cost_microusd, tokens_in, tokens_out, model, cpu_ms, created_at";
const TOOL_COLS: &str = "id, run_id, attempt, name, input, output, duration_ms, status, created_at";
const LOG_COLS: &str = "id, run_id, attempt, level, message, fields, logged_at AS timestamp, created_at";

/// Newest first: `limit + 1` rows of `table` of the run, before `cursor`.
async fn newest_first<T>(
    state: &AppState,
    cols: &str,
    table: &str,
    run_id: &str,
    cursor: Option<String>,
    limit: i64,
) -> Result<Vec<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(&format!(
        "SELECT {cols} FROM {table} WHERE run_id = $1 AND ($2::text IS NULL OR id < $2) ORDER BY id DESC LIMIT $3"
    ))
    .bind(run_id)
    .bind(cursor)
    .bind(limit)
    .fetch_all(&state.pool)
    .await
}

#[OpenApi(tag = "Tag::Runs")]
impl RunRecordsApi {
    /// The run's structured outputs, newest first.
    #[oai(path = "/v1/runs/:run_id/outputs", method = "get")]
    async fn outputs(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<RunOutput>>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let rows: Vec<RunOutput> =
            newest_first(&state, OUTPUT_COLS, "job_run_outputs", &run.id, cursor, limit + 1).await?;
        Ok(Json(pagination::page(rows, limit, |r| r.id.clone(), |r| r)))
    }

    /// Every key-value pair of the run's state store.
    #[oai(path = "/v1/runs/:run_id/state", method = "get")]
    async fn state(&self, state: Data<&AppState>, auth: Auth, run_id: Path<String>) -> ApiResult<Json<RunState>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let pairs = state_of(&state, &run.id).await?;
        Ok(Json(RunState { run_id: run.id, state: pairs }))
    }

    /// The run's checkpoints, newest first.
    #[oai(path = "/v1/runs/:run_id/checkpoints", method = "get")]
    async fn checkpoints(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Checkpoint>>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let rows: Vec<Checkpoint> =
            newest_first(&state, CHECKPOINT_COLS, "job_run_checkpoints", &run.id, cursor, limit + 1).await?;
        Ok(Json(pagination::page(rows, limit, |r| r.id.clone(), |r| r)))
    }

    /// The run's usage records, newest first, with the totals of all of them.
    #[oai(path = "/v1/runs/:run_id/usage", method = "get")]
    async fn usage(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<RunUsage>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let rows: Vec<UsageRecord> =
            newest_first(&state, USAGE_COLS, "job_run_usage", &run.id, cursor, limit + 1).await?;
        let totals = usage_totals(&state, &run.id).await?;
        let page = pagination::page(rows, limit, |r| r.id.clone(), |r| r);
        Ok(Json(RunUsage {
            run_id: run.id,
            totals,
            data: page.data,
            has_more: page.has_more,
            next_cursor: page.next_cursor,
        }))
    }

    /// The run's tool calls, newest first.
    #[oai(path = "/v1/runs/:run_id/tool-calls", method = "get")]
    async fn tool_calls(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<ToolCall>>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let rows: Vec<ToolCall> =
            newest_first(&state, TOOL_COLS, "job_run_tool_calls", &run.id, cursor, limit + 1).await?;
        Ok(Json(pagination::page(rows, limit, |r| r.id.clone(), |r| r)))
    }

    /// The run's history, oldest first: every status transition (`type:
    /// transition`, with its reason) and every finished dispatch attempt
    /// (`type: attempt`, with the target's answer and duration), in the
    /// order they happened. The cursor is a position in this history.
    #[oai(path = "/v1/runs/:run_id/events", method = "get")]
    async fn events(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<RunEvent>>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let limit = pagination::limit(limit.0)?;
        let offset = offset_cursor(cursor.0)?;
        let mut rows = events_page(&state, &run.id, offset, limit + 1).await?;
        let has_more = rows.len() as i64 > limit;
        rows.truncate(limit as usize);
        let next_cursor = has_more.then(|| (offset + limit).to_string());
        Ok(Json(Page { data: rows.into_iter().map(event_view).collect(), has_more, next_cursor }))
    }

    /// The run's log lines, oldest first; `level` keeps one level.
    #[oai(path = "/v1/runs/:run_id/logs", method = "get")]
    async fn logs(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        /// debug, info, warn or error.
        level: Query<Option<String>>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<LogLine>>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        if let Some(l) = &level.0 {
            if !super::sdk_runs::LOG_LEVELS.contains(&l.as_str()) {
                return Err(ApiError::invalid_field(
                    "query.level",
                    "must be debug, info, warn or error",
                    Some(l.clone().into()),
                ));
            }
        }
        let rows: Vec<LogLine> = sqlx::query_as(&format!(
            "SELECT {LOG_COLS} FROM job_run_logs WHERE run_id = $1 AND ($2::text IS NULL OR level = $2)
               AND ($3::text IS NULL OR id > $3) ORDER BY id LIMIT $4"
        ))
        .bind(&run.id)
        .bind(&level.0)
        .bind(cursor)
        .bind(limit + 1)
        .fetch_all(&state.pool)
        .await?;
        Ok(Json(pagination::page(rows, limit, |r| r.id.clone(), |r| r)))
    }

    /// One JSON document for debugging a run: the run, the job version it
    /// ran (without secrets), its history (transitions and attempts), its
    /// last logs, checkpoints, state, outputs, usage totals and tool calls.
    #[oai(path = "/v1/runs/:run_id/debug-bundle", method = "get")]
    async fn debug_bundle(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
    ) -> ApiResult<Json<DebugBundle>> {
        let run: Run = load_run(&state, &auth, &run_id).await?;
        let version: Option<(String, String, i32, String, sqlx::types::Json<JobSpec>)> =
            sqlx::query_as("SELECT id, job_id, version, name, spec FROM job_versions WHERE id = $1")
                .bind(&run.job_version_id)
                .fetch_optional(&state.pool)
                .await?;
        let job_version = version.map(|(id, job_id, version, name, spec)| {
            let mut spec = spec.0;
            spec.webhook_secret = None;
            BundleJobVersion {
                id,
                job_id,
                version,
                name,
                definition: serde_json::to_value(spec).unwrap_or(Value::Null),
            }
        });
        let secret_names: Vec<String> =
            sqlx::query_scalar("SELECT name FROM job_secrets WHERE job_id = $1 ORDER BY name")
                .bind(&run.job_id)
                .fetch_all(&state.pool)
                .await?;
        let total: i64 = sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM job_run_transitions WHERE run_id = $1) + (SELECT count(*) FROM job_run_attempts WHERE run_id = $1)",
        )
        .bind(&run.id)
        .fetch_one(&state.pool)
        .await?;
        let events = events_page(&state, &run.id, (total - 1000).max(0), 1000).await?;
        let mut logs: Vec<LogLine> = sqlx::query_as(&format!(
            "SELECT {LOG_COLS} FROM job_run_logs WHERE run_id = $1 ORDER BY id DESC LIMIT 200"
        ))
        .bind(&run.id)
        .fetch_all(&state.pool)
        .await?;
        logs.reverse();
        let checkpoints: Vec<Checkpoint> =
            newest_first(&state, CHECKPOINT_COLS, "job_run_checkpoints", &run.id, None, 20).await?;
        let outputs: Vec<RunOutput> = newest_first(&state, OUTPUT_COLS, "job_run_outputs", &run.id, None, 100).await?;
        let tool_calls: Vec<ToolCall> =
            newest_first(&state, TOOL_COLS, "job_run_tool_calls", &run.id, None, 100).await?;
        let pairs = state_of(&state, &run.id).await?;
        let usage_totals = usage_totals(&state, &run.id).await?;
        Ok(Json(DebugBundle {
            generated_at: Utc::now(),
            run: run_view(run),
            job_version,
            secret_names,
            events: events.into_iter().map(event_view).collect(),
            logs,
            checkpoints,
            state: pairs,
            outputs,
            usage_totals,
            tool_calls,
        }))
    }
}
