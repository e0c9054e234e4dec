//! A job's definition (the fields of `POST /v1/jobs`), stored as one JSON
//! document per version.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::batching::{self, Batch};
use super::cancel_on::{self, CancelOn};
use super::cron_expr::{parse_cron, parse_timezone};
use super::field_errors::{FieldError, FieldErrors};
use super::limits::{
    MAP_KEY, MAP_VALUE, MAX_ATTEMPTS_LIMIT, MAX_MAP_ENTRIES, MAX_MAP_KEY_LEN, MAX_MAP_VALUE_LEN, MAX_TIMEOUT_SECS,
    VERSION_POLICIES,
};
use super::one_per_key::{self, Debounce, Singleton};
use super::retry::{RetryPolicy, RetryStrategy};
use super::rules::{check_url, Text};

pub const DEFAULT_MAX_ATTEMPTS: i64 = 3;
/// Most live jobs a project may have: far above any team's catalogue, low
/// enough that one tenant cannot fill the shared job cache and scans.
pub const MAX_JOBS_PER_PROJECT: i64 = 10_000;
/// Most enabled cron jobs a project may have. A cron fires at most once a
/// second, so this bounds what one tenant's schedules can start to 100
/// runs a second, well under what the service sustains for everyone.
pub const MAX_CRON_JOBS_PER_PROJECT: i64 = 100;
pub const DEFAULT_TIMEOUT_SECS: i64 = 30;
pub const DEFAULT_RETRY_INITIAL_DELAY_SECS: i64 = 1;
pub const DEFAULT_RETRY_MAX_DELAY_SECS: i64 = 3600;
/// The bounds of a job's caps (0: no cap) and of its windows and delays
/// in seconds: past them a run's times would overflow.
pub const COUNT_BOUNDS: (i64, i64) = (0, 1_000_000);
pub const SECS_BOUNDS: (i64, i64) = (0, 366 * 86_400);
/// Which of a job's numbers keeps to which bounds (`max_attempts`,
/// `timeout_secs` and `rate_limit_window_secs` have their own).
pub const SETTING_BOUNDS: [(&str, (i64, i64)); 7] = [
    ("max_concurrency", COUNT_BOUNDS),
    ("max_concurrency_per_key", COUNT_BOUNDS),
    ("rate_limit_max", COUNT_BOUNDS),
    ("dedup_window_secs", SECS_BOUNDS),
    ("run_ttl_secs", SECS_BOUNDS),
    ("retry_initial_delay_secs", SECS_BOUNDS),
    ("retry_max_delay_secs", SECS_BOUNDS),
];
/// A job's description, its URLs (checked as URLs too) and webhook secret.
pub const DESCRIPTION: Text = Text::stored(0, 4000);
pub const URL: Text = Text::stored(1, 2048);
pub const WEBHOOK_SECRET: Text = Text::stored(0, 1024);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RateLimitKey {
    pub name: String,
    pub max: i64,
    pub window_secs: i64,
}

/// Everything of a job but its identity, name, slug, group and enabled flag.
/// Unset optional fields are left out of the stored document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub endpoint_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_endpoint_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_window_cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_schema: Option<Value>,
    pub tags: BTreeMap<String, String>,
    pub max_attempts: i64,
    pub timeout_secs: i64,
    pub max_concurrency: i64,
    pub max_concurrency_per_key: i64,
    pub rate_limit_max: i64,
    pub rate_limit_window_secs: i64,
    pub rate_limit_keys: Vec<RateLimitKey>,
    pub default_run_metadata: BTreeMap<String, String>,
    pub dedup_window_secs: i64,
    pub run_ttl_secs: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
    /// Sealed (`secrets::SecretsKey::seal`) in the job's row; never in a
    /// version's row, which keeps only [`JobSpec::has_webhook_secret`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
    /// Set in a version's row instead of the secret, so a version still
    /// tells whether it was signed without holding the key.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub has_webhook_secret: bool,
    pub retry_strategy: String,
    pub retry_delays_secs: Vec<i64>,
    pub retry_initial_delay_secs: i64,
    pub retry_max_delay_secs: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment_id: Option<String>,
    pub version_policy: String,
    pub backwards_compatible: bool,
    /// At most one run per key waits in a window that each trigger moves
    /// on (`domain::one_per_key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debounce: Option<Debounce>,
    /// At most one unfinished run per key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub singleton: Option<Singleton>,
    /// Triggers wait in batches made into one run each (`domain::batching`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<Batch>,
    /// Events that cancel the job's unfinished runs (`domain::cancel_on`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cancel_on: Vec<CancelOn>,
    /// The order its ready runs are dispatched in.
    #[serde(skip_serializing_if = "Fairness::is_oldest_first")]
    pub fairness: Fairness,
}

