//! Jobs and workflows as the trigger paths and the workflow engine read
//! them, kept for a second.
//!
//! Every trigger needs its job or workflow (enabled? payload schema?
//! limits? steps?), and a busy one is triggered thousands of times a
//! second; every job step an engine pass starts needs its job too (a chain
//! at 100 workflows/s read the same job 200 times a second, each a round
//! trip on the path from a step's end to the next step's dispatch). A
//! change made through this process drops the cached copy at once
//! (`forget`: the api shares one [`JobCache`] between its triggers and its
//! engine); other processes see it within [`TTL`]. Only these paths read
//! through here: every other read (GET, PATCH, versions) goes to Postgres.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sqlx::{PgConnection, PgPool};

use super::jobs::{self, JobRecord};
use super::workflows::{self, WorkflowRecord};
use super::Tenant;
use crate::ids::{JobId, WorkflowId};

pub const TTL: Duration = Duration::from_secs(1);
/// A bound on memory: a full map is emptied rather than grown.
const MAX_ENTRIES: usize = 10_000;

/// Records by id (`K`, the records' typed id), each with when it was read.
struct Recent<K, V> {
    map: Mutex<HashMap<K, (Instant, Arc<V>)>>,
}

impl<K, V> Default for Recent<K, V> {
    fn default() -> Self {
        Recent { map: Mutex::default() }
    }
}

impl<K: Hash + Eq + Borrow<str> + for<'a> From<&'a str>, V> Recent<K, V> {
    /// The copy of `id` read less than [`TTL`] ago.
    fn fresh(&self, id: &str) -> Option<Arc<V>> {
        self.lock().get(id).filter(|(at, _)| at.elapsed() < TTL).map(|(_, v)| Arc::clone(v))
    }

    /// The copy of `id` read less than [`TTL`] ago, or else what `read`
    /// finds now (not polled when the copy is fresh), kept by [`Self::put`].
    async fn get_or_read(
        &self,
        id: &str,
        read: impl Future<Output = Result<Option<V>, sqlx::Error>>,
    ) -> Result<Option<Arc<V>>, sqlx::Error> {
        match self.fresh(id) {
            Some(v) => Ok(Some(v)),
            None => Ok(self.put(id, read.await?)),
        }
    }

    /// Keeps what was just read: `Some` under its id, `None` drops `id`.
    fn put(&self, id: &str, read: Option<V>) -> Option<Arc<V>> {
        let mut map = self.lock();
        let Some(v) = read else {
            map.remove(id);
            return None;
        };
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        let v = Arc::new(v);
        map.insert(K::from(id), (Instant::now(), Arc::clone(&v)));
        Some(v)
    }

    fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, (Instant, Arc<V>)>> {
        // The map holds no invariant a panicking holder could break.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Default)]
pub struct JobCache {
    recent: Recent<JobId, JobRecord>,
}

impl JobCache {
    /// The live job with this id, at most [`TTL`] old.
    pub async fn get(&self, pool: &PgPool, id: &str) -> Result<Option<Arc<JobRecord>>, sqlx::Error> {
        self.recent.get_or_read(id, jobs::get(pool, id)).await
    }

    /// The live jobs among `ids`, each at most [`TTL`] old: those read less
    /// than that ago as they were, the rest read now in one statement. A job
    /// missing from the answer is deleted or unknown.
    pub async fn get_many_in(
        &self,
        conn: &mut PgConnection,
        ids: &[String],
    ) -> Result<Vec<Arc<JobRecord>>, sqlx::Error> {
        let mut found = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            match self.recent.fresh(id) {
                Some(job) => found.push(job),
                None => missing.push(id.clone()),
            }
        }
        if missing.is_empty() {
            return Ok(found);
        }
        let mut read: HashMap<JobId, JobRecord> =
            jobs::get_many_in(conn, &missing).await?.into_iter().map(|j| (j.id.clone(), j)).collect();
        for id in &missing {
            found.extend(self.recent.put(id, read.remove(id.as_str())));
        }
        Ok(found)
    }

    /// Drops a job after this process changed it.
    pub fn forget(&self, id: &str) {
        self.recent.forget(id);
    }

    /// Drops every job (after a change to many, such as a group's pause).
    pub fn clear(&self) {
        self.recent.clear();
    }
}

/// Workflows, with their current version's steps, as a trigger reads them.
#[derive(Default)]
pub struct WorkflowCache {
    recent: Recent<WorkflowId, WorkflowRecord>,
}

impl WorkflowCache {
    /// The live workflow with this id, at most [`TTL`] old, whichever its
    /// project: the caller says whether its caller may see it.
    pub async fn get(&self, pool: &PgPool, id: &str) -> Result<Option<Arc<WorkflowRecord>>, sqlx::Error> {
        self.recent.get_or_read(id, workflows::get(pool, Tenant::Any, &id.into())).await
    }

    /// Drops a workflow after this process changed it.
    pub fn forget(&self, id: &str) {
        self.recent.forget(id);
    }
}
