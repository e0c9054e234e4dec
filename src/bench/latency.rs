//! Phase (b): open-loop latency at a fixed offered rate. Triggers start on a
//! schedule (every ~1 ms, as many as are due), whatever the answers; after a
//! warm-up that is not measured, each run gives two latencies from the
//! instant its trigger was sent:
//! - to the target: the target's receive instant (same process, same clock);
//! - to the terminal state committed: the instant this process receives the
//!   NOTIFY that a trigger installed in the bench database sends when a run
//!   gets its `finished_at` (Postgres delivers it at commit).
//!
//! A rate the system cannot sustain stops early and says so
//! ([`open_loop`](super::open_loop)).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::postgres::PgListener;

use super::check::{self, Calls, Check};
use super::client::Sent;
use super::open_loop::{offer, Offered};
use super::settle::settle;
use super::stalls::{Sampler, StallReport};
use super::stats::{summarize, Summary};
use super::system::System;

const CHANNEL: &str = "sybench_done";

/// Terminal-state notifications: run id → instant received.
pub struct Notices {
    seen: Arc<Mutex<HashMap<String, Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Notices {
    /// Installs the notifying trigger (bench database only) and listens.
    pub async fn start(sys: &System) -> anyhow::Result<Notices> {
        for sql in [
            "CREATE OR REPLACE FUNCTION sybench_notify_done() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_notify('sybench_done', NEW.id); RETURN NULL; END $$",
            "DROP TRIGGER IF EXISTS sybench_done ON job_runs",
            "CREATE TRIGGER sybench_done AFTER UPDATE ON job_runs FOR EACH ROW
             WHEN (NEW.finished_at IS NOT NULL AND OLD.finished_at IS NULL)
             EXECUTE FUNCTION sybench_notify_done()",
        ] {
            sqlx::query(sql).execute(sys.pool()).await?;
        }
        let mut listener = PgListener::connect(&sys.database_url).await?;
        listener.listen(CHANNEL).await?;
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let into = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok(n) = listener.recv().await {
                into.lock().expect("notices lock").insert(n.payload().to_string(), Instant::now());
            }
        });
        Ok(Notices { seen, task })
    }

    pub async fn stop(self, sys: &System) {
        self.task.abort();
        let _ = sqlx::query("DROP TRIGGER IF EXISTS sybench_done ON job_runs").execute(sys.pool()).await;
    }

    fn of(&self, ids: &HashSet<&str>) -> HashMap<String, Instant> {
        let seen = self.seen.lock().expect("notices lock");
        ids.iter().filter_map(|id| seen.get(*id).map(|t| (id.to_string(), *t))).collect()
    }
}

#[derive(Debug, Serialize)]
pub struct Latency {
    pub rate: u32,
    /// Trigger calls started per second, warm-up included.
    pub offered_per_s: f64,
    pub runs: usize,
    pub warmup_runs: usize,
    pub to_target_ms: Summary,
    pub to_terminal_ms: Summary,
    pub trigger_ms: Summary,
    pub box_busy_pct: f64,
    /// Where trigger calls slower than 20 ms waited (`stalls`).
    pub stalls: StallReport,
    /// Where a run's time goes, stage by stage ([`Stages`]).
    pub stages: Stages,
    /// Measured runs without a target request / a terminal notice.
    pub missing_target: usize,
    pub missing_terminal: usize,
    /// Seconds into the phase when the backlog passed [`MAX_BACKLOG`](super::open_loop::MAX_BACKLOG) and
    /// the load stopped; `None` when the rate was sustained.
    pub overloaded_after_s: Option<f64>,
    pub timed_out: bool,
    pub check: Check,
}

/// A run's trigger→terminal time cut at the moments the bench sees, on
/// one clock: the trigger call (the api's checks, its group commit and
/// enqueue, and the answer), then until the target's request (the queue,
/// the worker's dequeue and dispatch read; 0 when the request came before
/// the answer), then until the terminal commit's notice (the target's
/// answer, the worker's outcome write, its commit and the notice).
#[derive(Debug, Default, Serialize)]
pub struct Stages {
    pub trigger_ms: Summary,
    pub queue_and_dispatch_ms: Summary,
    pub outcome_and_commit_ms: Summary,
    /// Over the slowest 1 % of runs (by trigger→terminal), the share of
    /// their time each stage took, in % (trigger, queue and dispatch,
    /// outcome and commit).
    pub slowest_share_pct: [f64; 3],
}

