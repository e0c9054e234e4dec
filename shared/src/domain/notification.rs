//! What the notifications say: the payload of each kind of delivery in the
//! outbox (`webhook_deliveries`), as typed values. The statements that make
//! a change write its deliveries (`store::deliveries`) with payloads built
//! here, so a payload changes in Rust, not in a migration.
//!
//! Two shapes go out:
//! - an [`Event`] wrapped in its envelope `{event_type, occurred_at,
//!   project_id, data}` ([`Event::envelope`]): a subscription's events and a
//!   step's stage changes (to its URLs and its subscriptions alike);
//! - the flat notice of a single receiver: a run's terminal webhook to its
//!   job's `webhook_url` ([`RunWebhook`]) and a `wait_for_event` step's
//!   notice to its `event_notify_url` ([`EventTriggerNotice`]).
//!
//! Every time in a payload is [`timestamp`]'s format.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::Value;

use super::workflow::StageNotifications;

/// The attempts of a run's terminal webhook (delivery kind `job_run`).
pub const JOB_RUN_ATTEMPTS: i32 = 3;
/// The attempts of every other delivery (subscriptions, step stages, event
/// triggers).
pub const ATTEMPTS: i32 = 5;

/// The stages a step's stage_notifications send when it names none.
pub const DEFAULT_STAGES: [&str; 4] = ["started", "waiting", "completed", "failed"];

/// A time as every payload carries it (`occurred_at`, `timestamp`): UTC to
/// the millisecond with a `Z`, `2024-05-01T09:30:00.250Z`.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A job run that reached a terminal status (`run.<status>`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunEnded {
    pub run_id: crate::ids::RunId,
    pub job_id: crate::ids::JobId,
    /// The terminal status: completed, failed, timed_out, cancelled, expired.
    pub status: String,
    pub attempt: i32,
    pub result: Option<Value>,
    pub error: Option<String>,
}

/// A workflow run that ended (`workflow_run.completed`, `.failed`, a timed
/// out run too with its own status here, or `.cancelled`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkflowRunEnded {
    pub workflow_run_id: String,
    pub workflow_id: String,
    pub status: String,
    pub error: Option<String>,
}

/// A workflow step's stage change (`workflow_step.<stage>`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepStage {
    pub workflow_run_id: String,
    pub workflow_id: String,
    pub step_run_id: crate::ids::StepRunId,
    pub step_ref: String,
    pub step_type: String,
    /// [`stage_of`] the status.
    pub stage: String,
    pub status: String,
    pub attempt: i32,
    pub output: Option<Value>,
    pub error: Option<String>,
}

/// An event: what a subscription receives (and a step's stage URLs), its
/// data in the envelope [`Event::envelope`] builds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Event {
    RunEnded(RunEnded),
    WorkflowRunEnded(WorkflowRunEnded),
    StepStage(StepStage),
}

/// The envelope of an event.
#[derive(Serialize)]
struct Envelope<'a> {
    event_type: String,
    occurred_at: String,
    project_id: &'a str,
    data: &'a Event,
}

impl Event {
    /// The name a subscription's `event_types` matches.
    pub fn event_type(&self) -> String {
        match self {
            Event::RunEnded(d) => format!("run.{}", d.status),
            Event::WorkflowRunEnded(d) => match d.status.as_str() {
                "completed" => "workflow_run.completed".into(),
                "cancelled" => "workflow_run.cancelled".into(),
                _ => "workflow_run.failed".into(),
            },
            Event::StepStage(d) => format!("workflow_step.{}", d.stage),
        }
    }

    /// The body sent: `{event_type, occurred_at, project_id, data}`.
    pub fn envelope(&self, project_id: &str, at: DateTime<Utc>) -> Value {
        let e = Envelope { event_type: self.event_type(), occurred_at: timestamp(at), project_id, data: self };
        serde_json::to_value(e).expect("an event serializes")
    }
}

/// A run's terminal webhook: the run's end with its project and the time,
/// flat (`{run_id, job_id, project_id, status, attempt, result, error,
/// timestamp}`); its event type is the run's ([`Event::event_type`]).
#[derive(Serialize)]
pub struct RunWebhook<'a> {
    #[serde(flatten)]
    pub run: &'a RunEnded,
    pub project_id: &'a str,
    #[serde(serialize_with = "millis")]
    pub timestamp: DateTime<Utc>,
}

