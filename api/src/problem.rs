//! Makes every error response problem+json, including the ones poem and
//! poem-openapi produce before a handler runs (unknown route, wrong method,
//! unparsable body, body too large, wrong content type), and gives every
//! response an `X-Request-Id`.

use poem::http::header::{HeaderValue, CONTENT_TYPE};
use poem::{Endpoint, IntoResponse, Middleware, Request, Response};
use switchyard_shared::domain::FieldError;

use crate::error::{ErrorDetail, Problem};

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
        // An error that carries a response (our ApiError) keeps it; the
        // framework's own errors come as text and are wrapped below.
        // A framework refusal of the request's form (a body or parameter
        // that does not parse) is located before it becomes plain text.
        let mut located = None;
        let resp = match self.0.call(req).await {
            Ok(r) => r.into_response(),
            Err(e) => {
                if e.status().as_u16() == 400 {
                    located = Some(crate::error::located(&e));
                }
                e.into_response()
            }
        };
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
            let mut r = problem_response_at(status, detail, located);
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
        if let Ok(v) = HeaderValue::from_str(&request_id) {
            resp.headers_mut().insert("x-request-id", v);
        }
        Ok(resp)
    }
}

/// problem+json, or a JSON body an operation chose on purpose (the 503 of
/// /health/ready carries {ready, checks}).
fn is_json(resp: &Response) -> bool {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(PROBLEM_JSON) || v.starts_with("application/json"))
}

pub fn problem_response(status: u16, detail: String) -> Response {
    problem_response_at(status, detail, None)
}

/// A problem+json response. A validation-class one (400, 422) always
/// carries `errors[]`: `at` when the refusal was located, else one entry
/// for the request as a whole.
fn problem_response_at(status: u16, detail: String, at: Option<FieldError>) -> Response {
    let status = if (400..600).contains(&status) { status } else { 500 };
    let mut p = Problem::new(status, detail.clone());
    if status == 400 || status == 422 {
        let e = at.unwrap_or_else(|| FieldError::new("request", detail, None));
        p.errors = Some(vec![ErrorDetail::from(e)]);
    }
    Response::builder()
        .status(poem::http::StatusCode::from_u16(status).unwrap_or(poem::http::StatusCode::INTERNAL_SERVER_ERROR))
        .header(CONTENT_TYPE, PROBLEM_JSON)
        .body(serde_json::to_vec(&p).unwrap_or_default())
}
