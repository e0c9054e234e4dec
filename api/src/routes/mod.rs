//! One `#[OpenApi]` struct per resource, combined in `crate::api_service`,
//! and the helpers every route file shares. Route files import from here
//! (and from `crate::pagination`, `crate::audit`, `crate::auth`), never from
//! each other: what two resources need in common lives in this module.
//!
//! The helpers: which project a call acts in ([`project_of`]), which
//! projects' rows a credential may read ([`tenant`], [`visible`]), loading a
//! resource by id as 404 when missing or another project's ([`found`],
//! [`load_job`], [`load_for_trigger`], [`load_run`], and [`sdk_run`] for the
//! SDK's run-token calls), request checks shared by several resources
//! ([`check_id`], [`check_scopes`], [`project_exists`],
//! [`check_job_environment`], and the field rules [`name_rule`],
//! [`slug_rule`] with [`slugify`], [`label_rule`], [`description_rule`]
//! that validators collect into a `FieldErrors`), PATCH semantics
//! ([`patch`]), the answers several operations share ([`Created`],
//! [`Done`]), what follows
//! a change of a job's state ([`sync_limits`], [`wake_cron`]) and the
//! response-from-row mapping ([`view_from_row`]). Pagination is
//! `crate::pagination`; response objects several files return are
//! `crate::views`; triggering and cancelling runs, which several resources
//! do, is `crate::run_actions`; SQL stays in `switchyard_shared::store`.

pub mod analytics;
pub mod api_keys;
pub mod audit;
pub mod bulk;
pub mod environments;
pub mod events;
pub mod groups;
pub mod jobs;
pub mod log_drains;
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
pub mod streams;
pub mod webhooks;
pub mod workflow_plans;
pub mod workflow_runs;
pub mod workflows;

use std::borrow::Borrow;
use std::future::Future;
use std::sync::Arc;

use poem_openapi::payload::Json;
use poem_openapi::types::{MaybeUndefined, ToJSON};
use poem_openapi::{ApiResponse, Tags};
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::{child, FieldError, FieldErrors, JobSpec, RunStatus};
use switchyard_shared::ids::RunId;
use switchyard_shared::queue::WakeLoop;
use switchyard_shared::store::workflow_runs::WorkflowRun;
use switchyard_shared::store::workflows::WorkflowRecord;
use switchyard_shared::store::{self, JobRecord, Run, Tenant};

use crate::auth::policy::{self, Resource};
use crate::auth::{scopes, Auth, Principal};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

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
    /// Operators' counts: queue depths per job, with the last hour's history.
    Stats,
    /// Reports over a period: workflow and job outcomes, durations,
    /// throughput and health.
    Analytics,
    /// Cost, tokens and CPU per project and job for a billing month.
    Usage,
    /// Workflows: versioned DAGs of steps, and the project's workflow policy.
    Workflows,
    /// Webhook subscriptions and the notification outbox.
    Webhooks,
    /// Workflow runs: trigger, follow, pause, cancel, retry steps, and why
    /// the engine did what it did.
    WorkflowRuns,
    /// Inbound events, and the event sources that trigger runs from them.
    Events,
    /// Log drains: a project's run log lines shipped to a receiver.
    LogDrains,
    /// Live updates: a run, a workflow run or a project's changes as
    /// Server-Sent Events.
    Streams,
}

/// The project a project-scoped call acts in: the credential's own project,
/// or for the internal secret the one named in the request (`project_id` in
/// the query or body, found `at` `"query"` or `"body"`, else `X-Project-Id`).
/// A `project_id` that is not an id (`ids::EXTERNAL_ID`) is 422.
/// An internal-secret request naming two different projects (`project_id`
/// and `X-Project-Id`) is 422 naming both, never one of them silently.
pub fn project_of(p: &Principal, at: &str, named: Option<&str>) -> ApiResult<String> {
    let location = format!("{at}.project_id");
    if let Some(n) = named.filter(|n| !switchyard_shared::ids::EXTERNAL_ID.ok(n)) {
        return Err(ApiError::invalid_field(&location, "1 to 64 letters, digits, '_', '-' or '.'", Some(n.into())));
    }
    match (p.scopes.is_none(), named, p.project_id.as_deref()) {
        (false, Some(n), Some(own)) if n != own => {
            Err(ApiError::forbidden("the credential is not valid for this project"))
        }
        (true, Some(n), Some(own)) if n != own => {
            let header = crate::auth::PROJECT_HEADER;
            let mut e = FieldErrors::new();
            e.push(&location, format!("names another project than {header}"), Some(n.into()));
            e.push(format!("header.{header}"), format!("names another project than {location}"), Some(own.into()));
            let detail =
                format!("{location} {n:?} and {header} {own:?} name different projects; send one, or both alike");
            Err(ApiError::unprocessable(detail, e.into_vec()))
        }
        (_, Some(n), _) => Ok(n.to_string()),
        (_, None, Some(own)) => Ok(own.to_string()),
        (_, None, None) => Err(ApiError::invalid_field(
            &location,
            "project_id is required (query, body, or the X-Project-Id header)",
            None,
        )),
    }
}

