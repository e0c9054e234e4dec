//! Operators' counts: how much work each job of a project has waiting, and
//! where it waits.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::Query;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use switchyard_shared::store;

use super::{project_of, Tag};
use crate::auth::Auth;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub struct StatsApi;

/// The queues of one job.
#[derive(Object)]
pub struct JobQueueStats {
    pub job_id: String,
    pub slug: String,
    pub name: String,
    /// Entries ready to dispatch, in priority order (Redis).
    pub ready: i64,
    /// Entries waiting for a time: a delay, a `scheduled_at` or a retry's
    /// backoff (Redis).
    pub scheduled: i64,
    /// Entries held by a rate limit until its window admits them (Redis).
    pub throttled: i64,
    /// Entries held by a concurrency cap or a pause (Redis).
    pub parked: i64,
    /// Entries a worker is dispatching now (Redis).
    pub leased: i64,
    /// Runs in status `pending` (Postgres).
    pub pending: i64,
    /// Runs in status `queued` (Postgres).
    pub queued: i64,
    /// Runs in status `running` (Postgres), async runs waiting for their
    /// target's answer included.
    pub running: i64,
    /// Runs in status `retrying` (Postgres).
    pub retrying: i64,
    /// Seconds the longest-waiting `queued` run has waited since it became
    /// due (the latest of its creation, its `scheduled_at` and its
    /// `next_retry_at`); absent when no run is queued.
    #[oai(skip_serializing_if_is_none)]
    pub oldest_queued_age_secs: Option<i64>,
}

/// The answer of `GET /v1/stats/queues`.
#[derive(Object)]
pub struct QueueStats {
    pub project_id: String,
    /// When the counts were read.
    pub generated_at: DateTime<Utc>,
    /// Every job of the project, by id.
    pub jobs: Vec<JobQueueStats>,
}

#[OpenApi(tag = "Tag::Stats")]
impl StatsApi {
    /// Queue depths per job of a project.
    ///
    /// Two sources, each the truth for what it reports. Run statuses
    /// (`pending`, `queued`, `running`, `retrying`) and the oldest queued
    /// age come from Postgres, where every status change is recorded. Where
    /// a run waits (`ready`, `scheduled`, `throttled`, `parked`, `leased`)
    /// only the Redis queue knows; its five counts are read at one moment.
    /// The two are read one after the other, so under load they may differ
    /// by the runs that moved in between; Redis can also lag Postgres after
    /// an outage, until the reconciler has re-enqueued what it missed.
    /// Counting walks the queue: poll every few seconds, not faster. 503
    /// when Redis is unavailable.
    #[oai(path = "/v1/stats/queues", method = "get", operation_id = "getQueueStats")]
    async fn queues(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        /// The project (a key's own project when omitted).
        project_id: Query<Option<String>>,
    ) -> ApiResult<Json<QueueStats>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let backlog = store::stats::backlog(&state.pool, &project_id).await?;
        let ids: Vec<String> = backlog.iter().map(|j| j.job_id.clone()).collect();
        let depths = state.queue.depths_by_job(&ids).await.map_err(|e| {
            tracing::warn!(error = %e, "queue stats: redis unavailable");
            ApiError::unavailable("the queue (Redis) is unavailable; retry later")
        })?;
        let now = Utc::now();
        let jobs = backlog
            .into_iter()
            .zip(depths)
            .map(|(j, d)| JobQueueStats {
                ready: d.ready as i64,
                scheduled: d.scheduled as i64,
                throttled: d.throttled as i64,
                parked: d.parked as i64,
                leased: d.leased as i64,
                pending: j.pending,
                queued: j.queued,
                running: j.running,
                retrying: j.retrying,
                oldest_queued_age_secs: j.oldest_queued_at.map(|t| (now - t).num_seconds().max(0)),
                job_id: j.job_id,
                slug: j.slug,
                name: j.name,
            })
            .collect();
        Ok(Json(QueueStats { project_id, generated_at: now, jobs }))
    }
}
