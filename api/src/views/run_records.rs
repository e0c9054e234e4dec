//! The records a run's target writes over the SDK, as both the SDK (which
//! answers with the record it made) and the run's read routes return them.

use chrono::{DateTime, Utc};
use poem_openapi::Object;
use serde_json::Value;
use switchyard_shared::store::run_records as rec;

use crate::routes::view_from_row;

/// A named structured output of a run.
#[derive(Object)]
pub struct RunOutput {
    pub id: String,
    pub run_id: String,
    /// The attempt that wrote it.
    pub attempt: i32,
    pub name: String,
    pub data: Option<Value>,
    pub created_at: DateTime<Utc>,
}

/// A snapshot a run saved to resume from; the latest is handed to the next
/// attempt as the dispatch body's `checkpoint`.
#[derive(Object)]
pub struct Checkpoint {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    #[oai(skip_serializing_if_is_none)]
    pub label: Option<String>,
    pub data: Value,
    pub created_at: DateTime<Utc>,
}

/// Resources one step of a run used.
#[derive(Object)]
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

/// A tool a run called (an AI agent's function call, an API request...).
#[derive(Object)]
pub struct ToolCall {
    pub id: String,
    pub run_id: String,
    pub attempt: i32,
    pub name: String,
    pub input: Option<Value>,
    pub output: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub duration_ms: Option<i64>,
    #[oai(skip_serializing_if_is_none)]
    pub status: Option<String>,
    pub created_at: DateTime<Utc>,
}

view_from_row!(rec::Output => RunOutput { id, run_id, attempt, name, data, created_at });
view_from_row!(rec::Checkpoint => Checkpoint { id, run_id, attempt, label, data, created_at });
view_from_row!(rec::Usage => UsageRecord { id, run_id, attempt, cost_microusd, tokens_in, tokens_out, model, cpu_ms, created_at });
view_from_row!(rec::ToolCall => ToolCall { id, run_id, attempt, name, input, output, duration_ms, status, created_at });
