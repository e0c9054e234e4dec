//! The API's one error type. Every failure, the framework's own included
//! (see `problem::ProblemMiddleware`), reaches the client as
//! application/problem+json (the rules: docs/contract.md, "Errors");
//! internals are logged, never sent.

use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object};
use serde_json::Value;
use switchyard_shared::domain::FieldError;

/// An RFC 9457 problem document.
#[derive(Object, Clone, Debug, serde::Serialize)]
pub struct Problem {
    /// Link to documentation of this kind of error.
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub type_: String,
    /// Short summary; the same for every occurrence of this kind of error.
    pub title: String,
    /// The HTTP status code.
    pub status: i64,
    /// What went wrong this time.
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Identifies this occurrence (the request id).
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Per-value details of a validation failure: present on every 400 and
    /// 422, one entry per problem, each with its location and message.
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<ErrorDetail>>,
}

/// One invalid value.
#[derive(Object, Clone, Debug, serde::Serialize)]
pub struct ErrorDetail {
    /// Where the value is: the request's part (body, query, header, path),
    /// a dot, and a JSON pointer (RFC 6901) to it without its leading
    /// slash, e.g. `body.endpoint_url`, `body.steps/2/depends_on`,
    /// `query.limit`.
    pub location: String,
    pub message: String,
    /// The offending value.
    #[oai(skip_serializing_if_is_none)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

impl From<FieldError> for ErrorDetail {
    fn from(e: FieldError) -> Self {
        ErrorDetail { location: e.location, message: e.message, value: e.value }
    }
}

pub fn title_for(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

impl Problem {
    pub fn new(status: u16, detail: impl Into<String>) -> Problem {
        Problem {
            type_: "about:blank".into(),
            title: title_for(status).into(),
            status: status.into(),
            detail: Some(detail.into()),
            instance: None,
            errors: None,
        }
    }
}

/// Every error status an operation may answer with.
#[derive(ApiResponse, Debug)]
#[oai(bad_request_handler = "bad_request")]
pub enum ApiError {
    /// The request cannot be read as the operation's input: malformed JSON,
    /// a missing or wrong Content-Type (not `application/json`; 400, never
    /// 415), a value of the wrong type, `null` for a field that is not
    /// nullable, a missing required or an unknown property, an unknown scope.
    #[oai(status = 400, content_type = "application/problem+json")]
    BadRequest(Json<Box<Problem>>),
    /// Missing or invalid credentials.
    #[oai(status = 401, content_type = "application/problem+json")]
    Unauthorized(Json<Box<Problem>>),
    /// The credential lacks the required scope or permission.
    #[oai(status = 403, content_type = "application/problem+json")]
    Forbidden(Json<Box<Problem>>),
    /// No such resource (or it belongs to another project).
    #[oai(status = 404, content_type = "application/problem+json")]
    NotFound(Json<Box<Problem>>),
    /// The resource's state does not allow the operation.
    #[oai(status = 409, content_type = "application/problem+json")]
    Conflict(Json<Box<Problem>>),
    /// Well-formed but invalid values; `errors` lists each.
    #[oai(status = 422, content_type = "application/problem+json")]
    Unprocessable(Json<Box<Problem>>),
    /// A dependency (Postgres) is unavailable; retry later.
    #[oai(status = 503, content_type = "application/problem+json")]
    Unavailable(Json<Box<Problem>>),
    /// An unexpected failure; details are in the server log.
    #[oai(status = 500, content_type = "application/problem+json")]
    Internal(Json<Box<Problem>>),
}

fn bad_request(err: poem::Error) -> ApiError {
    let status = err.status().as_u16();
    let p = Problem::new(status, err.to_string());
    match status {
        401 => ApiError::Unauthorized(doc(p)),
        403 => ApiError::Forbidden(doc(p)),
        404 => ApiError::NotFound(doc(p)),
        503 => ApiError::Unavailable(doc(p)),
        _ => refused(&err),
    }
}

/// The answer to a request the framework refused before the handler ran
/// (a parameter or a body that does not parse or breaks a stated rule), as
/// `problem::ProblemMiddleware` and `bad_request` give it: a body the
/// document's schema refuses (`strict_json`) with its status and
/// `errors[]`; a value breaking a validator or an enum, 422; anything else,
/// a missing or wrong Content-Type included, 400 (the request cannot be
/// read as the operation's input).
pub(crate) fn refused(err: &poem::Error) -> ApiError {
    if let Some(r) = err.downcast_ref::<crate::strict_json::BodyRefused>() {
        return match r.status {
            422 => ApiError::unprocessable(r.detail.clone(), r.errors.clone()),
            _ => ApiError::bad_request_at(r.detail.clone(), r.errors.clone()),
        };
    }
    let at = located(err);
    if breaks_a_stated_rule(err) {
        return ApiError::unprocessable(format!("{}: {}", at.location, at.message), vec![at]);
    }
    ApiError::bad_request_at(err.to_string(), vec![at])
}

/// Whether the framework refused a well-formed value because it breaks a
/// rule the document states for it (a validator's bound, length or
/// pattern, or a value outside an enum): a 422, as a body's is
/// (`strict_json`), not the 400 of a value that does not parse.
fn breaks_a_stated_rule(err: &poem::Error) -> bool {
    use poem_openapi::error::{ParseParamError, ParseRequestPayloadError};
    let reason = match (err.downcast_ref::<ParseParamError>(), err.downcast_ref::<ParseRequestPayloadError>()) {
        (Some(e), _) => e.reason.as_str(),
        (_, Some(e)) => e.reason.as_str(),
        _ => return false,
    };
    reason.contains("verification failed") || reason.contains("Expect a valid enumeration value")
}

/// Where a request the framework could not parse went wrong: the parameter
/// it names, the body property a closed object does not know
/// (`body.<name>`), else the body as a whole.
pub(crate) fn located(err: &poem::Error) -> FieldError {
    use poem_openapi::error::{ParseParamError, ParsePathError, ParseRequestPayloadError};
    if let Some(e) = err.downcast_ref::<ParsePathError>() {
        return FieldError::new(format!("path.{}", e.name), e.reason.clone(), None);
    }
    if let Some(e) = err.downcast_ref::<ParseParamError>() {
        return FieldError::new(format!("query.{}", e.name), in_words(&e.reason), None);
    }
    let reason = match err.downcast_ref::<ParseRequestPayloadError>() {
        Some(e) => e.reason.clone(),
        None => err.to_string(),
    };
    match (unknown_property(&reason), failed_field(&reason)) {
        (Some(name), _) => FieldError::new(format!("body.{name}"), "unknown property", None),
        (None, Some(name)) => FieldError::new(format!("body.{name}"), in_words(&reason), None),
        (None, None) => FieldError::new("body", reason, None),
    }
}

/// The property of poem-openapi's "unknown field `name`." message.
fn unknown_property(reason: &str) -> Option<&str> {
    let rest = &reason[reason.find("unknown field `")? + "unknown field `".len()..];
    rest.split_once('`').map(|(name, _)| name).filter(|n| !n.is_empty())
}

/// poem-openapi's "verification failed. maximum(100, exclusive: false)" as
/// the rest of the API says it ("must be at most 100"); any other reason
/// as it is.
fn in_words(reason: &str) -> String {
    let Some(rule) = reason.split("verification failed. ").nth(1) else { return reason.to_string() };
    let arg = |name: &str| rule.strip_prefix(name)?.strip_prefix('(')?.split([',', ')']).next().map(str::to_string);
    if let Some(n) = arg("maximum") {
        format!("must be at most {n}")
    } else if let Some(n) = arg("minimum") {
        format!("must be at least {n}")
    } else if let Some(n) = arg("maxLength") {
        format!("must be at most {n} characters")
    } else if let Some(n) = arg("minLength") {
        format!("must be at least {n} characters")
    } else if let Some(p) = rule.strip_prefix("pattern(").and_then(|p| p.strip_suffix(')')) {
        format!("must match the pattern {p}")
    } else {
        rule.to_string()
    }
}

/// The field of poem-openapi's "field `name` verification failed." message.
fn failed_field(reason: &str) -> Option<&str> {
    let rest = &reason[reason.find("field `")? + "field `".len()..];
    rest.split_once("` verification failed").map(|(name, _)| name).filter(|n| !n.is_empty())
}

pub type ApiResult<T> = Result<T, ApiError>;

impl From<Vec<FieldError>> for ApiError {
    fn from(errors: Vec<FieldError>) -> Self {
        ApiError::invalid_fields(errors)
    }
}

/// The body of an error response, boxed so that `ApiResult` (the return
/// type of every handler) stays two words wide on the happy path.
fn doc(p: Problem) -> Json<Box<Problem>> {
    Json(Box::new(p))
}

impl ApiError {
    /// 400 for a request that cannot be read as the operation's input, with
    /// `errors[]` saying where, as a 422 does.
    pub fn bad_request_at(detail: impl Into<String>, errors: Vec<FieldError>) -> ApiError {
        let mut p = Problem::new(400, detail);
        p.errors = Some(errors.into_iter().map(ErrorDetail::from).collect());
        ApiError::BadRequest(doc(p))
    }
    pub fn unauthorized(detail: impl Into<String>) -> ApiError {
        ApiError::Unauthorized(doc(Problem::new(401, detail)))
    }
    pub fn forbidden(detail: impl Into<String>) -> ApiError {
        ApiError::Forbidden(doc(Problem::new(403, detail)))
    }
    pub fn not_found(what: &str, id: &str) -> ApiError {
        ApiError::NotFound(doc(Problem::new(404, format!("{what} {id:?} not found"))))
    }
    pub fn conflict(detail: impl Into<String>) -> ApiError {
        ApiError::Conflict(doc(Problem::new(409, detail)))
    }
    pub fn unavailable(detail: impl Into<String>) -> ApiError {
        ApiError::Unavailable(doc(Problem::new(503, detail)))
    }
    /// 422 with one entry per invalid field.
    pub fn invalid(errors: Vec<ErrorDetail>) -> ApiError {
        let detail = match errors.as_slice() {
            [one] => format!("{}: {}", one.location, one.message),
            many => format!("{} invalid values", many.len()),
        };
        let mut p = Problem::new(422, detail);
        p.errors = Some(errors);
        ApiError::Unprocessable(doc(p))
    }
    /// 422 with a detail of its own, for failures that belong together
    /// (two values that contradict each other).
    pub fn unprocessable(detail: impl Into<String>, errors: Vec<FieldError>) -> ApiError {
        let mut p = Problem::new(422, detail);
        p.errors = Some(errors.into_iter().map(ErrorDetail::from).collect());
        ApiError::Unprocessable(doc(p))
    }
    pub fn invalid_field(location: &str, message: impl Into<String>, value: Option<Value>) -> ApiError {
        Self::invalid(vec![ErrorDetail { location: location.into(), message: message.into(), value }])
    }
    /// 422 for the failures a validator collected (`domain::FieldErrors`).
    pub fn invalid_fields(errors: Vec<FieldError>) -> ApiError {
        Self::invalid(errors.into_iter().map(ErrorDetail::from).collect())
    }
    /// The problem document the error answers with.
    pub fn problem(&self) -> &Problem {
        match self {
            ApiError::BadRequest(p)
            | ApiError::Unauthorized(p)
            | ApiError::Forbidden(p)
            | ApiError::NotFound(p)
            | ApiError::Conflict(p)
            | ApiError::Unprocessable(p)
            | ApiError::Unavailable(p)
            | ApiError::Internal(p) => &p.0,
        }
    }
    /// The problem's detail (per-item errors of bulk operations).
    pub fn detail(&self) -> String {
        let p = self.problem();
        p.detail.clone().unwrap_or_else(|| p.title.clone())
    }
    /// The error in one line, for a per-item answer (a bulk item, an event
    /// source's entry): its field errors when there are several, else its
    /// detail.
    pub fn one_line(&self) -> String {
        match self.problem().errors.as_ref().filter(|e| e.len() > 1) {
            Some(errors) => {
                errors.iter().map(|d| format!("{}: {}", d.location, d.message)).collect::<Vec<_>>().join("; ")
            }
            None => self.detail(),
        }
    }
    pub fn internal(context: &str, err: &dyn std::fmt::Display) -> ApiError {
        tracing::error!(error = %err, "{context}");
        ApiError::Internal(doc(Problem::new(500, "internal error; see the server log")))
    }
}

/// Postgres errors: an outage is 503 (retry later), a named constraint is
/// the client's conflict, anything else is ours (500, logged).
impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            // A pool timeout is usually overload, not an outage: say so, so
            // clients back off instead of paging someone.
            sqlx::Error::PoolTimedOut => {
                tracing::warn!(error = %e, "no database connection free in time");
                ApiError::unavailable("the database is busy or unavailable; nothing was changed, retry later")
            }
            sqlx::Error::Io(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => {
                tracing::warn!(error = %e, "postgres unavailable");
                ApiError::unavailable("the database is unavailable; nothing was changed, retry later")
            }
            sqlx::Error::Database(db) if db.code().as_deref().is_some_and(is_transient) => {
                tracing::warn!(error = %e, "postgres unavailable or contended");
                ApiError::unavailable("the database is unavailable; nothing was changed, retry later")
            }
            sqlx::Error::Database(db) => match (db.code().as_deref(), db.constraint()) {
                (Some("23505"), Some(c)) => ApiError::conflict(constraint_message(c)),
                (Some("23503"), _) => ApiError::invalid_field("body", "refers to a resource that does not exist", None),
                // Class 22, data exception: a value Postgres cannot store,
                // such as a NUL character in text or JSON (checked here, once,
                // rather than in every field of every body).
                (Some(code), _) if code.starts_with("22") => ApiError::invalid_field(
                    "body",
                    "holds a value that cannot be stored (for example a NUL character, \\u0000)",
                    None,
                ),
                _ => ApiError::internal("database error", &e),
            },
            _ => ApiError::internal("database error", &e),
        }
    }
}

