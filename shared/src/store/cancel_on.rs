//! Cancel on event (`domain::cancel_on`): the runs an event cancels, in the
//! transaction that fires it ([`events::fire_in`](super::events::fire_in)),
//! before its sources make runs, so a run the event itself makes is never
//! one it cancels. Only runs made before the event arrived count (an event
//! is a moment, as for `wait_for_event` steps), and with `timeout_secs` only
//! those made at most that long before it.

use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgConnection;

use super::transitions::{self, Staged};
use crate::domain::cancel_on::{self, CancelOn};
use crate::ids::RunId;

/// Most unfinished runs of one job an event looks at: an event stays one
/// bounded transaction however large a backlog is. The oldest go first.
pub const MAX_RUNS_PER_JOB: i64 = 1000;

/// Cancels the unfinished runs of the project's jobs whose `cancel_on`
/// rules the event matches, each with the reason naming the event.
pub async fn cancel_matching(
    conn: &mut PgConnection,
    project_id: &str,
    event_id: &str,
    event_key: &str,
    event_payload: Option<&Value>,
    event_at: chrono::DateTime<chrono::Utc>,
) -> Result<Staged, sqlx::Error> {
    let probe = serde_json::json!([{ "event_key": event_key }]);
    let jobs: Vec<(String, Json<Vec<CancelOn>>)> = sqlx::query_as(
        "SELECT id, spec -> 'cancel_on' FROM jobs
          WHERE deleted_at IS NULL AND spec ? 'cancel_on' AND project_id = $1 AND spec -> 'cancel_on' @> $2
          ORDER BY id",
    )
    .bind(project_id)
    .bind(Json(&probe))
    .fetch_all(&mut *conn)
    .await?;
    let mut doomed: Vec<String> = Vec::new();
    for (job_id, rules) in jobs {
        let rules: Vec<&CancelOn> = rules.0.iter().filter(|r| r.event_key == event_key).collect();
        let longest = if rules.iter().any(|r| r.timeout_secs.is_none()) {
            None
        } else {
            rules.iter().filter_map(|r| r.timeout_secs).max()
        };
        let runs: Vec<(RunId, Option<Json<Value>>, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(&format!(
            "SELECT id, payload, created_at FROM job_runs
              WHERE project_id = $1 AND job_id = $2 AND status IN {active} AND created_at <= $3
                AND ($4::float8 IS NULL OR created_at >= $3 - make_interval(secs => $4))
              ORDER BY id LIMIT $5",
            active = crate::run_active_sql!()
        ))
        .bind(project_id)
        .bind(&job_id)
        .bind(event_at)
        .bind(longest.map(|s| s as f64))
        .bind(MAX_RUNS_PER_JOB)
        .fetch_all(&mut *conn)
        .await?;
        for (id, payload, made_at) in runs {
            let payload = payload.as_ref().map(|p| &p.0);
            let in_time =
                |r: &CancelOn| r.timeout_secs.is_none_or(|t| event_at - made_at <= chrono::Duration::seconds(t));
            if rules.iter().any(|r| in_time(r) && cancel_on::matches(r, event_payload, payload)) {
                doomed.push(id.into_string());
            }
        }
    }
    let reason = format!("cancelled by event {event_key} ({event_id})");
    transitions::cancel_in(conn, &doomed, &reason).await
}
