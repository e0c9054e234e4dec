//! Sending one delivery of the outbox (`store::deliveries`): a job run's
//! terminal webhook, a subscription's event, a step's stage notification,
//! an event trigger's notification. The sender loop claims due deliveries
//! and calls [`send`] for each; the store records the attempt.
//!
//! A delivery is signed per attempt (`X-Svc-Timestamp`, `X-Svc-Signature`
//! and the compatibility `X-Webhook-Signature`) with the key the store
//! claimed it with (`store::deliveries::Claimed`: the job's
//! `webhook_secret`, the subscription's secret, else the project's signing
//! secret), so a late retry still passes the receiver's five-minute
//! freshness check, and carries its id in `X-Svc-Delivery-Id`, the same on
//! every attempt and redelivery, so a receiver can drop what it already
//! has.

use std::time::Duration;

use chrono::Utc;
use reqwest::header::CONTENT_TYPE;

use super::client::{error_chain, Http, TargetError};
use super::{signing, target};
use crate::store::deliveries::Attempt;

/// Time allowed for one delivery attempt.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The header that names the delivery.
pub const DELIVERY_ID_HEADER: &str = "X-Svc-Delivery-Id";

/// Sends `body` to `url` once, with `traceparent` (`crate::traces`).
pub async fn send(
    http: &Http,
    url: &str,
    secret: Option<&str>,
    delivery_id: &str,
    traceparent: &str,
    body: &[u8],
) -> Attempt {
    let url = match http.target(url) {
        Ok(u) => u,
        Err(TargetError::Invalid(m)) => return Attempt::Rejected { status_code: None, error: m },
        Err(TargetError::Denied(den)) => return Attempt::Rejected { status_code: None, error: den.to_string() },
    };
    let mut rb = http
        .client
        .post(url)
        .timeout(ATTEMPT_TIMEOUT)
        .header(CONTENT_TYPE, "application/json")
        .header(DELIVERY_ID_HEADER, delivery_id)
        .header(crate::traces::TRACEPARENT, traceparent)
        .body(body.to_vec());
    if let Some(secret) = secret.filter(|s| !s.is_empty()) {
        let ts = Utc::now().timestamp();
        let [(tn, tv), (sn, sv)] = signing::headers(secret, ts, body);
        rb = rb.header(tn, tv).header(sn, sv.as_str()).header(signing::COMPAT_SIGNATURE_HEADER, sv);
    }
    match rb.send().await {
        Ok(resp) => {
            let status = resp.status();
            let code = Some(i32::from(status.as_u16()));
            if status.is_success() {
                Attempt::Delivered { status_code: i32::from(status.as_u16()) }
            } else if status.is_client_error() || status.is_redirection() {
                Attempt::Rejected { status_code: code, error: format!("HTTP {}", status.as_u16()) }
            } else {
                Attempt::Failed { status_code: code, error: format!("HTTP {}", status.as_u16()) }
            }
        }
        Err(e) => match target::denied_in(&e) {
            Some(den) => Attempt::Rejected { status_code: None, error: den.to_string() },
            None if e.is_timeout() => Attempt::Failed { status_code: None, error: "timed out".into() },
            None => Attempt::Failed { status_code: None, error: error_chain(&e) },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::test_server::TestServer;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[tokio::test]
    async fn deliveries_are_signed_and_named() {
        let srv = TestServer::start(&["HTTP/1.1 204 No Content\r\n\r\n"]).await;
        let http = Http::new(2, false).unwrap();
        let got = send(&http, &srv.url, Some("whsec"), "whd_1", TP, br#"{"a":1}"#).await;
        assert_eq!(got, Attempt::Delivered { status_code: 204 });
        let s = &srv.requests()[0];
        let ts: i64 = s.headers["x-svc-timestamp"].parse().unwrap();
        assert_eq!(s.headers["x-svc-signature"], signing::signature("whsec", ts, &s.body));
        assert_eq!(s.headers["x-webhook-signature"], s.headers["x-svc-signature"]);
        assert_eq!(s.headers["traceparent"], TP);
        assert_eq!(s.headers["x-svc-delivery-id"], "whd_1");
    }

    #[tokio::test]
    async fn a_client_error_is_a_rejection_a_server_error_a_failure() {
        let srv = TestServer::start(&[
            "HTTP/1.1 410 Gone\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n",
        ])
        .await;
        let http = Http::new(2, false).unwrap();
        assert!(matches!(
            send(&http, &srv.url, None, "d", TP, b"{}").await,
            Attempt::Rejected { status_code: Some(410), .. }
        ));
        assert!(matches!(
            send(&http, &srv.url, None, "d", TP, b"{}").await,
            Attempt::Failed { status_code: Some(502), .. }
        ));
        assert!(!srv.requests()[0].headers.contains_key("x-svc-signature"), "no secret, no signature");
    }

    #[tokio::test]
    async fn private_urls_are_refused_when_denied() {
        let srv = TestServer::start(&["HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]).await;
        let http = Http::new(2, true).unwrap();
        assert!(matches!(send(&http, &srv.url, None, "d", TP, b"{}").await, Attempt::Rejected { .. }));
        assert!(srv.requests().is_empty());
    }
}
