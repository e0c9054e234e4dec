//! The delivery outbox (migration 0011) and webhook subscriptions.
//!
//! Deliveries are written by the statement (or in the transaction) that
//! makes what they report, with payloads built in Rust
//! (`domain::notification`): a run's end by the statement that records a
//! worker's outcomes (`runs::finish_many`, through [`runs_ended_ctes`]) or
//! by [`runs_ended`] after the others that end runs; a step's stage change
//! by [`step_stages`] after each statement that changes a step's status;
//! a workflow run's end by [`workflow_runs_ended`]; a `wait_for_event`
//! step's notice by [`event_trigger_timed_out`] and [`events_received`].
//! The sender loop claims the due ones ([`claim_due`]), sends them and
//! records each pass's attempts ([`record_attempts`]). Each kind keeps its
//! own rules ([`Kind`]).

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::types::Json;
use sqlx::{Arguments, PgConnection, PgPool};

use super::runs::Run;
use super::Tenant;
use crate::domain::notification::{
    self, Event, EventTriggerNotice, EventTriggerOutcome, RunEnded, RunWebhook, StepStage, WorkflowRunEnded,
};
use crate::domain::workflow::StageNotifications;
use crate::ids::StepRunId;

/// What a delivery reports, and so how it is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A job run's terminal webhook: 3 attempts (now, +1 s, +5 s); a 4xx
    /// ends it at once; it leaves no record once it ends, delivered or not.
    JobRun,
    /// An event to a subscription, and (later) an event trigger's
    /// notification: 5 attempts, 5 s, 25 s, 125 s, 625 s apart (at most
    /// 30 min); a 4xx makes it `dead` at once, and so does the last failure.
    Subscription,
    EventTrigger,
    /// A step's stage change to a URL its stage_notifications names:
    /// retried as a subscription's event. Signed, like an event trigger's
    /// notification, with the project's signing secret.
    StepStage,
}

impl Kind {
    /// Every kind, as the deliveries' `kind` filter names them.
    pub const NAMES: [&'static str; 4] = ["job_run", "subscription", "event_trigger", "step_stage"];

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "job_run" => Some(Kind::JobRun),
            "subscription" => Some(Kind::Subscription),
            "event_trigger" => Some(Kind::EventTrigger),
            "step_stage" => Some(Kind::StepStage),
            _ => None,
        }
    }

    /// The wait before attempt `next` (2, 3, ...).
    pub fn backoff(self, next: i32) -> Duration {
        match self {
            Kind::JobRun => Duration::from_secs(if next <= 2 { 1 } else { 5 }),
            Kind::Subscription | Kind::EventTrigger | Kind::StepStage => {
                let secs = 5u64.saturating_pow((next - 1).clamp(1, 10) as u32);
                Duration::from_secs(secs.min(30 * 60))
            }
        }
    }
}

/// A delivery row.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Delivery {
    pub id: String,
    pub project_id: String,
    pub kind: String,
    pub url: String,
    pub event_type: String,
    pub payload: Json<Value>,
    pub status: String,
    pub attempts: i32,
    pub max_attempts: i32,
    pub next_retry_at: DateTime<Utc>,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub subscription_id: Option<String>,
    pub job_id: Option<String>,
    pub run_id: Option<String>,
    pub workflow_run_id: Option<String>,
    pub event_trigger_id: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLUMNS: &str = "id, project_id, kind, url, event_type, payload, status, attempts, max_attempts, \
    next_retry_at, last_status_code, last_error, subscription_id, job_id, run_id, workflow_run_id, event_trigger_id, \
    delivered_at, created_at, updated_at";

/// A claimed delivery with the key to sign it, read at send time so it is
/// never copied: the job's webhook_secret or the subscription's secret, and
/// for every delivery without one (step stage and event-trigger
/// notifications, a job without a webhook_secret) the project's signing
/// secret, so no notification leaves unsigned.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Claimed {
    #[sqlx(flatten)]
    pub delivery: Delivery,
    pub secret: Option<String>,
    /// The trace context of the run (or workflow run) the delivery tells
    /// of, as stored (`crate::traces`).
    pub traceparent: Option<String>,
}

