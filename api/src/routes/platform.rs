//! /health, /health/ready and /metrics. No credential needed, except for
//! /metrics when `METRICS_TOKEN` is set.

use std::collections::HashMap;
use std::time::Duration;

use poem::web::Data;
use poem_openapi::payload::{Json, PlainText};
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::Tag;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub struct PlatformApi;

/// Whether each dependency answers.
#[derive(Object)]
pub struct Readiness {
    pub ready: bool,
    /// Component name to `ok` or `unavailable`.
    pub checks: HashMap<String, String>,
}

#[derive(ApiResponse)]
pub enum ReadyResponse {
    /// Every dependency answers.
    #[oai(status = 200)]
    Ready(Json<Readiness>),
    /// At least one dependency does not answer.
    #[oai(status = 503)]
    NotReady(Json<Readiness>),
}

/// The Prometheus text exposition format, with its version, so a scraper
/// reads it as that format and not as arbitrary text.
pub const EXPOSITION_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(ApiResponse)]
pub enum MetricsResponse {
    /// Every metric, in the text exposition format 0.0.4.
    #[oai(status = 200, content_type = "text/plain; version=0.0.4; charset=utf-8")]
    Metrics(PlainText<String>),
}

/// Liveness.
#[derive(Object)]
pub struct Health {
    /// Always `ok` while the process runs.
    pub status: String,
}

#[OpenApi(tag = "Tag::Platform")]
impl PlatformApi {
    /// Liveness: 200 while the process is alive.
    #[oai(path = "/health", method = "get", operation_id = "getHealth")]
    async fn health(&self) -> Json<Health> {
        Json(Health { status: "ok".into() })
    }

    /// Readiness: 200 when Postgres and Redis both answer, else 503.
    #[oai(path = "/health/ready", method = "get", operation_id = "getReadiness")]
    async fn ready(&self, state: Data<&AppState>) -> ReadyResponse {
        let timeout = Duration::from_secs(2);
        let pg = tokio::time::timeout(timeout, switchyard_shared::store::ping(&state.pool));
        let redis = tokio::time::timeout(timeout, state.queue.ping());
        let (pg, redis) = tokio::join!(pg, redis);
        let pg_ok = matches!(pg, Ok(Ok(_)));
        let redis_ok = matches!(redis, Ok(Ok(())));
        let label = |ok: bool| if ok { "ok".to_string() } else { "unavailable".to_string() };
        let body = Readiness {
            ready: pg_ok && redis_ok,
            checks: HashMap::from([("postgres".into(), label(pg_ok)), ("redis".into(), label(redis_ok))]),
        };
        if body.ready {
            ReadyResponse::Ready(Json(body))
        } else {
            ReadyResponse::NotReady(Json(body))
        }
    }

    /// Prometheus metrics in the text exposition format. Open unless the
    /// server sets `METRICS_TOKEN`; then only `Authorization: Bearer
    /// <METRICS_TOKEN>` reads them (401 otherwise), since their series name
    /// every tenant's job ids.
    #[oai(path = "/metrics", method = "get", operation_id = "getMetrics")]
    async fn metrics(&self, state: Data<&AppState>, req: &poem::Request) -> ApiResult<MetricsResponse> {
        let header = req.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
        let head = format!("authorization: {header}");
        if !switchyard_shared::telemetry::bearer_matches(&head, state.config.metrics_token.as_ref()) {
            return Err(ApiError::unauthorized("METRICS_TOKEN is set: send Authorization: Bearer <METRICS_TOKEN>"));
        }
        Ok(MetricsResponse::Metrics(PlainText(switchyard_shared::telemetry::render_metrics())))
    }
}

#[cfg(test)]
mod tests {
    /// The attribute of `MetricsResponse` must spell the constant (an
    /// attribute cannot name a constant).
    #[test]
    fn the_metrics_content_type_is_the_exposition_format() {
        let meta = <super::MetricsResponse as poem_openapi::ApiResponse>::meta();
        assert_eq!(meta.responses[0].content[0].content_type, super::EXPOSITION_CONTENT_TYPE);
    }
}
