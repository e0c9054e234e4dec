//! Job groups: folders of jobs in a project, paused and resumed together,
//! with run counts over their jobs; and the checks of their bodies.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::{FieldError, FieldErrors, RunStatus};
use switchyard_shared::ids::GroupId;
use switchyard_shared::store::{self, job_groups::JobGroupRow};

use super::{
    description_rule, found, name_rule, patch, project_of, slug_rule, sync_limits, tenant, wake_cron, Created, Tag,
};
use crate::audit::{self, Change};
use crate::auth::policy::{self, Resource};
use crate::auth::Auth;
use crate::document::rules::Place;
use crate::error::ApiResult;
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;
use crate::views::{job_view, Job};

pub struct GroupsApi;

/// A folder of jobs.
#[derive(Object)]
pub struct JobGroup {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub slug: String,
    #[oai(skip_serializing_if_is_none)]
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateGroup {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    pub name: String,
    /// Unique in the project.
    pub slug: String,
    pub description: Option<String>,
}

/// Partial update; `{}` changes nothing.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UpdateGroup {
    pub name: Option<String>,
    pub slug: Option<String>,
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
}

/// The value rules of CreateGroup and UpdateGroup (see `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::text;
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::Property;
    let mut r = vec![(Property("CreateGroup", "project_id"), text(&ID))];
    for schema in ["CreateGroup", "UpdateGroup"] {
        r.push((Property(schema, "name"), text(&super::NAME)));
        r.push((Property(schema, "slug"), text(&super::SLUG)));
        r.push((Property(schema, "description"), text(&super::DESCRIPTION)));
    }
    r
}

/// Run counts of the group's jobs.
#[derive(Object)]
pub struct GroupStats {
    pub group_id: String,
    /// Every run status, with its count (0 included).
    pub run_counts: HashMap<String, i64>,
}

#[derive(ApiResponse)]
pub enum Empty {
    /// Done.
    #[oai(status = 204)]
    NoContent,
}

/// The group lists are answered as a plain array, not a `Page` object;
/// `X-Next-Cursor` carries the cursor of the next page when there is one.
#[derive(ApiResponse)]
pub enum ArrayPage<T: poem_openapi::types::ToJSON + Send + Sync> {
    #[oai(status = 200)]
    Ok(Json<Vec<T>>, #[oai(header = "X-Next-Cursor")] Option<String>),
}

impl From<JobGroupRow> for JobGroup {
    fn from(row: JobGroupRow) -> Self {
        JobGroup {
            id: row.id.into_string(),
            project_id: row.project_id,
            name: row.name,
            slug: row.slug,
            description: row.description,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

impl<T: poem_openapi::types::ParseFromJSON + poem_openapi::types::ToJSON + poem_openapi::types::Type + Send + Sync>
    From<Page<T>> for ArrayPage<T>
{
    fn from(p: Page<T>) -> Self {
        ArrayPage::Ok(Json(p.data), p.next_cursor)
    }
}

/// The group, if the caller may see it (404 otherwise) and the project's
/// resource policies let the caller act on it (403 otherwise).
async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<JobGroup> {
    let g = found("job group", id, store::job_groups::get(&state.pool, tenant(&auth.0), &id.into())).await?;
    let no_tags = Default::default();
    policy::check(state, &auth.0, &g.project_id, Resource { kind: "job_group", id: Some(&g.id), tags: &no_tags })
        .await?;
    Ok(g.into())
}

/// Records a change of a group in the audit trail.
async fn audit_group(state: &AppState, auth: &Auth, g: &JobGroup, action: &str) -> ApiResult<()> {
    let details = serde_json::json!({"name": g.name, "slug": g.slug});
    audit::record(&state.pool, &auth.0, Change::new(&g.project_id, action, ("job_group", &g.id), details)).await?;
    Ok(())
}

/// A group's name, slug and description, as they will be stored.
fn validate_group(name: &str, slug: &str, description: Option<&str>) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    name_rule(&mut e, name);
    slug_rule(&mut e, "body.slug", slug);
    description_rule(&mut e, description, &super::DESCRIPTION);
    e.finish()
}

/// Sets `paused` on every live job of the group and pushes it to Redis.
async fn set_paused(state: &AppState, group_id: &str, paused: bool) -> ApiResult<()> {
    let jobs = store::job_groups::set_paused(&state.pool, &group_id.into(), paused).await?;
    state.jobs.clear();
    for j in jobs {
        sync_limits(state, &j.id, &j.project_id, &j.spec.0, paused).await;
        wake_cron(state, &j.spec.0, j.enabled && !paused);
    }
    Ok(())
}

#[OpenApi(tag = "Tag::JobGroups")]
impl GroupsApi {
    /// List the job groups of a project, newest first.
    #[oai(path = "/v1/job-groups", method = "get", operation_id = "listJobGroups")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<ArrayPage<JobGroup>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::job_groups::list(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(w.page(rows, |g| g.id.to_string(), JobGroup::from).into())
    }

    /// Create a job group.
    #[oai(path = "/v1/job-groups", method = "post", operation_id = "createJobGroup")]
    async fn create(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<CreateGroup>,
    ) -> ApiResult<Created<JobGroup>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        validate_group(&b.name, &b.slug, b.description.as_deref())?;
        super::project_exists(&state, &project_id).await?;
        let fields = store::job_groups::GroupFields {
            name: b.name.trim(),
            slug: &b.slug,
            description: b.description.as_deref(),
        };
        let g: JobGroup = store::job_groups::create(&state.pool, &project_id, &fields).await?.into();
        audit_group(&state, &auth, &g, "job_group.created").await?;
        Ok(Created::Created(Json(g)))
    }

