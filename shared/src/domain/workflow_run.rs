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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde_json::{json, Value};

use super::step::{OnFailure, Step};
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
    pub steps: &'a [Step],
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

fn deps(s: &Step) -> &[String] {
    &s.depends_on
}

/// The steps in an order where each comes after its dependencies, ties in
/// definition order. A saved version has no cycle; steps left over by one
/// (which validation refuses) are appended in definition order.
pub fn topological(steps: &[Step]) -> Vec<usize> {
    let index: HashMap<&str, usize> = steps.iter().enumerate().map(|(i, s)| (s.step_ref.as_str(), i)).collect();
    let mut indegree = vec![0usize; steps.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    for (i, s) in steps.iter().enumerate() {
        for d in deps(s) {
            if let Some(&j) = index.get(d.as_str()) {
                indegree[i] += 1;
                dependents[j].push(i);
            }
        }
    }
    let mut ready: VecDeque<usize> = (0..steps.len()).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(steps.len());
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for &j in &dependents[i] {
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.push_back(j);
            }
        }
    }
    if order.len() < steps.len() {
        let seen: HashSet<usize> = order.iter().copied().collect();
        order.extend((0..steps.len()).filter(|i| !seen.contains(i)));
    }
    order
}

/// What the run does next (see the module doc for the rules).
pub fn next(i: &Inputs) -> Next {
    let by_ref: HashMap<&str, &Step> = i.steps.iter().map(|s| (s.step_ref.as_str(), s)).collect();
    let mut st: HashMap<String, StepNow> = i
        .steps
        .iter()
        .map(|s| (s.step_ref.clone(), i.now.get(&s.step_ref).cloned().unwrap_or_else(StepNow::pending)))
        .collect();
    let order = topological(i.steps);
    let cap = i.max_parallel_steps.filter(|n| *n > 0).map(|n| n as usize);
    let mut active = st.values().filter(|s| s.status.is_active()).count();
    let mut out = Next::default();

    // Steps skipped because a failure upstream doomed them pass the doom on.
    let mut doomed: HashSet<String> = HashSet::new();
    let dooms = |r: &str, st: &HashMap<String, StepNow>, doomed: &HashSet<String>| -> Option<String> {
        let s = by_ref.get(r)?;
        deps(s).iter().find_map(|d| {
            let dn = st.get(d)?;
            let ds = by_ref.get(d.as_str())?;
            if doomed.contains(d) {
                Some(format!("dependency {d} was skipped after a failure upstream"))
            } else if dn.status.is_failure() && ds.on_failure == OnFailure::SkipDependents {
                Some(format!("dependency {d} {} (on_failure skip_dependents)", dn.status.as_str()))
            } else {
                None
            }
        })
    };
    for &k in &order {
        let r = &i.steps[k].step_ref;
        if st[r].status == StepStatus::Skipped && dooms(r, &st, &doomed).is_some() {
            doomed.insert(r.clone());
        }
    }

    let mut held: HashSet<String> = HashSet::new();
    loop {
        if let Some(end) = failing(i.steps, &st) {
            out.ending = Some(end);
            return out;
        }
        let mut changed = false;
        for &k in &order {
            let step = &i.steps[k];
            let r = &step.step_ref;
            if st[r].status != StepStatus::Pending {
                continue;
            }
            if let Some(reason) = dooms(r, &st, &doomed) {
                doomed.insert(r.clone());
                st.get_mut(r).expect("every step has a state").status = StepStatus::Skipped;
                out.decisions.push(Decision::Skip { step_ref: r.clone(), reason, details: json!({}) });
                changed = true;
                continue;
            }
            let ready = deps(step).iter().all(|d| match (st.get(d), by_ref.get(d.as_str())) {
                (Some(dn), Some(ds)) => match dn.status {
                    StepStatus::Completed | StepStatus::Skipped | StepStatus::Compensated => true,
                    s if s.is_failure() => ds.on_failure == OnFailure::Continue,
                    _ => false,
                },
                // A dependency the version does not have (validation
                // refuses one) holds nothing back.
                _ => true,
            });
            if !ready || i.paused {
                continue;
            }
            if let Some(cond) = &step.condition {
                let facts: BTreeMap<String, StepFacts> = st
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            StepFacts {
                                status: v.status.as_str().into(),
                                output: v.output.clone().unwrap_or(Value::Null),
                            },
                        )
                    })
                    .collect();
                let input = condition_input(i.payload, &facts);
                match condition_holds(cond, &input) {
                    Ok(true) => {}
                    Ok(false) => {
                        st.get_mut(r).expect("every step has a state").status = StepStatus::Skipped;
                        out.decisions.push(Decision::Skip {
                            step_ref: r.clone(),
                            reason: "condition evaluated to false".into(),
                            details: json!({ "condition": cond, "input": input }),
                        });
                        changed = true;
                        continue;
                    }
                    Err(error) => {
                        let s = st.get_mut(r).expect("every step has a state");
                        s.status = StepStatus::Failed;
                        s.error = Some(error.clone());
                        out.decisions.push(Decision::Fail { step_ref: r.clone(), error });
                        changed = true;
                        continue;
                    }
                }
            }
            if cap.is_some_and(|c| active >= c) {
                if held.insert(r.clone()) {
                    out.decisions.push(Decision::Held {
                        step_ref: r.clone(),
                        reason: format!("max_parallel_steps ({}) steps are running or waiting", cap.unwrap_or(0)),
                    });
                }
                continue;
            }
            st.get_mut(r).expect("every step has a state").status = StepStatus::Running;
            active += 1;
            out.decisions.push(Decision::Start { step_ref: r.clone() });
            changed = true;
        }
        if !changed {
            break;
        }
    }
    if st.values().all(|s| s.status.is_terminal()) {
        out.ending = Some(Ending::Completed);
    }
    out
}

/// The first step (in definition order) whose failure fails the run.
fn failing(steps: &[Step], st: &HashMap<String, StepNow>) -> Option<Ending> {
    steps.iter().find_map(|s| {
        let n = st.get(&s.step_ref)?;
        if !n.status.is_failure() {
            return None;
        }
        let step_ref = s.step_ref.clone();
        let error = format!(
            "step {} {}{}",
            s.step_ref,
            n.status.as_str(),
            n.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
        );
        match s.on_failure {
            OnFailure::FailWorkflow => Some(Ending::Failed { step_ref, error }),
            OnFailure::Compensate => Some(Ending::Compensate { step_ref, error }),
            OnFailure::Continue | OnFailure::SkipDependents => None,
        }
    })
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
        let steps = Step::all(saved);
        let steps = &steps[..];
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
        let steps = Step::all(&s);
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
            steps: &Step::all(&s),
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
        assert_eq!(topological(&Step::all(&s)), [1, 0]);
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
