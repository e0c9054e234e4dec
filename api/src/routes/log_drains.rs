//! Log drains: a project's run log lines shipped to an HTTP receiver by the
//! scheduler (docs/notifications.md, "Log drains"). Here they are
//! configured; the sending is `switchyard_scheduler::drains`.
//!
//! The signing secret is write-only: responses say `has_secret`, and
//! neither responses, audit details nor logs carry the value.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi};
use serde_json::{json, Value};
use switchyard_shared::domain::rules::Text;
use switchyard_shared::domain::{FieldError, FieldErrors};
use switchyard_shared::outbound::TargetError;
use switchyard_shared::secrets;
use switchyard_shared::store::log_drains::{self, LogDrain as DrainRow, Settings, LEVELS};

use super::secrets::seal_signing_key;
use super::{found, label_rule, patch, project_of, tenant, Created, Done, Tag};
use crate::audit::{self, Change};
use crate::auth::Auth;
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

/// Most jobs one drain may name.
/// Most jobs a drain names.
pub const MAX_JOB_IDS: usize = 100;
/// A drain's URL (checked as a URL too) and signing secret.
pub const URL: Text = Text::stored(1, 2048);
pub const SECRET: Text = Text::stored(1, 256);

pub struct LogDrainsApi;

#[derive(Object)]
pub struct LogDrain {
    pub id: String,
    pub project_id: String,
    pub name: String,
    /// Where batches are POSTed.
    pub url: String,
    /// Whether batches are signed (the secret itself is never returned).
    pub has_secret: bool,
    /// Jobs whose lines are shipped; empty: every job of the project.
    pub job_ids: Vec<String>,
    /// debug, info, warn or error: lines below it are not shipped.
    pub min_level: String,
    pub enabled: bool,
    /// Lines skipped because the backlog exceeded the scheduler's cap.
    pub lines_dropped: i64,
    /// Why the last send failed; cleared by the next success.
    #[oai(skip_serializing_if_is_none)]
    pub last_error: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub last_success_at: Option<DateTime<Utc>>,
    /// Consecutive failed sends.
    pub failures: i32,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub updated_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<DrainRow> for LogDrain {
    fn from(r: DrainRow) -> Self {
        LogDrain {
            has_secret: r.secret.is_some(),
            id: r.id,
            project_id: r.project_id,
            name: r.name,
            url: r.url,
            job_ids: r.job_ids,
            min_level: r.min_level,
            enabled: r.enabled,
            lines_dropped: r.lines_dropped,
            last_error: r.last_error,
            last_success_at: r.last_success_at,
            failures: r.failures,
            created_by: r.created_by,
            updated_by: r.updated_by,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CreateLogDrain {
    /// Required for the internal secret unless X-Project-Id is sent.
    pub project_id: Option<String>,
    /// 1 to 200 characters.
    pub name: String,
    /// http or https; under `TARGET_DENY_PRIVATE` not a private address.
    pub url: String,
    /// HMAC key signing each batch (`X-Svc-Signature`); write-only.
    pub secret: Option<String>,
    /// Live jobs of the project (at most 100); absent or empty: every job.
    pub job_ids: Option<Vec<String>>,
    /// debug (default), info, warn or error.
    pub min_level: Option<String>,
    /// Default true.
    pub enabled: Option<bool>,
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct UpdateLogDrain {
    pub name: Option<String>,
    pub url: Option<String>,
    /// A value replaces the key, `null` removes it (batches go unsigned).
    #[oai(nullable)]
    pub secret: MaybeUndefined<String>,
    /// Replaces the list; empty: every job.
    pub job_ids: Option<Vec<String>>,
    pub min_level: Option<String>,
    /// Re-enabling resumes at the drain's cursor (within the backlog cap).
    pub enabled: Option<bool>,
}

/// The value rules of CreateLogDrain and UpdateLogDrain (see
/// `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{count, text};
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::{Items, Property};
    let mut r = vec![(Property("CreateLogDrain", "project_id"), text(&ID))];
    for schema in ["CreateLogDrain", "UpdateLogDrain"] {
        r.push((Property(schema, "name"), text(&super::LABEL)));
        r.push((Property(schema, "url"), text(&URL)));
        r.push((Property(schema, "secret"), text(&SECRET)));
        r.push((Property(schema, "job_ids"), count(0, MAX_JOB_IDS)));
        r.push((Items(schema, "job_ids"), text(&ID)));
    }
    r
}

/// The field rules of a drain's settings; the URL is checked against the
/// server's private-address policy by [`check_url`].
fn validate(s: &Settings) -> Result<(), Vec<FieldError>> {
    let mut e = FieldErrors::new();
    label_rule(&mut e, &s.name, &super::LABEL);
    e.check(URL.ok(&s.url), "body.url", URL.length_words(), None);
    let secret_ok = s.secret.as_deref().is_none_or(|k| SECRET.ok(k));
    // The value is never echoed, even in an error.
    e.check(secret_ok, "body.secret", SECRET.length_words(), None);
    e.check(
        LEVELS.contains(&s.min_level.as_str()),
        "body.min_level",
        "one of debug, info, warn, error",
        Some(s.min_level.as_str().into()),
    );
    e.check(s.job_ids.len() <= MAX_JOB_IDS, "body.job_ids", format!("at most {MAX_JOB_IDS} jobs"), None);
    for (i, id) in s.job_ids.iter().enumerate() {
        let ok = switchyard_shared::ids::is_valid_external_id(id);
        e.check(ok, format!("body.job_ids/{i}"), "not a job id", Some(id.as_str().into()));
    }
    e.finish()
}

/// 422 unless the URL is http(s) and, under `TARGET_DENY_PRIVATE`, does not
/// name a private address (names are checked again when sending, where
/// they resolve).
fn check_url(state: &AppState, url: &str) -> ApiResult<()> {
    match state.webhooks.target(url) {
        Ok(_) => Ok(()),
        Err(TargetError::Invalid(m)) => Err(ApiError::invalid_field("body.url", m, Some(url.into()))),
        Err(TargetError::Denied(d)) => Err(ApiError::invalid_field("body.url", d.to_string(), Some(url.into()))),
    }
}

/// Every check of a drain's settings, in the order a client fixes them.
async fn check(state: &AppState, project_id: &str, s: &Settings) -> ApiResult<()> {
    validate(s)?;
    check_url(state, &s.url)?;
    let unknown = log_drains::unknown_jobs(&state.pool, project_id, &s.job_ids).await?;
    if !unknown.is_empty() {
        let errors = s
            .job_ids
            .iter()
            .enumerate()
            .filter(|(_, id)| unknown.contains(id))
            .map(|(i, id)| {
                FieldError::new(format!("body.job_ids/{i}"), "no such job in this project", Some(id.as_str().into()))
            })
            .collect();
        return Err(ApiError::invalid_fields(errors));
    }
    Ok(())
}

async fn load(state: &AppState, auth: &Auth, id: &str) -> ApiResult<DrainRow> {
    found("log drain", id, log_drains::get(&state.pool, tenant(&auth.0), id)).await
}

/// What the audit trail keeps of a drain: never its secret.
fn details(d: &LogDrain) -> serde_json::Value {
    json!({"name": d.name, "url": d.url, "has_secret": d.has_secret, "job_ids": d.job_ids,
           "min_level": d.min_level, "enabled": d.enabled})
}

#[OpenApi(tag = "Tag::LogDrains")]
impl LogDrainsApi {
    /// Create a log drain. It ships the lines written from now on, not the
    /// project's earlier logs.
    #[oai(path = "/v1/log-drains", method = "post", operation_id = "createLogDrain")]
    async fn create(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<CreateLogDrain>,
    ) -> ApiResult<Created<LogDrain>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        let s = Settings {
            name: b.name.trim().to_string(),
            url: b.url,
            secret: b.secret,
            job_ids: dedup(b.job_ids.unwrap_or_default()),
            min_level: b.min_level.unwrap_or_else(|| "debug".into()),
            enabled: b.enabled.unwrap_or(true),
        };
        validate(&s)?;
        super::project_exists(&state, &project_id).await?;
        check(&state, &project_id, &s).await?;
        let id = switchyard_shared::ids::log_drain_id();
        let mut s = s;
        if let Some(plain) = s.secret.take() {
            s.secret = Some(seal_signing_key(&state, &id, secrets::LOG_DRAIN_SECRET, &plain)?);
        }
        let d: LogDrain =
            log_drains::create(&state.pool, &id, &project_id, &s, auth.0.actor_id.as_deref()).await?.into();
        let change = Change::new(&d.project_id, "log_drain.created", ("log_drain", &d.id), details(&d));
        audit::record(&state.pool, &auth.0, change).await?;
        Ok(Created::Created(Json(d)))
    }

    /// Log drains of a project, newest first.
    #[oai(path = "/v1/log-drains", method = "get", operation_id = "listLogDrains")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<LogDrain>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = log_drains::list(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), LogDrain::from)))
    }

    /// Get a log drain, with its progress (lines dropped, last error, last
    /// success).
    #[oai(path = "/v1/log-drains/:log_drain_id", method = "get", operation_id = "getLogDrain")]
    async fn get(&self, state: Data<&AppState>, auth: Auth, log_drain_id: Path<String>) -> ApiResult<Json<LogDrain>> {
        Ok(Json(load(&state, &auth, &log_drain_id).await?.into()))
    }

    /// Change a log drain. Its progress stays; a change makes it due at
    /// once and forgets its back-off.
    #[oai(path = "/v1/log-drains/:log_drain_id", method = "patch", operation_id = "updateLogDrain")]
    async fn update(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        log_drain_id: Path<String>,
        body: JsonBody<UpdateLogDrain>,
    ) -> ApiResult<Json<LogDrain>> {
        let cur = load(&state, &auth, &log_drain_id).await?;
        let b = body.0;
        // The kept secret is sealed, longer than a plaintext may be: only a
        // new one meets the rules.
        let new_secret = matches!(b.secret, MaybeUndefined::Value(_));
        let secret = patch(b.secret, cur.secret);
        let (secret, kept) = if new_secret { (secret, None) } else { (None, secret) };
        let mut s = Settings {
            name: b.name.map(|n| n.trim().to_string()).unwrap_or(cur.name),
            url: b.url.unwrap_or(cur.url),
            secret,
            job_ids: b.job_ids.map(dedup).unwrap_or(cur.job_ids),
            min_level: b.min_level.unwrap_or(cur.min_level),
            enabled: b.enabled.unwrap_or(cur.enabled),
        };
        check(&state, &cur.project_id, &s).await?;
        s.secret = match s.secret.take() {
            Some(plain) => Some(seal_signing_key(&state, &cur.id, secrets::LOG_DRAIN_SECRET, &plain)?),
            None => kept,
        };
        let d: LogDrain = log_drains::update(&state.pool, &cur.project_id, &cur.id, &s, auth.0.actor_id.as_deref())
            .await?
            .ok_or_else(|| ApiError::not_found("log drain", &cur.id))?
            .into();
        let change = Change::new(&d.project_id, "log_drain.updated", ("log_drain", &d.id), details(&d));
        audit::record(&state.pool, &auth.0, change).await?;
        Ok(Json(d))
    }

    /// Delete a log drain. Lines it had not shipped stay in the run logs.
    #[oai(path = "/v1/log-drains/:log_drain_id", method = "delete", operation_id = "deleteLogDrain")]
    async fn delete(&self, state: Data<&AppState>, auth: Auth, log_drain_id: Path<String>) -> ApiResult<Done> {
        let d = load(&state, &auth, &log_drain_id).await?;
        if !log_drains::delete(&state.pool, &d.project_id, &d.id).await? {
            return Err(ApiError::not_found("log drain", &d.id));
        }
        let view = LogDrain::from(d);
        let change = Change::new(&view.project_id, "log_drain.deleted", ("log_drain", &view.id), details(&view));
        audit::record(&state.pool, &auth.0, change).await?;
        Ok(Done::NoContent)
    }
}

/// The list without repeats, in first-seen order.
fn dedup(ids: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            name: "to loki".into(),
            url: "https://logs.example.com/in".into(),
            secret: Some("k".into()),
            job_ids: vec![],
            min_level: "info".into(),
            enabled: true,
        }
    }

    #[test]
    fn settings_are_checked_field_by_field_without_echoing_the_secret() {
        assert_eq!(validate(&settings()), Ok(()));
        let bad = Settings {
            name: " ".into(),
            secret: Some("s".repeat(300)),
            min_level: "fatal".into(),
            job_ids: vec!["a|b".into()],
            ..settings()
        };
        let got = validate(&bad).unwrap_err();
        let at: Vec<&str> = got.iter().map(|e| e.location.as_str()).collect();
        assert_eq!(at, ["body.name", "body.secret", "body.min_level", "body.job_ids/0"]);
        assert_eq!(got[1].value, None, "the secret is not echoed");
    }

    #[test]
    fn repeated_job_ids_are_kept_once() {
        assert_eq!(dedup(vec!["a".into(), "b".into(), "a".into()]), ["a", "b"]);
    }
}
