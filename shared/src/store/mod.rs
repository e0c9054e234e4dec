//! The SQL of the three processes, one module per aggregate:
//!
//! - a run's life: [`runs`] (insert, dispatch reads, outcomes, lease
//!   recovery), [`transitions`] (cancel and restart, the moves people ask
//!   for), [`settle`] (endings over the SDK and of silent async runs),
//!   [`flow`] (dedup, dependencies, expiry, execution windows, cron reads),
//!   [`run_updates`] (writes that leave status and attempt alone), [`stats`]
//!   (queue counts for operators);
//! - what a run reported: [`run_records`] (logs, checkpoints, outputs,
//!   usage, tool calls, state); bulk trigger batches: [`batches`];
//! - job definitions and their versions: [`jobs`], [`job_groups`];
//!   workflow definitions, their versions and policies: [`workflows`]; both
//!   as triggers and engine passes read them, at most a second old:
//!   [`recent`];
//!   inbound events and the sources that trigger runs from them: [`events`];
//! - workflow runs: [`workflow_runs`] (the rows, the reads, the moves people
//!   ask for), [`workflow_engine`] (the engine's advance of a run);
//! - reporting: [`analytics`] (the rollups and the reads of the analytics,
//!   usage and queue-history reports);
//! - the resources the api manages: [`projects`], [`environments`],
//!   [`secrets`], [`api_keys`], [`roles`], [`members`], [`policies`],
//!   [`audit`], [`actors`];
//! - live streams: [`streams`] (watches and the change log of watched
//!   projects);
//! - [`group`]: the group commit that batches many callers' writes into one
//!   statement.
//!
//! Each function is one round trip (or one transaction). A run's history
//! never disagrees with the run: part of it is read from the rows
//! themselves, the rest is written by the statement that moves the status.
//! The view `job_run_transitions` (migration 0008) reads the creation of a
//! run created `queued` from its row, and each attempt's
//! `queued -> running` and `running -> outcome` from its attempt row, which
//! the outcome's statement writes ([`runs::finish_many`]). Every other move
//! (creation as `pending`, an early `running` mark, retry due, cancel,
//! restart, expiry, a dependency's verdict, lease loss, an async
//! acceptance) writes its `job_run_events` row in the statement that
//! changes the status. No code outside this module writes a run's row or
//! its history (the test in `writes_stay_here.rs` fails otherwise).
//!
//! Reads of a project's resources by id take a [`Tenant`]: the filter on
//! the project is part of the query, so a caller confined to one project
//! cannot be handed another project's row by forgetting to check.

pub mod actors;
pub mod analytics;
pub mod api_keys;
pub mod audit;
pub mod batches;
pub mod cancel_on;
pub mod deliveries;
pub mod environments;
pub mod events;
pub mod flow;
pub mod group;
pub mod job_groups;
pub mod jobs;
pub mod log_drains;
pub mod members;
pub mod one_per_key;
pub mod policies;
pub mod projects;
pub mod recent;
pub mod retention;
pub mod roles;
pub mod run_records;
pub mod run_updates;
pub mod runs;
pub mod secrets;
pub mod settle;
pub mod stats;
pub mod step_outcomes;
pub mod streams;
pub mod transitions;
pub mod trigger_batches;
pub mod workflow_engine;
pub mod workflow_moves;
pub mod workflow_runs;
mod workflow_traces;
pub mod workflows;

#[cfg(test)]
mod writes_stay_here;

use sqlx::postgres::PgRow;
use sqlx::PgPool;

pub use jobs::JobRecord;
pub use runs::{NewRun, Outcome, Run};
pub use transitions::Changed;

/// Whose rows a read may return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tenant<'a> {
    /// Every project's (the internal secret).
    Any,
    /// Only this project's.
    Project(&'a str),
}

impl<'a> Tenant<'a> {
    /// The project filter as a query parameter: `NULL` matches every project.
    pub fn filter(self) -> Option<&'a str> {
        match self {
            Tenant::Any => None,
            Tenant::Project(p) => Some(p),
        }
    }
}

/// A row of a project-owned table by id, if `tenant` may see it. `table`
/// and `cols` are the caller's constants, never request input.
async fn get_scoped<R>(
    pool: &PgPool,
    table: &str,
    cols: &str,
    tenant: Tenant<'_>,
    id: &str,
) -> Result<Option<R>, sqlx::Error>
where
    R: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
{
    sqlx::query_as(&format!("SELECT {cols} FROM {table} WHERE id = $1 AND ($2::text IS NULL OR project_id = $2)"))
        .bind(id)
        .bind(tenant.filter())
        .fetch_optional(pool)
        .await
}

/// A page of a project-owned table, newest first (ids are time-ordered),
/// older than the cursor `before`.
async fn page_of_project<R>(
    pool: &PgPool,
    table: &str,
    cols: &str,
    project_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<R>, sqlx::Error>
where
    R: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
{
    sqlx::query_as(&format!(
        "SELECT {cols} FROM {table} WHERE project_id = $1 AND ($2::text IS NULL OR id < $2) ORDER BY id DESC LIMIT $3"
    ))
    .bind(project_id)
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Whether the database answers.
pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT 1").execute(pool).await.map(|_| ())
}
