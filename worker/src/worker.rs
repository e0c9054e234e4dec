//! The worker's main loop: take entries from the queue while there is room,
//! dispatch each in its own task, and stop in order.
//!
//! Capacity is a semaphore of `concurrency` permits, one per dispatch in
//! flight. The loop only dequeues as many entries as there are free permits
//! (at most [`MAX_BATCH`] per call), so a leased entry never waits inside
//! this process for a slot. Once a dequeue returns fewer entries than it
//! asked for, the loop blocks on the queue's wake-up list (for up to a
//! second) instead of polling.
//!
//! Shutdown: stop dequeuing, give in-flight dispatches `shutdown_grace` to
//! finish, then abort the rest and hand each back to the queue so another
//! worker redelivers the same attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use switchyard_shared::ids::RunId;
use switchyard_shared::outbound::Http;
use switchyard_shared::queue::{Entry, Queue};
use switchyard_shared::run_token::TokenSigner;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::group::GroupCommit;
use switchyard_shared::store::workflow_engine::Versions;
use switchyard_shared::store::{runs, step_outcomes};
use switchyard_shared::telemetry::{DEQUEUE_DURATION, WORKER_POOL_QUEUED};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{Id, JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::WorkerError;
use crate::leases::{self, InFlight};
use crate::specs::SpecCache;
use crate::{attempt, now_ms, record, WorkerOptions};

/// Most entries taken by one dequeue call: bounds the script's run time in
/// Redis, which blocks every other client meanwhile.
pub const MAX_BATCH: usize = 64;
/// Longest idle wait on the wake-up list before looking at the queue again
/// (entries parked by caps come back without a wake-up).
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// Pause after a Redis error, so an outage is not a busy loop of errors.
const REDIS_BACKOFF: Duration = Duration::from_millis(500);
/// How often `svc_worker_pool_queued` is refreshed.
const QUEUED_GAUGE_EVERY: Duration = Duration::from_secs(5);

/// Dequeues runs and dispatches them. Cheap to clone: clones share one pool
/// of connections, one in-flight registry and one spec cache.
#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    pub(crate) queue: Queue,
    pub(crate) opts: WorkerOptions,
    pub(crate) http: Http,
    pub(crate) signer: TokenSigner,
    pub(crate) specs: SpecCache,
    pub(crate) secrets: Option<switchyard_shared::secrets::SecretsKey>,
    pub(crate) inflight: InFlight,
    /// Reads are grouped: the dispatch tasks of one dequeued batch read
    /// their runs together in one statement.
    pub(crate) loader: Loader,
    /// Outcomes are group-committed the same way, and so are the `running`
    /// marks of long attempts.
    pub(crate) finisher: Finisher,
    pub(crate) marker: Marker,
    /// Acks are grouped into one script call the same way.
    pub(crate) acker: Acker,
}

pub(crate) type Loader = GroupCommit<RunId, Option<switchyard_shared::store::runs::Loaded>>;
pub(crate) type Marker = GroupCommit<(RunId, i64, chrono::DateTime<chrono::Utc>), bool>;
/// An entry to ack and its retry time; a failed batch fails with Redis's error.
pub(crate) type Acker = GroupCommit<(Entry, Option<i64>), (), switchyard_shared::queue::QueueError>;
pub(crate) type Finisher = GroupCommit<(RunId, i64, switchyard_shared::store::Outcome), bool>;

/// Writes a group of outcomes. A group that ends a workflow step's job run
/// moves the workflow run on in the same transaction
/// (`store::step_outcomes`); should that fail, the outcomes are written the
/// plain way, and the scheduler moves the runs on from their outbox rows.
async fn finish(
    pool: &PgPool,
    queue: &Queue,
    versions: &Versions,
    items: Vec<(RunId, i64, switchyard_shared::store::Outcome)>,
) -> Result<Vec<bool>, sqlx::Error> {
    if !items.iter().any(|(_, _, o)| o.workflow_step_run_id.is_some() && o.status.is_terminal()) {
        return runs::finish_many(pool, items).await;
    }
    match step_outcomes::finish_steps(pool, versions, items.clone()).await {
        Ok((recorded, pending)) => {
            step_outcomes::after_commit(queue, pending).await;
            Ok(recorded)
        }
        Err(e) => {
            tracing::warn!(error = %e, "recording step outcomes with their advances failed; recording them alone");
            runs::finish_many(pool, items).await
        }
    }
}

impl Worker {
    pub fn new(pool: PgPool, queue: Queue, opts: WorkerOptions) -> anyhow::Result<Worker> {
        Ok(Worker::build(pool, queue, opts)?)
    }

