//! Retry policy: how many attempts a run gets and how long it waits between
//! them.
//!
//! For attempt `n` (the attempt that just failed, from 1) and base delay `b`:
//! - `fixed`: `b`
//! - `linear`: `b * n`
//! - `exponential` (default): full jitter, uniform in `[0, b * 2^(n-1)]`,
//!   which spreads a burst of failures instead of retrying it in lock step
//! - `custom`: `retry_delays_secs[n-1]`, the last value repeating
//! - `none`: no retry at all
//!
//! Every delay is capped at the max delay. A target's `Retry-After` (on 429
//! or 503) overrides the computed delay, still capped.
//!
//! [`decide`] is what an attempt's end makes of its run, wherever the end
//! is learnt: the worker's dispatch, or the SDK's complete and fail calls.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::RunStatus;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RetryStrategy {
    Fixed,
    Linear,
    #[default]
    Exponential,
    Custom,
    None,
}

impl RetryStrategy {
    pub const NAMES: [&'static str; 5] = ["fixed", "linear", "exponential", "custom", "none"];

    pub fn as_str(self) -> &'static str {
        match self {
            RetryStrategy::Fixed => "fixed",
            RetryStrategy::Linear => "linear",
            RetryStrategy::Exponential => "exponential",
            RetryStrategy::Custom => "custom",
            RetryStrategy::None => "none",
        }
    }
}

impl FromStr for RetryStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fixed" => Ok(RetryStrategy::Fixed),
            "linear" => Ok(RetryStrategy::Linear),
            "exponential" => Ok(RetryStrategy::Exponential),
            "custom" => Ok(RetryStrategy::Custom),
            "none" => Ok(RetryStrategy::None),
            _ => Err(format!("unknown retry strategy {s:?}; expected one of {}", Self::NAMES.join(", "))),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    pub strategy: RetryStrategy,
    pub max_attempts: u32,
    pub initial_delay: Duration,
    pub max_delay: Duration,
    pub custom_delays_secs: Vec<u64>,
}

impl RetryPolicy {
    /// Whether attempt `attempt` (from 1) may be followed by another.
    pub fn may_retry(&self, attempt: u32) -> bool {
        self.strategy != RetryStrategy::None && attempt < self.max_attempts
    }

    /// The wait after failed attempt `attempt` (from 1). `jitter` is a
    /// uniform sample in [0, 1], injected so tests are deterministic.
    pub fn delay_after(&self, attempt: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
        let n = attempt.max(1);
        let computed = match self.strategy {
            RetryStrategy::Fixed | RetryStrategy::None => self.initial_delay,
            RetryStrategy::Linear => self.initial_delay.saturating_mul(n),
            RetryStrategy::Exponential => {
                let ceiling = self.initial_delay.saturating_mul(2u32.saturating_pow((n - 1).min(30)));
                ceiling.min(self.max_delay).mul_f64(jitter.clamp(0.0, 1.0))
            }
            RetryStrategy::Custom => {
                let i = (n as usize - 1).min(self.custom_delays_secs.len().saturating_sub(1));
                Duration::from_secs(self.custom_delays_secs.get(i).copied().unwrap_or(0))
            }
        };
        retry_after.unwrap_or(computed).min(self.max_delay)
    }
}

/// How an attempt ended. `C` is the caller's error class: the worker's
/// classification of a response, or the text an SDK call gave.
#[derive(Clone, Debug, PartialEq)]
pub enum AttemptEnd<C> {
    Completed {
        result: Value,
    },
    Failed {
        class: C,
        error: String,
        /// Whether another attempt may help; the policy still decides.
        retryable: bool,
        /// The target's `Retry-After`, which replaces the policy's delay.
        retry_after: Option<Duration>,
        /// An exhausted run becomes `timed_out` rather than `failed`.
        timed_out: bool,
    },
}

/// What the run becomes after an attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct RunAfter<C> {
    pub status: RunStatus,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub error_class: Option<C>,
    pub next_retry_at: Option<DateTime<Utc>>,
}

