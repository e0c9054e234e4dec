//! Roles: named sets of scopes. System roles have no project and never
//! change; a custom role belongs to one project and may inherit one other
//! role (a system role or one of its project). Inheritance chains are
//! short (cycles are refused when a role is written); every walk of a chain
//! stops at [`MAX_DEPTH`] all the same.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::Tenant;

pub const MAX_DEPTH: i32 = 16;

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct RoleRow {
    pub id: String,
    /// `None` for a system role.
    pub project_id: Option<String>,
    pub name: String,
    pub description: Option<String>,
    pub permissions: Vec<String>,
    pub inherits: Option<String>,
    pub system: bool,
    pub created_by: Option<String>,
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLS: &str =
    "id, project_id, name, description, permissions, inherits, system, created_by, updated_by, created_at, updated_at";

/// The role, if it is a system role or `tenant` may see its project.
pub async fn get(pool: &PgPool, tenant: Tenant<'_>, id: &str) -> Result<Option<RoleRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLS} FROM roles WHERE id = $1 AND (project_id IS NULL OR $2::text IS NULL OR project_id = $2)"
    ))
    .bind(id)
    .bind(tenant.filter())
    .fetch_optional(pool)
    .await
}

/// The system roles and the project's roles, in id order, after `after`.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<RoleRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLS} FROM roles WHERE (project_id = $1 OR project_id IS NULL) AND ($2::text IS NULL OR id > $2)
         ORDER BY id LIMIT $3"
    ))
    .bind(project_id)
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// A custom role's content.
pub struct RoleFields<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub permissions: &'a [String],
    pub inherits: Option<&'a str>,
    pub actor: Option<&'a str>,
}

pub async fn create(
    conn: &mut PgConnection,
    id: &str,
    project_id: &str,
    f: &RoleFields<'_>,
) -> Result<RoleRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO roles (id, project_id, name, description, permissions, inherits, created_by, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING {COLS}"
    ))
    .bind(id)
    .bind(project_id)
    .bind(f.name)
    .bind(f.description)
    .bind(f.permissions)
    .bind(f.inherits)
    .bind(f.actor)
    .fetch_one(conn)
    .await
}

pub async fn update(conn: &mut PgConnection, id: &str, f: &RoleFields<'_>) -> Result<RoleRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE roles SET name = $2, description = $3, permissions = $4, inherits = $5, updated_by = $6
         WHERE id = $1 RETURNING {COLS}"
    ))
    .bind(id)
    .bind(f.name)
    .bind(f.description)
    .bind(f.permissions)
    .bind(f.inherits)
    .bind(f.actor)
    .fetch_one(conn)
    .await
}

/// How many members hold the role and how many roles inherit it.
pub async fn users(conn: &mut PgConnection, id: &str) -> Result<(i64, i64), sqlx::Error> {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM members WHERE role_id = $1), (SELECT count(*) FROM roles WHERE inherits = $1)",
    )
    .bind(id)
    .fetch_one(conn)
    .await
}

pub async fn delete(conn: &mut PgConnection, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM roles WHERE id = $1").bind(id).execute(conn).await.map(|_| ())
}

/// One role of an inheritance chain.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ChainLink {
    pub id: String,
    /// `None` for a system role.
    pub project_id: Option<String>,
    pub name: String,
    pub permissions: Vec<String>,
}

/// The role, then each role it inherits, nearest first; at most
/// `MAX_DEPTH + 1` roles, so a chain too long to write shows as such.
pub async fn chain(pool: &PgPool, id: &str) -> Result<Vec<ChainLink>, sqlx::Error> {
    sqlx::query_as(
        "WITH RECURSIVE chain (id, project_id, name, inherits, permissions, depth) AS (
            SELECT id, project_id, name, inherits, permissions, 0 FROM roles WHERE id = $1
            UNION ALL
            SELECT r.id, r.project_id, r.name, r.inherits, r.permissions, c.depth + 1
            FROM roles r JOIN chain c ON r.id = c.inherits
            WHERE c.depth < $2
         )
         SELECT id, project_id, name, permissions FROM chain ORDER BY depth",
    )
    .bind(id)
    .bind(MAX_DEPTH)
    .fetch_all(pool)
    .await
}

/// The union of the chain's permissions, nearest role first.
pub fn union(chain: &[ChainLink]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in chain.iter().flat_map(|l| &l.permissions) {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

/// The role's own permissions plus those it inherits.
pub async fn effective_permissions(pool: &PgPool, id: &str) -> Result<Vec<String>, sqlx::Error> {
    Ok(union(&chain(pool, id).await?))
}

/// A user's member role in the project, then the roles it inherits,
/// nearest first; empty when the user is not a member.
pub async fn membership_chain(pool: &PgPool, project_id: &str, user_id: &str) -> Result<Vec<ChainLink>, sqlx::Error> {
    sqlx::query_as(
        "WITH RECURSIVE chain (id, project_id, name, inherits, permissions, depth) AS (
            SELECT r.id, r.project_id, r.name, r.inherits, r.permissions, 0
            FROM members m JOIN roles r ON r.id = m.role_id
            WHERE m.project_id = $1 AND m.user_id = $2
            UNION ALL
            SELECT r.id, r.project_id, r.name, r.inherits, r.permissions, c.depth + 1
            FROM roles r JOIN chain c ON r.id = c.inherits
            WHERE c.depth < $3
         )
         SELECT id, project_id, name, permissions FROM chain ORDER BY depth",
    )
    .bind(project_id)
    .bind(user_id)
    .bind(MAX_DEPTH)
    .fetch_all(pool)
    .await
}
