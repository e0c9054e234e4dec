//! Members: external users (OIDC subjects) holding one role in a project,
//! and the checks of their bodies. Every change reaches every api
//! process's permission cache at once (see `auth::cache`).

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::{json, Value};
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::{FieldError, FieldErrors};
use switchyard_shared::store::{self, members::MemberRow, Tenant};

use super::{project_of, view_from_row, Tag};
use crate::audit::{self, Change};
use crate::auth::{cache, rbac, Auth};
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

pub struct MembersApi;

/// A user's role in a project.
#[derive(Object)]
pub struct Member {
    pub project_id: String,
    /// The external user id (the OIDC `sub`).
    pub user_id: String,
    pub role_id: String,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Orders the listing (the cursor).
    #[oai(skip)]
    pub id: String,
}

/// Give a user a role in the project (or change the role it has).
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct AssignMember {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    /// 1 to 256 printable characters, no `/`.
    pub user_id: String,
    /// A system role or a role of the project.
    pub role_id: String,
}

/// One assignment of a bulk request. It keeps the rules of a single
/// assignment (`user_id` and `role_id` as in AssignMember), but one that
/// breaks them is refused in its own result (`error`), not with the
/// request: the document states them on AssignMember only.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct BulkMember {
    pub user_id: String,
    pub role_id: String,
}

/// Up to 100 assignments in one project, each applied on its own.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct BulkAssign {
    pub project_id: Option<String>,
    /// 1 to 100 assignments.
    pub members: Vec<BulkMember>,
}

/// The value rules of AssignMember and BulkAssign (see `document::rules`).
/// A bulk assignment's own (BulkMember) are checked per item and answered
/// in its result, so the request is not refused for them.
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{count, text};
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::Property;
    vec![
        (Property("AssignMember", "project_id"), text(&ID)),
        (Property("BulkAssign", "project_id"), text(&ID)),
        (Property("AssignMember", "user_id"), text(&USER_ID)),
        (Property("AssignMember", "role_id"), text(&ID)),
        (Property("BulkAssign", "members"), count(BULK_MEMBERS.0, BULK_MEMBERS.1)),
    ]
}

/// The outcome of one bulk assignment.
#[derive(Object)]
pub struct BulkMemberResult {
    /// Position in the request.
    pub index: i64,
    pub user_id: String,
    /// `assigned` (new member), `updated` (role changed), `unchanged` or `error`.
    pub status: String,
    #[oai(skip_serializing_if_is_none)]
    pub member: Option<Member>,
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
}

#[derive(Object)]
pub struct BulkAssignResult {
    pub results: Vec<BulkMemberResult>,
}

#[derive(ApiResponse)]
pub enum Assigned {
    /// A new member.
    #[oai(status = 201)]
    Created(Json<Member>),
    /// The member's role was changed (or already was this one).
    #[oai(status = 200)]
    Updated(Json<Member>),
}

#[derive(ApiResponse)]
pub enum Removed {
    /// Removed: the user has no permissions in the project from the next request on.
    #[oai(status = 204)]
    NoContent,
}

view_from_row!(MemberRow => Member {
    project_id, user_id, role_id, created_by, updated_by, created_at, updated_at, id
});

/// A user id (an OIDC `sub`): 1 to 256 printable characters, no `/` (it
/// is a path segment) and no spaces.
pub const USER_ID: Text = Text::form(
    1,
    256,
    r"^[^/\u0000-\u001f\u007f-\u009f\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$",
    |u| !u.contains('/') && !u.chars().any(|c| c.is_control() || c.is_whitespace()),
);

fn validate_user_id(user_id: &str, location: &str) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    e.check(USER_ID.ok(user_id), location, "1 to 256 printable characters, no '/' or spaces", Some(user_id.into()));
    e.finish()
}

/// How many assignments a bulk request holds.
pub const BULK_MEMBERS: (usize, usize) = (1, 100);

/// A bulk request holds 1 to 100 assignments; each is checked on its own.
fn validate_bulk(b: &BulkAssign) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    let n = b.members.len();
    let (min, max) = BULK_MEMBERS;
    e.check((min..=max).contains(&n), "body.members", format!("{min} to {max} assignments"), Some(n.into()));
    e.finish()
}

/// 403 unless the caller could grant everything `role_id` grants.
async fn check_role_grantable(state: &AppState, auth: &Auth, role_id: &str) -> ApiResult<()> {
    let perms = rbac::effective_permissions(&state.pool, role_id).await?;
    if !perms.is_empty() && !rbac::grantable(&auth.0, &perms) {
        return Err(ApiError::forbidden(format!("the role {role_id} grants scopes the caller does not hold")));
    }
    Ok(())
}

/// Assigns one member; the status is `assigned`, `updated` or `unchanged`.
async fn assign(
    state: &AppState,
    auth: &Auth,
    project_id: &str,
    user_id: &str,
    role_id: &str,
    location: &str,
) -> ApiResult<(Member, &'static str)> {
    validate_user_id(user_id, &format!("{location}user_id"))?;
    let role = if switchyard_shared::ids::is_valid_external_id(role_id) {
        store::roles::get(&state.pool, Tenant::Project(project_id), role_id).await?
    } else {
        None
    };
    if role.is_none() {
        return Err(ApiError::invalid_field(
            &format!("{location}role_id"),
            "no such role in this project",
            Some(role_id.into()),
        ));
    }
    check_role_grantable(state, auth, role_id).await?;
    let mut tx = state.pool.begin().await?;
    let before = store::members::lock_role_of(&mut tx, project_id, user_id).await?;
    if let Some(old) = &before {
        if old != role_id {
            check_role_grantable(state, auth, old).await?;
        }
    }
    let member: Member =
        store::members::upsert(&mut tx, project_id, user_id, role_id, auth.0.actor_id.as_deref()).await?.into();
    let status = match &before {
        None => "assigned",
        Some(old) if old == role_id => "unchanged",
        Some(_) => "updated",
    };
    if status != "unchanged" {
        let details = json!({"role_id": role_id, "previous_role_id": before});
        audit::record(&mut *tx, &auth.0, Change::new(project_id, "member.assigned", ("member", user_id), details))
            .await?;
    }
    tx.commit().await?;
    Ok((member, status))
}

