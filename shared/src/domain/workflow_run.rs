//! How a workflow run moves on, as pure rules: the statuses of a run and of
//! its steps, and [`next`], which looks at a run's steps as they are and
//! says which to start, which to skip or fail, which wait for a free slot,
//! and whether the run has ended. The engine (`store::workflow_engine`)
//! reads the rows, calls [`next`] under the run's lock and writes what it
//! says; nothing here does I/O, so every rule is tested here.
//!
//! ```text
//! workflow run:
//!   pending ──(a slot under max_concurrent_runs)──► running ◄──resume── paused
//!   running ──pause──► paused            (running steps finish, none start)
//!   running ──every step ended──► completed
//!   running ──a step failed (on_failure fail_workflow)──► failed
//!   running ──a step failed (on_failure compensate)──► running, compensating
//!           ──every compensation job completed, or one failed for good──► failed
//!   pending / running / paused ──cancel──► cancelled;  ──timeout_secs──► timed_out
//!   completed / failed / cancelled / timed_out ──step retry or replay──► running
//!
//! step:
//!   pending ──deps satisfied, condition true──► running (job, sub_workflow)
//!                                            └► waiting (sleep, event, approval, cost gate)
//!   pending ──condition false, or a dependency failed under skip_dependents──► skipped
//!   running / waiting ──► completed / failed / timed_out / cancelled
//!   any ended ──retry──► pending;  a step and its descendants ──replay-subtree──► pending
//! ```
//!
//! A dependency is satisfied when it completed, was skipped (by its
//! condition: a step skipped because a failure doomed it dooms its own
//! dependents in turn), or failed with on_failure `continue`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::{json, Value};

use super::step::{OnFailure, Step, Steps};
use super::step_logic::{condition_holds, condition_input, StepFacts};
use super::workflow::SavedStep;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkflowRunStatus {
    /// Waiting for a slot under the workflow's max_concurrent_runs.
    Pending,
    Running,
    /// No step starts; the ones running finish.
    Paused,
    Completed,
    Failed,
    Cancelled,
    TimedOut,
}

impl WorkflowRunStatus {
    pub const ALL: [WorkflowRunStatus; 7] = [
        WorkflowRunStatus::Pending,
        WorkflowRunStatus::Running,
        WorkflowRunStatus::Paused,
        WorkflowRunStatus::Completed,
        WorkflowRunStatus::Failed,
        WorkflowRunStatus::Cancelled,
        WorkflowRunStatus::TimedOut,
    ];
    /// The statuses that count as active (for max_concurrent_runs,
    /// skip_if_running and the active-versions counts).
    pub const ACTIVE: [WorkflowRunStatus; 3] =
        [WorkflowRunStatus::Pending, WorkflowRunStatus::Running, WorkflowRunStatus::Paused];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowRunStatus::Pending => "pending",
            WorkflowRunStatus::Running => "running",
            WorkflowRunStatus::Paused => "paused",
            WorkflowRunStatus::Completed => "completed",
            WorkflowRunStatus::Failed => "failed",
            WorkflowRunStatus::Cancelled => "cancelled",
            WorkflowRunStatus::TimedOut => "timed_out",
        }
    }

    pub fn is_terminal(self) -> bool {
        !Self::ACTIVE.contains(&self)
    }
}

crate::stored_as_text!(WorkflowRunStatus, "workflow run status");

