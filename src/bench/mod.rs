//! The benchmark driver behind `scripts/bench` (docs/benchmarks.md). It
//! brings up a fresh system on loopback, runs each phase within a count and
//! a deadline, prints a table and one `BENCH {json}` line, and takes the
//! system down again on every exit path.
//!
//! - [`opts`]: command-line options and their defaults.
//! - [`system`]: fresh database + Redis prefix, the three service processes, cleanup.
//! - [`target`]: the recording HTTP target, on its own thread.
//! - [`client`]: the API calls of the load generator.
//! - [`cpu`], [`meter`]: CPU time from /proc, per part of the system.
//! - [`settle`]: waiting for a phase's runs to end. [`check`]: their correctness.
//! - [`open_loop`]: triggers at a fixed rate, for (b) and (w).
//! - Phases: [`throughput`] (a, g), [`latency`] (b), [`bulk`] (c),
//!   [`queue_depth`] (d, e), [`idle`] (f), [`workflows`] (w), [`saturation`] (s),
//!   [`notify`] (n), [`retention`] (r), [`reports`] (y).
//! - [`pg_tables`]: Postgres table activity per run, read at the end.
//! - [`subscribers`]: live-stream subscribers during the phases (`--streams`).
//! - [`stats`]: percentiles. [`anchors`]: the peer figures. [`report`]: the output.

mod anchors;
mod bulk;
mod check;
mod client;
mod cpu;
mod fairness;
mod idle;
mod latency;
mod meter;
mod notify;
mod open_loop;
mod opts;
mod partitions;
mod pg_tables;
mod queue_depth;
mod report;
mod reports;
mod retention;
mod saturation;
mod settle;
mod stalls;
mod stats;
mod subscribers;
mod system;
mod target;
mod throughput;
mod workflows;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use anchors::Anchors;
use opts::{Opts, Parsed, USAGE};
use report::Report;
use system::System;

pub fn main() -> ExitCode {
    let opts = match Opts::parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(o)) => *o,
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("switchyard-bench: {e:#}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // One thread drives the load (and the target has its own): the load
    // generator shares the box with what it measures, so it stays small.
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchyard-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(run(opts))
}

async fn interrupted() -> &'static str {
    let (Ok(mut term), Ok(mut hup)) = (signal(SignalKind::terminate()), signal(SignalKind::hangup())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        _ = term.recv() => "SIGTERM",
        _ = hup.recv() => "SIGHUP",
    }
}

/// Below this whole-box busy share the box counts as quiet.
const QUIET_PCT: f64 = 15.0;

/// Waits up to `max` for a second in which the box is quiet; returns the
/// busy share of the last second looked at.
async fn wait_quiet(max: Duration) -> f64 {
    let deadline = std::time::Instant::now() + max;
    loop {
        let a = cpu::BoxTicks::read();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let busy = a.busy_pct(&cpu::BoxTicks::read());
        if busy < QUIET_PCT || std::time::Instant::now() >= deadline {
            return (busy * 10.0).round() / 10.0;
        }
        eprintln!("bench: the box is {busy:.0} % busy before the start; waiting for it to be quiet");
    }
}

async fn run(opts: Opts) -> ExitCode {
    let busy_before = wait_quiet(Duration::from_secs(opts.wait_quiet_secs)).await;
    let mut sys = System::new(&opts);
    eprintln!("bench: database {}, Redis prefix {}, logs in {}", sys.db_name, sys.prefix, sys.dir.display());
    let outcome = tokio::select! {
        r = async {
            sys.start(&opts).await?;
            phases(&sys, &opts).await
        } => r,
        why = interrupted() => Err(anyhow::anyhow!("stopped by {why}")),
    };
    let mut report = match outcome {
        Ok(r) => Report { box_busy_before_pct: busy_before, ..r },
        Err(e) => {
            eprintln!("bench: {e:#}");
            sys.stop().await;
            return ExitCode::FAILURE;
        }
    };
    let anchors = opts.anchors.as_deref().map(|f| Anchors::load(f, opts.anchors_log.as_deref()));
    report.finish(&sys, anchors);
    sys.stop().await;
    let json = report.json();
    print!("{}", report.table());
    println!("BENCH {json}");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(opts.out.join("results.jsonl")) {
        let _ = writeln!(f, "{json}");
    }
    if report.correct {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Keeps a phase's figures, or notes why it has none and goes on.
fn keep<T>(failures: &mut Vec<String>, phase: &str, r: anyhow::Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("bench: phase {phase} failed: {e:#}");
            failures.push(format!("phase {phase}: {e:#}"));
            None
        }
    }
}