    fn build(pool: PgPool, queue: Queue, opts: WorkerOptions) -> Result<Worker, WorkerError> {
        if opts.concurrency == 0 {
            return Err(WorkerError::Options("concurrency must be at least 1".into()));
        }
        if opts.lease < Duration::from_millis(30) {
            return Err(WorkerError::Options("lease must be at least 30ms".into()));
        }
        if opts.jwt_key.expose().is_empty() {
            return Err(WorkerError::Options("the run token signing key must not be empty".into()));
        }
        let http = Http::new(opts.concurrency, opts.deny_private).map_err(WorkerError::HttpClient)?;
        let signer = TokenSigner::new(opts.jwt_key.expose().as_bytes());
        let load_pool = pool.clone();
        let loader = Loader::spawn(2, MAX_BATCH, move |ids| {
            let pool = load_pool.clone();
            async move { runs::load_for_dispatch(&pool, ids).await }
        });
        let finish_pool = pool.clone();
        let finish_queue = queue.clone();
        let versions = Arc::new(Versions::default());
        let finisher = Finisher::spawn(2, MAX_BATCH, move |items| {
            let pool = finish_pool.clone();
            let queue = finish_queue.clone();
            let versions = versions.clone();
            async move { finish(&pool, &queue, &versions, items).await }
        });
        let mark_pool = pool.clone();
        let marker = Marker::spawn(1, MAX_BATCH, move |items| {
            let pool = mark_pool.clone();
            async move { runs::mark_running_many(&pool, items).await }
        });
        let ack_queue = queue.clone();
        let acker = Acker::spawn(2, MAX_BATCH, move |items: Vec<(Entry, Option<i64>)>| {
            let queue = ack_queue.clone();
            async move {
                let refs: Vec<_> = items.iter().map(|(e, due)| (e, *due)).collect();
                queue.ack_many(&refs).await?;
                Ok(vec![(); items.len()])
            }
        });
        let secrets = opts.secrets_key.as_ref().map(switchyard_shared::secrets::SecretsKey::from_secret);
        Ok(Worker {
            inner: Arc::new(Inner {
                pool,
                queue,
                opts,
                http,
                signer,
                specs: SpecCache::default(),
                secrets,
                inflight: InFlight::default(),
                loader,
                finisher,
                marker,
                acker,
            }),
        })
    }

    pub fn options(&self) -> &WorkerOptions {
        &self.inner.opts
    }

    /// Dispatches currently in flight in this worker.
    pub fn in_flight(&self) -> usize {
        self.inner.inflight.len()
    }