/// The terminal workflow run statuses as a SQL list (see
/// [`crate::run_ended_sql`]); a test holds it to
/// [`WorkflowRunStatus::is_terminal`].
#[macro_export]
macro_rules! workflow_run_ended_sql {
    () => {
        "('completed', 'failed', 'cancelled', 'timed_out')"
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepStatus {
    Pending,
    /// A job run or a child workflow run is under way.
    Running,
    /// A sleep, an event, an approval or a cost gate.
    Waiting,
    Completed,
    Failed,
    Skipped,
    Cancelled,
    TimedOut,
    Compensated,
}

impl StepStatus {
    pub const ALL: [StepStatus; 9] = [
        StepStatus::Pending,
        StepStatus::Running,
        StepStatus::Waiting,
        StepStatus::Completed,
        StepStatus::Failed,
        StepStatus::Skipped,
        StepStatus::Cancelled,
        StepStatus::TimedOut,
        StepStatus::Compensated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Running => "running",
            StepStatus::Waiting => "waiting",
            StepStatus::Completed => "completed",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
            StepStatus::Cancelled => "cancelled",
            StepStatus::TimedOut => "timed_out",
            StepStatus::Compensated => "compensated",
        }
    }

    /// Running or waiting: it holds one of max_parallel_steps.
    pub fn is_active(self) -> bool {
        matches!(self, StepStatus::Running | StepStatus::Waiting)
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, StepStatus::Pending | StepStatus::Running | StepStatus::Waiting)
    }

    /// An ending its step's on_failure applies to.
    pub fn is_failure(self) -> bool {
        matches!(self, StepStatus::Failed | StepStatus::Cancelled | StepStatus::TimedOut)
    }
}

crate::stored_as_text!(StepStatus, "step status");

/// One step of a run as the rules see it.
#[derive(Clone, Debug, PartialEq)]
pub struct StepNow {
    pub status: StepStatus,
    pub output: Option<Value>,
    pub error: Option<String>,
}

impl StepNow {
    pub fn pending() -> StepNow {
        StepNow { status: StepStatus::Pending, output: None, error: None }
    }
}

/// What [`next`] looks at.
pub struct Inputs<'a> {
    /// The steps of the version the run follows.
    pub steps: &'a Steps,
    /// Each step's state by ref; a step missing here is pending.
    pub now: &'a HashMap<String, StepNow>,
    pub payload: &'a Value,
    /// Paused: nothing starts, nothing is decided about steps not started.
    pub paused: bool,
    /// At most this many steps running or waiting at once (None or 0: no cap).
    pub max_parallel_steps: Option<i64>,
}

/// A decision about one step, in the order made.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Start {
        step_ref: String,
    },
    /// Skipped: its condition was false (`details` holds the condition and
    /// what it was evaluated over), or a failure upstream doomed it.
    Skip {
        step_ref: String,
        reason: String,
        details: Value,
    },
    /// Failed before starting: its condition could not be evaluated.
    Fail {
        step_ref: String,
        error: String,
    },
    /// Ready, but max_parallel_steps are running.
    Held {
        step_ref: String,
        reason: String,
    },
}

/// How the run ends, when it does.
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    Completed,
    Failed {
        step_ref: String,
        error: String,
    },
    /// A step with on_failure `compensate` failed: the run undoes its
    /// completed steps ([`saga`]) and then ends failed.
    Compensate {
        step_ref: String,
        error: String,
    },
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Next {
    pub decisions: Vec<Decision>,
    pub ending: Option<Ending>,
}

/// What the run does next (see the module doc for the rules).
pub fn next(i: &Inputs) -> Next {
    let mut rules = Rules::new(i.steps, i.now, i.payload, i.paused, i.max_parallel_steps);
    rules.advance()
}

/// The rules over one run's steps, kept between rounds: [`Rules::advance`]
/// decides what it can, [`Rules::set`] records how a started step ended,
/// and the next `advance` looks only at the steps that change could move.
/// So a caller that plays a whole run out (`simulate`) does work in
/// proportion to the steps and their edges, not steps times rounds.
pub struct Rules<'a> {
    steps: &'a Steps,
    state: Vec<StepNow>,
    payload: &'a Value,
    paused: bool,
    cap: Option<usize>,
    active: usize,
    terminal: usize,
    /// Skipped because a failure upstream doomed it: passes the doom on.
    doomed: Vec<bool>,
    /// Failed under fail_workflow or compensate, by position: the first
    /// ends the run.
    failing: BTreeSet<usize>,
    /// Places in the walk order still to look at.
    todo: BTreeSet<usize>,
    /// Where each step is in the walk order.
    place: Vec<usize>,
    /// Held for a slot (the decision is made once per step) ...
    held: Vec<bool>,
    /// ... and where to look again when a slot comes free.
    waiting_for_slot: Vec<usize>,
}

