//! The SQL of flow control: creating a run with payload dedup and
//! dependencies, resolving dependencies, expiring runs that did not start
//! in time, holding runs for an execution window, and the cron loop's reads.
//! Every status change here (a dependency's verdict, expiry) writes its
//! `job_run_events` row in the same statement; a run created `queued` has
//! no creation row: its history reads that from the run itself (see
//! [`store`](super)).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::one_per_key::{self, Gate};
use super::runs::{self, NewRun, Run, RUN_COLUMNS};
use super::transitions::{self, Changed, Staged};
use crate::domain::one_per_key::SingletonMode;
use crate::domain::{JobSpec, RunStatus};

/// Statuses in which a dependency can never complete any more.
pub const DEPENDENCY_FAILED_STATUSES: [&str; 4] = ["failed", "cancelled", "timed_out", "expired"];
/// error_class of a run failed because a dependency did not complete.
pub const DEPENDENCY_FAILED: &str = "dependency_failed";

/// What a trigger asks of `create` beyond the run itself.
#[derive(Clone, Debug, Default)]
pub struct CreateOptions {
    /// The job's dedup_window_secs: a run of the same job with an equal
    /// payload created within this many seconds is returned instead.
    pub dedup_window_secs: i64,
    /// Run ids (already checked to exist in the project) the run depends
    /// on, recorded for the resolver and the dependency-status endpoint.
    /// Whether the run waits for them is `NewRun::awaiting_dependencies`.
    pub depends_on: Vec<String>,
    /// The job's singleton or debounce, with the key the payload gave.
    pub gate: Option<Gate>,
}

impl CreateOptions {
    /// Whether the trigger needs a transaction (else it can be
    /// group-committed with others).
    pub fn is_plain(&self) -> bool {
        self.depends_on.is_empty() && self.dedup_window_secs <= 0 && self.gate.is_none()
    }
}

/// What a trigger made of a run.
#[derive(Clone, Debug)]
pub struct Made {
    pub run: Run,
    /// A new run; else an earlier one was found (idempotency key, dedup,
    /// singleton, debounce).
    pub created: bool,
    /// Set when a singleton or debounce decided.
    pub gated: Option<Gated>,
}

/// What a singleton or debounce made of a trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gated {
    /// The key's debounce window was open: its run took the payload and
    /// waits longer.
    Debounced,
    /// The key's singleton run is unfinished: nothing was made.
    Skipped,
    /// The key's unfinished singleton run was cancelled for this new one.
    Replaced,
}

/// Creates a run, or finds the earlier run it duplicates: the one with the
/// same idempotency key, else (with a dedup window) the newest run of the
/// job with an equal payload inside the window, else what the job's
/// singleton or debounce decides. A singleton in cancel mode also returns
/// the run it cancelled, whose queue entry is the caller's to drop.
///
/// Payload dedup is race-free: the lookup and the insert happen under a
/// transaction-scoped advisory lock on (job, payload hash), so of two equal
/// concurrent triggers the second waits and then finds the first. The
/// gates lock (job, key) the same way.
pub async fn create(pool: &PgPool, new: NewRun, opts: &CreateOptions) -> Result<(Made, Vec<Changed>), sqlx::Error> {
    if opts.is_plain() {
        let (run, created) = runs::insert(pool, &new).await?;
        return Ok((Made { run, created, gated: None }, Vec::new()));
    }
    let mut tx = pool.begin().await?;
    let (made, replaced) = create_in(&mut tx, new, opts).await?;
    tx.commit().await?;
    Ok((made, replaced.committed()))
}

