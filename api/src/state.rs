//! What every handler shares.

use std::sync::Arc;

use sqlx::PgPool;
use switchyard_shared::outbound::Http;
use switchyard_shared::queue::Queue;
use switchyard_shared::Config;

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub queue: Queue,
    pub config: Arc<Config>,
    /// Credential caches, the OIDC verifier, and write throttles.
    pub auth: Arc<crate::auth::AuthState>,
    /// Group-committed inserts of plain triggers.
    pub intake: crate::intake::Intake,
    /// Jobs as the trigger paths read them.
    pub jobs: Arc<crate::job_cache::JobCache>,
    /// This server's private-address policy (`TARGET_DENY_PRIVATE`), for
    /// the URLs a subscription names.
    pub webhooks: Http,
}
