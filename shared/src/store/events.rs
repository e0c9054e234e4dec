//! Inbound events and event sources (migration 0012): the sources a
//! project defines, the events dispatched to it, and what each event
//! triggered.
//!
//! An event is inserted first, then fired ([`fire_in`], one transaction):
//! its sources' targets triggered, the steps waiting for it resumed, and
//! the event marked complete with what it triggered. The api's dispatch
//! and a step's `event_emit_key` both take that path. Each trigger's
//! idempotency key names the event and the source
//! (`domain::event_key::trigger_key`), so firing an event a second time
//! finds the runs the first attempt made.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use std::collections::HashMap;

use super::flow::{self, CreateOptions};
use super::one_per_key::Gate;
use super::runs::{NewRun, Run};
use super::workflow_runs::{self, NewWorkflowRun, Triggered};
use super::{jobs, workflows, Tenant};
use crate::domain::{schedule, trigger};
use crate::ids::EventId;

/// An event source as stored.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct EventSourceRow {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub description: Option<String>,
    pub event_key: String,
    pub target_type: String,
    pub target_id: String,
    pub enabled: bool,
    pub created_by: Option<String>,
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const SOURCE_COLS: &str = "id, project_id, name, description, event_key, target_type, target_id, enabled, \
    created_by, updated_by, created_at, updated_at";

/// A source's fields, as a create or an update writes them.
#[derive(Clone, Debug)]
pub struct SourceWrite<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub event_key: &'a str,
    /// `job` or `workflow`.
    pub target_type: &'a str,
    pub target_id: &'a str,
    pub enabled: bool,
    pub actor: Option<&'a str>,
}

/// Inserts a source of `project_id` with the id `id`.
pub async fn create_source(
    conn: &mut PgConnection,
    project_id: &str,
    id: &str,
    w: &SourceWrite<'_>,
) -> Result<EventSourceRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO event_sources (id, project_id, name, description, event_key, target_type, target_id, enabled,
            created_by, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
         RETURNING {SOURCE_COLS}"
    ))
    .bind(id)
    .bind(project_id)
    .bind(w.name)
    .bind(w.description)
    .bind(w.event_key)
    .bind(w.target_type)
    .bind(w.target_id)
    .bind(w.enabled)
    .bind(w.actor)
    .fetch_one(conn)
    .await
}

/// Replaces the fields of the project's source `id`; `None` when there is
/// no such source (deleted meanwhile).
pub async fn update_source(
    conn: &mut PgConnection,
    project_id: &str,
    id: &str,
    w: &SourceWrite<'_>,
) -> Result<Option<EventSourceRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE event_sources SET name = $3, description = $4, event_key = $5, target_type = $6, target_id = $7,
            enabled = $8, updated_by = $9
         WHERE id = $1 AND project_id = $2
         RETURNING {SOURCE_COLS}"
    ))
    .bind(id)
    .bind(project_id)
    .bind(w.name)
    .bind(w.description)
    .bind(w.event_key)
    .bind(w.target_type)
    .bind(w.target_id)
    .bind(w.enabled)
    .bind(w.actor)
    .fetch_optional(conn)
    .await
}

/// Deletes the project's source `id`; whether there was one. Events keep
/// the ids of the sources they triggered through.
pub async fn delete_source(conn: &mut PgConnection, project_id: &str, id: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM event_sources WHERE id = $1 AND project_id = $2")
        .bind(id)
        .bind(project_id)
        .execute(conn)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// The source, if `tenant` may see it.
pub async fn get_source(pool: &PgPool, tenant: Tenant<'_>, id: &str) -> Result<Option<EventSourceRow>, sqlx::Error> {
    super::get_scoped(pool, "event_sources", SOURCE_COLS, tenant, id).await
}

/// The project's sources, newest first, older than `before`.
pub async fn list_sources(
    pool: &PgPool,
    project_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<EventSourceRow>, sqlx::Error> {
    super::page_of_project(pool, "event_sources", SOURCE_COLS, project_id, before, limit).await
}

/// Whether `target_id` is a live (not deleted) job or workflow, as
/// `target_type` says, of the project: what a source may trigger.
pub async fn live_target(
    pool: &PgPool,
    project_id: &str,
    target_type: &str,
    target_id: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT CASE $2
            WHEN 'job' THEN EXISTS (SELECT 1 FROM jobs WHERE id = $3 AND project_id = $1 AND deleted_at IS NULL)
            WHEN 'workflow' THEN
                EXISTS (SELECT 1 FROM workflows WHERE id = $3 AND project_id = $1 AND deleted_at IS NULL)
            ELSE false END",
    )
    .bind(project_id)
    .bind(target_type)
    .bind(target_id)
    .fetch_one(pool)
    .await
}

/// The project's enabled sources whose pattern matches `key`, oldest
/// first: an exact pattern equal to it, or a `prefix*` pattern whose prefix
/// starts it (`domain::event_key::matches` states the same rule).
pub async fn matching_sources<'e>(
    conn: impl sqlx::PgExecutor<'e>,
    project_id: &str,
    key: &str,
) -> Result<Vec<EventSourceRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {SOURCE_COLS} FROM event_sources
          WHERE project_id = $1 AND enabled
            AND (event_key = $2 OR (right(event_key, 1) = '*' AND starts_with($2, left(event_key, -1))))
          ORDER BY id"
    ))
    .bind(project_id)
    .bind(key)
    .fetch_all(conn)
    .await
}

