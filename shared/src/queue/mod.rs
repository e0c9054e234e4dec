//! The Redis side of a run's life: entries, keys, scripts and the typed calls
//! that run them. Redis holds no truth of its own: everything here can be
//! rebuilt from Postgres (see the scheduler's reconciler).
//!
//! A queue has one partition or more (`QUEUE_PARTITIONS`). Each partition is
//! a whole queue in one hash slot (`Keys::partition`), and every script call
//! touches one partition only, so the scripts run unchanged on Redis
//! Cluster and the partitions spread over its nodes. An entry's partition
//! follows its run's project (`Entry::shard`): a project's caps and rate
//! limits, named ones included, are counted in one place. Calls that name
//! entries go to their partitions; calls that do not (dequeue, reap, depths)
//! visit every partition. With one partition nothing of this costs a thing:
//! the calls are the single-slot calls they always were.
//!
//! Wake-ups: each script leaves tokens in its partition's `signal` list, and
//! a worker of a one-partition queue blocks on that list. A cluster cannot
//! block on lists of several slots at once, so with many partitions the
//! calls that make entries ready also leave tokens in one list of its own
//! slot (`Keys::workers_signal`), which idle workers block on; the
//! partitions' lists then just stay at their cap.

mod conn;
mod entry;
mod keys;
mod scripts;
mod wake;

pub use crate::redis_url::{cluster_nodes, node_urls};
pub use conn::{unlink_matching, Conn, Redis};
pub use entry::{Entry, EntryError, MAX_PRIORITY, MIN_PRIORITY};
pub use keys::Keys;
pub use wake::{WakeLoop, WakeUp, WAKE_WINDOW};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;

use crate::config::MAX_QUEUE_PARTITIONS;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis connection for a blocking pop: {0}")]
    Pool(#[from] deadpool_redis::PoolError),
    #[error("bad redis configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Entry(#[from] EntryError),
}

/// Added to every rate limit window when dequeue.lua counts it. Windows
/// count the times workers send requests ([`Queue::record_dispatch`]), but
/// the limit is promised at the target: the guard absorbs the time from
/// sending to arrival and clock skew between workers, so that no window of
/// `window_secs` at the target sees more than `max` requests. The cost is
/// that a saturated limit admits `max` per `window + guard`.
pub const RATE_GUARD_MS: i64 = 200;

/// How soon dequeue.lua looks again at a bucket that is full only because
/// of dispatches admitted but not yet sent (they are confirmed within moments).
pub const RATE_RECHECK_MS: i64 = 50;

/// While Redis is not rebuilt after losing its data, how long dequeue.lua
/// keeps a capped or rate-limited job's entry back before looking again.
pub const UNBUILT_WAIT_MS: i64 = 250;

/// Longest blocking pop ([`Queue::wait_for_work`]).
pub const MAX_BLOCK: Duration = Duration::from_secs(30);

/// Most wake-up tokens a wake-up list holds: a woken worker takes a whole
/// batch, so more would only wake workers to find nothing.
const MAX_WAKE_TOKENS: usize = 8;

/// The queue of one key prefix: every call goes through a Lua script of `lua/`.
#[derive(Clone)]
pub struct Queue {
    redis: Redis,
    /// The keys of each partition; the first also names the prefix's
    /// other keys (locks, caches, channels).
    parts: Arc<[Keys]>,
    /// Where the next dequeue starts, so that workers share the partitions.
    next: Arc<AtomicUsize>,
    /// Throttles [`Queue::wake`], shared by the clones of this handle.
    wakes: Arc<wake::Throttle>,
}

impl Queue {
    /// A queue of one partition.
    pub fn new(redis: Redis, prefix: &str) -> Queue {
        Queue::with_partitions(redis, prefix, 1)
    }

    /// The queue a process's configuration names (connects on first use).
    pub fn from_config(config: &crate::config::Config) -> Result<Queue, QueueError> {
        Ok(Queue::with_partitions(Redis::open(&config.redis_url)?, &config.redis_key_prefix, config.queue_partitions))
    }

    /// The process's Redis connections.
    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    /// A queue of `n` partitions (1..=[`MAX_QUEUE_PARTITIONS`]). Every process of
    /// a prefix must use the same `n`.
    pub fn with_partitions(redis: Redis, prefix: &str, n: usize) -> Queue {
        let n = n.clamp(1, MAX_QUEUE_PARTITIONS);
        let parts = (0..n).map(|i| Keys::partition(prefix, i, n)).collect();
        Queue { redis, parts, next: Arc::default(), wakes: Arc::default() }
    }

