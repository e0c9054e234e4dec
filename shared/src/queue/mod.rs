//! The Redis side of a run's life: entries, keys, scripts and the typed calls
//! that run them. Redis holds no truth of its own: everything here can be
//! rebuilt from Postgres (see the scheduler's reconciler).

mod conn;
mod entry;
mod keys;
mod scripts;
mod wake;

pub use conn::Redis;
pub use entry::{Entry, EntryError, MAX_PRIORITY, MIN_PRIORITY};
pub use keys::Keys;
pub use wake::{WakeLoop, WakeUp, WAKE_WINDOW};

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::AsyncCommands;

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

/// The queue of one key prefix: every call goes through a Lua script of `lua/`.
#[derive(Clone)]
pub struct Queue {
    redis: Redis,
    keys: Keys,
    /// Throttles [`Queue::wake`], shared by the clones of this handle.
    wakes: Arc<wake::Throttle>,
}

impl Queue {
    pub fn new(redis: Redis, prefix: &str) -> Queue {
        Queue { redis, keys: Keys::new(prefix), wakes: Arc::default() }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The shared connection, for commands of this queue's keys that the
    /// scripts do not cover (tests and operators' tools).
    pub async fn conn(&self) -> Result<ConnectionManager, QueueError> {
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
        let k = &self.keys;
        let mut c = self.conn().await?;
        let mut call = scripts::ENQUEUE.prepare_invoke();
        call.key(&k.ready).key(&k.scheduled).key(&k.throttled).key(&k.leases).key(&k.parked).key(&k.signal).arg(now_ms);
        for (entry, due_ms) in entries {
            call.arg(entry.encode()).arg(entry.rank()).arg(*due_ms);
        }
        let n: i64 = call.invoke_async(&mut c).await?;
        Ok(n.max(0) as usize)
    }

    /// Leases up to `max` entries until `now_ms + lease`.
    pub async fn dequeue(&self, max: usize, lease: Duration, now_ms: i64) -> Result<Vec<Entry>, QueueError> {
        Ok(self.dequeue_in_epoch(max, lease, now_ms).await?.1)
    }

    /// [`Queue::dequeue`], with the id of the epoch the entries were leased
    /// under ('' before the reconciler rebuilt Redis): a worker hands it
    /// back when it renews them ([`Queue::extend_leases`]).
    pub async fn dequeue_in_epoch(
        &self,
        max: usize,
        lease: Duration,
        now_ms: i64,
    ) -> Result<(String, Vec<Entry>), QueueError> {
        let k = &self.keys;
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
        let entries = raw.map(|s| Entry::decode(&s).map_err(Into::into)).collect::<Result<Vec<_>, QueueError>>()?;
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
        let k = &self.keys;
        let mut c = self.conn().await?;
        let mut call = scripts::ACK.prepare_invoke();
        call.key(&k.leases).key(&k.active).key(&k.parked).key(&k.ready).key(&k.scheduled).key(&k.signal);
        for (entry, retry_due_ms) in entries {
            call.arg(entry.encode()).arg(retry_due_ms.unwrap_or(0).max(0));
        }
        let n: i64 = call.invoke_async(&mut c).await?;
        Ok(n.max(0) as usize)
    }

    /// Takes back leases that expired before `now_ms`.
    pub async fn reap(&self, now_ms: i64, limit: usize) -> Result<Vec<Entry>, QueueError> {
        let k = &self.keys;
        let mut c = self.conn().await?;
        let raw: Vec<String> = scripts::REAP
            .key(&k.leases)
            .key(&k.active)
            .key(&k.parked)
            .key(&k.ready)
            .key(&k.signal)
            .arg(now_ms)
            .arg(limit)
            .invoke_async(&mut c)
            .await?;
        raw.iter().map(|s| Entry::decode(s).map_err(Into::into)).collect()
    }

    /// Whether any lease expired by `now_ms` (what [`Queue::reap`] would
    /// take), without taking it: a plain read.
    pub async fn any_lease_expired(&self, now_ms: i64) -> Result<bool, QueueError> {
        let mut c = self.conn().await?;
        let n: u64 = c.zcount(&self.keys.leases, "-inf", now_ms).await?;
        Ok(n > 0)
    }

    /// Entries of `scheduled` due by `now_ms`, earliest first, at most
    /// `limit`. A plain read: nothing moves.
    pub async fn due_scheduled(&self, now_ms: i64, limit: usize) -> Result<Vec<Entry>, QueueError> {
        let mut c = self.conn().await?;
        let raw: Vec<String> = c.zrangebyscore_limit(&self.keys.scheduled, "-inf", now_ms, 0, limit as isize).await?;
        raw.iter().map(|s| Entry::decode(s).map_err(Into::into)).collect()
    }

    /// Logs, in the rate limit buckets of the run's job, that its request
    /// is sent now (see lua/record_dispatch.lua). Returns how many buckets.
    pub async fn record_dispatch(&self, job_id: &str, run_id: &str, now_ms: i64) -> Result<usize, QueueError> {
        let mut c = self.conn().await?;
        let n: i64 = scripts::RECORD_DISPATCH
            .key(&self.keys.limits)
            .key(&self.keys.rate)
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
        if entries.is_empty() {
            return Ok(0);
        }
        let mut c = self.conn().await?;
        let mut inv = scripts::RESCHEDULE.key(&self.keys.scheduled);
        inv.arg(due_ms);
        for e in entries {
            inv.arg(e.encode());
        }
        let n: i64 = inv.invoke_async(&mut c).await?;
        Ok(n as usize)
    }

    /// Moves the given entries from `scheduled` to `ready`, each only if it
    /// is still there and due by `now_ms`. Name only entries whose runs are
    /// already `queued` in Postgres: a worker cannot claim any other. Returns
    /// how many moved and how long until the first entry left in `scheduled`
    /// is due (`None` when it is empty); an empty `entries` just asks that.
    pub async fn promote(&self, entries: &[Entry], now_ms: i64) -> Result<(usize, Option<Duration>), QueueError> {
        let k = &self.keys;
        let mut c = self.conn().await?;
        let mut inv = scripts::PROMOTE.key(&k.scheduled);
        inv.key(&k.ready).key(&k.signal).arg(now_ms);
        for e in entries {
            inv.arg(e.encode());
        }
        let (moved, wait): (i64, i64) = inv.invoke_async(&mut c).await?;
        let wait = (wait >= 0).then(|| Duration::from_millis(wait as u64));
        Ok((moved as usize, wait))
    }

    /// Drops the given entries from `scheduled` (their runs need no dispatch
    /// any more), each only if it is still due by `now_ms`, so a retry
    /// scheduled since the caller looked survives. Returns how many went.
    pub async fn remove_scheduled(&self, entries: &[Entry], now_ms: i64) -> Result<usize, QueueError> {
        if entries.is_empty() {
            return Ok(0);
        }
        let mut c = self.conn().await?;
        let mut inv = scripts::REMOVE_SCHEDULED.key(&self.keys.scheduled);
        inv.arg(now_ms);
        for e in entries {
            inv.arg(e.encode());
        }
        let n: i64 = inv.invoke_async(&mut c).await?;
        Ok(n as usize)
    }

    /// Removes an entry from every waiting set (not from leases).
    pub async fn remove(&self, entry: &Entry) -> Result<bool, QueueError> {
        let k = &self.keys;
        let mut c = self.conn().await?;
        let n: i64 = scripts::REMOVE
            .key(&k.ready)
            .key(&k.scheduled)
            .key(&k.throttled)
            .key(&k.parked)
            .arg(entry.encode())
            .invoke_async(&mut c)
            .await?;
        Ok(n > 0)
    }

    /// Renews the leases a worker holds, each with the id of the epoch it
    /// was leased or last renewed under. A lease Redis lost with its data
    /// (an earlier epoch) is taken again with its concurrency slots; one
    /// reaped in this epoch is not. Returns how many leases hold now and
    /// the current epoch id ('' while Redis is not rebuilt).
    pub async fn extend_leases(
        &self,
        entries: &[(Entry, String)],
        until_ms: i64,
    ) -> Result<(usize, String), QueueError> {
        if entries.is_empty() {
            return Ok((0, String::new()));
        }
        let k = &self.keys;
        let mut c = self.conn().await?;
        let mut inv = scripts::EXTEND_LEASES.key(&k.leases);
        inv.key(&k.active).key(&k.epoch).key(&k.limits).key(&k.rate);
        inv.key(&k.ready).key(&k.scheduled).key(&k.throttled).key(&k.parked);
        inv.arg(until_ms).arg(chrono::Utc::now().timestamp_millis());
        for (e, epoch) in entries {
            inv.arg(e.encode()).arg(epoch);
        }
        let (n, epoch): (i64, String) = inv.invoke_async(&mut c).await?;
        Ok((n as usize, epoch))
    }

    /// Logs in a rate-limit bucket the sends Postgres recorded, (sent ms,
    /// run id) each: the reconciler's rebuild after Redis lost its data.
    pub async fn seed_rate(&self, bucket: &str, sends: &[(i64, String)]) -> Result<usize, QueueError> {
        if sends.is_empty() {
            return Ok(0);
        }
        let mut c = self.conn().await?;
        let mut inv = scripts::SEED_RATE.key(&self.keys.rate);
        inv.arg(bucket);
        for (ms, run) in sends {
            inv.arg(ms).arg(run);
        }
        let n: i64 = inv.invoke_async(&mut c).await?;
        Ok(n as usize)
    }

    /// Records a job's limits (`None`: the job is gone) and releases what they no
    /// longer hold. Repeats until nothing parked is left to release.
    pub async fn set_limits(&self, job_id: &str, limits: Option<&str>) -> Result<(), QueueError> {
        let k = &self.keys;
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
            if moved < 1000 {
                return Ok(());
            }
        }
    }

