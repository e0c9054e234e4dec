//! A saved step as the engine, `next` and `simulate` read it: parsed once
//! from the stored document ([`SavedStep`], which stays the API's shape and
//! the stored JSON) into types, so no rule looks a field up by name or
//! compares strings.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use super::workflow::{SavedStep, StepType, DEFAULT_MAX_NESTING_DEPTH, MAX_NESTING_DEPTH};

/// What a failed step does to its workflow run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnFailure {
    /// The run fails (the default).
    #[default]
    FailWorkflow,
    /// Its dependents run as if it had completed.
    Continue,
    /// Every step below it is skipped; the run goes on.
    SkipDependents,
    /// The run undoes its completed steps (its saga), then fails.
    Compensate,
}

impl OnFailure {
    pub const ALL: [OnFailure; 4] =
        [OnFailure::FailWorkflow, OnFailure::Continue, OnFailure::SkipDependents, OnFailure::Compensate];

    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::FailWorkflow => "fail_workflow",
            OnFailure::Continue => "continue",
            OnFailure::SkipDependents => "skip_dependents",
            OnFailure::Compensate => "compensate",
        }
    }
}

impl std::str::FromStr for OnFailure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        OnFailure::ALL.into_iter().find(|o| o.as_str() == s).ok_or_else(|| format!("unknown on_failure {s:?}"))
    }
}

/// What a cost gate does when nobody decides before its timeout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CostGateAction {
    Proceed,
    #[default]
    Fail,
}

/// A job step's overrides of its job's rules, for the job runs it starts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobOverrides {
    pub concurrency_key: Option<String>,
    pub resource_class: Option<String>,
    pub timeout_secs: Option<i64>,
    pub retry_backoff: Option<String>,
    pub retry_initial_delay_secs: Option<i64>,
    pub retry_max_attempts: Option<i64>,
    pub retry_max_delay_secs: Option<i64>,
}

/// What a step does.
#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    Job {
        job_id: String,
        overrides: JobOverrides,
    },
    SubWorkflow {
        sub_workflow_id: String,
        max_nesting_depth: i64,
    },
    Sleep {
        duration_secs: i64,
    },
    WaitForEvent {
        event_key: String,
        timeout_secs: Option<i64>,
        notify_url: Option<String>,
    },
    Approval {
        approvers: Option<Vec<String>>,
        timeout_secs: Option<i64>,
    },
    CostGate {
        threshold_microusd: i64,
        timeout_secs: Option<i64>,
        default_action: CostGateAction,
    },
    /// A stored definition the engine cannot read (saves refuse one; a
    /// document changed behind the api could hold one): the step fails
    /// when it starts, saying why.
    Unusable {
        reason: String,
    },
}

impl StepKind {
    pub fn step_type(&self) -> Option<StepType> {
        Some(match self {
            StepKind::Job { .. } => StepType::Job,
            StepKind::SubWorkflow { .. } => StepType::SubWorkflow,
            StepKind::Sleep { .. } => StepType::Sleep,
            StepKind::WaitForEvent { .. } => StepType::WaitForEvent,
            StepKind::Approval { .. } => StepType::Approval,
            StepKind::CostGate { .. } => StepType::CostGate,
            StepKind::Unusable { .. } => return None,
        })
    }
}

/// A compensation: the job that undoes a completed step.
#[derive(Clone, Debug, PartialEq)]
pub struct Compensation {
    pub job_id: String,
    pub timeout_secs: Option<i64>,
}

/// A saved step, typed.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub id: String,
    pub step_ref: String,
    pub depends_on: Vec<String>,
    pub on_failure: OnFailure,
    pub kind: StepKind,
    /// A JSONLogic condition: false skips the step.
    pub condition: Option<Value>,
    /// The payload of what it starts; the run's when absent.
    pub payload: Option<Value>,
    /// A JMESPath expression its output goes through.
    pub output_transform: Option<String>,
    /// The event it emits when it completes.
    pub event_emit_key: Option<String>,
    pub compensation: Option<Compensation>,
}

impl TryFrom<&SavedStep> for StepKind {
    type Error = String;

