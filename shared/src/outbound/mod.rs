//! HTTP calls the service makes to its users' endpoints, the same for every
//! process: the worker's dispatches, and the scheduler's deliveries of the
//! outbox (terminal webhooks, subscriptions' events, notifications) and of
//! log drains. The worker sends only dispatches: a terminal webhook is a row
//! of the outbox (`store::deliveries`), written with the run's outcome, that
//! the scheduler's delivery sender (`scheduler/src/deliveries.rs`) sends and
//! retries.
//!
//! - [`client`]: the HTTP client ([`Http`]), the address policy applied at
//!   connect (and by the api at save), and the connect-time measurement
//!   behind `connect_ms`.
//! - [`target`]: which addresses may be reached when `TARGET_DENY_PRIVATE` is on.
//! - [`signing`]: the HMAC `X-Svc-Signature` headers.
//! - [`webhook`]: one attempt of a delivery of the outbox (terminal webhooks,
//!   subscriptions' events, stage and event-trigger notifications), signed.

pub mod client;
pub mod signing;
pub mod target;
pub mod webhook;

#[cfg(any(test, feature = "test-server"))]
pub mod test_server;

pub use client::{Http, TargetError};
