//! Job runs in Postgres.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::types::Json;
use sqlx::{Arguments, PgConnection, PgPool};

use super::deliveries::HookUrl;
use crate::domain::notification::RunEnded;
use crate::domain::{schedule, trigger, RunStatus};
use crate::ids::{BatchId, JobId, RunId, StepRunId};
use crate::queue::Entry;

/// A job run row (the fields `GET /v1/runs/{id}` shows, and the
/// bookkeeping behind them).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Run {
    pub id: RunId,
    pub project_id: String,
    pub job_id: JobId,
    pub job_version: i32,
    pub job_version_id: String,
    /// Read as [`RunStatus`]: a value this build does not know fails the read.
    pub status: RunStatus,
    pub attempt: i32,
    pub priority: i32,
    pub triggered_by: String,
    pub created_by: Option<String>,
    pub payload: Option<Json<Value>>,
    pub result: Option<Json<Value>>,
    pub error: Option<String>,
    pub error_class: Option<String>,
    pub idempotency_key: Option<String>,
    pub concurrency_key: Option<String>,
    pub batch_id: Option<BatchId>,
    pub parent_run_id: Option<String>,
    pub continuation_of: Option<String>,
    pub workflow_step_run_id: Option<StepRunId>,
    pub lineage_depth: i32,
    pub machine_id: Option<String>,
    pub debug_mode: bool,
    pub execution_mode: String,
    pub retry_backoff: Option<String>,
    pub max_attempts_override: Option<i32>,
    pub retry_initial_delay_secs: Option<i32>,
    pub retry_max_delay_secs: Option<i32>,
    pub timeout_secs_override: Option<i32>,
    pub metadata: Json<Value>,
    pub tags: Json<Value>,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub next_retry_at: Option<DateTime<Utc>>,
    pub execution_trace: Option<Json<Value>>,
    pub dispatch_token: i64,
    /// small, medium or large: the machine preset of the last restart.
    pub resource_class: Option<String>,
    /// The last progress reported over the SDK (0 to 1), and its message.
    pub progress: Option<f64>,
    pub progress_message: Option<String>,
    /// When the target took the run asynchronously (HTTP 202): from then on
    /// SDK heartbeats, not a worker's lease, keep it alive. Cleared by a claim.
    pub async_accepted_at: Option<DateTime<Utc>>,
    /// A pending run whose depends_on runs have not all completed: it has no
    /// queue entry until the scheduler's dependency resolver releases it.
    pub awaiting_dependencies: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The trace context the run descends from (`crate::traces`); NULL:
    /// it began its own trace.
    pub traceparent: Option<String>,
}

impl Run {
    /// Where the run sits in its trace.
    pub fn trace(&self) -> crate::traces::Place {
        crate::traces::Place::of(&self.id, self.traceparent.as_deref())
    }

    /// Exports the run's own span, from its creation to now, when it ended
    /// with `status` (`error`: its error) and its trace is recorded.
    pub fn trace_end(&self, status: &str, error: Option<&str>) {
        use crate::traces::{self, Attr, SpanRecord};
        let place = self.trace();
        if !place.recorded() {
            return;
        }
        traces::record(
            SpanRecord::own(
                &place,
                format!("run {}", self.job_id),
                traces::at(self.created_at),
                std::time::SystemTime::now(),
            )
            .attr(Attr::new("switchyard.run_id", self.id.to_string()))
            .attr(Attr::new("switchyard.job_id", self.job_id.to_string()))
            .attr(Attr::new("switchyard.project_id", self.project_id.clone()))
            .attr(Attr::new("switchyard.status", status.to_string()))
            .attr(Attr::new("switchyard.attempts", i64::from(self.attempt)))
            .error(error.filter(|_| status != "completed")),
        );
    }

    /// The run's queue entry (stable for the run's whole life).
    pub fn entry(&self) -> Entry {
        Entry::new(
            &self.id,
            &self.job_id,
            &self.project_id,
            self.priority,
            self.created_at,
            self.concurrency_key.as_deref(),
        )
    }
}

pub const RUN_COLUMNS: &str = "id, project_id, job_id, job_version, job_version_id, status, attempt, priority, \
    triggered_by, created_by, payload, result, error, error_class, idempotency_key, concurrency_key, batch_id, \
    parent_run_id, continuation_of, workflow_step_run_id, lineage_depth, machine_id, debug_mode, execution_mode, \
    retry_backoff, max_attempts_override, retry_initial_delay_secs, retry_max_delay_secs, timeout_secs_override, \
    metadata, tags, scheduled_at, expires_at, started_at, finished_at, heartbeat_at, next_retry_at, \
    execution_trace, dispatch_token, resource_class, progress, progress_message, async_accepted_at, \
    awaiting_dependencies, created_at, updated_at, traceparent";

/// What a trigger asks for; the api fills it after validation.
#[derive(Clone, Debug, Default)]
pub struct NewRun {
    pub id: RunId,
    pub project_id: String,
    pub job_id: JobId,
    pub job_version: i32,
    pub job_version_id: String,
    pub status: RunStatus,
    pub priority: i32,
    pub triggered_by: String,
    pub created_by: Option<String>,
    pub payload: Option<Value>,
    pub idempotency_key: Option<String>,
    pub concurrency_key: Option<String>,
    pub batch_id: Option<BatchId>,
    pub parent_run_id: Option<String>,
    pub lineage_depth: i32,
    pub debug_mode: bool,
    pub execution_mode: String,
    pub retry_backoff: Option<String>,
    pub max_attempts_override: Option<i32>,
    pub retry_initial_delay_secs: Option<i32>,
    pub retry_max_delay_secs: Option<i32>,
    pub timeout_secs_override: Option<i32>,
    pub metadata: Value,
    pub tags: Value,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// sha256 of the canonical payload, for jobs with a dedup window.
    pub payload_hash: Option<Vec<u8>>,
    /// The cron tick this run was made for (unique per job).
    pub cron_tick: Option<DateTime<Utc>>,
    /// Waits (status pending, no queue entry) for its dependencies.
    pub awaiting_dependencies: bool,
    /// The workflow step this run executes.
    pub workflow_step_run_id: Option<StepRunId>,
    /// small, medium or large (a workflow step may ask for one).
    pub resource_class: Option<String>,
    /// The trace context the run descends from (`crate::traces`): the
    /// trigger request's, or its workflow step's. `None`: the run begins
    /// its own trace.
    pub traceparent: Option<String>,
}

