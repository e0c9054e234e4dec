//! Jobs as triggers read them, kept for a second.
//!
//! Every trigger needs its job (enabled? payload schema? limits?), and a
//! busy job is triggered thousands of times a second. A change made through
//! this process drops the cached copy at once; other api processes see it
//! within [`TTL`]. Only the trigger paths read through here: every other
//! read of a job (GET, PATCH, versions) goes to Postgres.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use switchyard_shared::store::jobs::{self, JobRecord};

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
