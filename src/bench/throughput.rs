//! Phase (a): closed-loop end-to-end throughput. `clients` concurrent loops
//! each trigger a run and, on the answer, the next, for `a_secs` seconds
//! (or until `runs` runs are accepted); the figure is runs / (first trigger
//! → last `finished_at`). The same window gives phase (g), CPU per run.
//!
//! A few seconds of load say little on a box whose speed drifts: each
//! repetition lasts 15 s by default, and the phase repeats `reps` times on
//! the same job, every repetition waiting for the last one's runs to end.
//! The figures reported are the median repetition's (by runs/s), with
//! every repetition's runs/s and CPU per run beside them and their spread.

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
    /// The median repetition's figures, from `runs` to `pg_wal_bytes_per_run`.
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
    /// Every repetition, in the order they ran.
    pub repetitions: Vec<Repetition>,
    /// (highest - lowest) / median over the repetitions, in %: runs/s and
    /// total CPU per run.
    pub runs_per_s_spread_pct: f64,
    pub cpu_spread_pct: f64,
    pub timed_out: bool,
    pub check: Check,
}

/// One repetition of the closed loop.
#[derive(Clone, Debug, Serialize)]
pub struct Repetition {
    pub runs: usize,
    pub secs: f64,
    pub runs_per_s: f64,
    pub cpu_us_per_run: BTreeMap<String, f64>,
}

/// When a closed loop stops sending.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    Runs(usize),
    Deadline(Instant),
}

/// `n` triggers from `clients` concurrent loops; the calls and their latencies.
pub async fn closed_loop(api: &Api, url: &str, n: usize, clients: usize) -> (Calls, Vec<Duration>) {
    closed_loop_until(api, url, Until::Runs(n), clients).await
}

/// Triggers from `clients` concurrent loops until `until`; the calls and
/// their latencies.
pub async fn closed_loop_until(api: &Api, url: &str, until: Until, clients: usize) -> (Calls, Vec<Duration>) {
    let next = AtomicUsize::new(0);
    let more = || match until {
        Until::Runs(n) => next.fetch_add(1, Ordering::Relaxed) < n,
        Until::Deadline(t) => Instant::now() < t,
    };
    let per_client = futures::future::join_all((0..clients).map(|_| async {
        let mut out = Vec::new();
        while more() {
            let t = Instant::now();
            let sent = api.trigger(url).await;
            out.push((sent, t.elapsed()));
        }
        out
    }))
    .await;
    let mut calls = Calls::default();
    let mut lat = Vec::new();
    for (sent, d) in per_client.into_iter().flatten() {
        calls.record(sent);
        lat.push(d);
    }
    (calls, lat)
}

/// One repetition's measurement, kept whole until the median is chosen.
struct Measured {
    rep: Repetition,
    trigger_ms: Summary,
    usage: Usage,
    timed_out: bool,
}

pub async fn run(sys: &System, meter: &Meter, job: &str, opts: &Opts) -> anyhow::Result<Throughput> {
    let api = sys.api();
    let url = api.trigger_url(job);
    let mut all = Calls::default();
    if opts.warmup > 0 {
        let hits0 = sys.target().count();
        all = closed_loop(api, &url, opts.warmup, opts.clients).await.0;
        let n = all.created.len();
        settle(sys, job, n, hits0 + n, Instant::now() + Duration::from_secs(60)).await?;
    }
    let mut measured = Vec::with_capacity(opts.reps);
    for k in 0..opts.reps {
        let hits0 = sys.target().count();
        let a = meter.snapshot(sys).await;
        let t0 = chrono::Utc::now();
        let until = match opts.runs {
            Some(n) => Until::Runs(n),
            None => Until::Deadline(Instant::now() + Duration::from_secs(opts.a_secs)),
        };
        let (calls, lat) = closed_loop_until(api, &url, until, opts.clients).await;
        let n = calls.created.len();
        let s = settle(sys, job, all.created.len() + n, hits0 + n, Instant::now() + Duration::from_secs(90)).await?;
        let b = meter.snapshot(sys).await;
        let usage = meter.usage(&a, &b);
        let secs = s
            .last_finished
            .map(|t| (t - t0).num_microseconds().unwrap_or(0) as f64 / 1e6)
            .unwrap_or(usage.secs)
            .max(1e-3);
        // Runs of the measured batch that finished (all of them unless timed out).
        let done = (n as i64 - s.open).max(0) as usize;
        all.absorb(&calls);
        let rep = Repetition {
            runs: n,
            secs: (secs * 1000.0).round() / 1000.0,
            runs_per_s: (done as f64 / secs).round(),
            cpu_us_per_run: usage.per_run_us(done),
        };
        eprintln!(
            "bench: (a) repetition {} of {}: {} runs in {:.1} s, {:.0} runs/s, {:.0} µs CPU/run",
            k + 1,
            opts.reps,
            rep.runs,
            rep.secs,
            rep.runs_per_s,
            total_cpu(&rep)
        );
        measured.push(Measured { rep, trigger_ms: summarize(lat), usage, timed_out: s.timed_out });
        if s.timed_out {
            break;
        }
    }
    let check = check::check(sys, job, &all).await?;
    let repetitions: Vec<Repetition> = measured.iter().map(|m| m.rep.clone()).collect();
    let runs_per_s_spread_pct = spread_pct(repetitions.iter().map(|r| r.runs_per_s).collect());
    let cpu_spread_pct = spread_pct(repetitions.iter().map(total_cpu).collect());
    let timed_out = measured.iter().any(|m| m.timed_out);
    let mut order: Vec<usize> = (0..measured.len()).collect();
    order.sort_by(|&i, &j| measured[i].rep.runs_per_s.total_cmp(&measured[j].rep.runs_per_s));
    let median = measured.swap_remove(order[order.len() / 2]);
    let done = median.rep.runs.max(1) as f64;
    Ok(Throughput {
        runs: median.rep.runs,
        warmup: opts.warmup,
        clients: opts.clients,
        secs: median.rep.secs,
        runs_per_s: median.rep.runs_per_s,
        trigger_ms: median.trigger_ms,
        cpu_us_per_run: median.rep.cpu_us_per_run,
        cores: median.usage.cores(),
        pg_write_xacts_per_run: (median.usage.pg_write_xacts as f64 / done * 100.0).round() / 100.0,
        pg_wal_bytes_per_run: (median.usage.pg_wal_bytes as f64 / done).round(),
        usage: median.usage,
        repetitions,
        runs_per_s_spread_pct,
        cpu_spread_pct,
        timed_out,
        check,
    })
}

fn total_cpu(r: &Repetition) -> f64 {
    r.cpu_us_per_run.get("total").copied().unwrap_or(0.0)
}

/// (highest - lowest) / median, in % (0 for fewer than two values).
fn spread_pct(mut v: Vec<f64>) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let median = v[v.len() / 2];
    if median <= 0.0 {
        return 0.0;
    }
    ((v[v.len() - 1] - v[0]) / median * 1000.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::spread_pct;

    #[test]
    fn spread_is_the_range_over_the_median() {
        assert_eq!(spread_pct(vec![100.0, 90.0, 110.0]), 20.0);
        assert_eq!(spread_pct(vec![5.0]), 0.0);
    }
}
