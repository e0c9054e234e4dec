//! Live updates as Server-Sent Events: one run, one workflow run, or a
//! project's changes (how changes reach a stream: `crate::streams`).
//!
//! Each stream reads what it sends from Postgres from its own position, so
//! a resume with `Last-Event-ID` (or `?last_event_id=`) continues where
//! the client stopped:
//!
//! - a run's stream: the id is a position in the run's history (the one
//!   `GET /v1/runs/{id}/events` pages through), which is never pruned while
//!   the run exists;
//! - a workflow run's stream: the id is the time of the newest change sent;
//!   a resume sends again every step that changed from five seconds before
//!   it (events are states, so a repeat is harmless; a gap is not);
//! - a project's stream: the id is a position in the change log, which
//!   keeps ten minutes of changes of projects that had a stream open in the
//!   last two minutes.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::StreamExt;
use poem::web::sse::Event;
use poem::web::Data;
use poem_openapi::param::{Header, Path, Query};
use poem_openapi::payload::EventStream;
use poem_openapi::{Object, OpenApi};
use switchyard_shared::ids::{RunId, WorkflowRunId};
use switchyard_shared::store::streams::{self as changes, Change, Position};
use switchyard_shared::store::{run_records as rec, runs, workflow_runs, Tenant};
use tokio::sync::mpsc;

use super::run_records::{event_view, RunEvent};
use super::workflow_runs::{run_view as workflow_run_view, step_view, WorkflowRun, WorkflowStepRun};
use super::{load_run, load_workflow_run, project_of, Tag};
use crate::auth::{scopes, Auth};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::streams::{next_look, Watch, BUFFER, HEARTBEAT, MAX_STREAMS};
use crate::views::{run_view, JobRun};

pub struct StreamsApi;

/// One event of a run's stream. The SSE `event:` field repeats `event`, and
/// its `id:` repeats `id`.
#[derive(Object)]
pub struct RunStreamEvent {
    /// `history`: the next entry of the run's history (`entry`). `run`: the
    /// run as `GET /v1/runs/{id}` shows it (`run`): first when the stream
    /// opens, then after the history entries of each change of its status
    /// or attempt. `end`: the
    /// run has ended (its last `run` event holds the final state) and the
    /// stream closes.
    pub event: String,
    /// The position in the run's history this event leaves the client at:
    /// send it back as `Last-Event-ID` to resume.
    pub id: String,
    #[oai(skip_serializing_if_is_none)]
    pub run: Option<JobRun>,
    #[oai(skip_serializing_if_is_none)]
    pub entry: Option<RunEvent>,
}

/// One event of a workflow run's stream.
#[derive(Object)]
pub struct WorkflowRunStreamEvent {
    /// `workflow_run`: the run without its steps (`workflow_run`), first
    /// when the stream opens and then at each change of its status. `step`:
    /// a step run whose status or attempt changed (`step`); when the stream
    /// opens, every step. `end`: the run has ended and the stream closes.
    pub event: String,
    /// The time of the newest change sent (`w<microseconds since the epoch>`):
    /// send it back as `Last-Event-ID` to resume.
    pub id: String,
    #[oai(skip_serializing_if_is_none)]
    pub workflow_run: Option<WorkflowRun>,
    #[oai(skip_serializing_if_is_none)]
    pub step: Option<WorkflowStepRun>,
}

/// One change in a project.
#[derive(Object)]
pub struct StreamChange {
    /// `run` (a job run), `workflow_run` or `step` (a workflow run's step run).
    pub kind: String,
    /// The run, workflow run or step run.
    pub id: String,
    /// The status it entered.
    pub status: String,
    #[oai(skip_serializing_if_is_none)]
    pub job_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub workflow_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub workflow_run_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub step_ref: Option<String>,
    pub at: DateTime<Utc>,
}

/// One event of a project's stream.
#[derive(Object)]
pub struct ProjectStreamEvent {
    /// Always `change`.
    pub event: String,
    /// The position in the project's change log: send it back as
    /// `Last-Event-ID` to resume.
    pub id: String,
    pub change: StreamChange,
}

const KINDS: [&str; 3] = ["run", "workflow_run", "step"];

