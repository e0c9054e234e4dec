//! The run token (docs/contract.md, "Run tokens"): an HS256 JWT the worker
//! hands to the target in `X-Svc-Run-Token`, with which it calls the api's
//! SDK endpoints for this run.
//!
//! It lives as long as the attempt may run plus five minutes, so a target
//! that finishes at its deadline can still report over the SDK.

use std::time::Duration;

use crate::store::Run;
use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// Lifetime of a token beyond the attempt's timeout.
pub const GRACE: Duration = Duration::from_secs(300);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunClaims {
    /// The run id: the SDK path's run id must equal it.
    pub sub: crate::ids::RunId,
    pub iat: i64,
    pub exp: i64,
    pub job_id: crate::ids::JobId,
    pub project_id: String,
    pub attempt: i32,
}

impl RunClaims {
    pub fn for_attempt(run: &Run, timeout: Duration, now: DateTime<Utc>) -> RunClaims {
        let iat = now.timestamp();
        RunClaims {
            sub: run.id.clone(),
            iat,
            exp: iat.saturating_add((timeout + GRACE).as_secs() as i64),
            job_id: run.job_id.clone(),
            project_id: run.project_id.clone(),
            attempt: run.attempt,
        }
    }
}

/// Signs run tokens with one key; built once per worker.
#[derive(Clone)]
pub struct TokenSigner {
    key: EncodingKey,
}

impl TokenSigner {
    pub fn new(secret: &[u8]) -> TokenSigner {
        TokenSigner { key: EncodingKey::from_secret(secret) }
    }

    pub fn sign(&self, claims: &RunClaims) -> Result<String, jsonwebtoken::errors::Error> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.key)
    }
}

/// Checks a run token's signature, algorithm and expiry, and returns its claims.
pub fn verify(token: &str, secret: &[u8]) -> Result<RunClaims, jsonwebtoken::errors::Error> {
    let mut v = Validation::new(Algorithm::HS256);
    v.set_required_spec_claims(&["exp", "sub"]);
    v.leeway = 5;
    Ok(jsonwebtoken::decode::<RunClaims>(token, &DecodingKey::from_secret(secret), &v)?.claims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn claims(now: DateTime<Utc>) -> RunClaims {
        RunClaims {
            sub: "run_1".into(),
            iat: now.timestamp(),
            exp: now.timestamp() + 30 + 300,
            job_id: "job_1".into(),
            project_id: "prj_1".into(),
            attempt: 2,
        }
    }

    #[test]
    fn signed_claims_decode_back() {
        let now = Utc::now();
        let signer = TokenSigner::new(b"test-key");
        let token = signer.sign(&claims(now)).unwrap();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.alg, Algorithm::HS256);
        let got = verify(&token, b"test-key").unwrap();
        assert_eq!(got, claims(now));
        assert_eq!(got.exp - got.iat, 330, "timeout plus five minutes");
    }

    #[test]
    fn wrong_key_and_expired_tokens_fail() {
        let signer = TokenSigner::new(b"test-key");
        let token = signer.sign(&claims(Utc::now())).unwrap();
        assert!(verify(&token, b"other-key").is_err());
        let old = Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).unwrap();
        let expired = signer.sign(&claims(old)).unwrap();
        assert!(verify(&expired, b"test-key").is_err());
    }
}
