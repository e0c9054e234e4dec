//! Jobs: create, read, list, update (a new version each time), delete,
//! versions, and trigger.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::job::{MAX_CRON_JOBS_PER_PROJECT, MAX_JOBS_PER_PROJECT};
use switchyard_shared::domain::{FieldErrors, JobSpec, RateLimitKey};
use switchyard_shared::ids::TriggerBatchId;
use switchyard_shared::queue::WakeLoop;
use switchyard_shared::secrets;
use switchyard_shared::store::jobs::{JobVersionRow, JobWrite};
use switchyard_shared::store::{self, transitions, Tenant};

use super::secrets::seal_signing_key;
use super::{
    check_job_environment, load_for_trigger, load_job, name_rule, patch, project_of, slug_rule, slugify, sync_limits,
    wake_cron, Created, Tag,
};
use crate::audit::{self, Change};
use crate::auth::policy::{self, Resource};
use crate::auth::{rbac, Auth};
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::run_actions;
use crate::state::AppState;
use crate::strict_json::JsonBody;
use crate::views::{
    job_view, BatchBody, CancelOnBody, DebounceBody, FairnessBody, Job, JobRun, RateLimitKeyBody, SingletonBody,
    TriggerRequest,
};

pub struct JobsApi;
pub struct TriggerBatchesApi;

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
    /// At most one run per key waits, and starts once its key is quiet.
    /// A job has a debounce or a singleton, not both.
    pub debounce: Option<DebounceBody>,
    /// At most one unfinished run per key.
    pub singleton: Option<SingletonBody>,
    /// Triggers are collected into batches, one run each. Not with a
    /// debounce or a singleton.
    pub batch: Option<BatchBody>,
    /// Up to 10 rules: an event dispatched with a rule's key cancels the
    /// job's unfinished runs its `match` holds for.
    pub cancel_on: Option<Vec<CancelOnBody>>,
    pub fairness: Option<FairnessBody>,
    /// Default true.
    pub enabled: Option<bool>,
    pub webhook_url: Option<String>,
    /// HMAC key signing dispatches and webhooks; write-only. Without one,
    /// dispatches go unsigned and webhooks are signed with the project's
    /// signing secret.
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
    #[oai(nullable)]
    pub group_id: MaybeUndefined<String>,
    pub name: Option<String>,
    pub slug: Option<String>,
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
    pub endpoint_url: Option<String>,
    #[oai(nullable)]
    pub fallback_endpoint_url: MaybeUndefined<String>,
    #[oai(nullable)]
    pub cron: MaybeUndefined<String>,
    #[oai(nullable)]
    pub timezone: MaybeUndefined<String>,
    #[oai(nullable)]
    pub execution_window_cron: MaybeUndefined<String>,
    #[oai(nullable)]
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
    #[oai(nullable)]
    pub debounce: MaybeUndefined<DebounceBody>,
    #[oai(nullable)]
    pub singleton: MaybeUndefined<SingletonBody>,
    #[oai(nullable)]
    pub batch: MaybeUndefined<BatchBody>,
    pub cancel_on: Option<Vec<CancelOnBody>>,
    pub fairness: Option<FairnessBody>,
    pub enabled: Option<bool>,
    #[oai(nullable)]
    pub webhook_url: MaybeUndefined<String>,
    #[oai(nullable)]
    pub webhook_secret: MaybeUndefined<String>,
    pub retry_strategy: Option<String>,
    pub retry_delays_secs: Option<Vec<i64>>,
    pub retry_initial_delay_secs: Option<i64>,
    pub retry_max_delay_secs: Option<i64>,
    #[oai(nullable)]
    pub environment_id: MaybeUndefined<String>,
    pub version_policy: Option<String>,
    pub backwards_compatible: Option<bool>,
}

