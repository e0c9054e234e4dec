//! Inbound events and event sources: dispatch an event to a project, the
//! sources that turn matching events into job runs and workflow runs, and
//! the record of what each event triggered (docs/contract.md, "Events").
//!
//! A dispatch records the event, checks which sources' targets the sender
//! may trigger (as a trigger of each would), then fires it in one
//! transaction through `store::events::fire_in`, the path a step's emitted
//! event takes too: each source's target triggered under its own rules,
//! the steps waiting for the event resumed, the event marked complete.
//! Each trigger's idempotency key names the event and the source, so a
//! dispatch that repeats an idempotency_key, even after a crash halfway,
//! finishes the event without triggering anything twice.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi};
use serde_json::{json, Value};
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::{event_key, FieldErrors};
use switchyard_shared::store::events::{self, EventRow, EventSourceRow, NewEvent, SourceWrite, TriggeredRun};
use switchyard_shared::store::runs;

use super::{
    description_rule, found, load_for_trigger, load_workflow_as, name_rule, patch, project_exists, project_of, tenant,
    Created, Done, Tag,
};
use crate::audit::{self, Change};
use crate::auth::{scopes, Auth};
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

pub struct EventsApi;

/// Longest idempotency key of a dispatch, and description of a source.
/// A dispatched event's idempotency_key.
pub const IDEMPOTENCY_KEY: Text = Text::printable(1, 255);
const MAX_DESCRIPTION: usize = 4000;
/// What an event source triggers.
pub const TARGET_TYPES: [&str; 2] = ["job", "workflow"];
/// An event source's description.
pub const DESCRIPTION: Text = Text::stored(0, MAX_DESCRIPTION);

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct DispatchEvent {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    /// What happened, e.g. `order.created`: 1 to 255 characters, no
    /// control characters, no `*` (which only patterns use).
    pub event_key: String,
    /// Each triggered run's payload (a job's payload_schema applies).
    pub payload: Option<Value>,
    /// 1 to 255 characters. A dispatch repeating a key of the project gets
    /// the first event back (its key and payload, not this request's) and
    /// triggers nothing new; send one whenever the dispatch may be retried.
    pub idempotency_key: Option<String>,
}

/// What one matching source did with an event.
#[derive(Object)]
pub struct EventTriggeredRun {
    pub source_id: String,
    /// job_run or workflow_run.
    pub kind: String,
    /// The run, when there is one (created or existing).
    #[oai(skip_serializing_if_is_none)]
    pub id: Option<String>,
    /// created; existing (the run already held this event's and source's
    /// idempotency key, or for a job with a dedup window an equal
    /// payload's run); skipped (a workflow with skip_if_running and an
    /// active run); error (the trigger was refused: see `error`).
    pub status: String,
    /// Why there is no run (error and skipped).
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
}

/// The answer of a dispatch.
#[derive(Object)]
pub struct DispatchedEvent {
    pub event_id: String,
    /// wait_for_event steps the event resumed (those waiting for its key
    /// that began before it arrived).
    pub resumed_steps: i64,
    /// Unfinished job runs the event cancelled: those of jobs with a
    /// `cancel_on` rule of its key whose `match` held, made before it.
    pub cancelled_runs: i64,
    /// One entry per matching enabled source, in the order of their ids.
    pub triggered_runs: Vec<EventTriggeredRun>,
}

