//! API keys as stored: only the SHA-256 of a key, never the key. A key is
//! revoked or replaced (rotated), never deleted, so the audit trail's key
//! ids always name a row.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::Tenant;

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ApiKeyRow {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub created_by: Option<String>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub replaced_by_key_id: Option<String>,
    pub grace_expires_at: Option<DateTime<Utc>>,
}

const COLS: &str = "id, project_id, name, scopes, created_at, created_by, last_used_at, expires_at, revoked_at, \
    replaced_by_key_id, grace_expires_at";

/// What authentication needs of a key.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct KeyRecord {
    pub id: String,
    pub project_id: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub replaced_by_key_id: Option<String>,
    pub grace_expires_at: Option<DateTime<Utc>>,
}

impl ApiKeyRow {
    pub fn record(&self) -> KeyRecord {
        KeyRecord {
            id: self.id.clone(),
            project_id: self.project_id.clone(),
            scopes: self.scopes.clone(),
            expires_at: self.expires_at,
            revoked_at: self.revoked_at,
            replaced_by_key_id: self.replaced_by_key_id.clone(),
            grace_expires_at: self.grace_expires_at,
        }
    }
}

impl KeyRecord {
    /// Why the key is refused at `now`, if it is.
    pub fn refusal(&self, now: DateTime<Utc>) -> Option<&'static str> {
        if self.revoked_at.is_some() {
            return Some("the API key is revoked");
        }
        if self.expires_at.is_some_and(|t| t <= now) {
            return Some("the API key has expired");
        }
        if self.replaced_by_key_id.is_some() && self.grace_expires_at.is_none_or(|t| t <= now) {
            return Some("the API key was rotated and its grace period is over");
        }
        None
    }

    /// The scopes the key acts with: an empty list is full access.
    pub fn effective_scopes(&self) -> Vec<String> {
        if self.scopes.is_empty() {
            vec!["*".to_string()]
        } else {
            self.scopes.clone()
        }
    }
}

/// The key with this hash, whatever its state.
pub async fn by_hash(pool: &PgPool, hash: &str) -> Result<Option<KeyRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, project_id, scopes, expires_at, revoked_at, replaced_by_key_id, grace_expires_at
         FROM api_keys WHERE key_hash = $1",
    )
    .bind(hash)
    .fetch_optional(pool)
    .await
}

pub async fn touch_last_used(pool: &PgPool, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE api_keys SET last_used_at = now() WHERE id = $1").bind(id).execute(pool).await.map(|_| ())
}

/// The key, if `tenant` may see it.
pub async fn get(pool: &PgPool, tenant: Tenant<'_>, id: &str) -> Result<Option<ApiKeyRow>, sqlx::Error> {
    super::get_scoped(pool, "api_keys", COLS, tenant, id).await
}

/// The key under a row lock, for a change that must not race another.
pub async fn lock(conn: &mut PgConnection, id: &str) -> Result<ApiKeyRow, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {COLS} FROM api_keys WHERE id = $1 FOR UPDATE")).bind(id).fetch_one(conn).await
}

/// Whether the project has this key (a policy's principal).
pub async fn exists_in_project(pool: &PgPool, project_id: &str, id: &str) -> Result<bool, sqlx::Error> {
    Ok(get(pool, Tenant::Project(project_id), id).await?.is_some())
}

/// The project's keys, newest first, older than `before`.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<ApiKeyRow>, sqlx::Error> {
    super::page_of_project(pool, "api_keys", COLS, project_id, before, limit).await
}

/// A key to store.
pub struct NewKey<'a> {
    pub id: &'a str,
    pub project_id: &'a str,
    pub name: &'a str,
    pub hash: &'a str,
    pub scopes: &'a [String],
    pub actor: Option<&'a str>,
    pub expires_at: DateTime<Utc>,
}

pub async fn insert(conn: &mut PgConnection, k: &NewKey<'_>) -> Result<ApiKeyRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO api_keys (id, project_id, name, key_hash, scopes, created_by, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {COLS}"
    ))
    .bind(k.id)
    .bind(k.project_id)
    .bind(k.name)
    .bind(k.hash)
    .bind(k.scopes)
    .bind(k.actor)
    .bind(k.expires_at)
    .fetch_one(conn)
    .await
}

/// Revokes the key; false when it already was.
pub async fn revoke(conn: &mut PgConnection, id: &str) -> Result<bool, sqlx::Error> {
    let n = sqlx::query("UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL")
        .bind(id)
        .execute(conn)
        .await?
        .rows_affected();
    Ok(n > 0)
}

/// Marks the key replaced by `new_id`, valid until `grace_until`.
pub async fn mark_replaced(
    conn: &mut PgConnection,
    id: &str,
    new_id: &str,
    grace_until: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE api_keys SET replaced_by_key_id = $2, grace_expires_at = $3 WHERE id = $1")
        .bind(id)
        .bind(new_id)
        .bind(grace_until)
        .execute(conn)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> KeyRecord {
        KeyRecord {
            id: "key_1".into(),
            project_id: "p".into(),
            scopes: vec![],
            expires_at: None,
            revoked_at: None,
            replaced_by_key_id: None,
            grace_expires_at: None,
        }
    }

    #[test]
    fn refusals() {
        let now = Utc::now();
        let mut k = record();
        assert_eq!(k.refusal(now), None);
        assert_eq!(k.effective_scopes(), vec!["*"]);
        k.replaced_by_key_id = Some("key_2".into());
        k.grace_expires_at = Some(now + chrono::Duration::seconds(10));
        assert_eq!(k.refusal(now), None, "inside the grace period");
        k.grace_expires_at = Some(now);
        assert!(k.refusal(now).is_some(), "past the grace period");
        let mut k = record();
        k.expires_at = Some(now - chrono::Duration::seconds(1));
        assert!(k.refusal(now).is_some());
        let mut k = record();
        k.revoked_at = Some(now);
        assert!(k.refusal(now).is_some());
    }
}
