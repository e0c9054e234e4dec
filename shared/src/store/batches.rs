//! Bulk trigger batches: one row per bulk trigger request, with the tally
//! of what its items became; the runs it created carry its id.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::ids::BatchId;

/// A batch with its runs counted by current status.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct BatchRow {
    pub id: BatchId,
    pub project_id: String,
    pub job_id: String,
    pub created_at: DateTime<Utc>,
    pub created_by: Option<String>,
    pub total: i32,
    pub created: i32,
    pub duplicates: i32,
    pub errors: i32,
    pub counts: sqlx::types::Json<BTreeMap<String, i64>>,
}

const BATCH_SELECT: &str = "SELECT b.id, b.project_id, b.job_id, b.created_at, b.created_by, b.total, b.created,
        b.duplicates, b.errors,
        COALESCE((SELECT jsonb_object_agg(status, n) FROM
            (SELECT status, count(*) AS n FROM job_runs WHERE batch_id = b.id GROUP BY status) c), '{}') AS counts
     FROM run_batches b";

/// Records a batch of `total` items before its runs are triggered.
pub async fn create(
    pool: &PgPool,
    id: &BatchId,
    project_id: &str,
    job_id: &str,
    total: i32,
    created_by: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO run_batches (id, project_id, job_id, total, created_by) VALUES ($1, $2, $3, $4, $5)")
        .bind(id)
        .bind(project_id)
        .bind(job_id)
        .bind(total)
        .bind(created_by)
        .execute(pool)
        .await?;
    Ok(())
}

/// Records what the batch's items became.
pub async fn set_tallies(
    pool: &PgPool,
    id: &BatchId,
    created: i32,
    duplicates: i32,
    errors: i32,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE run_batches SET created = $2, duplicates = $3, errors = $4 WHERE id = $1")
        .bind(id)
        .bind(created)
        .bind(duplicates)
        .bind(errors)
        .execute(pool)
        .await?;
    Ok(())
}

/// The project's batches (of one job if given), newest first, older than `before`.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    job_id: Option<&str>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<BatchRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{BATCH_SELECT} WHERE b.project_id = $1 AND ($2::text IS NULL OR b.job_id = $2)
           AND ($3::text IS NULL OR b.id < $3)
         ORDER BY b.id DESC LIMIT $4"
    ))
    .bind(project_id)
    .bind(job_id)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// One batch, of any project (the caller checks visibility).
pub async fn get(pool: &PgPool, id: &BatchId) -> Result<Option<BatchRow>, sqlx::Error> {
    sqlx::query_as(&format!("{BATCH_SELECT} WHERE b.id = $1")).bind(id).fetch_optional(pool).await
}