/// [`create`] in the caller's transaction (an event fires its sources in
/// one); the locks are held until it ends.
pub async fn create_in(
    conn: &mut PgConnection,
    mut new: NewRun,
    opts: &CreateOptions,
) -> Result<(Made, Staged), sqlx::Error> {
    let found = |run| Ok((Made { run, created: false, gated: None }, Staged::none()));
    // First, so that a trigger repeating an idempotency key waits for the
    // one it repeats rather than judging that run as a rival.
    if let Some(gate) = &opts.gate {
        one_per_key::lock(conn, &new.job_id, gate).await?;
    }
    if new.idempotency_key.is_some() || new.cron_tick.is_some() {
        // The key the insert would claim: taken, its run is the answer
        // (a cron tick another scheduler fired is not a rival singleton).
        let found_run: Option<Run> = sqlx::query_as(&format!(
            "SELECT {RUN_COLUMNS} FROM job_runs
                 WHERE id = (SELECT run_id FROM job_run_keys WHERE job_id = $1
                               AND (idempotency_key = $2 OR ($2::text IS NULL AND cron_tick = $3)))"
        ))
        .bind(&new.job_id)
        .bind(&new.idempotency_key)
        .bind(new.cron_tick)
        .fetch_optional(&mut *conn)
        .await?;
        if let Some(run) = found_run {
            return found(run);
        }
    }
    if opts.dedup_window_secs > 0 {
        // jsonb text is canonical (sorted keys, fixed spacing), so equal
        // payloads hash equally however the client wrote them.
        let hash: Vec<u8> =
            sqlx::query_scalar("SELECT sha256(convert_to(coalesce($1::jsonb, 'null'::jsonb)::text, 'UTF8'))")
                .bind(new.payload.as_ref().map(Json))
                .fetch_one(&mut *conn)
                .await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || encode($2, 'hex'), 0))")
            .bind(&new.job_id)
            .bind(&hash)
            .execute(&mut *conn)
            .await?;
        let found_run: Option<Run> = sqlx::query_as(&format!(
            "SELECT {RUN_COLUMNS} FROM job_runs
             WHERE job_id = $1 AND payload_hash = $2 AND created_at > now() - make_interval(secs => $3)
             ORDER BY created_at DESC LIMIT 1"
        ))
        .bind(&new.job_id)
        .bind(&hash)
        .bind(opts.dedup_window_secs as f64)
        .fetch_optional(&mut *conn)
        .await?;
        if let Some(run) = found_run {
            return found(run);
        }
        new.payload_hash = Some(hash);
    }
    let mut replaced = Staged::none();
    let mut gated = None;
    if let Some(gate) = &opts.gate {
        match gate {
            Gate::Singleton { key, mode } => {
                if let Some(active) = one_per_key::active_singleton(conn, &new.job_id, key).await? {
                    if *mode == SingletonMode::Skip {
                        return Ok((Made { run: active, created: false, gated: Some(Gated::Skipped) }, replaced));
                    }
                    let reason = format!("replaced by run {} (the job is a singleton)", new.id);
                    replaced = transitions::cancel_in(conn, &[active.id.to_string()], &reason).await?;
                    gated = Some(Gated::Replaced);
                }
            }
            Gate::Debounce { key, period_secs, max_wait_secs } => {
                let payload = new.payload.as_ref();
                if let Some(run) =
                    one_per_key::extend_window(conn, &new.job_id, key, payload, *period_secs, *max_wait_secs).await?
                {
                    return Ok((Made { run, created: false, gated: Some(Gated::Debounced) }, replaced));
                }
                open_window(&mut new, *period_secs, *max_wait_secs);
            }
        }
    }
    let (run, created) = runs::insert_in(&mut *conn, &new).await?;
    if created && !opts.depends_on.is_empty() {
        insert_dependencies(conn, &run.id, &opts.depends_on).await?;
    }
    if let (true, Some(gate)) = (created, &opts.gate) {
        one_per_key::hold(conn, &run.id, gate).await?;
    }
    Ok((Made { run, created, gated: gated.filter(|_| created) }, replaced))
}

