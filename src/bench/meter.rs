//! CPU time of each part of the system over a window: the three services,
//! Postgres in two parts ("postgres": the backends serving the bench
//! database; "postgres_bg": postmaster, WAL writer, checkpointer and the
//! other background processes, shared with any other user of the server;
//! backends of other databases are left out), Redis, the target thread and
//! the load generator (this process less the target). What the box spent
//! besides is reported as "other": it should be near zero on a quiet box.
//!
//! Postgres work is also counted as write transactions (transaction ids
//! handed out) and WAL bytes: both are instant and exact, but cluster-wide,
//! so they are the system's own only on a server nobody else writes to.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use serde::Serialize;

use super::cpu::{self, BoxTicks};
use super::system::System;

pub struct Snapshot {
    at: Instant,
    ticks: BoxTicks,
    parts: BTreeMap<&'static str, f64>,
    postgres: HashMap<u32, f64>,
    /// Backends of the bench database.
    ours_pg: HashSet<u32>,
    /// Postgres processes serving other databases (other users of the server).
    foreign_pg: HashSet<u32>,
    /// Next transaction id and WAL insert position of the cluster.
    pg_xid: i64,
    pg_wal: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Usage {
    pub secs: f64,
    pub box_busy_pct: f64,
    /// CPU seconds per part.
    pub cpu_secs: BTreeMap<String, f64>,
    /// Busy CPU seconds of the box not accounted to any part.
    pub other_secs: f64,
    /// Write transactions and WAL bytes of the whole Postgres cluster.
    pub pg_write_xacts: i64,
    pub pg_wal_bytes: u64,
}

impl Usage {
    /// Microseconds of CPU per run, per part, plus "total" (the parts) and
    /// "other" (the rest of the box).
    pub fn per_run_us(&self, runs: usize) -> BTreeMap<String, f64> {
        let per = |s: f64| (s * 1e6 / runs.max(1) as f64).round();
        let mut m: BTreeMap<String, f64> = self.cpu_secs.iter().map(|(k, v)| (k.clone(), per(*v))).collect();
        m.insert("total".into(), per(self.cpu_secs.values().sum()));
        m.insert("other".into(), per(self.other_secs));
        m
    }

    /// Cores used, per part.
    pub fn cores(&self) -> BTreeMap<String, f64> {
        let s = self.secs.max(1e-9);
        self.cpu_secs.iter().map(|(k, v)| (k.clone(), (v / s * 100.0).round() / 100.0)).collect()
    }
}

pub struct Meter {
    pg_uid: Option<u32>,
    /// Every Redis server of the run (each node of a cluster).
    redis_pids: Vec<u32>,
}

impl Meter {
    pub async fn new(sys: &System) -> Meter {
        let url = &sys.redis_url;
        let mut redis_pids = Vec::new();
        for node in switchyard_shared::queue::node_urls(url) {
            let pid = async {
                let client = redis::Client::open(node.as_str()).ok()?;
                let mut c = client.get_multiplexed_async_connection().await.ok()?;
                let info: String = redis::cmd("INFO").arg("server").query_async(&mut c).await.ok()?;
                info.lines().find_map(|l| l.strip_prefix("process_id:")).and_then(|p| p.trim().parse::<u32>().ok())
            };
            redis_pids.extend(pid.await);
        }
        Meter { pg_uid: cpu::uid_of("postgres"), redis_pids }
    }

