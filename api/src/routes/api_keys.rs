//! API keys: create, list, get, revoke, rotate, and the checks of their
//! bodies. A key is a project credential limited by scopes
//! (docs/access-control.md); its format is `auth::keys`.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::{json, Value};
use switchyard_shared::domain::{FieldError, FieldErrors};
use switchyard_shared::store::{self, api_keys::ApiKeyRow};

use super::{check_scopes, found, label_rule, project_of, tenant, view_from_row, Tag};
use crate::audit::{self, Change};
use crate::auth::{cache, keys, rbac, Auth};
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

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
    /// Scopes (the names operations give in `x-required-scope`); an unknown
    /// one is 400. Empty: full access.
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

/// The value rules of CreateApiKey and RotateApiKey (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{range, text};
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::Property;
    vec![
        (Property("CreateApiKey", "project_id"), text(&ID)),
        (Property("CreateApiKey", "name"), text(&super::LABEL)),
        (Property("RotateApiKey", "name"), text(&super::LABEL)),
        (Property("RotateApiKey", "grace_period_seconds"), range((0, MAX_GRACE_SECS))),
    ]
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

/// `active`, `rotating`, `rotated`, `expired` or `revoked` at `now`.
fn status(r: &ApiKeyRow, now: DateTime<Utc>) -> &'static str {
    if r.revoked_at.is_some() {
        "revoked"
    } else if r.expires_at.is_some_and(|t| t <= now) {
        "expired"
    } else if r.replaced_by_key_id.is_some() {
        if r.grace_expires_at.is_some_and(|t| t > now) {
            "rotating"
        } else {
            "rotated"
        }
    } else {
        "active"
    }
}

// The copied fields; `view` sets the rest.
view_from_row!(ApiKeyRow => ApiKey {
    id, project_id, name, scopes, created_at, created_by, last_used_at, expires_at, revoked_at, replaced_by_key_id,
    grace_expires_at
} + { key: None, status: String::new() });

/// The key as the api shows it; `raw` only in the create and rotate responses.
fn view(r: ApiKeyRow, raw: Option<String>) -> ApiKey {
    let status = status(&r, Utc::now()).into();
    ApiKey { key: raw, status, ..r.into() }
}

/// A new key's body, but for its scopes (an unknown scope is 400, not 422).
fn validate_create(b: &CreateApiKey) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    label_rule(&mut e, &b.name, &super::LABEL);
    e.finish()
}

/// When a new key expires: at the latest `days` from `now` (the default),
/// and not in the past.
fn validate_expiry(
    requested: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    days: i64,
) -> Result<DateTime<Utc>, Vec<FieldError>> {
    let latest = now + chrono::Duration::days(days);
    let Some(t) = requested else { return Ok(latest) };
    let mut e = FieldErrors::new();
    let value = Some(t.to_rfc3339().into());
    if t <= now {
        e.push("body.expires_at", "must be in the future", value);
    } else if t > latest {
        let message = format!("must be at most {days} days away (the project's max_key_lifetime_days)");
        e.push("body.expires_at", message, value);
    }
    e.finish().map(|()| t)
}

/// A rotation's name (the old key's unless given) and grace period.
fn validate_rotation(name: &str, grace_period_seconds: i64) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    label_rule(&mut e, name, &super::LABEL);
    e.in_range("body.grace_period_seconds", Some(grace_period_seconds), 0, MAX_GRACE_SECS);
    e.finish()
}

async fn max_lifetime_days(state: &AppState, project_id: &str) -> ApiResult<i64> {
    let days = store::projects::max_key_lifetime_days(&state.pool, project_id).await?;
    days.map(i64::from)
        .ok_or_else(|| ApiError::invalid_field("body.project_id", "no such project", Some(project_id.into())))
}

async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<ApiKeyRow> {
    found("API key", id, store::api_keys::get(&state.pool, tenant(&auth.0), id)).await
}

