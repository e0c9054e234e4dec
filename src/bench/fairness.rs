//! Phase (q): fair queueing (`fairness: round_robin`), straight against
//! Redis through the product's [`Queue`], under private prefixes.
//!
//! - A tenant's backlog: one job capped at [`CAP`] runs in flight, each
//!   dispatch held for [`HOLD`] before its ack, so the job allows CAP/HOLD
//!   runs a second. Key A has [`BACKLOG`] runs queued; key B adds one run a
//!   second for [`WINDOW`]. Per fairness: how long B's runs wait from their
//!   enqueue to their dequeue, and how many of A's runs are dispatched a
//!   second meanwhile. The job is oldest-first, then round-robin, each on a
//!   fresh queue.
//! - Dequeue cost with many keys: `dequeue(64)` and an ack of each entry,
//!   timed, on a queue of [`KEYS`] keys with two entries each, topped up
//!   through `enqueue` (timed apart) after each batch with entries of the
//!   next keys. Both fairnesses are drained in alternating slices, as in
//!   phase (d), so a change of the box's speed weighs on both alike.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;
use switchyard_shared::ids;
use switchyard_shared::queue::{self, unlink_matching, Entry, Queue};

const CAP: usize = 20;
const HOLD: Duration = Duration::from_millis(20);
const BACKLOG: usize = 20_000;
const WINDOW: Duration = Duration::from_secs(10);
/// How long, after the window, B's last runs may take to be dispatched.
const B_GRACE: Duration = Duration::from_secs(40);
const WORKERS: usize = 4;
const KEYS: usize = 10_000;
const BATCH: usize = 64;
const LEASE: Duration = Duration::from_secs(120);
const FILL_CHUNK: usize = 500;
const SLICES: usize = 10;

#[derive(Debug, Serialize)]
pub struct Backlog {
    pub fairness: &'static str,
    /// Key B's runs, and how long each waited (ms), in order.
    pub b_waits_ms: Vec<f64>,
    pub b_max_wait_ms: f64,
    /// B's runs not dispatched within the window and its grace.
    pub b_undispatched: usize,
    /// Key A's runs dispatched a second during the window.
    pub a_per_s: f64,
}

#[derive(Debug, Serialize)]
pub struct Cost {
    pub fairness: &'static str,
    pub count: usize,
    /// Entries dequeued and acked a second.
    pub dequeue_per_s: f64,
    /// Entries enqueued a second (the top-up, 64 per call).
    pub enqueue_per_s: f64,
}

#[derive(Debug, Serialize)]
pub struct FairFigures {
    pub cap: usize,
    pub hold_ms: u64,
    pub backlog: usize,
    pub runs: Vec<Backlog>,
    /// A's rate with round robin / with oldest first.
    pub a_ratio: f64,
    pub keys: usize,
    pub cost: Vec<Cost>,
    /// Dequeue cost per run, round robin / oldest first.
    pub dequeue_cost_ratio: f64,
}

fn limits(fair: bool, cap: usize) -> String {
    format!("{cap}|0|0|0|{}", if fair { 2 } else { 0 })
}

fn entry(job: &ids::JobId, key: &str, age_ms: i64) -> Entry {
    Entry::new(&ids::run_id(), job, "bench", 0, Utc::now() - chrono::Duration::milliseconds(age_ms), Some(key))
}

async fn enqueue(q: &Queue, entries: &[Entry]) -> anyhow::Result<()> {
    for chunk in entries.chunks(FILL_CHUNK) {
        let items: Vec<(&Entry, i64)> = chunk.iter().map(|e| (e, 0)).collect();
        q.enqueue_many(&items, Utc::now().timestamp_millis()).await?;
    }
    Ok(())
}

async fn backlog(redis: &queue::Redis, prefix: &str, fair: bool) -> anyhow::Result<Backlog> {
    let q = Queue::new(redis.clone(), prefix);
    let job = ids::job_id();
    q.set_limits("bench", &job, Some(&limits(fair, CAP))).await?;
    // A built queue: before its epoch, dequeue holds a capped job's entries.
    q.mark_initialised(0).await?;
    let a: Vec<Entry> = (0..BACKLOG).map(|i| entry(&job, "A", (BACKLOG - i) as i64)).collect();
    enqueue(&q, &a).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(true));
    let a_done = Arc::new(AtomicUsize::new(0));
    let b_sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let b_waits: Arc<Mutex<Vec<(Instant, f64)>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (q, stop, counting, a_done) = (q.clone(), stop.clone(), counting.clone(), a_done.clone());
        let (b_sent, b_waits) = (b_sent.clone(), b_waits.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let got = q.dequeue(8, LEASE, Utc::now().timestamp_millis()).await?;
                if got.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                for e in got {
                    if e.concurrency_key == "B" {
                        if let Some(at) = b_sent.lock().unwrap().get(e.run_id.as_str()) {
                            b_waits.lock().unwrap().push((*at, at.elapsed().as_secs_f64() * 1000.0));
                        }
                    } else if counting.load(Ordering::Relaxed) {
                        a_done.fetch_add(1, Ordering::Relaxed);
                    }
                    let q = q.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(HOLD).await;
                        let _ = q.ack(&e, None).await;
                    });
                }
            }
            anyhow::Ok(())
        }));
    }

    let start = Instant::now();
    let mut b_count = 0;
    while start.elapsed() < WINDOW {
        let e = entry(&job, "B", 0);
        b_sent.lock().unwrap().insert(e.run_id.to_string(), Instant::now());
        q.enqueue(&e, 0, Utc::now().timestamp_millis()).await?;
        b_count += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let a_secs = start.elapsed().as_secs_f64();
    counting.store(false, Ordering::Relaxed);
    let a = a_done.load(Ordering::Relaxed);
    let grace = Instant::now();
    while b_waits.lock().unwrap().len() < b_count && grace.elapsed() < B_GRACE {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await??;
    }
    let mut waits = b_waits.lock().unwrap().clone();
    waits.sort_by_key(|(at, _)| *at);
    let b_waits_ms: Vec<f64> = waits.iter().map(|(_, ms)| (ms * 10.0).round() / 10.0).collect();
    Ok(Backlog {
        fairness: if fair { "round_robin" } else { "oldest_first" },
        b_max_wait_ms: b_waits_ms.iter().copied().fold(0.0, f64::max),
        b_undispatched: b_count - b_waits_ms.len(),
        b_waits_ms,
        a_per_s: (a as f64 / a_secs).round(),
    })
}