impl NewRun {
    /// Whether the run has a unique key to claim (an idempotency key or a
    /// cron tick): its insert then claims it in `job_run_keys` first. A
    /// workflow step's job run keeps its key (`<step run>:<attempt>`) as a
    /// record but claims nothing: the engine starts a step only under its
    /// run's lock, by moving the step's own row to the next attempt, so a
    /// second job run for one attempt cannot be made, and the claim cost
    /// about a quarter of the step's insert.
    pub fn claims_a_key(&self) -> bool {
        (self.idempotency_key.is_some() && self.workflow_step_run_id.is_none()) || self.cron_tick.is_some()
    }

    /// The run a trigger of `job` makes once it passed its checks
    /// (`valid`) and was admitted: the request's fields, the job's default
    /// metadata under the request's own, `pending` while it awaits
    /// dependencies. The one place both triggers build it: the api's and an
    /// event source's fired by a workflow step's event.
    pub fn triggered(
        job: &super::JobRecord,
        req: trigger::Request,
        valid: &trigger::Validated,
        admitted: &schedule::Admission,
        triggered_by: &str,
        created_by: Option<String>,
        batch_id: Option<BatchId>,
    ) -> NewRun {
        let spec = &job.spec.0;
        let mut metadata: serde_json::Map<String, Value> =
            spec.default_run_metadata.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        for (k, v) in req.metadata.unwrap_or_default() {
            metadata.insert(k, Value::String(v));
        }
        NewRun {
            id: crate::ids::run_id(),
            project_id: job.project_id.clone(),
            job_id: job.id.clone(),
            job_version: job.version,
            job_version_id: job.version_id.clone(),
            status: admitted.status,
            priority: valid.priority,
            triggered_by: triggered_by.into(),
            created_by,
            payload: req.payload,
            idempotency_key: req.idempotency_key,
            concurrency_key: req.concurrency_key,
            batch_id,
            parent_run_id: req.parent_run_id,
            lineage_depth: valid.lineage_depth,
            debug_mode: req.debug_mode.unwrap_or(false),
            execution_mode: valid.execution_mode.as_str().into(),
            retry_backoff: req.retry_backoff,
            max_attempts_override: valid.max_attempts_override,
            retry_initial_delay_secs: valid.retry_initial_delay_secs,
            retry_max_delay_secs: valid.retry_max_delay_secs,
            timeout_secs_override: valid.timeout_secs_override,
            metadata: Value::Object(metadata),
            tags: serde_json::to_value(req.tags.unwrap_or_default()).unwrap_or_default(),
            scheduled_at: admitted.scheduled_at,
            expires_at: admitted.expires_at,
            awaiting_dependencies: !valid.depends_on.is_empty() && !valid.dependencies_met,
            // Triggered while the api serves a request: a child of its span.
            traceparent: crate::traces::request::current(),
            ..NewRun::default()
        }
    }
}

/// Inserts a run (with its creation event when it starts `pending`; a
/// `queued` run's creation is read from its row, see migration 0008).
/// When the idempotency key (or the cron tick) is taken, returns the
/// existing run and `false`.
pub async fn insert(pool: &PgPool, r: &NewRun) -> Result<(Run, bool), sqlx::Error> {
    let mut conn = pool.acquire().await?;
    insert_in(&mut conn, r).await
}

/// [`insert`] on a given connection, so that it can be part of a
/// transaction (payload dedup and dependencies, see [`flow::create`](super::flow::create)).
pub async fn insert_in(conn: &mut sqlx::PgConnection, r: &NewRun) -> Result<(Run, bool), sqlx::Error> {
    let inserted: Option<Run> = sqlx::query_as(&INSERT_ONE_SQL[r.claims_a_key() as usize])
        .bind(&r.id)
        .bind(&r.project_id)
        .bind(&r.job_id)
        .bind(r.job_version)
        .bind(&r.job_version_id)
        .bind(r.status)
        .bind(r.priority)
        .bind(&r.triggered_by)
        .bind(&r.created_by)
        .bind(r.payload.as_ref().map(Json))
        .bind(&r.idempotency_key)
        .bind(&r.concurrency_key)
        .bind(&r.batch_id)
        .bind(&r.parent_run_id)
        .bind(r.lineage_depth)
        .bind(r.debug_mode)
        .bind(&r.execution_mode)
        .bind(&r.retry_backoff)
        .bind(r.max_attempts_override)
        .bind(r.retry_initial_delay_secs)
        .bind(r.retry_max_delay_secs)
        .bind(r.timeout_secs_override)
        .bind(Json(&r.metadata))
        .bind(Json(&r.tags))
        .bind(r.scheduled_at)
        .bind(r.expires_at)
        .bind(&r.payload_hash)
        .bind(r.cron_tick)
        .bind(r.awaiting_dependencies)
        .bind(&r.workflow_step_run_id)
        .bind(&r.resource_class)
        .bind(&r.traceparent)
        .fetch_optional(&mut *conn)
        .await?;
    if let Some(run) = inserted {
        crate::telemetry::transition(r.job_id.as_str(), None, r.status.as_str());
        return Ok((run, true));
    }
    // Only the unique keys a caller chose can conflict (ids are fresh):
    // the idempotency key, else the cron tick.
    let existing: Run = sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM job_runs WHERE id = (
            SELECT run_id FROM job_run_keys
             WHERE job_id = $1 AND (($2::text IS NOT NULL AND idempotency_key = $2)
                OR ($2::text IS NULL AND cron_tick = $3)))"
    ))
    .bind(&r.job_id)
    .bind(&r.idempotency_key)
    .bind(r.cron_tick)
    .fetch_one(&mut *conn)
    .await?;
    Ok((existing, false))
}

/// [`insert`] for many runs in one statement: the api group-commits its
/// triggers, so a busy api pays one transaction per batch instead of one per
/// trigger. Returns, in input order, `(run, created)`. A run whose
/// idempotency key or cron tick is taken goes through [`insert`] on its own,
/// which returns the run that holds it.
pub async fn insert_many(pool: &PgPool, runs: &[NewRun]) -> Result<Vec<(Run, bool)>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    insert_many_in(&mut conn, runs).await
}