#[OpenApi(tag = "Tag::ApiKeys")]
impl ApiKeysApi {
    /// Create an API key. The response carries the raw key, once.
    #[oai(path = "/v1/api-keys", method = "post", operation_id = "createApiKey")]
    async fn create(&self, state: Data<&AppState>, auth: Auth, body: JsonBody<CreateApiKey>) -> ApiResult<CreatedKey> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        let wanted = check_scopes("body.scopes", &b.scopes)?;
        validate_create(&b)?;
        if !rbac::grantable(&auth.0, &wanted) {
            return Err(ApiError::forbidden("a key cannot be given scopes its creator does not hold"));
        }
        let days = max_lifetime_days(&state, &project_id).await?;
        let expires_at = validate_expiry(b.expires_at, Utc::now(), days)?;
        let (raw, hash) = keys::generate();
        let id = switchyard_shared::ids::new_id("key");
        let mut tx = state.pool.begin().await?;
        let new = store::api_keys::NewKey {
            id: &id,
            project_id: &project_id,
            name: b.name.trim(),
            hash: &hash,
            scopes: &wanted,
            actor: auth.0.actor_id.as_deref(),
            expires_at,
        };
        let row = store::api_keys::insert(&mut tx, &new).await?;
        let details = json!({"name": row.name, "scopes": row.scopes, "expires_at": expires_at});
        audit::record(&mut *tx, &auth.0, Change::new(&project_id, "api_key.created", ("api_key", &id), details))
            .await?;
        tx.commit().await?;
        Ok(CreatedKey::Created(Json(view(row, Some(raw)))))
    }

    /// List a project's API keys, newest first (raw keys are never listed).
    #[oai(path = "/v1/api-keys", method = "get", operation_id = "listApiKeys")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<ApiKey>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::api_keys::list(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), |r| view(r, None))))
    }

    /// Get an API key (without its raw value).
    #[oai(path = "/v1/api-keys/:key_id", method = "get", operation_id = "getApiKey")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, key_id: Path<String>) -> ApiResult<Json<ApiKey>> {
        Ok(Json(view(load(&state, &auth, &key_id).await?, None)))
    }

    /// Revoke an API key: every api process refuses it (401) from the next request on.
    /// 403 when the key holds a scope the caller could not grant (as rotate):
    /// a key manager cannot take away a stronger key.
    #[oai(path = "/v1/api-keys/:key_id", method = "delete", operation_id = "revokeApiKey")]
    async fn revoke(&self, state: Data<&AppState>, auth: Auth, key_id: Path<String>) -> ApiResult<Revoked> {
        let key = load(&state, &auth, &key_id).await?;
        if !rbac::grantable(&auth.0, &key.scopes) {
            return Err(ApiError::forbidden("a key cannot be revoked by a credential with fewer scopes"));
        }
        let mut tx = state.pool.begin().await?;
        if store::api_keys::revoke(&mut tx, &key.id).await? {
            let change =
                Change::new(&key.project_id, "api_key.revoked", ("api_key", &key.id), json!({"name": key.name}));
            audit::record(&mut *tx, &auth.0, change).await?;
        }
        tx.commit().await?;
        cache::bump_version(&state.queue).await;
        Ok(Revoked::NoContent)
    }

    /// Rotate an API key: a new key (same scopes, full lifetime) is returned
    /// with its raw value; the old key keeps working until grace_expires_at.
    /// 409 when the key is revoked, expired or already rotated.
    #[oai(path = "/v1/api-keys/:key_id/rotate", method = "post", operation_id = "rotateApiKey")]
    async fn rotate(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        key_id: Path<String>,
        body: JsonBody<RotateApiKey>,
    ) -> ApiResult<CreatedKey> {
        let old = load(&state, &auth, &key_id).await?;
        let b = body.0;
        let name = b.name.clone().unwrap_or_else(|| old.name.clone());
        let grace = b.grace_period_seconds.unwrap_or(0);
        validate_rotation(&name, grace)?;
        if !rbac::grantable(&auth.0, &old.scopes) {
            return Err(ApiError::forbidden("a key cannot be rotated by a credential with fewer scopes"));
        }
        let days = max_lifetime_days(&state, &old.project_id).await?;
        let now = Utc::now();
        let (raw, hash) = keys::generate();
        let id = switchyard_shared::ids::new_id("key");
        let mut tx = state.pool.begin().await?;
        // Re-read under the row lock: two rotations of one key cannot both win.
        let locked = store::api_keys::lock(&mut tx, &old.id).await?;
        if let Some(why) = locked.record().refusal(now) {
            return Err(ApiError::conflict(format!("cannot rotate: {why}")));
        }
        if locked.replaced_by_key_id.is_some() {
            return Err(ApiError::conflict("cannot rotate: the key was already rotated"));
        }
        let new = store::api_keys::NewKey {
            id: &id,
            project_id: &locked.project_id,
            name: name.trim(),
            hash: &hash,
            scopes: &locked.scopes,
            actor: auth.0.actor_id.as_deref(),
            expires_at: now + chrono::Duration::days(days),
        };
        let new = store::api_keys::insert(&mut tx, &new).await?;
        let mut grace_until = now + chrono::Duration::seconds(grace);
        if let Some(e) = locked.expires_at {
            grace_until = grace_until.min(e);
        }
        store::api_keys::mark_replaced(&mut tx, &locked.id, &id, grace_until).await?;
        let details = json!({"replaced_by_key_id": id, "grace_expires_at": grace_until});
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(&locked.project_id, "api_key.rotated", ("api_key", &locked.id), details),
        )
        .await?;
        tx.commit().await?;
        cache::bump_version(&state.queue).await;
        Ok(CreatedKey::Created(Json(view(new, Some(raw)))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_name_is_bounded() {
        let key = |name: &str| CreateApiKey { project_id: None, name: name.into(), scopes: vec![], expires_at: None };
        assert_eq!(validate_create(&key("ci")), Ok(()));
        let got = validate_create(&key("a\u{7}")).unwrap_err();
        assert_eq!(got[0].message, "must be 1 to 200 characters, no control characters");
    }

    #[test]
    fn a_key_expires_in_the_future_within_the_project_lifetime() {
        let now = Utc::now();
        let days = chrono::Duration::days;
        assert_eq!(validate_expiry(None, now, 90), Ok(now + days(90)));
        assert_eq!(validate_expiry(Some(now + days(90)), now, 90), Ok(now + days(90)));
        let past = validate_expiry(Some(now), now, 90).unwrap_err();
        assert_eq!(past, [FieldError::new("body.expires_at", "must be in the future", Some(now.to_rfc3339().into()))]);
        let far = validate_expiry(Some(now + days(91)), now, 90).unwrap_err();
        assert_eq!(far[0].message, "must be at most 90 days away (the project's max_key_lifetime_days)");
    }

    #[test]
    fn a_rotation_reports_its_name_and_grace_period() {
        assert_eq!(validate_rotation("ci", 0), Ok(()));
        assert_eq!(validate_rotation("ci", MAX_GRACE_SECS), Ok(()));
        let got = validate_rotation("", MAX_GRACE_SECS + 1).unwrap_err();
        assert_eq!(got[0].location, "body.name");
        let grace = FieldError::new(
            "body.grace_period_seconds",
            format!("must be between 0 and {MAX_GRACE_SECS}"),
            Some((MAX_GRACE_SECS + 1).into()),
        );
        assert_eq!(got[1], grace);
        assert_eq!(validate_rotation("ci", -1).unwrap_err().len(), 1);
    }
}
