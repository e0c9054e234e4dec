//! A step the rules let start begins: a job step's job run, a
//! sub-workflow's child run, a sleep, a wait for an event, an approval or a
//! cost gate's decision. Each start is one new attempt of the step.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::effects::{Note, StepView, StepWrite};
use crate::domain::schedule;
use crate::domain::step::{JobOverrides, Step, StepKind};
use crate::domain::workflow::StepType;
use crate::domain::workflow_run::StepStatus;
use crate::store::jobs::JobRecord;
use crate::store::runs::NewRun;

/// The run whose step starts, as a start needs it.
#[derive(Clone, Copy, Debug)]
pub struct RunView<'a> {
    pub id: &'a str,
    pub project_id: &'a str,
    pub payload: Option<&'a Value>,
    pub created_by: Option<&'a str>,
    pub tags: &'a BTreeMap<String, String>,
    pub depth: i32,
    /// The trace context the run descends from (`crate::traces`).
    pub traceparent: Option<&'a str>,
}

/// What the store read for a start: the step's job (a job step), and what
/// the run has spent so far (a cost gate).
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts<'a> {
    pub job: Option<&'a JobRecord>,
    pub cost_microusd: Option<i64>,
}

/// A child run a sub-workflow step asks for; the store starts it under the
/// sub-workflow's own rules, or fails the step with the reason it cannot.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildRequest {
    pub sub_workflow_id: String,
    pub payload: Option<Value>,
    /// One child per start of the step.
    pub idempotency_key: String,
    pub depth: i32,
}

/// A step that starts.
#[derive(Clone, Debug)]
pub struct Started {
    pub write: StepWrite,
    pub job_run: Option<NewRun>,
    pub child: Option<ChildRequest>,
    /// A cost gate's figures, for its decision.
    pub figures: Value,
}

/// Starts `def` (its row `row`) of `run` at `now`.
pub fn step_start(def: &Step, row: &StepView, run: &RunView, facts: &Facts, now: DateTime<Utc>) -> Started {
    let mut w = StepWrite::start(row, StepStatus::Running);
    let (mut job_run_made, mut child, mut figures) = (None, None, Value::Null);
    let after = |secs: &Option<i64>| secs.map(|t| now + chrono::Duration::seconds(t));
    match &def.kind {
        StepKind::Job { overrides, .. } => match facts.job.filter(|j| j.project_id == run.project_id) {
            None => w.fail("the step's job does not exist any more".into()),
            Some(j) if !j.enabled => w.fail(format!("the step's job {} is disabled", j.id)),
            Some(j) => match job_run(j, overrides, def, row, run, now) {
                Ok(new) => {
                    w.job_run_id = Some(new.id.to_string());
                    job_run_made = Some(new);
                }
                Err(e) => w.fail(e),
            },
        },
        StepKind::SubWorkflow { sub_workflow_id, max_nesting_depth } => {
            if i64::from(run.depth) + 1 > *max_nesting_depth {
                w.fail(format!("the sub-workflow would nest deeper than max_nesting_depth ({max_nesting_depth})"));
            } else {
                child = Some(ChildRequest {
                    sub_workflow_id: sub_workflow_id.clone(),
                    payload: def.payload.clone().or_else(|| run.payload.cloned()),
                    idempotency_key: format!("{}:{}", row.id, row.attempt + 1),
                    depth: run.depth + 1,
                });
            }
        }
        StepKind::Sleep { duration_secs } => {
            w.status = StepStatus::Waiting;
            w.wake_at = Some(now + chrono::Duration::seconds(*duration_secs));
        }
        // A cost gate compares what the run has spent so far with its
        // threshold: within it the gate is passed at once, over it the
        // gate waits for a decision like an approval.
        StepKind::CostGate { threshold_microusd, timeout_secs, .. } => {
            let spent = facts.cost_microusd.unwrap_or(0);
            let threshold = *threshold_microusd;
            figures = json!({ "cost_microusd": spent, "threshold_microusd": threshold });
            if spent <= threshold {
                w.status = StepStatus::Completed;
                w.finish = true;
                w.output =
                    Some(json!({ "action": "proceeded", "cost_microusd": spent, "threshold_microusd": threshold }));
            } else {
                w.status = StepStatus::Waiting;
                w.wake_at = after(timeout_secs);
            }
        }
        // Events and approvals wait for what resolves them, until their
        // timeout (a durable deadline, like a sleep's).
        StepKind::WaitForEvent { timeout_secs, .. } => {
            w.status = StepStatus::Waiting;
            w.wake_at = after(timeout_secs);
        }
        StepKind::Approval { approvers, timeout_secs } => {
            w.status = StepStatus::Waiting;
            w.wake_at = after(timeout_secs);
            w.approvers = approvers.clone();
        }
        StepKind::Unusable { reason } => w.fail(format!("the step's definition cannot be read: {reason}")),
    }
    Started { write: w, job_run: job_run_made, child, figures }
}

