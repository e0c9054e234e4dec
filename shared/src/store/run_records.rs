//! What a run reported and went through: its log lines, checkpoints,
//! outputs, usage records, tool calls and key-value state (written by the
//! target over the SDK), and its history (status transitions and finished
//! dispatch attempts), as the api reads and appends them.
//!
//! Records carry the attempt that wrote them. Lists of records page by id:
//! outputs, checkpoints, usage and tool calls newest first, logs oldest
//! first. The history pages by position, oldest first.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgPool;

use crate::ids::new_id;

/// A named structured output of a run.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Output {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    pub name: String,
    #[sqlx(json(nullable))]
    pub data: Option<Value>,
    pub created_at: DateTime<Utc>,
}

/// A snapshot a run saved to resume from.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Checkpoint {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    pub label: Option<String>,
    #[sqlx(json)]
    pub data: Value,
    pub created_at: DateTime<Utc>,
}

/// Resources one step of a run used.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Usage {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    pub cost_microusd: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub model: Option<String>,
    pub cpu_ms: i64,
    pub created_at: DateTime<Utc>,
}

/// Sums over every usage record of a run.
#[derive(Clone, Debug, Default, sqlx::FromRow)]
pub struct UsageTotals {
    pub records: i64,
    pub cost_microusd: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cpu_ms: i64,
}

/// A tool a run called.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ToolCall {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    pub name: String,
    #[sqlx(json(nullable))]
    pub input: Option<Value>,
    #[sqlx(json(nullable))]
    pub output: Option<Value>,
    pub duration_ms: Option<i64>,
    pub status: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// One log line a run sent.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct LogLine {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    pub level: String,
    pub message: String,
    #[sqlx(json)]
    pub fields: Value,
    /// When the target wrote it.
    pub timestamp: DateTime<Utc>,
    /// When it arrived.
    pub created_at: DateTime<Utc>,
}

/// One entry of a run's history: `kind` is `transition` (from, to,
/// reason) or `attempt` (outcome, the target's answer; `at` is when it
/// ended).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Event {
    pub kind: String,
    pub at: DateTime<Utc>,
    pub attempt: i32,
    pub from_status: Option<String>,
    pub to_status: Option<String>,
    pub reason: Option<String>,
    pub outcome: Option<String>,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub endpoint_url: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
}

/// The kinds of record a run's target appends, each capped per run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Logs,
    Outputs,
    Usage,
    ToolCalls,
}

impl Kind {
    fn table(self) -> &'static str {
        match self {
            Kind::Logs => "job_run_logs",
            Kind::Outputs => "job_run_outputs",
            Kind::Usage => "job_run_usage",
            Kind::ToolCalls => "job_run_tool_calls",
        }
    }
}

const OUTPUT_COLS: &str = "id, run_id, attempt, name, data, created_at";
const CHECKPOINT_COLS: &str = "id, run_id, attempt, label, data, created_at";
const USAGE_COLS: &str = "id, run_id, attempt, cost_microusd, tokens_in, tokens_out, model, cpu_ms, created_at";
const TOOL_COLS: &str = "id, run_id, attempt, name, input, output, duration_ms, status, created_at";
const LOG_COLS: &str = "id, run_id, attempt, level, message, fields, logged_at AS timestamp, created_at";

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

/// `limit` entries of the run's history from position `offset`, oldest first.
pub async fn events(pool: &PgPool, run_id: &str, offset: i64, limit: i64) -> Result<Vec<Event>, sqlx::Error> {
    sqlx::query_as(&format!("{EVENTS_SQL} OFFSET $2 LIMIT $3"))
        .bind(run_id)
        .bind(offset)
        .bind(limit)
        .fetch_all(pool)
        .await
}

/// How many entries the run's history holds.
pub async fn event_count(pool: &PgPool, run_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM job_run_transitions WHERE run_id = $1) + (SELECT count(*) FROM job_run_attempts WHERE run_id = $1)",
    )
    .bind(run_id)
    .fetch_one(pool)
    .await
}

/// How many records of `kind` the run has.
pub async fn count(pool: &PgPool, kind: Kind, run_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {} WHERE run_id = $1", kind.table()))
        .bind(run_id)
        .fetch_one(pool)
        .await
}

