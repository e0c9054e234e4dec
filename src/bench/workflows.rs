//! Phase (w): workflow runs, in three parts, each on a workflow of its own
//! whose job steps all call the target:
//! - chain: `a → b → c` triggered open loop at a fixed rate (every ~1 ms,
//!   as many as are due, whatever the answers), a warm-up then a measured
//!   window; completed workflow runs/s, trigger → workflow run completed,
//!   and step-to-step latency (below).
//! - fan: `root → N parallel steps → join`, a few runs one after another:
//!   each run's completion time, its join's step-to-step latency (the last
//!   fan step's end → the join's request), and where the time went.
//! - wide: the same with 1,000 fan steps (`root → 1000 → join`),
//!   once: every step has exactly one job run and one request, the run
//!   completes; its wall time, where the time went and the CPU it took.
//!
//! Step-to-step latency is the instant the target received step N+1's
//! request less step N's committed end: its job run's `finished_at`, which
//! the worker's outcome statement sets (`now()` of a one-statement
//! transaction, just before its commit). Trigger → completed is the wall
//! clock just before the trigger was sent to the workflow run's
//! `finished_at` (the engine's `now()` in the transaction that ends it).
//! Each pairs a wall clock read here (`Utc::now()`, the target's thread
//! included) with one Postgres wrote: that holds because every process of
//! the benchmark runs on this one machine and reads the same system clock.
//!
//! Where the time of a fan run goes is read from what the engine writes:
//! a step's `started_at` and a decision's `created_at` are `now()` of the
//! engine pass that made them (the start of its transaction), so the fan
//! steps' `started_at` is the start of the pass that started them, the
//! number of distinct `created_at` of the fan steps' `step_*` decisions is
//! the number of passes that saw them end, and the join's `started_at` is
//! the start of the pass that started it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::check::{self, Calls, Check};
use super::client::Sent;
use super::meter::{ours, Meter, Usage};
use super::open_loop::{offer, Offered};
use super::opts::Opts;
use super::saturation::Saturation;
use super::stats::{summarize, Summary};
use super::system::System;
use super::target::StepHit;

/// A part gives up when neither the target nor the workflow runs moved for this long.
const STALL: Duration = Duration::from_secs(20);
/// The step-to-step p99 the chain must stay under at 100 workflow runs/s.
pub const STEP_TO_STEP_P99_MS: f64 = 15.0;
pub const STEP_TO_STEP_RATE: u32 = 100;
/// The most a workflow step may cost against a plain run at the same rate.
pub const STEP_COST_RATIO: f64 = 1.3;
/// Steps of the chain `a → b → c`: job runs, and requests, per workflow run.
pub const CHAIN_STEPS: usize = 3;

/// Correctness of a part's workflow runs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WfCheck {
    /// Workflow runs the API accepted.
    pub workflow_runs: usize,
    pub api_errors: usize,
    pub api_error_samples: Vec<String>,
    /// Final statuses of the accepted runs ("open": no `finished_at` yet).
    pub statuses: BTreeMap<String, usize>,
    /// Steps the accepted runs have in all.
    pub steps: usize,
    /// Steps that got no job run, and steps that got more than one.
    pub steps_without_job_run: usize,
    pub steps_with_several_job_runs: usize,
    /// Requests the target received for the runs' steps.
    pub requests: usize,
    /// Steps the target never saw, and steps it saw more than once.
    pub steps_never_requested: usize,
    pub steps_requested_again: usize,
}

impl WfCheck {
    pub fn ok(&self) -> bool {
        self.api_errors == 0
            && self.statuses.keys().all(|s| s == "completed")
            && self.steps_without_job_run == 0
            && self.steps_with_several_job_runs == 0
            && self.steps_never_requested == 0
            && self.steps_requested_again == 0
            && self.requests == self.steps
    }

