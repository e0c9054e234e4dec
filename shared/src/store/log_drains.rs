//! Log drains: where a project's run log lines are shipped, and how far
//! each drain got (docs/notifications.md, "Log drains").
//!
//! The log table is the buffer. A drain's cursor is the (transaction,
//! line id) of the last line it shipped or skipped; lines are read in that
//! order and only once their writing transaction is older than every
//! running one (the snapshot's xmin), so no line can later appear behind
//! the cursor (migration 0013 explains why ids alone cannot be a cursor).
//!
//! The sender loop claims due drains with `FOR UPDATE SKIP LOCKED` and
//! holds them until `claimed_until`; every write of the loop is fenced by
//! that value, so a scheduler whose claim ran out cannot move a cursor that
//! another one now owns.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgPool;

use super::Tenant;

/// The levels a drain may ask for, lowest first.
pub const LEVELS: [&str; 4] = ["debug", "info", "warn", "error"];

/// The levels shipped by a drain whose `min_level` is `min` (every level
/// for an unknown one, which the table's check forbids anyway).
pub fn levels_from(min: &str) -> Vec<String> {
    let at = LEVELS.iter().position(|l| *l == min).unwrap_or(0);
    LEVELS[at..].iter().map(|l| l.to_string()).collect()
}

#[derive(Clone, Debug, sqlx::FromRow, serde::Deserialize)]
pub struct LogDrain {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub url: String,
    pub secret: Option<String>,
    pub job_ids: Vec<String>,
    pub min_level: String,
    pub enabled: bool,
    pub cursor_txid: i64,
    pub cursor_line_id: String,
    pub lines_dropped: i64,
    pub last_error: Option<String>,
    pub last_success_at: Option<DateTime<Utc>>,
    pub failures: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub claimed_until: Option<DateTime<Utc>>,
    pub created_by: Option<String>,
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLS: &str = "id, project_id, name, url, secret, job_ids, min_level, enabled, cursor_txid, cursor_line_id, \
     lines_dropped, last_error, last_success_at, failures, next_attempt_at, claimed_until, created_by, updated_by, \
     created_at, updated_at";

/// The drain, if `tenant` may see it.
pub async fn get(pool: &PgPool, tenant: Tenant<'_>, id: &str) -> Result<Option<LogDrain>, sqlx::Error> {
    super::get_scoped(pool, "log_drains", COLS, tenant, id).await
}

/// The project's drains, newest first, older than `before`.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<LogDrain>, sqlx::Error> {
    super::page_of_project(pool, "log_drains", COLS, project_id, before, limit).await
}

/// What a drain is: the settings a create sets and an update replaces.
#[derive(Clone, Debug)]
pub struct Settings {
    pub name: String,
    pub url: String,
    /// Sealed with SECRETS_KEY (`secrets::SecretsKey::seal`) by the caller.
    pub secret: Option<String>,
    pub job_ids: Vec<String>,
    pub min_level: String,
    pub enabled: bool,
}

/// A new drain, starting at the current end of the log: its cursor is the
/// creating transaction, so lines of transactions that began before it
/// (committed or not) are history and are not shipped, and every line of a
/// later transaction is.
pub async fn create(
    pool: &PgPool,
    id: &str,
    project_id: &str,
    s: &Settings,
    actor: Option<&str>,
) -> Result<LogDrain, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO log_drains (id, project_id, name, url, secret, job_ids, min_level, enabled, cursor_txid,
                                 created_by, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, pg_current_xact_id()::text::bigint, $9, $9)
         RETURNING {COLS}"
    ))
    .bind(id)
    .bind(project_id)
    .bind(&s.name)
    .bind(&s.url)
    .bind(&s.secret)
    .bind(&s.job_ids)
    .bind(&s.min_level)
    .bind(s.enabled)
    .bind(actor)
    .fetch_one(pool)
    .await
}

/// Replaces the drain's settings; its progress stays. Re-enabling a
/// drain resumes at its cursor (the backlog cap still applies). A changed
/// drain is due at once, and its back-off is forgotten.
pub async fn update(
    pool: &PgPool,
    project_id: &str,
    id: &str,
    s: &Settings,
    actor: Option<&str>,
) -> Result<Option<LogDrain>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE log_drains SET name = $3, url = $4, secret = $5, job_ids = $6, min_level = $7, enabled = $8,
                updated_by = $9, updated_at = now(), failures = 0, next_attempt_at = now()
         WHERE project_id = $1 AND id = $2
         RETURNING {COLS}"
    ))
    .bind(project_id)
    .bind(id)
    .bind(&s.name)
    .bind(&s.url)
    .bind(&s.secret)
    .bind(&s.job_ids)
    .bind(&s.min_level)
    .bind(s.enabled)
    .bind(actor)
    .fetch_optional(pool)
    .await
}

