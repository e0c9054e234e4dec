//! Phase (n): notifications, in two parts. Each is a closed loop like (a),
//! smaller, on a job whose `webhook_url` points at the target
//! (`/notify/run`), in a project of its own:
//! - webhook: nothing else, so every run makes one delivery. This part's
//!   CPU per run against (a)'s is what a webhook adds to a run's cost (the
//!   goal: at most 25 %).
//! - webhook and subscription: the project also has one subscription to
//!   `run.completed` (`/notify/sub`), so every run makes two deliveries.
//!
//! Every delivery goes through the outbox and the scheduler's sender.
//! Figures: runs/s, deliveries/s (first trigger → last delivery received),
//! run terminal → notification received (the target's wall clock at arrival
//! less the run's `finished_at`: one machine, one clock), and CPU µs per run
//! over the same window, set against (a)'s when both ran.
//!
//! Correctness: every run's webhook and its subscription delivery (when
//! the part has one) arrived exactly once (a redelivery reuses
//! `X-Svc-Delivery-Id`, so it shows as a second arrival of the same run),
//! no `job_run` delivery row is left (a delivered one is deleted) and every
//! subscription row is `delivered`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;

use super::check::{self, Calls, Check};
use super::meter::{ours, Meter, Usage};
use super::opts::Opts;
use super::settle::settle;
use super::stats::{summarize, Summary};
use super::system::System;
use super::target::{Notice, NoticeKind};
use super::throughput::closed_loop;
use super::workflows::Goal;

/// The wait for deliveries gives up when none arrived for this long.
const STALL: Duration = Duration::from_secs(20);
/// The most a terminal webhook may add to a run's CPU (the goal phase (n)
/// prints MET or MISSED).
pub const WEBHOOK_EXTRA_PCT: f64 = 25.0;

#[derive(Clone, Debug, Default, Serialize)]
pub struct NotifyCheck {
    pub runs: usize,
    /// Whether the part's project has a subscription (one event per run).
    pub subscription: bool,
    /// Accepted runs whose webhook never arrived, and those that arrived more than once.
    pub webhook_missing: usize,
    pub webhook_repeated: usize,
    /// Of those repeats, arrivals with a delivery id seen before (a redelivery).
    pub webhook_same_delivery_id: usize,
    pub subscription_missing: usize,
    pub subscription_repeated: usize,
    /// Notifications naming a run the phase did not create.
    pub unknown_runs: usize,
    /// `job_run` delivery rows of the job left after the wait (a delivered one is deleted).
    pub job_run_rows_left: i64,
    /// The subscription's delivery rows by status (all should be `delivered`).
    pub subscription_rows: BTreeMap<String, i64>,
}

impl NotifyCheck {
    pub fn ok(&self) -> bool {
        self.webhook_missing == 0
            && self.webhook_repeated == 0
            && self.subscription_missing == 0
            && self.subscription_repeated == 0
            && self.unknown_runs == 0
            && self.job_run_rows_left == 0
            && self.subscription_rows.keys().all(|s| s == "delivered")
            && self.subscription_rows.values().sum::<i64>() == if self.subscription { self.runs as i64 } else { 0 }
    }
}

#[derive(Debug, Serialize)]
pub struct Notify {
    /// Whether every run also makes a subscription event.
    pub subscription: bool,
    pub runs: usize,
    pub warmup: usize,
    pub clients: usize,
    /// First trigger → the last run's `finished_at`.
    pub runs_secs: f64,
    pub runs_per_s: f64,
    /// Deliveries received (both kinds), and first trigger → the last one received.
    pub deliveries: usize,
    pub deliveries_secs: f64,
    pub deliveries_per_s: f64,
    /// The run's `finished_at` → the notification's arrival at the target.
    pub webhook_ms: Summary,
    pub subscription_ms: Summary,
    pub trigger_ms: Summary,
    pub usage: Usage,
    /// Over first trigger → last delivery received.
    pub cpu_us_per_run: BTreeMap<String, f64>,
    /// This phase's CPU per run less (a)'s, per part, when (a) ran in the
    /// same invocation: what the two notifications cost a run.
    pub extra_cpu_us_per_run_vs_a: Option<BTreeMap<String, f64>>,
    pub pg_write_xacts_per_run: f64,
    pub pg_wal_bytes_per_run: f64,
    pub timed_out: bool,
    pub check: Check,
    pub notify_check: NotifyCheck,
}

impl Notify {
    pub fn ok(&self) -> bool {
        !self.timed_out && self.check.ok() && self.notify_check.ok()
    }

