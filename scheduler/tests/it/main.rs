//! Integration tests of the scheduler loops against a real Postgres and
//! Redis. Each test gets its own database and its own Redis key prefix, so
//! they run in parallel; set `TEST_LOG=1` to see the logs.

mod common;
mod idle;
mod loops;
mod promoter;
mod reaper;
mod reconciler;
mod tap;
