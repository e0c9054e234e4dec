//! The SQL of a run's life, shared by the three processes. Each function is
//! one round trip; every status change writes its event row in the same
//! statement, so the history never disagrees with the run.

pub mod flow;
pub mod group;
pub mod jobs;
pub mod records;
pub mod run_updates;
pub mod runs;
pub mod settle;
pub mod transitions;

#[cfg(test)]
mod writes_stay_here;

pub use jobs::JobRecord;
pub use runs::{NewRun, Outcome, Run};
pub use transitions::Changed;
