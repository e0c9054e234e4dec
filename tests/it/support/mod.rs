//! Helpers the tests of several modules share. A test module keeps its own
//! helpers private; what two modules need lives here, so no test module
//! imports another.

pub mod access;
pub mod oidc;
pub mod queue;
pub mod sdk;
pub mod sse;
pub mod workflows;