    /// Waits up to `timeout` for a wake-up token. Idle workers block here
    /// instead of polling.
    pub async fn wait_for_work(&self, timeout: Duration) -> Result<bool, QueueError> {
        Ok(self.redis.blpop(&self.keys.signal, timeout).await?.is_some())
    }

    /// Whether the marker set by [`Queue::mark_initialised`] is present: its
    /// absence means Redis lost its data and must be rebuilt from Postgres.
    pub async fn is_initialised(&self) -> Result<bool, QueueError> {
        let mut c = self.conn().await?;
        Ok(c.exists(&self.keys.epoch).await?)
    }

    /// Marks the queue rebuilt: a new epoch, whose id tells the workers
    /// that the leases they held before are gone (they take them again
    /// when they renew, [`Queue::extend_leases`]), and until `hold_until_ms`
    /// dequeue keeps capped and rate-limited jobs' entries back while they
    /// do.
    pub async fn mark_initialised(&self, hold_until_ms: i64) -> Result<(), QueueError> {
        let mut c = self.conn().await?;
        let id = crate::ids::new_id("ep");
        let _: () = c.set(&self.keys.epoch, format!("{id}|{hold_until_ms}")).await?;
        Ok(())
    }

    /// Takes a short-lived named lock (SET NX PX); true when this caller has it.
    pub async fn try_lock(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool, QueueError> {
        let mut c = self.conn().await?;
        let ok: Option<String> = redis::cmd("SET")
            .arg(self.keys.lock(name))
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
        let s: Option<f64> = c.zscore(&self.keys.leases, entry.encode()).await?;
        Ok(s.is_some())
    }

    /// Counts of each set, for readiness, metrics and stats.
    pub async fn depths(&self) -> Result<Depths, QueueError> {
        let k = &self.keys;
        let mut c = self.conn().await?;
        let (ready, scheduled, leased, parked, throttled): (u64, u64, u64, u64, u64) = redis::pipe()
            .zcard(&k.ready)
            .zcard(&k.scheduled)
            .zcard(&k.leases)
            .zcard(&k.parked)
            .zcard(&k.throttled)
            .query_async(&mut c)
            .await?;
        Ok(Depths { ready, scheduled, leased, parked, throttled })
    }

    /// [`Depths`] of each job of `job_ids`, in that order: how many of its
    /// entries each set holds, read in one script call (one consistent
    /// moment). The waiting sets are not indexed by job, so this walks them:
    /// for operators' stats, not for a hot path.
    pub async fn depths_by_job(&self, job_ids: &[String]) -> Result<Vec<Depths>, QueueError> {
        if job_ids.is_empty() {
            return Ok(vec![]);
        }
        let k = &self.keys;
        let mut c = self.conn().await?;
        let mut inv = scripts::COUNT_BY_JOB.key(&k.ready);
        inv.key(&k.scheduled).key(&k.throttled).key(&k.leases).key(&k.parked);
        for id in job_ids {
            inv.arg(id);
        }
        let raw: Vec<u64> = inv.invoke_async(&mut c).await?;
        Ok(raw
            .chunks_exact(5)
            .map(|n| Depths { ready: n[0], scheduled: n[1], throttled: n[2], leased: n[3], parked: n[4] })
            .collect())
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
