//! Response and request objects that more than one route file uses: a job
//! (the jobs' own routes and a group's job listing), a run and the trigger
//! request ([`runs`]), and the records a run's target writes
//! ([`run_records`]).

mod run_records;
pub(crate) mod runs;

pub use run_records::{Checkpoint, RunOutput, ToolCall, UsageRecord};
pub use runs::{run_view, ExecutionTrace, JobRun, TriggerRequest};

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use poem_openapi::Object;
use serde_json::Value;
use switchyard_shared::domain::batching::{self, Batch};
use switchyard_shared::domain::cancel_on::{self, CancelOn};
use switchyard_shared::domain::job::Fairness;
use switchyard_shared::domain::one_per_key::{self, Debounce, Singleton, SingletonMode};
use switchyard_shared::store::JobRecord;

use crate::document::rules::Place;

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

/// The value rules of RateLimitKeyBody (see `document::rules`);
/// TriggerRequest's are beside it, in [`runs`].
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{range, text};
    use switchyard_shared::domain::job;
    use Place::Property;
    vec![
        (Property("RateLimitKeyBody", "name"), text(&job::RATE_LIMIT_NAME)),
        (Property("RateLimitKeyBody", "max"), range((1, job::COUNT_BOUNDS.1))),
        (Property("RateLimitKeyBody", "window_secs"), range((1, job::MAX_RATE_WINDOW_SECS))),
        (Property("DebounceBody", "period_secs"), range(one_per_key::DEBOUNCE_SECS)),
        (Property("DebounceBody", "max_wait_secs"), range(one_per_key::DEBOUNCE_SECS)),
        (Property("DebounceBody", "key"), key_length()),
        (Property("SingletonBody", "key"), key_length()),
        (Property("BatchBody", "key"), key_length()),
        (Property("BatchBody", "max_size"), range(batching::MAX_SIZE)),
        (Property("BatchBody", "timeout_secs"), range(batching::TIMEOUT_SECS)),
        (Property("CancelOnBody", "event_key"), text(&switchyard_shared::domain::event_key::KEY)),
        (Property("CancelOnBody", "timeout_secs"), range(cancel_on::TIMEOUT_SECS)),
    ]
}

/// A gate's key expression: 1 to MAX_EXPRESSION_LEN bytes, as a step's
/// output_transform.
fn key_length() -> Value {
    serde_json::json!({"minLength": 1, "maxLength": switchyard_shared::domain::workflow::MAX_EXPRESSION_LEN})
}

/// Debounce: a trigger while a run of its key waits in the job's window
/// makes no run; that run takes the newest payload and starts once the key
/// has been quiet for `period_secs`, or `max_wait_secs` after the window's
/// first trigger, whichever is sooner. The trigger answers 200 with the
/// waiting run and `debounced: true`.
#[derive(Object, Clone)]
#[oai(deny_unknown_fields)]
pub struct DebounceBody {
    /// JMESPath over the trigger's payload giving the key (a string as
    /// itself, another value as its JSON text, at most 256 bytes); absent
    /// or null: one window for the whole job.
    pub key: Option<String>,
    /// 1 to 604800.
    pub period_secs: i64,
    /// 1 to 604800, not shorter than period_secs; absent: no limit.
    pub max_wait_secs: Option<i64>,
}

/// Batching: the job's triggers wait in the open batch of their key; when
/// `max_size` have come, or `timeout_secs` after the first, one run is made
/// whose payload is the array of their payloads in arrival order. A
/// trigger answers 202 with its batch (and the run, when it filled it).
#[derive(Object, Clone)]
#[oai(deny_unknown_fields)]
pub struct BatchBody {
    /// JMESPath over the trigger's payload giving the key, as for
    /// `debounce.key`; absent: one batch at a time for the whole job.
    pub key: Option<String>,
    /// 2 to 1000.
    pub max_size: i64,
    /// 1 to 3600.
    pub timeout_secs: i64,
}

impl From<BatchBody> for Batch {
    fn from(b: BatchBody) -> Batch {
        Batch { key: b.key, max_size: b.max_size, timeout_secs: b.timeout_secs }
    }
}

impl From<Batch> for BatchBody {
    fn from(b: Batch) -> BatchBody {
        BatchBody { key: b.key, max_size: b.max_size, timeout_secs: b.timeout_secs }
    }
}

/// A rule that cancels the job's (or workflow's) unfinished runs when an
/// event arrives.
#[derive(Object, Clone)]
#[oai(deny_unknown_fields)]
pub struct CancelOnBody {
    /// The event's key, exactly (no `*`).
    pub event_key: String,
    /// JSONLogic over `{event, run}` (the event's payload and the run's)
    /// that must hold, e.g. `{"==": [{"var": "event.order_id"}, {"var":
    /// "run.order_id"}]}`; absent: every unfinished run of the job.
    #[oai(rename = "match", skip_serializing_if_is_none)]
    pub condition: Option<Value>,
    /// Only runs made at most this long before the event (1 to 604800);
    /// absent: any unfinished run.
    #[oai(skip_serializing_if_is_none)]
    pub timeout_secs: Option<i64>,
}