    /// Get a job group.
    #[oai(path = "/v1/job-groups/:group_id", method = "get", operation_id = "getJobGroup")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, group_id: Path<String>) -> ApiResult<Json<JobGroup>> {
        Ok(Json(load(&state, &auth, &group_id).await?))
    }

    /// Change a job group.
    #[oai(path = "/v1/job-groups/:group_id", method = "patch", operation_id = "updateJobGroup")]
    async fn update(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        group_id: Path<String>,
        body: JsonBody<UpdateGroup>,
    ) -> ApiResult<Json<JobGroup>> {
        let cur = load(&state, &auth, &group_id).await?;
        let b = body.0;
        let name = b.name.unwrap_or(cur.name);
        let slug = b.slug.unwrap_or(cur.slug);
        let description = patch(b.description, cur.description);
        validate_group(&name, &slug, description.as_deref())?;
        let fields =
            store::job_groups::GroupFields { name: name.trim(), slug: &slug, description: description.as_deref() };
        let g: JobGroup = store::job_groups::update(&state.pool, &GroupId::from(&cur.id), &fields).await?.into();
        audit_group(&state, &auth, &g, "job_group.updated").await?;
        Ok(Json(g))
    }

    /// Delete a job group. Its jobs stay, outside any group.
    #[oai(path = "/v1/job-groups/:group_id", method = "delete", operation_id = "deleteJobGroup")]
    async fn delete(&self, state: Data<&AppState>, auth: Auth, group_id: Path<String>) -> ApiResult<Empty> {
        let g = load(&state, &auth, &group_id).await?;
        store::job_groups::delete(&state.pool, &GroupId::from(&g.id)).await?;
        audit_group(&state, &auth, &g, "job_group.deleted").await?;
        Ok(Empty::NoContent)
    }

