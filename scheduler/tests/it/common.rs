//! A fresh database and a unique Redis key prefix per test (a
//! `switchyard_shared::testing::Scratch`, as the workspace's integration
//! tests have), with a project and a job to hang runs on. Both are removed
//! when the test ends, passed or failed. Postgres and Redis are found as
//! every crate's tests find them: `TEST_PG_BASE` and `TEST_REDIS_URL`
//! (`scripts/test` runs these tests again with a Redis Cluster's URL there).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use sqlx::PgPool;
use switchyard_scheduler::{Scheduler, SchedulerOptions};
use switchyard_shared::domain::JobSpec;
use switchyard_shared::ids;
use switchyard_shared::queue::{self, Entry, Queue};
use switchyard_shared::store::{runs, NewRun, Run};
use switchyard_shared::testing::Scratch;
pub use switchyard_shared::testing::{pg_base, redis_url};

/// `host:port` of Postgres, for a tap in front of it.
pub fn pg_addr() -> String {
    host_port(&pg_base())
}

/// `host:port` of Redis, for a tap in front of it; `None` on a cluster,
/// whose clients follow its nodes' own addresses past any tap.
pub fn redis_addr() -> Option<String> {
    let url = redis_url();
    queue::cluster_nodes(&url).is_none().then(|| host_port(&url))
}

/// The `host:port` of a URL: what follows the scheme and the user, up to
/// the path or the query.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    host.split(['/', '?']).next().unwrap_or(host).to_string()
}
/// Upper bound of one test, setup included.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Env {
    pub pool: PgPool,
    pub queue: Queue,
    pub scheduler: Scheduler,
    pub project_id: String,
    pub job_id: switchyard_shared::ids::JobId,
    pub version_id: String,
    scratch: Scratch,
    /// The Postgres connections this test may hold (`testing::admit`).
    _connections: tokio::sync::OwnedSemaphorePermit,
}

/// Runs `test` in a fresh environment and tears it down afterwards, even
/// when the test panics or times out.
pub async fn with_env<F, Fut>(test: F)
where
    F: FnOnce(Arc<Env>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    if std::env::var_os("TEST_LOG").is_some() {
        let _ = switchyard_shared::telemetry::init_tracing("switchyard-test");
    }
    let env = Arc::new(Env::create(JobSpec::with_endpoint("http://127.0.0.1:9/never")).await);
    let outcome = tokio::spawn(tokio::time::timeout(TEST_TIMEOUT, test(env.clone()))).await;
    env.destroy().await;
    match outcome {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => panic!("test failed: {e:#}"),
        Ok(Err(_)) => panic!("test timed out after {TEST_TIMEOUT:?}"),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("test task: {e}"),
    }
}

impl Env {
    async fn create(spec: JobSpec) -> Env {
        // Two scheduler loops hold a connection each for their LISTEN.
        let connections = switchyard_shared::testing::admit(16 + 1).await;
        let scratch = Scratch::create("sy_test", "t").await;
        let setup = switchyard_shared::testing::RemoveOnDrop::new(&scratch);
        let pool = switchyard_shared::db::lazy_pool(&scratch.database_url, 16).expect("pool");
        let redis = queue::Redis::open(&scratch.redis_url).expect("redis url");
        let wake_ups = redis.pubsub_client();
        let queue = Queue::new(redis, &scratch.redis_prefix);
        let scheduler =
            Scheduler::new(pool.clone(), queue.clone(), wake_ups, SchedulerOptions::default()).expect("options");

        let project_id = ids::project_id();
        let job_id = ids::job_id();
        let version_id = ids::job_version_id();
        let spec = sqlx::types::Json(spec);
        sqlx::query("INSERT INTO projects (id, name) VALUES ($1, 'test')")
            .bind(&project_id)
            .execute(&pool)
            .await
            .expect("project");
        sqlx::query(
            "INSERT INTO jobs (id, project_id, name, slug, spec, version_id) VALUES ($1, $2, 'j', 'j', $3, $4)",
        )
        .bind(&job_id)
        .bind(&project_id)
        .bind(&spec)
        .bind(&version_id)
        .execute(&pool)
        .await
        .expect("job");
        sqlx::query(
            "INSERT INTO job_versions (id, job_id, version, name, slug, enabled, spec) VALUES ($1, $2, 1, 'j', 'j', true, $3)",
        )
        .bind(&version_id)
        .bind(&job_id)
        .bind(&spec)
        .execute(&pool)
        .await
        .expect("job version");
        // As the api does when it saves a job: dequeue parks the runs of a
        // job whose limits Redis does not know.
        queue.set_limits(&project_id, &job_id, spec.limits_field(&project_id, false).as_deref()).await.expect("limits");
        setup.disarm();
        Env { pool, queue, scheduler, project_id, job_id, version_id, scratch, _connections: connections }
    }

