//! The results: one table for people, one `BENCH {json}` line for scripts.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::anchors::{self, Anchors};
use super::bulk::Bulk;
use super::check::Check;
use super::fairness::FairFigures;
use super::idle::Idle;
use super::latency::Latency;
use super::notify::Notify;
use super::open_loop::MAX_BACKLOG;
use super::partitions::PartitionFigures;
use super::pg_tables::PerRun;
use super::queue_depth::QueueFigures;
use super::reports::ReportFigures;
use super::retention::RetentionFigures;
use super::saturation::Saturation;
use super::system::System;
use super::throughput::Throughput;
use super::workflows::{Fan, Goal, Workflows};

/// Bumped when a field of the BENCH line changes meaning.
const SCHEMA: u32 = 1;

#[derive(Debug, Default, Serialize)]
pub struct LogSummary {
    pub warn: usize,
    pub error: usize,
    /// The most frequent kinds of line (timestamp and values cut), with counts.
    pub top: Vec<(String, usize)>,
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub schema: u32,
    pub when: String,
    pub git: Option<String>,
    pub nproc: usize,
    /// Whole-box busy share in the second before the system started: other
    /// work on the box skews every figure.
    pub box_busy_before_pct: f64,
    /// Settings of the Postgres server that shape the figures (the anchors'
    /// cluster runs shared_buffers=1GB, max_wal_size=4GB, checkpoint_timeout=15min).
    pub postgres_settings: BTreeMap<String, String>,
    /// Worker processes, and WORKER_CONCURRENCY as the environment gave it
    /// (`None`: the default).
    pub workers: usize,
    pub worker_concurrency: Option<String>,
    pub throughput: Option<Throughput>,
    pub latency: Vec<Latency>,
    pub bulk: Option<Bulk>,
    pub queue: Option<QueueFigures>,
    pub partitions: Option<PartitionFigures>,
    pub fairness: Option<FairFigures>,
    pub retention: Option<RetentionFigures>,
    pub reports: Option<ReportFigures>,
    pub idle: Option<Idle>,
    pub workflows: Option<Workflows>,
    /// Phase (n)'s parts: webhook only, then webhook and subscription.
    pub notify: Vec<Notify>,
    /// Figures held against the benchmark's goals (docs/benchmarks.md).
    pub goals: Vec<Goal>,
    /// Postgres table activity over the whole benchmark, per accepted run.
    pub pg_tables: Vec<PerRun>,
    /// Every phase's check, added up.
    pub correctness: Check,
    pub correct: bool,
    /// Requests the target received whose body named no run.
    pub target_unreadable: usize,
    /// WARN/ERROR lines the services logged.
    pub service_logs: BTreeMap<String, LogSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchors: Option<Anchors>,
    /// Ours against the anchors' composite: >1 is better for us.
    pub ratios: BTreeMap<String, f64>,
    /// Wall-clock seconds each phase took.
    pub phase_secs: BTreeMap<String, f64>,
    /// Phases that could not be measured, and why.
    pub failures: Vec<String>,
}