/// What a source's trigger made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    JobRun,
    WorkflowRun,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::JobRun => "job_run",
            RunKind::WorkflowRun => "workflow_run",
        }
    }
}

/// How a source's trigger went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerStatus {
    /// A new run.
    Created,
    /// The run that already held the trigger's idempotency key (or, for a
    /// job with a dedup window, an equal payload's run).
    Existing,
    /// The workflow has skip_if_running and a run was active: none made.
    Skipped,
    /// Refused, as the same trigger through the api would have been.
    Error,
}

impl TriggerStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerStatus::Created => "created",
            TriggerStatus::Existing => "existing",
            TriggerStatus::Skipped => "skipped",
            TriggerStatus::Error => "error",
        }
    }
}

/// One source's part in an event, as recorded on the event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TriggeredRun {
    pub source_id: String,
    pub kind: RunKind,
    /// The run, when there is one.
    pub id: Option<String>,
    pub status: TriggerStatus,
    /// Why there is no run (error, skipped).
    pub error: Option<String>,
}

/// An event as stored.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct EventRow {
    pub id: EventId,
    pub project_id: String,
    pub event_key: String,
    pub payload: Option<Json<Value>>,
    pub idempotency_key: Option<String>,
    pub triggered_runs: Json<Vec<TriggeredRun>>,
    pub resumed_steps: i32,
    /// Unfinished runs the event cancelled (`cancel_on` rules).
    pub cancelled_runs: i32,
    pub completed_at: Option<DateTime<Utc>>,
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

const EVENT_COLS: &str = "id, project_id, event_key, payload, idempotency_key, triggered_runs, resumed_steps, \
    cancelled_runs, completed_at, created_by, created_at";

/// An event to record.
#[derive(Clone, Debug, Default)]
pub struct NewEvent {
    pub id: EventId,
    pub project_id: String,
    pub event_key: String,
    pub payload: Option<Value>,
    pub idempotency_key: Option<String>,
    pub created_by: Option<String>,
}

/// Records an event, not yet complete. When its idempotency key is taken
/// in the project, returns the event holding it and `false`, whatever
/// that event's state.
pub async fn insert(pool: &PgPool, e: &NewEvent) -> Result<(EventRow, bool), sqlx::Error> {
    let inserted: Option<EventRow> = sqlx::query_as(&format!(
        "INSERT INTO events (id, project_id, event_key, payload, idempotency_key, created_by)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT DO NOTHING
         RETURNING {EVENT_COLS}"
    ))
    .bind(&e.id)
    .bind(&e.project_id)
    .bind(&e.event_key)
    .bind(e.payload.as_ref().map(Json))
    .bind(&e.idempotency_key)
    .bind(&e.created_by)
    .fetch_optional(pool)
    .await?;
    if let Some(row) = inserted {
        return Ok((row, true));
    }
    // Ids are fresh: only the idempotency key can conflict.
    let existing: EventRow =
        sqlx::query_as(&format!("SELECT {EVENT_COLS} FROM events WHERE project_id = $1 AND idempotency_key = $2"))
            .bind(&e.project_id)
            .bind(&e.idempotency_key)
            .fetch_one(pool)
            .await?;
    Ok((existing, false))
}

