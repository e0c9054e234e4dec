//! Resource policies and tag policies (SPEC §4.7, DECISIONS §2), per
//! project. How they are evaluated: `auth::policy`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::json;
use switchyard_shared::store::policies::{self as stored, ResourcePolicyRow, TagPolicyRow};
use switchyard_shared::store::{self, Tenant};

use super::{check_scopes, found, patch, project_of, tenant, view_from_row, Tag};
use crate::audit::{self, Change};
use crate::auth::{cache, Auth};
use crate::error::{ApiError, ApiResult, ErrorDetail};
use crate::pagination::{Page, Window};
use crate::state::AppState;

pub struct PoliciesApi;

/// Allows or denies a principal actions on chosen resources of a project
/// (evaluated after scopes; deny wins; see the API description).
#[derive(Object)]
pub struct ResourcePolicy {
    pub id: String,
    pub project_id: String,
    pub name: String,
    #[oai(skip_serializing_if_is_none)]
    pub description: Option<String>,
    /// `allow` or `deny`.
    pub effect: String,
    /// `role`, `member` or `api_key`.
    pub principal_type: String,
    /// A role id, a member's user id, or an API key id.
    pub principal_id: String,
    /// Scopes (SPEC §5.2) the policy governs; `*` for all.
    pub actions: Vec<String>,
    /// `job`, `job_group` or `run`.
    pub resource_type: String,
    /// The resources chosen by id (empty: not by id).
    pub resource_ids: Vec<String>,
    /// Every pair must be among the resource's tags (empty: not by tag).
    pub tag_selector: HashMap<String, String>,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateResourcePolicy {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    pub name: String,
    pub description: Option<String>,
    pub effect: String,
    pub principal_type: String,
    pub principal_id: String,
    pub actions: Vec<String>,
    pub resource_type: String,
    pub resource_ids: Option<Vec<String>>,
    pub tag_selector: Option<HashMap<String, String>>,
}

/// Absent fields keep their value.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UpdateResourcePolicy {
    pub name: Option<String>,
    pub description: MaybeUndefined<String>,
    pub effect: Option<String>,
    pub principal_type: Option<String>,
    pub principal_id: Option<String>,
    pub actions: Option<Vec<String>>,
    pub resource_type: Option<String>,
    pub resource_ids: Option<Vec<String>>,
    pub tag_selector: Option<HashMap<String, String>>,
}