fn git_head() -> Option<String> {
    let out = std::process::Command::new("git").args(["rev-parse", "--short", "HEAD"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The line without terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn scan_log(path: &std::path::Path) -> LogSummary {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut s = LogSummary::default();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let line = strip_ansi(line);
        let is_error = line.contains(" ERROR ") || line.contains("panicked");
        let is_warn = line.contains(" WARN ");
        if is_error {
            s.error += 1;
        } else if is_warn {
            s.warn += 1;
        } else {
            continue;
        }
        // "<timestamp>  WARN target: message key=value ...": keep up to the first value.
        let body = line.split_once(' ').map_or(line.as_str(), |(_, rest)| rest.trim_start());
        let kind: String = body.split('=').next().unwrap_or(body).chars().take(160).collect();
        *kinds.entry(kind).or_default() += 1;
    }
    let mut top: Vec<(String, usize)> = kinds.into_iter().collect();
    top.sort_by_key(|k| std::cmp::Reverse(k.1));
    top.truncate(4);
    s.top = top;
    s
}

impl Report {
    pub fn new() -> Report {
        Report {
            schema: SCHEMA,
            when: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            git: git_head(),
            nproc: std::thread::available_parallelism().map(usize::from).unwrap_or(0),
            ..Report::default()
        }
    }

    /// Runs accepted by the API over every phase so far.
    pub fn accepted_runs(&self) -> usize {
        let bulk = match &self.bulk {
            Some(Bulk::Measured(m)) => m.check.accepted,
            _ => 0,
        };
        self.throughput.as_ref().map_or(0, |t| t.check.accepted)
            + self.latency.iter().map(|l| l.check.accepted).sum::<usize>()
            + bulk
    }

    /// Adds up the checks, reads the service logs and computes the ratios.
    pub fn finish(&mut self, sys: &System, anchors: Option<Anchors>) {
        let mut all = Check::default();
        if let Some(t) = &self.throughput {
            all.merge(&t.check);
        }
        for l in &self.latency {
            all.merge(&l.check);
        }
        if let Some(Bulk::Measured(m)) = &self.bulk {
            all.merge(&m.check);
        }
        self.target_unreadable = sys.target().unreadable();
        if let Some(p) = self.workflows.as_ref().and_then(|w| w.plain.as_ref()) {
            all.merge(&p.check);
        }
        let workflows_ok = self.workflows.as_ref().is_none_or(|w| w.check().ok());
        let notify_ok = self.notify.iter().all(Notify::ok);
        for n in &self.notify {
            all.merge(&n.check);
        }
        self.correct = all.ok() && workflows_ok && notify_ok && self.failures.is_empty() && self.target_unreadable == 0;
        self.correctness = all;
        for s in &sys.services {
            self.service_logs.insert(s.name.to_string(), scan_log(&s.log));
        }
        if let Some(a) = &anchors {
            if let Some(t) = &self.throughput {
                if let Some(r) = anchors::ratio(t.runs_per_s, a.get(anchors::RUNS_PER_S)) {
                    self.ratios.insert("runs_per_s_vs_composite".into(), r);
                }
            }
            for l in &self.latency {
                // Lower is better: theirs / ours.
                if let Some(r) = a.p99_at(l.rate).and_then(|theirs| anchors::ratio(theirs, Some(l.to_terminal_ms.p99)))
                {
                    self.ratios.insert(format!("p99_terminal_r{}_vs_composite", l.rate), r);
                }
            }
        }
        self.anchors = anchors;
    }

    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    pub fn table(&self) -> String {
        let mut o = String::new();
        let a = self.anchors.as_ref();
        let _ = writeln!(
            o,
            "\nSwitchyard benchmark  {}  git {}  {} cores  (api, worker, scheduler: separate processes)",
            self.when,
            self.git.as_deref().unwrap_or("?"),
            self.nproc
        );
        let pg: Vec<String> = self.postgres_settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(o, "Postgres: {}", pg.join(" "));
        let _ = writeln!(
            o,
            "Workers: {} process(es), WORKER_CONCURRENCY={}",
            self.workers,
            self.worker_concurrency.as_deref().unwrap_or("default")
        );
        if self.box_busy_before_pct >= 15.0 {
            let _ = writeln!(
                o,
                "WARNING: the box was {:.0} % busy before the start: other work skews these figures",
                self.box_busy_before_pct
            );
        }
        if let Some(t) = &self.throughput {
            let _ = writeln!(
                o,
                "\n(a) end-to-end throughput, closed loop: {} clients, {} repetitions after {} warm-up runs; the median one:",
                t.clients,
                t.repetitions.len(),
                t.warmup
            );
            let vs = match (a.and_then(|a| a.get(anchors::RUNS_PER_S)), self.ratios.get("runs_per_s_vs_composite")) {
                (Some(c), Some(r)) => format!("   composite (BullMQ+PG) {c:.0} runs/s → {r:.2}×"),
                _ => String::new(),
            };
            let _ = writeln!(
                o,
                "    runs/s (first trigger → last finished_at)  {:>8.0}{vs}{}",
                t.runs_per_s,
                if t.timed_out { "   TIMED OUT" } else { "" }
            );
            let _ = writeln!(o, "    window                                     {:>8.2} s ({} runs)", t.secs, t.runs);
            let reps: Vec<String> = t
                .repetitions
                .iter()
                .map(|r| {
                    format!("{:.0} ({:.0} µs)", r.runs_per_s, r.cpu_us_per_run.get("total").copied().unwrap_or(0.0))
                })
                .collect();
            let _ = writeln!(
                o,
                "    every repetition: runs/s (CPU/run)         {}   spread {:.1} % / {:.1} %",
                reps.join(", "),
                t.runs_per_s_spread_pct,
                t.cpu_spread_pct
            );
            let _ = writeln!(o, "    trigger call p50 / p95 / p99 / max ms      {}", t.trigger_ms);
            let _ = writeln!(
                o,
                "    box busy                                   {:>8.1} %   (not ours: {:.0} µs/run)",
                t.usage.box_busy_pct,
                t.cpu_us_per_run.get("other").copied().unwrap_or(0.0)
            );
            let _ = writeln!(o, "\n(g) CPU per run over (a)          µs/run    cores");
            for (k, us) in &t.cpu_us_per_run {
                if k == "total" || k == "other" {
                    continue;
                }
                let _ = writeln!(o, "    {k:<28} {us:>9.0} {:>8.2}", t.cores.get(k).copied().unwrap_or(0.0));
            }
            let _ = writeln!(
                o,
                "    {:<28} {:>9.0}",
                "total (the parts above)",
                t.cpu_us_per_run.get("total").copied().unwrap_or(0.0)
            );
            let _ = writeln!(
                o,
                "    Postgres per run (whole cluster): {:.2} write transactions, {:.0} WAL bytes",
                t.pg_write_xacts_per_run, t.pg_wal_bytes_per_run
            );
        }
        if !self.latency.is_empty() {
            let _ = writeln!(
                o,
                "\n(b) latency at fixed offered rates (2 s warm-up, then measured; ms p50 / p95 / p99 / max)"
            );
            let _ = writeln!(
                o,
                "    rate   offered  runs   trigger→target request       trigger→terminal committed   box %"
            );
            for l in &self.latency {
                let mut note = load_note(l.overloaded_after_s, false);
                if l.missing_target + l.missing_terminal > 0 {
                    note += &format!("   missing: {} at target, {} terminal", l.missing_target, l.missing_terminal);
                }
                let _ = writeln!(
                    o,
                    "    {:<6} {:>7.0}  {:<6} {:<28} {:<28} {:>5.0}{note}",
                    l.rate,
                    l.offered_per_s,
                    l.runs,
                    l.to_target_ms.to_string(),
                    l.to_terminal_ms.to_string(),
                    l.box_busy_pct,
                );
                if let Some(p99) = a.and_then(|a| a.p99_at(l.rate)) {
                    let r = self.ratios.get(&format!("p99_terminal_r{}_vs_composite", l.rate)).copied().unwrap_or(0.0);
                    let _ = writeln!(o, "           composite (BullMQ+PG) p99 {p99:.2} ms → ours {r:.2}× lower");
                }
                let g = &l.stages;
                let _ = writeln!(
                    o,
                    "           stages p50 / p99 ms: trigger call {:.2} / {:.2}, → target request {:.2} / {:.2}, → terminal {:.2} / {:.2}; slowest 1 %: {:.0} / {:.0} / {:.0} % of their time",
                    g.trigger_ms.p50,
                    g.trigger_ms.p99,
                    g.queue_and_dispatch_ms.p50,
                    g.queue_and_dispatch_ms.p99,
                    g.outcome_and_commit_ms.p50,
                    g.outcome_and_commit_ms.p99,
                    g.slowest_share_pct[0],
                    g.slowest_share_pct[1],
                    g.slowest_share_pct[2]
                );
                let s = &l.stalls;
                let top: Vec<String> = s.during_slow.iter().take(3).map(|(w, n)| format!("{w} ×{n}")).collect();
                let _ = writeln!(
                    o,
                    "           trigger calls ≥20 ms: {}; Postgres waits during them: {}; checkpoints {}, WAL segments +{}, WAL buffers full {}{}",
                    s.slow_triggers,
                    if top.is_empty() { "-".to_string() } else { top.join(", ") },
                    s.checkpoints,
                    s.wal_segments_added,
                    s.wal_buffers_full,
                    if s.autovacuum.is_empty() { String::new() } else { format!("; autovacuum: {}", s.autovacuum.join(" | ")) }
                );
            }
        }
        match &self.bulk {
            Some(Bulk::NotBuilt { status }) => {
                let _ = writeln!(o, "\n(c) bulk trigger (100 items/call): n/a (endpoint not built: HTTP {status})");
            }
            Some(Bulk::Measured(m)) => {
                let _ = writeln!(o, "\n(c) bulk trigger, 100 items/call, {} clients, {} runs", m.clients, m.runs);
                let _ = writeln!(
                    o,
                    "    runs/s end to end {:.0}; accepted {:.0}/s; call ms p50 / p95 / p99 / max {}{}",
                    m.runs_per_s,
                    m.accepted_per_s,
                    m.call_ms,
                    if m.timed_out { "   TIMED OUT" } else { "" }
                );
            }
            None => {}
        }
        if let Some(q) = &self.queue {
            let _ = writeln!(o, "\n(d) Redis dequeue(64) + ack, {} per depth", q.shallow.count);
            let _ = writeln!(o, "    {:>9} queued   {:>9.0} /s", q.shallow.depth, q.shallow.per_s);
            let _ = writeln!(
                o,
                "    {:>9} queued   {:>9.0} /s   (ratio deep/shallow {:.2})",
                q.deep.depth, q.deep.per_s, q.ratio
            );
            let _ = writeln!(
                o,
                "(e) Redis bytes per queued run ({} entries): used_memory {:.0} B, ready zset {:.0} B",
                q.memory.entries, q.memory.used_memory_bytes_per_run, q.memory.zset_bytes_per_run
            );
        }
        if let Some(f) = &self.fairness {
            let _ = writeln!(
                o,
                "\n(q) fair queueing: a job capped at {} in flight, {} ms a dispatch; key A {} queued, key B one run a second",
                f.cap, f.hold_ms, f.backlog
            );
            for r in &f.runs {
                let _ = writeln!(
                    o,
                    "    {:<12}  B waits max {:>8.1} ms ({} of {} dispatched)   A {:>6.0} /s",
                    r.fairness,
                    r.b_max_wait_ms,
                    r.b_waits_ms.len(),
                    r.b_waits_ms.len() + r.b_undispatched,
                    r.a_per_s
                );
            }
            let _ = writeln!(o, "    A's rate, round robin / oldest first {:.2}", f.a_ratio);
            let _ = writeln!(o, "    dequeue(64) + ack with {} keys, {} per fairness:", f.keys, f.cost[0].count);
            for c in &f.cost {
                let _ = writeln!(
                    o,
                    "    {:<12}  dequeue {:>8.0} /s   enqueue {:>8.0} /s",
                    c.fairness, c.dequeue_per_s, c.enqueue_per_s
                );
            }
            let _ = writeln!(o, "    dequeue cost per run, round robin / oldest first {:.2}", f.dequeue_cost_ratio);
        }
        if let Some(p) = &self.partitions {
            let on = if p.cluster { "Redis Cluster" } else { "one Redis node" };
            let _ = writeln!(
                o,
                "\n(p) queue partitions on {on}: dequeue(64) + ack by {} tasks, {} projects, {} entries",
                p.tasks, p.projects, p.runs[0].count
            );
            for r in &p.runs {
                let _ = writeln!(o, "    {:>3} partition(s)   {:>9.0} /s", r.partitions, r.per_s);
            }
            let _ = writeln!(o, "    ratio many/one {:.2}", p.ratio);
        }
        if let Some(r) = &self.reports {
            let _ = writeln!(
                o,
                "\n(y) reports over {} ended runs of one project (written in {:.0} s, rolled up in {:.1} s, {} rollup rows)",
                r.runs, r.seed_secs, r.rollup_secs, r.rollup_rows
            );
            for (path, s) in &r.queries {
                let _ = writeln!(o, "    {path:<62} p50 {:>7.2} ms  max {:>7.2} ms", s.p50, s.max);
            }
            for (path, s) in &r.without_rollup {
                let _ = writeln!(o, "    without rollups: {path:<45} p50 {:>7.2} ms  max {:>7.2} ms", s.p50, s.max);
            }
            let _ = writeln!(o, "    every report within 200 ms at p50: {}", r.within_200ms);
        }
        if let Some(r) = &self.retention {
            let _ = writeln!(
                o,
                "\n(r) trigger→terminal at {}/s with old runs in the tables ({} written in {:.0} s; tables {:.0} MB)",
                r.rate, r.history, r.seed_secs, r.tables_mb
            );
            let rows = r
                .empty
                .iter()
                .map(|l| ("empty tables", l))
                .chain(r.full.iter().map(|l| ("with the history", l)))
                .chain(std::iter::once(("while pruning it", &r.pruning)));
            for (i, (what, l)) in rows.enumerate() {
                let t = &l.to_terminal_ms;
                let cpu = r.cpu_us_per_run.get(i).map(|c| {
                    let get = |k: &str| c.get(k).copied().unwrap_or(0.0);
                    format!(
                        "  CPU µs/run api {:.0} worker {:.0} postgres {:.0}, WAL {:.0} B",
                        get("api"),
                        get("worker"),
                        get("postgres"),
                        get("wal_bytes")
                    )
                });
                let _ = writeln!(
                    o,
                    "    {what:<18} p50 {:>6.2} ms  p95 {:>6.2} ms  p99 {:>6.2} ms{}",
                    t.p50,
                    t.p95,
                    t.p99,
                    cpu.unwrap_or_default()
                );
            }
            let _ = writeln!(
                o,
                "    median p99 ratios: history/empty {:.2} ({}: the empty tables' own highest is {:.2}× their median), \
                 pruning/empty {:.2}; pruned {} rows ({:.0}/s), slowest batch {:.1} ms",
                r.p99_ratio_full,
                if r.full_within_noise { "within noise" } else { "beyond noise" },
                r.p99_spread_empty,
                r.p99_ratio_pruning,
                r.pruned,
                r.pruned_per_s,
                r.slowest_prune_ms
            );
        }
        if let Some(i) = &self.idle {
            let per: Vec<String> = i.redis_cmds_per_s.iter().map(|(k, v)| format!("{k} {v:.1}")).collect();
            let _ = writeln!(
                o,
                "\n(f) idle for {:.0} s: Postgres {:.2} transactions/s (bench database)",
                i.secs, i.pg_xact_per_s
            );
            let _ = writeln!(
                o,
                "    Redis commands/s: {}  (whole server, all clients: {:.1})",
                per.join(", "),
                i.redis_server_cmds_per_s
            );
        }
        if !self.pg_tables.is_empty() {
            let _ = writeln!(
                o,
                "\nPostgres work per run, whole benchmark (pg_stat_user_tables / {} runs)",
                self.accepted_runs()
            );
            let _ = writeln!(
                o,
                "    {:<24} {:>9} {:>10} {:>9} {:>8} {:>8} {:>6} {:>8}",
                "table", "seq scans", "seq rows", "idx scans", "inserts", "updates", "HOT %", "deletes"
            );
            for t in &self.pg_tables {
                let _ = writeln!(
                    o,
                    "    {:<24} {:>9.2} {:>10.1} {:>9.2} {:>8.2} {:>8.2} {:>6.0} {:>8.2}",
                    t.table, t.seq_scans, t.seq_rows_read, t.index_scans, t.inserts, t.updates, t.hot_pct, t.deletes
                );
            }
        }
        if let Some(w) = &self.workflows {
            workflows_table(&mut o, w);
        }
        for n in &self.notify {
            notify_table(&mut o, n);
        }
        if !self.goals.is_empty() {
            let _ = writeln!(o, "\ngoals");
            for g in &self.goals {
                let _ = writeln!(o, "    {:<72} {}  → {}", g.name, g.got, if g.met { "MET" } else { "MISSED" });
            }
        }
        let c = &self.correctness;
        let _ = writeln!(
            o,
            "\ncorrectness: {} runs accepted; {} API errors; {} never delivered; {} delivered more than once ({} extra, {} same attempt); {} needed >1 attempt; final statuses {:?}  → {}",
            c.accepted,
            c.api_errors,
            c.never_delivered,
            c.duplicate_runs,
            c.extra_deliveries,
            c.same_attempt_redeliveries,
            c.multi_attempt_runs,
            c.statuses,
            if self.correct { "OK" } else { "PROBLEMS" }
        );
        if let Some(w) = &self.workflows {
            let c = w.check();
            let _ = writeln!(
                o,
                "    workflows: {} runs accepted, {} API errors, final statuses {:?}; {} steps: {} without a job run, {} with several; {} requests: {} steps never requested, {} requested again  → {}",
                c.workflow_runs,
                c.api_errors,
                c.statuses,
                c.steps,
                c.steps_without_job_run,
                c.steps_with_several_job_runs,
                c.requests,
                c.steps_never_requested,
                c.steps_requested_again,
                if c.ok() { "OK" } else { "PROBLEMS" }
            );
            for s in &c.api_error_samples {
                let _ = writeln!(o, "    e.g. {s}");
            }
        }
        for n in &self.notify {
            let c = &n.notify_check;
            let _ = writeln!(
                o,
                "    notifications: {} runs; webhooks {} missing, {} more than once ({} same delivery id); subscription events {} missing, {} more than once; {} for unknown runs; {} job_run rows left; subscription rows {:?}  → {}",
                c.runs,
                c.webhook_missing,
                c.webhook_repeated,
                c.webhook_same_delivery_id,
                c.subscription_missing,
                c.subscription_repeated,
                c.unknown_runs,
                c.job_run_rows_left,
                c.subscription_rows,
                if n.ok() { "OK" } else { "PROBLEMS" }
            );
        }
        if self.target_unreadable > 0 {
            let _ = writeln!(o, "    the target received {} requests without a run id", self.target_unreadable);
        }
        for (k, v) in &c.api_error_kinds {
            let _ = writeln!(o, "    API error {k}: {v}");
        }
        for s in &c.api_error_samples {
            let _ = writeln!(o, "    e.g. {s}");
        }
        for (name, l) in &self.service_logs {
            if l.warn + l.error > 0 {
                let _ = writeln!(o, "    {name} logged {} ERROR and {} WARN lines:", l.error, l.warn);
                for (kind, n) in &l.top {
                    let _ = writeln!(o, "      {n:>6} × {kind}");
                }
            }
        }
        if let Some(why) = a.and_then(|a| a.failure.as_ref()) {
            let _ = writeln!(o, "\nanchors: no composite figure: {why}");
        }
        let laps: Vec<String> = self.phase_secs.iter().map(|(k, v)| format!("{k} {v:.0} s")).collect();
        let _ = writeln!(o, "\nphase durations: {}", laps.join(", "));
        for f in &self.failures {
            let _ = writeln!(o, "FAILED {f}");
        }
        o
    }
}

fn fan_table(o: &mut String, title: &str, f: &Fan) {
    let _ = writeln!(
        o,
        "    {title}: root → {} → join, {} run(s){}; created in {:.0} ms",
        f.width,
        f.runs.len(),
        if f.timed_out { "   TIMED OUT" } else { "" },
        f.create_ms
    );
    let _ = writeln!(
        o,
        "      trigger call   completed   root end→fan pass   pass→first / last fan request   fan ends spread   fan-in passes   last end→join pass / request"
    );
    for r in &f.runs {
        let _ = writeln!(
            o,
            "      {:>9.1}   {:>9.1}   {:>17.1}   {:>13.1} / {:<15.1}   {:>15.1}   {:>13}   {:>10.1} / {:.1}",
            r.trigger_call_ms,
            r.completed_ms,
            r.root_end_to_fan_pass_ms,
            r.fan_pass_to_first_request_ms,
            r.fan_pass_to_last_request_ms,
            r.fan_ends_spread_ms,
            r.fan_in_passes,
            r.last_end_to_join_pass_ms,
            r.last_end_to_join_request_ms
        );
    }
    if f.runs.len() > 1 {
        let _ = writeln!(o, "      completed {}; join step-to-step {}", f.completed_ms, f.join_ms);
    }
    let cpu: Vec<String> = ["api", "worker", "scheduler", "postgres", "redis"]
        .iter()
        .filter_map(|k| f.usage.cpu_secs.get(*k).map(|v| format!("{k} {v:.2}")))
        .collect();
    let _ = writeln!(o, "      CPU s over the run(s): {}   (box busy {:.0} %)", cpu.join(", "), f.usage.box_busy_pct);
}

/// What an open loop's figures stand on: it stopped early, or did not settle.
fn load_note(overloaded_after_s: Option<f64>, timed_out: bool) -> String {
    let mut note = String::new();
    if let Some(s) = overloaded_after_s {
        note += &format!(
            "   OVERLOADED: load stopped after {s} s (target lagged the triggers by over {MAX_BACKLOG} s of load)"
        );
    }
    if timed_out {
        note += "   TIMED OUT";
    }
    note
}

/// CPU µs per run of the system's processes and in all.
fn cpu_list(cpu_us_per_run: &BTreeMap<String, f64>) -> String {
    let cpu: Vec<String> = ["api", "worker", "scheduler", "postgres", "redis", "total"]
        .iter()
        .filter_map(|k| cpu_us_per_run.get(*k).map(|v| format!("{k} {v:.0}")))
        .collect();
    cpu.join(", ")
}

fn workflows_table(o: &mut String, w: &Workflows) {
    if w.chain.is_some() || w.plain.is_some() || w.fan.is_some() || w.wide.is_some() {
        let _ = writeln!(o, "\n(w) workflow runs, every step a job step calling the target (ms p50 / p95 / p99 / max)");
    }
    if let Some(c) = &w.chain {
        let note = load_note(c.overloaded_after_s, c.timed_out);
        let _ = writeln!(
            o,
            "    chain a → b → c at {} runs/s (offered {:.0}/s), {} runs measured after {} warm-up{note}",
            c.rate, c.offered_per_s, c.runs, c.warmup_runs
        );
        let _ = writeln!(o, "      completed workflow runs/s            {:>8.1}", c.completed_per_s);
        let _ = writeln!(o, "      trigger call                         {}", c.trigger_ms);
        let _ = writeln!(o, "      trigger → workflow run completed     {}", c.to_completed_ms);
        let _ = writeln!(o, "      step-to-step (end → next request)    {}", c.step_to_step_ms);
        let _ = writeln!(o, "        end → engine pass that starts next {}", c.end_to_pass_ms);
        let _ = writeln!(o, "        that pass → next request           {}", c.pass_to_request_ms);
        let _ = writeln!(o, "      box busy                             {:>8.1} %", c.box_busy_pct);
        let _ = writeln!(o, "      CPU µs per workflow run              {}", cpu_list(&c.cpu_us_per_run));
        let _ = writeln!(
            o,
            "      Postgres per workflow run (cluster)  {:.2} write transactions, {:.0} WAL bytes",
            c.pg_write_xacts_per_run, c.pg_wal_bytes_per_run
        );
    }
    if let Some(p) = &w.plain {
        let note = load_note(p.overloaded_after_s, p.timed_out);
        let _ = writeln!(o, "    plain runs at the chain's {} job runs/s, {} runs{note}", p.rate, p.runs);
        let _ = writeln!(o, "      CPU µs per run                       {}", cpu_list(&p.cpu_us_per_run));
    }
    if let Some(f) = &w.fan {
        fan_table(o, "fan-out/fan-in", f);
    }
    if let Some(f) = &w.wide {
        fan_table(o, "wide fan-out", f);
    }
    if let Some(s) = &w.closed {
        saturation_table(o, s);
    }
}

fn saturation_table(o: &mut String, s: &Saturation) {
    let _ = writeln!(
        o,
        "\n(s) workflow saturation: chain a → b → c, closed loop, {} runs in flight; {} warm-up runs ({:.1} s), then {:.1} s measured{}",
        s.inflight,
        s.warmup_runs,
        s.warmup_secs,
        s.secs,
        if s.timed_out { "   GAVE UP on a stalled run" } else { "" }
    );
    let _ = writeln!(
        o,
        "    workflow runs/s                        {:>8.1}   ({} finished in the window)",
        s.runs_per_s, s.runs
    );
    let _ = writeln!(o, "    ms p50 / p95 / p99 / max");
    let _ = writeln!(o, "      trigger call                         {}", s.trigger_ms);
    let _ = writeln!(o, "      trigger → finished_at                {}", s.to_finished_ms);
    let _ = writeln!(o, "      trigger → the client saw it          {}", s.to_seen_ms);
    let _ = writeln!(o, "      step-to-step (end → next request)    {}", s.step_to_step_ms);
    let _ = writeln!(o, "    box busy                               {:>8.1} %", s.box_busy_pct);
    let keys = ["api", "worker", "scheduler", "postgres", "postgres_bg", "redis", "target", "bench", "total"];
    let cpu: Vec<String> =
        keys.iter().filter_map(|k| s.cpu_us_per_run.get(*k).map(|v| format!("{k} {v:.0}"))).collect();
    let _ = writeln!(o, "    CPU µs per workflow run                {}", cpu.join(", "));
    let _ = writeln!(
        o,
        "      the system's processes               {:.0}   (the bench's finished-run watcher, counted as bench: {:.0})",
        s.system_cpu_us_per_run, s.watcher_cpu_us_per_run
    );
    let _ = writeln!(
        o,
        "    Postgres per workflow run (cluster)    {:.2} write transactions, {:.0} WAL bytes",
        s.pg_write_xacts_per_run, s.pg_wal_bytes_per_run
    );
    match &s.vs_plain {
        Some(v) => {
            let _ = writeln!(
                o,
                "    against (a)'s plain run                CPU per step {:.0} / plain run {:.0} µs = {:.2}×; WAL per workflow {:.0} / plain run {:.0} B = {:.2}×",
                v.step_cpu_us,
                v.plain_cpu_us,
                v.cpu_step_vs_plain,
                s.pg_wal_bytes_per_run,
                v.plain_wal_bytes,
                v.wal_workflow_vs_plain
            );
        }
        None => {
            let _ = writeln!(o, "    against a plain run: run (a) in the same invocation (--only a,s)");
        }
    }
}

fn notify_table(o: &mut String, n: &Notify) {
    let _ = writeln!(
        o,
        "\n(n) notifications, closed loop: {} clients, {} runs after {} warm-up; each run a terminal webhook{}{}",
        n.clients,
        n.runs,
        n.warmup,
        if n.subscription { " and a subscription event" } else { "" },
        if n.timed_out { "   TIMED OUT" } else { "" }
    );
    let _ = writeln!(o, "    runs/s (first trigger → last finished_at)      {:>8.0}", n.runs_per_s);
    let _ = writeln!(
        o,
        "    deliveries/s (first trigger → last received)  {:>8.0}   ({} in {:.2} s)",
        n.deliveries_per_s, n.deliveries, n.deliveries_secs
    );
    let _ = writeln!(o, "    finished_at → webhook received ms              {}", n.webhook_ms);
    if n.subscription {
        let _ = writeln!(o, "    finished_at → subscription event received ms   {}", n.subscription_ms);
    }
    let _ = writeln!(o, "    box busy                                       {:>8.1} %", n.usage.box_busy_pct);
    let keys = ["api", "worker", "scheduler", "postgres", "postgres_bg", "redis", "total"];
    let cpu: Vec<String> =
        keys.iter().filter_map(|k| n.cpu_us_per_run.get(*k).map(|v| format!("{k} {v:.0}"))).collect();
    let _ = writeln!(o, "    CPU µs per run                     {}", cpu.join(", "));
    if let Some(x) = &n.extra_cpu_us_per_run_vs_a {
        let extra: Vec<String> = keys.iter().filter_map(|k| x.get(*k).map(|v| format!("{k} {v:+.0}"))).collect();
        let _ = writeln!(o, "    extra CPU µs per run vs (a)        {}", extra.join(", "));
    }
    let _ = writeln!(
        o,
        "    Postgres per run (cluster)         {:.2} write transactions, {:.0} WAL bytes",
        n.pg_write_xacts_per_run, n.pg_wal_bytes_per_run
    );
}
