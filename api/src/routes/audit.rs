//! GET /v1/audit-events: the project's recorded changes, filtered by time
//! and by what, who and which resource, newest first unless asked.

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::Query;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;

use switchyard_shared::domain::FieldError;
use switchyard_shared::store::{self, audit::AuditRow};

use super::{project_of, view_from_row, Tag};
use crate::auth::Auth;
use crate::error::ApiResult;
use crate::pagination::{Page, Window};
use crate::state::AppState;

pub struct AuditApi;

/// One recorded mutation.
#[derive(Object)]
pub struct AuditEvent {
    pub id: String,
    pub project_id: String,
    /// `apikey:<key_id>`, a user id, `run:<run_id>`, or absent for the bare internal secret.
    #[oai(skip_serializing_if_is_none)]
    pub actor_id: Option<String>,
    /// `user`, `api_key`, `service` or `run`.
    pub actor_type: String,
    /// `<resource>.<verb>`, e.g. `job.created`, `api_key.revoked`, `member.assigned`.
    pub action: String,
    pub resource_type: String,
    #[oai(skip_serializing_if_is_none)]
    pub resource_id: Option<String>,
    /// The request's X-Request-Id.
    #[oai(skip_serializing_if_is_none)]
    pub request_id: Option<String>,
    /// What changed; never a secret.
    pub details: Value,
    pub created_at: DateTime<Utc>,
}

view_from_row!(AuditRow => AuditEvent {
    id, project_id, actor_id, actor_type, action, resource_type, resource_id, request_id, details, created_at
});

/// The form of an RFC 3339 time, as the document states it for `from` and
/// `to` (and `created_after`, `created_before` of `GET /v1/runs`); [`time`] reads it (and refuses a date the calendar lacks, such
/// as 30 February).
pub const RFC3339: &str = concat!(
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)",
    r"(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
);

/// An RFC 3339 time of the query, if given (also the time filters of
/// `GET /v1/runs`).
pub(crate) fn time(field: &str, raw: Option<&str>) -> Result<Option<DateTime<Utc>>, Vec<FieldError>> {
    let Some(s) = raw else { return Ok(None) };
    let t = DateTime::parse_from_rfc3339(s).map_err(|_| {
        let message = "an RFC 3339 date-time, e.g. 2025-01-31T12:00:00Z";
        vec![FieldError::new(format!("query.{field}"), message, Some(s.into()))]
    })?;
    Ok(Some(t.with_timezone(&Utc)))
}

/// The orders a listing takes: newest first (the default) or oldest first.
pub const ORDERS: [&str; 2] = ["desc", "asc"];

/// The time range and order of a listing.
#[derive(Debug, PartialEq)]
struct Range {
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    ascending: bool,
}

/// The query's time range and whether the oldest come first. Only the
/// first invalid parameter (in the order from, to, order) is reported.
fn validate_range(from: Option<&str>, to: Option<&str>, order: Option<&str>) -> Result<Range, Vec<FieldError>> {
    let (from, to) = (time("from", from)?, time("to", to)?);
    let ascending = match order {
        None => false,
        Some(o) if ORDERS.contains(&o) => o == "asc",
        Some(o) => return Err(vec![FieldError::new("query.order", ORDERS.join(" or "), Some(o.into()))]),
    };
    Ok(Range { from, to, ascending })
}

#[OpenApi(tag = "Tag::Audit")]
impl AuditApi {
    /// The project's audit events in `[from, to)`, newest first unless
    /// `order=asc`; `action`, `resource_type`, `resource_id` and `actor_id`
    /// narrow the list.
    #[oai(path = "/v1/audit-events", method = "get", operation_id = "listAuditEvents")]
    #[allow(clippy::too_many_arguments)]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        /// Earliest created_at (inclusive), RFC 3339.
        from: Query<Option<String>>,
        /// Latest created_at (exclusive), RFC 3339.
        to: Query<Option<String>>,
        /// `desc` (default) or `asc`.
        order: Query<Option<String>>,
        action: Query<Option<String>>,
        resource_type: Query<Option<String>>,
        resource_id: Query<Option<String>>,
        actor_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<AuditEvent>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let Range { from, to, ascending } = validate_range(from.0.as_deref(), to.0.as_deref(), order.0.as_deref())?;
        let filter = store::audit::Filter {
            from,
            to,
            action: action.0.as_deref(),
            resource_type: resource_type.0.as_deref(),
            resource_id: resource_id.0.as_deref(),
            actor_id: actor_id.0.as_deref(),
            ascending,
            cursor: w.after(),
        };
        let rows = store::audit::list(&state.pool, &project_id, &filter, w.fetch()).await?;
        Ok(Json(w.page(rows, |e| e.id.clone(), AuditEvent::from)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stated_time_form_is_what_the_parse_takes() {
        let pattern = switchyard_shared::domain::rules::validator(&serde_json::json!({"pattern": RFC3339}));
        for (t, parses) in [
            ("2025-01-31T12:00:00Z", true),
            ("2025-01-31t12:00:00z", true),
            ("2025-01-31 12:00:00+01:00", true),
            ("2025-01-31T12:00:00.123456789-05:30", true),
            ("2025-01-31T12:00:00.1234567891234Z", true),
            ("2016-12-31T23:59:60Z", true),
            ("0000-01-01T00:00:00Z", true),
            ("2025-01-31T12:00Z", false),
            ("2025-1-31T12:00:00Z", false),
            ("2025-01-31T24:00:00Z", false),
            ("2025-01-31T12:00:00+24:00", false),
            ("2025-01-31T12:00:00", false),
            ("", false),
            ("yesterday", false),
        ] {
            assert_eq!(pattern.is_valid(&serde_json::json!(t)), parses, "{t}");
            assert_eq!(time("from", Some(t)).is_ok(), parses, "{t}");
        }
        // The calendar is the parse's alone.
        assert!(pattern.is_valid(&serde_json::json!("2025-02-30T00:00:00Z")));
        assert!(time("from", Some("2025-02-30T00:00:00Z")).is_err());
    }

    #[test]
    fn the_range_reports_the_first_bad_parameter_only() {
        let Range { from, to, ascending: asc } =
            validate_range(Some("2025-01-31T12:00:00Z"), None, Some("asc")).unwrap();
        assert_eq!(from.map(|t| t.to_rfc3339()), Some("2025-01-31T12:00:00+00:00".to_string()));
        assert_eq!((to, asc), (None, true));
        assert!(!validate_range(None, None, None).unwrap().ascending, "newest first by default");
        let got = validate_range(Some("yesterday"), Some("today"), Some("up")).unwrap_err();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].location, "query.from");
        assert_eq!(validate_range(None, None, Some("up")).unwrap_err()[0].location, "query.order");
    }
}
