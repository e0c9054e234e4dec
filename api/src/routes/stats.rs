//! Operators' counts: how much work each job of a project has waiting,
//! where it waits, and the last hour of it, minute by minute.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Timelike, Utc};
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
    /// The last hour, one point per minute, oldest first
    /// ([`HISTORY_MINUTES`] points, the current minute last).
    pub history: Vec<QueueMinute>,
}

/// Points of each job's history: one per minute of the last hour.
pub const HISTORY_MINUTES: i64 = 60;

/// One minute of a job's queue. Depths are the unfinished runs by status
/// as the scheduler's rollup pass sampled them in that minute (Postgres;
/// 0 when it did not run then); `ended` is the throughput: runs that
/// reached a terminal status in that minute, up to `history_through`.
#[derive(Object)]
pub struct QueueMinute {
    /// The minute's start (UTC).
    pub minute: DateTime<Utc>,
    pub pending: i64,
    pub queued: i64,
    pub running: i64,
    pub retrying: i64,
    pub ended: i64,
    pub completed: i64,
    /// Failed or timed out.
    pub failed: i64,
}

/// The answer of `GET /v1/stats/queues`.
#[derive(Object)]
pub struct QueueStats {
    pub project_id: String,
    /// When the counts were read.
    pub generated_at: DateTime<Utc>,
    /// Every job of the project, by id.
    pub jobs: Vec<JobQueueStats>,
    /// How far the history's `ended` counts go: the scheduler folds endings
    /// in once a minute, a minute after they happen. Absent before its
    /// first pass.
    #[oai(skip_serializing_if_is_none)]
    pub history_through: Option<DateTime<Utc>>,
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
    ///
    /// Each job also has its last hour, minute by minute (`history`): the
    /// depths the scheduler sampled each minute and the runs that ended in
    /// it, from the `queue_history` rollup the scheduler writes (Postgres;
    /// kept a day).
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
        let this_minute = now.with_nanosecond(0).and_then(|t| t.with_second(0)).unwrap_or(now);
        let since = this_minute - Duration::minutes(HISTORY_MINUTES - 1);
        let (history_through, minutes) = store::analytics::queue_history(&state.pool, &project_id, since).await?;
        let mut by_job: HashMap<String, HashMap<DateTime<Utc>, store::analytics::QueueMinute>> = HashMap::new();
        for m in minutes {
            by_job.entry(m.job_id.clone()).or_default().insert(m.minute, m);
        }
        let history = |job_id: &str| -> Vec<QueueMinute> {
            let known = by_job.get(job_id);
            (0..HISTORY_MINUTES)
                .map(|i| {
                    let minute = since + Duration::minutes(i);
                    let m = known.and_then(|k| k.get(&minute));
                    let n = |f: fn(&store::analytics::QueueMinute) -> i32| m.map_or(0, |m| i64::from(f(m)));
                    QueueMinute {
                        minute,
                        pending: n(|m| m.pending),
                        queued: n(|m| m.queued),
                        running: n(|m| m.running),
                        retrying: n(|m| m.retrying),
                        ended: n(|m| m.finished),
                        completed: n(|m| m.completed),
                        failed: n(|m| m.failed),
                    }
                })
                .collect()
        };
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
                history: history(&j.job_id),
                job_id: j.job_id,
                slug: j.slug,
                name: j.name,
            })
            .collect();
        Ok(Json(QueueStats { project_id, generated_at: now, jobs, history_through }))
    }
}
