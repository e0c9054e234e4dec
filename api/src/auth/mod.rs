//! Authentication and authorisation: who is calling, on behalf of which
//! project, and whether the operation is allowed.
//!
//! Four credential kinds (docs/contract.md, "Access control"); each resolves to a [`Principal`] in
//! `authenticate`, the checker of the one bearerAuth scheme:
//!
//! | bearer | kind | confined to | allowed by |
//! |---|---|---|---|
//! | the internal secret | `InternalSecret` | nothing (X-Project-Id names a project) | everything |
//! | `svc_...` | `ApiKey` | the key's project | the key's scopes (empty: all) |
//! | an HS256 JWT | `RunToken` | its run's project | /sdk/v1 operations of its own run only |
//! | any other JWT (OIDC on) | `Oidc` | the `project_id` claim, else X-Project-Id | the member's role in that project |
//!
//! The same checker then looks up the operation the router matched in
//! [`scopes::OPERATIONS`] and applies its requirement (`authorize`), so a
//! handler only ever sees an allowed principal. `scopes: None` means
//! unrestricted (the internal secret); every other kind carries `Some` and
//! is confined to its project by `routes::project_of` and `routes::visible`.
//! Resource policies, which need the resource, are checked by the handlers
//! through [`policy::check`].
//!
//! Submodules: [`scopes`] (the table), [`keys`], [`oidc`], [`run_token`],
//! [`rbac`] (roles and members), [`policy`], [`cache`] (short-lived caches
//! invalidated across processes), [`actors`] (known actor profiles).

pub mod actors;
pub mod cache;
pub mod keys;
pub mod oidc;
pub mod policy;
pub mod rbac;
pub mod run_token;
pub mod scopes;

use std::sync::Arc;
use std::time::Duration;

use poem::Request;
use poem_openapi::auth::Bearer;
use poem_openapi::SecurityScheme;
use subtle::ConstantTimeEq;
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::FieldError;
use switchyard_shared::ids::EXTERNAL_ID;
use switchyard_shared::store::{self, api_keys::KeyRecord};
use switchyard_shared::Config;

use self::cache::{Throttle, VersionedCache};
use self::rbac::Membership;
use self::scopes::{Operation, Requirement};
use crate::problem::RequestId;
use crate::state::AppState;

/// The project an internal-secret caller (or an OIDC token without a
/// `project_id` claim) acts in.
pub const PROJECT_HEADER: &str = "X-Project-Id";
/// The person an internal-secret caller acts for, and their profile.
pub const ACTOR_ID_HEADER: &str = "X-Actor-Id";
pub const ACTOR_EMAIL_HEADER: &str = "X-Actor-Email";
pub const ACTOR_NAME_HEADER: &str = "X-Actor-Name";

/// An actor header's value: 1 to 256 visible ASCII characters (spaces
/// inside only).
pub const ACTOR: Text = Text::form(1, 256, r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$", |v| {
    let b = v.as_bytes();
    b.iter().all(|c| (0x20..0x7f).contains(c)) && b.first() != Some(&b' ') && b.last() != Some(&b' ')
});

/// The headers above as the document states them, on every operation that
/// takes a credential (`crate::document`): name, description, and the rule
/// of the value, which a caller the header is read for must keep (400
/// otherwise).
pub const CALLER_HEADERS: [(&str, &str, Text); 4] = [
    (
        PROJECT_HEADER,
        "The project the call acts in, for the internal secret (and an OIDC token without a project_id claim). \
         A project_id in the query or body that names another project is 422.",
        EXTERNAL_ID,
    ),
    (
        ACTOR_ID_HEADER,
        "Internal secret only: the person the call acts for, recorded as created_by / updated_by.",
        ACTOR,
    ),
    (ACTOR_EMAIL_HEADER, "Internal secret only, with X-Actor-Id: the person's email, kept in their profile.", ACTOR),
    (ACTOR_NAME_HEADER, "Internal secret only, with X-Actor-Id: the person's name, kept in their profile.", ACTOR),
];

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

