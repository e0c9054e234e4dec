//! Workflow definitions: a workflow's settings, its versions (each an
//! immutable array of steps) and the project's workflow policy. Every
//! change of a workflow, of its settings or of its steps, makes a new
//! version; a version row holds the steps only (the settings are the
//! workflow row's, read live), so a version made by a change of settings
//! alone holds the same steps as the one before it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::{workflow_runs, Tenant};
use crate::domain::cancel_on::CancelOn;
use crate::domain::workflow::{Policy, SavedStep, StepRequest};
use crate::ids::{self, WorkflowId};

/// A workflow as stored, with the steps of its current version.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct WorkflowRecord {
    pub id: WorkflowId,
    pub project_id: String,
    pub name: String,
    pub slug: String,
    pub description: Option<String>,
    pub enabled: bool,
    pub tags: Json<BTreeMap<String, String>>,
    pub cron: Option<String>,
    pub cron_timezone: Option<String>,
    pub max_concurrent_runs: Option<i32>,
    pub max_parallel_steps: Option<i32>,
    pub skip_if_running: bool,
    /// Events that cancel the workflow's unfinished runs (`domain::cancel_on`).
    pub cancel_on: Json<Vec<CancelOn>>,
    pub timeout_secs: Option<i32>,
    pub version_policy: String,
    pub backwards_compatible: bool,
    pub version: i32,
    pub version_id: String,
    pub created_by: Option<String>,
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub steps: Json<Vec<SavedStep>>,
    /// When the current version (and so each of its steps) was made.
    pub steps_created_at: DateTime<Utc>,
}

const SELECT: &str = "SELECT w.id, w.project_id, w.name, w.slug, w.description, w.enabled, w.tags, w.cron,
        w.cron_timezone, w.max_concurrent_runs, w.max_parallel_steps, w.skip_if_running, w.cancel_on, w.timeout_secs,
        w.version_policy, w.backwards_compatible, w.version, w.version_id, w.created_by, w.updated_by,
        w.created_at, w.updated_at, v.steps, v.created_at AS steps_created_at
   FROM workflows w JOIN workflow_versions v ON v.id = w.version_id";

/// What a create or an update writes to the workflow's row.
#[derive(Clone, Debug)]
pub struct WorkflowWrite<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub slug: &'a str,
    pub description: Option<&'a str>,
    pub enabled: bool,
    pub tags: &'a BTreeMap<String, String>,
    pub cron: Option<&'a str>,
    pub cron_timezone: Option<&'a str>,
    pub max_concurrent_runs: Option<i32>,
    pub max_parallel_steps: Option<i32>,
    pub skip_if_running: bool,
    pub cancel_on: &'a [CancelOn],
    pub timeout_secs: Option<i32>,
    pub version_policy: &'a str,
    pub backwards_compatible: bool,
    pub actor: Option<&'a str>,
}

/// A new version: its id and its steps.
#[derive(Clone, Copy, Debug)]
pub struct NewVersion<'a> {
    pub id: &'a str,
    pub steps: &'a [SavedStep],
}

async fn insert_version(
    conn: &mut PgConnection,
    workflow_id: &str,
    version: i32,
    v: NewVersion<'_>,
    actor: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO workflow_versions (id, workflow_id, version, steps, created_by) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(v.id)
    .bind(workflow_id)
    .bind(version)
    .bind(Json(v.steps))
    .bind(actor)
    .execute(conn)
    .await?;
    Ok(())
}

async fn reread(conn: &mut PgConnection, id: &str) -> Result<WorkflowRecord, sqlx::Error> {
    sqlx::query_as(&format!("{SELECT} WHERE w.id = $1")).bind(id).fetch_one(conn).await
}

