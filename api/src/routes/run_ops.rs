//! Acting on one run beyond trigger and get: replay, restart, metadata,
//! debug mode; and cancellation with the run's children, which single and
//! bulk cancel share (SPEC §3, §4.3; DECISIONS §2, §6).

use std::collections::HashMap;

use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::RunStatus;
use switchyard_shared::store::transitions::{self, Cancel};
use switchyard_shared::store::{self, Changed, Run};

use super::runs::{run_view, JobRun, TriggerRequest};
use super::Tag;
use crate::audit::Change;
use crate::auth::{Auth, Principal};
use crate::error::{ApiError, ApiResult, ErrorDetail};
use crate::state::AppState;

pub struct RunOpsApi;

/// The run, if it exists and the caller may see it (its project, and the
/// resource policies that apply to runs).
pub async fn load_run(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Run> {
    super::runs::load_visible(state, auth, id).await
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
    run_id: &str,
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
pub async fn cancel_descendants(state: &AppState, parents: &[String], reason: &str) -> Result<u64, sqlx::Error> {
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
/// return the original), scheduling, dependencies and the batch.
pub async fn replay_run(state: &AppState, who: &Principal, orig: &Run) -> ApiResult<JobRun> {
    let Some(job) = store::jobs::get(&state.pool, &orig.job_id).await? else {
        return Err(ApiError::conflict(format!("the run's job {} was deleted; it cannot be replayed", orig.job_id)));
    };
    let strings = |v: &Value| -> HashMap<String, String> {
        v.as_object()
            .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
            .unwrap_or_default()
    };
    let req = TriggerRequest {
        payload: orig.payload.as_ref().map(|p| p.0.clone()),
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
    let (mut run, created) = super::runs::trigger(state, who, &job, req, "replay", None).await?;
    if !created {
        return Err(ApiError::conflict(format!(
            "an equal run ({}) was triggered within the job's dedup window; nothing was replayed",
            run.id
        )));
    }
    store::run_updates::set_continuation_of(&state.pool, &run.id, &orig.id).await?;
    run.continuation_of = Some(orig.id.clone());
    Ok(run)
}

/// Restart a finished run.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct RestartRequest {
    /// `small`, `medium` or `large`: recorded as the run's resource_class.
    pub machine_preset: String,
}

pub const MACHINE_PRESETS: [&str; 3] = ["small", "medium", "large"];
/// Metadata keys a run may hold.
const MAX_METADATA_KEYS: i64 = 64;

/// Changes to a run's metadata.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct MetadataPatch {
    /// Merged into the run's metadata: a string sets the key, `null`
    /// removes it, keys not named keep their value.
    pub metadata: HashMap<String, Value>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct DebugModeRequest {
    pub enabled: bool,
}

#[derive(ApiResponse)]
pub enum Replayed {
    /// The new run.
    #[oai(status = 201)]
    Created(Json<JobRun>),
}

#[OpenApi(tag = "Tag::Runs")]
impl RunOpsApi {
    /// Replay a run: a new run of the same job with the same payload and
    /// options, `continuation_of` the original and `triggered_by: replay`.
    /// The original may be in any status. It goes through the trigger's
    /// checks (a disabled job is 409, a payload that no longer fits the
    /// job's payload_schema 422).
    #[oai(path = "/v1/runs/:run_id/replay", method = "post")]
    async fn replay(&self, state: Data<&AppState>, auth: Auth, run_id: Path<String>) -> ApiResult<Replayed> {
        let orig = load_run(&state, &auth, &run_id).await?;
        let run = replay_run(&state, &auth.0, &orig).await?;
        Ok(Replayed::Created(Json(run)))
    }

    /// Restart a finished run from the beginning, on the same run id. The
    /// run becomes `queued` again with attempt 0; its result, error, timings
    /// and progress, and its checkpoints, state and outputs are discarded
    /// (its logs, usage, tool calls, attempts and events are kept as
    /// history). `machine_preset` becomes its `resource_class`. A run that
    /// has not finished (pending, queued, running, retrying) is 409: cancel
    /// it first. So is a run of a disabled or deleted job.
    #[oai(path = "/v1/runs/:run_id/restart", method = "post")]
    async fn restart(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: Json<RestartRequest>,
    ) -> ApiResult<Json<JobRun>> {
        let preset = body.0.machine_preset;
        if !MACHINE_PRESETS.contains(&preset.as_str()) {
            return Err(ApiError::invalid_field(
                "body.machine_preset",
                "must be small, medium or large",
                Some(preset.into()),
            ));
        }
        let run = load_run(&state, &auth, &run_id).await?;
        match store::jobs::get(&state.pool, &run.job_id).await? {
            None => {
                return Err(ApiError::conflict(format!(
                    "the run's job {} was deleted; it cannot be restarted",
                    run.job_id
                )))
            }
            Some(job) if !job.enabled => {
                return Err(ApiError::conflict("the job is disabled; enable it to restart its runs"));
            }
            Some(_) => {}
        }
        let reason = format!(
            "restarted on a {preset} machine{}",
            match auth.0.actor() {
                Some(a) => format!(" by {a}"),
                None => String::new(),
            }
        );
        let Some(Changed { run: after, from }) = transitions::restart(&state.pool, &run.id, &preset, &reason).await?
        else {
            let now = store::runs::get(&state.pool, &run.id).await?.map_or(run.status, |r| r.status);
            return Err(ApiError::conflict(format!(
                "the run is {now}: only a finished run can be restarted (cancel it first)"
            )));
        };
        crate::audit::record(
            &state.pool,
            &auth.0,
            Change {
                project_id: &after.project_id,
                action: "run.restarted",
                resource_type: "run",
                resource_id: &after.id,
                details: serde_json::json!({"from_status": from.as_str(), "machine_preset": preset}),
            },
        )
        .await?;
        let now_ms = chrono::Utc::now().timestamp_millis();
        if let Err(e) = state.queue.enqueue(&after.entry(), 0, now_ms).await {
            tracing::warn!(run_id = %after.id, error = %e, "enqueue after restart failed; the reconciler will enqueue it");
        }
        Ok(Json(run_view(after)))
    }

    /// Change a run's metadata, in any status: string values set keys,
    /// `null` removes them. At most 64 keys; keys 1 to 128 characters,
    /// values at most 1024.
    #[oai(path = "/v1/runs/:run_id/metadata", method = "patch")]
    async fn metadata(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: Json<MetadataPatch>,
    ) -> ApiResult<Json<JobRun>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let mut set = serde_json::Map::new();
        let mut remove: Vec<String> = Vec::new();
        let mut errors = Vec::new();
        for (k, v) in body.0.metadata {
            let loc = format!("body.metadata.{k}");
            // Postgres text and jsonb cannot hold U+0000.
            if k.is_empty() || k.len() > 128 || k.contains('\0') {
                errors.push(ErrorDetail {
                    location: loc,
                    message: "keys are 1 to 128 characters, without NUL".into(),
                    value: Some(k.into()),
                });
                continue;
            }
            match v {
                Value::Null => remove.push(k),
                Value::String(s) if s.len() <= 1024 && !s.contains('\0') => {
                    set.insert(k, Value::String(s));
                }
                Value::String(s) => errors.push(ErrorDetail {
                    location: loc,
                    message: "values are at most 1024 characters, without NUL".into(),
                    value: Some(s.into()),
                }),
                other => errors.push(ErrorDetail {
                    location: loc,
                    message: "must be a string, or null to remove the key".into(),
                    value: Some(other),
                }),
            }
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        let set_keys: Vec<&String> = set.keys().collect();
        let set_keys = serde_json::json!(set_keys);
        let updated =
            store::run_updates::update_metadata(&state.pool, &run.id, &set, &remove, MAX_METADATA_KEYS).await?;
        let Some(r) = updated else {
            return Err(ApiError::invalid_field("body.metadata", "a run has at most 64 metadata keys", None));
        };
        crate::audit::record(
            &state.pool,
            &auth.0,
            Change {
                project_id: &r.project_id,
                action: "run.metadata_updated",
                resource_type: "run",
                resource_id: &r.id,
                details: serde_json::json!({"removed": remove, "set": set_keys}),
            },
        )
        .await?;
        Ok(Json(run_view(r)))
    }

    /// Turn a run's debug mode on or off.
    #[oai(path = "/v1/runs/:run_id/debug-mode", method = "put")]
    async fn debug_mode(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: Json<DebugModeRequest>,
    ) -> ApiResult<Json<JobRun>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let updated = store::run_updates::set_debug_mode(&state.pool, &run.id, body.0.enabled).await?;
        let r = updated.ok_or_else(|| ApiError::not_found("run", &run.id))?;
        crate::audit::record(
            &state.pool,
            &auth.0,
            Change {
                project_id: &r.project_id,
                action: "run.debug_mode_set",
                resource_type: "run",
                resource_id: &r.id,
                details: serde_json::json!({"enabled": r.debug_mode}),
            },
        )
        .await?;
        Ok(Json(run_view(r)))
    }
}
