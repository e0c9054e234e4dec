//! Makes every error response problem+json, including the ones poem and
//! poem-openapi produce before a handler runs (unknown route, wrong method,
//! unparsable body, body too large, wrong content type), and gives every
//! response an `X-Request-Id`.

use poem::http::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use poem::{Endpoint, IntoResponse, Middleware, PathPattern, Request, Response};
use switchyard_shared::domain::FieldError;

use crate::error::{ErrorDetail, Problem};
use crate::strict_json::BodyRefused;

pub struct ProblemMiddleware;

/// The request's id (the client's `X-Request-Id` when printable, else a new
/// one), set before the request goes further so audit events can carry it.
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

impl<E: Endpoint> Middleware<E> for ProblemMiddleware {
    type Output = ProblemEndpoint<E>;
    fn transform(&self, ep: E) -> Self::Output {
        ProblemEndpoint(ep)
    }
}

pub struct ProblemEndpoint<E>(E);

pub const PROBLEM_JSON: &str = "application/problem+json";

/// The `Retry-After` of a 503, in seconds.
const RETRY_AFTER_SECS: &str = "2";

impl<E: Endpoint> Endpoint for ProblemEndpoint<E> {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        let request_id = req
            .header("x-request-id")
            .filter(|v| v.len() <= 128 && v.chars().all(|c| c.is_ascii_graphic()))
            .map(str::to_string)
            .unwrap_or_else(|| uuid::Uuid::now_v7().simple().to_string());
        req.set_data(RequestId(request_id.clone()));
        let path = req.uri().path().to_string();
        // An error that carries a response (our ApiError) keeps it; the
        // framework's own errors come as text and are wrapped below. A
        // refusal of the request's form (a body or parameter that does not
        // parse or breaks a rule the document states) is answered as
        // `error::refused` locates and classes it (400 or 422). A missing or
        // wrong Content-Type, which the framework answers 415, is one of
        // them: 400, as the document states.
        let answer = self.0.call(req).await.map(IntoResponse::into_response);
        // The matched route, which an error's conversion below would drop
        // (`http_metrics` labels the request with it).
        let pattern = match &answer {
            Ok(r) => r.data::<PathPattern>().cloned(),
            Err(e) => e.data::<PathPattern>().cloned(),
        };
        let resp = match answer {
            Ok(r) => r,
            Err(e)
                if !e.is_from_response()
                    && (matches!(e.status().as_u16(), 400 | 415) || e.downcast_ref::<BodyRefused>().is_some()) =>
            {
                crate::error::refused(&e).into_response()
            }
            Err(e) => e.into_response(),
        };
        // A wrong method names the right ones (RFC 9110 §15.5.6), read
        // from the route table the router is built from.
        let allow = (resp.status().as_u16() == 405).then(|| allowed_methods(&path)).filter(|m| !m.is_empty());
        let mut resp = if resp.status().as_u16() >= 400 && !is_json(&resp) {
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = resp.into_body().into_string().await.unwrap_or_default();
            let detail = if status >= 500 {
                tracing::error!(status, error = %body, "unhandled error");
                "internal error; see the server log".to_string()
            } else if body.trim().is_empty() {
                crate::error::title_for(status).to_string()
            } else {
                body
            };
            let mut r = problem_response(status, detail);
            if let Some(v) = headers.get("retry-after") {
                r.headers_mut().insert("retry-after", v.clone());
            }
            r
        } else {
            resp
        };
        // A 503 is an outage the client should wait out (Postgres down or
        // restarting, no connection free): tell it when to come back.
        if resp.status().as_u16() == 503 && !resp.headers().contains_key("retry-after") {
            resp.headers_mut().insert("retry-after", HeaderValue::from_static(RETRY_AFTER_SECS));
        }
        if let Some(v) = allow.and_then(|m| HeaderValue::from_str(&m.join(", ")).ok()) {
            resp.headers_mut().insert(ALLOW, v);
        }
        if let Ok(v) = HeaderValue::from_str(&request_id) {
            resp.headers_mut().insert("x-request-id", v);
        }
        if let Some(p) = pattern {
            resp.set_data(p);
        }
        Ok(resp)
    }
}

/// The methods the API routes for `path`: those of its most specific
/// route (static segments win over parameters, as in the router).
fn allowed_methods(path: &str) -> Vec<String> {
    static ROUTES: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    let routes = ROUTES.get_or_init(crate::routed_operations);
    let best = routes.iter().filter_map(|(_, route)| specificity(route, path)).max();
    let mut methods: Vec<String> = routes
        .iter()
        .filter(|(_, route)| best.is_some() && specificity(route, path) == best)
        .map(|(method, _)| method.clone())
        .collect();
    methods.sort();
    methods.dedup();
    methods
}

/// How `route` (a template, its parameters in braces: `{}` or `{name}`)
/// matches `path`: per segment, 1 where it is static and 0 where it is a
/// parameter, or `None` when it does not match. The router prefers the
/// route with the greater one, and a parameter never matches an empty
/// segment.
pub(crate) fn specificity(route: &str, path: &str) -> Option<Vec<u8>> {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let r: Vec<&str> = route.split('/').collect();
    (r.len() == segs.len()).then_some(())?;
    r.iter()
        .zip(&segs)
        .map(|(want, got)| match want.starts_with('{') {
            true => (!got.is_empty()).then_some(0),
            false => (want == got).then_some(1),
        })
        .collect()
}

/// problem+json, or a JSON body an operation chose on purpose (the 503 of
/// /health/ready carries {ready, checks}).
fn is_json(resp: &Response) -> bool {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(PROBLEM_JSON) || v.starts_with("application/json"))
}

/// A problem+json response. A validation-class one (400, 422) always
/// carries `errors[]`, here one entry for the request as a whole.
pub fn problem_response(status: u16, detail: String) -> Response {
    let status = if (400..600).contains(&status) { status } else { 500 };
    let mut p = Problem::new(status, detail.clone());
    if status == 400 || status == 422 {
        let e = FieldError::new("request", detail, None);
        p.errors = Some(vec![ErrorDetail::from(e)]);
    }
    Response::builder()
        .status(poem::http::StatusCode::from_u16(status).unwrap_or(poem::http::StatusCode::INTERNAL_SERVER_ERROR))
        .header(CONTENT_TYPE, PROBLEM_JSON)
        .body(serde_json::to_vec(&p).unwrap_or_default())
}
