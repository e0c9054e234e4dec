//! The open loop of phases (b) and (w): triggers start on a schedule,
//! every ~1 ms as many as are due, whatever the answers. A rate the system
//! cannot sustain would only grow a backlog for the rest of the window (and
//! delay the next phase while it drains), so the loop stops offering load
//! once the target lags the triggers by more than [`MAX_BACKLOG`] of work,
//! and says when.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;

use super::client::Sent;
use super::cpu::BoxTicks;
use super::system::System;

/// How far the target may lag the triggers, in seconds of offered load.
pub const MAX_BACKLOG: f64 = 2.0;

/// One trigger call.
pub struct Sample {
    /// Its place in the schedule (the first `warm_n` are the warm-up).
    pub index: usize,
    /// When it was sent, on the monotonic clock and on the wall clock.
    pub sent_at: Instant,
    pub wall: DateTime<Utc>,
    pub sent: Sent,
    pub took: Duration,
}

/// What the loop offered.
pub struct Offered {
    /// Every call, in schedule order.
    pub samples: Vec<Sample>,
    /// How many of them were the warm-up.
    pub warm_n: usize,
    pub offered_per_s: f64,
    /// Box busy % over the measured part (after the warm-up).
    pub busy: f64,
    /// Seconds in when the target fell behind and the loop stopped.
    pub overloaded_after_s: Option<f64>,
}

/// Triggers `url` at `per_s` for `warmup`, then for `measured`; each
/// trigger makes `hits_per_trigger` requests at the target.
pub async fn offer(
    sys: &System,
    url: Arc<str>,
    per_s: f64,
    warmup: Duration,
    measured: Duration,
    hits_per_trigger: usize,
) -> anyhow::Result<Offered> {
    let warm_n = (per_s * warmup.as_secs_f64()) as usize;
    let total = warm_n + (per_s * measured.as_secs_f64()) as usize;
    let api = sys.api().clone();
    let hits0 = sys.target().count();
    let mut tasks = JoinSet::new();
    let mut samples = Vec::with_capacity(total);
    let start = Instant::now();
    let mut measure_from: Option<BoxTicks> = None;
    let mut issued = 0;
    let mut overloaded_after_s = None;
    while issued < total {
        let backlog = (issued * hits_per_trigger).saturating_sub(sys.target().count() - hits0);
        if backlog as f64 > per_s * hits_per_trigger as f64 * MAX_BACKLOG {
            overloaded_after_s = Some((start.elapsed().as_secs_f64() * 10.0).round() / 10.0);
            break;
        }
        let due = ((start.elapsed().as_secs_f64() * per_s) as usize).min(total);
        while issued < due {
            if issued == warm_n {
                measure_from = Some(BoxTicks::read());
            }
            let (api, url, index) = (api.clone(), url.clone(), issued);
            tasks.spawn(async move {
                let (sent_at, wall) = (Instant::now(), Utc::now());
                let sent = api.trigger(&url).await;
                Sample { index, sent_at, wall, sent, took: sent_at.elapsed() }
            });
            issued += 1;
        }
        while let Some(done) = tasks.try_join_next() {
            samples.push(done?);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let offered_per_s = issued as f64 / start.elapsed().as_secs_f64().max(1e-3);
    let busy = measure_from.map(|t| t.busy_pct(&BoxTicks::read())).unwrap_or(0.0);
    while let Some(done) = tasks.join_next().await {
        samples.push(done?);
    }
    samples.sort_by_key(|s| s.index);
    Ok(Offered { samples, warm_n, offered_per_s, busy, overloaded_after_s })
}
