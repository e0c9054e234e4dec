//! Each request's place in a trace (docs/traces.md). A `traceparent`
//! header is read on every request; when traces are exported the request
//! also gets its server span, the parent of the runs it triggers. Either
//! way the context is what `switchyard_shared::traces::request::current`
//! hands the triggers made while the request is served.

use opentelemetry::trace::TraceContextExt as _;
use poem::{Endpoint, IntoResponse, Request, Response};
use switchyard_shared::traces::{self, TraceParent, TARGET, TRACEPARENT};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

pub async fn around<E: Endpoint>(ep: E, req: Request) -> poem::Result<Response> {
    let incoming = req.headers().get(TRACEPARENT).and_then(|v| v.to_str().ok()).and_then(TraceParent::parse);
    if !traces::enabled() {
        return traces::request::scope(incoming, async { ep.call(req).await.map(IntoResponse::into_response) }).await;
    }
    let method = req.method().as_str().to_string();
    let route = route_of(req.uri().path());
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        url.path = %req.uri().path(),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(tp) = incoming {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(tp.context()));
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    let current =
        sc.is_valid().then(|| TraceParent { trace_id: sc.trace_id(), span_id: sc.span_id(), sampled: sc.is_sampled() });
    let answer = traces::request::scope(current, async { ep.call(req).await.map(IntoResponse::into_response) })
        .instrument(span.clone())
        .await;
    let status = match &answer {
        Ok(r) => r.status(),
        Err(e) => e.status(),
    };
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    answer
}

/// The path with its ids (`<prefix>_<hex>`) as `{id}`: a span name of few
/// values, as tracing backends group by name.
fn route_of(path: &str) -> String {
    path.split('/')
        .map(|seg| match seg.split_once('_') {
            Some((p, rest)) if !p.is_empty() && rest.len() >= 8 && rest.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                "{id}"
            }
            _ => seg,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_become_placeholders() {
        assert_eq!(super::route_of("/v1/jobs/job_0193ab45cd67ef89/trigger"), "/v1/jobs/{id}/trigger");
        assert_eq!(super::route_of("/v1/runs"), "/v1/runs");
        assert_eq!(super::route_of("/v1/dead_letter"), "/v1/dead_letter");
    }
}