impl Claimed {
    /// Where the delivery sits in a trace: under the run it tells of; a
    /// delivery of no run (a subscription's event) begins its own.
    pub fn trace(&self) -> crate::traces::Place {
        let d = &self.delivery;
        let id = d.run_id.as_deref().or(d.workflow_run_id.as_deref()).unwrap_or(&d.id);
        crate::traces::Place::of(id, self.traceparent.as_deref())
    }
}

/// The deliveries waiting for an attempt that no sender holds, for
/// [`claim_due`] and [`next_due`]. The status list is the due index's
/// predicate (migration 0011), which lets the planner read that index.
macro_rules! unclaimed_sql {
    () => {
        "status IN ('pending', 'failed') AND (claimed_until IS NULL OR claimed_until < now())"
    };
}

/// [`claim_due`]'s statement, built once.
static CLAIM_DUE_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        concat!(
            "WITH c AS (
            SELECT id FROM webhook_deliveries
             WHERE ",
            unclaimed_sql!(),
            " AND next_retry_at <= now()
             ORDER BY next_retry_at LIMIT $1 FOR UPDATE SKIP LOCKED
         ), d AS (
            UPDATE webhook_deliveries d SET claimed_until = now() + make_interval(secs => $2)
              FROM c WHERE d.id = c.id RETURNING d.*
         )
         SELECT {cols},
                coalesce(nullif(CASE d.kind
                    WHEN 'job_run' THEN (SELECT j.spec->>'webhook_secret' FROM jobs j WHERE j.id = d.job_id)
                    WHEN 'subscription' THEN (SELECT s.secret FROM webhook_subscriptions s WHERE s.id = d.subscription_id)
                END, ''), (SELECT p.signing_secret FROM projects p WHERE p.id = d.project_id)) AS secret,
                CASE WHEN d.run_id IS NOT NULL THEN (SELECT r.traceparent FROM job_runs r WHERE r.id = d.run_id)
                     WHEN d.workflow_run_id IS NOT NULL
                     THEN (SELECT w.traceparent FROM workflow_runs w WHERE w.id = d.workflow_run_id)
                END AS traceparent
           FROM d"
        ),
        cols = COLUMNS.split(", ").map(|c| format!("d.{}", c.trim())).collect::<Vec<_>>().join(", ")
    )
});

/// Claims up to `limit` due deliveries for `hold`: nobody else sends them
/// until then (a sender that dies leaves them to the next after that).
pub async fn claim_due(pool: &PgPool, limit: i64, hold: Duration) -> Result<Vec<Claimed>, sqlx::Error> {
    sqlx::query_as(&CLAIM_DUE_SQL).bind(limit).bind(hold.as_secs_f64()).fetch_all(pool).await
}

/// The deliveries of runs that ended, one row per run as the statements
/// that write them bind it ([`runs_ended_ctes`]): the run's event (to the
/// subscriptions that name it) and its terminal webhook, built in Rust.
#[derive(Default)]
pub(super) struct RunsEnded {
    run_ids: Vec<crate::ids::RunId>,
    job_ids: Vec<crate::ids::JobId>,
    project_ids: Vec<String>,
    event_types: Vec<String>,
    /// Where the terminal webhook goes, when the caller knows
    /// ([`HookUrl::Known`]); otherwise NULL.
    hook_urls: Vec<Option<String>>,
    /// The terminal webhook; NULL: none.
    hooks: Vec<Option<Json<Value>>>,
    events: Vec<Json<Value>>,
}

/// Where a run's terminal webhook goes.
pub(super) enum HookUrl<'a> {
    /// Nowhere: the job has no webhook_url.
    Absent,
    /// The job's webhook_url, as the caller read it.
    Known(&'a str),
    /// The job's webhook_url, read with the job by the statement that
    /// writes the delivery.
    OfJob,
}

impl RunsEnded {
    pub(super) fn push(&mut self, project_id: &str, run: RunEnded, hook: HookUrl<'_>, at: DateTime<Utc>) {
        let (url, hook) = match hook {
            HookUrl::Absent => (None, false),
            HookUrl::Known(url) => (Some(url.to_string()), true),
            HookUrl::OfJob => (None, true),
        };
        self.hook_urls.push(url);
        self.hooks.push(hook.then(|| Json(RunWebhook { run: &run, project_id, timestamp: at }.to_value())));
        self.run_ids.push(run.run_id.clone());
        self.job_ids.push(run.job_id.clone());
        self.project_ids.push(project_id.to_string());
        let event = Event::RunEnded(run);
        self.event_types.push(event.event_type());
        self.events.push(Json(event.envelope(project_id, at)));
    }