    /// The jobs of a group, newest first.
    #[oai(path = "/v1/job-groups/:group_id/jobs", method = "get", operation_id = "listJobGroupJobs")]
    async fn jobs(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        group_id: Path<String>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<ArrayPage<Job>> {
        let g = load(&state, &auth, &group_id).await?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = store::job_groups::jobs(&state.pool, &GroupId::from(&g.id), w.after(), w.fetch()).await?;
        Ok(w.page(rows, |j| j.id.to_string(), job_view).into())
    }

    /// Pause every job of the group: triggers are still accepted, and no
    /// run of these jobs is dispatched until resume-all. Each job must pass
    /// the resource policies as its own pause would (`jobs:write`): one that
    /// does not refuses the call (403) and nothing changes.
    #[oai(path = "/v1/job-groups/:group_id/pause-all", method = "post", operation_id = "pauseJobGroup")]
    async fn pause_all(&self, state: Data<&AppState>, auth: Auth, group_id: Path<String>) -> ApiResult<Empty> {
        let g = load(&state, &auth, &group_id).await?;
        authorize_each_job(&state, &auth, &g).await?;
        set_paused(&state, &g.id, true).await?;
        audit_group(&state, &auth, &g, "job_group.paused").await?;
        Ok(Empty::NoContent)
    }

    /// Resume every job of the group; waiting runs are dispatched again.
    /// Jobs disabled one by one stay disabled. Each job must pass the
    /// resource policies as for pause-all.
    #[oai(path = "/v1/job-groups/:group_id/resume-all", method = "post", operation_id = "resumeJobGroup")]
    async fn resume_all(&self, state: Data<&AppState>, auth: Auth, group_id: Path<String>) -> ApiResult<Empty> {
        let g = load(&state, &auth, &group_id).await?;
        authorize_each_job(&state, &auth, &g).await?;
        set_paused(&state, &g.id, false).await?;
        audit_group(&state, &auth, &g, "job_group.resumed").await?;
        Ok(Empty::NoContent)
    }

    /// Run counts by status over the group's jobs.
    #[oai(path = "/v1/job-groups/:group_id/stats", method = "get", operation_id = "getJobGroupStats")]
    async fn stats(&self, state: Data<&AppState>, auth: Auth, group_id: Path<String>) -> ApiResult<Json<GroupStats>> {
        let g = load(&state, &auth, &group_id).await?;
        let rows = store::analytics::group_run_counts(&state.pool, &GroupId::from(&g.id)).await?;
        let mut run_counts: HashMap<String, i64> = RunStatus::ALL.iter().map(|s| (s.as_str().to_string(), 0)).collect();
        for (s, n) in rows {
            run_counts.insert(s, n);
        }
        Ok(Json(GroupStats { group_id: g.id, run_counts }))
    }
}

/// Pausing or resuming the group pauses or resumes each of its jobs, so
/// each must pass the policies as `jobs:write` on it would; one refused
/// refuses the call and nothing changes.
async fn authorize_each_job(state: &AppState, auth: &Auth, g: &JobGroup) -> ApiResult<()> {
    if auth.0.scopes.is_none() {
        return Ok(());
    }
    const PAGE: i64 = 500;
    let mut before: Option<String> = None;
    loop {
        let jobs = store::job_groups::jobs(&state.pool, &GroupId::from(&g.id), before.as_deref(), PAGE).await?;
        for j in &jobs {
            let r = Resource { kind: "job", id: Some(&j.id), tags: &j.spec.0.tags };
            policy::authorize(state, &auth.0, &j.project_id, "jobs:write", r).await?;
        }
        match jobs.last() {
            Some(last) if jobs.len() as i64 == PAGE => before = Some(last.id.to_string()),
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_reports_name_slug_and_description_in_order() {
        assert_eq!(validate_group("Billing", "billing", Some("money")), Ok(()));
        let got = validate_group(" ", "Bad Slug", Some(&"d".repeat(2001))).unwrap_err();
        let at: Vec<_> = got.iter().map(|f| f.location.as_str()).collect();
        assert_eq!(at, ["body.name", "body.slug", "body.description"]);
        assert_eq!(got[0].message, "must be 1 to 200 characters");
    }
}
