//! Wake-ups for the scheduler's sleeping loops.
//!
//! The scheduler's expirer, heartbeat sweep, dependency resolver and cron
//! enqueuer do not poll: each sleeps until the earliest moment it could have
//! work, capped by a safety net (30 s by default). Whatever makes work that
//! may be due sooner says so on the `wake` pub/sub channel ([`Keys::wake`]):
//! a run with an `expires_at`, an async run accepted (its heartbeat clock
//! starts), a run waiting for its dependencies, a job whose cron schedule may
//! have changed. A message is `<loop>` (look now) or `<loop> <ms>` (look at
//! that time, in ms since the epoch).
//!
//! Publishing is fire-and-forget and throttled per loop and per queue handle
//! (one per process): at most one message per [`WAKE_WINDOW`]. A wake asked
//! inside the window is folded into a single message sent when the window
//! ends, carrying the earliest time asked, so every wake is followed by a
//! message no later than the window (after the caller's commit), and a hot
//! path that makes such work at any rate costs at most ten messages a second
//! per loop. A message lost with Redis delays the work by at most the
//! scheduler's cap.
//!
//! [`Keys::wake`]: super::Keys::wake

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::{Queue, QueueError};

/// Shortest time between two messages of one loop from one queue handle.
pub const WAKE_WINDOW: Duration = Duration::from_millis(100);

/// The scheduler loops that sleep until woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WakeLoop {
    /// Runs that expire unstarted (`expires_at`).
    Expirer,
    /// Accepted async runs whose heartbeats may stop.
    Heartbeats,
    /// Runs waiting for their `depends_on` runs.
    Dependencies,
    /// Jobs with a `cron` schedule.
    Cron,
    /// Open trigger batches, which close at their time.
    Batches,
}

impl WakeLoop {
    pub const ALL: [WakeLoop; 5] =
        [WakeLoop::Expirer, WakeLoop::Heartbeats, WakeLoop::Dependencies, WakeLoop::Cron, WakeLoop::Batches];

    pub fn as_str(self) -> &'static str {
        match self {
            WakeLoop::Expirer => "expirer",
            WakeLoop::Heartbeats => "heartbeats",
            WakeLoop::Dependencies => "dependencies",
            WakeLoop::Cron => "cron",
            WakeLoop::Batches => "batches",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One message on the wake channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WakeUp {
    pub to: WakeLoop,
    /// When the loop should look, in ms since the epoch; `None`: now.
    pub at_ms: Option<i64>,
}

impl WakeUp {
    pub fn encode(&self) -> String {
        match self.at_ms {
            Some(ms) => format!("{} {ms}", self.to.as_str()),
            None => self.to.as_str().to_string(),
        }
    }

    /// `None` for a message this build does not understand (a newer
    /// publisher's loop, say): it is ignored.
    pub fn decode(s: &str) -> Option<WakeUp> {
        let mut parts = s.split(' ');
        let name = parts.next()?;
        let to = WakeLoop::ALL.into_iter().find(|l| l.as_str() == name)?;
        let at_ms = match parts.next() {
            Some(ms) => Some(ms.parse().ok()?),
            None => None,
        };
        parts.next().is_none().then_some(WakeUp { to, at_ms })
    }
}

/// The per-loop throttle of one queue handle. `i64::MIN` in `pending` stands
/// for "now", the earliest of all times.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    slots: [Mutex<Slot>; 5],
}

#[derive(Debug, Default)]
struct Slot {
    last_sent: Option<Instant>,
    pending: Option<i64>,
    armed: bool,
}

impl Throttle {
    fn slot(&self, to: WakeLoop) -> std::sync::MutexGuard<'_, Slot> {
        self.slots[to.index()].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a wake for `at_ms` (`None`: now). Returns how long to wait
    /// before sending when the caller must arrange a send, `None` when one
    /// is already arranged and will carry this wake too.
    fn ask(&self, to: WakeLoop, at_ms: Option<i64>, now: Instant) -> Option<Duration> {
        let mut s = self.slot(to);
        let at = at_ms.unwrap_or(i64::MIN);
        s.pending = Some(s.pending.map_or(at, |p| p.min(at)));
        if s.armed {
            return None;
        }
        s.armed = true;
        Some(s.last_sent.map_or(Duration::ZERO, |t| (t + WAKE_WINDOW).saturating_duration_since(now)))
    }

