//! What a workflow's definition says about its runs before any exists: the
//! order its steps run in (levels), the longest chain by expected duration
//! (critical path), a dry run under assumed step outcomes (simulation), and
//! what changed between two versions (diff). Pure: the api loads the steps
//! and hands them in.
//!
//! The functions take saved steps, which form a DAG; a `depends_on` naming
//! no step is ignored and a cycle is broken where it is found, so nothing
//! here loops or panics on data that slipped past the save checks.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use super::field_errors::FieldError;
use super::step::Steps;
use super::step_logic::transform_output;
use super::workflow::SavedStep;
use super::workflow_run::{Decision, Ending, Rules, StepNow, StepStatus};

/// The steps as indices: each step's dependencies by position.
struct Graph {
    refs: Vec<String>,
    deps: Vec<Vec<usize>>,
}

impl Graph {
    fn of(steps: &[SavedStep]) -> Graph {
        let at: HashMap<&str, usize> = steps.iter().enumerate().map(|(i, s)| (s.def.step_ref.as_str(), i)).collect();
        let deps = steps
            .iter()
            .map(|s| {
                let mut d: Vec<usize> = Vec::new();
                for r in s.def.depends_on.iter().flatten() {
                    if let Some(&i) = at.get(r.as_str()) {
                        if !d.contains(&i) {
                            d.push(i);
                        }
                    }
                }
                d
            })
            .collect();
        Graph { refs: steps.iter().map(|s| s.def.step_ref.clone()).collect(), deps }
    }

    /// The graph without the steps in `skip`, each remaining step waiting
    /// for what a skipped dependency waited for: a step skipped at run time
    /// is only decided once its own dependencies are, so its dependents
    /// still start after those. Also answers which old index each new one
    /// was.
    fn without(&self, skip: &HashSet<usize>) -> (Graph, Vec<usize>) {
        let kept: Vec<usize> = (0..self.refs.len()).filter(|i| !skip.contains(i)).collect();
        let new_index: HashMap<usize, usize> = kept.iter().enumerate().map(|(new, &old)| (old, new)).collect();
        let deps = kept
            .iter()
            .map(|&n| {
                let mut out: BTreeSet<usize> = BTreeSet::new();
                let mut seen: HashSet<usize> = HashSet::new();
                let mut todo = self.deps[n].clone();
                while let Some(d) = todo.pop() {
                    if !seen.insert(d) {
                        continue;
                    }
                    match new_index.get(&d) {
                        Some(&i) => {
                            out.insert(i);
                        }
                        None => todo.extend(&self.deps[d]),
                    }
                }
                out.into_iter().collect()
            })
            .collect();
        let refs = kept.iter().map(|&i| self.refs[i].clone()).collect();
        (Graph { refs, deps }, kept)
    }

    /// Each step's level: 0 without dependencies, else one more than its
    /// highest dependency. A dependency that closes a cycle counts nothing.
    fn levels(&self) -> Vec<usize> {
        fn visit(n: usize, deps: &[Vec<usize>], state: &mut [u8], level: &mut [usize]) {
            if state[n] != 0 {
                return;
            }
            state[n] = 1;
            let mut lv = 0;
            for &d in &deps[n] {
                visit(d, deps, state, level);
                if state[d] == 2 {
                    lv = lv.max(level[d] + 1);
                }
            }
            level[n] = lv;
            state[n] = 2;
        }
        let mut state = vec![0u8; self.refs.len()];
        let mut level = vec![0usize; self.refs.len()];
        for n in 0..self.refs.len() {
            visit(n, &self.deps, &mut state, &mut level);
        }
        level
    }

    /// Every step, level by level, in definition order within a level: an
    /// order in which each step comes after all it depends on.
    fn walk(&self) -> Vec<usize> {
        let level = self.levels();
        let mut order: Vec<usize> = (0..self.refs.len()).collect();
        order.sort_by_key(|&n| (level[n], n));
        order
    }

    fn grouped(&self) -> Vec<Vec<String>> {
        let level = self.levels();
        let mut out: Vec<Vec<String>> = vec![Vec::new(); level.iter().max().map_or(0, |m| m + 1)];
        for (n, &lv) in level.iter().enumerate() {
            out[lv].push(self.refs[n].clone());
        }
        out
    }

