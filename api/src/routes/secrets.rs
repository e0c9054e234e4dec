//! Job secrets: write-only values, encrypted at rest with
//! `SECRETS_KEY` (`switchyard_shared::secrets`), delivered to the target in
//! the dispatch body's `secrets` object. Never returned, never logged: a
//! listing shows names and times only.
//!
//! An api without `SECRETS_KEY` refuses writes with 503 (the server, not
//! the request, is what is missing); listing and deleting still work.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::{json, Value};
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::{FieldError, FieldErrors};
use switchyard_shared::secrets::{is_valid_name, SecretsKey};
use switchyard_shared::store::{self, secrets::SecretName};

use super::{load_job, view_from_row, Done, Tag};
use crate::audit::{self, Change};
use crate::auth::Auth;
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

pub struct SecretsApi;

/// A signing key (a job's webhook_secret, a subscription's or a log drain's
/// secret) sealed for its row, under the rule of job secrets: a server
/// without SECRETS_KEY refuses to store one (503) rather than keep it in
/// the clear.
pub(crate) fn seal_signing_key(state: &AppState, owner: &str, name: &str, plaintext: &str) -> ApiResult<String> {
    let Some(key) = state.config.secrets_key.as_ref().map(SecretsKey::from_secret) else {
        return Err(ApiError::unavailable(
            "this server has no SECRETS_KEY configured, so it cannot store signing secrets; nothing was changed",
        ));
    };
    key.seal(owner, name, plaintext).map_err(|e| ApiError::internal("sealing a signing secret", &e))
}

/// Secrets per job.
pub const MAX_SECRETS: i64 = 100;
/// Characters of one value.
pub const MAX_VALUE_CHARS: usize = 64 * 1024;
/// A value.
pub const VALUE: Text = Text::any(0, MAX_VALUE_CHARS);

/// A secret's name and times; the value is never returned.
#[derive(Object)]
pub struct JobSecret {
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

view_from_row!(SecretName => JobSecret { name, created_at, updated_at });

/// Set a secret (a name already set is replaced).
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct PutSecret {
    /// Like an environment variable: `[A-Za-z_][A-Za-z0-9_]*`, at most 128.
    pub name: String,
    /// Write-only; at most 65536 characters.
    #[oai(write_only)]
    pub value: String,
}

/// The value rules of PutSecret (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::text;
    use Place::Property;
    vec![
        (Property("PutSecret", "name"), text(&switchyard_shared::secrets::NAME)),
        (Property("PutSecret", "value"), text(&VALUE)),
    ]
}

#[derive(ApiResponse)]
pub enum SecretSaved {
    /// A new secret.
    #[oai(status = 201)]
    Created(Json<JobSecret>),
    /// An existing secret's value was replaced.
    #[oai(status = 200)]
    Replaced(Json<JobSecret>),
}

/// A secret's name and the size of its value.
fn validate_secret(b: &PutSecret) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    let name_message = "like an environment variable: [A-Za-z_][A-Za-z0-9_]*, at most 128 characters";
    e.check(is_valid_name(&b.name), "body.name", name_message, Some(b.name.as_str().into()));
    // The value itself is never echoed back, not even in an error.
    e.check(VALUE.ok(&b.value), "body.value", format!("at most {MAX_VALUE_CHARS} characters"), None);
    e.finish()
}

#[OpenApi(tag = "Tag::Jobs")]
impl SecretsApi {
    /// The names of a job's secrets, in name order (values are never returned).
    #[oai(path = "/v1/jobs/:job_id/secrets", method = "get", operation_id = "listJobSecrets")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        /// The last name of the previous page.
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<JobSecret>>> {
        let job = load_job(&state, &auth, &job_id).await?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::secrets::list(&state.pool, &job.id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.name.clone(), JobSecret::from)))
    }

    /// Set a job secret. It is encrypted before it is stored and reaches
    /// the job's target only in the dispatch body (`secrets.<name>`). 503
    /// when the server has no SECRETS_KEY. At most 100 secrets per job.
    #[oai(path = "/v1/jobs/:job_id/secrets", method = "post", operation_id = "putJobSecret")]
    async fn put(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        body: JsonBody<PutSecret>,
    ) -> ApiResult<SecretSaved> {
        let job = load_job(&state, &auth, &job_id).await?;
        let b = body.0;
        validate_secret(&b)?;
        let Some(key) = state.config.secrets_key.as_ref().map(SecretsKey::from_secret) else {
            return Err(ApiError::unavailable(
                "this server has no SECRETS_KEY configured, so it cannot store secrets; nothing was changed",
            ));
        };
        let (nonce, ciphertext) =
            key.encrypt(&job.id, &b.name, &b.value).map_err(|e| ApiError::internal("encrypting a job secret", &e))?;
        let sealed = store::secrets::Sealed {
            job_id: &job.id,
            name: &b.name,
            nonce: &nonce,
            ciphertext: &ciphertext,
            actor: auth.0.actor_id.as_deref(),
        };
        // Inserted only below the cap; a replacement never counts against it.
        let Some((saved, inserted)) = store::secrets::put(&state.pool, &sealed, MAX_SECRETS).await? else {
            return Err(ApiError::invalid_field(
                "body.name",
                format!("the job already has {MAX_SECRETS} secrets; delete one first"),
                Some(b.name.into()),
            ));
        };
        // The name only: a value never leaves this handler but encrypted.
        let details = json!({"name": saved.name, "replaced": !inserted});
        audit::record(&state.pool, &auth.0, Change::new(&job.project_id, "job_secret.set", ("job", &job.id), details))
            .await?;
        let s = JobSecret::from(saved);
        Ok(if inserted { SecretSaved::Created(Json(s)) } else { SecretSaved::Replaced(Json(s)) })
    }

    /// Delete a job secret.
    #[oai(path = "/v1/jobs/:job_id/secrets/:name", method = "delete", operation_id = "deleteJobSecret")]
    async fn delete(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        name: Path<String>,
    ) -> ApiResult<Done> {
        let job = load_job(&state, &auth, &job_id).await?;
        let gone = is_valid_name(&name) && store::secrets::delete(&state.pool, &job.id, &name).await?;
        if !gone {
            return Err(ApiError::not_found("secret", &name));
        }
        let details = json!({"name": name.0});
        audit::record(
            &state.pool,
            &auth.0,
            Change::new(&job.project_id, "job_secret.deleted", ("job", &job.id), details),
        )
        .await?;
        Ok(Done::NoContent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_named_like_an_env_var_and_its_value_never_echoed() {
        let secret = |name: &str, n: usize| PutSecret { name: name.into(), value: "x".repeat(n) };
        assert_eq!(validate_secret(&secret("API_TOKEN", MAX_VALUE_CHARS)), Ok(()));
        let got = validate_secret(&secret("1st", MAX_VALUE_CHARS + 1)).unwrap_err();
        assert_eq!((got[0].location.as_str(), got[0].value.clone()), ("body.name", Some("1st".into())));
        assert_eq!(got[1], FieldError::new("body.value", format!("at most {MAX_VALUE_CHARS} characters"), None));
    }
}