/// The stages of each run that has all three moments.
fn stages(runs: &[[Duration; 3]]) -> Stages {
    let col = |k: usize| runs.iter().map(|r| r[k]).collect::<Vec<_>>();
    let mut by_total: Vec<&[Duration; 3]> = runs.iter().collect();
    by_total.sort_by_key(|r| std::cmp::Reverse(r[0] + r[1] + r[2]));
    let slow = &by_total[..runs.len().div_ceil(100).min(runs.len())];
    let mut share = [0.0; 3];
    let total: f64 = slow.iter().map(|r| (r[0] + r[1] + r[2]).as_secs_f64()).sum();
    if total > 0.0 {
        for (k, s) in share.iter_mut().enumerate() {
            let part: f64 = slow.iter().map(|r| r[k].as_secs_f64()).sum();
            *s = (part / total * 1000.0).round() / 10.0;
        }
    }
    Stages {
        trigger_ms: summarize(col(0)),
        queue_and_dispatch_ms: summarize(col(1)),
        outcome_and_commit_ms: summarize(col(2)),
        slowest_share_pct: share,
    }
}

pub async fn run(
    sys: &System,
    notices: &Notices,
    job: &str,
    rate: u32,
    warmup: Duration,
    measured: Duration,
) -> anyhow::Result<Latency> {
    let url: Arc<str> = sys.api().trigger_url(job).into();
    let per_s = f64::from(rate);
    let hits0 = sys.target().count();
    let sampler = Sampler::start(sys).await;
    let Offered { samples, warm_n, offered_per_s, busy, overloaded_after_s } =
        offer(sys, url, per_s, warmup, measured, 1).await?;
    let spans: Vec<(Instant, Duration)> = samples.iter().map(|s| (s.sent_at, s.took)).collect();
    let stalls = sampler.finish(sys, &spans).await;

    let mut calls = Calls::default();
    let mut measured_runs: Vec<(String, Instant, Duration)> = Vec::new();
    let mut trigger_lat = Vec::new();
    for s in samples {
        if s.index >= warm_n {
            trigger_lat.push(s.took);
            if let Sent::Created(id) = &s.sent {
                measured_runs.push((id.clone(), s.sent_at, s.took));
            }
        }
        calls.record(s.sent);
    }
    let n = calls.created.len();
    let settled = settle(sys, job, n, hits0 + n, Instant::now() + Duration::from_secs(30)).await?;
    let ids: HashSet<&str> = measured_runs.iter().map(|(id, _, _)| id.as_str()).collect();
    // A notice follows the commit by a moment; give the last ones that long.
    let wait_until = Instant::now() + Duration::from_secs(2);
    let mut terminal = notices.of(&ids);
    while terminal.len() < ids.len() && Instant::now() < wait_until {
        tokio::time::sleep(Duration::from_millis(20)).await;
        terminal = notices.of(&ids);
    }
    let hits = sys.target().hits_of(&ids);
    let (mut to_target, mut to_terminal, mut cut) = (Vec::new(), Vec::new(), Vec::new());
    for (id, sent_at, took) in &measured_runs {
        let first = hits.get(id).and_then(|h| h.iter().map(|x| x.at).min());
        if let Some(first) = first {
            to_target.push(first.saturating_duration_since(*sent_at));
        }
        if let Some(t) = terminal.get(id) {
            to_terminal.push(t.saturating_duration_since(*sent_at));
            if let Some(first) = first {
                let answered = *sent_at + *took;
                cut.push([*took, first.saturating_duration_since(answered), t.saturating_duration_since(first)]);
            }
        }
    }
    let check = check::check(sys, job, &calls).await?;
    Ok(Latency {
        rate,
        offered_per_s: (offered_per_s * 10.0).round() / 10.0,
        runs: measured_runs.len(),
        warmup_runs: warm_n,
        missing_target: measured_runs.len() - to_target.len(),
        missing_terminal: measured_runs.len() - to_terminal.len(),
        overloaded_after_s,
        to_target_ms: summarize(to_target),
        to_terminal_ms: summarize(to_terminal),
        trigger_ms: summarize(trigger_lat),
        box_busy_pct: (busy * 10.0).round() / 10.0,
        stalls,
        stages: stages(&cut),
        timed_out: settled.timed_out,
        check,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::stages;

    #[test]
    fn the_slowest_runs_shares_add_up_by_stage() {
        let ms = Duration::from_millis;
        let mut runs = vec![[ms(1), ms(1), ms(2)]; 99];
        runs.push([ms(2), ms(10), ms(8)]);
        let s = stages(&runs);
        assert_eq!(s.slowest_share_pct, [10.0, 50.0, 40.0]);
        assert_eq!((s.trigger_ms.n, s.outcome_and_commit_ms.p50), (100, 2.0));
    }
}
