//! Where a slow trigger waited: while phase (b) runs, a sampler reads what
//! every active Postgres backend of the bench database, and every busy
//! background process of the server (autovacuum, checkpointer, WAL writer),
//! is waiting on, every 10 ms (`pg_stat_activity`). Afterwards each trigger
//! call slower than [`SLOW`] is matched with the samples taken during it,
//! and the wait events seen then are counted against those seen over the
//! whole run: what is over-represented during slow calls is where they
//! waited. Server-wide counters read before and after (checkpoints, WAL
//! buffer-full writes and syncs, WAL segments in pg_wal) say what the
//! server did meanwhile.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::task::JoinHandle;

use super::system::System;

/// A trigger call at least this slow is a stall worth explaining.
pub const SLOW: Duration = Duration::from_millis(20);
const EVERY: Duration = Duration::from_millis(10);

#[derive(Debug, Default, Serialize)]
pub struct StallReport {
    pub slow_triggers: usize,
    pub samples: usize,
    /// `<backend type>: <wait event type>/<wait event>` → samples, during
    /// slow trigger calls, most first (CPU: active and waiting on nothing).
    pub during_slow: Vec<(String, usize)>,
    /// The same over every sample of the run, for comparison.
    pub overall: Vec<(String, usize)>,
    /// Server-wide, from before the load to after it.
    pub checkpoints: i64,
    pub wal_buffers_full: i64,
    pub wal_syncs: i64,
    pub wal_segments_added: i64,
    /// Autovacuum work seen during the run (its query, shortened).
    pub autovacuum: Vec<String>,
}

struct Sample {
    at: Instant,
    waits: Vec<String>,
}

pub struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    autovacuum: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    task: JoinHandle<()>,
    counters: (i64, i64, i64, i64),
}

async fn counters(sys: &System) -> (i64, i64, i64, i64) {
    let q = "SELECT (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)::bigint,
                    (SELECT wal_buffers_full FROM pg_stat_wal)::bigint,
                    (SELECT wal_sync FROM pg_stat_wal)::bigint,
                    (SELECT count(*) FROM pg_ls_waldir())::bigint";
    sqlx::query_as(q).fetch_one(sys.admin()).await.unwrap_or_default()
}

impl Sampler {
    pub async fn start(sys: &System) -> Sampler {
        let (samples, autovacuum) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (pool, db) = (sys.admin().clone(), sys.db_name.clone());
            let (samples, autovacuum, stop) = (samples.clone(), autovacuum.clone(), stop.clone());
            async move {
                let mut tick = tokio::time::interval(EVERY);
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let at = Instant::now();
                    let rows: Vec<(String, String, String, String)> = sqlx::query_as(
                        "SELECT backend_type, coalesce(wait_event_type, 'CPU'), coalesce(wait_event, ''), left(coalesce(query, ''), 80)
                           FROM pg_stat_activity
                          WHERE pid <> pg_backend_pid()
                            AND ((datname = $1 AND state = 'active')
                              OR (backend_type IN ('autovacuum worker', 'checkpointer', 'walwriter', 'background writer')
                                  AND coalesce(wait_event, '') NOT IN ('CheckpointerMain', 'WalWriterMain', 'BgWriterMain', 'BgWriterHibernate')))",
                    )
                    .bind(&db)
                    .fetch_all(&pool)
                    .await
                    .unwrap_or_default();
                    let mut waits = Vec::with_capacity(rows.len());
                    for (backend, kind, event, query) in rows {
                        if backend == "autovacuum worker" {
                            let mut a = autovacuum.lock().unwrap();
                            if !a.contains(&query) {
                                a.push(query);
                            }
                        }
                        waits.push(format!("{backend}: {kind}/{event}"));
                    }
                    samples.lock().unwrap().push(Sample { at, waits });
                }
            }
        });
        Sampler { samples, autovacuum, stop, task, counters: counters(sys).await }
    }

    /// Stops sampling; `calls` are (start, duration) of every trigger call.
    pub async fn finish(self, sys: &System, calls: &[(Instant, Duration)]) -> StallReport {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let after = counters(sys).await;
        let samples = std::mem::take(&mut *self.samples.lock().unwrap());
        let slow: Vec<&(Instant, Duration)> = calls.iter().filter(|(_, d)| *d >= SLOW).collect();
        let (mut during, mut overall) = (BTreeMap::<String, usize>::new(), BTreeMap::<String, usize>::new());
        for s in &samples {
            for w in &s.waits {
                *overall.entry(w.clone()).or_default() += 1;
            }
            if slow.iter().any(|(t, d)| s.at >= *t && s.at <= *t + *d) {
                for w in &s.waits {
                    *during.entry(w.clone()).or_default() += 1;
                }
            }
        }
        let ranked = |m: BTreeMap<String, usize>| {
            let mut v: Vec<(String, usize)> = m.into_iter().collect();
            v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
            v.truncate(12);
            v
        };
        let before = self.counters;
        StallReport {
            slow_triggers: slow.len(),
            samples: samples.len(),
            during_slow: ranked(during),
            overall: ranked(overall),
            checkpoints: after.0 - before.0,
            wal_buffers_full: after.1 - before.1,
            wal_syncs: after.2 - before.2,
            wal_segments_added: after.3 - before.3,
            autovacuum: std::mem::take(&mut *self.autovacuum.lock().unwrap()),
        }
    }
}
