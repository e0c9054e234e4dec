//! Timing shared by the loops: the wall clock they pass to Redis scripts,
//! sleeps that end at once on shutdown, the back-off after a failed step,
//! and the two loop drivers: [`batch_passes`] (a pass every interval) and
//! [`paced_passes`] (a pass when there may be work: at the earliest
//! deadline the last pass saw, or when an [`Alarm`] rings), and
//! [`listener`], the Postgres LISTEN connection of the loops woken by
//! NOTIFY.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use switchyard_shared::shutdown::Shutdown;
use tokio::time::Instant;

use crate::alarm::Alarm;

/// Milliseconds since the Unix epoch: the "now" every script takes in ARGV.
/// The single-step methods take it as an argument instead, so tests drive
/// time; only the loops read the clock.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A listener on the Postgres `channel` (its connection taken from
/// `pool`), made again with the error back-off until it listens; `None`
/// when shutdown fires first. `what` names the loop in the logs.
pub async fn listener(pool: &PgPool, channel: &str, what: &str, shutdown: &Shutdown) -> Option<PgListener> {
    let mut failures = 0u32;
    loop {
        let made = match PgListener::connect_with(pool).await {
            Ok(mut l) => l.listen(channel).await.map(|()| l),
            Err(e) => Err(e),
        };
        match made {
            Ok(l) => return Some(l),
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, "{what} listener could not listen");
                if !sleep(error_backoff(failures), shutdown).await {
                    return None;
                }
            }
        }
    }
}

/// Sleeps for `d` unless shutdown fires first. Returns false on shutdown.
pub async fn sleep(d: Duration, shutdown: &Shutdown) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// The pause after `failures` consecutive failed steps (from 1): 1 s
/// doubling to at most 10 s, so a loop neither hammers a Postgres or Redis
/// that is down nor takes long to notice it is back.
pub fn error_backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(4);
    Duration::from_secs(1u64 << exp).min(Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_then_caps() {
        let secs: Vec<u64> = (1..=7).map(|n| error_backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 10, 10, 10]);
        assert_eq!(error_backoff(0), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn sleep_ends_on_shutdown() {
        let s = Shutdown::new();
        s.cancel();
        let t = std::time::Instant::now();
        assert!(!sleep(Duration::from_secs(30), &s).await);
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(sleep(Duration::from_millis(1), &Shutdown::new()).await);
    }
}

/// Runs `pass` until shutdown: again at once when it reports a full batch
/// (more work is waiting), after `interval` otherwise, and after a growing
/// back-off, never shorter than `interval`, while it fails. A pass in
/// progress always finishes first.
pub async fn batch_passes<F, Fut, E>(what: &str, interval: Duration, shutdown: &Shutdown, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, E>>,
    E: std::fmt::Display,
{
    let mut failures = 0;
    loop {
        let pause = match pass().await {
            Ok(true) => {
                failures = 0;
                Duration::ZERO
            }
            Ok(false) => {
                failures = 0;
                interval
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, failures, "{what} failed");
                error_backoff(failures).max(interval)
            }
        };
        if shutdown.is_cancelled() || !sleep(pause, shutdown).await {
            return;
        }
    }
}

/// When a paced loop's next pass is due, as its last pass saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// A full batch: more work waits, pass again at once.
    Now,
    /// The earliest deadline of what the loop watches (may be past).
    At(DateTime<Utc>),
    /// Nothing to watch: only an alarm or the cap brings the next pass.
    Idle,
}

/// The pacing of a [`paced_passes`] loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    /// Least time from the start of one pass to the next (unless a full
    /// batch asks for another at once): bounds the passes a second however
    /// many deadlines or wake-ups come, as the fixed interval used to.
    pub min_gap: Duration,
    /// Longest sleep: the safety net for a lost wake-up, and for deadlines
    /// that appear without one.
    pub max_sleep: Duration,
}

impl Pacing {
    /// When to pass next, for a pass started at `started` (`now` being
    /// both clocks read after it) that saw `next`.
    fn wake_at(&self, next: Next, started: Instant, now: Instant, wall_now: DateTime<Utc>) -> Instant {
        let floor = started + self.min_gap;
        let cap = now + self.max_sleep;
        match next {
            Next::Now => now,
            Next::Idle => cap.max(floor),
            Next::At(t) => Self::instant_of(t, now, wall_now).clamp(floor, cap.max(floor)),
        }
    }