    /// Binds the rows in the order [`runs_ended_ctes`] reads them.
    pub(super) fn bind<'q, O>(
        self,
        q: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        q.bind(self.run_ids)
            .bind(self.job_ids)
            .bind(self.project_ids)
            .bind(self.event_types)
            .bind(self.hook_urls)
            .bind(self.hooks)
            .bind(self.events)
    }

    fn is_empty(&self) -> bool {
        self.run_ids.is_empty()
    }
}

/// A run's end as its notifications tell it.
pub(super) fn run_ended(run: &Run) -> RunEnded {
    RunEnded {
        run_id: run.id.clone(),
        job_id: run.job_id.clone(),
        status: run.status.as_str().to_string(),
        attempt: run.attempt,
        result: run.result.as_ref().map(|r| r.0.clone()),
        error: run.error.clone(),
    }
}

/// The CTEs that write the deliveries of [`RunsEnded`] bound from `$p` on:
/// `ended` (its rows; only those of the runs `fence` selects, when given),
/// `hooks` (the terminal webhooks, 3 attempts) and `events` (one delivery
/// per active subscription of the run's project that names its event or
/// `*`, 5 attempts). A webhook's URL is the row's, or with `of_job` the
/// job's `webhook_url` (none when it has none).
pub(super) fn runs_ended_ctes(p: usize, fence: Option<&str>, of_job: bool) -> String {
    let fence = fence.map(|f| format!("WHERE n.run_id IN ({f})")).unwrap_or_default();
    let (url, jobs) =
        if of_job { ("j.spec->>'webhook_url'", "JOIN jobs j ON j.id = n.job_id") } else { ("n.hook_url", "") };
    format!(
        "ended AS (
            SELECT n.* FROM UNNEST(${p}::text[], ${}::text[], ${}::text[], ${}::text[], ${}::text[], ${}::jsonb[],
                ${}::jsonb[]) AS n (run_id, job_id, project_id, event_type, hook_url, hook, event)
            {fence}
         ), hooks AS (
            INSERT INTO webhook_deliveries (id, project_id, kind, url, event_type, payload, max_attempts, job_id, run_id)
            SELECT sy_time_id('whd'), n.project_id, 'job_run', {url}, n.event_type, n.hook, {}, n.job_id, n.run_id
              FROM ended n {jobs}
             WHERE n.hook IS NOT NULL AND coalesce({url}, '') <> ''
         ), events AS (
            INSERT INTO webhook_deliveries (id, project_id, kind, url, event_type, payload, max_attempts, subscription_id,
                job_id, run_id)
            SELECT sy_time_id('whd'), n.project_id, 'subscription', s.url, n.event_type, n.event, {}, s.id, n.job_id,
                   n.run_id
              FROM ended n JOIN webhook_subscriptions s ON s.project_id = n.project_id AND s.active
             WHERE s.event_types && ARRAY[n.event_type, '*']
         )",
        p + 1,
        p + 2,
        p + 3,
        p + 4,
        p + 5,
        p + 6,
        notification::JOB_RUN_ATTEMPTS,
        notification::ATTEMPTS,
    )
}

/// [`runs_ended_ctes`]'s statement on its own, for the statements that end
/// runs outside the worker's outcomes (cancels, expiry, dependency
/// failures): in the caller's transaction, right after the statement that
/// ended `runs`, each run's webhook URL read from its job.
static RUNS_ENDED_SQL: LazyLock<String> = LazyLock::new(|| format!("WITH {} SELECT 1", runs_ended_ctes(1, None, true)));

/// Writes the deliveries of `runs`, which the caller's transaction just
/// ended (see [`RUNS_ENDED_SQL`]).
pub(super) async fn runs_ended<'r>(
    conn: &mut PgConnection,
    runs: impl IntoIterator<Item = &'r Run>,
) -> Result<(), sqlx::Error> {
    let at = Utc::now();
    let mut rows = RunsEnded::default();
    for run in runs {
        rows.push(&run.project_id, run_ended(run), HookUrl::OfJob, at);
    }
    if rows.is_empty() {
        return Ok(());
    }
    rows.bind(sqlx::query_as::<_, (i32,)>(&RUNS_ENDED_SQL)).fetch_optional(conn).await?;
    Ok(())
}

