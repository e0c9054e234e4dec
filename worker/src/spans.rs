//! The spans one attempt leaves in its run's trace (docs/traces.md): the
//! wait in the queue, the dequeue, the dispatch (a client span whose id the
//! target received in `traceparent`), the recording of the outcome, and,
//! when the outcome ends the run, the run's own span from its creation.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use switchyard_shared::store::{Outcome, Run};
use switchyard_shared::traces::{self, Attr, Kind, Place, SpanId, SpanRecord};

use crate::dispatch::Timing;

pub(crate) struct Attempt<'a> {
    pub waiting_since: DateTime<Utc>,
    pub claimed_at: DateTime<Utc>,
    /// The dequeue call that brought the entry.
    pub dequeue: Duration,
    pub sent: SystemTime,
    pub span_id: Option<SpanId>,
    pub timing: Timing,
    pub outcome: &'a Outcome,
    /// When the outcome's write began (it ended now).
    pub recording: SystemTime,
}

/// Records the attempt's spans (the caller checked that the run's trace
/// is recorded).
pub(crate) fn attempt(run: &Run, place: &Place, a: &Attempt<'_>) {
    let o = a.outcome;
    let claimed = traces::at(a.claimed_at);
    let attempt = Attr::new("switchyard.attempt", i64::from(run.attempt));
    traces::record(SpanRecord::child(place, "queue.wait", traces::at(a.waiting_since), claimed).attr(attempt.clone()));
    traces::record(SpanRecord::child(place, "dequeue", claimed - a.dequeue.min(Duration::from_secs(60)), claimed));
    if let Some(span_id) = a.span_id {
        let mut s =
            SpanRecord::child_with_id(place, "dispatch", span_id, a.sent, a.sent + a.timing.ttfb + a.timing.transfer)
                .kind(Kind::Client)
                .attr(attempt.clone())
                .attr(Attr::new("http.request.method", "POST"))
                .attr(Attr::new("url.full", without_secrets(&o.endpoint_url)))
                .attr(Attr::new("switchyard.outcome", o.status.as_str()))
                .attr(Attr::new(
                    "switchyard.retry",
                    match o.next_retry_at {
                        Some(t) => format!("retry at {}", t.to_rfc3339()),
                        None => "no retry".to_string(),
                    },
                ))
                .error(o.error.as_deref().filter(|_| o.status.as_str() != "completed"));
        if let Some(code) = o.status_code {
            s = s.attr(Attr::new("http.response.status_code", i64::from(code)));
        }
        if let Some(class) = &o.error_class {
            s = s.attr(Attr::new("error.type", class.clone()));
        }
        traces::record(s);
    }
    traces::record(
        SpanRecord::child(place, "run.record", a.recording, SystemTime::now())
            .attr(attempt)
            .attr(Attr::new("switchyard.outcome", o.status.as_str())),
    );
    if o.status.is_terminal() {
        run.trace_end(o.status.as_str(), o.error.as_deref());
    }
}

/// The endpoint without what may be a credential (user info, the query).
fn without_secrets(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.to_string()
        }
        Err(_) => String::new(),
    }
}
