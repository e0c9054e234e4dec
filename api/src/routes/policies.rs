//! Resource policies and tag policies, per project: their operations and
//! the checks of their bodies. How they are evaluated: `auth::policy`
//! (and docs/access-control.md).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::{json, Value};
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::{FieldError, FieldErrors};
use switchyard_shared::store::policies::{self as stored, ResourcePolicyRow, TagPolicyRow};
use switchyard_shared::store::{self, Tenant};

use super::{check_scopes, found, label_rule, patch, project_of, tenant, view_from_row, Created, Tag};
use crate::audit::{self, Change};
use crate::auth::{cache, policy, Auth};
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

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
    /// Scopes the policy governs (an operation names its own in `x-required-scope`); `*` for all.
    pub actions: Vec<String>,
    /// `job`, `job_group`, `run` or `workflow` (which also governs the
    /// workflow's runs).
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
    #[oai(nullable)]
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
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
    pub required_keys: Option<Vec<String>>,
    pub allowed_values: Option<HashMap<String, Vec<String>>>,
}

/// The value rules of the resource and tag policies' creates and updates
/// (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{count, entries, map, text};
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::{Items, Keys, Property, Values};
    let mut r = vec![
        (Property("CreateResourcePolicy", "project_id"), text(&ID)),
        (Property("CreateTagPolicy", "project_id"), text(&ID)),
    ];
    for schema in ["CreateResourcePolicy", "UpdateResourcePolicy"] {
        r.push((Property(schema, "name"), text(&super::LABEL)));
        r.push((Property(schema, "description"), text(&super::DESCRIPTION)));
        r.push((Property(schema, "principal_id"), text(&PRINCIPAL_ID)));
        r.push((Property(schema, "actions"), count(1, usize::MAX)));
        r.push((Property(schema, "resource_ids"), count(0, MAX_RESOURCE_IDS)));
        r.push((Items(schema, "resource_ids"), text(&ID)));
        r.extend(map(schema, "tag_selector", MAX_SELECTOR_PAIRS, &TAG_KEY, &TAG_VALUE));
    }
    for schema in ["CreateTagPolicy", "UpdateTagPolicy"] {
        r.push((Property(schema, "description"), text(&super::DESCRIPTION)));
        r.push((Property(schema, "required_keys"), count(0, MAX_TAG_KEYS)));
        r.push((Items(schema, "required_keys"), text(&TAG_KEY)));
        r.push((Property(schema, "allowed_values"), entries(MAX_TAG_KEYS)));
        r.push((Keys(schema, "allowed_values"), text(&TAG_KEY)));
        let (fewest, most) = ALLOWED_VALUES;
        let mut values = count(fewest, most);
        values["items"] = text(&TAG_VALUE);
        values["items"]["type"] = json!("string");
        r.push((Values(schema, "allowed_values"), values));
    }
    r
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

/// The closed sets of policies' fields.
pub const EFFECTS: [&str; 2] = ["allow", "deny"];
pub const PRINCIPAL_TYPES: [&str; 3] = ["role", "member", "api_key"];
pub const RESOURCE_TYPES: [&str; 4] = ["job", "job_group", "run", "workflow"];
pub const TAG_RESOURCE_TYPES: [&str; 2] = ["job", "workflow"];
/// A tag key (of a selector, a required key, an allowed value's key), a
/// selector's value, an allowed value, a principal id.
pub const TAG_KEY: Text = Text::printable(1, 128);
pub const TAG_VALUE: Text = Text::stored(0, 1024);
pub const PRINCIPAL_ID: Text = Text::printable(1, 256);
/// Most resource ids and selector pairs of a resource policy; most
/// required keys, allowed keys, and values per allowed key of a tag policy.
pub const MAX_RESOURCE_IDS: usize = 100;
pub const MAX_SELECTOR_PAIRS: usize = 20;
pub const MAX_TAG_KEYS: usize = 64;
pub const ALLOWED_VALUES: (usize, usize) = (1, 100);

fn one_of(e: &mut FieldErrors, field: &str, v: &str, allowed: &[&str]) {
    e.check(allowed.contains(&v), format!("body.{field}"), format!("must be one of {allowed:?}"), Some(v.into()));
}

