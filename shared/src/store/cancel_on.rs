//! Cancel on event (`domain::cancel_on`): the job runs and workflow runs an
//! event cancels, in the transaction that fires it
//! ([`events::fire_in`](super::events::fire_in)), before its sources make
//! runs and before it resumes waiting steps, so a run the event itself makes
//! is never one it cancels. Only runs made before the event arrived count
//! (an event is a moment, as for `wait_for_event` steps), and with
//! `timeout_secs` only those made at most that long before it.
//!
//! A workflow run is cancelled as `POST /v1/workflow-runs/{id}/cancel`
//! cancels it (`workflow_engine::end_run`: its steps, their job runs and
//! its child runs with it), each locked in id order, the order
//! `resume_waiting` and the engine lock runs in.

use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgConnection;

use super::transitions::{self, Staged};
use super::workflow_engine;
use super::workflow_runs::{WorkflowRun, RUN_COLUMNS};
use crate::domain::cancel_on::{self, CancelOn};
use crate::engine::moves;

/// Most unfinished runs of one job (or workflow) an event looks at: an
/// event stays one bounded transaction however large a backlog is. The
/// oldest go first.
pub const MAX_RUNS_PER_JOB: i64 = 1000;

/// What an event cancelled.
pub struct Cancelled {
    /// Every job run's move: those the rules named, then those of the
    /// cancelled workflow runs' steps.
    pub moves: Staged,
    /// Runs the rules named: job runs and workflow runs.
    pub runs: usize,
}

/// Cancels the unfinished runs of the project's jobs and workflows whose
/// `cancel_on` rules the event matches, each with the reason naming the
/// event.
pub async fn cancel_matching(
    conn: &mut PgConnection,
    project_id: &str,
    event_id: &str,
    event_key: &str,
    event_payload: Option<&Value>,
    event_at: chrono::DateTime<chrono::Utc>,
) -> Result<Cancelled, sqlx::Error> {
    let reason = format!("cancelled by event {event_key} ({event_id})");
    let event = Event { key: event_key, payload: event_payload, at: event_at };
    let job_runs = doomed(conn, &JOBS, project_id, &event).await?;
    let mut moves = transitions::cancel_in(conn, &job_runs, &reason).await?;
    let mut runs = moves.changes().len();
    for id in doomed(conn, &WORKFLOWS, project_id, &event).await? {
        let run: Option<WorkflowRun> =
            sqlx::query_as(&format!("SELECT {RUN_COLUMNS} FROM workflow_runs WHERE id = $1 FOR UPDATE"))
                .bind(&id)
                .fetch_optional(&mut *conn)
                .await?;
        // Ended meanwhile (the lock waited for whoever ended it): nothing to do.
        let Some(run) = run else { continue };
        let Ok(decided) = moves::cancel(run.status, &reason) else { continue };
        moves.extend(workflow_engine::end_run(conn, &run, decided).await?);
        runs += 1;
    }
    Ok(Cancelled { moves, runs })
}

/// The event as the rules see it.
struct Event<'a> {
    key: &'a str,
    payload: Option<&'a Value>,
    at: chrono::DateTime<chrono::Utc>,
}

/// Where one kind of owner (jobs, workflows) keeps its rules and its runs.
struct Owners {
    /// `(id, rules)` of the project's owners ($1) whose rules hold the
    /// probe ($2), through the partial index of owners with rules.
    rules: &'static str,
    /// `(id, payload, created_at)` of the owner's ($2) unfinished runs of
    /// the project ($1) made by $3 and, with $4, at most $4 seconds before
    /// it; the oldest $5.
    runs: &'static str,
}

const JOBS: Owners = Owners {
    rules: "SELECT id, spec -> 'cancel_on' FROM jobs
             WHERE deleted_at IS NULL AND spec ? 'cancel_on' AND project_id = $1 AND spec -> 'cancel_on' @> $2
             ORDER BY id",
    runs: concat!(
        "SELECT id, payload, created_at FROM job_runs
          WHERE project_id = $1 AND job_id = $2 AND status IN ",
        crate::run_active_sql!(),
        " AND created_at <= $3 AND ($4::float8 IS NULL OR created_at >= $3 - make_interval(secs => $4))
          ORDER BY id LIMIT $5"
    ),
};

const WORKFLOWS: Owners = Owners {
    rules: "SELECT id, cancel_on FROM workflows
             WHERE deleted_at IS NULL AND cancel_on <> '[]'::jsonb AND project_id = $1 AND cancel_on @> $2
             ORDER BY id",
    runs: "SELECT id, payload, created_at FROM workflow_runs
            WHERE project_id = $1 AND workflow_id = $2 AND status IN ('pending', 'running', 'paused')
              AND created_at <= $3 AND ($4::float8 IS NULL OR created_at >= $3 - make_interval(secs => $4))
            ORDER BY id LIMIT $5",
};

/// The unfinished runs of `owners` of the project that the event's rules
/// name, in id order (the order they are locked in), read without a lock.
async fn doomed(
    conn: &mut PgConnection,
    owners: &Owners,
    project_id: &str,
    event: &Event<'_>,
) -> Result<Vec<String>, sqlx::Error> {
    let probe = serde_json::json!([{ "event_key": event.key }]);
    let found: Vec<(String, Json<Vec<CancelOn>>)> =
        sqlx::query_as(owners.rules).bind(project_id).bind(Json(&probe)).fetch_all(&mut *conn).await?;
    let mut doomed = Vec::new();
    for (owner_id, rules) in found {
        let rules: Vec<&CancelOn> = rules.0.iter().filter(|r| r.event_key == event.key).collect();
        let runs: Vec<(String, Option<Json<Value>>, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(owners.runs)
            .bind(project_id)
            .bind(&owner_id)
            .bind(event.at)
            .bind(longest(&rules).map(|s| s as f64))
            .bind(MAX_RUNS_PER_JOB)
            .fetch_all(&mut *conn)
            .await?;
        for (id, payload, made_at) in runs {
            if holds(&rules, event.payload, payload.as_ref().map(|p| &p.0), event.at, made_at) {
                doomed.push(id);
            }
        }
    }
    doomed.sort();
    Ok(doomed)
}

/// The longest `timeout_secs` of `rules`; `None` when one has none.
fn longest(rules: &[&CancelOn]) -> Option<i64> {
    if rules.iter().any(|r| r.timeout_secs.is_none()) {
        None
    } else {
        rules.iter().filter_map(|r| r.timeout_secs).max()
    }
}

/// Whether one of `rules` cancels a run made at `made_at` with `payload`.
fn holds(
    rules: &[&CancelOn],
    event_payload: Option<&Value>,
    payload: Option<&Value>,
    event_at: chrono::DateTime<chrono::Utc>,
    made_at: chrono::DateTime<chrono::Utc>,
) -> bool {
    let in_time = |r: &CancelOn| r.timeout_secs.is_none_or(|t| event_at - made_at <= chrono::Duration::seconds(t));
    rules.iter().any(|r| in_time(r) && cancel_on::matches(r, event_payload, payload))
}