    /// The kind a saved step's `step_type` names, with the fields it needs.
    fn try_from(s: &SavedStep) -> Result<StepKind, String> {
        let d = &s.def;
        let t = d.step_type.as_deref().ok_or("the step has no step_type")?;
        let need = |v: &Option<String>, field: &str| v.clone().ok_or(format!("a {t} step needs {field}"));
        Ok(match t.parse::<StepType>()? {
            StepType::Job => StepKind::Job {
                job_id: need(&d.job_id, "job_id")?,
                overrides: JobOverrides {
                    concurrency_key: d.concurrency_key.clone(),
                    resource_class: d.resource_class.clone(),
                    timeout_secs: d.timeout_secs_override,
                    retry_backoff: d.retry_backoff.clone(),
                    retry_initial_delay_secs: d.retry_initial_delay_secs,
                    retry_max_attempts: d.retry_max_attempts,
                    retry_max_delay_secs: d.retry_max_delay_secs,
                },
            },
            StepType::SubWorkflow => StepKind::SubWorkflow {
                sub_workflow_id: need(&d.sub_workflow_id, "sub_workflow_id")?,
                max_nesting_depth: d.max_nesting_depth.unwrap_or(DEFAULT_MAX_NESTING_DEPTH).clamp(1, MAX_NESTING_DEPTH),
            },
            StepType::Sleep => StepKind::Sleep { duration_secs: d.sleep_duration_secs.unwrap_or(0).max(0) },
            StepType::WaitForEvent => StepKind::WaitForEvent {
                event_key: need(&d.event_key, "event_key")?,
                timeout_secs: d.event_timeout_secs.filter(|t| *t > 0),
                notify_url: d.event_notify_url.clone(),
            },
            StepType::Approval => StepKind::Approval {
                approvers: d.approval_approvers.clone(),
                timeout_secs: d.approval_timeout_secs.filter(|t| *t > 0),
            },
            StepType::CostGate => StepKind::CostGate {
                threshold_microusd: d.cost_gate_threshold_microusd.unwrap_or(0),
                timeout_secs: d.cost_gate_timeout_secs.filter(|t| *t > 0),
                default_action: match d.cost_gate_default_action.as_deref() {
                    Some("proceed") => CostGateAction::Proceed,
                    _ => CostGateAction::Fail,
                },
            },
        })
    }
}

impl From<&SavedStep> for Step {
    fn from(s: &SavedStep) -> Step {
        let d = &s.def;
        Step {
            id: s.id.clone(),
            step_ref: d.step_ref.clone(),
            depends_on: d.depends_on.clone().unwrap_or_default(),
            on_failure: d.on_failure.as_deref().and_then(|o| o.parse().ok()).unwrap_or_default(),
            kind: StepKind::try_from(s).unwrap_or_else(|reason| StepKind::Unusable { reason }),
            condition: d.condition.clone(),
            payload: d.payload.clone(),
            output_transform: d.output_transform.clone(),
            event_emit_key: d.event_emit_key.clone(),
            compensation: d
                .compensation_job_id
                .clone()
                .map(|job_id| Compensation { job_id, timeout_secs: d.compensation_timeout_secs }),
        }
    }
}

/// A version's steps with their graph worked out once: each step's
/// dependencies and dependents by position, and an order in which every
/// step comes after its dependencies. The rules (`workflow_run::next`) and
/// `simulate` walk it by position, so a pass over a 2,000-step version does
/// no hashing of refs, and the engine keeps one per version it has read.
#[derive(Clone, Debug, Default)]
pub struct Steps {
    list: Vec<Step>,
    index: HashMap<String, usize>,
    /// Each step's dependencies the version has (validation refuses one it
    /// has not; such a dependency holds nothing back), in `depends_on` order.
    deps: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
    order: Vec<usize>,
}

impl Steps {
    pub fn new(list: Vec<Step>) -> Steps {
        let mut index = HashMap::with_capacity(list.len());
        for (i, s) in list.iter().enumerate() {
            index.entry(s.step_ref.clone()).or_insert(i);
        }
        let deps: Vec<Vec<usize>> =
            list.iter().map(|s| s.depends_on.iter().filter_map(|d| index.get(d).copied()).collect()).collect();
        let mut dependents = vec![Vec::new(); list.len()];
        for (i, ds) in deps.iter().enumerate() {
            for &d in ds {
                dependents[d].push(i);
            }
        }
        let order = topological(&deps, &dependents);
        Steps { list, index, deps, dependents, order }
    }

    /// The steps of a saved version, typed.
    pub fn of(saved: &[SavedStep]) -> Steps {
        Steps::new(Step::all(saved))
    }

    pub fn position(&self, step_ref: &str) -> Option<usize> {
        self.index.get(step_ref).copied()
    }

    pub fn deps(&self, i: usize) -> &[usize] {
        &self.deps[i]
    }

    pub fn dependents(&self, i: usize) -> &[usize] {
        &self.dependents[i]
    }

    /// Positions in an order where each step comes after its dependencies,
    /// ties in definition order. A saved version has no cycle; steps left
    /// over by one (which validation refuses) come last in definition order.
    pub fn order(&self) -> &[usize] {
        &self.order
    }
}

impl std::ops::Deref for Steps {
    type Target = [Step];
    fn deref(&self) -> &[Step] {
        &self.list
    }
}