/// An event as recorded: what arrived and what it triggered.
#[derive(Object)]
pub struct Event {
    pub id: String,
    pub project_id: String,
    pub event_key: String,
    #[oai(skip_serializing_if_is_none)]
    pub payload: Option<Value>,
    #[oai(skip_serializing_if_is_none)]
    pub idempotency_key: Option<String>,
    /// Empty until the event is complete.
    pub triggered_runs: Vec<EventTriggeredRun>,
    pub resumed_steps: i64,
    /// Unfinished job runs the event cancelled (`cancel_on` rules).
    pub cancelled_runs: i64,
    /// When every matching source was handled; absent while a dispatch
    /// is under way, or after one that failed halfway (dispatch again with
    /// the same idempotency_key to finish it).
    #[oai(skip_serializing_if_is_none)]
    pub completed_at: Option<DateTime<Utc>>,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A rule of a project: events whose key matches `event_key` trigger the
/// target with their payload.
#[derive(Object)]
pub struct EventSource {
    pub id: String,
    pub project_id: String,
    pub name: String,
    #[oai(skip_serializing_if_is_none)]
    pub description: Option<String>,
    /// An exact key, or a prefix ending in `*` (`order.*`; `*` alone
    /// matches every key).
    pub event_key: String,
    /// job or workflow.
    pub target_type: String,
    pub target_id: String,
    pub enabled: bool,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateEventSource {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    /// 1 to 200 characters.
    pub name: String,
    /// At most 4000 characters.
    pub description: Option<String>,
    /// An exact key, or a prefix with one `*` at the end (`order.*`); 1 to
    /// 255 characters, no control characters.
    pub event_key: String,
    /// job or workflow.
    pub target_type: String,
    /// A live job or workflow of the project, as target_type says.
    pub target_id: String,
    /// Default true.
    pub enabled: Option<bool>,
}

/// Change a source: absent fields keep their value, `null` clears the
/// description.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UpdateEventSource {
    pub name: Option<String>,
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
    pub event_key: Option<String>,
    pub target_type: Option<String>,
    pub target_id: Option<String>,
    pub enabled: Option<bool>,
}

/// The value rules of DispatchEvent and the event sources' create and
/// update (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::text;
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::Property;
    let mut r = vec![
        (Property("CreateEventSource", "project_id"), text(&ID)),
        (Property("DispatchEvent", "project_id"), text(&ID)),
    ];
    for schema in ["CreateEventSource", "UpdateEventSource"] {
        r.push((Property(schema, "name"), text(&super::NAME)));
        r.push((Property(schema, "description"), text(&DESCRIPTION)));
        r.push((Property(schema, "event_key"), text(&event_key::PATTERN)));
        r.push((Property(schema, "target_id"), text(&ID)));
    }
    r.push((Property("DispatchEvent", "event_key"), text(&event_key::KEY)));
    r.push((Property("DispatchEvent", "idempotency_key"), text(&IDEMPOTENCY_KEY)));
    r
}

fn triggered_view(t: TriggeredRun) -> EventTriggeredRun {
    EventTriggeredRun {
        source_id: t.source_id,
        kind: t.kind.as_str().into(),
        id: t.id,
        status: t.status.as_str().into(),
        error: t.error,
    }
}

fn event_view(r: EventRow) -> Event {
    Event {
        id: r.id.into_string(),
        project_id: r.project_id,
        event_key: r.event_key,
        payload: r.payload.map(|p| p.0),
        idempotency_key: r.idempotency_key,
        triggered_runs: r.triggered_runs.0.into_iter().map(triggered_view).collect(),
        resumed_steps: r.resumed_steps.into(),
        cancelled_runs: r.cancelled_runs.into(),
        completed_at: r.completed_at,
        created_by: r.created_by,
        created_at: r.created_at,
    }
}

fn dispatched_view(r: EventRow) -> DispatchedEvent {
    DispatchedEvent {
        event_id: r.id.into_string(),
        resumed_steps: r.resumed_steps.into(),
        cancelled_runs: r.cancelled_runs.into(),
        triggered_runs: r.triggered_runs.0.into_iter().map(triggered_view).collect(),
    }
}

