//! Configuration, loaded once from the environment (every variable is in
//! docs/configuration.md) and validated at start: a bad value stops the
//! process with a message naming the variable. Tests build [`Config`]
//! directly instead of touching the process environment.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// Most partitions a queue may have (`QUEUE_PARTITIONS`).
pub const MAX_QUEUE_PARTITIONS: usize = 256;

/// A value that must never reach a log line: `Debug` prints a placeholder.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {var}: {reason}")]
pub struct ConfigError {
    pub var: &'static str,
    pub reason: String,
}

#[derive(Clone, Debug)]
pub struct Config {
    /// Postgres, the system of record. Created and migrated on start if missing.
    pub database_url: String,
    /// The api process's Postgres connections at most (its workflow
    /// engine's pool takes a quarter of it again, 2 to 8): what to size
    /// against the server's `max_connections`, api processes times this.
    pub database_max_connections: u32,
    /// Redis: queues, leases, caps. Can be lost; the scheduler rebuilds it.
    pub redis_url: String,
    /// Every Redis key starts with this, so tenants and tests can share a Redis.
    pub redis_key_prefix: String,
    /// How many partitions the queue has (`shared::queue`): 1 on a single
    /// node; on Redis Cluster, a few per master spread the queue over them.
    /// Every process of a prefix must agree on it.
    pub queue_partitions: usize,
    /// Where the API listens.
    pub api_addr: SocketAddr,
    /// The internal shared secret: full access to every operation (see
    /// docs/contract.md, "Access control"); `None` disables that credential.
    pub internal_secret: Option<Secret>,
    /// HS256 key of run tokens.
    pub jwt_signing_key: Option<Secret>,
    /// When set, `/metrics` (the api's and a worker's or scheduler's
    /// METRICS_ADDR) answers only `Authorization: Bearer <token>`: its series
    /// name every tenant's job ids. Unset, it is open, for a scraper on a
    /// private network.
    pub metrics_token: Option<Secret>,
    pub oidc_issuer: Option<String>,
    pub oidc_audience: Option<String>,
    pub oidc_public_key: Option<String>,
    /// Requests per client address and minute; 0 disables (see
    /// docs/contract.md, "Limits").
    pub rate_limit_global_per_min: u32,
    pub rate_limit_trigger_per_min: u32,
    pub rate_limit_bulk_per_min: u32,
    /// In-flight dispatches per worker process.
    pub worker_concurrency: usize,
    /// Refuse targets that resolve to loopback or private addresses.
    pub target_deny_private: bool,
    /// Key that encrypts job secrets at rest.
    pub secrets_key: Option<Secret>,
    /// How long a worker holds a run before the scheduler may hand it to
    /// another worker; the worker renews it every third of this while the
    /// dispatch is in flight, so only a dead or frozen worker loses it.
    pub lease: Duration,
    /// How often the scheduler sweeps Postgres for runs missing from Redis.
    pub reconcile_interval: Duration,
    /// How long a scheduler's delivery sender holds a notification it is
    /// sending: after a crash, the delivery goes out again this much later.
    pub delivery_claim: Duration,
    /// How long a stopping process waits for in-flight dispatches.
    pub shutdown_grace: Duration,
    /// Largest request body the API accepts.
    pub max_body_bytes: usize,
    /// Where a worker or scheduler process serves /metrics and /health
    /// (the api serves them on its own address). `None`: not served.
    pub metrics_addr: Option<SocketAddr>,
}

impl Config {
    /// The defaults of the table in docs/configuration.md, for tests and
    /// `switchyard dev`.
    pub fn defaults() -> Config {
        Config {
            database_url: "postgres://postgres@127.0.0.1:5432/switchyard".into(),
            redis_url: "redis://127.0.0.1:6379".into(),
            redis_key_prefix: "sy".into(),
            queue_partitions: 1,
            database_max_connections: 32,
            api_addr: "127.0.0.1:8080".parse().expect("static address"),
            internal_secret: None,
            jwt_signing_key: None,
            metrics_token: None,
            oidc_issuer: None,
            oidc_audience: None,
            oidc_public_key: None,
            rate_limit_global_per_min: 100,
            rate_limit_trigger_per_min: 10,
            rate_limit_bulk_per_min: 30,
            worker_concurrency: 64,
            target_deny_private: false,
            secrets_key: None,
            lease: Duration::from_secs(30),
            reconcile_interval: Duration::from_secs(30),
            delivery_claim: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
            max_body_bytes: 1024 * 1024,
            metrics_addr: None,
        }
    }