/// Creates a workflow of `project_id` at version 1, with that version, in
/// the caller's transaction.
pub async fn create(
    conn: &mut PgConnection,
    project_id: &str,
    w: &WorkflowWrite<'_>,
    first: NewVersion<'_>,
) -> Result<WorkflowRecord, sqlx::Error> {
    sqlx::query(
        "INSERT INTO workflows (id, project_id, name, slug, description, enabled, tags, cron, cron_timezone,
            max_concurrent_runs, max_parallel_steps, skip_if_running, timeout_secs, version_policy,
            backwards_compatible, version, version_id, created_by, updated_by, cancel_on)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 1, $16, $17, $17, $18)",
    )
    .bind(w.id)
    .bind(project_id)
    .bind(w.name)
    .bind(w.slug)
    .bind(w.description)
    .bind(w.enabled)
    .bind(Json(w.tags))
    .bind(w.cron)
    .bind(w.cron_timezone)
    .bind(w.max_concurrent_runs)
    .bind(w.max_parallel_steps)
    .bind(w.skip_if_running)
    .bind(w.timeout_secs)
    .bind(w.version_policy)
    .bind(w.backwards_compatible)
    .bind(first.id)
    .bind(w.actor)
    .bind(Json(w.cancel_on))
    .execute(&mut *conn)
    .await?;
    insert_version(conn, w.id, 1, first, w.actor).await?;
    reread(conn, w.id).await
}

/// The live workflow with its row locked until the caller's transaction
/// ends: what an update merges the fields its body leaves out from, so
/// that two updates at once take turns and neither undoes the other's
/// changes. `None`: no live workflow.
pub async fn lock(conn: &mut PgConnection, id: &WorkflowId) -> Result<Option<WorkflowRecord>, sqlx::Error> {
    // The row alone first: a lock taken through the join would, after
    // waiting for an update that moved version_id, recheck the new row
    // against the old version's and find nothing. Once it is held, the
    // read below sees what that update committed.
    let live: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM workflows WHERE id = $1 AND deleted_at IS NULL FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
    if live.is_none() {
        return Ok(None);
    }
    reread(conn, id).await.map(Some)
}

/// What [`update`] did.
#[derive(Clone, Debug)]
pub enum Updated {
    /// Every field and step was already as written: nothing was written,
    /// the version stays.
    Unchanged(WorkflowRecord),
    /// The workflow as it is now, at a new version, and the one it replaced.
    Versioned(WorkflowRecord, Replaced),
}

/// The version an update replaced.
#[derive(Clone, Debug)]
pub struct Replaced {
    pub version_id: String,
    /// Runs active (pending, running or paused) on it at the update.
    pub active_runs: i64,
    /// What differed: the names of the fields, `steps` among them.
    pub changed: Vec<&'static str>,
}

