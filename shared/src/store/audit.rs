//! The audit trail: one row per mutation, written in the mutation's own
//! transaction where it has one, so the trail never misses a committed
//! change. Rows are only ever added.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct AuditRow {
    pub id: String,
    pub project_id: String,
    pub actor_id: Option<String>,
    pub actor_type: String,
    pub action: String,
    pub resource_type: String,
    pub resource_id: Option<String>,
    pub request_id: Option<String>,
    pub details: Value,
    pub created_at: DateTime<Utc>,
}

const COLS: &str =
    "id, project_id, actor_id, actor_type, action, resource_type, resource_id, request_id, details, created_at";

/// One event to record.
pub struct NewEvent<'a> {
    pub project_id: &'a str,
    pub actor_id: Option<&'a str>,
    pub actor_type: &'a str,
    pub action: &'a str,
    pub resource_type: &'a str,
    pub resource_id: &'a str,
    pub request_id: Option<&'a str>,
    pub details: Value,
}

pub async fn insert<'e, E: sqlx::PgExecutor<'e>>(ex: E, e: NewEvent<'_>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO audit_events (id, project_id, actor_id, actor_type, action, resource_type, resource_id, request_id, details)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(crate::ids::new_id("aud"))
    .bind(e.project_id)
    .bind(e.actor_id)
    .bind(e.actor_type)
    .bind(e.action)
    .bind(e.resource_type)
    .bind(e.resource_id)
    .bind(e.request_id)
    .bind(sqlx::types::Json(e.details))
    .execute(ex)
    .await?;
    Ok(())
}

/// Which of a project's events to list; `None` does not narrow.
#[derive(Default)]
pub struct Filter<'a> {
    /// Earliest created_at (inclusive).
    pub from: Option<DateTime<Utc>>,
    /// Latest created_at (exclusive).
    pub to: Option<DateTime<Utc>>,
    pub action: Option<&'a str>,
    pub resource_type: Option<&'a str>,
    pub resource_id: Option<&'a str>,
    pub actor_id: Option<&'a str>,
    /// Oldest first (else newest first).
    pub ascending: bool,
    /// The last id of the previous page.
    pub cursor: Option<&'a str>,
}

pub async fn list(pool: &PgPool, project_id: &str, f: &Filter<'_>, limit: i64) -> Result<Vec<AuditRow>, sqlx::Error> {
    let (cmp, dir) = if f.ascending { (">", "ASC") } else { ("<", "DESC") };
    sqlx::query_as(&format!(
        "SELECT {COLS} FROM audit_events WHERE project_id = $1
           AND ($2::timestamptz IS NULL OR created_at >= $2) AND ($3::timestamptz IS NULL OR created_at < $3)
           AND ($4::text IS NULL OR action = $4) AND ($5::text IS NULL OR resource_type = $5)
           AND ($6::text IS NULL OR resource_id = $6) AND ($7::text IS NULL OR actor_id = $7)
           AND ($8::text IS NULL OR id {cmp} $8)
         ORDER BY id {dir} LIMIT $9"
    ))
    .bind(project_id)
    .bind(f.from)
    .bind(f.to)
    .bind(f.action)
    .bind(f.resource_type)
    .bind(f.resource_id)
    .bind(f.actor_id)
    .bind(f.cursor)
    .bind(limit)
    .fetch_all(pool)
    .await
}
