//! API keys: `svc_` followed by 43 base64url characters (32
//! random bytes from the OS, 256 bits). Only the SHA-256 of the whole key is
//! stored; a request's key is hashed and looked up by that hash
//! (`store::api_keys::by_hash`).

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
