//! A job's definition (SPEC §2.4), stored as one JSON document per version.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::retry::{RetryPolicy, RetryStrategy};

/// Limits that keep one job from hurting the service or its target.
pub const MAX_ATTEMPTS_LIMIT: i64 = 100;
pub const MAX_TIMEOUT_SECS: i64 = 24 * 3600;
pub const DEFAULT_MAX_ATTEMPTS: i64 = 3;
pub const DEFAULT_TIMEOUT_SECS: i64 = 30;
pub const DEFAULT_RETRY_INITIAL_DELAY_SECS: i64 = 1;
pub const DEFAULT_RETRY_MAX_DELAY_SECS: i64 = 3600;

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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
    pub retry_strategy: String,
    pub retry_delays_secs: Vec<i64>,
    pub retry_initial_delay_secs: i64,
    pub retry_max_delay_secs: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment_id: Option<String>,
    pub version_policy: String,
    pub backwards_compatible: bool,
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

    /// The value dequeue.lua reads from the `limits` hash, or `None` when the
    /// job has no limit at all (and is not paused).
    pub fn limits_field(&self, paused: bool) -> Option<String> {
        let window_ms = self.rate_limit_window_secs.max(0) * 1000;
        let parts = [self.max_concurrency, self.max_concurrency_per_key, self.rate_limit_max, window_ms];
        if parts.iter().all(|v| *v <= 0) && !paused {
            return None;
        }
        Some(format!(
            "{}|{}|{}|{}|{}",
            parts[0].max(0),
            parts[1].max(0),
            parts[2].max(0),
            parts[3],
            u8::from(paused)
        ))
    }
}

/// A validation failure of one field: where, what, and the offending value.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub location: String,
    pub message: String,
    pub value: Option<Value>,
}

impl FieldError {
    pub fn new(location: impl Into<String>, message: impl Into<String>, value: Option<Value>) -> FieldError {
        FieldError { location: location.into(), message: message.into(), value }
    }
}

/// Checks a cron expression of 5 fields, or 6 with seconds first.
pub fn parse_cron(expr: &str) -> Result<cron::Schedule, String> {
    let fields = expr.split_whitespace().count();
    let full = match fields {
        5 => format!("0 {expr}"),
        6 => expr.to_string(),
        _ => return Err(format!("expected 5 fields, or 6 with seconds first; got {fields}")),
    };
    cron::Schedule::from_str(&full).map_err(|e| e.to_string())
}

pub fn parse_timezone(tz: &str) -> Result<chrono_tz::Tz, String> {
    tz.parse::<chrono_tz::Tz>().map_err(|_| format!("{tz:?} is not an IANA time zone such as Europe/Paris"))
}

/// An http(s) URL with a host; the private-address check happens at the API,
/// which knows the configuration.
pub fn check_url(raw: &str) -> Result<url::Url, String> {
    let u = url::Url::parse(raw).map_err(|e| format!("not a valid URL: {e}"))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return Err("must be an http or https URL".into());
    }
    if u.host_str().is_none_or(|h| h.is_empty()) {
        return Err("must name a host".into());
    }
    Ok(u)
}

impl JobSpec {
    /// Every problem with the definition, each naming its body field.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut bad = |field: &str, msg: String, value: Value| {
            errs.push(FieldError::new(format!("body.{field}"), msg, Some(value)));
        };
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
                if let Err(m) = parse_cron(v) {
                    bad(field, format!("invalid cron expression: {m}"), v.clone().into());
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
        for (field, v) in [
            ("max_concurrency", self.max_concurrency),
            ("max_concurrency_per_key", self.max_concurrency_per_key),
            ("rate_limit_max", self.rate_limit_max),
            ("rate_limit_window_secs", self.rate_limit_window_secs),
            ("dedup_window_secs", self.dedup_window_secs),
            ("run_ttl_secs", self.run_ttl_secs),
            ("retry_initial_delay_secs", self.retry_initial_delay_secs),
            ("retry_max_delay_secs", self.retry_max_delay_secs),
        ] {
            if v < 0 {
                bad(field, "must not be negative (0 means no limit)".into(), v.into());
            }
        }
        if (self.rate_limit_max > 0) != (self.rate_limit_window_secs > 0) {
            bad(
                "rate_limit_window_secs",
                "rate_limit_max and rate_limit_window_secs must be set together".into(),
                self.rate_limit_window_secs.into(),
            );
        }
        for (i, k) in self.rate_limit_keys.iter().enumerate() {
            if k.name.is_empty() || k.name.len() > 128 {
                bad(&format!("rate_limit_keys[{i}].name"), "must be 1 to 128 characters".into(), k.name.clone().into());
            }
            if k.max <= 0 {
                bad(&format!("rate_limit_keys[{i}].max"), "must be positive".into(), k.max.into());
            }
            if k.window_secs <= 0 {
                bad(&format!("rate_limit_keys[{i}].window_secs"), "must be positive".into(), k.window_secs.into());
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
        }
        if self.version_policy != "pin" && self.version_policy != "latest" {
            bad("version_policy", "must be pin or latest".into(), self.version_policy.clone().into());
        }
        if let Some(s) = &self.payload_schema {
            if !s.is_object() {
                bad("payload_schema", "must be a JSON Schema object".into(), s.clone());
            }
        }
        for (field, map) in [("tags", &self.tags), ("default_run_metadata", &self.default_run_metadata)] {
            if map.len() > 64 {
                bad(field, "at most 64 entries".into(), map.len().into());
            }
            if let Some((k, _)) = map.iter().find(|(k, v)| k.is_empty() || k.len() > 128 || v.len() > 1024) {
                bad(field, "keys must be 1 to 128 characters, values at most 1024".into(), k.clone().into());
            }
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn cron_takes_five_or_six_fields() {
        assert!(parse_cron("*/5 * * * *").is_ok());
        assert!(parse_cron("*/10 * * * * *").is_ok());
        assert!(parse_cron("* * *").is_err());
    }

    #[test]
    fn limits_field_encodes_caps_and_pause() {
        let mut s = JobSpec::with_endpoint("http://x");
        assert_eq!(s.limits_field(false), None);
        assert_eq!(s.limits_field(true).as_deref(), Some("0|0|0|0|1"));
        s.max_concurrency = 3;
        s.rate_limit_max = 10;
        s.rate_limit_window_secs = 2;
        assert_eq!(s.limits_field(false).as_deref(), Some("3|0|10|2000|0"));
    }
}
