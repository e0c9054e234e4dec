//! What every handler shares.

use std::sync::Arc;

use sqlx::PgPool;
use switchyard_shared::outbound::Http;
use switchyard_shared::queue::Queue;
use switchyard_shared::store::recent::{JobCache, WorkflowCache};
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
    /// Group-committed workflow triggers, on `engine_pool`.
    pub workflow_intake: crate::intake::WorkflowIntake,
    /// Jobs as the trigger paths and the engine's passes read them (one
    /// cache: `versions` holds it too).
    pub jobs: Arc<JobCache>,
    /// Workflows as their triggers read them (`store::recent`).
    pub workflows: Arc<WorkflowCache>,
    /// This server's address policy (`TARGET_DENY_PRIVATE`), judging at
    /// save every URL the service will send to (jobs, steps, subscriptions,
    /// log drains) as the senders judge it at connect.
    pub webhooks: Http,
    /// Workflow versions' steps, and the jobs of the steps it starts
    /// (`jobs`), as the trigger's first pass reads them.
    pub versions: Arc<Versions>,
    /// The pool a workflow trigger and its first engine pass run on: the
    /// worker's plan settings (`db::worker_pool`), which the engine's
    /// statements need. With the api's own, a plan made while the tables
    /// were new kept scanning `workflow_step_runs` whole (1.2 ms a read in
    /// the closed-loop benchmark).
    pub engine_pool: PgPool,
    /// Live streams: watched projects and change announcements.
    pub streams: Arc<crate::streams::Hub>,
}
