//! The terminal-state webhook of a job run (docs/contract.md, "Terminal
//! webhook").
//!
//! Sent once the terminal outcome is committed, to the job's `webhook_url`:
//! up to three attempts (now, +1 s, +5 s); a 4xx ends it at once. Retries
//! live in memory only, by design: a process that dies drops them, and
//! nothing records a delivery that ran out of attempts.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::header::CONTENT_TYPE;
use serde::Serialize;
use serde_json::Value;

use super::client::{error_chain, Http, TargetError};
use super::{signing, target};
use crate::domain::JobSpec;
use crate::store::{Outcome, Run};
use crate::telemetry::WEBHOOK_RETRY_ATTEMPTS;

/// Waits before each attempt: the first goes at once.
pub const SCHEDULE: [Duration; 3] = [Duration::ZERO, Duration::from_secs(1), Duration::from_secs(5)];
/// Time allowed for one delivery attempt.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Payload {
    pub run_id: String,
    pub job_id: String,
    pub project_id: String,
    pub status: String,
    pub attempt: i32,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub timestamp: String,
}

impl Payload {
    pub fn at(mut self, now: DateTime<Utc>) -> Payload {
        self.timestamp = now.to_rfc3339_opts(SecondsFormat::Millis, true);
        self
    }
}

/// One delivery: where, with which key, what.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub url: String,
    pub secret: Option<String>,
    pub payload: Payload,
}

/// The terminal webhook of `run` after `outcome`, when its job has a
/// webhook_url: from the worker, and from the api and the scheduler for runs
/// that end without a worker (finished over the SDK, heartbeats stopped).
pub fn terminal_delivery(spec: &JobSpec, run: &Run, outcome: &Outcome, now: DateTime<Utc>) -> Option<Delivery> {
    let url = spec.webhook_url.as_deref().filter(|u| !u.is_empty())?;
    let payload = Payload {
        run_id: run.id.clone(),
        job_id: run.job_id.clone(),
        project_id: run.project_id.clone(),
        status: outcome.status.as_str().to_string(),
        attempt: run.attempt,
        result: outcome.result.clone(),
        error: outcome.error.clone(),
        timestamp: String::new(),
    }
    .at(now);
    let secret = spec.webhook_secret.clone().filter(|s| !s.is_empty());
    Some(Delivery { url: url.to_string(), secret, payload })
}

/// How one attempt went.
#[derive(Debug, PartialEq, Eq)]
enum Sent {
    Delivered,
    /// 4xx, a redirect, or a URL that may not be called: retrying will not help.
    Rejected(String),
    Failed(String),
}

/// Delivers with retries; returns whether the target accepted it.
pub async fn deliver(http: &Http, d: &Delivery) -> bool {
    let body = match serde_json::to_vec(&d.payload) {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "webhook payload did not serialize");
            return false;
        }
    };
    for (i, wait) in SCHEDULE.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(*wait).await;
            metrics::counter!(WEBHOOK_RETRY_ATTEMPTS).increment(1);
        }
        match attempt(http, d, &body).await {
            Sent::Delivered => return true,
            Sent::Rejected(why) => {
                tracing::warn!(run_id = %d.payload.run_id, error = %why, "run webhook rejected; not retrying");
                return false;
            }
            Sent::Failed(why) => {
                tracing::warn!(run_id = %d.payload.run_id, attempt = i + 1, error = %why, "run webhook attempt failed");
            }
        }
    }
    tracing::warn!(run_id = %d.payload.run_id, "run webhook dropped after {} attempts", SCHEDULE.len());
    false
}