/// The names of the fields of `w` that differ from `cur`'s.
fn changed_fields(cur: &WorkflowRecord, w: &WorkflowWrite<'_>) -> Vec<&'static str> {
    // Spelled out whole, so that a field added to the write cannot be
    // left out of what counts as a change.
    let WorkflowWrite {
        id: _,
        name,
        slug,
        description,
        enabled,
        tags,
        cron,
        cron_timezone,
        max_concurrent_runs,
        max_parallel_steps,
        skip_if_running,
        cancel_on,
        timeout_secs,
        version_policy,
        backwards_compatible,
        actor: _,
    } = *w;
    [
        ("name", cur.name == name),
        ("slug", cur.slug == slug),
        ("description", cur.description.as_deref() == description),
        ("enabled", cur.enabled == enabled),
        ("tags", cur.tags.0 == *tags),
        ("cron", cur.cron.as_deref() == cron),
        ("cron_timezone", cur.cron_timezone.as_deref() == cron_timezone),
        ("max_concurrent_runs", cur.max_concurrent_runs == max_concurrent_runs),
        ("max_parallel_steps", cur.max_parallel_steps == max_parallel_steps),
        ("skip_if_running", cur.skip_if_running == skip_if_running),
        ("cancel_on", cur.cancel_on.0 == cancel_on),
        ("timeout_secs", cur.timeout_secs == timeout_secs),
        ("version_policy", cur.version_policy == version_policy),
        ("backwards_compatible", cur.backwards_compatible == backwards_compatible),
    ]
    .into_iter()
    .filter_map(|(field, same)| (!same).then_some(field))
    .collect()
}

/// Saves `w` over the live workflow, with `steps` as its steps (`None`:
/// its current ones). Any difference, in a setting or in the steps, makes
/// the next version: version + 1, a new version_id and its version row,
/// holding the new steps (each with a new id) or, when only settings
/// changed, the current steps as they are. No difference writes nothing.
/// The row is locked before it is compared, so two concurrent updates
/// make versions n+1 and n+2, never two n+1, and the second compares
/// against what the first wrote. `None`: no live workflow.
pub async fn update(
    conn: &mut PgConnection,
    w: &WorkflowWrite<'_>,
    steps: Option<&[StepRequest]>,
) -> Result<Option<Updated>, sqlx::Error> {
    let Some(cur) = lock(conn, &w.id.into()).await? else { return Ok(None) };
    let mut changed = changed_fields(&cur, w);
    let new_steps = steps.filter(|s| !s.iter().eq(cur.steps.0.iter().map(|c| &c.def)));
    if new_steps.is_some() {
        changed.push("steps");
    }
    if changed.is_empty() {
        return Ok(Some(Updated::Unchanged(cur)));
    }
    let steps: Vec<SavedStep> = match new_steps {
        Some(s) => s.iter().map(|def| SavedStep { id: ids::workflow_step_id(), def: def.clone() }).collect(),
        None => cur.steps.0.clone(),
    };
    let version = cur.version + 1;
    let version_id = ids::workflow_version_id();
    sqlx::query(
        "UPDATE workflows SET name = $2, slug = $3, description = $4, enabled = $5, tags = $6, cron = $7,
            cron_timezone = $8, max_concurrent_runs = $9, max_parallel_steps = $10, skip_if_running = $11,
            timeout_secs = $12, version_policy = $13, backwards_compatible = $14, updated_by = $15,
            version = $16, version_id = $17, cancel_on = $18
         WHERE id = $1",
    )
    .bind(w.id)
    .bind(w.name)
    .bind(w.slug)
    .bind(w.description)
    .bind(w.enabled)
    .bind(Json(w.tags))
    .bind(w.cron)
    .bind(w.cron_timezone)
    .bind(w.max_concurrent_runs)
    .bind(w.max_parallel_steps)
    .bind(w.skip_if_running)
    .bind(w.timeout_secs)
    .bind(w.version_policy)
    .bind(w.backwards_compatible)
    .bind(w.actor)
    .bind(version)
    .bind(&version_id)
    .bind(Json(w.cancel_on))
    .execute(&mut *conn)
    .await?;
    insert_version(conn, w.id, version, NewVersion { id: &version_id, steps: &steps }, w.actor).await?;
    let active_runs = workflow_runs::active_on_version(conn, &cur.version_id).await?;
    let rec = reread(conn, w.id).await?;
    Ok(Some(Updated::Versioned(rec, Replaced { version_id: cur.version_id, active_runs, changed })))
}

/// The live workflow with this id, if the tenant may read it.
pub async fn get(pool: &PgPool, tenant: Tenant<'_>, id: &WorkflowId) -> Result<Option<WorkflowRecord>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    get_in(&mut conn, tenant, id).await
}

/// [`get`] in the caller's transaction.
pub async fn get_in(
    conn: &mut PgConnection,
    tenant: Tenant<'_>,
    id: &str,
) -> Result<Option<WorkflowRecord>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{SELECT} WHERE w.id = $1 AND w.deleted_at IS NULL AND ($2::text IS NULL OR w.project_id = $2)"
    ))
    .bind(id)
    .bind(tenant.filter())
    .fetch_optional(conn)
    .await
}

/// Whether `version_id` is a version of the workflow.
pub async fn has_version(pool: &PgPool, workflow_id: &WorkflowId, version_id: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM workflow_versions WHERE id = $1 AND workflow_id = $2)")
        .bind(version_id)
        .bind(workflow_id)
        .fetch_one(pool)
        .await
}

/// The project's live workflows, newest first, older than `before`.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<WorkflowRecord>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{SELECT} WHERE w.project_id = $1 AND w.deleted_at IS NULL AND ($2::text IS NULL OR w.id < $2)
         ORDER BY w.id DESC LIMIT $3"
    ))
    .bind(project_id)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Marks a workflow deleted; its slug is free again.