impl From<CancelOnBody> for CancelOn {
    fn from(b: CancelOnBody) -> CancelOn {
        CancelOn { event_key: b.event_key, condition: b.condition, timeout_secs: b.timeout_secs }
    }
}

impl From<CancelOn> for CancelOnBody {
    fn from(c: CancelOn) -> CancelOnBody {
        CancelOnBody { event_key: c.event_key, condition: c.condition, timeout_secs: c.timeout_secs }
    }
}

/// The order a job's ready runs are dispatched in: oldest_first (the
/// default) or round_robin.
// A field of this type carries no doc comment of its own: poem-openapi
// writes a described enum as an `allOf`, which openapi-python-client
// refuses ("Cannot take allOf a non-object").
#[derive(poem_openapi::Enum, Clone, Copy, PartialEq, Eq)]
#[oai(rename_all = "snake_case")]
pub enum FairnessBody {
    /// Higher priority first, then oldest first, whatever the
    /// concurrency key (the default).
    OldestFirst,
    /// Within a priority, the job's concurrency keys in turn: a run whose
    /// key has nothing waiting goes next, however many runs other keys
    /// have waiting, and a key's backlog is served one run per turn.
    RoundRobin,
}

impl From<FairnessBody> for Fairness {
    fn from(b: FairnessBody) -> Fairness {
        match b {
            FairnessBody::OldestFirst => Fairness::OldestFirst,
            FairnessBody::RoundRobin => Fairness::RoundRobin,
        }
    }
}

impl From<Fairness> for FairnessBody {
    fn from(f: Fairness) -> FairnessBody {
        match f {
            Fairness::OldestFirst => FairnessBody::OldestFirst,
            Fairness::RoundRobin => FairnessBody::RoundRobin,
        }
    }
}

/// What a trigger of a singleton does while a run of its key is unfinished.
#[derive(poem_openapi::Enum, Clone, Copy, PartialEq, Eq)]
#[oai(rename_all = "lowercase")]
pub enum SingletonModeBody {
    /// Make nothing: 200 with the unfinished run and `skipped: true`.
    Skip,
    /// Cancel the unfinished run and make the new one (201, with
    /// `replaced_run_id`).
    Cancel,
}

/// Singleton: at most one unfinished (pending, queued, running or
/// retrying) run of the job per key.
#[derive(Object, Clone)]
#[oai(deny_unknown_fields)]
pub struct SingletonBody {
    /// JMESPath over the trigger's payload giving the key, as for
    /// `debounce.key`; absent: one run for the whole job.
    pub key: Option<String>,
    pub mode: SingletonModeBody,
}

impl From<DebounceBody> for Debounce {
    fn from(b: DebounceBody) -> Debounce {
        Debounce { key: b.key, period_secs: b.period_secs, max_wait_secs: b.max_wait_secs }
    }
}

impl From<Debounce> for DebounceBody {
    fn from(d: Debounce) -> DebounceBody {
        DebounceBody { key: d.key, period_secs: d.period_secs, max_wait_secs: d.max_wait_secs }
    }
}

impl From<SingletonBody> for Singleton {
    fn from(b: SingletonBody) -> Singleton {
        let mode = match b.mode {
            SingletonModeBody::Skip => SingletonMode::Skip,
            SingletonModeBody::Cancel => SingletonMode::Cancel,
        };
        Singleton { key: b.key, mode }
    }
}

impl From<Singleton> for SingletonBody {
    fn from(s: Singleton) -> SingletonBody {
        let mode = match s.mode {
            SingletonMode::Skip => SingletonModeBody::Skip,
            SingletonMode::Cancel => SingletonModeBody::Cancel,
        };
        SingletonBody { key: s.key, mode }
    }
}

/// A job: an HTTP target with its retry, timeout and limits.
/// `webhook_secret` is write-only and never returned.
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
    #[oai(skip_serializing_if_is_none)]
    pub debounce: Option<DebounceBody>,
    #[oai(skip_serializing_if_is_none)]
    pub singleton: Option<SingletonBody>,
    #[oai(skip_serializing_if_is_none)]
    pub batch: Option<BatchBody>,
    pub cancel_on: Vec<CancelOnBody>,
    pub fairness: FairnessBody,
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
        id: r.id.into_string(),
        project_id: r.project_id,
        group_id: r.group_id.map(String::from),
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
        debounce: s.debounce.map(Into::into),
        singleton: s.singleton.map(Into::into),
        batch: s.batch.map(Into::into),
        cancel_on: s.cancel_on.into_iter().map(Into::into).collect(),
        fairness: s.fairness.into(),
        enabled: r.enabled,
        paused: r.paused,
        webhook_url: s.webhook_url,
        has_webhook_secret: s.webhook_secret.is_some() || s.has_webhook_secret,
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
