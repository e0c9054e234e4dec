//! What a run reports over the SDK, as far as other processes need it: the
//! worker hands the latest checkpoint and the job's secrets to each attempt.
//! (The api reads and writes the rest of the run records itself.)

use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgPool;

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

/// What an attempt's dispatch body carries besides the run itself.
#[derive(Clone, Debug, Default)]
pub struct DispatchExtras {
    /// The data of the run's latest checkpoint, from any earlier attempt.
    pub checkpoint: Option<Value>,
    pub secrets: Vec<StoredSecret>,
}

/// The latest checkpoint and the job's secrets, in one round trip.
pub async fn dispatch_extras(pool: &PgPool, run_id: &str, job_id: &str) -> Result<DispatchExtras, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        checkpoint: Option<Json<Value>>,
        secrets: Option<Json<Vec<(String, String, String)>>>,
    }
    // bytea goes through JSON as hex (encode(..., 'hex')): one row, one trip.
    let row: Row = sqlx::query_as(
        "SELECT
            (SELECT data FROM job_run_checkpoints WHERE run_id = $1 ORDER BY id DESC LIMIT 1) AS checkpoint,
            (SELECT json_agg(json_build_array(name, encode(nonce, 'hex'), encode(ciphertext, 'hex')) ORDER BY name)
               FROM job_secrets WHERE job_id = $2) AS secrets",
    )
    .bind(run_id)
    .bind(job_id)
    .fetch_one(pool)
    .await?;
    let secrets = row
        .secrets
        .map(|s| s.0)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, nonce, ct)| StoredSecret {
            name,
            nonce: hex::decode(nonce).unwrap_or_default(),
            ciphertext: hex::decode(ct).unwrap_or_default(),
        })
        .collect();
    Ok(DispatchExtras { checkpoint: row.checkpoint.map(|c| c.0), secrets })
}
