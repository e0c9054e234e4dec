//! The Switchyard scheduler: the background loops that move runs through
//! time and keep Redis in step with Postgres.
//!
//! - [`promoter`]: due retries and delayed runs, `scheduled` -> `ready`,
//!   after their runs are `queued` in Postgres.
//! - [`reaper`]: expired leases; the runs of dead or stalled workers are
//!   redelivered on the same attempt.
//! - [`reconciler`]: rebuilds Redis from Postgres (limits, missing entries,
//!   runs whose lease vanished), periodically and as soon as Redis is empty.
//! - [`heartbeats`]: async runs whose SDK heartbeats stopped are timed out
//!   and retried by their policy.
//! - [`cron`]: fires the runs of jobs with a `cron` schedule, once per tick
//!   however many schedulers run (policies for missed ticks and
//!   daylight-saving changes in its doc).
//! - [`dependencies`]: releases runs whose `depends_on` runs completed, or
//!   fails them (`dependency_failed`) when one did not.
//! - [`expirer`]: runs not started within their job's run_ttl_secs become
//!   `expired`.
//! - [`batches`]: makes the run of each trigger batch whose time is up.
//! - [`pruner`]: deletes finished work older than its project's
//!   `retention_days`, in small batches.
//! - [`rollup`]: once a minute, folds what ended into the reports'
//!   rollups and samples the queues (analytics, usage, queue history).
//! - [`deliveries`]: sends the notification outbox (terminal webhooks,
//!   subscription events) with each kind's retries.
//! - [`drains`]: ships the new run log lines of each log drain to its
//!   receiver as NDJSON, with a cursor per drain and a backlog cap.
//! - [`gauges`]: counts the queued runs of every job, and the oldest one's
//!   wait, into the `svc_queue_*` gauges that dashboards and autoscalers read.
//! - [`workflows`]: the workflow engine's loop: advances a workflow run as
//!   soon as Postgres notifies an event of it, and at its sleeps' ends and
//!   deadline.
//! - [`placement`]: the rule, shared by reaper and reconciler, for where a
//!   run's entry belongs given its Postgres row.
//! - [`pace`]: the clock, shutdown-aware sleeps, error back-off and the
//!   loop drivers.
//! - [`alarm`], [`wake`]: how a sleeping loop is woken: one Redis pub/sub
//!   subscription per process rings the alarm of the loop a message names.
//! - [`error`]: the crate's error type and option validation errors.
//!
//! Each loop is one type with validated options (interval, batch size), a
//! public single-step method for tests, and a `run(shutdown)` loop;
//! `Scheduler::loops` is the one list of them, by name, that
//! `Scheduler::run` starts and waits for. All are
//! safe with any number of scheduler processes: the promoter and reaper by
//! idempotence and atomic Redis scripts, the reconciler by a Redis lock.
//!
//! Idle costs little. The promoter, reaper and reconciler look at Redis
//! about once a second and touch Postgres only when Redis shows work (the
//! reconciler's periodic sweep aside). The expirer, heartbeat sweep,
//! dependency resolver and cron enqueuer sleep until the earliest deadline
//! of what they watch, at most `max_sleep` (30 s), and are woken sooner by
//! the wake-ups the api and workers publish when they make such work
//! (`switchyard_shared::queue::wake`). With nothing to do, a scheduler
//! issues a few Postgres statements per `max_sleep`.
//!
//! Execution windows are applied where runs become due: by the api at
//! trigger, the cron enqueuer and the dependency resolver when they admit a
//! run, and the promoter for every delayed or retried run.
//!
//! [`run`] is what the `switchyard-scheduler` binary and `switchyard dev`
//! call; tests build a [`Scheduler`] from a pool and a queue and step it.

pub mod alarm;
pub mod batches;
pub mod cron;
pub mod deliveries;
pub mod dependencies;
pub mod drains;
pub mod error;
pub mod expirer;
pub mod gauges;
pub mod heartbeats;
pub mod pace;
pub mod placement;
pub mod promoter;
pub mod pruner;
pub mod reaper;
pub mod reconciler;
pub mod rollup;
pub mod wake;
pub mod workflows;

use std::time::Duration;

use anyhow::Context;
use futures::future::{BoxFuture, FutureExt};
use sqlx::PgPool;
use switchyard_shared::queue::Queue;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::{db, Config};

