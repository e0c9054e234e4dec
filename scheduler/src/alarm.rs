//! A loop's alarm: how a sleeping loop is told to look sooner.
//!
//! The wake-up listener ([`crate::wake`]) raises it with the time a message
//! asks for (or "now"); the loop's pacing ([`crate::pace::paced_passes`])
//! waits on it while it sleeps, and clears it just before each pass, since a
//! pass sees everything committed before it started and so everything whose
//! wake-up arrived by then. What arrives during a pass stays raised for the
//! sleep after it.

use std::sync::Mutex;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct Alarm {
    /// The earliest time asked since the last clear, in ms since the epoch
    /// (`i64::MIN`: now).
    earliest: Mutex<Option<i64>>,
    notify: Notify,
}

impl Alarm {
    /// Asks the loop to look at `at` (`None`: now).
    pub fn raise(&self, at: Option<DateTime<Utc>>) {
        self.raise_ms(at.map(|t| t.timestamp_millis()));
    }

    pub(crate) fn raise_ms(&self, at_ms: Option<i64>) {
        let at = at_ms.unwrap_or(i64::MIN);
        {
            let mut e = self.lock();
            *e = Some(e.map_or(at, |x| x.min(at)));
        }
        self.notify.notify_one();
    }

    /// Forgets what was asked so far (a pass is about to look).
    pub(crate) fn clear(&self) {
        *self.lock() = None;
    }

    /// Waits until the alarm is raised and takes the earliest time asked:
    /// `None` for now. Cancel-safe: a raise is consumed only by the call
    /// that returns it.
    pub(crate) async fn raised(&self) -> Option<DateTime<Utc>> {
        loop {
            if let Some(at) = self.lock().take() {
                return (at != i64::MIN).then(|| DateTime::<Utc>::from_timestamp_millis(at)).flatten();
            }
            // A raise between the check and here leaves a permit: no miss.
            self.notify.notified().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<i64>> {
        self.earliest.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_earliest_time_wins_and_clear_forgets() {
        let a = Alarm::default();
        let t = |ms| DateTime::<Utc>::from_timestamp_millis(ms);
        a.raise(t(2_000));
        a.raise(t(1_000));
        a.raise(t(3_000));
        assert_eq!(a.raised().await, t(1_000));
        a.raise(t(5_000));
        a.raise(None);
        assert_eq!(a.raised().await, None, "now beats any time");
        a.raise(t(1));
        a.clear();
        let waited = tokio::time::timeout(Duration::from_millis(50), a.raised()).await;
        assert!(waited.is_err(), "a cleared alarm is not raised");
    }
}
