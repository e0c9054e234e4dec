//! Roles: the four system roles (`admin`, `operator`, `viewer`,
//! `triggerer`), and custom roles per project that may inherit one other
//! role; the checks of their bodies. docs/access-control.md tells how a
//! member's role becomes permissions.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::{json, Value};
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::{FieldError, FieldErrors};
use switchyard_shared::store::roles::{ChainLink, RoleRow};
use switchyard_shared::store::{self};

use super::{
    check_scopes, description_rule, found, label_rule, patch, project_of, tenant, view_from_row, Created, Tag,
};
use crate::audit::{self, Change};
use crate::auth::{cache, rbac, Auth};
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

pub struct RolesApi;

/// A role: a named set of scopes. System roles (`admin`, `operator`,
/// `viewer`, `triggerer`) have no project and cannot change.
#[derive(Object)]
pub struct Role {
    pub id: String,
    /// Absent for system roles.
    #[oai(skip_serializing_if_is_none)]
    pub project_id: Option<String>,
    pub name: String,
    #[oai(skip_serializing_if_is_none)]
    pub description: Option<String>,
    /// The role's own scopes (the names operations give in `x-required-scope`).
    pub permissions: Vec<String>,
    /// The role whose permissions this one adds to its own.
    #[oai(skip_serializing_if_is_none)]
    pub inherits: Option<String>,
    pub system: bool,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// With include_lineage=true: the role, then each role it inherits.
    #[oai(skip_serializing_if_is_none)]
    pub lineage: Option<Vec<RoleLink>>,
    /// With include_lineage=true: the union of the lineage's permissions.
    #[oai(skip_serializing_if_is_none)]
    pub effective_permissions: Option<Vec<String>>,
}

/// One role of an inheritance chain.
#[derive(Object)]
pub struct RoleLink {
    pub id: String,
    pub name: String,
    pub permissions: Vec<String>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateRole {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    /// Unique in the project; not the name of a system role, nor one that
    /// reads as one (Unicode look-alikes by UTS #39 skeleton, any case), and
    /// without invisible (default-ignorable) characters.
    pub name: String,
    pub description: Option<String>,
    /// Scopes; an unknown one is 400. Nobody grants scopes they lack (403).
    pub permissions: Vec<String>,
    /// Id of a system role or of another role of the project.
    pub inherits: Option<String>,
}

/// Absent fields keep their value; `null` clears description or inherits.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UpdateRole {
    pub name: Option<String>,
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
    pub permissions: Option<Vec<String>>,
    /// A chain that would come back to this role is 422.
    #[oai(nullable)]
    pub inherits: MaybeUndefined<String>,
}

/// The value rules of CreateRole and UpdateRole (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::text;
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::Property;
    let mut r = vec![(Property("CreateRole", "project_id"), text(&ID))];
    for schema in ["CreateRole", "UpdateRole"] {
        r.push((Property(schema, "name"), text(&name_rule())));
        r.push((Property(schema, "description"), text(&super::DESCRIPTION)));
        r.push((Property(schema, "inherits"), text(&ID)));
    }
    r
}

#[derive(ApiResponse)]
pub enum Deleted {
    /// Deleted.
    #[oai(status = 204)]
    NoContent,
}

view_from_row!(RoleRow => Role {
    id, project_id, name, description, permissions, inherits, system, created_by, updated_by, created_at, updated_at
} + { lineage: None, effective_permissions: None });
view_from_row!(ChainLink => RoleLink { id, name, permissions });

async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<RoleRow> {
    found("role", id, store::roles::get(&state.pool, tenant(&auth.0), id)).await
}

/// Whether `name` is a system role's, whatever its case and spaces.
fn is_system(name: &str) -> bool {
    rbac::SYSTEM_ROLES.iter().any(|s| s.eq_ignore_ascii_case(name.trim()))
}

/// A custom role's name as the document states it: [`super::ROLE_NAME`],
/// and not a system role's (a lookahead refusing each, any case, any
/// spaces around it).
pub fn name_rule() -> Text {
    static RULE: LazyLock<Text> = LazyLock::new(|| {
        use switchyard_shared::domain::rules::SPACE;
        let label = super::ROLE_NAME.pattern.unwrap_or("^.*$");
        let any_case = |name: &str| -> String {
            name.chars()
                .map(|c| match c {
                    c if c.is_ascii_alphabetic() => format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase()),
                    c if c.is_ascii_alphanumeric() || c == '_' => c.to_string(),
                    c => format!("\\{c}"),
                })
                .collect()
        };
        let system: Vec<String> = rbac::SYSTEM_ROLES.iter().map(|n| any_case(n)).collect();
        let pattern = format!("^(?![{SPACE}]*(?:{})[{SPACE}]*$)(?!.*[{INVISIBLE}]){}", system.join("|"), &label[1..]);
        let (min, max) = (super::ROLE_NAME.min, super::ROLE_NAME.max);
        // The pattern cannot say the two Unicode rules (invisible characters,
        // look-alikes of a system role); the description states them.
        Text::form(min, max, Box::leak(pattern.into_boxed_str()), |n| {
            super::ROLE_NAME.ok(n) && !is_system(n) && !n.chars().any(is_invisible) && looks_like_system(n).is_none()
        })
    });
    *RULE
}

