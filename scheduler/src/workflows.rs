//! The workflow engine's loop: advances workflow runs when something
//! happens to them, and when a sleep or a deadline of theirs comes due.
//!
//! The common moves do not come here: a trigger and a step's job-run
//! outcome recorded by the worker make their pass in their own transaction
//! (`store::step_outcomes`). Every other event, and a run another process
//! held at that moment, writes a `workflow_outbox` row whose insert
//! notifies the Postgres channel `switchyard_workflows` with the run's id
//! at commit; so does a pass elsewhere that leaves a run a new wake-up
//! time. It does not poll for events: a listener task forwards the ids,
//! and each is advanced at once (`store::workflow_engine::advance`), at most
//! `parallel` at a time, one at a time per run. Between events the loop
//! sleeps until the earliest `wake_at` of any run (a sleeping step's end,
//! a run's deadline), at most `max_sleep`; a sweep then advances every run
//! with outbox rows or a due wake-up, which also covers notifications lost
//! while the listener reconnected, and runs left by a process that died.
//!
//! Several schedulers may run: all hear every notification, the first to
//! lock a run advances it and the others skip it (`SKIP LOCKED`). An event
//! that commits while a process holds the run is either seen by that
//! advance or left in the outbox; its notification comes after its commit,
//! so the holder hears it too: heard while the run is still being advanced
//! here, it marks the run to be advanced again when the advance ends, and
//! heard after, it starts an advance of its own. Nothing waits for the next
//! sweep, and no pass asks Postgres whether more came.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::ids::WorkflowRunId;
use switchyard_shared::queue::Queue;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::workflow_engine::{self, Advanced, Versions};
use tokio::sync::{mpsc, Notify, Semaphore};

use crate::error::{check_batch, check_positive, Error, OptionsError};
use crate::pace;

/// The channel the outbox's insert trigger notifies (migration 0010).
pub use workflow_engine::CHANNEL;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkflowOptions {
    /// Longest sleep between sweeps (default 10 s): bounds how late a
    /// run is when its notification was lost.
    pub max_sleep: Duration,
    /// Runs advanced at once (default 4).
    pub parallel: usize,
    /// Runs a sweep looks at (default 500); a full sweep is followed by
    /// another at once.
    pub batch_size: usize,
}

impl Default for WorkflowOptions {
    fn default() -> Self {
        WorkflowOptions { max_sleep: Duration::from_secs(10), parallel: 4, batch_size: 500 }
    }
}

impl WorkflowOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("workflows.max_sleep", self.max_sleep)?;
        check_batch("workflows.parallel", self.parallel)?;
        check_batch("workflows.batch_size", self.batch_size)
    }
}

/// What a sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub runs_advanced: usize,
    pub steps_started: usize,
    pub runs_ended: usize,
}

#[derive(Clone)]
pub struct WorkflowEngine {
    pool: PgPool,
    queue: Queue,
    opts: WorkflowOptions,
    /// Runs being advanced by this process, each with whether an event
    /// was heard for it meanwhile (it is advanced again when the advance ends).
    busy: Arc<Mutex<HashMap<WorkflowRunId, bool>>>,
    slots: Arc<Semaphore>,
    /// When the loop means to sweep next; an advance that leaves a run
    /// due sooner rings `sooner`.
    next_sweep: Arc<Mutex<Option<DateTime<Utc>>>>,
    sooner: Arc<Notify>,
    versions: Arc<Versions>,
}

/// What the listener tells the loop.
enum Heard {
    Run(String),
    /// The listener (re)connected: notifications may have been missed.
    Sweep,
}

impl WorkflowEngine {
    pub fn new(pool: PgPool, queue: Queue, opts: WorkflowOptions) -> Result<WorkflowEngine, OptionsError> {
        opts.validate()?;
        let slots = Arc::new(Semaphore::new(opts.parallel));
        Ok(WorkflowEngine {
            pool,
            queue,
            opts,
            busy: Arc::default(),
            slots,
            next_sweep: Arc::default(),
            sooner: Arc::default(),
            versions: Arc::default(),
        })
    }