/// The order a job's ready runs are dispatched in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fairness {
    /// Higher priority first, then oldest first, whatever the key.
    #[default]
    OldestFirst,
    /// The concurrency keys in turn (lua/lib/fair.lua): a key's backlog
    /// does not hold back another key's run. Priority still comes first.
    RoundRobin,
}

impl Fairness {
    fn is_oldest_first(&self) -> bool {
        *self == Fairness::OldestFirst
    }
}

impl JobSpec {
    /// A spec with the documented defaults and the given endpoint.
    pub fn with_endpoint(endpoint_url: impl Into<String>) -> JobSpec {
        JobSpec {
            endpoint_url: endpoint_url.into(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            retry_strategy: RetryStrategy::Exponential.as_str().into(),
            retry_initial_delay_secs: DEFAULT_RETRY_INITIAL_DELAY_SECS,
            retry_max_delay_secs: DEFAULT_RETRY_MAX_DELAY_SECS,
            version_policy: "pin".into(),
            backwards_compatible: true,
            ..JobSpec::default()
        }
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs.clamp(1, MAX_TIMEOUT_SECS) as u64)
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            strategy: RetryStrategy::from_str(&self.retry_strategy).unwrap_or_default(),
            max_attempts: self.max_attempts.clamp(1, MAX_ATTEMPTS_LIMIT) as u32,
            initial_delay: Duration::from_secs(self.retry_initial_delay_secs.max(0) as u64),
            max_delay: Duration::from_secs(self.retry_max_delay_secs.max(0) as u64),
            custom_delays_secs: self.retry_delays_secs.iter().map(|d| (*d).max(0) as u64).collect(),
        }
    }

    /// The value dequeue.lua reads from the `limits` hash:
    /// `max_concurrency|max_per_key|rate_max|rate_window_ms|paused`, then
    /// `|max|window_ms|n:<project_id>:<name>` for each named rate limit. The
    /// last part is the bucket the project's jobs share (see lua/README.md);
    /// neither ids nor names contain `|`. A job without limits has one too
    /// (`0|0|0|0|0`): dequeue.lua parks the runs of a job it has none for,
    /// since after a Redis loss "none yet" must not read as "no limits".
    pub fn limits_field(&self, project_id: &str, paused: bool) -> Option<String> {
        let window_ms = self.rate_limit_window_secs.max(0) * 1000;
        let parts = [self.max_concurrency, self.max_concurrency_per_key, self.rate_limit_max, window_ms];
        // The fifth field is flags: 1 paused, 2 round robin.
        let flags = u8::from(paused) | (u8::from(self.fairness == Fairness::RoundRobin) << 1);
        let mut out = format!("{}|{}|{}|{}|{}", parts[0].max(0), parts[1].max(0), parts[2].max(0), parts[3], flags);
        for k in self.named_rate_limits() {
            out.push_str(&format!("|{}|{}|{}", k.max, k.window_secs * 1000, rate_bucket(project_id, &k.name)));
        }
        Some(out)
    }

    /// The job's rate-limit buckets as dequeue.lua sees them: (bucket, max,
    /// window ms), its own `j:<job_id>` first, then its named ones.
    pub fn rate_buckets(&self, job_id: &str, project_id: &str) -> Vec<(String, i64, i64)> {
        let mut out = Vec::new();
        if self.rate_limit_max > 0 && self.rate_limit_window_secs > 0 {
            out.push((format!("j:{job_id}"), self.rate_limit_max, self.rate_limit_window_secs * 1000));
        }
        for k in self.named_rate_limits() {
            out.push((rate_bucket(project_id, &k.name), k.max, k.window_secs * 1000));
        }
        out
    }

    /// The named rate limits that limit anything (a zero max or window
    /// does not).
    fn named_rate_limits(&self) -> impl Iterator<Item = &RateLimitKey> {
        self.rate_limit_keys.iter().filter(|k| k.max > 0 && k.window_secs > 0)
    }
}

