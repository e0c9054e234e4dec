//! Roles (SPEC §5.3, DECISIONS §2): the four system roles, and custom
//! roles per project that may inherit one other role.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::json;

use super::api_keys::check_scopes;
use super::jobs::patch;
use super::{check_id, project_of, visible, Tag};
use crate::audit::{self, Change};
use crate::auth::{cache, rbac, Auth};
use crate::error::{ApiError, ApiResult, ErrorDetail};
use crate::pagination::{self, Page};
use crate::state::AppState;

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
    /// The role's own scopes (SPEC §5.2).
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
    /// Unique in the project; not the name of a system role.
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
    pub description: MaybeUndefined<String>,
    pub permissions: Option<Vec<String>>,
    /// A chain that would come back to this role is 422.
    pub inherits: MaybeUndefined<String>,
}

#[derive(ApiResponse)]
pub enum CreatedRole {
    #[oai(status = 201)]
    Created(Json<Role>),
}

#[derive(ApiResponse)]
pub enum Deleted {
    /// Deleted.
    #[oai(status = 204)]
    NoContent,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    project_id: Option<String>,
    name: String,
    description: Option<String>,
    permissions: Vec<String>,
    inherits: Option<String>,
    system: bool,
    created_by: Option<String>,
    updated_by: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

const COLS: &str =
    "id, project_id, name, description, permissions, inherits, system, created_by, updated_by, created_at, updated_at";

impl Row {
    fn view(self) -> Role {
        Role {
            id: self.id,
            project_id: self.project_id,
            name: self.name,
            description: self.description,
            permissions: self.permissions,
            inherits: self.inherits,
            system: self.system,
            created_by: self.created_by,
            updated_by: self.updated_by,
            created_at: self.created_at,
            updated_at: self.updated_at,
            lineage: None,
            effective_permissions: None,
        }
    }
}

async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Row> {
    check_id("role", id)?;
    let row: Option<Row> =
        sqlx::query_as(&format!("SELECT {COLS} FROM roles WHERE id = $1")).bind(id).fetch_optional(&state.pool).await?;
    match row {
        Some(r) if r.project_id.as_deref().is_none_or(|p| visible(&auth.0, p)) => Ok(r),
        _ => Err(ApiError::not_found("role", id)),
    }
}

fn check_text(name: &str, description: Option<&String>, errors: &mut Vec<ErrorDetail>) {
    if name.trim().is_empty() || name.len() > 100 || name.chars().any(char::is_control) {
        errors.push(ErrorDetail {
            location: "body.name".into(),
            message: "must be 1 to 100 characters, no control characters".into(),
            value: Some(name.into()),
        });
    } else if rbac::SYSTEM_ROLES.iter().any(|s| s.eq_ignore_ascii_case(name.trim())) {
        errors.push(ErrorDetail {
            location: "body.name".into(),
            message: "is the name of a system role".into(),
            value: Some(name.into()),
        });
    }
    if description.is_some_and(|d| d.len() > 2000) {
        errors.push(ErrorDetail {
            location: "body.description".into(),
            message: "at most 2000 characters".into(),
            value: None,
        });
    }
}

/// The parent must be a system role or a role of the project, and the
/// chain from it must not reach `self_id` (a cycle) nor run too deep.
async fn check_parent(state: &AppState, project_id: &str, parent: &str, self_id: Option<&str>) -> ApiResult<()> {
    let bad = |m: &str| ApiError::invalid_field("body.inherits", m.to_string(), Some(parent.into()));
    if !switchyard_shared::ids::is_valid_external_id(parent) {
        return Err(bad("no such role"));
    }
    let chain: Vec<(String, Option<String>)> = sqlx::query_as(
        "WITH RECURSIVE chain (id, project_id, inherits, depth) AS (
            SELECT id, project_id, inherits, 0 FROM roles WHERE id = $1
            UNION ALL
            SELECT r.id, r.project_id, r.inherits, c.depth + 1 FROM roles r JOIN chain c ON r.id = c.inherits
            WHERE c.depth <= $2
         )
         SELECT id, project_id FROM chain ORDER BY depth",
    )
    .bind(parent)
    .bind(rbac::MAX_DEPTH)
    .fetch_all(&state.pool)
    .await?;
    match chain.first() {
        None => return Err(bad("no such role")),
        Some((_, Some(p))) if p != project_id => return Err(bad("no such role")),
        _ => {}
    }
    if self_id.is_some_and(|me| chain.iter().any(|(id, _)| id == me)) {
        return Err(bad("inheriting this role would make a cycle"));
    }
    if chain.len() as i32 >= rbac::MAX_DEPTH {
        return Err(bad(&format!("inheritance chains are at most {} roles long", rbac::MAX_DEPTH)));
    }
    Ok(())
}

/// The role, then each role it inherits, nearest first.
async fn lineage(state: &AppState, id: &str) -> ApiResult<Vec<RoleLink>> {
    let rows: Vec<(String, String, Vec<String>)> = sqlx::query_as(
        "WITH RECURSIVE chain (id, name, inherits, permissions, depth) AS (
            SELECT id, name, inherits, permissions, 0 FROM roles WHERE id = $1
            UNION ALL
            SELECT r.id, r.name, r.inherits, r.permissions, c.depth + 1 FROM roles r JOIN chain c ON r.id = c.inherits
            WHERE c.depth < $2
         )
         SELECT id, name, permissions FROM chain ORDER BY depth",
    )
    .bind(id)
    .bind(rbac::MAX_DEPTH)
    .fetch_all(&state.pool)
    .await?;
    Ok(rows.into_iter().map(|(id, name, permissions)| RoleLink { id, name, permissions }).collect())
}