/// A custom role's name (not a system role's) and description.
fn validate_role(name: &str, description: Option<&str>) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    if label_rule(&mut e, name, &super::ROLE_NAME) {
        if let Some(c) = name.chars().find(|c| is_invisible(*c)) {
            let m = format!("must not contain invisible characters (U+{:04X})", c as u32);
            e.push("body.name", m, Some(name.into()));
        } else if is_system(name) {
            e.push("body.name", "is the name of a system role", Some(name.into()));
        } else if let Some(system) = looks_like_system(name) {
            e.push("body.name", format!("reads as the system role {system:?}"), Some(name.into()));
        }
    }
    description_rule(&mut e, description, &super::DESCRIPTION);
    e.finish()
}

/// [`is_invisible`]'s characters of the Basic Multilingual Plane, as a
/// pattern's character class (a document's pattern has no flag for the
/// rest; the check refuses them too).
const INVISIBLE: &str = r"\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8";

/// Unicode's default-ignorable code points (DerivedCoreProperties.txt):
/// characters a screen shows as nothing, so `ad\u{200B}min` would read as
/// `admin` in every list of roles.
fn is_invisible(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x061C | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFF8
        | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0000..=0xE0FFF)
}

/// The system role a name is confusable with (UTS #39 skeletons, so a
/// Cyrillic `а` or a full-width `ａ` reads as `a`), whatever its case.
fn looks_like_system(name: &str) -> Option<&'static str> {
    use unicode_security::confusable_detection::skeleton;
    let fold = |s: &str| skeleton(s.trim()).collect::<String>().to_lowercase();
    let seen = fold(name);
    rbac::SYSTEM_ROLES.iter().copied().find(|system| fold(system) == seen)
}

/// The parent must be a system role or a role of the project, and its
/// chain (`chain`: the parent, then each role it inherits; empty when
/// there is no such role) must not reach `self_id` (a cycle) nor run too
/// deep.
fn validate_parent(
    project_id: &str,
    parent: &str,
    self_id: Option<&str>,
    chain: &[ChainLink],
) -> Result<(), Vec<FieldError>> {
    let problem = match chain.first() {
        None => Some("no such role".to_string()),
        Some(l) if l.project_id.as_deref().is_some_and(|p| p != project_id) => Some("no such role".to_string()),
        _ if self_id.is_some_and(|me| chain.iter().any(|l| l.id == me)) => {
            Some("inheriting this role would make a cycle".to_string())
        }
        _ if chain.len() as i32 >= rbac::MAX_DEPTH => {
            Some(format!("inheritance chains are at most {} roles long", rbac::MAX_DEPTH))
        }
        _ => None,
    };
    let mut e = FieldErrors::new();
    if let Some(message) = problem {
        e.push("body.inherits", message, Some(parent.into()));
    }
    e.finish()
}

async fn check_parent(state: &AppState, project_id: &str, parent: &str, self_id: Option<&str>) -> ApiResult<()> {
    let chain = match switchyard_shared::ids::is_valid_external_id(parent) {
        true => store::roles::chain(&state.pool, parent).await?,
        false => Vec::new(),
    };
    Ok(validate_parent(project_id, parent, self_id, &chain)?)
}

/// The role with its inheritance chain and what the chain grants.
async fn with_lineage(state: &AppState, row: RoleRow) -> ApiResult<Role> {
    let chain = store::roles::chain(&state.pool, &row.id).await?;
    let effective = store::roles::union(&chain);
    let mut role = Role::from(row);
    role.lineage = Some(chain.into_iter().map(RoleLink::from).collect());
    role.effective_permissions = Some(effective);
    Ok(role)
}

/// What a role with these permissions and this parent would grant.
async fn would_grant(state: &AppState, permissions: &[String], parent: Option<&str>) -> ApiResult<Vec<String>> {
    let mut all = permissions.to_vec();
    if let Some(parent) = parent {
        for p in rbac::effective_permissions(&state.pool, parent).await? {
            if !all.contains(&p) {
                all.push(p);
            }
        }
    }
    Ok(all)
}