    /// The keys of the first partition, and of everything not partitioned.
    pub fn keys(&self) -> &Keys {
        &self.parts[0]
    }

    /// The keys of every partition.
    pub fn partitions(&self) -> &[Keys] {
        &self.parts
    }

    /// The partition of `entry`.
    pub fn partition_of(&self, entry: &Entry) -> usize {
        entry.shard as usize % self.parts.len()
    }

    /// The partition of a project's entries, limits and rate buckets.
    pub fn partition_of_project(&self, project_id: &str) -> usize {
        entry::shard_of(project_id) as usize % self.parts.len()
    }

    /// Groups `items` by the partition `of` gives each, in partition order.
    fn grouped<T>(&self, items: impl IntoIterator<Item = T>, of: impl Fn(&T) -> usize) -> BTreeMap<usize, Vec<T>> {
        let mut groups: BTreeMap<usize, Vec<T>> = BTreeMap::new();
        for item in items {
            groups.entry(of(&item)).or_default().push(item);
        }
        groups
    }

    /// Leaves up to `n` wake-up tokens for idle workers when there are many
    /// partitions (with one, the scripts left them already).
    async fn wake_workers(&self, n: usize) -> Result<(), QueueError> {
        if self.parts.len() == 1 || n == 0 {
            return Ok(());
        }
        let key = self.parts[0].workers_signal();
        let mut c = self.conn().await?;
        let _: () = redis::pipe()
            .rpush(&key, vec!["1"; n.min(MAX_WAKE_TOKENS)])
            .ignore()
            .ltrim(&key, 0, MAX_WAKE_TOKENS as isize - 1)
            .ignore()
            .query_async(&mut c)
            .await?;
        Ok(())
    }

    /// The shared connection, for commands of this queue's keys that the
    /// scripts do not cover (tests and operators' tools).
    pub async fn conn(&self) -> Result<Conn, QueueError> {
        self.redis.conn().await
    }

    /// Puts an entry in `ready`, or in `scheduled` when `due_ms` is later
    /// than `now_ms`. Returns false when the entry was already queued.
    pub async fn enqueue(&self, entry: &Entry, due_ms: i64, now_ms: i64) -> Result<bool, QueueError> {
        Ok(self.enqueue_many(&[(entry, due_ms)], now_ms).await? == 1)
    }

    /// [`Queue::enqueue`] for many entries in one script call (each with its
    /// due time, 0 = now). Returns how many were enqueued.
    pub async fn enqueue_many(&self, entries: &[(&Entry, i64)], now_ms: i64) -> Result<usize, QueueError> {
        if entries.is_empty() {
            return Ok(0);
        }
        let mut c = self.conn().await?;
        let (mut added, mut ready) = (0, 0);
        for (p, group) in self.grouped(entries.iter(), |(e, _)| self.partition_of(e)) {
            let k = &self.parts[p];
            let mut call = scripts::ENQUEUE.prepare_invoke();
            call.key(&k.ready).key(&k.scheduled).key(&k.throttled).key(&k.leases).key(&k.parked).key(&k.signal);
            call.key(&k.limits).key(&k.fair);
            call.arg(now_ms);
            for (entry, due_ms) in group {
                call.arg(entry.encode()).arg(entry.rank()).arg(*due_ms);
            }
            let (a, r): (i64, i64) = call.invoke_async(&mut c).await?;
            added += a.max(0) as usize;
            ready += r.max(0) as usize;
        }
        self.wake_workers(ready).await?;
        Ok(added)
    }

    /// Leases up to `max` entries until `now_ms + lease`.
    pub async fn dequeue(&self, max: usize, lease: Duration, now_ms: i64) -> Result<Vec<Entry>, QueueError> {
        Ok(self.dequeue_in_epoch(max, lease, now_ms).await?.into_iter().map(|(e, _)| e).collect())
    }