/// The value rules of CreateJob and UpdateJob (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{map, range, text};
    use switchyard_shared::domain::{job, limits};
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::{Items, Property};
    let mut r = vec![(Property("CreateJob", "project_id"), text(&ID))];
    for schema in ["CreateJob", "UpdateJob"] {
        r.push((Property(schema, "group_id"), text(&ID)));
        r.push((Property(schema, "environment_id"), text(&ID)));
        r.push((Property(schema, "name"), text(&super::NAME)));
        r.push((Property(schema, "slug"), text(&super::SLUG)));
        r.push((Property(schema, "description"), text(&job::DESCRIPTION)));
        for prop in ["endpoint_url", "fallback_endpoint_url", "webhook_url"] {
            r.push((Property(schema, prop), text(&job::URL)));
        }
        r.push((Property(schema, "webhook_secret"), text(&job::WEBHOOK_SECRET)));
        r.push((Property(schema, "max_attempts"), range((1, limits::MAX_ATTEMPTS_LIMIT))));
        r.push((Property(schema, "timeout_secs"), range((1, limits::MAX_TIMEOUT_SECS))));
        r.push((Property(schema, "rate_limit_window_secs"), range((0, job::MAX_RATE_WINDOW_SECS))));
        for (prop, bounds) in job::SETTING_BOUNDS {
            r.push((Property(schema, prop), range(bounds)));
        }
        r.push((Items(schema, "retry_delays_secs"), range(job::SECS_BOUNDS)));
        r.extend(map(schema, "tags", limits::MAX_MAP_ENTRIES, &limits::MAP_KEY, &limits::MAP_VALUE));
        r.extend(map(schema, "default_run_metadata", limits::MAX_MAP_ENTRIES, &limits::MAP_KEY, &limits::MAP_VALUE));
    }
    r
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
    /// payload, matched an earlier run, which is returned; nothing was
    /// created. Also the job's debounce window or singleton run of the
    /// payload's key (`debounced: true`, `skipped: true`).
    #[oai(status = 200)]
    Existing(Json<JobRun>),
    /// The job batches its triggers: this one joined the open batch of its
    /// key (its run is made when the batch is full or its time is up; the
    /// run is named here when this trigger filled it).
    #[oai(status = 202)]
    Batched(Json<BatchedTrigger>),
}

/// A trigger taken into a batch.
#[derive(Object)]
pub struct BatchedTrigger {
    pub trigger_id: String,
    /// `GET /v1/trigger-batches/{id}` names the batch's run once it is made.
    pub batch_id: String,
    /// The trigger's place in its batch, from 0: its payload's index in the
    /// run's payload array.
    pub position: i64,
    /// The run made of the batch, when this trigger filled it.
    #[oai(skip_serializing_if_is_none)]
    pub run_id: Option<String>,
}

/// A trigger batch: the triggers of a batching job waiting together, then
/// the run made of them.
#[derive(Object)]
pub struct TriggerBatch {
    pub id: String,
    pub project_id: String,
    pub job_id: String,
    /// The key the triggers' payloads gave (empty: the job's one batch).
    pub key: String,
    /// open, or closed once its run was made.
    pub status: String,
    pub size: i64,
    pub max_size: i64,
    /// The ids of the triggers it took, in arrival order.
    pub trigger_ids: Vec<String>,
    pub opened_at: DateTime<Utc>,
    /// When it closes if it does not fill first.
    pub closes_at: DateTime<Utc>,
    #[oai(skip_serializing_if_is_none)]
    pub closed_at: Option<DateTime<Utc>>,
    /// The run made of it (absent while open, or when its job was deleted
    /// before it closed).
    #[oai(skip_serializing_if_is_none)]
    pub run_id: Option<String>,
}

#[derive(ApiResponse)]
pub enum TriggerBatchFound {
    #[oai(status = 200)]
    Ok(Json<TriggerBatch>),
}

fn to_btree(m: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    m.unwrap_or_default().into_iter().collect()
}

fn rate_keys(v: Vec<RateLimitKeyBody>) -> Vec<RateLimitKey> {
    v.into_iter().map(|k| RateLimitKey { name: k.name, max: k.max, window_secs: k.window_secs }).collect()
}

async fn check_group(state: &AppState, project_id: &str, group_id: &str) -> ApiResult<()> {
    let found = store::job_groups::get(&state.pool, Tenant::Project(project_id), &group_id.into()).await?;
    if found.is_none() {
        return Err(ApiError::invalid_field(
            "body.group_id",
            "no such job group in this project",
            Some(group_id.into()),
        ));
    }
    Ok(())
}

