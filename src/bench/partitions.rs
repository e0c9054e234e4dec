//! Phase (p): the queue's own throughput with one partition and with many,
//! straight against Redis through the product's [`Queue`] (no Postgres, no
//! HTTP), so that it shows what partitioning buys on the Redis given: on a
//! cluster the partitions spread over its masters, on a single node they
//! share one. `tasks` concurrent loops dequeue(64) and ack the entries of
//! `projects` projects (a project's runs share a partition), `count`
//! entries in all, queued before the clock starts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;
use switchyard_shared::ids;
use switchyard_shared::queue::{self, unlink_matching, Entry, Queue};

const BATCH: usize = 64;
const LEASE: Duration = Duration::from_secs(60);
/// Entries per enqueue call while filling.
const FILL_CHUNK: usize = 500;

#[derive(Debug, Serialize)]
pub struct Partitioned {
    pub partitions: usize,
    pub count: usize,
    pub secs: f64,
    /// Entries dequeued and acked per second.
    pub per_s: f64,
}

#[derive(Debug, Serialize)]
pub struct PartitionFigures {
    pub cluster: bool,
    pub projects: usize,
    pub tasks: usize,
    pub runs: Vec<Partitioned>,
    /// Many partitions' rate / one partition's.
    pub ratio: f64,
}

async fn one(
    redis_url: &str,
    prefix: &str,
    partitions: usize,
    projects: usize,
    tasks: usize,
    count: usize,
) -> anyhow::Result<Partitioned> {
    let q = Queue::with_partitions(queue::Redis::open(redis_url)?, prefix, partitions);
    let now = Utc::now();
    for p in 0..projects {
        let (project, job) = (format!("proj_bench{p}"), format!("job_bench{p}"));
        q.set_limits(&project, &job, Some("0|0|0|0|0")).await?;
        let n = count / projects + usize::from(p < count % projects);
        let entries: Vec<Entry> = (0..n)
            .map(|i| {
                Entry::new(
                    &ids::run_id(),
                    &job.as_str().into(),
                    &project,
                    0,
                    now - chrono::Duration::milliseconds(i as i64),
                    None,
                )
            })
            .collect();
        for chunk in entries.chunks(FILL_CHUNK) {
            let batch: Vec<(&Entry, i64)> = chunk.iter().map(|e| (e, 0)).collect();
            q.enqueue_many(&batch, now.timestamp_millis()).await?;
        }
    }
    let done = AtomicUsize::new(0);
    let t = Instant::now();
    futures::future::try_join_all((0..tasks).map(|_| async {
        while done.load(Ordering::Relaxed) < count {
            let got = q.dequeue(BATCH, LEASE, Utc::now().timestamp_millis()).await?;
            if got.is_empty() {
                break;
            }
            let acks: Vec<(&Entry, Option<i64>)> = got.iter().map(|e| (e, None)).collect();
            q.ack_many(&acks).await?;
            done.fetch_add(got.len(), Ordering::Relaxed);
        }
        anyhow::Ok(())
    }))
    .await?;
    let secs = t.elapsed().as_secs_f64().max(1e-6);
    let count = done.load(Ordering::Relaxed);
    Ok(Partitioned { partitions, count, secs: (secs * 1000.0).round() / 1000.0, per_s: (count as f64 / secs).round() })
}

pub async fn run(redis_url: &str, prefix: &str, partitions: usize, count: usize) -> anyhow::Result<PartitionFigures> {
    let (projects, tasks) = (partitions.max(1) * 4, 8);
    let mut runs = Vec::new();
    for (i, n) in [1, partitions.max(1)].into_iter().enumerate() {
        let prefix = format!("{prefix}{i}");
        let r = one(redis_url, &prefix, n, projects, tasks, count).await;
        unlink_matching(redis_url, &format!("{prefix}:*")).await?;
        runs.push(r?);
    }
    let ratio = ((runs[1].per_s / runs[0].per_s.max(1.0)) * 100.0).round() / 100.0;
    Ok(PartitionFigures { cluster: queue::cluster_nodes(redis_url).is_some(), projects, tasks, runs, ratio })
}
