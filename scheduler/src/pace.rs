//! Timing shared by the loops: the wall clock they pass to Redis scripts,
//! sleeps that end at once on shutdown, and the back-off after a failed step.

use std::time::Duration;

use switchyard_shared::shutdown::Shutdown;

/// Milliseconds since the Unix epoch: the "now" every script takes in ARGV.
/// The single-step methods take it as an argument instead, so tests drive
/// time; only the loops read the clock.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
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
