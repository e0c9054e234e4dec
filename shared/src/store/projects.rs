//! Projects: every other resource belongs to one. A project is never
//! deleted, so its id names it for good.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::Tenant;

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ProjectRow {
    pub id: String,
    pub name: String,
    pub default_region: String,
    pub plan_tier: String,
    pub max_key_lifetime_days: i32,
    /// Finished work older than this is pruned (store::retention).
    pub retention_days: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLS: &str = "id, name, default_region, plan_tier, max_key_lifetime_days, retention_days, created_at, updated_at";

/// Whether the project exists.
pub async fn exists(pool: &PgPool, id: &str) -> Result<bool, sqlx::Error> {
    let found: Option<String> =
        sqlx::query_scalar("SELECT id FROM projects WHERE id = $1").bind(id).fetch_optional(pool).await?;
    Ok(found.is_some())
}

/// The project, if `tenant` may see it (a confined caller sees only its own).
pub async fn get(pool: &PgPool, tenant: Tenant<'_>, id: &str) -> Result<Option<ProjectRow>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {COLS} FROM projects WHERE id = $1 AND ($2::text IS NULL OR id = $2)"))
        .bind(id)
        .bind(tenant.filter())
        .fetch_optional(pool)
        .await
}

/// The project's signing secret (migration 0026), if `tenant` may see the
/// project. Kept out of [`ProjectRow`] so no view of a project carries it
/// by accident.
pub async fn signing_secret(pool: &PgPool, tenant: Tenant<'_>, id: &str) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT signing_secret FROM projects WHERE id = $1 AND ($2::text IS NULL OR id = $2)")
        .bind(id)
        .bind(tenant.filter())
        .fetch_optional(pool)
        .await
}

pub async fn create(pool: &PgPool, id: &str, name: &str, actor: Option<&str>) -> Result<ProjectRow, sqlx::Error> {
    sqlx::query_as(&format!("INSERT INTO projects (id, name, created_by) VALUES ($1, $2, $3) RETURNING {COLS}"))
        .bind(id)
        .bind(name)
        .bind(actor)
        .fetch_one(pool)
        .await
}

/// Projects in id order, after `after`.
pub async fn list(pool: &PgPool, after: Option<&str>, limit: i64) -> Result<Vec<ProjectRow>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {COLS} FROM projects WHERE ($1::text IS NULL OR id > $1) ORDER BY id LIMIT $2"))
        .bind(after)
        .bind(limit)
        .fetch_all(pool)
        .await
}

/// A change of settings; `None` keeps the value.
#[derive(Default)]
pub struct SettingsChange {
    pub default_region: Option<String>,
    pub plan_tier: Option<String>,
    pub max_key_lifetime_days: Option<i32>,
    pub retention_days: Option<i32>,
}

pub async fn update_settings(pool: &PgPool, id: &str, c: SettingsChange) -> Result<Option<ProjectRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE projects SET default_region = COALESCE($2, default_region), plan_tier = COALESCE($3, plan_tier),
            max_key_lifetime_days = COALESCE($4, max_key_lifetime_days),
            retention_days = COALESCE($5, retention_days)
         WHERE id = $1 RETURNING {COLS}"
    ))
    .bind(id)
    .bind(c.default_region)
    .bind(c.plan_tier)
    .bind(c.max_key_lifetime_days)
    .bind(c.retention_days)
    .fetch_optional(pool)
    .await
}

/// The upper bound of an API key's lifetime in the project, if it exists.
pub async fn max_key_lifetime_days(pool: &PgPool, id: &str) -> Result<Option<i32>, sqlx::Error> {
    sqlx::query_scalar("SELECT max_key_lifetime_days FROM projects WHERE id = $1").bind(id).fetch_optional(pool).await
}
