//! Known actors: the last profile (email, name) seen for a person named by
//! a credential, for display next to the ids the audit trail records.

use sqlx::PgPool;

/// Records the profile; an absent field keeps what was known.
pub async fn upsert(pool: &PgPool, id: &str, email: Option<&str>, name: Option<&str>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO known_actors (id, email, name) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET email = COALESCE(EXCLUDED.email, known_actors.email),
            name = COALESCE(EXCLUDED.name, known_actors.name), last_seen_at = now()",
    )
    .bind(id)
    .bind(email)
    .bind(name)
    .execute(pool)
    .await
    .map(|_| ())
}