/// [`insert_many`] on a given connection, so that it can be part of a
/// transaction (the steps a workflow run starts together).
pub async fn insert_many_in(conn: &mut sqlx::PgConnection, runs: &[NewRun]) -> Result<Vec<(Run, bool)>, sqlx::Error> {
    let created_at = insert_time();
    let mut args = PgArguments::default();
    new_run_args(&mut args, runs, created_at).map_err(sqlx::Error::Encode)?;
    let keyed = runs.iter().any(NewRun::claims_a_key);
    let inserted: Vec<String> =
        sqlx::query_scalar_with(&INSERT_MANY_SQL[keyed as usize], args).fetch_all(&mut *conn).await?;
    inserted_runs(conn, runs, inserted, created_at).await
}

/// The `created_at` of runs inserted now: Postgres keeps microseconds, and
/// the run returned must read as it is stored.
pub(super) fn insert_time() -> DateTime<Utc> {
    chrono::SubsecRound::trunc_subsecs(Utc::now(), 6)
}

/// The parameters `$1..$32` of [`insert_many_in`]'s statement (and of
/// [`insert_many_then`]'s).
pub(super) fn new_run_args(
    args: &mut PgArguments,
    runs: &[NewRun],
    created_at: DateTime<Utc>,
) -> Result<(), sqlx::error::BoxDynError> {
    macro_rules! col {
        ($f:expr) => {
            runs.iter().map($f).collect::<Vec<_>>()
        };
    }
    args.add(col!(|r| r.id.as_str()))?;
    args.add(col!(|r| r.project_id.as_str()))?;
    args.add(col!(|r| r.job_id.as_str()))?;
    args.add(col!(|r| r.job_version))?;
    args.add(col!(|r| r.job_version_id.as_str()))?;
    args.add(col!(|r| r.status))?;
    args.add(col!(|r| r.priority))?;
    args.add(col!(|r| r.triggered_by.as_str()))?;
    args.add(col!(|r| r.created_by.as_deref()))?;
    args.add(col!(|r| r.payload.as_ref().map(Json)))?;
    args.add(col!(|r| r.idempotency_key.as_deref()))?;
    args.add(col!(|r| r.concurrency_key.as_deref()))?;
    args.add(col!(|r| r.batch_id.as_deref()))?;
    args.add(col!(|r| r.parent_run_id.as_deref()))?;
    args.add(col!(|r| r.lineage_depth))?;
    args.add(col!(|r| r.debug_mode))?;
    args.add(col!(|r| r.execution_mode.as_str()))?;
    args.add(col!(|r| r.retry_backoff.as_deref()))?;
    args.add(col!(|r| r.max_attempts_override))?;
    args.add(col!(|r| r.retry_initial_delay_secs))?;
    args.add(col!(|r| r.retry_max_delay_secs))?;
    args.add(col!(|r| r.timeout_secs_override))?;
    args.add(col!(|r| Json(&r.metadata)))?;
    args.add(col!(|r| Json(&r.tags)))?;
    args.add(col!(|r| r.scheduled_at))?;
    args.add(col!(|r| r.expires_at))?;
    args.add(col!(|r| r.payload_hash.as_deref()))?;
    args.add(col!(|r| r.cron_tick))?;
    args.add(col!(|r| r.awaiting_dependencies))?;
    args.add(created_at)?;
    args.add(col!(|r| r.workflow_step_run_id.as_deref()))?;
    args.add(col!(|r| r.resource_class.as_deref()))?;
    args.add(col!(|r| r.traceparent.as_deref()))?;
    Ok(())
}

/// The parameters [`new_run_args`] binds.
pub(super) const NEW_RUN_PARAMS: usize = 33;

/// [`insert_many_in`]'s statement for runs that claim no key, with more
/// CTEs after its own (`more`, its parameters numbered after
/// [`NEW_RUN_PARAMS`]) and `select` as its answer: for a
/// caller that writes other rows in the same round trip. `ins` holds the
/// inserted runs' `id`s.
pub(super) fn insert_many_then(more: &str, select: &str) -> String {
    let sql = insert_many_sql(false);
    let (ctes, _) = sql.rsplit_once("SELECT id FROM ins").expect("the insert ends with its answer");
    format!("{ctes}, {more}\n SELECT {select}")
}

/// `(run, created)` of each of `runs`, in input order, from the ids the
/// insert returned. A run not among them claimed a key another run holds:
/// [`insert_in`] returns that run.
pub(super) async fn inserted_runs(
    conn: &mut PgConnection,
    runs: &[NewRun],
    inserted: Vec<String>,
    created_at: DateTime<Utc>,
) -> Result<Vec<(Run, bool)>, sqlx::Error> {
    let inserted: std::collections::HashSet<RunId> = inserted.into_iter().map(RunId::from).collect();
    let mut out = Vec::with_capacity(runs.len());
    for r in runs {
        if inserted.contains(&r.id) {
            crate::telemetry::transition(r.job_id.as_str(), None, r.status.as_str());
            out.push((Run::from_new(r.clone(), created_at), true));
        } else {
            out.push(insert_in(conn, r).await?);
        }
    }
    Ok(out)
}

/// The columns a trigger writes, in the order of both inserts' parameters
/// ($1..$29, then $31..$33 in the batch insert, whose $30 is created_at).
const INSERTED_COLUMNS: &str = "id, project_id, job_id, job_version, job_version_id, status, priority, \
     triggered_by, created_by, payload, idempotency_key, concurrency_key, batch_id, parent_run_id, lineage_depth, \
     debug_mode, execution_mode, retry_backoff, max_attempts_override, retry_initial_delay_secs, \
     retry_max_delay_secs, timeout_secs_override, metadata, tags, scheduled_at, expires_at, payload_hash, cron_tick, \
     awaiting_dependencies, workflow_step_run_id, resource_class, traceparent";

/// The insert statements, built once: a run (or a batch) without an
/// idempotency key or cron tick skips the claim entirely.
static INSERT_ONE_SQL: LazyLock<[String; 2]> = LazyLock::new(|| [insert_one_sql(false), insert_one_sql(true)]);
static INSERT_MANY_SQL: LazyLock<[String; 2]> = LazyLock::new(|| [insert_many_sql(false), insert_many_sql(true)]);