/// Newest first: `limit` rows of `table` of the run, older than `before`.
async fn newest_first<T>(
    pool: &PgPool,
    cols: &str,
    table: &str,
    run_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(&format!(
        "SELECT {cols} FROM {table} WHERE run_id = $1 AND ($2::text IS NULL OR id < $2) ORDER BY id DESC LIMIT $3"
    ))
    .bind(run_id)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The run's outputs, newest first, older than `before`.
pub async fn outputs(
    pool: &PgPool,
    run_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<Output>, sqlx::Error> {
    newest_first(pool, OUTPUT_COLS, "job_run_outputs", run_id, before, limit).await
}

/// The run's checkpoints, newest first, older than `before`.
pub async fn checkpoints(
    pool: &PgPool,
    run_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<Checkpoint>, sqlx::Error> {
    newest_first(pool, CHECKPOINT_COLS, "job_run_checkpoints", run_id, before, limit).await
}

/// The run's usage records, newest first, older than `before`.
pub async fn usage(pool: &PgPool, run_id: &str, before: Option<&str>, limit: i64) -> Result<Vec<Usage>, sqlx::Error> {
    newest_first(pool, USAGE_COLS, "job_run_usage", run_id, before, limit).await
}

/// The run's tool calls, newest first, older than `before`.
pub async fn tool_calls(
    pool: &PgPool,
    run_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<ToolCall>, sqlx::Error> {
    newest_first(pool, TOOL_COLS, "job_run_tool_calls", run_id, before, limit).await
}

/// Sums over every usage record of the run.
pub async fn usage_totals(pool: &PgPool, run_id: &str) -> Result<UsageTotals, sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*) AS records, least(COALESCE(sum(cost_microusd), 0), 9223372036854775807)::bigint AS cost_microusd,
                least(COALESCE(sum(tokens_in), 0), 9223372036854775807)::bigint AS tokens_in, least(COALESCE(sum(tokens_out), 0), 9223372036854775807)::bigint AS tokens_out,
                least(COALESCE(sum(cpu_ms), 0), 9223372036854775807)::bigint AS cpu_ms
         FROM job_run_usage WHERE run_id = $1",
    )
    .bind(run_id)
    .fetch_one(pool)
    .await
}

/// The run's log lines oldest first, after `after`, of one `level` if given.
pub async fn logs(
    pool: &PgPool,
    run_id: &str,
    level: Option<&str>,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<LogLine>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {LOG_COLS} FROM job_run_logs WHERE run_id = $1 AND ($2::text IS NULL OR level = $2)
           AND ($3::text IS NULL OR id > $3) ORDER BY id LIMIT $4"
    ))
    .bind(run_id)
    .bind(level)
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The run's last `n` log lines, oldest first.
pub async fn last_logs(pool: &PgPool, run_id: &str, n: i64) -> Result<Vec<LogLine>, sqlx::Error> {
    let mut lines: Vec<LogLine> =
        sqlx::query_as(&format!("SELECT {LOG_COLS} FROM job_run_logs WHERE run_id = $1 ORDER BY id DESC LIMIT $2"))
            .bind(run_id)
            .bind(n)
            .fetch_all(pool)
            .await?;
    lines.reverse();
    Ok(lines)
}

/// A log line to append.
#[derive(Clone, Debug)]
pub struct NewLogLine {
    pub level: String,
    pub message: String,
    pub fields: Value,
    pub logged_at: DateTime<Utc>,
}

/// Appends log lines of `attempt`, in one statement.
pub async fn append_logs(pool: &PgPool, run_id: &str, attempt: i32, lines: Vec<NewLogLine>) -> Result<(), sqlx::Error> {
    let n = lines.len();
    let mut ids = Vec::with_capacity(n);
    let mut levels = Vec::with_capacity(n);
    let mut messages = Vec::with_capacity(n);
    let mut fields = Vec::with_capacity(n);
    let mut stamps = Vec::with_capacity(n);
    for l in lines {
        ids.push(new_id("log"));
        levels.push(l.level);
        messages.push(l.message);
        fields.push(Json(l.fields));
        stamps.push(l.logged_at);
    }
    sqlx::query(
        "INSERT INTO job_run_logs (id, run_id, attempt, level, message, fields, logged_at)
         SELECT id, $1, $2, level, message, fields, logged_at
         FROM unnest($3::text[], $4::text[], $5::text[], $6::jsonb[], $7::timestamptz[])
            AS t(id, level, message, fields, logged_at)",
    )
    .bind(run_id)
    .bind(attempt)
    .bind(&ids)
    .bind(&levels)
    .bind(&messages)
    .bind(fields)
    .bind(&stamps)
    .execute(pool)
    .await?;
    Ok(())
}

/// Saves a checkpoint and drops all but the `keep` newest of the run's.
pub async fn save_checkpoint(
    pool: &PgPool,
    run_id: &str,
    attempt: i32,
    label: Option<String>,
    data: Value,
    keep: i64,
) -> Result<Checkpoint, sqlx::Error> {
    sqlx::query_as(
        "WITH ins AS (
            INSERT INTO job_run_checkpoints (id, run_id, attempt, label, data) VALUES ($1, $2, $3, $4, $5)
            RETURNING id, run_id, attempt, label, data, created_at
         ), prune AS (
            DELETE FROM job_run_checkpoints WHERE run_id = $2 AND id IN (
                SELECT id FROM job_run_checkpoints WHERE run_id = $2 ORDER BY id DESC OFFSET $6)
         )
         SELECT * FROM ins",
    )
    .bind(new_id("ckpt"))
    .bind(run_id)
    .bind(attempt)
    .bind(label)
    .bind(Json(data))
    .bind(keep - 1)
    .fetch_one(pool)
    .await
}

/// The run's newest checkpoint.
pub async fn latest_checkpoint(pool: &PgPool, run_id: &str) -> Result<Option<Checkpoint>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {CHECKPOINT_COLS} FROM job_run_checkpoints WHERE run_id = $1 ORDER BY id DESC LIMIT 1"
    ))
    .bind(run_id)
    .fetch_optional(pool)
    .await
}