impl ActorType {
    pub fn as_str(&self) -> &'static str {
        match self {
            ActorType::User => "user",
            ActorType::ApiKey => "api_key",
            ActorType::Service => "service",
            ActorType::Run => "run",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Principal {
    pub kind: CredentialKind,
    /// `apikey:<key_id>`, the OIDC subject, X-Actor-Id (internal secret), or `run:<run_id>`.
    pub actor_id: Option<String>,
    pub actor_type: ActorType,
    /// The project the credential is confined to, or the one an internal
    /// caller named with X-Project-Id.
    pub project_id: Option<String>,
    /// `None`: every operation is allowed (internal secret).
    pub scopes: Option<Vec<String>>,
    /// The API key's id.
    pub key_id: Option<String>,
    /// An OIDC user's member role and the roles it inherits.
    pub roles: Vec<String>,
    /// A run token's run.
    pub run_id: Option<String>,
    /// A run token's attempt (the dispatch that minted it).
    pub run_attempt: Option<i32>,
    /// The scope the operation required: the action resource policies match.
    pub action: Option<&'static str>,
    /// The request's X-Request-Id, recorded in audit events.
    pub request_id: Option<String>,
    /// The auth version read while authenticating, reused by the policy
    /// check of the same request (one Redis read per request).
    pub auth_version: Option<cache::Version>,
}

impl Principal {
    /// What goes in created_by / updated_by.
    pub fn actor(&self) -> Option<String> {
        self.actor_id.clone()
    }

    fn new(kind: CredentialKind, actor_type: ActorType) -> Principal {
        Principal {
            kind,
            actor_id: None,
            actor_type,
            project_id: None,
            scopes: None,
            key_id: None,
            roles: Vec::new(),
            run_id: None,
            run_attempt: None,
            action: None,
            request_id: None,
            auth_version: None,
        }
    }
}

/// The per-process state of authentication.
pub struct AuthState {
    pub oidc: Option<oidc::OidcVerifier>,
    pub keys: VersionedCache<String, Option<KeyRecord>>,
    pub members: VersionedCache<(String, String), Option<Membership>>,
    pub policies: VersionedCache<String, Arc<Vec<store::policies::PolicyRule>>>,
    /// last_used_at is written at most once a minute per key and process.
    pub key_use: Throttle<String>,
    pub actors: actors::ActorSync,
}

impl AuthState {
    pub fn from_config(c: &Config) -> anyhow::Result<AuthState> {
        Ok(AuthState {
            oidc: oidc::OidcVerifier::from_config(c)?,
            keys: VersionedCache::new(Duration::from_secs(60)),
            members: VersionedCache::new(Duration::from_secs(30)),
            policies: VersionedCache::new(Duration::from_secs(30)),
            key_use: Throttle::new(Duration::from_secs(60)),
            actors: actors::ActorSync::default(),
        })
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
    let op = req.data::<poem::PathPattern>().and_then(|p| scopes::operation(req.method().as_str(), &p.0));
    let mut p = resolve(state, req, bearer.token.trim()).await?;
    p.request_id = req.data::<RequestId>().map(|r| r.0.clone());
    authorize(&mut p, op, req)?;
    Ok(p)
}

/// Credential to principal (authentication only).
async fn resolve(state: &AppState, req: &Request, token: &str) -> poem::Result<Principal> {
    if token.is_empty() {
        return Err(unauthorized("empty bearer token"));
    }
    if let Some(secret) = &state.config.internal_secret {
        if bool::from(token.as_bytes().ct_eq(secret.expose().as_bytes())) {
            return internal_principal(state, req);
        }
        // An OIDC token may travel with the internal secret (a
        // gateway in front): full access, the actor taken from the token.
        let header_ok = req
            .header("x-internal-secret")
            .is_some_and(|v| bool::from(v.trim().as_bytes().ct_eq(secret.expose().as_bytes())));
        if header_ok && !token.starts_with(keys::PREFIX) {
            if let Some(verifier) = &state.auth.oidc {
                let claims = verifier.verify(token).map_err(|e| unauthorized(&e))?;
                let mut p = Principal::new(CredentialKind::InternalSecret, ActorType::User);
                p.project_id = match claims.project_id.clone() {
                    Some(p) => Some(p),
                    None => header(req, PROJECT_HEADER)?,
                };
                state.auth.actors.observe(&state.pool, &claims.sub, claims.email, claims.name);
                p.actor_id = Some(claims.sub);
                return Ok(p);
            }
        }
    }
    if token.starts_with(keys::PREFIX) {
        return api_key_principal(state, token).await;
    }
    if run_token::looks_like_run_token(token) {
        let Some(secret) = &state.config.jwt_signing_key else {
            return Err(unauthorized("run tokens are not accepted by this server"));
        };
        let claims = run_token::verify(token, secret.expose().as_bytes()).map_err(|e| unauthorized(&e))?;
        let mut p = Principal::new(CredentialKind::RunToken, ActorType::Run);
        p.actor_id = Some(format!("run:{}", claims.sub));
        p.project_id = Some(claims.project_id);
        p.scopes = Some(Vec::new());
        p.run_id = Some(claims.sub);
        p.run_attempt = claims.attempt;
        return Ok(p);
    }
    if let Some(verifier) = &state.auth.oidc {
        let claims = verifier.verify(token).map_err(|e| unauthorized(&e))?;
        return oidc_principal(state, req, claims).await;
    }
    Err(unauthorized("invalid credentials"))
}

/// Only the internal secret trusts the actor headers: an API key or a
/// token names its own actor, and cannot act as someone else.
fn internal_principal(state: &AppState, req: &Request) -> poem::Result<Principal> {
    let actor_id = header(req, ACTOR_ID_HEADER)?;
    let (email, name) = (header(req, ACTOR_EMAIL_HEADER)?, header(req, ACTOR_NAME_HEADER)?);
    let mut p = Principal::new(
        CredentialKind::InternalSecret,
        if actor_id.is_some() { ActorType::User } else { ActorType::Service },
    );
    if let Some(id) = &actor_id {
        state.auth.actors.observe(&state.pool, id, email, name);
    }
    p.actor_id = actor_id;
    p.project_id = header(req, PROJECT_HEADER)?;
    Ok(p)
}

async fn api_key_principal(state: &AppState, token: &str) -> poem::Result<Principal> {
    let hash = keys::hash(token);
    let version = cache::current_version(&state.queue).await;
    let record = match state.auth.keys.get(&version, &hash) {
        Some(r) => r,
        None => {
            let r = store::api_keys::by_hash(&state.pool, &hash).await.map_err(db_error)?;
            state.auth.keys.put(&version, hash, r.clone());
            r
        }
    };
    let Some(key) = record else { return Err(unauthorized("unknown API key")) };
    if let Some(why) = key.refusal(chrono::Utc::now()) {
        return Err(unauthorized(why));
    }
    if state.auth.key_use.due(key.id.clone()) {
        let pool = state.pool.clone();
        let id = key.id.clone();
        tokio::spawn(async move {
            if let Err(e) = store::api_keys::touch_last_used(&pool, &id).await {
                tracing::warn!(key_id = %id, error = %e, "could not record the key's last use");
            }
        });
    }
    let mut p = Principal::new(CredentialKind::ApiKey, ActorType::ApiKey);
    p.actor_id = Some(format!("apikey:{}", key.id));
    p.project_id = Some(key.project_id.clone());
    p.scopes = Some(key.effective_scopes());
    p.key_id = Some(key.id);
    p.auth_version = Some(version);
    Ok(p)
}

async fn oidc_principal(state: &AppState, req: &Request, claims: oidc::OidcClaims) -> poem::Result<Principal> {
    let header_project = header(req, PROJECT_HEADER)?;
    let project = match (&claims.project_id, header_project) {
        (Some(c), Some(h)) if *c != h => {
            return Err(forbidden("X-Project-Id names another project than the token's project_id claim"))
        }
        (Some(c), _) => Some(c.clone()),
        (None, h) => h,
    };
    state.auth.actors.observe(&state.pool, &claims.sub, claims.email.clone(), claims.name.clone());
    let mut p = Principal::new(CredentialKind::Oidc, ActorType::User);
    p.actor_id = Some(claims.sub.clone());
    p.scopes = Some(Vec::new());
    if let Some(project) = project {
        let version = cache::current_version(&state.queue).await;
        let key = (project.clone(), claims.sub.clone());
        let m = match state.auth.members.get(&version, &key) {
            Some(m) => m,
            None => {
                let m = rbac::membership(&state.pool, &project, &claims.sub).await.map_err(db_error)?;
                state.auth.members.put(&version, key, m.clone());
                m
            }
        };
        if let Some(m) = m {
            p.scopes = Some(m.permissions);
            p.roles = m.roles;
        }
        p.auth_version = Some(version);
        p.project_id = Some(project);
    }
    Ok(p)
}

/// Applies the operation's requirement: the internal secret passes, a key
/// needs the scope among its scopes, a user among its role's permissions,
/// a run token the operation to be on its own run; anything else is refused.
fn authorize(p: &mut Principal, op: Option<Operation>, req: &Request) -> poem::Result<()> {
    let internal = p.kind == CredentialKind::InternalSecret;
    let Some(op) = op else {
        // Not in the table: fail closed (the table test names the culprit).
        return if internal { Ok(()) } else { Err(forbidden("this operation declares no required scope")) };
    };
    match op.requirement {
        Requirement::Public => Ok(()),
        Requirement::RunToken => match p.kind {
            CredentialKind::InternalSecret => Ok(()),
            CredentialKind::RunToken => {
                let in_path =
                    op.param_index("run_id").and_then(|i| req.uri().path().split('/').filter(|s| !s.is_empty()).nth(i));
                if in_path.is_some() && in_path == p.run_id.as_deref() {
                    Ok(())
                } else {
                    Err(forbidden("the run token is for another run"))
                }
            }
            _ => Err(forbidden("SDK operations take the run token of the run")),
        },
        _ if p.kind == CredentialKind::RunToken => {
            Err(unauthorized("run tokens are valid only for /sdk/v1 operations"))
        }
        Requirement::Internal if internal => Ok(()),
        Requirement::Internal => Err(forbidden("this operation needs the internal secret")),
        Requirement::Scope(s) => {
            p.action = Some(s);
            match &p.scopes {
                None => Ok(()),
                Some(held) if scopes::covers(held, s) => Ok(()),
                Some(_) if p.kind == CredentialKind::Oidc && p.project_id.is_none() => {
                    Err(forbidden("the token names no project: add a project_id claim or send X-Project-Id"))
                }
                Some(_) if p.kind == CredentialKind::Oidc && p.roles.is_empty() => {
                    Err(forbidden("the user is not a member of this project"))
                }
                Some(_) => Err(forbidden(&format!("this operation needs the scope {s}"))),
            }
        }
    }
}

/// A caller header's value: `None` when absent, 422 at `header.<name>`
/// when it breaks its rule (`CALLER_HEADERS`), as any value breaking a
/// rule the document states.
fn header(req: &Request, name: &str) -> poem::Result<Option<String>> {
    let Some(raw) = req.headers().get(name) else { return Ok(None) };
    let rule = CALLER_HEADERS.iter().find(|(n, _, _)| *n == name).map(|(_, _, r)| r).unwrap_or(&ACTOR);
    match raw.to_str() {
        Ok(v) if rule.ok(v) => Ok(Some(v.to_string())),
        _ => {
            let message = if name == PROJECT_HEADER {
                "1 to 64 letters, digits, '_', '-' or '.'"
            } else {
                "1 to 256 visible ASCII characters, no space first or last"
            };
            let location = format!("header.{name}");
            let detail = format!("{location}: {message}");
            let errors = vec![FieldError::new(location, message, None)];
            Err(crate::strict_json::BodyRefused { status: 422, detail, errors }.into())
        }
    }
}

fn unauthorized(detail: &str) -> poem::Error {
    poem::Error::from_string(detail.to_string(), poem::http::StatusCode::UNAUTHORIZED)
}

fn forbidden(detail: &str) -> poem::Error {
    poem::Error::from_string(detail.to_string(), poem::http::StatusCode::FORBIDDEN)
}

fn db_error(e: sqlx::Error) -> poem::Error {
    tracing::warn!(error = %e, "credential lookup failed");
    poem::Error::from_string(
        "the database is unavailable; retry later".to_string(),
        poem::http::StatusCode::SERVICE_UNAVAILABLE,
    )
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
