//! What live streams read and hold: watches and the change log of watched
//! projects (migration 0030).
//!
//! Triggers on `job_runs`, `workflow_runs` and `workflow_step_runs` record
//! every status change of a project that an api process watches, and
//! announce it with `NOTIFY switchyard_changes` ([`CHANNEL`]), whichever
//! process made it. A project nobody watches pays one index probe per
//! changed row and gets no NOTIFY.
//!
//! The change log is read by position `(tx, seq)`: `seq` is a sequence, so
//! a row with a lower `seq` can commit after one with a higher; reading only
//! rows of transactions older than every transaction still running
//! ([`changes_after`]) means no row behind a reader's position can appear
//! later. A change is therefore streamed once every transaction that began
//! before it has ended (milliseconds, unless one runs long).

use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// The NOTIFY channel of changes.
pub const CHANNEL: &str = "switchyard_changes";

/// A CTE named `name` that logs, for the live streams, the runs of `from`
/// (a CTE of the caller's statement with `id`, `project_id`, `job_id` and
/// their new `status`) whose project some api process streams. The hot
/// statements (a run's insert, every update that moves its dispatch
/// token) log their own rows this way, once per statement, instead of
/// through a row trigger (migration 0032); the change log's own trigger
/// announces each row.
pub(super) fn log_runs_cte(name: &str, from: &str) -> String {
    format!(
        "{name} AS (
            INSERT INTO stream_changes (project_id, kind, id, status, job_id)
            SELECT f.project_id, 'run', f.id, f.status, f.job_id
              FROM {from} f JOIN stream_watches w ON w.project_id = f.project_id AND w.until > now()
        )"
    )
}

/// One recorded change.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Change {
    /// The transaction that made it (as text: `xid8` has no Rust type).
    pub tx: String,
    pub seq: i64,
    pub project_id: String,
    /// `run`, `workflow_run` or `step`.
    pub kind: String,
    pub id: String,
    pub status: String,
    pub job_id: Option<String>,
    pub workflow_id: Option<String>,
    pub workflow_run_id: Option<String>,
    pub step_ref: Option<String>,
    pub at: DateTime<Utc>,
}

/// A position in the change log: after `(tx, seq)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    pub tx: u64,
    pub seq: i64,
}

impl Position {
    /// `<tx>.<seq>`, the id a project stream gives its events.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.tx, self.seq)
    }

    pub fn decode(s: &str) -> Option<Position> {
        let (tx, seq) = s.split_once('.')?;
        Some(Position { tx: tx.parse().ok()?, seq: seq.parse().ok()? })
    }

    pub fn of(c: &Change) -> Option<Position> {
        Some(Position { tx: c.tx.parse().ok()?, seq: c.seq })
    }
}

/// Marks `projects` watched until `secs` from now (renewed by the caller
/// while its streams stay open).
pub async fn watch(pool: &PgPool, projects: &[String], secs: i64) -> Result<(), sqlx::Error> {
    if projects.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO stream_watches (project_id, until)
         SELECT p, now() + make_interval(secs => $2) FROM unnest($1::text[]) p
         ON CONFLICT (project_id) DO UPDATE SET until = GREATEST(stream_watches.until, EXCLUDED.until)",
    )
    .bind(projects)
    .bind(secs as f64)
    .execute(pool)
    .await?;
    Ok(())
}

/// Where a new stream of a project starts: past every change of a
/// transaction that has already ended.
pub async fn start(pool: &PgPool) -> Result<Position, sqlx::Error> {
    let tx: String = sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text").fetch_one(pool).await?;
    // Rows of the oldest running transaction itself are still to come, so
    // the position is just before it.
    let tx: u64 = tx.parse().unwrap_or(0);
    Ok(Position { tx: tx.saturating_sub(1), seq: i64::MAX })
}

/// Up to `limit` changes of `project` after `after`, in order, of
/// transactions that have all ended.
pub async fn changes_after(
    pool: &PgPool,
    project: &str,
    after: &Position,
    limit: i64,
) -> Result<Vec<Change>, sqlx::Error> {
    sqlx::query_as(
        "SELECT tx::text AS tx, seq, project_id, kind, id, status, job_id, workflow_id, workflow_run_id, step_ref, at
           FROM stream_changes
          WHERE project_id = $1
            AND (tx, seq) > ($2::text::xid8, $3)
            AND tx < pg_snapshot_xmin(pg_current_snapshot())
          ORDER BY tx, seq
          LIMIT $4",
    )
    .bind(project)
    .bind(after.tx.to_string())
    .bind(after.seq)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Forgets changes older than `keep_secs` and watches that have lapsed.
pub async fn prune(pool: &PgPool, keep_secs: i64) -> Result<u64, sqlx::Error> {
    let gone = sqlx::query("DELETE FROM stream_changes WHERE at < now() - make_interval(secs => $1)")
        .bind(keep_secs as f64)
        .execute(pool)
        .await?
        .rows_affected();
    sqlx::query("DELETE FROM stream_watches WHERE until < now()").execute(pool).await?;
    Ok(gone)
}
