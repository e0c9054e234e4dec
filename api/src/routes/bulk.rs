//! Bulk operations: trigger many runs of a job, cancel or replay many runs,
//! replay the dead-letter queue, cancel by filter, and the status of bulk
//! trigger batches.
//!
//! Every item goes through the same code as its single counterpart (the
//! trigger, replay and cancel of `crate::run_actions`), and one bad item never fails
//! the others: each gets its own result. Only the request as a whole (too
//! many items, none, a bad filter) is refused, with 422.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::RunStatus;
use switchyard_shared::ids::RunId;
use switchyard_shared::store::batches::{self, BatchRow};
use switchyard_shared::store::{self, transitions, Run};
use switchyard_shared::telemetry::{BULK_ITEMS_PROCESSED, BULK_OPERATIONS};

use super::{check_id, load_for_trigger, load_run, project_of, visible, Tag};
use crate::audit::{self, Change};
use crate::auth::policy::{self, Resource};
use crate::auth::{Auth, Principal};
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::run_actions::{self, cancel_reason};
use crate::state::AppState;
use crate::strict_json::JsonBody;
use crate::views::TriggerRequest;

pub struct BulkApi;

/// Items per bulk request.
pub const MAX_ITEMS: usize = 100;
/// Runs cancelled by one bulk-cancel-all call at most; call again while
/// `has_more`.
pub const CANCEL_ALL_LIMIT: i64 = 1000;

/// One run to trigger.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct BulkTriggerItem {
    pub payload: Option<Value>,
    /// -1000 to 1000, default 0. Not a validator: an item out of range is
    /// refused in its own result, the others still run.
    pub priority: Option<i64>,
    /// An item whose key was used before returns that run as `duplicate`.
    pub idempotency_key: Option<String>,
    pub tags: Option<HashMap<String, String>>,
    /// As a single trigger's: runs sharing it share the job's
    /// max_concurrency_per_key, and take turns under `fairness:
    /// round_robin`.
    pub concurrency_key: Option<String>,
}

/// Up to 100 runs of one job.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct BulkTriggerRequest {
    pub items: Vec<BulkTriggerItem>,
}

/// What became of one item.
#[derive(Object)]
pub struct BulkTriggerResult {
    /// The item's position in the request, from 0.
    pub index: i64,
    /// `created`, `duplicate` (the run with its idempotency key, or an equal
    /// payload inside the dedup window, is returned) or `error`.
    pub status: String,
    #[oai(skip_serializing_if_is_none)]
    pub run_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
}

#[derive(Object)]
pub struct BulkTriggerResponse {
    /// Carried by every run this request created (`batch_id` of the run).
    pub batch_id: String,
    pub results: Vec<BulkTriggerResult>,
}

/// Runs to act on.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct BulkRunIds {
    /// 1 to 100 run ids.
    pub run_ids: Vec<String>,
}

#[derive(Object)]
pub struct BulkCancelResult {
    pub run_id: String,
    /// `cancelled`, `not_cancellable` (already finished) or `not_found`.
    pub status: String,
    /// Unfinished descendant runs (parent_run_id, recursively) cancelled with it.
    pub children_cancelled: i64,
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
}

#[derive(Object)]
pub struct BulkCancelResponse {
    pub results: Vec<BulkCancelResult>,
}

#[derive(Object)]
pub struct BulkReplayResult {
    /// The original run.
    pub run_id: String,
    /// `replayed`, `not_found` or `error`.
    pub status: String,
    /// The new run (its `continuation_of` is `run_id`).
    #[oai(skip_serializing_if_is_none)]
    pub new_run_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub error: Option<String>,
}

#[derive(Object)]
pub struct BulkReplayResponse {
    pub results: Vec<BulkReplayResult>,
}

/// Which dead-lettered runs to replay.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct DlqReplayRequest {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    /// Only this job's runs.
    pub job_id: Option<String>,
    /// 1 to 100, default 100: runs replayed by this call, oldest first.
    pub limit: Option<i64>,
}

