//! One `#[OpenApi]` struct per resource, combined in `crate::api_service`.

pub mod groups;
pub mod jobs;
pub mod platform;
pub mod projects;
pub mod runs;

use poem_openapi::Tags;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};

#[derive(Tags)]
pub enum Tag {
    /// Health, readiness and metrics.
    Platform,
    /// Projects and their settings.
    Projects,
    /// Job groups: folders of jobs that can be paused together.
    JobGroups,
    /// Jobs: HTTP targets with retry, timeout and limits.
    Jobs,
    /// Job runs: one execution of a job, with its attempts.
    Runs,
}

/// The project a project-scoped call acts in: the credential's own project,
/// or for the internal secret the one named in the request (query or body
/// `project_id`, else `X-Project-Id`).
pub fn project_of(p: &Principal, named: Option<&str>) -> ApiResult<String> {
    let named = named.map(str::trim).filter(|s| !s.is_empty());
    match (p.scopes.is_none(), named, p.project_id.as_deref()) {
        (_, Some(n), Some(own)) if p.scopes.is_some() && n != own => {
            Err(ApiError::forbidden("the credential is not valid for this project"))
        }
        (_, Some(n), _) => Ok(n.to_string()),
        (_, None, Some(own)) => Ok(own.to_string()),
        (_, None, None) => Err(ApiError::invalid_field(
            "query.project_id",
            "project_id is required (query, body, or the X-Project-Id header)",
            None,
        )),
    }
}

/// A resource of another project than the credential's is reported as
/// missing (DECISIONS §7), never as forbidden: ids do not leak.
pub fn visible(p: &Principal, resource_project: &str) -> bool {
    p.scopes.is_none() || p.project_id.as_deref() == Some(resource_project)
}

/// Path ids are checked before they reach SQL so junk gets a clean 404.
pub fn check_id(what: &str, id: &str) -> ApiResult<()> {
    if switchyard_shared::ids::is_valid_external_id(id) {
        Ok(())
    } else {
        Err(ApiError::not_found(what, id))
    }
}
