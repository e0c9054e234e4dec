//! Phase (r): is a system that has processed many runs as fast as a new
//! one? The trigger→terminal latency of phase (b), at one rate, on one job:
//! [`REPS`] times with the tables empty, [`REPS`] times after `history`
//! finished runs (and their attempts) of another job of the project are
//! written into them and have settled, and once while the pruner's own
//! statement (`store::retention::prune`, paced as the scheduler's pruner
//! paces it) deletes that history. The old runs are 1 to 29 days old,
//! inside the default retention, so the scheduler's own pruner leaves them
//! alone.
//!
//! A p99 over a few thousand runs moves by tens of percent from one
//! measurement to the next on an idle box, so one measurement per state
//! cannot tell "equal" from "slower": the repetitions give each state its
//! own spread, and the verdict compares the medians against the empty
//! tables' spread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use switchyard_shared::store::retention::{self, Kind};

use super::latency::{self, Latency, Notices};
use super::meter::Meter;
use super::system::System;

/// Rows written per seeding statement.
const SEED_CHUNK: usize = 500_000;

/// Measurements per state (empty tables, with the history).
const REPS: usize = 3;

/// How long the history settles after the write before it is measured: the
/// write's checkpoint and autovacuum pass, as on a system that ran for days.
const SETTLE: Duration = Duration::from_secs(60);

#[derive(Debug, Serialize)]
pub struct RetentionFigures {
    pub rate: u32,
    pub history: usize,
    pub seed_secs: f64,
    /// job_runs + job_run_attempts with their indexes, after seeding.
    pub tables_mb: f64,
    pub empty: Vec<Latency>,
    /// After the history settled ([`SETTLE`]).
    pub full: Vec<Latency>,
    pub pruning: Latency,
    /// CPU µs per run of each process over each measurement (the empty
    /// ones, the full ones, pruning), and Postgres WAL bytes per run.
    pub cpu_us_per_run: Vec<std::collections::BTreeMap<String, f64>>,
    /// Rows of history the pruner deleted during the third measurement.
    pub pruned: u64,
    pub pruned_per_s: f64,
    /// Slowest single prune statement.
    pub slowest_prune_ms: f64,
    /// Median p99 trigger→terminal with the history / median with empty
    /// tables, and pruning / that median.
    pub p99_ratio_full: f64,
    pub p99_ratio_pruning: f64,
    /// The empty tables' own spread: their highest p99 / their median.
    pub p99_spread_empty: f64,
    /// Whether the median p99 with the history is within the empty tables'
    /// spread (at most their highest p99).
    pub full_within_noise: bool,
}

/// Writes `n` finished runs of `job`, 1 to 29 days old, with one attempt each.
async fn seed(sys: &System, project: &str, job: &str, n: usize) -> anyhow::Result<()> {
    let (version, version_id): (i32, String) =
        sqlx::query_as("SELECT version, version_id FROM jobs WHERE id = $1").bind(job).fetch_one(sys.pool()).await?;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let (oldest, span) = (now_ms - 29 * 86_400_000, 28 * 86_400_000_i64);
    // The weekly partitions a system that ran those weeks would have.
    let from = chrono::DateTime::from_timestamp_millis(oldest).unwrap_or_default();
    retention::ensure_partitions(sys.pool(), from, chrono::Utc::now()).await?;
    let mut done = 0;
    while done < n {
        let k = SEED_CHUNK.min(n - done);
        retention::write_history(sys.pool(), project, job, (version, &version_id), done..done + k, (oldest, span), n)
            .await?;
        done += k;
        eprintln!("bench: (r) {done} of {n} old runs written");
    }
    sqlx::query("ANALYZE job_runs").execute(sys.pool()).await?;
    sqlx::query("ANALYZE job_run_attempts").execute(sys.pool()).await?;
    Ok(())
}

async fn tables_mb(sys: &System) -> anyhow::Result<f64> {
    let bytes: i64 = sqlx::query_scalar(
        "SELECT sum(pg_total_relation_size(relid))::bigint
           FROM (SELECT relid FROM pg_partition_tree('job_runs')
                 UNION ALL SELECT relid FROM pg_partition_tree('job_run_attempts')) p",
    )
    .fetch_one(sys.pool())
    .await?;
    Ok((bytes as f64 / 1e6).round())
}