    /// The chain with the largest sum of `duration`, as indices from first
    /// to last, and that sum. Ties go to the chain of more steps, then to
    /// the step defined first, so the answer is stable.
    fn longest(&self, duration: &[f64]) -> (Vec<usize>, f64) {
        let n = self.refs.len();
        let mut finish = vec![0f64; n];
        let mut count = vec![0usize; n];
        let mut prev: Vec<Option<usize>> = vec![None; n];
        let level = self.levels();
        let better = |a: usize, b: Option<usize>, finish: &[f64], count: &[usize]| match b {
            None => true,
            Some(b) => (finish[a], count[a], std::cmp::Reverse(a)) > (finish[b], count[b], std::cmp::Reverse(b)),
        };
        for &s in &self.walk() {
            let mut best: Option<usize> = None;
            for &d in &self.deps[s] {
                // A dependency at the same or a higher level closes a cycle.
                if level[d] < level[s] && better(d, best, &finish, &count) {
                    best = Some(d);
                }
            }
            prev[s] = best;
            finish[s] = duration[s] + best.map_or(0.0, |b| finish[b]);
            count[s] = 1 + best.map_or(0, |b| count[b]);
        }
        let mut end: Option<usize> = None;
        for s in 0..n {
            if better(s, end, &finish, &count) {
                end = Some(s);
            }
        }
        let Some(end) = end else { return (vec![], 0.0) };
        let mut path = vec![end];
        while let Some(p) = prev[*path.last().unwrap_or(&end)] {
            path.push(p);
        }
        path.reverse();
        (path, finish[end])
    }
}

/// The steps' topological levels: level 0 holds the steps without
/// dependencies, and a step is one level above its highest dependency.
/// Refs within a level are in definition order; the steps of one level may
/// run at once.
pub fn levels(steps: &[SavedStep]) -> Vec<Vec<String>> {
    Graph::of(steps).grouped()
}

/// The critical path: the chain of dependent steps whose durations add up
/// to the most, as refs from first to last, and that total in seconds. A
/// step missing from `durations` counts 0. The plan passes expected
/// durations; a run's graph may pass observed ones.
pub fn critical_path(steps: &[SavedStep], durations: &HashMap<String, f64>) -> (Vec<String>, f64) {
    let g = Graph::of(steps);
    let d: Vec<f64> = g.refs.iter().map(|r| durations.get(r).copied().unwrap_or(0.0)).collect();
    let (path, total) = g.longest(&d);
    (path.into_iter().map(|i| g.refs[i].clone()).collect(), total)
}

/// What a plan assumes of one step instead of its definition.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PlanOverride {
    /// Leave the step out, as if its condition were false.
    pub skip: bool,
    /// Replaces the step's `expected_duration_secs`.
    pub expected_duration_secs: Option<i64>,
}

/// A workflow's shape under its overrides.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The steps that run, by level ([`levels`]).
    pub levels: Vec<Vec<String>>,
    pub step_count: usize,
    /// The most steps of one level.
    pub max_parallelism: usize,
    pub critical_path: Vec<String>,
    pub estimated_duration_secs: f64,
}

/// The plan of `steps`: the skipped steps removed (their dependents wait
/// for what they waited for), the rest by level, and the critical path by
/// `expected_duration_secs` (overridden where `overrides` says; a step
/// without one counts 0). Overrides of unknown refs are ignored here: the
/// api refuses them first ([`unknown_refs`]).
pub fn plan(steps: &[SavedStep], overrides: &HashMap<String, PlanOverride>) -> Plan {
    let skip: HashSet<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| overrides.get(&s.def.step_ref).is_some_and(|o| o.skip))
        .map(|(i, _)| i)
        .collect();
    let (g, kept) = Graph::of(steps).without(&skip);
    let duration: Vec<f64> = kept
        .iter()
        .map(|&i| {
            let s = &steps[i].def;
            let o = overrides.get(&s.step_ref).and_then(|o| o.expected_duration_secs);
            o.or(s.expected_duration_secs).unwrap_or(0) as f64
        })
        .collect();
    let levels = g.grouped();
    let (path, total) = g.longest(&duration);
    Plan {
        step_count: g.refs.len(),
        max_parallelism: levels.iter().map(Vec::len).max().unwrap_or(0),
        critical_path: path.into_iter().map(|i| g.refs[i].clone()).collect(),
        estimated_duration_secs: total,
        levels,
    }
}

/// One failure per key of a request map (`overrides`, `outcomes`,
/// `outputs`) that names no step, located at `<location>.<key>`.
pub fn unknown_refs<'a>(
    steps: &[SavedStep],
    location: &str,
    keys: impl IntoIterator<Item = &'a String>,
) -> Vec<FieldError> {
    let refs: HashSet<&str> = steps.iter().map(|s| s.def.step_ref.as_str()).collect();
    keys.into_iter()
        .filter(|k| !refs.contains(k.as_str()))
        .map(|k| FieldError::new(super::child(location, k), "names no step of the workflow", Some(k.as_str().into())))
        .collect()
}