    /// The monotonic instant of wall-clock time `t` (now for a past `t`).
    fn instant_of(t: DateTime<Utc>, now: Instant, wall_now: DateTime<Utc>) -> Instant {
        match (t - wall_now).to_std() {
            Ok(d) => now.checked_add(d).unwrap_or(now + Duration::from_secs(86_400 * 365)),
            Err(_) => now,
        }
    }
}

/// Runs `pass` until shutdown, each time when there may be work: at the
/// deadline it reported (never sooner than `min_gap` after the previous
/// pass started, nor later than `max_sleep`), at once after a full batch,
/// and as soon as `alarm` asks (within the same bounds). The alarm is
/// cleared just before each pass: what it asked for, the pass sees. While
/// passes fail they are retried after a growing back-off that alarms do not
/// shorten. A pass in progress always finishes first.
pub async fn paced_passes<F, Fut, E>(what: &str, pacing: Pacing, alarm: &Alarm, shutdown: &Shutdown, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Next, E>>,
    E: std::fmt::Display,
{
    let mut failures = 0;
    loop {
        alarm.clear();
        let started = Instant::now();
        let (mut wake, floor) = match pass().await {
            Ok(next) => {
                failures = 0;
                let wake = pacing.wake_at(next, started, Instant::now(), Utc::now());
                (wake, started + pacing.min_gap)
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, failures, "{what} failed");
                let wake = Instant::now() + error_backoff(failures).max(pacing.min_gap);
                (wake, wake)
            }
        };
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(wake) => break,
                at = alarm.raised() => {
                    let now = Instant::now();
                    let asked = at.map_or(now, |t| Pacing::instant_of(t, now, Utc::now()));
                    wake = wake.min(asked.max(floor));
                }
            }
        }
    }
}

#[cfg(test)]
mod paced_tests {
    use super::*;

    #[test]
    fn deadlines_are_kept_within_the_gap_and_the_cap() {
        let p = Pacing { min_gap: Duration::from_secs(1), max_sleep: Duration::from_secs(30) };
        let started = Instant::now();
        let now = started + Duration::from_millis(100);
        let wall = Utc::now();
        let at = |ms: i64| Next::At(wall + chrono::Duration::milliseconds(ms));
        assert_eq!(p.wake_at(Next::Now, started, now, wall), now, "a full batch: again at once");
        assert_eq!(p.wake_at(Next::Idle, started, now, wall), now + Duration::from_secs(30));
        assert_eq!(p.wake_at(at(5_000), started, now, wall), now + Duration::from_secs(5));
        assert_eq!(p.wake_at(at(200), started, now, wall), started + Duration::from_secs(1), "not before the gap");
        assert_eq!(p.wake_at(at(-5_000), started, now, wall), started + Duration::from_secs(1), "past: after the gap");
        assert_eq!(p.wake_at(at(3_600_000), started, now, wall), now + Duration::from_secs(30), "capped");
    }

    #[tokio::test(start_paused = true)]
    async fn an_alarm_brings_the_next_pass_forward() {
        let p = Pacing { min_gap: Duration::from_millis(500), max_sleep: Duration::from_secs(30) };
        let alarm = std::sync::Arc::new(Alarm::default());
        let shutdown = Shutdown::new();
        let passes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let t0 = Instant::now();
        let task = tokio::spawn({
            let (alarm, shutdown, passes) = (alarm.clone(), shutdown.clone(), passes.clone());
            async move {
                paced_passes("test pass", p, &alarm, &shutdown, || {
                    passes.lock().unwrap().push(t0.elapsed());
                    async { Ok::<_, std::convert::Infallible>(Next::Idle) }
                })
                .await
            }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        alarm.raise(None);
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Asked for 2 s from now: the pass comes then, not at once.
        alarm.raise(Some(Utc::now() + chrono::Duration::seconds(2)));
        tokio::time::sleep(Duration::from_secs(10)).await;
        shutdown.cancel();
        task.await.unwrap();
        // Tokio's clock is paused but the wall clock the timed alarm is
        // given in is not: the real time spent between raising it and the
        // loop reading it lands the pass a little before 8 s (a slow box
        // made it 7.998). Round to the nearest second.
        let secs: Vec<u64> = passes.lock().unwrap().iter().map(|d| (d.as_millis() as u64 + 500) / 1000).collect();
        assert_eq!(secs, [0, 5, 8], "start, the alarm, the timed alarm; no polling");
    }
}
