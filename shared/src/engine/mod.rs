//! The workflow engine's transitions, as pure functions: each takes what a
//! pass knows of a run and its steps (read by `store::workflow_engine`) and
//! what happened, and returns what must change, as data ([`effects`]). The
//! store's pass applies them, in as few statements as it can, under the
//! run's lock; the rules of which step comes next are
//! `domain::workflow_run::next` and `saga`.
//!
//! - [`step_ended`]: a step's job run or child run ended, or its wait ran
//!   out (a sleep is over, an approval, a cost gate or an event wait timed
//!   out);
//! - [`step_start`]: a step the rules let start begins: a job run, a child
//!   run, a sleep, a wait;
//! - [`run_end`]: how a run ends, and the record of its saga;
//! - [`version_move`]: a run under version_policy `latest` moves to its
//!   workflow's newest version;
//! - [`moves`]: a person's moves (cancel, pause, resume, a decision on a
//!   waiting step, a retry or a replay), applied by `store::workflow_moves`.
//!
//! Nothing here reads or writes Postgres, so each transition is tested
//! table-style on in-memory state, for every step kind and every way a
//! step ends; the end-to-end tests (`tests/it/workflow_runs.rs` and
//! others) cover the store's side.

pub mod effects;
pub mod moves;
pub mod run_end;
pub mod step_ended;
pub mod step_start;
pub mod version_move;

pub use effects::{Decided, EventNotice, Note, StepView, StepWrite};