/// [`insert_in`]'s statement, without (`false`) or with the key claim.
fn insert_one_sql(keyed: bool) -> String {
    // A run with an idempotency key or a cron tick is written only if its
    // key is claimed in the same statement (migration 0019: job_runs is
    // partitioned, so the keys' uniqueness lives in job_run_keys).
    let (claim, claimed) = if keyed {
        (
            "claim AS (
                INSERT INTO job_run_keys (run_id, job_id, idempotency_key, cron_tick) VALUES ($1, $3, $11, $28)
                ON CONFLICT DO NOTHING
                RETURNING run_id
            ),",
            "WHERE EXISTS (SELECT 1 FROM claim)",
        )
    } else {
        ("", "")
    };
    format!(
        "WITH {claim} ins AS (
            INSERT INTO job_runs ({INSERTED_COLUMNS})
            SELECT $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25,$26,
                $27,$28,$29,$30,$31,$32 {claimed}
            RETURNING {RUN_COLUMNS}
        ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, NULL, status, 0, 'triggered' FROM ins WHERE status <> 'queued'
        ), {streamed}
        SELECT {RUN_COLUMNS} FROM ins",
        streamed = super::streams::log_runs_cte("streamed", "ins")
    )
}

/// [`insert_many_in`]'s statement, without (`false`) or with the key claim.
fn insert_many_sql(keyed: bool) -> String {
    // Runs with an idempotency key or a cron tick are written only if their
    // key is claimed in the same statement (see insert_in).
    let (claim, claimed) = if keyed {
        (
            "claim AS (
                INSERT INTO job_run_keys (run_id, job_id, idempotency_key, cron_tick)
                SELECT * FROM UNNEST($1::text[], $3::text[], $11::text[], $28::timestamptz[]) AS k(id, job, key, tick)
                 WHERE key IS NOT NULL OR tick IS NOT NULL
                ON CONFLICT DO NOTHING
                RETURNING run_id
            ),",
            "WHERE (t.key IS NULL AND t.tick IS NULL) OR t.id IN (SELECT run_id FROM claim)",
        )
    } else {
        ("", "")
    };
    format!(
        "WITH {claim} ins AS (
            INSERT INTO job_runs ({INSERTED_COLUMNS}, created_at, updated_at)
            SELECT t.*, $30, $30 FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int4[], $5::text[], $6::text[],
                $7::int4[], $8::text[], $9::text[], $10::jsonb[], $11::text[], $12::text[], $13::text[], $14::text[],
                $15::int4[], $16::bool[], $17::text[], $18::text[], $19::int4[], $20::int4[], $21::int4[], $22::int4[],
                $23::jsonb[], $24::jsonb[], $25::timestamptz[], $26::timestamptz[], $27::bytea[], $28::timestamptz[],
                $29::bool[], $31::text[], $32::text[], $33::text[])
                AS t(id, project, job, version, version_id, status, priority, triggered_by, created_by, payload, key,
                     concurrency_key, batch_id, parent, depth, debug, mode, backoff, max_attempts, initial_delay,
                     max_delay, timeout, metadata, tags, scheduled_at, expires_at, payload_hash, tick, awaiting,
                     step_run, resource_class, traceparent)
            {claimed}
            RETURNING id, status, project_id, job_id
        ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason, created_at)
            SELECT id, NULL, status, 0, 'triggered', $30 FROM ins WHERE status <> 'queued'
        ), {streamed}
        SELECT id FROM ins",
        streamed = super::streams::log_runs_cte("streamed", "ins")
    )
}

impl Run {
    /// The row [`insert_many`] writes for `r`: what the trigger gave, and
    /// the table's defaults for the rest (so the insert need not return it).
    pub fn from_new(r: NewRun, created_at: DateTime<Utc>) -> Run {
        Run {
            id: r.id,
            project_id: r.project_id,
            job_id: r.job_id,
            job_version: r.job_version,
            job_version_id: r.job_version_id,
            status: r.status,
            attempt: 0,
            priority: r.priority,
            triggered_by: r.triggered_by,
            created_by: r.created_by,
            payload: r.payload.map(Json),
            result: None,
            error: None,
            error_class: None,
            idempotency_key: r.idempotency_key,
            concurrency_key: r.concurrency_key,
            batch_id: r.batch_id,
            parent_run_id: r.parent_run_id,
            continuation_of: None,
            workflow_step_run_id: r.workflow_step_run_id,
            lineage_depth: r.lineage_depth,
            machine_id: None,
            debug_mode: r.debug_mode,
            execution_mode: r.execution_mode,
            retry_backoff: r.retry_backoff,
            max_attempts_override: r.max_attempts_override,
            retry_initial_delay_secs: r.retry_initial_delay_secs,
            retry_max_delay_secs: r.retry_max_delay_secs,
            timeout_secs_override: r.timeout_secs_override,
            metadata: Json(r.metadata),
            tags: Json(r.tags),
            scheduled_at: r.scheduled_at,
            expires_at: r.expires_at,
            started_at: None,
            finished_at: None,
            heartbeat_at: None,
            next_retry_at: None,
            execution_trace: None,
            dispatch_token: 0,
            resource_class: r.resource_class,
            progress: None,
            progress_message: None,
            async_accepted_at: None,
            awaiting_dependencies: r.awaiting_dependencies,
            created_at,
            updated_at: created_at,
            traceparent: r.traceparent,
        }
    }
}

pub async fn get(pool: &PgPool, id: &RunId) -> Result<Option<Run>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {RUN_COLUMNS} FROM job_runs WHERE id = $1")).bind(id).fetch_optional(pool).await
}

/// Marks a queued run running on its next attempt under the next dispatch
/// token, as a dispatch that has been out a while is marked (see
/// [`load_for_dispatch`]); `None` when the run is not queued. Workers do not
/// call this; tests use it to put a run where a dispatch would.
pub async fn claim(pool: &PgPool, run_id: &RunId) -> Result<Option<Run>, sqlx::Error> {
    let Some(run) = get(pool, run_id).await?.filter(|r| r.status == RunStatus::Queued) else { return Ok(None) };
    if !mark_running_for_attempt(pool, run_id, run.attempt + 1).await? {
        return Ok(None);
    }
    get(pool, run_id).await
}

/// The result of one dispatch attempt, as the worker records it.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// completed, failed, timed_out or retrying.
    pub status: RunStatus,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub error_class: Option<String>,
    pub status_code: Option<i32>,
    pub endpoint_url: String,
    pub next_retry_at: Option<DateTime<Utc>>,
    pub attempt_started_at: DateTime<Utc>,
    pub trace: Value,
    /// The job's webhook_url, when it has one: a terminal outcome then
    /// writes the run's webhook delivery in the statement that records it.
    pub webhook_url: Option<String>,
    /// The run's job and project, and the attempt this outcome ends (the
    /// run's attempt once it is recorded): what a terminal outcome's
    /// notifications name, built before the statement that records it
    /// (`domain::notification`). Not written.
    pub job_id: JobId,
    pub project_id: String,
    pub attempt: i32,
    /// The workflow step the run is the job run of: its workflow run moves
    /// on in the transaction that records a terminal outcome
    /// (`store::step_outcomes`). Not written.
    pub workflow_step_run_id: Option<StepRunId>,
}

