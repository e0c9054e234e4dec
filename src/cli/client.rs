//! The HTTP side of the operator commands: one call to the public API, and
//! what its failure means for the exit code.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use super::{Failure, Global};

/// Exit codes a script can rely on (docs/cli.md; `switchyard --help`).
pub mod exit {
    /// The command did what it was asked to.
    pub const OK: u8 = 0;
    /// The API did its part, the outcome did not: a run waited on with
    /// `--wait` ended in another status than completed, or an item of a
    /// bulk call (`dlq replay`) was not replayed.
    pub const OUTCOME: u8 = 1;
    /// The command line is wrong (clap's code, also for a `--payload` or
    /// `--file` that is not JSON or a file that cannot be read).
    pub const USAGE: u8 = 2;
    /// The API answered 404: no such run, job or workflow in the project.
    pub const NOT_FOUND: u8 = 3;
    /// The API refused the request with another 4xx (400, 401, 403, 409,
    /// 422, 429).
    pub const CLIENT_ERROR: u8 = 4;
    /// The API failed (5xx) or could not be reached.
    pub const UNAVAILABLE: u8 = 5;
    /// `--wait` gave up before the run ended (`--timeout`).
    pub const WAIT_TIMEOUT: u8 = 6;
}

/// The API at `--api`, called with `--token`.
pub struct Client {
    http: reqwest::Client,
    /// For live streams: no bound on the whole answer, which lasts as long
    /// as the run.
    streams: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    pub fn new(g: &Global) -> Result<Client, Failure> {
        let base = g.api.trim_end_matches('/').to_string();
        if url::Url::parse(&base).is_err() {
            return Err(Failure::usage(format!("--api {:?} is not a URL, e.g. http://127.0.0.1:8080", g.api)));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("switchyard-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("cannot build an HTTP client: {e}")))?;
        let streams = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("switchyard-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("cannot build an HTTP client: {e}")))?;
        Ok(Client { http, streams, base, token: g.token.clone() })
    }

    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Failure> {
        self.call(Method::GET, path, query, None).await
    }

    pub async fn post(&self, path: &str, body: Option<Value>) -> Result<Value, Failure> {
        self.call(Method::POST, path, &[], body).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> Result<Value, Failure> {
        self.call(Method::PATCH, path, &[], Some(body)).await
    }

    /// Opens a live stream (`text/event-stream`), resuming after
    /// `last_event_id` when given; the failure of a refused one.
    pub async fn open_stream(&self, path: &str, last_event_id: Option<&str>) -> Result<reqwest::Response, Failure> {
        let mut req = self.streams.get(format!("{}{path}", self.base)).header("Accept", "text/event-stream");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = req.send().await.map_err(|e| {
            Failure::new(exit::UNAVAILABLE, format!("cannot reach the API at {}: {}", self.base, error_chain(&e)))
        })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        Err(self.refused(status, &text))
    }

    /// One request; a 2xx answer's JSON body (Null when empty), or the
    /// failure with the exit code its status means.
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> Result<Value, Failure> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method.clone(), &url).query(query);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| {
            Failure::new(exit::UNAVAILABLE, format!("cannot reach the API at {}: {}", self.base, error_chain(&e)))
        })?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| {
            Failure::new(exit::UNAVAILABLE, format!("{method} {path}: the answer broke off: {}", error_chain(&e)))
        })?;
        if status.is_success() {
            if text.trim().is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_str(&text).map_err(|e| {
                Failure::new(exit::UNAVAILABLE, format!("{method} {path}: the answer is not JSON ({e}): {text:.200}"))
            });
        }
        Err(self.refused(status, &text))
    }

    /// The failure of an answer that is not 2xx: the problem, and for the
    /// refusals a person fixes on the command line, which flag fixes it.
    fn refused(&self, status: reqwest::StatusCode, body: &str) -> Failure {
        let mut message = problem_message(status, body);
        if let Some(hint) = hint(status, body, self.token.is_some()) {
            message.push('\n');
            message.push_str(&hint);
        }
        Failure::new(exit_code(status), message)
    }
}

/// What to change on the command line for a 401 (no token, or one the API
/// refused) or for the API's "project_id is required" (the internal secret
/// names no project of its own).
fn hint(status: reqwest::StatusCode, body: &str, token_given: bool) -> Option<String> {
    if status == reqwest::StatusCode::UNAUTHORIZED {
        return Some(if token_given {
            "the API refused the token given (--token or SWITCHYARD_TOKEN): it is not a valid API key \
             or the internal secret of this deployment"
                .to_string()
        } else {
            "no token was given: pass --token TOKEN or set SWITCHYARD_TOKEN to an API key (svc_...) or \
             the internal secret"
                .to_string()
        });
    }
    let p: Value = serde_json::from_str(body).ok()?;
    let missing_project = p["errors"].as_array().into_iter().flatten().any(|e| {
        e["location"].as_str().is_some_and(|l| l.ends_with(".project_id"))
            && e["message"].as_str().is_some_and(|m| m.starts_with("project_id is required"))
    });
    missing_project.then(|| {
        "no project was named: pass --project ID or set SWITCHYARD_PROJECT (needed with the internal \
         secret; an API key implies its project)"
            .to_string()
    })
}