/// How a step that runs is assumed to end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Outcome {
    #[default]
    Completed,
    Failed,
    TimedOut,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Completed, Outcome::Failed, Outcome::TimedOut];

    pub fn as_str(self) -> &'static str {
        self.predicted().as_str()
    }

    fn predicted(self) -> Predicted {
        match self {
            Outcome::Completed => Predicted::Completed,
            Outcome::Failed => Predicted::Failed,
            Outcome::TimedOut => Predicted::TimedOut,
        }
    }
}

impl FromStr for Outcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Outcome::ALL
            .into_iter()
            .find(|o| o.predicted().as_str() == s)
            .ok_or_else(|| "must be one of completed, failed, timed_out".to_string())
    }
}

/// What a simulation predicts for one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Predicted {
    Completed,
    Failed,
    TimedOut,
    Skipped,
    NotReached,
}

impl Predicted {
    pub fn as_str(self) -> &'static str {
        match self {
            Predicted::Completed => "completed",
            Predicted::Failed => "failed",
            Predicted::TimedOut => "timed_out",
            Predicted::Skipped => "skipped",
            Predicted::NotReached => "not_reached",
        }
    }

    /// Whether the step was started (and so ended one way or another).
    pub fn ran(self) -> bool {
        matches!(self, Predicted::Completed | Predicted::Failed | Predicted::TimedOut)
    }
}

impl fmt::Display for Predicted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a simulation takes as given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assumptions {
    /// The run's payload, as conditions see it.
    pub payload: Value,
    /// How each step ends when it runs; absent: completed.
    pub outcomes: HashMap<String, Outcome>,
    /// What each completed step produced, before its output_transform;
    /// absent: null, and the transform is not applied.
    pub outputs: HashMap<String, Value>,
}

