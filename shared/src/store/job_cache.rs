//! Jobs as triggers and the workflow engine read them, kept for a second.
//!
//! Every trigger needs its job (enabled? payload schema? limits?), and a
//! busy job is triggered thousands of times a second; every job step an
//! engine pass starts needs its job too (a chain at 100 workflows/s read
//! the same job 200 times a second, each a round trip on the path from a
//! step's end to the next step's dispatch). A change made through this
//! process drops the cached copy at once ([`JobCache::forget`]: the api
//! shares one cache between its triggers and its engine); other processes
//! see it within [`TTL`]. Only these paths read through here: every other
//! read of a job (GET, PATCH, versions) goes to Postgres.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::{PgConnection, PgPool};

use super::jobs::{self, JobRecord};

pub const TTL: Duration = Duration::from_secs(1);
/// A bound on memory: a full map is emptied rather than grown.
const MAX_ENTRIES: usize = 10_000;

#[derive(Default)]
pub struct JobCache {
    map: Mutex<HashMap<String, (Instant, Arc<JobRecord>)>>,
}

impl JobCache {
    /// The live job with this id, at most [`TTL`] old.
    pub async fn get(&self, pool: &PgPool, id: &str) -> Result<Option<Arc<JobRecord>>, sqlx::Error> {
        if let Some((at, job)) = self.lock().get(id) {
            if at.elapsed() < TTL {
                return Ok(Some(Arc::clone(job)));
            }
        }
        let Some(job) = jobs::get(pool, id).await? else {
            self.forget(id);
            return Ok(None);
        };
        let job = Arc::new(job);
        let mut map = self.lock();
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(id.to_string(), (Instant::now(), Arc::clone(&job)));
        Ok(Some(job))
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
        {
            let map = self.lock();
            for id in ids {
                match map.get(id).filter(|(at, _)| at.elapsed() < TTL) {
                    Some((_, job)) => found.push(Arc::clone(job)),
                    None => missing.push(id.clone()),
                }
            }
        }
        if missing.is_empty() {
            return Ok(found);
        }
        let read = jobs::get_many_in(conn, &missing).await?;
        let mut map = self.lock();
        if map.len() + read.len() >= MAX_ENTRIES {
            map.clear();
        }
        for id in &missing {
            map.remove(id);
        }
        let now = Instant::now();
        for job in read {
            let job = Arc::new(job);
            map.insert(job.id.clone(), (now, Arc::clone(&job)));
            found.push(job);
        }
        Ok(found)
    }

    /// Drops a job after this process changed it.
    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Drops every job (after a change to many, such as a group's pause).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<JobRecord>)>> {
        // The map holds no invariant a panicking holder could break.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}
