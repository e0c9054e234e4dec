//! Members: external users (OIDC subjects) holding one role in a project.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct MemberRow {
    /// Orders the listing (the cursor).
    pub id: String,
    pub project_id: String,
    pub user_id: String,
    pub role_id: String,
    pub created_by: Option<String>,
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLS: &str = "id, project_id, user_id, role_id, created_by, updated_by, created_at, updated_at";

/// The user's role in the project, if a member.
pub async fn role_of(pool: &PgPool, project_id: &str, user_id: &str) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT role_id FROM members WHERE project_id = $1 AND user_id = $2")
        .bind(project_id)
        .bind(user_id)
        .fetch_optional(pool)
        .await
}

/// [`role_of`] under a row lock, for an assignment that must not race another.
pub async fn lock_role_of(
    conn: &mut PgConnection,
    project_id: &str,
    user_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT role_id FROM members WHERE project_id = $1 AND user_id = $2 FOR UPDATE")
        .bind(project_id)
        .bind(user_id)
        .fetch_optional(conn)
        .await
}

/// Gives the user the role in the project (a member's role is replaced).
pub async fn upsert(
    conn: &mut PgConnection,
    project_id: &str,
    user_id: &str,
    role_id: &str,
    actor: Option<&str>,
) -> Result<MemberRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO members (id, project_id, user_id, role_id, created_by, updated_by) VALUES ($1, $2, $3, $4, $5, $5)
         ON CONFLICT (project_id, user_id) DO UPDATE SET role_id = EXCLUDED.role_id, updated_by = EXCLUDED.updated_by
         RETURNING {COLS}"
    ))
    .bind(crate::ids::new_id("mem"))
    .bind(project_id)
    .bind(user_id)
    .bind(role_id)
    .bind(actor)
    .fetch_one(conn)
    .await
}

/// The project's members in id order (oldest first), after `after`;
/// `role_id` narrows to one role.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    role_id: Option<&str>,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<MemberRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLS} FROM members WHERE project_id = $1 AND ($2::text IS NULL OR role_id = $2)
           AND ($3::text IS NULL OR id > $3) ORDER BY id LIMIT $4"
    ))
    .bind(project_id)
    .bind(role_id)
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Removes the member; false when the user was not one.
pub async fn delete(conn: &mut PgConnection, project_id: &str, user_id: &str) -> Result<bool, sqlx::Error> {
    let n = sqlx::query("DELETE FROM members WHERE project_id = $1 AND user_id = $2")
        .bind(project_id)
        .bind(user_id)
        .execute(conn)
        .await?
        .rows_affected();
    Ok(n > 0)
}