/// Which runs to cancel.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CancelAllRequest {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    pub job_id: Option<String>,
    /// One unfinished status (pending, queued, running, retrying); default all four.
    pub status: Option<String>,
}

/// The value rules of the bulk requests above (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{count, range, text};
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::Property;
    vec![
        (Property("CancelAllRequest", "project_id"), text(&ID)),
        (Property("DlqReplayRequest", "project_id"), text(&ID)),
        (Property("BulkTriggerRequest", "items"), count(1, MAX_ITEMS)),
        (Property("BulkRunIds", "run_ids"), count(1, MAX_ITEMS)),
        (Property("CancelAllRequest", "job_id"), text(&ID)),
        (Property("DlqReplayRequest", "job_id"), text(&ID)),
        (Property("DlqReplayRequest", "limit"), range((1, MAX_ITEMS as i64))),
    ]
}

#[derive(Object)]
pub struct CancelAllResponse {
    /// Runs that matched the filter in this call (at most 1000).
    pub matched: i64,
    /// Of those, cancelled by this call.
    pub cancelled: i64,
    /// Their unfinished descendant runs, cancelled with them.
    pub children_cancelled: i64,
    /// More runs match: call again.
    pub has_more: bool,
}

/// A bulk trigger request and how its runs are doing.
#[derive(Object)]
pub struct BatchOperation {
    pub batch_id: String,
    pub project_id: String,
    pub job_id: String,
    pub created_at: DateTime<Utc>,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    /// Items in the request.
    pub total: i64,
    /// Items that made a new run (these carry the batch_id).
    pub created: i64,
    /// Items that returned an earlier run.
    pub duplicates: i64,
    /// Items refused.
    pub errors: i64,
    /// The batch's runs by current status.
    pub counts: BTreeMap<String, i64>,
}

fn batch_view(r: BatchRow) -> BatchOperation {
    BatchOperation {
        batch_id: r.id.into_string(),
        project_id: r.project_id,
        job_id: r.job_id,
        created_at: r.created_at,
        created_by: r.created_by,
        total: r.total.into(),
        created: r.created.into(),
        duplicates: r.duplicates.into(),
        errors: r.errors.into(),
        counts: r.counts.0,
    }
}

fn check_size(n: usize, field: &str) -> ApiResult<()> {
    if n == 0 || n > MAX_ITEMS {
        return Err(ApiError::invalid_field(
            &format!("body.{field}"),
            format!("must hold 1 to {MAX_ITEMS} entries"),
            Some((n as i64).into()),
        ));
    }
    Ok(())
}

fn counted(items: usize) {
    metrics::counter!(BULK_OPERATIONS).increment(1);
    metrics::counter!(BULK_ITEMS_PROCESSED).increment(items as u64);
}

