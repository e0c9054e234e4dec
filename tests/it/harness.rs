//! A whole Switchyard in-process: a fresh database, a private Redis prefix,
//! the API on an ephemeral port, and workers and schedulers on demand.

use std::time::Duration;

use poem::listener::{Acceptor, Listener, TcpListener};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_shared::config::Secret;
use switchyard_shared::queue::{self, Queue};
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::testing::{self, RemoveOnDrop, Scratch};
use switchyard_shared::Config;
use tokio::sync::OwnedSemaphorePermit;
// Where Postgres and Redis are, as every crate's tests find them.
pub use switchyard_shared::testing::{pg_base, redis_url};

pub const SECRET: &str = "test-internal-secret-0123456789";
/// SECRETS_KEY of every test (signing keys are stored sealed with it); a
/// test without one sets `secrets_key = None`.
pub const SECRETS_KEY: &str = "test-secrets-key-0123456789abcdef";

pub struct TestEnv {
    pub config: Config,
    pub pool: PgPool,
    pub queue: Queue,
    pub base: String,
    pub http: reqwest::Client,
    pub stop: Shutdown,
    scratch: Scratch,
    /// The Postgres connections this test may hold (`testing::admit`).
    _connections: OwnedSemaphorePermit,
}

fn init_logs() {
    if std::env::var("TEST_LOG").is_ok() {
        let _ = switchyard_shared::telemetry::init_tracing("switchyard-test");
    }
}

impl TestEnv {
    pub async fn start() -> TestEnv {
        Self::start_with(|_| {}).await
    }

