//! A workflow's definition: its steps (a DAG linked by `depends_on`), its
//! settings, and the project's workflow policy, with every check a save
//! must pass, as pure functions.
//!
//! Some rules need facts from the database: that `job_id`,
//! `compensation_job_id` and `sub_workflow_id` name live resources of the
//! workflow's project, and which workflows each sub-workflow nests in
//! turn. The caller looks them up first ([`ids_to_look_up`], then
//! [`References::missing_workflows`] until nothing is missing) and hands
//! them in as [`References`], so the checks do no I/O and report every
//! problem at once, each located at its step (`body.steps/3/depends_on`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cron_expr::{parse_cron, parse_timezone};
use super::field_errors::{FieldError, FieldErrors};
use super::limits::{
    KEY, MAP_KEY, MAP_VALUE, MAX_ATTEMPTS_OVERRIDE, MAX_MAP_ENTRIES, MAX_MAP_KEY_LEN, MAX_MAP_VALUE_LEN,
    RETRY_INITIAL_DELAY_SECS, RETRY_MAX_DELAY_SECS, VERSION_POLICIES,
};
use super::retry::RetryStrategy;
use super::rules::{check_url, Text};

/// Most steps one workflow may have.
pub const MAX_STEPS: usize = 2000;
/// Longest step_ref.
pub const MAX_STEP_REF_LEN: usize = 64;
/// How deep workflows may nest below a sub_workflow step when the step
/// does not say (`max_nesting_depth`), and the most it may say.
pub const DEFAULT_MAX_NESTING_DEPTH: i64 = 5;
pub const MAX_NESTING_DEPTH: i64 = 10;
/// Longest JSONLogic condition or JMESPath output_transform, as JSON text.
pub const MAX_EXPRESSION_LEN: usize = 4096;
/// Most approvers of an approval step.
pub const MAX_APPROVERS: usize = 50;
/// Longest wait of a sleep, event, approval or cost-gate step: 30 days.
pub const MAX_WAIT_SECS: i64 = 30 * 86_400;
/// Longest timeout of a job step or a compensation, as for jobs: 1 day.
pub const MAX_STEP_TIMEOUT_SECS: i64 = 86_400;
/// Longest run of a whole workflow: 30 days.
pub const MAX_WORKFLOW_TIMEOUT_SECS: i64 = 30 * 86_400;
/// Largest max_concurrent_runs and max_parallel_steps (0: no cap).
pub const MAX_CONCURRENT_RUNS: i64 = 10_000;
pub const MAX_PARALLEL_STEPS: i64 = MAX_STEPS as i64;
/// Largest cost-gate threshold: one billion dollars, in micro-dollars.
pub const MAX_COST_MICROUSD: i64 = 1_000_000_000_000_000;
/// Longest workflow description.
pub const MAX_DESCRIPTION: usize = 4000;
pub const DESCRIPTION: Text = Text::stored(0, MAX_DESCRIPTION);

/// What a step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepType {
    Job,
    SubWorkflow,
    Sleep,
    WaitForEvent,
    Approval,
    CostGate,
}

impl StepType {
    pub const ALL: [StepType; 6] = [
        StepType::Job,
        StepType::SubWorkflow,
        StepType::Sleep,
        StepType::WaitForEvent,
        StepType::Approval,
        StepType::CostGate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StepType::Job => "job",
            StepType::SubWorkflow => "sub_workflow",
            StepType::Sleep => "sleep",
            StepType::WaitForEvent => "wait_for_event",
            StepType::Approval => "approval",
            StepType::CostGate => "cost_gate",
        }
    }
}

impl fmt::Display for StepType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StepType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        StepType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| format!("must be one of {}", one_of(StepType::ALL.map(StepType::as_str))))
    }
}

/// What a failed step does to its workflow run. `fail_workflow` is the
/// default.
pub const ON_FAILURE: [&str; 4] = ["fail_workflow", "continue", "skip_dependents", "compensate"];
pub const DEFAULT_ON_FAILURE: &str = "fail_workflow";
/// What a cost gate does when nobody decides before its timeout.
pub const COST_GATE_ACTIONS: [&str; 2] = ["proceed", "fail"];
/// The stage changes a step's stage_notifications may name: `started`
/// (running), `waiting`, `completed`, `failed` (failed or timed out) are
/// sent when `stages` is absent; `skipped`, `cancelled` and `compensated`
/// only when named.
pub const STAGES: [&str; 7] = ["started", "waiting", "completed", "failed", "skipped", "cancelled", "compensated"];
/// Most URLs, and most subscriptions, one step's stage_notifications names.
pub const MAX_STAGE_TARGETS: usize = 5;

/// A step's stage_notifications: where its stage changes are sent.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageNotifications {
    /// Signed with the project's signing secret, like an event_notify_url's
    /// notification.
    #[serde(default)]
    pub urls: Vec<String>,
    /// Webhook subscriptions of the project: signed with their secrets,
    /// whatever event_types they list.
    #[serde(default)]
    pub subscription_ids: Vec<String>,
    pub stages: Option<Vec<String>>,
}

fn one_of<const N: usize>(v: [&str; N]) -> String {
    v.join(", ")
}

/// One step of a save request. Only `step_ref` is required; a saved step
/// has `step_type`, `on_failure` and `depends_on` filled in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepRequest {
    pub step_ref: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_workflow_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_transform: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage_notifications: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_duration_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs_override: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_nesting_depth: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_initial_delay_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_max_attempts: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_max_delay_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep_duration_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_emit_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_notify_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_timeout_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_approvers: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_timeout_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compensation_job_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compensation_timeout_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_gate_threshold_microusd: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_gate_timeout_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_gate_default_action: Option<String>,
}

/// A saved step: the checked request with its id in the version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedStep {
    pub id: String,
    #[serde(flatten)]
    pub def: StepRequest,
}

impl SavedStep {
    /// The step's type (always set on a saved step).
    pub fn step_type(&self) -> Option<StepType> {
        self.def.step_type.as_deref().and_then(|t| t.parse().ok())
    }
}

/// The fields that make a step of one type: each belongs to exactly one,
/// and a step without `step_type` takes the type of the one(s) it sets.
/// The first field of each type is the one that type requires.
const DEFINING: &[(&str, StepType)] = &[
    ("job_id", StepType::Job),
    ("sub_workflow_id", StepType::SubWorkflow),
    ("sleep_duration_secs", StepType::Sleep),
    ("event_key", StepType::WaitForEvent),
    ("approval_approvers", StepType::Approval),
    ("cost_gate_threshold_microusd", StepType::CostGate),
    ("cost_gate_timeout_secs", StepType::CostGate),
    ("cost_gate_default_action", StepType::CostGate),
];

