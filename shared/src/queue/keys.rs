//! Every Redis key Switchyard uses, in one place. The queue's keys are
//! `<prefix>:{main}:<name>`: sharing the `{main}` hash tag puts every queue
//! script's keys in one slot on Redis Cluster. A queue of N partitions
//! (`QUEUE_PARTITIONS`) has N such keyspaces, `<prefix>:{q<i>}:<name>`
//! (see [`partition_tag`] for the tags), each a whole queue of its own in
//! its own slot, so a cluster spreads them over its nodes; the one key they
//! share, the workers' wake-up list, has a tag of its own. The other keys
//! stay out of those slots, since no script mixes them with the queue's: a client's rate
//! counters (tag `{rl:<address>}`, so one script checks all buckets of a
//! client), the auth cache version (`{auth}`) and the maintenance locks
//! (`<prefix>:lock:<name>`).

#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
    /// zset: entries ready to dispatch, by rank.
    pub ready: String,
    /// zset: entries waiting for a time (retries, delays), by due ms.
    pub scheduled: String,
    /// zset: entries held by a rate limit, by the ms the window allows them.
    pub throttled: String,
    /// zset: entries being dispatched, by lease expiry ms.
    pub leases: String,
    /// zset (lexicographic): entries held by a concurrency cap or a pause.
    pub parked: String,
    /// hash: in-flight count per job and per job+concurrency key.
    pub active: String,
    /// hash: job id -> encoded limits (see `JobSpec::limits_field`).
    pub limits: String,
    /// zset (lexicographic, all scores 0): the dispatch log of every rate
    /// limit bucket, members `<bucket>|<ms as 16 hex>|<run_id>`; dequeue.lua
    /// counts a bucket's window and trims what has aged out.
    pub rate: String,
    /// list: wake-up tokens for idle workers.
    pub signal: String,
    /// string: set once the queue is built; missing means Redis lost its data.
    pub epoch: String,
    /// hash: the tags and clocks of jobs whose keys are served in turn
    /// (`fairness: round_robin`, lua/lib/fair.lua).
    pub fair: String,
    /// pub/sub channel: wake-ups for the scheduler's sleeping loops (see
    /// `queue::wake`). Not a key, but named like one so that prefixes keep
    /// tenants and tests apart here too.
    pub wake: String,
}

/// The hash tag of partition `i` of `n`: `main` when there is one;
/// otherwise `q<i>`, or `q<i>.<k>` with the smallest k that puts the tag's
/// slot in the i-th of n equal slices of the slot range. A cluster assigns
/// slots to nodes in ranges, so the partitions spread over its nodes as
/// evenly as its slices allow, instead of as the hash happens to fall.
pub fn partition_tag(i: usize, n: usize) -> String {
    if n <= 1 {
        return "main".into();
    }
    let slice = |tag: &str| usize::from(crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % 16384) * n / 16384;
    let plain = format!("q{i}");
    if slice(&plain) == i {
        return plain;
    }
    (0..).map(|k| format!("q{i}.{k}")).find(|t| slice(t) == i).expect("some suffix lands in every slice")
}

impl Keys {
    /// The keys of a queue of one partition.
    pub fn new(prefix: &str) -> Keys {
        Keys::partition(prefix, 0, 1)
    }

    /// The keys of partition `i` of `n`.
    pub fn partition(prefix: &str, i: usize, n: usize) -> Keys {
        let tag = partition_tag(i, n);
        let k = |name: &str| format!("{prefix}:{{{tag}}}:{name}");
        Keys {
            prefix: prefix.to_string(),
            ready: k("ready"),
            scheduled: k("scheduled"),
            throttled: k("throttled"),
            leases: k("leases"),
            parked: k("parked"),
            active: k("active"),
            limits: k("limits"),
            rate: k("rate"),
            signal: k("signal"),
            epoch: k("epoch"),
            fair: k("fair"),
            wake: format!("{prefix}:{{main}}:wake"),
        }
    }

    /// list: wake-up tokens for idle workers of a queue of many partitions
    /// (the partitions' own `signal` lists serve a queue of one).
    pub fn workers_signal(&self) -> String {
        format!("{}:{{wake}}:signal", self.prefix)
    }

    /// string: a named lock (leadership of a maintenance loop).
    pub fn lock(&self, name: &str) -> String {
        format!("{}:lock:{name}", self.prefix)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// string: changes (to a fresh random value) whenever an API key, role,
    /// member or policy changes; every api process drops its auth caches
    /// when the value it sees differs from the one its entries were read under.
    pub fn auth_version(&self) -> String {
        format!("{}:{{auth}}:version", self.prefix)
    }

    /// string (counter with a TTL): requests of one client address in the
    /// current window of `bucket` (global, trigger, bulk). The address is the
    /// hash tag, so one script call can check all buckets of a client.
    pub fn client_rate(&self, client: &str, bucket: &str) -> String {
        format!("{}:{{rl:{client}}}:{bucket}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = Keys::new("sy");
        let keys = [&k.ready, &k.scheduled, &k.throttled, &k.leases, &k.parked, &k.active, &k.limits, &k.rate, &k.fair];
        for key in keys.into_iter().chain([&k.signal, &k.wake]) {
            assert!(key.starts_with("sy:{main}:"), "{key}");
        }
    }

    #[test]
    fn partitions_spread_over_the_slot_range() {
        for n in [2, 3, 8, 16] {
            let slots: Vec<usize> = (0..n)
                .map(|i| usize::from(crc16::State::<crc16::XMODEM>::calculate(partition_tag(i, n).as_bytes()) % 16384))
                .collect();
            for (i, s) in slots.iter().enumerate() {
                assert_eq!(s * n / 16384, i, "partition {i} of {n}");
            }
        }
        assert_eq!(Keys::partition("sy", 1, 4).ready, format!("sy:{{{}}}:ready", partition_tag(1, 4)));
        assert_eq!(Keys::partition("sy", 0, 1).ready, "sy:{main}:ready");
    }
}
