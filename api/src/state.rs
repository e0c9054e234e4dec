//! What every handler shares.

use std::sync::Arc;

use sqlx::PgPool;
use switchyard_shared::outbound::Http;
use switchyard_shared::queue::Queue;
use switchyard_shared::store::workflow_engine::Versions;
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
    /// This server's address policy (`TARGET_DENY_PRIVATE`), judging at
    /// save every URL the service will send to (jobs, steps, subscriptions,
    /// log drains) as the senders judge it at connect.
    pub webhooks: Http,
    /// Workflow versions' steps as the trigger's first pass reads them.
    pub versions: Arc<Versions>,
}