/// Under `TARGET_DENY_PRIVATE`, a 422 for each URL the server would refuse
/// to send to: saved, it could only fail every run that uses it. Names
/// other than the local host's are judged again at connect, where they
/// resolve.
pub(super) fn refuse_private_targets<'a>(
    state: &AppState,
    errors: &mut FieldErrors,
    urls: impl IntoIterator<Item = (String, &'a str)>,
) {
    for (at, url) in urls {
        if let Some(d) = state.webhooks.refusal(url) {
            errors.push(at, d.to_string(), Some(url.into()));
        }
    }
}

#[OpenApi(tag = "Tag::Jobs")]
impl JobsApi {
    /// Create a job.
    #[oai(path = "/v1/jobs", method = "post", operation_id = "createJob")]
    async fn create(&self, state: Data<&AppState>, auth: Auth, body: JsonBody<CreateJob>) -> ApiResult<Created<Job>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        let mut errors = FieldErrors::new();
        name_rule(&mut errors, &b.name);
        let slug = b.slug.clone().unwrap_or_else(|| slugify(&b.name, "job"));
        slug_rule(&mut errors, "body.slug", &slug);
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
            has_webhook_secret: false,
            environment_id: b.environment_id,
            version_policy: b.version_policy.unwrap_or(d.version_policy.clone()),
            backwards_compatible: b.backwards_compatible.unwrap_or(true),
            debounce: b.debounce.map(Into::into),
            singleton: b.singleton.map(Into::into),
            batch: b.batch.map(Into::into),
            cancel_on: b.cancel_on.unwrap_or_default().into_iter().map(Into::into).collect(),
            fairness: b.fairness.map(Into::into).unwrap_or_default(),
            endpoint_url: d.endpoint_url,
        };
        errors.extend(spec.validate());
        refuse_private_targets(&state, &mut errors, spec.target_urls());
        errors.finish()?;
        super::project_exists(&state, &project_id).await?;
        if let Some(g) = &b.group_id {
            check_group(&state, &project_id, g).await?;
        }
        if let Some(env) = &spec.environment_id {
            check_job_environment(&state.pool, &project_id, env).await?;
        }
        policy::enforce_tags(&state.pool, &project_id, "job", &spec.tags).await?;
        policy::check(&state, &auth.0, &project_id, Resource { kind: "job", id: None, tags: &spec.tags }).await?;
        check_quotas(&state, &project_id, None, b.enabled.unwrap_or(true) && spec.cron.is_some()).await?;
        let id = switchyard_shared::ids::job_id();
        let mut spec = spec;
        if let Some(plain) = spec.webhook_secret.take() {
            spec.webhook_secret = Some(seal_signing_key(&state, &id, secrets::JOB_WEBHOOK_SECRET, &plain)?);
        }
        let version_id = switchyard_shared::ids::job_version_id();
        let enabled = b.enabled.unwrap_or(true);
        let actor = auth.0.actor();
        let write = JobWrite {
            id: &id,
            group_id: b.group_id.as_deref(),
            name: b.name.trim(),
            slug: &slug,
            enabled,
            spec: &spec,
            version_id: &version_id,
            actor: actor.as_deref(),
        };
        let mut tx = state.pool.begin().await?;
        let rec = store::jobs::create(&mut tx, &project_id, &write).await?;
        let details = serde_json::json!({"name": rec.name, "slug": rec.slug, "version": rec.version});
        audit::record(&mut *tx, &auth.0, Change::new(&project_id, "job.created", ("job", &id), details)).await?;
        tx.commit().await?;
        sync_limits(&state, &id, &project_id, &spec, false).await;
        wake_cron(&state, &spec, enabled);
        Ok(Created::Created(Json(job_view(rec))))
    }

    /// List jobs of a project, newest first; `group_id` narrows to one group.
    #[oai(path = "/v1/jobs", method = "get", operation_id = "listJobs")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        group_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Job>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::jobs::list(&state.pool, &project_id, group_id.0.as_deref(), w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.to_string(), job_view)))
    }

    /// Get a job.
    #[oai(path = "/v1/jobs/:job_id", method = "get", operation_id = "getJob")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, job_id: Path<String>) -> ApiResult<Json<Job>> {
        Ok(Json(job_view(load_job(&state, &auth, &job_id).await?)))
    }

    /// Change a job. Makes a new version; runs pinned to older versions keep theirs.
    /// A job with secrets sends them in every dispatch, so changing its
    /// `endpoint_url` or `fallback_endpoint_url` also needs `secrets:read`
    /// (403 without it).
    #[oai(path = "/v1/jobs/:job_id", method = "patch", operation_id = "updateJob")]
    async fn update(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        body: JsonBody<UpdateJob>,
    ) -> ApiResult<Json<Job>> {
        let cur = load_job(&state, &auth, &job_id).await?;
        let b = body.0;
        let mut s = cur.spec.0.clone();
        let mut errors = FieldErrors::new();
        let name = b.name.unwrap_or(cur.name.clone());
        name_rule(&mut errors, &name);
        let slug = b.slug.unwrap_or(cur.slug.clone());
        slug_rule(&mut errors, "body.slug", &slug);
        let group_id = patch(b.group_id, cur.group_id.clone().map(String::from));
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
        let new_webhook_secret = matches!(b.webhook_secret, MaybeUndefined::Value(_));
        s.webhook_secret = patch(b.webhook_secret, s.webhook_secret);
        // The kept one is sealed, longer than a plaintext may be: only a new
        // one meets the rules.
        let kept_webhook_secret = if new_webhook_secret { None } else { s.webhook_secret.take() };
        s.environment_id = patch(b.environment_id, s.environment_id);
        s.debounce = patch(b.debounce.map_value(Into::into), s.debounce);
        s.singleton = patch(b.singleton.map_value(Into::into), s.singleton);
        s.batch = patch(b.batch.map_value(Into::into), s.batch);
        if let Some(rules) = b.cancel_on {
            s.cancel_on = rules.into_iter().map(Into::into).collect();
        }
        if let Some(f) = b.fairness {
            s.fairness = f.into();
        }
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
        errors.extend(s.validate());
        refuse_private_targets(&state, &mut errors, s.target_urls());
        errors.finish()?;
        s.webhook_secret = match s.webhook_secret.take() {
            Some(plain) => Some(seal_signing_key(&state, &cur.id, secrets::JOB_WEBHOOK_SECRET, &plain)?),
            None => kept_webhook_secret,
        };
        // A job's secrets travel in every dispatch body: whoever chooses where
        // the job sends them must be able to read them anyway.
        let moved = s.endpoint_url != cur.spec.0.endpoint_url
            || s.fallback_endpoint_url.is_some() && s.fallback_endpoint_url != cur.spec.0.fallback_endpoint_url;
        if moved
            && !rbac::grantable(&auth.0, &["secrets:read".to_string()])
            && !store::secrets::names(&state.pool, &cur.id).await?.is_empty()
        {
            return Err(ApiError::forbidden(
                "the job has secrets, which its dispatches carry: changing endpoint_url or fallback_endpoint_url \
                 needs the secrets:read scope",
            ));
        }
        if let Some(g) = &group_id {
            if cur.group_id.as_deref() != Some(g.as_str()) {
                check_group(&state, &cur.project_id, g).await?;
            }
        }
        if let Some(env) = &s.environment_id {
            if cur.spec.0.environment_id.as_ref() != Some(env) {
                check_job_environment(&state.pool, &cur.project_id, env).await?;
            }
        }
        policy::enforce_tags(&state.pool, &cur.project_id, "job", &s.tags).await?;
        let enabled = b.enabled.unwrap_or(cur.enabled);
        if enabled && s.cron.is_some() && !(cur.enabled && cur.spec.0.cron.is_some()) {
            check_quotas(&state, &cur.project_id, Some(&cur.id), true).await?;
        }
        let version_id = switchyard_shared::ids::job_version_id();
        let actor = auth.0.actor();
        let write = JobWrite {
            id: &cur.id,
            group_id: group_id.as_deref(),
            name: name.trim(),
            slug: &slug,
            enabled,
            spec: &s,
            version_id: &version_id,
            actor: actor.as_deref(),
        };
        let mut tx = state.pool.begin().await?;
        let rec = store::jobs::update(&mut tx, &write).await?;
        let rec = rec.ok_or_else(|| ApiError::not_found("job", &cur.id))?;
        let details = serde_json::json!({"version": rec.version, "version_id": rec.version_id});
        audit::record(&mut *tx, &auth.0, Change::new(&rec.project_id, "job.updated", ("job", &rec.id), details))
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

    /// Pause a job, as a group's pause-all does for each of its jobs:
    /// triggers are still accepted (201) and their runs wait, runs already
    /// queued are not dispatched, retries wait, and cron stops; runs that
    /// are running finish. The job's definition is unchanged (no new
    /// version). Idempotent: pausing a paused job answers the same.
    #[oai(path = "/v1/jobs/:job_id/pause", method = "post", operation_id = "pauseJob")]
    async fn pause(&self, state: Data<&AppState>, auth: Auth, job_id: Path<String>) -> ApiResult<Json<Job>> {
        set_job_paused(&state, &auth, &job_id, true).await
    }

    /// Resume a paused job: its waiting runs are dispatched again (caps and
    /// rate limits apply as usual) and cron resumes. Idempotent.
    #[oai(path = "/v1/jobs/:job_id/resume", method = "post", operation_id = "resumeJob")]
    async fn resume(&self, state: Data<&AppState>, auth: Auth, job_id: Path<String>) -> ApiResult<Json<Job>> {
        set_job_paused(&state, &auth, &job_id, false).await
    }

    /// Delete a job. Its runs that have not finished are cancelled.
    #[oai(path = "/v1/jobs/:job_id", method = "delete", operation_id = "deleteJob")]
    async fn delete(&self, state: Data<&AppState>, auth: Auth, job_id: Path<String>) -> ApiResult<Deleted> {
        let cur = load_job(&state, &auth, &job_id).await?;
        let mut tx = state.pool.begin().await?;
        store::jobs::soft_delete(&mut tx, &cur.id, auth.0.actor().as_deref()).await?;
        let cancelled = transitions::cancel_job_runs(&mut tx, &cur.id, "job deleted").await?;
        let details = serde_json::json!({"name": cur.name, "cancelled_runs": cancelled.changes().len()});
        audit::record(&mut *tx, &auth.0, Change::new(&cur.project_id, "job.deleted", ("job", &cur.id), details))
            .await?;
        tx.commit().await?;
        let cancelled = cancelled.committed();
        state.jobs.forget(&cur.id);
        transitions::drop_entries(&state.queue, &cancelled).await;
        let _ = state.queue.set_limits(&cur.project_id, &cur.id, None).await;
        Ok(Deleted::NoContent)
    }

    /// Every version of a job, newest first.
    #[oai(path = "/v1/jobs/:job_id/versions", method = "get", operation_id = "listJobVersions")]
    async fn versions(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<JobVersion>>> {
        let job = load_job(&state, &auth, &job_id).await?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::jobs::versions(&state.pool, &job.id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(
            rows,
            |r| r.id.clone(),
            |r: JobVersionRow| {
                let mut spec = r.spec.0;
                spec.webhook_secret = None;
                JobVersion {
                    id: r.id,
                    job_id: r.job_id,
                    version: r.version.into(),
                    name: r.name,
                    slug: r.slug,
                    enabled: r.enabled,
                    group_id: r.group_id.map(String::from),
                    definition: serde_json::to_value(spec).unwrap_or(Value::Null),
                    created_by: r.created_by,
                    created_at: r.created_at,
                }
            },
        )))
    }

    /// Trigger a run. With an `idempotency_key` already used for this job the
    /// earlier run is returned with 200 and nothing is created.
    #[oai(path = "/v1/jobs/:job_id/trigger", method = "post", operation_id = "triggerJob")]
    async fn trigger(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        body: JsonBody<TriggerRequest>,
    ) -> ApiResult<Triggered> {
        let job = load_for_trigger(&state, &auth, &job_id).await?;
        if let Some(batch) = &job.spec.0.batch {
            let joined = run_actions::join_batch(&state, &job, batch, body.0).await?;
            return Ok(Triggered::Batched(Json(BatchedTrigger {
                trigger_id: joined.trigger_id,
                batch_id: joined.batch.id.to_string(),
                position: joined.position.into(),
                run_id: joined.run.map(|r| r.id.to_string()),
            })));
        }
        let (run, created) = run_actions::trigger(&state, &auth.0, &job, body.0, "api", None).await?;
        Ok(if created { Triggered::Created(Json(run)) } else { Triggered::Existing(Json(run)) })
    }
}

