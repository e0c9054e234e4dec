//! One `#[OpenApi]` struct per resource, combined in `crate::api_service`.

pub mod api_keys;
pub mod audit;
pub mod bulk;
pub mod environments;
pub mod groups;
pub mod jobs;
pub mod members;
pub mod platform;
pub mod policies;
pub mod projects;
pub mod roles;
pub mod run_ops;
pub mod run_records;
pub mod runs;
pub mod sdk;
pub mod sdk_runs;
pub mod secrets;
pub mod stats;

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
    /// API keys: project credentials limited by scopes.
    ApiKeys,
    /// Roles: named sets of scopes for members.
    Roles,
    /// Members: users (OIDC subjects) holding a role in a project.
    Members,
    /// Resource and tag policies.
    Policies,
    /// The audit trail of every change.
    Audit,
    /// Called by job targets with their run token.
    Sdk,
    /// Many runs at once: bulk trigger, cancel and replay, and batches.
    Bulk,
    /// Deployment environments of a project, named by jobs.
    Environments,
    /// Operators' counts: queue depths per job.
    Stats,
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

/// 422 on `body.project_id` unless the project exists: a create names its
/// project in the body (or X-Project-Id), and a missing one is an invalid
/// value of the request, not a missing resource of the path.
pub async fn project_exists(state: &crate::state::AppState, project_id: &str) -> ApiResult<()> {
    let exists: Option<(String,)> =
        sqlx::query_as("SELECT id FROM projects WHERE id = $1").bind(project_id).fetch_optional(&state.pool).await?;
    if exists.is_none() {
        return Err(ApiError::invalid_field("body.project_id", "no such project", Some(project_id.into())));
    }
    Ok(())
}

/// Path ids are checked before they reach SQL so junk gets a clean 404.
pub fn check_id(what: &str, id: &str) -> ApiResult<()> {
    if switchyard_shared::ids::is_valid_external_id(id) {
        Ok(())
    } else {
        Err(ApiError::not_found(what, id))
    }
}

/// The access-control operations (SPEC §4.7) and the SDK, as one member of
/// the service's tuple.
pub type AccessApis =
    (api_keys::ApiKeysApi, roles::RolesApi, members::MembersApi, policies::PoliciesApi, audit::AuditApi, sdk::SdkApi);

pub fn access_apis() -> AccessApis {
    (api_keys::ApiKeysApi, roles::RolesApi, members::MembersApi, policies::PoliciesApi, audit::AuditApi, sdk::SdkApi)
}

/// Bulk operations, run records and actions, the SDK's run records,
/// environments and job secrets (issue 4, second half), as one member of
/// the service's tuple.
pub type RecordApis = (
    bulk::BulkApi,
    run_ops::RunOpsApi,
    run_records::RunRecordsApi,
    sdk_runs::SdkRunsApi,
    environments::EnvironmentsApi,
    secrets::SecretsApi,
);

pub fn record_apis() -> RecordApis {
    (
        bulk::BulkApi,
        run_ops::RunOpsApi,
        run_records::RunRecordsApi,
        sdk_runs::SdkRunsApi,
        environments::EnvironmentsApi,
        secrets::SecretsApi,
    )
}