impl<'a> Rules<'a> {
    pub fn new(
        steps: &'a Steps,
        now: &HashMap<String, StepNow>,
        payload: &'a Value,
        paused: bool,
        max_parallel_steps: Option<i64>,
    ) -> Rules<'a> {
        let state: Vec<StepNow> =
            steps.iter().map(|s| now.get(&s.step_ref).cloned().unwrap_or_else(StepNow::pending)).collect();
        let mut place = vec![0; steps.len()];
        for (p, &k) in steps.order().iter().enumerate() {
            place[k] = p;
        }
        let mut rules = Rules {
            steps,
            active: state.iter().filter(|s| s.status.is_active()).count(),
            terminal: state.iter().filter(|s| s.status.is_terminal()).count(),
            failing: (0..steps.len()).filter(|&k| fails_run(&steps[k], &state[k])).collect(),
            doomed: vec![false; steps.len()],
            todo: (0..steps.len()).collect(),
            held: vec![false; steps.len()],
            waiting_for_slot: Vec::new(),
            state,
            payload,
            paused,
            cap: max_parallel_steps.filter(|n| *n > 0).map(|n| n as usize),
            place,
        };
        for &k in steps.order() {
            if rules.state[k].status == StepStatus::Skipped && rules.dooms(k).is_some() {
                rules.doomed[k] = true;
            }
        }
        rules
    }

    /// Records a step's new state (a started step that ended) and marks
    /// the steps it may move for the next [`Rules::advance`].
    pub fn set(&mut self, step_ref: &str, now: StepNow) {
        let Some(k) = self.steps.position(step_ref) else { return };
        let was = std::mem::replace(&mut self.state[k], now);
        self.changed(k, was.status);
    }

    /// A step's status as the rules know it now.
    pub fn status(&self, step_ref: &str) -> Option<StepStatus> {
        self.steps.position(step_ref).map(|k| self.state[k].status)
    }

    fn changed(&mut self, k: usize, was: StepStatus) {
        let is = self.state[k].status;
        self.active = self.active + usize::from(is.is_active()) - usize::from(was.is_active());
        self.terminal = self.terminal + usize::from(is.is_terminal()) - usize::from(was.is_terminal());
        if fails_run(&self.steps[k], &self.state[k]) {
            self.failing.insert(k);
        } else {
            self.failing.remove(&k);
        }
        if is != StepStatus::Running {
            for &d in self.steps.dependents(k) {
                self.todo.insert(self.place[d]);
            }
        }
        if was.is_active() && !is.is_active() {
            // A slot came free: steps held for one may start.
            self.todo.extend(self.waiting_for_slot.drain(..));
        }
    }

    /// The decisions the steps' states allow now, and the run's ending
    /// when it has one. A run already failing decides nothing more.
    pub fn advance(&mut self) -> Next {
        let mut out = Next::default();
        if let Some(end) = self.ending() {
            out.ending = Some(end);
            return out;
        }
        let steps = self.steps;
        while let Some(p) = self.todo.pop_first() {
            let k = steps.order()[p];
            if self.state[k].status != StepStatus::Pending {
                continue;
            }
            let r = &steps[k].step_ref;
            if let Some(reason) = self.dooms(k) {
                self.doomed[k] = true;
                self.decide(k, StepStatus::Skipped, None);
                out.decisions.push(Decision::Skip { step_ref: r.clone(), reason, details: json!({}) });
                continue;
            }
            if !self.ready(k) || self.paused {
                continue;
            }
            if let Some(cond) = &steps[k].condition {
                let facts: BTreeMap<String, StepFacts> = steps
                    .iter()
                    .zip(&self.state)
                    .map(|(s, v)| {
                        (
                            s.step_ref.clone(),
                            StepFacts {
                                status: v.status.as_str().into(),
                                output: v.output.clone().unwrap_or(Value::Null),
                            },
                        )
                    })
                    .collect();
                let input = condition_input(self.payload, &facts);
                match condition_holds(cond, &input) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.decide(k, StepStatus::Skipped, None);
                        out.decisions.push(Decision::Skip {
                            step_ref: r.clone(),
                            reason: "condition evaluated to false".into(),
                            details: json!({ "condition": cond, "input": input }),
                        });
                        continue;
                    }
                    Err(error) => {
                        self.decide(k, StepStatus::Failed, Some(error.clone()));
                        out.decisions.push(Decision::Fail { step_ref: r.clone(), error });
                        continue;
                    }
                }
            }
            if let Some(cap) = self.cap.filter(|c| self.active >= *c) {
                self.waiting_for_slot.push(p);
                if !std::mem::replace(&mut self.held[k], true) {
                    out.decisions.push(Decision::Held {
                        step_ref: r.clone(),
                        reason: format!("max_parallel_steps ({cap}) steps are running or waiting"),
                    });
                }
                continue;
            }
            self.held[k] = false;
            self.decide(k, StepStatus::Running, None);
            out.decisions.push(Decision::Start { step_ref: r.clone() });
        }
        out.ending = self.ending().or_else(|| (self.terminal == self.steps.len()).then_some(Ending::Completed));
        out
    }

    fn decide(&mut self, k: usize, status: StepStatus, error: Option<String>) {
        let was = self.state[k].status;
        self.state[k].status = status;
        if error.is_some() {
            self.state[k].error = error;
        }
        self.changed(k, was);
    }

    /// Why a failure upstream dooms step `k`, if one does.
    fn dooms(&self, k: usize) -> Option<String> {
        self.steps.deps(k).iter().find_map(|&d| {
            let dn = &self.state[d];
            let ds = &self.steps[d];
            if self.doomed[d] {
                Some(format!("dependency {} was skipped after a failure upstream", ds.step_ref))
            } else if dn.status.is_failure() && ds.on_failure == OnFailure::SkipDependents {
                Some(format!("dependency {} {} (on_failure skip_dependents)", ds.step_ref, dn.status.as_str()))
            } else {
                None
            }
        })
    }

    fn ready(&self, k: usize) -> bool {
        self.steps.deps(k).iter().all(|&d| match self.state[d].status {
            StepStatus::Completed | StepStatus::Skipped | StepStatus::Compensated => true,
            s if s.is_failure() => self.steps[d].on_failure == OnFailure::Continue,
            _ => false,
        })
    }

    /// The first step (in definition order) whose failure fails the run.
    fn ending(&self) -> Option<Ending> {
        let &k = self.failing.first()?;
        let (s, n) = (&self.steps[k], &self.state[k]);
        let step_ref = s.step_ref.clone();
        let error = format!(
            "step {} {}{}",
            s.step_ref,
            n.status.as_str(),
            n.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
        );
        Some(match s.on_failure {
            OnFailure::Compensate => Ending::Compensate { step_ref, error },
            _ => Ending::Failed { step_ref, error },
        })
    }
}