/// Fields that only mean something for some step types (a job step's run
/// overrides, a wait's settings). A field not listed here fits every type.
const ONLY_FOR: &[(&str, &[StepType])] = &[
    ("retry_backoff", &[StepType::Job]),
    ("retry_initial_delay_secs", &[StepType::Job]),
    ("retry_max_attempts", &[StepType::Job]),
    ("retry_max_delay_secs", &[StepType::Job]),
    ("concurrency_key", &[StepType::Job]),
    ("resource_class", &[StepType::Job]),
    ("timeout_secs_override", &[StepType::Job, StepType::SubWorkflow]),
    ("compensation_job_id", &[StepType::Job, StepType::SubWorkflow]),
    ("compensation_timeout_secs", &[StepType::Job, StepType::SubWorkflow]),
    ("max_nesting_depth", &[StepType::SubWorkflow]),
    ("event_notify_url", &[StepType::WaitForEvent]),
    ("event_timeout_secs", &[StepType::WaitForEvent]),
    ("approval_timeout_secs", &[StepType::Approval]),
];

impl StepRequest {
    /// Its stage_notifications, when they have the right shape
    /// (`check_stage_notifications` reports the rest).
    fn stage_targets(&self) -> Option<StageNotifications> {
        serde_json::from_value(self.stage_notifications.clone()?).ok()
    }

    /// Whether the named field is set.
    fn has(&self, field: &str) -> bool {
        match field {
            "job_id" => self.job_id.is_some(),
            "sub_workflow_id" => self.sub_workflow_id.is_some(),
            "sleep_duration_secs" => self.sleep_duration_secs.is_some(),
            "event_key" => self.event_key.is_some(),
            "approval_approvers" => self.approval_approvers.is_some(),
            "cost_gate_threshold_microusd" => self.cost_gate_threshold_microusd.is_some(),
            "cost_gate_timeout_secs" => self.cost_gate_timeout_secs.is_some(),
            "cost_gate_default_action" => self.cost_gate_default_action.is_some(),
            "retry_backoff" => self.retry_backoff.is_some(),
            "retry_initial_delay_secs" => self.retry_initial_delay_secs.is_some(),
            "retry_max_attempts" => self.retry_max_attempts.is_some(),
            "retry_max_delay_secs" => self.retry_max_delay_secs.is_some(),
            "concurrency_key" => self.concurrency_key.is_some(),
            "resource_class" => self.resource_class.is_some(),
            "timeout_secs_override" => self.timeout_secs_override.is_some(),
            "compensation_job_id" => self.compensation_job_id.is_some(),
            "compensation_timeout_secs" => self.compensation_timeout_secs.is_some(),
            "max_nesting_depth" => self.max_nesting_depth.is_some(),
            "event_notify_url" => self.event_notify_url.is_some(),
            "event_timeout_secs" => self.event_timeout_secs.is_some(),
            "approval_timeout_secs" => self.approval_timeout_secs.is_some(),
            _ => false,
        }
    }
}

/// A project's DAG governance: every rule is optional; a save that breaks
/// one is refused, naming the rule at the offending step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policy {
    /// Most steps per workflow (1 to 1000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<i64>,
    /// Longest depends_on chain, counted in steps (a step without
    /// dependencies is at depth 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<i64>,
    /// Most steps that may depend on one step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_fan_out: Option<i64>,
    /// The step types workflows of the project may use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_step_types: Option<Vec<String>>,
    /// Step types that need an approval step among their ancestors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_required_before: Option<Vec<String>>,
}

impl Policy {
    /// Every problem with the policy itself, located at `body.<field>`.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut e = FieldErrors::new();
        e.in_range("body.max_steps", self.max_steps, 1, MAX_STEPS as i64);
        e.in_range("body.max_depth", self.max_depth, 1, MAX_STEPS as i64);
        e.in_range("body.max_fan_out", self.max_fan_out, 1, MAX_STEPS as i64);
        for (field, list) in [
            ("allowed_step_types", &self.allowed_step_types),
            ("approval_required_before", &self.approval_required_before),
        ] {
            for (i, t) in list.iter().flatten().enumerate() {
                if let Err(m) = t.parse::<StepType>() {
                    e.push(format!("body.{field}/{i}"), m, Some(t.clone().into()));
                }
            }
        }
        e.into_vec()
    }

    fn types(list: &Option<Vec<String>>) -> Option<HashSet<StepType>> {
        list.as_ref().map(|l| l.iter().filter_map(|t| t.parse().ok()).collect())
    }
}

/// A workflow's settings besides name, slug and steps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    pub description: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub cron: Option<String>,
    pub cron_timezone: Option<String>,
    pub max_concurrent_runs: Option<i64>,
    pub max_parallel_steps: Option<i64>,
    pub timeout_secs: Option<i64>,
    pub version_policy: String,
}

impl Settings {
    /// Every problem with the settings, located at `body.<field>`:
    /// description at most 4000 characters; tags at most 64, keys 1 to 128
    /// characters, values at most 1024; cron 5 fields or 6 with seconds
    /// first, in the IANA zone cron_timezone; max_concurrent_runs 0 to
    /// 10000 and max_parallel_steps 0 to 1000 (0: no cap); timeout_secs 1
    /// to 30 days; version_policy pin or latest.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut e = FieldErrors::new();
        e.check(
            self.description.as_deref().is_none_or(|d| DESCRIPTION.ok(d)),
            "body.description",
            format!("at most {MAX_DESCRIPTION} characters"),
            None,
        );
        let n = self.tags.len();
        e.check(n <= MAX_MAP_ENTRIES, "body.tags", format!("at most {MAX_MAP_ENTRIES} entries"), Some(n.into()));
        if let Some((k, _)) = self.tags.iter().find(|(k, v)| !MAP_KEY.ok(k) || !MAP_VALUE.ok(v)) {
            let m = format!("keys must be 1 to {MAX_MAP_KEY_LEN} characters, values at most {MAX_MAP_VALUE_LEN}");
            e.push("body.tags", m, Some(k.clone().into()));
        }
        if let Some(c) = &self.cron {
            match parse_cron(c) {
                Err(m) => e.push("body.cron", format!("invalid cron expression: {m}"), Some(c.clone().into())),
                Ok(s) if s.upcoming(chrono::Utc).next().is_none() => {
                    e.push("body.cron", "matches no future time", Some(c.clone().into()))
                }
                Ok(_) => {}
            }
        }
        if let Some(tz) = &self.cron_timezone {
            if let Err(m) = parse_timezone(tz) {
                e.push("body.cron_timezone", m, Some(tz.clone().into()));
            }
        }
        e.in_range("body.max_concurrent_runs", self.max_concurrent_runs, 0, MAX_CONCURRENT_RUNS);
        e.in_range("body.max_parallel_steps", self.max_parallel_steps, 0, MAX_PARALLEL_STEPS);
        e.in_range("body.timeout_secs", self.timeout_secs, 1, MAX_WORKFLOW_TIMEOUT_SECS);
        e.check(
            VERSION_POLICIES.contains(&self.version_policy.as_str()),
            "body.version_policy",
            format!("must be one of {}", one_of(VERSION_POLICIES)),
            Some(self.version_policy.clone().into()),
        );
        e.into_vec()
    }
}

/// What the database knows about the resources the steps name.
#[derive(Clone, Debug, Default)]
pub struct References {
    /// The workflow being changed (`None` for a new one): no sub-workflow
    /// chain may lead back to it.
    pub workflow_id: Option<String>,
    /// The named job ids that are live jobs of the workflow's project.
    pub jobs: HashSet<String>,
    /// Live workflows of the project looked up so far: for each, the
    /// sub_workflow_ids its current steps name.
    pub workflows: HashMap<String, Vec<String>>,
    /// The named subscription ids that are subscriptions of the project.
    pub subscriptions: HashSet<String>,
}