async fn attempt(http: &Http, d: &Delivery, body: &[u8]) -> Sent {
    let url = match http.target(&d.url) {
        Ok(u) => u,
        Err(TargetError::Invalid(m)) => return Sent::Rejected(m),
        Err(TargetError::Denied(den)) => return Sent::Rejected(den.to_string()),
    };
    let mut rb =
        http.client.post(url).timeout(ATTEMPT_TIMEOUT).header(CONTENT_TYPE, "application/json").body(body.to_vec());
    if let Some(secret) = &d.secret {
        // Signed per attempt, so a late retry still passes the receiver's
        // five-minute freshness check.
        let ts = Utc::now().timestamp();
        let [(tn, tv), (sn, sv)] = signing::headers(secret, ts, body);
        rb = rb.header(tn, tv).header(sn, sv.as_str()).header(signing::COMPAT_SIGNATURE_HEADER, sv);
    }
    match rb.send().await {
        Ok(resp) => {
            let status = resp.status();
            if status.is_success() {
                Sent::Delivered
            } else if status.is_client_error() || status.is_redirection() {
                Sent::Rejected(format!("HTTP {}", status.as_u16()))
            } else {
                Sent::Failed(format!("HTTP {}", status.as_u16()))
            }
        }
        Err(e) => match target::denied_in(&e) {
            Some(den) => Sent::Rejected(den.to_string()),
            None if e.is_timeout() => Sent::Failed("timed out".into()),
            None => Sent::Failed(error_chain(&e)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::test_server::TestServer;
    use chrono::TimeZone;

    fn delivery(url: &str, secret: Option<&str>) -> Delivery {
        Delivery {
            url: url.to_string(),
            secret: secret.map(str::to_string),
            payload: Payload {
                run_id: "run_1".into(),
                job_id: "job_1".into(),
                project_id: "prj_1".into(),
                status: "completed".into(),
                attempt: 1,
                result: Some(serde_json::json!({"ok": true})),
                error: None,
                timestamp: String::new(),
            }
            .at(Utc::now()),
        }
    }

    #[tokio::test]
    async fn a_server_error_is_retried_and_deliveries_are_signed() {
        let srv = TestServer::start(&[
            "HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 204 No Content\r\n\r\n",
        ])
        .await;
        let http = Http::new(2, false).unwrap();
        assert!(deliver(&http, &delivery(&srv.url, Some("whsec"))).await);
        let seen = srv.requests();
        assert_eq!(seen.len(), 2);
        for s in &seen {
            let ts: i64 = s.headers["x-svc-timestamp"].parse().unwrap();
            assert_eq!(s.headers["x-svc-signature"], signing::signature("whsec", ts, &s.body));
            assert_eq!(s.headers["x-webhook-signature"], s.headers["x-svc-signature"]);
        }
        let body: Value = serde_json::from_slice(&seen[1].body).unwrap();
        assert_eq!(body["result"], serde_json::json!({"ok": true}));
    }

    #[tokio::test]
    async fn a_client_error_ends_the_delivery_and_unsigned_jobs_send_no_signature() {
        let srv = TestServer::start(&["HTTP/1.1 410 Gone\r\ncontent-length: 0\r\n\r\n"]).await;
        let http = Http::new(2, false).unwrap();
        assert!(!deliver(&http, &delivery(&srv.url, None)).await);
        let seen = srv.requests();
        assert_eq!(seen.len(), 1);
        assert!(!seen[0].headers.contains_key("x-svc-signature"));
    }

    #[tokio::test]
    async fn private_webhook_urls_are_refused_when_denied() {
        let srv = TestServer::start(&["HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]).await;
        let http = Http::new(2, true).unwrap();
        assert!(!deliver(&http, &delivery(&srv.url, None)).await);
        assert!(srv.requests().is_empty());
    }

    #[test]
    fn payload_has_the_spec_fields() {
        let p = Payload {
            run_id: "run_1".into(),
            job_id: "job_1".into(),
            project_id: "prj_1".into(),
            status: "failed".into(),
            attempt: 3,
            result: None,
            error: Some("HTTP 500 from target".into()),
            timestamp: String::new(),
        }
        .at(Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap());
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            serde_json::json!({
                "run_id": "run_1", "job_id": "job_1", "project_id": "prj_1", "status": "failed",
                "attempt": 3, "result": null, "error": "HTTP 500 from target",
                "timestamp": "2026-01-02T03:04:05.000Z"
            })
        );
    }
}