#[OpenApi(tag = "Tag::Streams")]
impl StreamsApi {
    /// Follow a run as it changes (`text/event-stream`): a `run` event with
    /// its current state, each entry of its history as a `history` event, a
    /// `run` event at each change of status or attempt, and `end` when it
    /// has ended (at once for a run that has ended already). A comment line
    /// every 15 seconds keeps proxies from closing an idle stream. With
    /// `Last-Event-ID`, the history continues after that position.
    #[oai(path = "/v1/runs/:run_id/stream", method = "get", operation_id = "streamRun")]
    async fn run(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        /// Where a reconnecting client stopped (the `id` of the last event it got).
        #[oai(name = "Last-Event-ID")]
        last_event_id: Header<Option<String>>,
        /// `Last-Event-ID` for clients that cannot set headers; the header wins.
        #[oai(name = "last_event_id")]
        last_event_id_query: Query<Option<String>>,
    ) -> ApiResult<EventStream<BoxStream<'static, RunStreamEvent>>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let from = match resume_id(last_event_id.0, last_event_id_query.0) {
            None => 0,
            Some(s) => s.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| bad_resume(&s, "a history position"))?,
        };
        let watch = watch(&state, &run.project_id).await?;
        let (tx, rx) = mpsc::channel(BUFFER);
        tokio::spawn(follow_run(state.clone(), run.id, run.project_id, from, tx, watch));
        Ok(sse(rx, |e: &RunStreamEvent| (e.event.clone(), e.id.clone())))
    }

    /// Follow a workflow run as it changes (`text/event-stream`): a
    /// `workflow_run` event with its current state and a `step` event for
    /// each step, then a `step` event at each change of a step's status or
    /// attempt, a `workflow_run` event at each change of the run's status,
    /// and `end` when it has ended. A comment line every 15 seconds keeps
    /// proxies from closing an idle stream. With `Last-Event-ID`, only the
    /// steps that changed since (with five seconds to spare) are sent again.
    #[oai(path = "/v1/workflow-runs/:workflow_run_id/stream", method = "get", operation_id = "streamWorkflowRun")]
    async fn workflow_run(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        workflow_run_id: Path<String>,
        /// Where a reconnecting client stopped (the `id` of the last event it got).
        #[oai(name = "Last-Event-ID")]
        last_event_id: Header<Option<String>>,
        /// `Last-Event-ID` for clients that cannot set headers; the header wins.
        #[oai(name = "last_event_id")]
        last_event_id_query: Query<Option<String>>,
    ) -> ApiResult<EventStream<BoxStream<'static, WorkflowRunStreamEvent>>> {
        let run = load_workflow_run(&state, &auth, &workflow_run_id).await?;
        let since = match resume_id(last_event_id.0, last_event_id_query.0) {
            None => None,
            Some(s) => Some(
                s.strip_prefix('w')
                    .and_then(|us| us.parse::<i64>().ok())
                    .and_then(DateTime::<Utc>::from_timestamp_micros)
                    .ok_or_else(|| bad_resume(&s, "`w` and a time in microseconds"))?,
            ),
        };
        let watch = watch(&state, &run.project_id).await?;
        let (tx, rx) = mpsc::channel(BUFFER);
        tokio::spawn(follow_workflow_run(state.clone(), run.id, run.project_id, since, tx, watch));
        Ok(sse(rx, |e: &WorkflowRunStreamEvent| (e.event.clone(), e.id.clone())))
    }

    /// Follow a project's changes (`text/event-stream`): a `change` event for
    /// each status change of its job runs, workflow runs and step runs, from
    /// the moment the stream opens (or, with `Last-Event-ID`, from where the
    /// client stopped, up to ten minutes back when the project was being
    /// streamed meanwhile). `kinds` keeps some kinds (comma-separated: `run`,
    /// `workflow_run`, `step`; default: those the credential may read),
    /// `job_id` keeps one job's runs, `workflow_id` one workflow's runs and
    /// steps. Workflow kinds need `workflows:read` as well as `runs:read`.
    #[oai(path = "/v1/stream", method = "get", operation_id = "streamProject")]
    #[allow(clippy::too_many_arguments)]
    async fn project(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        kinds: Query<Option<String>>,
        job_id: Query<Option<String>>,
        workflow_id: Query<Option<String>>,
        /// Where a reconnecting client stopped (the `id` of the last event it got).
        #[oai(name = "Last-Event-ID")]
        last_event_id: Header<Option<String>>,
        /// `Last-Event-ID` for clients that cannot set headers; the header wins.
        #[oai(name = "last_event_id")]
        last_event_id_query: Query<Option<String>>,
    ) -> ApiResult<EventStream<BoxStream<'static, ProjectStreamEvent>>> {
        let project = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let workflows_readable = auth.0.scopes.as_ref().is_none_or(|held| scopes::covers(held, "workflows:read"));
        let kinds = match &kinds.0 {
            None => KINDS.iter().filter(|k| **k == "run" || workflows_readable).map(|k| k.to_string()).collect(),
            Some(list) => {
                let named: Vec<String> = list.split(',').map(|k| k.trim().to_string()).collect();
                if let Some(bad) = named.iter().find(|k| !KINDS.contains(&k.as_str())) {
                    return Err(ApiError::invalid_field(
                        "query.kinds",
                        "a comma-separated list of run, workflow_run and step",
                        Some(bad.clone().into()),
                    ));
                }
                if !workflows_readable && named.iter().any(|k| k != "run") {
                    return Err(ApiError::forbidden("workflow kinds need the scope workflows:read"));
                }
                named
            }
        };
        for (name, id) in [("job_id", &job_id.0), ("workflow_id", &workflow_id.0)] {
            if let Some(id) = id.as_deref().filter(|id| !switchyard_shared::ids::EXTERNAL_ID.ok(id)) {
                return Err(ApiError::invalid_field(
                    &format!("query.{name}"),
                    "1 to 64 letters, digits, '_', '-' or '.'",
                    Some(id.into()),
                ));
            }
        }
        let resume = match resume_id(last_event_id.0, last_event_id_query.0) {
            None => None,
            Some(s) => Some(Position::decode(&s).ok_or_else(|| bad_resume(&s, "`<tx>.<seq>`"))?),
        };
        let watch = watch(&state, &project).await?;
        let from = match resume {
            Some(p) => p,
            None => changes::start(&state.pool).await?,
        };
        let filter = Filter { kinds, job_id: job_id.0, workflow_id: workflow_id.0 };
        let (tx, rx) = mpsc::channel(BUFFER);
        tokio::spawn(follow_project(state.clone(), project, from, filter, tx, watch));
        Ok(sse(rx, |e: &ProjectStreamEvent| (e.event.clone(), e.id.clone())))
    }
}

