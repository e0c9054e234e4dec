//! A run's `execution_trace` (shown on the run): where the time of one attempt
//! went, in whole milliseconds.
//!
//! ```text
//! created_at (or due) ── queue_wait ──► claim ──► send ── ttfb ──► headers ── transfer ──► body
//!                                                 └ connect ┘ (0 on a reused connection)
//! dispatch = ttfb + transfer;  total = created_at → outcome
//! ```

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::dispatch::Timing;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExecutionTrace {
    pub queue_wait_ms: i64,
    pub dequeue_ms: i64,
    pub connect_ms: i64,
    pub ttfb_ms: i64,
    pub transfer_ms: i64,
    pub dispatch_ms: i64,
    pub total_ms: i64,
}

impl ExecutionTrace {
    /// `waiting_since` is when the run became ready: created (or, for a
    /// retry, due again); `claimed_at` when this worker took it.
    pub fn new(waiting_since: DateTime<Utc>, claimed_at: DateTime<Utc>, dequeue: Duration) -> ExecutionTrace {
        ExecutionTrace {
            queue_wait_ms: ms_between(waiting_since, claimed_at),
            dequeue_ms: ms(dequeue),
            ..ExecutionTrace::default()
        }
    }

    pub fn with_http(mut self, t: Timing) -> ExecutionTrace {
        self.connect_ms = ms(t.connect);
        self.ttfb_ms = ms(t.ttfb);
        self.transfer_ms = ms(t.transfer);
        self.dispatch_ms = ms(t.ttfb + t.transfer);
        self
    }

    pub fn finished(mut self, created_at: DateTime<Utc>, now: DateTime<Utc>) -> ExecutionTrace {
        self.total_ms = ms_between(created_at, now);
        self
    }

    pub fn to_json(self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Never negative: the database's clock and this host's may disagree a little.
fn ms_between(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    (to - from).num_milliseconds().max(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn fields_add_up_and_serialize_as_integers() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let trace = ExecutionTrace::new(t0, t0 + chrono::Duration::milliseconds(250), Duration::from_micros(1500))
            .with_http(Timing {
                connect: Duration::from_millis(3),
                ttfb: Duration::from_millis(40),
                transfer: Duration::from_millis(2),
            })
            .finished(t0, t0 + chrono::Duration::milliseconds(300));
        assert_eq!(
            trace.to_json(),
            serde_json::json!({
                "queue_wait_ms": 250, "dequeue_ms": 1, "connect_ms": 3, "ttfb_ms": 40,
                "transfer_ms": 2, "dispatch_ms": 42, "total_ms": 300
            })
        );
        let skewed = ExecutionTrace::new(t0, t0 - chrono::Duration::milliseconds(5), Duration::ZERO);
        assert_eq!(skewed.queue_wait_ms, 0);
    }
}