/// Longest rate limit window: the dispatch log of a bucket keeps this much.
pub const MAX_RATE_WINDOW_SECS: i64 = 86_400;

/// The bucket of a named rate limit: shared by every job of the project
/// that names it.
pub fn rate_bucket(project_id: &str, name: &str) -> String {
    format!("n:{project_id}:{name}")
}

/// Names of rate limits: they become part of Redis members, so they keep
/// to a safe alphabet.
pub fn is_valid_rate_limit_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// [`is_valid_rate_limit_name`] as the document states it.
pub const RATE_LIMIT_NAME: Text = Text::form(1, 128, "^[A-Za-z0-9_.:-]+$", is_valid_rate_limit_name);

impl JobSpec {
    /// Every URL the service sends to for this job, with its body field:
    /// what the API judges against its private-address policy at save.
    pub fn target_urls(&self) -> Vec<(String, &str)> {
        [
            ("endpoint_url", Some(&self.endpoint_url)),
            ("fallback_endpoint_url", self.fallback_endpoint_url.as_ref()),
            ("webhook_url", self.webhook_url.as_ref()),
        ]
        .into_iter()
        .filter_map(|(field, v)| Some((format!("body.{field}"), v?.as_str())))
        .collect()
    }

    /// The number of [`SETTING_BOUNDS`] named `field`.
    fn setting(&self, field: &str) -> i64 {
        match field {
            "max_concurrency" => self.max_concurrency,
            "max_concurrency_per_key" => self.max_concurrency_per_key,
            "rate_limit_max" => self.rate_limit_max,
            "dedup_window_secs" => self.dedup_window_secs,
            "run_ttl_secs" => self.run_ttl_secs,
            "retry_initial_delay_secs" => self.retry_initial_delay_secs,
            "retry_max_delay_secs" => self.retry_max_delay_secs,
            other => unreachable!("{other} is not a number of SETTING_BOUNDS"),
        }
    }