/// A resource of another project than the credential's is reported as
/// missing, never as forbidden: ids do not leak.
pub fn visible(p: &Principal, resource_project: &str) -> bool {
    p.scopes.is_none() || p.project_id.as_deref() == Some(resource_project)
}

/// Whose rows the credential may read: every project's for the internal
/// secret, else only its own project's. (A confined credential without a
/// project sees nothing: no project has the empty id.)
pub fn tenant(p: &Principal) -> Tenant<'_> {
    match &p.scopes {
        None => Tenant::Any,
        Some(_) => Tenant::Project(p.project_id.as_deref().unwrap_or("")),
    }
}

/// The resource `read` returns, or 404 naming it. The id is checked first
/// (the read is only started when it is well formed), so junk gets a clean
/// 404; a read through [`tenant`] returns nothing of another project, which
/// is therefore missing too.
pub async fn found<T>(
    what: &str,
    id: &str,
    read: impl Future<Output = Result<Option<T>, sqlx::Error>>,
) -> ApiResult<T> {
    check_id(what, id)?;
    read.await?.ok_or_else(|| ApiError::not_found(what, id))
}

/// 422 on `body.project_id` unless the project exists: a create names its
/// project in the body (or X-Project-Id), and a missing one is an invalid
/// value of the request, not a missing resource of the path.
pub async fn project_exists(state: &AppState, project_id: &str) -> ApiResult<()> {
    if !store::projects::exists(&state.pool, project_id).await? {
        return Err(ApiError::invalid_field("body.project_id", "no such project", Some(project_id.into())));
    }
    Ok(())
}

/// 422 unless `environment_id` names an environment of `project_id`. For
/// job create and update.
pub async fn check_job_environment(pool: &sqlx::PgPool, project_id: &str, environment_id: &str) -> ApiResult<()> {
    let found = switchyard_shared::ids::is_valid_external_id(environment_id)
        && store::environments::get(pool, Tenant::Project(project_id), environment_id).await?.is_some();
    if found {
        return Ok(());
    }
    Err(ApiError::invalid_field(
        "body.environment_id",
        "no such environment in this project",
        Some(environment_id.into()),
    ))
}

/// Path ids are checked before they reach SQL so junk gets a clean 404.
pub fn check_id(what: &str, id: &str) -> ApiResult<()> {
    if switchyard_shared::ids::is_valid_external_id(id) {
        Ok(())
    } else {
        Err(ApiError::not_found(what, id))
    }
}

/// 400 for an unknown scope, with every unknown one in `errors[]`;
/// duplicates are dropped. For the scopes of a key, the permissions of a
/// role and the actions of a policy.
pub fn check_scopes(field: &str, list: &[String]) -> ApiResult<Vec<String>> {
    validate_scopes(field, list).map_err(|errors| {
        let unknown: Vec<&String> = list.iter().filter(|s| !scopes::is_scope(s)).collect();
        let known = scopes::SCOPES.join(", ");
        ApiError::bad_request_at(format!("{field}: unknown scope(s) {unknown:?}; known scopes: {known}"), errors)
    })
}

