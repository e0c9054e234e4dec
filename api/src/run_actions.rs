//! What the api does to runs on behalf of several routes: trigger a run
//! (a single trigger, each item of a bulk trigger, a replay), and cancel a
//! run with its children (single and bulk cancel). Routes load and check
//! what the caller names and answer; the steps every caller must take the
//! same way live here.

use std::collections::HashMap;

use chrono::Utc;
use serde_json::Value;
use switchyard_shared::domain::batching::Batch;
use switchyard_shared::domain::{one_per_key, schedule, trigger, RunStatus};
use switchyard_shared::ids::RunId;
use switchyard_shared::queue::WakeLoop;
use switchyard_shared::store::flow::{self, CreateOptions, Gated, Made};
use switchyard_shared::store::one_per_key::Gate;
use switchyard_shared::store::transitions::{self, Cancel};
use switchyard_shared::store::trigger_batches;
use switchyard_shared::store::{self, JobRecord, NewRun, Run};

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::views::{run_view, JobRun, TriggerRequest};

/// Looks up the runs a trigger names (`depends_on`, `parent_run_id`), for
/// the checks of `domain::trigger::validate`.
async fn references(state: &AppState, project_id: &str, b: &trigger::Request) -> ApiResult<trigger::References> {
    let ids = trigger::ids_to_look_up(b);
    let runs = if ids.is_empty() { Default::default() } else { flow::runs_brief(&state.pool, &ids).await? };
    let parent = match &b.parent_run_id {
        Some(id) => store::runs::get(&state.pool, &RunId::from(id)).await?.map(|p| (p.project_id, p.lineage_depth)),
        None => None,
    };
    Ok(trigger::References {
        project_id: project_id.to_string(),
        runs: runs.into_iter().map(|(id, (project, status))| (id, (project, status == "completed"))).collect(),
        parent,
    })
}

