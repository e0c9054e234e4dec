//! Projects and their settings, and the checks of their bodies. Every
//! resource belongs to one project; only the internal secret creates
//! projects, lists them or changes their settings.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};

use serde_json::{json, Value};
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::{FieldError, FieldErrors};
use switchyard_shared::store::{self, projects::ProjectRow};

use super::{found, name_rule, tenant, view_from_row, Created, Tag};
use crate::audit::{self, Change};
use crate::auth::Auth;
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

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

/// Project settings.
#[derive(Object)]
pub struct ProjectSettings {
    pub project_id: String,
    pub default_region: String,
    pub plan_tier: String,
    /// Upper bound of an API key's lifetime in this project.
    pub max_key_lifetime_days: i64,
    /// Finished runs, workflow runs, delivered or dead webhook deliveries
    /// and events older than this many days are deleted, with their
    /// attempts, logs and records (default 30; 1 to 3650).
    pub retention_days: i64,
}

/// Change project settings; absent fields keep their value.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UpdateProjectSettings {
    pub default_region: Option<String>,
    pub plan_tier: Option<String>,
    pub max_key_lifetime_days: Option<i64>,
    /// 1 to 3650 days.
    pub retention_days: Option<i64>,
}

/// The value rules of CreateProject and UpdateProjectSettings (see
/// `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{range, text};
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::Property;
    let mut r =
        vec![(Property("CreateProject", "id"), text(&ID)), (Property("CreateProject", "name"), text(&super::NAME))];
    for prop in ["default_region", "plan_tier"] {
        r.push((Property("UpdateProjectSettings", prop), text(&SETTING)));
    }
    r.push((Property("UpdateProjectSettings", "max_key_lifetime_days"), range(MAX_KEY_LIFETIME_DAYS)));
    r.push((Property("UpdateProjectSettings", "retention_days"), range(RETENTION_DAYS)));
    r
}

/// The key a project's receivers verify its notifications with.
#[derive(Object)]
pub struct SigningSecret {
    pub project_id: String,
    /// HMAC-SHA256 key of every delivery that has no secret of its own: a
    /// step's stage notifications to URLs, event-trigger notifications
    /// (event_notify_url), and the terminal webhook of a job without a
    /// webhook_secret. Verify `X-Svc-Signature` against `sha256=` and the
    /// lowercase hex HMAC of `<X-Svc-Timestamp>.<raw body>` under this
    /// value (docs/contract.md, "Signatures").
    pub signing_secret: String,
}

view_from_row!(ProjectRow => Project { id, name, created_at, updated_at });

fn settings(r: ProjectRow) -> ProjectSettings {
    ProjectSettings {
        project_id: r.id,
        default_region: r.default_region,
        plan_tier: r.plan_tier,
        max_key_lifetime_days: r.max_key_lifetime_days.into(),
        retention_days: r.retention_days.into(),
    }
}

fn internal_only(auth: &Auth) -> ApiResult<()> {
    if auth.0.scopes.is_some() {
        return Err(ApiError::forbidden("projects are managed with the internal secret only"));
    }
    Ok(())
}

/// The project, 404 unless the caller may see it.
async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<ProjectRow> {
    found("project", id, store::projects::get(&state.pool, tenant(&auth.0), id)).await
}

/// A new project's id when given and its name (trimmed).
fn validate_project(b: &CreateProject) -> Result<(Option<String>, String), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    if let Some(id) = b.id.as_deref() {
        let ok = switchyard_shared::ids::EXTERNAL_ID.ok(id);
        e.check(ok, "body.id", "1 to 64 letters, digits, '_', '-' or '.'", Some(id.into()));
    }
    name_rule(&mut e, &b.name);
    e.finish()?;
    Ok((b.id.clone(), b.name.trim().to_string()))
}

/// A project's region and plan tier.
pub const SETTING: Text = Text::not_blank(1, 64);
/// The bounds of a project's key lifetime and retention, in days.
pub const MAX_KEY_LIFETIME_DAYS: (i64, i64) = (1, 3650);
pub const RETENTION_DAYS: (i64, i64) = (1, 3650);

/// A settings change: region and plan tier of 1 to 64 characters, a key
/// lifetime and a retention of 1 to 3650 days.
fn validate_settings(b: &UpdateProjectSettings) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    for (field, v) in [("default_region", &b.default_region), ("plan_tier", &b.plan_tier)] {
        if let Some(v) = v {
            let message = format!("must be {}", SETTING.length_words());
            e.check(SETTING.ok(v), format!("body.{field}"), message, Some(v.as_str().into()));
        }
    }
    let (min, max) = MAX_KEY_LIFETIME_DAYS;
    e.in_range("body.max_key_lifetime_days", b.max_key_lifetime_days, min, max);
    let (min, max) = RETENTION_DAYS;
    e.in_range("body.retention_days", b.retention_days, min, max);
    e.finish()
}

