//! What one dispatch attempt means for the run (docs/contract.md, "Dispatch
//! protocol"). Pure: the HTTP side ([`crate::dispatch`]) says what happened,
//! this module classifies it, and the retry decision every ending goes
//! through (`domain::retry::decide`) says what the run becomes.
//!
//! ```text
//!  2xx ─────────────────────────────► completed (result = body)
//!  202 + execution_mode async ──────► stays running (finished over the SDK)
//!  408, 429, 5xx, timeout, connect ─► retrying  if the policy allows another attempt
//!                                     timed_out if the last attempt timed out
//!                                     failed    otherwise
//!  other 4xx, 3xx, denied target ───► failed, no retry
//! ```

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use switchyard_shared::domain::result::{scrub, scrub_str};
use switchyard_shared::domain::retry::{self, AttemptEnd, RunAfter};
use switchyard_shared::domain::{ExecutionMode, RetryPolicy};

/// The `error_class` recorded on a run that did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    Http5xx,
    Http4xx,
    Http408,
    Http429,
    /// A redirect: the worker does not follow them (a target that moved is a
    /// configuration error, and following could leave the allowed hosts).
    Http3xx,
    Timeout,
    Connection,
    JobMissing,
    TargetDenied,
    /// A 2xx whose body is larger than a run result may be.
    ResponseTooLarge,
    /// The job has secrets this worker cannot decrypt (no `SECRETS_KEY`, or
    /// a different one): the run is not dispatched without them.
    SecretsUnavailable,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Http5xx => "http_5xx",
            ErrorClass::Http4xx => "http_4xx",
            ErrorClass::Http408 => "http_408",
            ErrorClass::Http429 => "http_429",
            ErrorClass::Http3xx => "http_3xx",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Connection => "connection",
            ErrorClass::JobMissing => "job_missing",
            ErrorClass::TargetDenied => "target_denied",
            ErrorClass::ResponseTooLarge => "response_too_large",
            ErrorClass::SecretsUnavailable => "secrets_unavailable",
        }
    }
}

/// How much of an error response's body goes into the run's `error`.
pub const ERROR_BODY_BYTES: usize = 512;

/// What an attempt means, before the retry policy is consulted.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Completed {
        result: Value,
    },
    /// Async mode accepted the run: the target finishes it over the SDK.
    StaysRunning,
    /// Worth another attempt. `retry_after` is the target's `Retry-After`
    /// (429 and 503 only); `timed_out` makes an exhausted run `timed_out`.
    Retryable {
        class: ErrorClass,
        error: String,
        retry_after: Option<Duration>,
        timed_out: bool,
    },
    Permanent {
        class: ErrorClass,
        error: String,
    },
}

impl Verdict {
    pub fn permanent(class: ErrorClass, error: impl Into<String>) -> Verdict {
        Verdict::Permanent { class, error: error.into() }
    }

    pub fn retryable(class: ErrorClass, error: impl Into<String>) -> Verdict {
        Verdict::Retryable { class, error: error.into(), retry_after: None, timed_out: class == ErrorClass::Timeout }
    }
}

/// The verdict for a response with `status` whose body (or its start) is
/// `body`. `retry_after` is the parsed `Retry-After` header, if any.
pub fn classify_response(status: u16, mode: ExecutionMode, body: &[u8], retry_after: Option<Duration>) -> Verdict {
    match status {
        202 if mode == ExecutionMode::Async => Verdict::StaysRunning,
        200..=299 => Verdict::Completed { result: result_from_body(body) },
        408 => Verdict::retryable(ErrorClass::Http408, http_error(status, body)),
        429 | 503 => Verdict::Retryable {
            class: if status == 429 { ErrorClass::Http429 } else { ErrorClass::Http5xx },
            error: http_error(status, body),
            retry_after,
            timed_out: false,
        },
        500..=599 => Verdict::retryable(ErrorClass::Http5xx, http_error(status, body)),
        400..=499 => Verdict::permanent(ErrorClass::Http4xx, http_error(status, body)),
        300..=399 => Verdict::permanent(ErrorClass::Http3xx, http_error(status, body)),
        // 1xx never ends a response; anything else is not HTTP as we know it.
        _ => Verdict::retryable(ErrorClass::Connection, http_error(status, body)),
    }
}

/// A 2xx body as the run's result: JSON when it parses, else the text as a
/// JSON string, and null when there is nothing.
pub fn result_from_body(body: &[u8]) -> Value {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Value::Null;
    }
    let v = serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
    let has_nul = body.contains(&0) || body.windows(6).any(|w| w.eq_ignore_ascii_case(b"\\u0000"));
    if has_nul {
        scrub(v)
    } else {
        v
    }
}