/// A debounced run waits `pending` for `period_secs` (or until the time
/// the trigger asked, if later), at most `max_wait_secs`; its expiry, if
/// any, counts from then.
fn open_window(new: &mut NewRun, period_secs: i64, max_wait_secs: Option<i64>) {
    let now = Utc::now();
    let was = new.scheduled_at.unwrap_or(now);
    let mut due = was.max(now + chrono::Duration::seconds(period_secs));
    if let Some(w) = max_wait_secs {
        due = due.min(now + chrono::Duration::seconds(w));
    }
    new.status = RunStatus::Pending;
    new.scheduled_at = Some(due);
    new.expires_at = new.expires_at.map(|e| e + (due - was));
}

async fn insert_dependencies(conn: &mut PgConnection, run_id: &str, deps: &[String]) -> Result<(), sqlx::Error> {
    let positions: Vec<i32> = (0..deps.len() as i32).collect();
    sqlx::query(
        "INSERT INTO job_run_dependencies (run_id, depends_on_run_id, position)
         SELECT $1, d, p FROM unnest($2::text[], $3::int[]) AS t(d, p)
         ON CONFLICT DO NOTHING",
    )
    .bind(run_id)
    .bind(deps)
    .bind(&positions)
    .execute(conn)
    .await?;
    Ok(())
}

/// Project and status of each of `ids` that exists.
pub async fn runs_brief(
    pool: &PgPool,
    ids: &[String],
) -> Result<HashMap<crate::ids::RunId, (String, String)>, sqlx::Error> {
    let rows: Vec<(crate::ids::RunId, String, String)> =
        sqlx::query_as("SELECT id, project_id, status FROM job_runs WHERE id = ANY($1)")
            .bind(ids)
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().map(|(id, p, s)| (id, (p, s))).collect())
}

/// The dependencies of a run, in the order the trigger named them, with
/// each one's current status.
pub async fn dependencies_of(pool: &PgPool, run_id: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT d.id, d.status FROM job_run_dependencies x JOIN job_runs d ON d.id = x.depends_on_run_id
         WHERE x.run_id = $1 ORDER BY x.position",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
}

/// A blocked run whose dependencies have all finished (or one failed),
/// locked for resolution.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Resolvable {
    pub id: String,
    pub scheduled_at: Option<DateTime<Utc>>,
    /// `"<run_id> <status>"` of a dependency that cannot complete, if any.
    pub failed_dependency: Option<String>,
    pub execution_window_cron: Option<String>,
    pub timezone: Option<String>,
}

/// What to do with a [`Resolvable`] run.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolution {
    /// `pending -> failed`, error_class dependency_failed.
    Fail { error: String },
    /// `pending -> queued`: due and inside its window.
    Queue,
    /// Stays `pending` with this scheduled_at (a delay or a closed window).
    Schedule { at: DateTime<Utc> },
}

