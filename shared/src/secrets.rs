//! Job secrets at rest: XChaCha20-Poly1305 under a key derived from
//! `SECRETS_KEY`.
//!
//! - Key: SHA-256 of the configured value, so any string of any length
//!   becomes a uniformly distributed 256-bit key. (The value is an operator
//!   supplied random secret, not a password; a slow KDF would add nothing.)
//! - Nonce: 24 random bytes per encryption. XChaCha's 192-bit nonce makes
//!   random nonces safe for any realistic number of secrets, which a 96-bit
//!   nonce (ChaCha20-Poly1305, AES-GCM) would not be without a counter.
//! - Associated data: `<job_id>\0<name>`, so a ciphertext copied to another
//!   job or name fails to decrypt instead of leaking under the wrong name.
//!
//! Plaintext exists only in memory: in the api between the request and the
//! encryption, in the worker between the decryption and the dispatch body.
//!
//! Signing keys (a job's `webhook_secret`, a subscription's secret, a log
//! drain's secret) are sealed under the same key into one text value
//! ([`SecretsKey::seal`]), so they stay in the columns they always had and
//! a value written before they were sealed still reads ([`open_stored`]).
//! Their names start with `$`, which no job secret's name can, so their
//! ciphertexts cannot pass for a job secret's.

use std::fmt;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

use crate::config::Secret;

pub const NONCE_LEN: usize = 24;

/// The cipher for job secrets. `Debug` prints nothing of the key.
#[derive(Clone)]
pub struct SecretsKey {
    cipher: XChaCha20Poly1305,
}

impl fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretsKey(***)")
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretsError {
    /// Wrong key, or the stored bytes were altered or moved.
    #[error("the secret could not be decrypted (SECRETS_KEY differs from the one it was stored with, or the row was altered)")]
    Decrypt,
    #[error("encryption failed")]
    Encrypt,
    /// A sealed value met a process without SECRETS_KEY.
    #[error("the secret is encrypted but this process has no SECRETS_KEY to decrypt it")]
    NoKey,
}

/// What a sealed text value starts with. A plaintext value written before
/// sealing could in theory start with it too; it would then fail to open,
/// which is loud, never a signature with the wrong key.
pub const SEALED_PREFIX: &str = "sealed:v1:";

/// The names signing keys are sealed under, with their owner's id.
pub const JOB_WEBHOOK_SECRET: &str = "$webhook_secret";
pub const SUBSCRIPTION_SECRET: &str = "$subscription_secret";
pub const LOG_DRAIN_SECRET: &str = "$log_drain_secret";

/// Whether a stored signing key is sealed (else it is a plaintext value
/// from before sealing, which the start-up pass seals).
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED_PREFIX)
}

/// The plaintext of a stored signing key: a sealed value opened with `key`,
/// a value from before sealing as it is (it keeps working with or without
/// SECRETS_KEY, as it did).
pub fn open_stored(key: Option<&SecretsKey>, owner: &str, name: &str, stored: &str) -> Result<String, SecretsError> {
    let Some(rest) = stored.strip_prefix(SEALED_PREFIX) else {
        return Ok(stored.to_string());
    };
    let key = key.ok_or(SecretsError::NoKey)?;
    let (nonce, ct) = rest.split_once(':').ok_or(SecretsError::Decrypt)?;
    let nonce = hex::decode(nonce).map_err(|_| SecretsError::Decrypt)?;
    let ct = hex::decode(ct).map_err(|_| SecretsError::Decrypt)?;
    key.decrypt(owner, name, &nonce, &ct)
}

impl SecretsKey {
    pub fn from_secret(s: &Secret) -> SecretsKey {
        let key = Sha256::digest(s.expose().as_bytes());
        SecretsKey { cipher: XChaCha20Poly1305::new(&key) }
    }

    /// The configured key, if any.
    pub fn from_config(c: &crate::Config) -> Option<SecretsKey> {
        c.secrets_key.as_ref().map(SecretsKey::from_secret)
    }

    /// Returns `(nonce, ciphertext)`.
    pub fn encrypt(&self, job_id: &str, name: &str, plaintext: &str) -> Result<(Vec<u8>, Vec<u8>), SecretsError> {
        let nonce: [u8; NONCE_LEN] = rand::random();
        let aad = aad(job_id, name);
        let ct = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: plaintext.as_bytes(), aad: &aad })
            .map_err(|_| SecretsError::Encrypt)?;
        Ok((nonce.to_vec(), ct))
    }

    /// `plaintext` sealed into one text value for a text column: the
    /// prefix, then the nonce and the ciphertext in hex. `owner` is the id
    /// of the row it belongs to, bound in like a job secret's job id.
    pub fn seal(&self, owner: &str, name: &str, plaintext: &str) -> Result<String, SecretsError> {
        let (nonce, ct) = self.encrypt(owner, name, plaintext)?;
        Ok(format!("{SEALED_PREFIX}{}:{}", hex::encode(nonce), hex::encode(ct)))
    }

    pub fn decrypt(&self, job_id: &str, name: &str, nonce: &[u8], ciphertext: &[u8]) -> Result<String, SecretsError> {
        if nonce.len() != NONCE_LEN {
            return Err(SecretsError::Decrypt);
        }
        let aad = aad(job_id, name);
        let pt = self
            .cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ciphertext, aad: &aad })
            .map_err(|_| SecretsError::Decrypt)?;
        String::from_utf8(pt).map_err(|_| SecretsError::Decrypt)
    }
}

