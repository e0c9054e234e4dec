//! Jobs: create, read, list, update (a new version each time), delete,
//! versions, and trigger (DECISIONS §2, SPEC §2.4).

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::{JobSpec, RateLimitKey};
use switchyard_shared::queue::WakeLoop;
use switchyard_shared::store::{self, transitions, JobRecord};

use super::runs::{self as run_routes, JobRun};
use super::{check_id, project_of, visible, Tag};
use crate::audit::{self, Change};
use crate::auth::policy::{self, Resource};
use crate::auth::Auth;
use crate::error::{ApiError, ApiResult, ErrorDetail};
use crate::pagination::{self, Page};
use crate::state::AppState;

pub struct JobsApi;

/// A named rate limit shared by every job of the project that names it:
/// one dispatch log per (project, name), and each job admits a dispatch
/// while that log holds fewer than its own `max` entries in its own
/// `window_secs`. Give every job the same numbers for a name.
#[derive(Object, Clone)]
#[oai(deny_unknown_fields)]
pub struct RateLimitKeyBody {
    /// 1 to 128 letters, digits, `_`, `-`, `.` or `:`.
    pub name: String,
    pub max: i64,
    /// 1 to 86400.
    pub window_secs: i64,
}

/// A job (SPEC §2.4). `webhook_secret` is write-only and never returned.
#[derive(Object)]
pub struct Job {
    pub id: String,
    pub project_id: String,
    #[oai(skip_serializing_if_is_none)]
    pub group_id: Option<String>,
    pub name: String,
    pub slug: String,
    #[oai(skip_serializing_if_is_none)]
    pub description: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub cron: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub timezone: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub execution_window_cron: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub payload_schema: Option<Value>,
    pub tags: HashMap<String, String>,
    pub endpoint_url: String,
    #[oai(skip_serializing_if_is_none)]
    pub fallback_endpoint_url: Option<String>,
    pub max_attempts: i64,
    pub timeout_secs: i64,
    /// 0: no cap.
    pub max_concurrency: i64,
    /// 0: no cap per concurrency key.
    pub max_concurrency_per_key: i64,
    pub rate_limit_max: i64,
    pub rate_limit_window_secs: i64,
    pub rate_limit_keys: Vec<RateLimitKeyBody>,
    pub default_run_metadata: HashMap<String, String>,
    pub dedup_window_secs: i64,
    pub run_ttl_secs: i64,
    pub enabled: bool,
    /// Set by the group's pause-all: runs are accepted and wait until resume-all.
    pub paused: bool,
    #[oai(skip_serializing_if_is_none)]
    pub webhook_url: Option<String>,
    /// Whether a webhook_secret is set (the secret itself is never returned).
    pub has_webhook_secret: bool,
    pub retry_strategy: String,
    pub retry_delays_secs: Vec<i64>,
    /// Base delay of the fixed, linear and exponential strategies.
    pub retry_initial_delay_secs: i64,
    /// Upper bound of any retry delay.
    pub retry_max_delay_secs: i64,
    #[oai(skip_serializing_if_is_none)]
    pub environment_id: Option<String>,
    pub version: i64,
    pub version_id: String,
    /// `pin`: a run dispatches with the version it was triggered on; `latest`: with the current one.
    pub version_policy: String,
    pub backwards_compatible: bool,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

pub fn job_view(r: JobRecord) -> Job {
    let s = r.spec.0;
    Job {
        id: r.id,
        project_id: r.project_id,
        group_id: r.group_id,
        name: r.name,
        slug: r.slug,
        description: s.description,
        cron: s.cron,
        timezone: s.timezone,
        execution_window_cron: s.execution_window_cron,
        payload_schema: s.payload_schema,
        tags: s.tags.into_iter().collect(),
        endpoint_url: s.endpoint_url,
        fallback_endpoint_url: s.fallback_endpoint_url,
        max_attempts: s.max_attempts,
        timeout_secs: s.timeout_secs,
        max_concurrency: s.max_concurrency,
        max_concurrency_per_key: s.max_concurrency_per_key,
        rate_limit_max: s.rate_limit_max,
        rate_limit_window_secs: s.rate_limit_window_secs,
        rate_limit_keys: s
            .rate_limit_keys
            .into_iter()
            .map(|k| RateLimitKeyBody { name: k.name, max: k.max, window_secs: k.window_secs })
            .collect(),
        default_run_metadata: s.default_run_metadata.into_iter().collect(),
        dedup_window_secs: s.dedup_window_secs,
        run_ttl_secs: s.run_ttl_secs,
        enabled: r.enabled,
        paused: r.paused,
        webhook_url: s.webhook_url,
        has_webhook_secret: s.webhook_secret.is_some(),
        retry_strategy: s.retry_strategy,
        retry_delays_secs: s.retry_delays_secs,
        retry_initial_delay_secs: s.retry_initial_delay_secs,
        retry_max_delay_secs: s.retry_max_delay_secs,
        environment_id: s.environment_id,
        version: r.version.into(),
        version_id: r.version_id,
        version_policy: s.version_policy,
        backwards_compatible: s.backwards_compatible,
        created_by: r.created_by,
        updated_by: r.updated_by,
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

/// Create a job. Only `name` and `endpoint_url` are required.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateJob {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    pub group_id: Option<String>,
    pub name: String,
    /// Unique in the project; derived from the name when absent.
    pub slug: Option<String>,
    pub description: Option<String>,
    pub endpoint_url: String,
    /// Tried, within the same attempt, when endpoint_url refuses the connection.
    pub fallback_endpoint_url: Option<String>,
    /// 5 fields, or 6 with seconds first: fires a run (triggered_by `cron`)
    /// on every tick, once however many schedulers run. See the API
    /// description for missed ticks and daylight-saving changes.
    pub cron: Option<String>,
    /// IANA zone of cron and execution_window_cron (default UTC).
    pub timezone: Option<String>,
    /// Runs (of any origin) become due only in the minutes this expression
    /// matches; outside it they wait as `pending`.
    pub execution_window_cron: Option<String>,
    /// JSON Schema every trigger payload must satisfy (422 otherwise); must
    /// itself be a valid schema, without remote `$ref`s.
    pub payload_schema: Option<Value>,
    pub tags: Option<HashMap<String, String>>,
    /// Default 3.
    pub max_attempts: Option<i64>,
    /// Default 30.
    pub timeout_secs: Option<i64>,
    /// Runs of the job in flight at once (0: no cap).
    pub max_concurrency: Option<i64>,
    /// Runs in flight at once per concurrency_key (0: no cap).
    pub max_concurrency_per_key: Option<i64>,
    /// At most this many dispatches in any window of rate_limit_window_secs;
    /// limited runs wait, they are never dropped.
    pub rate_limit_max: Option<i64>,
    /// 1 to 86400; set together with rate_limit_max.
    pub rate_limit_window_secs: Option<i64>,
    /// Named limits shared by every job of the project naming them.
    pub rate_limit_keys: Option<Vec<RateLimitKeyBody>>,
    pub default_run_metadata: Option<HashMap<String, String>>,
    /// A trigger whose payload equals that of a run of the job created in
    /// the last this-many seconds returns that run (200) instead.
    pub dedup_window_secs: Option<i64>,
    /// A run not started this many seconds after it was due becomes `expired`.
    pub run_ttl_secs: Option<i64>,
    /// Default true.
    pub enabled: Option<bool>,
    pub webhook_url: Option<String>,
    /// HMAC key signing dispatches and webhooks; write-only.
    pub webhook_secret: Option<String>,
    /// fixed, linear, exponential (default), custom or none.
    pub retry_strategy: Option<String>,
    pub retry_delays_secs: Option<Vec<i64>>,
    /// Default 1.
    pub retry_initial_delay_secs: Option<i64>,
    /// Default 3600.
    pub retry_max_delay_secs: Option<i64>,
    pub environment_id: Option<String>,
    /// pin (default) or latest.
    pub version_policy: Option<String>,
    pub backwards_compatible: Option<bool>,
}

/// Change a job: absent fields keep their value, `null` clears an optional
/// one. Every accepted change makes a new version.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UpdateJob {
    pub group_id: MaybeUndefined<String>,
    pub name: Option<String>,
    pub slug: Option<String>,
    pub description: MaybeUndefined<String>,
    pub endpoint_url: Option<String>,
    pub fallback_endpoint_url: MaybeUndefined<String>,
    pub cron: MaybeUndefined<String>,
    pub timezone: MaybeUndefined<String>,
    pub execution_window_cron: MaybeUndefined<String>,
    pub payload_schema: MaybeUndefined<Value>,
    pub tags: Option<HashMap<String, String>>,
    pub max_attempts: Option<i64>,
    pub timeout_secs: Option<i64>,
    pub max_concurrency: Option<i64>,
    pub max_concurrency_per_key: Option<i64>,
    pub rate_limit_max: Option<i64>,
    pub rate_limit_window_secs: Option<i64>,
    pub rate_limit_keys: Option<Vec<RateLimitKeyBody>>,
    pub default_run_metadata: Option<HashMap<String, String>>,
    pub dedup_window_secs: Option<i64>,
    pub run_ttl_secs: Option<i64>,
    pub enabled: Option<bool>,
    pub webhook_url: MaybeUndefined<String>,
    pub webhook_secret: MaybeUndefined<String>,
    pub retry_strategy: Option<String>,
    pub retry_delays_secs: Option<Vec<i64>>,
    pub retry_initial_delay_secs: Option<i64>,
    pub retry_max_delay_secs: Option<i64>,
    pub environment_id: MaybeUndefined<String>,
    pub version_policy: Option<String>,
    pub backwards_compatible: Option<bool>,
}

/// One version of a job: the definition as it was.
#[derive(Object)]
pub struct JobVersion {
    pub id: String,
    pub job_id: String,
    pub version: i64,
    pub name: String,
    pub slug: String,
    pub enabled: bool,
    #[oai(skip_serializing_if_is_none)]
    pub group_id: Option<String>,
    /// The definition, webhook_secret left out.
    pub definition: Value,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(ApiResponse)]
pub enum CreatedJob {
    #[oai(status = 201)]
    Created(Json<Job>),
}

#[derive(ApiResponse)]
pub enum Deleted {
    /// Deleted; its unfinished runs were cancelled.
    #[oai(status = 204)]
    NoContent,
}

#[derive(ApiResponse)]
pub enum Triggered {
    /// A new run.
    #[oai(status = 201)]
    Created(Json<JobRun>),
    /// The idempotency key, or (within the job's dedup_window_secs) the
    /// payload, matched an earlier run, which is returned; nothing was created.
    #[oai(status = 200)]
    Existing(Json<JobRun>),
}

/// PATCH semantics: absent keeps, `null` clears, a value replaces.
pub fn patch<T>(v: MaybeUndefined<T>, old: Option<T>) -> Option<T> {
    match v {
        MaybeUndefined::Undefined => old,
        MaybeUndefined::Null => None,
        MaybeUndefined::Value(x) => Some(x),
    }
}

fn to_btree(m: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    m.unwrap_or_default().into_iter().collect()
}

fn rate_keys(v: Vec<RateLimitKeyBody>) -> Vec<RateLimitKey> {
    v.into_iter().map(|k| RateLimitKey { name: k.name, max: k.max, window_secs: k.window_secs }).collect()
}

fn slugify(name: &str) -> String {
    let mut s = String::new();
    for c in name.trim().chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
    }
    s.trim_end_matches('-').chars().take(64).collect()
}

