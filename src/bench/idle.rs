//! Phase (f): what the system costs when it has nothing to do. Over a quiet
//! window: Postgres transactions of the bench database (`pg_stat_database`,
//! read from another database so the reads do not count), Redis commands of
//! the whole server (`INFO stats`), and Redis commands per process of ours,
//! from MONITOR, each client connection matched to its process through the
//! socket tables in /proc.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::system::System;

#[derive(Debug, Serialize)]
pub struct Idle {
    pub secs: f64,
    /// xact_commit + xact_rollback of the bench database, per second.
    pub pg_xact_per_s: f64,
    /// Commands the Redis server processed per second, from every client
    /// (the bench's own INFO calls subtracted); others' too on a shared server.
    pub redis_server_cmds_per_s: f64,
    /// Commands per second sent by each of our processes (MONITOR).
    pub redis_cmds_per_s: BTreeMap<String, f64>,
}

async fn pg_xacts(sys: &System) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = $1")
        .bind(&sys.db_name)
        .fetch_one(sys.admin())
        .await?)
}

async fn redis_total(c: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<i64> {
    let info: String = redis::cmd("INFO").arg("stats").query_async(c).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .context("INFO stats has no total_commands_processed")
}

/// `host:port` of a redis:// URL.
fn redis_addr(url: &str) -> anyhow::Result<String> {
    let u = url::Url::parse(url)?;
    Ok(format!("{}:{}", u.host_str().unwrap_or("127.0.0.1"), u.port().unwrap_or(6379)))
}

/// Counts MONITOR lines per client address for `window`.
async fn monitor(url: &str, window: Duration) -> anyhow::Result<HashMap<String, u64>> {
    let mut s = TcpStream::connect(redis_addr(url)?).await?;
    s.write_all(b"MONITOR\r\n").await?;
    let mut lines = BufReader::new(s).lines();
    let mut by_addr: HashMap<String, u64> = HashMap::new();
    let end = Instant::now() + window;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let Ok(line) = tokio::time::timeout(left, lines.next_line()).await else { break };
        let Some(line) = line? else { break };
        // +1700000000.123456 [0 127.0.0.1:54321] "EVALSHA" ...; script calls say [0 lua].
        if let Some(addr) =
            line.split_once('[').and_then(|(_, r)| r.split_once(']')).and_then(|(a, _)| a.split(' ').nth(1))
        {
            *by_addr.entry(addr.to_string()).or_default() += 1;
        }
    }
    Ok(by_addr)
}

/// Local TCP ports of the sockets a process holds.
fn ports_of(pid: u32) -> Vec<u16> {
    let mut inodes = Vec::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in dir.flatten() {
            if let Ok(l) = std::fs::read_link(e.path()) {
                if let Some(i) = l.to_str().and_then(|s| s.strip_prefix("socket:[")).and_then(|s| s.strip_suffix(']')) {
                    inodes.push(i.to_string());
                }
            }
        }
    }
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(t) = std::fs::read_to_string(table) else { continue };
        for row in t.lines().skip(1) {
            let f: Vec<&str> = row.split_whitespace().collect();
            let (Some(local), Some(inode)) = (f.get(1), f.get(9)) else { continue };
            if inodes.iter().any(|i| i == inode) {
                if let Some(p) = local.rsplit(':').next().and_then(|h| u16::from_str_radix(h, 16).ok()) {
                    ports.push(p);
                }
            }
        }
    }
    ports
}

pub async fn run(sys: &System, window: Duration) -> anyhow::Result<Idle> {
    let client = redis::Client::open(sys.redis_url.as_str())?;
    let mut c = client.get_multiplexed_async_connection().await?;
    let pg0 = pg_xacts(sys).await?;
    let r0 = redis_total(&mut c).await?;
    let t0 = Instant::now();
    let by_addr = monitor(&sys.redis_url, window).await?;
    let secs = t0.elapsed().as_secs_f64();
    let r1 = redis_total(&mut c).await?;
    let pg1 = pg_xacts(sys).await?;

    let mut owners: HashMap<u16, String> = HashMap::new();
    for s in &sys.services {
        for p in ports_of(s.pid) {
            owners.insert(p, s.name.to_string());
        }
    }
    let mut redis_cmds: BTreeMap<String, f64> = sys.services.iter().map(|s| (s.name.to_string(), 0.0)).collect();
    for (addr, n) in by_addr {
        let port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        if let Some(name) = port.and_then(|p| owners.get(&p)) {
            *redis_cmds.entry(name.clone()).or_default() += n as f64;
        }
    }
    let per_s = |n: f64| (n / secs * 100.0).round() / 100.0;
    Ok(Idle {
        secs: (secs * 100.0).round() / 100.0,
        pg_xact_per_s: per_s((pg1 - pg0) as f64),
        // The second INFO and MONITOR itself are the bench's own.
        redis_server_cmds_per_s: per_s((r1 - r0 - 2).max(0) as f64),
        redis_cmds_per_s: redis_cmds.into_iter().map(|(k, v)| (k, per_s(v))).collect(),
    })
}
