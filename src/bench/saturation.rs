//! Phase (s): workflow saturation. Phase (w)'s 3-step chain `a → b → c`
//! in a closed loop: `--wf-inflight` clients (default 128) each trigger a
//! workflow run and, as soon as it has finished, the next one, so that that
//! many runs are always in flight. After `--wf-warmup` runs have finished,
//! a measured window of `--wf-closed-secs`: workflow runs finished in it
//! per second, CPU µs per workflow run per process, Postgres write
//! transactions and WAL bytes per workflow run, trigger → finished. This is
//! the closed loop of the anchors' workflow peers
//! (`../shared/anchors/workflows/loadgen.js --closed N --warm W --secs S`),
//! so their figures compare one for one.
//!
//! How a client learns its run finished: as phase (w) does, from the run's
//! `finished_at` in Postgres (set in the engine's transaction that ends
//! it). One watcher asks for all the runs in flight at once, every
//! [`POLL`]: a primary-key lookup of at most N ids, not a request per run,
//! and nothing added to the system under test (no trigger, no NOTIFY). Its
//! connection is a backend of the bench database, so its CPU would count
//! as `postgres`: it is measured on its own and moved to `bench`, the load
//! generator's share.
//!
//! Trigger → finished is the wall clock just before the trigger to the
//! run's `finished_at` (one machine, one clock, as in (w)); trigger → seen
//! is what the client waited, the watcher's poll included, as the peers'
//! load generator measures it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::bail;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Connection;
use tokio::sync::oneshot;

use super::check::Calls;
use super::client::Sent;
use super::cpu;
use super::meter::{ours, Meter, Snapshot};
use super::opts::Opts;
use super::stats::{summarize, Summary};
use super::system::System;
use super::throughput::Throughput;
use super::workflows::{between, chain_steps, observe, WfCheck, CHAIN_STEPS};

/// How often the watcher asks Postgres which runs in flight have finished.
const POLL: Duration = Duration::from_millis(5);
/// The loop gives up when no run in flight has finished for this long.
const STALL: Duration = Duration::from_secs(20);
/// The most the warm-up may take.
const WARMUP_MAX: Duration = Duration::from_secs(120);

/// A step's CPU and a workflow's WAL against (a)'s plain run, same session.
#[derive(Debug, Serialize)]
pub struct VsPlain {
    /// (a)'s median repetition: CPU µs per run over the system's processes
    /// (api, worker, scheduler, Postgres, Redis), WAL bytes per run.
    pub plain_cpu_us: f64,
    pub plain_wal_bytes: f64,
    /// A third of a workflow run's CPU over the same processes.
    pub step_cpu_us: f64,
    pub cpu_step_vs_plain: f64,
    pub wal_workflow_vs_plain: f64,
}

#[derive(Debug, Serialize)]
pub struct Saturation {
    pub inflight: usize,
    /// Runs finished before the window, and how long they took.
    pub warmup_runs: usize,
    pub warmup_secs: f64,
    /// The measured window, and the runs finished in it.
    pub secs: f64,
    pub runs: usize,
    pub runs_per_s: f64,
    /// Of the runs finished in the window: their trigger call, trigger →
    /// `finished_at`, trigger → the client saw it, and step-to-step (a
    /// step's job run `finished_at` → the next step's request at the target).
    pub trigger_ms: Summary,
    pub to_finished_ms: Summary,
    pub to_seen_ms: Summary,
    pub step_to_step_ms: Summary,
    pub box_busy_pct: f64,
    /// CPU µs per workflow run over the window, per part ("total": every
    /// part, the bench and its target included, as the peers count theirs).
    pub cpu_us_per_run: BTreeMap<String, f64>,
    /// The same over the system's processes only ([`ours`]).
    pub system_cpu_us_per_run: f64,
    pub cores: BTreeMap<String, f64>,
    /// The watcher's backend, moved from `postgres` to `bench`.
    pub watcher_cpu_us_per_run: f64,
    /// Cluster-wide Postgres write transactions and WAL bytes per workflow run.
    pub pg_write_xacts_per_run: f64,
    pub pg_wal_bytes_per_run: f64,
    /// With (a) in the same invocation.
    pub vs_plain: Option<VsPlain>,
    /// A run in flight stalled for [`STALL`] and the loop gave up on it.
    pub timed_out: bool,
    /// Every run triggered, warm-up and drain included.
    pub check: WfCheck,
}

