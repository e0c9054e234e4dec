//! The Switchyard HTTP API.
//!
//! - [`routes`]: one OpenAPI struct per resource (platform, projects, job
//!   groups, jobs, runs, bulk operations, run records, access control, the
//!   SDK, stats, analytics and usage) and the helpers they share.
//! - [`auth`]: credentials to a [`auth::Principal`], scopes, roles, policies.
//! - [`intake`]: group-committed triggers.
//! - [`audit`]: the audit trail of mutations.
//! - [`rate_limit`]: per-client request limits, shared through Redis;
//!   [`body_limit`]: the request body limit.
//! - [`error`]: the one error type, rendered as problem+json.
//! - [`problem`]: turns every other error response into problem+json.
//! - [`pagination`]: limit and cursor.
//! - [`openapi31`]: the served document as OpenAPI 3.1; [`document`]: what
//!   the generated document cannot say by itself (servers, the statuses
//!   and headers of the layers around the handlers, closed request bodies,
//!   closed sets, and the value rules each request type states beside it).
//! - [`strict_json`]: request bodies read strictly, against the document.
//! - [`state`]: what handlers share.
//! - [`views`]: response objects several route files return.
//! - [`run_actions`]: triggering and cancelling runs, shared by several routes.
//! - [`streams`]: live streams' watches and the change announcements they
//!   follow (the endpoints: `routes::streams`).
//! - [`ui`]: the web dashboard at /ui (static, outside the API document).
//!
//! The rules the API promises its clients are in docs/contract.md.

pub mod audit;
pub mod auth;
pub mod body_limit;
pub mod docs_page;

pub mod document;
pub mod error;
mod http_metrics;
pub mod intake;
pub mod openapi31;
pub mod pagination;
pub mod problem;
pub mod rate_limit;
pub mod routes;
pub mod run_actions;
pub mod slow_clients;
pub mod state;
pub mod streams;
pub mod strict_json;
mod trace_context;
pub mod ui;
pub mod views;

use std::sync::Arc;

use anyhow::Context;
use poem::listener::{Acceptor, Listener, TcpListener};
use poem::{EndpointExt, Route};
use poem_openapi::OpenApiService;
use switchyard_shared::outbound::Http;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::recent::{JobCache, WorkflowCache};
use switchyard_shared::store::workflow_engine::Versions;
use switchyard_shared::{db, queue, Config};

pub use state::AppState;

pub const API_DESCRIPTION: &str = include_str!("openapi_description.md");

type Apis = (
    routes::platform::PlatformApi,
    routes::projects::ProjectsApi,
    routes::groups::GroupsApi,
    routes::jobs::JobsApi,
    routes::jobs::TriggerBatchesApi,
    routes::runs::RunsApi,
    routes::AccessApis,
    routes::RecordApis,
    routes::ReportApis,
    routes::WorkflowApis,
    routes::events::EventsApi,
    routes::log_drains::LogDrainsApi,
    routes::streams::StreamsApi,
);

fn apis() -> Apis {
    (
        routes::platform::PlatformApi,
        routes::projects::ProjectsApi,
        routes::groups::GroupsApi,
        routes::jobs::JobsApi,
        routes::jobs::TriggerBatchesApi,
        routes::runs::RunsApi,
        routes::access_apis(),
        routes::record_apis(),
        routes::report_apis(),
        routes::workflow_apis(),
        routes::events::EventsApi,
        routes::log_drains::LogDrainsApi,
        routes::streams::StreamsApi,
    )
}

pub fn api_service() -> OpenApiService<Apis, ()> {
    OpenApiService::new(apis(), "Switchyard", "1.0.0").description(API_DESCRIPTION)
}

/// Every operation the API service routes, as (method, path), read from the
/// route table the router is built from rather than from the document. The
/// router numbers path parameters, so each is spelled `{}`
/// (`GET /v1/jobs/{}`).
pub fn routed_operations() -> Vec<(String, String)> {
    use poem_openapi::OpenApi;
    let mut table = std::collections::HashMap::new();
    apis().add_routes(&mut table);
    let mut out: Vec<(String, String)> = table
        .into_iter()
        .flat_map(|(path, methods)| {
            let path: String =
                path.split('/').map(|seg| if seg.starts_with(':') { "{}" } else { seg }).collect::<Vec<_>>().join("/");
            methods.into_keys().map(move |m| (m.as_str().to_string(), path.clone()))
        })
        .collect();
    out.sort();
    out
}