/// The decision a start records, once its write is final (a child that
/// could not start fails the step after [`step_start`]).
pub fn start_note(def: &Step, row: &StepView, w: &StepWrite, figures: &Value) -> Note {
    let gate = def.step_type() == Some(StepType::CostGate);
    let (decision, reason) = match (&w.status, &w.error) {
        (StepStatus::Failed, Some(e)) => ("failed", e.clone()),
        (StepStatus::Completed, _) => {
            ("cost_gate_passed", "the run's cost so far is within cost_gate_threshold_microusd".into())
        }
        (StepStatus::Waiting, _) if gate => (
            "waiting",
            "the run's cost so far is over cost_gate_threshold_microusd: the gate waits for a decision".into(),
        ),
        (StepStatus::Waiting, _) => {
            ("waiting", format!("{} step waits", def.step_type().map_or("a", StepType::as_str)))
        }
        _ => ("scheduled", "its dependencies are satisfied".to_string()),
    };
    let mut details = json!({
        "attempt": row.attempt + 1, "job_run_id": w.job_run_id, "child_workflow_run_id": w.child_id, "wake_at": w.wake_at,
    });
    if let (Value::Object(d), Value::Object(f)) = (&mut details, figures) {
        d.extend(f.clone());
    }
    Note::step(row.step_ref, decision, &reason, details)
}

/// The job run a job step starts, with the step's overrides.
fn job_run(
    job: &JobRecord,
    o: &JobOverrides,
    def: &Step,
    row: &StepView,
    run: &RunView,
    now: DateTime<Utc>,
) -> Result<NewRun, String> {
    // One job run per start of the step: a second insert for the same
    // start could only be a bug, and conflicts instead.
    let key = format!("{}:{}", row.id, row.attempt + 1);
    let i32_of = |v: Option<i64>| v.map(|n| n.clamp(0, i32::MAX as i64) as i32);
    let payload = def.payload.clone().or_else(|| run.payload.cloned());
    Ok(NewRun {
        concurrency_key: o.concurrency_key.clone(),
        retry_backoff: o.retry_backoff.clone(),
        max_attempts_override: i32_of(o.retry_max_attempts),
        retry_initial_delay_secs: i32_of(o.retry_initial_delay_secs),
        retry_max_delay_secs: i32_of(o.retry_max_delay_secs),
        timeout_secs_override: i32_of(o.timeout_secs),
        resource_class: o.resource_class.clone(),
        ..new_run(job, run, row, key, payload, now)?
    })
}