fn fails_run(s: &Step, n: &StepNow) -> bool {
    n.status.is_failure() && matches!(s.on_failure, OnFailure::FailWorkflow | OnFailure::Compensate)
}

/// A step that completed and names a compensation job, as the saga sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Compensable {
    pub step_ref: String,
    /// Completed, or Compensated once its compensation job completed.
    pub status: StepStatus,
    /// When the step completed: the saga undoes the latest first.
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Its compensation job run's status, once one was started.
    pub job: Option<super::RunStatus>,
}

/// What the saga does next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SagaNext {
    /// Steps whose compensation job completed since the last look.
    pub compensated: Vec<String>,
    pub then: SagaMove,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub enum SagaMove {
    /// Start this step's compensation job.
    Start(String),
    /// A compensation job is under way.
    #[default]
    Wait,
    /// Every step is compensated: the run ends failed.
    Done,
    /// This step's compensation job ended without completing (after its
    /// job's retries): the run ends failed with `compensation_failed`, and
    /// the steps before it in the saga are left as they are.
    Failed(String),
}

/// The order a saga undoes steps in, as indexes into `steps`: the latest
/// completed first (ties: the later in `steps`' order first).
pub fn saga_order(steps: &[Compensable]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..steps.len()).collect();
    order.sort_by(|&i, &j| steps[j].finished_at.cmp(&steps[i].finished_at).then(j.cmp(&i)));
    order
}

