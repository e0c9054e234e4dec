//! Job secrets (DECISIONS §2): write-only values, encrypted at rest with
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
use switchyard_shared::secrets::{is_valid_name, SecretsKey};

use super::jobs::load_visible;
use super::Tag;
use crate::auth::Auth;
use crate::error::{ApiError, ApiResult, ErrorDetail};
use crate::pagination::{self, Page};
use crate::state::AppState;

pub struct SecretsApi;

/// Secrets per job.
pub const MAX_SECRETS: i64 = 100;
/// Bytes of one value.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// A secret's name and times; the value is never returned.
#[derive(Object, sqlx::FromRow)]
pub struct JobSecret {
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Set a secret (a name already set is replaced).
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct PutSecret {
    /// Like an environment variable: `[A-Za-z_][A-Za-z0-9_]*`, at most 128.
    pub name: String,
    /// Write-only; at most 64 KiB.
    #[oai(write_only)]
    pub value: String,
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

#[derive(ApiResponse)]
pub enum SecretDeleted {
    #[oai(status = 204)]
    NoContent,
}

#[OpenApi(tag = "Tag::Jobs")]
impl SecretsApi {
    /// The names of a job's secrets, in name order (values are never returned).
    #[oai(path = "/v1/jobs/:job_id/secrets", method = "get")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        limit: Query<Option<i64>>,
        /// The last name of the previous page.
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<JobSecret>>> {
        let job = load_visible(&state, &auth, &job_id).await?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let rows: Vec<JobSecret> = sqlx::query_as(
            "SELECT name, created_at, updated_at FROM job_secrets WHERE job_id = $1 AND ($2::text IS NULL OR name > $2)
             ORDER BY name LIMIT $3",
        )
        .bind(&job.id)
        .bind(cursor)
        .bind(limit + 1)
        .fetch_all(&state.pool)
        .await?;
        Ok(Json(pagination::page(rows, limit, |r| r.name.clone(), |r| r)))
    }

    /// Set a job secret. It is encrypted before it is stored and reaches
    /// the job's target only in the dispatch body (`secrets.<name>`). 503
    /// when the server has no SECRETS_KEY. At most 100 secrets per job.
    #[oai(path = "/v1/jobs/:job_id/secrets", method = "post")]
    async fn put(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        body: Json<PutSecret>,
    ) -> ApiResult<SecretSaved> {
        let job = load_visible(&state, &auth, &job_id).await?;
        let b = body.0;
        let mut errors = Vec::new();
        if !is_valid_name(&b.name) {
            errors.push(ErrorDetail {
                location: "body.name".into(),
                message: "like an environment variable: [A-Za-z_][A-Za-z0-9_]*, at most 128 characters".into(),
                value: Some(b.name.clone().into()),
            });
        }
        if b.value.len() > MAX_VALUE_BYTES {
            // The value itself is never echoed back, not even in an error.
            errors.push(ErrorDetail {
                location: "body.value".into(),
                message: format!("at most {MAX_VALUE_BYTES} bytes"),
                value: None,
            });
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        let Some(key) = state.config.secrets_key.as_ref().map(SecretsKey::from_secret) else {
            return Err(ApiError::unavailable(
                "this server has no SECRETS_KEY configured, so it cannot store secrets; nothing was changed",
            ));
        };
        let (nonce, ciphertext) =
            key.encrypt(&job.id, &b.name, &b.value).map_err(|e| ApiError::internal("encrypting a job secret", &e))?;
        let actor = auth.0.actor();
        // Inserted only below the cap; a replacement never counts against it.
        let row: Option<(String, DateTime<Utc>, DateTime<Utc>, bool)> = sqlx::query_as(
            "INSERT INTO job_secrets (job_id, name, nonce, ciphertext, created_by, updated_by)
             SELECT $1, $2, $3, $4, $5, $5
             WHERE EXISTS (SELECT 1 FROM job_secrets WHERE job_id = $1 AND name = $2)
                OR (SELECT count(*) FROM job_secrets WHERE job_id = $1) < $6
             ON CONFLICT (job_id, name) DO UPDATE
                SET nonce = EXCLUDED.nonce, ciphertext = EXCLUDED.ciphertext, updated_by = EXCLUDED.updated_by
             RETURNING name, created_at, updated_at, (xmax = 0) AS inserted",
        )
        .bind(&job.id)
        .bind(&b.name)
        .bind(&nonce)
        .bind(&ciphertext)
        .bind(&actor)
        .bind(MAX_SECRETS)
        .fetch_optional(&state.pool)
        .await?;
        let Some((name, created_at, updated_at, inserted)) = row else {
            return Err(ApiError::invalid_field(
                "body.name",
                format!("the job already has {MAX_SECRETS} secrets; delete one first"),
                Some(b.name.into()),
            ));
        };
        // The name only: a value never leaves this handler but encrypted.
        crate::audit::record(
            &state.pool,
            &auth.0,
            crate::audit::Change {
                project_id: &job.project_id,
                action: "job_secret.set",
                resource_type: "job",
                resource_id: &job.id,
                details: serde_json::json!({"name": name, "replaced": !inserted}),
            },
        )
        .await?;
        let s = JobSecret { name, created_at, updated_at };
        Ok(if inserted { SecretSaved::Created(Json(s)) } else { SecretSaved::Replaced(Json(s)) })
    }

    /// Delete a job secret.
    #[oai(path = "/v1/jobs/:job_id/secrets/:name", method = "delete")]
    async fn delete(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        job_id: Path<String>,
        name: Path<String>,
    ) -> ApiResult<SecretDeleted> {
        let job = load_visible(&state, &auth, &job_id).await?;
        let gone = if is_valid_name(&name) {
            sqlx::query("DELETE FROM job_secrets WHERE job_id = $1 AND name = $2")
                .bind(&job.id)
                .bind(&name.0)
                .execute(&state.pool)
                .await?
                .rows_affected()
        } else {
            0
        };
        if gone == 0 {
            return Err(ApiError::not_found("secret", &name));
        }
        crate::audit::record(
            &state.pool,
            &auth.0,
            crate::audit::Change {
                project_id: &job.project_id,
                action: "job_secret.deleted",
                resource_type: "job",
                resource_id: &job.id,
                details: serde_json::json!({"name": name.0}),
            },
        )
        .await?;
        Ok(SecretDeleted::NoContent)
    }
}
