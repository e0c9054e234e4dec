//! Environments: named deployment targets of a project (production,
//! staging...) that jobs name in their definition's `environment_id`.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::Tenant;

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct EnvironmentRow {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
}

const COLS: &str = "id, project_id, name, description, created_at";

/// The environment, if `tenant` may see it.
pub async fn get(pool: &PgPool, tenant: Tenant<'_>, id: &str) -> Result<Option<EnvironmentRow>, sqlx::Error> {
    super::get_scoped(pool, "environments", COLS, tenant, id).await
}

/// The project's environments, newest first, older than `before`.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<EnvironmentRow>, sqlx::Error> {
    super::page_of_project(pool, "environments", COLS, project_id, before, limit).await
}

/// Why an environment was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("an environment of that name exists in the project")]
    NameTaken,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

pub async fn create(
    pool: &PgPool,
    project_id: &str,
    name: &str,
    description: Option<&str>,
    actor: Option<&str>,
) -> Result<EnvironmentRow, CreateError> {
    sqlx::query_as(&format!(
        "INSERT INTO environments (id, project_id, name, description, created_by) VALUES ($1, $2, $3, $4, $5)
         RETURNING {COLS}"
    ))
    .bind(crate::ids::new_id("env"))
    .bind(project_id)
    .bind(name)
    .bind(description)
    .bind(actor)
    .fetch_one(pool)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(d) if d.constraint() == Some("environments_project_name_key") => CreateError::NameTaken,
        _ => CreateError::Db(e),
    })
}

/// What a delete did.
#[derive(Debug, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    /// Refused: this many live jobs name the environment.
    InUse(i64),
    /// Nothing to delete (gone meanwhile).
    Missing,
}

/// Deletes the environment unless a live job of its project names it.
/// Check and delete are one statement. Jobs name environments inside their
/// definition, without a foreign key, so a job saved at the same moment may
/// still name it; the environment is only a label to it.
pub async fn delete_unused(pool: &PgPool, project_id: &str, id: &str) -> Result<Deleted, sqlx::Error> {
    let (users, deleted): (i64, i64) = sqlx::query_as(
        "WITH users AS (
            SELECT count(*) AS n FROM jobs WHERE project_id = $2 AND deleted_at IS NULL AND spec->>'environment_id' = $1
         ), d AS (
            DELETE FROM environments WHERE id = $1 AND project_id = $2 AND (SELECT n FROM users) = 0 RETURNING id
         )
         SELECT (SELECT n FROM users), (SELECT count(*) FROM d)",
    )
    .bind(id)
    .bind(project_id)
    .fetch_one(pool)
    .await?;
    Ok(match (users, deleted) {
        (_, 1) => Deleted::Deleted,
        (n, _) if n > 0 => Deleted::InUse(n),
        _ => Deleted::Missing,
    })
}
