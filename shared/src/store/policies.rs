//! Resource policies and tag policies, per project. How they are
//! evaluated is the api's business (`auth::policy`); this is their storage.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::Tenant;

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ResourcePolicyRow {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub description: Option<String>,
    pub effect: String,
    pub principal_type: String,
    pub principal_id: String,
    pub actions: Vec<String>,
    pub resource_type: String,
    pub resource_ids: Vec<String>,
    #[sqlx(json)]
    pub tag_selector: HashMap<String, String>,
    pub created_by: Option<String>,
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const RP_COLS: &str =
    "id, project_id, name, description, effect, principal_type, principal_id, actions, resource_type, \
    resource_ids, tag_selector, created_by, updated_by, created_at, updated_at";

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct TagPolicyRow {
    pub id: String,
    pub project_id: String,
    pub resource_type: String,
    pub description: Option<String>,
    pub required_keys: Vec<String>,
    #[sqlx(json)]
    pub allowed_values: HashMap<String, Vec<String>>,
    pub created_by: Option<String>,
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const TP_COLS: &str =
    "id, project_id, resource_type, description, required_keys, allowed_values, created_by, updated_by, created_at, updated_at";

/// What the evaluation of a resource policy reads.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct PolicyRule {
    pub id: String,
    pub effect: String,
    pub principal_type: String,
    pub principal_id: String,
    pub actions: Vec<String>,
    pub resource_type: String,
    pub resource_ids: Vec<String>,
    #[sqlx(json)]
    pub tag_selector: BTreeMap<String, String>,
}

/// Every resource policy of the project, as rules.
pub async fn rules(pool: &PgPool, project_id: &str) -> Result<Vec<PolicyRule>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, effect, principal_type, principal_id, actions, resource_type, resource_ids, tag_selector
         FROM resource_policies WHERE project_id = $1",
    )
    .bind(project_id)
    .fetch_all(pool)
    .await
}

/// What the enforcement of a tag policy reads.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct TagRule {
    pub id: String,
    pub required_keys: Vec<String>,
    #[sqlx(json)]
    pub allowed_values: BTreeMap<String, Vec<String>>,
}

/// The project's tag policies for one resource type, as rules.
pub async fn tag_rules(pool: &PgPool, project_id: &str, resource_type: &str) -> Result<Vec<TagRule>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, required_keys, allowed_values FROM tag_policies WHERE project_id = $1 AND resource_type = $2",
    )
    .bind(project_id)
    .bind(resource_type)
    .fetch_all(pool)
    .await
}

/// The resource policy, if `tenant` may see it.
pub async fn get_resource_policy(
    pool: &PgPool,
    tenant: Tenant<'_>,
    id: &str,
) -> Result<Option<ResourcePolicyRow>, sqlx::Error> {
    super::get_scoped(pool, "resource_policies", RP_COLS, tenant, id).await
}

/// The project's resource policies, newest first, older than `before`.
pub async fn list_resource_policies(
    pool: &PgPool,
    project_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<ResourcePolicyRow>, sqlx::Error> {
    super::page_of_project(pool, "resource_policies", RP_COLS, project_id, before, limit).await
}

/// A resource policy's content.
pub struct ResourcePolicyFields<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub effect: &'a str,
    pub principal_type: &'a str,
    pub principal_id: &'a str,
    pub actions: &'a [String],
    pub resource_type: &'a str,
    pub resource_ids: &'a [String],
    pub tag_selector: &'a HashMap<String, String>,
    pub actor: Option<&'a str>,
}

/// Maps are stored with their keys in order, so equal maps store equal.
fn sorted<V: Clone>(m: &HashMap<String, V>) -> sqlx::types::Json<BTreeMap<String, V>> {
    sqlx::types::Json(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

pub async fn create_resource_policy(
    conn: &mut PgConnection,
    id: &str,
    project_id: &str,
    f: &ResourcePolicyFields<'_>,
) -> Result<ResourcePolicyRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO resource_policies (id, project_id, name, description, effect, principal_type, principal_id, actions,
            resource_type, resource_ids, tag_selector, created_by, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) RETURNING {RP_COLS}"
    ))
    .bind(id)
    .bind(project_id)
    .bind(f.name)
    .bind(f.description)
    .bind(f.effect)
    .bind(f.principal_type)
    .bind(f.principal_id)
    .bind(f.actions)
    .bind(f.resource_type)
    .bind(f.resource_ids)
    .bind(sorted(f.tag_selector))
    .bind(f.actor)
    .fetch_one(conn)
    .await
}

pub async fn update_resource_policy(
    conn: &mut PgConnection,
    id: &str,
    f: &ResourcePolicyFields<'_>,
) -> Result<ResourcePolicyRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE resource_policies SET name = $2, description = $3, effect = $4, principal_type = $5, principal_id = $6,
            actions = $7, resource_type = $8, resource_ids = $9, tag_selector = $10, updated_by = $11
         WHERE id = $1 RETURNING {RP_COLS}"
    ))
    .bind(id)
    .bind(f.name)
    .bind(f.description)
    .bind(f.effect)
    .bind(f.principal_type)
    .bind(f.principal_id)
    .bind(f.actions)
    .bind(f.resource_type)
    .bind(f.resource_ids)
    .bind(sorted(f.tag_selector))
    .bind(f.actor)
    .fetch_one(conn)
    .await
}

pub async fn delete_resource_policy(conn: &mut PgConnection, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM resource_policies WHERE id = $1").bind(id).execute(conn).await.map(|_| ())
}

/// The tag policy, if `tenant` may see it.
pub async fn get_tag_policy(pool: &PgPool, tenant: Tenant<'_>, id: &str) -> Result<Option<TagPolicyRow>, sqlx::Error> {
    super::get_scoped(pool, "tag_policies", TP_COLS, tenant, id).await
}

/// The project's tag policies, newest first, older than `before`.
pub async fn list_tag_policies(
    pool: &PgPool,
    project_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<TagPolicyRow>, sqlx::Error> {
    super::page_of_project(pool, "tag_policies", TP_COLS, project_id, before, limit).await
}

/// A tag policy's rules.
pub struct TagPolicyFields<'a> {
    pub description: Option<&'a str>,
    pub required_keys: &'a [String],
    pub allowed_values: &'a HashMap<String, Vec<String>>,
    pub actor: Option<&'a str>,
}

pub async fn create_tag_policy(
    conn: &mut PgConnection,
    id: &str,
    project_id: &str,
    resource_type: &str,
    f: &TagPolicyFields<'_>,
) -> Result<TagPolicyRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO tag_policies (id, project_id, resource_type, description, required_keys, allowed_values, created_by, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING {TP_COLS}"
    ))
    .bind(id)
    .bind(project_id)
    .bind(resource_type)
    .bind(f.description)
    .bind(f.required_keys)
    .bind(sorted(f.allowed_values))
    .bind(f.actor)
    .fetch_one(conn)
    .await
}

pub async fn update_tag_policy(
    conn: &mut PgConnection,
    id: &str,
    f: &TagPolicyFields<'_>,
) -> Result<TagPolicyRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE tag_policies SET description = $2, required_keys = $3, allowed_values = $4, updated_by = $5
         WHERE id = $1 RETURNING {TP_COLS}"
    ))
    .bind(id)
    .bind(f.description)
    .bind(f.required_keys)
    .bind(sorted(f.allowed_values))
    .bind(f.actor)
    .fetch_one(conn)
    .await
}

pub async fn delete_tag_policy(conn: &mut PgConnection, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM tag_policies WHERE id = $1").bind(id).execute(conn).await.map(|_| ())
}
