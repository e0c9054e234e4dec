//! Batching (`domain::batching`): a batching job's triggers join the open
//! batch of their key (migration 0035), and a full or timed-out batch
//! becomes one run whose payload is the array of its triggers' payloads in
//! arrival order, with the batch's id in the run's metadata
//! (`trigger_batch_id`).
//!
//! A trigger joins by an upsert on the one open batch of (job, key), which
//! locks that row until the trigger's transaction ends; the trigger that
//! fills the batch closes it in that transaction, and the scheduler closes
//! batches whose time is up under `FOR UPDATE SKIP LOCKED`. So every
//! trigger lands in exactly one batch, a batch makes one run, and a crash
//! anywhere leaves a batch open in Postgres for the next pass to close.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::jobs::{self, JobRecord};
use super::runs::{self, NewRun, Run};
use super::Tenant;
use crate::domain::{batching::Batch, schedule};
use crate::ids::TriggerBatchId;

/// The metadata key naming a batch's run's batch.
pub const METADATA_KEY: &str = "trigger_batch_id";

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct BatchRow {
    pub id: TriggerBatchId,
    pub project_id: String,
    pub job_id: String,
    pub batch_key: String,
    pub size: i32,
    pub max_size: i32,
    pub opened_at: DateTime<Utc>,
    pub closes_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub run_id: Option<String>,
}

const BATCH_COLUMNS: &str =
    "id, project_id, job_id, batch_key, size, max_size, opened_at, closes_at, closed_at, run_id";

/// What a trigger joined.
#[derive(Clone, Debug)]
pub struct Joined {
    pub trigger_id: String,
    /// The batch, after the trigger joined it (closed if it filled it).
    pub batch: BatchRow,
    /// The trigger's place in the batch, from 0.
    pub position: i32,
    /// The run made of the batch, when this trigger filled it.
    pub run: Option<Run>,
}

/// Adds a trigger of `job` (whose `batch` is `b`) with `payload` and the
/// `key` it gave to the open batch of that key, opening one if there is
/// none; a trigger that fills the batch makes its run.
pub async fn join(
    pool: &PgPool,
    job: &JobRecord,
    b: &Batch,
    key: &str,
    payload: Option<&Value>,
) -> Result<Joined, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let batch: BatchRow = sqlx::query_as(&format!(
        "INSERT INTO trigger_batches (id, project_id, job_id, batch_key, size, max_size, closes_at)
         VALUES ($1, $2, $3, $4, 1, $5, now() + make_interval(secs => $6))
         ON CONFLICT (job_id, batch_key) WHERE closed_at IS NULL DO UPDATE SET size = trigger_batches.size + 1
         RETURNING {BATCH_COLUMNS}"
    ))
    .bind(crate::ids::trigger_batch_id())
    .bind(&job.project_id)
    .bind(&job.id)
    .bind(key)
    .bind(b.max_size as i32)
    .bind(b.timeout_secs as f64)
    .fetch_one(&mut *tx)
    .await?;
    let trigger_id = crate::ids::trigger_id();
    let position = batch.size - 1;
    sqlx::query("INSERT INTO trigger_batch_items (batch_id, position, trigger_id, payload) VALUES ($1, $2, $3, $4)")
        .bind(&batch.id)
        .bind(position)
        .bind(&trigger_id)
        .bind(payload.map(Json))
        .execute(&mut *tx)
        .await?;
    let (batch, run) = if batch.size >= batch.max_size {
        let (batch, run) = close(&mut tx, batch, Some(job)).await?;
        (batch, run)
    } else {
        (batch, None)
    };
    tx.commit().await?;
    Ok(Joined { trigger_id, batch, position, run })
}