/// Records an attempt's outcome if the caller still holds the run (same
/// dispatch token, still running). Returns whether it was recorded.
pub async fn finish_attempt(pool: &PgPool, run_id: &RunId, token: i64, o: &Outcome) -> Result<bool, sqlx::Error> {
    Ok(finish_many(pool, vec![(run_id.clone(), token, o.clone())]).await?.pop().unwrap_or(false))
}

/// [`finish_attempt`] for many outcomes in one statement (group-committed
/// by the worker). Returns, in input order, whether each was recorded.
///
/// `token` is the dispatch token of the attempt. The worker does not write
/// `running` before it dispatches (see [`load_for_dispatch`]): it takes the
/// run in memory with the next token, so the row it finishes is either
/// still `queued` under the token before (nobody marked it) or `running`
/// under this token (the worker's lazy mark, an SDK call, a 202). Anything
/// else means the run moved on (cancelled, finished, or redelivered after a
/// lost lease) and the outcome is dropped. The attempt row written here is
/// also the attempt's `queued -> running` and `running -> outcome`
/// transitions: `job_run_transitions` (migration 0008) reads them from it.
pub async fn finish_many(pool: &PgPool, items: Vec<(RunId, i64, Outcome)>) -> Result<Vec<bool>, sqlx::Error> {
    finish_many_in(&mut *pool.acquire().await?, items).await
}

/// [`finish_many_in`]'s statement: the outcomes ($1-$12), and the
/// notifications of the terminal ones ($13-$19), written for the runs it
/// records, all in one round trip per batch.
///
/// Written so that the ids are the only thing an index can look up (see
/// `db::worker_pool`): `r.id = ANY($1)` besides the join, and the fence as
/// a CASE, from which the planner derives no condition on `status`. Given
/// one, a plan made while the table was new used it to hash the batch
/// against every active run, at a cost that grew with the table (2,600
/// buffer reads per batch of 14 in the benchmark).
static FINISH_MANY_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH input AS (
            SELECT * FROM UNNEST($1::text[], $2::int8[], $3::text[], $4::jsonb[], $5::text[], $6::text[],
                $7::timestamptz[], $8::jsonb[], $9::bool[], $10::int4[], $11::text[], $12::timestamptz[])
              AS t(id, token, status, result, error, error_class, next_retry_at, trace, terminal,
                   status_code, endpoint_url, started_at)
        ), u AS (
            UPDATE job_runs r SET status = i.status, result = i.result, error = i.error,
                error_class = i.error_class, next_retry_at = i.next_retry_at, execution_trace = i.trace,
                finished_at = CASE WHEN i.terminal THEN now() ELSE NULL END,
                attempt = CASE WHEN r.status = 'queued' THEN r.attempt + 1 ELSE r.attempt END,
                started_at = CASE WHEN r.status = 'queued' THEN i.started_at ELSE r.started_at END,
                async_accepted_at = CASE WHEN r.status = 'queued' THEN NULL ELSE r.async_accepted_at END,
                dispatch_token = i.token
            FROM input i
            WHERE r.id = ANY($1) AND r.id = i.id
              AND CASE r.status WHEN 'queued' THEN r.dispatch_token = i.token - 1
                                WHEN 'running' THEN r.dispatch_token = i.token END
            RETURNING r.id, r.attempt, i.status, i.error, i.status_code, i.endpoint_url, i.started_at, i.trace,
                r.project_id, r.job_id
        ), a AS (
            INSERT INTO job_run_attempts (run_id, attempt, outcome, status_code, error, endpoint_url,
                started_at, finished_at, trace)
            SELECT id, attempt, status, status_code, error, endpoint_url, started_at, now(), trace FROM u
        ), {}, {}
        SELECT id, status, job_id FROM u",
        super::streams::log_runs_cte("streamed", "u"),
        super::deliveries::runs_ended_ctes(13, Some("SELECT id FROM u"), false)
    )
});

/// [`finish_many`] in the caller's transaction (see `store::step_outcomes`).
pub async fn finish_many_in(
    conn: &mut PgConnection,
    items: Vec<(RunId, i64, Outcome)>,
) -> Result<Vec<bool>, sqlx::Error> {
    let n = items.len();
    let mut ids = Vec::with_capacity(n);
    let mut tokens = Vec::with_capacity(n);
    let mut statuses = Vec::with_capacity(n);
    let mut results: Vec<Option<Json<Value>>> = Vec::with_capacity(n);
    let mut errors = Vec::with_capacity(n);
    let mut classes = Vec::with_capacity(n);
    let mut retry_ats = Vec::with_capacity(n);
    let mut traces = Vec::with_capacity(n);
    let mut terminals = Vec::with_capacity(n);
    let mut codes = Vec::with_capacity(n);
    let mut urls = Vec::with_capacity(n);
    let mut starts = Vec::with_capacity(n);
    // The notifications of the terminal outcomes, built here and written
    // by the statement for the runs it records (`deliveries::RunsEnded`).
    let at = Utc::now();
    let mut ended = super::deliveries::RunsEnded::default();
    for (id, token, o) in items {
        if o.status.is_terminal() {
            let run = RunEnded {
                run_id: id.clone(),
                job_id: o.job_id,
                status: o.status.as_str().to_string(),
                attempt: o.attempt,
                result: o.result.clone(),
                error: o.error.clone(),
            };
            let hook = match o.webhook_url.as_deref().filter(|u| !u.is_empty()) {
                Some(url) => HookUrl::Known(url),
                None => HookUrl::Absent,
            };
            ended.push(&o.project_id, run, hook, at);
        }
        ids.push(id);
        tokens.push(token);
        statuses.push(o.status.as_str());
        results.push(o.result.map(Json));
        errors.push(o.error);
        classes.push(o.error_class);
        retry_ats.push(o.next_retry_at);
        traces.push(Json(o.trace));
        terminals.push(o.status.is_terminal());
        codes.push(o.status_code);
        urls.push(o.endpoint_url);
        starts.push(o.attempt_started_at);
    }
    let q = sqlx::query_as(&FINISH_MANY_SQL)
        .bind(&ids)
        .bind(&tokens)
        .bind(&statuses)
        .bind(&results)
        .bind(&errors)
        .bind(&classes)
        .bind(&retry_ats)
        .bind(&traces)
        .bind(&terminals)
        .bind(&codes)
        .bind(&urls)
        .bind(&starts);
    let recorded: Vec<(RunId, String, String)> = ended.bind(q).fetch_all(conn).await?;
    let done: std::collections::HashSet<RunId> = recorded
        .into_iter()
        .map(|(id, status, job_id)| {
            crate::telemetry::transition(&job_id, Some("running"), &status);
            id
        })
        .collect();
    Ok(ids.iter().map(|id| done.contains(id)).collect())
}