    /// Sets the extra CPU per run against (a)'s figures.
    pub fn compare_with_a(&mut self, a: &BTreeMap<String, f64>) {
        let extra = self.cpu_us_per_run.iter().filter_map(|(k, v)| a.get(k).map(|av| (k.clone(), v - av))).collect();
        self.extra_cpu_us_per_run_vs_a = Some(extra);
    }

    /// The webhook goal, read from the webhook-only part set against (a):
    /// the system's processes only.
    pub fn goal(&self, a: &BTreeMap<String, f64>) -> Option<Goal> {
        if self.subscription {
            return None;
        }
        let (with, plain) = (ours(&self.cpu_us_per_run), ours(a));
        if plain <= 0.0 || with <= 0.0 {
            return None;
        }
        let pct = (with / plain - 1.0) * 100.0;
        Some(Goal {
            name: format!("a terminal webhook adds ≤ {WEBHOOK_EXTRA_PCT} % to a run's CPU"),
            got: format!("{pct:+.0} % ({with:.0} against {plain:.0} µs/run, the system's processes)"),
            met: self.ok() && pct <= WEBHOOK_EXTRA_PCT,
        })
    }
}

fn secs_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    ((to - from).num_microseconds().unwrap_or(0) as f64 / 1e6).max(1e-3)
}

