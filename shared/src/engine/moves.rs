//! The moves a person makes on a run through the api: cancel, pause,
//! resume, a decision on a waiting step, a step's retry and a subtree's
//! replay. Each looks at the run (and its steps) as the store read them
//! under the run's lock, and either refuses with the reason the caller
//! sees, or says what changes; `store::workflow_moves` applies it and lets
//! the engine's next pass take the run on from there.

use serde_json::{json, Value};

use super::effects::{Decided, Note, StepView};
use crate::domain::workflow_run::{StepStatus, WorkflowRunStatus};

/// Why a move was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum Refused {
    NotFound,
    /// The move does not apply to the run or step as it is.
    Conflict(String),
    /// The caller may not make this move (not an approver of the step).
    Forbidden(String),
}

/// A person's decision on a waiting step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepDecision {
    /// The step completes (its output records the decision).
    Approve,
    /// The step fails; its on_failure applies.
    Reject,
    /// The step is skipped; its dependents treat it as satisfied.
    Skip,
}

impl StepDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            StepDecision::Approve => "approved",
            StepDecision::Reject => "rejected",
            StepDecision::Skip => "skipped",
        }
    }
}

/// Who decides: the actor id and the role names the credential holds.
/// `actor: None` is the internal secret acting as no one in particular.
#[derive(Clone, Debug)]
pub struct Decider<'a> {
    pub actor: Option<&'a str>,
    pub roles: &'a [String],
    pub internal: bool,
}

/// A run's status changes (pause, resume).
#[derive(Clone, Debug, PartialEq)]
pub struct StatusMove {
    pub status: WorkflowRunStatus,
    pub note: Note,
    /// The engine looks at the run again: steps that became ready start.
    pub wake: bool,
}

/// Pauses a running run (`pause`: no step starts until it is resumed; the
/// steps under way finish) or resumes a paused one.
pub fn set_paused(status: WorkflowRunStatus, pause: bool, who: &str) -> Result<StatusMove, Refused> {
    let (from, to, what) = if pause {
        (WorkflowRunStatus::Running, WorkflowRunStatus::Paused, "paused")
    } else {
        (WorkflowRunStatus::Paused, WorkflowRunStatus::Running, "resumed")
    };
    if status != from {
        return Err(Refused::Conflict(format!("only a {from} workflow run can be {what}; this one is {status}")));
    }
    Ok(StatusMove { status: to, note: run_note(what, &format!("{what} by {who}"), Value::Null), wake: !pause })
}

/// Cancels an active run: it ends `cancelled`, and its ending cancels its
/// running steps with their job runs and child runs.
pub fn cancel(status: WorkflowRunStatus, reason: &str) -> Result<Decided, Refused> {
    if status.is_terminal() {
        return Err(Refused::Conflict(format!("the workflow run is {status} already")));
    }
    Ok(Decided::ended(WorkflowRunStatus::Cancelled, reason))
}

/// How a decided step ends.
#[derive(Clone, Debug, PartialEq)]
pub struct StepDecided {
    pub status: StepStatus,
    pub output: Option<Value>,
    pub error: Option<String>,
    /// Who decided, as recorded (`the internal secret` for no actor).
    pub by: String,
    pub note: Note,
}

/// A decision on a waiting step. An approval step with approvers accepts
/// it only from a listed user id or a holder of a listed role (the
/// internal secret naming no actor is the service's operator and may decide
/// too). Approve and reject apply to approval and cost-gate steps; skip to
/// any waiting step. `approvers`: those the step started waiting with.
pub fn decide(
    step: &StepView,
    approvers: &[String],
    decision: StepDecision,
    who: &Decider,
    comment: Option<&str>,
) -> Result<StepDecided, Refused> {
    let step_ref = step.step_ref;
    if step.status != StepStatus::Waiting {
        return Err(Refused::Conflict(format!("step {step_ref} is {}, not waiting for a decision", step.status)));
    }
    let decidable = matches!(step.step_type, "approval" | "cost_gate");
    if decision != StepDecision::Skip && !decidable {
        return Err(Refused::Conflict(format!(
            "step {step_ref} is a {} step: only approval and cost_gate steps are approved or rejected",
            step.step_type
        )));
    }
    let operator = who.internal && who.actor.is_none();
    let listed =
        who.actor.is_some_and(|a| approvers.iter().any(|x| x == a)) || who.roles.iter().any(|r| approvers.contains(r));
    if !approvers.is_empty() && !operator && !listed {
        return Err(Refused::Forbidden(format!(
            "only an approver of step {step_ref} may decide it ({})",
            approvers.join(", ")
        )));
    }
    let by = who.actor.unwrap_or("the internal secret");
    let (status, output, error) = match decision {
        StepDecision::Approve => {
            (StepStatus::Completed, Some(json!({ "decision": "approved", "decided_by": by, "comment": comment })), None)
        }
        StepDecision::Reject => (
            StepStatus::Failed,
            None,
            Some(match comment {
                Some(c) => format!("rejected by {by}: {c}"),
                None => format!("rejected by {by}"),
            }),
        ),
        StepDecision::Skip => (StepStatus::Skipped, None, None),
    };
    let note = Note::step(
        step_ref,
        decision.as_str(),
        &format!("{} by {by}", decision.as_str()),
        json!({ "decided_by": by, "comment": comment }),
    );
    Ok(StepDecided { status, output, error, by: by.to_string(), note })
}