/// Validates a trigger, writes the run to Postgres, then enqueues it in
/// Redis. The run is durable once the insert commits; if Redis is down the
/// reconciler enqueues it later, so an accepted run is never lost.
pub async fn trigger(
    state: &AppState,
    who: &Principal,
    job: &JobRecord,
    b: TriggerRequest,
    triggered_by: &str,
    batch_id: Option<switchyard_shared::ids::BatchId>,
) -> ApiResult<(JobRun, bool)> {
    if !job.enabled {
        return Err(ApiError::conflict("the job is disabled; enable it to trigger runs"));
    }
    if job.spec.0.batch.is_some() {
        return Err(ApiError::conflict(
            "the job batches its triggers: trigger it one at a time with POST /v1/jobs/{id}/trigger",
        ));
    }
    let b = trigger::Request::from(b);
    let refs = references(state, &job.project_id, &b).await?;
    let valid = trigger::validate(&b, &job.spec.0, &refs)?;
    let spec = &job.spec.0;
    let now = Utc::now();
    let requested = b.scheduled_at.or(valid.delay_secs.map(|d| now + chrono::Duration::seconds(d.into())));
    let awaiting = !valid.depends_on.is_empty() && !valid.dependencies_met;
    let admitted = schedule::admission(spec, now, requested, awaiting).map_err(ApiError::conflict)?;
    let new = NewRun::triggered(job, b, &valid, &admitted, triggered_by, who.actor(), batch_id);
    // A replay asks for a new run of an earlier payload on purpose: the
    // dedup window does not fold it into the run it repeats.
    let dedup_window_secs = if triggered_by == "replay" { 0 } else { spec.dedup_window_secs };
    let gate = Gate::of(spec, new.payload.as_ref()).map_err(|m| ApiError::invalid_field("body.payload", m, None))?;
    // Nor does a debounce window take it in; a singleton still holds it.
    let gate = gate.filter(|g| triggered_by != "replay" || matches!(g, Gate::Singleton { .. }));
    if gate.is_some() && !valid.depends_on.is_empty() {
        let m = "a job with a singleton or debounce runs without dependencies: leave depends_on out";
        return Err(ApiError::invalid_field("body.depends_on", m, None));
    }
    let opts = CreateOptions { dedup_window_secs, depends_on: valid.depends_on, gate };
    let (made, replaced) = if opts.is_plain() {
        // The common case: group-committed and enqueued with its batch.
        let due_ms = admitted.scheduled_at.filter(|_| admitted.status == RunStatus::Pending);
        let (run, created) = state.intake.submit(new, due_ms.map_or(0, |t| t.timestamp_millis())).await?;
        (Made { run, created, gated: None }, Vec::new())
    } else {
        let (made, replaced) = flow::create(&state.pool, new, &opts).await?;
        let run = &made.run;
        let due_ms = run.scheduled_at.filter(|_| run.status == RunStatus::Pending).map_or(0, |t| t.timestamp_millis());
        let now_ms = now.timestamp_millis();
        let queued = if made.gated == Some(Gated::Debounced) {
            // An entry the reschedule misses (Redis lost it, or it was
            // never written) is the promoter's and the reconciler's.
            state.queue.reschedule(std::slice::from_ref(&run.entry()), due_ms).await.map(|_| ())
        } else if made.created && !run.awaiting_dependencies {
            state.queue.enqueue(&run.entry(), due_ms, now_ms).await.map(|_| ())
        } else {
            Ok(())
        };
        if let Err(e) = queued {
            tracing::warn!(run_id = %run.id, error = %e, "enqueue failed; the run is durable and the reconciler will enqueue it");
        }
        transitions::drop_entries(&state.queue, &replaced).await;
        (made, replaced)
    };
    let Made { run, created, gated } = made;
    // The scheduler loops that watch such runs sleep until their next
    // deadline; these runs may be due sooner (throttled per process).
    if created && run.awaiting_dependencies {
        state.queue.wake(WakeLoop::Dependencies, None);
    }
    if created && run.expires_at.is_some() {
        state.queue.wake(WakeLoop::Expirer, run.expires_at);
    }
    let mut view = run_view(run);
    view.debounced = (gated == Some(Gated::Debounced)).then_some(true);
    view.skipped = (gated == Some(Gated::Skipped)).then_some(true);
    view.replaced_run_id = replaced.first().map(|c| c.run.id.to_string());
    Ok((view, created))
}

/// Adds a trigger of a batching job to the open batch of its key (its
/// payload checked as any trigger's), and enqueues the batch's run when
/// the trigger filled it. A batched trigger carries only its payload: the
/// run is made of many, so options that shape one run (a delay,
/// dependencies, an idempotency key, overrides) are refused.
pub async fn join_batch(
    state: &AppState,
    job: &JobRecord,
    batch: &Batch,
    b: TriggerRequest,
) -> ApiResult<trigger_batches::Joined> {
    if !job.enabled {
        return Err(ApiError::conflict("the job is disabled; enable it to trigger runs"));
    }
    let payload = b.payload.clone();
    if let Some(first) = b.options_set().first() {
        let m = "the job batches its triggers: a trigger carries only its payload";
        return Err(ApiError::invalid_field(&format!("body.{first}"), m, None));
    }
    let req = trigger::Request::from(b);
    let refs = trigger::References { project_id: job.project_id.clone(), ..Default::default() };
    trigger::validate(&req, &job.spec.0, &refs)?;
    let key = one_per_key::key_of(batch.key.as_deref(), payload.as_ref())
        .map_err(|m| ApiError::invalid_field("body.payload", m, None))?;
    let joined = trigger_batches::join(&state.pool, job, batch, &key, payload.as_ref()).await?;
    if let Some(run) = &joined.run {
        store::runs::enqueue_made(&state.queue, std::slice::from_ref(run)).await;
    } else if joined.position == 0 {
        // A new batch: the scheduler's batches loop sleeps until told.
        state.queue.wake(WakeLoop::Batches, Some(joined.batch.closes_at));
    }
    Ok(joined)
}