#[OpenApi(tag = "Tag::Projects")]
impl ProjectsApi {
    /// Create a project (internal secret only).
    #[oai(path = "/v1/projects", method = "post", operation_id = "createProject")]
    async fn create(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<CreateProject>,
    ) -> ApiResult<Created<Project>> {
        internal_only(&auth)?;
        let (id, name) = validate_project(&body.0)?;
        let id = id.unwrap_or_else(switchyard_shared::ids::project_id);
        let row = store::projects::create(&state.pool, &id, &name, auth.0.actor_id.as_deref()).await?;
        let change = Change::new(&row.id, "project.created", ("project", &row.id), json!({"name": row.name}));
        audit::record(&state.pool, &auth.0, change).await?;
        Ok(Created::Created(Json(Project::from(row))))
    }

    /// List projects (internal secret only), oldest first.
    #[oai(path = "/v1/projects", method = "get", operation_id = "listProjects")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Project>>> {
        internal_only(&auth)?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::projects::list(&state.pool, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), Project::from)))
    }

    /// Get a project.
    #[oai(path = "/v1/projects/:project_id", method = "get", operation_id = "getProject")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, project_id: Path<String>) -> ApiResult<Json<Project>> {
        Ok(Json(Project::from(load(&state, &auth, &project_id).await?)))
    }

    /// Get a project's settings.
    #[oai(path = "/v1/projects/:project_id/settings", method = "get", operation_id = "getProjectSettings")]
    async fn settings(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Path<String>,
    ) -> ApiResult<Json<ProjectSettings>> {
        Ok(Json(settings(load(&state, &auth, &project_id).await?)))
    }

    /// Get the project's signing secret: the key of its notifications that
    /// have no secret of their own, for their receivers to verify them.
    #[oai(path = "/v1/projects/:project_id/signing-secret", method = "get", operation_id = "getProjectSigningSecret")]
    async fn signing_secret(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Path<String>,
    ) -> ApiResult<Json<SigningSecret>> {
        let read = store::projects::signing_secret(&state.pool, tenant(&auth.0), &project_id);
        let signing_secret = found("project", &project_id, read).await?;
        Ok(Json(SigningSecret { project_id: project_id.0, signing_secret }))
    }

    /// Change a project's settings (internal secret only).
    #[oai(path = "/v1/projects/:project_id/settings", method = "patch", operation_id = "updateProjectSettings")]
    async fn update_settings(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Path<String>,
        body: JsonBody<UpdateProjectSettings>,
    ) -> ApiResult<Json<ProjectSettings>> {
        internal_only(&auth)?;
        load(&state, &auth, &project_id).await?;
        let b = body.0;
        validate_settings(&b)?;
        let change = store::projects::SettingsChange {
            default_region: b.default_region,
            plan_tier: b.plan_tier,
            max_key_lifetime_days: b.max_key_lifetime_days.map(|d| d as i32),
            retention_days: b.retention_days.map(|d| d as i32),
        };
        let row = store::projects::update_settings(&state.pool, &project_id, change)
            .await?
            .ok_or_else(|| ApiError::not_found("project", &project_id))?;
        let details = json!({
            "default_region": row.default_region,
            "plan_tier": row.plan_tier,
            "max_key_lifetime_days": row.max_key_lifetime_days,
            "retention_days": row.retention_days,
        });
        audit::record(
            &state.pool,
            &auth.0,
            Change::new(&row.id, "project.settings_updated", ("project", &row.id), details),
        )
        .await?;
        Ok(Json(settings(row)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_id_is_checked_as_sent_and_a_name_trimmed() {
        let project = |id: Option<&str>, name: &str| CreateProject { id: id.map(Into::into), name: name.into() };
        assert_eq!(validate_project(&project(None, " Acme ")), Ok((None, "Acme".to_string())));
        assert_eq!(
            validate_project(&project(Some("acme"), "Acme")),
            Ok((Some("acme".to_string()), "Acme".to_string()))
        );
        // An id is what the document's pattern says: spaces are not trimmed away.
        assert!(validate_project(&project(Some(" acme "), "Acme")).is_err());
        let got = validate_project(&project(Some("a b"), "  ")).unwrap_err();
        assert_eq!(got[0], FieldError::new("body.id", "1 to 64 letters, digits, '_', '-' or '.'", Some("a b".into())));
        assert_eq!(got[1], FieldError::new("body.name", "must be 1 to 200 characters", Some("  ".into())));
    }

    #[test]
    fn settings_bound_region_tier_and_key_lifetime() {
        let settings = |region: Option<&str>, tier: Option<&str>, days: Option<i64>| UpdateProjectSettings {
            default_region: region.map(Into::into),
            plan_tier: tier.map(Into::into),
            max_key_lifetime_days: days,
            retention_days: days,
        };
        assert_eq!(validate_settings(&settings(None, None, None)), Ok(()));
        assert_eq!(validate_settings(&settings(Some("eu"), Some("pro"), Some(3650))), Ok(()));
        let got = validate_settings(&settings(Some(" "), Some(&"t".repeat(65)), Some(0))).unwrap_err();
        let at: Vec<_> = got.iter().map(|f| f.location.as_str()).collect();
        assert_eq!(at, ["body.default_region", "body.plan_tier", "body.max_key_lifetime_days", "body.retention_days"]);
        assert_eq!(got[2].message, "must be between 1 and 3650");
    }
}