/// A policy's description; unlike elsewhere its failure carries `"value": null`.
fn description_rule(e: &mut FieldErrors, description: Option<&str>) {
    let ok = description.is_none_or(|d| super::DESCRIPTION.ok(d));
    let message = format!("at most {} characters", super::DESCRIPTION.max);
    e.check(ok, "body.description", message, Some(Value::Null));
}

fn tag_key_ok(k: &str) -> bool {
    TAG_KEY.ok(k)
}

/// A resource policy as it will be stored: the request's fields over the
/// current policy's.
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

/// Every check of a resource policy that needs no database, in the order
/// the failures are listed.
fn validate_resource_policy(f: &RpFields, description: Option<&str>) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    label_rule(&mut e, &f.name, &super::LABEL);
    description_rule(&mut e, description);
    one_of(&mut e, "effect", &f.effect, &EFFECTS);
    one_of(&mut e, "principal_type", &f.principal_type, &PRINCIPAL_TYPES);
    one_of(&mut e, "resource_type", &f.resource_type, &RESOURCE_TYPES);
    e.check(!f.actions.is_empty(), "body.actions", "at least one scope", Some(json!([])));
    let ids_ok = f.resource_ids.len() <= MAX_RESOURCE_IDS
        && f.resource_ids.iter().all(|id| switchyard_shared::ids::is_valid_external_id(id));
    e.check(ids_ok, "body.resource_ids", "at most 100 resource ids", Some(json!(f.resource_ids)));
    let selector_ok = f.tag_selector.len() <= MAX_SELECTOR_PAIRS
        && f.tag_selector.iter().all(|(k, v)| tag_key_ok(k) && TAG_VALUE.ok(v));
    e.check(
        selector_ok,
        "body.tag_selector",
        "at most 20 pairs; keys 1 to 128 characters, values at most 1024",
        Some(json!(f.tag_selector)),
    );
    let pid = f.principal_id.as_str();
    let pid_ok = PRINCIPAL_ID.ok(pid);
    e.check(pid_ok, "body.principal_id", "must be 1 to 256 characters", Some(pid.into()));
    e.finish()
}

/// Validates a whole policy; the principal must exist in the project
/// (a member's user id need not: the policy may precede the member). The
/// principal is looked up only for an otherwise valid policy.
async fn check_resource_policy(
    state: &AppState,
    project_id: &str,
    f: &RpFields,
    description: Option<&str>,
) -> ApiResult<()> {
    validate_resource_policy(f, description)?;
    let pid = f.principal_id.as_str();
    let found = match f.principal_type.as_str() {
        "role" => store::roles::get(&state.pool, Tenant::Project(project_id), pid).await?.is_some(),
        "api_key" => store::api_keys::exists_in_project(&state.pool, project_id, pid).await?,
        _ => true,
    };
    if !found {
        let message = format!("no such {} in this project", f.principal_type);
        return Err(ApiError::invalid_field("body.principal_id", message, Some(pid.into())));
    }
    Ok(())
}

/// A tag policy's resource type, checked before its rules.
fn validate_tag_resource_type(resource_type: &str) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    one_of(&mut e, "resource_type", resource_type, &TAG_RESOURCE_TYPES);
    e.finish()
}

/// A tag policy's rules: at least one, each key and value bounded.
fn validate_tag_rules(
    required: &[String],
    allowed: &HashMap<String, Vec<String>>,
    description: Option<&str>,
) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    description_rule(&mut e, description);
    let some = !required.is_empty() || !allowed.is_empty();
    e.check(some, "body.required_keys", "give required_keys or allowed_values", Some(json!([])));
    let required_ok = required.len() <= MAX_TAG_KEYS && required.iter().all(|k| tag_key_ok(k));
    e.check(required_ok, "body.required_keys", "at most 64 keys of 1 to 128 characters", Some(json!(required)));
    let (fewest, most) = ALLOWED_VALUES;
    let allowed_ok = allowed.len() <= MAX_TAG_KEYS
        && allowed
            .iter()
            .all(|(k, vs)| tag_key_ok(k) && (fewest..=most).contains(&vs.len()) && vs.iter().all(|v| TAG_VALUE.ok(v)));
    e.check(
        allowed_ok,
        "body.allowed_values",
        "at most 64 keys, each with 1 to 100 values of at most 1024 characters",
        Some(json!(allowed)),
    );
    e.finish()
}