/// A queued run read for dispatch, with what the dispatch needs besides
/// the job's definition, all in one statement per batch.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub run: Run,
    /// The data of the run's latest checkpoint, if any.
    pub checkpoint: Option<Value>,
    /// The job's secrets, sealed.
    pub secrets: Vec<super::secrets::StoredSecret>,
    /// The job's current version (for jobs that run their latest
    /// definition); `None` when the job row is gone.
    pub current_version_id: Option<String>,
    /// The job's webhook_secret as its row holds it (sealed, or plaintext
    /// from before sealing): versions never hold it, so it is read with
    /// the run, like the job's secrets.
    pub webhook_secret: Option<String>,
    /// The run was not started before its `expires_at`.
    pub expired: bool,
}

/// Reads queued runs for dispatch. Nothing is written: the `queued ->
/// running` transition is recorded lazily, with the outcome (see
/// [`finish_many`]) or by [`mark_running_many`] when an attempt runs long.
/// A worker that dies before recording anything leaves a lease that lapses
/// and a run that is still `queued`: a redelivery, never a lost run.
/// Results come back in the order of `ids`; `None` for a run that is not
/// queued any more (cancelled, finished, taken).
pub async fn load_for_dispatch(pool: &PgPool, ids: Vec<RunId>) -> Result<Vec<Option<Loaded>>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        run: Run,
        checkpoint: Option<Json<Value>>,
        secrets: Option<Json<Vec<(String, String, String)>>>,
        current_version_id: Option<String>,
        webhook_secret: Option<String>,
        expired: bool,
    }
    // bytea goes through JSON as hex: one row per run, one trip per batch.
    // OFFSET 0 keeps `status` out of the scan, so the ids are all an index
    // can look up (see `db::worker_pool`).
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT q.*,
            (SELECT data FROM job_run_checkpoints c WHERE c.run_id = q.id ORDER BY c.id DESC LIMIT 1) AS checkpoint,
            (SELECT json_agg(json_build_array(name, encode(nonce, 'hex'), encode(ciphertext, 'hex')) ORDER BY name)
               FROM job_secrets s WHERE s.job_id = q.job_id) AS secrets,
            (SELECT version_id FROM jobs j WHERE j.id = q.job_id) AS current_version_id,
            (SELECT j.spec->>'webhook_secret' FROM jobs j WHERE j.id = q.job_id) AS webhook_secret,
            (q.expires_at IS NOT NULL AND q.expires_at <= now() AND q.started_at IS NULL) AS expired
         FROM (SELECT {RUN_COLUMNS} FROM job_runs WHERE id = ANY($1) OFFSET 0) q
         WHERE q.status = 'queued'"
    ))
    .bind(&ids)
    .fetch_all(pool)
    .await?;
    let mut by_id: std::collections::HashMap<RunId, Row> = rows.into_iter().map(|r| (r.run.id.clone(), r)).collect();
    Ok(ids
        .iter()
        .map(|id| {
            by_id.remove(id).map(|r| Loaded {
                run: r.run,
                checkpoint: r.checkpoint.map(|c| c.0),
                secrets: super::secrets::unseal_rows(r.secrets.map(|s| s.0).unwrap_or_default()),
                current_version_id: r.current_version_id,
                webhook_secret: r.webhook_secret,
                expired: r.expired,
            })
        })
        .collect())
}

impl Run {
    /// The run as its next dispatch holds it: running, on the next attempt,
    /// under the next dispatch token. Only in memory; see [`load_for_dispatch`].
    pub fn taken_for_dispatch(mut self, now: DateTime<Utc>) -> Run {
        self.status = RunStatus::Running;
        self.attempt += 1;
        self.dispatch_token += 1;
        self.started_at = Some(now);
        self.heartbeat_at = Some(now);
        self.next_retry_at = None;
        self.async_accepted_at = None;
        self
    }
}

/// Records `queued -> running` for attempts still in flight a while after
/// they were sent, so that a long attempt shows as running. Each item is
/// (run id, the attempt's dispatch token, when it started); fenced like
/// [`finish_many`]. Returns, in input order, whether each was marked.
pub async fn mark_running_many(
    pool: &PgPool,
    items: Vec<(RunId, i64, DateTime<Utc>)>,
) -> Result<Vec<bool>, sqlx::Error> {
    let ids: Vec<RunId> = items.iter().map(|i| i.0.clone()).collect();
    let tokens: Vec<i64> = items.iter().map(|i| i.1).collect();
    let starts: Vec<DateTime<Utc>> = items.iter().map(|i| i.2).collect();
    let marked: Vec<RunId> =
        sqlx::query_scalar(&MARK_RUNNING_MANY_SQL).bind(&ids).bind(&tokens).bind(&starts).fetch_all(pool).await?;
    let marked: std::collections::HashSet<RunId> = marked.into_iter().collect();
    Ok(ids.iter().map(|id| marked.contains(id)).collect())
}

/// [`mark_running_many`]'s statement, built once.
static MARK_RUNNING_MANY_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH input AS (
            SELECT * FROM UNNEST($1::text[], $2::int8[], $3::timestamptz[]) AS t(id, token, started_at)
        ), u AS (
            UPDATE job_runs r SET status = 'running', attempt = r.attempt + 1, dispatch_token = i.token,
                started_at = i.started_at, heartbeat_at = now(), next_retry_at = NULL, async_accepted_at = NULL
            FROM input i
            -- Shaped like finish_many's fence, for the same reason.
            WHERE r.id = ANY($1) AND r.id = i.id
              AND CASE r.status WHEN 'queued' THEN r.dispatch_token = i.token - 1 END
            RETURNING r.id, r.attempt, i.started_at, r.project_id, r.job_id, r.status
        ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason, created_at)
            SELECT id, 'queued', 'running', attempt, NULL, started_at FROM u
        ), {}
        SELECT id FROM u",
        super::streams::log_runs_cte("streamed", "u")
    )
});