impl Saturation {
    /// Sets a step's CPU and a workflow's WAL against (a)'s plain run.
    pub fn compare_with_a(&mut self, a: &Throughput) {
        let plain_cpu_us = ours(&a.cpu_us_per_run);
        let step_cpu_us = (self.system_cpu_us_per_run / CHAIN_STEPS as f64).round();
        self.vs_plain = Some(VsPlain {
            plain_cpu_us,
            plain_wal_bytes: a.pg_wal_bytes_per_run,
            step_cpu_us,
            cpu_step_vs_plain: ratio(step_cpu_us, plain_cpu_us),
            wal_workflow_vs_plain: ratio(self.pg_wal_bytes_per_run, a.pg_wal_bytes_per_run),
        });
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        (a / b * 100.0).round() / 100.0
    } else {
        0.0
    }
}

/// One workflow run a client triggered and saw accepted.
struct Done {
    id: String,
    wall: DateTime<Utc>,
    took: Duration,
    /// Trigger → the client learned it finished; `None`: it gave up.
    seen: Option<Duration>,
    finished_at: Option<DateTime<Utc>>,
    in_window: bool,
}

/// What the clients, the watcher and the clock share.
#[derive(Default)]
struct Loop {
    /// Runs in flight → their client, waiting for `finished_at`.
    waiting: Mutex<HashMap<String, oneshot::Sender<DateTime<Utc>>>>,
    finished: AtomicUsize,
    measuring: AtomicBool,
    stop: AtomicBool,
    clients_done: AtomicBool,
    gave_up: AtomicBool,
}

impl Loop {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<DateTime<Utc>>>> {
        self.waiting.lock().expect("waiting lock")
    }

