//! What a transition asks the store to write.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::workflow_run::{StepStatus, WorkflowRunStatus};
use crate::ids::StepRunId;

/// A step row as a pass read it.
#[derive(Clone, Copy, Debug)]
pub struct StepView<'a> {
    pub id: &'a StepRunId,
    pub step_ref: &'a str,
    /// The stored step type (`job`, `sleep`, ...).
    pub step_type: &'a str,
    pub status: StepStatus,
    /// Starts so far.
    pub attempt: i32,
    pub job_run_id: Option<&'a str>,
    pub child_workflow_run_id: Option<&'a str>,
    pub wake_at: Option<DateTime<Utc>>,
    pub output: Option<&'a Value>,
    pub error: Option<&'a str>,
}

/// The step row id [`StepView::test`] gives its rows.
#[cfg(test)]
static TEST_STEP_RUN: std::sync::LazyLock<StepRunId> = std::sync::LazyLock::new(|| StepRunId::from("wfs_1"));

#[cfg(test)]
impl<'a> StepView<'a> {
    /// A step row `wfs_1` of `step_type` in `status`, not started before,
    /// for the transitions' tests (they set what else they need).
    pub(crate) fn test(step_ref: &'a str, step_type: &'a str, status: StepStatus) -> StepView<'a> {
        StepView {
            id: &TEST_STEP_RUN,
            step_ref,
            step_type,
            status,
            attempt: 0,
            job_run_id: None,
            child_workflow_run_id: None,
            wake_at: None,
            output: None,
            error: None,
        }
    }
}

/// A change to one step row; a pass writes all of its changes in one
/// statement.
#[derive(Clone, Debug, PartialEq)]
pub struct StepWrite {
    pub id: StepRunId,
    pub status: StepStatus,
    pub output: Option<Value>,
    pub error: Option<String>,
    pub job_run_id: Option<String>,
    pub child_id: Option<String>,
    pub wake_at: Option<DateTime<Utc>>,
    /// An approval's approvers, fixed when it starts waiting.
    pub approvers: Option<Vec<String>>,
    /// A new start: the attempt goes up, `started_at` is now.
    pub start: bool,
    /// The step ends: `finished_at` is now.
    pub finish: bool,
    pub ended_by_run: bool,
}

impl StepWrite {
    /// The step ends with `status`.
    pub fn finish(s: &StepView, status: StepStatus, output: Option<Value>, error: Option<String>) -> StepWrite {
        StepWrite {
            id: s.id.clone(),
            status,
            output,
            error,
            job_run_id: s.job_run_id.map(str::to_string),
            child_id: s.child_workflow_run_id.map(str::to_string),
            wake_at: None,
            approvers: None,
            start: false,
            finish: true,
            ended_by_run: false,
        }
    }

    /// The step starts, `status` running or waiting.
    pub fn start(s: &StepView, status: StepStatus) -> StepWrite {
        StepWrite {
            id: s.id.clone(),
            status,
            output: None,
            error: None,
            job_run_id: None,
            child_id: None,
            wake_at: None,
            approvers: None,
            start: true,
            finish: false,
            ended_by_run: false,
        }
    }

    /// The step could not start (or start and end at once): it fails with
    /// `error`.
    pub fn fail(&mut self, error: String) {
        self.status = StepStatus::Failed;
        self.error = Some(error);
        self.finish = true;
    }
}

/// A decision, as `explain` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub step_ref: Option<String>,
    pub decision_type: String,
    pub reason: String,
    pub details: Value,
}

impl Note {
    pub fn step(step_ref: &str, decision_type: &str, reason: &str, details: Value) -> Note {
        Note {
            step_ref: Some(step_ref.to_string()),
            decision_type: decision_type.to_string(),
            reason: reason.to_string(),
            details,
        }
    }
}

/// A wait for an event that timed out and names an `event_notify_url`:
/// the store writes its delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventNotice {
    pub url: String,
    pub step_run_id: StepRunId,
    pub step_ref: String,
    pub event_key: String,
}

/// How a run ends.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    pub status: WorkflowRunStatus,
    pub error: Option<String>,
    pub output: Option<Value>,
    pub reason: String,
    pub error_class: Option<String>,
    /// The saga's final record, when the run compensated.
    pub compensation: Option<Value>,
}

impl Decided {
    pub fn ended(status: WorkflowRunStatus, reason: &str) -> Decided {
        let error = (status != WorkflowRunStatus::Completed).then(|| reason.to_string());
        Decided { status, error, output: None, reason: reason.to_string(), error_class: None, compensation: None }
    }
}