    /// [`Queue::dequeue`], each entry with the id of the epoch of its
    /// partition it was leased under ('' before the reconciler rebuilt
    /// Redis): a worker hands it back when it renews the lease
    /// ([`Queue::extend_leases`]). With many partitions it takes from one
    /// after another, starting where the last call of this handle stopped,
    /// until it has `max` or has asked them all; so fewer than `max` means
    /// every partition had nothing more to give.
    pub async fn dequeue_in_epoch(
        &self,
        max: usize,
        lease: Duration,
        now_ms: i64,
    ) -> Result<Vec<(Entry, String)>, QueueError> {
        let n = self.parts.len();
        let start = if n == 1 { 0 } else { self.next.fetch_add(1, Ordering::Relaxed) };
        let mut out = Vec::new();
        for i in 0..n {
            let p = (start + i) % n;
            let (epoch, entries) = self.dequeue_from(p, max - out.len(), lease, now_ms).await?;
            out.extend(entries.into_iter().map(|e| (e, epoch.clone())));
            if out.len() >= max {
                break;
            }
        }
        Ok(out)
    }

    /// One dequeue.lua call on partition `p`.
    async fn dequeue_from(
        &self,
        p: usize,
        max: usize,
        lease: Duration,
        now_ms: i64,
    ) -> Result<(String, Vec<Entry>), QueueError> {
        let k = &self.parts[p];
        let mut c = self.conn().await?;
        let raw: Vec<String> = scripts::DEQUEUE
            .key(&k.ready)
            .key(&k.leases)
            .key(&k.active)
            .key(&k.limits)
            .key(&k.parked)
            .key(&k.throttled)
            .key(&k.rate)
            .key(&k.signal)
            .key(&k.epoch)
            .key(&k.fair)
            .arg(now_ms)
            .arg(max)
            .arg(lease.as_millis() as u64)
            .arg(max * 8)
            .arg(RATE_GUARD_MS)
            .arg(RATE_RECHECK_MS)
            .arg(UNBUILT_WAIT_MS)
            .invoke_async(&mut c)
            .await?;
        let mut raw = raw.into_iter();
        let epoch = raw.next().unwrap_or_default();
        let entries = raw.map(|s| Ok(Entry::decode_in(&s, p as u32)?)).collect::<Result<Vec<_>, QueueError>>()?;
        Ok((epoch, entries))
    }

    /// Ends a dispatch whose outcome is committed; `retry_due_ms` schedules
    /// the entry again. Returns false when the lease had already been reaped.
    pub async fn ack(&self, entry: &Entry, retry_due_ms: Option<i64>) -> Result<bool, QueueError> {
        Ok(self.ack_many(&[(entry, retry_due_ms)]).await? == 1)
    }

    /// [`Queue::ack`] for many entries in one script call. Returns how many
    /// leases were released.
    pub async fn ack_many(&self, entries: &[(&Entry, Option<i64>)]) -> Result<usize, QueueError> {
        if entries.is_empty() {
            return Ok(0);
        }
        let mut c = self.conn().await?;
        let (mut released, mut woke) = (0, 0);
        for (p, group) in self.grouped(entries.iter(), |(e, _)| self.partition_of(e)) {
            let k = &self.parts[p];
            let mut call = scripts::ACK.prepare_invoke();
            call.key(&k.leases).key(&k.active).key(&k.parked).key(&k.ready).key(&k.scheduled).key(&k.signal);
            for (entry, retry_due_ms) in group {
                call.arg(entry.encode()).arg(retry_due_ms.unwrap_or(0).max(0));
            }
            let (r, w): (i64, i64) = call.invoke_async(&mut c).await?;
            released += r.max(0) as usize;
            woke += w.max(0) as usize;
        }
        self.wake_workers(woke).await?;
        Ok(released)
    }

    /// Takes back leases that expired before `now_ms`, at most `limit` of
    /// each partition.
    pub async fn reap(&self, now_ms: i64, limit: usize) -> Result<Vec<Entry>, QueueError> {
        let mut c = self.conn().await?;
        let (mut out, mut woke) = (Vec::new(), 0);
        for (p, k) in self.parts.iter().enumerate() {
            let (w, raw): (i64, Vec<String>) = scripts::REAP
                .key(&k.leases)
                .key(&k.active)
                .key(&k.parked)
                .key(&k.ready)
                .key(&k.signal)
                .arg(now_ms)
                .arg(limit)
                .invoke_async(&mut c)
                .await?;
            woke += w.max(0) as usize;
            for s in raw {
                out.push(Entry::decode_in(&s, p as u32)?);
            }
        }
        self.wake_workers(woke).await?;
        Ok(out)
    }

