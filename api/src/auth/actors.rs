//! Known actors: the profile (id, email, name) of people
//! named by internal-secret headers or OIDC claims, upserted off the request
//! path: a spawned task writes it when the profile differs from the last one
//! this process wrote, or that was more than [`REFRESH`] ago.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use switchyard_shared::store;

const REFRESH: Duration = Duration::from_secs(300);
const MAX_ENTRIES: usize = 10_000;

type Profile = (Option<String>, Option<String>);

#[derive(Default)]
pub struct ActorSync {
    written: Mutex<HashMap<String, (Profile, Instant)>>,
}

impl ActorSync {
    pub fn observe(&self, pool: &PgPool, id: &str, email: Option<String>, name: Option<String>) {
        let clip =
            |s: Option<String>| s.map(|v| v.chars().take(256).collect::<String>()).filter(|v| !v.trim().is_empty());
        let profile = (clip(email), clip(name));
        {
            let mut w = self.written.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((seen, at)) = w.get(id) {
                if *seen == profile && at.elapsed() < REFRESH {
                    return;
                }
            }
            if w.len() >= MAX_ENTRIES {
                w.clear();
            }
            w.insert(id.to_string(), (profile.clone(), Instant::now()));
        }
        let pool = pool.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            let r = store::actors::upsert(&pool, &id, profile.0.as_deref(), profile.1.as_deref()).await;
            if let Err(e) = r {
                tracing::warn!(actor_id = %id, error = %e, "could not record the actor profile");
            }
        });
    }
}