    /// Every problem with the definition, each naming its body field.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errs = FieldErrors::new();
        let mut bad = |field: &str, msg: String, value: Value| errs.push(format!("body.{field}"), msg, Some(value));
        if let Err(m) = check_url(&self.endpoint_url) {
            bad("endpoint_url", m, self.endpoint_url.clone().into());
        }
        for (field, v) in [("fallback_endpoint_url", &self.fallback_endpoint_url), ("webhook_url", &self.webhook_url)] {
            if let Some(v) = v {
                if let Err(m) = check_url(v) {
                    bad(field, m, v.clone().into());
                }
            }
        }
        for (field, v) in [("cron", &self.cron), ("execution_window_cron", &self.execution_window_cron)] {
            if let Some(v) = v {
                match parse_cron(v) {
                    Err(m) => bad(field, format!("invalid cron expression: {m}"), v.clone().into()),
                    // An expression that matches no future time (30 February)
                    // would hold runs forever.
                    Ok(s) if s.upcoming(chrono::Utc).next().is_none() => {
                        bad(field, "matches no future time".into(), v.clone().into())
                    }
                    Ok(_) => {}
                }
            }
        }
        if let Some(tz) = &self.timezone {
            if let Err(m) = parse_timezone(tz) {
                bad("timezone", m, tz.clone().into());
            }
        }
        if !(1..=MAX_ATTEMPTS_LIMIT).contains(&self.max_attempts) {
            bad("max_attempts", format!("must be between 1 and {MAX_ATTEMPTS_LIMIT}"), self.max_attempts.into());
        }
        if !(1..=MAX_TIMEOUT_SECS).contains(&self.timeout_secs) {
            bad("timeout_secs", format!("must be between 1 and {MAX_TIMEOUT_SECS}"), self.timeout_secs.into());
        }
        if let Some(d) = &self.description {
            if !DESCRIPTION.ok(d) {
                bad("description", format!("{}, no NUL", DESCRIPTION.length_words()), Value::Null);
            }
        }
        for (field, v) in [
            ("endpoint_url", Some(&self.endpoint_url)),
            ("fallback_endpoint_url", self.fallback_endpoint_url.as_ref()),
            ("webhook_url", self.webhook_url.as_ref()),
        ] {
            if v.is_some_and(|u| !URL.ok(u)) {
                bad(field, format!("{}, no NUL", URL.length_words()), Value::Null);
            }
        }
        if self.webhook_secret.as_deref().is_some_and(|s| !WEBHOOK_SECRET.ok(s)) {
            bad("webhook_secret", format!("{}, no NUL", WEBHOOK_SECRET.length_words()), Value::Null);
        }
        if self.rate_limit_window_secs < 0 {
            let v = self.rate_limit_window_secs;
            bad("rate_limit_window_secs", "must not be negative (0 means no limit)".into(), v.into());
        }
        for (field, (_, max)) in SETTING_BOUNDS {
            let v = self.setting(field);
            if v < 0 {
                bad(field, "must not be negative (0 means no limit)".into(), v.into());
            } else if v > max {
                bad(field, format!("must be at most {max}"), v.into());
            }
        }
        if (self.rate_limit_max > 0) != (self.rate_limit_window_secs > 0) {
            bad(
                "rate_limit_window_secs",
                "rate_limit_max and rate_limit_window_secs must be set together".into(),
                self.rate_limit_window_secs.into(),
            );
        }
        if self.rate_limit_window_secs > MAX_RATE_WINDOW_SECS {
            bad(
                "rate_limit_window_secs",
                format!("must be at most {MAX_RATE_WINDOW_SECS}"),
                self.rate_limit_window_secs.into(),
            );
        }
        for (i, k) in self.rate_limit_keys.iter().enumerate() {
            if !is_valid_rate_limit_name(&k.name) {
                bad(
                    &format!("rate_limit_keys/{i}/name"),
                    "must be 1 to 128 letters, digits, '_', '-', '.' or ':'".into(),
                    k.name.clone().into(),
                );
            } else if self.rate_limit_keys[..i].iter().any(|o| o.name == k.name) {
                bad(&format!("rate_limit_keys/{i}/name"), "named twice".into(), k.name.clone().into());
            }
            if k.max <= 0 {
                bad(&format!("rate_limit_keys/{i}/max"), "must be positive".into(), k.max.into());
            } else if k.max > COUNT_BOUNDS.1 {
                bad(&format!("rate_limit_keys/{i}/max"), format!("must be at most {}", COUNT_BOUNDS.1), k.max.into());
            }
            if !(1..=MAX_RATE_WINDOW_SECS).contains(&k.window_secs) {
                bad(
                    &format!("rate_limit_keys/{i}/window_secs"),
                    format!("must be between 1 and {MAX_RATE_WINDOW_SECS}"),
                    k.window_secs.into(),
                );
            }
        }
        match RetryStrategy::from_str(&self.retry_strategy) {
            Err(m) => bad("retry_strategy", m, self.retry_strategy.clone().into()),
            Ok(RetryStrategy::Custom) if self.retry_delays_secs.is_empty() => bad(
                "retry_delays_secs",
                "the custom retry strategy needs at least one delay".into(),
                Value::Array(vec![]),
            ),
            Ok(_) => {}
        }
        if let Some(d) = self.retry_delays_secs.iter().find(|d| **d < 0) {
            bad("retry_delays_secs", "delays must not be negative".into(), (*d).into());
        } else if let Some(d) = self.retry_delays_secs.iter().find(|d| **d > SECS_BOUNDS.1) {
            bad("retry_delays_secs", format!("delays must be at most {}", SECS_BOUNDS.1), (*d).into());
        }
        if !VERSION_POLICIES.contains(&self.version_policy.as_str()) {
            bad("version_policy", "must be pin or latest".into(), self.version_policy.clone().into());
        }
        if let Some(s) = &self.payload_schema {
            if let Err(m) = super::payload_schema::check_schema(s) {
                bad("payload_schema", m, s.clone());
            }
        }
        for (field, map) in [("tags", &self.tags), ("default_run_metadata", &self.default_run_metadata)] {
            if map.len() > MAX_MAP_ENTRIES {
                bad(field, format!("at most {MAX_MAP_ENTRIES} entries"), map.len().into());
            }
            if let Some((k, _)) = map.iter().find(|(k, v)| !MAP_KEY.ok(k) || !MAP_VALUE.ok(v)) {
                let m = format!("keys must be 1 to {MAX_MAP_KEY_LEN} characters, values at most {MAX_MAP_VALUE_LEN}");
                bad(field, m, k.clone().into());
            }
        }
        one_per_key::validate(self.debounce.as_ref(), self.singleton.as_ref(), &mut errs);
        cancel_on::validate(&self.cancel_on, &mut errs);
        let gated = self.debounce.is_some() || self.singleton.is_some();
        batching::validate(self.batch.as_ref(), gated, &mut errs);
        errs.into_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_limit_name_rule_is_its_check() {
        assert_eq!(super::super::rules::agrees(&RATE_LIMIT_NAME, &["tenant:acme", "a.b-c_d"]), Ok(()));
    }