/// One queue of phase (q)'s cost part, and its timings so far.
struct CostQueue {
    q: Queue,
    job: ids::JobId,
    fair: bool,
    next_key: usize,
    dequeue: Duration,
    enqueue: Duration,
    count: usize,
}

impl CostQueue {
    /// `n` entries of the next keys, two each.
    fn entries(&mut self, n: usize) -> Vec<Entry> {
        (0..n)
            .map(|i| {
                let key = format!("tenant-{}", (self.next_key + i / 2) % KEYS);
                entry(&self.job, &key, 0)
            })
            .collect()
    }

    async fn top_up(&mut self, n: usize, timed: bool) -> anyhow::Result<()> {
        let entries = self.entries(n);
        self.next_key = (self.next_key + n.div_ceil(2)) % KEYS;
        let t = Instant::now();
        enqueue(&self.q, &entries).await?;
        if timed {
            self.enqueue += t.elapsed();
        }
        Ok(())
    }

    async fn drain(&mut self, count: usize, timed: bool) -> anyhow::Result<()> {
        let mut done = 0;
        while done < count {
            let t = Instant::now();
            let got = self.q.dequeue(BATCH, LEASE, Utc::now().timestamp_millis()).await?;
            anyhow::ensure!(!got.is_empty(), "the queue ran dry after {done} dequeues");
            let acks: Vec<(&Entry, Option<i64>)> = got.iter().map(|e| (e, None)).collect();
            self.q.ack_many(&acks).await?;
            if timed {
                self.dequeue += t.elapsed();
                self.count += got.len();
            }
            done += got.len();
            self.top_up(got.len(), timed).await?;
        }
        Ok(())
    }

    fn figure(&self) -> Cost {
        let per_s = |d: Duration| (self.count as f64 / d.as_secs_f64().max(1e-6)).round();
        Cost {
            fairness: if self.fair { "round_robin" } else { "oldest_first" },
            count: self.count,
            dequeue_per_s: per_s(self.dequeue),
            enqueue_per_s: per_s(self.enqueue),
        }
    }
}

async fn cost(redis: &queue::Redis, prefix: &str, count: usize) -> anyhow::Result<(Cost, Cost)> {
    let mut qs = Vec::new();
    for fair in [false, true] {
        let q = Queue::new(redis.clone(), &format!("{prefix}{}", u8::from(fair)));
        let job = ids::job_id();
        q.set_limits("bench", &job, Some(&limits(fair, 0))).await?;
        let mut c = CostQueue { q, job, fair, next_key: 0, dequeue: Duration::ZERO, enqueue: Duration::ZERO, count: 0 };
        c.top_up(2 * KEYS, false).await?;
        // Untimed: script loading and the allocator warm up here.
        c.drain(count / 10, false).await?;
        qs.push(c);
    }
    let slice = count.div_ceil(SLICES);
    for _ in 0..SLICES {
        for c in qs.iter_mut() {
            c.drain(slice, true).await?;
        }
    }
    Ok((qs[0].figure(), qs[1].figure()))
}

pub async fn run(redis_url: &str, prefix: &str, count: usize) -> anyhow::Result<FairFigures> {
    let redis = queue::Redis::open(redis_url)?;
    let res = async {
        let mut runs = Vec::new();
        for fair in [false, true] {
            runs.push(backlog(&redis, &format!("{prefix}b{}", u8::from(fair)), fair).await?);
        }
        let (fifo, fair) = cost(&redis, &format!("{prefix}c"), count).await?;
        let ratio = |a: f64, b: f64| (a / b.max(1.0) * 100.0).round() / 100.0;
        Ok(FairFigures {
            cap: CAP,
            hold_ms: HOLD.as_millis() as u64,
            backlog: BACKLOG,
            a_ratio: ratio(runs[1].a_per_s, runs[0].a_per_s),
            runs,
            keys: KEYS,
            dequeue_cost_ratio: ratio(fifo.dequeue_per_s, fair.dequeue_per_s),
            cost: vec![fifo, fair],
        })
    }
    .await;
    unlink_matching(redis_url, &format!("{prefix}*")).await?;
    res
}