/// Deletes the drain; false when it was gone.
pub async fn delete(pool: &PgPool, project_id: &str, id: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM log_drains WHERE project_id = $1 AND id = $2")
        .bind(project_id)
        .bind(id)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Of `job_ids`, those that are not live jobs of the project.
pub async fn unknown_jobs(pool: &PgPool, project_id: &str, job_ids: &[String]) -> Result<Vec<String>, sqlx::Error> {
    if job_ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar(
        "SELECT want FROM unnest($2::text[]) AS want
         WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = want AND j.project_id = $1 AND j.deleted_at IS NULL)",
    )
    .bind(project_id)
    .bind(job_ids)
    .fetch_all(pool)
    .await
}

/// A drain claimed by one loop pass: its settings and cursor as of the
/// claim, and the fence of every write that follows.
#[derive(Clone, Debug)]
pub struct Claimed {
    pub drain: LogDrain,
    pub fence: DateTime<Utc>,
}

/// What a claim found: the drains it claimed, and when the earliest
/// enabled drain is due (None: no drain is enabled).
#[derive(Clone, Debug)]
pub struct Claim {
    pub claimed: Vec<Claimed>,
    pub upcoming: Option<DateTime<Utc>>,
}

/// Claims up to `limit` enabled drains that are due, for `hold`, and reads
/// when the next one is due, in one statement: with no drain this is two
/// index probes, the loop's whole idle cost.
pub async fn claim_due(pool: &PgPool, hold: std::time::Duration, limit: i64) -> Result<Claim, sqlx::Error> {
    let hold_ms = hold.as_millis().min(i64::MAX as u128) as i64;
    let (upcoming, claimed): (Option<DateTime<Utc>>, Json<Vec<LogDrain>>) = sqlx::query_as(
        "WITH due AS (
            SELECT id FROM log_drains
             WHERE enabled AND next_attempt_at <= now() AND (claimed_until IS NULL OR claimed_until <= now())
             ORDER BY next_attempt_at LIMIT $2
             FOR UPDATE SKIP LOCKED),
         claimed AS (
            UPDATE log_drains d SET claimed_until = clock_timestamp() + $1 * interval '1 millisecond'
              FROM due WHERE d.id = due.id
            RETURNING d.*)
         SELECT (SELECT min(next_attempt_at) FROM log_drains WHERE enabled) AS upcoming,
                COALESCE((SELECT jsonb_agg(to_jsonb(c)) FROM claimed c), '[]'::jsonb) AS claimed",
    )
    .bind(hold_ms)
    .bind(limit)
    .fetch_one(pool)
    .await?;
    let claimed = claimed
        .0
        .into_iter()
        .filter_map(|d| {
            let fence = d.claimed_until?;
            Some(Claimed { drain: d, fence })
        })
        .collect();
    Ok(Claim { claimed, upcoming })
}

/// One log line as a drain ships it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct DrainLine {
    /// The writing transaction: with `line_id`, the line's place in the
    /// drain's order.
    pub txid: i64,
    pub line_id: String,
    pub run_id: String,
    pub job_id: String,
    pub project_id: String,
    pub level: String,
    pub message: String,
    #[sqlx(json)]
    pub fields: Value,
    /// When the target says it wrote the line.
    pub timestamp: DateTime<Utc>,
}

/// The lines of the drain's project that match its filters, after its
/// cursor and before the horizon (every transaction older than the oldest
/// one running). `$1..$5` are the cursor, project, jobs and levels. The
/// lines are the SDK's log lines and one line per finished attempt (the
/// worker's record: `info` when it completed, `warn` otherwise), both in
/// the order of their writing transaction; `txid >= ` lets each side use
/// its txid index.
const AFTER_CURSOR: &str = "FROM (
        SELECT txid, id, run_id, level, message, fields, logged_at FROM job_run_logs
         WHERE txid >= $1::text::xid8
        UNION ALL
        SELECT a.txid, 'att_' || a.run_id || '_' || a.attempt || '_' || to_char(a.started_at, 'YYYYMMDDHH24MISSUS'),
               a.run_id, CASE WHEN a.outcome = 'completed' THEN 'info' ELSE 'warn' END,
               'attempt ' || a.attempt || ' ' || a.outcome || coalesce(' (HTTP ' || a.status_code || ')', '')
                   || coalesce(': ' || a.error, ''),
               jsonb_build_object('attempt', a.attempt, 'outcome', a.outcome, 'status_code', a.status_code,
                   'duration_ms', round(extract(epoch FROM a.finished_at - a.started_at) * 1000),
                   'endpoint_url', a.endpoint_url, 'source', 'worker'),
               a.finished_at
          FROM job_run_attempts a WHERE a.txid >= $1::text::xid8
    ) l JOIN job_runs r ON r.id = l.run_id
    WHERE (l.txid, l.id) > ($1::text::xid8, $2) AND l.txid < pg_snapshot_xmin(pg_current_snapshot())
      AND r.project_id = $3 AND (cardinality($4::text[]) = 0 OR r.job_id = ANY($4)) AND l.level = ANY($5)";