/// What an UPDATE of `workflow_step_runs s` returns for the stage
/// deliveries of the steps it changes ([`stage_changes`]). `old_status`,
/// read only for a step with stage_notifications, is its status before
/// the statement: a subquery in RETURNING sees the row as the statement
/// found it, not the statement's own write.
pub(super) const STAGE_RETURNING: &str = "s.id, s.workflow_run_id, s.step_ref, s.step_type, s.status, s.attempt, \
    s.output, s.error, s.stage_notifications, \
    CASE WHEN s.stage_notifications IS NOT NULL THEN (SELECT o.status FROM workflow_step_runs o WHERE o.id = s.id) END \
    AS old_status";

/// A column for a statement that changes steps' statuses: the changes of
/// steps with stage_notifications among the rows of `cte` (an UPDATE
/// returning [`STAGE_RETURNING`]), as a JSON array of [`StageChange`],
/// NULL when none (most steps have no stage_notifications), for
/// [`step_stages`].
pub(super) fn stage_changes(cte: &str) -> String {
    format!(
        "(SELECT jsonb_agg(c) FROM (
            SELECT x.id AS step_run_id, x.workflow_run_id, r.workflow_id, r.project_id, x.step_ref, x.step_type,
                   x.status, x.attempt, x.output, x.error, x.stage_notifications
              FROM {cte} x JOIN workflow_runs r ON r.id = x.workflow_run_id
             WHERE x.stage_notifications IS NOT NULL AND x.status IS DISTINCT FROM x.old_status
         ) c)"
    )
}

/// A step whose status a statement changed, with its stage_notifications
/// ([`stage_changes`]).
#[derive(Clone, Debug, Deserialize)]
pub(super) struct StageChange {
    step_run_id: StepRunId,
    workflow_run_id: String,
    workflow_id: String,
    project_id: String,
    step_ref: String,
    step_type: String,
    status: String,
    attempt: i32,
    output: Option<Value>,
    error: Option<String>,
    stage_notifications: Value,
}

/// The stage deliveries of steps a statement of the caller's transaction
/// just changed ([`stage_changes`]): for each stage its stage_notifications
/// send, one delivery per URL (kind `step_stage`) and one per named active
/// subscription of the project, whatever its event_types (kind
/// `subscription`). One statement, none when no stage is sent.
pub(super) async fn step_stages(
    conn: &mut PgConnection,
    changes: Option<Json<Vec<StageChange>>>,
) -> Result<(), sqlx::Error> {
    let Some(Json(changes)) = changes else { return Ok(()) };
    let at = Utc::now();
    let (mut projects, mut kinds, mut urls, mut subs, mut types, mut payloads, mut runs, mut steps) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for c in changes {
        let Some(stage) = notification::stage_of(&c.status) else { continue };
        let targets: StageNotifications = match serde_json::from_value(c.stage_notifications) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(step_run_id = %c.step_run_id, error = %e, "stage_notifications unreadable; none sent");
                continue;
            }
        };
        if !notification::sends_stage(&targets, stage) {
            continue;
        }
        let (run_id, step_run_id) = (c.workflow_run_id.clone(), c.step_run_id.clone());
        let event = Event::StepStage(StepStage {
            stage: stage.to_string(),
            workflow_run_id: c.workflow_run_id,
            workflow_id: c.workflow_id,
            step_run_id: c.step_run_id,
            step_ref: c.step_ref,
            step_type: c.step_type,
            status: c.status,
            attempt: c.attempt,
            output: c.output,
            error: c.error,
        });
        let (event_type, payload) = (event.event_type(), Json(event.envelope(&c.project_id, at)));
        let to_urls = targets.urls.iter().map(|u| ("step_stage", Some(u.as_str()), None));
        let to_subs = notification::stage_subscriptions(&targets).into_iter().map(|s| ("subscription", None, Some(s)));
        for (kind, url, sub) in to_urls.chain(to_subs) {
            projects.push(c.project_id.clone());
            kinds.push(kind);
            urls.push(url.map(str::to_string));
            subs.push(sub.map(str::to_string));
            types.push(event_type.clone());
            payloads.push(payload.clone());
            runs.push(run_id.clone());
            steps.push(step_run_id.clone());
        }
    }
    if projects.is_empty() {
        return Ok(());
    }
    sqlx::query(&format!(
        "INSERT INTO webhook_deliveries (id, project_id, kind, url, event_type, payload, max_attempts, subscription_id,
            workflow_run_id, step_run_id)
         SELECT sy_time_id('whd'), t.project_id, t.kind, coalesce(t.url, s.url), t.event_type, t.payload, {}, s.id,
                t.workflow_run_id, t.step_run_id
           FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::text[], $8::text[])
                AS t (project_id, kind, url, subscription_id, event_type, payload, workflow_run_id, step_run_id)
           LEFT JOIN webhook_subscriptions s ON s.id = t.subscription_id AND s.project_id = t.project_id AND s.active
          WHERE t.subscription_id IS NULL OR s.id IS NOT NULL",
        notification::ATTEMPTS
    ))
    .bind(projects)
    .bind(kinds)
    .bind(urls)
    .bind(subs)
    .bind(types)
    .bind(payloads)
    .bind(runs)
    .bind(steps)
    .execute(conn)
    .await?;
    Ok(())
}