impl References {
    /// Workflows some chain reaches that have not been looked up yet. Ids
    /// looked up and not found must be recorded by the caller (as
    /// `absent`) so this ends.
    pub fn missing_workflows(&self, absent: &HashSet<String>) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for subs in self.workflows.values() {
            for id in subs {
                if !self.workflows.contains_key(id) && !absent.contains(id) && !out.contains(id) {
                    out.push(id.clone());
                }
            }
        }
        out
    }

    /// How many levels of workflows nest from `id` down (itself counts 1),
    /// stopping once past `limit`; `Err` when a chain reaches `own`.
    fn nesting(&self, id: &str, own: Option<&str>, limit: i64, path: &mut Vec<String>) -> Result<i64, Vec<String>> {
        path.push(id.to_string());
        if own == Some(id) || path[..path.len() - 1].iter().any(|p| p == id) {
            return Err(path.clone());
        }
        let mut deepest = 0;
        if (path.len() as i64) <= limit {
            for sub in self.workflows.get(id).into_iter().flatten() {
                deepest = deepest.max(self.nesting(sub, own, limit, path)?);
            }
        }
        path.pop();
        Ok(1 + deepest)
    }
}

/// The well-formed ids the steps name, to look up: (job ids, workflow ids).
pub fn ids_to_look_up(steps: &[StepRequest]) -> (Vec<String>, Vec<String>) {
    let mut jobs: Vec<String> = Vec::new();
    let mut workflows: Vec<String> = Vec::new();
    let add = |list: &mut Vec<String>, id: &Option<String>| {
        if let Some(id) = id.as_ref().filter(|id| crate::ids::is_valid_external_id(id)) {
            if !list.contains(id) {
                list.push(id.clone());
            }
        }
    };
    for s in steps.iter().take(MAX_STEPS) {
        add(&mut jobs, &s.job_id);
        add(&mut jobs, &s.compensation_job_id);
        add(&mut workflows, &s.sub_workflow_id);
    }
    (jobs, workflows)
}

/// A step_ref: 1 to 64 of `a-z 0-9 _ -`.
pub fn is_valid_step_ref(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= MAX_STEP_REF_LEN
        && r.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// [`is_valid_step_ref`] as the document states it.
pub const STEP_REF: Text = Text::form(1, MAX_STEP_REF_LEN, "^[a-z0-9_-]+$", is_valid_step_ref);

/// Every check of a workflow's steps, against the project's policy and
/// what the database knows. On success, the steps as saved: step_type
/// inferred where absent, on_failure `fail_workflow` and depends_on `[]`
/// where absent.
pub fn validate_steps(
    steps: &[StepRequest],
    refs: &References,
    policy: &Policy,
) -> Result<Vec<StepRequest>, Vec<FieldError>> {
    let mut e = FieldErrors::new();
    if steps.len() > MAX_STEPS {
        e.push("body.steps", format!("at most {MAX_STEPS} steps"), Some(steps.len().into()));
        return Err(e.into_vec());
    }
    let mut out: Vec<StepRequest> = Vec::with_capacity(steps.len());
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        let at = |f: &str| format!("body.steps/{i}/{f}");
        if !is_valid_step_ref(&s.step_ref) {
            e.push(
                at("step_ref"),
                format!("1 to {MAX_STEP_REF_LEN} lowercase letters, digits, '_' or '-'"),
                Some(s.step_ref.clone().into()),
            );
        } else if let Some(first) = index.get(s.step_ref.as_str()) {
            e.push(
                at("step_ref"),
                format!("duplicate step_ref: step {first} has it too"),
                Some(s.step_ref.clone().into()),
            );
        } else {
            index.insert(&s.step_ref, i);
        }
        let mut step = s.clone();
        step.step_type = check_type(&mut e, i, s).map(|t| t.as_str().to_string());
        step.on_failure = Some(s.on_failure.clone().unwrap_or_else(|| DEFAULT_ON_FAILURE.into()));
        step.depends_on = Some(s.depends_on.clone().unwrap_or_default());
        check_values(&mut e, i, s);
        check_references(&mut e, i, s, refs);
        out.push(step);
    }
    let mut graph_ok = true;
    for (i, s) in out.iter().enumerate() {
        for (j, d) in s.depends_on.iter().flatten().enumerate() {
            if !index.contains_key(d.as_str()) {
                graph_ok = false;
                e.push(format!("body.steps/{i}/depends_on"), format!("names no step: {d:?}"), Some(d.clone().into()));
            } else if s.depends_on.iter().flatten().take(j).any(|o| o == d) {
                e.push(format!("body.steps/{i}/depends_on"), format!("names {d:?} twice"), Some(d.clone().into()));
            }
        }
    }
    // Refs are unique from here on only if no duplicate was reported; the
    // graph checks need that, and a cycle check on a broken graph would
    // only repeat the errors above.
    graph_ok &= index.len() == out.len();
    if graph_ok {
        let deps: Vec<Vec<usize>> =
            out.iter().map(|s| s.depends_on.iter().flatten().map(|d| index[d.as_str()]).collect()).collect();
        match find_cycle(&deps) {
            Some(cycle) => {
                let mut names: Vec<&str> = cycle.iter().map(|&k| out[k].step_ref.as_str()).collect();
                names.push(names[0]);
                e.push(
                    format!("body.steps/{}/depends_on", cycle[0]),
                    format!("depends_on forms a cycle: {}", names.join(" -> ")),
                    Some(Value::from(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())),
                );
            }
            None => check_policy(&mut e, &out, &deps, policy),
        }
    }
    e.finish()?;
    Ok(out)
}

/// The step's type: the one given, or the one its fields make. Reports a
/// type that is unknown, that the fields contradict, or that cannot be
/// inferred.
fn check_type(e: &mut FieldErrors, i: usize, s: &StepRequest) -> Option<StepType> {
    let at = |f: &str| format!("body.steps/{i}/{f}");
    let implied: Vec<(&str, StepType)> = DEFINING.iter().copied().filter(|(f, _)| s.has(f)).collect();
    let t = match &s.step_type {
        Some(raw) => match raw.parse::<StepType>() {
            Ok(t) => t,
            Err(m) => {
                e.push(at("step_type"), m, Some(raw.clone().into()));
                return None;
            }
        },
        None => {
            let mut types: Vec<StepType> = implied.iter().map(|(_, t)| *t).collect();
            types.dedup();
            match types.as_slice() {
                [t] => *t,
                [] => {
                    let fields: Vec<&str> = DEFINING.iter().map(|(f, _)| *f).collect();
                    e.push(
                        at("step_type"),
                        format!("set step_type, or a field that implies it: {}", fields.join(", ")),
                        None,
                    );
                    return None;
                }
                _ => {
                    let named: Vec<String> = implied.iter().map(|(f, t)| format!("{f} ({t})")).collect();
                    e.push(at("step_type"), format!("fields of several step types: {}", named.join(", ")), None);
                    return None;
                }
            }
        }
    };
    for (field, other) in &implied {
        if *other != t {
            e.push(at(field), format!("{} step does not take {field} (a field of {other} steps)", a_or_an(t)), None);
        }
    }
    let required = DEFINING.iter().find(|(_, dt)| *dt == t).map(|(f, _)| *f).unwrap_or("");
    if !s.has(required) {
        e.push(at(required), format!("{} step needs {required}", a_or_an(t)), None);
    }
    for (field, fits) in ONLY_FOR {
        if s.has(field) && !fits.contains(&t) {
            let names: Vec<&str> = fits.iter().map(|t| t.as_str()).collect();
            e.push(at(field), format!("only {} steps take {field}, not {t}", names.join(" and ")), None);
        }
    }
    Some(t)
}

