//! Every Redis key Switchyard uses, in one place. Shape:
//! `<prefix>:{main}:<name>`. All keys share the `{main}` hash tag so every
//! script's keys live in one slot on Redis Cluster.

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
    /// list: wake-up tokens for idle workers.
    pub signal: String,
    /// string: set once the queue is built; missing means Redis lost its data.
    pub epoch: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        let k = |name: &str| format!("{prefix}:{{main}}:{name}");
        Keys {
            prefix: prefix.to_string(),
            ready: k("ready"),
            scheduled: k("scheduled"),
            throttled: k("throttled"),
            leases: k("leases"),
            parked: k("parked"),
            active: k("active"),
            limits: k("limits"),
            signal: k("signal"),
            epoch: k("epoch"),
        }
    }

    /// string: a named lock (leadership of a maintenance loop).
    pub fn lock(&self, name: &str) -> String {
        format!("{}:lock:{name}", self.prefix)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = Keys::new("sy");
        for key in [&k.ready, &k.scheduled, &k.throttled, &k.leases, &k.parked, &k.active, &k.limits, &k.signal] {
            assert!(key.starts_with("sy:{main}:"), "{key}");
        }
    }
}