/// Up to `limit` lines after the drain's cursor, in order.
pub async fn read_lines(pool: &PgPool, d: &LogDrain, limit: i64) -> Result<Vec<DrainLine>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT l.txid::text::bigint AS txid, l.id AS line_id, l.run_id, r.job_id, r.project_id, l.level,
                l.message, l.fields, l.logged_at AS timestamp
         {AFTER_CURSOR}
         ORDER BY l.txid, l.id LIMIT $6"
    ))
    .bind(d.cursor_txid.to_string())
    .bind(&d.cursor_line_id)
    .bind(&d.project_id)
    .bind(&d.job_ids)
    .bind(levels_from(&d.min_level))
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Where a drain's cursor moved when its backlog was capped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Lines skipped, added to `lines_dropped`.
    pub lines: i64,
    /// The new cursor: the newest line skipped.
    pub cursor_txid: i64,
    pub cursor_line_id: String,
}

/// When more than `max_backlog` lines wait behind the drain's cursor,
/// moves the cursor to keep only the newest `max_backlog` and adds the
/// skipped ones to `lines_dropped`, in one statement. None when within the
/// cap (or when the claim was lost).
pub async fn cap_backlog(pool: &PgPool, c: &Claimed, max_backlog: i64) -> Result<Option<Skipped>, sqlx::Error> {
    let d = &c.drain;
    let row: Option<(i64, i64, String)> = sqlx::query_as(&format!(
        "WITH backlog AS MATERIALIZED (SELECT l.txid, l.id {AFTER_CURSOR}),
              edge AS (SELECT txid, id FROM backlog ORDER BY txid DESC, id DESC OFFSET $6 LIMIT 1),
              skipped AS (
                SELECT e.txid, e.id, (SELECT count(*) FROM backlog b WHERE (b.txid, b.id) <= (e.txid, e.id)) AS n
                  FROM edge e)
         UPDATE log_drains SET cursor_txid = s.txid::text::bigint, cursor_line_id = s.id,
                lines_dropped = lines_dropped + s.n
           FROM skipped s
          WHERE log_drains.id = $7 AND claimed_until = $8
         RETURNING s.n, s.txid::text::bigint, s.id"
    ))
    .bind(d.cursor_txid.to_string())
    .bind(&d.cursor_line_id)
    .bind(&d.project_id)
    .bind(&d.job_ids)
    .bind(levels_from(&d.min_level))
    .bind(max_backlog)
    .bind(&d.id)
    .bind(c.fence)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(lines, cursor_txid, cursor_line_id)| Skipped { lines, cursor_txid, cursor_line_id }))
}

/// A batch reached the receiver: the cursor moves to its last line, the
/// failures are forgotten, and the drain is due again at once. False when
/// the claim was lost (the batch will be sent again: at-least-once).
pub async fn shipped(pool: &PgPool, c: &Claimed, last: (i64, &str)) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE log_drains SET cursor_txid = $3, cursor_line_id = $4, last_success_at = now(), last_error = NULL,
                failures = 0, next_attempt_at = now(), claimed_until = NULL
          WHERE id = $1 AND claimed_until = $2",
    )
    .bind(&c.drain.id)
    .bind(c.fence)
    .bind(last.0)
    .bind(last.1)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// A send failed: the cursor stays, the error is kept, and the drain is
/// not due again before `retry_at`.
pub async fn failed(pool: &PgPool, c: &Claimed, error: &str, retry_at: DateTime<Utc>) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE log_drains SET last_error = $3, failures = failures + 1, next_attempt_at = $4, claimed_until = NULL
          WHERE id = $1 AND claimed_until = $2",
    )
    .bind(&c.drain.id)
    .bind(c.fence)
    .bind(error)
    .bind(retry_at)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Nothing to send: the drain is let go, due again at the next pass.
pub async fn release(pool: &PgPool, c: &Claimed) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE log_drains SET claimed_until = NULL WHERE id = $1 AND claimed_until = $2")
        .bind(&c.drain.id)
        .bind(c.fence)
        .execute(pool)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimum_level_ships_it_and_the_levels_above() {
        assert_eq!(levels_from("debug"), ["debug", "info", "warn", "error"]);
        assert_eq!(levels_from("warn"), ["warn", "error"]);
        assert_eq!(levels_from("error"), ["error"]);
    }
}
