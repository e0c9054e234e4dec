//! What a run reports over the SDK, as far as other processes need it: the
//! worker hands the job's secrets to each attempt (read with the run, see
//! `runs::load_for_dispatch`).
//! (The api reads and writes the rest of the run records itself.)

/// A job secret as stored: encrypted (see [`crate::secrets`]).
#[derive(Clone, sqlx::FromRow)]
pub struct StoredSecret {
    pub name: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

impl std::fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredSecret").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Secrets as the dispatch read returns them (name, nonce and ciphertext,
/// the bytes hex-encoded so a row travels as JSON).
pub fn unseal_rows(rows: Vec<(String, String, String)>) -> Vec<StoredSecret> {
    rows.into_iter()
        .map(|(name, nonce, ct)| StoredSecret {
            name,
            nonce: hex::decode(nonce).unwrap_or_default(),
            ciphertext: hex::decode(ct).unwrap_or_default(),
        })
        .collect()
}
