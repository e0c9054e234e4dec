//! API keys (SPEC §5.1): `svc_` followed by 43 base64url characters (32
//! random bytes from the OS, 256 bits). Only the SHA-256 of the whole key is
//! stored; a request's key is hashed and looked up by that hash.

use base64::Engine;
use chrono::{DateTime, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

pub const PREFIX: &str = "svc_";

/// A new raw key and its hash.
pub fn generate() -> (String, String) {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let raw = format!("{PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes));
    let hash = hash(&raw);
    (raw, hash)
}

pub fn hash(raw: &str) -> String {
    hex_lower(&Sha256::digest(raw.as_bytes()))
}

fn hex_lower(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// What authentication needs of a key.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct KeyRecord {
    pub id: String,
    pub project_id: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub replaced_by_key_id: Option<String>,
    pub grace_expires_at: Option<DateTime<Utc>>,
}

impl KeyRecord {
    /// Why the key is refused at `now`, if it is.
    pub fn refusal(&self, now: DateTime<Utc>) -> Option<&'static str> {
        if self.revoked_at.is_some() {
            return Some("the API key is revoked");
        }
        if self.expires_at.is_some_and(|t| t <= now) {
            return Some("the API key has expired");
        }
        if self.replaced_by_key_id.is_some() && self.grace_expires_at.is_none_or(|t| t <= now) {
            return Some("the API key was rotated and its grace period is over");
        }
        None
    }

    /// The scopes the key acts with: an empty list is full access (SPEC §5.1).
    pub fn effective_scopes(&self) -> Vec<String> {
        if self.scopes.is_empty() {
            vec!["*".to_string()]
        } else {
            self.scopes.clone()
        }
    }
}

pub async fn by_hash(pool: &PgPool, hash: &str) -> Result<Option<KeyRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, project_id, scopes, expires_at, revoked_at, replaced_by_key_id, grace_expires_at
         FROM api_keys WHERE key_hash = $1",
    )
    .bind(hash)
    .fetch_optional(pool)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> KeyRecord {
        KeyRecord {
            id: "key_1".into(),
            project_id: "p".into(),
            scopes: vec![],
            expires_at: None,
            revoked_at: None,
            replaced_by_key_id: None,
            grace_expires_at: None,
        }
    }

    #[test]
    fn keys_carry_256_random_bits() {
        let (raw, h) = generate();
        assert!(raw.starts_with("svc_"));
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&raw[4..]).unwrap();
        assert_eq!(decoded.len(), 32);
        assert_eq!(h, hash(&raw));
        assert_eq!(h.len(), 64);
        assert_ne!(generate().0, raw);
    }

    #[test]
    fn refusals() {
        let now = Utc::now();
        let mut k = record();
        assert_eq!(k.refusal(now), None);
        assert_eq!(k.effective_scopes(), vec!["*"]);
        k.replaced_by_key_id = Some("key_2".into());
        k.grace_expires_at = Some(now + chrono::Duration::seconds(10));
        assert_eq!(k.refusal(now), None, "inside the grace period");
        k.grace_expires_at = Some(now);
        assert!(k.refusal(now).is_some(), "past the grace period");
        let mut k = record();
        k.expires_at = Some(now - chrono::Duration::seconds(1));
        assert!(k.refusal(now).is_some());
        let mut k = record();
        k.revoked_at = Some(now);
        assert!(k.refusal(now).is_some());
    }
}