/// Resumes the `wait_for_event` steps of the event's project waiting for
/// its key that began before it arrived: each completes with the event's
/// payload as its output, and its run is told (outbox). A step that began
/// after the event arrived waits for the next one: an event is a moment,
/// not a state. With their
/// notifications (stage changes, and the event-trigger notice of each that
/// names an event_notify_url); how many.
async fn resume_waiting(tx: &mut PgConnection, event: &EventRow) -> Result<i64, sqlx::Error> {
    // Runs are locked in id order, as the engine's advance locks them one
    // at a time, so the step cannot change under either.
    let payload = event.payload.as_ref().map(|p| p.0.clone()).unwrap_or(Value::Null);
    let (resumed, stages, notices): (i64, _, Option<Json<Vec<super::deliveries::Resumed>>>) = sqlx::query_as(&format!(
        "WITH waiting AS (
            SELECT s.id, s.workflow_run_id, s.step_ref
              FROM workflow_step_runs s
              JOIN workflow_runs r ON r.id = s.workflow_run_id
              JOIN workflow_versions v ON v.id = r.version_id
             WHERE r.project_id = $1 AND r.status IN ('running', 'paused')
               AND s.status = 'waiting' AND s.step_type = 'wait_for_event' AND s.started_at <= $3
               AND EXISTS (SELECT 1 FROM jsonb_array_elements(v.steps) d
                            WHERE d->>'step_ref' = s.step_ref AND d->>'event_key' = $2)
             ORDER BY r.id
             FOR UPDATE OF r, s
         ), u AS (
            UPDATE workflow_step_runs s SET status = 'completed', output = $4, wake_at = NULL, finished_at = now()
              FROM waiting w WHERE s.id = w.id AND s.status = 'waiting'
            RETURNING {}
         ), o AS (
            INSERT INTO workflow_outbox (workflow_run_id) SELECT DISTINCT workflow_run_id FROM u
         ), d AS (
            INSERT INTO workflow_decisions (workflow_run_id, step_ref, decision_type, reason, details)
            SELECT workflow_run_id, step_ref, 'event_received', 'event ' || $2 || ' arrived',
                   jsonb_build_object('event_id', $5::text)
              FROM u
         ), n AS (
            -- The resumed steps that name an event_notify_url (the step run
            -- is the event trigger), for their notices.
            SELECT u.id AS step_run_id, u.workflow_run_id, u.step_ref, def->>'event_notify_url' AS url
              FROM u JOIN workflow_runs r ON r.id = u.workflow_run_id
              JOIN workflow_versions v ON v.id = r.version_id
              CROSS JOIN LATERAL jsonb_array_elements(v.steps) def
             WHERE def->>'step_ref' = u.step_ref AND coalesce(def->>'event_notify_url', '') <> ''
         )
         SELECT (SELECT count(*) FROM u), {}, (SELECT jsonb_agg(n) FROM n)",
        super::deliveries::STAGE_RETURNING,
        super::deliveries::stage_changes("u")
    ))
    .bind(&event.project_id)
    .bind(&event.event_key)
    .bind(event.created_at)
    .bind(Json(&payload))
    .bind(&event.id)
    .fetch_one(&mut *tx)
    .await?;
    super::deliveries::step_stages(&mut *tx, stages).await?;
    let notices = notices.map(|n| n.0).unwrap_or_default();
    super::deliveries::events_received(tx, &event.project_id, &event.event_key, &payload, notices).await?;
    Ok(resumed)
}

/// An event a workflow step emits on completing (its event_emit_key), in
/// the engine's transaction, so that it happens exactly once with the
/// step's completion: recorded, then fired ([`fire_in`]) at once. Returns
/// the event and the job runs it made, for the caller to enqueue after
/// commit.
pub async fn emit_in(conn: &mut PgConnection, e: &NewEvent) -> Result<(EventRow, Vec<Run>), sqlx::Error> {
    let event: EventRow = sqlx::query_as(&format!(
        "INSERT INTO events (id, project_id, event_key, payload, created_by) VALUES ($1, $2, $3, $4, $5)
         RETURNING {EVENT_COLS}"
    ))
    .bind(&e.id)
    .bind(&e.project_id)
    .bind(&e.event_key)
    .bind(e.payload.as_ref().map(Json))
    .bind(&e.created_by)
    .fetch_one(&mut *conn)
    .await?;
    let sources = matching_sources(&mut *conn, &e.project_id, &e.event_key).await?;
    // The event is this transaction's own: no other can complete it.
    fire_unlocked(conn, &event, &sources, &HashMap::new()).await
}

