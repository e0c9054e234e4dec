//! Findings of a penetration test, one test per finding, and the class-level
//! guarantees that close each class (see each module's doc).

mod addresses;
mod approvals;
mod credentials;
mod expressions;
mod headers;
mod notifications;
mod policies;
mod quotas;
mod run_tokens;
mod secrets;
mod slow_clients;
mod stored_secrets;
mod usage;
