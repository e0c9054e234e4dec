//! Singleton and debounce: two settings of a job that keep at most one of
//! its runs per key in a state. A singleton lets one run per key be
//! unfinished (a trigger meanwhile is skipped, or replaces it); a debounce
//! lets one run per key wait in its window (a trigger meanwhile moves the
//! window on and gives the run its payload). The key is a JMESPath over the
//! trigger's payload; without one, the job is one bucket. The decisions are
//! made in Postgres, under a lock on (job, key): `store::one_per_key`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::field_errors::FieldErrors;
use super::step_logic;
use super::workflow::check_output_transform;

/// Shortest and longest debounce period and longest wait, in seconds.
pub const DEBOUNCE_SECS: (i64, i64) = (1, 7 * 86_400);
/// Longest key a payload may give, as text: the key is stored with the run.
pub const MAX_KEY_VALUE_LEN: usize = 256;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Debounce {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub period_secs: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait_secs: Option<i64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SingletonMode {
    /// A trigger while a run of its key is unfinished makes nothing.
    #[default]
    Skip,
    /// A trigger cancels the unfinished run of its key and takes its place.
    Cancel,
}

impl SingletonMode {
    pub fn parse(s: &str) -> Option<SingletonMode> {
        match s {
            "skip" => Some(SingletonMode::Skip),
            "cancel" => Some(SingletonMode::Cancel),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SingletonMode::Skip => "skip",
            SingletonMode::Cancel => "cancel",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Singleton {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub mode: SingletonMode,
}

/// The problems of a job's `debounce` and `singleton`, each at its field.
pub fn validate(debounce: Option<&Debounce>, singleton: Option<&Singleton>, errs: &mut FieldErrors) {
    let (lo, hi) = DEBOUNCE_SECS;
    if let Some(d) = debounce {
        check_key(d.key.as_deref(), "body.debounce/key", errs);
        if !(lo..=hi).contains(&d.period_secs) {
            errs.push(
                "body.debounce/period_secs",
                format!("must be between {lo} and {hi}"),
                Some(d.period_secs.into()),
            );
        }
        if let Some(w) = d.max_wait_secs {
            if !(lo..=hi).contains(&w) {
                errs.push("body.debounce/max_wait_secs", format!("must be between {lo} and {hi}"), Some(w.into()));
            } else if w < d.period_secs {
                errs.push("body.debounce/max_wait_secs", "must not be shorter than period_secs", Some(w.into()));
            }
        }
    }
    if let Some(s) = singleton {
        check_key(s.key.as_deref(), "body.singleton/key", errs);
        if debounce.is_some() {
            // A debounced run waits by design; a singleton would refuse the
            // very triggers that are meant to move its window on.
            errs.push("body.singleton", "a job has a singleton or a debounce, not both", None);
        }
    }
}

fn check_key(key: Option<&str>, at: &str, errs: &mut FieldErrors) {
    if let Some(k) = key {
        if let Err(m) = check_output_transform(k) {
            errs.push(at, m, Some(k.into()));
        }
    }
}

/// The key a trigger's payload gives: the expression's result, a string as
/// itself and any other value as its JSON text; no expression (or a null
/// result) is the job's one bucket, `""`. An error says why the trigger is
/// refused (the expression failed, or the key is too long).
pub fn key_of(expression: Option<&str>, payload: Option<&Value>) -> Result<String, String> {
    let Some(expression) = expression else {
        return Ok(String::new());
    };
    let found = step_logic::transform_output(expression, payload.unwrap_or(&Value::Null))?;
    let key = match found {
        Value::Null => String::new(),
        Value::String(s) => s,
        other => other.to_string(),
    };
    if key.len() > MAX_KEY_VALUE_LEN {
        return Err(format!("the key the payload gives is longer than {MAX_KEY_VALUE_LEN} bytes"));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_come_from_the_payload() {
        let p = json!({"user": {"id": "u1"}, "n": 7, "tags": ["a"]});
        assert_eq!(key_of(None, Some(&p)).unwrap(), "");
        assert_eq!(key_of(Some("user.id"), Some(&p)).unwrap(), "u1");
        assert_eq!(key_of(Some("n"), Some(&p)).unwrap(), "7");
        assert_eq!(key_of(Some("tags"), Some(&p)).unwrap(), r#"["a"]"#);
        assert_eq!(key_of(Some("missing"), Some(&p)).unwrap(), "", "null is the job's bucket");
        assert_eq!(key_of(Some("user.id"), None).unwrap(), "");
        let long = json!({"k": "x".repeat(MAX_KEY_VALUE_LEN + 1)});
        assert!(key_of(Some("k"), Some(&long)).is_err());
    }

    #[test]
    fn settings_are_checked_at_their_fields() {
        let mut errs = FieldErrors::new();
        let d = Debounce { key: Some("a[".into()), period_secs: 0, max_wait_secs: Some(DEBOUNCE_SECS.1 + 1) };
        let s = Singleton { key: Some("user.id".into()), mode: SingletonMode::Skip };
        validate(Some(&d), Some(&s), &mut errs);
        let locs: Vec<String> = errs.into_vec().into_iter().map(|e| e.location).collect();
        assert_eq!(
            locs,
            ["body.debounce/key", "body.debounce/period_secs", "body.debounce/max_wait_secs", "body.singleton"]
        );
        let mut errs = FieldErrors::new();
        let d = Debounce { key: None, period_secs: 10, max_wait_secs: Some(5) };
        validate(Some(&d), None, &mut errs);
        assert_eq!(errs.into_vec()[0].message, "must not be shorter than period_secs");
        let mut errs = FieldErrors::new();
        let d = Debounce { key: Some("user.id".into()), period_secs: 10, max_wait_secs: Some(60) };
        validate(Some(&d), None, &mut errs);
        assert!(errs.into_vec().is_empty());
    }
}
