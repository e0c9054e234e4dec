//! Everything the Switchyard processes share.
//!
//! - [`config`]: the typed settings every binary loads once from the environment.
//! - [`domain`]: run statuses, job definitions, retry policy, what a result may hold: pure types and rules.
//! - [`ids`]: prefixed, time-ordered identifiers.
//! - [`db`]: the Postgres pool, database creation and the migrator.
//! - [`store`]: the SQL that reads and writes runs and jobs, shared by api, worker and scheduler.
//! - [`queue`]: the Redis side of a run's life (keys, Lua scripts, wake-ups).
//! - [`outbound`]: HTTP calls to users' endpoints: the client, request signing, the terminal webhook.
//! - [`run_token`]: the run JWT the worker mints and the api's SDK endpoints accept.
//! - [`secrets`]: encryption of job secrets at rest (`SECRETS_KEY`).
//! - [`telemetry`]: tracing setup and the Prometheus metrics (docs/contract.md, "Metrics").
//! - [`shutdown`]: the shutdown signal passed down to every task.

pub mod config;
pub mod db;
pub mod domain;
pub mod ids;
pub mod outbound;
pub mod queue;
pub mod run_token;
pub mod secrets;
pub mod shutdown;
pub mod store;
pub mod telemetry;

pub use config::Config;