/// Waits until the target has received `goal` notifications in all, or a
/// deadline or stall; true when it gave up.
async fn wait_notices(sys: &System, goal: usize, deadline: Instant) -> bool {
    let mut progress = (sys.target().notice_count(), Instant::now());
    loop {
        let n = sys.target().notice_count();
        if n >= goal {
            return false;
        }
        if n != progress.0 {
            progress = (n, Instant::now());
        }
        if Instant::now() > deadline || progress.1.elapsed() > STALL {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `job_run` delivery rows of the job still in the outbox (a delivered one
/// is deleted just after the target answered, so this waits a little).
async fn job_run_rows_left(sys: &System, job: &str) -> anyhow::Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries WHERE kind = 'job_run' AND job_id = $1")
                .bind(job)
                .fetch_one(sys.pool())
                .await?;
        if n == 0 || Instant::now() > deadline {
            return Ok(n);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks the notifications of the accepted runs; the latencies of each kind.
/// Unless `subscribed`, any subscription event counts as one too many.
fn tally(
    notices: &[Notice],
    accepted: &HashSet<&str>,
    finished: &HashMap<String, DateTime<Utc>>,
    subscribed: bool,
) -> Tallied {
    let mut by_run: HashMap<(&str, NoticeKind), Vec<&Notice>> = HashMap::new();
    let mut c = NotifyCheck { runs: accepted.len(), subscription: subscribed, ..NotifyCheck::default() };
    for n in notices {
        if accepted.contains(n.run_id.as_str()) {
            by_run.entry((n.run_id.as_str(), n.kind)).or_default().push(n);
        } else {
            c.unknown_runs += 1;
        }
    }
    let (mut webhook, mut subscription) = (Vec::new(), Vec::new());
    for id in accepted {
        for kind in [NoticeKind::JobWebhook, NoticeKind::Subscription] {
            let got = by_run.get(&(*id, kind)).map_or(&[][..], Vec::as_slice);
            let (missing, repeated, lat) = match kind {
                NoticeKind::JobWebhook => (&mut c.webhook_missing, &mut c.webhook_repeated, &mut webhook),
                NoticeKind::Subscription => {
                    (&mut c.subscription_missing, &mut c.subscription_repeated, &mut subscription)
                }
            };
            let expected = usize::from(kind == NoticeKind::JobWebhook || subscribed);
            match got.len().cmp(&expected) {
                std::cmp::Ordering::Less => *missing += 1,
                std::cmp::Ordering::Equal => {}
                std::cmp::Ordering::Greater => *repeated += 1,
            }
            if kind == NoticeKind::JobWebhook && got.len() > 1 {
                let ids: HashSet<&str> = got.iter().map(|n| n.delivery_id.as_str()).collect();
                c.webhook_same_delivery_id += got.len() - ids.len();
            }
            if let (Some(first), Some(fin)) = (got.iter().map(|n| n.wall).min(), finished.get(*id)) {
                lat.push((first - *fin).to_std().unwrap_or(Duration::ZERO));
            }
        }
    }
    Tallied { check: c, webhook: summarize(webhook), subscription: summarize(subscription) }
}

struct Tallied {
    check: NotifyCheck,
    webhook: Summary,
    subscription: Summary,
}

/// One part: with `subscription`, the project subscribes to `run.completed`.
pub async fn run(sys: &System, meter: &Meter, opts: &Opts, subscription: bool) -> anyhow::Result<Notify> {
    let api = sys.api();
    let target = sys.target();
    let project = api.create_project(if subscription { "bench-notify-sub" } else { "bench-notify" }).await?;
    let hook = target.notify_url(NoticeKind::JobWebhook);
    let job = api.create_job_with(&project, "notify", &target.url, json!({ "webhook_url": hook })).await?;
    if subscription {
        api.create_subscription(&project, &target.notify_url(NoticeKind::Subscription), &["run.completed"]).await?;
    }
    let per_run = if subscription { 2 } else { 1 };
    // Notifications before this part belong to an earlier one.
    let first_notice = target.notice_count();
    let url = api.trigger_url(&job);

    let mut warm = Calls::default();
    if opts.notify_warmup > 0 {
        let (hits0, notices0) = (target.count(), target.notice_count());
        warm = closed_loop(api, &url, opts.notify_warmup, opts.clients).await.0;
        let n = warm.created.len();
        settle(sys, &job, n, hits0 + n, Instant::now() + Duration::from_secs(60)).await?;
        wait_notices(sys, notices0 + per_run * n, Instant::now() + Duration::from_secs(60)).await;
    }
    let (hits0, notices0) = (target.count(), target.notice_count());
    let a = meter.snapshot(sys).await;
    let t0 = Utc::now();
    let (calls, lat) = closed_loop(api, &url, opts.notify_runs, opts.clients).await;
    let n = calls.created.len();
    let deadline = Instant::now() + Duration::from_secs(90);
    let s = settle(sys, &job, warm.created.len() + n, hits0 + n, deadline).await?;
    let gave_up = wait_notices(sys, notices0 + per_run * n, deadline).await;
    let b = meter.snapshot(sys).await;
    let usage = meter.usage(&a, &b);

    let mut all = warm;
    all.absorb(&calls);
    let check = check::check(sys, &job, &all).await?;
    let accepted: HashSet<&str> = calls.created.iter().map(String::as_str).collect();
    let every: HashSet<&str> = all.created.iter().map(String::as_str).collect();
    let finished: HashMap<String, DateTime<Utc>> = sqlx::query_as::<_, (String, DateTime<Utc>)>(
        "SELECT id, finished_at FROM job_runs WHERE job_id = $1 AND finished_at IS NOT NULL",
    )
    .bind(&job)
    .fetch_all(sys.pool())
    .await?
    .into_iter()
    .collect();
    let mut notices = target.notices();
    let notices = notices.split_off(first_notice.min(notices.len()));
    // The measured runs' notifications; the warm-up's are checked too.
    let measured: Vec<Notice> = notices.iter().filter(|x| accepted.contains(x.run_id.as_str())).cloned().collect();
    let last_received = measured.iter().map(|x| x.wall).max();
    let mut t = tally(&measured, &accepted, &finished, subscription);
    let whole = tally(&notices, &every, &finished, subscription);
    t.check = NotifyCheck { runs: every.len(), ..whole.check };
    t.check.job_run_rows_left = job_run_rows_left(sys, &job).await?;
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT d.status, count(*) FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
          WHERE s.project_id = $1 GROUP BY d.status",
    )
    .bind(&project)
    .fetch_all(sys.pool())
    .await?;
    t.check.subscription_rows = rows.into_iter().collect();

    let done = (n as i64 - s.open).max(0) as usize;
    let runs_secs = s.last_finished.map_or(usage.secs, |f| secs_between(t0, f));
    let deliveries_secs = last_received.map_or(usage.secs, |l| secs_between(t0, l));
    let round = |v: f64| (v * 1000.0).round() / 1000.0;
    Ok(Notify {
        subscription,
        runs: n,
        warmup: opts.notify_warmup,
        clients: opts.clients,
        runs_secs: round(runs_secs),
        runs_per_s: (done as f64 / runs_secs).round(),
        deliveries: measured.len(),
        deliveries_secs: round(deliveries_secs),
        deliveries_per_s: (measured.len() as f64 / deliveries_secs).round(),
        webhook_ms: t.webhook,
        subscription_ms: t.subscription,
        trigger_ms: summarize(lat),
        cpu_us_per_run: usage.per_run_us(done),
        extra_cpu_us_per_run_vs_a: None,
        pg_write_xacts_per_run: (usage.pg_write_xacts as f64 / done.max(1) as f64 * 100.0).round() / 100.0,
        pg_wal_bytes_per_run: (usage.pg_wal_bytes as f64 / done.max(1) as f64).round(),
        usage,
        timed_out: s.timed_out || gave_up,
        check,
        notify_check: t.check,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(kind: NoticeKind, run: &str, delivery: &str, ms: i64) -> Notice {
        let wall = DateTime::from_timestamp_millis(1_000_000 + ms).unwrap();
        Notice { kind, run_id: run.into(), delivery_id: delivery.into(), wall }
    }

    #[test]
    fn a_redelivered_webhook_and_a_missing_subscription_event_are_caught() {
        use NoticeKind::*;
        let accepted: HashSet<&str> = ["r1", "r2"].into();
        let finished = [("r1", 0), ("r2", 0)]
            .iter()
            .map(|(r, ms)| (r.to_string(), DateTime::from_timestamp_millis(1_000_000 + ms).unwrap()))
            .collect();
        let clean = [
            notice(JobWebhook, "r1", "d1", 4),
            notice(Subscription, "r1", "d2", 5),
            notice(JobWebhook, "r2", "d3", 6),
            notice(Subscription, "r2", "d4", 7),
        ];
        let t = tally(&clean, &accepted, &finished, true);
        let c = NotifyCheck { subscription_rows: [("delivered".to_string(), 2)].into(), ..t.check };
        assert!(c.ok(), "{c:?}");
        assert_eq!((t.webhook.n, t.webhook.max), (2, 6.0));

        let bad = [
            notice(JobWebhook, "r1", "d1", 4),
            notice(JobWebhook, "r1", "d1", 900),
            notice(Subscription, "r1", "d2", 5),
            notice(JobWebhook, "r2", "d3", 6),
            notice(Subscription, "r9", "d9", 6),
        ];
        let c = tally(&bad, &accepted, &finished, true).check;
        assert_eq!((c.webhook_repeated, c.webhook_same_delivery_id), (1, 1));
        assert_eq!((c.subscription_missing, c.unknown_runs), (1, 1));
        assert!(!c.ok());

        // Without a subscription, the webhooks alone are complete and an
        // event is one too many.
        let hooks = [notice(JobWebhook, "r1", "d1", 4), notice(JobWebhook, "r2", "d3", 6)];
        assert!(tally(&hooks, &accepted, &finished, false).check.ok());
        let c = tally(&clean, &accepted, &finished, false).check;
        assert_eq!((c.subscription_repeated, c.subscription_missing), (2, 0));
        assert!(!c.ok());
    }

    #[test]
    fn the_webhook_goal_counts_the_systems_processes_of_the_webhook_only_part() {
        let cpu = |pairs: &[(&str, f64)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let a = cpu(&[("api", 50.0), ("worker", 50.0), ("postgres", 100.0), ("target", 500.0)]);
        let part = |subscription, cpu_us_per_run| Notify {
            subscription,
            runs: 1,
            warmup: 0,
            clients: 1,
            runs_secs: 1.0,
            runs_per_s: 1.0,
            deliveries: 1,
            deliveries_secs: 1.0,
            deliveries_per_s: 1.0,
            webhook_ms: Summary::default(),
            subscription_ms: Summary::default(),
            trigger_ms: Summary::default(),
            usage: Usage::default(),
            cpu_us_per_run,
            extra_cpu_us_per_run_vs_a: None,
            pg_write_xacts_per_run: 0.0,
            pg_wal_bytes_per_run: 0.0,
            timed_out: false,
            check: Check::default(),
            notify_check: NotifyCheck::default(),
        };
        // +50 µs of ours on 200 is 25 %: met; the target's CPU is not ours.
        let n = part(
            false,
            cpu(&[("api", 50.0), ("worker", 50.0), ("postgres", 120.0), ("scheduler", 30.0), ("target", 900.0)]),
        );
        assert!(n.goal(&a).unwrap().met);
        let n = part(false, cpu(&[("api", 50.0), ("worker", 50.0), ("postgres", 121.0), ("scheduler", 30.0)]));
        assert!(!n.goal(&a).unwrap().met);
        assert!(part(true, BTreeMap::new()).goal(&a).is_none(), "the goal is the webhook-only part's");
    }

    #[test]
    fn leftover_or_undelivered_rows_fail() {
        let ok = NotifyCheck {
            runs: 2,
            subscription: true,
            subscription_rows: [("delivered".to_string(), 2)].into(),
            ..Default::default()
        };
        assert!(ok.ok());
        assert!(!NotifyCheck { job_run_rows_left: 1, ..ok.clone() }.ok());
        let failed = [("delivered".to_string(), 1), ("failed".to_string(), 1)].into();
        assert!(!NotifyCheck { subscription_rows: failed, ..ok.clone() }.ok());
        assert!(!NotifyCheck { runs: 3, ..ok.clone() }.ok(), "a subscription row per run");
        let unsubscribed = NotifyCheck { subscription: false, subscription_rows: BTreeMap::new(), ..ok.clone() };
        assert!(unsubscribed.ok());
        assert!(!NotifyCheck { subscription: false, ..ok }.ok(), "no subscription, no rows");
    }
}