fn median_p99(ls: &[Latency]) -> f64 {
    let mut v: Vec<f64> = ls.iter().map(|l| l.to_terminal_ms.p99).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn ratio(a: f64, b: f64) -> f64 {
    ((a / b.max(1e-3)) * 100.0).round() / 100.0
}

/// One latency measurement, with the CPU it cost per run.
#[allow(clippy::too_many_arguments)]
async fn measure(
    sys: &System,
    meter: &Meter,
    notices: &Notices,
    job: &str,
    rate: u32,
    warmup: Duration,
    measured: Duration,
    cpu: &mut Vec<std::collections::BTreeMap<String, f64>>,
) -> anyhow::Result<Latency> {
    let a = meter.snapshot(sys).await;
    let l = latency::run(sys, notices, job, rate, warmup, measured).await?;
    let b = meter.snapshot(sys).await;
    let usage = meter.usage(&a, &b);
    let runs = (l.runs + l.warmup_runs).max(1) as f64;
    let mut per: std::collections::BTreeMap<String, f64> =
        usage.cpu_secs.iter().map(|(k, s)| (k.clone(), (s * 1e6 / runs).round())).collect();
    per.insert("wal_bytes".into(), (usage.pg_wal_bytes as f64 / runs).round());
    cpu.push(per);
    Ok(l)
}

#[allow(clippy::too_many_arguments)]
pub async fn run(
    sys: &System,
    meter: &Meter,
    notices: &Notices,
    project: &str,
    job: &str,
    history_job: &str,
    history: usize,
    rate: u32,
    warmup: Duration,
    measured: Duration,
) -> anyhow::Result<RetentionFigures> {
    let mut cpu = Vec::new();
    let mut empty = Vec::new();
    sys.settle_disk(Duration::from_secs(10)).await?;
    for _ in 0..REPS {
        empty.push(measure(sys, meter, notices, job, rate, warmup, measured, &mut cpu).await?);
    }

    let t = Instant::now();
    seed(sys, project, history_job, history).await?;
    let seed_secs = (t.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    let tables_mb = tables_mb(sys).await?;
    tokio::time::sleep(SETTLE).await;
    sys.settle_disk(Duration::from_secs(10)).await?;
    let mut full = Vec::new();
    for _ in 0..REPS {
        full.push(measure(sys, meter, notices, job, rate, warmup, measured, &mut cpu).await?);
    }

    // The pruner's statement deletes the history while the third measurement runs.
    let stop = Arc::new(AtomicBool::new(false));
    let pruned = Arc::new(AtomicU64::new(0));
    let pruner = tokio::spawn({
        let (pool, project, stop, pruned) = (sys.pool().clone(), project.to_string(), stop.clone(), pruned.clone());
        async move {
            let cutoff = chrono::Utc::now();
            let mut slowest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let batch = switchyard_scheduler::PrunerOptions::default().batch_size as i64;
                let n = retention::prune(&pool, Kind::JobRuns, &project, cutoff, batch).await?;
                slowest = slowest.max(t.elapsed());
                pruned.fetch_add(n, Ordering::Relaxed);
                if n == 0 {
                    break;
                }
                // The pruner's own rest between batches.
                let rest = switchyard_scheduler::pruner::rest_after(
                    t.elapsed(),
                    switchyard_scheduler::PrunerOptions::default().breather,
                );
                tokio::time::sleep(rest).await;
            }
            anyhow::Ok(slowest)
        }
    });
    let t = Instant::now();
    let pruning = measure(sys, meter, notices, job, rate, warmup, measured, &mut cpu).await;
    stop.store(true, Ordering::Relaxed);
    let secs = t.elapsed().as_secs_f64();
    let slowest = pruner.await??;
    let pruning = pruning?;
    let pruned = pruned.load(Ordering::Relaxed);
    let (empty_p99, full_p99) = (median_p99(&empty), median_p99(&full));
    let empty_max = empty.iter().map(|l| l.to_terminal_ms.p99).fold(0.0, f64::max);
    Ok(RetentionFigures {
        rate,
        history,
        seed_secs,
        tables_mb,
        p99_ratio_full: ratio(full_p99, empty_p99),
        p99_ratio_pruning: ratio(pruning.to_terminal_ms.p99, empty_p99),
        p99_spread_empty: ratio(empty_max, empty_p99),
        full_within_noise: full_p99 <= empty_max,
        empty,
        full,
        pruning,
        cpu_us_per_run: cpu,
        pruned,
        pruned_per_s: (pruned as f64 / secs.max(1e-3)).round(),
        slowest_prune_ms: (slowest.as_secs_f64() * 1e4).round() / 10.0,
    })
}