#[OpenApi(tag = "Tag::Runs")]
impl TriggerBatchesApi {
    /// A trigger batch of a batching job: its triggers' ids in arrival
    /// order, whether it is still open, and the run made of it once it
    /// closed (the run's payload is the array of the triggers' payloads in
    /// that order, and its metadata names the batch in `trigger_batch_id`).
    #[oai(path = "/v1/trigger-batches/:batch_id", method = "get", operation_id = "getTriggerBatch")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, batch_id: Path<String>) -> ApiResult<TriggerBatchFound> {
        let id = TriggerBatchId::from(batch_id.0.as_str());
        let read = store::trigger_batches::get(&state.pool, super::tenant(&auth.0), &id);
        let (b, trigger_ids) = super::found("trigger batch", &batch_id, read).await?;
        Ok(TriggerBatchFound::Ok(Json(TriggerBatch {
            id: b.id.to_string(),
            project_id: b.project_id,
            job_id: b.job_id,
            key: b.batch_key,
            status: if b.closed_at.is_some() { "closed" } else { "open" }.into(),
            size: b.size.into(),
            max_size: b.max_size.into(),
            trigger_ids,
            opened_at: b.opened_at,
            closes_at: b.closes_at,
            closed_at: b.closed_at,
            run_id: b.run_id,
        })))
    }
}

