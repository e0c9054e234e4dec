//! Everything the Switchyard processes share.
//!
//! - [`config`]: the typed settings every binary loads once from the environment.
//! - [`domain`]: pure types and rules: run statuses, job definitions, trigger validation and its
//!   field errors, retry policy, cron schedules, payload schemas, what a result and an error class may hold.
//! - [`ids`]: prefixed, time-ordered identifiers.
//! - [`db`]: the Postgres pool, database creation and the migrator.
//! - [`store`]: the SQL of api, worker and scheduler, one module per aggregate; the one home of
//!   every change of a run's status.
//! - [`queue`]: the Redis side of a run's life (keys, Lua scripts, wake-ups).
//! - [`outbound`]: HTTP calls to users' endpoints: the client, request signing, the terminal webhook.
//! - [`run_token`]: the run JWT the worker mints and the api's SDK endpoints accept.
//! - [`secrets`]: encryption of job secrets at rest (`SECRETS_KEY`).
//! - [`telemetry`]: tracing setup and the Prometheus metrics (docs/contract.md, "Metrics").
//! - [`traces`]: W3C Trace Context in and out, and the spans a run leaves in OpenTelemetry.
//! - [`shutdown`]: the shutdown signal passed down to every task.
//! - [`sse`]: reading the live streams' Server-Sent Events (the CLI and the tests follow them).
//! - [`allocator`]: the allocator every service binary opts into (`service_allocator!`).
//! - `testing` (feature `testing`): what every crate's integration tests stand on: where Postgres and
//!   Redis are, and a database and key prefix of a test's own.

pub mod allocator;
pub mod config;
pub mod db;
pub mod domain;
pub mod engine;
pub mod ids;
pub mod outbound;
pub mod queue;
pub mod redis_url;
pub mod run_token;
pub mod secrets;
pub mod shutdown;
pub mod sse;
pub mod store;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod traces;

pub use config::Config;