/// How one attempt went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    Delivered {
        status_code: i32,
    },
    /// A 4xx (or a URL that may not be called): no retry helps.
    Rejected {
        status_code: Option<i32>,
        error: String,
    },
    /// A 5xx, a timeout, a connection error: retried while attempts remain.
    Failed {
        status_code: Option<i32>,
        error: String,
    },
}

/// Records the attempts of a pass of claimed deliveries in two statements.
/// A job-run delivery that ends (delivered, rejected, out of attempts) is
/// removed; the others become `delivered`, `failed` (retried at
/// `next_retry_at`) or `dead`. Returns, in input order, whether each will
/// be tried again.
pub async fn record_attempts(pool: &PgPool, items: &[(&Delivery, Attempt)]) -> Result<Vec<bool>, sqlx::Error> {
    let mut gone: Vec<&str> = Vec::new();
    let (mut ids, mut statuses, mut attempts, mut codes, mut errors, mut waits) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut retries = Vec::with_capacity(items.len());
    for (d, a) in items {
        let kind = Kind::parse(&d.kind).unwrap_or(Kind::Subscription);
        let n = d.attempts + 1;
        let (code, error, delivered, retry) = match a {
            Attempt::Delivered { status_code } => (Some(*status_code), None, true, false),
            Attempt::Rejected { status_code, error } => (*status_code, Some(error.clone()), false, false),
            Attempt::Failed { status_code, error } => (*status_code, Some(error.clone()), false, n < d.max_attempts),
        };
        retries.push(retry);
        if kind == Kind::JobRun && !retry {
            if !delivered {
                tracing::warn!(
                    run_id = d.run_id.as_deref().unwrap_or(""),
                    attempts = n,
                    error = error.as_deref().unwrap_or(""),
                    "run webhook dropped"
                );
            }
            gone.push(&d.id);
            continue;
        }
        ids.push(d.id.as_str());
        statuses.push(if delivered {
            "delivered"
        } else if retry {
            "failed"
        } else {
            "dead"
        });
        attempts.push(n);
        codes.push(code);
        errors.push(error);
        waits.push(kind.backoff(n + 1).as_secs_f64());
    }
    if !gone.is_empty() {
        sqlx::query("DELETE FROM webhook_deliveries WHERE id = ANY($1)").bind(&gone).execute(pool).await?;
    }
    if !ids.is_empty() {
        sqlx::query(
            "UPDATE webhook_deliveries d SET status = t.status, attempts = t.attempts,
                last_status_code = t.code, last_error = t.error,
                delivered_at = CASE WHEN t.status = 'delivered' THEN now() END,
                next_retry_at = CASE WHEN t.status = 'failed' THEN now() + make_interval(secs => t.wait)
                                     ELSE d.next_retry_at END,
                claimed_until = NULL
             FROM UNNEST($1::text[], $2::text[], $3::int4[], $4::int4[], $5::text[], $6::float8[])
                  AS t (id, status, attempts, code, error, wait)
             WHERE d.id = t.id",
        )
        .bind(&ids)
        .bind(&statuses)
        .bind(&attempts)
        .bind(&codes)
        .bind(&errors)
        .bind(&waits)
        .execute(pool)
        .await?;
    }
    Ok(retries)
}