/// Fires a recorded event in the caller's transaction: the one path every
/// event takes, dispatched through the api or emitted by a step. Each of
/// `sources` triggers its target with the event's payload, under that
/// target's own rules: a workflow through its trigger (skip_if_running may
/// skip it), a job under its enabled flag, payload_schema, admission rules
/// and dedup window. Each trigger's idempotency key names the event and
/// the source, so firing an event again (a dispatch retried after a crash)
/// finds the runs the first attempt made. `refused` holds the sources the
/// sender may not trigger (a resource policy), by id, with why: their
/// entries are errors. Then the `wait_for_event` steps waiting for its
/// key are resumed and the event is marked complete.
///
/// The event row is locked first: when another dispatch completed it
/// meanwhile, its record stands and is returned, and nothing is made (the
/// first complete account of an event is the one kept). Returns the event
/// and the job runs it made, for the caller to enqueue after commit.
pub async fn fire_in(
    conn: &mut PgConnection,
    event: &EventRow,
    sources: &[EventSourceRow],
    refused: &HashMap<String, String>,
) -> Result<(EventRow, Vec<Run>), sqlx::Error> {
    let now: EventRow = sqlx::query_as(&format!("SELECT {EVENT_COLS} FROM events WHERE id = $1 FOR UPDATE"))
        .bind(&event.id)
        .fetch_one(&mut *conn)
        .await?;
    if now.completed_at.is_some() {
        return Ok((now, Vec::new()));
    }
    fire_unlocked(conn, event, sources, refused).await
}

/// [`fire_in`] for an event no other transaction can complete.
async fn fire_unlocked(
    conn: &mut PgConnection,
    event: &EventRow,
    sources: &[EventSourceRow],
    refused: &HashMap<String, String>,
) -> Result<(EventRow, Vec<Run>), sqlx::Error> {
    // First, so that no run this event makes is one it cancels. The
    // cancelled runs keep their queue entries, which workers skip.
    let payload = event.payload.as_ref().map(|p| &p.0);
    let cancelled = super::cancel_on::cancel_matching(
        conn,
        &event.project_id,
        event.id.as_str(),
        &event.event_key,
        payload,
        event.created_at,
    )
    .await?;
    // Counted now: every caller commits as soon as the event is fired.
    let _ = cancelled.moves.committed();
    let cancelled = cancelled.runs as i32;
    let mut triggered = Vec::with_capacity(sources.len());
    let mut made = Vec::new();
    for source in sources {
        let key = crate::domain::event_key::trigger_key(&event.id, &source.id);
        let kind = if source.target_type == "job" { RunKind::JobRun } else { RunKind::WorkflowRun };
        let fired = match refused.get(&source.id) {
            Some(why) => Err(why.clone()),
            None if kind == RunKind::JobRun => fire_job_in(conn, event, source, key).await?,
            None => fire_workflow_in(conn, event, source, key).await?,
        };
        let (id, status, error) = match fired {
            Ok(Fired::Job(run, created)) => {
                let status = if created { TriggerStatus::Created } else { TriggerStatus::Existing };
                let id = run.id.clone();
                if created {
                    made.push(*run);
                }
                (Some(id.into_string()), status, None)
            }
            Ok(Fired::Workflow(t)) => match *t {
                Triggered::Created(r) => (Some(r.id.into_string()), TriggerStatus::Created, None),
                Triggered::Existing(r) => (Some(r.id.into_string()), TriggerStatus::Existing, None),
                Triggered::Skipped { active_run_id } => (
                    None,
                    TriggerStatus::Skipped,
                    Some(format!(
                        "the workflow has skip_if_running and run {active_run_id} is active; no run was created"
                    )),
                ),
            },
            Err(why) => (None, TriggerStatus::Error, Some(why)),
        };
        triggered.push(TriggeredRun { source_id: source.id.clone(), kind, id, status, error });
    }
    let resumed = resume_waiting(conn, event).await?;
    let done: EventRow = sqlx::query_as(&format!(
        "UPDATE events SET triggered_runs = $2, resumed_steps = $3, cancelled_runs = $4, completed_at = now()
          WHERE id = $1
         RETURNING {EVENT_COLS}"
    ))
    .bind(&event.id)
    .bind(Json(&triggered))
    .bind(resumed as i32)
    .bind(cancelled)
    .fetch_one(&mut *conn)
    .await?;
    Ok((done, made))
}