/// The run as a retry or a replay sees it.
#[derive(Clone, Copy, Debug)]
pub struct ResetRun {
    pub status: WorkflowRunStatus,
    /// It compensated (or is compensating) its completed steps.
    pub compensated: bool,
}

/// What a retry or replay takes back to pending.
#[derive(Clone, Debug, PartialEq)]
pub struct Reset {
    pub step_refs: Vec<String>,
    /// The run had ended: it runs again with a fresh deadline, and the
    /// steps its ending cancelled are pending again too.
    pub reopen: bool,
    pub note: Note,
}

/// Takes ended steps back to pending: one step (a retry, `subtree` None)
/// or a step with every step below it (a replay, `subtree` the refs of
/// the step and its descendants).
pub fn reset(
    run: ResetRun,
    steps: &[StepView],
    step_ref: &str,
    subtree: Option<Vec<String>>,
    who: &str,
) -> Result<Reset, Refused> {
    let Some(step) = steps.iter().find(|s| s.step_ref == step_ref) else { return Err(Refused::NotFound) };
    if !step.status.is_terminal() {
        return Err(Refused::Conflict(format!(
            "step {step_ref} is {}; only an ended step can be retried",
            step.status
        )));
    }
    if run.status == WorkflowRunStatus::Pending {
        return Err(Refused::Conflict("the workflow run has not started".into()));
    }
    if run.compensated {
        // Its completed work was undone (or is being undone): going on
        // from where it stood would build on steps that no longer hold.
        return Err(Refused::Conflict(
            "the workflow run compensated its completed steps; trigger a new run instead".into(),
        ));
    }
    let (kind, what) = if subtree.is_some() {
        ("subtree_replayed", "replayed with its descendants")
    } else {
        ("step_retried", "retried")
    };
    let step_refs = subtree.unwrap_or_else(|| vec![step_ref.to_string()]);
    if let Some(busy) = steps.iter().find(|s| {
        step_refs.iter().any(|r| r == s.step_ref) && !s.status.is_terminal() && s.status != StepStatus::Pending
    }) {
        return Err(Refused::Conflict(format!("step {} of the subtree is {}", busy.step_ref, busy.status)));
    }
    let note = Note::step(step_ref, kind, &format!("{what} by {who}"), json!({ "steps": step_refs }));
    Ok(Reset { step_refs, reopen: run.status.is_terminal(), note })
}

fn run_note(decision_type: &str, reason: &str, details: Value) -> Note {
    Note { step_ref: None, decision_type: decision_type.to_string(), reason: reason.to_string(), details }
}

#[cfg(test)]
mod tests {
    use super::*;
    use WorkflowRunStatus as R;