/// What cancelling one run did.
pub struct Cancelled {
    /// The run after the call.
    pub run: Run,
    /// The status it left, when this call cancelled it (`None`: it had
    /// already finished).
    pub from: Option<RunStatus>,
    /// Descendant runs cancelled with it.
    pub children: u64,
}

/// Cancels a run and every unfinished run below it (parent_run_id,
/// recursively). Children are cancelled only when the run itself was: a
/// finished run's children are left alone. `None`: no such run.
pub async fn cancel_with_children(
    state: &AppState,
    run_id: &RunId,
    reason: &str,
) -> Result<Option<Cancelled>, sqlx::Error> {
    match transitions::cancel(&state.pool, run_id, reason).await? {
        None => Ok(None),
        Some(Cancel::Finished(run)) => Ok(Some(Cancelled { run, from: None, children: 0 })),
        Some(Cancel::Cancelled(c)) => {
            transitions::drop_entries(&state.queue, std::slice::from_ref(&c)).await;
            let children = cancel_descendants(state, std::slice::from_ref(&c.run.id), reason).await?;
            Ok(Some(Cancelled { run: c.run, from: Some(c.from), children }))
        }
    }
}

/// Cancels the unfinished descendants of the runs `parents`; returns how
/// many.
pub async fn cancel_descendants(state: &AppState, parents: &[RunId], reason: &str) -> Result<u64, sqlx::Error> {
    let cancelled = transitions::cancel_descendants(&state.pool, parents, reason).await?;
    transitions::drop_entries(&state.queue, &cancelled).await;
    Ok(cancelled.len() as u64)
}

/// The reason recorded on a cancellation.
pub fn cancel_reason(who: &Principal) -> String {
    match who.actor() {
        Some(a) => format!("cancelled by {a}"),
        None => "cancelled".to_string(),
    }
}

/// Triggers a new run of `orig`'s job with the same payload and options,
/// through the same path as any trigger, marked `triggered_by: replay` and
/// `continuation_of` the original. Not copied: the idempotency key (it would
/// return the original), scheduling, dependencies and the batch. `payload`,
/// when given, replaces the original's, and is checked against the job's
/// payload_schema as any trigger's payload is.
pub async fn replay_run(state: &AppState, who: &Principal, orig: &Run, payload: Option<Value>) -> ApiResult<JobRun> {
    let Some(job) = store::jobs::get(&state.pool, &orig.job_id).await? else {
        return Err(ApiError::conflict(format!("the run's job {} was deleted; it cannot be replayed", orig.job_id)));
    };
    let strings = |v: &Value| -> HashMap<String, String> {
        v.as_object()
            .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
            .unwrap_or_default()
    };
    let req = TriggerRequest {
        payload: payload.or_else(|| orig.payload.as_ref().map(|p| p.0.clone())),
        priority: Some(orig.priority.into()),
        tags: Some(strings(&orig.tags.0)),
        metadata: Some(strings(&orig.metadata.0)),
        concurrency_key: orig.concurrency_key.clone(),
        debug_mode: Some(orig.debug_mode),
        max_attempts_override: orig.max_attempts_override.map(Into::into),
        timeout_secs_override: orig.timeout_secs_override.map(Into::into),
        retry_backoff: orig.retry_backoff.clone(),
        retry_initial_delay_secs: orig.retry_initial_delay_secs.map(Into::into),
        retry_max_delay_secs: orig.retry_max_delay_secs.map(Into::into),
        execution_mode: Some(orig.execution_mode.clone()),
        parent_run_id: orig.parent_run_id.clone(),
        ..TriggerRequest::default()
    };
    let (mut run, created) = trigger(state, who, &job, req, "replay", None).await?;
    if !created {
        let why = if run.skipped == Some(true) {
            format!("the job is a singleton and its run {} of this key is unfinished", run.id)
        } else {
            format!("an equal run ({}) was triggered within the job's dedup window", run.id)
        };
        return Err(ApiError::conflict(format!("{why}; nothing was replayed")));
    }
    store::run_updates::set_continuation_of(&state.pool, &run.id, &orig.id).await?;
    run.continuation_of = Some(orig.id.to_string());
    Ok(run)
}