/// An empty set grants nothing (where `grantable` reads an empty key scope
/// list as everything), so it is always grantable.
fn check_grantable(auth: &Auth, all: &[String]) -> ApiResult<()> {
    if !all.is_empty() && !rbac::grantable(&auth.0, all) {
        return Err(ApiError::forbidden("a role cannot grant scopes its author does not hold"));
    }
    Ok(())
}

#[OpenApi(tag = "Tag::Roles")]
impl RolesApi {
    /// Create a custom role in a project.
    #[oai(path = "/v1/roles", method = "post", operation_id = "createRole")]
    async fn create(&self, state: Data<&AppState>, auth: Auth, body: JsonBody<CreateRole>) -> ApiResult<Created<Role>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        let permissions = check_scopes("body.permissions", &b.permissions)?;
        validate_role(&b.name, b.description.as_deref())?;
        super::project_exists(&state, &project_id).await?;
        if let Some(parent) = &b.inherits {
            check_parent(&state, &project_id, parent, None).await?;
        }
        check_grantable(&auth, &would_grant(&state, &permissions, b.inherits.as_deref()).await?)?;
        let id = switchyard_shared::ids::new_id("role");
        let mut tx = state.pool.begin().await?;
        let fields = store::roles::RoleFields {
            name: b.name.trim(),
            description: b.description.as_deref(),
            permissions: &permissions,
            inherits: b.inherits.as_deref(),
            actor: auth.0.actor_id.as_deref(),
        };
        let row = store::roles::create(&mut tx, &id, &project_id, &fields).await?;
        let details = json!({"name": row.name, "permissions": row.permissions, "inherits": row.inherits});
        audit::record(&mut *tx, &auth.0, Change::new(&project_id, "role.created", ("role", &id), details)).await?;
        tx.commit().await?;
        Ok(Created::Created(Json(Role::from(row))))
    }

    /// The system roles and the project's custom roles, by id.
    #[oai(path = "/v1/roles", method = "get", operation_id = "listRoles")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Role>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::roles::list(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), Role::from)))
    }

    /// Get a role; `include_lineage=true` adds the inheritance chain and the
    /// effective permissions.
    #[oai(path = "/v1/roles/:role_id", method = "get", operation_id = "getRole")]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        role_id: Path<String>,
        include_lineage: Query<Option<bool>>,
    ) -> ApiResult<Json<Role>> {
        let row = load(&state, &auth, &role_id).await?;
        if include_lineage.0.unwrap_or(false) {
            return Ok(Json(with_lineage(&state, row).await?));
        }
        Ok(Json(Role::from(row)))
    }

    /// Change a custom role; members holding it get the change at once.
    /// System roles are immutable (403).
    #[oai(path = "/v1/roles/:role_id", method = "patch", operation_id = "updateRole")]
    async fn update(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        role_id: Path<String>,
        body: JsonBody<UpdateRole>,
    ) -> ApiResult<Json<Role>> {
        let cur = load(&state, &auth, &role_id).await?;
        let Some(project_id) = cur.project_id.clone().filter(|_| !cur.system) else {
            return Err(ApiError::forbidden("system roles cannot be modified"));
        };
        let b = body.0;
        let permissions = match &b.permissions {
            Some(p) => check_scopes("body.permissions", p)?,
            None => cur.permissions.clone(),
        };
        let name = b.name.unwrap_or(cur.name.clone());
        let description = patch(b.description, cur.description.clone());
        let inherits = patch(b.inherits, cur.inherits.clone());
        validate_role(&name, description.as_deref())?;
        if let Some(parent) = &inherits {
            check_parent(&state, &project_id, parent, Some(&cur.id)).await?;
        }
        // Both what the role grants now and what it will grant must be the
        // caller's to give.
        check_grantable(&auth, &would_grant(&state, &cur.permissions, cur.inherits.as_deref()).await?)?;
        check_grantable(&auth, &would_grant(&state, &permissions, inherits.as_deref()).await?)?;
        let mut tx = state.pool.begin().await?;
        let fields = store::roles::RoleFields {
            name: name.trim(),
            description: description.as_deref(),
            permissions: &permissions,
            inherits: inherits.as_deref(),
            actor: auth.0.actor_id.as_deref(),
        };
        let row = store::roles::update(&mut tx, &cur.id, &fields).await?;
        let details = json!({"name": row.name, "permissions": row.permissions, "inherits": row.inherits});
        audit::record(&mut *tx, &auth.0, Change::new(&project_id, "role.updated", ("role", &cur.id), details)).await?;
        tx.commit().await?;
        cache::bump_version(&state.queue).await;
        Ok(Json(Role::from(row)))
    }

    /// Delete a custom role. 409 while members hold it or roles inherit it;
    /// system roles are immutable (403).
    #[oai(path = "/v1/roles/:role_id", method = "delete", operation_id = "deleteRole")]
    async fn delete(&self, state: Data<&AppState>, auth: Auth, role_id: Path<String>) -> ApiResult<Deleted> {
        let cur = load(&state, &auth, &role_id).await?;
        let Some(project_id) = cur.project_id.clone().filter(|_| !cur.system) else {
            return Err(ApiError::forbidden("system roles cannot be deleted"));
        };
        let mut tx = state.pool.begin().await?;
        let (members, heirs) = store::roles::users(&mut tx, &cur.id).await?;
        if members > 0 || heirs > 0 {
            return Err(ApiError::conflict(format!(
                "the role is in use: {members} member(s) hold it and {heirs} role(s) inherit it"
            )));
        }
        store::roles::delete(&mut tx, &cur.id).await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(&project_id, "role.deleted", ("role", &cur.id), json!({"name": cur.name})),
        )
        .await?;
        tx.commit().await?;
        cache::bump_version(&state.queue).await;
        Ok(Deleted::NoContent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stated_name_rule_is_the_check() {
        let rule = name_rule();
        let extra = ["admin", " Admin ", "ADMIN", "admins", "viewer\t", "triggerer", "operator\u{a0}", "my admin"];
        assert_eq!(switchyard_shared::domain::rules::agrees(&rule, &extra), Ok(()));
        for n in switchyard_shared::domain::rules::corpus(&extra) {
            assert_eq!(rule.ok(&n), validate_role(&n, None).is_ok(), "{n:?}");
        }
    }

    fn link(id: &str, project_id: Option<&str>) -> ChainLink {
        ChainLink { id: id.into(), project_id: project_id.map(Into::into), name: id.into(), permissions: vec![] }
    }

    #[test]
    fn a_role_name_is_bounded_and_not_a_system_role() {
        assert_eq!(validate_role("deployers", Some("ship it")), Ok(()));
        let got = validate_role(" Admin ", None).unwrap_err();
        assert_eq!(got, [FieldError::new("body.name", "is the name of a system role", Some(" Admin ".into()))]);
        let got = validate_role("", Some(&"d".repeat(2001))).unwrap_err();
        assert_eq!(got[0].message, "must be 1 to 100 characters, no control characters");
        assert_eq!(got[1], FieldError::new("body.description", "at most 2000 characters", None));
        assert_eq!(validate_role(&"r".repeat(101), None).unwrap_err().len(), 1, "too long, not also a system role");
    }

    #[test]
    fn invisible_characters_and_look_alikes_of_a_system_role_are_refused() {
        let message = |n: &str| validate_role(n, None).unwrap_err().remove(0).message;
        assert_eq!(message("ad\u{200B}min"), "must not contain invisible characters (U+200B)");
        assert_eq!(message("\u{FEFF}viewer"), "must not contain invisible characters (U+FEFF)");
        assert_eq!(message("op\u{00AD}erator"), "must not contain invisible characters (U+00AD)");
        // Cyrillic а, full-width letters, Greek ο, digit-for-letter 0.
        for n in ["\u{0430}dmin", "\u{FF41}\u{FF44}\u{FF4D}\u{FF49}\u{FF4E}", "\u{03BF}perator", "Vi\u{0435}wer"] {
            assert!(message(n).starts_with("reads as the system role"), "{n:?}: {}", message(n));
        }
        for ok in ["admins", "deployers", "rôle", "管理者", "op team"] {
            assert_eq!(validate_role(ok, None), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn a_parent_is_of_the_project_without_cycle_or_too_deep_a_chain() {
        let message = |r: Result<(), Vec<FieldError>>| r.unwrap_err().remove(0).message;
        assert_eq!(validate_parent("p", "viewer", None, &[link("viewer", None)]), Ok(()));
        assert_eq!(validate_parent("p", "role_a", None, &[link("role_a", Some("p"))]), Ok(()));
        assert_eq!(message(validate_parent("p", "role_x", None, &[])), "no such role");
        assert_eq!(message(validate_parent("p", "role_a", None, &[link("role_a", Some("q"))])), "no such role");
        let chain = [link("role_b", Some("p")), link("role_a", Some("p"))];
        assert_eq!(
            message(validate_parent("p", "role_b", Some("role_a"), &chain)),
            "inheriting this role would make a cycle"
        );
        let deep: Vec<ChainLink> = (0..rbac::MAX_DEPTH).map(|i| link(&format!("role_{i}"), Some("p"))).collect();
        let got = validate_parent("p", "role_0", None, &deep).unwrap_err();
        assert_eq!(got[0].message, format!("inheritance chains are at most {} roles long", rbac::MAX_DEPTH));
        assert_eq!((got[0].location.as_str(), got[0].value.clone()), ("body.inherits", Some("role_0".into())));
    }
}
