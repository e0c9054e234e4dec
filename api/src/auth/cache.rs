//! Short-lived in-memory caches of what authorisation reads on every
//! request: API keys by hash, a user's role in a project (kept at most 30
//! seconds), and a project's resource policies.
//!
//! Invalidation across api processes: every change to a key, role, member
//! or policy writes a fresh random value to one Redis key
//! ([`Keys::auth_version`](switchyard_shared::queue::Keys::auth_version))
//! after its transaction commits. Each request reads that value (one GET)
//! before it looks in the cache; when it differs from the value the cache
//! was filled under, the whole cache is dropped. So a revocation or a member
//! change is seen by the next request in every process, not after a TTL.
//! When Redis does not answer, the caches are bypassed (every lookup goes
//! to Postgres), never trusted blindly.
//!
//! Entries are only stored when the version has not moved since it was read
//! before the database lookup, so a lookup that raced a change cannot park
//! stale data under the new version.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use switchyard_shared::queue::Queue;

/// How long the version read may take before the request goes uncached.
const VERSION_TIMEOUT: Duration = Duration::from_millis(250);
/// A bound on memory: a full map is emptied rather than grown.
const MAX_ENTRIES: usize = 10_000;

/// The version a request read, or `None` when Redis did not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version(Option<String>);

impl Version {
    pub fn usable(&self) -> bool {
        self.0.is_some()
    }
}

/// Reads the current auth version.
pub async fn current_version(queue: &Queue) -> Version {
    let key = queue.keys().auth_version();
    let read = async {
        let mut c = queue.conn().await.ok()?;
        let v: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut c).await.ok()?;
        Some(v.unwrap_or_default())
    };
    Version(tokio::time::timeout(VERSION_TIMEOUT, read).await.ok().flatten())
}

/// Tells every api process to drop its auth caches. Called after the
/// change has committed. A failure is logged: processes that cannot read the
/// version do not use their caches, and entries age out within their TTL.
pub async fn bump_version(queue: &Queue) {
    let key = queue.keys().auth_version();
    let value = uuid::Uuid::now_v7().simple().to_string();
    let write = async {
        let mut c = queue.conn().await.map_err(|e| e.to_string())?;
        redis::cmd("SET").arg(&key).arg(&value).query_async::<()>(&mut c).await.map_err(|e| e.to_string())
    };
    match tokio::time::timeout(Duration::from_secs(2), write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "could not publish an access-control change to other api processes"),
        Err(_) => tracing::error!("timed out publishing an access-control change to other api processes"),
    }
}

/// A map whose entries live `ttl` and all vanish when the version moves.
pub struct VersionedCache<K, V> {
    ttl: Duration,
    inner: Mutex<Inner<K, V>>,
}

struct Inner<K, V> {
    version: Option<String>,
    entries: HashMap<K, (V, Instant)>,
}

impl<K: Eq + Hash, V: Clone> VersionedCache<K, V> {
    pub fn new(ttl: Duration) -> Self {
        VersionedCache { ttl, inner: Mutex::new(Inner { version: None, entries: HashMap::new() }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K, V>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached value, if fresh and read under `version`.
    pub fn get(&self, version: &Version, key: &K) -> Option<V> {
        let v = version.0.as_ref()?;
        let mut inner = self.lock();
        if inner.version.as_ref() != Some(v) {
            inner.entries.clear();
            inner.version = Some(v.clone());
            return None;
        }
        match inner.entries.get(key) {
            Some((value, at)) if at.elapsed() < self.ttl => Some(value.clone()),
            _ => None,
        }
    }

    /// Stores a value looked up after `version` was read, unless the version
    /// has moved since.
    pub fn put(&self, version: &Version, key: K, value: V) {
        let Some(v) = version.0.as_ref() else { return };
        let mut inner = self.lock();
        if inner.version.as_ref() != Some(v) {
            return;
        }
        if inner.entries.len() >= MAX_ENTRIES {
            inner.entries.clear();
        }
        inner.entries.insert(key, (value, Instant::now()));
    }
}

/// Remembers when something was last written, to write it at most once per
/// `every` (API key last_used_at, known actor profiles).
pub struct Throttle<K> {
    every: Duration,
    seen: Mutex<HashMap<K, Instant>>,
}

impl<K: Eq + Hash> Throttle<K> {
    pub fn new(every: Duration) -> Self {
        Throttle { every, seen: Mutex::new(HashMap::new()) }
    }

    /// True (and the time is recorded) when `key` was not let through in the last `every`.
    pub fn due(&self, key: K) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match seen.get(&key) {
            Some(t) if now.duration_since(*t) < self.every => false,
            _ => {
                if seen.len() >= MAX_ENTRIES {
                    let every = self.every;
                    seen.retain(|_, t| now.duration_since(*t) < every);
                }
                seen.insert(key, now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_version_drops_everything() {
        let c: VersionedCache<&str, i32> = VersionedCache::new(Duration::from_secs(60));
        let v1 = Version(Some("a".into()));
        assert_eq!(c.get(&v1, &"k"), None);
        c.put(&v1, "k", 1);
        assert_eq!(c.get(&v1, &"k"), Some(1));
        let v2 = Version(Some("b".into()));
        assert_eq!(c.get(&v2, &"k"), None);
        // A lookup that read v1 before the change must not fill the v2 cache.
        c.put(&v1, "k", 1);
        assert_eq!(c.get(&v2, &"k"), None);
    }

    #[test]
    fn an_unknown_version_bypasses_the_cache() {
        let c: VersionedCache<&str, i32> = VersionedCache::new(Duration::from_secs(60));
        let none = Version(None);
        c.put(&none, "k", 1);
        assert_eq!(c.get(&none, &"k"), None);
    }

    #[test]
    fn entries_expire() {
        let c: VersionedCache<&str, i32> = VersionedCache::new(Duration::from_millis(0));
        let v = Version(Some(String::new()));
        let _ = c.get(&v, &"k");
        c.put(&v, "k", 1);
        assert_eq!(c.get(&v, &"k"), None);
    }

    #[test]
    fn throttle_lets_one_through_per_period() {
        let t = Throttle::new(Duration::from_secs(60));
        assert!(t.due("k"));
        assert!(!t.due("k"));
        assert!(t.due("other"));
    }
}
