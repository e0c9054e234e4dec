//! The spans a workflow engine pass leaves (docs/traces.md): each step it
//! ended, from the step's start, as a child of the run's span; and the
//! run's own span when the pass ended the run. The step's job run (or
//! child workflow run) is a child of the step's span: its `traceparent`
//! says so (`traces::step_parent`). Built during the pass, exported after
//! its commit (`workflow_engine::Pending`), and only when traces are
//! exported at all.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::workflow_runs::{StepRun, WorkflowRun};
use crate::domain::workflow_run::WorkflowRunStatus;
use crate::engine::StepWrite;
use crate::ids::StepRunId;
use crate::traces::{self, Attr, SpanRecord};

/// What a step's span needs of its row, as the pass read it.
struct StepStart {
    started_at: Option<DateTime<Utc>>,
    step_ref: String,
    step_type: String,
    attempt: i32,
}

/// The pass's steps' [`StepStart`]s.
#[derive(Default)]
pub(super) struct StepStarts(HashMap<StepRunId, StepStart>);

impl StepStarts {
    pub(super) fn of<'a>(steps: impl Iterator<Item = &'a StepRun>) -> StepStarts {
        StepStarts(
            steps
                .map(|s| {
                    let start = StepStart {
                        started_at: s.started_at,
                        step_ref: s.step_ref.clone(),
                        step_type: s.step_type.clone(),
                        attempt: s.attempt,
                    };
                    (s.id.clone(), start)
                })
                .collect(),
        )
    }
}

/// The spans of one pass over `run`, when its trace is sampled.
pub(super) fn pass(
    run: &WorkflowRun,
    writes: &[StepWrite],
    steps: &StepStarts,
    ended: Option<WorkflowRunStatus>,
) -> Vec<SpanRecord> {
    let place = run.trace();
    if !place.sampled {
        return Vec::new();
    }
    // Not the pass's `now`, which may be its caller's (a step outcome's
    // time): the spans end when the pass does, after what they contain.
    let now = Utc::now();
    let mut out = Vec::new();
    for w in writes.iter().filter(|w| w.finish) {
        let Some(StepStart { started_at, step_ref, step_type, attempt }) = steps.0.get(&w.id) else { continue };
        let started = if w.start { now } else { started_at.unwrap_or(now) };
        let step = place.child(&w.id);
        out.push(
            SpanRecord::own(&step, format!("step {step_ref}"), traces::at(started), traces::at(now))
                .attr(Attr::new("switchyard.step_ref", step_ref.clone()))
                .attr(Attr::new("switchyard.step_type", step_type.clone()))
                .attr(Attr::new("switchyard.step_run_id", w.id.to_string()))
                .attr(Attr::new("switchyard.status", w.status.as_str()))
                .attr(Attr::new("switchyard.attempt", i64::from(*attempt + i32::from(w.start))))
                .error(w.error.as_deref().filter(|_| w.status.as_str() == "failed")),
        );
    }
    if let Some(status) = ended {
        out.push(
            SpanRecord::own(
                &place,
                format!("workflow {}", run.workflow_id),
                traces::at(run.created_at),
                traces::at(now),
            )
            .attr(Attr::new("switchyard.workflow_run_id", run.id.to_string()))
            .attr(Attr::new("switchyard.workflow_id", run.workflow_id.to_string()))
            .attr(Attr::new("switchyard.project_id", run.project_id.clone()))
            .attr(Attr::new("switchyard.status", status.as_str()))
            .error((status != WorkflowRunStatus::Completed).then_some(status.as_str())),
        );
    }
    out
}