/// The list without duplicates, in first-seen order, or one failure per
/// unknown scope at `field/i`.
pub fn validate_scopes(field: &str, list: &[String]) -> Result<Vec<String>, Vec<FieldError>> {
    let mut e = FieldErrors::new();
    for (i, s) in list.iter().enumerate() {
        if !scopes::is_scope(s) {
            let known = scopes::SCOPES.join(", ");
            e.push(child(field, i), format!("unknown scope; known: {known}"), Some(s.as_str().into()));
        }
    }
    e.finish()?;
    let mut out: Vec<String> = Vec::new();
    for s in list {
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    Ok(out)
}

/// The answer of an operation that creates one resource: 201 with it.
#[derive(ApiResponse)]
pub enum Created<T: ToJSON> {
    #[oai(status = 201)]
    Created(Json<T>),
}

/// The answer of an operation that has nothing to return: 204.
#[derive(ApiResponse)]
pub enum Done {
    #[oai(status = 204)]
    NoContent,
}

/// PATCH semantics: absent keeps, `null` clears, a value replaces.
pub fn patch<T>(v: MaybeUndefined<T>, old: Option<T>) -> Option<T> {
    match v {
        MaybeUndefined::Undefined => old,
        MaybeUndefined::Null => None,
        MaybeUndefined::Value(x) => Some(x),
    }
}

/// `From<Row> for View` for a response object that copies the store row's
/// fields of the same names: `view_from_row!(Row => View { a, b } + { c: expr })`
/// (the part after `+` sets the fields the row does not have).
macro_rules! view_from_row {
    ($row:ty => $view:ident { $($f:ident),* $(,)? } $(+ { $($g:ident : $e:expr),* $(,)? })?) => {
        impl From<$row> for $view {
            fn from(row: $row) -> Self {
                $view { $($f: row.$f,)* $($($g: $e,)*)? }
            }
        }
    };
}
pub(crate) use view_from_row;

/// The job, if it exists and the caller may see it (404 otherwise), and
/// the project's resource policies let the caller act on it (403 otherwise).
pub async fn load_job(state: &AppState, auth: &Auth, id: &str) -> ApiResult<JobRecord> {
    check_id("job", id)?;
    let job = store::jobs::get(&state.pool, id).await?;
    admit_job(state, auth, id, job).await
}

/// [`load_job`] through the trigger paths' job cache (`store::recent`: a
/// change made elsewhere reaches it within a second).
pub async fn load_for_trigger(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Arc<JobRecord>> {
    check_id("job", id)?;
    let job = state.jobs.get(&state.pool, id).await?;
    admit_job(state, auth, id, job).await
}

/// The run, if it exists and the caller may see it (404 otherwise), and
/// the resource policies that apply to runs let the caller act on it (403
/// otherwise).
pub async fn load_run(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Run> {
    check_id("run", id)?;
    match store::runs::get(&state.pool, &RunId::from(id)).await? {
        Some(r) if visible(&auth.0, &r.project_id) => {
            let tags = policy::tags_of(&r.tags.0);
            let res = Resource { kind: "run", id: Some(&r.id), tags: &tags };
            policy::check(state, &auth.0, &r.project_id, res).await?;
            Ok(r)
        }
        _ => Err(ApiError::not_found("run", id)),
    }
}

/// The run an SDK call acts on. Re-checks the run token's subject (the
/// checker did already) and answers 404 when the run no longer exists.
pub async fn sdk_run(state: &AppState, auth: &Auth, run_id: &str) -> ApiResult<Run> {
    check_id("run", run_id)?;
    if auth.0.run_id.as_deref().is_some_and(|own| own != run_id) {
        return Err(ApiError::forbidden("the run token is for another run"));
    }
    let id = RunId::from(run_id);
    let run = store::runs::get(&state.pool, &id).await?.ok_or_else(|| ApiError::not_found("run", run_id))?;
    // A run token names its run's project too; a token whose claims
    // disagree with the run was not minted for it.
    if auth.0.run_id.is_some() && auth.0.project_id.as_deref() != Some(run.project_id.as_str()) {
        return Err(ApiError::forbidden("the run token is for another project"));
    }
    // Workers record `running` lazily (store::runs::load_for_dispatch): a
    // run token for attempt n on a run still `queued` after attempt n - 1
    // means that attempt is in flight and not marked yet. The SDK call
    // marks it, exactly as the worker would, so the run is running on the
    // token's attempt from here on.
    if let (Some(attempt), RunStatus::Queued) = (auth.0.run_attempt, run.status) {
        if attempt == run.attempt + 1 && store::runs::mark_running_for_attempt(&state.pool, &id, attempt).await? {
            return store::runs::get(&state.pool, &id).await?.ok_or_else(|| ApiError::not_found("run", run_id));
        }
    }
    Ok(run)
}

/// [`sdk_run`] for an SDK write that does not need its attempt running
/// (tool calls): a run token still writes nothing once its run has ended
/// (409), so a token that outlives its run (it is valid for the job's
/// timeout plus a grace) cannot keep changing the record. The writes that
/// need a running attempt (checkpoints, progress, outputs, state) refuse an
/// ended run through `sdk_runs::require_running`, with the same answer.
/// Reads, logs (a buffered logger flushes after the answer), usage (a cost
/// is often known only after the work; amounts and records are bounded,
/// sums saturate), heartbeats (which tell a worker its run was cancelled)
/// and complete/fail (with their own rules) stay allowed.
pub async fn sdk_run_for_write(state: &AppState, auth: &Auth, run_id: &str) -> ApiResult<Run> {
    let run = sdk_run(state, auth, run_id).await?;
    if auth.0.run_id.is_some() && run.status.is_terminal() {
        return Err(ended(&run));
    }
    Ok(run)
}

/// The answer to a write on a run that has ended.
pub fn ended(run: &Run) -> ApiError {
    ApiError::conflict(format!(
        "the run has ended ({}): its run token writes nothing more; reads and heartbeats stay allowed",
        run.status
    ))
}

/// The workflow, if it exists and the caller may see it (404 otherwise),
/// and the resource policies on workflows let the caller act on it (403
/// otherwise).
pub async fn load_workflow(state: &AppState, auth: &Auth, id: &str) -> ApiResult<WorkflowRecord> {
    let w = find_workflow(state, auth, id).await?;
    admit_workflow(state, auth, &w).await?;
    Ok(w)
}

/// [`load_workflow`] for an operation whose action is not its route's: an
/// event dispatched with `jobs:trigger` triggers a workflow as
/// `workflows:trigger` would.
pub async fn load_workflow_as(state: &AppState, auth: &Auth, id: &str, action: &str) -> ApiResult<WorkflowRecord> {
    let w = find_workflow(state, auth, id).await?;
    let r = Resource { kind: "workflow", id: Some(&w.id), tags: &w.tags.0 };
    policy::authorize(state, &auth.0, &w.project_id, action, r).await?;
    Ok(w)
}

/// [`load_workflow`] through the trigger paths' workflow cache
/// (`store::recent`: a change made elsewhere reaches it within a second).
pub async fn load_workflow_for_trigger(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Arc<WorkflowRecord>> {
    check_id("workflow", id)?;
    match state.workflows.get(&state.pool, id).await? {
        Some(w) if visible(&auth.0, &w.project_id) => {
            admit_workflow(state, auth, &w).await?;
            Ok(w)
        }
        _ => Err(ApiError::not_found("workflow", id)),
    }
}

/// The workflow if it exists and the caller may see it (404 otherwise).
async fn find_workflow(state: &AppState, auth: &Auth, id: &str) -> ApiResult<WorkflowRecord> {
    check_id("workflow", id)?;
    store::workflows::get(&state.pool, tenant(&auth.0), &id.into())
        .await?
        .ok_or_else(|| ApiError::not_found("workflow", id))
}

/// The resource policies on workflows applied to `w` (403 when they refuse).
async fn admit_workflow(state: &AppState, auth: &Auth, w: &WorkflowRecord) -> ApiResult<()> {
    let r = Resource { kind: "workflow", id: Some(&w.id), tags: &w.tags.0 };
    policy::check(state, &auth.0, &w.project_id, r).await
}

/// The workflow run, if it exists and the caller may see it (404
/// otherwise), and the resource policies on its workflow let the caller
/// act on it (403 otherwise).
pub async fn load_workflow_run(state: &AppState, auth: &Auth, id: &str) -> ApiResult<WorkflowRun> {
    check_id("workflow run", id)?;
    let run = store::workflow_runs::get(&state.pool, tenant(&auth.0), &id.into())
        .await?
        .ok_or_else(|| ApiError::not_found("workflow run", id))?;
    if let Some(w) = store::workflows::get(&state.pool, Tenant::Any, &run.workflow_id).await? {
        admit_workflow(state, auth, &w).await?;
    }
    Ok(run)
}

/// The job if the caller may see it and its policies let the caller act.
pub async fn admit_job<J: Borrow<JobRecord>>(state: &AppState, auth: &Auth, id: &str, job: Option<J>) -> ApiResult<J> {
    match job {
        Some(j) if visible(&auth.0, &j.borrow().project_id) => {
            let rec = j.borrow();
            let r = Resource { kind: "job", id: Some(&rec.id), tags: &rec.spec.0.tags };
            policy::check(state, &auth.0, &rec.project_id, r).await?;
            Ok(j)
        }
        _ => Err(ApiError::not_found("job", id)),
    }
}

/// A job's or a group's slug (unique in the project, used in URLs), and
/// an environment's name: 1 to 64 of `a-z 0-9 - _`.
pub const SLUG: Text = Text::form(1, 64, "^[a-z0-9_-]+$", |s| {
    s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
});

/// [`SLUG`]'s check, reported at `location`.
pub fn slug_rule(e: &mut FieldErrors, location: &str, slug: &str) {
    e.check(SLUG.ok(slug), location, "1 to 64 lowercase letters, digits, '-' or '_'", Some(slug.into()));
}

/// The slug a name gives when none is sent: lowercase letters and digits,
/// every other run of characters one '-', at most 64; `fallback` for a
/// name without a letter or digit.
pub fn slugify(name: &str, fallback: &str) -> String {
    let mut s = String::new();
    for c in name.trim().chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
    }
    let s: String = s.trim_end_matches('-').chars().take(64).collect();
    if s.is_empty() {
        fallback.to_string()
    } else {
        s
    }
}

/// A job's, a group's, a workflow's or an event source's name.
pub const NAME: Text = Text::not_blank(1, 200);

/// [`NAME`]'s check, at `body.name`.
pub fn name_rule(e: &mut FieldErrors, name: &str) {
    e.check(NAME.ok(name), "body.name", "must be 1 to 200 characters", Some(name.into()));
}

/// The name of an API key, a policy or a log drain; a role's is [`ROLE_NAME`].
pub const LABEL: Text = Text::label(1, 200);

/// A label's check (`rule` is [`LABEL`] or [`ROLE_NAME`]), at `body.name`.
pub fn label_rule(e: &mut FieldErrors, name: &str, rule: &Text) -> bool {
    let ok = rule.ok(name);
    let message = format!("must be {}, no control characters", rule.length_words());
    e.check(ok, "body.name", message, Some(name.into()));
    ok
}

/// A custom role's name; also not a system role's (`validate_role`).
pub const ROLE_NAME: Text = Text::label(1, 100);

/// The descriptions of groups, roles, policies.
pub const DESCRIPTION: Text = Text::stored(0, 2000);

/// An optional description (`rule` bounds its length; not echoed back).
pub fn description_rule(e: &mut FieldErrors, description: Option<&str>, rule: &Text) {
    let ok = description.is_none_or(|d| rule.ok(d));
    e.check(ok, "body.description", format!("at most {} characters", rule.max), None);
}

/// Tells the scheduler's cron loop, which sleeps until the next tick it
/// knows of, that an active job with a schedule was created, changed or
/// resumed: its next tick may be sooner.
pub fn wake_cron(state: &AppState, spec: &JobSpec, active: bool) {
    if active && spec.cron.is_some() {
        state.queue.wake(WakeLoop::Cron, None);
    }
}

/// Pushes a job's caps and pause state to Redis. A Redis outage is logged,
/// not failed: the reconciler pushes every job's limits again.
pub async fn sync_limits(state: &AppState, job_id: &str, project_id: &str, spec: &JobSpec, paused: bool) {
    if let Err(e) = state.queue.set_limits(project_id, job_id, spec.limits_field(project_id, paused).as_deref()).await {
        tracing::warn!(job_id, error = %e, "could not push job limits to redis; the reconciler will");
    }
}

/// `pub type $name = (apis...)` and `pub fn $make() -> $name`, which
/// builds it: one member of the service's tuple of `#[OpenApi]` structs.
macro_rules! api_group {
    ($(#[$doc:meta])* $name:ident, $make:ident: $($api:path),+ $(,)?) => {
        $(#[$doc])*
        pub type $name = ($($api,)+);

        pub fn $make() -> $name {
            ($($api,)+)
        }
    };
}

api_group!(
    /// The access-control operations (keys, roles, members, policies, the
    /// audit trail) and the SDK.
    AccessApis, access_apis:
    api_keys::ApiKeysApi, roles::RolesApi, members::MembersApi, policies::PoliciesApi, audit::AuditApi, sdk::SdkApi,
);

api_group!(
    /// Reports: queue statistics, analytics and usage.
    ReportApis, report_apis:
    stats::StatsApi, analytics::AnalyticsApi, analytics::UsageApi,
);

api_group!(
    /// Workflows, their plans and their runs.
    WorkflowApis, workflow_apis:
    workflows::WorkflowsApi, workflow_plans::WorkflowPlansApi, workflow_runs::WorkflowRunsApi,
);

api_group!(
    /// Bulk operations, run records and actions, the SDK's run records,
    /// environments and job secrets.
    RecordApis, record_apis:
    bulk::BulkApi,
    run_ops::RunOpsApi,
    run_records::RunRecordsApi,
    sdk_runs::SdkRunsApi,
    environments::EnvironmentsApi,
    secrets::SecretsApi,
    webhooks::WebhooksApi,
);

#[cfg(test)]
mod tests {
    use super::*;

    fn failures(f: impl FnOnce(&mut FieldErrors)) -> Vec<FieldError> {
        let mut e = FieldErrors::new();
        f(&mut e);
        e.into_vec()
    }

    #[test]
    fn the_stated_text_rules_are_the_checks() {
        use switchyard_shared::domain::rules::agrees;
        for r in [SLUG, NAME, LABEL, ROLE_NAME, DESCRIPTION] {
            assert_eq!(agrees(&r, &["billing-v2_a", "Send email"]), Ok(()), "{r:?}");
        }
        assert_eq!(slugify("Send email!", "job"), "send-email");
        assert_eq!(slugify("!!!", "job"), "job");
    }

    #[test]
    fn slug_rule_allows_lowercase_digits_dash_underscore() {
        assert!(failures(|e| slug_rule(e, "body.slug", "billing-v2_a")).is_empty());
        for bad in ["", "Billing", "a b", "é", &"a".repeat(65)] {
            let got = failures(|e| slug_rule(e, "body.slug", bad));
            assert_eq!(got.len(), 1, "{bad:?}");
            assert_eq!(got[0].location, "body.slug");
            assert_eq!(got[0].message, "1 to 64 lowercase letters, digits, '-' or '_'");
            assert_eq!(got[0].value, Some(bad.into()));
        }
    }

    #[test]
    fn name_rule_refuses_blank_and_long_names() {
        assert!(failures(|e| name_rule(e, "Send email")).is_empty());
        assert!(failures(|e| name_rule(e, &"n".repeat(200))).is_empty());
        for bad in ["", "   ", &"n".repeat(201)] {
            let got = failures(|e| name_rule(e, bad));
            assert_eq!(got, [FieldError::new("body.name", "must be 1 to 200 characters", Some(bad.into()))]);
        }
    }

    #[test]
    fn label_rule_also_refuses_control_characters() {
        assert!(failures(|e| assert!(label_rule(e, "ci key", &ROLE_NAME))).is_empty());
        for bad in [" ", "a\tb", &"k".repeat(101)] {
            let got = failures(|e| assert!(!label_rule(e, bad, &ROLE_NAME)));
            assert_eq!(got[0].message, "must be 1 to 100 characters, no control characters", "{bad:?}");
        }
    }

    #[test]
    fn description_rule_bounds_length_and_never_echoes() {
        let five = Text::any(0, 5);
        assert!(failures(|e| description_rule(e, None, &five)).is_empty());
        assert!(failures(|e| description_rule(e, Some("12345"), &five)).is_empty());
        assert!(failures(|e| description_rule(e, Some("日本語日本"), &five)).is_empty());
        let got = failures(|e| description_rule(e, Some("123456"), &five));
        assert_eq!(got, [FieldError::new("body.description", "at most 5 characters", None)]);
    }

    #[test]
    fn scopes_are_deduplicated_and_every_unknown_one_is_reported() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            validate_scopes("body.scopes", &list(&["jobs:read", "jobs:read", "*"])).unwrap(),
            ["jobs:read", "*"]
        );
        let got = validate_scopes("body.scopes", &list(&["nope", "jobs:read", "jobs:reed"])).unwrap_err();
        let at: Vec<_> = got.iter().map(|f| f.location.as_str()).collect();
        assert_eq!(at, ["body.scopes/0", "body.scopes/2"]);
        assert!(got[0].message.starts_with("unknown scope; known: "));
        assert_eq!(got[1].value, Some("jobs:reed".into()));
    }
}
