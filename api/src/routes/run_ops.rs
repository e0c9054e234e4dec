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
use switchyard_shared::store::{self, Run};
use switchyard_shared::telemetry::BULK_CHILD_CANCELLATIONS;

use super::runs::{run_view, JobRun, TriggerRequest};
use super::Tag;
use crate::audit::Change;
use crate::auth::{Auth, Principal};
use crate::error::{ApiError, ApiResult, ErrorDetail};
use crate::state::AppState;

pub struct RunOpsApi;

/// Statuses a run can still leave (cancel, expiry); the rest are terminal.
pub const ACTIVE_STATUSES: [&str; 4] = ["pending", "queued", "running", "retrying"];
/// Children are looked for this many generations down, at most.
const MAX_LINEAGE_DEPTH: i32 = 64;

/// The run, if it exists and the caller may see it (its project, and the
/// resource policies that apply to runs).
pub async fn load_run(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Run> {
    super::runs::load_visible(state, auth, id).await
}

/// What cancelling one run did.
pub struct Cancelled {
    /// The run after the call.
    pub run: Run,
    /// Whether this call cancelled it (false: it had already finished).
    pub changed: bool,
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
    let Some((run, changed)) = store::runs::cancel(&state.pool, run_id, reason).await? else {
        return Ok(None);
    };
    if changed {
        remove_entry(state, &run).await;
    }
    let children = if changed { cancel_descendants(state, std::slice::from_ref(&run.id), reason).await? } else { 0 };
    Ok(Some(Cancelled { run, changed, children }))
}

/// Cancels the unfinished descendants of the runs `parents`; returns how
/// many. Counted in `svc_bulk_child_cancellations_total`.
pub async fn cancel_descendants(state: &AppState, parents: &[String], reason: &str) -> Result<u64, sqlx::Error> {
    if parents.is_empty() {
        return Ok(0);
    }
    let reason = format!("{reason} (with its parent run)");
    let cancelled: Vec<Run> = sqlx::query_as(&format!(
        "WITH RECURSIVE tree (id, depth) AS (
            SELECT id, 1 FROM job_runs WHERE parent_run_id = ANY($1)
            UNION ALL
            SELECT r.id, t.depth + 1 FROM job_runs r JOIN tree t ON r.parent_run_id = t.id WHERE t.depth < $3
         ), old AS (
            SELECT r.id, r.status FROM job_runs r WHERE r.id IN (SELECT id FROM tree)
              AND r.status IN ('pending', 'queued', 'running', 'retrying') FOR UPDATE OF r
         ), u AS (
            UPDATE job_runs r SET status = 'cancelled', finished_at = now(), error = $2, next_retry_at = NULL
            FROM old WHERE r.id = old.id
            RETURNING r.*, old.status AS from_status
         ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, from_status, 'cancelled', attempt, $2 FROM u
         )
         SELECT {} FROM u",
        store::runs::RUN_COLUMNS
    ))
    .bind(parents)
    .bind(&reason)
    .bind(MAX_LINEAGE_DEPTH)
    .fetch_all(&state.pool)
    .await?;
    for r in &cancelled {
        switchyard_shared::telemetry::transition(None, "cancelled");
        remove_entry(state, r).await;
    }
    let n = cancelled.len() as u64;
    if n > 0 {
        metrics::counter!(BULK_CHILD_CANCELLATIONS).increment(n);
    }
    Ok(n)
}

async fn remove_entry(state: &AppState, run: &Run) {
    if let Err(e) = state.queue.remove(&run.entry()).await {
        tracing::warn!(run_id = %run.id, error = %e, "could not remove a cancelled run from redis; a worker will skip it");
    }
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
    sqlx::query("UPDATE job_runs SET continuation_of = $2 WHERE id = $1")
        .bind(&run.id)
        .bind(&orig.id)
        .execute(&state.pool)
        .await?;
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
        let from: Option<Option<String>> = sqlx::query_scalar(
            "WITH old AS (
                SELECT id, status FROM job_runs WHERE id = $1 FOR UPDATE
             ), u AS (
                UPDATE job_runs r SET status = 'queued', attempt = 0, result = NULL, error = NULL,
                    error_class = NULL, started_at = NULL, finished_at = NULL, heartbeat_at = NULL,
                    next_retry_at = NULL, execution_trace = NULL, progress = NULL, progress_message = NULL,
                    async_accepted_at = NULL, scheduled_at = NULL, expires_at = NULL, resource_class = $2
                FROM old WHERE r.id = old.id
                    AND old.status IN ('completed', 'failed', 'timed_out', 'cancelled', 'expired')
                RETURNING r.id, old.status AS from_status
             ), ev AS (
                INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
                SELECT id, from_status, 'queued', 0, $3 FROM u
             ), c AS (
                DELETE FROM job_run_checkpoints WHERE run_id IN (SELECT id FROM u)
             ), s AS (
                DELETE FROM job_run_state WHERE run_id IN (SELECT id FROM u)
             ), o AS (
                DELETE FROM job_run_outputs WHERE run_id IN (SELECT id FROM u)
             )
             SELECT (SELECT from_status FROM u)",
        )
        .bind(&run.id)
        .bind(&preset)
        .bind(&reason)
        .fetch_optional(&state.pool)
        .await?;
        let Some(from) = from.flatten() else {
            let now = store::runs::get(&state.pool, &run.id).await?.map(|r| r.status).unwrap_or(run.status);
            return Err(ApiError::conflict(format!(
                "the run is {now}: only a finished run can be restarted (cancel it first)"
            )));
        };
        switchyard_shared::telemetry::transition(Some(&from), RunStatus::Queued.as_str());
        let after = store::runs::get(&state.pool, &run.id).await?.ok_or_else(|| ApiError::not_found("run", &run.id))?;
        crate::audit::record(
            &state.pool,
            &auth.0,
            Change {
                project_id: &after.project_id,
                action: "run.restarted",
                resource_type: "run",
                resource_id: &after.id,
                details: serde_json::json!({"from_status": from, "machine_preset": preset}),
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
        let updated: Option<Run> = sqlx::query_as(&format!(
            "UPDATE job_runs SET metadata = (metadata || $2::jsonb) - $3::text[]
             WHERE id = $1 AND (SELECT count(*) FROM jsonb_object_keys((metadata || $2::jsonb) - $3::text[])) <= 64
             RETURNING {}",
            store::runs::RUN_COLUMNS
        ))
        .bind(&run.id)
        .bind(sqlx::types::Json(Value::Object(set.clone())))
        .bind(&remove)
        .fetch_optional(&state.pool)
        .await?;
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
        let updated: Option<Run> = sqlx::query_as(&format!(
            "UPDATE job_runs SET debug_mode = $2 WHERE id = $1 RETURNING {}",
            store::runs::RUN_COLUMNS
        ))
        .bind(&run.id)
        .bind(body.0.enabled)
        .fetch_optional(&state.pool)
        .await?;
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
