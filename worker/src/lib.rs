//! The Switchyard worker: takes runs from the Redis queue, dispatches each
//! to its job's HTTP endpoint, and records what happened in Postgres.
//!
//! The public surface is what the binaries and the integration tests use:
//! [`run`] (a worker process from its [`Config`]), and [`Worker`] with its
//! [`WorkerOptions`] for tests that drive one directly. What the worker shares
//! with the api and the scheduler (the HTTP client, request signing, the
//! notification outbox, the run token, result rules) lives in
//! `switchyard_shared`.
//!
//! The worker sends no webhook itself: the statement that records a
//! terminal outcome also writes the job's terminal webhook into the
//! notification outbox (`webhook_deliveries`), and the scheduler's delivery
//! sender (`scheduler/src/deliveries.rs`) sends it, with its retries.
//!
//! Inside, one module per step:
//!
//! - `worker`: the main loop (capacity, dequeue, idle wait, graceful shutdown) and [`Worker::run_once`].
//! - `attempt`: one entry's life: claim, load the job, dispatch, decide, record (with the outbox row), ack.
//! - `dispatch`: the HTTP call to the job's endpoint, the fallback endpoint, phase timings.
//! - `outcome`: what a response means for the run (completed, retrying, failed, timed_out). Pure.
//! - `leases`: the in-flight registry and lease renewal.
//! - `record`: committing outcomes through Postgres and Redis blips; handing runs back.
//! - `spans`: the spans an attempt leaves in its run's trace.
//! - `specs`: job definitions by version, cached when pinned.
//! - `trace`: the run's `execution_trace`.
//! - `error`: the library's error type.

mod attempt;
mod dispatch;
mod error;
mod leases;
mod outcome;
mod record;
mod spans;
mod specs;
mod trace;
mod worker;

use std::time::Duration;

use anyhow::Context;
use switchyard_shared::config::Secret;
use switchyard_shared::queue::Queue;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::{db, Config};

pub use worker::Worker;

/// What a worker needs beyond its connections.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Dispatches in flight at once.
    pub concurrency: usize,
    /// How long a dequeued entry stays leased without renewal.
    pub lease: Duration,
    /// How long shutdown waits for in-flight dispatches before handing them back.
    pub shutdown_grace: Duration,
    /// HS256 key of run tokens; must match the api's.
    pub jwt_key: Secret,
    /// Refuse targets that resolve to loopback, private or link-local addresses.
    pub deny_private: bool,
    /// Decrypts job secrets for the dispatch body (`SECRETS_KEY`). Without
    /// it, a run of a job that has secrets fails with `secrets_unavailable`.
    pub secrets_key: Option<Secret>,
}

impl WorkerOptions {
    pub fn from_config(c: &Config) -> anyhow::Result<WorkerOptions> {
        let jwt_key =
            c.jwt_signing_key.clone().context("JWT_SIGNING_KEY is not set: the worker signs run tokens with it")?;
        Ok(WorkerOptions {
            concurrency: c.worker_concurrency.max(1),
            lease: c.lease,
            shutdown_grace: c.shutdown_grace,
            jwt_key,
            deny_private: c.target_deny_private,
            secrets_key: c.secrets_key.clone(),
        })
    }
}

/// Builds the connections and a [`Worker`] from `config`, and runs it until
/// `shutdown` fires.
pub async fn run(config: Config, shutdown: Shutdown) -> anyhow::Result<()> {
    let opts = WorkerOptions::from_config(&config)?;
    // Dispatches spend their time waiting on targets; each needs Postgres
    // for three short statements, so a fraction of the concurrency suffices.
    let db_conns = (opts.concurrency / 4 + 2).clamp(4, 32) as u32;
    let pool = db::worker_pool(&config.database_url, db_conns).context("postgres pool")?;
    let queue = Queue::from_config(&config).context("redis url")?;
    tracing::info!(concurrency = opts.concurrency, lease_ms = opts.lease.as_millis() as u64, "worker starting");
    if opts.secrets_key.is_none() {
        tracing::warn!("SECRETS_KEY is not set: runs of jobs that have secrets will fail with secrets_unavailable");
    }
    let worker = Worker::new(pool.clone(), queue, opts)?;
    let res = worker.run(shutdown).await;
    pool.close().await;
    res
}

/// "Now" for the queue's scripts, which take time as an argument.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