/// Every URL the steps notify, with its body field: what the API judges
/// against its private-address policy at save. Stage notifications of the
/// wrong shape have no URLs to judge (`check_stage_notifications` reports them).
pub fn target_urls(steps: &[StepRequest]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        if let Some(u) = &s.event_notify_url {
            out.push((format!("body.steps/{i}/event_notify_url"), u.clone()));
        }
        for (k, u) in s.stage_targets().map(|n| n.urls).unwrap_or_default().into_iter().enumerate() {
            out.push((format!("body.steps/{i}/stage_notifications/urls/{k}"), u));
        }
    }
    out
}

/// Enumerations, ranges, lengths and expressions of one step.
fn check_values(e: &mut FieldErrors, i: usize, s: &StepRequest) {
    let at = |f: &str| format!("body.steps/{i}/{f}");
    // Postgres cannot store U+0000; found here, the error names the value
    // (`body.steps/0/payload/note`), not the whole body.
    for (f, v) in
        [("payload", &s.payload), ("condition", &s.condition), ("stage_notifications", &s.stage_notifications)]
    {
        if let Some(path) = v.as_ref().and_then(nul_at) {
            e.push(format!("{}{path}", at(f)), "holds a NUL character (\\u0000), which cannot be stored", None);
        }
    }
    let enumerated = |e: &mut FieldErrors, f: &str, v: &Option<String>, allowed: &[&str]| {
        if let Some(v) = v {
            e.check(
                allowed.contains(&v.as_str()),
                at(f),
                format!("must be one of {}", allowed.join(", ")),
                Some(v.clone().into()),
            );
        }
    };
    enumerated(e, "on_failure", &s.on_failure, &ON_FAILURE);
    enumerated(e, "cost_gate_default_action", &s.cost_gate_default_action, &COST_GATE_ACTIONS);
    if let Some(r) = &s.retry_backoff {
        if let Err(m) = r.parse::<RetryStrategy>() {
            e.push(at("retry_backoff"), m, Some(r.clone().into()));
        }
    }
    for (f, (min, max)) in STEP_BOUNDS {
        e.in_range(&at(f), s.number(f), min, max);
    }
    e.text(&at("concurrency_key"), s.concurrency_key.as_deref(), &KEY);
    e.text(&at("resource_class"), s.resource_class.as_deref(), &RESOURCE_CLASS);
    e.text(&at("event_key"), s.event_key.as_deref(), &STEP_EVENT_KEY);
    e.text(&at("event_emit_key"), s.event_emit_key.as_deref(), &STEP_EVENT_KEY);
    if let Some(key) = s.event_emit_key.as_deref().filter(|k| STEP_EVENT_KEY.ok(k)) {
        super::event_key::check_key(e, &at("event_emit_key"), key);
    }
    if let Some(v) = &s.stage_notifications {
        check_stage_notifications(e, &at("stage_notifications"), v);
    }
    if let Some(u) = &s.event_notify_url {
        if let Err(m) = check_url(u) {
            e.push(at("event_notify_url"), m, Some(u.clone().into()));
        }
    }
    if let Some(list) = &s.approval_approvers {
        e.check(
            !list.is_empty() && list.len() <= MAX_APPROVERS,
            at("approval_approvers"),
            format!("1 to {MAX_APPROVERS} approvers"),
            Some(list.len().into()),
        );
        for (k, a) in list.iter().enumerate() {
            e.text(&format!("body.steps/{i}/approval_approvers/{k}"), Some(a), &APPROVER);
        }
    }
    if let Some(c) = &s.condition {
        if let Err(m) = check_condition(c) {
            e.push(at("condition"), m, Some(c.clone()));
        }
    }
    if let Some(t) = &s.output_transform {
        if let Err(m) = check_output_transform(t) {
            e.push(at("output_transform"), m, Some(t.clone().into()));
        }
    }
}

/// The bounds of a step's numbers: (field, (min, max)).
pub const STEP_BOUNDS: [(&str, (i64, i64)); 12] = [
    ("expected_duration_secs", (0, MAX_WORKFLOW_TIMEOUT_SECS)),
    ("timeout_secs_override", (1, MAX_STEP_TIMEOUT_SECS)),
    ("max_nesting_depth", (1, MAX_NESTING_DEPTH)),
    ("retry_initial_delay_secs", RETRY_INITIAL_DELAY_SECS),
    ("retry_max_attempts", MAX_ATTEMPTS_OVERRIDE),
    ("retry_max_delay_secs", RETRY_MAX_DELAY_SECS),
    ("sleep_duration_secs", (1, MAX_WAIT_SECS)),
    ("event_timeout_secs", (1, MAX_WAIT_SECS)),
    ("approval_timeout_secs", (1, MAX_WAIT_SECS)),
    ("compensation_timeout_secs", (1, MAX_STEP_TIMEOUT_SECS)),
    ("cost_gate_threshold_microusd", (0, MAX_COST_MICROUSD)),
    ("cost_gate_timeout_secs", (1, MAX_WAIT_SECS)),
];
/// A step's resource_class, event_key and event_emit_key, and each of its
/// approval_approvers.
pub const RESOURCE_CLASS: Text = Text::printable(1, 64);
pub const STEP_EVENT_KEY: Text = Text::printable(1, 256);
pub const APPROVER: Text = Text::printable(1, 256);

impl StepRequest {
    /// The number field named `f` of [`STEP_BOUNDS`].
    fn number(&self, f: &str) -> Option<i64> {
        match f {
            "expected_duration_secs" => self.expected_duration_secs,
            "timeout_secs_override" => self.timeout_secs_override,
            "max_nesting_depth" => self.max_nesting_depth,
            "retry_initial_delay_secs" => self.retry_initial_delay_secs,
            "retry_max_attempts" => self.retry_max_attempts,
            "retry_max_delay_secs" => self.retry_max_delay_secs,
            "sleep_duration_secs" => self.sleep_duration_secs,
            "event_timeout_secs" => self.event_timeout_secs,
            "approval_timeout_secs" => self.approval_timeout_secs,
            "compensation_timeout_secs" => self.compensation_timeout_secs,
            "cost_gate_threshold_microusd" => self.cost_gate_threshold_microusd,
            "cost_gate_timeout_secs" => self.cost_gate_timeout_secs,
            other => unreachable!("{other} is not a number of STEP_BOUNDS"),
        }
    }
}

