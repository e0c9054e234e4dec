//! Run tokens (docs/contract.md, "Run tokens"): HS256 JWTs the worker mints per
//! dispatch (`switchyard_shared::run_token`), subject = run id, signed with
//! JWT_SIGNING_KEY. Accepted only by the SDK operations under /sdk/v1, and only
//! for the run they name.

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// The claims the api relies on; the worker's `RunClaims` carries these.
#[derive(Clone, Debug, Deserialize)]
pub struct RunTokenClaims {
    pub sub: String,
    pub project_id: String,
    #[serde(default)]
    pub job_id: Option<String>,
    #[serde(default)]
    pub attempt: Option<i32>,
}

/// Whether a bearer token looks like a run token (an HS256 JWT), so it is
/// checked as one rather than as an OIDC token.
pub fn looks_like_run_token(token: &str) -> bool {
    matches!(jsonwebtoken::decode_header(token), Ok(h) if h.alg == Algorithm::HS256)
}

pub fn verify(token: &str, secret: &[u8]) -> Result<RunTokenClaims, String> {
    let mut v = Validation::new(Algorithm::HS256);
    v.set_required_spec_claims(&["exp", "sub"]);
    v.leeway = 5;
    let claims = jsonwebtoken::decode::<RunTokenClaims>(token, &DecodingKey::from_secret(secret), &v)
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature => "the run token has expired".to_string(),
            _ => "the run token is not valid".to_string(),
        })?
        .claims;
    if !switchyard_shared::ids::is_valid_external_id(&claims.sub) {
        return Err("the run token's subject is not a run id".into());
    }
    Ok(claims)
}
