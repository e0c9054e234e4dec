//! A step's job run or child run ended, or its wait ran out: the step
//! ends, with the output its `output_transform` makes of the result.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::effects::{EventNotice, Note, StepView, StepWrite};
use crate::domain::step::{CostGateAction, Step, StepKind};
use crate::domain::step_logic::transform_output;
use crate::domain::workflow_run::{StepNow, StepStatus, WorkflowRunStatus};
use crate::domain::RunStatus;

/// What the pass read of the step's job run and child run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen<'a> {
    /// The job run's status, result and error.
    pub job: Option<(RunStatus, Option<&'a Value>, Option<&'a str>)>,
    /// The child run's status, output and error.
    pub child: Option<(WorkflowRunStatus, Option<&'a Value>, Option<&'a str>)>,
}

/// A step that ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Ended {
    pub now: StepNow,
    pub write: StepWrite,
    pub note: Note,
    pub notice: Option<EventNotice>,
}

/// Whether the running or waiting step `s` ended by `now`; `None` when it
/// goes on (or was not under way).
pub fn step_ended(s: &StepView, seen: &Seen, def: Option<&Step>, now: DateTime<Utc>) -> Option<Ended> {
    if s.status != StepStatus::Running && s.status != StepStatus::Waiting {
        return None;
    }
    let mut notice = None;
    let (status, output, error) = if let Some((js, result, error)) = seen.job.filter(|j| j.0.is_terminal()) {
        let error = error.map(str::to_string);
        match js {
            RunStatus::Completed => (StepStatus::Completed, result.cloned(), None),
            RunStatus::TimedOut => (StepStatus::TimedOut, None, error),
            RunStatus::Cancelled => (StepStatus::Cancelled, None, error),
            RunStatus::Expired => {
                (StepStatus::Failed, None, Some("the step's job run expired before it started".into()))
            }
            _ => (StepStatus::Failed, None, error),
        }
    } else if let Some((cs, out, error)) = seen.child.filter(|c| c.0.is_terminal()) {
        let why = || error.map(str::to_string).or_else(|| Some(format!("the child workflow run {cs}")));
        match cs {
            WorkflowRunStatus::Completed => (StepStatus::Completed, out.cloned(), None),
            WorkflowRunStatus::TimedOut => (StepStatus::TimedOut, None, why()),
            WorkflowRunStatus::Cancelled => (StepStatus::Cancelled, None, why()),
            _ => (StepStatus::Failed, None, why()),
        }
    } else if s.wake_at.is_some_and(|w| w <= now) {
        // A sleep is over; a wait for an event or a decision ran out.
        match s.step_type {
            "sleep" => (StepStatus::Completed, None, None),
            "approval" => (StepStatus::TimedOut, None, Some("no decision within approval_timeout_secs".into())),
            "cost_gate" => match def.map(|d| &d.kind) {
                Some(StepKind::CostGate { default_action: CostGateAction::Proceed, .. }) => (
                    StepStatus::Completed,
                    Some(json!({ "action": "proceeded", "reason": "no decision within cost_gate_timeout_secs" })),
                    None,
                ),
                _ => (
                    StepStatus::Failed,
                    None,
                    Some("no decision within cost_gate_timeout_secs (cost_gate_default_action fail)".into()),
                ),
            },
            "wait_for_event" => {
                if let Some(StepKind::WaitForEvent { event_key, notify_url: Some(url), .. }) = def.map(|d| &d.kind) {
                    notice = Some(EventNotice {
                        url: url.clone(),
                        step_run_id: s.id.clone(),
                        step_ref: s.step_ref.to_string(),
                        event_key: event_key.clone(),
                    });
                }
                (StepStatus::TimedOut, None, Some("no event within event_timeout_secs".into()))
            }
            _ => return None,
        }
    } else {
        return None;
    };
    let transform = def.and_then(|d| d.output_transform.as_deref());
    let (status, output, error) = match (status, transform) {
        (StepStatus::Completed, Some(t)) => match transform_output(t, output.as_ref().unwrap_or(&Value::Null)) {
            Ok(v) => (StepStatus::Completed, Some(v), None),
            Err(e) => (StepStatus::Failed, None, Some(e)),
        },
        _ => (status, output, error),
    };
    let reason = match &error {
        Some(e) => format!("{status}: {e}"),
        None => status.to_string(),
    };
    let details = json!({ "job_run_id": s.job_run_id, "child_workflow_run_id": s.child_workflow_run_id });
    Some(Ended {
        write: StepWrite::finish(s, status, output.clone(), error.clone()),
        note: Note::step(s.step_ref, &format!("step_{status}"), &reason, details),
        now: StepNow { status, output, error },
        notice,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(kind: &'a str, status: StepStatus, wake_at: Option<DateTime<Utc>>) -> StepView<'a> {
        StepView { attempt: 1, job_run_id: Some("run_1"), wake_at, ..StepView::test("s", kind, status) }
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn a_job_steps_end_follows_its_job_runs() {
        let out = json!({ "n": 7 });
        let cases: &[(RunStatus, StepStatus, Option<Value>, Option<&str>)] = &[
            (RunStatus::Completed, StepStatus::Completed, Some(out.clone()), None),
            (RunStatus::Failed, StepStatus::Failed, None, Some("boom")),
            (RunStatus::TimedOut, StepStatus::TimedOut, None, Some("boom")),
            (RunStatus::Cancelled, StepStatus::Cancelled, None, Some("boom")),
            (RunStatus::Expired, StepStatus::Failed, None, Some("the step's job run expired before it started")),
        ];
        let def = Step::test("job", json!({ "job_id": "job_1" }));
        for (job, want, output, error) in cases {
            let seen = Seen { job: Some((*job, Some(&out), Some("boom"))), child: None };
            let e = step_ended(&view("job", StepStatus::Running, None), &seen, Some(&def), at(0)).expect("ended");
            assert_eq!((e.now.status, &e.now.output, e.now.error.as_deref()), (*want, output, *error), "{job}");
            assert_eq!((e.write.status, e.write.finish, e.write.start), (*want, true, false));
            assert_eq!(e.note.decision_type, format!("step_{want}"));
            assert_eq!(e.note.details["job_run_id"], "run_1");
        }
        for live in [RunStatus::Queued, RunStatus::Running, RunStatus::Retrying, RunStatus::Pending] {
            let seen = Seen { job: Some((live, None, None)), child: None };
            assert_eq!(step_ended(&view("job", StepStatus::Running, None), &seen, Some(&def), at(0)), None, "{live}");
        }
    }

    #[test]
    fn a_sub_workflow_steps_end_follows_its_child_run() {
        let out = json!({ "child": true });
        let cases = [
            (WorkflowRunStatus::Completed, StepStatus::Completed, Some(out.clone()), None),
            (WorkflowRunStatus::Failed, StepStatus::Failed, None, Some("the child workflow run failed")),
            (WorkflowRunStatus::TimedOut, StepStatus::TimedOut, None, Some("the child workflow run timed_out")),
            (WorkflowRunStatus::Cancelled, StepStatus::Cancelled, None, Some("the child workflow run cancelled")),
        ];
        let def = Step::test("sub_workflow", json!({ "sub_workflow_id": "wf_2" }));
        for (child, want, output, error) in cases {
            let seen = Seen { job: None, child: Some((child, Some(&out), None)) };
            let e = step_ended(&view("sub_workflow", StepStatus::Running, None), &seen, Some(&def), at(0)).unwrap();
            assert_eq!((e.now.status, e.now.output, e.now.error.as_deref()), (want, output, error), "{child}");
        }
        // The child's own error, when it has one, is the step's.
        let seen = Seen { job: None, child: Some((WorkflowRunStatus::Failed, None, Some("step x failed"))) };
        let e = step_ended(&view("sub_workflow", StepStatus::Running, None), &seen, Some(&def), at(0)).unwrap();
        assert_eq!(e.now.error.as_deref(), Some("step x failed"));
        let seen = Seen { job: None, child: Some((WorkflowRunStatus::Running, None, None)) };
        assert_eq!(step_ended(&view("sub_workflow", StepStatus::Running, None), &seen, Some(&def), at(0)), None);
    }

    #[test]
    fn a_wait_ends_when_its_time_comes_as_its_kind_says() {
        let proceed = Step::test(
            "cost_gate",
            json!({ "cost_gate_threshold_microusd": 1, "cost_gate_default_action": "proceed" }),
        );
        let fail = Step::test("cost_gate", json!({ "cost_gate_threshold_microusd": 1 }));
        let event = Step::test(
            "wait_for_event",
            json!({ "event_key": "order.paid", "event_notify_url": "https://example.com/hook" }),
        );
        let cases: Vec<(&str, Step, StepStatus, Option<&str>)> = vec![
            ("sleep", Step::test("sleep", json!({ "sleep_duration_secs": 5 })), StepStatus::Completed, None),
            (
                "approval",
                Step::test("approval", json!({})),
                StepStatus::TimedOut,
                Some("no decision within approval_timeout_secs"),
            ),
            ("cost_gate", proceed, StepStatus::Completed, None),
            (
                "cost_gate",
                fail,
                StepStatus::Failed,
                Some("no decision within cost_gate_timeout_secs (cost_gate_default_action fail)"),
            ),
            ("wait_for_event", event, StepStatus::TimedOut, Some("no event within event_timeout_secs")),
        ];
        for (kind, def, want, error) in cases {
            let waiting = view(kind, StepStatus::Waiting, Some(at(10)));
            assert_eq!(step_ended(&waiting, &Seen::default(), Some(&def), at(9)), None, "{kind} before its time");
            let e = step_ended(&waiting, &Seen::default(), Some(&def), at(10)).expect("ended");
            assert_eq!((e.now.status, e.now.error.as_deref()), (want, error), "{kind}");
            assert_eq!(e.notice.is_some(), kind == "wait_for_event", "{kind}");
        }
        // A wait with no timeout never ends by time.
        let forever = view("approval", StepStatus::Waiting, None);
        assert_eq!(
            step_ended(&forever, &Seen::default(), Some(&Step::test("approval", json!({}))), at(1_000_000)),
            None
        );
    }

    #[test]
    fn output_transform_shapes_a_completed_output_and_a_bad_one_fails_the_step() {
        let out = json!({ "order": { "total": 42 } });
        let seen = Seen { job: Some((RunStatus::Completed, Some(&out), None)), child: None };
        let shaped = Step::test("job", json!({ "job_id": "job_1", "output_transform": "order.total" }));
        let e = step_ended(&view("job", StepStatus::Running, None), &seen, Some(&shaped), at(0)).unwrap();
        assert_eq!((e.now.status, e.now.output), (StepStatus::Completed, Some(json!(42))));
        let broken = Step::test("job", json!({ "job_id": "job_1", "output_transform": "order.[" }));
        let e = step_ended(&view("job", StepStatus::Running, None), &seen, Some(&broken), at(0)).unwrap();
        assert_eq!(e.now.status, StepStatus::Failed);
        assert!(e.now.error.is_some());
    }

    #[test]
    fn a_step_that_is_not_under_way_is_left_alone() {
        let out = json!(1);
        let seen = Seen { job: Some((RunStatus::Completed, Some(&out), None)), child: None };
        for status in [StepStatus::Pending, StepStatus::Completed, StepStatus::Failed, StepStatus::Skipped] {
            assert_eq!(step_ended(&view("job", status, None), &seen, None, at(0)), None, "{status}");
        }
    }
}