/// The OpenAPI 3.1 document, as served at /openapi.json: built once, and
/// read by the checks that enforce what it states (`strict_json`).
pub fn openapi_value() -> &'static serde_json::Value {
    static DOC: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    DOC.get_or_init(|| {
        let generated: serde_json::Value = serde_json::from_str(&api_service().spec()).unwrap_or_default();
        let mut doc = openapi31::convert(generated);
        auth::scopes::annotate(&mut doc);
        document::annotate(&mut doc);
        doc
    })
}

/// The OpenAPI 3.1 document as served, pretty-printed.
pub fn openapi_json() -> String {
    serde_json::to_string_pretty(openapi_value()).unwrap_or_default()
}

#[poem::handler]
fn openapi_document() -> poem::Response {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    poem::Response::builder().content_type("application/json").body(DOC.get_or_init(openapi_json).clone())
}

/// The whole HTTP application: the API, /openapi.json, /docs and the
/// dashboard at /ui, wrapped so
/// that every error is problem+json and bodies over the limit are refused.
pub fn app(state: AppState) -> impl poem::Endpoint<Output = poem::Response> {
    let service = api_service();
    let docs = docs_page::reference(&service);
    let limit = state.config.max_body_bytes;
    Route::new()
        .nest("/", service)
        .at("/openapi.json", poem::get(openapi_document))
        .nest("/docs", docs.around(docs_page::secure))
        .nest("/ui", ui::routes())
        .around(move |ep, req| body_limit::limit_body(ep, req, limit))
        .around(auth::internal_secret_header)
        .around(rate_limit::limit)
        .data(state)
        .with(problem::ProblemMiddleware)
        // Boxed: one more layer of nested endpoint types overflows the
        // compiler's query depth in release builds.
        .boxed()
        .around(trace_context::around)
        .around(http_metrics::observe)
        .map_to_response()
}

/// Idle keep-alive connections the terminal-webhook client keeps per host.
const WEBHOOK_CONNECTIONS_PER_HOST: usize = 8;

/// Builds the state from configuration: lazy pools, so the API starts (and
/// answers /health/ready with 503) while Postgres or Redis is down.
pub fn state_from_config(config: Config) -> anyhow::Result<AppState> {
    let pool = db::lazy_pool(&config.database_url, config.database_max_connections)?;
    let queue = queue::Queue::from_config(&config)?;
    let auth = Arc::new(auth::AuthState::from_config(&config)?);
    let intake = intake::Intake::spawn(pool.clone(), queue.clone());
    let jobs = Arc::new(JobCache::default());
    let webhooks = Http::new(WEBHOOK_CONNECTIONS_PER_HOST, config.target_deny_private)
        .context("building the terminal-webhook client")?;
    let engine_pool = db::worker_pool(&config.database_url, (config.database_max_connections / 4).clamp(2, 8))?;
    let versions = Arc::new(Versions::with_jobs(Arc::clone(&jobs)));
    let streams = Arc::new(streams::Hub::new(pool.clone(), config.database_url.clone()));
    let workflow_intake = intake::WorkflowIntake::spawn(engine_pool.clone(), queue.clone(), Arc::clone(&versions));
    Ok(AppState {
        pool,
        queue,
        config: Arc::new(config),
        auth,
        intake,
        workflow_intake,
        jobs,
        workflows: Arc::new(WorkflowCache::default()),
        webhooks,
        versions,
        engine_pool,
        streams,
    })
}

/// Serves until `shutdown` fires, then stops accepting and lets in-flight
/// requests finish within the grace period.
pub async fn run(config: Config, shutdown: Shutdown) -> anyhow::Result<()> {
    let addr = config.api_addr;
    let grace = config.shutdown_grace;
    let state = state_from_config(config)?;
    let acceptor = TcpListener::bind(addr).into_acceptor().await?;
    serve(acceptor, state, shutdown, grace).await
}

/// Serves on an already bound acceptor (tests bind port 0).
pub async fn serve(
    acceptor: impl Acceptor + 'static,
    state: AppState,
    shutdown: Shutdown,
    grace: std::time::Duration,
) -> anyhow::Result<()> {
    let _ = switchyard_shared::telemetry::metrics_handle();
    tracing::info!(addrs = ?acceptor.local_addr(), "api listening");
    // Open streams end when shutdown begins, not at the end of the grace.
    let streams = state.streams.shutdown().clone();
    let stop_streams = shutdown.clone();
    tokio::spawn(async move {
        stop_streams.cancelled().await;
        streams.cancel();
    });
    poem::Server::new_with_acceptor(slow_clients::GuardedAcceptor(acceptor))
        .run_with_graceful_shutdown(app(state), async move { shutdown.cancelled().await }, Some(grace))
        .await?;
    Ok(())
}