    pub fn merge(&mut self, o: &WfCheck) {
        self.workflow_runs += o.workflow_runs;
        self.api_errors += o.api_errors;
        for s in &o.api_error_samples {
            if self.api_error_samples.len() < 5 {
                self.api_error_samples.push(s.clone());
            }
        }
        for (k, v) in &o.statuses {
            *self.statuses.entry(k.clone()).or_default() += v;
        }
        self.steps += o.steps;
        self.steps_without_job_run += o.steps_without_job_run;
        self.steps_with_several_job_runs += o.steps_with_several_job_runs;
        self.requests += o.requests;
        self.steps_never_requested += o.steps_never_requested;
        self.steps_requested_again += o.steps_requested_again;
    }
}

/// Part one: the chain at a fixed rate.
#[derive(Debug, Serialize)]
pub struct Chain {
    pub rate: u32,
    /// Trigger calls started per second, warm-up included.
    pub offered_per_s: f64,
    pub measured_secs: u64,
    pub runs: usize,
    pub warmup_runs: usize,
    /// Measured runs completed / (first measured trigger → their last `finished_at`).
    pub completed_per_s: f64,
    pub trigger_ms: Summary,
    pub to_completed_ms: Summary,
    /// a → b and b → c of every measured run.
    pub step_to_step_ms: Summary,
    /// Its two parts: step N's end → the start of the engine pass that
    /// started step N+1 (its `started_at`), and that → step N+1's request.
    pub end_to_pass_ms: Summary,
    pub pass_to_request_ms: Summary,
    pub box_busy_pct: f64,
    /// CPU µs per workflow run (three job runs), per part of the system,
    /// from the first trigger to the last run's end, warm-up included.
    pub cpu_us_per_run: BTreeMap<String, f64>,
    /// Cluster-wide Postgres write transactions and WAL bytes per workflow
    /// run, over the same window.
    pub pg_write_xacts_per_run: f64,
    pub pg_wal_bytes_per_run: f64,
    /// Seconds into the part when the target lagged by over [`MAX_BACKLOG`](super::open_loop::MAX_BACKLOG)
    /// of load and the triggers stopped; `None` when the rate was sustained.
    pub overloaded_after_s: Option<f64>,
    pub timed_out: bool,
    pub check: WfCheck,
}

/// The chain's yardstick (see [`plain_at_chain_rate`]).
#[derive(Debug, Serialize)]
pub struct Plain {
    /// Runs/s offered: the chain's workflow runs/s times its steps.
    pub rate: u32,
    pub runs: usize,
    pub cpu_us_per_run: BTreeMap<String, f64>,
    pub overloaded_after_s: Option<f64>,
    pub timed_out: bool,
    /// Every run reached the target once and completed.
    pub check: Check,
}

/// One fan run, its times in ms.
#[derive(Debug, Serialize)]
pub struct FanRun {
    pub workflow_run_id: String,
    pub trigger_call_ms: f64,
    /// Trigger sent → the run's `finished_at`.
    pub completed_ms: f64,
    /// The root's end → the start of the pass that started the fan steps.
    pub root_end_to_fan_pass_ms: f64,
    /// That pass's start → the first and the last fan request at the target.
    pub fan_pass_to_first_request_ms: f64,
    pub fan_pass_to_last_request_ms: f64,
    /// The first fan step's end → the last one's.
    pub fan_ends_spread_ms: f64,
    /// Engine passes that saw fan steps end.
    pub fan_in_passes: usize,
    /// The last fan step's end → the start of the pass that started the join.
    pub last_end_to_join_pass_ms: f64,
    /// The join's step-to-step latency: the last fan step's end → the join's request.
    pub last_end_to_join_request_ms: f64,
}

/// Parts two and three: fan-out and fan-in runs, one after another.
#[derive(Debug, Serialize)]
pub struct Fan {
    /// Parallel steps; the workflow has two more (root and join).
    pub width: usize,
    /// The `POST /v1/workflows` call that created it.
    pub create_ms: f64,
    pub runs: Vec<FanRun>,
    pub completed_ms: Summary,
    pub join_ms: Summary,
    /// CPU over the runs (creation excluded).
    pub usage: Usage,
    pub timed_out: bool,
    pub check: WfCheck,
}