/// Closes a locked open batch: makes its run (unless its job is gone) and
/// records it. Returns the batch as closed, and the run.
async fn close(
    conn: &mut PgConnection,
    batch: BatchRow,
    job: Option<&JobRecord>,
) -> Result<(BatchRow, Option<Run>), sqlx::Error> {
    let run = match job {
        Some(job) => {
            let payloads: Vec<Option<Json<Value>>> =
                sqlx::query_scalar("SELECT payload FROM trigger_batch_items WHERE batch_id = $1 ORDER BY position")
                    .bind(&batch.id)
                    .fetch_all(&mut *conn)
                    .await?;
            let payload = Value::Array(payloads.into_iter().map(|p| p.map_or(Value::Null, |j| j.0)).collect());
            let (run, _) = runs::insert_in(&mut *conn, &batch_run(job, &batch.id, payload)).await?;
            Some(run)
        }
        None => None,
    };
    let closed: BatchRow = sqlx::query_as(&format!(
        "UPDATE trigger_batches SET closed_at = now(), run_id = $2 WHERE id = $1 RETURNING {BATCH_COLUMNS}"
    ))
    .bind(&batch.id)
    .bind(run.as_ref().map(|r| r.id.to_string()))
    .fetch_one(&mut *conn)
    .await?;
    Ok((closed, run))
}

/// The run of a batch: the job's defaults, the payloads as one array.
fn batch_run(job: &JobRecord, batch_id: &TriggerBatchId, payload: Value) -> NewRun {
    let spec = &job.spec.0;
    let now = Utc::now();
    // A job's execution window holds the run like any other; nothing else
    // of admission can refuse a run that has no schedule of its own.
    let admitted = schedule::admission(spec, now, None, false).unwrap_or(schedule::Admission {
        status: crate::domain::RunStatus::Queued,
        scheduled_at: None,
        expires_at: None,
    });
    let mut metadata: serde_json::Map<String, Value> =
        spec.default_run_metadata.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    metadata.insert(METADATA_KEY.into(), Value::String(batch_id.to_string()));
    NewRun {
        id: crate::ids::run_id(),
        project_id: job.project_id.clone(),
        job_id: job.id.clone(),
        job_version: job.version,
        job_version_id: job.version_id.clone(),
        status: admitted.status,
        triggered_by: "batch".into(),
        execution_mode: "sync".into(),
        payload: Some(payload),
        metadata: Value::Object(metadata),
        tags: Value::Object(serde_json::Map::new()),
        scheduled_at: admitted.scheduled_at,
        expires_at: admitted.expires_at,
        ..NewRun::default()
    }
}

/// Closes up to `limit` open batches whose time is up at `now` (several
/// schedulers share them: `SKIP LOCKED`). Returns the runs made, for the
/// caller to enqueue once committed.
pub async fn close_due(pool: &PgPool, now: DateTime<Utc>, limit: i64) -> Result<Vec<Run>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let due: Vec<BatchRow> = sqlx::query_as(&format!(
        "SELECT {BATCH_COLUMNS} FROM trigger_batches
          WHERE closed_at IS NULL AND closes_at <= $1
          ORDER BY closes_at LIMIT $2 FOR UPDATE SKIP LOCKED"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    let ids: Vec<String> = due.iter().map(|b| b.job_id.clone()).collect();
    let jobs = jobs::get_many_in(&mut tx, &ids).await?;
    let mut made = Vec::new();
    for batch in due {
        let job = jobs.iter().find(|j| j.id.as_str() == batch.job_id);
        if let (_, Some(run)) = close(&mut tx, batch, job).await? {
            made.push(run);
        }
    }
    tx.commit().await?;
    Ok(made)
}

/// When the soonest open batch closes, if any is open.
pub async fn next_close(pool: &PgPool) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar("SELECT min(closes_at) FROM trigger_batches WHERE closed_at IS NULL").fetch_one(pool).await
}

/// A batch, if `tenant` may see it, with its triggers' ids in order.
pub async fn get(
    pool: &PgPool,
    tenant: Tenant<'_>,
    id: &TriggerBatchId,
) -> Result<Option<(BatchRow, Vec<String>)>, sqlx::Error> {
    let Some(batch): Option<BatchRow> =
        super::get_scoped(pool, "trigger_batches", BATCH_COLUMNS, tenant, id.as_str()).await?
    else {
        return Ok(None);
    };
    let triggers: Vec<String> =
        sqlx::query_scalar("SELECT trigger_id FROM trigger_batch_items WHERE batch_id = $1 ORDER BY position")
            .bind(&batch.id)
            .fetch_all(pool)
            .await?;
    Ok(Some((batch, triggers)))
}
