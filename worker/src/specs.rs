//! Job definitions by version id.
//!
//! Versions are never edited, so a version's snapshot can be kept for the
//! life of the process whatever its policy. A `pin` run dispatches with the
//! version it was triggered on; a `latest` run with the job's current
//! version, whose id the dispatch read returns with the run (see
//! `store::runs::load_for_dispatch`), so neither costs a read once cached.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sqlx::PgPool;
use switchyard_shared::domain::JobSpec;
use switchyard_shared::store::{self, Run};

/// Bound on cached versions; past it the cache starts over rather than grow
/// without limit in a process that lives through many job edits.
const MAX_CACHED: usize = 4096;

#[derive(Default)]
pub struct SpecCache {
    by_version: Mutex<HashMap<String, Arc<JobSpec>>>,
}

impl SpecCache {
    /// The definition `run` dispatches with; `None` when the job (or the
    /// version) no longer exists. `current_version_id` is the job's
    /// current version, `None` when the job row is gone.
    pub async fn for_run(
        &self,
        pool: &PgPool,
        run: &Run,
        current_version_id: Option<&str>,
    ) -> Result<Option<Arc<JobSpec>>, sqlx::Error> {
        let Some(current) = current_version_id else { return Ok(None) };
        let Some(pinned) = self.version(pool, &run.job_version_id).await? else { return Ok(None) };
        if pinned.version_policy != "latest" || current == run.job_version_id {
            return Ok(Some(pinned));
        }
        self.version(pool, current).await
    }

    async fn version(&self, pool: &PgPool, version_id: &str) -> Result<Option<Arc<JobSpec>>, sqlx::Error> {
        if let Some(hit) = self.lock().get(version_id) {
            return Ok(Some(Arc::clone(hit)));
        }
        let Some(spec) = store::jobs::version_spec(pool, version_id).await? else {
            return Ok(None);
        };
        let spec = Arc::new(spec);
        let mut map = self.lock();
        if map.len() >= MAX_CACHED {
            map.clear();
        }
        map.insert(version_id.to_string(), Arc::clone(&spec));
        Ok(Some(spec))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<JobSpec>>> {
        // The map holds no invariant a panicking holder could break.
        self.by_version.lock().unwrap_or_else(|p| p.into_inner())
    }
}
