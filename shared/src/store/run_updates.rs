//! Writes to a run that leave its status and attempt alone: what a user
//! sets on it (metadata, debug mode), the link of a replay to its original,
//! and what the target reports while it works (heartbeats, progress).
//! Status changes are in [`transitions`](super::transitions) and the
//! modules it names.

use serde_json::{Map, Value};
use sqlx::types::Json;
use sqlx::PgPool;

use super::runs::{Run, RUN_COLUMNS};
use crate::domain::RunStatus;

/// Merges `set` into the run's metadata and removes the keys `remove`,
/// unless the result would have more than `max_keys` keys. `None`: nothing
/// was written (too many keys, or no such run).
pub async fn update_metadata(
    pool: &PgPool,
    run_id: &str,
    set: &Map<String, Value>,
    remove: &[String],
    max_keys: i64,
) -> Result<Option<Run>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE job_runs SET metadata = (metadata || $2::jsonb) - $3::text[]
         WHERE id = $1 AND (SELECT count(*) FROM jsonb_object_keys((metadata || $2::jsonb) - $3::text[])) <= $4
         RETURNING {RUN_COLUMNS}"
    ))
    .bind(run_id)
    .bind(Json(set))
    .bind(remove)
    .bind(max_keys)
    .fetch_optional(pool)
    .await
}

/// Turns the run's debug mode on or off. `None`: no such run.
pub async fn set_debug_mode(pool: &PgPool, run_id: &str, enabled: bool) -> Result<Option<Run>, sqlx::Error> {
    sqlx::query_as(&format!("UPDATE job_runs SET debug_mode = $2 WHERE id = $1 RETURNING {RUN_COLUMNS}"))
        .bind(run_id)
        .bind(enabled)
        .fetch_optional(pool)
        .await
}

/// Records that the run `run_id` replays `original`.
pub async fn set_continuation_of(pool: &PgPool, run_id: &str, original: &str) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE job_runs SET continuation_of = $2 WHERE id = $1")
        .bind(run_id)
        .bind(original)
        .execute(pool)
        .await?;
    Ok(())
}

/// A heartbeat from the target: sets heartbeat_at (and the progress and
/// message it carries, when given) while the run has not finished.
/// Returns the run's status, `None` when there is no such run.
pub async fn heartbeat(
    pool: &PgPool,
    run_id: &str,
    progress: Option<f64>,
    message: Option<&str>,
) -> Result<Option<RunStatus>, sqlx::Error> {
    sqlx::query_scalar(concat!(
        "WITH beat AS (
            UPDATE job_runs SET heartbeat_at = now(),
                progress = COALESCE($2, progress), progress_message = COALESCE($3, progress_message)
            WHERE id = $1 AND status IN ",
        crate::run_active_sql!(),
        " RETURNING id
         )
         SELECT status FROM job_runs WHERE id = $1"
    ))
    .bind(run_id)
    .bind(progress)
    .bind(message)
    .fetch_optional(pool)
    .await
}

/// Progress reported by the target, which is also a heartbeat: written
/// only while the run is running on `attempt`. Returns whether it was.
pub async fn record_progress(
    pool: &PgPool,
    run_id: &str,
    attempt: i32,
    progress: f64,
    message: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE job_runs SET progress = $2, progress_message = $3, heartbeat_at = now()
         WHERE id = $1 AND status = 'running' AND attempt = $4",
    )
    .bind(run_id)
    .bind(progress)
    .bind(message)
    .bind(attempt)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}