pub use batches::{BatchCloser, BatchOptions};
pub use cron::{CronEnqueuer, CronOptions, CronReport};
pub use deliveries::{DeliveryOptions, DeliverySender, SendReport};
pub use dependencies::{DependencyOptions, DependencyResolver, ResolveReport};
pub use drains::{DrainOptions, DrainReport, DrainSender};
pub use error::{Error, OptionsError};
pub use expirer::{Expirer, ExpirerOptions};
pub use gauges::{GaugeOptions, GaugeReport, QueueGauges};
pub use heartbeats::{HeartbeatOptions, HeartbeatReport, HeartbeatSweeper};
pub use promoter::{PromoteReport, Promoter, PromoterOptions};
pub use pruner::{PruneReport, Pruner, PrunerOptions};
pub use reaper::{ReapReport, Reaper, ReaperOptions};
pub use reconciler::{ReconcileReport, Reconciler, ReconcilerOptions};
pub use rollup::{Rollup, RollupOptions};
pub use workflows::{SweepReport, WorkflowEngine, WorkflowOptions};

/// Options of every loop.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerOptions {
    pub promoter: PromoterOptions,
    pub reaper: ReaperOptions,
    pub reconciler: ReconcilerOptions,
    pub heartbeats: HeartbeatOptions,
    pub cron: CronOptions,
    pub dependencies: DependencyOptions,
    pub expirer: ExpirerOptions,
    pub batches: BatchOptions,
    pub pruner: PrunerOptions,
    pub workflows: WorkflowOptions,
    pub deliveries: DeliveryOptions,
    pub drains: DrainOptions,
    pub gauges: GaugeOptions,
    pub rollup: RollupOptions,
}

impl SchedulerOptions {
    /// The defaults, with the lease and reconcile interval of `config`.
    pub fn from_config(config: &Config) -> SchedulerOptions {
        SchedulerOptions {
            reconciler: ReconcilerOptions {
                interval: config.reconcile_interval,
                lease: config.lease,
                ..ReconcilerOptions::default()
            },
            deliveries: DeliveryOptions {
                deny_private: config.target_deny_private,
                hold: config.delivery_claim,
                secrets_key: config.secrets_key.clone(),
                ..DeliveryOptions::default()
            },
            drains: DrainOptions {
                deny_private: config.target_deny_private,
                secrets_key: config.secrets_key.clone(),
                ..DrainOptions::default()
            },
            ..SchedulerOptions::default()
        }
    }
}

/// The scheduler's loops over one Postgres pool and one queue.
#[derive(Clone)]
pub struct Scheduler {
    promoter: Promoter,
    reaper: Reaper,
    reconciler: Reconciler,
    heartbeats: HeartbeatSweeper,
    cron: CronEnqueuer,
    dependencies: DependencyResolver,
    expirer: Expirer,
    batches: BatchCloser,
    pruner: Pruner,
    workflows: WorkflowEngine,
    deliveries: DeliverySender,
    drains: DrainSender,
    gauges: QueueGauges,
    rollup: Rollup,
    /// The Redis server of `queue`, for the wake-up subscription (a pub/sub
    /// connection cannot come from the queue's pool).
    redis: redis::Client,
    wake_channel: String,
}

impl Scheduler {
    /// `redis` must name the server of `queue`: the loops are woken through it.
    pub fn new(
        pool: PgPool,
        queue: Queue,
        redis: redis::Client,
        options: SchedulerOptions,
    ) -> Result<Scheduler, OptionsError> {
        Ok(Scheduler {
            promoter: Promoter::new(pool.clone(), queue.clone(), options.promoter)?,
            reaper: Reaper::new(pool.clone(), queue.clone(), options.reaper)?,
            heartbeats: HeartbeatSweeper::new(pool.clone(), queue.clone(), options.heartbeats)?,
            cron: CronEnqueuer::new(pool.clone(), queue.clone(), options.cron)?,
            dependencies: DependencyResolver::new(pool.clone(), queue.clone(), options.dependencies)?,
            expirer: Expirer::new(pool.clone(), queue.clone(), options.expirer)?,
            batches: BatchCloser::new(pool.clone(), queue.clone(), options.batches)?,
            pruner: Pruner::new(pool.clone(), queue.clone(), options.pruner)?,
            workflows: WorkflowEngine::new(pool.clone(), queue.clone(), options.workflows)?,
            deliveries: DeliverySender::new(pool.clone(), options.deliveries)?,
            drains: DrainSender::new(pool.clone(), options.drains)?,
            gauges: QueueGauges::new(pool.clone(), options.gauges)?,
            rollup: Rollup::new(pool.clone(), options.rollup)?,
            redis,
            wake_channel: queue.keys().wake.clone(),
            reconciler: Reconciler::new(pool, queue, options.reconciler)?,
        })
    }