    pub fn from_env() -> Result<Config, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let mut c = Config::defaults();
        if let Some(v) = get("DATABASE_URL") {
            if !(v.starts_with("postgres://") || v.starts_with("postgresql://")) {
                return Err(err("DATABASE_URL", "must start with postgres:// or postgresql://"));
            }
            c.database_url = v;
        }
        if let Some(v) = get("REDIS_URL") {
            let nodes = crate::redis_url::node_urls(&v);
            if nodes.is_empty()
                || !nodes
                    .iter()
                    .all(|n| n.starts_with("redis://") || n.starts_with("rediss://") || n.starts_with("unix://"))
            {
                return Err(err(
                    "REDIS_URL",
                    "must be a redis://, rediss:// or unix:// URL, or a cluster: redis+cluster://host:port,host:port or a comma list of redis:// node URLs",
                ));
            }
            if nodes.len() > 1 && nodes.iter().any(|n| n.starts_with("unix://")) {
                return Err(err("REDIS_URL", "a cluster's nodes are reached over TCP, not unix://"));
            }
            c.redis_url = v;
        }
        if let Some(v) = get("REDIS_KEY_PREFIX") {
            validate_prefix(&v).map_err(|r| err("REDIS_KEY_PREFIX", r))?;
            c.redis_key_prefix = v;
        }
        c.queue_partitions = parse_num(&get, "QUEUE_PARTITIONS", 1)? as usize;
        if !(1..=MAX_QUEUE_PARTITIONS).contains(&c.queue_partitions) {
            return Err(err("QUEUE_PARTITIONS", format!("must be 1 to {MAX_QUEUE_PARTITIONS}")));
        }
        if let Some(v) = get("API_ADDR") {
            c.api_addr =
                v.parse().map_err(|_| err("API_ADDR", format!("{v:?} is not host:port, e.g. 127.0.0.1:8080")))?;
        }
        if let Some(v) = get("METRICS_ADDR") {
            c.metrics_addr = Some(
                v.parse().map_err(|_| err("METRICS_ADDR", format!("{v:?} is not host:port, e.g. 127.0.0.1:9464")))?,
            );
        }
        c.internal_secret = get("INTERNAL_SECRET").map(Secret::new);
        if let Some(s) = &c.internal_secret {
            if s.expose().len() < 16 {
                return Err(err("INTERNAL_SECRET", "must be at least 16 characters"));
            }
        }
        c.metrics_token = get("METRICS_TOKEN").map(Secret::new);
        if c.metrics_token.as_ref().is_some_and(|s| s.expose().len() < 16) {
            return Err(err("METRICS_TOKEN", "must be at least 16 characters"));
        }
        c.jwt_signing_key = get("JWT_SIGNING_KEY").map(Secret::new);
        require_key_len(&c.jwt_signing_key, "JWT_SIGNING_KEY")?;
        c.oidc_issuer = get("OIDC_ISSUER");
        c.oidc_audience = get("OIDC_AUDIENCE");
        c.oidc_public_key = get("OIDC_PUBLIC_KEY");
        let oidc_set = [&c.oidc_issuer, &c.oidc_audience, &c.oidc_public_key].iter().filter(|v| v.is_some()).count();
        if oidc_set != 0 && oidc_set != 3 {
            let missing = [
                ("OIDC_ISSUER", &c.oidc_issuer),
                ("OIDC_AUDIENCE", &c.oidc_audience),
                ("OIDC_PUBLIC_KEY", &c.oidc_public_key),
            ]
            .into_iter()
            .find(|(_, v)| v.is_none())
            .map_or("OIDC_ISSUER", |(k, _)| k);
            return Err(err(missing, "OIDC needs OIDC_ISSUER, OIDC_AUDIENCE and OIDC_PUBLIC_KEY together"));
        }
        c.rate_limit_global_per_min = parse_num(&get, "RATE_LIMIT_GLOBAL_PER_MIN", c.rate_limit_global_per_min)?;
        c.rate_limit_trigger_per_min = parse_num(&get, "RATE_LIMIT_TRIGGER_PER_MIN", c.rate_limit_trigger_per_min)?;
        c.rate_limit_bulk_per_min = parse_num(&get, "RATE_LIMIT_BULK_PER_MIN", c.rate_limit_bulk_per_min)?;
        c.database_max_connections = parse_num(&get, "DATABASE_MAX_CONNECTIONS", c.database_max_connections)?;
        if c.database_max_connections < 2 {
            return Err(err("DATABASE_MAX_CONNECTIONS", "must be at least 2"));
        }
        c.worker_concurrency = parse_num(&get, "WORKER_CONCURRENCY", c.worker_concurrency as u32)? as usize;
        if c.worker_concurrency == 0 {
            return Err(err("WORKER_CONCURRENCY", "must be at least 1"));
        }
        if let Some(v) = get("TARGET_DENY_PRIVATE") {
            c.target_deny_private = match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" => false,
                _ => return Err(err("TARGET_DENY_PRIVATE", "must be true or false")),
            };
        }
        c.secrets_key = get("SECRETS_KEY").map(Secret::new);
        require_key_len(&c.secrets_key, "SECRETS_KEY")?;
        let lease = parse_num(&get, "LEASE_SECS", c.lease.as_secs() as u32)?;
        if lease < 2 {
            return Err(err("LEASE_SECS", "must be at least 2"));
        }
        c.lease = Duration::from_secs(lease.into());
        let reconcile = parse_num(&get, "RECONCILE_INTERVAL_SECS", c.reconcile_interval.as_secs() as u32)?;
        if reconcile == 0 {
            return Err(err("RECONCILE_INTERVAL_SECS", "must be at least 1"));
        }
        c.reconcile_interval = Duration::from_secs(reconcile.into());
        let claim = parse_num(&get, "DELIVERY_CLAIM_SECS", c.delivery_claim.as_secs() as u32)?;
        // Longer than one attempt may take (10 s), or a slow attempt's
        // delivery would be sent twice at once.
        if claim <= 10 {
            return Err(err("DELIVERY_CLAIM_SECS", "must be more than 10"));
        }
        c.delivery_claim = Duration::from_secs(claim.into());
        c.shutdown_grace =
            Duration::from_secs(parse_num(&get, "SHUTDOWN_GRACE_SECS", c.shutdown_grace.as_secs() as u32)?.into());
        Ok(c)
    }

    /// What separate api and worker processes need beyond [`Config::from_env`]:
    /// run tokens must verify across processes, so the key cannot be random.
    pub fn require_jwt_key(&self) -> Result<(), ConfigError> {
        if self.jwt_signing_key.is_none() {
            return Err(err(
                "JWT_SIGNING_KEY",
                "must be set when api and worker run as separate processes (`switchyard dev` makes one)",
            ));
        }
        Ok(())
    }
}