/// The stream's hold on its project's watch, or 503 when this process
/// serves as many streams as it may.
async fn watch(state: &AppState, project: &str) -> ApiResult<Watch> {
    state.streams.watch(project).await?.ok_or_else(|| {
        ApiError::unavailable(format!(
            "this api process already serves {MAX_STREAMS} streams; retry later or through another process"
        ))
    })
}

fn resume_id(header: Option<String>, query: Option<String>) -> Option<String> {
    header.or(query).filter(|s| !s.is_empty())
}

fn bad_resume(value: &str, form: &str) -> ApiError {
    ApiError::invalid_field(
        "header.Last-Event-ID",
        format!("must be {form}, as this stream's events give it"),
        Some(value.into()),
    )
}

/// The response: the events a follower sends, each with its SSE `event:`
/// and `id:`, and a comment line every [`HEARTBEAT`].
fn sse<T>(rx: mpsc::Receiver<T>, tag: fn(&T) -> (String, String)) -> EventStream<BoxStream<'static, T>>
where
    T: poem_openapi::types::ToJSON + poem_openapi::types::Type + Send + 'static,
{
    let events = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) }).boxed();
    EventStream::new(events).keep_alive(HEARTBEAT).to_event(move |e| {
        let (event, id) = tag(&e);
        Event::message(e.to_json_string()).event_type(event).id(id)
    })
}

/// Sends `event`; `false` when the client has gone.
async fn send<T>(tx: &mpsc::Sender<T>, event: T) -> bool {
    tx.send(event).await.is_ok()
}

/// History entries a run's stream reads at once.
const PAGE: i64 = 100;

async fn follow_run(
    state: AppState,
    run_id: RunId,
    project: String,
    mut pos: i64,
    tx: mpsc::Sender<RunStreamEvent>,
    _watch: Watch,
) {
    let hub = Arc::clone(&state.streams);
    let mut hints = hub.hints();
    let mut shown = None;
    loop {
        match look_at_run(&state, &run_id, &mut pos, &mut shown, &tx).await {
            Ok(Look::Open) => {}
            Ok(Look::Ended | Look::Gone) => return,
            Err(e) => tracing::warn!(error = %e, run_id = %run_id, "a run's stream could not read; trying again"),
        }
        if !next_look(&mut hints, &project, Some(&run_id), tx.closed(), hub.shutdown()).await {
            return;
        }
    }
}

