//! Pure domain types and rules: no I/O here.

pub mod batching;
pub mod cancel_on;
pub mod cron_expr;
pub mod error_class;
pub mod event_key;
pub mod expression_budget;
pub mod field_errors;
pub mod job;
pub mod limits;
pub mod notification;
pub mod one_per_key;
pub mod payload_schema;
pub mod result;
pub mod retry;
pub mod rules;
pub mod run_metadata;
pub mod run_record;
pub mod schedule;
pub mod status;
pub mod step;
pub mod step_logic;
pub mod trigger;
pub mod workflow;
pub mod workflow_plan;
pub mod workflow_run;

pub use field_errors::{child, FieldError, FieldErrors};
pub use job::{JobSpec, RateLimitKey};
pub use retry::{RetryPolicy, RetryStrategy};
pub use status::{ExecutionMode, RunStatus};