    /// The alarms of the loops that sleep until woken.
    pub fn alarms(&self) -> wake::Alarms {
        wake::Alarms {
            expirer: self.expirer.alarm().clone(),
            heartbeats: self.heartbeats.alarm().clone(),
            dependencies: self.dependencies.alarm().clone(),
            cron: self.cron.alarm().clone(),
            batches: self.batches.alarm().clone(),
        }
    }

    pub fn promoter(&self) -> &Promoter {
        &self.promoter
    }

    pub fn reaper(&self) -> &Reaper {
        &self.reaper
    }

    pub fn reconciler(&self) -> &Reconciler {
        &self.reconciler
    }

    pub fn heartbeats(&self) -> &HeartbeatSweeper {
        &self.heartbeats
    }

    /// One heartbeat sweep at `now`.
    pub async fn sweep_heartbeats_once(&self, now: chrono::DateTime<chrono::Utc>) -> Result<HeartbeatReport, Error> {
        self.heartbeats.sweep_once(now).await
    }

    /// Runs the workflow engine on its own pool (see `run`).
    pub fn with_engine_pool(
        mut self,
        pool: PgPool,
        queue: Queue,
        options: WorkflowOptions,
    ) -> Result<Self, OptionsError> {
        self.workflows = WorkflowEngine::new(pool, queue, options)?;
        Ok(self)
    }

    pub fn deliveries(&self) -> &DeliverySender {
        &self.deliveries
    }

    pub fn workflows(&self) -> &WorkflowEngine {
        &self.workflows
    }

    pub fn drains(&self) -> &DrainSender {
        &self.drains
    }

    pub fn gauges(&self) -> &QueueGauges {
        &self.gauges
    }

    pub fn cron(&self) -> &CronEnqueuer {
        &self.cron
    }

    /// One cron pass at `now`.
    pub async fn cron_once(&self, now: chrono::DateTime<chrono::Utc>) -> Result<CronReport, Error> {
        self.cron.tick_once(now).await
    }

    /// One dependency resolution batch at `now`.
    pub async fn resolve_dependencies_once(&self, now: chrono::DateTime<chrono::Utc>) -> Result<ResolveReport, Error> {
        self.dependencies.resolve_once(now).await
    }

    /// One retention pass over every project (without the lock).
    pub async fn prune_once(&self) -> Result<PruneReport, Error> {
        self.pruner.prune_once().await
    }

    /// One analytics rollup pass now (`rollup`).
    pub async fn roll_up_once(&self) -> Result<switchyard_shared::store::analytics::RollupReport, Error> {
        self.rollup.roll_up_once().await
    }

    /// One pass of the batch closer at `now`; returns how many runs it made.
    pub async fn close_batches_once(&self, now: chrono::DateTime<chrono::Utc>) -> Result<usize, Error> {
        self.batches.close_once(now).await
    }

    /// One expiry batch at `now`; returns how many runs expired.
    pub async fn expire_once(&self, now: chrono::DateTime<chrono::Utc>) -> Result<usize, Error> {
        self.expirer.expire_once(now).await
    }

    /// One promoter pass at `now_ms`.
    pub async fn promote_once(&self, now_ms: i64) -> Result<PromoteReport, Error> {
        self.promoter.promote_once(now_ms).await
    }

    /// One reaper pass at `now_ms`.
    pub async fn reap_once(&self, now_ms: i64) -> Result<ReapReport, Error> {
        self.reaper.reap_once(now_ms).await
    }

    /// One full reconciliation sweep now, whether or not another process
    /// holds the reconcile lock (a sweep is idempotent; the lock only keeps
    /// the loops from repeating each other's work).
    pub async fn reconcile_once(&self) -> Result<ReconcileReport, Error> {
        self.reconciler.sweep(chrono::Utc::now()).await
    }