pub fn check_slug(slug: &str, errors: &mut Vec<ErrorDetail>) {
    let ok = !slug.is_empty()
        && slug.len() <= 64
        && slug.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !ok {
        errors.push(ErrorDetail {
            location: "body.slug".into(),
            message: "1 to 64 lowercase letters, digits, '-' or '_'".into(),
            value: Some(slug.into()),
        });
    }
}

pub fn check_name(name: &str, errors: &mut Vec<ErrorDetail>) {
    if name.trim().is_empty() || name.len() > 200 {
        errors.push(ErrorDetail {
            location: "body.name".into(),
            message: "must be 1 to 200 characters".into(),
            value: Some(name.into()),
        });
    }
}

/// The job, if it exists and the caller may see it (404 otherwise), and
/// the project's resource policies let the caller act on it (403 otherwise).
pub async fn load_visible(state: &AppState, auth: &Auth, id: &str) -> ApiResult<JobRecord> {
    check_id("job", id)?;
    let job = store::jobs::get(&state.pool, id).await?;
    admit(state, auth, id, job).await
}

/// [`load_visible`] through the trigger paths' job cache (`job_cache`: a
/// change made elsewhere reaches it within a second).
pub async fn load_for_trigger(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Arc<JobRecord>> {
    check_id("job", id)?;
    let job = state.jobs.get(&state.pool, id).await?;
    admit(state, auth, id, job).await
}

/// The job if the caller may see it and its policies let the caller act.
async fn admit<J: Borrow<JobRecord>>(state: &AppState, auth: &Auth, id: &str, job: Option<J>) -> ApiResult<J> {
    match job {
        Some(j) if visible(&auth.0, &j.borrow().project_id) => {
            let rec = j.borrow();
            let r = Resource { kind: "job", id: Some(&rec.id), tags: &rec.spec.0.tags };
            policy::check(state, &auth.0, &rec.project_id, r).await?;
            Ok(j)
        }
        _ => Err(ApiError::not_found("job", id)),
    }
}

async fn check_group(state: &AppState, project_id: &str, group_id: &str) -> ApiResult<()> {
    let found: Option<(String,)> = sqlx::query_as("SELECT id FROM job_groups WHERE id = $1 AND project_id = $2")
        .bind(group_id)
        .bind(project_id)
        .fetch_optional(&state.pool)
        .await?;
    if found.is_none() {
        return Err(ApiError::invalid_field(
            "body.group_id",
            "no such job group in this project",
            Some(group_id.into()),
        ));
    }
    Ok(())
}

/// Tells the scheduler's cron loop, which sleeps until the next tick it
/// knows of, that an active job with a schedule was created, changed or
/// resumed: its next tick may be sooner.
pub fn wake_cron(state: &AppState, spec: &JobSpec, active: bool) {
    if active && spec.cron.is_some() {
        state.queue.wake(WakeLoop::Cron, None);
    }
}

/// Pushes a job's caps and pause state to Redis. A Redis outage is logged,
/// not failed: the reconciler pushes every job's limits again.
pub async fn sync_limits(state: &AppState, job_id: &str, project_id: &str, spec: &JobSpec, paused: bool) {
    if let Err(e) = state.queue.set_limits(job_id, spec.limits_field(project_id, paused).as_deref()).await {
        tracing::warn!(job_id, error = %e, "could not push job limits to redis; the reconciler will");
    }
}

const VERSION_INSERT: &str =
    "INSERT INTO job_versions (id, job_id, version, name, slug, enabled, group_id, spec, created_by)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

#[OpenApi(tag = "Tag::Jobs")]
impl JobsApi {
    /// Create a job.
    #[oai(path = "/v1/jobs", method = "post")]
    async fn create(&self, state: Data<&AppState>, auth: Auth, body: Json<CreateJob>) -> ApiResult<CreatedJob> {
        let b = body.0;
        let project_id = project_of(&auth.0, b.project_id.as_deref())?;
        let mut errors = Vec::new();
        check_name(&b.name, &mut errors);
        let slug = b.slug.clone().unwrap_or_else(|| slugify(&b.name));
        check_slug(&slug, &mut errors);
        let d = JobSpec::with_endpoint(b.endpoint_url);
        let spec = JobSpec {
            description: b.description,
            fallback_endpoint_url: b.fallback_endpoint_url,
            cron: b.cron,
            timezone: b.timezone,
            execution_window_cron: b.execution_window_cron,
            payload_schema: b.payload_schema,
            tags: to_btree(b.tags),
            max_attempts: b.max_attempts.unwrap_or(d.max_attempts),
            timeout_secs: b.timeout_secs.unwrap_or(d.timeout_secs),
            max_concurrency: b.max_concurrency.unwrap_or(0),
            max_concurrency_per_key: b.max_concurrency_per_key.unwrap_or(0),
            rate_limit_max: b.rate_limit_max.unwrap_or(0),
            rate_limit_window_secs: b.rate_limit_window_secs.unwrap_or(0),
            rate_limit_keys: rate_keys(b.rate_limit_keys.unwrap_or_default()),
            default_run_metadata: to_btree(b.default_run_metadata),
            dedup_window_secs: b.dedup_window_secs.unwrap_or(0),
            run_ttl_secs: b.run_ttl_secs.unwrap_or(0),
            webhook_url: b.webhook_url,
            webhook_secret: b.webhook_secret,
            retry_strategy: b.retry_strategy.unwrap_or(d.retry_strategy.clone()),
            retry_delays_secs: b.retry_delays_secs.unwrap_or_default(),
            retry_initial_delay_secs: b.retry_initial_delay_secs.unwrap_or(d.retry_initial_delay_secs),
            retry_max_delay_secs: b.retry_max_delay_secs.unwrap_or(d.retry_max_delay_secs),
            environment_id: b.environment_id,
            version_policy: b.version_policy.unwrap_or(d.version_policy.clone()),
            backwards_compatible: b.backwards_compatible.unwrap_or(true),
            endpoint_url: d.endpoint_url,
        };
        errors.extend(spec.validate().into_iter().map(ErrorDetail::from));
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        super::project_exists(&state, &project_id).await?;
        if let Some(g) = &b.group_id {
            check_group(&state, &project_id, g).await?;
        }
        if let Some(env) = &spec.environment_id {
            super::environments::check_job_environment(&state.pool, &project_id, env).await?;
        }
        policy::enforce_tags(&state.pool, &project_id, "job", &spec.tags).await?;
        policy::check(&state, &auth.0, &project_id, Resource { kind: "job", id: None, tags: &spec.tags }).await?;
        let id = switchyard_shared::ids::job_id();
        let version_id = switchyard_shared::ids::job_version_id();
        let enabled = b.enabled.unwrap_or(true);
        let actor = auth.0.actor();
        let mut tx = state.pool.begin().await?;
        let rec: JobRecord = sqlx::query_as(&format!(
            "INSERT INTO jobs (id, project_id, group_id, name, slug, enabled, spec, version, version_id, created_by, updated_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9, $9) RETURNING {}",
            store::jobs::JOB_COLUMNS
        ))
        .bind(&id)
        .bind(&project_id)
        .bind(&b.group_id)
        .bind(b.name.trim())
        .bind(&slug)
        .bind(enabled)
        .bind(sqlx::types::Json(&spec))
        .bind(&version_id)
        .bind(&actor)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(VERSION_INSERT)
            .bind(&version_id)
            .bind(&id)
            .bind(1)
            .bind(b.name.trim())
            .bind(&slug)
            .bind(enabled)
            .bind(&b.group_id)
            .bind(sqlx::types::Json(&spec))
            .bind(&actor)
            .execute(&mut *tx)
            .await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change {
                project_id: &project_id,
                action: "job.created",
                resource_type: "job",
                resource_id: &id,
                details: serde_json::json!({"name": rec.name, "slug": rec.slug, "version": rec.version}),
            },
        )
        .await?;
        tx.commit().await?;
        sync_limits(&state, &id, &project_id, &spec, false).await;
        wake_cron(&state, &spec, enabled);
        Ok(CreatedJob::Created(Json(job_view(rec))))
    }

    /// List jobs of a project, newest first; `group_id` narrows to one group.
    #[oai(path = "/v1/jobs", method = "get")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        group_id: Query<Option<String>>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Job>>> {
        let project_id = project_of(&auth.0, project_id.0.as_deref())?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let rows: Vec<JobRecord> = sqlx::query_as(&format!(
            "SELECT {} FROM jobs WHERE project_id = $1 AND deleted_at IS NULL
               AND ($2::text IS NULL OR group_id = $2) AND ($3::text IS NULL OR id < $3)
             ORDER BY id DESC LIMIT $4",
            store::jobs::JOB_COLUMNS
        ))
        .bind(&project_id)
        .bind(&group_id.0)
        .bind(cursor)
        .bind(limit + 1)
        .fetch_all(&state.pool)
        .await?;
        Ok(Json(pagination::page(rows, limit, |r| r.id.clone(), job_view)))
    }

    /// Get a job.
    #[oai(path = "/v1/jobs/:job_id", method = "get")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, job_id: Path<String>) -> ApiResult<Json<Job>> {
        Ok(Json(job_view(load_visible(&state, &auth, &job_id).await?)))
    }

    /// Change a job. Makes a new version; runs pinned to older versions keep theirs.
    #[oai(path = "/v1/jobs/:job_id", method = "patch")]
    async fn update(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        body: Json<UpdateJob>,
    ) -> ApiResult<Json<Job>> {
        let cur = load_visible(&state, &auth, &job_id).await?;
        let b = body.0;
        let mut s = cur.spec.0.clone();
        let mut errors = Vec::new();
        let name = b.name.unwrap_or(cur.name.clone());
        check_name(&name, &mut errors);
        let slug = b.slug.unwrap_or(cur.slug.clone());
        check_slug(&slug, &mut errors);
        let group_id = patch(b.group_id, cur.group_id.clone());
        s.description = patch(b.description, s.description);
        if let Some(v) = b.endpoint_url {
            s.endpoint_url = v;
        }
        s.fallback_endpoint_url = patch(b.fallback_endpoint_url, s.fallback_endpoint_url);
        s.cron = patch(b.cron, s.cron);
        s.timezone = patch(b.timezone, s.timezone);
        s.execution_window_cron = patch(b.execution_window_cron, s.execution_window_cron);
        s.payload_schema = patch(b.payload_schema, s.payload_schema);
        s.webhook_url = patch(b.webhook_url, s.webhook_url);
        s.webhook_secret = patch(b.webhook_secret, s.webhook_secret);
        s.environment_id = patch(b.environment_id, s.environment_id);
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = b.$f { s.$f = v; } )* };
        }
        set!(
            max_attempts,
            timeout_secs,
            max_concurrency,
            max_concurrency_per_key,
            rate_limit_max,
            rate_limit_window_secs,
            dedup_window_secs,
            run_ttl_secs,
            retry_strategy,
            retry_delays_secs,
            retry_initial_delay_secs,
            retry_max_delay_secs,
            version_policy,
            backwards_compatible
        );
        if let Some(t) = b.tags {
            s.tags = t.into_iter().collect();
        }
        if let Some(m) = b.default_run_metadata {
            s.default_run_metadata = m.into_iter().collect();
        }
        if let Some(k) = b.rate_limit_keys {
            s.rate_limit_keys = rate_keys(k);
        }
        errors.extend(s.validate().into_iter().map(ErrorDetail::from));
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        if let Some(g) = &group_id {
            if cur.group_id.as_ref() != Some(g) {
                check_group(&state, &cur.project_id, g).await?;
            }
        }
        if let Some(env) = &s.environment_id {
            if cur.spec.0.environment_id.as_ref() != Some(env) {
                super::environments::check_job_environment(&state.pool, &cur.project_id, env).await?;
            }
        }
        policy::enforce_tags(&state.pool, &cur.project_id, "job", &s.tags).await?;
        let enabled = b.enabled.unwrap_or(cur.enabled);
        let version_id = switchyard_shared::ids::job_version_id();
        let actor = auth.0.actor();
        let mut tx = state.pool.begin().await?;
        // The version number moves under the row lock, so two concurrent
        // updates make versions n+1 and n+2, never two n+1.
        let rec: Option<JobRecord> = sqlx::query_as(&format!(
            "UPDATE jobs SET name = $2, slug = $3, group_id = $4, enabled = $5, spec = $6, version = version + 1,
                version_id = $7, updated_by = $8
             WHERE id = $1 AND deleted_at IS NULL RETURNING {}",
            store::jobs::JOB_COLUMNS
        ))
        .bind(&cur.id)
        .bind(name.trim())
        .bind(&slug)
        .bind(&group_id)
        .bind(enabled)
        .bind(sqlx::types::Json(&s))
        .bind(&version_id)
        .bind(&actor)
        .fetch_optional(&mut *tx)
        .await?;
        let rec = rec.ok_or_else(|| ApiError::not_found("job", &cur.id))?;
        sqlx::query(VERSION_INSERT)
            .bind(&version_id)
            .bind(&cur.id)
            .bind(rec.version)
            .bind(name.trim())
            .bind(&slug)
            .bind(enabled)
            .bind(&group_id)
            .bind(sqlx::types::Json(&s))
            .bind(&actor)
            .execute(&mut *tx)
            .await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change {
                project_id: &rec.project_id,
                action: "job.updated",
                resource_type: "job",
                resource_id: &rec.id,
                details: serde_json::json!({"version": rec.version, "version_id": rec.version_id}),
            },
        )
        .await?;
        tx.commit().await?;
        state.jobs.forget(&cur.id);
        sync_limits(&state, &rec.id, &rec.project_id, &s, rec.paused).await;
        wake_cron(&state, &s, rec.enabled && !rec.paused);
        if s.timeout_secs != cur.spec.0.timeout_secs {
            // Async runs of the job may now go overdue sooner: the
            // heartbeat sweep sleeps until the first deadline it knew of.
            state.queue.wake(WakeLoop::Heartbeats, None);
        }
        Ok(Json(job_view(rec)))
    }

    /// Delete a job. Its runs that have not finished are cancelled.
    #[oai(path = "/v1/jobs/:job_id", method = "delete")]
    async fn delete(&self, state: Data<&AppState>, auth: Auth, job_id: Path<String>) -> ApiResult<Deleted> {
        let cur = load_visible(&state, &auth, &job_id).await?;
        let mut tx = state.pool.begin().await?;
        sqlx::query("UPDATE jobs SET deleted_at = now(), updated_by = $2 WHERE id = $1")
            .bind(&cur.id)
            .bind(auth.0.actor())
            .execute(&mut *tx)
            .await?;
        let cancelled = transitions::cancel_job_runs(&mut tx, &cur.id, "job deleted").await?;
        audit::record(
            &mut *tx,
            &auth.0,
            Change {
                project_id: &cur.project_id,
                action: "job.deleted",
                resource_type: "job",
                resource_id: &cur.id,
                details: serde_json::json!({"name": cur.name, "cancelled_runs": cancelled.changes().len()}),
            },
        )
        .await?;
        tx.commit().await?;
        let cancelled = cancelled.committed();
        state.jobs.forget(&cur.id);
        transitions::drop_entries(&state.queue, &cancelled).await;
        let _ = state.queue.set_limits(&cur.id, None).await;
        Ok(Deleted::NoContent)
    }

    /// Every version of a job, newest first.
    #[oai(path = "/v1/jobs/:job_id/versions", method = "get")]
    async fn versions(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<JobVersion>>> {
        let job = load_visible(&state, &auth, &job_id).await?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        #[derive(sqlx::FromRow)]
        struct Row {
            id: String,
            job_id: String,
            version: i32,
            name: String,
            slug: String,
            enabled: bool,
            group_id: Option<String>,
            spec: sqlx::types::Json<JobSpec>,
            created_by: Option<String>,
            created_at: DateTime<Utc>,
        }
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, job_id, version, name, slug, enabled, group_id, spec, created_by, created_at
             FROM job_versions WHERE job_id = $1 AND ($2::text IS NULL OR id < $2) ORDER BY id DESC LIMIT $3",
        )
        .bind(&job.id)
        .bind(cursor)
        .bind(limit + 1)
        .fetch_all(&state.pool)
        .await?;
        Ok(Json(pagination::page(
            rows,
            limit,
            |r| r.id.clone(),
            |r| {
                let mut spec = r.spec.0;
                spec.webhook_secret = None;
                JobVersion {
                    id: r.id,
                    job_id: r.job_id,
                    version: r.version.into(),
                    name: r.name,
                    slug: r.slug,
                    enabled: r.enabled,
                    group_id: r.group_id,
                    definition: serde_json::to_value(spec).unwrap_or(Value::Null),
                    created_by: r.created_by,
                    created_at: r.created_at,
                }
            },
        )))
    }

    /// Trigger a run. With an `idempotency_key` already used for this job the
    /// earlier run is returned with 200 and nothing is created.
    #[oai(path = "/v1/jobs/:job_id/trigger", method = "post")]
    async fn trigger(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        body: Json<run_routes::TriggerRequest>,
    ) -> ApiResult<Triggered> {
        let job = load_for_trigger(&state, &auth, &job_id).await?;
        let (run, created) = run_routes::trigger(&state, &auth.0, &job, body.0, "api", None).await?;
        Ok(if created { Triggered::Created(Json(run)) } else { Triggered::Existing(Json(run)) })
    }
}