async fn with_lineage(state: &AppState, row: Row) -> ApiResult<Role> {
    let chain = lineage(state, &row.id).await?;
    let mut effective: Vec<String> = Vec::new();
    for l in &chain {
        for p in &l.permissions {
            if !effective.contains(p) {
                effective.push(p.clone());
            }
        }
    }
    let mut role = row.view();
    role.lineage = Some(chain);
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
    #[oai(path = "/v1/roles", method = "post")]
    async fn create(&self, state: Data<&AppState>, auth: Auth, body: Json<CreateRole>) -> ApiResult<CreatedRole> {
        let b = body.0;
        let project_id = project_of(&auth.0, b.project_id.as_deref())?;
        let permissions = check_scopes("body.permissions", &b.permissions)?;
        let mut errors = Vec::new();
        check_text(&b.name, b.description.as_ref(), &mut errors);
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        super::project_exists(&state, &project_id).await?;
        if let Some(parent) = &b.inherits {
            check_parent(&state, &project_id, parent, None).await?;
        }
        check_grantable(&auth, &would_grant(&state, &permissions, b.inherits.as_deref()).await?)?;
        let id = switchyard_shared::ids::new_id("role");
        let mut tx = state.pool.begin().await?;
        let row: Row = sqlx::query_as(&format!(
            "INSERT INTO roles (id, project_id, name, description, permissions, inherits, created_by, updated_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING {COLS}"
        ))
        .bind(&id)
        .bind(&project_id)
        .bind(b.name.trim())
        .bind(&b.description)
        .bind(&permissions)
        .bind(&b.inherits)
        .bind(auth.0.actor())
        .fetch_one(&mut *tx)
        .await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change {
                project_id: &project_id,
                action: "role.created",
                resource_type: "role",
                resource_id: &id,
                details: json!({"name": row.name, "permissions": row.permissions, "inherits": row.inherits}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(CreatedRole::Created(Json(row.view())))
    }

    /// The system roles and the project's custom roles, by id.
    #[oai(path = "/v1/roles", method = "get")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Role>>> {
        let project_id = project_of(&auth.0, project_id.0.as_deref())?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "SELECT {COLS} FROM roles WHERE (project_id = $1 OR project_id IS NULL) AND ($2::text IS NULL OR id > $2)
             ORDER BY id LIMIT $3"
        ))
        .bind(&project_id)
        .bind(cursor)
        .bind(limit + 1)
        .fetch_all(&state.pool)
        .await?;
        Ok(Json(pagination::page(rows, limit, |r| r.id.clone(), Row::view)))
    }

    /// Get a role; `include_lineage=true` adds the inheritance chain and the
    /// effective permissions.
    #[oai(path = "/v1/roles/:role_id", method = "get")]
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
        Ok(Json(row.view()))
    }

    /// Change a custom role; members holding it get the change at once.
    /// System roles are immutable (403).
    #[oai(path = "/v1/roles/:role_id", method = "patch")]
    async fn update(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        role_id: Path<String>,
        body: Json<UpdateRole>,
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
        let mut errors = Vec::new();
        check_text(&name, description.as_ref(), &mut errors);
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        if let Some(parent) = &inherits {
            check_parent(&state, &project_id, parent, Some(&cur.id)).await?;
        }
        // Both what the role grants now and what it will grant must be the
        // caller's to give.
        check_grantable(&auth, &would_grant(&state, &cur.permissions, cur.inherits.as_deref()).await?)?;
        check_grantable(&auth, &would_grant(&state, &permissions, inherits.as_deref()).await?)?;
        let mut tx = state.pool.begin().await?;
        let row: Row = sqlx::query_as(&format!(
            "UPDATE roles SET name = $2, description = $3, permissions = $4, inherits = $5, updated_by = $6
             WHERE id = $1 RETURNING {COLS}"
        ))
        .bind(&cur.id)
        .bind(name.trim())
        .bind(&description)
        .bind(&permissions)
        .bind(&inherits)
        .bind(auth.0.actor())
        .fetch_one(&mut *tx)
        .await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change {
                project_id: &project_id,
                action: "role.updated",
                resource_type: "role",
                resource_id: &cur.id,
                details: json!({"name": row.name, "permissions": row.permissions, "inherits": row.inherits}),
            },
        )
        .await?;
        tx.commit().await?;
        cache::bump_version(&state.queue).await;
        Ok(Json(row.view()))
    }

    /// Delete a custom role. 409 while members hold it or roles inherit it;
    /// system roles are immutable (403).
    #[oai(path = "/v1/roles/:role_id", method = "delete")]
    async fn delete(&self, state: Data<&AppState>, auth: Auth, role_id: Path<String>) -> ApiResult<Deleted> {
        let cur = load(&state, &auth, &role_id).await?;
        let Some(project_id) = cur.project_id.clone().filter(|_| !cur.system) else {
            return Err(ApiError::forbidden("system roles cannot be deleted"));
        };
        let mut tx = state.pool.begin().await?;
        let (members, heirs): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM members WHERE role_id = $1), (SELECT count(*) FROM roles WHERE inherits = $1)",
        )
        .bind(&cur.id)
        .fetch_one(&mut *tx)
        .await?;
        if members > 0 || heirs > 0 {
            return Err(ApiError::conflict(format!(
                "the role is in use: {members} member(s) hold it and {heirs} role(s) inherit it"
            )));
        }
        sqlx::query("DELETE FROM roles WHERE id = $1").bind(&cur.id).execute(&mut *tx).await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change {
                project_id: &project_id,
                action: "role.deleted",
                resource_type: "role",
                resource_id: &cur.id,
                details: json!({"name": cur.name}),
            },
        )
        .await?;
        tx.commit().await?;
        cache::bump_version(&state.queue).await;
        Ok(Deleted::NoContent)
    }
}
