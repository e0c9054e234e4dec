//! Acting on one run beyond trigger, get and cancel: replay, restart,
//! metadata and debug mode.

use std::collections::HashMap;

use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::run_metadata;
use switchyard_shared::store::{self, transitions, Changed};

use super::{load_run, Tag};
use crate::audit::{self, Change};
use crate::auth::Auth;
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::run_actions::replay_run;
use crate::state::AppState;
use crate::strict_json::{JsonBody, OptionalBody};
use crate::views::{run_view, JobRun};

pub struct RunOpsApi;

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

/// The value rules of MetadataPatch (see `document::rules`): a value may
/// be null, which removes its key.
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::text;
    use switchyard_shared::domain::limits;
    let mut value = text(&limits::MAP_VALUE);
    value["type"] = serde_json::json!(["string", "null"]);
    vec![
        (Place::Keys("MetadataPatch", "metadata"), text(&limits::MAP_KEY)),
        (Place::Values("MetadataPatch", "metadata"), value),
    ]
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct DebugModeRequest {
    pub enabled: bool,
}

/// What a replay changes. The body may be left out, as may `payload`.
#[derive(Object, Default)]
#[oai(deny_unknown_fields)]
pub struct ReplayRequest {
    /// Replaces the original run's payload, checked against the job's
    /// payload_schema as a trigger's payload is (422 when it does not fit).
    /// Left out, or null: the original's payload (a replay cannot clear it).
    pub payload: Option<Value>,
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
    /// The original may be in any status. A `payload` in the body replaces
    /// the original's (a replay with an edited payload). It goes through
    /// the trigger's checks (a disabled job is 409, a payload that does not
    /// fit the job's payload_schema 422).
    #[oai(path = "/v1/runs/:run_id/replay", method = "post", operation_id = "replayRun")]
    async fn replay(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: OptionalBody<ReplayRequest>,
    ) -> ApiResult<Replayed> {
        let orig = load_run(&state, &auth, &run_id).await?;
        let payload = body.0.unwrap_or_default().payload;
        let run = replay_run(&state, &auth.0, &orig, payload).await?;
        Ok(Replayed::Created(Json(run)))
    }

    /// Restart a finished run from the beginning, on the same run id. The
    /// run becomes `queued` again with attempt 0; its result, error, timings
    /// and progress, and its checkpoints, state and outputs are discarded
    /// (its logs, usage, tool calls, attempts and events are kept as
    /// history). `machine_preset` becomes its `resource_class`. A run that
    /// has not finished (pending, queued, running, retrying) is 409: cancel
    /// it first. So is a run of a disabled or deleted job.
    #[oai(path = "/v1/runs/:run_id/restart", method = "post", operation_id = "restartRun")]
    async fn restart(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<RestartRequest>,
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
        let details = serde_json::json!({"from_status": from.as_str(), "machine_preset": preset});
        audit::record(&state.pool, &auth.0, Change::run(&after, "run.restarted", details)).await?;
        let now_ms = chrono::Utc::now().timestamp_millis();
        if let Err(e) = state.queue.enqueue(&after.entry(), 0, now_ms).await {
            tracing::warn!(run_id = %after.id, error = %e, "enqueue after restart failed; the reconciler will enqueue it");
        }
        Ok(Json(run_view(after)))
    }

    /// Change a run's metadata, in any status: string values set keys,
    /// `null` removes them. At most 64 keys; keys 1 to 128 characters,
    /// values at most 1024.
    #[oai(path = "/v1/runs/:run_id/metadata", method = "patch", operation_id = "updateRunMetadata")]
    async fn metadata(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<MetadataPatch>,
    ) -> ApiResult<Json<JobRun>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let run_metadata::MetadataChange { set, remove } = run_metadata::change(body.0.metadata)?;
        let set_keys: Vec<&String> = set.keys().collect();
        let set_keys = serde_json::json!(set_keys);
        let updated =
            store::run_updates::update_metadata(&state.pool, &run.id, &set, &remove, run_metadata::MAX_KEYS).await?;
        let Some(r) = updated else {
            return Err(ApiError::invalid_field("body.metadata", "a run has at most 64 metadata keys", None));
        };
        let details = serde_json::json!({"removed": remove, "set": set_keys});
        audit::record(&state.pool, &auth.0, Change::run(&r, "run.metadata_updated", details)).await?;
        Ok(Json(run_view(r)))
    }

    /// Turn a run's debug mode on or off.
    #[oai(path = "/v1/runs/:run_id/debug-mode", method = "put", operation_id = "setRunDebugMode")]
    async fn debug_mode(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<DebugModeRequest>,
    ) -> ApiResult<Json<JobRun>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let updated = store::run_updates::set_debug_mode(&state.pool, &run.id, body.0.enabled).await?;
        let r = updated.ok_or_else(|| ApiError::not_found("run", &run.id))?;
        let details = serde_json::json!({"enabled": r.debug_mode});
        audit::record(&state.pool, &auth.0, Change::run(&r, "run.debug_mode_set", details)).await?;
        Ok(Json(run_view(r)))
    }
}