/// `HTTP 503 from target: <first 512 bytes of body>`.
pub fn http_error(status: u16, body: &[u8]) -> String {
    let text = scrub_str(text_prefix(body, ERROR_BODY_BYTES));
    let text = text.trim();
    if text.is_empty() {
        format!("HTTP {status} from target")
    } else {
        format!("HTTP {status} from target: {text}")
    }
}

/// At most `max` bytes of `body` as text, cut on a character boundary.
fn text_prefix(body: &[u8], max: usize) -> String {
    let cut = &body[..body.len().min(max)];
    match std::str::from_utf8(cut) {
        Ok(s) => s.to_string(),
        // A multi-byte character split by the cut is dropped, not mangled.
        Err(e) if e.error_len().is_none() => String::from_utf8_lossy(&cut[..e.valid_up_to()]).into_owned(),
        Err(_) => String::from_utf8_lossy(cut).into_owned(),
    }
}

/// `Retry-After` as a delay: whole seconds, or an HTTP date.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = DateTime::parse_from_rfc2822(v).ok()?;
    Some((at.with_timezone(&Utc) - now).to_std().unwrap_or(Duration::ZERO))
}

/// What gets recorded for the attempt.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Nothing to record: the run stays running (async mode).
    StaysRunning,
    Record(Recorded),
}

/// The run after an attempt, its error class the worker's.
pub type Recorded = RunAfter<ErrorClass>;