    pub async fn snapshot(&self, sys: &System) -> Snapshot {
        let mut parts = BTreeMap::new();
        for s in &sys.services {
            if let Some(v) = cpu::pid_secs(s.pid) {
                *parts.entry(s.name).or_default() += v;
            }
        }
        if !self.redis_pids.is_empty() {
            parts.insert("redis", self.redis_pids.iter().filter_map(|&p| cpu::pid_secs(p)).sum());
        }
        let target = sys.target().cpu_secs().unwrap_or(0.0);
        parts.insert("target", target);
        parts.insert("bench", cpu::own_secs().unwrap_or(0.0) - target);
        let backends: Vec<(i32, bool)> =
            sqlx::query_as("SELECT pid, datname = $1 FROM pg_stat_activity WHERE datname IS NOT NULL")
                .bind(&sys.db_name)
                .fetch_all(sys.admin())
                .await
                .unwrap_or_default();
        let (ours, foreign): (Vec<_>, Vec<_>) = backends.into_iter().partition(|(_, ours)| *ours);
        let pids = |v: Vec<(i32, bool)>| v.into_iter().map(|(p, _)| p as u32).collect::<HashSet<u32>>();
        let postgres = self.pg_uid.map(cpu::secs_by_uid).unwrap_or_default();
        // Neither function takes a transaction id itself.
        let (pg_xid, wal): (i64, String) = sqlx::query_as(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text",
        )
        .fetch_one(sys.admin())
        .await
        .unwrap_or((0, "0/0".into()));
        Snapshot {
            at: Instant::now(),
            ticks: BoxTicks::read(),
            parts,
            postgres,
            ours_pg: pids(ours),
            foreign_pg: pids(foreign),
            pg_xid,
            pg_wal: parse_lsn(&wal),
        }
    }

    pub fn usage(&self, a: &Snapshot, b: &Snapshot) -> Usage {
        let mut cpu_secs: BTreeMap<String, f64> = BTreeMap::new();
        for (k, v) in &b.parts {
            if let Some(v0) = a.parts.get(k) {
                cpu_secs.insert(k.to_string(), (v - v0).max(0.0));
            }
        }
        // The admin pool's own backend answers on the `postgres` database,
        // so it counts as foreign: the bench's statistics queries are not
        // charged to the system under test.
        let foreign: HashSet<u32> = a.foreign_pg.union(&b.foreign_pg).copied().collect();
        let ours: HashSet<u32> = a.ours_pg.union(&b.ours_pg).copied().collect();
        let (mut backends, mut background) = (0.0, 0.0);
        for (pid, v) in b.postgres.iter().filter(|(pid, _)| !foreign.contains(pid)) {
            let used = (v - a.postgres.get(pid).copied().unwrap_or(0.0)).max(0.0);
            if ours.contains(pid) {
                backends += used;
            } else {
                background += used;
            }
        }
        if self.pg_uid.is_some() {
            cpu_secs.insert("postgres".into(), backends);
            cpu_secs.insert("postgres_bg".into(), background);
        }
        let busy = a.ticks.busy_secs(&b.ticks);
        let accounted: f64 = cpu_secs.values().sum();
        Usage {
            secs: b.at.duration_since(a.at).as_secs_f64(),
            box_busy_pct: (a.ticks.busy_pct(&b.ticks) * 10.0).round() / 10.0,
            cpu_secs,
            other_secs: (busy - accounted).max(0.0),
            pg_write_xacts: b.pg_xid - a.pg_xid,
            pg_wal_bytes: b.pg_wal.saturating_sub(a.pg_wal),
        }
    }
}

/// `X/Y` (two hex halves) as a byte position.
fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s.split_once('/').unwrap_or(("0", "0"));
    (u64::from_str_radix(hi, 16).unwrap_or(0) << 32) + u64::from_str_radix(lo, 16).unwrap_or(0)
}

/// The processes of the system under test: a run's cost is theirs, not the
/// benchmark's or its target's.
pub const OURS: [&str; 6] = ["api", "worker", "scheduler", "postgres", "postgres_bg", "redis"];

/// A per-run CPU map's sum over [`OURS`].
pub fn ours(cpu_us_per_run: &BTreeMap<String, f64>) -> f64 {
    OURS.iter().filter_map(|k| cpu_us_per_run.get(*k)).sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn lsn() {
        assert_eq!(super::parse_lsn("1/10"), (1 << 32) + 16);
        assert_eq!(super::parse_lsn("junk"), 0);
    }
}