/// Seconds since `*since`, which moves on to now.
fn lap(since: &mut std::time::Instant) -> f64 {
    let secs = since.elapsed().as_secs_f64();
    *since = std::time::Instant::now();
    (secs * 10.0).round() / 10.0
}

async fn phases(sys: &System, opts: &Opts) -> anyhow::Result<Report> {
    let mut report = Report::new();
    report.workers = opts.workers;
    report.worker_concurrency = std::env::var("WORKER_CONCURRENCY").ok();
    // Read in the bench database: its own synchronous_commit (--sync-commit)
    // is what the services run with.
    report.postgres_settings = sqlx::query_as::<_, (String, String)>(
        "SELECT name, current_setting(name) FROM pg_settings WHERE name IN
         ('shared_buffers', 'max_wal_size', 'checkpoint_timeout', 'synchronous_commit', 'fsync', 'full_page_writes')",
    )
    .fetch_all(sys.pool())
    .await
    .map(|rows| rows.into_iter().collect())
    .unwrap_or_default();
    let mut t = std::time::Instant::now();
    let meter = meter::Meter::new(sys).await;
    let api = sys.api();
    let project = api.create_project("bench").await?;
    let project = project.as_str();
    if opts.without_stream_triggers {
        subscribers::drop_triggers(sys.pool()).await?;
        eprintln!("bench: the live streams' triggers are dropped");
    }
    let streams = match opts.streams {
        0 => None,
        n => {
            eprintln!("bench: {n} live-stream subscribers follow the project");
            Some(subscribers::Subscribers::open(api, project, n).await?)
        }
    };
    let job = |name: String| async move { api.create_job(project, &name, &sys.target().url).await };

    if opts.wants('a') {
        let each = opts.runs.map_or(format!("{} s", opts.a_secs), |n| format!("{n} runs"));
        eprintln!(
            "bench: (a) throughput: {} × {each} of closed loop, {} clients, after {} warm-up runs",
            opts.reps, opts.clients, opts.warmup
        );
        let j = job("throughput".into()).await?;
        report.throughput = keep(&mut report.failures, "(a)", throughput::run(sys, &meter, &j, opts).await);
        report.phase_secs.insert("a".into(), lap(&mut t));
    }
    if opts.wants('b') && !opts.rates.is_empty() {
        let notices = latency::Notices::start(sys).await?;
        for &rate in &opts.rates {
            eprintln!("bench: (b) latency at {rate} runs/s for {} s", opts.rate_warmup_secs + opts.rate_secs);
            let j = job(format!("latency-{rate}")).await?;
            // (a)'s minute of load, or the rate before, leaves writeback.
            sys.settle_disk(Duration::from_secs(3)).await?;
            let measured = Duration::from_secs(opts.rate_secs);
            let r = latency::run(sys, &notices, &j, rate, opts.rate_warmup(), measured).await;
            if let Some(l) = keep(&mut report.failures, &format!("(b) at {rate}/s"), r) {
                report.latency.push(l);
            }
        }
        notices.stop(sys).await;
        report.phase_secs.insert("b".into(), lap(&mut t));
    }
    if opts.wants('c') {
        eprintln!("bench: (c) bulk trigger: {} runs", opts.bulk_runs);
        let j = job("bulk".into()).await?;
        report.bulk = keep(&mut report.failures, "(c)", bulk::run(sys, &j, opts.bulk_runs, opts.bulk_clients).await);
        report.phase_secs.insert("c".into(), lap(&mut t));
    }
    if opts.wants('d') {
        eprintln!("bench: (d, e) Redis queue at {} and {} entries", opts.shallow, opts.deep);
        let prefix = format!("{}q", sys.prefix);
        let r = queue_depth::run(&sys.redis_url, &prefix, opts.shallow, opts.deep, opts.dequeues).await;
        report.queue = keep(&mut report.failures, "(d, e)", r);
        report.phase_secs.insert("d".into(), lap(&mut t));
    }
    if opts.wants('q') {
        eprintln!("bench: (q) fair queueing: a key's backlog against another key's runs; dequeue cost with many keys");
        let prefix = format!("{}f", sys.prefix);
        let r = fairness::run(&sys.redis_url, &prefix, opts.dequeues / 2).await;
        report.fairness = keep(&mut report.failures, "(q)", r);
        report.phase_secs.insert("q".into(), lap(&mut t));
    }
    if opts.wants('p') {
        eprintln!("bench: (p) queue partitions: 1 and {}, {} entries", opts.partitions, opts.dequeues);
        let prefix = format!("{}p", sys.prefix);
        let r = partitions::run(&sys.redis_url, &prefix, opts.partitions, opts.dequeues).await;
        report.partitions = keep(&mut report.failures, "(p)", r);
        report.phase_secs.insert("p".into(), lap(&mut t));
    }
    // Only when asked for by name: it writes millions of rows.
    if opts.only.as_ref().is_some_and(|o| o.contains(&'r')) {
        let rate = opts.rates.first().copied().unwrap_or(500);
        eprintln!("bench: (r) retention: latency at {rate}/s with none and with {} old runs", opts.history);
        let notices = latency::Notices::start(sys).await?;
        let (j, history_job) = (job("retention".into()).await?, job("history".into()).await?);
        let measured = Duration::from_secs(opts.rate_secs);
        let r = retention::run(
            sys,
            &meter,
            &notices,
            project,
            &j,
            &history_job,
            opts.history,
            rate,
            opts.rate_warmup(),
            measured,
        );
        report.retention = keep(&mut report.failures, "(r)", r.await);
        notices.stop(sys).await;
        report.phase_secs.insert("r".into(), lap(&mut t));
    }
    // Only when asked for by name: it writes a million runs.
    if opts.only.as_ref().is_some_and(|o| o.contains(&'y')) {
        eprintln!("bench: (y) reports over {} ended runs, {} reads each", opts.report_runs, opts.report_reps);
        let r = reports::run(sys, opts.report_runs, opts.report_reps).await;
        report.reports = keep(&mut report.failures, "(y)", r);
        report.phase_secs.insert("y".into(), lap(&mut t));
    }
    if opts.wants('f') {
        eprintln!("bench: (f) idle for {} s", opts.idle_secs);
        // Lets the last statements' statistics reach pg_stat_database first:
        // a backend that falls idle reports them up to 10 s later
        // (PGSTAT_IDLE_INTERVAL), so a shorter wait counts the setup's
        // statements (migrations, the project just made) as idle traffic.
        tokio::time::sleep(Duration::from_secs(11)).await;
        report.idle = keep(&mut report.failures, "(f)", idle::run(sys, Duration::from_secs(opts.idle_secs)).await);
        report.phase_secs.insert("f".into(), lap(&mut t));
    }
    let runs = report.accepted_runs();
    if runs > 0 {
        report.pg_tables = keep(&mut report.failures, "Postgres table activity", pg_tables::per_run(sys, runs).await)
            .unwrap_or_default();
    }
    // Last, after the table activity per run is read: its job runs are
    // started by the engine, not accepted by the trigger endpoints.
    if opts.wants('w') {
        eprintln!(
            "bench: (w) workflows: a 3-step chain at {}/s for {} s, {} runs of a {}-way fan-out, one {}-way",
            opts.wf_rate,
            opts.rate_warmup_secs + opts.wf_secs,
            opts.wf_fan_runs,
            opts.wf_fan,
            opts.wf_wide
        );
        let (j, plain_job) = (job("workflows".into()).await?, job("workflows-plain".into()).await?);
        let f = &mut report.failures;
        // Each part's latency on a settled disk, as before each rate of (b):
        // what came before (the plain runs, or another phase) leaves writeback.
        sys.settle_disk(Duration::from_secs(3)).await?;
        let plain = workflows::plain_at_chain_rate(sys, &meter, &plain_job, opts).await;
        sys.settle_disk(Duration::from_secs(3)).await?;
        let chain = workflows::chain(sys, &meter, project, &j, opts).await;
        let mut w = workflows::Workflows {
            plain: keep(f, "(w) plain runs at the chain's rate", plain),
            chain: keep(f, "(w) chain", chain),
            ..Default::default()
        };
        if opts.wf_fan_runs > 0 {
            let r = workflows::fan(sys, &meter, project, &j, opts.wf_fan, opts.wf_fan_runs, Duration::from_secs(60));
            w.fan = keep(f, "(w) fan-out", r.await);
        }
        if opts.wf_wide > 0 {
            let r = workflows::fan(sys, &meter, project, &j, opts.wf_wide, 1, Duration::from_secs(120));
            w.wide = keep(f, "(w) wide fan-out", r.await);
        }
        report.goals.extend(w.goals());
        report.workflows = Some(w);
        report.phase_secs.insert("w".into(), lap(&mut t));
    }
    // Only when asked for by name; after the table activity too, for the
    // same reason as (w).
    if opts.names('s') {
        eprintln!(
            "bench: (s) workflow saturation: the 3-step chain, closed loop, {} in flight, {} warm-up runs, then {} s",
            opts.wf_inflight, opts.wf_warmup, opts.wf_closed_secs
        );
        let j = job("workflows-closed".into()).await?;
        // (a) or (w) before it leaves writeback, as before each rate of (b).
        sys.settle_disk(Duration::from_secs(3)).await?;
        let r = saturation::run(sys, &meter, project, &j, opts).await;
        if let Some(mut s) = keep(&mut report.failures, "(s)", r) {
            if let Some(a) = report.throughput.as_ref() {
                s.compare_with_a(a);
            }
            report.workflows.get_or_insert_with(Default::default).closed = Some(s);
        }
        report.phase_secs.insert("s".into(), lap(&mut t));
    }
    // Last too, each part in a project of its own: a subscription would add
    // a delivery to every run of a phase sharing the project.
    if opts.wants('n') {
        for subscription in [false, true] {
            eprintln!(
                "bench: (n) notifications: {} runs with a terminal webhook{}, {} clients, after {} warm-up",
                opts.notify_runs,
                if subscription { " and a subscription event" } else { "" },
                opts.clients,
                opts.notify_warmup
            );
            let part = if subscription { "(n) webhook and subscription" } else { "(n) webhook" };
            let Some(mut n) = keep(&mut report.failures, part, notify::run(sys, &meter, opts, subscription).await)
            else {
                continue;
            };
            if let Some(a) = report.throughput.as_ref() {
                n.compare_with_a(&a.cpu_us_per_run);
                report.goals.extend(n.goal(&a.cpu_us_per_run));
            }
            report.notify.push(n);
        }
        report.phase_secs.insert("n".into(), lap(&mut t));
    }
    if let Some(s) = streams {
        eprintln!("bench: the {} live-stream subscribers read {} events in all", opts.streams, s.events());
    }
    Ok(report)
}
