//! How a run ends: every step ended, a step failed the run, or its saga
//! undid what it could.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::effects::Decided;
use crate::domain::step_logic;
use crate::domain::workflow_run::{self, Compensable, Ending, StepNow, WorkflowRunStatus};

/// The end the rules decided (`domain::workflow_run::next`), with the
/// steps as the pass leaves them; `None` for `Compensate`, which begins
/// the saga instead ([`saga_record`]).
pub fn decided(ending: &Ending, steps: &HashMap<String, StepNow>) -> Option<Decided> {
    match ending {
        Ending::Completed => Some(Decided {
            output: Some(workflow_run::run_output(steps.iter().map(|(r, s)| (r.as_str(), s)))),
            ..Decided::ended(WorkflowRunStatus::Completed, "every step ended")
        }),
        Ending::Failed { error, step_ref } => Some(Decided {
            // A step failed by its expression's budget names it on the
            // run, where clients filter by class.
            error_class: steps
                .get(step_ref)
                .and_then(|s| s.error.as_deref())
                .and_then(step_logic::error_class_of)
                .map(str::to_string),
            ..Decided::ended(WorkflowRunStatus::Failed, error)
        }),
        Ending::Compensate { .. } => None,
    }
}

/// The saga's record as it begins: step `failed_step` failed with `error`.
pub fn saga_record(failed_step: &str, error: &str, now: DateTime<Utc>) -> Value {
    json!({ "status": "running", "failed_step": failed_step, "error": error, "started_at": now, "steps": [] })
}

/// How a saga ends: every compensation completed (`failed` none), or the
/// compensation of step `failed` failed for good. `record` is the saga's
/// record so far, `list` the steps it undoes, `done` those it undid,
/// `job_run_of` each step's compensation job run.
pub fn saga_ended(
    mut record: Value,
    list: &[Compensable],
    done: &HashSet<String>,
    failed: Option<&str>,
    job_run_of: impl Fn(&str) -> Option<String>,
    now: DateTime<Utc>,
) -> Decided {
    let error = record["error"].as_str().unwrap_or("a step failed").to_string();
    let order: Vec<Value> = workflow_run::saga_order(list)
        .into_iter()
        .map(|i| {
            let c = &list[i];
            let status = if done.contains(&c.step_ref) {
                "compensated"
            } else if failed == Some(c.step_ref.as_str()) {
                "failed"
            } else {
                "not_compensated"
            };
            json!({ "step_ref": c.step_ref, "status": status, "job_run_id": job_run_of(&c.step_ref) })
        })
        .collect();
    let compensated: Vec<&str> =
        order.iter().filter(|s| s["status"] == "compensated").filter_map(|s| s["step_ref"].as_str()).collect();
    let undone = if compensated.is_empty() { "nothing to undo".into() } else { compensated.join(", ") };
    let error = match failed {
        None => format!("{error}; compensated: {undone}"),
        Some(r) => format!("{error}; the compensation of step {r} failed"),
    };
    record["steps"] = Value::Array(order);
    record["finished_at"] = json!(now);
    match failed {
        None => {
            record["status"] = json!("completed");
            Decided {
                error: Some(error),
                compensation: Some(record),
                ..Decided::ended(WorkflowRunStatus::Failed, "the saga compensated every completed step")
            }
        }
        Some(r) => {
            record["status"] = json!("failed");
            Decided {
                error: Some(error),
                error_class: Some("compensation_failed".into()),
                compensation: Some(record),
                ..Decided::ended(WorkflowRunStatus::Failed, &format!("the compensation of step {r} failed"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::workflow_run::StepStatus;

    fn now_of(pairs: &[(&str, StepStatus, Option<Value>, Option<&str>)]) -> HashMap<String, StepNow> {
        pairs
            .iter()
            .map(|(r, s, o, e)| {
                (r.to_string(), StepNow { status: *s, output: o.clone(), error: e.map(str::to_string) })
            })
            .collect()
    }

    #[test]
    fn each_ending_decides_the_runs_status_output_and_class() {
        let steps = now_of(&[
            ("a", StepStatus::Completed, Some(json!(1)), None),
            ("b", StepStatus::Skipped, None, None),
            ("c", StepStatus::Failed, None, Some("expression_budget_exceeded: too big")),
        ]);
        let done = decided(&Ending::Completed, &steps).unwrap();
        assert_eq!((done.status, done.error, done.error_class), (WorkflowRunStatus::Completed, None, None));
        assert_eq!(done.output.unwrap()["a"], json!(1));

        let failed = decided(&Ending::Failed { step_ref: "c".into(), error: "step c failed".into() }, &steps).unwrap();
        assert_eq!((failed.status, failed.error.as_deref()), (WorkflowRunStatus::Failed, Some("step c failed")));
        assert_eq!(
            failed.error_class,
            step_logic::error_class_of("expression_budget_exceeded: too big").map(str::to_string)
        );

        let plain = now_of(&[("c", StepStatus::Failed, None, Some("HTTP 500"))]);
        let failed = decided(&Ending::Failed { step_ref: "c".into(), error: "step c failed".into() }, &plain).unwrap();
        assert_eq!(failed.error_class, None);

        assert_eq!(decided(&Ending::Compensate { step_ref: "c".into(), error: "x".into() }, &steps), None);
    }

    fn compensable(r: &str, secs: i64, status: StepStatus) -> Compensable {
        Compensable {
            step_ref: r.into(),
            status,
            finished_at: DateTime::from_timestamp(1_800_000_000 + secs, 0),
            job: None,
        }
    }

    #[test]
    fn a_saga_ends_with_a_record_of_every_step_in_the_order_it_undid_them() {
        let t = DateTime::from_timestamp(1_800_000_100, 0).unwrap();
        let list = [compensable("a", 1, StepStatus::Compensated), compensable("b", 2, StepStatus::Compensated)];
        let done: HashSet<String> = ["a".to_string(), "b".to_string()].into();
        let d = saga_ended(saga_record("c", "boom", t), &list, &done, None, |r| Some(format!("run_{r}")), t);
        let rec = d.compensation.unwrap();
        assert_eq!((d.status, d.error_class), (WorkflowRunStatus::Failed, None));
        assert_eq!(d.error.as_deref(), Some("boom; compensated: b, a"));
        assert_eq!(rec["status"], "completed");
        assert_eq!(rec["steps"][0], json!({ "step_ref": "b", "status": "compensated", "job_run_id": "run_b" }));

        let done: HashSet<String> = ["b".to_string()].into();
        let d = saga_ended(saga_record("c", "boom", t), &list, &done, Some("a"), |_| None, t);
        let rec = d.compensation.unwrap();
        assert_eq!(d.error_class.as_deref(), Some("compensation_failed"));
        assert_eq!(d.error.as_deref(), Some("boom; the compensation of step a failed"));
        assert_eq!((rec["status"].as_str(), rec["steps"][1]["status"].as_str()), (Some("failed"), Some("failed")));

        let d = saga_ended(saga_record("c", "boom", t), &[], &HashSet::new(), None, |_| None, t);
        assert_eq!(d.error.as_deref(), Some("boom; compensated: nothing to undo"));
    }
}
