//! Phases (d) and (e), straight against Redis through the product's
//! [`Queue`], under a private prefix of their own:
//! - (d) dequeue rate: `dequeue(64)` then an `ack` of each entry, timed for
//!   a fixed count, with a shallow and a deep queue. The depth is held
//!   constant by topping the queue up after each batch (not timed). The two
//!   queues are drained in alternating slices, so that a change in the
//!   box's speed during the phase weighs on both alike (measured one after
//!   the other, their ratio moved between 0.88 and 1.07 from run to run).
//! - (e) Redis bytes per queued run: `used_memory` growth and `MEMORY USAGE`
//!   of the `ready` sorted set while the deep queue is filled, per entry.

use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;
use switchyard_shared::ids;
use switchyard_shared::queue::{self, unlink_matching, Entry, Queue};

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
    job: switchyard_shared::ids::JobId,
    made: i64,
}

impl Filler {
    fn entries(&mut self, n: usize) -> Vec<Entry> {
        let now = Utc::now();
        (0..n)
            .map(|_| {
                self.made += 1;
                let created = now - chrono::Duration::milliseconds(1_000_000_000 - self.made);
                Entry::new(&ids::run_id(), &self.job, "bench", 0, created, None)
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

/// Timed dequeues of one queue, summed over its slices.
#[derive(Default)]
struct Drained {
    busy: Duration,
    count: usize,
}

impl Drained {
    fn figure(&self, depth: usize) -> Dequeue {
        let secs = self.busy.as_secs_f64().max(1e-6);
        Dequeue {
            depth,
            count: self.count,
            secs: (secs * 1000.0).round() / 1000.0,
            per_s: (self.count as f64 / secs).round(),
        }
    }
}

/// Dequeues and acks at least `count` entries of `q`, topping it up as it goes.
async fn drain(q: &Queue, filler: &mut Filler, count: usize, into: &mut Drained) -> anyhow::Result<()> {
    let mut done = 0;
    while done < count {
        let t = Instant::now();
        let got = q.dequeue(BATCH, LEASE, Utc::now().timestamp_millis()).await?;
        if got.is_empty() {
            anyhow::bail!("the queue ran dry after {done} dequeues");
        }
        futures::future::try_join_all(got.iter().map(|e| q.ack(e, None))).await?;
        into.busy += t.elapsed();
        done += got.len();
        filler.add(q, got.len()).await?;
    }
    into.count += done;
    Ok(())
}

/// Slices per queue in the timed part of (d).
const SLICES: usize = 10;

pub async fn run(
    redis_url: &str,
    prefix: &str,
    shallow: usize,
    deep: usize,
    count: usize,
) -> anyhow::Result<QueueFigures> {
    let redis = queue::Redis::open(redis_url)?;
    let (qs, qd) = (Queue::new(redis.clone(), &format!("{prefix}s")), Queue::new(redis, &format!("{prefix}d")));
    let (mut fs, mut fd) = (Filler { job: ids::job_id(), made: 0 }, Filler { job: ids::job_id(), made: 0 });
    let patterns = [format!("{prefix}s:*"), format!("{prefix}d:*")];
    let res = async {
        // As the api records a job's limits (none here): dequeue parks the
        // runs of a job whose limits it does not know.
        qs.set_limits("bench", &fs.job, Some("0|0|0|0|0")).await?;
        qd.set_limits("bench", &fd.job, Some("0|0|0|0|0")).await?;
        fs.add(&qs, shallow).await?;
        let before = used_memory(&qd).await?;
        fd.add(&qd, deep).await?;
        let after = used_memory(&qd).await?;
        let mut c = qd.conn().await?;
        let zset: i64 =
            redis::cmd("MEMORY").arg("USAGE").arg(&qd.keys().ready).arg("SAMPLES").arg(0).query_async(&mut c).await?;
        drop(c);
        let memory = Memory {
            entries: deep,
            used_memory_bytes_per_run: ((after - before) as f64 / deep as f64).round(),
            zset_bytes_per_run: (zset as f64 / deep as f64).round(),
        };
        // Untimed: script loading and the allocator warm up here rather
        // than in the first measurement.
        drain(&qs, &mut fs, count / 10, &mut Drained::default()).await?;
        drain(&qd, &mut fd, count / 10, &mut Drained::default()).await?;
        let (mut small, mut big) = (Drained::default(), Drained::default());
        let slice = count.div_ceil(SLICES);
        for _ in 0..SLICES {
            drain(&qs, &mut fs, slice, &mut small).await?;
            drain(&qd, &mut fd, slice, &mut big).await?;
        }
        let (small, big) = (small.figure(shallow), big.figure(deep));
        let ratio = (big.per_s / small.per_s.max(1.0) * 100.0).round() / 100.0;
        Ok(QueueFigures { shallow: small, deep: big, ratio, memory })
    }
    .await;
    for p in &patterns {
        unlink_matching(redis_url, p).await?;
    }
    res
}