/// The JSON pointer (from the value, `""` for itself) of the first string or
/// key holding U+0000.
fn nul_at(v: &Value) -> Option<String> {
    let escape = |k: &str| k.replace('~', "~0").replace('/', "~1");
    match v {
        Value::String(t) if t.contains('\0') => Some(String::new()),
        Value::Array(items) => items.iter().enumerate().find_map(|(k, x)| nul_at(x).map(|p| format!("/{k}{p}"))),
        Value::Object(o) => o.iter().find_map(|(k, x)| {
            if k.contains('\0') {
                Some(format!("/{}", escape(&k.replace('\0', "\\u0000"))))
            } else {
                nul_at(x).map(|p| format!("/{}{p}", escape(k)))
            }
        }),
        _ => None,
    }
}

/// A JSONLogic expression, over {payload, steps: {ref: {status, output}}}.
pub fn check_condition(c: &Value) -> Result<(), String> {
    let text = c.to_string();
    if text.len() > MAX_EXPRESSION_LEN {
        return Err(format!("at most {MAX_EXPRESSION_LEN} characters as JSON"));
    }
    datalogic_rs::compile(text.as_str()).map_err(|err| format!("not a valid JSONLogic expression: {err}"))?;
    // The engine compiles an operator it does not know as a call of a
    // custom operator, left to fail when evaluated. No custom operator is
    // registered here, so every operator named must be a built-in one.
    let mut ops: Vec<&str> = Vec::new();
    operators(c, &mut ops);
    if let Some(op) = ops.into_iter().find(|op| !is_builtin_operator(op)) {
        return Err(format!("not a valid JSONLogic expression: unknown operator {op:?}"));
    }
    super::expression_budget::check_condition_cost(c)
}

/// The operator of every `{op: args}` in the expression.
fn operators<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(o) => {
            for (op, args) in o {
                out.push(op);
                operators(args, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| operators(i, out)),
        _ => {}
    }
}

/// Whether the engine knows the operator: evaluating it without arguments
/// fails as an invalid operator only when it does not.
fn is_builtin_operator(op: &str) -> bool {
    let probe = serde_json::json!({ op: [] }).to_string();
    !matches!(datalogic_rs::eval(probe.as_str(), "{}"), Err(e) if e.tag() == "InvalidOperator")
}

/// A JMESPath expression applied to the step's output.
pub fn check_output_transform(t: &str) -> Result<(), String> {
    if t.is_empty() || t.len() > MAX_EXPRESSION_LEN {
        return Err(format!("must be 1 to {MAX_EXPRESSION_LEN} characters"));
    }
    super::expression_budget::check_transform_text(t)?;
    let expr = jmespath::compile(t).map_err(|err| format!("not a valid JMESPath expression: {err}"))?;
    super::expression_budget::check_transform_cost(&expr)
}

/// The shape of a step's stage_notifications ([`StageNotifications`]).
fn check_stage_notifications(e: &mut FieldErrors, at: &str, v: &Value) {
    let n: StageNotifications = match serde_json::from_value(v.clone()) {
        Ok(n) => n,
        Err(err) => {
            let m = format!("must be an object of urls, subscription_ids and stages (lists of strings): {err}");
            e.push(at, m, Some(v.clone()));
            return;
        }
    };
    e.check(
        !(n.urls.is_empty() && n.subscription_ids.is_empty()),
        at,
        "names no urls and no subscription_ids",
        Some(v.clone()),
    );
    e.check(
        n.urls.len() <= MAX_STAGE_TARGETS && n.subscription_ids.len() <= MAX_STAGE_TARGETS,
        at,
        format!("at most {MAX_STAGE_TARGETS} urls and {MAX_STAGE_TARGETS} subscription_ids"),
        None,
    );
    for (k, u) in n.urls.iter().enumerate() {
        if let Err(m) = check_url(u) {
            e.push(format!("{at}/urls/{k}"), m, Some(u.clone().into()));
        }
    }
    for (k, id) in n.subscription_ids.iter().enumerate() {
        e.check(
            crate::ids::is_valid_external_id(id),
            format!("{at}/subscription_ids/{k}"),
            "not a subscription id",
            Some(id.clone().into()),
        );
    }
    if let Some(stages) = &n.stages {
        e.check(!stages.is_empty(), format!("{at}/stages"), "names no stage", None);
        for (k, st) in stages.iter().enumerate() {
            e.check(
                STAGES.contains(&st.as_str()),
                format!("{at}/stages/{k}"),
                format!("must be one of {}", STAGES.join(", ")),
                Some(st.clone().into()),
            );
        }
    }
}

