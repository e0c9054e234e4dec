//! Job secrets as stored: encrypted (see [`crate::secrets`]), keyed by job.
//! The api writes and lists them; the worker hands them to each attempt
//! (read with the run, see `runs::load_for_dispatch`). A value is never
//! read back here except sealed.

use chrono::{DateTime, Utc};
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

/// A secret's name and times: all a listing shows.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct SecretName {
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The job's secrets in name order, after `after` (a name).
pub async fn list(
    pool: &PgPool,
    job_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<SecretName>, sqlx::Error> {
    sqlx::query_as(
        "SELECT name, created_at, updated_at FROM job_secrets WHERE job_id = $1 AND ($2::text IS NULL OR name > $2)
         ORDER BY name LIMIT $3",
    )
    .bind(job_id)
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// A sealed value to store under a name.
pub struct Sealed<'a> {
    pub job_id: &'a str,
    pub name: &'a str,
    pub nonce: &'a [u8],
    pub ciphertext: &'a [u8],
    pub actor: Option<&'a str>,
}

/// Sets a secret, replacing one of the same name. A new name is inserted
/// only while the job has fewer than `max` secrets (a replacement never
/// counts against the cap): `None` when the cap refused it. The flag is
/// true for a new secret.
pub async fn put(pool: &PgPool, s: &Sealed<'_>, max: i64) -> Result<Option<(SecretName, bool)>, sqlx::Error> {
    let row: Option<(String, DateTime<Utc>, DateTime<Utc>, bool)> = sqlx::query_as(
        "INSERT INTO job_secrets (job_id, name, nonce, ciphertext, created_by, updated_by)
         SELECT $1, $2, $3, $4, $5, $5
         WHERE EXISTS (SELECT 1 FROM job_secrets WHERE job_id = $1 AND name = $2)
            OR (SELECT count(*) FROM job_secrets WHERE job_id = $1) < $6
         ON CONFLICT (job_id, name) DO UPDATE
            SET nonce = EXCLUDED.nonce, ciphertext = EXCLUDED.ciphertext, updated_by = EXCLUDED.updated_by
         RETURNING name, created_at, updated_at, (xmax = 0) AS inserted",
    )
    .bind(s.job_id)
    .bind(s.name)
    .bind(s.nonce)
    .bind(s.ciphertext)
    .bind(s.actor)
    .bind(max)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(name, created_at, updated_at, inserted)| (SecretName { name, created_at, updated_at }, inserted)))
}

/// Deletes a secret; false when the job has none of that name.
pub async fn delete(pool: &PgPool, job_id: &str, name: &str) -> Result<bool, sqlx::Error> {
    let n = sqlx::query("DELETE FROM job_secrets WHERE job_id = $1 AND name = $2")
        .bind(job_id)
        .bind(name)
        .execute(pool)
        .await?
        .rows_affected();
    Ok(n > 0)
}

/// The names of the job's secrets, in name order.
pub async fn names(pool: &PgPool, job_id: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT name FROM job_secrets WHERE job_id = $1 ORDER BY name")
        .bind(job_id)
        .fetch_all(pool)
        .await
}
