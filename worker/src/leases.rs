//! The entries this worker holds, and the renewal of their leases.
//!
//! A dequeued entry is leased until `now + lease`; if the lease lapses the
//! scheduler's reaper takes the run back and another worker redelivers it.
//! So while a dispatch is in flight (including while its outcome waits for
//! Postgres to come back) the worker pushes every lease it holds forward,
//! every third of the lease: two renewals can fail before one lapses.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use switchyard_shared::queue::{Entry, Queue};
use switchyard_shared::telemetry::WORKER_POOL_ACTIVE;
use tokio_util::sync::CancellationToken;

use crate::now_ms;

/// One held entry, the epoch its lease is in (see `Queue::extend_leases`),
/// and the dispatch token of the claim once there is one.
#[derive(Clone, Debug)]
pub struct Held {
    pub entry: Entry,
    pub epoch: String,
    pub token: Option<i64>,
}

/// The entries whose leases this worker holds, by dispatch key.
#[derive(Default)]
pub struct InFlight {
    next: AtomicU64,
    held: Mutex<HashMap<u64, Held>>,
}

impl InFlight {
    pub fn insert(&self, entry: Entry, epoch: &str) -> u64 {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(key, Held { entry, epoch: epoch.to_string(), token: None });
        key
    }

    /// Records the claim's dispatch token: on a forced handover it tells
    /// whether the run is still this worker's.
    pub fn set_token(&self, key: u64, token: i64) {
        if let Some(h) = self.lock().get_mut(&key) {
            h.token = Some(token);
        }
    }

    pub fn remove(&self, key: u64) -> Option<Held> {
        self.lock().remove(&key)
    }

    /// Each held entry with the epoch of its lease.
    pub fn leases(&self) -> Vec<(Entry, String)> {
        self.lock().values().map(|h| (h.entry.clone(), h.epoch.clone())).collect()
    }

    /// After a renewal: every lease held in partition `p` is in the
    /// partition's `epoch` now (renewed in it, taken again in it, or reaped
    /// in it).
    pub fn move_to_epoch(&self, p: usize, epoch: &str, partition_of: impl Fn(&Entry) -> usize) {
        for h in self.lock().values_mut() {
            if h.epoch != epoch && partition_of(&h.entry) == p {
                h.epoch = epoch.to_string();
            }
        }
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Held>> {
        // Plain inserts and removes: nothing a panicking holder leaves half done.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Counts a dispatch in `svc_worker_pool_active` for as long as it lives,
/// including when it is aborted.
pub struct ActiveGuard(());

impl ActiveGuard {
    pub fn start() -> ActiveGuard {
        metrics::gauge!(WORKER_POOL_ACTIVE).increment(1.0);
        ActiveGuard(())
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        metrics::gauge!(WORKER_POOL_ACTIVE).decrement(1.0);
    }
}

/// How often leases are renewed.
pub fn renew_every(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(10))
}

/// Renews every held lease each [`renew_every`] until `stop` fires.
pub async fn renew_loop(queue: &Queue, inflight: &InFlight, lease: Duration, stop: CancellationToken) {
    let mut tick = tokio::time::interval(renew_every(lease));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate; entries were just leased
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => renew_once(queue, inflight, lease).await,
        }
    }
}

pub async fn renew_once(queue: &Queue, inflight: &InFlight, lease: Duration) {
    let leases = inflight.leases();
    if leases.is_empty() {
        return;
    }
    let until = now_ms() + lease.as_millis() as i64;
    match queue.extend_leases(&leases, until).await {
        Ok((n, epochs)) => {
            if n < leases.len() {
                // Acked a moment ago, or reaped: the dispatch token decides
                // whether this worker's outcome still lands.
                tracing::debug!(held = leases.len(), renewed = n, "some leases were already gone");
            }
            // Before the rebuild ('') nothing was taken again: keep the
            // old epoch so that the next renewal does it.
            for (p, epoch) in epochs.iter().filter(|(_, e)| !e.is_empty()) {
                inflight.move_to_epoch(*p, epoch, |e| queue.partition_of(e));
            }
        }
        Err(e) => tracing::warn!(error = %e, held = leases.len(), "renewing leases failed; retrying next tick"),
    }
}