    async fn destroy(&self) {
        self.pool.close().await;
        self.scratch.remove().await;
    }

    /// A client for the wake-ups' pub/sub, as a scheduler process makes it.
    pub fn wake_ups(&self) -> redis::Client {
        queue::Redis::open(&redis_url()).expect("redis url").pubsub_client()
    }

    /// The name of this test's database.
    pub fn db_name(&self) -> &str {
        &self.scratch.db_name
    }

    /// Every key of this test's prefix, gone: what a Redis flush does to
    /// this queue, without touching anyone else's keys.
    pub async fn delete_all_keys(&self) {
        queue::unlink_matching(&self.scratch.redis_url, &format!("{}:*", self.queue.keys().prefix()))
            .await
            .expect("delete the test's keys");
    }

    /// Inserts a run of the test job with `status`, as the api would.
    pub async fn new_run(&self, status: &'static str, edit: impl FnOnce(&mut NewRun)) -> Run {
        let mut r = NewRun {
            id: ids::run_id(),
            project_id: self.project_id.clone(),
            job_id: self.job_id.clone(),
            job_version: 1,
            job_version_id: self.version_id.clone(),
            status: status.parse().expect("a run status"),
            triggered_by: "test".into(),
            execution_mode: "sync".into(),
            metadata: serde_json::json!({}),
            tags: serde_json::json!({}),
            ..NewRun::default()
        };
        edit(&mut r);
        runs::insert(&self.pool, &r).await.expect("insert run").0
    }

    /// Sets columns of a run directly (`SET <assignments>`), for states the
    /// public functions reach only through a worker.
    pub async fn update_run(&self, run_id: &str, assignments: &str) {
        sqlx::query(&format!("UPDATE job_runs SET {assignments} WHERE id = $1"))
            .bind(run_id)
            .execute(&self.pool)
            .await
            .expect("update run");
    }

    pub async fn run(&self, run_id: &str) -> Run {
        runs::get(&self.pool, &run_id.into()).await.expect("get run").expect("run exists")
    }

    /// Puts an entry in `scheduled`, due at `due_ms` (past or future).
    pub async fn schedule(&self, entry: &Entry, due_ms: i64) {
        assert!(self.queue.enqueue(entry, due_ms, due_ms - 1).await.expect("enqueue"), "entry was already queued");
    }

    pub async fn score(&self, key: &str, entry: &Entry) -> Option<f64> {
        let mut c = self.queue.conn().await.expect("redis connection");
        redis::cmd("ZSCORE").arg(key).arg(entry.encode()).query_async(&mut c).await.expect("zscore")
    }

    pub async fn zcard(&self, key: &str) -> u64 {
        let mut c = self.queue.conn().await.expect("redis connection");
        redis::cmd("ZCARD").arg(key).query_async(&mut c).await.expect("zcard")
    }

    pub async fn hget(&self, key: &str, field: &str) -> Option<String> {
        let mut c = self.queue.conn().await.expect("redis connection");
        redis::cmd("HGET").arg(key).arg(field).query_async(&mut c).await.expect("hget")
    }

    /// The set an entry is in, if any of the plain zsets.
    pub async fn place_of(&self, entry: &Entry) -> Option<&'static str> {
        let k = self.queue.keys();
        for (name, key) in
            [("ready", &k.ready), ("scheduled", &k.scheduled), ("leases", &k.leases), ("throttled", &k.throttled)]
        {
            if self.score(key, entry).await.is_some() {
                return Some(name);
            }
        }
        None
    }
}

pub fn at_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().expect("valid time")
}

pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}