    /// Takes what is to be sent now: the message of the folded wakes.
    fn take(&self, to: WakeLoop, now: Instant) -> Option<WakeUp> {
        let mut s = self.slot(to);
        s.armed = false;
        s.last_sent = Some(now);
        let at = s.pending.take()?;
        Some(WakeUp { to, at_ms: (at != i64::MIN).then_some(at) })
    }
}

impl Queue {
    /// Tells the scheduler's `to` loop to look at `at` (`None`: now), in the
    /// background and throttled (see the module doc). Call it after the
    /// commit that made the work. Outside a Tokio runtime it does nothing.
    pub fn wake(&self, to: WakeLoop, at: Option<DateTime<Utc>>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let Some(delay) = self.wakes.ask(to, at.map(|t| t.timestamp_millis()), Instant::now()) else { return };
        let queue = self.clone();
        let wakes = Arc::clone(&self.wakes);
        rt.spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let Some(msg) = wakes.take(to, Instant::now()) else { return };
            if let Err(e) = queue.publish_wake(msg).await {
                // The scheduler's cap bounds the delay this costs.
                tracing::debug!(error = %e, wake = %msg.encode(), "could not publish a scheduler wake-up");
            }
        });
    }

    /// Publishes one wake-up at once, unthrottled. Returns how many
    /// subscribers (scheduler processes) received it: on a cluster, those of
    /// the node that took it (the message itself reaches every node).
    pub async fn publish_wake(&self, msg: WakeUp) -> Result<usize, QueueError> {
        let mut c = self.conn().await?;
        let n: i64 = redis::cmd("PUBLISH").arg(&self.keys().wake).arg(msg.encode()).query_async(&mut c).await?;
        Ok(n.max(0) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        for to in WakeLoop::ALL {
            for at_ms in [None, Some(1_700_000_000_123)] {
                let m = WakeUp { to, at_ms };
                assert_eq!(WakeUp::decode(&m.encode()), Some(m));
            }
        }
        assert_eq!(WakeUp { to: WakeLoop::Expirer, at_ms: Some(5) }.encode(), "expirer 5");
        for bad in ["", "reaper", "expirer x", "cron 1 2", "expirer "] {
            assert_eq!(WakeUp::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn wakes_inside_a_window_fold_into_one_message_with_the_earliest_time() {
        let t = Throttle::default();
        let t0 = Instant::now();
        // The first wake is sent at once.
        assert_eq!(t.ask(WakeLoop::Expirer, Some(500), t0), Some(Duration::ZERO));
        assert_eq!(t.ask(WakeLoop::Expirer, Some(400), t0), None, "already arranged");
        assert_eq!(t.take(WakeLoop::Expirer, t0), Some(WakeUp { to: WakeLoop::Expirer, at_ms: Some(400) }));
        // Within the window: one trailing send at its end, with the earliest time.
        let t1 = t0 + Duration::from_millis(30);
        assert_eq!(t.ask(WakeLoop::Expirer, Some(900), t1), Some(Duration::from_millis(70)));
        assert_eq!(t.ask(WakeLoop::Expirer, Some(700), t1), None);
        assert_eq!(t.ask(WakeLoop::Expirer, Some(800), t1), None);
        let t2 = t0 + WAKE_WINDOW;
        assert_eq!(t.take(WakeLoop::Expirer, t2), Some(WakeUp { to: WakeLoop::Expirer, at_ms: Some(700) }));
        // "Now" beats any time.
        let t3 = t2 + WAKE_WINDOW;
        assert_eq!(t.ask(WakeLoop::Heartbeats, Some(1), t3), Some(Duration::ZERO), "loops are throttled apart");
        assert_eq!(t.ask(WakeLoop::Heartbeats, None, t3), None);
        assert_eq!(t.take(WakeLoop::Heartbeats, t3), Some(WakeUp { to: WakeLoop::Heartbeats, at_ms: None }));
        assert_eq!(t.ask(WakeLoop::Expirer, None, t3), Some(Duration::ZERO), "the window has passed");
    }
}