/// Records a named output of `attempt`.
pub async fn add_output(
    pool: &PgPool,
    run_id: &str,
    attempt: i32,
    name: String,
    data: Option<Value>,
) -> Result<Output, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO job_run_outputs (id, run_id, attempt, name, data) VALUES ($1, $2, $3, $4, $5)
         RETURNING {OUTPUT_COLS}"
    ))
    .bind(new_id("out"))
    .bind(run_id)
    .bind(attempt)
    .bind(name)
    .bind(data.map(Json))
    .fetch_one(pool)
    .await
}

/// A usage record to add; absent amounts are 0.
#[derive(Clone, Debug, Default)]
pub struct NewUsage {
    pub cost_microusd: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub model: Option<String>,
    pub cpu_ms: i64,
}

/// Records resources a step of `attempt` used.
pub async fn add_usage(pool: &PgPool, run_id: &str, attempt: i32, u: NewUsage) -> Result<Usage, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO job_run_usage (id, run_id, attempt, cost_microusd, tokens_in, tokens_out, model, cpu_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         RETURNING {USAGE_COLS}"
    ))
    .bind(new_id("use"))
    .bind(run_id)
    .bind(attempt)
    .bind(u.cost_microusd)
    .bind(u.tokens_in)
    .bind(u.tokens_out)
    .bind(u.model)
    .bind(u.cpu_ms)
    .fetch_one(pool)
    .await
}

/// A tool call to record.
#[derive(Clone, Debug)]
pub struct NewToolCall {
    pub name: String,
    pub input: Option<Value>,
    pub output: Option<Value>,
    pub duration_ms: Option<i64>,
    pub status: Option<String>,
}

/// Records a tool call of `attempt`.
pub async fn add_tool_call(pool: &PgPool, run_id: &str, attempt: i32, t: NewToolCall) -> Result<ToolCall, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO job_run_tool_calls (id, run_id, attempt, name, input, output, duration_ms, status)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         RETURNING {TOOL_COLS}"
    ))
    .bind(new_id("tool"))
    .bind(run_id)
    .bind(attempt)
    .bind(t.name)
    .bind(t.input.map(Json))
    .bind(t.output.map(Json))
    .bind(t.duration_ms)
    .bind(t.status)
    .fetch_one(pool)
    .await
}

/// Every key-value pair of the run's state store, in key order.
pub async fn state(pool: &PgPool, run_id: &str) -> Result<BTreeMap<String, Value>, sqlx::Error> {
    let rows: Vec<(String, Json<Value>)> =
        sqlx::query_as("SELECT key, value FROM job_run_state WHERE run_id = $1 ORDER BY key")
            .bind(run_id)
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().map(|(k, v)| (k, v.0)).collect())
}

/// One key of the run's state store: its value and when it was set.
pub async fn state_get(pool: &PgPool, run_id: &str, key: &str) -> Result<Option<(Value, DateTime<Utc>)>, sqlx::Error> {
    let row: Option<(Json<Value>, DateTime<Utc>)> =
        sqlx::query_as("SELECT value, updated_at FROM job_run_state WHERE run_id = $1 AND key = $2")
            .bind(run_id)
            .bind(key)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(v, at)| (v.0, at)))
}

/// Sets one key of the run's state store. A new key is refused (`None`)
/// when the run already holds `max_keys`; an existing one is replaced.
pub async fn state_put(
    pool: &PgPool,
    run_id: &str,
    key: &str,
    value: Value,
    max_keys: i64,
) -> Result<Option<(Value, DateTime<Utc>)>, sqlx::Error> {
    let row: Option<(Json<Value>, DateTime<Utc>)> = sqlx::query_as(
        "INSERT INTO job_run_state (run_id, key, value)
         SELECT $1, $2, $3
         WHERE EXISTS (SELECT 1 FROM job_run_state WHERE run_id = $1 AND key = $2)
            OR (SELECT count(*) FROM job_run_state WHERE run_id = $1) < $4
         ON CONFLICT (run_id, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()
         RETURNING value, updated_at",
    )
    .bind(run_id)
    .bind(key)
    .bind(Json(value))
    .bind(max_keys)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(v, at)| (v.0, at)))
}

/// Bytes (as JSON text) the run's outputs hold together.
pub async fn output_bytes(pool: &PgPool, run_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT coalesce(sum(octet_length(data::text)), 0)::int8 FROM job_run_outputs WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(pool)
        .await
}

/// Bytes (as JSON text) the run's state holds under every key but `key`
/// (whose value a put replaces).
pub async fn state_bytes_besides(pool: &PgPool, run_id: &str, key: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT coalesce(sum(octet_length(value::text)), 0)::int8 FROM job_run_state WHERE run_id = $1 AND key <> $2",
    )
    .bind(run_id)
    .bind(key)
    .fetch_one(pool)
    .await
}

/// Removes one key of the run's state store; false when it was unset.
pub async fn state_delete(pool: &PgPool, run_id: &str, key: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM job_run_state WHERE run_id = $1 AND key = $2")
        .bind(run_id)
        .bind(key)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}
