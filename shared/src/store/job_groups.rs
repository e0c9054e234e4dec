//! Job groups: folders of jobs in a project, paused and resumed together.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::jobs::{JobRecord, JOB_COLUMNS};
use super::Tenant;
use crate::domain::JobSpec;
use crate::ids::GroupId;

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct JobGroupRow {
    pub id: GroupId,
    pub project_id: String,
    pub name: String,
    pub slug: String,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLS: &str = "id, project_id, name, slug, description, created_at, updated_at";

/// The group, if `tenant` may see it.
pub async fn get(pool: &PgPool, tenant: Tenant<'_>, id: &GroupId) -> Result<Option<JobGroupRow>, sqlx::Error> {
    super::get_scoped(pool, "job_groups", COLS, tenant, id).await
}

/// The project's groups, newest first, older than `before`.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<JobGroupRow>, sqlx::Error> {
    super::page_of_project(pool, "job_groups", COLS, project_id, before, limit).await
}

/// What a group is called and says of itself.
pub struct GroupFields<'a> {
    pub name: &'a str,
    pub slug: &'a str,
    pub description: Option<&'a str>,
}

pub async fn create(pool: &PgPool, project_id: &str, f: &GroupFields<'_>) -> Result<JobGroupRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO job_groups (id, project_id, name, slug, description) VALUES ($1, $2, $3, $4, $5) RETURNING {COLS}"
    ))
    .bind(crate::ids::group_id())
    .bind(project_id)
    .bind(f.name)
    .bind(f.slug)
    .bind(f.description)
    .fetch_one(pool)
    .await
}

pub async fn update(pool: &PgPool, id: &GroupId, f: &GroupFields<'_>) -> Result<JobGroupRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE job_groups SET name = $2, slug = $3, description = $4 WHERE id = $1 RETURNING {COLS}"
    ))
    .bind(id)
    .bind(f.name)
    .bind(f.slug)
    .bind(f.description)
    .fetch_one(pool)
    .await
}

/// Deletes the group; its jobs stay, outside any group.
pub async fn delete(pool: &PgPool, id: &GroupId) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM job_groups WHERE id = $1").bind(id).execute(pool).await.map(|_| ())
}

/// The live jobs of the group, newest first, older than `before`.
pub async fn jobs(
    pool: &PgPool,
    group_id: &GroupId,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<JobRecord>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE group_id = $1 AND deleted_at IS NULL AND ($2::text IS NULL OR id < $2)
         ORDER BY id DESC LIMIT $3"
    ))
    .bind(group_id)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// A job whose pause state a group operation changed.
#[derive(Debug, sqlx::FromRow)]
pub struct PausedJob {
    pub id: String,
    pub project_id: String,
    pub spec: sqlx::types::Json<JobSpec>,
    pub enabled: bool,
}

/// Sets `paused` on every live job of the group.
pub async fn set_paused(pool: &PgPool, group_id: &GroupId, paused: bool) -> Result<Vec<PausedJob>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE jobs SET paused = $2 WHERE group_id = $1 AND deleted_at IS NULL RETURNING id, project_id, spec, enabled",
    )
    .bind(group_id)
    .bind(paused)
    .fetch_all(pool)
    .await
}