fn aad(job_id: &str, name: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(job_id.len() + name.len() + 1);
    v.extend_from_slice(job_id.as_bytes());
    v.push(0);
    v.extend_from_slice(name.as_bytes());
    v
}

/// A secret name: like an environment variable, `[A-Za-z_][A-Za-z0-9_]*`,
/// at most 128 characters.
pub fn is_valid_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && name.len() <= 128
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// [`is_valid_name`] as the document states it.
pub const NAME: crate::domain::rules::Text =
    crate::domain::rules::Text::form(1, 128, "^[A-Za-z_][A-Za-z0-9_]*$", is_valid_name);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_rule_is_its_check() {
        assert_eq!(crate::domain::rules::agrees(&NAME, &["API_TOKEN", "_x1", "1st", "a-b"]), Ok(()));
    }

    fn key(s: &str) -> SecretsKey {
        SecretsKey::from_secret(&Secret::new(s))
    }

    #[test]
    fn round_trip_and_fresh_nonces() {
        let k = key("k1");
        let (n1, c1) = k.encrypt("job_1", "API_TOKEN", "hunter2").unwrap();
        let (n2, c2) = k.encrypt("job_1", "API_TOKEN", "hunter2").unwrap();
        assert_ne!(n1, n2);
        assert_ne!(c1, c2);
        assert!(!c1.windows(7).any(|w| w == b"hunter2"), "no plaintext in the ciphertext");
        assert_eq!(k.decrypt("job_1", "API_TOKEN", &n1, &c1).unwrap(), "hunter2");
    }

    #[test]
    fn wrong_key_row_or_bytes_fail() {
        let (n, c) = key("k1").encrypt("job_1", "A", "v").unwrap();
        assert_eq!(key("k2").decrypt("job_1", "A", &n, &c), Err(SecretsError::Decrypt));
        assert_eq!(key("k1").decrypt("job_2", "A", &n, &c), Err(SecretsError::Decrypt));
        assert_eq!(key("k1").decrypt("job_1", "B", &n, &c), Err(SecretsError::Decrypt));
        let mut bad = c.clone();
        bad[0] ^= 1;
        assert_eq!(key("k1").decrypt("job_1", "A", &n, &bad), Err(SecretsError::Decrypt));
        assert_eq!(key("k1").decrypt("job_1", "A", &n[..5], &c), Err(SecretsError::Decrypt));
        assert!(!format!("{:?}", key("k1")).contains("k1"));
    }

    #[test]
    fn sealed_text_opens_only_with_its_key_and_owner() {
        let k = key("k1");
        let sealed = k.seal("whs_1", SUBSCRIPTION_SECRET, "sub-secret").unwrap();
        assert!(is_sealed(&sealed) && !sealed.contains("sub-secret"));
        assert_eq!(open_stored(Some(&k), "whs_1", SUBSCRIPTION_SECRET, &sealed).unwrap(), "sub-secret");
        assert_eq!(open_stored(Some(&k), "whs_2", SUBSCRIPTION_SECRET, &sealed), Err(SecretsError::Decrypt));
        assert_eq!(open_stored(Some(&k), "whs_1", LOG_DRAIN_SECRET, &sealed), Err(SecretsError::Decrypt));
        assert_eq!(open_stored(Some(&key("k2")), "whs_1", SUBSCRIPTION_SECRET, &sealed), Err(SecretsError::Decrypt));
        assert_eq!(open_stored(None, "whs_1", SUBSCRIPTION_SECRET, &sealed), Err(SecretsError::NoKey));
        // A value from before sealing reads as it is, with or without a key.
        assert_eq!(open_stored(None, "whs_1", SUBSCRIPTION_SECRET, "old-plain").unwrap(), "old-plain");
        assert_eq!(open_stored(Some(&k), "whs_1", SUBSCRIPTION_SECRET, "old-plain").unwrap(), "old-plain");
        assert!(!is_valid_name(JOB_WEBHOOK_SECRET) && !is_valid_name(SUBSCRIPTION_SECRET));
    }

    #[test]
    fn names_look_like_env_vars() {
        for ok in ["A", "_x", "API_TOKEN_2"] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "2A", "a-b", "a b", "é", &"a".repeat(129)] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }
}