/// The retry decision: what `end` of attempt `attempt` (from 1) makes of
/// the run under `policy`. Pure; `jitter` is a uniform sample in [0, 1] for
/// exponential backoff.
pub fn decide<C>(
    end: AttemptEnd<C>,
    attempt: u32,
    policy: &RetryPolicy,
    now: DateTime<Utc>,
    jitter: f64,
) -> RunAfter<C> {
    match end {
        AttemptEnd::Completed { result } => RunAfter {
            status: RunStatus::Completed,
            result: Some(result),
            error: None,
            error_class: None,
            next_retry_at: None,
        },
        AttemptEnd::Failed { class, error, retryable, retry_after, timed_out } => {
            let next_retry_at = (retryable && policy.may_retry(attempt)).then(|| {
                let delay = chrono::Duration::from_std(policy.delay_after(attempt, retry_after, jitter))
                    .unwrap_or(chrono::Duration::MAX);
                now.checked_add_signed(delay).unwrap_or(DateTime::<Utc>::MAX_UTC)
            });
            let status = match next_retry_at {
                Some(_) => RunStatus::Retrying,
                None if timed_out => RunStatus::TimedOut,
                None => RunStatus::Failed,
            };
            RunAfter { status, result: None, error: Some(error), error_class: Some(class), next_retry_at }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(strategy: RetryStrategy) -> RetryPolicy {
        RetryPolicy {
            strategy,
            max_attempts: 5,
            initial_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(60),
            custom_delays_secs: vec![1, 7, 30],
        }
    }

    #[test]
    fn delays_follow_the_formula() {
        let fixed = policy(RetryStrategy::Fixed);
        assert_eq!(fixed.delay_after(3, None, 0.5), Duration::from_secs(2));
        let linear = policy(RetryStrategy::Linear);
        assert_eq!(linear.delay_after(3, None, 0.5), Duration::from_secs(6));
        let exp = policy(RetryStrategy::Exponential);
        assert_eq!(exp.delay_after(3, None, 1.0), Duration::from_secs(8));
        assert_eq!(exp.delay_after(3, None, 0.5), Duration::from_secs(4));
        assert_eq!(exp.delay_after(30, None, 1.0), Duration::from_secs(60), "capped");
        let custom = policy(RetryStrategy::Custom);
        assert_eq!(custom.delay_after(1, None, 0.0), Duration::from_secs(1));
        assert_eq!(custom.delay_after(2, None, 0.0), Duration::from_secs(7));
        assert_eq!(custom.delay_after(9, None, 0.0), Duration::from_secs(30), "last repeats");
    }

    #[test]
    fn retry_after_overrides_but_stays_capped() {
        let p = policy(RetryStrategy::Fixed);
        assert_eq!(p.delay_after(1, Some(Duration::from_secs(9)), 0.0), Duration::from_secs(9));
        assert_eq!(p.delay_after(1, Some(Duration::from_secs(900)), 0.0), Duration::from_secs(60));
    }

    #[test]
    fn attempts_are_bounded() {
        let p = policy(RetryStrategy::Fixed);
        assert!(p.may_retry(4));
        assert!(!p.may_retry(5));
        assert!(!policy(RetryStrategy::None).may_retry(1));
    }

    #[test]
    fn an_attempts_end_makes_the_run() {
        let now = DateTime::<Utc>::UNIX_EPOCH;
        let at = |secs| Some(now + chrono::Duration::seconds(secs));
        let failed = |retryable, retry_after: Option<u64>, timed_out| AttemptEnd::Failed {
            class: "c",
            error: "e".to_string(),
            retryable,
            retry_after: retry_after.map(Duration::from_secs),
            timed_out,
        };
        // (end, attempt, strategy, status, next_retry_at)
        let table = [
            (failed(true, None, false), 1, RetryStrategy::Fixed, RunStatus::Retrying, at(2)),
            (failed(true, Some(9), false), 1, RetryStrategy::Fixed, RunStatus::Retrying, at(9)),
            (failed(true, None, false), 5, RetryStrategy::Fixed, RunStatus::Failed, None),
            (failed(true, None, true), 5, RetryStrategy::Fixed, RunStatus::TimedOut, None),
            (failed(true, None, true), 1, RetryStrategy::Fixed, RunStatus::Retrying, at(2)),
            (failed(true, None, false), 1, RetryStrategy::None, RunStatus::Failed, None),
            (failed(false, None, false), 1, RetryStrategy::Fixed, RunStatus::Failed, None),
            (failed(false, None, true), 1, RetryStrategy::Fixed, RunStatus::TimedOut, None),
        ];
        for (i, (end, attempt, strategy, status, next)) in table.into_iter().enumerate() {
            let got = decide(end, attempt, &policy(strategy), now, 0.5);
            assert_eq!((got.status, got.next_retry_at), (status, next), "row {i}");
            assert_eq!((got.error.as_deref(), got.error_class, got.result), (Some("e"), Some("c"), None), "row {i}");
        }
        let done =
            decide::<&str>(AttemptEnd::Completed { result: Value::from(1) }, 5, &policy(RetryStrategy::None), now, 0.5);
        assert_eq!(
            done,
            RunAfter {
                status: RunStatus::Completed,
                result: Some(Value::from(1)),
                error: None,
                error_class: None,
                next_retry_at: None
            }
        );
    }
}