    /// `tweak` adjusts the configuration before anything starts.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestEnv {
        init_logs();
        let scratch = Scratch::named("sy_it", "syt");
        let mut config = Config::defaults();
        config.database_url = scratch.database_url.clone();
        config.redis_url = scratch.redis_url.clone();
        config.redis_key_prefix = scratch.redis_prefix.clone();
        config.queue_partitions = switchyard_shared::testing::queue_partitions();
        config.internal_secret = Some(Secret::new(SECRET));
        config.jwt_signing_key = Some(Secret::new("test-jwt-signing-key-0123456789abcdef"));
        config.secrets_key = Some(Secret::new(SECRETS_KEY));
        config.rate_limit_global_per_min = 0;
        config.rate_limit_trigger_per_min = 0;
        config.rate_limit_bulk_per_min = 0;
        config.lease = Duration::from_secs(3);
        // The api, worker and scheduler of a test share this pool: a small
        // one keeps 8 tests at once inside Postgres' default 100 slots, and
        // `testing::admit` holds a test back while the server has no room
        // (docs/testing.md, "On a busy machine").
        config.database_max_connections = 10;
        config.shutdown_grace = Duration::from_secs(5);
        tweak(&mut config);
        // The tweak may have moved the database or the prefix: what the
        // configuration names is what is made and removed.
        let scratch = Scratch::at(&config.database_url, &config.redis_url, &config.redis_key_prefix);
        // The pool, the api's workflow engine's two, and setup's one.
        let connections = testing::admit(config.database_max_connections + 3).await;
        let setup = RemoveOnDrop::new(&scratch);
        scratch.prepare().await;
        let state = switchyard_api::state_from_config(config.clone()).expect("state");
        let pool = state.pool.clone();
        let queue = state.queue.clone();
        // What a scheduler's first sweep leaves on an empty system: capped
        // jobs dispatch only in a rebuilt Redis (lua/dequeue.lua), and many
        // tests run a worker without a scheduler.
        queue.mark_initialised(0).await.expect("mark the queue rebuilt");
        let acceptor = TcpListener::bind("127.0.0.1:0").into_acceptor().await.expect("bind");
        let addr = acceptor.local_addr()[0].as_socket_addr().copied().expect("socket addr");
        let stop = Shutdown::new();
        tokio::spawn(switchyard_api::serve(acceptor, state, stop.clone(), Duration::from_secs(1)));
        let http = reqwest::Client::builder().no_proxy().build().expect("client");
        setup.disarm();
        TestEnv { config, pool, queue, base: format!("http://{addr}"), http, stop, scratch, _connections: connections }
    }

    /// A worker like a worker process would run, on this test's database and prefix.
    pub fn worker(&self) -> switchyard_worker::Worker {
        let opts = switchyard_worker::WorkerOptions::from_config(&self.config).expect("worker options");
        switchyard_worker::Worker::new(self.pool.clone(), self.new_queue(), opts).expect("worker")
    }

    pub fn scheduler(&self) -> switchyard_scheduler::Scheduler {
        let opts = switchyard_scheduler::SchedulerOptions::from_config(&self.config);
        let wake_ups = queue::Redis::open(&self.config.redis_url).expect("redis url").pubsub_client();
        switchyard_scheduler::Scheduler::new(self.pool.clone(), self.new_queue(), wake_ups, opts).expect("scheduler")
    }

    /// Runs a worker loop until the returned token is cancelled (or the test ends).
    pub fn spawn_worker(&self) -> Shutdown {
        let stop = self.stop.child_token();
        let w = self.worker();
        let s = stop.clone();
        tokio::spawn(async move { w.run(s).await });
        stop
    }

    pub fn spawn_scheduler(&self) -> Shutdown {
        let stop = self.stop.child_token();
        let sched = self.scheduler();
        let s = stop.clone();
        tokio::spawn(async move { sched.run(s, Duration::from_secs(2)).await });
        stop
    }

    /// The environment a separate `switchyard` process needs to join this test.
    pub fn process_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("DATABASE_URL", self.config.database_url.clone()),
            ("REDIS_URL", self.config.redis_url.clone()),
            ("REDIS_KEY_PREFIX", self.config.redis_key_prefix.clone()),
            ("QUEUE_PARTITIONS", self.config.queue_partitions.to_string()),
            ("JWT_SIGNING_KEY", "test-jwt-signing-key-0123456789abcdef".into()),
            ("SECRETS_KEY", self.config.secrets_key.as_ref().map_or(String::new(), |k| k.expose().to_string())),
            ("LEASE_SECS", self.config.lease.as_secs().to_string()),
            ("RUST_LOG", "warn".into()),
        ]
    }

    /// A second queue handle on the same prefix (as another process would have).
    pub fn new_queue(&self) -> Queue {
        Queue::from_config(&self.config).expect("redis url")
    }

    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_with(self.http.request(method, format!("{}{}", self.base, path)).bearer_auth(SECRET), body).await
    }

    /// A call with the internal secret on behalf of a person (`X-Actor-Id`).
    pub async fn call_as_actor(&self, actor: &str, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let req =
            self.http.request(method, format!("{}{}", self.base, path)).bearer_auth(SECRET).header("X-Actor-Id", actor);
        self.call_with(req, body).await
    }

    /// Sends `req` with `body` as JSON and returns the status and the
    /// answer (parsed JSON, the text as a string if it is not JSON, null
    /// if empty): every call helper of the tests goes through here.
    pub async fn call_with(&self, mut req: reqwest::RequestBuilder, body: Option<Value>) -> (u16, Value) {
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        // A live stream's body lasts as long as what it follows: its
        // status is the answer (tests that read streams use support::sse).
        let streaming =
            resp.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        if streaming {
            return (status, Value::Null);
        }
        let text = resp.text().await.unwrap_or_default();
        let v = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        (status, v)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(Method::GET, path, None).await
    }
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(Method::POST, path, Some(body)).await
    }
    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(Method::PATCH, path, Some(body)).await
    }
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.call(Method::DELETE, path, None).await
    }

    pub async fn project(&self) -> String {
        let (s, v) = self.post("/v1/projects", json!({"name": "acme"})).await;
        assert_eq!(s, 201, "{v}");
        v["id"].as_str().unwrap().to_string()
    }

    /// A job in a new project, pointing at `endpoint`, with `extra` fields.
    pub async fn job(&self, endpoint: &str, extra: Value) -> Value {
        let project = self.project().await;
        self.job_in(&project, endpoint, extra).await
    }

    pub async fn job_in(&self, project: &str, endpoint: &str, extra: Value) -> Value {
        let mut body = json!({"project_id": project, "name": "send email", "endpoint_url": endpoint});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        let (s, v) = self.post("/v1/jobs", body).await;
        assert_eq!(s, 201, "{v}");
        v
    }

    pub async fn trigger(&self, job_id: &str, body: Value) -> Value {
        let (s, v) = self.post(&format!("/v1/jobs/{job_id}/trigger"), body).await;
        assert_eq!(s, 201, "{v}");
        v
    }

    /// The statuses a run went through, oldest first, as its history
    /// (view `job_run_transitions`, stored and derived) records them.
    pub async fn transition_path(&self, run_id: &str) -> Vec<String> {
        sqlx::query_scalar("SELECT to_status FROM job_run_transitions WHERE run_id = $1 ORDER BY at, seq, sub")
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }

    pub async fn run(&self, run_id: &str) -> Value {
        let (s, v) = self.get(&format!("/v1/runs/{run_id}")).await;
        assert_eq!(s, 200, "{v}");
        v
    }

    /// Polls the run until `pred` holds or `timeout` passes (then panics
    /// with the last state seen).
    pub async fn wait_run(&self, run_id: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let v = self.run(run_id).await;
            if pred(&v) {
                return v;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("run {run_id} did not reach the expected state in {timeout:?}; last: {v:#}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn wait_status(&self, run_id: &str, status: &str, timeout: Duration) -> Value {
        self.wait_run(run_id, timeout, |v| v["status"] == status).await
    }

    /// Every Redis key of this test's prefix.
    pub async fn redis_keys(&self) -> Vec<String> {
        let mut c = self.queue.conn().await.expect("redis");
        let pattern = format!("{}:*", self.config.redis_key_prefix);
        redis::cmd("KEYS").arg(pattern).query_async(&mut c).await.expect("keys")
    }

    /// Loses this test's Redis data, as a flushed or restarted Redis would.
    pub async fn wipe_redis(&self) {
        let keys = self.redis_keys().await;
        if keys.is_empty() {
            return;
        }
        let mut c = self.queue.conn().await.expect("redis");
        let _: () = redis::cmd("DEL").arg(keys).query_async(&mut c).await.expect("del");
    }

    /// ZCARD of one of the queue's sets, summed over its partitions.
    pub async fn zcard_all(&self, set: impl Fn(&queue::Keys) -> &String) -> u64 {
        let mut n = 0;
        for k in self.queue.partitions() {
            n += self.zcard(set(k)).await;
        }
        n
    }

    pub async fn zcard(&self, key: &str) -> u64 {
        let mut c = self.queue.conn().await.expect("redis");
        redis::cmd("ZCARD").arg(key).query_async(&mut c).await.expect("zcard")
    }
}

impl Drop for TestEnv {
    /// Stops what the test started, then removes its database and keys.
    fn drop(&mut self) {
        self.stop.cancel();
        self.scratch.remove_now();
    }
}

/// Asserts a problem+json answer with the status, and returns it. A call
/// names the status twice (`status` before the request, `want` after it,
/// so either reads on its own); both are checked to agree, so neither
/// reads as a check that is not made.
pub fn assert_problem(status: u16, got: (u16, Value), want: u16) -> Value {
    let (s, v) = got;
    assert_eq!(s, want, "expected {want}, got {s}: {v}");
    assert_eq!(v["status"], json!(want), "problem body carries the status: {v}");
    assert!(v["title"].is_string(), "problem body has a title: {v}");
    assert_eq!(status, want, "the call names two different statuses");
    v
}