/// The subscription ids the steps' stage_notifications name, to look up.
pub fn subscriptions_to_look_up(steps: &[StepRequest]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for s in steps.iter().take(MAX_STEPS) {
        let Some(n) = s.stage_targets() else { continue };
        for id in n.subscription_ids.into_iter().filter(|id| crate::ids::is_valid_external_id(id)) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// job_id, compensation_job_id and sub_workflow_id name live resources of
/// the project; a sub-workflow's chain neither includes the workflow being
/// saved nor nests deeper than the step's max_nesting_depth.
fn check_references(e: &mut FieldErrors, i: usize, s: &StepRequest, refs: &References) {
    let at = |f: &str| format!("body.steps/{i}/{f}");
    for (f, id) in [("job_id", &s.job_id), ("compensation_job_id", &s.compensation_job_id)] {
        if let Some(id) = id {
            e.check(refs.jobs.contains(id), at(f), "no such job in this project", Some(id.clone().into()));
        }
    }
    for (k, id) in s.stage_targets().map(|n| n.subscription_ids).unwrap_or_default().iter().enumerate() {
        if crate::ids::is_valid_external_id(id) {
            e.check(
                refs.subscriptions.contains(id),
                format!("body.steps/{i}/stage_notifications/subscription_ids/{k}"),
                "no such webhook subscription in this project",
                Some(id.clone().into()),
            );
        }
    }
    let Some(sub) = &s.sub_workflow_id else { return };
    if !refs.workflows.contains_key(sub) && refs.workflow_id.as_ref() != Some(sub) {
        e.push(at("sub_workflow_id"), "no such workflow in this project", Some(sub.clone().into()));
        return;
    }
    let limit = s.max_nesting_depth.unwrap_or(DEFAULT_MAX_NESTING_DEPTH).clamp(1, MAX_NESTING_DEPTH);
    match refs.nesting(sub, refs.workflow_id.as_deref(), limit, &mut Vec::new()) {
        Err(chain) => e.push(
            at("sub_workflow_id"),
            format!("the sub-workflow chain includes this workflow itself: {}", chain.join(" -> ")),
            Some(sub.clone().into()),
        ),
        Ok(depth) if depth > limit => e.push(
            at("sub_workflow_id"),
            format!("sub-workflows nest {depth} levels deep here, more than max_nesting_depth {limit}"),
            Some(sub.clone().into()),
        ),
        Ok(_) => {}
    }
}

/// One cycle of the graph (`deps[i]`: the steps step i depends on), as the
/// steps along it starting at its lowest index, or `None` for a DAG.
fn find_cycle(deps: &[Vec<usize>]) -> Option<Vec<usize>> {
    // 0 unvisited, 1 on the current path, 2 done.
    let mut state = vec![0u8; deps.len()];
    let mut path: Vec<usize> = Vec::new();
    fn visit(n: usize, deps: &[Vec<usize>], state: &mut [u8], path: &mut Vec<usize>) -> Option<Vec<usize>> {
        state[n] = 1;
        path.push(n);
        for &d in &deps[n] {
            if state[d] == 1 {
                let start = path.iter().position(|&p| p == d).unwrap_or(0);
                return Some(path[start..].to_vec());
            }
            if state[d] == 0 {
                if let Some(c) = visit(d, deps, state, path) {
                    return Some(c);
                }
            }
        }
        path.pop();
        state[n] = 2;
        None
    }
    for n in 0..deps.len() {
        if state[n] == 0 {
            if let Some(mut c) = visit(n, deps, &mut state, &mut path) {
                // The path follows depends_on (a step, then what it waits
                // for); read forwards it is the order steps would run in.
                c.reverse();
                let low = c.iter().enumerate().min_by_key(|(_, &k)| k).map(|(p, _)| p).unwrap_or(0);
                c.rotate_left(low);
                return Some(c);
            }
        }
    }
    None
}

/// The policy's rules on a valid DAG, each named in its message
/// (`workflow policy max_fan_out: ...`) at the step that breaks it.
fn check_policy(e: &mut FieldErrors, steps: &[StepRequest], deps: &[Vec<usize>], policy: &Policy) {
    if let Some(max) = policy.max_steps {
        e.check(
            steps.len() as i64 <= max,
            "body.steps",
            format!("workflow policy max_steps: at most {max} steps"),
            Some(steps.len().into()),
        );
    }
    let types: Vec<Option<StepType>> =
        steps.iter().map(|s| s.step_type.as_deref().and_then(|t| t.parse().ok())).collect();
    if let Some(max) = policy.max_depth {
        let depths = depths(deps);
        for (i, d) in depths.iter().enumerate() {
            if *d > max {
                e.push(
                    format!("body.steps/{i}/depends_on"),
                    format!("workflow policy max_depth: this step is at depth {d}, the most allowed is {max}"),
                    Some((*d).into()),
                );
            }
        }
    }
    if let Some(max) = policy.max_fan_out {
        let mut fan_out = vec![0i64; steps.len()];
        for ds in deps {
            for &d in ds {
                fan_out[d] += 1;
            }
        }
        for (i, n) in fan_out.iter().enumerate() {
            if *n > max {
                e.push(
                    format!("body.steps/{i}/step_ref"),
                    format!("workflow policy max_fan_out: {n} steps depend on this one, the most allowed is {max}"),
                    Some(steps[i].step_ref.clone().into()),
                );
            }
        }
    }
    if let Some(allowed) = Policy::types(&policy.allowed_step_types) {
        for (i, t) in types.iter().enumerate() {
            if let Some(t) = t.filter(|t| !allowed.contains(t)) {
                e.push(
                    format!("body.steps/{i}/step_type"),
                    format!("workflow policy allowed_step_types: {t} steps are not allowed in this project"),
                    Some(t.as_str().into()),
                );
            }
        }
    }
    if let Some(gated) = Policy::types(&policy.approval_required_before) {
        for (i, t) in types.iter().enumerate() {
            let Some(t) = t.filter(|t| gated.contains(t)) else { continue };
            if !ancestors(deps, i).iter().any(|&a| types[a] == Some(StepType::Approval)) {
                e.push(
                    format!("body.steps/{i}/step_type"),
                    format!(
                        "workflow policy approval_required_before: {} step needs an approval step before it",
                        a_or_an(t)
                    ),
                    Some(t.as_str().into()),
                );
            }
        }
    }
}

/// Each step's depth in an acyclic graph: 1 without dependencies, else one
/// more than its deepest dependency.
fn depths(deps: &[Vec<usize>]) -> Vec<i64> {
    fn depth(n: usize, deps: &[Vec<usize>], memo: &mut [i64]) -> i64 {
        if memo[n] == 0 {
            memo[n] = 1 + deps[n].iter().map(|&d| depth(d, deps, memo)).max().unwrap_or(0);
        }
        memo[n]
    }
    let mut memo = vec![0i64; deps.len()];
    (0..deps.len()).map(|n| depth(n, deps, &mut memo)).collect()
}

/// Every step step `n` waits for, directly or not.
fn ancestors(deps: &[Vec<usize>], n: usize) -> HashSet<usize> {
    let mut seen: HashSet<usize> = HashSet::new();
    let mut todo: Vec<usize> = deps[n].clone();
    while let Some(d) = todo.pop() {
        if seen.insert(d) {
            todo.extend(&deps[d]);
        }
    }
    seen
}

/// "a sleep", "an approval": a step type with its article, for messages.
fn a_or_an(t: StepType) -> String {
    let name = t.as_str();
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_rules_of_steps_are_their_checks() {
        use super::super::rules::agrees;
        assert_eq!(agrees(&STEP_REF, &["fetch-data_2"]), Ok(()));
        for r in [RESOURCE_CLASS, STEP_EVENT_KEY, APPROVER, DESCRIPTION] {
            assert_eq!(agrees(&r, &[]), Ok(()), "{r:?}");
        }
    }
    use serde_json::json;

    fn steps(v: Value) -> Vec<StepRequest> {
        serde_json::from_value(v).unwrap()
    }

    fn refs() -> References {
        References {
            workflow_id: Some("wf_self".into()),
            jobs: ["job_a".to_string(), "job_b".to_string()].into(),
            workflows: HashMap::new(),
            subscriptions: ["whs_0123456789abcdef0123456789abcdef".to_string()].into(),
        }
    }

    fn errors(v: Value) -> Vec<FieldError> {
        errors_with(v, &refs(), &Policy::default())
    }

    fn errors_with(v: Value, refs: &References, policy: &Policy) -> Vec<FieldError> {
        validate_steps(&steps(v), refs, policy).expect_err("should fail")
    }

    fn at(errs: &[FieldError]) -> Vec<&str> {
        errs.iter().map(|e| e.location.as_str()).collect()
    }

    #[test]
    fn a_valid_chain_is_saved_with_types_and_defaults_filled_in() {
        let got = validate_steps(
            &steps(json!([
                {"step_ref": "fetch", "job_id": "job_a"},
                {"step_ref": "wait", "sleep_duration_secs": 60, "depends_on": ["fetch"]},
                {"step_ref": "ok", "approval_approvers": ["ann"], "depends_on": ["wait"], "on_failure": "continue"},
                {"step_ref": "gate", "cost_gate_default_action": "proceed", "cost_gate_threshold_microusd": 5},
                {"step_ref": "ev", "event_key": "paid"},
                {"step_ref": "explicit", "step_type": "job", "job_id": "job_b"}
            ])),
            &refs(),
            &Policy::default(),
        )
        .unwrap();
        let types: Vec<_> = got.iter().map(|s| s.step_type.clone().unwrap()).collect();
        assert_eq!(types, ["job", "sleep", "approval", "cost_gate", "wait_for_event", "job"]);
        assert_eq!(got[0].on_failure.as_deref(), Some("fail_workflow"));
        assert_eq!(got[2].on_failure.as_deref(), Some("continue"));
        assert_eq!(got[0].depends_on, Some(vec![]));
    }

    #[test]
    fn a_step_without_type_or_implying_field_is_refused() {
        let got = errors(json!([{"step_ref": "a"}]));
        assert_eq!(at(&got), ["body.steps/0/step_type"]);
        assert!(got[0].message.starts_with("set step_type, or a field that implies it"));
        let got = errors(json!([{"step_ref": "a", "job_id": "job_a", "sleep_duration_secs": 5}]));
        assert_eq!(at(&got), ["body.steps/0/step_type"]);
        assert!(got[0].message.contains("job_id (job), sleep_duration_secs (sleep)"), "{}", got[0].message);
    }

    #[test]
    fn a_step_type_contradicting_its_fields_is_refused_at_the_field() {
        let got = errors(json!([{"step_ref": "a", "step_type": "sleep", "job_id": "job_a"}]));
        assert_eq!(at(&got), ["body.steps/0/job_id", "body.steps/0/sleep_duration_secs"]);
        assert_eq!(got[0].message, "a sleep step does not take job_id (a field of job steps)");
        assert_eq!(got[1].message, "a sleep step needs sleep_duration_secs");
        let got = errors(json!([{"step_ref": "a", "sleep_duration_secs": 5, "retry_max_attempts": 3}]));
        assert_eq!(at(&got), ["body.steps/0/retry_max_attempts"]);
        let got = errors(json!([{"step_ref": "a", "step_type": "task"}]));
        assert_eq!(at(&got), ["body.steps/0/step_type"]);
        assert!(got[0].message.starts_with("must be one of job, sub_workflow"));
    }

    #[test]
    fn duplicate_refs_and_bad_refs_are_refused() {
        let got = errors(json!([{"step_ref": "a", "job_id": "job_a"}, {"step_ref": "a", "job_id": "job_a"}]));
        assert_eq!(at(&got), ["body.steps/1/step_ref"]);
        assert_eq!(got[0].message, "duplicate step_ref: step 0 has it too");
        for bad in ["", "A", "a b", &"a".repeat(65)] {
            let got = errors(json!([{"step_ref": bad, "job_id": "job_a"}]));
            assert_eq!(at(&got), ["body.steps/0/step_ref"], "{bad:?}");
        }
    }

    #[test]
    fn depends_on_must_name_steps_once() {
        let got = errors(json!([
            {"step_ref": "a", "job_id": "job_a"},
            {"step_ref": "b", "job_id": "job_a", "depends_on": ["a", "nope", "a"]}
        ]));
        assert_eq!(at(&got), ["body.steps/1/depends_on", "body.steps/1/depends_on"]);
        assert_eq!(got[0].message, "names no step: \"nope\"");
        assert_eq!(got[1].message, "names \"a\" twice");
    }

    #[test]
    fn a_cycle_is_refused_naming_its_refs() {
        let got = errors(json!([
            {"step_ref": "start", "job_id": "job_a"},
            {"step_ref": "a", "job_id": "job_a", "depends_on": ["start", "c"]},
            {"step_ref": "b", "job_id": "job_a", "depends_on": ["a"]},
            {"step_ref": "c", "job_id": "job_a", "depends_on": ["b"]}
        ]));
        assert_eq!(at(&got), ["body.steps/1/depends_on"]);
        assert_eq!(got[0].message, "depends_on forms a cycle: a -> b -> c -> a");
        let got = errors(json!([{"step_ref": "self", "job_id": "job_a", "depends_on": ["self"]}]));
        assert_eq!(got[0].message, "depends_on forms a cycle: self -> self");
    }

    #[test]
    fn enums_and_ranges_are_checked() {
        let got = errors(json!([
            {"step_ref": "a", "job_id": "job_a", "on_failure": "explode", "retry_backoff": "random",
             "retry_max_attempts": 0, "timeout_secs_override": 86401},
            {"step_ref": "b", "cost_gate_default_action": "maybe", "cost_gate_threshold_microusd": -1},
            {"step_ref": "c", "sleep_duration_secs": 0}
        ]));
        assert_eq!(
            at(&got),
            [
                "body.steps/0/on_failure",
                "body.steps/0/retry_backoff",
                "body.steps/0/timeout_secs_override",
                "body.steps/0/retry_max_attempts",
                "body.steps/1/cost_gate_default_action",
                "body.steps/1/cost_gate_threshold_microusd",
                "body.steps/2/sleep_duration_secs"
            ]
        );
        assert_eq!(got[0].message, "must be one of fail_workflow, continue, skip_dependents, compensate");
    }

    #[test]
    fn conditions_must_be_jsonlogic_and_transforms_jmespath() {
        let ok = json!([{"step_ref": "a", "job_id": "job_a",
            "condition": {"==": [{"var": "payload.kind"}, "big"]}, "output_transform": "items[?size > `3`].id"}]);
        assert!(validate_steps(&steps(ok), &refs(), &Policy::default()).is_ok());
        for ok in [
            json!(true),
            json!({"and": [{"in": ["x", {"var": "payload.tags"}]}, {"!": {"missing": ["payload.id"]}}]}),
            json!({"if": [{">": [{"var": "steps.fetch.output.n"}, 3]}, "big", "small"]}),
            json!({"some": [{"var": "payload.items"}, {"<=": [{"var": "n"}, 2]}]}),
            json!({"cat": ["a", {"var": "payload.b"}]}),
        ] {
            assert_eq!(check_condition(&ok), Ok(()), "{ok}");
        }
        for bad in [json!({"a": 1, "b": 2}), json!({"if": [true, {"nope": []}, 1]})] {
            assert!(check_condition(&bad).is_err(), "{bad}");
        }
        let got = errors(json!([{"step_ref": "a", "job_id": "job_a",
            "condition": {"no_such_operator": [1, 2]}, "output_transform": "items[?"}]));
        assert_eq!(at(&got), ["body.steps/0/condition", "body.steps/0/output_transform"]);
        assert!(got[0].message.starts_with("not a valid JSONLogic expression"), "{}", got[0].message);
        assert!(got[1].message.starts_with("not a valid JMESPath expression"), "{}", got[1].message);
    }

    #[test]
    fn referenced_jobs_and_workflows_must_exist_in_the_project() {
        let got = errors(json!([
            {"step_ref": "a", "job_id": "job_other", "compensation_job_id": "job_gone"},
            {"step_ref": "b", "sub_workflow_id": "wf_other"}
        ]));
        assert_eq!(
            at(&got),
            ["body.steps/0/job_id", "body.steps/0/compensation_job_id", "body.steps/1/sub_workflow_id"]
        );
        assert_eq!(got[0].message, "no such job in this project");
        assert_eq!(got[2].message, "no such workflow in this project");
    }

    #[test]
    fn sub_workflow_chains_may_not_include_the_workflow_or_nest_too_deep() {
        let mut r = refs();
        r.workflows.insert("wf_1".into(), vec!["wf_2".into()]);
        r.workflows.insert("wf_2".into(), vec!["wf_3".into()]);
        r.workflows.insert("wf_3".into(), vec![]);
        r.workflows.insert("wf_loop".into(), vec!["wf_self".into()]);
        let ok = json!([{"step_ref": "a", "sub_workflow_id": "wf_1", "max_nesting_depth": 3}]);
        assert!(validate_steps(&steps(ok), &r, &Policy::default()).is_ok());
        let got = errors_with(
            json!([
                {"step_ref": "a", "sub_workflow_id": "wf_1", "max_nesting_depth": 2},
                {"step_ref": "b", "sub_workflow_id": "wf_loop"},
                {"step_ref": "c", "sub_workflow_id": "wf_self"}
            ]),
            &r,
            &Policy::default(),
        );
        assert_eq!(
            at(&got),
            ["body.steps/0/sub_workflow_id", "body.steps/1/sub_workflow_id", "body.steps/2/sub_workflow_id"]
        );
        assert_eq!(got[0].message, "sub-workflows nest 3 levels deep here, more than max_nesting_depth 2");
        assert_eq!(got[1].message, "the sub-workflow chain includes this workflow itself: wf_loop -> wf_self");
        assert_eq!(got[2].message, "the sub-workflow chain includes this workflow itself: wf_self");
    }

    #[test]
    fn missing_workflows_lists_each_unlooked_up_id_once() {
        let mut r = refs();
        r.workflows.insert("wf_1".into(), vec!["wf_2".into(), "wf_gone".into()]);
        r.workflows.insert("wf_4".into(), vec!["wf_2".into()]);
        let absent: HashSet<String> = ["wf_gone".to_string()].into();
        assert_eq!(r.missing_workflows(&absent), ["wf_2"]);
    }

    #[test]
    fn more_than_the_step_limit_is_refused_once() {
        assert_eq!(MAX_STEPS, 2000);
        let many: Vec<Value> =
            (0..=MAX_STEPS).map(|i| json!({"step_ref": format!("s{i}"), "job_id": "job_a"})).collect();
        let got = errors(Value::from(many));
        assert_eq!(at(&got), ["body.steps"]);
        assert_eq!(got[0].message, "at most 2000 steps");
    }

    #[test]
    fn a_fan_out_at_the_step_limit_is_saved() {
        let fan: Vec<String> = (0..MAX_STEPS - 2).map(|i| format!("f{i}")).collect();
        let mut v = vec![json!({"step_ref": "root", "job_id": "job_a"})];
        v.extend(fan.iter().map(|r| json!({"step_ref": r, "job_id": "job_a", "depends_on": ["root"]})));
        v.push(json!({"step_ref": "join", "job_id": "job_a", "depends_on": fan}));
        let saved = validate_steps(&steps(Value::from(v)), &refs(), &Policy::default()).expect("valid");
        assert_eq!(saved.len(), MAX_STEPS);
        let wide = Policy { max_steps: Some(2000), max_fan_out: Some(2000), ..Policy::default() };
        assert!(wide.validate().is_empty());
        let over = Policy { max_steps: Some(2001), ..Policy::default() };
        assert_eq!(at(&over.validate()), ["body.max_steps"]);
    }

    fn diamond() -> Value {
        json!([
            {"step_ref": "a", "job_id": "job_a"},
            {"step_ref": "b", "job_id": "job_a", "depends_on": ["a"]},
            {"step_ref": "c", "job_id": "job_a", "depends_on": ["a"]},
            {"step_ref": "d", "sleep_duration_secs": 5, "depends_on": ["b", "c"]}
        ])
    }

    #[test]
    fn policy_limits_steps_depth_and_fan_out() {
        let p = Policy { max_steps: Some(3), max_depth: Some(2), max_fan_out: Some(1), ..Policy::default() };
        let got = errors_with(diamond(), &refs(), &p);
        assert_eq!(at(&got), ["body.steps", "body.steps/3/depends_on", "body.steps/0/step_ref"]);
        assert_eq!(got[0].message, "workflow policy max_steps: at most 3 steps");
        assert_eq!(got[1].message, "workflow policy max_depth: this step is at depth 3, the most allowed is 2");
        assert_eq!(got[2].message, "workflow policy max_fan_out: 2 steps depend on this one, the most allowed is 1");
        let loose = Policy { max_steps: Some(4), max_depth: Some(3), max_fan_out: Some(2), ..Policy::default() };
        assert!(validate_steps(&steps(diamond()), &refs(), &loose).is_ok());
    }

    #[test]
    fn policy_limits_step_types_and_requires_approval_before_some() {
        let p = Policy {
            allowed_step_types: Some(vec!["job".into(), "approval".into()]),
            approval_required_before: Some(vec!["sleep".into()]),
            ..Policy::default()
        };
        let got = errors_with(diamond(), &refs(), &p);
        assert_eq!(at(&got), ["body.steps/3/step_type", "body.steps/3/step_type"]);
        assert_eq!(got[0].message, "workflow policy allowed_step_types: sleep steps are not allowed in this project");
        assert_eq!(
            got[1].message,
            "workflow policy approval_required_before: a sleep step needs an approval step before it"
        );
        let p = Policy { approval_required_before: Some(vec!["job".into()]), ..Policy::default() };
        let gated = json!([
            {"step_ref": "ok", "approval_approvers": ["ann"]},
            {"step_ref": "a", "job_id": "job_a", "depends_on": ["ok"]},
            {"step_ref": "b", "job_id": "job_a", "depends_on": ["a"]}
        ]);
        assert!(validate_steps(&steps(gated), &refs(), &p).is_ok(), "an indirect approval counts");
    }

    #[test]
    fn policy_values_are_checked() {
        let p = Policy {
            max_steps: Some(0),
            allowed_step_types: Some(vec!["job".into(), "teleport".into()]),
            ..Policy::default()
        };
        let got = p.validate();
        assert_eq!(at(&got), ["body.max_steps", "body.allowed_step_types/1"]);
    }

    #[test]
    fn settings_are_checked() {
        let s = Settings {
            cron: Some("61 * * * *".into()),
            cron_timezone: Some("Mars/Olympus".into()),
            max_concurrent_runs: Some(-1),
            timeout_secs: Some(0),
            version_policy: "newest".into(),
            ..Settings::default()
        };
        let got = s.validate();
        assert_eq!(
            at(&got),
            ["body.cron", "body.cron_timezone", "body.max_concurrent_runs", "body.timeout_secs", "body.version_policy"]
        );
        let ok = Settings { cron: Some("*/5 * * * *".into()), version_policy: "latest".into(), ..Settings::default() };
        assert!(ok.validate().is_empty());
    }

    #[test]
    fn a_saved_step_reads_back_with_its_id() {
        let s = SavedStep { id: "wfs_1".into(), def: steps(json!([{"step_ref": "a", "job_id": "job_a"}])).remove(0) };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v, json!({"id": "wfs_1", "step_ref": "a", "job_id": "job_a"}));
        assert_eq!(serde_json::from_value::<SavedStep>(v).unwrap(), s);
    }
}
