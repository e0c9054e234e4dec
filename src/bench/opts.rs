//! Command-line options. Defaults are those of the figures
//! docs/benchmarks.md reports; every phase is bounded by a count and a
//! deadline.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};

pub const USAGE: &str = "usage: switchyard-bench [options]   (normally run through scripts/bench)

  --a-secs S          seconds of closed-loop load in each repetition of phase (a) (default 15)
  --runs N            instead: a count of closed-loop runs per repetition of phase (a)
  --reps N            repetitions of phase (a), reported with their spread (default 3)
  --warmup N          closed-loop runs before phase (a), not measured (default 1000)
  --workers N         worker processes (default 1; WORKER_CONCURRENCY and the other
                      settings pass through from the environment)
  --sync-commit on|off  synchronous_commit for the bench database (default: the server's)
  --clients N         concurrent trigger clients in phase (a) (default 32)
  --rates R,R,..      offered rates of phase (b), runs/s (default 500,1000,2000)
  --rate-secs S       measured seconds per rate (default 10, after 2 s warm-up)
  --bulk-runs N       runs triggered through the bulk endpoint in phase (c) (default 10000)
  --dequeues N        dequeues timed per queue depth in phase (d) (default 50000)
  --deep N            the deep queue of phase (d) and (e) (default 1000000)
  --partitions N      the partitioned queue of phase (p), against one partition (default 8)
  --history N         old runs written into the tables by phase (r) (default 10000000)
  --report-runs N     ended runs of one project phase (y) writes before timing the reports
                      (default 1000000)
  --report-reps N     reads of each report phase (y) times (default 10)
  --idle-secs S       idle window of phase (f) (default 10)
  --wf-rate R         workflow runs/s of the 3-step chain in phase (w) (default 100)
  --wf-secs S         measured seconds of the chain (default 10, after 2 s warm-up)
  --wf-fan N          parallel steps of phase (w)'s fan-out/fan-in runs (default 100)
  --wf-fan-runs N     how many of those runs, one after another (default 3; 0 skips them)
  --wf-wide N         parallel steps of the one wide fan-out run (default 1000;
                      0 skips it)
  --wf-inflight N     phase (s): workflow runs of the 3-step chain in flight, closed loop
                      (default 128)
  --wf-warmup N       phase (s): workflow runs finished before the measured window (default 1000)
  --wf-closed-secs S  phase (s): seconds of the measured window (default 15)
  --notify-runs N     closed-loop runs of each part of phase (n): each run a terminal
                      webhook, then each a webhook and a subscription event
                      (default 20000, after 500 warm-up)
  --wait-quiet S      wait up to S seconds for a quiet box (<15 % busy) before starting (default 30)
  --only a,b,c,d,f,w,n,p,q,r,y,s  run only these phases ((r), (y) and (s) are not in the default
                      set: (r) and (y) write --history old runs and --report-runs ended runs,
                      minutes of work; (s), the workflow saturation closed loop, runs when
                      named: `--only a,s` also prints a workflow step's CPU and a workflow's
                      WAL against (a)'s plain run) ((g) comes with (a), (e) with (d))
  --streams N         live-stream subscribers following the bench project during the
                      phases (default 0: nobody watches)
  --without-stream-triggers  drop the live streams' triggers in the bench database first
                      (what they cost a project nobody watches: run (a) with and without)
  --pg-base URL       Postgres server (default postgres://postgres@127.0.0.1:5432)
  --redis URL         Redis (default redis://127.0.0.1:6379; a cluster: redis+cluster://host:port,...)
  --bin PATH          the switchyard binary (default: next to this one)
  --out DIR           logs and results history (default target/bench)
  --pidfile PATH      append 'name pid' of every process started (for the caller's cleanup)
  --anchors FILE      results of the anchors' run.sh (RESULT lines), for the ratios
  --anchors-log FILE  its stderr, quoted when it produced no composite figure";

#[derive(Clone, Debug)]
pub struct Opts {
    /// A count of runs per repetition of (a); `None`: `a_secs` of load.
    pub runs: Option<usize>,
    pub a_secs: u64,
    pub reps: usize,
    pub workers: usize,
    /// `synchronous_commit` set on the bench database; `None`: the server's.
    pub sync_commit: Option<String>,
    pub warmup: usize,
    pub clients: usize,
    pub rates: Vec<u32>,
    pub rate_secs: u64,
    pub rate_warmup_secs: u64,
    pub bulk_runs: usize,
    pub bulk_clients: usize,
    pub dequeues: usize,
    pub partitions: usize,
    pub history: usize,
    pub report_runs: usize,
    pub report_reps: usize,
    pub shallow: usize,
    pub deep: usize,
    pub idle_secs: u64,
    pub wf_rate: u32,
    pub wf_secs: u64,
    pub wf_fan: usize,
    pub wf_fan_runs: usize,
    pub wf_wide: usize,
    /// Phase (s): workflow runs in flight, warm-up runs, measured seconds.
    pub wf_inflight: usize,
    pub wf_warmup: usize,
    pub wf_closed_secs: u64,
    pub notify_runs: usize,
    /// Live-stream subscribers of the bench project (`--streams`).
    pub streams: usize,
    /// Drop the live streams' triggers first (`--without-stream-triggers`).
    pub without_stream_triggers: bool,
    pub notify_warmup: usize,
    pub wait_quiet_secs: u64,
    pub only: Option<Vec<char>>,
    pub pg_base: String,
    pub redis_url: String,
    pub bin: Option<PathBuf>,
    pub out: PathBuf,
    pub pidfile: Option<PathBuf>,
    pub anchors: Option<PathBuf>,
    pub anchors_log: Option<PathBuf>,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            runs: None,
            a_secs: 15,
            reps: 3,
            workers: 1,
            sync_commit: None,
            warmup: 1_000,
            clients: 32,
            rates: vec![500, 1_000, 2_000],
            rate_secs: 10,
            rate_warmup_secs: 2,
            bulk_runs: 10_000,
            bulk_clients: 4,
            dequeues: 50_000,
            partitions: 8,
            history: 10_000_000,
            report_runs: 1_000_000,
            report_reps: 10,
            shallow: 1_000,
            deep: 1_000_000,
            idle_secs: 10,
            wf_rate: 100,
            wf_secs: 10,
            wf_fan: 100,
            wf_fan_runs: 3,
            // The widest fan-out the step limit admits: root and join besides.
            wf_wide: 1000,
            // The anchors' workflow peers saturate best at 128 in flight
            // (../shared/anchors/workflows, its README), after 1,000 warm-up.
            wf_inflight: 128,
            wf_warmup: 1_000,
            wf_closed_secs: 15,
            notify_runs: 20_000,
            streams: 0,
            without_stream_triggers: false,
            notify_warmup: 500,
            wait_quiet_secs: 30,
            only: None,
            pg_base: "postgres://postgres@127.0.0.1:5432".into(),
            redis_url: "redis://127.0.0.1:6379".into(),
            bin: None,
            out: PathBuf::from("target/bench"),
            pidfile: None,
            anchors: None,
            anchors_log: None,
        }
    }
}

/// What `parse` found: options to run with, or a request for the usage text.
pub enum Parsed {
    Run(Box<Opts>),
    Help,
}

impl Opts {
    pub fn parse(args: impl IntoIterator<Item = String>) -> anyhow::Result<Parsed> {
        let mut o = Opts::default();
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                return Ok(Parsed::Help);
            }
            if flag == "--without-stream-triggers" {
                o.without_stream_triggers = true;
                continue;
            }
            let value = args.next().with_context(|| format!("{flag} needs a value"))?;
            let num = |v: &str| v.parse::<usize>().with_context(|| format!("{flag}: {v:?} is not a count"));
            match flag.as_str() {
                "--runs" => o.runs = Some(num(&value)?.max(1)),
                "--a-secs" => o.a_secs = num(&value)?.max(1) as u64,
                "--reps" => o.reps = num(&value)?.max(1),
                "--workers" => o.workers = num(&value)?.max(1),
                "--sync-commit" => match value.as_str() {
                    "on" | "off" => o.sync_commit = Some(value),
                    v => bail!("--sync-commit: {v:?} is not on or off"),
                },
                "--warmup" => o.warmup = num(&value)?,
                "--clients" => o.clients = num(&value)?.max(1),
                "--rates" => {
                    o.rates = value
                        .split(',')
                        .filter(|r| !r.is_empty())
                        .map(|r| {
                            r.parse::<u32>().ok().filter(|&r| r > 0).with_context(|| format!("--rates: bad rate {r:?}"))
                        })
                        .collect::<anyhow::Result<_>>()?
                }
                "--rate-secs" => o.rate_secs = num(&value)?.max(1) as u64,
                "--bulk-runs" => o.bulk_runs = num(&value)?.max(100),
                "--dequeues" => o.dequeues = num(&value)?.max(64),
                "--history" => o.history = num(&value)?.max(1),
                "--report-runs" => o.report_runs = num(&value)?.max(100),
                "--report-reps" => o.report_reps = num(&value)?.max(1),
                "--partitions" => o.partitions = num(&value)?.clamp(1, switchyard_shared::config::MAX_QUEUE_PARTITIONS),
                "--deep" => o.deep = num(&value)?.max(o.shallow),
                "--idle-secs" => o.idle_secs = num(&value)?.max(1) as u64,
                "--wf-rate" => o.wf_rate = num(&value)?.clamp(1, u32::MAX as usize) as u32,
                "--wf-secs" => o.wf_secs = num(&value)?.max(1) as u64,
                "--wf-fan" => o.wf_fan = num(&value)?.max(1),
                "--wf-fan-runs" => o.wf_fan_runs = num(&value)?,
                "--wf-wide" => o.wf_wide = num(&value)?,
                "--wf-inflight" => o.wf_inflight = num(&value)?.max(1),
                "--wf-warmup" => o.wf_warmup = num(&value)?,
                "--wf-closed-secs" => o.wf_closed_secs = num(&value)?.max(1) as u64,
                "--notify-runs" => o.notify_runs = num(&value)?.max(1),
                "--streams" => o.streams = num(&value)?,
                "--wait-quiet" => o.wait_quiet_secs = num(&value)? as u64,
                "--only" => o.only = Some(value.chars().filter(|c| c.is_ascii_alphabetic()).collect()),
                "--pg-base" => o.pg_base = value.trim_end_matches('/').to_string(),
                "--redis" => o.redis_url = value,
                "--bin" => o.bin = Some(value.into()),
                "--out" => o.out = value.into(),
                "--pidfile" => o.pidfile = Some(value.into()),
                "--anchors" => o.anchors = Some(value.into()),
                "--anchors-log" => o.anchors_log = Some(value.into()),
                other => bail!("unknown option {other}"),
            }
        }
        Ok(Parsed::Run(Box::new(o)))
    }

    pub fn wants(&self, phase: char) -> bool {
        self.only.as_ref().is_none_or(|p| p.contains(&phase))
    }

    /// A phase outside the default set, run only when `--only` names it.
    pub fn names(&self, phase: char) -> bool {
        self.only.as_ref().is_some_and(|p| p.contains(&phase))
    }

    pub fn rate_warmup(&self) -> Duration {
        Duration::from_secs(self.rate_warmup_secs)
    }

    /// The measured part of phase (w)'s open loops.
    pub fn wf_measured(&self) -> Duration {
        Duration::from_secs(self.wf_secs)
    }
}
