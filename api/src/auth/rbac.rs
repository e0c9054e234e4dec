//! Roles and members: a user's permissions in a project
//! are the permissions of its member role and of every role that role
//! inherits. Inheritance chains are short (cycles are refused when a role is
//! written); resolution stops at [`MAX_DEPTH`] all the same.

use sqlx::PgPool;
use switchyard_shared::store;

use super::scopes;
use super::Principal;

pub use store::roles::MAX_DEPTH;

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
    let chain = store::roles::membership_chain(pool, project_id, user_id).await?;
    if chain.is_empty() {
        return Ok(None);
    }
    let permissions = store::roles::union(&chain);
    Ok(Some(Membership { roles: chain.into_iter().map(|l| l.id).collect(), permissions }))
}

/// The role's own permissions plus those it inherits.
pub async fn effective_permissions(pool: &PgPool, role_id: &str) -> Result<Vec<String>, sqlx::Error> {
    store::roles::effective_permissions(pool, role_id).await
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