/// Sets the job's `paused`, records it, and pushes it to Redis (the
/// limits hash holds the pause the dequeue script honours).
async fn set_job_paused(state: &AppState, auth: &Auth, job_id: &str, paused: bool) -> ApiResult<Json<Job>> {
    let cur = load_job(state, auth, job_id).await?;
    let mut tx = state.pool.begin().await?;
    let rec = store::jobs::set_paused(&mut tx, &cur.id, paused).await?;
    let rec = rec.ok_or_else(|| ApiError::not_found("job", &cur.id))?;
    let action = if paused { "job.paused" } else { "job.resumed" };
    if rec.paused != cur.paused {
        audit::record(&mut *tx, &auth.0, Change::new(&rec.project_id, action, ("job", &rec.id), Value::Null)).await?;
    }
    tx.commit().await?;
    state.jobs.forget(&rec.id);
    sync_limits(state, &rec.id, &rec.project_id, &rec.spec.0, rec.paused).await;
    wake_cron(state, &rec.spec.0, rec.enabled && !rec.paused);
    Ok(Json(job_view(rec)))
}

/// The project's quotas on jobs ([`MAX_JOBS_PER_PROJECT`], and
/// [`MAX_CRON_JOBS_PER_PROJECT`] when the job will fire on a cron): 422
/// past either, and nothing is written.
async fn check_quotas(state: &AppState, project_id: &str, besides: Option<&str>, cron: bool) -> ApiResult<()> {
    let (jobs, crons) = store::jobs::quota_counts(&state.pool, project_id, besides).await?;
    if besides.is_none() && jobs >= MAX_JOBS_PER_PROJECT {
        let m = format!("the project already has the most jobs it may keep ({MAX_JOBS_PER_PROJECT})");
        return Err(ApiError::invalid_field("body", m, None));
    }
    if cron && crons >= MAX_CRON_JOBS_PER_PROJECT {
        let m = format!("the project already has the most enabled cron jobs it may keep ({MAX_CRON_JOBS_PER_PROJECT})");
        return Err(ApiError::invalid_field("body.cron", m, None));
    }
    Ok(())
}