    #[test]
    fn defaults_are_valid() {
        assert!(JobSpec::with_endpoint("http://127.0.0.1:9/x").validate().is_empty());
    }

    #[test]
    fn every_bad_field_is_reported() {
        let mut s = JobSpec::with_endpoint("ftp://x");
        s.cron = Some("61 * * * *".into());
        s.timezone = Some("Mars/Olympus".into());
        s.max_concurrency = -1;
        s.retry_strategy = "sometimes".into();
        let locs: Vec<_> = s.validate().into_iter().map(|e| e.location).collect();
        for want in ["body.endpoint_url", "body.cron", "body.timezone", "body.max_concurrency", "body.retry_strategy"] {
            assert!(locs.iter().any(|l| l == want), "{want} missing from {locs:?}");
        }
    }

    #[test]
    fn limits_field_encodes_caps_and_pause() {
        let mut s = JobSpec::with_endpoint("http://x");
        assert_eq!(s.limits_field("p", false).as_deref(), Some("0|0|0|0|0"), "none is said, not left out");
        assert_eq!(s.limits_field("p", true).as_deref(), Some("0|0|0|0|1"));
        s.fairness = Fairness::RoundRobin;
        assert_eq!(s.limits_field("p", true).as_deref(), Some("0|0|0|0|3"));
        assert_eq!(s.limits_field("p", false).as_deref(), Some("0|0|0|0|2"));
        s.fairness = Fairness::OldestFirst;
        s.max_concurrency = 3;
        s.rate_limit_max = 10;
        s.rate_limit_window_secs = 2;
        assert_eq!(s.limits_field("p", false).as_deref(), Some("3|0|10|2000|0"));
        s.rate_limit_keys = vec![
            RateLimitKey { name: "openai".into(), max: 5, window_secs: 60 },
            RateLimitKey { name: "crm:eu".into(), max: 1, window_secs: 1 },
        ];
        assert_eq!(
            s.limits_field("prj_1", false).as_deref(),
            Some("3|0|10|2000|0|5|60000|n:prj_1:openai|1|1000|n:prj_1:crm:eu")
        );
    }

    #[test]
    fn rate_limit_names_and_schemas_are_checked() {
        let mut s = JobSpec::with_endpoint("http://127.0.0.1:9/x");
        s.rate_limit_keys = vec![
            RateLimitKey { name: "a|b".into(), max: 1, window_secs: 1 },
            RateLimitKey { name: "ok".into(), max: 1, window_secs: 1 },
            RateLimitKey { name: "ok".into(), max: 1, window_secs: 100_000 },
        ];
        s.payload_schema = Some(serde_json::json!({"type": 12}));
        s.execution_window_cron = Some("0 0 30 2 *".into());
        let locs: Vec<_> = s.validate().into_iter().map(|e| e.location).collect();
        for want in [
            "body.rate_limit_keys/0/name",
            "body.rate_limit_keys/2/name",
            "body.rate_limit_keys/2/window_secs",
            "body.payload_schema",
            "body.execution_window_cron",
        ] {
            assert!(locs.iter().any(|l| l == want), "{want} missing from {locs:?}");
        }
    }
}
