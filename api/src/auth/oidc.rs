//! OIDC bearer tokens: verified against one configured public key (RS256 for an
//! RSA key, ES256 for a P-256 key), the issuer and the audience. `sub` is the
//! actor; `email` and `name` its profile; `project_id` (else the X-Project-Id
//! header) its project.

use anyhow::Context;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use switchyard_shared::Config;

pub struct OidcVerifier {
    key: DecodingKey,
    validation: Validation,
}

#[derive(Clone, Debug, Deserialize)]
pub struct OidcClaims {
    pub sub: String,
    pub email: Option<String>,
    pub name: Option<String>,
    pub project_id: Option<String>,
}

impl OidcVerifier {
    /// `None` unless OIDC is configured (the configuration checks that the
    /// three settings come together). `OIDC_PUBLIC_KEY` is a PEM, or the path
    /// of a file holding one.
    pub fn from_config(c: &Config) -> anyhow::Result<Option<OidcVerifier>> {
        let (Some(issuer), Some(audience), Some(key)) = (&c.oidc_issuer, &c.oidc_audience, &c.oidc_public_key) else {
            return Ok(None);
        };
        let pem = if key.trim_start().starts_with("-----BEGIN") {
            key.clone()
        } else {
            std::fs::read_to_string(key.trim()).with_context(|| format!("OIDC_PUBLIC_KEY: reading {key:?}"))?
        };
        Self::new(issuer, audience, pem.as_bytes()).map(Some).context("OIDC_PUBLIC_KEY")
    }

    pub fn new(issuer: &str, audience: &str, pem: &[u8]) -> anyhow::Result<OidcVerifier> {
        let (key, alg) = match DecodingKey::from_rsa_pem(pem) {
            Ok(k) => (k, Algorithm::RS256),
            Err(_) => (
                DecodingKey::from_ec_pem(pem)
                    .map_err(|_| anyhow::anyhow!("not an RSA or EC (P-256) public key in PEM"))?,
                Algorithm::ES256,
            ),
        };
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = 30;
        // A token that is not valid yet is refused like an expired one (the
        // same leeway applies); jsonwebtoken checks nbf only when asked.
        validation.validate_nbf = true;
        Ok(OidcVerifier { key, validation })
    }

    /// The claims of a valid token; the error says why not (never echoing the token).
    pub fn verify(&self, token: &str) -> Result<OidcClaims, String> {
        let data = jsonwebtoken::decode::<OidcClaims>(token, &self.key, &self.validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            match e.kind() {
                ErrorKind::ExpiredSignature => "the token has expired".to_string(),
                ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".to_string(),
                ErrorKind::InvalidIssuer => "the token's issuer is not accepted".to_string(),
                ErrorKind::InvalidAudience => "the token's audience is not accepted".to_string(),
                ErrorKind::InvalidSignature => "the token's signature does not verify".to_string(),
                ErrorKind::InvalidAlgorithm => "the token's algorithm is not accepted".to_string(),
                ErrorKind::MissingRequiredClaim(c) => format!("the token lacks the {c} claim"),
                _ => "the token is not a valid OIDC token".to_string(),
            }
        })?;
        let c = data.claims;
        let printable = |s: &str| !s.is_empty() && s.len() <= 256 && !s.chars().any(char::is_control);
        if !printable(&c.sub) {
            return Err("the token's sub claim must be 1 to 256 printable characters".into());
        }
        if c.project_id.as_deref().is_some_and(|p| !switchyard_shared::ids::is_valid_external_id(p)) {
            return Err("the token's project_id claim is not a project id".into());
        }
        Ok(c)
    }
}
