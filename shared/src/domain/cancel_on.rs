//! Cancel on event: a job's `cancel_on` rules. An event of a rule's key,
//! dispatched while a run of the job is unfinished (and, with
//! `timeout_secs`, no longer than that after the run was made), cancels
//! the run when the rule's `match` holds: JSONLogic over `{event, run}`,
//! the event's payload and the run's. The store applies them as the event
//! is fired (`store::cancel_on`).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::field_errors::FieldErrors;
use super::{event_key, step_logic, workflow};

/// Most rules a job may have.
pub const MAX_RULES: usize = 10;
/// Longest `timeout_secs`: a week, as a debounce's longest wait.
pub const TIMEOUT_SECS: (i64, i64) = (1, 7 * 86_400);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelOn {
    pub event_key: String,
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub condition: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<i64>,
}

/// The problems of a job's rules, each at its field.
pub fn validate(rules: &[CancelOn], errs: &mut FieldErrors) {
    if rules.len() > MAX_RULES {
        errs.push("body.cancel_on", format!("at most {MAX_RULES} rules"), Some(rules.len().into()));
    }
    let (lo, hi) = TIMEOUT_SECS;
    for (i, r) in rules.iter().enumerate() {
        event_key::check_key(errs, &format!("body.cancel_on/{i}/event_key"), &r.event_key);
        if let Some(c) = &r.condition {
            if let Err(m) = workflow::check_condition(c) {
                errs.push(format!("body.cancel_on/{i}/match"), m, Some(c.clone()));
            }
        }
        if let Some(t) = r.timeout_secs {
            if !(lo..=hi).contains(&t) {
                errs.push(
                    format!("body.cancel_on/{i}/timeout_secs"),
                    format!("must be between {lo} and {hi}"),
                    Some(t.into()),
                );
            }
        }
    }
}

/// Whether the rule's `match` holds for the event and the run (no `match`:
/// every run of the job). A `match` that fails to evaluate (over its
/// budget, say) does not hold: an unfinished run is never cancelled on a
/// guess.
pub fn matches(rule: &CancelOn, event_payload: Option<&Value>, run_payload: Option<&Value>) -> bool {
    let Some(c) = &rule.condition else { return true };
    let input = json!({ "event": event_payload.unwrap_or(&Value::Null), "run": run_payload.unwrap_or(&Value::Null) });
    step_logic::condition_holds(c, &input).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_match_compares_the_event_with_the_run() {
        let rule = CancelOn {
            event_key: "order.cancelled".into(),
            condition: Some(json!({"==": [{"var": "event.order_id"}, {"var": "run.order_id"}]})),
            timeout_secs: None,
        };
        let (a, b) = (json!({"order_id": "a"}), json!({"order_id": "b"}));
        assert!(matches(&rule, Some(&a), Some(&a)));
        assert!(!matches(&rule, Some(&a), Some(&b)));
        assert!(!matches(&rule, None, Some(&b)));
        let every = CancelOn { condition: None, ..rule };
        assert!(matches(&every, None, None));
    }

    #[test]
    fn rules_are_checked_at_their_fields() {
        let mut errs = FieldErrors::new();
        let bad = CancelOn { event_key: "a*".into(), condition: Some(json!({"nope": []})), timeout_secs: Some(0) };
        validate(&[bad], &mut errs);
        let locs: Vec<String> = errs.into_vec().into_iter().map(|e| e.location).collect();
        assert_eq!(locs, ["body.cancel_on/0/event_key", "body.cancel_on/0/match", "body.cancel_on/0/timeout_secs"]);
    }
}