/// Rules on the tags of a project's jobs (later workflows): required keys
/// and allowed values. A create or update that breaks one is 422.
#[derive(Object)]
pub struct TagPolicy {
    pub id: String,
    pub project_id: String,
    /// `job` or `workflow`.
    pub resource_type: String,
    #[oai(skip_serializing_if_is_none)]
    pub description: Option<String>,
    /// Keys every resource must carry.
    pub required_keys: Vec<String>,
    /// Key to the values it may take (when present).
    pub allowed_values: HashMap<String, Vec<String>>,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateTagPolicy {
    pub project_id: Option<String>,
    /// Default `job`.
    pub resource_type: Option<String>,
    pub description: Option<String>,
    pub required_keys: Option<Vec<String>>,
    pub allowed_values: Option<HashMap<String, Vec<String>>>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UpdateTagPolicy {
    pub description: MaybeUndefined<String>,
    pub required_keys: Option<Vec<String>>,
    pub allowed_values: Option<HashMap<String, Vec<String>>>,
}

#[derive(ApiResponse)]
pub enum CreatedResourcePolicy {
    #[oai(status = 201)]
    Created(Json<ResourcePolicy>),
}

#[derive(ApiResponse)]
pub enum CreatedTagPolicy {
    #[oai(status = 201)]
    Created(Json<TagPolicy>),
}

#[derive(ApiResponse)]
pub enum Deleted {
    /// Permanently deleted.
    #[oai(status = 204)]
    NoContent,
}

view_from_row!(ResourcePolicyRow => ResourcePolicy {
    id, project_id, name, description, effect, principal_type, principal_id, actions, resource_type, resource_ids,
    tag_selector, created_by, updated_by, created_at, updated_at
});

view_from_row!(TagPolicyRow => TagPolicy {
    id, project_id, resource_type, description, required_keys, allowed_values, created_by, updated_by, created_at,
    updated_at
});

fn err(errors: &mut Vec<ErrorDetail>, field: &str, message: &str, value: serde_json::Value) {
    errors.push(ErrorDetail { location: format!("body.{field}"), message: message.into(), value: Some(value) });
}

fn one_of(errors: &mut Vec<ErrorDetail>, field: &str, v: &str, allowed: &[&str]) {
    if !allowed.contains(&v) {
        err(errors, field, &format!("must be one of {allowed:?}"), v.into());
    }
}

fn check_common(errors: &mut Vec<ErrorDetail>, name: Option<&str>, description: Option<&String>) {
    if let Some(name) = name {
        if name.trim().is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
            err(errors, "name", "must be 1 to 200 characters, no control characters", name.into());
        }
    }
    if description.is_some_and(|d| d.len() > 2000) {
        err(errors, "description", "at most 2000 characters", serde_json::Value::Null);
    }
}

fn tag_key_ok(k: &str) -> bool {
    !k.is_empty() && k.len() <= 128 && !k.chars().any(char::is_control)
}

struct RpFields {
    name: String,
    effect: String,
    principal_type: String,
    principal_id: String,
    actions: Vec<String>,
    resource_type: String,
    resource_ids: Vec<String>,
    tag_selector: HashMap<String, String>,
}

/// Validates a whole policy; the principal must exist in the project
/// (a member's user id need not: the policy may precede the member).
async fn check_resource_policy(
    state: &AppState,
    project_id: &str,
    f: &RpFields,
    description: Option<&String>,
) -> ApiResult<()> {
    let mut errors = Vec::new();
    check_common(&mut errors, Some(&f.name), description);
    one_of(&mut errors, "effect", &f.effect, &["allow", "deny"]);
    one_of(&mut errors, "principal_type", &f.principal_type, &["role", "member", "api_key"]);
    one_of(&mut errors, "resource_type", &f.resource_type, &["job", "job_group", "run"]);
    if f.actions.is_empty() {
        err(&mut errors, "actions", "at least one scope", json!([]));
    }
    if f.resource_ids.len() > 100 || f.resource_ids.iter().any(|id| !switchyard_shared::ids::is_valid_external_id(id)) {
        err(&mut errors, "resource_ids", "at most 100 resource ids", json!(f.resource_ids));
    }
    if f.tag_selector.len() > 20 || f.tag_selector.iter().any(|(k, v)| !tag_key_ok(k) || v.len() > 1024) {
        err(
            &mut errors,
            "tag_selector",
            "at most 20 pairs; keys 1 to 128 characters, values at most 1024",
            json!(f.tag_selector),
        );
    }
    let pid = f.principal_id.as_str();
    if pid.is_empty() || pid.len() > 256 || pid.chars().any(char::is_control) {
        err(&mut errors, "principal_id", "must be 1 to 256 characters", pid.into());
    } else if errors.is_empty() {
        let found = match f.principal_type.as_str() {
            "role" => store::roles::get(&state.pool, Tenant::Project(project_id), pid).await?.is_some(),
            "api_key" => store::api_keys::exists_in_project(&state.pool, project_id, pid).await?,
            _ => true,
        };
        if !found {
            err(&mut errors, "principal_id", &format!("no such {} in this project", f.principal_type), pid.into());
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(errors))
    }
}

fn check_tag_rules(
    required: &[String],
    allowed: &HashMap<String, Vec<String>>,
    description: Option<&String>,
) -> ApiResult<()> {
    let mut errors = Vec::new();
    check_common(&mut errors, None, description);
    if required.is_empty() && allowed.is_empty() {
        err(&mut errors, "required_keys", "give required_keys or allowed_values", json!([]));
    }
    if required.len() > 64 || required.iter().any(|k| !tag_key_ok(k)) {
        err(&mut errors, "required_keys", "at most 64 keys of 1 to 128 characters", json!(required));
    }
    if allowed.len() > 64
        || allowed
            .iter()
            .any(|(k, vs)| !tag_key_ok(k) || vs.is_empty() || vs.len() > 100 || vs.iter().any(|v| v.len() > 1024))
    {
        err(
            &mut errors,
            "allowed_values",
            "at most 64 keys, each with 1 to 100 values of at most 1024 characters",
            json!(allowed),
        );
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(errors))
    }
}

async fn load_rp(state: &AppState, auth: &Auth, id: &str) -> ApiResult<ResourcePolicyRow> {
    found("resource policy", id, stored::get_resource_policy(&state.pool, tenant(&auth.0), id)).await
}

async fn load_tp(state: &AppState, auth: &Auth, id: &str) -> ApiResult<TagPolicyRow> {
    found("tag policy", id, stored::get_tag_policy(&state.pool, tenant(&auth.0), id)).await
}

impl RpFields {
    fn stored<'a>(&'a self, description: Option<&'a str>, actor: Option<&'a str>) -> stored::ResourcePolicyFields<'a> {
        stored::ResourcePolicyFields {
            name: &self.name,
            description,
            effect: &self.effect,
            principal_type: &self.principal_type,
            principal_id: &self.principal_id,
            actions: &self.actions,
            resource_type: &self.resource_type,
            resource_ids: &self.resource_ids,
            tag_selector: &self.tag_selector,
            actor,
        }
    }
}