/// SQLSTATEs that say the database could not do the work now, not that
/// the request was wrong: the connection failed (class 08), the server is
/// shutting down or starting (57P01-57P03: a restart, `pg_terminate_backend`),
/// it is out of resources (class 53), or the transaction lost a
/// serialization conflict or a deadlock (40001, 40P01). Nothing was
/// committed, so the client may retry: 503, never 500.
fn is_transient(code: &str) -> bool {
    code.starts_with("08") || code.starts_with("53") || matches!(code, "57P01" | "57P02" | "57P03" | "40001" | "40P01")
}

fn constraint_message(constraint: &str) -> String {
    match constraint {
        "job_groups_project_slug_key" => "a job group with this slug already exists in the project".into(),
        "jobs_project_slug_key" => "a job with this slug already exists in the project".into(),
        "workflows_project_slug_key" => "a workflow with this slug already exists in the project".into(),
        "projects_pkey" => "a project with this id already exists".into(),
        "roles_project_name_key" => "a role with this name already exists in the project".into(),
        other => format!("conflicts with an existing record ({other})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_or_a_lost_conflict_is_transient_and_a_bad_value_is_not() {
        for code in ["08006", "08001", "57P01", "57P03", "53300", "40001", "40P01"] {
            assert!(is_transient(code), "{code}");
        }
        for code in ["23505", "22021", "42P01", "XX000"] {
            assert!(!is_transient(code), "{code}");
        }
    }

    #[test]
    fn a_broken_validator_is_said_in_words() {
        assert_eq!(in_words("verification failed. maximum(100, exclusive: false)"), "must be at most 100");
        assert_eq!(in_words("verification failed. minimum(1, exclusive: false)"), "must be at least 1");
        assert_eq!(in_words("field `id` verification failed. maxLength(64)"), "must be at most 64 characters");
        assert_eq!(in_words(r#"verification failed. pattern("^a$")"#), r#"must match the pattern "^a$""#);
        assert_eq!(in_words("failed to parse"), "failed to parse");
    }

    #[test]
    fn an_unknown_property_is_located_in_the_body() {
        let reason = r#"failed to parse "TriggerRequest": unknown field `priorty`."#;
        assert_eq!(unknown_property(reason), Some("priorty"));
        assert_eq!(unknown_property("expected value at line 1 column 1"), None);
        assert_eq!(unknown_property("unknown field ``"), None);
    }
}