    fn conflict<T: std::fmt::Debug>(r: Result<T, Refused>) -> String {
        match r {
            Err(Refused::Conflict(why)) => why,
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[test]
    fn pause_and_resume_apply_only_from_their_status() {
        let cases = [
            (R::Running, true, Some(R::Paused)),
            (R::Paused, false, Some(R::Running)),
            (R::Paused, true, None),
            (R::Running, false, None),
            (R::Pending, true, None),
            (R::Completed, false, None),
        ];
        for (from, pause, to) in cases {
            match (set_paused(from, pause, "u_1"), to) {
                (Ok(m), Some(to)) => {
                    assert_eq!(m.status, to);
                    assert_eq!(m.wake, !pause, "only a resume wakes the engine");
                    assert_eq!(m.note.step_ref, None);
                    assert!(m.note.reason.ends_with("by u_1"));
                }
                (Err(Refused::Conflict(why)), None) => assert!(why.contains(&format!("this one is {from}")), "{why}"),
                (got, want) => panic!("{from} pause={pause}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn cancel_ends_an_active_run_and_refuses_an_ended_one() {
        for s in [R::Pending, R::Running, R::Paused] {
            let d = cancel(s, "no longer needed").unwrap();
            assert_eq!(d.status, R::Cancelled);
            assert_eq!(d.error.as_deref(), Some("no longer needed"));
        }
        for s in [R::Completed, R::Failed, R::Cancelled, R::TimedOut] {
            assert_eq!(conflict(cancel(s, "x")), format!("the workflow run is {s} already"));
        }
    }

    #[test]
    fn decisions_by_step_kind_and_status() {
        let op = Decider { actor: None, roles: &[], internal: true };
        let cases = [
            ("approval", StepStatus::Waiting, StepDecision::Approve, Ok(StepStatus::Completed)),
            ("approval", StepStatus::Waiting, StepDecision::Reject, Ok(StepStatus::Failed)),
            ("cost_gate", StepStatus::Waiting, StepDecision::Approve, Ok(StepStatus::Completed)),
            ("wait_for_event", StepStatus::Waiting, StepDecision::Skip, Ok(StepStatus::Skipped)),
            ("sleep", StepStatus::Waiting, StepDecision::Skip, Ok(StepStatus::Skipped)),
            ("wait_for_event", StepStatus::Waiting, StepDecision::Approve, Err("only approval and cost_gate")),
            ("approval", StepStatus::Completed, StepDecision::Approve, Err("not waiting for a decision")),
            ("job", StepStatus::Running, StepDecision::Skip, Err("not waiting for a decision")),
        ];
        for (kind, status, decision, want) in cases {
            let got = decide(&StepView::test("s", kind, status), &[], decision, &op, Some("ok"));
            match (got, want) {
                (Ok(d), Ok(s)) => {
                    assert_eq!(d.status, s, "{kind} {decision:?}");
                    assert_eq!(d.by, "the internal secret");
                    assert_eq!(d.note.decision_type, decision.as_str());
                }
                (Err(Refused::Conflict(why)), Err(part)) => assert!(why.contains(part), "{why}"),
                (got, want) => panic!("{kind} {status:?} {decision:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_rejection_carries_its_comment_and_an_approval_records_who() {
        let who = Decider { actor: Some("u_ann"), roles: &[], internal: false };
        let step = StepView::test("gate", "approval", StepStatus::Waiting);
        let r = decide(&step, &[], StepDecision::Reject, &who, Some("too risky")).unwrap();
        assert_eq!(r.error.as_deref(), Some("rejected by u_ann: too risky"));
        let a = decide(&step, &[], StepDecision::Approve, &who, None).unwrap();
        assert_eq!(a.output, Some(json!({"decision": "approved", "decided_by": "u_ann", "comment": null})));
    }

    #[test]
    fn only_listed_approvers_or_the_operator_decide() {
        let step = StepView::test("gate", "approval", StepStatus::Waiting);
        let approvers = ["u_ann".to_string(), "release-managers".to_string()];
        let roles = ["release-managers".to_string()];
        let allowed = [
            Decider { actor: Some("u_ann"), roles: &[], internal: false },
            Decider { actor: Some("u_bob"), roles: &roles, internal: false },
            Decider { actor: None, roles: &[], internal: true },
        ];
        for who in &allowed {
            assert!(decide(&step, &approvers, StepDecision::Approve, who, None).is_ok(), "{who:?}");
        }
        let refused = [
            Decider { actor: Some("u_eve"), roles: &[], internal: false },
            // The internal secret acting as someone is that someone.
            Decider { actor: Some("u_eve"), roles: &[], internal: true },
        ];
        for who in &refused {
            assert!(matches!(
                decide(&step, &approvers, StepDecision::Approve, who, None),
                Err(Refused::Forbidden(why)) if why.contains("u_ann, release-managers")
            ));
        }
    }

    #[test]
    fn a_reset_takes_ended_steps_back_and_reopens_an_ended_run() {
        let steps = [
            StepView::test("a", "job", StepStatus::Completed),
            StepView::test("b", "job", StepStatus::Failed),
            StepView::test("c", "job", StepStatus::Pending),
            StepView::test("d", "job", StepStatus::Running),
        ];
        let ended = ResetRun { status: R::Failed, compensated: false };
        let running = ResetRun { status: R::Running, compensated: false };

        let r = reset(ended, &steps, "b", None, "u_1").unwrap();
        assert_eq!((r.step_refs, r.reopen, r.note.decision_type.as_str()), (vec!["b".into()], true, "step_retried"));
        let r = reset(running, &steps, "b", Some(vec!["b".into(), "c".into()]), "u_1").unwrap();
        assert_eq!((r.reopen, r.note.decision_type.as_str()), (false, "subtree_replayed"));
        assert_eq!(r.note.details, json!({"steps": ["b", "c"]}));

        assert_eq!(reset(running, &steps, "zz", None, "u"), Err(Refused::NotFound));
        assert!(conflict(reset(running, &steps, "d", None, "u")).contains("only an ended step"));
        assert_eq!(
            conflict(reset(running, &steps, "a", Some(vec!["a".into(), "d".into()]), "u")),
            "step d of the subtree is running"
        );
        let pending = ResetRun { status: R::Pending, compensated: false };
        assert_eq!(conflict(reset(pending, &steps, "a", None, "u")), "the workflow run has not started");
        let saga = ResetRun { status: R::Failed, compensated: true };
        assert!(conflict(reset(saga, &steps, "a", None, "u")).contains("compensated"));
    }
}
