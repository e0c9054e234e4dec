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
    fn names_look_like_env_vars() {
        for ok in ["A", "_x", "API_TOKEN_2"] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "2A", "a-b", "a b", "é", &"a".repeat(129)] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }
}
