//! Batching: a job's `batch` setting. Its triggers wait in an open batch of
//! their key until `max_size` have come or `timeout_secs` passed since the
//! first; then one run is made whose payload is the array of their payloads
//! in arrival order. The key is a JMESPath over the payload, as for a
//! debounce (`one_per_key::key_of`). Batches live in Postgres
//! (`store::trigger_batches`).

use serde::{Deserialize, Serialize};

use super::field_errors::FieldErrors;
use super::workflow::check_output_transform;

/// Fewest and most triggers a batch takes.
pub const MAX_SIZE: (i64, i64) = (2, 1000);
/// Shortest and longest wait after a batch's first trigger, in seconds.
pub const TIMEOUT_SECS: (i64, i64) = (1, 3600);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub max_size: i64,
    pub timeout_secs: i64,
}

/// The problems of a job's `batch`; `gated` says whether the job also has a
/// debounce or a singleton, which a batch cannot be combined with.
pub fn validate(batch: Option<&Batch>, gated: bool, errs: &mut FieldErrors) {
    let Some(b) = batch else { return };
    if let Some(k) = &b.key {
        if let Err(m) = check_output_transform(k) {
            errs.push("body.batch/key", m, Some(k.clone().into()));
        }
    }
    let (lo, hi) = MAX_SIZE;
    if !(lo..=hi).contains(&b.max_size) {
        errs.push("body.batch/max_size", format!("must be between {lo} and {hi}"), Some(b.max_size.into()));
    }
    let (lo, hi) = TIMEOUT_SECS;
    if !(lo..=hi).contains(&b.timeout_secs) {
        errs.push("body.batch/timeout_secs", format!("must be between {lo} and {hi}"), Some(b.timeout_secs.into()));
    }
    if gated {
        // A batch's run is many triggers' run: there is no one trigger
        // for a debounce to fold or a singleton to skip.
        errs.push("body.batch", "a job batches its triggers or has a debounce or singleton, not both", None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_checked_at_their_fields() {
        let mut errs = FieldErrors::new();
        let b = Batch { key: Some("a[".into()), max_size: 1, timeout_secs: 0 };
        validate(Some(&b), true, &mut errs);
        let locs: Vec<String> = errs.into_vec().into_iter().map(|e| e.location).collect();
        assert_eq!(locs, ["body.batch/key", "body.batch/max_size", "body.batch/timeout_secs", "body.batch"]);
        let mut errs = FieldErrors::new();
        validate(Some(&Batch { key: Some("tenant".into()), max_size: 10, timeout_secs: 5 }), false, &mut errs);
        assert!(errs.into_vec().is_empty());
    }
}