fn source_view(r: EventSourceRow) -> EventSource {
    EventSource {
        id: r.id,
        project_id: r.project_id,
        name: r.name,
        description: r.description,
        event_key: r.event_key,
        target_type: r.target_type,
        target_id: r.target_id,
        enabled: r.enabled,
        created_by: r.created_by,
        updated_by: r.updated_by,
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

/// What the audit trail records of a source.
fn source_details(r: &EventSourceRow) -> Value {
    json!({
        "name": r.name, "event_key": r.event_key, "target_type": r.target_type, "target_id": r.target_id,
        "enabled": r.enabled,
    })
}

/// Whether a trigger's failure is the service's (Postgres unavailable, a
/// bug) rather than the trigger's: such a failure ends the dispatch with
/// the event incomplete, so that dispatching it again finishes it, where a
/// refusal is the source's answer and is recorded on the event.
fn not_the_triggers_fault(e: &ApiError) -> bool {
    matches!(e, ApiError::Unavailable(_) | ApiError::Internal(_))
}

/// The source, if it exists and the caller may see it (404 otherwise).
async fn load_source(state: &AppState, auth: &Auth, id: &str) -> ApiResult<EventSourceRow> {
    found("event source", id, events::get_source(&state.pool, tenant(&auth.0), id)).await
}

/// The checks of a source's fields that need no database.
fn check_source(e: &mut FieldErrors, name: &str, description: Option<&str>, pattern: &str, target_type: &str) {
    name_rule(e, name);
    description_rule(e, description, &DESCRIPTION);
    event_key::check_pattern(e, "body.event_key", pattern);
    e.check(TARGET_TYPES.contains(&target_type), "body.target_type", "one of job, workflow", Some(target_type.into()));
}

/// 422 at `body.target_id` unless it is a live job or workflow of the
/// project; 403 unless the caller may trigger what it names. A source
/// triggers its target for whoever dispatches events (with jobs:trigger),
/// so only a caller that may trigger the target itself may point a source
/// at it: nobody grants what they do not hold.
async fn check_target(
    state: &AppState,
    auth: &Auth,
    project_id: &str,
    target_type: &str,
    target_id: &str,
) -> ApiResult<()> {
    let live = switchyard_shared::ids::is_valid_external_id(target_id)
        && events::live_target(&state.pool, project_id, target_type, target_id).await?;
    if !live {
        return Err(ApiError::invalid_field(
            "body.target_id",
            format!("no such {target_type} in this project"),
            Some(target_id.into()),
        ));
    }
    let needed = if target_type == "job" { "jobs:trigger" } else { "workflows:trigger" };
    if auth.0.scopes.as_ref().is_some_and(|held| !scopes::covers(held, needed)) {
        return Err(ApiError::forbidden(format!(
            "a source that triggers a {target_type} needs {needed}, which the credential does not hold"
        )));
    }
    Ok(())
}

/// Whether the sender may trigger the source's target, under the same
/// checks as a trigger of it (the target's tenant and its resource
/// policies, with the target's own action): `Some(why)` when not. The
/// target's own rules (enabled, payload_schema, skip_if_running) are the
/// store's, applied as the event fires.
async fn refusal(state: &AppState, auth: &Auth, source: &EventSourceRow) -> ApiResult<Option<String>> {
    let checked = if source.target_type == "job" {
        load_for_trigger(state, auth, &source.target_id).await.map(drop)
    } else {
        load_workflow_as(state, auth, &source.target_id, "workflows:trigger").await.map(drop)
    };
    match checked {
        Ok(()) => Ok(None),
        Err(e) if not_the_triggers_fault(&e) => Err(e),
        Err(e) => Ok(Some(e.one_line())),
    }
}

#[OpenApi(tag = "Tag::Events")]
impl EventsApi {
    /// Dispatch an event to a project: every enabled event source of the
    /// project whose event_key matches (exactly, or by prefix for a
    /// pattern ending in `*`) triggers its target with the event's payload,
    /// under the rules of that target's own trigger: a job's run may be
    /// refused (a payload failing its payload_schema, a disabled job, a
    /// resource policy) and a workflow's skipped (skip_if_running), which
    /// is recorded in that source's entry and does not stop the others.
    /// 200 with the event's id and one entry per source, also for a
    /// repeated idempotency_key, which returns the first event and
    /// triggers nothing new (an event a failed dispatch left incomplete is
    /// finished first: its triggers are idempotent). `resumed_steps`
    /// counts the wait_for_event steps it resumed: those waiting for its key
    /// in the project that began before it arrived (each completes with the
    /// event's payload as its output). Needs `jobs:trigger`, the scope of triggering runs,
    /// whatever the targets: whoever may point a source at a workflow
    /// holds `workflows:trigger`. Resource policies apply per target with
    /// the target's own action (`jobs:trigger` on a job,
    /// `workflows:trigger` on a workflow); a refused target is an `error`
    /// entry.
    #[oai(path = "/v1/events/dispatch", method = "post", operation_id = "dispatchEvent")]
    async fn dispatch(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<DispatchEvent>,
    ) -> ApiResult<Json<DispatchedEvent>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        let mut e = FieldErrors::new();
        event_key::check_key(&mut e, "body.event_key", &b.event_key);
        e.text("body.idempotency_key", b.idempotency_key.as_deref(), &IDEMPOTENCY_KEY);
        e.finish()?;
        project_exists(&state, &project_id).await?;
        let new = NewEvent {
            id: switchyard_shared::ids::event_id(),
            project_id,
            event_key: b.event_key,
            payload: b.payload,
            idempotency_key: b.idempotency_key,
            created_by: auth.0.actor(),
        };
        let (event, _) = events::insert(&state.pool, &new).await?;
        if event.completed_at.is_some() {
            return Ok(Json(dispatched_view(event)));
        }
        let sources = events::matching_sources(&state.pool, &event.project_id, &event.event_key).await?;
        let mut refused = HashMap::new();
        for source in &sources {
            if let Some(why) = refusal(&state, &auth, source).await? {
                refused.insert(source.id.clone(), why);
            }
        }
        let mut tx = state.pool.begin().await?;
        let (done, made) = events::fire_in(&mut tx, &event, &sources, &refused).await?;
        tx.commit().await?;
        runs::enqueue_made(&state.queue, &made).await;
        Ok(Json(dispatched_view(done)))
    }

    /// List a project's events, newest first, optionally only those of one
    /// event_key. Needs `runs:read`: an event is the record of the runs it
    /// triggered.
    #[oai(path = "/v1/events", method = "get", operation_id = "listEvents")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        event_key: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Event>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = events::list(&state.pool, &project_id, event_key.0.as_deref(), w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.to_string(), event_view)))
    }

    /// Get an event: what arrived, and what it triggered. Needs
    /// `runs:read`, as the runs do.
    #[oai(path = "/v1/events/:event_id", method = "get", operation_id = "getEvent")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, event_id: Path<String>) -> ApiResult<Json<Event>> {
        let row =
            found("event", &event_id, events::get(&state.pool, tenant(&auth.0), &event_id.0.as_str().into())).await?;
        Ok(Json(event_view(row)))
    }

    /// Create an event source. The target must be a live job or workflow
    /// of the project (422 at `body.target_id`) that the caller may
    /// trigger itself (`jobs:trigger` for a job, `workflows:trigger` for a
    /// workflow; 403 otherwise), and event_key a key or a prefix pattern
    /// with one `*` at its end (422 otherwise). Needs `jobs:write`:
    /// sources are definitions, kept with the jobs.
    #[oai(path = "/v1/event-sources", method = "post", operation_id = "createEventSource")]
    async fn create_source(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<CreateEventSource>,
    ) -> ApiResult<Created<EventSource>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        project_exists(&state, &project_id).await?;
        let mut e = FieldErrors::new();
        check_source(&mut e, &b.name, b.description.as_deref(), &b.event_key, &b.target_type);
        e.finish()?;
        check_target(&state, &auth, &project_id, &b.target_type, &b.target_id).await?;
        let actor = auth.0.actor();
        let write = SourceWrite {
            name: b.name.trim(),
            description: b.description.as_deref(),
            event_key: &b.event_key,
            target_type: &b.target_type,
            target_id: &b.target_id,
            enabled: b.enabled.unwrap_or(true),
            actor: actor.as_deref(),
        };
        let id = switchyard_shared::ids::event_source_id();
        let mut tx = state.pool.begin().await?;
        let row = events::create_source(&mut tx, &project_id, &id, &write).await?;
        let change = Change::new(&project_id, "event_source.created", ("event_source", &id), source_details(&row));
        audit::record(&mut *tx, &auth.0, change).await?;
        tx.commit().await?;
        Ok(Created::Created(Json(source_view(row))))
    }

    /// List a project's event sources, newest first. Needs `jobs:read`.
    #[oai(path = "/v1/event-sources", method = "get", operation_id = "listEventSources")]
    async fn list_sources(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<EventSource>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = events::list_sources(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), source_view)))
    }

    /// Get an event source. Needs `jobs:read`.
    #[oai(path = "/v1/event-sources/:event_source_id", method = "get", operation_id = "getEventSource")]
    async fn get_source(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        event_source_id: Path<String>,
    ) -> ApiResult<Json<EventSource>> {
        Ok(Json(source_view(load_source(&state, &auth, &event_source_id).await?)))
    }

    /// Change an event source; the checks of a create apply to the new
    /// values, the target's only when target_type or target_id is sent.
    /// Needs `jobs:write`.
    #[oai(path = "/v1/event-sources/:event_source_id", method = "patch", operation_id = "updateEventSource")]
    async fn update_source(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        event_source_id: Path<String>,
        body: JsonBody<UpdateEventSource>,
    ) -> ApiResult<Json<EventSource>> {
        let cur = load_source(&state, &auth, &event_source_id).await?;
        let b = body.0;
        let retargeted = b.target_type.is_some() || b.target_id.is_some();
        let name = b.name.unwrap_or(cur.name.clone());
        let description = patch(b.description, cur.description.clone());
        let pattern = b.event_key.unwrap_or(cur.event_key.clone());
        let target_type = b.target_type.unwrap_or(cur.target_type.clone());
        let target_id = b.target_id.unwrap_or(cur.target_id.clone());
        let mut e = FieldErrors::new();
        check_source(&mut e, &name, description.as_deref(), &pattern, &target_type);
        e.finish()?;
        if retargeted {
            check_target(&state, &auth, &cur.project_id, &target_type, &target_id).await?;
        }
        let actor = auth.0.actor();
        let write = SourceWrite {
            name: name.trim(),
            description: description.as_deref(),
            event_key: &pattern,
            target_type: &target_type,
            target_id: &target_id,
            enabled: b.enabled.unwrap_or(cur.enabled),
            actor: actor.as_deref(),
        };
        let mut tx = state.pool.begin().await?;
        let row = events::update_source(&mut tx, &cur.project_id, &cur.id, &write)
            .await?
            .ok_or_else(|| ApiError::not_found("event source", &cur.id))?;
        let change =
            Change::new(&row.project_id, "event_source.updated", ("event_source", &row.id), source_details(&row));
        audit::record(&mut *tx, &auth.0, change).await?;
        tx.commit().await?;
        Ok(Json(source_view(row)))
    }

    /// Delete an event source; the events it triggered keep its id. Needs
    /// `jobs:write`.
    #[oai(path = "/v1/event-sources/:event_source_id", method = "delete", operation_id = "deleteEventSource")]
    async fn delete_source(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        event_source_id: Path<String>,
    ) -> ApiResult<Done> {
        let cur = load_source(&state, &auth, &event_source_id).await?;
        let mut tx = state.pool.begin().await?;
        if !events::delete_source(&mut tx, &cur.project_id, &cur.id).await? {
            return Err(ApiError::not_found("event source", &cur.id));
        }
        let change =
            Change::new(&cur.project_id, "event_source.deleted", ("event_source", &cur.id), source_details(&cur));
        audit::record(&mut *tx, &auth.0, change).await?;
        tx.commit().await?;
        Ok(Done::NoContent)
    }
}
