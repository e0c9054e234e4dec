//! Singleton and debounce at trigger time (`domain::one_per_key`): the
//! reads and writes [`flow::create_in`](super::flow::create_in) makes under
//! a transaction-scoped lock on (job, key), so that of many concurrent
//! triggers of one key exactly one makes the run and the others find it.
//! Postgres decides alone: after Redis loses its data nothing here changes,
//! and the reconciler rebuilds a waiting run's entry from its row.
//!
//! A debounced run waits `pending` until its `scheduled_at`. Each trigger
//! in its window moves that time on (never past the first trigger plus
//! `max_wait_secs`) and gives the run its payload; the promoter leaves a run
//! whose time moved ([`pushed_back`]) and the flip to `queued` re-checks the
//! time under the row's lock, so a run starts only once its key is quiet.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::runs::{Run, RUN_COLUMNS};
use crate::domain::one_per_key::{self, SingletonMode};
use crate::domain::JobSpec;
use crate::ids::RunId;

/// What a job's settings hold a trigger to, with the key its payload gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    Singleton { key: String, mode: SingletonMode },
    Debounce { key: String, period_secs: i64, max_wait_secs: Option<i64> },
}

impl Gate {
    /// The gate of a trigger of the job with `payload`; `Err` says why the
    /// payload gives no key (the trigger is refused).
    pub fn of(spec: &JobSpec, payload: Option<&Value>) -> Result<Option<Gate>, String> {
        if let Some(s) = &spec.singleton {
            let key = one_per_key::key_of(s.key.as_deref(), payload)?;
            return Ok(Some(Gate::Singleton { key, mode: s.mode }));
        }
        if let Some(d) = &spec.debounce {
            let key = one_per_key::key_of(d.key.as_deref(), payload)?;
            return Ok(Some(Gate::Debounce { key, period_secs: d.period_secs, max_wait_secs: d.max_wait_secs }));
        }
        Ok(None)
    }

    fn key(&self) -> &str {
        match self {
            Gate::Singleton { key, .. } | Gate::Debounce { key, .. } => key,
        }
    }

    fn column(&self) -> &'static str {
        match self {
            Gate::Singleton { .. } => "singleton_key",
            Gate::Debounce { .. } => "debounce_key",
        }
    }
}

/// Takes the lock of (job, gate kind, key) until the transaction ends.
pub async fn lock(conn: &mut PgConnection, job_id: &str, gate: &Gate) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2 || ':' || $3, 0))")
        .bind(gate.column())
        .bind(job_id)
        .bind(gate.key())
        .execute(conn)
        .await?;
    Ok(())
}

/// The unfinished run of a singleton's key, if there is one.
pub async fn active_singleton(conn: &mut PgConnection, job_id: &str, key: &str) -> Result<Option<Run>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM job_runs
          WHERE job_id = $1 AND singleton_key = $2 AND status IN {active}
          ORDER BY id LIMIT 1",
        active = crate::run_active_sql!()
    ))
    .bind(job_id)
    .bind(key)
    .fetch_optional(conn)
    .await
}

/// Moves the open window of a debounce's key on, if there is one: the run
/// waiting in it takes `payload` and is due `period_secs` from now (or when
/// it was due, if later), but no later than `max_wait_secs` after it was
/// made. Its expiry, if any, moves with it. A window whose time has come
/// is closed (its run is about to start): `None`, and the trigger opens a
/// new one.
pub async fn extend_window(
    conn: &mut PgConnection,
    job_id: &str,
    key: &str,
    payload: Option<&Value>,
    period_secs: i64,
    max_wait_secs: Option<i64>,
) -> Result<Option<Run>, sqlx::Error> {
    sqlx::query_as(&format!(
        "WITH w AS (
            SELECT id, created_at, scheduled_at FROM job_runs
             WHERE job_id = $1 AND debounce_key = $2 AND status = 'pending' AND scheduled_at > now()
             ORDER BY id DESC LIMIT 1 FOR UPDATE
         ), t AS (
            SELECT id, scheduled_at AS was, LEAST(GREATEST(scheduled_at, now() + make_interval(secs => $4)),
                   created_at + make_interval(secs => coalesce($5::float8, 1e9))) AS due
              FROM w
         ), u AS (
            UPDATE job_runs r SET payload = $3, payload_hash = NULL, scheduled_at = t.due,
                   expires_at = r.expires_at + (t.due - t.was)
              FROM t WHERE r.id = t.id
            RETURNING r.*
         )
         SELECT {RUN_COLUMNS} FROM u"
    ))
    .bind(job_id)
    .bind(key)
    .bind(payload.map(Json))
    .bind(period_secs as f64)
    .bind(max_wait_secs.map(|s| s as f64))
    .fetch_optional(conn)
    .await
}

/// Records the key a new run of a gated job holds.
pub async fn hold(conn: &mut PgConnection, run_id: &RunId, gate: &Gate) -> Result<(), sqlx::Error> {
    let sql = match gate {
        Gate::Singleton { .. } => "UPDATE job_runs SET singleton_key = $2 WHERE id = $1",
        Gate::Debounce { .. } => "UPDATE job_runs SET debounce_key = $2 WHERE id = $1",
    };
    sqlx::query(sql).bind(run_id).bind(gate.key()).execute(conn).await?;
    Ok(())
}

/// Of the runs `ids`, those waiting in a debounce window that a trigger
/// moved past now, with the time they are due: the promoter gives their
/// entries that time instead of starting them.
pub async fn pushed_back(pool: &PgPool, ids: &[RunId]) -> Result<Vec<(RunId, DateTime<Utc>)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, scheduled_at FROM job_runs
          WHERE id = ANY($1) AND debounce_key IS NOT NULL AND status = 'pending' AND scheduled_at > now()",
    )
    .bind(ids)
    .fetch_all(pool)
    .await
}
