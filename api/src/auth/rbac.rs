//! Roles and members (SPEC §5.3, §5.5): a user's permissions in a project
//! are the permissions of its member role and of every role that role
//! inherits. Inheritance chains are short (cycles are refused when a role is
//! written); resolution stops at [`MAX_DEPTH`] all the same.

use sqlx::PgPool;

use super::scopes;
use super::Principal;

pub const MAX_DEPTH: i32 = 16;

/// The system roles' ids (also their names); they cannot change.
pub const SYSTEM_ROLES: &[&str] = &["admin", "operator", "viewer", "triggerer"];

/// A user's standing in one project.
#[derive(Clone, Debug)]
pub struct Membership {
    /// The member's role, then the roles it inherits, nearest first.
    pub roles: Vec<String>,
    /// The union of their permissions.
    pub permissions: Vec<String>,
}

/// The user's membership in the project, if any.
pub async fn membership(pool: &PgPool, project_id: &str, user_id: &str) -> Result<Option<Membership>, sqlx::Error> {
    let rows: Vec<(String, Vec<String>)> = sqlx::query_as(
        "WITH RECURSIVE chain (id, inherits, permissions, depth) AS (
            SELECT r.id, r.inherits, r.permissions, 0 FROM members m JOIN roles r ON r.id = m.role_id
            WHERE m.project_id = $1 AND m.user_id = $2
            UNION ALL
            SELECT r.id, r.inherits, r.permissions, c.depth + 1 FROM roles r JOIN chain c ON r.id = c.inherits
            WHERE c.depth < $3
         )
         SELECT id, permissions FROM chain ORDER BY depth",
    )
    .bind(project_id)
    .bind(user_id)
    .bind(MAX_DEPTH)
    .fetch_all(pool)
    .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut permissions: Vec<String> = Vec::new();
    let mut roles = Vec::new();
    for (id, perms) in rows {
        roles.push(id);
        for p in perms {
            if !permissions.contains(&p) {
                permissions.push(p);
            }
        }
    }
    Ok(Some(Membership { roles, permissions }))
}

/// The role's own permissions plus those it inherits.
pub async fn effective_permissions(pool: &PgPool, role_id: &str) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(Vec<String>,)> = sqlx::query_as(
        "WITH RECURSIVE chain (id, inherits, permissions, depth) AS (
            SELECT id, inherits, permissions, 0 FROM roles WHERE id = $1
            UNION ALL
            SELECT r.id, r.inherits, r.permissions, c.depth + 1 FROM roles r JOIN chain c ON r.id = c.inherits
            WHERE c.depth < $2
         )
         SELECT permissions FROM chain",
    )
    .bind(role_id)
    .bind(MAX_DEPTH)
    .fetch_all(pool)
    .await?;
    let mut out: Vec<String> = Vec::new();
    for (perms,) in rows {
        for p in perms {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// Whether the caller may hand out `wanted` (to a key, a role or a member):
/// nobody grants more than they hold, so a key that manages keys cannot
/// mint a broader one. An empty `wanted` means full access.
pub fn grantable(p: &Principal, wanted: &[String]) -> bool {
    let Some(held) = &p.scopes else { return true };
    if wanted.is_empty() {
        return scopes::covers(held, "*");
    }
    wanted.iter().all(|w| scopes::covers(held, w))
}