/// When the next delivery that no sender holds falls due (None: none
/// waits). It reads the due index in order, past the deliveries in flight,
/// and stops at the first: not every waiting delivery, which under a
/// backlog is thousands per pass. A claim that lapses (its sender died)
/// is not waited for: the sender's longest sleep bounds how late it goes.
pub async fn next_due(pool: &PgPool) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar(concat!(
        "SELECT next_retry_at FROM webhook_deliveries WHERE ",
        unclaimed_sql!(),
        " ORDER BY next_retry_at LIMIT 1"
    ))
    .fetch_optional(pool)
    .await
}

pub async fn get(pool: &PgPool, tenant: Tenant<'_>, id: &str) -> Result<Option<Delivery>, sqlx::Error> {
    super::get_scoped(pool, "webhook_deliveries", COLUMNS, tenant, id).await
}

/// A page of a project's deliveries, newest first, narrowed by status and kind.
pub async fn list(
    pool: &PgPool,
    project_id: &str,
    status: Option<&str>,
    kind: Option<&str>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<Delivery>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM webhook_deliveries
         WHERE project_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR kind = $3)
           AND ($4::text IS NULL OR id < $4)
         ORDER BY id DESC LIMIT $5"
    ))
    .bind(project_id)
    .bind(status)
    .bind(kind)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Takes a `failed` delivery back to `pending` now with its attempts