pub fn validate_prefix(p: &str) -> Result<(), String> {
    if p.is_empty() || p.len() > 64 {
        return Err("must be 1 to 64 characters".into());
    }
    if p.chars().any(|c| matches!(c, '{' | '}' | ':' | '|') || c.is_whitespace() || c.is_control()) {
        return Err("must not contain braces, ':', '|' or whitespace".into());
    }
    Ok(())
}

/// Bytes a key read from the environment must have at least. An HS256 key
/// shorter than its 256-bit output, or a SECRETS_KEY that a short guess
/// finds (SHA-256 only spreads it, it does not stretch it), can be searched
/// offline: from one run token, or from one stolen row. Only the environment
/// is held to it; tests and `switchyard dev` set their keys directly.
pub const MIN_KEY_BYTES: usize = 32;

fn require_key_len(key: &Option<Secret>, var: &'static str) -> Result<(), ConfigError> {
    match key {
        Some(k) if k.expose().len() < MIN_KEY_BYTES => Err(err(
            var,
            format!(
                "must be at least {MIN_KEY_BYTES} bytes (it has {}); generate one with `openssl rand -hex 32`",
                k.expose().len()
            ),
        )),
        _ => Ok(()),
    }
}

fn err(var: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError { var, reason: reason.into() }
}