async fn load_rp(state: &AppState, auth: &Auth, id: &str) -> ApiResult<ResourcePolicyRow> {
    found("resource policy", id, stored::get_resource_policy(&state.pool, tenant(&auth.0), id)).await
}

/// A policy that names the caller (its key, its member id, one of its
/// roles) is out of its reach: else `rbac:manage` would lift the deny that
/// restricts it and then do what it forbade. Another admin changes it.
fn not_about_the_caller(auth: &Auth, rp: &ResourcePolicyRow) -> ApiResult<()> {
    if auth.0.scopes.is_some() && policy::names_principal(&auth.0, &rp.principal_type, &rp.principal_id) {
        return Err(ApiError::forbidden(
            "a credential cannot change or delete a resource policy that names it (its key, member id or role)",
        ));
    }
    Ok(())
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
    #[oai(path = "/v1/resource-policies", method = "post", operation_id = "createResourcePolicy")]
    async fn create_resource_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<CreateResourcePolicy>,
    ) -> ApiResult<Created<ResourcePolicy>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
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
        check_resource_policy(&state, &project_id, &f, b.description.as_deref()).await?;
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
        Ok(Created::Created(Json(row.into())))
    }

    /// List a project's resource policies, newest first.
    #[oai(path = "/v1/resource-policies", method = "get", operation_id = "listResourcePolicies")]
    async fn list_resource_policies(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<ResourcePolicy>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = stored::list_resource_policies(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), ResourcePolicy::from)))
    }

    /// Get a resource policy.
    #[oai(path = "/v1/resource-policies/:policy_id", method = "get", operation_id = "getResourcePolicy")]
    async fn get_resource_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        policy_id: Path<String>,
    ) -> ApiResult<Json<ResourcePolicy>> {
        Ok(Json(load_rp(&state, &auth, &policy_id).await?.into()))
    }

    /// Change a resource policy; it applies from the next request on. 403
    /// when the policy names the caller (its key, member id or role).
    #[oai(path = "/v1/resource-policies/:policy_id", method = "patch", operation_id = "updateResourcePolicy")]
    async fn update_resource_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        policy_id: Path<String>,
        body: JsonBody<UpdateResourcePolicy>,
    ) -> ApiResult<Json<ResourcePolicy>> {
        let cur = load_rp(&state, &auth, &policy_id).await?;
        not_about_the_caller(&auth, &cur)?;
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
        check_resource_policy(&state, &cur.project_id, &f, description.as_deref()).await?;
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

    /// Delete a resource policy permanently. 403 when the policy names the
    /// caller (its key, member id or role): another credential lifts it.
    #[oai(path = "/v1/resource-policies/:policy_id", method = "delete", operation_id = "deleteResourcePolicy")]
    async fn delete_resource_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        policy_id: Path<String>,
    ) -> ApiResult<Deleted> {
        let cur = load_rp(&state, &auth, &policy_id).await?;
        not_about_the_caller(&auth, &cur)?;
        let mut tx = state.pool.begin().await?;
        stored::delete_resource_policy(&mut tx, &cur.id).await?;
        let details = json!({"name": cur.name});
        let change = Change::new(&cur.project_id, "resource_policy.deleted", ("resource_policy", &cur.id), details);
        commit_change(&state, &auth, tx, change).await?;
        Ok(Deleted::NoContent)
    }

    /// Create a tag policy.
    #[oai(path = "/v1/tag-policies", method = "post", operation_id = "createTagPolicy")]
    async fn create_tag_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<CreateTagPolicy>,
    ) -> ApiResult<Created<TagPolicy>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        let resource_type = b.resource_type.unwrap_or_else(|| "job".into());
        let required = b.required_keys.unwrap_or_default();
        let allowed = b.allowed_values.unwrap_or_default();
        validate_tag_resource_type(&resource_type)?;
        validate_tag_rules(&required, &allowed, b.description.as_deref())?;
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
        Ok(Created::Created(Json(row.into())))
    }

    /// List a project's tag policies, newest first.
    #[oai(path = "/v1/tag-policies", method = "get", operation_id = "listTagPolicies")]
    async fn list_tag_policies(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<TagPolicy>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = stored::list_tag_policies(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), TagPolicy::from)))
    }

    /// Get a tag policy.
    #[oai(path = "/v1/tag-policies/:policy_id", method = "get", operation_id = "getTagPolicy")]
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
    #[oai(path = "/v1/tag-policies/:policy_id", method = "patch", operation_id = "updateTagPolicy")]
    async fn update_tag_policy(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        policy_id: Path<String>,
        body: JsonBody<UpdateTagPolicy>,
    ) -> ApiResult<Json<TagPolicy>> {
        let cur = load_tp(&state, &auth, &policy_id).await?;
        let b = body.0;
        let required = b.required_keys.unwrap_or(cur.required_keys.clone());
        let allowed = b.allowed_values.unwrap_or(cur.allowed_values.clone());
        let description = patch(b.description, cur.description.clone());
        validate_tag_rules(&required, &allowed, description.as_deref())?;
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
    #[oai(path = "/v1/tag-policies/:policy_id", method = "delete", operation_id = "deleteTagPolicy")]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|f| f.location.as_str()).collect()
    }

    fn policy() -> RpFields {
        RpFields {
            name: "no prod".into(),
            effect: "deny".into(),
            principal_type: "api_key".into(),
            principal_id: "key_1".into(),
            actions: vec!["jobs:trigger".into()],
            resource_type: "job".into(),
            resource_ids: vec![],
            tag_selector: [("env".to_string(), "prod".to_string())].into(),
        }
    }

    #[test]
    fn a_resource_policy_reports_every_bad_field_in_order() {
        assert_eq!(validate_resource_policy(&policy(), Some("why")), Ok(()));
        let bad = RpFields {
            name: " ".into(),
            effect: "maybe".into(),
            principal_type: "group".into(),
            principal_id: String::new(),
            actions: vec![],
            resource_type: "cluster".into(),
            resource_ids: vec!["not an id!".into()],
            tag_selector: [(String::new(), "v".to_string())].into(),
        };
        let got = validate_resource_policy(&bad, Some(&"d".repeat(2001))).unwrap_err();
        let expected = [
            "body.name",
            "body.description",
            "body.effect",
            "body.principal_type",
            "body.resource_type",
            "body.actions",
            "body.resource_ids",
            "body.tag_selector",
            "body.principal_id",
        ];
        assert_eq!(at(&got), expected);
        assert_eq!(got[1].value, Some(Value::Null), "a policy's description failure says value null");
        assert_eq!(got[2].message, r#"must be one of ["allow", "deny"]"#);
        let too_many = RpFields { resource_ids: vec!["job_a".into(); 101], ..policy() };
        assert_eq!(at(&validate_resource_policy(&too_many, None).unwrap_err()), ["body.resource_ids"]);
    }

    #[test]
    fn a_tag_policy_needs_a_known_type_and_some_bounded_rule() {
        assert_eq!(validate_tag_resource_type("workflow"), Ok(()));
        assert_eq!(at(&validate_tag_resource_type("run").unwrap_err()), ["body.resource_type"]);
        let allowed: HashMap<String, Vec<String>> = [("env".to_string(), vec!["prod".to_string()])].into();
        assert_eq!(validate_tag_rules(&["team".into()], &HashMap::new(), None), Ok(()));
        assert_eq!(validate_tag_rules(&[], &allowed, None), Ok(()));
        let none = validate_tag_rules(&[], &HashMap::new(), None).unwrap_err();
        assert_eq!(
            none,
            [FieldError::new("body.required_keys", "give required_keys or allowed_values", Some(json!([])))]
        );
        let empty_values: HashMap<String, Vec<String>> = [("env".to_string(), vec![])].into();
        let got = validate_tag_rules(&["".into()], &empty_values, Some(&"d".repeat(2001))).unwrap_err();
        assert_eq!(at(&got), ["body.description", "body.required_keys", "body.allowed_values"]);
    }
}
