//! API keys (SPEC §4.7, §5.1): create, list, get, revoke, rotate.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::json;

use super::{check_id, project_of, visible, Tag};
use crate::audit::{self, Change};
use crate::auth::{cache, keys, rbac, scopes, Auth};
use crate::error::{ApiError, ApiResult, ErrorDetail};
use crate::pagination::{self, Page};
use crate::state::AppState;

pub struct ApiKeysApi;

/// An API key. The raw key is only ever in the create and rotate responses.
#[derive(Object)]
pub struct ApiKey {
    pub id: String,
    pub project_id: String,
    pub name: String,
    /// Empty: full access.
    pub scopes: Vec<String>,
    /// The raw key (`svc_...`): returned once, in this response only. Store it now.
    #[oai(skip_serializing_if_is_none)]
    pub key: Option<String>,
    /// `active`, `rotating` (replaced, inside its grace period), `rotated`
    /// (replaced, grace over), `expired` or `revoked`.
    pub status: String,
    pub created_at: DateTime<Utc>,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    /// Kept current to within a minute.
    #[oai(skip_serializing_if_is_none)]
    pub last_used_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub expires_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub revoked_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub replaced_by_key_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub grace_expires_at: Option<DateTime<Utc>>,
}

/// Create a key.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateApiKey {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    pub name: String,
    /// Scopes of SPEC §5.2; an unknown one is 400. Empty: full access.
    /// Nobody creates a key with scopes they do not hold themselves (403).
    pub scopes: Vec<String>,
    /// Default and upper bound: now plus the project's max_key_lifetime_days.
    pub expires_at: Option<DateTime<Utc>>,
}

/// Rotate a key: a new key with the same scopes; the old one stays valid
/// for the grace period.
#[derive(Object, Default)]
#[oai(deny_unknown_fields)]
pub struct RotateApiKey {
    /// The new key's name; default the old key's.
    pub name: Option<String>,
    /// 0 (default: the old key stops at once) to 2592000 (30 days).
    pub grace_period_seconds: Option<i64>,
}

#[derive(ApiResponse)]
pub enum CreatedKey {
    /// The key, with its raw value.
    #[oai(status = 201)]
    Created(Json<ApiKey>),
}

#[derive(ApiResponse)]
pub enum Revoked {
    /// Revoked: requests with it are refused (401) from now on.
    #[oai(status = 204)]
    NoContent,
}

pub const MAX_GRACE_SECS: i64 = 30 * 86_400;

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    project_id: String,
    name: String,
    scopes: Vec<String>,
    created_at: DateTime<Utc>,
    created_by: Option<String>,
    last_used_at: Option<DateTime<Utc>>,
    expires_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    replaced_by_key_id: Option<String>,
    grace_expires_at: Option<DateTime<Utc>>,
}

const COLS: &str = "id, project_id, name, scopes, created_at, created_by, last_used_at, expires_at, revoked_at, \
    replaced_by_key_id, grace_expires_at";

impl Row {
    fn record(&self) -> keys::KeyRecord {
        keys::KeyRecord {
            id: self.id.clone(),
            project_id: self.project_id.clone(),
            scopes: self.scopes.clone(),
            expires_at: self.expires_at,
            revoked_at: self.revoked_at,
            replaced_by_key_id: self.replaced_by_key_id.clone(),
            grace_expires_at: self.grace_expires_at,
        }
    }

    fn view(self, raw: Option<String>) -> ApiKey {
        let now = Utc::now();
        let status = if self.revoked_at.is_some() {
            "revoked"
        } else if self.expires_at.is_some_and(|t| t <= now) {
            "expired"
        } else if self.replaced_by_key_id.is_some() {
            if self.grace_expires_at.is_some_and(|t| t > now) {
                "rotating"
            } else {
                "rotated"
            }
        } else {
            "active"
        };
        ApiKey {
            id: self.id,
            project_id: self.project_id,
            name: self.name,
            scopes: self.scopes,
            key: raw,
            status: status.into(),
            created_at: self.created_at,
            created_by: self.created_by,
            last_used_at: self.last_used_at,
            expires_at: self.expires_at,
            revoked_at: self.revoked_at,
            replaced_by_key_id: self.replaced_by_key_id,
            grace_expires_at: self.grace_expires_at,
        }
    }
}

fn check_name(name: &str, errors: &mut Vec<ErrorDetail>) {
    if name.trim().is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        errors.push(ErrorDetail {
            location: "body.name".into(),
            message: "must be 1 to 200 characters, no control characters".into(),
            value: Some(name.into()),
        });
    }
}