    /// Stops the loop and lets every client waiting go (their runs count as not seen).
    fn give_up(&self) {
        self.gave_up.store(true, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        self.waiting().clear();
    }
}

/// One client: a run in flight at a time, until the loop stops.
async fn client(sys: &System, url: &str, l: &Loop) -> (Calls, Vec<Done>) {
    let api = sys.api();
    let (mut calls, mut done) = (Calls::default(), Vec::new());
    while !l.stop.load(Ordering::Relaxed) {
        let (t, wall) = (Instant::now(), Utc::now());
        let sent = api.trigger(url).await;
        let took = t.elapsed();
        let Sent::Created(id) = sent else {
            calls.record(sent);
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (tx, rx) = oneshot::channel();
        if l.gave_up.load(Ordering::Relaxed) {
            drop(tx);
        } else {
            l.waiting().insert(id.clone(), tx);
        }
        let finished_at = rx.await.ok();
        let seen = finished_at.map(|_| t.elapsed());
        let in_window = l.measuring.load(Ordering::Relaxed);
        if finished_at.is_some() {
            l.finished.fetch_add(1, Ordering::Relaxed);
        }
        calls.record(Sent::Created(id.clone()));
        done.push(Done { id, wall, took, seen, finished_at, in_window });
    }
    (calls, done)
}

/// The watcher: every [`POLL`], the runs in flight that have a `finished_at`.
async fn watch(conn: &mut sqlx::PgConnection, l: &Loop) -> anyhow::Result<()> {
    let mut progress = Instant::now();
    while !l.clients_done.load(Ordering::Relaxed) {
        let ids: Vec<String> = l.waiting().keys().cloned().collect();
        if ids.is_empty() {
            progress = Instant::now();
        } else {
            let rows: Vec<(String, DateTime<Utc>)> = match sqlx::query_as(
                // One probe of the primary key per id in flight (LATERAL,
                // OFFSET 0): `id = ANY($1)` let a generic plan scan the whole
                // table and test each row against every id (12.7 ms a poll
                // at 128 in flight, pg_stat_statements), CPU taken from the
                // system under test.
                "SELECT w.id, r.finished_at FROM unnest($1::text[]) AS w (id)
                   JOIN LATERAL (SELECT finished_at FROM workflow_runs WHERE id = w.id OFFSET 0) r ON true
                  WHERE r.finished_at IS NOT NULL",
            )
            .bind(&ids)
            .fetch_all(&mut *conn)
            .await
            {
                Ok(rows) => rows,
                Err(e) => {
                    l.give_up();
                    return Err(e.into());
                }
            };
            if !rows.is_empty() {
                progress = Instant::now();
            }
            let mut waiting = l.waiting();
            for (id, finished_at) in rows {
                if let Some(tx) = waiting.remove(&id) {
                    let _ = tx.send(finished_at);
                }
            }
        }
        if progress.elapsed() > STALL {
            eprintln!("bench: (s) no workflow run in flight finished for {} s; giving up", STALL.as_secs());
            l.give_up();
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// The window as the clock saw it.
struct Window {
    warmup_secs: f64,
    secs: f64,
    before: Snapshot,
    after: Snapshot,
    /// CPU seconds of the watcher's backend over the window.
    watcher_secs: f64,
}

/// The clock: the warm-up, the measured window, then the stop.
async fn clock(sys: &System, meter: &Meter, opts: &Opts, l: &Loop, watcher_pid: u32) -> Option<Window> {
    let t = Instant::now();
    while l.finished.load(Ordering::Relaxed) < opts.wf_warmup {
        if l.stop.load(Ordering::Relaxed) || t.elapsed() > WARMUP_MAX {
            l.stop.store(true, Ordering::Relaxed);
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let warmup_secs = t.elapsed().as_secs_f64();
    let before = meter.snapshot(sys).await;
    let w0 = cpu::pid_secs(watcher_pid).unwrap_or(0.0);
    l.measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    let window = Duration::from_secs(opts.wf_closed_secs);
    while t0.elapsed() < window && !l.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    l.measuring.store(false, Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    let after = meter.snapshot(sys).await;
    let watcher_secs = (cpu::pid_secs(watcher_pid).unwrap_or(0.0) - w0).max(0.0);
    l.stop.store(true, Ordering::Relaxed);
    Some(Window { warmup_secs, secs, before, after, watcher_secs })
}

pub async fn run(sys: &System, meter: &Meter, project: &str, job: &str, opts: &Opts) -> anyhow::Result<Saturation> {
    let api = sys.api();
    let wf = api.create_workflow(project, "bench-chain-closed", chain_steps(job)).await?;
    let url = api.workflow_trigger_url(&wf);
    let mut conn = sqlx::PgConnection::connect(&sys.database_url).await?;
    let watcher_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;

    let l = Loop::default();
    let clients = async {
        let out = futures::future::join_all((0..opts.wf_inflight).map(|_| client(sys, &url, &l))).await;
        l.clients_done.store(true, Ordering::Relaxed);
        out
    };
    let (per_client, watched, window) =
        futures::join!(clients, watch(&mut conn, &l), clock(sys, meter, opts, &l, watcher_pid as u32));
    let _ = conn.close().await;
    watched?;
    let mut calls = Calls::default();
    let mut done = Vec::new();
    for (c, d) in per_client {
        calls.absorb(&c);
        done.extend(d);
    }
    let Some(w) = window else {
        bail!(
            "the warm-up did not finish {} workflow runs within {} s ({} finished)",
            opts.wf_warmup,
            WARMUP_MAX.as_secs(),
            l.finished.load(Ordering::Relaxed)
        );
    };
    let o = observe(sys, &wf, &calls).await?;

    let measured: Vec<&Done> = done.iter().filter(|d| d.in_window && d.finished_at.is_some()).collect();
    let runs = measured.len();
    let mut step_to_step = Vec::new();
    for d in &measured {
        for (prev, next) in [("a", "b"), ("b", "c")] {
            if let (Some(end), Some(req)) = (o.end(&d.id, prev), o.request(&d.id, next)) {
                step_to_step.push(between(end, req));
            }
        }
    }
    let mut usage = meter.usage(&w.before, &w.after);
    if let Some(pg) = usage.cpu_secs.get_mut("postgres") {
        *pg = (*pg - w.watcher_secs).max(0.0);
    }
    *usage.cpu_secs.entry("bench".into()).or_default() += w.watcher_secs;
    let cpu_us_per_run = usage.per_run_us(runs);
    let per_run = |x: f64| x / runs.max(1) as f64;
    Ok(Saturation {
        inflight: opts.wf_inflight,
        warmup_runs: opts.wf_warmup,
        warmup_secs: (w.warmup_secs * 10.0).round() / 10.0,
        secs: (w.secs * 100.0).round() / 100.0,
        runs,
        runs_per_s: (runs as f64 / w.secs.max(1e-3) * 10.0).round() / 10.0,
        trigger_ms: summarize(measured.iter().map(|d| d.took).collect()),
        to_finished_ms: summarize(measured.iter().filter_map(|d| d.finished_at.map(|f| between(d.wall, f))).collect()),
        to_seen_ms: summarize(measured.iter().filter_map(|d| d.seen).collect()),
        step_to_step_ms: summarize(step_to_step),
        box_busy_pct: usage.box_busy_pct,
        system_cpu_us_per_run: ours(&cpu_us_per_run),
        cpu_us_per_run,
        cores: usage.cores(),
        watcher_cpu_us_per_run: per_run(w.watcher_secs * 1e6).round(),
        pg_write_xacts_per_run: (per_run(usage.pg_write_xacts as f64) * 100.0).round() / 100.0,
        pg_wal_bytes_per_run: per_run(usage.pg_wal_bytes as f64).round(),
        vs_plain: None,
        timed_out: l.gave_up.load(Ordering::Relaxed),
        check: o.check,
    })
}

#[cfg(test)]
mod tests {
    use super::ratio;

    #[test]
    fn ratios_round_to_hundredths_and_need_a_yardstick() {
        assert_eq!(ratio(1000.0, 300.0), 3.33);
        assert_eq!(ratio(5.0, 0.0), 0.0);
    }
}
