//! Job definitions by version, cached for pinned versions.
//!
//! A `pin` run dispatches with its version's snapshot, and versions are never
//! edited, so that snapshot can be kept for the life of the process. A
//! `latest` run must see the job's current definition, so it is read each
//! time. (The one case this cannot tell apart: a version whose own policy was
//! `latest`, read after the job switched to `pin`, is cached as the job stood
//! then. Runs on such a version are the in-flight ones of that switch only.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sqlx::PgPool;
use switchyard_shared::domain::JobSpec;
use switchyard_shared::store;

/// Bound on cached versions; past it the cache starts over rather than grow
/// without limit in a process that lives through many job edits.
const MAX_CACHED: usize = 4096;

#[derive(Default)]
pub struct SpecCache {
    by_version: Mutex<HashMap<String, Arc<JobSpec>>>,
}

impl SpecCache {
    pub async fn get(&self, pool: &PgPool, job_id: &str, version_id: &str) -> Result<Option<Arc<JobSpec>>, sqlx::Error> {
        if let Some(hit) = self.lock().get(version_id) {
            return Ok(Some(Arc::clone(hit)));
        }
        let Some(spec) = store::jobs::spec_for_run(pool, job_id, version_id).await? else {
            return Ok(None);
        };
        let spec = Arc::new(spec);
        if spec.version_policy == "pin" {
            let mut map = self.lock();
            if map.len() >= MAX_CACHED {
                map.clear();
            }
            map.insert(version_id.to_string(), Arc::clone(&spec));
        }
        Ok(Some(spec))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<JobSpec>>> {
        // The map holds no invariant a panicking holder could break.
        self.by_version.lock().unwrap_or_else(|p| p.into_inner())
    }
}