/// Applies the retry policy to attempt `attempt`'s verdict
/// (`domain::retry::decide`). `jitter` is a uniform sample in [0, 1] for
/// exponential backoff, injected for tests.
pub fn decide(verdict: Verdict, attempt: u32, policy: &RetryPolicy, now: DateTime<Utc>, jitter: f64) -> Decision {
    let end = match verdict {
        Verdict::StaysRunning => return Decision::StaysRunning,
        Verdict::Completed { result } => AttemptEnd::Completed { result },
        Verdict::Permanent { class, error } => {
            AttemptEnd::Failed { class, error, retryable: false, retry_after: None, timed_out: false }
        }
        Verdict::Retryable { class, error, retry_after, timed_out } => {
            AttemptEnd::Failed { class, error, retryable: true, retry_after, timed_out }
        }
    };
    Decision::Record(retry::decide(end, attempt, policy, now, jitter))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;
    use switchyard_shared::domain::{RetryStrategy, RunStatus};

    fn policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            strategy: RetryStrategy::Fixed,
            max_attempts,
            initial_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(60),
            custom_delays_secs: vec![],
        }
    }

    fn class_of(v: &Verdict) -> Option<&'static str> {
        match v {
            Verdict::Retryable { class, .. } | Verdict::Permanent { class, .. } => Some(class.as_str()),
            _ => None,
        }
    }

    #[test]
    fn status_mapping_table() {
        use ExecutionMode::{Async, Sync};
        // (status, mode, expected kind, expected error_class)
        let table: &[(u16, ExecutionMode, &str, Option<&str>)] = &[
            (200, Sync, "completed", None),
            (201, Sync, "completed", None),
            (204, Sync, "completed", None),
            (202, Sync, "completed", None),
            (202, Async, "running", None),
            (200, Async, "completed", None),
            (301, Sync, "permanent", Some("http_3xx")),
            (400, Sync, "permanent", Some("http_4xx")),
            (401, Sync, "permanent", Some("http_4xx")),
            (404, Sync, "permanent", Some("http_4xx")),
            (409, Sync, "permanent", Some("http_4xx")),
            (422, Async, "permanent", Some("http_4xx")),
            (408, Sync, "retryable", Some("http_408")),
            (429, Sync, "retryable", Some("http_429")),
            (500, Sync, "retryable", Some("http_5xx")),
            (502, Sync, "retryable", Some("http_5xx")),
            (503, Sync, "retryable", Some("http_5xx")),
            (504, Async, "retryable", Some("http_5xx")),
        ];
        for &(status, mode, kind, class) in table {
            let v = classify_response(status, mode, b"", None);
            let got = match &v {
                Verdict::Completed { .. } => "completed",
                Verdict::StaysRunning => "running",
                Verdict::Retryable { .. } => "retryable",
                Verdict::Permanent { .. } => "permanent",
            };
            assert_eq!((got, class_of(&v)), (kind, class), "status {status} in {mode:?}");
        }
    }

    #[test]
    fn retry_after_is_kept_only_for_429_and_503() {
        let ra = Some(Duration::from_secs(7));
        for (status, kept) in [(429, true), (503, true), (500, false), (408, false)] {
            match classify_response(status, ExecutionMode::Sync, b"", ra) {
                Verdict::Retryable { retry_after, .. } => assert_eq!(retry_after.is_some(), kept, "{status}"),
                other => panic!("{status}: {other:?}"),
            }
        }
    }

    #[test]
    fn bodies_become_results() {
        assert_eq!(result_from_body(br#"{"ok":true}"#), json!({"ok": true}));
        assert_eq!(result_from_body(b"42"), json!(42));
        assert_eq!(result_from_body(b"plain text"), json!("plain text"));
        assert_eq!(result_from_body(b""), Value::Null);
        assert_eq!(result_from_body(b" \n"), Value::Null);
        assert_eq!(result_from_body(&[0xff, 0xfe]), json!("\u{fffd}\u{fffd}"));
        assert_eq!(result_from_body(br#"{"a\u0000":["x\u0000"]}"#), json!({"a\u{fffd}": ["x\u{fffd}"]}));
        assert_eq!(result_from_body(b"a\0b"), json!("a\u{fffd}b"));
    }

    #[test]
    fn error_messages_are_short() {
        assert_eq!(http_error(503, b""), "HTTP 503 from target");
        assert_eq!(http_error(503, b"down for maintenance\n"), "HTTP 503 from target: down for maintenance");
        let long = "é".repeat(600); // 2 bytes each: the cut falls inside a character
        let msg = http_error(500, long.as_bytes());
        assert!(msg.len() <= "HTTP 500 from target: ".len() + ERROR_BODY_BYTES);
        assert!(msg.ends_with('é'));
    }

    #[test]
    fn retry_after_parses_seconds_and_dates() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(parse_retry_after(" 12 ", now), Some(Duration::from_secs(12)));
        assert_eq!(parse_retry_after("Thu, 01 Jan 2026 00:00:30 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Wed, 31 Dec 2025 00:00:00 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn retries_until_the_policy_says_stop() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let v = || Verdict::retryable(ErrorClass::Http5xx, "HTTP 500 from target");
        match decide(v(), 1, &policy(3), now, 0.5) {
            Decision::Record(r) => {
                assert_eq!(r.status, RunStatus::Retrying);
                assert_eq!(r.next_retry_at, Some(now + chrono::Duration::seconds(2)));
                assert_eq!(r.error_class, Some(ErrorClass::Http5xx));
            }
            d => panic!("{d:?}"),
        }
        match decide(v(), 3, &policy(3), now, 0.5) {
            Decision::Record(r) => {
                assert_eq!(r.status, RunStatus::Failed);
                assert_eq!(r.next_retry_at, None);
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn an_exhausted_timeout_is_timed_out() {
        let now = Utc::now();
        let v = Verdict::retryable(ErrorClass::Timeout, "no response within 1s");
        match decide(v, 1, &policy(1), now, 0.0) {
            Decision::Record(r) => {
                assert_eq!((r.status, r.error_class), (RunStatus::TimedOut, Some(ErrorClass::Timeout)))
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn retry_after_sets_the_next_attempt_time() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let v = classify_response(429, ExecutionMode::Sync, b"slow down", Some(Duration::from_secs(9)));
        match decide(v, 1, &policy(3), now, 0.0) {
            Decision::Record(r) => {
                assert_eq!(r.status, RunStatus::Retrying);
                assert_eq!(r.next_retry_at, Some(now + chrono::Duration::seconds(9)));
                assert_eq!(r.error.as_deref(), Some("HTTP 429 from target: slow down"));
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn permanent_failures_and_completions_ignore_the_policy() {
        let now = Utc::now();
        let d = decide(Verdict::permanent(ErrorClass::Http4xx, "HTTP 400 from target"), 1, &policy(5), now, 0.0);
        assert!(matches!(d, Decision::Record(Recorded { status: RunStatus::Failed, .. })));
        let d = decide(Verdict::Completed { result: json!(1) }, 1, &policy(5), now, 0.0);
        assert!(matches!(d, Decision::Record(Recorded { status: RunStatus::Completed, result: Some(_), .. })));
        assert_eq!(decide(Verdict::StaysRunning, 1, &policy(5), now, 0.0), Decision::StaysRunning);
    }
}
