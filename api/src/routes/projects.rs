//! Projects and their settings (DECISIONS §2, SPEC §2.7, §4.5).

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::{check_id, Tag};
use crate::auth::Auth;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{self, Page};
use crate::state::AppState;

pub struct ProjectsApi;

/// A project: every resource belongs to one.
#[derive(Object)]
pub struct Project {
    pub id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Create a project.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateProject {
    /// Optional id (letters, digits, `_`, `-`, `.`; at most 64); generated when absent.
    pub id: Option<String>,
    pub name: String,
}

/// Project settings (SPEC §2.7).
#[derive(Object)]
pub struct ProjectSettings {
    pub project_id: String,
    pub default_region: String,
    pub plan_tier: String,
    /// Upper bound of an API key's lifetime in this project.
    pub max_key_lifetime_days: i64,
}

/// Change project settings; absent fields keep their value.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UpdateProjectSettings {
    pub default_region: Option<String>,
    pub plan_tier: Option<String>,
    pub max_key_lifetime_days: Option<i64>,
}

#[derive(ApiResponse)]
pub enum CreatedProject {
    #[oai(status = 201)]
    Created(Json<Project>),
}

#[derive(sqlx::FromRow)]
struct ProjectRow {
    id: String,
    name: String,
    default_region: String,
    plan_tier: String,
    max_key_lifetime_days: i32,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl ProjectRow {
    fn view(self) -> Project {
        Project { id: self.id, name: self.name, created_at: self.created_at, updated_at: self.updated_at }
    }
    fn settings(self) -> ProjectSettings {
        ProjectSettings {
            project_id: self.id,
            default_region: self.default_region,
            plan_tier: self.plan_tier,
            max_key_lifetime_days: self.max_key_lifetime_days.into(),
        }
    }
}

const COLS: &str = "id, name, default_region, plan_tier, max_key_lifetime_days, created_at, updated_at";

fn internal_only(auth: &Auth) -> ApiResult<()> {
    if auth.0.scopes.is_some() {
        return Err(ApiError::forbidden("projects are managed with the internal secret only"));
    }
    Ok(())
}

async fn load(state: &AppState, id: &str) -> ApiResult<ProjectRow> {
    check_id("project", id)?;
    sqlx::query_as(&format!("SELECT {COLS} FROM projects WHERE id = $1"))
        .bind(id)
        .fetch_optional(&state.pool)
        .await?
        .ok_or_else(|| ApiError::not_found("project", id))
}

#[OpenApi(tag = "Tag::Projects")]
impl ProjectsApi {
    /// Create a project (internal secret only).
    #[oai(path = "/v1/projects", method = "post")]
    async fn create(&self, state: Data<&AppState>, auth: Auth, body: Json<CreateProject>) -> ApiResult<CreatedProject> {
        internal_only(&auth)?;
        let mut errors = Vec::new();
        let id = match body.0.id.as_deref().map(str::trim) {
            None => switchyard_shared::ids::project_id(),
            Some(id) if switchyard_shared::ids::is_valid_external_id(id) => id.to_string(),
            Some(id) => {
                errors.push(crate::error::ErrorDetail {
                    location: "body.id".into(),
                    message: "1 to 64 letters, digits, '_', '-' or '.'".into(),
                    value: Some(id.into()),
                });
                String::new()
            }
        };
        let name = body.0.name.trim().to_string();
        if name.is_empty() || name.len() > 200 {
            errors.push(crate::error::ErrorDetail {
                location: "body.name".into(),
                message: "must be 1 to 200 characters".into(),
                value: Some(body.0.name.clone().into()),
            });
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        let row: ProjectRow = sqlx::query_as(&format!(
            "INSERT INTO projects (id, name, created_by) VALUES ($1, $2, $3) RETURNING {COLS}"
        ))
        .bind(&id)
        .bind(&name)
        .bind(auth.0.actor())
        .fetch_one(&state.pool)
        .await?;
        crate::audit::record(
            &state.pool,
            &auth.0,
            crate::audit::Change {
                project_id: &row.id,
                action: "project.created",
                resource_type: "project",
                resource_id: &row.id,
                details: serde_json::json!({"name": row.name}),
            },
        )
        .await?;
        Ok(CreatedProject::Created(Json(row.view())))
    }

    /// List projects (internal secret only), oldest first.
    #[oai(path = "/v1/projects", method = "get")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Project>>> {
        internal_only(&auth)?;
        let limit = pagination::limit(limit.0)?;
        let cursor = pagination::cursor(cursor.0)?;
        let rows: Vec<ProjectRow> = sqlx::query_as(&format!(
            "SELECT {COLS} FROM projects WHERE ($1::text IS NULL OR id > $1) ORDER BY id LIMIT $2"
        ))
        .bind(cursor)
        .bind(limit + 1)
        .fetch_all(&state.pool)
        .await?;
        Ok(Json(pagination::page(rows, limit, |r| r.id.clone(), ProjectRow::view)))
    }