/// The saga's next move: compensations run one at a time, in reverse
/// completion order (ties: the later in `steps`' order first), each
/// after the one before it completed.
pub fn saga(steps: &[Compensable]) -> SagaNext {
    let mut out = SagaNext::default();
    for s in saga_order(steps).into_iter().map(|i| &steps[i]) {
        if s.status == StepStatus::Compensated {
            continue;
        }
        match s.job {
            None => {
                out.then = SagaMove::Start(s.step_ref.clone());
                return out;
            }
            Some(super::RunStatus::Completed) => out.compensated.push(s.step_ref.clone()),
            Some(j) if j.is_terminal() => {
                out.then = SagaMove::Failed(s.step_ref.clone());
                return out;
            }
            Some(_) => {
                out.then = SagaMove::Wait;
                return out;
            }
        }
    }
    out.then = SagaMove::Done;
    out
}

/// The output of a completed run: each completed step's output by ref.
pub fn run_output<'a>(steps: impl IntoIterator<Item = (&'a str, &'a StepNow)>) -> Value {
    let map: serde_json::Map<String, Value> = steps
        .into_iter()
        .filter(|(_, s)| s.status == StepStatus::Completed)
        .map(|(r, s)| (r.to_string(), s.output.clone().unwrap_or(Value::Null)))
        .collect();
    Value::Object(map)
}