/// One step's predicted fate.
#[derive(Clone, Debug, PartialEq)]
pub struct StepPrediction {
    pub step_ref: String,
    pub status: Predicted,
    /// Why the step was skipped, not reached, or failed without running
    /// (its condition or output_transform failed).
    pub reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Simulation {
    /// The steps that run (completed, failed or timed out), in walk order.
    pub order: Vec<String>,
    /// Every step, in walk order: level by level, definition order within
    /// a level.
    pub steps: Vec<StepPrediction>,
    /// Whether the run fails (a step failed under fail_workflow or
    /// compensate).
    pub failed: bool,
}

/// Runs the workflow as the engine would, under `given`: the engine's own
/// rules (`workflow_run::next`) decide which steps start, which are
/// skipped (a false condition, a failure under `skip_dependents` above)
/// and when the run ends, and each step that starts ends at once as
/// `given` says. Steps the rules start together run together, so a
/// failure under `fail_workflow` or `compensate` (no compensation is
/// simulated) leaves only the steps not started yet `not_reached`. A
/// step's condition sees `{payload, steps: {ref: {status, output}}}` as
/// the engine shows it.
pub fn simulate(saved: &[SavedStep], given: &Assumptions) -> Simulation {
    let steps = Steps::of(saved);
    let g = Graph::of(saved);
    let mut rules = Rules::new(&steps, &HashMap::new(), &given.payload, false, None);
    let mut why: HashMap<String, String> = HashMap::new();
    let mut ran: HashSet<String> = HashSet::new();
    let mut ended: Option<String> = None;
    // Each round starts at least one step or ends the run: bounded by the
    // step count.
    for _ in 0..=steps.len() {
        let n = rules.advance();
        let mut moved = false;
        for d in n.decisions {
            moved = true;
            match d {
                Decision::Start { step_ref } => {
                    let def = steps.position(&step_ref).map(|k| &steps[k]);
                    let transform = def.and_then(|s| s.output_transform.as_deref());
                    let (status, reason, output) =
                        run(transform, given.outcomes.get(&step_ref), given.outputs.get(&step_ref));
                    let status = match status {
                        Predicted::Completed => StepStatus::Completed,
                        Predicted::TimedOut => StepStatus::TimedOut,
                        _ => StepStatus::Failed,
                    };
                    if let Some(r) = &reason {
                        why.insert(step_ref.clone(), r.clone());
                    }
                    rules.set(&step_ref, StepNow { status, output: Some(output), error: reason });
                    ran.insert(step_ref);
                }
                // The rules recorded these themselves.
                Decision::Skip { step_ref, reason, .. } => {
                    why.insert(step_ref, reason);
                }
                Decision::Fail { step_ref, error } => {
                    why.insert(step_ref, error);
                }
                // No cap is simulated.
                Decision::Held { .. } => moved = false,
            }
        }
        match n.ending {
            Some(Ending::Failed { step_ref, .. }) => {
                ended = Some(format!("the run failed at step {step_ref} (fail_workflow)"));
                break;
            }
            Some(Ending::Compensate { step_ref, .. }) => {
                ended = Some(format!(
                    "the run failed at step {step_ref} (compensate: its completed steps are compensated)"
                ));
                break;
            }
            Some(Ending::Completed) => break,
            None if !moved => break,
            None => {}
        }
    }
    let mut out = Simulation { order: vec![], steps: vec![], failed: ended.is_some() };
    for n in g.walk() {
        let r = &g.refs[n];
        let status = match rules.status(r) {
            Some(StepStatus::Completed) => Predicted::Completed,
            Some(StepStatus::TimedOut) => Predicted::TimedOut,
            Some(StepStatus::Failed) => Predicted::Failed,
            Some(StepStatus::Skipped) => Predicted::Skipped,
            _ => Predicted::NotReached,
        };
        let reason = match status {
            Predicted::NotReached => ended.clone(),
            _ => why.remove(r),
        };
        if ran.contains(r) {
            out.order.push(r.clone());
        }
        out.steps.push(StepPrediction { step_ref: r.clone(), status, reason });
    }
    out
}

/// A step that runs: its assumed outcome and, when it completes with an
/// assumed output, that output through its transform (which may fail it).
fn run(
    transform: Option<&str>,
    outcome: Option<&Outcome>,
    output: Option<&Value>,
) -> (Predicted, Option<String>, Value) {
    let status = outcome.copied().unwrap_or_default().predicted();
    match (status, output, transform) {
        (Predicted::Completed, Some(v), Some(t)) => match transform_output(t, v) {
            Ok(v) => (status, None, v),
            Err(e) => (Predicted::Failed, Some(e), Value::Null),
        },
        (Predicted::Completed, Some(v), None) => (status, None, v.clone()),
        _ => (status, None, Value::Null),
    }
}

/// How one step differs between two versions: the names of the definition
/// fields whose value changed (alphabetical).
#[derive(Clone, Debug, PartialEq)]
pub struct StepChange {
    pub step_ref: String,
    pub fields: Vec<String>,
}

/// What changed from one version's steps to another's, by step_ref.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// In the later version's definition order.
    pub added: Vec<String>,
    /// In the earlier version's definition order.
    pub removed: Vec<String>,
    /// Steps in both whose definitions differ, in the later version's order.
    pub changed: Vec<StepChange>,
}

/// The difference between two versions' steps. A step's id is not part of
/// its definition (every version gives its steps new ids), and
/// `depends_on` is compared as a set.
pub fn diff(from: &[SavedStep], to: &[SavedStep]) -> Diff {
    let old: HashMap<&str, &SavedStep> = from.iter().map(|s| (s.def.step_ref.as_str(), s)).collect();
    let new: HashSet<&str> = to.iter().map(|s| s.def.step_ref.as_str()).collect();
    let mut d = Diff {
        added: vec![],
        removed: from
            .iter()
            .filter(|s| !new.contains(s.def.step_ref.as_str()))
            .map(|s| s.def.step_ref.clone())
            .collect(),
        changed: vec![],
    };
    for s in to {
        match old.get(s.def.step_ref.as_str()) {
            None => d.added.push(s.def.step_ref.clone()),
            Some(before) => {
                let fields = changed_fields(before, s);
                if !fields.is_empty() {
                    d.changed.push(StepChange { step_ref: s.def.step_ref.clone(), fields });
                }
            }
        }
    }
    d
}