#[OpenApi(tag = "Tag::Members")]
impl MembersApi {
    /// Assign a role to a user in a project, or change the role it has.
    /// Nobody assigns (or takes away) a role granting scopes they lack (403).
    #[oai(path = "/v1/members", method = "post", operation_id = "assignMember")]
    async fn assign(&self, state: Data<&AppState>, auth: Auth, body: JsonBody<AssignMember>) -> ApiResult<Assigned> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        super::project_exists(&state, &project_id).await?;
        let (member, status) = assign(&state, &auth, &project_id, &b.user_id, &b.role_id, "body.").await?;
        if status != "unchanged" {
            cache::bump_version(&state.queue).await;
        }
        Ok(if status == "assigned" { Assigned::Created(Json(member)) } else { Assigned::Updated(Json(member)) })
    }

    /// Assign up to 100 members in one request. Each item succeeds or fails
    /// on its own; `results` has one entry per item, in order.
    #[oai(path = "/v1/members/bulk", method = "post", operation_id = "bulkAssignMembers")]
    async fn bulk(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<BulkAssign>,
    ) -> ApiResult<Json<BulkAssignResult>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        validate_bulk(&b)?;
        super::project_exists(&state, &project_id).await?;
        let mut results = Vec::with_capacity(b.members.len());
        let mut changed = false;
        for (i, m) in b.members.into_iter().enumerate() {
            let location = format!("body.members/{i}/");
            match assign(&state, &auth, &project_id, &m.user_id, &m.role_id, &location).await {
                Ok((member, status)) => {
                    changed |= status != "unchanged";
                    results.push(BulkMemberResult {
                        index: i as i64,
                        user_id: m.user_id,
                        status: status.into(),
                        member: Some(member),
                        error: None,
                    });
                }
                Err(e) => results.push(BulkMemberResult {
                    index: i as i64,
                    user_id: m.user_id,
                    status: "error".into(),
                    member: None,
                    error: Some(e.detail()),
                }),
            }
        }
        if changed {
            cache::bump_version(&state.queue).await;
        }
        Ok(Json(BulkAssignResult { results }))
    }

    /// The members of a project, oldest first; `role_id` narrows to one role.
    #[oai(path = "/v1/members", method = "get", operation_id = "listMembers")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        role_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Member>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::members::list(&state.pool, &project_id, role_id.0.as_deref(), w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |m| m.id.clone(), Member::from)))
    }

    /// Remove a member from a project.
    #[oai(path = "/v1/members/:user_id", method = "delete", operation_id = "removeMember")]
    async fn remove(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        user_id: Path<String>,
        project_id: Query<Option<String>>,
    ) -> ApiResult<Removed> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let user_id = user_id.0;
        let gone = || ApiError::not_found("member", &user_id);
        if validate_user_id(&user_id, "path.user_id").is_err() {
            return Err(gone());
        }
        let Some(role_id) = store::members::role_of(&state.pool, &project_id, &user_id).await? else {
            return Err(gone());
        };
        check_role_grantable(&state, &auth, &role_id).await?;
        let mut tx = state.pool.begin().await?;
        if !store::members::delete(&mut tx, &project_id, &user_id).await? {
            return Err(gone());
        }
        let change = Change::new(&project_id, "member.removed", ("member", &user_id), json!({"role_id": role_id}));
        audit::record(&mut *tx, &auth.0, change).await?;
        tx.commit().await?;
        cache::bump_version(&state.queue).await;
        Ok(Removed::NoContent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_id_rule_is_its_check() {
        assert_eq!(switchyard_shared::domain::rules::agrees(&USER_ID, &["auth0|abc", "google-oauth2|1"]), Ok(()));
    }

    #[test]
    fn a_user_id_is_printable_without_slash_or_space() {
        assert_eq!(validate_user_id("auth0|abc", "body.user_id"), Ok(()));
        for bad in ["", "a/b", "a b", "a\nb"] {
            let got = validate_user_id(bad, "body.members/2/user_id").unwrap_err();
            assert_eq!(got[0].location, "body.members/2/user_id", "{bad:?}");
        }
        assert!(validate_user_id(&"u".repeat(257), "body.user_id").is_err());
    }

    #[test]
    fn a_bulk_assignment_holds_one_to_a_hundred() {
        let bulk = |n: usize| BulkAssign {
            project_id: None,
            members: (0..n).map(|i| BulkMember { user_id: format!("u{i}"), role_id: "viewer".into() }).collect(),
        };
        assert_eq!(validate_bulk(&bulk(100)), Ok(()));
        assert_eq!(
            validate_bulk(&bulk(0)).unwrap_err(),
            [FieldError::new("body.members", "1 to 100 assignments", Some(0.into()))]
        );
        assert!(validate_bulk(&bulk(101)).is_err());
    }
}