enum Look {
    Open,
    Ended,
    /// The client has gone, or the run was deleted.
    Gone,
}

async fn look_at_run(
    state: &AppState,
    run_id: &RunId,
    pos: &mut i64,
    shown: &mut Option<(String, i32)>,
    tx: &mpsc::Sender<RunStreamEvent>,
) -> Result<Look, sqlx::Error> {
    // The run first, its history second: a history read after the run is
    // complete up to the status the run showed.
    let Some(run) = runs::get(&state.pool, run_id).await? else { return Ok(Look::Gone) };
    let now = (run.status.as_str().to_string(), run.attempt);
    let ended = run.status.is_terminal();
    // The run's state opens the stream; after that a change of the run
    // follows the history entries that led to it.
    let mut run = Some(run);
    if shown.is_none() {
        *shown = Some(now.clone());
        let view = run_view(run.take().expect("the run"));
        if !send(tx, RunStreamEvent { event: "run".into(), id: pos.to_string(), run: Some(view), entry: None }).await {
            return Ok(Look::Gone);
        }
    }
    loop {
        let entries = rec::events(&state.pool, run_id, *pos, PAGE).await?;
        let n = entries.len() as i64;
        for e in entries {
            *pos += 1;
            let event =
                RunStreamEvent { event: "history".into(), id: pos.to_string(), run: None, entry: Some(event_view(e)) };
            if !send(tx, event).await {
                return Ok(Look::Gone);
            }
        }
        if n < PAGE {
            break;
        }
    }
    if let Some(run) = run.filter(|_| shown.as_ref() != Some(&now)) {
        *shown = Some(now);
        let event = RunStreamEvent { event: "run".into(), id: pos.to_string(), run: Some(run_view(run)), entry: None };
        if !send(tx, event).await {
            return Ok(Look::Gone);
        }
    }
    if ended {
        let event = RunStreamEvent { event: "end".into(), id: pos.to_string(), run: None, entry: None };
        send(tx, event).await;
        return Ok(Look::Ended);
    }
    Ok(Look::Open)
}

/// A resumed workflow run's stream sends again what changed this long
/// before the client's last event: `updated_at` is its transaction's start,
/// so a change can commit with a time older than one already sent.
const RESEND: chrono::Duration = chrono::Duration::seconds(5);

async fn follow_workflow_run(
    state: AppState,
    run_id: WorkflowRunId,
    project: String,
    since: Option<DateTime<Utc>>,
    tx: mpsc::Sender<WorkflowRunStreamEvent>,
    _watch: Watch,
) {
    let hub = Arc::clone(&state.streams);
    let mut hints = hub.hints();
    let mut seen = Seen { since: since.map(|t| t - RESEND), ..Seen::default() };
    loop {
        match look_at_workflow_run(&state, &run_id, &mut seen, &tx).await {
            Ok(Look::Open) => {}
            Ok(Look::Ended | Look::Gone) => return,
            Err(e) => {
                tracing::warn!(error = %e, workflow_run_id = %run_id, "a workflow run's stream could not read; trying again")
            }
        }
        if !next_look(&mut hints, &project, Some(&run_id), tx.closed(), hub.shutdown()).await {
            return;
        }
    }
}

/// What a workflow run's stream has sent.
#[derive(Default)]
struct Seen {
    run: Option<String>,
    steps: HashMap<String, (String, i32)>,
    /// On resume: steps unchanged since are taken as sent.
    since: Option<DateTime<Utc>>,
    newest: Option<DateTime<Utc>>,
}