pub async fn soft_delete(conn: &mut PgConnection, id: &WorkflowId, actor: Option<&str>) -> Result<bool, sqlx::Error> {
    let done =
        sqlx::query("UPDATE workflows SET deleted_at = now(), updated_by = $2 WHERE id = $1 AND deleted_at IS NULL")
            .bind(id)
            .bind(actor)
            .execute(conn)
            .await?;
    Ok(done.rows_affected() == 1)
}

/// One version of a workflow: its steps as they were.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct WorkflowVersionRow {
    pub id: String,
    pub workflow_id: String,
    pub version: i32,
    pub steps: Json<Vec<SavedStep>>,
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// The workflow's versions, newest first, older than `before`.
pub async fn versions(
    pool: &PgPool,
    workflow_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<WorkflowVersionRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, workflow_id, version, steps, created_by, created_at FROM workflow_versions
          WHERE workflow_id = $1 AND ($2::text IS NULL OR id < $2) ORDER BY id DESC LIMIT $3",
    )
    .bind(workflow_id)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The version `id` of the workflow, if it is one of that workflow's:
/// a version of another workflow is missing here.
pub async fn version(
    pool: &PgPool,
    workflow_id: &WorkflowId,
    id: &str,
) -> Result<Option<WorkflowVersionRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, workflow_id, version, steps, created_by, created_at FROM workflow_versions
          WHERE id = $1 AND workflow_id = $2",
    )
    .bind(id)
    .bind(workflow_id)
    .fetch_optional(pool)
    .await
}

/// Of `ids`, those that are live jobs of the project (what a step's
/// job_id and compensation_job_id may name).
pub async fn live_jobs(pool: &PgPool, project_id: &str, ids: &[String]) -> Result<Vec<String>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    sqlx::query_scalar("SELECT id FROM jobs WHERE project_id = $1 AND id = ANY($2) AND deleted_at IS NULL")
        .bind(project_id)
        .bind(ids)
        .fetch_all(pool)
        .await
}

/// Of `ids`, the live workflows of the project, each with the
/// sub_workflow_ids its current version's steps name.
pub async fn sub_workflows(
    pool: &PgPool,
    project_id: &str,
    ids: &[String],
) -> Result<Vec<(String, Vec<String>)>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    sqlx::query_as(
        "SELECT w.id,
                COALESCE(array_agg(s.step->>'sub_workflow_id') FILTER (WHERE s.step ? 'sub_workflow_id'),
                         '{}'::text[])
           FROM workflows w
           JOIN workflow_versions v ON v.id = w.version_id
           LEFT JOIN LATERAL jsonb_array_elements(v.steps) AS s(step) ON true
          WHERE w.project_id = $1 AND w.id = ANY($2) AND w.deleted_at IS NULL
          GROUP BY w.id",
    )
    .bind(project_id)
    .bind(ids)
    .fetch_all(pool)
    .await
}

/// A project's workflow policy as stored.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct PolicyRow {
    pub project_id: String,
    pub policy: Json<Policy>,
    pub updated_by: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// The project's workflow policy, if one was ever set.
pub async fn policy(pool: &PgPool, project_id: &str) -> Result<Option<PolicyRow>, sqlx::Error> {
    sqlx::query_as("SELECT project_id, policy, updated_by, updated_at FROM workflow_policies WHERE project_id = $1")
        .bind(project_id)
        .fetch_optional(pool)
        .await
}

/// Sets the project's workflow policy, replacing any earlier one.
pub async fn put_policy(
    conn: &mut PgConnection,
    project_id: &str,
    policy: &Policy,
    actor: Option<&str>,
) -> Result<PolicyRow, sqlx::Error> {
    sqlx::query_as(
        "INSERT INTO workflow_policies (project_id, policy, updated_by) VALUES ($1, $2, $3)
         ON CONFLICT (project_id) DO UPDATE SET policy = EXCLUDED.policy, updated_by = EXCLUDED.updated_by,
            updated_at = now()
         RETURNING project_id, policy, updated_by, updated_at",
    )
    .bind(project_id)
    .bind(Json(policy))
    .bind(actor)
    .fetch_one(conn)
    .await
}