impl RunWebhook<'_> {
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a run webhook serializes")
    }
}

/// What a `wait_for_event` step's notice to its `event_notify_url` says
/// happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventTriggerOutcome {
    Received,
    TimedOut,
}

/// A `wait_for_event` step's notice to its `event_notify_url` (event type
/// `event_trigger.<outcome>`): the step run is the event trigger.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventTriggerNotice {
    pub event_trigger_id: crate::ids::StepRunId,
    pub workflow_run_id: String,
    pub step_ref: String,
    pub event_key: String,
    pub outcome: EventTriggerOutcome,
    /// The event's payload (null when the wait timed out).
    pub event_payload: Option<Value>,
    #[serde(serialize_with = "millis")]
    pub timestamp: DateTime<Utc>,
}

impl EventTriggerNotice {
    pub fn event_type(&self) -> &'static str {
        match self.outcome {
            EventTriggerOutcome::Received => "event_trigger.received",
            EventTriggerOutcome::TimedOut => "event_trigger.timed_out",
        }
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("an event-trigger notice serializes")
    }
}

fn millis<S: serde::Serializer>(at: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&timestamp(*at))
}

/// The stage a step's new status is: `running` is `started`, `timed_out`
/// is `failed`, `pending` (a step taken back for a retry) is none; every
/// other status is its own stage.
pub fn stage_of(status: &str) -> Option<&str> {
    match status {
        "pending" => None,
        "running" => Some("started"),
        "timed_out" => Some("failed"),
        s => Some(s),
    }
}

/// Whether a step's stage_notifications send `stage`: those its `stages`
/// name, or [`DEFAULT_STAGES`] when it names none.
pub fn sends_stage(n: &StageNotifications, stage: &str) -> bool {
    match &n.stages {
        Some(named) => named.iter().any(|s| s == stage),
        None => DEFAULT_STAGES.contains(&stage),
    }
}