/// Up to `limit` blocked runs that can be resolved now, locked (SKIP
/// LOCKED: concurrent resolvers share the work) in the transaction.
pub async fn lock_resolvable(conn: &mut PgConnection, limit: i64) -> Result<Vec<Resolvable>, sqlx::Error> {
    sqlx::query_as(
        "SELECT r.id, r.scheduled_at,
            (SELECT d.id || ' ' || d.status FROM job_run_dependencies x JOIN job_runs d ON d.id = x.depends_on_run_id
             WHERE x.run_id = r.id AND d.status IN ('failed', 'cancelled', 'timed_out', 'expired')
             ORDER BY x.position LIMIT 1) AS failed_dependency,
            j.spec->>'execution_window_cron' AS execution_window_cron, j.spec->>'timezone' AS timezone
         FROM job_runs r JOIN jobs j ON j.id = r.job_id
         WHERE r.status = 'pending' AND r.awaiting_dependencies
           AND (NOT EXISTS (SELECT 1 FROM job_run_dependencies x JOIN job_runs d ON d.id = x.depends_on_run_id
                            WHERE x.run_id = r.id AND d.status <> 'completed')
             OR EXISTS (SELECT 1 FROM job_run_dependencies x JOIN job_runs d ON d.id = x.depends_on_run_id
                        WHERE x.run_id = r.id AND d.status IN ('failed', 'cancelled', 'timed_out', 'expired')))
         ORDER BY r.id LIMIT $1
         FOR UPDATE OF r SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Whether any run waits for its dependencies: the dependency resolver
/// has nothing to watch until one does (an index-only probe).
pub async fn any_awaiting_dependencies(pool: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM job_runs WHERE status = 'pending' AND awaiting_dependencies)")
        .fetch_one(pool)
        .await
}

/// Applies resolutions to runs locked by [`lock_resolvable`], and writes
/// the notifications of those that failed. Returns the runs after the
/// change (those that were still blocked), with the status each left.
pub async fn apply_resolutions(
    conn: &mut PgConnection,
    decisions: &[(String, Resolution)],
) -> Result<Vec<Run>, sqlx::Error> {
    let mut ids = Vec::new();
    let mut statuses = Vec::new();
    let mut errors: Vec<Option<String>> = Vec::new();
    let mut times: Vec<Option<DateTime<Utc>>> = Vec::new();
    for (id, d) in decisions {
        ids.push(id.clone());
        let (status, error, at) = match d {
            Resolution::Fail { error } => ("failed", Some(error.clone()), None),
            Resolution::Queue => ("queued", None, None),
            Resolution::Schedule { at } => ("pending", None, Some(*at)),
        };
        statuses.push(status.to_string());
        errors.push(error);
        times.push(at);
    }
    let rows: Vec<Run> = sqlx::query_as(&format!(
        "WITH d AS (
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS t(id, status, error, at)
         ), u AS (
            UPDATE job_runs r SET status = d.status, awaiting_dependencies = false,
                error = coalesce(d.error, r.error),
                error_class = CASE WHEN d.status = 'failed' THEN '{DEPENDENCY_FAILED}' ELSE r.error_class END,
                finished_at = CASE WHEN d.status = 'failed' THEN now() ELSE r.finished_at END,
                scheduled_at = coalesce(d.at, r.scheduled_at)
            FROM d WHERE r.id = d.id AND r.status = 'pending' AND r.awaiting_dependencies
            RETURNING r.*
         ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, 'pending', status, attempt,
                CASE WHEN status = 'failed' THEN error ELSE 'dependencies completed' END
            FROM u WHERE status <> 'pending'
         ), {streamed}
         SELECT {RUN_COLUMNS} FROM u",
        streamed = super::streams::log_runs_cte("streamed", "(SELECT * FROM u WHERE status <> 'pending')")
    ))
    .bind(&ids)
    .bind(&statuses)
    .bind(&errors)
    .bind(&times)
    .fetch_all(&mut *conn)
    .await?;
    super::deliveries::runs_ended(conn, rows.iter().filter(|r| r.status == RunStatus::Failed)).await?;
    for r in &rows {
        if r.status != RunStatus::Pending {
            crate::telemetry::transition(r.job_id.as_str(), Some("pending"), r.status.as_str());
        }
    }
    Ok(rows)
}

/// Marks `expired` up to `limit` runs that have not started and whose
/// expires_at is at or before `now`, with their notifications, in one
/// transaction. Returns them (to drop their entries).
pub async fn expire_due(pool: &PgPool, now: DateTime<Utc>, limit: i64) -> Result<Vec<Changed>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        run: Run,
        from_status: RunStatus,
    }
    let mut tx = pool.begin().await?;
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "WITH old AS (
            SELECT id, status FROM job_runs
            WHERE status IN ('pending', 'queued') AND started_at IS NULL AND expires_at IS NOT NULL
              AND expires_at <= $1
            ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
         ), u AS (
            UPDATE job_runs r SET status = 'expired', finished_at = now(), next_retry_at = NULL,
                awaiting_dependencies = false, error_class = 'expired',
                error = 'not started within the job''s run_ttl_secs'
            FROM old WHERE r.id = old.id AND r.status = old.status
            RETURNING r.*, old.status AS from_status
         ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, from_status, 'expired', attempt, 'not started before expires_at' FROM u
         ), {streamed}
         SELECT {RUN_COLUMNS}, from_status FROM u",
        streamed = super::streams::log_runs_cte("streamed", "u")
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    super::deliveries::runs_ended(&mut tx, rows.iter().map(|r| &r.run)).await?;
    tx.commit().await?;
    for r in &rows {
        crate::telemetry::transition(r.run.job_id.as_str(), Some(r.from_status.as_str()), "expired");
    }
    Ok(rows.into_iter().map(|r| Changed { run: r.run, from: r.from_status }).collect())
}