    /// Get a project.
    #[oai(path = "/v1/projects/:project_id", method = "get")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, project_id: Path<String>) -> ApiResult<Json<Project>> {
        if !super::visible(&auth.0, &project_id) {
            return Err(ApiError::not_found("project", &project_id));
        }
        Ok(Json(load(&state, &project_id).await?.view()))
    }

    /// Get a project's settings.
    #[oai(path = "/v1/projects/:project_id/settings", method = "get")]
    async fn settings(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Path<String>,
    ) -> ApiResult<Json<ProjectSettings>> {
        if !super::visible(&auth.0, &project_id) {
            return Err(ApiError::not_found("project", &project_id));
        }
        Ok(Json(load(&state, &project_id).await?.settings()))
    }

    /// Change a project's settings (internal secret only).
    #[oai(path = "/v1/projects/:project_id/settings", method = "patch")]
    async fn update_settings(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Path<String>,
        body: Json<UpdateProjectSettings>,
    ) -> ApiResult<Json<ProjectSettings>> {
        internal_only(&auth)?;
        load(&state, &project_id).await?;
        let b = body.0;
        let mut errors = Vec::new();
        let mut check_text = |field: &str, v: &Option<String>| {
            if let Some(v) = v {
                if v.trim().is_empty() || v.len() > 64 {
                    errors.push(crate::error::ErrorDetail {
                        location: format!("body.{field}"),
                        message: "must be 1 to 64 characters".into(),
                        value: Some(v.clone().into()),
                    });
                }
            }
        };
        check_text("default_region", &b.default_region);
        check_text("plan_tier", &b.plan_tier);
        if let Some(d) = b.max_key_lifetime_days {
            if !(1..=3650).contains(&d) {
                errors.push(crate::error::ErrorDetail {
                    location: "body.max_key_lifetime_days".into(),
                    message: "must be between 1 and 3650".into(),
                    value: Some(d.into()),
                });
            }
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(errors));
        }
        let row: ProjectRow = sqlx::query_as(&format!(
            "UPDATE projects SET default_region = COALESCE($2, default_region), plan_tier = COALESCE($3, plan_tier),
                max_key_lifetime_days = COALESCE($4, max_key_lifetime_days)
             WHERE id = $1 RETURNING {COLS}"
        ))
        .bind(&*project_id)
        .bind(b.default_region)
        .bind(b.plan_tier)
        .bind(b.max_key_lifetime_days.map(|d| d as i32))
        .fetch_one(&state.pool)
        .await?;
        crate::audit::record(
            &state.pool,
            &auth.0,
            crate::audit::Change {
                project_id: &row.id,
                action: "project.settings_updated",
                resource_type: "project",
                resource_id: &row.id,
                details: serde_json::json!({
                    "default_region": row.default_region,
                    "plan_tier": row.plan_tier,
                    "max_key_lifetime_days": row.max_key_lifetime_days,
                }),
            },
        )
        .await?;
        Ok(Json(row.settings()))
    }
}
