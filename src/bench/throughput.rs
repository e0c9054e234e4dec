//! Phase (a): closed-loop end-to-end throughput. `clients` concurrent loops
//! each trigger a run and, on the answer, the next, until `runs` runs are
//! accepted; the figure is runs / (first trigger → last `finished_at`). The
//! same window gives phase (g), CPU per run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::check::{self, Calls, Check};
use super::client::Api;
use super::meter::{Meter, Usage};
use super::opts::Opts;
use super::settle::settle;
use super::stats::{summarize, Summary};
use super::system::System;

#[derive(Debug, Serialize)]
pub struct Throughput {
    pub runs: usize,
    pub warmup: usize,
    pub clients: usize,
    pub secs: f64,
    pub runs_per_s: f64,
    /// Trigger call latency as the clients saw it.
    pub trigger_ms: Summary,
    pub usage: Usage,
    pub cpu_us_per_run: BTreeMap<String, f64>,
    pub cores: BTreeMap<String, f64>,
    /// Cluster-wide Postgres write transactions and WAL bytes per run.
    pub pg_write_xacts_per_run: f64,
    pub pg_wal_bytes_per_run: f64,
    pub timed_out: bool,
    pub check: Check,
}

/// `n` triggers from `clients` concurrent loops; the calls and their latencies.
pub async fn closed_loop(api: &Api, url: &str, n: usize, clients: usize) -> (Calls, Vec<Duration>) {
    let next = AtomicUsize::new(0);
    let per_client = futures::future::join_all((0..clients).map(|_| async {
        let mut out = Vec::new();
        while next.fetch_add(1, Ordering::Relaxed) < n {
            let t = Instant::now();
            let sent = api.trigger(url).await;
            out.push((sent, t.elapsed()));
        }
        out
    }))
    .await;
    let mut calls = Calls::default();
    let mut lat = Vec::with_capacity(n);
    for (sent, d) in per_client.into_iter().flatten() {
        calls.record(sent);
        lat.push(d);
    }
    (calls, lat)
}

pub async fn run(sys: &System, meter: &Meter, job: &str, opts: &Opts) -> anyhow::Result<Throughput> {
    let api = sys.api();
    let url = api.trigger_url(job);
    let mut warm = Calls::default();
    if opts.warmup > 0 {
        let hits0 = sys.target().count();
        warm = closed_loop(api, &url, opts.warmup, opts.clients).await.0;
        let n = warm.created.len();
        settle(sys, job, n, hits0 + n, Instant::now() + Duration::from_secs(60)).await?;
    }
    let hits0 = sys.target().count();
    let a = meter.snapshot(sys).await;
    let t0 = chrono::Utc::now();
    let (calls, lat) = closed_loop(api, &url, opts.runs, opts.clients).await;
    let n = calls.created.len();
    let s = settle(sys, job, warm.created.len() + n, hits0 + n, Instant::now() + Duration::from_secs(90)).await?;
    let b = meter.snapshot(sys).await;
    let usage = meter.usage(&a, &b);
    let secs =
        s.last_finished.map(|t| (t - t0).num_microseconds().unwrap_or(0) as f64 / 1e6).unwrap_or(usage.secs).max(1e-3);
    // Runs of the measured batch that finished (all of them unless timed out).
    let done = (n as i64 - s.open).max(0) as usize;
    let mut all = warm;
    all.absorb(&calls);
    let check = check::check(sys, job, &all).await?;
    Ok(Throughput {
        runs: n,
        warmup: opts.warmup,
        clients: opts.clients,
        secs: (secs * 1000.0).round() / 1000.0,
        runs_per_s: (done as f64 / secs).round(),
        trigger_ms: summarize(lat),
        cpu_us_per_run: usage.per_run_us(done),
        cores: usage.cores(),
        pg_write_xacts_per_run: (usage.pg_write_xacts as f64 / done.max(1) as f64 * 100.0).round() / 100.0,
        pg_wal_bytes_per_run: (usage.pg_wal_bytes as f64 / done.max(1) as f64).round(),
        usage,
        timed_out: s.timed_out,
        check,
    })
}