async fn look_at_workflow_run(
    state: &AppState,
    run_id: &WorkflowRunId,
    seen: &mut Seen,
    tx: &mpsc::Sender<WorkflowRunStreamEvent>,
) -> Result<Look, sqlx::Error> {
    let Some(run) = workflow_runs::get(&state.pool, Tenant::Any, run_id).await? else { return Ok(Look::Gone) };
    let steps = workflow_runs::steps(&state.pool, run_id).await?;
    let newest = steps.iter().map(|s| s.updated_at).chain([run.updated_at]).max();
    seen.newest = seen.newest.max(newest);
    let id = format!("w{}", seen.newest.map_or(0, |t| t.timestamp_micros()));
    let since = seen.since.take();
    let status = run.status.as_str().to_string();
    let ended = run.status.is_terminal();
    let run_changed = seen.run.as_ref() != Some(&status);
    let run_event = |run| WorkflowRunStreamEvent {
        event: "workflow_run".into(),
        id: id.clone(),
        workflow_run: Some(workflow_run_view(run, None)),
        step: None,
    };
    // The run's state opens the stream; after that a run's change follows
    // the step changes that made it (its end comes last).
    let opening = seen.run.is_none();
    seen.run = Some(status);
    let mut run = Some(run);
    if opening && !send(tx, run_event(run.take().expect("the run"))).await {
        return Ok(Look::Gone);
    }
    for s in steps {
        let now = (s.status.as_str().to_string(), s.attempt);
        let key = s.id.to_string();
        if seen.steps.get(&key) == Some(&now) {
            continue;
        }
        let unchanged_since_resume = since.is_some_and(|t| s.updated_at < t);
        seen.steps.insert(key, now);
        if unchanged_since_resume {
            continue;
        }
        let event = WorkflowRunStreamEvent {
            event: "step".into(),
            id: id.clone(),
            workflow_run: None,
            step: Some(step_view(s)),
        };
        if !send(tx, event).await {
            return Ok(Look::Gone);
        }
    }
    if let Some(run) = run.filter(|_| run_changed) {
        if !send(tx, run_event(run)).await {
            return Ok(Look::Gone);
        }
    }
    if ended {
        send(tx, WorkflowRunStreamEvent { event: "end".into(), id, workflow_run: None, step: None }).await;
        return Ok(Look::Ended);
    }
    Ok(Look::Open)
}

/// What a project's stream keeps.
struct Filter {
    kinds: Vec<String>,
    job_id: Option<String>,
    workflow_id: Option<String>,
}

impl Filter {
    fn keeps(&self, c: &Change) -> bool {
        self.kinds.contains(&c.kind)
            && self.job_id.as_ref().is_none_or(|j| c.job_id.as_ref() == Some(j))
            && self.workflow_id.as_ref().is_none_or(|w| c.workflow_id.as_ref() == Some(w))
    }
}

/// Changes a project's stream reads at once.
const CHANGES_PAGE: i64 = 200;
/// After a hint, how often and how many times a project's stream looks
/// again for a change it cannot read yet (an older transaction is still
/// running).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(25);
const SETTLE_TRIES: u32 = 20;

async fn follow_project(
    state: AppState,
    project: String,
    mut pos: Position,
    filter: Filter,
    tx: mpsc::Sender<ProjectStreamEvent>,
    _watch: Watch,
) {
    let hub = Arc::clone(&state.streams);
    let mut hints = hub.hints();
    loop {
        let mut tries = 0;
        loop {
            match read_changes(&state, &project, &mut pos, &filter, &tx).await {
                Ok(None) => return,
                Ok(Some(n)) if n > 0 => break,
                Ok(Some(_)) => {}
                Err(e) => {
                    tracing::warn!(error = %e, project, "a project's stream could not read; trying again");
                    break;
                }
            }
            // Hinted but nothing readable yet: an older transaction holds
            // the change back for a moment.
            tries += 1;
            if tries >= SETTLE_TRIES {
                break;
            }
            tokio::select! {
                _ = tx.closed() => return,
                _ = tokio::time::sleep(SETTLE) => {}
            }
        }
        if !next_look(&mut hints, &project, None, tx.closed(), hub.shutdown()).await {
            return;
        }
    }
}

/// Sends the changes after `pos`; how many were read, `None` when the
/// client has gone.
async fn read_changes(
    state: &AppState,
    project: &str,
    pos: &mut Position,
    filter: &Filter,
    tx: &mpsc::Sender<ProjectStreamEvent>,
) -> Result<Option<usize>, sqlx::Error> {
    let mut read = 0;
    loop {
        let rows = changes::changes_after(&state.pool, project, pos, CHANGES_PAGE).await?;
        let n = rows.len();
        read += n;
        for c in rows {
            if let Some(p) = Position::of(&c) {
                *pos = p;
            }
            if !filter.keeps(&c) {
                continue;
            }
            let event = ProjectStreamEvent {
                event: "change".into(),
                id: pos.encode(),
                change: StreamChange {
                    kind: c.kind,
                    id: c.id,
                    status: c.status,
                    job_id: c.job_id,
                    workflow_id: c.workflow_id,
                    workflow_run_id: c.workflow_run_id,
                    step_ref: c.step_ref,
                    at: c.at,
                },
            };
            if !send(tx, event).await {
                return Ok(None);
            }
        }
        if (n as i64) < CHANGES_PAGE {
            return Ok(Some(read));
        }
    }
}