/// The refs of `root` and every step that depends on it, directly or not.
pub fn subtree(steps: &[SavedStep], root: &str) -> Vec<String> {
    let mut out = vec![root.to_string()];
    let mut seen: HashSet<String> = out.iter().cloned().collect();
    let mut i = 0;
    while i < out.len() {
        let cur = out[i].clone();
        for s in steps {
            if s.def.depends_on.as_deref().unwrap_or(&[]).contains(&cur) && seen.insert(s.def.step_ref.clone()) {
                out.push(s.def.step_ref.clone());
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::workflow::StepRequest;

    #[test]
    fn the_sql_list_names_the_terminal_workflow_run_statuses() {
        let names: Vec<String> =
            WorkflowRunStatus::ALL.iter().filter(|s| s.is_terminal()).map(|s| format!("'{s}'")).collect();
        assert_eq!(crate::workflow_run_ended_sql!(), format!("({})", names.join(", ")));
    }

    fn step(r: &str, deps: &[&str]) -> SavedStep {
        SavedStep {
            id: format!("wfs_{r}"),
            def: StepRequest {
                step_ref: r.into(),
                step_type: Some("job".into()),
                job_id: Some("job_x".into()),
                depends_on: Some(deps.iter().map(|d| d.to_string()).collect()),
                on_failure: Some("fail_workflow".into()),
                ..Default::default()
            },
        }
    }

    fn with(mut s: SavedStep, f: impl FnOnce(&mut StepRequest)) -> SavedStep {
        f(&mut s.def);
        s
    }

    fn at(status: StepStatus) -> StepNow {
        StepNow { status, output: None, error: None }
    }

    fn states(list: &[(&str, StepStatus)]) -> HashMap<String, StepNow> {
        list.iter().map(|(r, s)| (r.to_string(), at(*s))).collect()
    }

    fn run(saved: &[SavedStep], now: &HashMap<String, StepNow>) -> Next {
        let steps = &Steps::of(saved);
        next(&Inputs { steps, now, payload: &json!({"tier": "gold"}), paused: false, max_parallel_steps: None })
    }

    fn started(n: &Next) -> Vec<&str> {
        n.decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Start { step_ref } => Some(step_ref.as_str()),
                _ => None,
            })
            .collect()
    }

    fn diamond() -> Vec<SavedStep> {
        vec![step("a", &[]), step("b", &["a"]), step("c", &["a"]), step("d", &["b", "c"])]
    }

    #[test]
    fn a_diamond_starts_its_root_then_both_branches_then_the_join() {
        let s = diamond();
        assert_eq!(started(&run(&s, &HashMap::new())), ["a"]);
        let n = run(&s, &states(&[("a", StepStatus::Completed)]));
        assert_eq!(started(&n), ["b", "c"]);
        let n =
            run(&s, &states(&[("a", StepStatus::Completed), ("b", StepStatus::Completed), ("c", StepStatus::Running)]));
        assert!(started(&n).is_empty(), "d waits for c");
        assert_eq!(n.ending, None);
        let all = states(&[("a", StepStatus::Completed), ("b", StepStatus::Completed), ("c", StepStatus::Completed)]);
        assert_eq!(started(&run(&s, &all)), ["d"]);
        let mut done = all.clone();
        done.insert("d".into(), at(StepStatus::Completed));
        assert_eq!(run(&s, &done).ending, Some(Ending::Completed));
    }

    #[test]
    fn a_false_condition_skips_the_step_and_its_dependents_still_run() {
        let s = vec![
            step("a", &[]),
            with(step("b", &["a"]), |d| d.condition = Some(json!({"==": [{"var": "payload.tier"}, "silver"]}))),
            step("c", &["b"]),
        ];
        let n = run(&s, &states(&[("a", StepStatus::Completed)]));
        match &n.decisions[0] {
            Decision::Skip { step_ref, reason, details } => {
                assert_eq!(step_ref, "b");
                assert!(reason.contains("false"));
                assert_eq!(details["input"]["payload"]["tier"], "gold", "the evaluated input is recorded");
            }
            d => panic!("{d:?}"),
        }
        assert_eq!(started(&n), ["c"], "a skipped dependency is satisfied");
    }

    #[test]
    fn conditions_see_earlier_outputs() {
        let s = vec![
            step("a", &[]),
            with(step("b", &["a"]), |d| d.condition = Some(json!({">": [{"var": "steps.a.output.n"}, 2]}))),
        ];
        let mut now = states(&[("a", StepStatus::Completed)]);
        now.get_mut("a").unwrap().output = Some(json!({"n": 3}));
        assert_eq!(started(&run(&s, &now)), ["b"]);
        now.get_mut("a").unwrap().output = Some(json!({"n": 1}));
        assert!(matches!(run(&s, &now).decisions[0], Decision::Skip { .. }));
    }

    #[test]
    fn on_failure_decides_what_a_failed_step_does() {
        let fail = |on: &str| {
            let s = vec![
                with(step("a", &[]), |d| d.on_failure = Some(on.into())),
                step("b", &["a"]),
                step("c", &["b"]),
                step("x", &[]),
            ];
            run(&s, &states(&[("a", StepStatus::Failed), ("x", StepStatus::Completed)]))
        };
        let n = fail("fail_workflow");
        assert!(matches!(&n.ending, Some(Ending::Failed { step_ref, .. }) if step_ref == "a"));
        assert!(started(&n).is_empty());
        assert!(
            matches!(fail("compensate").ending, Some(Ending::Compensate { step_ref, .. }) if step_ref == "a"),
            "compensate hands the run to the saga"
        );
        let n = fail("continue");
        assert_eq!(started(&n), ["b"]);
        let n = fail("skip_dependents");
        let skipped: Vec<_> = n
            .decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Skip { step_ref, .. } => Some(step_ref.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(skipped, ["b", "c"], "every descendant is skipped");
        assert_eq!(n.ending, Some(Ending::Completed));
    }

    #[test]
    fn a_step_skipped_by_a_failure_dooms_its_dependents_on_a_later_pass() {
        let s = vec![
            with(step("a", &[]), |d| d.on_failure = Some("skip_dependents".into())),
            step("b", &["a"]),
            step("c", &["b"]),
        ];
        let n = run(&s, &states(&[("a", StepStatus::Failed), ("b", StepStatus::Skipped)]));
        assert!(matches!(&n.decisions[0], Decision::Skip { step_ref, .. } if step_ref == "c"));
    }

    #[test]
    fn max_parallel_steps_holds_the_rest() {
        let s: Vec<SavedStep> = (0..5).map(|i| step(&format!("s{i}"), &[])).collect();
        let steps = Steps::of(&s);
        let capped = |now: &HashMap<String, StepNow>| {
            next(&Inputs { steps: &steps, now, payload: &json!(null), paused: false, max_parallel_steps: Some(2) })
        };
        let n = capped(&HashMap::new());
        assert_eq!(started(&n), ["s0", "s1"]);
        assert_eq!(n.decisions.iter().filter(|d| matches!(d, Decision::Held { .. })).count(), 3);
        let n = capped(&states(&[("s0", StepStatus::Completed), ("s1", StepStatus::Running)]));
        assert_eq!(started(&n), ["s2"]);
    }

    #[test]
    fn a_paused_run_starts_nothing_and_does_not_end_early() {
        let s = diamond();
        let now = states(&[("a", StepStatus::Completed)]);
        let n = next(&Inputs {
            steps: &Steps::of(&s),
            now: &now,
            payload: &json!(null),
            paused: true,
            max_parallel_steps: None,
        });
        assert_eq!(n, Next::default());
    }

    #[test]
    fn a_condition_that_cannot_be_evaluated_fails_its_step() {
        let s = vec![with(step("a", &[]), |d| d.condition = Some(json!({"nope": [1]})))];
        let n = run(&s, &HashMap::new());
        assert!(matches!(&n.decisions[0], Decision::Fail { step_ref, .. } if step_ref == "a"));
        assert!(matches!(n.ending, Some(Ending::Failed { .. })));
    }

    #[test]
    fn the_order_follows_dependencies_not_the_listing() {
        let s = vec![step("late", &["early"]), step("early", &[])];
        assert_eq!(Steps::of(&s).order(), [1, 0]);
        assert_eq!(subtree(&diamond(), "b"), ["b", "d"]);
        assert_eq!(subtree(&diamond(), "a"), ["a", "b", "c", "d"]);
    }

    fn comp(r: &str, secs: i64, status: StepStatus, job: Option<crate::domain::RunStatus>) -> Compensable {
        use chrono::TimeZone;
        Compensable {
            step_ref: r.into(),
            status,
            finished_at: Some(chrono::Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()),
            job,
        }
    }

    #[test]
    fn a_saga_undoes_the_latest_step_first_one_at_a_time() {
        use crate::domain::RunStatus as R;
        let c = StepStatus::Completed;
        let steps = vec![comp("one", 1, c, None), comp("two", 2, c, None)];
        assert_eq!(saga(&steps).then, SagaMove::Start("two".into()));
        let steps = vec![comp("one", 1, c, None), comp("two", 2, c, Some(R::Running))];
        assert_eq!(saga(&steps).then, SagaMove::Wait, "one waits for two's compensation");
        let steps = vec![comp("one", 1, c, None), comp("two", 2, c, Some(R::Completed))];
        assert_eq!(saga(&steps), SagaNext { compensated: vec!["two".into()], then: SagaMove::Start("one".into()) });
        let steps = vec![comp("one", 1, c, Some(R::Completed)), comp("two", 2, StepStatus::Compensated, None)];
        assert_eq!(saga(&steps), SagaNext { compensated: vec!["one".into()], then: SagaMove::Done });
        assert_eq!(saga(&[]).then, SagaMove::Done, "nothing to undo");
    }

    #[test]
    fn a_compensation_that_fails_for_good_stops_the_saga() {
        use crate::domain::RunStatus as R;
        let c = StepStatus::Completed;
        let steps = vec![comp("one", 1, c, None), comp("two", 2, c, Some(R::Retrying))];
        assert_eq!(saga(&steps).then, SagaMove::Wait, "a retrying compensation is still under way");
        let steps = vec![comp("one", 1, c, None), comp("two", 2, c, Some(R::Failed))];
        assert_eq!(saga(&steps).then, SagaMove::Failed("two".into()));
        let steps = vec![comp("one", 1, c, None), comp("two", 2, c, Some(R::TimedOut))];
        assert_eq!(saga(&steps).then, SagaMove::Failed("two".into()));
    }
}