fn parse_num(get: &impl Fn(&str) -> Option<String>, var: &'static str, default: u32) -> Result<u32, ConfigError> {
    match get(var) {
        None => Ok(default),
        Some(v) => v.trim().parse::<u32>().map_err(|_| err(var, format!("{v:?} is not a non-negative whole number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_apply() {
        let c = load(&[]).unwrap();
        assert_eq!(c.redis_key_prefix, "sy");
        assert_eq!(c.worker_concurrency, 64);
        assert_eq!(c.database_max_connections, 32);
        assert_eq!(c.rate_limit_trigger_per_min, 10);
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (var, val) in [
            ("WORKER_CONCURRENCY", "many"),
            ("WORKER_CONCURRENCY", "0"),
            ("DATABASE_MAX_CONNECTIONS", "1"),
            ("DATABASE_MAX_CONNECTIONS", "lots"),
            ("API_ADDR", "localhost"),
            ("REDIS_KEY_PREFIX", "a{b}"),
            ("DATABASE_URL", "mysql://x"),
            ("TARGET_DENY_PRIVATE", "maybe"),
            ("INTERNAL_SECRET", "short"),
            ("METRICS_TOKEN", "short"),
            ("LEASE_SECS", "1"),
            ("METRICS_ADDR", "nowhere"),
            ("QUEUE_PARTITIONS", "0"),
            ("QUEUE_PARTITIONS", "1000"),
            ("REDIS_URL", "memcached://x"),
            ("REDIS_URL", "redis://a:1,unix:///tmp/r.sock"),
        ] {
            let e = load(&[(var, val)]).unwrap_err();
            assert_eq!(e.var, var);
            assert!(e.to_string().contains(var));
        }
    }

    #[test]
    fn a_cluster_url_is_taken() {
        let url = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001";
        let c = load(&[("REDIS_URL", url), ("QUEUE_PARTITIONS", "12")]).unwrap();
        assert_eq!((c.redis_url.as_str(), c.queue_partitions), (url, 12));
        assert!(load(&[("REDIS_URL", "redis://a:7000,redis://b:7001")]).is_ok());
        assert_eq!(load(&[]).unwrap().queue_partitions, 1);
    }

    #[test]
    fn oidc_needs_all_three_settings() {
        let e = load(&[("OIDC_ISSUER", "https://issuer.example"), ("OIDC_PUBLIC_KEY", "/keys/oidc.pem")]).unwrap_err();
        assert_eq!(e.var, "OIDC_AUDIENCE");
        let c = load(&[("OIDC_ISSUER", "i"), ("OIDC_AUDIENCE", "a"), ("OIDC_PUBLIC_KEY", "k")]).unwrap();
        assert_eq!(c.oidc_audience.as_deref(), Some("a"));
    }

    #[test]
    fn keys_shorter_than_32_bytes_are_refused() {
        for var in ["JWT_SIGNING_KEY", "SECRETS_KEY"] {
            let e = load(&[(var, &"k".repeat(31))]).unwrap_err();
            assert_eq!(e.var, var);
            assert!(e.to_string().contains(var) && e.to_string().contains("32 bytes"), "{e}");
            // Bytes, not characters: 16 two-byte characters are 32 bytes.
            assert!(load(&[(var, &"é".repeat(16))]).is_ok(), "{var}");
            assert!(load(&[(var, &"k".repeat(32))]).is_ok(), "{var}");
        }
        let c = load(&[("JWT_SIGNING_KEY", &"j".repeat(40)), ("SECRETS_KEY", &"s".repeat(64))]).unwrap();
        assert_eq!(c.jwt_signing_key.unwrap().expose().len(), 40);
        assert_eq!(c.secrets_key.unwrap().expose().len(), 64);
        // Unset stays allowed: `require_jwt_key` and the secrets routes decide
        // what a process without them may do.
        assert!(load(&[]).unwrap().secrets_key.is_none());
    }

    #[test]
    fn secrets_do_not_print() {
        let c = load(&[("INTERNAL_SECRET", "0123456789abcdef-secret")]).unwrap();
        assert!(!format!("{c:?}").contains("0123456789abcdef"));
    }
}
