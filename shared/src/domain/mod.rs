//! Pure domain types and rules: no I/O here.

pub mod job;
pub mod payload_schema;
pub mod result;
pub mod retry;
pub mod schedule;
pub mod status;

pub use job::{JobSpec, RateLimitKey};
pub use retry::{RetryPolicy, RetryStrategy};
pub use status::{ExecutionMode, RunStatus};
