//! One dispatch attempt over HTTP (docs/contract.md, "Dispatch protocol"): the
//! POST to the job's endpoint, the fallback endpoint when the first cannot be
//! reached, the phase timings, and the [`Verdict`] the answer amounts to.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use switchyard_shared::domain::result::MAX_RESULT_BYTES;
use switchyard_shared::domain::ExecutionMode;
use switchyard_shared::outbound::client::{error_chain, ConnectClock, Http, TargetError};
use switchyard_shared::outbound::target::{denied_in, TargetDenied};
use tokio::time::Instant;

use crate::outcome::{self, ErrorClass, Verdict};

/// How much of an error body is read: enough for the message, and little
/// enough that a misbehaving target cannot make the worker buffer much.
const MAX_ERROR_READ_BYTES: usize = 64 * 1024;

pub struct DispatchRequest<'a> {
    pub endpoint_url: &'a str,
    pub fallback_url: Option<&'a str>,
    /// Sent with every request besides `Content-Type`.
    pub headers: &'a [(&'static str, String)],
    pub body: &'a [u8],
    pub timeout: Duration,
    pub mode: ExecutionMode,
}

/// Phase durations of an attempt (the execution trace's HTTP part).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    /// Connection setup (DNS, TCP, TLS); zero on a reused keep-alive connection.
    pub connect: Duration,
    /// Send to response headers (includes any connect).
    pub ttfb: Duration,
    /// Response headers to the end of the body.
    pub transfer: Duration,
}

#[derive(Clone, Debug)]
pub struct Dispatched {
    /// The URL whose answer (or failure) is the verdict.
    pub endpoint_url: String,
    pub status_code: Option<u16>,
    pub verdict: Verdict,
    pub timing: Timing,
}

/// Sends the request, trying the fallback URL (same attempt, same deadline)
/// when the primary cannot be connected to. Never fails: every failure is a
/// verdict.
pub async fn send(http: &Http, req: &DispatchRequest<'_>) -> Dispatched {
    let deadline = Instant::now() + req.timeout;
    let clock = Arc::new(ConnectClock::default());
    let mut url = req.endpoint_url;
    let mut got = clock.measure(post(http, url, req, deadline)).await;
    if let (Err(Failure::Connect(why)), Some(fallback)) = (&got.result, req.fallback_url) {
        tracing::info!(error = %why, "primary endpoint unreachable; trying the fallback endpoint");
        url = fallback;
        got = clock.measure(post(http, url, req, deadline)).await;
    }
    let timing = Timing { connect: clock.elapsed(), ttfb: got.ttfb, transfer: got.transfer };
    let (status_code, verdict) = match got.result {
        Ok(a) => (Some(a.status), a.verdict(req.mode)),
        Err(f) => (None, f.verdict(req.timeout)),
    };
    Dispatched { endpoint_url: url.to_string(), status_code, verdict, timing }
}

struct Posted {
    result: Result<Answer, Failure>,
    ttfb: Duration,
    transfer: Duration,
}

struct Answer {
    status: u16,
    retry_after: Option<Duration>,
    body: Vec<u8>,
    too_large: bool,
    /// The body could not be read to the end (timeout or broken connection).
    cut: Option<Failure>,
}

impl Answer {
    fn verdict(self, mode: ExecutionMode) -> Verdict {
        let success = (200..300).contains(&self.status);
        if success && !(self.status == 202 && mode == ExecutionMode::Async) {
            if self.too_large {
                return Verdict::permanent(
                    ErrorClass::ResponseTooLarge,
                    format!("HTTP {} from target with a body over {MAX_RESULT_BYTES} bytes", self.status),
                );
            }
            // A result that did not arrive whole is no result.
            if let Some(f) = self.cut {
                return f.verdict_after_headers(self.status);
            }
        }
        // For an error status the status decides; a partial body only
        // shortens the message.
        outcome::classify_response(self.status, mode, &self.body, self.retry_after)
    }
}

#[derive(Debug)]
enum Failure {
    Timeout,
    /// Nothing was sent: the fallback may be tried.
    Connect(String),
    /// The request may have reached the target; only a new attempt may repeat it.
    Transport(String),
    Denied(TargetDenied),
    Invalid(String),
}

impl Failure {
    fn verdict(self, timeout: Duration) -> Verdict {
        match self {
            Failure::Timeout => {
                Verdict::retryable(ErrorClass::Timeout, format!("no response from target within {}", human(timeout)))
            }
            Failure::Connect(why) => {
                Verdict::retryable(ErrorClass::Connection, format!("could not connect to target: {why}"))
            }
            Failure::Transport(why) => {
                Verdict::retryable(ErrorClass::Connection, format!("connection to target failed: {why}"))
            }
            Failure::Denied(d) => Verdict::permanent(ErrorClass::TargetDenied, d.to_string()),
            // Endpoint URLs are validated when the job is saved; one that
            // still does not parse will not parse on the next attempt either.
            Failure::Invalid(why) => Verdict::permanent(ErrorClass::Connection, format!("bad endpoint: {why}")),
        }
    }