    /// Advances one run now, then again while events were heard for it
    /// meanwhile. When this process is already advancing it, marks it to be
    /// advanced again and returns `idle`.
    pub async fn advance_run(&self, run_id: &str) -> Result<Advanced, Error> {
        {
            let mut busy = self.busy.lock().expect("busy set");
            if let Some(again) = busy.get_mut(run_id) {
                *again = true;
                return Ok(Advanced { idle: true, ..Default::default() });
            }
            busy.insert(run_id.into(), false);
        }
        let mut total = Advanced { idle: true, ..Default::default() };
        loop {
            let a = match workflow_engine::advance(&self.pool, &self.queue, &self.versions, &run_id.into(), Utc::now())
                .await
            {
                Ok(a) => a,
                Err(e) => {
                    self.busy.lock().expect("busy set").remove(run_id);
                    return Err(e.into());
                }
            };
            total.idle &= a.idle;
            total.steps_started += a.steps_started;
            total.job_runs_enqueued += a.job_runs_enqueued;
            total.ended = a.ended.or(total.ended);
            total.wake_at = a.wake_at.or(total.wake_at);
            if let Some(t) = a.wake_at {
                let planned = *self.next_sweep.lock().expect("next sweep");
                if planned.is_none_or(|p| t < p) {
                    self.sooner.notify_one();
                }
            }
            // Again if an event was heard meanwhile; otherwise leave the
            // busy set, so that one heard after this starts its own advance.
            let mut busy = self.busy.lock().expect("busy set");
            match busy.get_mut(run_id) {
                Some(again) if *again => *again = false,
                _ => {
                    busy.remove(run_id);
                    return Ok(total);
                }
            }
        }
    }

    /// Advances every run with outbox rows or a due wake-up (tests step the
    /// engine with this).
    pub async fn sweep_once(&self) -> Result<SweepReport, Error> {
        let mut report = SweepReport::default();
        loop {
            let ids = workflow_engine::runs_with_work(&self.pool, Utc::now(), self.opts.batch_size as i64).await?;
            let full = ids.len() >= self.opts.batch_size;
            for id in &ids {
                let a = self.advance_run(id).await?;
                if !a.idle {
                    report.runs_advanced += 1;
                }
                report.steps_started += a.steps_started;
                report.runs_ended += usize::from(a.ended.is_some());
            }
            if !full || report.runs_advanced == 0 {
                return Ok(report);
            }
        }
    }

    /// Advances in the background, at most `parallel` at once.
    fn spawn_advance(&self, run_id: String) {
        let this = self.clone();
        tokio::spawn(async move {
            let Ok(_slot) = this.slots.clone().acquire_owned().await else { return };
            if let Err(e) = this.advance_run(&run_id).await {
                tracing::warn!(workflow_run_id = %run_id, error = %e, "advancing a workflow run failed; the next sweep retries it");
            }
        });
    }

    /// Listens, advances and sweeps until shutdown (see the module doc).
    pub async fn run(&self, shutdown: Shutdown) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let listener = tokio::spawn(listen(self.pool.clone(), tx, shutdown.clone()));
        let mut failures = 0u32;
        // Every turn starts with a sweep: at start, at a wake-up time, and
        // after the listener (re)connected.
        loop {
            match self.sweep_once().await {
                Ok(_) => failures = 0,
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, "workflow sweep failed");
                    if !pace::sleep(pace::error_backoff(failures), &shutdown).await {
                        break;
                    }
                    continue;
                }
            }
            let sleep = match workflow_engine::next_wake(&self.pool).await {
                Ok(Some(t)) => (t - Utc::now()).to_std().unwrap_or(Duration::ZERO).min(self.opts.max_sleep),
                _ => self.opts.max_sleep,
            };
            *self.next_sweep.lock().expect("next sweep") =
                Some(Utc::now() + chrono::Duration::from_std(sleep).unwrap_or(chrono::Duration::zero()));
            let deadline = tokio::time::sleep(sleep);
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => {
                        listener.abort();
                        return;
                    }
                    _ = &mut deadline => break,
                    // A run is due before the planned sweep: plan again.
                    _ = self.sooner.notified() => break,
                    heard = rx.recv() => match heard {
                        Some(Heard::Run(id)) => self.spawn_advance(id),
                        Some(Heard::Sweep) => break,
                        None => {
                            // The listener ended (shutdown): nothing more comes.
                            let _ = pace::sleep(self.opts.max_sleep, &shutdown).await;
                            return;
                        }
                    },
                }
            }
        }
    }
}

/// Forwards the run ids notified on [`CHANNEL`], reconnecting after a loss
/// (and asking for a sweep, since notifications sent meanwhile are gone).
async fn listen(pool: PgPool, tx: mpsc::UnboundedSender<Heard>, shutdown: Shutdown) {
    loop {
        let Some(mut l) = pace::listener(&pool, CHANNEL, "workflow", &shutdown).await else { return };
        if tx.send(Heard::Sweep).is_err() {
            return;
        }
        loop {
            match l.try_recv().await {
                Ok(Some(n)) => {
                    if tx.send(Heard::Run(n.payload().to_string())).is_err() {
                        return;
                    }
                }
                // The connection was lost and made again: sweep.
                Ok(None) => {
                    if tx.send(Heard::Sweep).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "workflow listener lost its connection");
                    break;
                }
            }
        }
    }
}
