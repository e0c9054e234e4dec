//! GET /v1/audit-events (SPEC §4.7, DECISIONS §6).

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::Query;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;

use super::{project_of, Tag};
use crate::auth::Auth;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{self, Page};
use crate::state::AppState;

pub struct AuditApi;

/// One recorded mutation.
#[derive(Object, sqlx::FromRow)]
pub struct AuditEvent {
    pub id: String,
    pub project_id: String,
    /// `apikey:<key_id>`, a user id, `run:<run_id>`, or absent for the bare internal secret.
    #[oai(skip_serializing_if_is_none)]
    pub actor_id: Option<String>,
    /// `user`, `api_key`, `service` or `run`.
    pub actor_type: String,
    /// `<resource>.<verb>`, e.g. `job.created`, `api_key.revoked`, `member.assigned`.
    pub action: String,
    pub resource_type: String,
    #[oai(skip_serializing_if_is_none)]
    pub resource_id: Option<String>,
    /// The request's X-Request-Id.
    #[oai(skip_serializing_if_is_none)]
    pub request_id: Option<String>,
    /// What changed; never a secret.
    pub details: Value,
    pub created_at: DateTime<Utc>,
}

const COLS: &str =
    "id, project_id, actor_id, actor_type, action, resource_type, resource_id, request_id, details, created_at";

fn time(field: &str, raw: Option<String>) -> ApiResult<Option<DateTime<Utc>>> {
    raw.map(|s| {
        DateTime::parse_from_rfc3339(&s).map(|t| t.with_timezone(&Utc)).map_err(|_| {
            ApiError::invalid_field(
                &format!("query.{field}"),
                "an RFC 3339 date-time, e.g. 2025-01-31T12:00:00Z",
                Some(s.into()),
            )
        })
    })
    .transpose()
}

#[OpenApi(tag = "Tag::Audit")]
impl AuditApi {
    /// The project's audit events in `[from, to)`, newest first unless
    /// `order=asc`; `action`, `resource_type`, `resource_id` and `actor_id`
    /// narrow the list.
    #[oai(path = "/v1/audit-events", method = "get")]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        /// Earliest created_at (inclusive), RFC 3339.
        from: Query<Option<String>>,
        /// Latest created_at (exclusive), RFC 3339.
        to: Query<Option<String>>,
        /// `desc` (default) or `asc`.
        order: Query<Option<String>>,
        action: Query<Option<String>>,
        resource_type: Query<Option<String>>,
        resource_id: Query<Option<String>>,
        actor_id: Query<Option<String>>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<AuditEvent>>> {
        let project_id = project_of(&auth.0, project_id.0.as_deref())?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let from = time("from", from.0)?;
        let to = time("to", to.0)?;
        let asc = match order.0.as_deref() {
            None | Some("desc") => false,
            Some("asc") => true,
            Some(o) => return Err(ApiError::invalid_field("query.order", "asc or desc", Some(o.into()))),
        };
        let (cmp, dir) = if asc { (">", "ASC") } else { ("<", "DESC") };
        let rows: Vec<AuditEvent> = sqlx::query_as(&format!(
            "SELECT {COLS} FROM audit_events WHERE project_id = $1
               AND ($2::timestamptz IS NULL OR created_at >= $2) AND ($3::timestamptz IS NULL OR created_at < $3)
               AND ($4::text IS NULL OR action = $4) AND ($5::text IS NULL OR resource_type = $5)
               AND ($6::text IS NULL OR resource_id = $6) AND ($7::text IS NULL OR actor_id = $7)
               AND ($8::text IS NULL OR id {cmp} $8)
             ORDER BY id {dir} LIMIT $9"
        ))
        .bind(&project_id)
        .bind(from)
        .bind(to)
        .bind(&action.0)
        .bind(&resource_type.0)
        .bind(&resource_id.0)
        .bind(&actor_id.0)
        .bind(cursor)
        .bind(limit + 1)
        .fetch_all(&state.pool)
        .await?;
        Ok(Json(pagination::page(rows, limit, |e| e.id.clone(), |e| e)))
    }
}