    /// Every loop of this scheduler, by name, each started on `shutdown`:
    /// the one list [`run`](Self::run) drives. A loop is added to the
    /// scheduler by giving it a field, its options a field of
    /// [`SchedulerOptions`], and a line here.
    fn loops<'a>(&'a self, shutdown: &Shutdown) -> Vec<(&'static str, BoxFuture<'a, ()>)> {
        let s = || shutdown.clone();
        vec![
            ("wake-ups", wake::listen(self.redis.clone(), self.wake_channel.clone(), self.alarms(), s()).boxed()),
            ("promoter", self.promoter.run(s()).boxed()),
            ("reaper", self.reaper.run(s()).boxed()),
            ("reconciler", self.reconciler.run(s()).boxed()),
            ("heartbeats", self.heartbeats.run(s()).boxed()),
            ("cron", self.cron.run(s()).boxed()),
            ("dependencies", self.dependencies.run(s()).boxed()),
            ("expirer", self.expirer.run(s()).boxed()),
            ("batches", self.batches.run(s()).boxed()),
            ("pruner", self.pruner.run(s()).boxed()),
            ("workflows", self.workflows.run(s()).boxed()),
            ("deliveries", self.deliveries.run(s()).boxed()),
            ("drains", self.drains.run(s()).boxed()),
            ("gauges", self.gauges.run(s()).boxed()),
            ("rollup", self.rollup.run(s()).boxed()),
        ]
    }

    /// Runs every loop until `shutdown` fires, then waits up to `grace` for
    /// them to finish the step they are in. Returns the names of the loops
    /// that did not (and logs them): empty when every loop stopped.
    pub async fn run(&self, shutdown: Shutdown, grace: Duration) -> Vec<&'static str> {
        let loops = self.loops(&shutdown);
        let names: Vec<&'static str> = loops.iter().map(|(name, _)| *name).collect();
        let running = std::sync::Mutex::new(names.iter().copied().collect::<std::collections::BTreeSet<_>>());
        let all = futures::future::join_all(loops.into_iter().map(|(name, l)| {
            let running = &running;
            async move {
                l.await;
                running.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
                tracing::debug!(scheduler_loop = name, "stopped");
            }
        }));
        tracing::debug!(loops = ?names, "scheduler loops started");
        tokio::select! {
            _ = all => Vec::new(),
            _ = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
                let left: Vec<&'static str> = running.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect();
                tracing::warn!(?grace, loops = ?left, "scheduler loops did not stop within the grace period");
                left
            }
        }
    }
}

/// Connects to Postgres and Redis (lazily: either may come up later) and
/// runs the scheduler until `shutdown` fires. The database must exist and be
/// migrated (`db::prepare`).
pub async fn run(config: Config, shutdown: Shutdown) -> anyhow::Result<()> {
    // The delivery sender's listener holds one of these connections.
    let pool = db::lazy_pool(&config.database_url, 6).context("postgres pool")?;
    let queue = Queue::from_config(&config).context("redis url")?;
    let wake_ups = queue.redis().pubsub_client();
    let options = SchedulerOptions::from_config(&config);
    // The workflow engine reaches every row by id or by a narrow index, like
    // the worker, so it gets the worker's plan settings (db::worker_pool):
    // with sequential scans allowed, a plan made while the tables looked
    // empty kept scanning them whole (measured by the benchmark's phase w).
    let engine_pool = db::worker_pool(&config.database_url, 6).context("postgres pool")?;
    let scheduler = Scheduler::new(pool.clone(), queue.clone(), wake_ups, options.clone())
        .and_then(|s| s.with_engine_pool(engine_pool.clone(), queue, options.workflows))
        .context("scheduler options")?;
    tracing::info!(prefix = %config.redis_key_prefix, "scheduler started");
    scheduler.run(shutdown, config.shutdown_grace).await;
    pool.close().await;
    engine_pool.close().await;
    tracing::info!("scheduler stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_config() {
        let mut c = Config::defaults();
        c.lease = Duration::from_secs(7);
        c.reconcile_interval = Duration::from_secs(11);
        let o = SchedulerOptions::from_config(&c);
        assert_eq!(o.reconciler.lease, Duration::from_secs(7));
        assert_eq!(o.reconciler.interval, Duration::from_secs(11));
        assert_eq!(o.promoter, PromoterOptions::default());
    }
}