/// Records `queued -> running` for the attempt a run token was minted for,
/// when an SDK call arrives before the worker wrote it (see
/// [`load_for_dispatch`]): the worker took the run with the next token, so
/// this takes the same one. True when the run is now running on `attempt`.
pub async fn mark_running_for_attempt(pool: &PgPool, run_id: &RunId, attempt: i32) -> Result<bool, sqlx::Error> {
    let row: Option<i32> = sqlx::query_scalar(&format!(
        "WITH u AS (
            UPDATE job_runs SET status = 'running', attempt = attempt + 1, dispatch_token = dispatch_token + 1,
                started_at = now(), heartbeat_at = now(), next_retry_at = NULL, async_accepted_at = NULL
            WHERE id = $1 AND status = 'queued' AND attempt = $2 - 1
            RETURNING id, attempt, project_id, job_id, status
        ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, 'queued', 'running', attempt, NULL FROM u
        ), {}
        SELECT attempt FROM u",
        super::streams::log_runs_cte("streamed", "u")
    ))
    .bind(run_id)
    .bind(attempt)
    .fetch_optional(pool)
    .await?;
    Ok(row.is_some())
}

/// Marks runs that were not started before their `expires_at` (found by
/// [`load_for_dispatch`]) `expired`, with their notifications, in one
/// transaction. Returns how many it marked.
pub async fn expire_unstarted(pool: &PgPool, ids: &[RunId]) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let expired: Vec<Run> = sqlx::query_as(&format!(
        "WITH u AS (
            UPDATE job_runs SET status = 'expired', finished_at = now(), next_retry_at = NULL,
                error = 'not started within the job''s run_ttl_secs', error_class = 'expired'
            WHERE id = ANY($1) AND status = 'queued' AND started_at IS NULL
              AND expires_at IS NOT NULL AND expires_at <= now()
            RETURNING *
        ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, 'queued', 'expired', attempt, 'not started before expires_at' FROM u
        ), {streamed}
        SELECT {RUN_COLUMNS} FROM u",
        streamed = super::streams::log_runs_cte("streamed", "u")
    ))
    .bind(ids)
    .fetch_all(&mut *tx)
    .await?;
    super::deliveries::runs_ended(&mut tx, &expired).await?;
    tx.commit().await?;
    for r in &expired {
        crate::telemetry::transition(r.job_id.as_str(), Some("queued"), "expired");
    }
    Ok(expired.len() as u64)
}

/// Moves runs whose time has come from `retrying` or `pending` (a delay) to
/// `queued`, just before their entries move to `ready`. Returns the ids moved.
/// A debounced run whose window a trigger moved on since its entry fell due
/// stays (`one_per_key`): the check is made under the row's lock, which the
/// trigger that moves the window also takes.
pub async fn mark_due_queued(pool: &PgPool, ids: &[RunId]) -> Result<Vec<RunId>, sqlx::Error> {
    let moved: Vec<(RunId, String, String)> = sqlx::query_as(&format!(
        "WITH old AS (
            SELECT id, status FROM job_runs WHERE id = ANY($1) AND status IN ('retrying', 'pending')
               AND NOT (debounce_key IS NOT NULL AND status = 'pending' AND scheduled_at > now()) FOR UPDATE
        ), u AS (
            UPDATE job_runs r SET status = 'queued' FROM old WHERE r.id = old.id
            RETURNING r.id, old.status, r.attempt, r.project_id, r.job_id
        ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, status, 'queued', attempt, 'due' FROM u
        ), {}
        SELECT id, status, job_id FROM u",
        super::streams::log_runs_cte("streamed", "(SELECT id, project_id, job_id, 'queued' AS status FROM u)")
    ))
    .bind(ids)
    .fetch_all(pool)
    .await?;
    for (_, from, job_id) in &moved {
        crate::telemetry::transition(job_id, Some(from), "queued");
    }
    Ok(moved.into_iter().map(|(id, _, _)| id).collect())
}

/// A run whose worker vanished: `running -> queued` for a redelivery of the
/// same attempt (the attempt number is stepped back so the next claim lands
/// on it again and the target sees the same idempotency key). Returns the
/// run if it was still running.
pub async fn requeue_lost(pool: &PgPool, run_id: &RunId) -> Result<Option<Run>, sqlx::Error> {
    let sql = format!(
        "WITH u AS (
            UPDATE job_runs SET status = 'queued', attempt = GREATEST(attempt - 1, 0)
            WHERE id = $1 AND status = 'running'
            RETURNING {RUN_COLUMNS}
        ), ev AS (
            INSERT INTO job_run_events (run_id, from_status, to_status, attempt, reason)
            SELECT id, 'running', 'queued', attempt + 1, 'lease expired; redelivering the attempt' FROM u
        ), {streamed}
        SELECT {RUN_COLUMNS} FROM u",
        streamed = super::streams::log_runs_cte("streamed", "u")
    );
    let run: Option<Run> = sqlx::query_as(&sql).bind(run_id).fetch_optional(pool).await?;
    if let Some(run) = &run {
        crate::telemetry::transition(run.job_id.as_str(), Some("running"), "queued");
    }
    Ok(run)
}

/// Runs that should have an entry somewhere in Redis, in id order from
/// `after`: queued and due (ready), retrying or delayed (scheduled), running
/// (leased, or lost). Used by the reconciler.
pub async fn active_page(pool: &PgPool, after: &str, limit: i64) -> Result<Vec<Run>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM job_runs
         WHERE status IN ('queued', 'running', 'retrying', 'pending') AND id > $1
         ORDER BY id LIMIT $2"
    ))
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The run's current dispatch token (see `claim`), `None` if it is gone.
pub async fn dispatch_token(pool: &PgPool, run_id: &RunId) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT dispatch_token FROM job_runs WHERE id = $1").bind(run_id).fetch_optional(pool).await
}

/// Which of a project's runs a listing returns; `None` matches any.
#[derive(Clone, Debug, Default)]
pub struct RunFilter<'a> {
    pub project_id: &'a str,
    pub job_id: Option<&'a str>,
    pub status: Option<&'a str>,
    /// A JSON document the payload must contain (jsonb `@>`).
    pub payload_contains: Option<Value>,
    pub batch_id: Option<&'a str>,
    /// Created at or after this time.
    pub created_after: Option<DateTime<Utc>>,
    /// Created before this time.
    pub created_before: Option<DateTime<Utc>>,
}