fn topological(deps: &[Vec<usize>], dependents: &[Vec<usize>]) -> Vec<usize> {
    let mut indegree: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut ready: VecDeque<usize> = (0..deps.len()).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(deps.len());
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for &j in &dependents[i] {
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.push_back(j);
            }
        }
    }
    if order.len() < deps.len() {
        let mut seen = vec![false; deps.len()];
        for &i in &order {
            seen[i] = true;
        }
        order.extend((0..deps.len()).filter(|&i| !seen[i]));
    }
    order
}

impl Step {
    /// The steps of a saved version, typed.
    pub fn all(saved: &[SavedStep]) -> Vec<Step> {
        saved.iter().map(Step::from).collect()
    }

    /// Its type, unless its definition is unusable.
    pub fn step_type(&self) -> Option<StepType> {
        self.kind.step_type()
    }
}

#[cfg(test)]
impl Step {
    /// A saved step `s` of `kind` with `extra` fields, read as the engine
    /// reads it (for the transitions' tests).
    pub(crate) fn test(kind: &str, extra: Value) -> Step {
        let mut v = serde_json::json!({ "id": "st_1", "step_ref": "s", "step_type": kind });
        v.as_object_mut().expect("an object").extend(extra.as_object().expect("an object").clone());
        Step::from(&serde_json::from_value::<SavedStep>(v).expect("a saved step"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn saved(v: Value) -> SavedStep {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn every_kind_reads_its_own_fields() {
        let cases = [
            (
                json!({"id": "st_1", "step_ref": "a", "step_type": "job", "job_id": "job_1", "retry_max_attempts": 3}),
                StepKind::Job {
                    job_id: "job_1".into(),
                    overrides: JobOverrides { retry_max_attempts: Some(3), ..JobOverrides::default() },
                },
            ),
            (
                json!({"id": "st_1", "step_ref": "a", "step_type": "sub_workflow", "sub_workflow_id": "wf_1", "max_nesting_depth": 99}),
                StepKind::SubWorkflow { sub_workflow_id: "wf_1".into(), max_nesting_depth: MAX_NESTING_DEPTH },
            ),
            (
                json!({"id": "st_1", "step_ref": "a", "step_type": "sleep", "sleep_duration_secs": 5}),
                StepKind::Sleep { duration_secs: 5 },
            ),
            (
                json!({"id": "st_1", "step_ref": "a", "step_type": "wait_for_event", "event_key": "k", "event_timeout_secs": 0}),
                StepKind::WaitForEvent { event_key: "k".into(), timeout_secs: None, notify_url: None },
            ),
            (
                json!({"id": "st_1", "step_ref": "a", "step_type": "approval", "approval_approvers": ["ops"], "approval_timeout_secs": 9}),
                StepKind::Approval { approvers: Some(vec!["ops".into()]), timeout_secs: Some(9) },
            ),
            (
                json!({"id": "st_1", "step_ref": "a", "step_type": "cost_gate", "cost_gate_threshold_microusd": 7, "cost_gate_default_action": "proceed"}),
                StepKind::CostGate {
                    threshold_microusd: 7,
                    timeout_secs: None,
                    default_action: CostGateAction::Proceed,
                },
            ),
        ];
        for (doc, kind) in cases {
            assert_eq!(Step::from(&saved(doc.clone())).kind, kind, "{doc}");
        }
    }

    #[test]
    fn the_common_fields_and_their_defaults() {
        let s = Step::from(&saved(json!({
            "id": "st_1", "step_ref": "b", "step_type": "job", "job_id": "j", "depends_on": ["a"],
            "compensation_job_id": "undo", "compensation_timeout_secs": 30, "event_emit_key": "b.done"
        })));
        assert_eq!(
            (s.step_ref.as_str(), s.depends_on.as_slice(), s.on_failure),
            ("b", &["a".to_string()][..], OnFailure::FailWorkflow)
        );
        assert_eq!(s.compensation, Some(Compensation { job_id: "undo".into(), timeout_secs: Some(30) }));
        assert_eq!(s.event_emit_key.as_deref(), Some("b.done"));
        for o in OnFailure::ALL {
            let s = Step::from(&saved(
                json!({"id": "st_1", "step_ref": "b", "step_type": "sleep", "on_failure": o.as_str()}),
            ));
            assert_eq!(s.on_failure, o);
        }
    }

    #[test]
    fn a_definition_the_engine_cannot_read_is_unusable_and_says_why() {
        let cases = [
            (json!({"id": "st_1", "step_ref": "a", "step_type": "job"}), "a job step needs job_id"),
            (json!({"id": "st_1", "step_ref": "a"}), "the step has no step_type"),
            (json!({"id": "st_1", "step_ref": "a", "step_type": "teleport"}), "must be one of"),
        ];
        for (doc, why) in cases {
            match Step::from(&saved(doc.clone())).kind {
                StepKind::Unusable { reason } => assert!(reason.contains(why), "{doc}: {reason}"),
                k => panic!("{doc}: {k:?}"),
            }
        }
    }
}