/// Commits a resource policy change with its audit event, then tells every
/// api process that access rules moved.
async fn commit_change(
    state: &AppState,
    auth: &Auth,
    tx: sqlx::PgTransaction<'_>,
    change: Change<'_>,
) -> ApiResult<()> {
    let mut tx = tx;
    audit::record(&mut *tx, &auth.0, change).await?;
    tx.commit().await?;
    cache::bump_version(&state.queue).await;
    Ok(())
}

#[OpenApi(tag = "Tag::Policies")]
impl PoliciesApi {
    /// Create a resource policy.
    #[oai(path = "/v1/resource-policies", method = "post")]
    async fn create_resource_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: Json<CreateResourcePolicy>,
    ) -> ApiResult<CreatedResourcePolicy> {
        let b = body.0;
        let project_id = project_of(&auth.0, b.project_id.as_deref())?;
        let f = RpFields {
            name: b.name.trim().to_string(),
            effect: b.effect,
            principal_type: b.principal_type,
            principal_id: b.principal_id,
            actions: check_scopes("body.actions", &b.actions)?,
            resource_type: b.resource_type,
            resource_ids: b.resource_ids.unwrap_or_default(),
            tag_selector: b.tag_selector.unwrap_or_default(),
        };
        super::project_exists(&state, &project_id).await?;
        check_resource_policy(&state, &project_id, &f, b.description.as_ref()).await?;
        let id = switchyard_shared::ids::new_id("rpol");
        let mut tx = state.pool.begin().await?;
        let row = stored::create_resource_policy(
            &mut tx,
            &id,
            &project_id,
            &f.stored(b.description.as_deref(), auth.0.actor_id.as_deref()),
        )
        .await?;
        let details = json!({"name": f.name, "effect": f.effect});
        let change = Change::new(&project_id, "resource_policy.created", ("resource_policy", &id), details);
        commit_change(&state, &auth, tx, change).await?;
        Ok(CreatedResourcePolicy::Created(Json(row.into())))
    }

    /// List a project's resource policies, newest first.
    #[oai(path = "/v1/resource-policies", method = "get")]
    async fn list_resource_policies(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<ResourcePolicy>>> {
        let project_id = project_of(&auth.0, project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = stored::list_resource_policies(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), ResourcePolicy::from)))
    }

    /// Get a resource policy.
    #[oai(path = "/v1/resource-policies/:policy_id", method = "get")]
    async fn get_resource_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        policy_id: Path<String>,
    ) -> ApiResult<Json<ResourcePolicy>> {
        Ok(Json(load_rp(&state, &auth, &policy_id).await?.into()))
    }

    /// Change a resource policy; it applies from the next request on.
    #[oai(path = "/v1/resource-policies/:policy_id", method = "patch")]
    async fn update_resource_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        policy_id: Path<String>,
        body: Json<UpdateResourcePolicy>,
    ) -> ApiResult<Json<ResourcePolicy>> {
        let cur = load_rp(&state, &auth, &policy_id).await?;
        let b = body.0;
        let actions = match &b.actions {
            Some(a) => check_scopes("body.actions", a)?,
            None => cur.actions.clone(),
        };
        let f = RpFields {
            name: b.name.map(|n| n.trim().to_string()).unwrap_or(cur.name.clone()),
            effect: b.effect.unwrap_or(cur.effect.clone()),
            principal_type: b.principal_type.unwrap_or(cur.principal_type.clone()),
            principal_id: b.principal_id.unwrap_or(cur.principal_id.clone()),
            actions,
            resource_type: b.resource_type.unwrap_or(cur.resource_type.clone()),
            resource_ids: b.resource_ids.unwrap_or(cur.resource_ids.clone()),
            tag_selector: b.tag_selector.unwrap_or(cur.tag_selector.clone()),
        };
        let description = patch(b.description, cur.description.clone());
        check_resource_policy(&state, &cur.project_id, &f, description.as_ref()).await?;
        let mut tx = state.pool.begin().await?;
        let row = stored::update_resource_policy(
            &mut tx,
            &cur.id,
            &f.stored(description.as_deref(), auth.0.actor_id.as_deref()),
        )
        .await?;
        let details = json!({"name": f.name, "effect": f.effect});
        let change = Change::new(&cur.project_id, "resource_policy.updated", ("resource_policy", &cur.id), details);
        commit_change(&state, &auth, tx, change).await?;
        Ok(Json(row.into()))
    }

    /// Delete a resource policy permanently.
    #[oai(path = "/v1/resource-policies/:policy_id", method = "delete")]
    async fn delete_resource_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        policy_id: Path<String>,
    ) -> ApiResult<Deleted> {
        let cur = load_rp(&state, &auth, &policy_id).await?;
        let mut tx = state.pool.begin().await?;
        stored::delete_resource_policy(&mut tx, &cur.id).await?;
        let details = json!({"name": cur.name});
        let change = Change::new(&cur.project_id, "resource_policy.deleted", ("resource_policy", &cur.id), details);
        commit_change(&state, &auth, tx, change).await?;
        Ok(Deleted::NoContent)
    }

    /// Create a tag policy.
    #[oai(path = "/v1/tag-policies", method = "post")]
    async fn create_tag_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: Json<CreateTagPolicy>,
    ) -> ApiResult<CreatedTagPolicy> {
        let b = body.0;
        let project_id = project_of(&auth.0, b.project_id.as_deref())?;
        let resource_type = b.resource_type.unwrap_or_else(|| "job".into());
        let required = b.required_keys.unwrap_or_default();
        let allowed = b.allowed_values.unwrap_or_default();
        let mut errors = Vec::new();
        one_of(&mut errors, "resource_type", &resource_type, &["job", "workflow"]);
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        check_tag_rules(&required, &allowed, b.description.as_ref())?;
        super::project_exists(&state, &project_id).await?;
        let id = switchyard_shared::ids::new_id("tpol");
        let mut tx = state.pool.begin().await?;
        let fields = stored::TagPolicyFields {
            description: b.description.as_deref(),
            required_keys: &required,
            allowed_values: &allowed,
            actor: auth.0.actor_id.as_deref(),
        };
        let row = stored::create_tag_policy(&mut tx, &id, &project_id, &resource_type, &fields).await?;
        let details = json!({"resource_type": resource_type, "required_keys": required});
        audit::record(&mut *tx, &auth.0, Change::new(&project_id, "tag_policy.created", ("tag_policy", &id), details))
            .await?;
        tx.commit().await?;
        Ok(CreatedTagPolicy::Created(Json(row.into())))
    }

    /// List a project's tag policies, newest first.
    #[oai(path = "/v1/tag-policies", method = "get")]
    async fn list_tag_policies(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<TagPolicy>>> {
        let project_id = project_of(&auth.0, project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = stored::list_tag_policies(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), TagPolicy::from)))
    }

    /// Get a tag policy.
    #[oai(path = "/v1/tag-policies/:policy_id", method = "get")]
    async fn get_tag_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        policy_id: Path<String>,
    ) -> ApiResult<Json<TagPolicy>> {
        Ok(Json(load_tp(&state, &auth, &policy_id).await?.into()))
    }

    /// Change a tag policy. Existing resources are not re-checked; their
    /// next create or update is.
    #[oai(path = "/v1/tag-policies/:policy_id", method = "patch")]
    async fn update_tag_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        policy_id: Path<String>,
        body: Json<UpdateTagPolicy>,
    ) -> ApiResult<Json<TagPolicy>> {
        let cur = load_tp(&state, &auth, &policy_id).await?;
        let b = body.0;
        let required = b.required_keys.unwrap_or(cur.required_keys.clone());
        let allowed = b.allowed_values.unwrap_or(cur.allowed_values.clone());
        let description = patch(b.description, cur.description.clone());
        check_tag_rules(&required, &allowed, description.as_ref())?;
        let mut tx = state.pool.begin().await?;
        let fields = stored::TagPolicyFields {
            description: description.as_deref(),
            required_keys: &required,
            allowed_values: &allowed,
            actor: auth.0.actor_id.as_deref(),
        };
        let row = stored::update_tag_policy(&mut tx, &cur.id, &fields).await?;
        let details = json!({"required_keys": required});
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(&cur.project_id, "tag_policy.updated", ("tag_policy", &cur.id), details),
        )
        .await?;
        tx.commit().await?;
        Ok(Json(row.into()))
    }

    /// Delete a tag policy permanently.
    #[oai(path = "/v1/tag-policies/:policy_id", method = "delete")]
    async fn delete_tag_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        policy_id: Path<String>,
    ) -> ApiResult<Deleted> {
        let cur = load_tp(&state, &auth, &policy_id).await?;
        let mut tx = state.pool.begin().await?;
        stored::delete_tag_policy(&mut tx, &cur.id).await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(&cur.project_id, "tag_policy.deleted", ("tag_policy", &cur.id), json!({})),
        )
        .await?;
        tx.commit().await?;
        Ok(Deleted::NoContent)
    }
}