/// counted from zero. `Err` with its status when it is not `failed`.
pub async fn retry(
    pool: &PgPool,
    tenant: Tenant<'_>,
    id: &str,
) -> Result<Option<Result<Delivery, String>>, sqlx::Error> {
    let moved: Option<Delivery> = sqlx::query_as(&format!(
        "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_retry_at = now(), claimed_until = NULL
         WHERE id = $1 AND ($2::text IS NULL OR project_id = $2) AND status = 'failed'
         RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(tenant.filter())
    .fetch_optional(pool)
    .await?;
    if let Some(d) = moved {
        // The insert trigger does not fire on an update: wake the senders.
        sqlx::query("SELECT pg_notify('switchyard_deliveries', '')").execute(pool).await?;
        return Ok(Some(Ok(d)));
    }
    Ok(get(pool, tenant, id).await?.map(|d| Err(d.status)))
}

/// A workflow run that ended, as [`workflow_runs_ended`] tells it.
pub struct WorkflowEnded<'a> {
    pub project_id: &'a str,
    pub workflow_id: &'a str,
    pub run_id: &'a str,
    pub status: &'a str,
    pub error: Option<&'a str>,
}

/// The subscription deliveries of workflow runs that ended, in the
/// transaction that ends them, in one statement: `workflow_run.completed`,
/// `.failed` (a timed out run too, with its status in the data) or
/// `.cancelled`.
pub async fn workflow_runs_ended(conn: &mut PgConnection, ended: &[WorkflowEnded<'_>]) -> Result<(), sqlx::Error> {
    if ended.is_empty() {
        return Ok(());
    }
    let mut args = PgArguments::default();
    workflow_runs_ended_args(&mut args, ended).map_err(sqlx::Error::Encode)?;
    sqlx::query_with(&workflow_runs_ended_sql(), args).execute(conn).await?;
    Ok(())
}

/// [`workflow_runs_ended`]'s insert, its four parameters `$1` to `$4`
/// ([`workflow_runs_ended_args`]): a statement, or a CTE of the engine's.
pub(super) fn workflow_runs_ended_sql() -> String {
    format!(
        "INSERT INTO webhook_deliveries (id, project_id, kind, url, event_type, payload, max_attempts, subscription_id,
            workflow_run_id)
         SELECT sy_time_id('whd'), t.project_id, 'subscription', s.url, t.event_type, t.payload, {}, s.id, t.run_id
           FROM UNNEST($1::text[], $2::text[], $3::jsonb[], $4::text[]) AS t (project_id, event_type, payload, run_id)
           JOIN webhook_subscriptions s
             ON s.project_id = t.project_id AND s.active AND s.event_types && ARRAY[t.event_type, '*']",
        notification::ATTEMPTS
    )
}

/// The parameters of [`workflow_runs_ended_sql`], in its order.
pub(super) fn workflow_runs_ended_args(
    args: &mut PgArguments,
    ended: &[WorkflowEnded<'_>],
) -> Result<(), sqlx::error::BoxDynError> {
    let now = Utc::now();
    let events: Vec<Event> = ended
        .iter()
        .map(|e| {
            Event::WorkflowRunEnded(WorkflowRunEnded {
                workflow_run_id: e.run_id.to_string(),
                workflow_id: e.workflow_id.to_string(),
                status: e.status.to_string(),
                error: e.error.map(str::to_string),
            })
        })
        .collect();
    args.add(ended.iter().map(|e| e.project_id).collect::<Vec<_>>())?;
    args.add(events.iter().map(Event::event_type).collect::<Vec<_>>())?;
    args.add(events.iter().zip(ended).map(|(ev, e)| Json(ev.envelope(e.project_id, now))).collect::<Vec<_>>())?;
    args.add(ended.iter().map(|e| e.run_id).collect::<Vec<_>>())?;
    Ok(())
}

/// The event-trigger notification of a wait_for_event step resolved
/// without its event (`timed_out`), in the engine's transaction. (The
/// `received` ones are written with the statement that resumes the steps,
/// [`events_received`].)
pub async fn event_trigger_timed_out(
    conn: &mut PgConnection,
    project_id: &str,
    url: &str,
    workflow_run_id: &str,
    step_run_id: &StepRunId,
    step_ref: &str,
    event_key: &str,
) -> Result<(), sqlx::Error> {
    let notice = EventTriggerNotice {
        event_trigger_id: step_run_id.clone(),
        workflow_run_id: workflow_run_id.to_string(),
        step_ref: step_ref.to_string(),
        event_key: event_key.to_string(),
        outcome: EventTriggerOutcome::TimedOut,
        event_payload: None,
        timestamp: Utc::now(),
    };
    event_trigger_notices(conn, project_id, vec![(url.to_string(), notice)]).await
}

/// A `wait_for_event` step an event resumed that names an
/// event_notify_url (`store::events`).
#[derive(Clone, Debug, Deserialize)]
pub(super) struct Resumed {
    step_run_id: StepRunId,
    workflow_run_id: String,
    step_ref: String,
    url: String,
}

/// The event-trigger notifications (`received`, with the event's
/// payload) of the steps an event resumed, in the transaction that
/// resumes them.
pub(super) async fn events_received(
    conn: &mut PgConnection,
    project_id: &str,
    event_key: &str,
    payload: &Value,
    resumed: Vec<Resumed>,
) -> Result<(), sqlx::Error> {
    let at = Utc::now();
    let notices = resumed
        .into_iter()
        .map(|r| {
            let notice = EventTriggerNotice {
                event_trigger_id: r.step_run_id,
                workflow_run_id: r.workflow_run_id,
                step_ref: r.step_ref,
                event_key: event_key.to_string(),
                outcome: EventTriggerOutcome::Received,
                event_payload: Some(payload.clone()),
                timestamp: at,
            };
            (r.url, notice)
        })
        .collect();
    event_trigger_notices(conn, project_id, notices).await
}

/// Writes event-trigger notices, each to its URL (kind `event_trigger`).
async fn event_trigger_notices(
    conn: &mut PgConnection,
    project_id: &str,
    notices: Vec<(String, EventTriggerNotice)>,
) -> Result<(), sqlx::Error> {
    if notices.is_empty() {
        return Ok(());
    }
    let (mut urls, mut types, mut payloads, mut runs, mut triggers) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (url, n) in notices {
        urls.push(url);
        types.push(n.event_type());
        payloads.push(Json(n.to_value()));
        runs.push(n.workflow_run_id);
        triggers.push(n.event_trigger_id);
    }
    sqlx::query(&format!(
        "INSERT INTO webhook_deliveries (id, project_id, kind, url, event_type, payload, max_attempts, workflow_run_id,
            event_trigger_id)
         SELECT sy_time_id('whd'), $1, 'event_trigger', t.url, t.event_type, t.payload, {}, t.workflow_run_id,
                t.event_trigger_id
           FROM UNNEST($2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[])
                AS t (url, event_type, payload, workflow_run_id, event_trigger_id)",
        notification::ATTEMPTS
    ))
    .bind(project_id)
    .bind(urls)
    .bind(types)
    .bind(payloads)
    .bind(runs)
    .bind(triggers)
    .execute(conn)
    .await?;
    Ok(())
}

/// A subscription (its secret is never read back out through here).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Subscription {
    pub id: String,
    pub project_id: String,
    pub url: String,
    pub event_types: Vec<String>,
    pub active: bool,
    pub description: Option<String>,
    pub created_by: Option<String>,
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const SUB_COLUMNS: &str =
    "id, project_id, url, event_types, active, description, created_by, updated_by, created_at, updated_at";

/// What a create or an update writes.
#[derive(Clone, Debug)]
pub struct SubscriptionWrite<'a> {
    pub url: &'a str,
    pub event_types: &'a [String],
    pub active: bool,
    pub description: Option<&'a str>,
    /// None on an update: the secret stays.
    pub secret: Option<&'a str>,
    pub actor: Option<&'a str>,
}

