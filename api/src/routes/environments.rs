//! Environments (DECISIONS §2): named deployment targets of a project
//! (production, staging...) that jobs may name in `environment_id`.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::{check_id, project_of, visible, Tag};
use crate::auth::Auth;
use crate::error::{ApiError, ApiResult, ErrorDetail};
use crate::pagination::{self, Page};
use crate::state::AppState;

pub struct EnvironmentsApi;

#[derive(Object, sqlx::FromRow)]
pub struct Environment {
    pub id: String,
    pub project_id: String,
    pub name: String,
    #[oai(skip_serializing_if_is_none)]
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateEnvironment {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    /// Unique in the project; 1 to 64 of `a-z 0-9 - _`.
    pub name: String,
    /// At most 1024 characters.
    pub description: Option<String>,
}

#[derive(ApiResponse)]
pub enum CreatedEnvironment {
    #[oai(status = 201)]
    Created(Json<Environment>),
}

#[derive(ApiResponse)]
pub enum DeletedEnvironment {
    #[oai(status = 204)]
    NoContent,
}

const COLS: &str = "id, project_id, name, description, created_at";

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// 422 unless `environment_id` names an environment of `project_id`. For
/// job create and update.
pub async fn check_job_environment(pool: &sqlx::PgPool, project_id: &str, environment_id: &str) -> ApiResult<()> {
    let found: Option<String> = if switchyard_shared::ids::is_valid_external_id(environment_id) {
        sqlx::query_scalar("SELECT id FROM environments WHERE id = $1 AND project_id = $2")
            .bind(environment_id)
            .bind(project_id)
            .fetch_optional(pool)
            .await?
    } else {
        None
    };
    match found {
        Some(_) => Ok(()),
        None => Err(ApiError::invalid_field(
            "body.environment_id",
            "no such environment in this project",
            Some(environment_id.into()),
        )),
    }
}

async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Environment> {
    check_id("environment", id)?;
    let env: Option<Environment> = sqlx::query_as(&format!("SELECT {COLS} FROM environments WHERE id = $1"))
        .bind(id)
        .fetch_optional(&state.pool)
        .await?;
    match env {
        Some(e) if visible(&auth.0, &e.project_id) => Ok(e),
        _ => Err(ApiError::not_found("environment", id)),
    }
}

#[OpenApi(tag = "Tag::Environments")]
impl EnvironmentsApi {
    /// Create an environment. A name already used in the project is 409.
    #[oai(path = "/v1/environments", method = "post")]
    async fn create(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: Json<CreateEnvironment>,
    ) -> ApiResult<CreatedEnvironment> {
        let b = body.0;
        let project_id = project_of(&auth.0, b.project_id.as_deref())?;
        let mut errors = Vec::new();
        if !valid_name(&b.name) {
            errors.push(ErrorDetail {
                location: "body.name".into(),
                message: "1 to 64 lowercase letters, digits, '-' or '_'".into(),
                value: Some(b.name.clone().into()),
            });
        }
        if let Some(d) = &b.description {
            if d.len() > 1024 || d.contains('\0') {
                errors.push(ErrorDetail {
                    location: "body.description".into(),
                    message: "at most 1024 characters".into(),
                    value: None,
                });
            }
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        super::project_exists(&state, &project_id).await?;
        let env: Environment = sqlx::query_as(&format!(
            "INSERT INTO environments (id, project_id, name, description, created_by) VALUES ($1, $2, $3, $4, $5)
             RETURNING {COLS}"
        ))
        .bind(switchyard_shared::ids::new_id("env"))
        .bind(&project_id)
        .bind(&b.name)
        .bind(&b.description)
        .bind(auth.0.actor())
        .fetch_one(&state.pool)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(d) if d.constraint() == Some("environments_project_name_key") => {
                ApiError::conflict(format!("an environment named {:?} already exists in the project", b.name))
            }
            _ => ApiError::from(e),
        })?;
        crate::audit::record(
            &state.pool,
            &auth.0,
            crate::audit::Change {
                project_id: &env.project_id,
                action: "environment.created",
                resource_type: "environment",
                resource_id: &env.id,
                details: serde_json::json!({"name": env.name}),
            },
        )
        .await?;
        Ok(CreatedEnvironment::Created(Json(env)))
    }

    /// Environments of a project, newest first.
    #[oai(path = "/v1/environments", method = "get")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Environment>>> {
        let project_id = project_of(&auth.0, project_id.0.as_deref())?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let rows: Vec<Environment> = sqlx::query_as(&format!(
            "SELECT {COLS} FROM environments WHERE project_id = $1 AND ($2::text IS NULL OR id < $2)
             ORDER BY id DESC LIMIT $3"
        ))
        .bind(&project_id)
        .bind(cursor)
        .bind(limit + 1)
        .fetch_all(&state.pool)
        .await?;
        Ok(Json(pagination::page(rows, limit, |r| r.id.clone(), |r| r)))
    }

    /// Get an environment.
    #[oai(path = "/v1/environments/:environment_id", method = "get")]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        environment_id: Path<String>,
    ) -> ApiResult<Json<Environment>> {
        Ok(Json(load(&state, &auth, &environment_id).await?))
    }

    /// Delete an environment. 409 while a job names it.
    #[oai(path = "/v1/environments/:environment_id", method = "delete")]
    async fn delete(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        environment_id: Path<String>,
    ) -> ApiResult<DeletedEnvironment> {
        let env = load(&state, &auth, &environment_id).await?;
        // Check and delete in one statement. Jobs name environments inside
        // their definition, without a foreign key, so a job saved at the same
        // moment may still name it; the environment is only a label to it.
        let result: (i64, i64) = sqlx::query_as(
            "WITH users AS (
                SELECT count(*) AS n FROM jobs WHERE project_id = $2 AND deleted_at IS NULL AND spec->>'environment_id' = $1
             ), d AS (
                DELETE FROM environments WHERE id = $1 AND (SELECT n FROM users) = 0 RETURNING id
             )
             SELECT (SELECT n FROM users), (SELECT count(*) FROM d)",
        )
        .bind(&env.id)
        .bind(&env.project_id)
        .fetch_one(&state.pool)
        .await?;
        match result {
            (_, 1) => {
                crate::audit::record(
                    &state.pool,
                    &auth.0,
                    crate::audit::Change {
                        project_id: &env.project_id,
                        action: "environment.deleted",
                        resource_type: "environment",
                        resource_id: &env.id,
                        details: serde_json::json!({"name": env.name}),
                    },
                )
                .await?;
                Ok(DeletedEnvironment::NoContent)
            }
            (n, _) if n > 0 => Err(ApiError::conflict(format!("{n} job(s) name this environment; change them first"))),
            _ => Err(ApiError::not_found("environment", &env.id)),
        }
    }
}