    /// Runs until `shutdown` fires, then drains (see the module docs).
    pub async fn run(&self, shutdown: Shutdown) -> anyhow::Result<()> {
        let w = &self.inner;
        let background = CancellationToken::new();
        let renew = tokio::spawn({
            let w = Arc::clone(w);
            let stop = background.clone();
            async move { leases::renew_loop(&w.queue, &w.inflight, w.opts.lease, stop).await }
        });
        let gauge = tokio::spawn(report_queued(Arc::clone(w), background.clone()));

        let permits = Arc::new(Semaphore::new(w.opts.concurrency));
        let mut tasks = Dispatches::new(Arc::clone(w));
        while !shutdown.is_cancelled() {
            tasks.settle_finished().await;
            let free = permits.available_permits();
            if free == 0 {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    Some(r) = tasks.set.join_next_with_id() => tasks.settle(r).await,
                }
                continue;
            }
            // Not raced against shutdown: a dequeue cut off after the script
            // ran would strand its leases until the reaper.
            let asked = free.min(MAX_BATCH);
            let started = Instant::now();
            let res = w.queue.dequeue_in_epoch(asked, w.opts.lease, now_ms()).await;
            let took = started.elapsed();
            metrics::histogram!(DEQUEUE_DURATION).record(took.as_secs_f64());
            let drained = match res {
                Ok(entries) => {
                    // Fewer than asked: nothing else could be taken. Whatever
                    // becomes ready from now on leaves a wake-up token, so
                    // wait for one rather than ask again (a dequeue that finds
                    // nothing was one Redis round trip per run at moderate rates).
                    let drained = entries.len() < asked;
                    for (entry, epoch) in entries {
                        tasks.spawn(entry, &epoch, took, Arc::clone(&permits).try_acquire_owned().ok());
                    }
                    drained
                }
                Err(e) => {
                    tracing::warn!(error = %e, "dequeue failed");
                    pause(&shutdown, REDIS_BACKOFF).await;
                    false
                }
            };
            if drained {
                // The blocking pop runs in its own task so shutdown need not
                // cancel it: a BLPOP dropped mid-flight leaves its reply
                // pending on its connection, stalling the next pop.
                let queue = w.queue.clone();
                let wait = tokio::spawn(async move { queue.wait_for_work(IDLE_WAIT).await });
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    r = wait => {
                        if let Ok(Err(e)) = r {
                            tracing::warn!(error = %e, "waiting for work failed");
                            pause(&shutdown, REDIS_BACKOFF).await;
                        }
                    }
                }
            }
        }

        tracing::info!(in_flight = tasks.set.len(), "worker stopping; draining in-flight dispatches");
        let deadline = Instant::now() + w.opts.shutdown_grace;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break,
                r = tasks.set.join_next_with_id() => match r {
                    Some(r) => tasks.settle(r).await,
                    None => break,
                },
            }
        }
        if !tasks.set.is_empty() {
            tracing::warn!(count = tasks.set.len(), "shutdown grace is over; handing unfinished dispatches back");
            tasks.set.abort_all();
            while let Some(r) = tasks.set.join_next_with_id().await {
                tasks.settle(r).await;
            }
        }

        background.cancel();
        let _ = renew.await;
        let _ = gauge.await;
        tracing::info!("worker stopped");
        Ok(())
    }

    /// Dequeues one batch (up to `min(concurrency, 64)` entries), runs every
    /// dispatch of it to the end, and returns how many entries it took. The
    /// deterministic step tests drive.
    pub async fn run_once(&self) -> anyhow::Result<usize> {
        let w = &self.inner;
        let started = Instant::now();
        let entries = w.queue.dequeue_in_epoch(w.opts.concurrency.min(MAX_BATCH), w.opts.lease, now_ms()).await?;
        let took = started.elapsed();
        metrics::histogram!(DEQUEUE_DURATION).record(took.as_secs_f64());
        let n = entries.len();
        if n == 0 {
            return Ok(0);
        }
        let mut tasks = Dispatches::new(Arc::clone(w));
        for (entry, epoch) in entries {
            tasks.spawn(entry, &epoch, took, None);
        }
        let stop = CancellationToken::new();
        let renew = leases::renew_loop(&w.queue, &w.inflight, w.opts.lease, stop.clone());
        let drain = async {
            while let Some(r) = tasks.set.join_next_with_id().await {
                tasks.settle(r).await;
            }
            stop.cancel();
        };
        tokio::join!(renew, drain);
        Ok(n)
    }
}

/// Dispatch tasks and the in-flight slot of each.
struct Dispatches {
    w: Arc<Inner>,
    set: JoinSet<()>,
    keys: HashMap<Id, u64>,
}

impl Dispatches {
    fn new(w: Arc<Inner>) -> Dispatches {
        Dispatches { w, set: JoinSet::new(), keys: HashMap::new() }
    }

    fn spawn(&mut self, entry: Entry, epoch: &str, dequeue: Duration, permit: Option<OwnedSemaphorePermit>) {
        let key = self.w.inflight.insert(entry.clone(), epoch);
        let handle = self.set.spawn(attempt::run(Arc::clone(&self.w), entry, key, dequeue, permit));
        self.keys.insert(handle.id(), key);
    }

    async fn settle_finished(&mut self) {
        while let Some(r) = self.set.try_join_next_with_id() {
            self.settle(r).await;
        }
    }

    /// A dispatch that ended without finishing (aborted at shutdown, or
    /// panicked) still holds its entry: hand it back.
    async fn settle(&mut self, r: Result<(Id, ()), JoinError>) {
        let (id, cut_short) = match r {
            Ok((id, ())) => (id, None),
            Err(e) => (e.id(), Some(e)),
        };
        let held = self.keys.remove(&id).and_then(|k| self.w.inflight.remove(k));
        if let (Some(e), Some(held)) = (cut_short, held) {
            if e.is_panic() {
                tracing::error!(run_id = %held.entry.run_id, "dispatch task panicked; handing the run back");
            }
            record::hand_back(&self.w.pool, &self.w.queue, &held).await;
        }
    }
}

impl Drop for Dispatches {
    /// Dropped with tasks left (a caller gave up on `run_once`): the tasks
    /// are aborted with the set, and their leases must stop being renewed
    /// so that they lapse and the scheduler redelivers.
    fn drop(&mut self) {
        for key in self.keys.values() {
            self.w.inflight.remove(*key);
        }
    }
}

async fn pause(shutdown: &Shutdown, d: Duration) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

async fn report_queued(w: Arc<Inner>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(QUEUED_GAUGE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => match w.queue.depths().await {
                Ok(d) => metrics::gauge!(WORKER_POOL_QUEUED).set(d.ready as f64),
                Err(e) => tracing::debug!(error = %e, "reading queue depths failed"),
            },
        }
    }
}