pub async fn create_subscription(
    conn: &mut PgConnection,
    id: &str,
    project_id: &str,
    w: &SubscriptionWrite<'_>,
) -> Result<Subscription, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO webhook_subscriptions (id, project_id, url, event_types, active, description, secret, created_by,
            updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING {SUB_COLUMNS}"
    ))
    .bind(id)
    .bind(project_id)
    .bind(w.url)
    .bind(w.event_types)
    .bind(w.active)
    .bind(w.description)
    .bind(w.secret.unwrap_or_default())
    .bind(w.actor)
    .fetch_one(conn)
    .await
}

pub async fn update_subscription(
    conn: &mut PgConnection,
    id: &str,
    w: &SubscriptionWrite<'_>,
) -> Result<Option<Subscription>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE webhook_subscriptions SET url = $2, event_types = $3, active = $4, description = $5,
            secret = coalesce($6, secret), updated_by = $7
         WHERE id = $1 RETURNING {SUB_COLUMNS}"
    ))
    .bind(id)
    .bind(w.url)
    .bind(w.event_types)
    .bind(w.active)
    .bind(w.description)
    .bind(w.secret)
    .bind(w.actor)
    .fetch_optional(conn)
    .await
}

pub async fn delete_subscription(conn: &mut PgConnection, id: &str) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query("DELETE FROM webhook_subscriptions WHERE id = $1").bind(id).execute(conn).await?.rows_affected() > 0)
}

pub async fn get_subscription(
    pool: &PgPool,
    tenant: Tenant<'_>,
    id: &str,
) -> Result<Option<Subscription>, sqlx::Error> {
    super::get_scoped(pool, "webhook_subscriptions", SUB_COLUMNS, tenant, id).await
}

pub async fn list_subscriptions(
    pool: &PgPool,
    project_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<Subscription>, sqlx::Error> {
    super::page_of_project(pool, "webhook_subscriptions", SUB_COLUMNS, project_id, before, limit).await
}

/// Which of `ids` are subscriptions of the project (a step's
/// stage_notifications may name them).
pub async fn subscriptions_of(pool: &PgPool, project_id: &str, ids: &[String]) -> Result<Vec<String>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar("SELECT id FROM webhook_subscriptions WHERE project_id = $1 AND id = ANY($2)")
        .bind(project_id)
        .bind(ids)
        .fetch_all(pool)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_named_parses_and_nothing_else() {
        assert!(Kind::NAMES.iter().all(|n| Kind::parse(n).is_some()));
        assert_eq!(Kind::parse("job_runs"), None);
    }

    #[test]
    fn each_kind_keeps_its_schedule() {
        let s = |k: Kind, n| Kind::backoff(k, n).as_secs();
        assert_eq!((s(Kind::JobRun, 2), s(Kind::JobRun, 3)), (1, 5));
        let sub: Vec<u64> = (2..=6).map(|n| s(Kind::Subscription, n)).collect();
        assert_eq!(sub, [5, 25, 125, 625, 1800]);
    }
}
