//! Phase (c): end-to-end throughput through the bulk trigger endpoint, 100
//! items per call from a few concurrent loops. A server without the endpoint
//! (404/405) gives "n/a", not a failure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::check::{self, Calls, Check};
use super::client::{bulk_body, BulkSent};
use super::settle::settle;
use super::stats::{summarize, Summary};
use super::system::System;

pub const ITEMS_PER_CALL: usize = 100;

#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Bulk {
    NotBuilt { status: u16 },
    Measured(Box<Measured>),
}

#[derive(Debug, Serialize)]
pub struct Measured {
    pub runs: usize,
    pub calls: usize,
    pub clients: usize,
    pub secs: f64,
    /// Runs from first call to last terminal state.
    pub runs_per_s: f64,
    /// Runs accepted per second while the calls were being made.
    pub accepted_per_s: f64,
    pub call_ms: Summary,
    pub timed_out: bool,
    pub check: Check,
}

fn record(calls: &mut Calls, sent: BulkSent) {
    match sent {
        BulkSent::Done { created, item_errors } => {
            calls.created.extend(created);
            for e in item_errors {
                calls.error("item".into(), e);
            }
        }
        BulkSent::NotBuilt(status) => calls.error(format!("HTTP {status}"), "bulk endpoint missing".into()),
        BulkSent::Rejected(status, body) => calls.error(format!("HTTP {status}"), body),
        BulkSent::Failed(why) => calls.error("transport".into(), why),
    }
}

pub async fn run(sys: &System, job: &str, runs: usize, clients: usize) -> anyhow::Result<Bulk> {
    let api = sys.api();
    let url = api.bulk_url(job);
    let body = bulk_body(ITEMS_PER_CALL);
    let total_calls = runs.div_ceil(ITEMS_PER_CALL);
    let hits0 = sys.target().count();
    let t0 = chrono::Utc::now();
    let started = Instant::now();
    let mut calls = Calls::default();
    let probe = Instant::now();
    match api.trigger_bulk(&url, body.clone()).await {
        BulkSent::NotBuilt(status) => return Ok(Bulk::NotBuilt { status }),
        sent => record(&mut calls, sent),
    }
    let mut lat = vec![probe.elapsed()];
    let next = AtomicUsize::new(1);
    let per_client = futures::future::join_all((0..clients).map(|_| async {
        let mut out = Vec::new();
        while next.fetch_add(1, Ordering::Relaxed) < total_calls {
            let t = Instant::now();
            let sent = api.trigger_bulk(&url, body.clone()).await;
            out.push((sent, t.elapsed()));
        }
        out
    }))
    .await;
    let call_window = started.elapsed().as_secs_f64();
    for (sent, d) in per_client.into_iter().flatten() {
        record(&mut calls, sent);
        lat.push(d);
    }
    let n = calls.created.len();
    let s = settle(sys, job, n, hits0 + n, Instant::now() + Duration::from_secs(90)).await?;
    let secs =
        s.last_finished.map(|t| (t - t0).num_microseconds().unwrap_or(0) as f64 / 1e6).unwrap_or(call_window).max(1e-3);
    let done = (n as i64 - s.open).max(0) as f64;
    Ok(Bulk::Measured(Box::new(Measured {
        runs: n,
        calls: total_calls,
        clients,
        secs: (secs * 1000.0).round() / 1000.0,
        runs_per_s: (done / secs).round(),
        accepted_per_s: (n as f64 / call_window.max(1e-3)).round(),
        call_ms: summarize(lat),
        timed_out: s.timed_out,
        check: check::check(sys, job, &calls).await?,
    })))
}
