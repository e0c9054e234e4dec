//! Access control (docs/contract.md, "Access control"): every credential kind,
//! scopes, roles and members, OIDC, run tokens, policies, audit, isolation,
//! rate limits.

mod actors;
mod audit;
mod isolation;
mod keys;
mod logs;
pub(crate) mod oidc;
mod policies;
mod rate_limits;
mod roles;
mod scopes;
mod sdk;

pub(crate) use crate::support::access::{call_as, eventually, key, second_api, with, TARGET};