/// 400 for an unknown scope (SPEC §5.1); duplicates are dropped.
pub fn check_scopes(field: &str, list: &[String]) -> ApiResult<Vec<String>> {
    let unknown: Vec<&String> = list.iter().filter(|s| !scopes::is_scope(s)).collect();
    if !unknown.is_empty() {
        let known = scopes::SCOPES.join(", ");
        let errors = list
            .iter()
            .enumerate()
            .filter(|(_, s)| !scopes::is_scope(s))
            .map(|(i, s)| {
                switchyard_shared::domain::FieldError::new(
                    format!("{field}[{i}]"),
                    format!("unknown scope; known: {known}"),
                    Some(s.as_str().into()),
                )
            })
            .collect();
        return Err(ApiError::bad_request_at(
            format!("{field}: unknown scope(s) {unknown:?}; known scopes: {known}"),
            errors,
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for s in list {
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    Ok(out)
}

async fn max_lifetime_days(state: &AppState, project_id: &str) -> ApiResult<i64> {
    let days: Option<(i32,)> = sqlx::query_as("SELECT max_key_lifetime_days FROM projects WHERE id = $1")
        .bind(project_id)
        .fetch_optional(&state.pool)
        .await?;
    days.map(|(d,)| i64::from(d))
        .ok_or_else(|| ApiError::invalid_field("body.project_id", "no such project", Some(project_id.into())))
}

async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Row> {
    check_id("API key", id)?;
    let row: Option<Row> = sqlx::query_as(&format!("SELECT {COLS} FROM api_keys WHERE id = $1"))
        .bind(id)
        .fetch_optional(&state.pool)
        .await?;
    match row {
        Some(r) if visible(&auth.0, &r.project_id) => Ok(r),
        _ => Err(ApiError::not_found("API key", id)),
    }
}

#[OpenApi(tag = "Tag::ApiKeys")]
impl ApiKeysApi {
    /// Create an API key. The response carries the raw key, once.
    #[oai(path = "/v1/api-keys", method = "post")]
    async fn create(&self, state: Data<&AppState>, auth: Auth, body: Json<CreateApiKey>) -> ApiResult<CreatedKey> {
        let b = body.0;
        let project_id = project_of(&auth.0, b.project_id.as_deref())?;
        let wanted = check_scopes("body.scopes", &b.scopes)?;
        let mut errors = Vec::new();
        check_name(&b.name, &mut errors);
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        if !rbac::grantable(&auth.0, &wanted) {
            return Err(ApiError::forbidden("a key cannot be given scopes its creator does not hold"));
        }
        let days = max_lifetime_days(&state, &project_id).await?;
        let now = Utc::now();
        let latest = now + chrono::Duration::days(days);
        let expires_at = match b.expires_at {
            None => latest,
            Some(t) if t <= now => {
                return Err(ApiError::invalid_field(
                    "body.expires_at",
                    "must be in the future",
                    Some(t.to_rfc3339().into()),
                ))
            }
            Some(t) if t > latest => {
                return Err(ApiError::invalid_field(
                    "body.expires_at",
                    format!("must be at most {days} days away (the project's max_key_lifetime_days)"),
                    Some(t.to_rfc3339().into()),
                ))
            }
            Some(t) => t,
        };
        let (raw, hash) = keys::generate();
        let id = switchyard_shared::ids::new_id("key");
        let mut tx = state.pool.begin().await?;
        let row: Row = sqlx::query_as(&format!(
            "INSERT INTO api_keys (id, project_id, name, key_hash, scopes, created_by, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {COLS}"
        ))
        .bind(&id)
        .bind(&project_id)
        .bind(b.name.trim())
        .bind(&hash)
        .bind(&wanted)
        .bind(auth.0.actor())
        .bind(expires_at)
        .fetch_one(&mut *tx)
        .await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change {
                project_id: &project_id,
                action: "api_key.created",
                resource_type: "api_key",
                resource_id: &id,
                details: json!({"name": row.name, "scopes": row.scopes, "expires_at": expires_at}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(CreatedKey::Created(Json(row.view(Some(raw)))))
    }

    /// List a project's API keys, newest first (raw keys are never listed).
    #[oai(path = "/v1/api-keys", method = "get")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<ApiKey>>> {
        let project_id = project_of(&auth.0, project_id.0.as_deref())?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "SELECT {COLS} FROM api_keys WHERE project_id = $1 AND ($2::text IS NULL OR id < $2) ORDER BY id DESC LIMIT $3"
        ))
        .bind(&project_id)
        .bind(cursor)
        .bind(limit + 1)
        .fetch_all(&state.pool)
        .await?;
        Ok(Json(pagination::page(rows, limit, |r| r.id.clone(), |r| r.view(None))))
    }

    /// Get an API key (without its raw value).
    #[oai(path = "/v1/api-keys/:key_id", method = "get")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, key_id: Path<String>) -> ApiResult<Json<ApiKey>> {
        Ok(Json(load(&state, &auth, &key_id).await?.view(None)))
    }

    /// Revoke an API key: every api process refuses it (401) from the next request on.
    #[oai(path = "/v1/api-keys/:key_id", method = "delete")]
    async fn revoke(&self, state: Data<&AppState>, auth: Auth, key_id: Path<String>) -> ApiResult<Revoked> {
        let key = load(&state, &auth, &key_id).await?;
        let mut tx = state.pool.begin().await?;
        let changed = sqlx::query("UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL")
            .bind(&key.id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if changed > 0 {
            audit::record(
                &mut *tx,
                &auth.0,
                Change {
                    project_id: &key.project_id,
                    action: "api_key.revoked",
                    resource_type: "api_key",
                    resource_id: &key.id,
                    details: json!({"name": key.name}),
                },
            )
            .await?;
        }
        tx.commit().await?;
        cache::bump_version(&state.queue).await;
        Ok(Revoked::NoContent)
    }

    /// Rotate an API key: a new key (same scopes, full lifetime) is returned
    /// with its raw value; the old key keeps working until grace_expires_at.
    /// 409 when the key is revoked, expired or already rotated.
    #[oai(path = "/v1/api-keys/:key_id/rotate", method = "post")]
    async fn rotate(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        key_id: Path<String>,
        body: Json<RotateApiKey>,
    ) -> ApiResult<CreatedKey> {
        let old = load(&state, &auth, &key_id).await?;
        let b = body.0;
        let mut errors = Vec::new();
        let name = b.name.clone().unwrap_or_else(|| old.name.clone());
        check_name(&name, &mut errors);
        let grace = b.grace_period_seconds.unwrap_or(0);
        if !(0..=MAX_GRACE_SECS).contains(&grace) {
            errors.push(ErrorDetail {
                location: "body.grace_period_seconds".into(),
                message: format!("must be between 0 and {MAX_GRACE_SECS}"),
                value: Some(grace.into()),
            });
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        if !rbac::grantable(&auth.0, &old.scopes) {
            return Err(ApiError::forbidden("a key cannot be rotated by a credential with fewer scopes"));
        }
        let days = max_lifetime_days(&state, &old.project_id).await?;
        let now = Utc::now();
        let (raw, hash) = keys::generate();
        let id = switchyard_shared::ids::new_id("key");
        let mut tx = state.pool.begin().await?;
        // Re-read under the row lock: two rotations of one key cannot both win.
        let locked: Row = sqlx::query_as(&format!("SELECT {COLS} FROM api_keys WHERE id = $1 FOR UPDATE"))
            .bind(&old.id)
            .fetch_one(&mut *tx)
            .await?;
        if let Some(why) = locked.record().refusal(now) {
            return Err(ApiError::conflict(format!("cannot rotate: {why}")));
        }
        if locked.replaced_by_key_id.is_some() {
            return Err(ApiError::conflict("cannot rotate: the key was already rotated"));
        }
        let new: Row = sqlx::query_as(&format!(
            "INSERT INTO api_keys (id, project_id, name, key_hash, scopes, created_by, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {COLS}"
        ))
        .bind(&id)
        .bind(&locked.project_id)
        .bind(name.trim())
        .bind(&hash)
        .bind(&locked.scopes)
        .bind(auth.0.actor())
        .bind(now + chrono::Duration::days(days))
        .fetch_one(&mut *tx)
        .await?;
        let mut grace_until = now + chrono::Duration::seconds(grace);
        if let Some(e) = locked.expires_at {
            grace_until = grace_until.min(e);
        }
        sqlx::query("UPDATE api_keys SET replaced_by_key_id = $2, grace_expires_at = $3 WHERE id = $1")
            .bind(&locked.id)
            .bind(&id)
            .bind(grace_until)
            .execute(&mut *tx)
            .await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change {
                project_id: &locked.project_id,
                action: "api_key.rotated",
                resource_type: "api_key",
                resource_id: &locked.id,
                details: json!({"replaced_by_key_id": id, "grace_expires_at": grace_until}),
            },
        )
        .await?;
        tx.commit().await?;
        cache::bump_version(&state.queue).await;
        Ok(CreatedKey::Created(Json(new.view(Some(raw)))))
    }
}
