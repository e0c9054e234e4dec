//! Every request the api answers, counted by route template and status,
//! and timed (`svc_http_requests_total`, `svc_http_request_duration_seconds`).
//! The outermost layer, so what the layers around the handlers answer (a
//! 401, a 413, a 429) is counted too.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use poem::http::Method;

use poem::PathPattern;
use poem::{Endpoint, IntoResponse, Request, Response};
use switchyard_shared::telemetry;

pub async fn observe<E: Endpoint>(ep: E, req: Request) -> poem::Result<Response> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let answer = ep.call(req).await.map(IntoResponse::into_response);
    let (status, pattern) = match &answer {
        Ok(r) => (r.status(), r.data::<PathPattern>()),
        Err(e) => (e.status(), e.data::<PathPattern>()),
    };
    // A request refused before routing (a 401, a 413, a 429) has no
    // pattern: its path is matched against the document's.
    // A path under no route ends at the nest's own pattern, "".
    match pattern.filter(|p| !p.0.trim_matches('/').is_empty()) {
        Some(p) => routed(&p.0, &method, status.as_u16(), started.elapsed()),
        None => {
            let route = path_route(&path).unwrap_or_else(|| "unmatched".to_string());
            telemetry::http_request(method.as_str(), &route, status.as_u16(), started.elapsed());
        }
    }
    answer
}

/// A routed request's series: (method, status, counter, histogram) by
/// route pattern.
type Series = Vec<(Method, u16, metrics::Counter, metrics::Histogram)>;

/// Counts a request of a routed pattern with the handles kept for it, so
/// the hot routes (a trigger) skip building labels and looking them up
/// in the recorder. Bounded by the routes, their methods and statuses.
fn routed(pattern: &str, method: &Method, status: u16, took: std::time::Duration) {
    static KEPT: Mutex<Option<HashMap<Box<str>, Series>>> = Mutex::new(None);
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let kept = kept.get_or_insert_with(HashMap::new);
    let series = match kept.get_mut(pattern) {
        Some(s) => s,
        None => kept.entry(pattern.into()).or_default(),
    };
    let at = match series.iter().position(|(m, s, _, _)| m == method && *s == status) {
        Some(at) => at,
        None => {
            let (count, time) = telemetry::http_series(method.as_str(), &documented(pattern), status);
            series.push((method.clone(), status, count, time));
            series.len() - 1
        }
    };
    let (_, _, count, time) = &series[at];
    count.increment(1);
    time.record(took.as_secs_f64());
}

/// The OpenAPI document's path for poem's route pattern: poem-openapi
/// names its parameters `:param0`, `:param1`, so `/v1/jobs/:param0/trigger`
/// is `/v1/jobs/{job_id}/trigger`, as an operator finds it in /docs. A
/// route outside the document (/ui, /docs) keeps its own names. Looked up
/// once per series (`routed` keeps their handles).
fn documented(pattern: &str) -> String {
    let own = template(pattern);
    fn shape(path: &str) -> Vec<&str> {
        path.split('/').map(|seg| if seg.starts_with('{') { "{}" } else { seg }).collect()
    }
    let mut paths = crate::openapi_value()["paths"].as_object().into_iter().flat_map(|p| p.keys());
    paths.find(|p| shape(p) == shape(&own)).cloned().unwrap_or(own)
}

/// The document's path that `path` would be routed to (static segments
/// win over parameters, as in the router).
fn path_route(path: &str) -> Option<String> {
    let paths = crate::openapi_value()["paths"].as_object()?;
    let best =
        paths.keys().filter_map(|p| Some((crate::problem::specificity(p, path)?, p))).max_by(|a, b| a.0.cmp(&b.0));
    best.map(|(_, p)| p.clone())
}

/// poem's pattern with its parameters in braces: `/v1/runs/:run_id` as
/// `/v1/runs/{run_id}`, a rest segment `*path` as `{path}`.
fn template(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|seg| match seg.strip_prefix(':').or_else(|| seg.strip_prefix('*')) {
            Some(name) if !name.is_empty() => format!("{{{name}}}"),
            _ => seg.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pattern_reads_as_the_documents_path() {
        assert_eq!(super::template("/v1/jobs/:job_id/trigger"), "/v1/jobs/{job_id}/trigger");
        assert_eq!(super::template("/v1/runs"), "/v1/runs");
        assert_eq!(super::template("/ui/*path"), "/ui/{path}");
    }

    #[test]
    fn a_path_refused_before_routing_finds_its_route() {
        assert_eq!(super::path_route("/v1/jobs/job_1/trigger").as_deref(), Some("/v1/jobs/{job_id}/trigger"));
        assert_eq!(super::path_route("/v1/runs/dead-letters").as_deref(), Some("/v1/runs/dead-letters"));
        assert_eq!(super::path_route("/v1/nothing/here/at/all"), None);
    }

    #[test]
    fn a_pattern_takes_the_documents_parameter_names() {
        assert_eq!(super::documented("/v1/jobs/:param0/trigger"), "/v1/jobs/{job_id}/trigger");
        assert_eq!(super::documented("/v1/jobs/:param0/trigger"), "/v1/jobs/{job_id}/trigger");
        assert_eq!(super::documented("/ui/*path"), "/ui/{path}");
    }
}
