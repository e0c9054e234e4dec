//! HMAC signatures of outbound requests: dispatches of a job with a
//! `webhook_secret`, every delivery of the outbox, signed log-drain batches
//! (docs/contract.md, "Signatures", names each one's key).
//!
//! The signed string is `<unix_timestamp>.<raw body>`, keyed with the
//! secret, written as `sha256=<lowercase hex>`. The timestamp is part
//! of the signed string so a receiver can refuse replays older than five
//! minutes without trusting an unsigned header.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const TIMESTAMP_HEADER: &str = "X-Svc-Timestamp";
pub const SIGNATURE_HEADER: &str = "X-Svc-Signature";
/// Same value as [`SIGNATURE_HEADER`], for receivers written against the
/// generic webhook header name (terminal webhooks only).
pub const COMPAT_SIGNATURE_HEADER: &str = "X-Webhook-Signature";

/// `sha256=<hex HMAC-SHA256(secret, "<ts>.<body>")>`.
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).unwrap_or_else(|_| unreachable!());
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The `X-Svc-Timestamp` / `X-Svc-Signature` pair for a body sent at `timestamp`.
pub fn headers(secret: &str, timestamp: i64, body: &[u8]) -> [(&'static str, String); 2] {
    [(TIMESTAMP_HEADER, timestamp.to_string()), (SIGNATURE_HEADER, signature(secret, timestamp, body))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_vector_computed_elsewhere() {
        // printf '%s' '1700000000.{"run_id":"run_1"}' | openssl dgst -sha256 -hmac whsec_test
        let sig = signature("whsec_test", 1_700_000_000, br#"{"run_id":"run_1"}"#);
        assert_eq!(sig, "sha256=798009fe138ef28c30b9f21bd52c3b4702101698242a5c483d69c312119a521d");
    }

    #[test]
    fn headers_carry_the_signed_timestamp() {
        let [(tn, tv), (sn, sv)] = headers("k", 42, b"{}");
        assert_eq!((tn, tv.as_str()), ("X-Svc-Timestamp", "42"));
        assert_eq!(sn, "X-Svc-Signature");
        assert_eq!(sv, signature("k", 42, b"{}"));
        assert!(sv.starts_with("sha256=") && sv.len() == 7 + 64);
        assert!(sv[7..].chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
    }
}
