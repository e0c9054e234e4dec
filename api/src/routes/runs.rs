//! Job runs: get, list, dependency status and cancel. A run is triggered
//! through its job (`routes::jobs`); replay, restart and metadata are
//! `routes::run_ops`.

use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::RunStatus;
use switchyard_shared::store::{self, flow, runs::RunFilter};

use super::audit::time;
use super::{load_run, project_of, Tag};
use crate::audit::{self, Change};
use crate::auth::Auth;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::run_actions;
use crate::state::AppState;
use crate::views::{run_view, JobRun};

pub struct RunsApi;

/// The answer of `GET /v1/runs/{runID}/dependency-status`.
#[derive(Object)]
pub struct DependencyStatus {
    pub run_id: String,
    /// Every dependency has completed (true without dependencies).
    pub unblocked: bool,
    /// In the order the trigger's `depends_on` named them.
    pub dependencies: Vec<DependencyState>,
}

/// One dependency of a run.
#[derive(Object)]
pub struct DependencyState {
    pub run_id: String,
    /// The dependency's current status.
    pub status: String,
    /// It has completed.
    pub satisfied: bool,
}

#[OpenApi(tag = "Tag::Runs")]
impl RunsApi {
    /// List runs of a project, newest first.
    #[oai(path = "/v1/runs", method = "get", operation_id = "listRuns")]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        job_id: Query<Option<String>>,
        /// One run status.
        status: Query<Option<String>>,
        /// A JSON document the payload must contain (jsonb `@>`), e.g. `{"user":"42"}`.
        payload_contains: Query<Option<String>>,
        batch_id: Query<Option<String>>,
        /// Only runs created at or after this time (inclusive), RFC 3339.
        created_after: Query<Option<String>>,
        /// Only runs created before this time (exclusive), RFC 3339.
        created_before: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<JobRun>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let created_after = time("created_after", created_after.0.as_deref())?;
        let created_before = time("created_before", created_before.0.as_deref())?;
        if let Some(s) = &status.0 {
            if let Err(m) = s.parse::<RunStatus>() {
                return Err(ApiError::invalid_field("query.status", m, Some(s.clone().into())));
            }
        }
        let contains: Option<Value> = match &payload_contains.0 {
            None => None,
            Some(raw) => Some(serde_json::from_str(raw).map_err(|e| {
                ApiError::invalid_field("query.payload_contains", format!("not JSON: {e}"), Some(raw.clone().into()))
            })?),
        };
        let filter = RunFilter {
            project_id: &project_id,
            job_id: job_id.0.as_deref(),
            status: status.0.as_deref(),
            payload_contains: contains,
            batch_id: batch_id.0.as_deref(),
            created_after,
            created_before,
        };
        let rows = store::runs::list(&state.pool, &filter, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.to_string(), run_view)))
    }

    /// The dead-letter queue, newest first: `failed` and `timed_out` runs
    /// whose attempts are exhausted (attempt reached the run's
    /// max_attempts, or its retry strategy is `none`) and that were not
    /// replayed, of jobs not deleted. `POST /v1/runs/bulk-dlq-replay`
    /// replays them.
    #[oai(path = "/v1/runs/dead-letters", method = "get", operation_id = "listDeadLetterRuns")]
    async fn dead_letters(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        /// Only this job's runs.
        job_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<JobRun>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows =
            store::runs::dead_letters(&state.pool, &project_id, job_id.0.as_deref(), w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.to_string(), run_view)))
    }

    /// Get a run.
    #[oai(path = "/v1/runs/:run_id", method = "get", operation_id = "getRun")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, run_id: Path<String>) -> ApiResult<Json<JobRun>> {
        Ok(Json(run_view(load_run(&state, &auth, &run_id).await?)))
    }

    /// Whether a run's dependencies (its trigger's `depends_on`) have
    /// completed. `unblocked` is true when every dependency is `completed`
    /// (and for a run without dependencies); a dependency that ends
    /// `failed`, `cancelled`, `timed_out` or `expired` fails the run with
    /// error_class `dependency_failed`.
    #[oai(path = "/v1/runs/:run_id/dependency-status", method = "get", operation_id = "getRunDependencyStatus")]
    async fn dependency_status(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        run_id: Path<String>,
    ) -> ApiResult<Json<DependencyStatus>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let deps = flow::dependencies_of(&state.pool, &run.id).await?;
        let dependencies: Vec<DependencyState> = deps
            .into_iter()
            .map(|(run_id, status)| DependencyState { satisfied: status == "completed", run_id, status })
            .collect();
        Ok(Json(DependencyStatus {
            unblocked: dependencies.iter().all(|d| d.satisfied),
            run_id: run.id.to_string(),
            dependencies,
        }))
    }

    /// Cancel a run that has not finished, and its unfinished child runs
    /// (parent_run_id, recursively). A running dispatch is not interrupted,
    /// but its outcome is discarded. 409 when already finished.
    #[oai(path = "/v1/runs/:run_id/cancel", method = "post", operation_id = "cancelRun")]
    async fn cancel(&self, state: Data<&AppState>, auth: Auth, run_id: Path<String>) -> ApiResult<Json<JobRun>> {
        let run = load_run(&state, &auth, &run_id).await?;
        let reason = run_actions::cancel_reason(&auth.0);
        let c = run_actions::cancel_with_children(&state, &run.id, &reason)
            .await?
            .ok_or_else(|| ApiError::not_found("run", &run_id))?;
        let after = c.run;
        let Some(from) = c.from else {
            return Err(ApiError::conflict(format!("the run is already {}", after.status)));
        };
        let details = serde_json::json!({"job_id": after.job_id, "from_status": from.as_str()});
        audit::record(&state.pool, &auth.0, Change::run(&after, "run.cancelled", details)).await?;
        Ok(Json(run_view(after)))
    }
}