/// The project's runs matching `f`, newest first, older than `before`.
pub async fn list(pool: &PgPool, f: &RunFilter<'_>, before: Option<&str>, limit: i64) -> Result<Vec<Run>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM job_runs WHERE project_id = $1
           AND ($2::text IS NULL OR job_id = $2) AND ($3::text IS NULL OR status = $3)
           AND ($4::jsonb IS NULL OR payload @> $4) AND ($5::text IS NULL OR batch_id = $5)
           AND ($6::text IS NULL OR id < $6)
           AND ($8::timestamptz IS NULL OR created_at >= $8) AND ($9::timestamptz IS NULL OR created_at < $9)
         ORDER BY id DESC LIMIT $7"
    ))
    .bind(f.project_id)
    .bind(f.job_id)
    .bind(f.status)
    .bind(f.payload_contains.as_ref().map(Json))
    .bind(f.batch_id)
    .bind(before)
    .bind(limit)
    .bind(f.created_after)
    .bind(f.created_before)
    .fetch_all(pool)
    .await
}

/// Ids and tags (for resource policies) of the project's runs (of one job
/// if given) in one of `statuses`, oldest first, at most `limit`.
pub async fn ids_in_statuses(
    pool: &PgPool,
    project_id: &str,
    job_id: Option<&str>,
    statuses: &[RunStatus],
    limit: i64,
) -> Result<Vec<(String, Json<Value>)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, tags FROM job_runs WHERE project_id = $1 AND ($2::text IS NULL OR job_id = $2)
           AND status = ANY($3) ORDER BY id LIMIT $4",
    )
    .bind(project_id)
    .bind(job_id)
    .bind(statuses)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// RUN_COLUMNS prefixed with `r.`, for queries that join.
fn qualified_run_columns() -> String {
    RUN_COLUMNS.split(',').map(|c| format!("r.{}", c.trim())).collect::<Vec<_>>().join(", ")
}

/// Which runs `r` (joined to their job version `v` and live job `j`) are
/// dead-lettered: `failed` or `timed_out` with no attempt left (attempt
/// reached the run's max_attempts, or its retry strategy is `none`), never
/// replayed, of a job not deleted. The listing and the replay share it.
const DEAD_LETTER: &str = "FROM job_runs r
       JOIN job_versions v ON v.id = r.job_version_id
       JOIN jobs j ON j.id = r.job_id AND j.deleted_at IS NULL
     WHERE r.project_id = $1 AND ($2::text IS NULL OR r.job_id = $2)
       AND r.status IN ('failed', 'timed_out')
       AND (r.attempt >= COALESCE(NULLIF(r.max_attempts_override, 0), (v.spec->>'max_attempts')::int, 1)
            OR COALESCE(r.retry_backoff, v.spec->>'retry_strategy') = 'none')
       AND NOT EXISTS (SELECT 1 FROM job_runs c WHERE c.continuation_of = r.id)";

/// The project's dead-lettered runs (of one job if given; [`DEAD_LETTER`]),
/// newest first, older than `before`, at most `limit`.
pub async fn dead_letters(
    pool: &PgPool,
    project_id: &str,
    job_id: Option<&str>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<Run>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {} {DEAD_LETTER} AND ($3::text IS NULL OR r.id < $3) ORDER BY r.id DESC LIMIT $4",
        qualified_run_columns()
    ))
    .bind(project_id)
    .bind(job_id)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The project's dead-lettered runs (of one job if given; [`DEAD_LETTER`]),
/// oldest first, at most `limit`, locked until `conn`'s transaction ends
/// (rows another transaction holds are skipped).
pub async fn lock_dead_letters(
    conn: &mut sqlx::PgConnection,
    project_id: &str,
    job_id: Option<&str>,
    limit: i64,
) -> Result<Vec<Run>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {} {DEAD_LETTER} ORDER BY r.id LIMIT $3 FOR UPDATE OF r SKIP LOCKED",
        qualified_run_columns()
    ))
    .bind(project_id)
    .bind(job_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The current status of each of `ids` that exists.
pub async fn statuses(pool: &PgPool, ids: &[RunId]) -> Result<std::collections::HashMap<RunId, String>, sqlx::Error> {
    let rows: Vec<(RunId, String)> =
        sqlx::query_as("SELECT id, status FROM job_runs WHERE id = ANY($1)").bind(ids).fetch_all(pool).await?;
    Ok(rows.into_iter().collect())
}

/// The newest `limit` dispatches of the jobs `job_ids` that started after
/// `since`, as (started ms, run id): what a rate-limit bucket's log held
/// before Redis lost it (the reconciler's rebuild). Reads the jobs' runs
/// touched since then; a rebuild is rare, so no index is kept for it.
pub async fn recent_sends(
    pool: &PgPool,
    job_ids: &[String],
    since: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    let rows: Vec<(String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT a.run_id, a.started_at FROM job_run_attempts a JOIN job_runs r ON r.id = a.run_id
          WHERE r.job_id = ANY($1) AND r.updated_at > $2 AND a.started_at > $2
          ORDER BY a.started_at DESC LIMIT $3",
    )
    .bind(job_ids)
    .bind(since)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(id, at)| (at.timestamp_millis(), id)).collect())
}

/// Enqueues, after the commit that made them, the job runs a transaction
/// created (an event's runs, a workflow pass's step runs): the queued ones
/// now, the scheduled ones at their time; and tells the expirer of the
/// soonest TTL among them. A failure is logged and not returned: the runs
/// are durable, and the reconciler enqueues them. How many were enqueued.
pub async fn enqueue_made(queue: &crate::queue::Queue, made: &[Run]) -> usize {
    if made.is_empty() {
        return 0;
    }
    let entries: Vec<_> = made
        .iter()
        .filter(|r| r.status == RunStatus::Queued || r.scheduled_at.is_some())
        .map(|r| (r.entry(), r.scheduled_at.map_or(0, |t| t.timestamp_millis())))
        .collect();
    let refs: Vec<_> = entries.iter().map(|(e, due)| (e, *due)).collect();
    let n = match queue.enqueue_many(&refs, Utc::now().timestamp_millis()).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(runs = made.len(), error = %e,
                "enqueue of new runs failed; they are queued in postgres and the reconciler will enqueue them");
            0
        }
    };
    if let Some(t) = made.iter().filter_map(|r| r.expires_at).min() {
        queue.wake(crate::queue::WakeLoop::Expirer, Some(t));
    }
    n
}