fn changed_fields(a: &SavedStep, b: &SavedStep) -> Vec<String> {
    let fields = |s: &SavedStep| -> BTreeMap<String, Value> {
        let mut m: BTreeMap<String, Value> = match serde_json::to_value(&s.def) {
            Ok(Value::Object(m)) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        if let Some(Value::Array(deps)) = m.get_mut("depends_on") {
            deps.sort_by_key(|v| v.to_string());
            deps.dedup();
        }
        m
    };
    let (a, b) = (fields(a), fields(b));
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names.into_iter().filter(|k| a.get(*k) != b.get(*k)).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn steps(v: Value) -> Vec<SavedStep> {
        let defs: Vec<super::super::workflow::StepRequest> = serde_json::from_value(v).unwrap();
        defs.into_iter().enumerate().map(|(i, def)| SavedStep { id: format!("wfs_{i}"), def }).collect()
    }

    /// a -> (b, c) -> d, with expected durations a 10, b 5, c 30, d 1.
    fn diamond() -> Vec<SavedStep> {
        steps(json!([
            {"step_ref": "a", "job_id": "j", "expected_duration_secs": 10},
            {"step_ref": "b", "job_id": "j", "depends_on": ["a"], "expected_duration_secs": 5},
            {"step_ref": "c", "job_id": "j", "depends_on": ["a"], "expected_duration_secs": 30},
            {"step_ref": "d", "job_id": "j", "depends_on": ["b", "c"], "expected_duration_secs": 1}
        ]))
    }

    fn skip(refs: &[&str]) -> HashMap<String, PlanOverride> {
        refs.iter().map(|r| (r.to_string(), PlanOverride { skip: true, ..PlanOverride::default() })).collect()
    }

    #[test]
    fn levels_follow_the_deepest_dependency_in_definition_order() {
        assert_eq!(levels(&diamond()), [vec!["a"], vec!["b", "c"], vec!["d"]]);
        let s = steps(json!([
            {"step_ref": "late", "job_id": "j", "depends_on": ["mid", "root"]},
            {"step_ref": "root", "job_id": "j"},
            {"step_ref": "other", "job_id": "j"},
            {"step_ref": "mid", "job_id": "j", "depends_on": ["root"]}
        ]));
        assert_eq!(levels(&s), [vec!["root", "other"], vec!["mid"], vec!["late"]]);
        assert!(levels(&[]).is_empty());
    }

    #[test]
    fn broken_graphs_do_not_loop() {
        let s = steps(json!([
            {"step_ref": "a", "job_id": "j", "depends_on": ["b", "ghost"]},
            {"step_ref": "b", "job_id": "j", "depends_on": ["a"]}
        ]));
        assert_eq!(levels(&s), [vec!["b"], vec!["a"]]);
        assert_eq!(critical_path(&s, &HashMap::new()).0.len(), 2);
        // The engine starts neither step of a cycle (saves refuse one), and
        // neither does its simulation.
        let sim = simulate(&s, &Assumptions::default());
        assert!(sim.order.is_empty() && sim.steps.iter().all(|p| p.status == Predicted::NotReached), "{sim:?}");
    }

    #[test]
    fn the_critical_path_is_the_longest_chain_by_duration() {
        let p = plan(&diamond(), &HashMap::new());
        assert_eq!(p.levels, [vec!["a"], vec!["b", "c"], vec!["d"]]);
        assert_eq!((p.step_count, p.max_parallelism), (4, 2));
        assert_eq!(
            (p.critical_path.clone(), p.estimated_duration_secs),
            (vec!["a".into(), "c".into(), "d".into()], 41.0)
        );

        let durations: HashMap<String, f64> = [("b".to_string(), 100.5), ("a".to_string(), 1.0)].into();
        assert_eq!(critical_path(&diamond(), &durations), (vec!["a".into(), "b".into(), "d".into()], 101.5));
        assert_eq!(critical_path(&[], &durations), (vec![], 0.0));
    }

    #[test]
    fn without_durations_the_longest_chain_by_steps_wins() {
        let s = steps(json!([
            {"step_ref": "x", "job_id": "j"},
            {"step_ref": "a", "job_id": "j"},
            {"step_ref": "b", "job_id": "j", "depends_on": ["a"]}
        ]));
        assert_eq!(critical_path(&s, &HashMap::new()), (vec!["a".into(), "b".into()], 0.0));
    }

    #[test]
    fn overrides_skip_steps_and_replace_durations() {
        let p = plan(&diamond(), &skip(&["c"]));
        assert_eq!(p.levels, [vec!["a"], vec!["b"], vec!["d"]]);
        assert_eq!((p.step_count, p.max_parallelism), (3, 1));
        assert_eq!(
            (p.critical_path.clone(), p.estimated_duration_secs),
            (vec!["a".into(), "b".into(), "d".into()], 16.0)
        );

        // A skipped step's dependents wait for what it waited for.
        let p = plan(&diamond(), &skip(&["b", "c"]));
        assert_eq!(p.levels, [vec!["a"], vec!["d"]]);
        let p = plan(&diamond(), &skip(&["a"]));
        assert_eq!(p.levels, [vec!["b", "c"], vec!["d"]]);

        let mut o = HashMap::new();
        o.insert("b".to_string(), PlanOverride { skip: false, expected_duration_secs: Some(60) });
        let p = plan(&diamond(), &o);
        assert_eq!(
            (p.critical_path.clone(), p.estimated_duration_secs),
            (vec!["a".into(), "b".into(), "d".into()], 71.0)
        );
        assert_eq!(plan(&diamond(), &skip(&["a", "b", "c", "d"])).levels, Vec::<Vec<String>>::new());
    }

    #[test]
    fn unknown_refs_are_located_at_their_key() {
        let keys = ["b".to_string(), "zz".to_string()];
        let got = unknown_refs(&diamond(), "body.overrides", &keys);
        assert_eq!(got, [FieldError::new("body.overrides/zz", "names no step of the workflow", Some("zz".into()))]);
    }

    fn statuses(sim: &Simulation) -> Vec<(String, &'static str, Option<String>)> {
        sim.steps.iter().map(|p| (p.step_ref.clone(), p.status.as_str(), p.reason.clone())).collect()
    }

    fn given(outcomes: &[(&str, Outcome)]) -> Assumptions {
        Assumptions { outcomes: outcomes.iter().map(|(r, o)| (r.to_string(), *o)).collect(), ..Assumptions::default() }
    }

    #[test]
    fn everything_completes_by_default() {
        let sim = simulate(&diamond(), &Assumptions::default());
        assert_eq!(sim.order, ["a", "b", "c", "d"]);
        assert!(!sim.failed);
        assert!(sim.steps.iter().all(|p| p.status == Predicted::Completed && p.reason.is_none()));
    }

    #[test]
    fn a_false_condition_skips_the_step_and_its_dependents_still_run() {
        let s = steps(json!([
            {"step_ref": "a", "job_id": "j"},
            {"step_ref": "big", "job_id": "j", "depends_on": ["a"],
             "condition": {">": [{"var": "payload.n"}, 10]}},
            {"step_ref": "after", "job_id": "j", "depends_on": ["big"],
             "condition": {"==": [{"var": "steps.big.status"}, "skipped"]}}
        ]));
        let sim = simulate(&s, &Assumptions { payload: json!({"n": 3}), ..Assumptions::default() });
        assert_eq!(sim.order, ["a", "after"]);
        assert_eq!(statuses(&sim)[1], ("big".into(), "skipped", Some("condition evaluated to false".into())));
        assert!(!sim.failed);
        let sim = simulate(&s, &Assumptions { payload: json!({"n": 30}), ..Assumptions::default() });
        assert_eq!(sim.order, ["a", "big"], "after's condition sees big completed");
        assert_eq!(statuses(&sim)[2].2.as_deref(), Some("condition evaluated to false"));
    }

    #[test]
    fn conditions_see_transformed_outputs_of_earlier_steps() {
        let s = steps(json!([
            {"step_ref": "fetch", "job_id": "j", "output_transform": "length(rows)"},
            {"step_ref": "load", "job_id": "j", "depends_on": ["fetch"],
             "condition": {">": [{"var": "steps.fetch.output"}, 1]}}
        ]));
        let mut g = Assumptions::default();
        g.outputs.insert("fetch".into(), json!({"rows": [1, 2, 3]}));
        assert_eq!(simulate(&s, &g).order, ["fetch", "load"]);
        g.outputs.insert("fetch".into(), json!({"rows": [1]}));
        assert_eq!(simulate(&s, &g).order, ["fetch"]);
        // An output the transform cannot take fails the step.
        g.outputs.insert("fetch".into(), json!({"rows": 5}));
        let sim = simulate(&s, &g);
        assert_eq!(sim.steps[0].status, Predicted::Failed);
        assert!(sim.steps[0].reason.as_deref().unwrap().starts_with("the output_transform failed"), "{sim:?}");
        assert!(sim.failed);
    }

    #[test]
    fn skip_dependents_skips_every_step_below_and_the_run_completes() {
        let s = steps(json!([
            {"step_ref": "a", "job_id": "j", "on_failure": "skip_dependents"},
            {"step_ref": "b", "job_id": "j", "depends_on": ["a"]},
            {"step_ref": "side", "job_id": "j"},
            {"step_ref": "c", "job_id": "j", "depends_on": ["b", "side"]}
        ]));
        let sim = simulate(&s, &given(&[("a", Outcome::TimedOut)]));
        assert_eq!(sim.order, ["a", "side"]);
        // The reasons are the engine's, as explain shows them.
        assert_eq!(
            statuses(&sim),
            [
                ("a".into(), "timed_out", None),
                ("side".into(), "completed", None),
                ("b".into(), "skipped", Some("dependency a timed_out (on_failure skip_dependents)".into())),
                ("c".into(), "skipped", Some("dependency b was skipped after a failure upstream".into()))
            ]
        );
        assert!(!sim.failed);
    }

    #[test]
    fn continue_lets_dependents_run() {
        let s = steps(json!([
            {"step_ref": "a", "job_id": "j", "on_failure": "continue"},
            {"step_ref": "b", "job_id": "j", "depends_on": ["a"],
             "condition": {"==": [{"var": "steps.a.status"}, "failed"]}}
        ]));
        let sim = simulate(&s, &given(&[("a", Outcome::Failed)]));
        assert_eq!(sim.order, ["a", "b"]);
        assert!(!sim.failed);
    }

    #[test]
    fn fail_workflow_and_compensate_end_the_run() {
        for (policy, why) in [
            ("fail_workflow", "the run failed at step b (fail_workflow)"),
            ("compensate", "the run failed at step b (compensate: its completed steps are compensated)"),
        ] {
            let s = steps(json!([
                {"step_ref": "a", "job_id": "j"},
                {"step_ref": "b", "job_id": "j", "on_failure": policy},
                {"step_ref": "c", "job_id": "j"},
                {"step_ref": "d", "job_id": "j", "depends_on": ["a"]}
            ]));
            let sim = simulate(&s, &given(&[("b", Outcome::Failed)]));
            // a, b and c start together, as the engine starts them: only d,
            // not started when b failed, is not reached.
            assert_eq!(sim.order, ["a", "b", "c"]);
            assert!(sim.failed);
            let got = statuses(&sim);
            assert_eq!(got[1], ("b".into(), "failed", None));
            assert_eq!(got[2], ("c".into(), "completed", None));
            assert_eq!(got[3], ("d".into(), "not_reached", Some(why.into())));
        }
    }

    #[test]
    fn a_condition_that_cannot_be_evaluated_fails_the_step() {
        let s = steps(json!([
            {"step_ref": "a", "job_id": "j", "on_failure": "continue", "condition": {"nope": [1]}},
            {"step_ref": "b", "job_id": "j"}
        ]));
        let sim = simulate(&s, &Assumptions::default());
        assert_eq!(sim.steps[0].status, Predicted::Failed);
        assert!(sim.steps[0].reason.as_deref().unwrap().starts_with("the condition failed to evaluate"), "{sim:?}");
        assert_eq!(sim.steps[1].status, Predicted::Completed);
        assert!(!sim.failed);
    }

    #[test]
    fn outcomes_parse_from_their_names() {
        assert_eq!("timed_out".parse::<Outcome>(), Ok(Outcome::TimedOut));
        assert_eq!("skipped".parse::<Outcome>(), Err("must be one of completed, failed, timed_out".into()));
    }

    #[test]
    fn diff_names_added_removed_and_changed_fields_ignoring_ids() {
        let from = diamond();
        let to = steps(json!([
            {"step_ref": "a", "job_id": "j", "expected_duration_secs": 10},
            {"step_ref": "c", "job_id": "k", "depends_on": ["a"], "on_failure": "continue"},
            {"step_ref": "d", "job_id": "j", "depends_on": ["c", "b2"], "expected_duration_secs": 1},
            {"step_ref": "b2", "sleep_duration_secs": 5, "depends_on": ["a"]}
        ]));
        let got = diff(&from, &to);
        assert_eq!(got.added, ["b2"]);
        assert_eq!(got.removed, ["b"]);
        assert_eq!(
            got.changed,
            [
                StepChange {
                    step_ref: "c".into(),
                    fields: vec!["expected_duration_secs".into(), "job_id".into(), "on_failure".into()]
                },
                StepChange { step_ref: "d".into(), fields: vec!["depends_on".into()] }
            ]
        );
        let mut reordered = from.clone();
        reordered[3].def.depends_on = Some(vec!["c".into(), "b".into()]);
        reordered[0].id = "wfs_other".into();
        assert_eq!(diff(&from, &reordered), Diff { added: vec![], removed: vec![], changed: vec![] });
    }

    /// The rules played round by round from scratch, as `next` answers a
    /// pass that knows nothing of the last one: what [`simulate`]'s kept
    /// rules must agree with.
    fn from_scratch(saved: &[SavedStep], given: &Assumptions) -> (Vec<(String, Predicted)>, bool) {
        use super::super::workflow_run::{next, Inputs};
        let steps = Steps::of(saved);
        let mut now: HashMap<String, StepNow> = HashMap::new();
        let mut failed = false;
        for _ in 0..=steps.len() {
            let n = next(&Inputs {
                steps: &steps,
                now: &now,
                payload: &given.payload,
                paused: false,
                max_parallel_steps: None,
            });
            let moved = !n.decisions.is_empty();
            for d in n.decisions {
                let (r, status) = match d {
                    Decision::Start { step_ref } => {
                        let status = match given.outcomes.get(&step_ref).copied().unwrap_or_default() {
                            Outcome::Completed => StepStatus::Completed,
                            Outcome::Failed => StepStatus::Failed,
                            Outcome::TimedOut => StepStatus::TimedOut,
                        };
                        (step_ref, status)
                    }
                    Decision::Skip { step_ref, .. } => (step_ref, StepStatus::Skipped),
                    Decision::Fail { step_ref, .. } => (step_ref, StepStatus::Failed),
                    Decision::Held { .. } => unreachable!("no cap"),
                };
                now.insert(r, StepNow { status, output: Some(Value::Null), error: None });
            }
            match n.ending {
                Some(Ending::Completed) => break,
                Some(_) => {
                    failed = true;
                    break;
                }
                None if !moved => break,
                None => {}
            }
        }
        let fate = steps
            .iter()
            .map(|s| {
                let p = match now.get(&s.step_ref).map(|n| n.status) {
                    Some(StepStatus::Completed) => Predicted::Completed,
                    Some(StepStatus::TimedOut) => Predicted::TimedOut,
                    Some(StepStatus::Failed) => Predicted::Failed,
                    Some(StepStatus::Skipped) => Predicted::Skipped,
                    _ => Predicted::NotReached,
                };
                (s.step_ref.clone(), p)
            })
            .collect();
        (fate, failed)
    }

    #[test]
    fn kept_rules_agree_with_rules_played_from_scratch_on_random_graphs() {
        // A small linear congruential generator: the same cases every run.
        let mut seed: u64 = 0x5eed;
        let mut roll = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let on_failure = ["fail_workflow", "continue", "skip_dependents", "compensate"];
        for case in 0..300 {
            let n = 2 + roll(12) as usize;
            let mut defs = Vec::new();
            let mut given = Assumptions { payload: json!({"tier": "gold"}), ..Assumptions::default() };
            for i in 0..n {
                let deps: Vec<String> = (0..i).filter(|_| roll(3) == 0).map(|j| format!("s{j}")).collect();
                let mut d = json!({"step_ref": format!("s{i}"), "job_id": "j", "depends_on": deps,
                                   "on_failure": on_failure[roll(4) as usize]});
                match roll(6) {
                    0 => d["condition"] = json!({"==": [{"var": "payload.tier"}, "gold"]}),
                    1 => d["condition"] = json!({"==": [{"var": "payload.tier"}, "free"]}),
                    2 => d["condition"] = json!({"nope": [1]}),
                    _ => {}
                }
                defs.push(d);
                match roll(5) {
                    0 => given.outcomes.insert(format!("s{i}"), Outcome::Failed),
                    1 => given.outcomes.insert(format!("s{i}"), Outcome::TimedOut),
                    _ => None,
                };
            }
            let saved = steps(Value::Array(defs));
            let sim = simulate(&saved, &given);
            let (want, failed) = from_scratch(&saved, &given);
            let mut got: Vec<(String, Predicted)> = sim.steps.iter().map(|p| (p.step_ref.clone(), p.status)).collect();
            let mut want = want;
            got.sort_by(|a, b| a.0.cmp(&b.0));
            want.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!((got, sim.failed), (want, failed), "case {case}: {saved:?}");
        }
    }

    #[test]
    fn a_chain_of_the_most_steps_allowed_plays_out_in_one_walk() {
        let defs: Vec<Value> = (0..2000)
            .map(|i| match i {
                0 => json!({"step_ref": "s0", "job_id": "j"}),
                i => json!({"step_ref": format!("s{i}"), "job_id": "j", "depends_on": [format!("s{}", i - 1)]}),
            })
            .collect();
        let sim = simulate(&steps(Value::Array(defs)), &Assumptions::default());
        assert_eq!(sim.order.len(), 2000);
        assert!(!sim.failed && sim.steps.iter().all(|p| p.status == Predicted::Completed));
    }
}