    fn verdict_after_headers(self, status: u16) -> Verdict {
        match self {
            Failure::Timeout => Verdict::retryable(
                ErrorClass::Timeout,
                format!("HTTP {status} from target, but its body did not arrive before the timeout"),
            ),
            other => Verdict::retryable(
                ErrorClass::Connection,
                format!("HTTP {status} from target, but reading its body failed: {}", other.reason()),
            ),
        }
    }

    fn reason(&self) -> String {
        match self {
            Failure::Timeout => "timed out".into(),
            Failure::Connect(s) | Failure::Transport(s) | Failure::Invalid(s) => s.clone(),
            Failure::Denied(d) => d.to_string(),
        }
    }
}

async fn post(http: &Http, raw_url: &str, req: &DispatchRequest<'_>, deadline: Instant) -> Posted {
    let fail = |f| Posted { result: Err(f), ttfb: Duration::ZERO, transfer: Duration::ZERO };
    let url = match http.target(raw_url) {
        Ok(u) => u,
        Err(TargetError::Invalid(m)) => return fail(Failure::Invalid(m)),
        Err(TargetError::Denied(d)) => return fail(Failure::Denied(d)),
    };
    let mut rb = http.client.post(url).header(CONTENT_TYPE, "application/json").body(req.body.to_vec());
    for (name, value) in req.headers {
        rb = rb.header(*name, value.as_str());
    }

    let sent_at = Instant::now();
    let resp = match tokio::time::timeout_at(deadline, rb.send()).await {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(e)) => Err(failure_of(&e)),
        Ok(Ok(r)) => Ok(r),
    };
    let ttfb = sent_at.elapsed();
    let mut resp = match resp {
        Ok(r) => r,
        Err(f) => return Posted { result: Err(f), ttfb, transfer: Duration::ZERO },
    };

    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| outcome::parse_retry_after(v, Utc::now()));
    let success = (200..300).contains(&status);
    let limit = if success { MAX_RESULT_BYTES } else { MAX_ERROR_READ_BYTES };

    let body_from = Instant::now();
    let mut body = Vec::new();
    let mut too_large = resp.content_length().is_some_and(|n| n > limit as u64) && success;
    let mut cut = None;
    while !too_large {
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Err(_) => {
                cut = Some(Failure::Timeout);
                break;
            }
            Ok(Err(e)) => {
                cut = Some(Failure::Transport(error_chain(&e)));
                break;
            }
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => {
                if body.len() + chunk.len() > limit {
                    if success {
                        too_large = true;
                    } else {
                        body.extend_from_slice(&chunk[..limit - body.len()]);
                    }
                    break;
                }
                body.extend_from_slice(&chunk);
            }
        }
    }
    let transfer = body_from.elapsed();
    Posted { result: Ok(Answer { status, retry_after, body, too_large, cut }), ttfb, transfer }
}

fn failure_of(e: &reqwest::Error) -> Failure {
    if let Some(d) = denied_in(e) {
        return Failure::Denied(d);
    }
    if e.is_builder() {
        return Failure::Invalid(error_chain(e));
    }
    if e.is_connect() {
        return Failure::Connect(error_chain(e));
    }
    if e.is_timeout() {
        return Failure::Timeout;
    }
    Failure::Transport(error_chain(e))
}

fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use switchyard_shared::outbound::test_server::TestServer;
    use tokio::net::TcpListener;

    async fn serve(response: &'static str) -> String {
        TestServer::start(&[response]).await.url
    }

    fn request<'a>(url: &'a str, fallback: Option<&'a str>) -> DispatchRequest<'a> {
        DispatchRequest {
            endpoint_url: url,
            fallback_url: fallback,
            headers: &[],
            body: b"{}",
            timeout: Duration::from_secs(5),
            mode: ExecutionMode::Sync,
        }
    }

    /// A port nothing listens on.
    async fn closed_port_url() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        format!("http://{addr}/run")
    }

    #[tokio::test]
    async fn connect_time_is_zero_on_a_reused_connection() {
        let url =
            serve("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}").await;
        let http = Http::new(4, false).unwrap();
        let first = send(&http, &request(&url, None)).await;
        assert_eq!(first.verdict, Verdict::Completed { result: json!({"ok": true}) });
        assert_eq!(first.status_code, Some(200));
        assert!(first.timing.connect > Duration::ZERO, "a new connection was made");
        let second = send(&http, &request(&url, None)).await;
        assert_eq!(second.timing.connect, Duration::ZERO, "the keep-alive connection was reused");
        assert!(second.timing.ttfb > Duration::ZERO);
    }

    #[tokio::test]
    async fn headers_and_body_reach_the_target() {
        let srv = TestServer::start(&["HTTP/1.1 204 No Content\r\n\r\n"]).await;
        let headers = [("X-Svc-Run-Id", "run_1".to_string()), ("Idempotency-Key", "run_1:1".to_string())];
        let mut req = request(&srv.url, None);
        req.headers = &headers;
        req.body = br#"{"run_id":"run_1"}"#;
        let d = send(&Http::new(1, false).unwrap(), &req).await;
        assert_eq!(d.verdict, Verdict::Completed { result: Value::Null });
        let seen = srv.requests();
        assert_eq!(seen[0].headers["content-type"], "application/json");
        assert_eq!(seen[0].headers["x-svc-run-id"], "run_1");
        assert_eq!(seen[0].headers["idempotency-key"], "run_1:1");
        assert_eq!(seen[0].body, br#"{"run_id":"run_1"}"#);
    }

    #[tokio::test]
    async fn unreachable_primary_falls_back() {
        let good = serve("HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nhi").await;
        let bad = closed_port_url().await;
        let http = Http::new(4, false).unwrap();
        let d = send(&http, &request(&bad, Some(&good))).await;
        assert_eq!(d.endpoint_url, good);
        assert_eq!(d.verdict, Verdict::Completed { result: json!("hi") });

        let d = send(&http, &request(&bad, None)).await;
        assert_eq!(d.status_code, None);
        match d.verdict {
            Verdict::Retryable { class: ErrorClass::Connection, error, .. } => {
                assert!(error.starts_with("could not connect to target: "), "{error}");
                assert!(!error.contains("/run"), "no URL in the message: {error}");
            }
            v => panic!("{v:?}"),
        }
    }

    #[tokio::test]
    async fn a_slow_target_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/run", listener.local_addr().unwrap());
        // Accepts and never answers.
        let _hold = tokio::spawn(async move {
            let mut socks = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                socks.push(s);
            }
        });
        let http = Http::new(4, false).unwrap();
        let mut req = request(&url, None);
        req.timeout = Duration::from_millis(300);
        let started = Instant::now();
        let d = send(&http, &req).await;
        let took = started.elapsed();
        match d.verdict {
            Verdict::Retryable { class: ErrorClass::Timeout, timed_out: true, error, .. } => {
                assert_eq!(error, "no response from target within 300ms")
            }
            v => panic!("{v:?}"),
        }
        // The deadline covers the whole attempt (building and signing the
        // request included), while ttfb starts when the request is sent:
        // the attempt lasts the full timeout, ttfb most of it.
        assert!(took >= Duration::from_millis(300), "gave up after {took:?}");
        assert!(d.timing.ttfb > Duration::ZERO && d.timing.ttfb <= took, "ttfb {:?} of {took:?}", d.timing.ttfb);
    }

    #[tokio::test]
    async fn error_statuses_keep_retry_after_and_the_body_start() {
        let url = serve("HTTP/1.1 503 Service Unavailable\r\nretry-after: 4\r\ncontent-length: 4\r\n\r\nbusy").await;
        let http = Http::new(4, false).unwrap();
        let d = send(&http, &request(&url, None)).await;
        assert_eq!(d.status_code, Some(503));
        assert_eq!(
            d.verdict,
            Verdict::Retryable {
                class: ErrorClass::Http5xx,
                error: "HTTP 503 from target: busy".into(),
                retry_after: Some(Duration::from_secs(4)),
                timed_out: false
            }
        );
    }

    #[tokio::test]
    async fn redirects_are_not_followed() {
        let url = serve("HTTP/1.1 302 Found\r\nlocation: http://example.invalid/\r\ncontent-length: 0\r\n\r\n").await;
        let d = send(&Http::new(4, false).unwrap(), &request(&url, None)).await;
        assert!(matches!(d.verdict, Verdict::Permanent { class: ErrorClass::Http3xx, .. }), "{:?}", d.verdict);
    }

    #[tokio::test]
    async fn private_targets_are_refused_when_denied() {
        let url = serve("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
        let http = Http::new(4, true).unwrap();
        let d = send(&http, &request(&url, None)).await;
        assert!(matches!(d.verdict, Verdict::Permanent { class: ErrorClass::TargetDenied, .. }), "{:?}", d.verdict);
        // A name goes through the resolver, which refuses it the same way.
        let named = url.replace("127.0.0.1", "localhost");
        let d = send(&http, &request(&named, None)).await;
        assert!(matches!(d.verdict, Verdict::Permanent { class: ErrorClass::TargetDenied, .. }), "{:?}", d.verdict);
    }
}
