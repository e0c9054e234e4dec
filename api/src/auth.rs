//! Authentication: who is calling, and on behalf of which project.
//!
//! SPEC §5 names four credential kinds; each resolves to a [`Principal`].
//! Today the internal secret is accepted; API keys, OIDC tokens and run
//! tokens resolve through the same `authenticate` function when their issue
//! lands, so handlers never change. Authorisation (scopes, roles) reads the
//! principal's `scopes`: `None` means unrestricted (SPEC §5.5 step 1).

use poem::Request;
use poem_openapi::auth::Bearer;
use poem_openapi::SecurityScheme;
use subtle::ConstantTimeEq;

use crate::state::AppState;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialKind {
    InternalSecret,
    ApiKey,
    Oidc,
    RunToken,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActorType {
    /// A person (internal secret with X-Actor-Id, or OIDC).
    User,
    ApiKey,
    /// The internal secret without actor headers: a trusted service.
    Service,
    Run,
}

#[derive(Clone, Debug)]
pub struct Principal {
    pub kind: CredentialKind,
    pub actor_id: Option<String>,
    pub actor_type: ActorType,
    /// The project the credential is confined to, or the one an internal
    /// caller named with X-Project-Id.
    pub project_id: Option<String>,
    /// `None`: every operation is allowed (internal secret).
    pub scopes: Option<Vec<String>>,
}

impl Principal {
    /// What goes in created_by / updated_by.
    pub fn actor(&self) -> Option<String> {
        self.actor_id.clone()
    }
}

/// An API key (`svc_...`), an OIDC token, a run token, or the internal secret,
/// passed as a Bearer token. The internal secret may also be sent as
/// `X-Internal-Secret`.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", rename = "bearerAuth", checker = "authenticate")]
pub struct Auth(pub Principal);

async fn authenticate(req: &Request, bearer: Bearer) -> poem::Result<Principal> {
    let state = req.data::<AppState>().ok_or_else(|| unauthorized("server misconfigured"))?;
    let token = bearer.token.trim();
    if token.is_empty() {
        return Err(unauthorized("empty bearer token"));
    }
    if let Some(secret) = &state.config.internal_secret {
        if bool::from(token.as_bytes().ct_eq(secret.expose().as_bytes())) {
            return Ok(internal_principal(req));
        }
    }
    if token.starts_with("svc_") {
        return Err(unauthorized("unknown API key"));
    }
    Err(unauthorized("invalid credentials"))
}

/// SPEC §5.4: only the internal secret trusts the actor headers.
fn internal_principal(req: &Request) -> Principal {
    let header = |name: &str| {
        req.header(name).map(str::trim).filter(|v| !v.is_empty() && v.len() <= 256).map(str::to_string)
    };
    let actor_id = header("x-actor-id");
    Principal {
        kind: CredentialKind::InternalSecret,
        actor_type: if actor_id.is_some() { ActorType::User } else { ActorType::Service },
        actor_id,
        project_id: header("x-project-id"),
        scopes: None,
    }
}

fn unauthorized(detail: &str) -> poem::Error {
    poem::Error::from_string(detail.to_string(), poem::http::StatusCode::UNAUTHORIZED)
}

/// Lets `X-Internal-Secret: <secret>` stand for `Authorization: Bearer
/// <secret>`, so the OpenAPI document keeps the single bearerAuth scheme.
pub async fn internal_secret_header<E: poem::Endpoint>(next: E, mut req: Request) -> poem::Result<E::Output> {
    if req.headers().get("authorization").is_none() {
        if let Some(v) = req.headers().get("x-internal-secret").and_then(|v| v.to_str().ok()) {
            if let Ok(h) = poem::http::HeaderValue::from_str(&format!("Bearer {}", v.trim())) {
                req.headers_mut().insert("authorization", h);
            }
        }
    }
    next.call(req).await
}