/// A job run of `job` for the step `row` (its own or its compensation),
/// admitted under the job's rules, with the job's default metadata and the
/// run and step named in it.
pub fn new_run(
    job: &JobRecord,
    run: &RunView,
    row: &StepView,
    idempotency_key: String,
    payload: Option<Value>,
    now: DateTime<Utc>,
) -> Result<NewRun, String> {
    let spec = &job.spec.0;
    let admitted = schedule::admission(spec, now, None, false)?;
    let mut metadata: Map<String, Value> =
        spec.default_run_metadata.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    metadata.insert("workflow_run_id".into(), Value::String(run.id.to_string()));
    metadata.insert("step_ref".into(), Value::String(row.step_ref.to_string()));
    Ok(NewRun {
        id: crate::ids::run_id(),
        project_id: run.project_id.to_string(),
        job_id: job.id.clone(),
        job_version: job.version,
        job_version_id: job.version_id.clone(),
        status: admitted.status,
        triggered_by: "workflow".into(),
        created_by: run.created_by.map(str::to_string),
        payload,
        idempotency_key: Some(idempotency_key),
        execution_mode: "sync".into(),
        metadata: Value::Object(metadata),
        tags: serde_json::to_value(run.tags).unwrap_or_default(),
        scheduled_at: admitted.scheduled_at,
        expires_at: admitted.expires_at,
        workflow_step_run_id: Some(row.id.clone()),
        // The job run is a child of its step's span.
        traceparent: Some(crate::traces::step_parent(run.id, run.traceparent, row.id)),
        ..NewRun::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{JobSpec, RunStatus};

    fn row() -> StepView<'static> {
        StepView::test("s", "job", StepStatus::Pending)
    }

    fn job(project: &str, enabled: bool) -> JobRecord {
        JobRecord {
            id: "job_1".into(),
            project_id: project.into(),
            group_id: None,
            name: "ship".into(),
            slug: "ship".into(),
            enabled,
            paused: false,
            spec: sqlx::types::Json(JobSpec { endpoint_url: "https://example.com/".into(), ..JobSpec::default() }),
            version: 3,
            version_id: "jv_3".into(),
            created_by: None,
            updated_by: None,
            created_at: at(0),
            updated_at: at(0),
        }
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn start(def: &Step, facts: &Facts, depth: i32) -> Started {
        let tags = BTreeMap::from([("env".to_string(), "test".to_string())]);
        let payload = json!({ "order": 42 });
        let run = RunView {
            id: "wfr_1",
            project_id: "prj_1",
            payload: Some(&payload),
            created_by: Some("key_1"),
            tags: &tags,
            depth,
            traceparent: None,
        };
        step_start(def, &row(), &run, facts, at(0))
    }

    #[test]
    fn each_kind_of_step_starts_as_its_kind_says() {
        let j = job("prj_1", true);
        let with_job = Facts { job: Some(&j), cost_microusd: None };
        // (step, facts, status, wake_at, job run?, child?, decision)
        type Case<'a> = (Step, Facts<'a>, StepStatus, Option<DateTime<Utc>>, bool, bool, &'a str);
        let cases: Vec<Case> = vec![
            (
                Step::test("job", json!({ "job_id": "job_1" })),
                with_job,
                StepStatus::Running,
                None,
                true,
                false,
                "scheduled",
            ),
            (
                Step::test("sub_workflow", json!({ "sub_workflow_id": "wf_2" })),
                Facts::default(),
                StepStatus::Running,
                None,
                false,
                true,
                "scheduled",
            ),
            (
                Step::test("sleep", json!({ "sleep_duration_secs": 30 })),
                Facts::default(),
                StepStatus::Waiting,
                Some(at(30)),
                false,
                false,
                "waiting",
            ),
            (
                Step::test("wait_for_event", json!({ "event_key": "order.paid", "event_timeout_secs": 60 })),
                Facts::default(),
                StepStatus::Waiting,
                Some(at(60)),
                false,
                false,
                "waiting",
            ),
            (
                Step::test("wait_for_event", json!({ "event_key": "order.paid" })),
                Facts::default(),
                StepStatus::Waiting,
                None,
                false,
                false,
                "waiting",
            ),
            (
                Step::test("approval", json!({ "approval_timeout_secs": 90, "approval_approvers": ["ops"] })),
                Facts::default(),
                StepStatus::Waiting,
                Some(at(90)),
                false,
                false,
                "waiting",
            ),
            (
                Step::test("cost_gate", json!({ "cost_gate_threshold_microusd": 100 })),
                Facts { job: None, cost_microusd: Some(100) },
                StepStatus::Completed,
                None,
                false,
                false,
                "cost_gate_passed",
            ),
            (
                Step::test("cost_gate", json!({ "cost_gate_threshold_microusd": 100, "cost_gate_timeout_secs": 5 })),
                Facts { job: None, cost_microusd: Some(101) },
                StepStatus::Waiting,
                Some(at(5)),
                false,
                false,
                "waiting",
            ),
        ];
        for (def, facts, status, wake_at, job_run, child, decision) in cases {
            let kind = def.step_type().unwrap().as_str();
            let s = start(&def, &facts, 0);
            assert_eq!((s.write.status, s.write.wake_at), (status, wake_at), "{kind}");
            assert!(s.write.start, "{kind}: every start is a new attempt");
            assert_eq!((s.job_run.is_some(), s.child.is_some()), (job_run, child), "{kind}");
            let note = start_note(&def, &row(), &s.write, &s.figures);
            assert_eq!((note.decision_type.as_str(), &note.details["attempt"]), (decision, &json!(1)), "{kind}");
            if kind == "approval" {
                assert_eq!(s.write.approvers, Some(vec!["ops".to_string()]));
            }
            if kind == "cost_gate" {
                assert_eq!(note.details["threshold_microusd"], 100, "{kind}: the figures are in the decision");
            }
        }
    }

    #[test]
    fn a_job_steps_run_carries_the_step_its_overrides_and_the_runs_payload() {
        let j = job("prj_1", true);
        let def = Step::test(
            "job",
            json!({ "job_id": "job_1", "retry_max_attempts": 2, "retry_backoff": "fixed", "timeout_secs_override": 9,
                    "concurrency_key": "tenant-1", "resource_class": "large" }),
        );
        let s = start(&def, &Facts { job: Some(&j), cost_microusd: None }, 0);
        let r = s.job_run.unwrap();
        assert_eq!(s.write.job_run_id.as_deref(), Some(r.id.as_str()));
        assert_eq!((r.job_id.as_str(), r.job_version, r.job_version_id.as_str()), ("job_1", 3, "jv_3"));
        assert_eq!((r.status, r.triggered_by.as_str()), (RunStatus::Queued, "workflow"));
        assert_eq!(r.workflow_step_run_id.as_deref(), Some("wfs_1"));
        assert_eq!(r.idempotency_key.as_deref(), Some("wfs_1:1"), "one job run per start");
        assert_eq!(r.payload, Some(json!({ "order": 42 })), "the run's payload, the step having none");
        assert_eq!(
            (r.metadata["workflow_run_id"].as_str(), r.metadata["step_ref"].as_str()),
            (Some("wfr_1"), Some("s"))
        );
        assert_eq!(r.tags, json!({ "env": "test" }));
        assert_eq!((r.max_attempts_override, r.timeout_secs_override), (Some(2), Some(9)));
        assert_eq!((r.retry_backoff.as_deref(), r.concurrency_key.as_deref()), (Some("fixed"), Some("tenant-1")));
        assert_eq!(r.resource_class.as_deref(), Some("large"));

        let own = Step::test("job", json!({ "job_id": "job_1", "payload": { "own": true } }));
        let s = start(&own, &Facts { job: Some(&j), cost_microusd: None }, 0);
        assert_eq!(s.job_run.unwrap().payload, Some(json!({ "own": true })));
    }

    #[test]
    fn a_step_that_cannot_start_fails_at_once_saying_why() {
        let off = job("prj_1", false);
        let elsewhere = job("prj_2", true);
        let def = Step::test("job", json!({ "job_id": "job_1" }));
        let cases: Vec<(Step, Facts, i32, &str)> = vec![
            (def.clone(), Facts::default(), 0, "the step's job does not exist any more"),
            (
                def.clone(),
                Facts { job: Some(&elsewhere), cost_microusd: None },
                0,
                "the step's job does not exist any more",
            ),
            (def, Facts { job: Some(&off), cost_microusd: None }, 0, "the step's job job_1 is disabled"),
            (
                Step::test("sub_workflow", json!({ "sub_workflow_id": "wf_2", "max_nesting_depth": 2 })),
                Facts::default(),
                2,
                "the sub-workflow would nest deeper than max_nesting_depth (2)",
            ),
        ];
        for (def, facts, depth, why) in cases {
            let s = start(&def, &facts, depth);
            assert_eq!(
                (s.write.status, s.write.error.as_deref(), s.write.finish),
                (StepStatus::Failed, Some(why), true)
            );
            assert!(s.job_run.is_none() && s.child.is_none());
            let note = start_note(&def, &row(), &s.write, &s.figures);
            assert_eq!((note.decision_type.as_str(), note.reason.as_str()), ("failed", why));
        }
    }

    #[test]
    fn a_child_run_is_asked_for_one_level_deeper_with_one_key_per_start() {
        let def = Step::test("sub_workflow", json!({ "sub_workflow_id": "wf_2" }));
        let c = start(&def, &Facts::default(), 1).child.unwrap();
        assert_eq!(
            c,
            ChildRequest {
                sub_workflow_id: "wf_2".into(),
                payload: Some(json!({ "order": 42 })),
                idempotency_key: "wfs_1:1".into(),
                depth: 2,
            }
        );
    }
}