/// A figure held against the benchmark's goal for it (docs/benchmarks.md).
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    pub name: String,
    pub got: String,
    pub met: bool,
}

#[derive(Debug, Default, Serialize)]
pub struct Workflows {
    /// Plain runs at the chain's rate of job runs, measured just before it.
    pub plain: Option<Plain>,
    pub chain: Option<Chain>,
    pub fan: Option<Fan>,
    pub wide: Option<Fan>,
    /// Phase (s): the chain in a closed loop ([`saturation`](super::saturation)).
    pub closed: Option<Saturation>,
}

impl Workflows {
    /// Every part's check, added up.
    pub fn check(&self) -> WfCheck {
        let mut all = WfCheck::default();
        let parts = [
            self.chain.as_ref().map(|c| &c.check),
            self.fan.as_ref().map(|f| &f.check),
            self.wide.as_ref().map(|w| &w.check),
            self.closed.as_ref().map(|s| &s.check),
        ];
        for c in parts.into_iter().flatten() {
            all.merge(c);
        }
        all
    }

    /// The benchmark's goals for workflows, with what this run got.
    pub fn goals(&self) -> Vec<Goal> {
        let mut out = Vec::new();
        if let Some(c) = &self.chain {
            let sustained = c.overloaded_after_s.is_none() && !c.timed_out && c.step_to_step_ms.n > 0;
            let mut got = format!("p99 {:.2} ms at {} workflow runs/s", c.step_to_step_ms.p99, c.rate);
            if !sustained {
                got += " (rate not sustained)";
            }
            out.push(Goal {
                name: format!(
                    "workflow step-to-step p99 ≤ {STEP_TO_STEP_P99_MS} ms at {STEP_TO_STEP_RATE} workflow runs/s"
                ),
                got,
                met: sustained && c.rate >= STEP_TO_STEP_RATE && c.step_to_step_ms.p99 <= STEP_TO_STEP_P99_MS,
            });
        }
        if let (Some(c), Some(p)) = (&self.chain, &self.plain) {
            let (step, plain) = (ours(&c.cpu_us_per_run) / CHAIN_STEPS as f64, ours(&p.cpu_us_per_run));
            if step > 0.0 && plain > 0.0 {
                let ratio = step / plain;
                // Both loops held their rate, ended, and the yardstick's runs are sound.
                let sustained = c.overloaded_after_s.is_none()
                    && p.overloaded_after_s.is_none()
                    && !c.timed_out
                    && !p.timed_out
                    && p.check.ok();
                out.push(Goal {
                    name: format!("a workflow step costs ≤ {STEP_COST_RATIO}× a plain run at the same rate"),
                    got: format!(
                        "{ratio:.2}× ({step:.0} against {plain:.0} µs at {} job runs/s, the system's processes){}",
                        p.rate,
                        if sustained { "" } else { " (a loop did not hold its rate, settle or check out)" }
                    ),
                    met: sustained && ratio <= STEP_COST_RATIO,
                });
            }
        }
        if let Some(w) = &self.wide {
            let c = &w.check;
            let got = format!(
                "{}; {} steps, {} requests; {} lost, {} doubled",
                if c.statuses.keys().all(|s| s == "completed") && !w.timed_out { "completed" } else { "NOT completed" },
                c.steps,
                c.requests,
                c.steps_without_job_run + c.steps_never_requested,
                c.steps_with_several_job_runs + c.steps_requested_again,
            );
            out.push(Goal {
                name: format!("the {}-way fan-out completes with no step lost or doubled", w.width),
                got,
                met: c.ok() && !w.timed_out && c.workflow_runs > 0,
            });
        }
        out
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

/// `to − from` (zero if negative).
pub(super) fn between(from: DateTime<Utc>, to: DateTime<Utc>) -> Duration {
    (to - from).to_std().unwrap_or(Duration::ZERO)
}

fn job_step(step_ref: &str, job: &str, depends_on: &[String]) -> Value {
    json!({ "step_ref": step_ref, "job_id": job, "depends_on": depends_on })
}

/// The chain `a → b → c`, every step a run of `job`.
pub(super) fn chain_steps(job: &str) -> Value {
    json!([job_step("a", job, &[]), job_step("b", job, &["a".into()]), job_step("c", job, &["b".into()])])
}

fn fan_refs(width: usize) -> Vec<String> {
    (0..width).map(|i| format!("f{i}")).collect()
}

type Stamp = Option<DateTime<Utc>>;

/// A step as Postgres shows it.
#[derive(Default)]
struct StepSeen {
    /// The start of the engine pass that started it.
    started: Stamp,
    /// Its job runs' `finished_at`, one per job run.
    ends: Vec<Stamp>,
}

/// One step row with one of its job runs, if any.
#[derive(sqlx::FromRow)]
struct StepRow {
    workflow_run_id: String,
    step_ref: String,
    started_at: Stamp,
    job_run_id: Option<String>,
    finished_at: Stamp,
}

/// What Postgres and the target show of a workflow's runs.
pub(super) struct Observed {
    /// Workflow run → its status and `finished_at`.
    runs: HashMap<String, (String, Stamp)>,
    /// (workflow run, step_ref) → the step.
    steps: HashMap<(String, String), StepSeen>,
    /// (workflow run, step_ref) → the target's requests.
    hits: HashMap<(String, String), Vec<StepHit>>,
    pub check: WfCheck,
}

impl Observed {
    /// The step's end: its job run's `finished_at` (the first, if several).
    pub(super) fn end(&self, run: &str, step: &str) -> Stamp {
        self.steps.get(&(run.to_string(), step.to_string())).and_then(|s| s.ends.iter().flatten().min().copied())
    }

    fn started(&self, run: &str, step: &str) -> Stamp {
        self.steps.get(&(run.to_string(), step.to_string())).and_then(|s| s.started)
    }

    /// The wall clock of the step's first request at the target.
    pub(super) fn request(&self, run: &str, step: &str) -> Stamp {
        self.hits.get(&(run.to_string(), step.to_string())).and_then(|h| h.iter().map(|x| x.wall).min())
    }
}

/// Reads the workflow's runs, steps and job runs, and the target's record,
/// and checks the accepted runs against both.
pub(super) async fn observe(sys: &System, workflow: &str, calls: &Calls) -> anyhow::Result<Observed> {
    let accepted: HashSet<&str> = calls.created.iter().map(String::as_str).collect();
    let runs: Vec<(String, String, Stamp)> =
        sqlx::query_as("SELECT id, status, finished_at FROM workflow_runs WHERE workflow_id = $1")
            .bind(workflow)
            .fetch_all(sys.pool())
            .await?;
    let rows: Vec<StepRow> = sqlx::query_as(
        "SELECT s.workflow_run_id, s.step_ref, s.started_at, j.id AS job_run_id, j.finished_at
           FROM workflow_step_runs s
           JOIN workflow_runs w ON w.id = s.workflow_run_id
           LEFT JOIN job_runs j ON j.workflow_step_run_id = s.id
          WHERE w.workflow_id = $1",
    )
    .bind(workflow)
    .fetch_all(sys.pool())
    .await?;
    let mut o = Observed {
        runs: runs.into_iter().map(|(id, status, fin)| (id, (status, fin))).collect(),
        steps: HashMap::new(),
        hits: HashMap::new(),
        check: WfCheck {
            workflow_runs: accepted.len(),
            api_errors: calls.error_count(),
            api_error_samples: calls.samples.clone(),
            ..WfCheck::default()
        },
    };
    for r in rows {
        let seen = o.steps.entry((r.workflow_run_id, r.step_ref)).or_default();
        seen.started = r.started_at;
        if r.job_run_id.is_some() {
            seen.ends.push(r.finished_at);
        }
    }
    for (run, hits) in sys.target().step_hits_of(&accepted) {
        for h in hits {
            o.hits.entry((run.clone(), h.step_ref.clone())).or_default().push(h);
        }
    }
    let c = &mut o.check;
    for id in &accepted {
        let status = match o.runs.get(*id) {
            Some((_, None)) => "open".to_string(),
            Some((s, Some(_))) => s.clone(),
            None => "missing".to_string(),
        };
        *c.statuses.entry(status).or_default() += 1;
    }
    for ((run, step), seen) in &o.steps {
        if !accepted.contains(run.as_str()) {
            continue;
        }
        c.steps += 1;
        match seen.ends.len() {
            0 => c.steps_without_job_run += 1,
            1 => {}
            _ => c.steps_with_several_job_runs += 1,
        }
        match o.hits.get(&(run.clone(), step.clone())).map_or(0, Vec::len) {
            0 => c.steps_never_requested += 1,
            1 => {}
            _ => c.steps_requested_again += 1,
        }
    }
    // Requests for the runs, steps unknown to Postgres included.
    c.requests = o.hits.values().map(Vec::len).sum();
    Ok(o)
}

/// Waits until the workflow has `expected` runs, none without `finished_at`;
/// true when it gave up (deadline, or nothing moved for [`STALL`]).
async fn settle(sys: &System, workflow: &str, expected: usize, deadline: Instant) -> anyhow::Result<bool> {
    let mut progress = ((sys.target().count(), -1i64), Instant::now());
    loop {
        let (open, total): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE finished_at IS NULL), count(*) FROM workflow_runs WHERE workflow_id = $1",
        )
        .bind(workflow)
        .fetch_one(sys.pool())
        .await?;
        if open == 0 && total >= expected as i64 {
            return Ok(false);
        }
        let now = (sys.target().count(), open);
        if now != progress.0 {
            progress = (now, Instant::now());
        }
        if Instant::now() > deadline || progress.1.elapsed() > STALL {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The chain's yardstick: plain runs of the same job at the chain's rate
/// of job runs (three per workflow run), as many as the chain has steps,
/// with CPU measured the same way. A plain run at this rate is not the
/// closed loop's batched run: it pays its own statements and commits, as
/// a step does.
pub async fn plain_at_chain_rate(sys: &System, meter: &Meter, job: &str, opts: &Opts) -> anyhow::Result<Plain> {
    let api = sys.api().clone();
    let per_s = f64::from(opts.wf_rate) * CHAIN_STEPS as f64;
    let hits0 = sys.target().count();
    let before = meter.snapshot(sys).await;
    let o = offer(sys, api.trigger_url(job).into(), per_s, opts.rate_warmup(), opts.wf_measured(), 1).await?;
    let mut calls = Calls::default();
    for s in o.samples {
        calls.record(s.sent);
    }
    let n = calls.created.len();
    let settled = super::settle::settle(sys, job, n, hits0 + n, Instant::now() + Duration::from_secs(60)).await?;
    let usage = meter.usage(&before, &meter.snapshot(sys).await);
    Ok(Plain {
        rate: per_s as u32,
        runs: n,
        cpu_us_per_run: usage.per_run_us(n),
        overloaded_after_s: o.overloaded_after_s,
        timed_out: settled.timed_out,
        check: check::check(sys, job, &calls).await?,
    })
}

/// Part one (see the module doc).
pub async fn chain(sys: &System, meter: &Meter, project: &str, job: &str, opts: &Opts) -> anyhow::Result<Chain> {
    let api = sys.api().clone();
    let wf = api.create_workflow(project, "bench-chain", chain_steps(job)).await?;
    let url: Arc<str> = api.workflow_trigger_url(&wf).into();
    let rate = opts.wf_rate;
    let per_s = f64::from(rate);
    let before = meter.snapshot(sys).await;
    let Offered { samples, warm_n, offered_per_s, busy, overloaded_after_s } =
        offer(sys, url, per_s, opts.rate_warmup(), opts.wf_measured(), CHAIN_STEPS).await?;
    let mut calls = Calls::default();
    let mut measured: Vec<(String, DateTime<Utc>)> = Vec::new();
    let mut trigger_lat = Vec::new();
    for s in samples {
        if s.index >= warm_n {
            trigger_lat.push(s.took);
            if let Sent::Created(id) = &s.sent {
                measured.push((id.clone(), s.wall));
            }
        }
        calls.record(s.sent);
    }
    let timed_out = settle(sys, &wf, calls.created.len(), Instant::now() + Duration::from_secs(60)).await?;
    let usage = meter.usage(&before, &meter.snapshot(sys).await);
    let o = observe(sys, &wf, &calls).await?;

    let (mut to_completed, mut step_to_step) = (Vec::new(), Vec::new());
    let (mut to_pass, mut pass_to_request) = (Vec::new(), Vec::new());
    let mut last_finished: Stamp = None;
    let mut completed = 0;
    for (id, wall) in &measured {
        if let Some((status, Some(fin))) = o.runs.get(id) {
            to_completed.push(between(*wall, *fin));
            if status == "completed" {
                completed += 1;
                last_finished = last_finished.max(Some(*fin));
            }
        }
        for (prev, next) in [("a", "b"), ("b", "c")] {
            if let (Some(end), Some(req)) = (o.end(id, prev), o.request(id, next)) {
                step_to_step.push(between(end, req));
                if let Some(pass) = o.started(id, next) {
                    to_pass.push(between(end, pass));
                    pass_to_request.push(between(pass, req));
                }
            }
        }
    }
    let window = match (measured.first(), last_finished) {
        (Some((_, first)), Some(last)) => between(*first, last).as_secs_f64(),
        _ => 0.0,
    };
    Ok(Chain {
        rate,
        offered_per_s: (offered_per_s * 10.0).round() / 10.0,
        measured_secs: opts.wf_secs,
        runs: measured.len(),
        warmup_runs: warm_n,
        completed_per_s: if window > 0.0 { (completed as f64 / window * 10.0).round() / 10.0 } else { 0.0 },
        trigger_ms: summarize(trigger_lat),
        to_completed_ms: summarize(to_completed),
        step_to_step_ms: summarize(step_to_step),
        end_to_pass_ms: summarize(to_pass),
        pass_to_request_ms: summarize(pass_to_request),
        box_busy_pct: (busy * 10.0).round() / 10.0,
        cpu_us_per_run: usage.per_run_us(calls.created.len()),
        pg_write_xacts_per_run: (usage.pg_write_xacts as f64 / calls.created.len().max(1) as f64 * 100.0).round()
            / 100.0,
        pg_wal_bytes_per_run: (usage.pg_wal_bytes as f64 / calls.created.len().max(1) as f64).round(),
        overloaded_after_s,
        timed_out,
        check: o.check,
    })
}

/// Parts two and three: `runs` runs of `root → width steps → join`, each
/// triggered when the one before has ended.
pub async fn fan(
    sys: &System,
    meter: &Meter,
    project: &str,
    job: &str,
    width: usize,
    runs: usize,
    deadline_per_run: Duration,
) -> anyhow::Result<Fan> {
    let api = sys.api().clone();
    let refs = fan_refs(width);
    let mut steps = vec![job_step("root", job, &[])];
    steps.extend(refs.iter().map(|r| job_step(r, job, &["root".into()])));
    steps.push(job_step("join", job, &refs));
    let t = Instant::now();
    let wf = api.create_workflow(project, &format!("bench-fan-{width}"), Value::from(steps)).await?;
    let create_ms = ms(t.elapsed());
    let url = api.workflow_trigger_url(&wf);

    let before = meter.snapshot(sys).await;
    let mut calls = Calls::default();
    let mut sent: Vec<(String, DateTime<Utc>, Duration)> = Vec::new();
    let mut timed_out = false;
    for _ in 0..runs {
        let (t, wall) = (Instant::now(), Utc::now());
        let s = api.trigger(&url).await;
        let took = t.elapsed();
        if let Sent::Created(id) = &s {
            sent.push((id.clone(), wall, took));
        }
        calls.record(s);
        if settle(sys, &wf, calls.created.len(), Instant::now() + deadline_per_run).await? {
            timed_out = true;
            break;
        }
    }
    let usage = meter.usage(&before, &meter.snapshot(sys).await);
    let o = observe(sys, &wf, &calls).await?;

    let mut out = Vec::new();
    for (id, wall, took) in &sent {
        let fin = o.runs.get(id).and_then(|(_, f)| *f);
        let root_end = o.end(id, "root");
        let fan_pass = refs.iter().filter_map(|r| o.started(id, r)).min();
        let requests: Vec<DateTime<Utc>> = refs.iter().filter_map(|r| o.request(id, r)).collect();
        let ends: Vec<DateTime<Utc>> = refs.iter().filter_map(|r| o.end(id, r)).collect();
        let (first_end, last_end) = (ends.iter().min().copied(), ends.iter().max().copied());
        let passes: i64 = sqlx::query_scalar(
            "SELECT count(DISTINCT created_at) FROM workflow_decisions
              WHERE workflow_run_id = $1 AND decision_type LIKE 'step\\_%' AND step_ref NOT IN ('root', 'join')",
        )
        .bind(id)
        .fetch_one(sys.pool())
        .await?;
        // Signed: a pass that began just before the last fan step's end
        // committed can still see it (its snapshot is taken later).
        let gap = |a: Stamp, b: Stamp| match (a, b) {
            (Some(a), Some(b)) => ((b - a).num_microseconds().unwrap_or(0) as f64 / 10.0).round() / 100.0,
            _ => f64::NAN,
        };
        out.push(FanRun {
            workflow_run_id: id.clone(),
            trigger_call_ms: ms(*took),
            completed_ms: gap(Some(*wall), fin),
            root_end_to_fan_pass_ms: gap(root_end, fan_pass),
            fan_pass_to_first_request_ms: gap(fan_pass, requests.iter().min().copied()),
            fan_pass_to_last_request_ms: gap(fan_pass, requests.iter().max().copied()),
            fan_ends_spread_ms: gap(first_end, last_end),
            fan_in_passes: passes as usize,
            last_end_to_join_pass_ms: gap(last_end, o.started(id, "join")),
            last_end_to_join_request_ms: gap(last_end, o.request(id, "join")),
        });
    }
    let of = |f: fn(&FanRun) -> f64| -> Summary {
        summarize(
            out.iter().map(f).filter(|v| v.is_finite()).map(|v| Duration::from_secs_f64(v.max(0.0) / 1e3)).collect(),
        )
    };
    Ok(Fan {
        width,
        create_ms,
        completed_ms: of(|r| r.completed_ms),
        join_ms: of(|r| r.last_end_to_join_request_ms),
        runs: out,
        usage,
        timed_out,
        check: o.check,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain_with(p99: f64, rate: u32, overloaded: bool) -> Chain {
        let s = Summary { n: 2000, p50: 5.0, p95: 10.0, p99, max: 30.0 };
        Chain {
            rate,
            offered_per_s: f64::from(rate),
            measured_secs: 10,
            runs: 1000,
            warmup_runs: 200,
            completed_per_s: 99.9,
            trigger_ms: s,
            to_completed_ms: s,
            step_to_step_ms: s,
            end_to_pass_ms: s,
            pass_to_request_ms: s,
            box_busy_pct: 70.0,
            cpu_us_per_run: BTreeMap::new(),
            pg_write_xacts_per_run: 0.0,
            pg_wal_bytes_per_run: 0.0,
            overloaded_after_s: overloaded.then_some(4.0),
            timed_out: false,
            check: WfCheck::default(),
        }
    }

    fn wide_with(check: WfCheck) -> Fan {
        Fan {
            width: 998,
            create_ms: 20.0,
            runs: Vec::new(),
            completed_ms: Summary::default(),
            join_ms: Summary::default(),
            usage: Usage::default(),
            timed_out: false,
            check,
        }
    }

    fn clean(runs: usize, steps: usize) -> WfCheck {
        WfCheck {
            workflow_runs: runs,
            statuses: [("completed".to_string(), runs)].into(),
            steps,
            requests: steps,
            ..WfCheck::default()
        }
    }

    #[test]
    fn the_step_to_step_goal_needs_the_rate_sustained_and_p99_within_15_ms() {
        let met = |c: Chain| Workflows { chain: Some(c), ..Default::default() }.goals()[0].met;
        assert!(met(chain_with(15.0, 100, false)));
        assert!(!met(chain_with(15.01, 100, false)));
        assert!(!met(chain_with(9.0, 100, true)), "an overloaded rate does not count");
        assert!(!met(chain_with(9.0, 50, false)), "a lower rate does not count");
    }

    #[test]
    fn the_step_cost_goal_sets_a_third_of_the_chain_against_a_plain_run_at_its_rate() {
        let cpu = |pairs: &[(&str, f64)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let plain = |overloaded_after_s| Plain {
            rate: 300,
            runs: 3000,
            cpu_us_per_run: cpu(&[("api", 100.0), ("worker", 100.0), ("postgres", 300.0), ("target", 900.0)]),
            overloaded_after_s,
            timed_out: false,
            check: Check::default(),
        };
        let goal = |chain_pg: f64, p: Plain| {
            let c = Chain {
                cpu_us_per_run: cpu(&[("api", 300.0), ("worker", 300.0), ("postgres", chain_pg), ("scheduler", 300.0)]),
                ..chain_with(10.0, 100, false)
            };
            let w = Workflows { chain: Some(c), plain: Some(p), ..Default::default() };
            w.goals().into_iter().find(|g| g.name.contains("plain run")).expect("the step cost goal")
        };
        // (300 + 300 + 1050 + 300) / 3 = 650 µs a step against 500: 1.3×.
        assert!(goal(1050.0, plain(None)).met);
        assert!(!goal(1060.0, plain(None)).met);
        assert!(!goal(900.0, plain(Some(3.0))).met, "an overloaded yardstick does not count");
        assert!(!goal(900.0, Plain { timed_out: true, ..plain(None) }).met, "nor one that did not settle");
    }

    #[test]
    fn the_wide_goal_fails_on_a_doubled_or_lost_step() {
        let met = |c: WfCheck| Workflows { wide: Some(wide_with(c)), ..Default::default() }.goals()[0].met;
        assert!(met(clean(1, 1000)));
        let doubled = WfCheck { steps_requested_again: 1, requests: 1001, ..clean(1, 1000) };
        assert!(!met(doubled));
        let lost = WfCheck { steps_never_requested: 1, requests: 999, ..clean(1, 1000) };
        assert!(!met(lost));
        let two_job_runs = WfCheck { steps_with_several_job_runs: 1, ..clean(1, 1000) };
        assert!(!met(two_job_runs));
        let open = WfCheck { statuses: [("open".to_string(), 1)].into(), ..clean(1, 1000) };
        assert!(!met(open));
    }

    #[test]
    fn checks_add_up_over_the_parts() {
        let w = Workflows {
            chain: Some(Chain { check: clean(1200, 3600), ..chain_with(10.0, 100, false) }),
            wide: Some(wide_with(clean(1, 1000))),
            ..Default::default()
        };
        let all = w.check();
        assert_eq!((all.workflow_runs, all.steps, all.requests), (1201, 4600, 4600));
        assert_eq!(all.statuses["completed"], 1201);
        assert!(all.ok());
    }
}
