//! Phases (d) and (e), straight against Redis through the product's
//! [`Queue`], under a private prefix of their own:
//! - (d) dequeue rate: `dequeue(64)` then an `ack` of each entry, timed for
//!   a fixed count, with a shallow and a deep queue. The depth is held
//!   constant by topping the queue up after each batch (not timed).
//! - (e) Redis bytes per queued run: `used_memory` growth and `MEMORY USAGE`
//!   of the `ready` sorted set while the deep queue is filled, per entry.

use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;
use switchyard_shared::ids;
use switchyard_shared::queue::{self, Entry, Queue};

use super::system::delete_keys;

const BATCH: usize = 64;
const LEASE: Duration = Duration::from_secs(60);
/// Members per ZADD, and ZADDs per pipeline, when filling.
const ZADD_CHUNK: usize = 1000;
const PIPELINE: usize = 10;

#[derive(Debug, Serialize)]
pub struct Dequeue {
    pub depth: usize,
    pub count: usize,
    pub secs: f64,
    pub per_s: f64,
}

#[derive(Debug, Serialize)]
pub struct QueueFigures {
    pub shallow: Dequeue,
    pub deep: Dequeue,
    /// deep / shallow rate.
    pub ratio: f64,
    pub memory: Memory,
}

#[derive(Debug, Serialize)]
pub struct Memory {
    pub entries: usize,
    /// `used_memory` growth / entries. Includes whatever else the server
    /// allocated meanwhile, so read it on a quiet Redis.
    pub used_memory_bytes_per_run: f64,
    /// `MEMORY USAGE <ready> SAMPLES 0` / entries.
    pub zset_bytes_per_run: f64,
}

/// Makes entries shaped like the product's (real id formats, one job).
struct Filler {
    job: String,
    made: i64,
}

impl Filler {
    fn entries(&mut self, n: usize) -> Vec<Entry> {
        let now = Utc::now();
        (0..n)
            .map(|_| {
                self.made += 1;
                let created = now - chrono::Duration::milliseconds(1_000_000_000 - self.made);
                Entry::new(&ids::run_id(), &self.job, 0, created, None)
            })
            .collect()
    }

    /// Adds `n` entries to `ready`, pipelined ZADDs (the ready set is what
    /// enqueue.lua writes for a run due now).
    async fn add(&mut self, q: &Queue, n: usize) -> anyhow::Result<()> {
        let mut c = q.conn().await?;
        let mut left = n;
        while left > 0 {
            let mut pipe = redis::pipe();
            for _ in 0..PIPELINE {
                let k = left.min(ZADD_CHUNK);
                if k == 0 {
                    break;
                }
                let items: Vec<(i64, String)> = self.entries(k).iter().map(|e| (e.rank(), e.encode())).collect();
                pipe.zadd_multiple(&q.keys().ready, &items).ignore();
                left -= k;
            }
            let _: () = pipe.query_async(&mut c).await?;
        }
        Ok(())
    }
}

async fn used_memory(q: &Queue) -> anyhow::Result<i64> {
    let mut c = q.conn().await?;
    let info: String = redis::cmd("INFO").arg("memory").query_async(&mut c).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("INFO memory has no used_memory"))
}

async fn drain(q: &Queue, filler: &mut Filler, depth: usize, count: usize) -> anyhow::Result<Dequeue> {
    let mut busy = Duration::ZERO;
    let mut done = 0;
    while done < count {
        let t = Instant::now();
        let got = q.dequeue(BATCH, LEASE, Utc::now().timestamp_millis()).await?;
        if got.is_empty() {
            anyhow::bail!("the queue ran dry after {done} dequeues");
        }
        futures::future::try_join_all(got.iter().map(|e| q.ack(e, None))).await?;
        busy += t.elapsed();
        done += got.len();
        filler.add(q, got.len()).await?;
    }
    let secs = busy.as_secs_f64().max(1e-6);
    Ok(Dequeue { depth, count: done, secs: (secs * 1000.0).round() / 1000.0, per_s: (done as f64 / secs).round() })
}

pub async fn run(
    redis_url: &str,
    prefix: &str,
    shallow: usize,
    deep: usize,
    count: usize,
) -> anyhow::Result<QueueFigures> {
    let q = Queue::new(queue::Redis::open(redis_url)?, prefix);
    let mut filler = Filler { job: ids::job_id(), made: 0 };
    let pattern = format!("{prefix}:*");
    let res = async {
        filler.add(&q, shallow).await?;
        // Untimed: connections, script loading and the allocator warm up
        // here rather than in the first measurement.
        drain(&q, &mut filler, shallow, count / 10).await?;
        let small = drain(&q, &mut filler, shallow, count).await?;
        delete_keys(redis_url, &pattern).await?;
        // UNLINK frees in the background; let that finish before measuring.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = used_memory(&q).await?;
        filler.add(&q, deep).await?;
        let after = used_memory(&q).await?;
        let mut c = q.conn().await?;
        let zset: i64 =
            redis::cmd("MEMORY").arg("USAGE").arg(&q.keys().ready).arg("SAMPLES").arg(0).query_async(&mut c).await?;
        drop(c);
        let memory = Memory {
            entries: deep,
            used_memory_bytes_per_run: ((after - before) as f64 / deep as f64).round(),
            zset_bytes_per_run: (zset as f64 / deep as f64).round(),
        };
        let big = drain(&q, &mut filler, deep, count).await?;
        let ratio = (big.per_s / small.per_s.max(1.0) * 100.0).round() / 100.0;
        Ok(QueueFigures { shallow: small, deep: big, ratio, memory })
    }
    .await;
    delete_keys(redis_url, &pattern).await?;
    res
}
