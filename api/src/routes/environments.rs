//! Environments: named deployment targets of a project
//! (production, staging...) that jobs may name in `environment_id`.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};

use serde_json::{json, Value};
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::{FieldError, FieldErrors};
use switchyard_shared::store::{self, environments::EnvironmentRow};

use super::{found, project_of, slug_rule, tenant, view_from_row, Created, Done, Tag};
use crate::audit::{self, Change};
use crate::auth::Auth;
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

pub struct EnvironmentsApi;

#[derive(Object)]
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

/// The value rules of CreateEnvironment (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::text;
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::Property;
    vec![
        (Property("CreateEnvironment", "project_id"), text(&ID)),
        (Property("CreateEnvironment", "name"), text(&super::SLUG)),
        (Property("CreateEnvironment", "description"), text(&DESCRIPTION)),
    ]
}

/// An environment's description: a NUL is refused here rather than by
/// Postgres.
pub const DESCRIPTION: Text = Text::stored(0, 1024);

/// A new environment's name (a slug) and description.
fn validate_environment(b: &CreateEnvironment) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    slug_rule(&mut e, "body.name", &b.name);
    let description_ok = b.description.as_deref().is_none_or(|d| DESCRIPTION.ok(d));
    e.check(description_ok, "body.description", "at most 1024 characters", None);
    e.finish()
}

view_from_row!(EnvironmentRow => Environment { id, project_id, name, description, created_at });

async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Environment> {
    let env = found("environment", id, store::environments::get(&state.pool, tenant(&auth.0), id)).await?;
    Ok(env.into())
}

#[OpenApi(tag = "Tag::Environments")]
impl EnvironmentsApi {
    /// Create an environment. A name already used in the project is 409.
    #[oai(path = "/v1/environments", method = "post", operation_id = "createEnvironment")]
    async fn create(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<CreateEnvironment>,
    ) -> ApiResult<Created<Environment>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        validate_environment(&b)?;
        super::project_exists(&state, &project_id).await?;
        let env: Environment = store::environments::create(
            &state.pool,
            &project_id,
            &b.name,
            b.description.as_deref(),
            auth.0.actor_id.as_deref(),
        )
        .await
        .map_err(|e| match e {
            store::environments::CreateError::NameTaken => {
                ApiError::conflict(format!("an environment named {:?} already exists in the project", b.name))
            }
            store::environments::CreateError::Db(e) => ApiError::from(e),
        })?
        .into();
        let change =
            Change::new(&env.project_id, "environment.created", ("environment", &env.id), json!({"name": env.name}));
        audit::record(&state.pool, &auth.0, change).await?;
        Ok(Created::Created(Json(env)))
    }

    /// Environments of a project, newest first.
    #[oai(path = "/v1/environments", method = "get", operation_id = "listEnvironments")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<Environment>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::environments::list(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), Environment::from)))
    }

    /// Get an environment.
    #[oai(path = "/v1/environments/:environment_id", method = "get", operation_id = "getEnvironment")]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        environment_id: Path<String>,
    ) -> ApiResult<Json<Environment>> {
        Ok(Json(load(&state, &auth, &environment_id).await?))
    }

    /// Delete an environment. 409 while a job names it.
    #[oai(path = "/v1/environments/:environment_id", method = "delete", operation_id = "deleteEnvironment")]
    async fn delete(&self, state: Data<&AppState>, auth: Auth, environment_id: Path<String>) -> ApiResult<Done> {
        let env = load(&state, &auth, &environment_id).await?;
        match store::environments::delete_unused(&state.pool, &env.project_id, &env.id).await? {
            store::environments::Deleted::Deleted => {
                let change = Change::new(
                    &env.project_id,
                    "environment.deleted",
                    ("environment", &env.id),
                    json!({"name": env.name}),
                );
                audit::record(&state.pool, &auth.0, change).await?;
                Ok(Done::NoContent)
            }
            store::environments::Deleted::InUse(n) => {
                Err(ApiError::conflict(format!("{n} job(s) name this environment; change them first")))
            }
            store::environments::Deleted::Missing => Err(ApiError::not_found("environment", &env.id)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_name_is_a_slug_and_its_description_bounded_without_nul() {
        let env = |name: &str, d: Option<&str>| CreateEnvironment {
            project_id: None,
            name: name.into(),
            description: d.map(Into::into),
        };
        assert_eq!(validate_environment(&env("production", Some("live"))), Ok(()));
        let got = validate_environment(&env("Prod", Some(&"d".repeat(1025)))).unwrap_err();
        assert_eq!(
            got[0],
            FieldError::new("body.name", "1 to 64 lowercase letters, digits, '-' or '_'", Some("Prod".into()))
        );
        assert_eq!(got[1], FieldError::new("body.description", "at most 1024 characters", None));
        assert_eq!(validate_environment(&env("qa", Some("a\0b"))).unwrap_err()[0].location, "body.description");
    }
}