/// The subscriptions a step's stage_notifications name, each once.
pub fn stage_subscriptions(n: &StageNotifications) -> Vec<&str> {
    let mut ids: Vec<&str> = Vec::with_capacity(n.subscription_ids.len());
    for id in &n.subscription_ids {
        if !ids.contains(&id.as_str()) {
            ids.push(id);
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;

    fn at() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2024, 5, 1, 9, 30, 0).unwrap() + chrono::Duration::microseconds(250_999)
    }

    fn ended(status: &str) -> RunEnded {
        RunEnded {
            run_id: "run_1".into(),
            job_id: "job_1".into(),
            status: status.into(),
            attempt: 2,
            result: Some(json!({"n": 1})),
            error: None,
        }
    }

    #[test]
    fn times_are_utc_milliseconds_with_a_z() {
        assert_eq!(timestamp(at()), "2024-05-01T09:30:00.250Z");
        assert_eq!(timestamp(Utc.with_ymd_and_hms(2024, 5, 1, 9, 30, 0).unwrap()), "2024-05-01T09:30:00.000Z");
    }

    #[test]
    fn a_run_end_as_a_subscription_receives_it() {
        let e = Event::RunEnded(ended("timed_out"));
        assert_eq!(e.event_type(), "run.timed_out");
        assert_eq!(
            e.envelope("prj_1", at()),
            json!({
                "event_type": "run.timed_out", "occurred_at": "2024-05-01T09:30:00.250Z", "project_id": "prj_1",
                "data": {"run_id": "run_1", "job_id": "job_1", "status": "timed_out", "attempt": 2,
                         "result": {"n": 1}, "error": null},
            })
        );
    }

    #[test]
    fn a_run_end_as_its_job_webhook_receives_it() {
        let mut run = ended("failed");
        run.result = None;
        run.error = Some("boom".into());
        let v = RunWebhook { run: &run, project_id: "prj_1", timestamp: at() }.to_value();
        assert_eq!(
            v,
            json!({"run_id": "run_1", "job_id": "job_1", "project_id": "prj_1", "status": "failed", "attempt": 2,
                   "result": null, "error": "boom", "timestamp": "2024-05-01T09:30:00.250Z"})
        );
    }

    #[test]
    fn a_workflow_run_end_is_completed_cancelled_or_failed() {
        let e = |status: &str| {
            Event::WorkflowRunEnded(WorkflowRunEnded {
                workflow_run_id: "wfr_1".into(),
                workflow_id: "wf_1".into(),
                status: status.into(),
                error: None,
            })
        };
        let types: Vec<String> =
            ["completed", "cancelled", "failed", "timed_out"].iter().map(|s| e(s).event_type()).collect();
        assert_eq!(
            types,
            ["workflow_run.completed", "workflow_run.cancelled", "workflow_run.failed", "workflow_run.failed"]
        );
        assert_eq!(
            e("timed_out").envelope("prj_1", at())["data"],
            json!({"workflow_run_id": "wfr_1", "workflow_id": "wf_1", "status": "timed_out", "error": null})
        );
    }

    #[test]
    fn a_step_stage_change() {
        let e = Event::StepStage(StepStage {
            workflow_run_id: "wfr_1".into(),
            workflow_id: "wf_1".into(),
            step_run_id: "wsr_1".into(),
            step_ref: "a".into(),
            step_type: "job".into(),
            stage: stage_of("running").unwrap().into(),
            status: "running".into(),
            attempt: 1,
            output: None,
            error: None,
        });
        assert_eq!(
            e.envelope("prj_1", at()),
            json!({
                "event_type": "workflow_step.started", "occurred_at": "2024-05-01T09:30:00.250Z", "project_id": "prj_1",
                "data": {"workflow_run_id": "wfr_1", "workflow_id": "wf_1", "step_run_id": "wsr_1", "step_ref": "a",
                         "step_type": "job", "stage": "started", "status": "running", "attempt": 1,
                         "output": null, "error": null},
            })
        );
    }

    #[test]
    fn an_event_trigger_notice() {
        let n = EventTriggerNotice {
            event_trigger_id: "wsr_1".into(),
            workflow_run_id: "wfr_1".into(),
            step_ref: "wait".into(),
            event_key: "order.paid".into(),
            outcome: EventTriggerOutcome::TimedOut,
            event_payload: None,
            timestamp: at(),
        };
        assert_eq!(n.event_type(), "event_trigger.timed_out");
        assert_eq!(
            n.to_value(),
            json!({"event_trigger_id": "wsr_1", "workflow_run_id": "wfr_1", "step_ref": "wait",
                   "event_key": "order.paid", "outcome": "timed_out", "event_payload": null,
                   "timestamp": "2024-05-01T09:30:00.250Z"})
        );
    }

    #[test]
    fn statuses_are_stages() {
        let stages: Vec<Option<&str>> = [
            "pending",
            "running",
            "waiting",
            "completed",
            "failed",
            "timed_out",
            "skipped",
            "cancelled",
            "compensated",
        ]
        .iter()
        .map(|s| stage_of(s))
        .collect();
        assert_eq!(
            stages,
            [
                None,
                Some("started"),
                Some("waiting"),
                Some("completed"),
                Some("failed"),
                Some("failed"),
                Some("skipped"),
                Some("cancelled"),
                Some("compensated")
            ]
        );
    }

    #[test]
    fn stages_sent_are_those_named_or_the_default_four() {
        let n: StageNotifications = serde_json::from_value(json!({"urls": ["https://x"]})).unwrap();
        assert!(DEFAULT_STAGES.iter().all(|s| sends_stage(&n, s)));
        assert!(!sends_stage(&n, "skipped") && !sends_stage(&n, "cancelled"));
        let n: StageNotifications =
            serde_json::from_value(json!({"urls": ["https://x"], "stages": ["waiting", "skipped"]})).unwrap();
        assert!(sends_stage(&n, "skipped") && sends_stage(&n, "waiting"));
        assert!(!sends_stage(&n, "started"));
    }

    #[test]
    fn a_subscription_named_twice_is_sent_once() {
        let n: StageNotifications =
            serde_json::from_value(json!({"subscription_ids": ["whs_a", "whs_b", "whs_a"]})).unwrap();
        assert_eq!(stage_subscriptions(&n), ["whs_a", "whs_b"]);
    }
}