/// The earliest expires_at of the runs [`expire_due`] watches (not started,
/// `pending` or `queued`): when the expirer next has work. `None` when no
/// run can expire. A time already past is a run another scheduler's pass
/// holds locked, or one made since this pass looked.
pub async fn next_expiry(pool: &PgPool) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT min(expires_at) FROM job_runs
         WHERE status IN ('pending', 'queued') AND started_at IS NULL AND expires_at IS NOT NULL",
    )
    .fetch_one(pool)
    .await
}

/// Each job's execution window and zone, for the jobs that have one.
pub async fn windows_of(
    pool: &PgPool,
    job_ids: &[crate::ids::JobId],
) -> Result<HashMap<crate::ids::JobId, (String, Option<String>)>, sqlx::Error> {
    let rows: Vec<(crate::ids::JobId, String, Option<String>)> = sqlx::query_as(
        "SELECT id, spec->>'execution_window_cron', spec->>'timezone' FROM jobs
         WHERE id = ANY($1) AND spec ? 'execution_window_cron'",
    )
    .bind(job_ids)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(id, w, tz)| (id, (w, tz))).collect())
}

/// Holds due runs until `at` (their window opens): a pending run's
/// scheduled_at, a retrying run's next_retry_at. Returns the ids changed.
pub async fn hold_until(
    pool: &PgPool,
    ids: &[crate::ids::RunId],
    at: DateTime<Utc>,
) -> Result<Vec<crate::ids::RunId>, sqlx::Error> {
    sqlx::query_scalar(
        "UPDATE job_runs SET
            scheduled_at = CASE WHEN status = 'pending' THEN $2 ELSE scheduled_at END,
            next_retry_at = CASE WHEN status = 'retrying' THEN $2 ELSE next_retry_at END
         WHERE id = ANY($1) AND status IN ('pending', 'retrying') AND NOT awaiting_dependencies
         RETURNING id",
    )
    .bind(ids)
    .bind(at)
    .fetch_all(pool)
    .await
}

/// A job with a cron schedule, as the cron loop reads it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct CronJob {
    pub id: crate::ids::JobId,
    pub project_id: String,
    pub spec: Json<JobSpec>,
    pub version: i32,
    pub version_id: String,
    /// Ticks at or before this never fire (see migration 0004).
    pub cron_since: DateTime<Utc>,
    /// The latest tick a run was made for.
    pub last_tick: Option<DateTime<Utc>>,
}

/// Live, enabled, unpaused jobs with a cron schedule, in id order after
/// `after`, at most `limit`.
pub async fn cron_jobs_page(pool: &PgPool, after: &str, limit: i64) -> Result<Vec<CronJob>, sqlx::Error> {
    sqlx::query_as(
        "SELECT j.id, j.project_id, j.spec, j.version, j.version_id, j.cron_since,
            (SELECT max(k.cron_tick) FROM job_run_keys k WHERE k.job_id = j.id AND k.cron_tick IS NOT NULL) AS last_tick
         FROM jobs j
         WHERE j.deleted_at IS NULL AND j.enabled AND NOT j.paused AND j.spec ? 'cron' AND j.id > $1
         ORDER BY j.id LIMIT $2",
    )
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}