/// What a source's trigger made.
enum Fired {
    Job(Box<Run>, bool),
    Workflow(Box<Triggered>),
}

async fn fire_job_in(
    conn: &mut PgConnection,
    event: &EventRow,
    source: &EventSourceRow,
    key: String,
) -> Result<Result<Fired, String>, sqlx::Error> {
    let job = jobs::get_many_in(conn, std::slice::from_ref(&source.target_id)).await?.into_iter().next();
    let Some(job) = job.filter(|j| j.project_id == event.project_id) else {
        return Ok(Err(format!("the job {} does not exist any more", source.target_id)));
    };
    if !job.enabled {
        return Ok(Err("the job is disabled; enable it to trigger runs".into()));
    }
    if job.spec.0.batch.is_some() {
        return Ok(Err("the job batches its triggers, which an event source does not join".into()));
    }
    let metadata = HashMap::from([
        ("event_id".to_string(), event.id.to_string()),
        ("event_source_id".to_string(), source.id.clone()),
    ]);
    let req = trigger::Request {
        payload: event.payload.as_ref().map(|p| p.0.clone()),
        idempotency_key: Some(key),
        metadata: Some(metadata),
        ..Default::default()
    };
    let refs = trigger::References { project_id: job.project_id.clone(), ..Default::default() };
    let spec = &job.spec.0;
    let valid = match trigger::validate(&req, spec, &refs) {
        Ok(v) => v,
        Err(errs) => {
            let why: Vec<String> = errs.iter().map(|e| format!("{}: {}", e.location, e.message)).collect();
            return Ok(Err(why.join("; ")));
        }
    };
    let admitted = match schedule::admission(spec, Utc::now(), None, false) {
        Ok(a) => a,
        Err(why) => return Ok(Err(why)),
    };
    let new = NewRun::triggered(&job, req, &valid, &admitted, "event", event.created_by.clone(), None);
    let gate = match Gate::of(spec, new.payload.as_ref()) {
        Ok(g) => g,
        Err(why) => return Ok(Err(why)),
    };
    let opts = CreateOptions { dedup_window_secs: spec.dedup_window_secs, depends_on: Vec::new(), gate };
    // A run this replaces keeps its queue entry, which a worker skips, and a
    // debounced run keeps its entry's old time, which the promoter moves on
    // (`one_per_key::pushed_back`): nothing here waits on Redis.
    let (made, replaced) = flow::create_in(conn, new, &opts).await?;
    let _ = replaced.committed();
    Ok(Ok(Fired::Job(Box::new(made.run), made.created)))
}

async fn fire_workflow_in(
    conn: &mut PgConnection,
    event: &EventRow,
    source: &EventSourceRow,
    key: String,
) -> Result<Result<Fired, String>, sqlx::Error> {
    let Some(wf) = workflows::get_in(conn, Tenant::Project(&event.project_id), &source.target_id).await? else {
        return Ok(Err(format!("the workflow {} does not exist any more", source.target_id)));
    };
    if !wf.enabled {
        return Ok(Err("the workflow is disabled; enable it to trigger runs".into()));
    }
    let new = NewWorkflowRun {
        payload: event.payload.as_ref().map(|p| p.0.clone()),
        idempotency_key: Some(key),
        triggered_by: "event".into(),
        created_by: event.created_by.clone(),
        traceparent: crate::traces::request::current(),
        ..NewWorkflowRun::default()
    };
    Ok(Ok(Fired::Workflow(Box::new(workflow_runs::trigger_in(conn, &wf, &new).await?))))
}

/// The event, if `tenant` may see it.
pub async fn get(pool: &PgPool, tenant: Tenant<'_>, id: &EventId) -> Result<Option<EventRow>, sqlx::Error> {
    super::get_scoped(pool, "events", EVENT_COLS, tenant, id).await
}

/// The project's events, newest first, older than `before`, only those
/// of `event_key` when given.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    event_key: Option<&str>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<EventRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {EVENT_COLS} FROM events
          WHERE project_id = $1 AND ($2::text IS NULL OR event_key = $2) AND ($3::text IS NULL OR id < $3)
          ORDER BY id DESC LIMIT $4"
    ))
    .bind(project_id)
    .bind(event_key)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}
