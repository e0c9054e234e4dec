//! All the SQL of the three processes, one module per aggregate: a run's
//! life ([`runs`], [`settle`], [`flow`], [`transitions`], [`run_updates`]),
//! what a run reported ([`run_records`]), bulk trigger batches
//! ([`batches`]), job definitions and their versions ([`jobs`]), and
//! the resources the api manages ([`projects`], [`job_groups`],
//! [`environments`], [`secrets`], [`api_keys`], [`roles`], [`members`],
//! [`policies`], [`audit`], [`actors`]). Each function is one round trip
//! (or one transaction); every status change of a run writes its event row
//! in the same statement, so the history never disagrees with the run.
//!
//! Reads of a project's resources by id take a [`Tenant`]: the filter on
//! the project is part of the query, so a caller confined to one project
//! cannot be handed another project's row by forgetting to check.

pub mod actors;
pub mod api_keys;
pub mod audit;
pub mod batches;
pub mod environments;
pub mod flow;
pub mod group;
pub mod job_groups;
pub mod jobs;
pub mod members;
pub mod policies;
pub mod projects;
pub mod roles;
pub mod run_records;
pub mod run_updates;
pub mod runs;
pub mod secrets;
pub mod settle;
pub mod stats;
pub mod transitions;

#[cfg(test)]
mod writes_stay_here;

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

/// Whether the database answers.
pub async fn ping(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT 1").execute(pool).await.map(|_| ())
}