    /// Whether any lease expired by `now_ms` (what [`Queue::reap`] would
    /// take), without taking it: a plain read.
    pub async fn any_lease_expired(&self, now_ms: i64) -> Result<bool, QueueError> {
        let mut c = self.conn().await?;
        for k in self.parts.iter() {
            let n: u64 = c.zcount(&k.leases, "-inf", now_ms).await?;
            if n > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Entries of `scheduled` due by `now_ms`, earliest first within each
    /// partition, at most `limit` of each. A plain read: nothing moves.
    pub async fn due_scheduled(&self, now_ms: i64, limit: usize) -> Result<Vec<Entry>, QueueError> {
        let mut c = self.conn().await?;
        let mut out = Vec::new();
        for (p, k) in self.parts.iter().enumerate() {
            let raw: Vec<String> = c.zrangebyscore_limit(&k.scheduled, "-inf", now_ms, 0, limit as isize).await?;
            for s in raw {
                out.push(Entry::decode_in(&s, p as u32)?);
            }
        }
        Ok(out)
    }

    /// Logs, in the rate limit buckets of the run's job, that its request
    /// is sent now (see lua/record_dispatch.lua). Returns how many buckets.
    pub async fn record_dispatch(&self, entry: &Entry, now_ms: i64) -> Result<usize, QueueError> {
        let (k, job_id, run_id) = (&self.parts[self.partition_of(entry)], &entry.job_id, &entry.run_id);
        let mut c = self.conn().await?;
        let n: i64 = scripts::RECORD_DISPATCH
            .key(&k.limits)
            .key(&k.rate)
            .arg(job_id)
            .arg(run_id)
            .arg(now_ms)
            .invoke_async(&mut c)
            .await?;
        Ok(n as usize)
    }

    /// Moves entries still in `scheduled` to a later due time (an execution
    /// window that is closed). Returns how many moved.
    pub async fn reschedule(&self, entries: &[Entry], due_ms: i64) -> Result<usize, QueueError> {
        self.on_scheduled(&scripts::RESCHEDULE, due_ms, entries).await
    }

    /// Runs `script` (KEYS[1] `scheduled`, ARGV[1] `arg`, then the entries)
    /// once per partition the entries are in; the sum of what it returned.
    async fn on_scheduled(&self, script: &redis::Script, arg: i64, entries: &[Entry]) -> Result<usize, QueueError> {
        if entries.is_empty() {
            return Ok(0);
        }
        let mut c = self.conn().await?;
        let mut total = 0;
        for (p, group) in self.grouped(entries, |e| self.partition_of(e)) {
            let mut inv = script.key(&self.parts[p].scheduled);
            inv.arg(arg);
            for e in group {
                inv.arg(e.encode());
            }
            let n: i64 = inv.invoke_async(&mut c).await?;
            total += n as usize;
        }
        Ok(total)
    }

    /// Moves the given entries from `scheduled` to `ready`, each only if it
    /// is still there and due by `now_ms`. Name only entries whose runs are
    /// already `queued` in Postgres: a worker cannot claim any other. Returns
    /// how many moved and how long until the first entry left in `scheduled`
    /// (of any partition) is due (`None` when all are empty); an empty
    /// `entries` just asks that.
    pub async fn promote(&self, entries: &[Entry], now_ms: i64) -> Result<(usize, Option<Duration>), QueueError> {
        let mut c = self.conn().await?;
        let mut groups = self.grouped(entries, |e| self.partition_of(e));
        let (mut moved, mut first_due) = (0, None::<i64>);
        for (p, k) in self.parts.iter().enumerate() {
            let mut inv = scripts::PROMOTE.key(&k.scheduled);
            inv.key(&k.ready).key(&k.signal).key(&k.limits).key(&k.fair).arg(now_ms);
            for e in groups.remove(&p).unwrap_or_default() {
                inv.arg(e.encode());
            }
            let (m, wait): (i64, i64) = inv.invoke_async(&mut c).await?;
            moved += m.max(0) as usize;
            if wait >= 0 {
                first_due = Some(first_due.map_or(wait, |f| f.min(wait)));
            }
        }
        self.wake_workers(moved).await?;
        Ok((moved, first_due.map(|w| Duration::from_millis(w as u64))))
    }

    /// Drops the given entries from `scheduled` (their runs need no dispatch
    /// any more), each only if it is still due by `now_ms`, so a retry
    /// scheduled since the caller looked survives. Returns how many went.
    pub async fn remove_scheduled(&self, entries: &[Entry], now_ms: i64) -> Result<usize, QueueError> {
        self.on_scheduled(&scripts::REMOVE_SCHEDULED, now_ms, entries).await
    }

    /// Removes an entry from every waiting set (not from leases).
    pub async fn remove(&self, entry: &Entry) -> Result<bool, QueueError> {
        let k = &self.parts[self.partition_of(entry)];
        let mut c = self.conn().await?;
        let n: i64 = scripts::REMOVE
            .key(&k.ready)
            .key(&k.scheduled)
            .key(&k.throttled)
            .key(&k.parked)
            .key(&k.fair)
            .arg(entry.encode())
            .invoke_async(&mut c)
            .await?;
        Ok(n > 0)
    }

    /// Renews the leases a worker holds, each with the id of the epoch (of
    /// its partition) it was leased or last renewed under. A lease Redis
    /// lost with its data (an earlier epoch) is taken again with its
    /// concurrency slots; one reaped in this epoch is not. Returns how many
    /// leases hold now and the current epoch id of each partition that had
    /// an entry ('' while it is not rebuilt).
    pub async fn extend_leases(
        &self,
        entries: &[(Entry, String)],
        until_ms: i64,
    ) -> Result<(usize, Vec<(usize, String)>), QueueError> {
        if entries.is_empty() {
            return Ok((0, Vec::new()));
        }
        let mut c = self.conn().await?;
        let (mut held, mut epochs) = (0, Vec::new());
        for (p, group) in self.grouped(entries, |(e, _)| self.partition_of(e)) {
            let k = &self.parts[p];
            let mut inv = scripts::EXTEND_LEASES.key(&k.leases);
            inv.key(&k.active).key(&k.epoch).key(&k.limits).key(&k.rate);
            inv.key(&k.ready).key(&k.scheduled).key(&k.throttled).key(&k.parked).key(&k.fair);
            inv.arg(until_ms).arg(chrono::Utc::now().timestamp_millis());
            for (e, epoch) in group {
                inv.arg(e.encode()).arg(epoch);
            }
            let (n, epoch): (i64, String) = inv.invoke_async(&mut c).await?;
            held += n as usize;
            epochs.push((p, epoch));
        }
        Ok((held, epochs))
    }

    /// Logs in a rate-limit bucket of a project the sends Postgres recorded,
    /// (sent ms, run id) each: the reconciler's rebuild after Redis lost its
    /// data.
    pub async fn seed_rate(
        &self,
        project_id: &str,
        bucket: &str,
        sends: &[(i64, String)],
    ) -> Result<usize, QueueError> {
        if sends.is_empty() {
            return Ok(0);
        }
        let mut c = self.conn().await?;
        let mut inv = scripts::SEED_RATE.key(&self.parts[self.partition_of_project(project_id)].rate);
        inv.arg(bucket);
        for (ms, run) in sends {
            inv.arg(ms).arg(run);
        }
        let n: i64 = inv.invoke_async(&mut c).await?;
        Ok(n as usize)
    }

    /// Drops the key ends of fair queueing that no longer say anything
    /// (lua/fair_sweep.lua), in every partition. Returns how many went.
    pub async fn sweep_fair(&self) -> Result<usize, QueueError> {
        let mut c = self.conn().await?;
        let mut dropped = 0;
        for k in self.parts.iter() {
            let mut cursor = "0".to_string();
            loop {
                let (next, n): (String, i64) =
                    scripts::FAIR_SWEEP.key(&k.fair).arg(&cursor).arg(500).invoke_async(&mut c).await?;
                dropped += n.max(0) as usize;
                if next == "0" {
                    break;
                }
                cursor = next;
            }
        }
        Ok(dropped)
    }

    /// Records the limits of a job of `project_id` (`None`: the job is gone)
    /// and releases what they no longer hold. Repeats until nothing parked is left to release.
    pub async fn set_limits(&self, project_id: &str, job_id: &str, limits: Option<&str>) -> Result<(), QueueError> {
        let k = &self.parts[self.partition_of_project(project_id)];
        let mut c = self.conn().await?;
        loop {
            let moved: i64 = scripts::SET_LIMITS
                .key(&k.limits)
                .key(&k.parked)
                .key(&k.ready)
                .key(&k.signal)
                .arg(job_id)
                .arg(limits.unwrap_or(""))
                .arg(1000)
                .invoke_async(&mut c)
                .await?;
            self.wake_workers(moved.max(0) as usize).await?;
            if moved < 1000 {
                return Ok(());
            }
        }
    }

    /// Waits up to `timeout` for a wake-up token. Idle workers block here
    /// instead of polling.
    pub async fn wait_for_work(&self, timeout: Duration) -> Result<bool, QueueError> {
        let list = match self.parts.len() {
            1 => self.parts[0].signal.clone(),
            _ => self.parts[0].workers_signal(),
        };
        Ok(self.redis.blpop(&list, timeout).await?.is_some())
    }

    /// Whether the marker set by [`Queue::mark_initialised`] is present in
    /// every partition: its absence from any means Redis (or a node of the
    /// cluster) lost its data and must be rebuilt from Postgres.
    pub async fn is_initialised(&self) -> Result<bool, QueueError> {
        let mut c = self.conn().await?;
        for k in self.parts.iter() {
            if !c.exists::<_, bool>(&k.epoch).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Marks the queue rebuilt: a new epoch, whose id tells the workers
    /// that the leases they held before are gone (they take them again
    /// when they renew, [`Queue::extend_leases`]), and until `hold_until_ms`
    /// dequeue keeps capped and rate-limited jobs' entries back while they
    /// do.
    pub async fn mark_initialised(&self, hold_until_ms: i64) -> Result<(), QueueError> {
        let mut c = self.conn().await?;
        let id = crate::ids::new_id("ep");
        for k in self.parts.iter() {
            let _: () = c.set(&k.epoch, format!("{id}|{hold_until_ms}")).await?;
        }
        Ok(())
    }

    /// Takes a short-lived named lock (SET NX PX); true when this caller has it.
    pub async fn try_lock(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool, QueueError> {
        let mut c = self.conn().await?;
        let ok: Option<String> = redis::cmd("SET")
            .arg(self.keys().lock(name))
            .arg(holder)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut c)
            .await?;
        Ok(ok.is_some())
    }

    /// Whether an entry is leased (some worker holds it).
    pub async fn is_leased(&self, entry: &Entry) -> Result<bool, QueueError> {
        let mut c = self.conn().await?;
        let s: Option<f64> = c.zscore(&self.parts[self.partition_of(entry)].leases, entry.encode()).await?;
        Ok(s.is_some())
    }

    /// Counts of each set, for readiness, metrics and stats.
    pub async fn depths(&self) -> Result<Depths, QueueError> {
        let mut c = self.conn().await?;
        let mut total = Depths::default();
        for k in self.parts.iter() {
            let (ready, scheduled, leased, parked, throttled): (u64, u64, u64, u64, u64) = redis::pipe()
                .zcard(&k.ready)
                .zcard(&k.scheduled)
                .zcard(&k.leases)
                .zcard(&k.parked)
                .zcard(&k.throttled)
                .query_async(&mut c)
                .await?;
            total += Depths { ready, scheduled, leased, parked, throttled };
        }
        Ok(total)
    }

    /// [`Depths`] of each job of `job_ids`, in that order: how many of its
    /// entries each set holds, read in one script call (one consistent
    /// moment per partition). The waiting sets are not indexed by job, so this walks them:
    /// for operators' stats, not for a hot path.
    pub async fn depths_by_job(&self, job_ids: &[String]) -> Result<Vec<Depths>, QueueError> {
        let mut out = vec![Depths::default(); job_ids.len()];
        if job_ids.is_empty() {
            return Ok(out);
        }
        let mut c = self.conn().await?;
        for k in self.parts.iter() {
            let mut inv = scripts::COUNT_BY_JOB.key(&k.ready);
            inv.key(&k.scheduled).key(&k.throttled).key(&k.leases).key(&k.parked);
            for id in job_ids {
                inv.arg(id);
            }
            let raw: Vec<u64> = inv.invoke_async(&mut c).await?;
            for (d, n) in out.iter_mut().zip(raw.chunks_exact(5)) {
                *d += Depths { ready: n[0], scheduled: n[1], throttled: n[2], leased: n[3], parked: n[4] };
            }
        }
        Ok(out)
    }

    pub async fn ping(&self) -> Result<(), QueueError> {
        let mut c = self.conn().await?;
        let _: String = redis::cmd("PING").query_async(&mut c).await?;
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Depths {
    pub ready: u64,
    pub scheduled: u64,
    pub leased: u64,
    pub parked: u64,
    pub throttled: u64,
}

impl std::ops::AddAssign for Depths {
    fn add_assign(&mut self, o: Depths) {
        self.ready += o.ready;
        self.scheduled += o.scheduled;
        self.leased += o.leased;
        self.parked += o.parked;
        self.throttled += o.throttled;
    }
}