/// The exit code of an answer that is not 2xx (a 3xx that redirects did
/// not resolve counts as a broken server).
pub fn exit_code(status: reqwest::StatusCode) -> u8 {
    match status.as_u16() {
        404 => exit::NOT_FOUND,
        400..=499 => exit::CLIENT_ERROR,
        _ => exit::UNAVAILABLE,
    }
}

/// A one-line (or, with per-field errors, a few-line) account of a
/// problem+json answer: status, title, detail, each `errors[]` entry.
pub fn problem_message(status: reqwest::StatusCode, body: &str) -> String {
    let reason = status.canonical_reason().unwrap_or("");
    let Ok(p) = serde_json::from_str::<Value>(body) else {
        let mut out = format!("{} {reason}", status.as_u16());
        if !body.trim().is_empty() {
            out.push_str(&format!(": {:.300}", body.trim()));
        }
        return out;
    };
    let title = p["title"].as_str().filter(|s| !s.is_empty()).unwrap_or(reason);
    let mut out = format!("{} {title}", status.as_u16());
    if let Some(d) = p["detail"].as_str().filter(|s| !s.is_empty()) {
        out.push_str(": ");
        out.push_str(d);
    }
    // The API's detail of a single invalid value is that entry itself
    // (`location: message`): print it once.
    let detail = p["detail"].as_str().unwrap_or("");
    for e in p["errors"].as_array().into_iter().flatten() {
        let at = e["location"].as_str().unwrap_or("?");
        let msg = e["message"].as_str().unwrap_or("");
        let line = format!("{at}: {msg}");
        if !detail.contains(&line) {
            out.push_str(&format!("\n  {line}"));
        }
    }
    out
}

/// An error with its causes, which for reqwest say what actually failed
/// (connection refused, DNS, timeout).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_401_and_a_missing_project_name_the_flag_that_fixes_them() {
        let no_token = hint(reqwest::StatusCode::UNAUTHORIZED, "", false).unwrap();
        assert!(no_token.contains("--token") && no_token.contains("SWITCHYARD_TOKEN"), "{no_token}");
        assert!(hint(reqwest::StatusCode::UNAUTHORIZED, "", true).unwrap().contains("refused"));
        let body = r#"{"status":422,"detail":"query.project_id: project_id is required (query, body, or the X-Project-Id header)",
            "errors":[{"location":"query.project_id","message":"project_id is required (query, body, or the X-Project-Id header)"}]}"#;
        let missing = hint(reqwest::StatusCode::UNPROCESSABLE_ENTITY, body, true).unwrap();
        assert!(missing.contains("--project ID") && missing.contains("SWITCHYARD_PROJECT"), "{missing}");
        assert_eq!(hint(reqwest::StatusCode::NOT_FOUND, "{}", true), None);
    }

    #[test]
    fn statuses_map_to_exit_codes() {
        let code = |n| exit_code(reqwest::StatusCode::from_u16(n).unwrap());
        assert_eq!([code(404), code(400), code(409), code(422), code(429)], [3, 4, 4, 4, 4]);
        assert_eq!([code(500), code(503), code(302)], [5, 5, 5]);
    }

    #[test]
    fn a_problem_reads_as_status_title_detail_and_fields() {
        let body = r#"{"type":"about:blank","title":"Unprocessable Entity","status":422,
            "detail":"invalid values","errors":[{"location":"body.payload","message":"missing to"}]}"#;
        assert_eq!(
            problem_message(reqwest::StatusCode::UNPROCESSABLE_ENTITY, body),
            "422 Unprocessable Entity: invalid values\n  body.payload: missing to"
        );
        let one = r#"{"title":"Unprocessable Entity","status":422,"detail":"query.status: not a status",
            "errors":[{"location":"query.status","message":"not a status"}]}"#;
        assert_eq!(
            problem_message(reqwest::StatusCode::UNPROCESSABLE_ENTITY, one),
            "422 Unprocessable Entity: query.status: not a status"
        );
        assert_eq!(problem_message(reqwest::StatusCode::BAD_GATEWAY, "oops"), "502 Bad Gateway: oops");
        assert_eq!(problem_message(reqwest::StatusCode::NOT_FOUND, ""), "404 Not Found");
    }
}
