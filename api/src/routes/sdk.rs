//! The SDK under /sdk/v1: called by a job's target with the
//! run token it received in `X-Svc-Run-Token`.
//!
//! Authorisation is done before a handler runs (`auth::authorize`): an
//! operation whose table requirement is `RunToken` accepts only a run token
//! whose subject equals the path's `{run_id}` (403 otherwise), or the
//! internal secret; a run token is refused (401) by every other operation.
//! A new SDK operation therefore needs: a `{run_id}` path parameter, a
//! `RunToken` row in `auth::scopes::OPERATIONS`, and `routes::sdk_run` to
//! load its run.

use poem::web::Data;
use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::RunStatus;
use switchyard_shared::store;

use super::{sdk_run, Tag};
use crate::auth::Auth;
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::strict_json::JsonBody;

pub struct SdkApi;

/// A sign of life from the target while it works on the run.
#[derive(Object, Default)]
#[oai(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// 0 to 1.
    pub progress: Option<f64>,
    /// At most 1024 characters.
    pub message: Option<String>,
}

/// The value rules of HeartbeatRequest (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::text;
    use switchyard_shared::domain::run_record;
    use Place::Property;
    vec![
        (Property("HeartbeatRequest", "progress"), serde_json::json!({"minimum": 0, "maximum": 1})),
        (Property("HeartbeatRequest", "message"), text(&run_record::PROGRESS_MESSAGE)),
    ]
}

#[derive(Object)]
pub struct HeartbeatResponse {
    /// True when the run was cancelled: stop working on it.
    pub cancel_requested: bool,
}

#[OpenApi(tag = "Tag::Sdk")]
impl SdkApi {
    /// Record a heartbeat (sets the run's heartbeat_at while it is not
    /// finished) and learn whether the run was cancelled.
    #[oai(path = "/sdk/v1/runs/:run_id/heartbeat", method = "post", operation_id = "sdkHeartbeat")]
    async fn heartbeat(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
        body: JsonBody<HeartbeatRequest>,
    ) -> ApiResult<Json<HeartbeatResponse>> {
        let run = sdk_run(&state, &auth, &run_id).await?;
        let b = body.0;
        if let Some(p) = b.progress {
            if !(0.0..=1.0).contains(&p) {
                return Err(ApiError::invalid_field("body.progress", "must be between 0 and 1", Some(p.into())));
            }
        }
        if let Some(m) = &b.message {
            if !switchyard_shared::domain::run_record::PROGRESS_MESSAGE.ok(m) {
                return Err(ApiError::invalid_field("body.message", "at most 1024 characters", None));
            }
        }
        // Progress reported with a beat shows on the run like the SDK's progress call.
        let message = b.message.map(|m| m.replace('\0', "\u{fffd}"));
        let status = store::run_updates::heartbeat(&state.pool, &run.id, b.progress, message.as_deref()).await?;
        let Some(status) = status else { return Err(ApiError::not_found("run", &run.id)) };
        Ok(Json(HeartbeatResponse { cancel_requested: status == RunStatus::Cancelled }))
    }
}