/// A run the caller may see (`None`: missing, or another project's), or
/// why not (a resource policy, an outage), for a per-item result.
async fn find_run(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Option<Run>> {
    match load_run(state, auth, id).await {
        Ok(r) => Ok(Some(r)),
        Err(ApiError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

#[OpenApi(tag = "Tag::Bulk")]
impl BulkApi {
    /// Trigger up to 100 runs of a job at once. Each item is triggered as
    /// by `POST /v1/jobs/{job_id}/trigger` with that item's fields, and
    /// every run created carries the answer's `batch_id`. Results come in
    /// request order; an invalid item is `error` and the others still run.
    /// An empty list or more than 100 items is 422; a disabled job is 409.
    #[oai(path = "/v1/jobs/:job_id/trigger/bulk", method = "post", operation_id = "triggerJobBulk")]
    async fn trigger_bulk(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        body: JsonBody<BulkTriggerRequest>,
    ) -> ApiResult<Json<BulkTriggerResponse>> {
        let job = load_for_trigger(&state, &auth, &job_id).await?;
        let items = body.0.items;
        check_size(items.len(), "items")?;
        if !job.enabled {
            return Err(ApiError::conflict("the job is disabled; enable it to trigger runs"));
        }
        let batch_id = switchyard_shared::ids::batch_id();
        batches::create(
            &state.pool,
            &batch_id,
            &job.project_id,
            &job.id,
            items.len() as i32,
            auth.0.actor().as_deref(),
        )
        .await?;
        // All items at once: the api's intake commits them together (one
        // insert for the whole call), and each still gets its own answer.
        let attempts = items.into_iter().map(|item| {
            let req = TriggerRequest {
                payload: item.payload,
                priority: item.priority,
                idempotency_key: item.idempotency_key,
                tags: item.tags,
                concurrency_key: item.concurrency_key,
                ..TriggerRequest::default()
            };
            run_actions::trigger(&state, &auth.0, &job, req, "bulk", Some(batch_id.clone()))
        });
        let outcomes = futures::future::join_all(attempts).await;
        let mut results = Vec::with_capacity(outcomes.len());
        let (mut created, mut duplicates, mut errors) = (0, 0, 0);
        for (index, outcome) in outcomes.into_iter().enumerate() {
            let mut r = BulkTriggerResult { index: index as i64, status: "error".into(), run_id: None, error: None };
            match outcome {
                Ok((run, true)) => {
                    created += 1;
                    r.status = "created".into();
                    r.run_id = Some(run.id);
                }
                Ok((run, false)) => {
                    duplicates += 1;
                    r.status = "duplicate".into();
                    r.run_id = Some(run.id);
                }
                Err(e) => {
                    errors += 1;
                    r.error = Some(e.one_line());
                }
            }
            results.push(r);
        }
        if let Err(e) = batches::set_tallies(&state.pool, &batch_id, created, duplicates, errors).await {
            // The runs are committed and the answer lists them; only the
            // batch's tallies are missing.
            tracing::warn!(batch_id = batch_id.as_str(), error = %e, "could not record the batch tallies");
        }
        counted(results.len());
        Ok(Json(BulkTriggerResponse { batch_id: batch_id.into_string(), results }))
    }

    /// Cancel up to 100 runs. Each run is cancelled as by
    /// `POST /v1/runs/{run_id}/cancel`, its unfinished child runs
    /// (parent_run_id, recursively) with it. A run already finished is
    /// `not_cancellable`; one that does not exist or belongs to another
    /// project is `not_found`.
    #[oai(path = "/v1/runs/bulk-cancel", method = "post", operation_id = "bulkCancelRuns")]
    async fn bulk_cancel(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<BulkRunIds>,
    ) -> ApiResult<Json<BulkCancelResponse>> {
        let ids = body.0.run_ids;
        check_size(ids.len(), "run_ids")?;
        let reason = cancel_reason(&auth.0);
        let mut results = Vec::with_capacity(ids.len());
        for id in ids {
            let mut r =
                BulkCancelResult { run_id: id.clone(), status: "not_found".into(), children_cancelled: 0, error: None };
            match find_run(&state, &auth, &id).await {
                Ok(None) => r.error = Some(format!("run {id:?} not found")),
                Err(e) => r.error = Some(e.one_line()),
                Ok(Some(run)) => match run_actions::cancel_with_children(&state, &run.id, &reason).await {
                    Ok(Some(c)) if c.from.is_some() => {
                        r.status = "cancelled".into();
                        r.children_cancelled = c.children as i64;
                        let details = serde_json::json!({"bulk": true, "children_cancelled": c.children});
                        let change = Change::run(&c.run, "run.cancelled", details);
                        let audited = audit::record(&state.pool, &auth.0, change).await;
                        if let Err(e) = audited {
                            tracing::warn!(run_id = %c.run.id, error = %e, "could not record the audit event of a bulk cancel");
                        }
                    }
                    Ok(Some(c)) => {
                        r.status = "not_cancellable".into();
                        r.error = Some(format!("the run is already {}", c.run.status));
                    }
                    Ok(None) => r.error = Some(format!("run {id:?} not found")),
                    Err(e) => {
                        r.status = "not_cancellable".into();
                        r.error = Some(ApiError::from(e).one_line());
                    }
                },
            }
            results.push(r);
        }
        counted(results.len());
        Ok(Json(BulkCancelResponse { results }))
    }

    /// Replay up to 100 runs: each becomes a new run as by
    /// `POST /v1/runs/{run_id}/replay`.
    #[oai(path = "/v1/runs/bulk-replay", method = "post", operation_id = "bulkReplayRuns")]
    async fn bulk_replay(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<BulkRunIds>,
    ) -> ApiResult<Json<BulkReplayResponse>> {
        let ids = body.0.run_ids;
        check_size(ids.len(), "run_ids")?;
        let mut results = Vec::with_capacity(ids.len());
        for id in ids {
            let r = match find_run(&state, &auth, &id).await {
                Ok(Some(run)) => replay_result(&state, &auth.0, &run).await,
                Ok(None) => BulkReplayResult {
                    run_id: id.clone(),
                    status: "not_found".into(),
                    new_run_id: None,
                    error: Some(format!("run {id:?} not found")),
                },
                Err(e) => {
                    BulkReplayResult { run_id: id, status: "error".into(), new_run_id: None, error: Some(e.one_line()) }
                }
            };
            results.push(r);
        }
        counted(results.len());
        Ok(Json(BulkReplayResponse { results }))
    }

    /// Replay the dead-letter queue: `failed` and `timed_out` runs whose
    /// attempts are exhausted (attempt reached the run's max_attempts, or
    /// its retry strategy is `none`) and that were not replayed before,
    /// oldest first, at most `limit` (default and maximum 100) per call.
    /// Runs of deleted jobs are skipped. A run the resource policies keep
    /// from the caller (`runs:write`) is an `error` result.
    #[oai(path = "/v1/runs/bulk-dlq-replay", method = "post", operation_id = "replayDeadLetterRuns")]
    async fn bulk_dlq_replay(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<DlqReplayRequest>,
    ) -> ApiResult<Json<BulkReplayResponse>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        let limit = match b.limit {
            None => MAX_ITEMS as i64,
            Some(n) if (1..=MAX_ITEMS as i64).contains(&n) => n,
            Some(n) => return Err(ApiError::invalid_field("body.limit", "must be between 1 and 100", Some(n.into()))),
        };
        if let Some(j) = &b.job_id {
            check_id("job", j)
                .map_err(|_| ApiError::invalid_field("body.job_id", "not a job id", Some(j.clone().into())))?;
        }
        // The chosen runs stay locked until every replay is made, so a
        // concurrent call skips them instead of replaying them twice.
        let mut tx = state.pool.begin().await?;
        let dead = store::runs::lock_dead_letters(&mut tx, &project_id, b.job_id.as_deref(), limit).await?;
        let mut results = Vec::with_capacity(dead.len());
        for run in &dead {
            // As the run's own replay would be; a refused run is its own result.
            let tags = policy::tags_of(&run.tags.0);
            let r = Resource { kind: "run", id: Some(&run.id), tags: &tags };
            match policy::authorize(&state, &auth.0, &project_id, "runs:write", r).await {
                Ok(()) => results.push(replay_result(&state, &auth.0, run).await),
                Err(e) => results.push(BulkReplayResult {
                    run_id: run.id.to_string(),
                    status: "error".into(),
                    new_run_id: None,
                    error: Some(e.one_line()),
                }),
            }
        }
        tx.commit().await?;
        counted(results.len());
        Ok(Json(BulkReplayResponse { results }))
    }

    /// Cancel the unfinished runs of a project (optionally one job's, or
    /// one status), with their child runs, at most 1000 per call, oldest
    /// first; `has_more` says to call again. Each matched run must pass the
    /// resource policies as its own cancel would (`runs:write`): one that
    /// does not refuses the call (403) and nothing is cancelled.
    #[oai(path = "/v1/runs/bulk-cancel-all", method = "post", operation_id = "cancelRunsByFilter")]
    async fn bulk_cancel_all(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<CancelAllRequest>,
    ) -> ApiResult<Json<CancelAllResponse>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        if let Some(j) = &b.job_id {
            check_id("job", j)
                .map_err(|_| ApiError::invalid_field("body.job_id", "not a job id", Some(j.clone().into())))?;
        }
        let statuses: Vec<RunStatus> = match &b.status {
            None => RunStatus::ACTIVE.to_vec(),
            Some(s) => match s.parse::<RunStatus>() {
                Ok(st) if !st.is_terminal() => vec![st],
                _ => {
                    return Err(ApiError::invalid_field(
                        "body.status",
                        "must be an unfinished status: pending, queued, running or retrying",
                        Some(s.clone().into()),
                    ))
                }
            },
        };
        let reason = cancel_reason(&auth.0);
        let ids = store::runs::ids_in_statuses(
            &state.pool,
            &project_id,
            b.job_id.as_deref(),
            &statuses,
            CANCEL_ALL_LIMIT + 1,
        )
        .await?;
        let has_more = ids.len() as i64 > CANCEL_ALL_LIMIT;
        let matched: Vec<(String, sqlx::types::Json<Value>)> =
            ids.into_iter().take(CANCEL_ALL_LIMIT as usize).collect();
        // Each run as its own cancel would be: one the policies protect
        // refuses the whole call (cancelling the rest and reporting it would
        // leave it matched by every next call).
        for (id, tags) in &matched {
            let tags = policy::tags_of(&tags.0);
            let r = Resource { kind: "run", id: Some(id), tags: &tags };
            policy::authorize(&state, &auth.0, &project_id, "runs:write", r).await?;
        }
        let ids: Vec<String> = matched.into_iter().map(|(id, _)| id).collect();
        let cancelled = transitions::cancel_many(&state.pool, &ids, &statuses, &reason).await?;
        transitions::drop_entries(&state.queue, &cancelled).await;
        let parents: Vec<RunId> = cancelled.iter().map(|c| c.run.id.clone()).collect();
        let children = run_actions::cancel_descendants(&state, &parents, &reason).await?;
        if !cancelled.is_empty() {
            let details = serde_json::json!({
                "job_id": b.job_id, "statuses": statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
                "cancelled": cancelled.len(), "children_cancelled": children,
            });
            let change = Change::new(&project_id, "run.bulk_cancelled", ("project", &project_id), details);
            audit::record(&state.pool, &auth.0, change).await?;
        }
        counted(ids.len());
        Ok(Json(CancelAllResponse {
            matched: ids.len() as i64,
            cancelled: cancelled.len() as i64,
            children_cancelled: children as i64,
            has_more,
        }))
    }

    /// Bulk trigger batches of a project, newest first, with their runs'
    /// counts by status.
    #[oai(path = "/v1/batch-operations", method = "get", operation_id = "listBatchOperations")]
    async fn batches(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        job_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<BatchOperation>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = batches::list(&state.pool, &project_id, job_id.0.as_deref(), w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.to_string(), batch_view)))
    }

    /// One bulk trigger batch.
    #[oai(path = "/v1/batch-operations/:batch_id", method = "get", operation_id = "getBatchOperation")]
    async fn batch(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        batch_id: Path<String>,
    ) -> ApiResult<Json<BatchOperation>> {
        check_id("batch", &batch_id)?;
        let row = batches::get(&state.pool, &batch_id.0.as_str().into()).await?;
        match row {
            Some(r) if visible(&auth.0, &r.project_id) => Ok(Json(batch_view(r))),
            _ => Err(ApiError::not_found("batch", &batch_id)),
        }
    }
}

async fn replay_result(state: &AppState, who: &Principal, run: &Run) -> BulkReplayResult {
    match run_actions::replay_run(state, who, run, None).await {
        Ok(new) => BulkReplayResult {
            run_id: run.id.to_string(),
            status: "replayed".into(),
            new_run_id: Some(new.id),
            error: None,
        },
        Err(e) => BulkReplayResult {
            run_id: run.id.to_string(),
            status: "error".into(),
            new_run_id: None,
            error: Some(e.one_line()),
        },
    }
}
