//! The wake-up listener: one Redis pub/sub connection per scheduler process,
//! subscribed to the queue's `wake` channel, ringing the alarm of the loop
//! each message names (see `switchyard_shared::queue::wake` for who
//! publishes what).
//!
//! Pub/sub delivers only to connected subscribers, so whenever the listener
//! (re)subscribes it rings every alarm: what was published while it was not
//! listening is looked at then. A connection that drops is made again after
//! a back-off; meanwhile the loops' cap (`max_sleep`) bounds how late they
//! notice new work.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use switchyard_shared::queue::{WakeLoop, WakeUp};
use switchyard_shared::shutdown::Shutdown;

use crate::alarm::Alarm;
use crate::pace;

/// The alarms the listener rings, one per loop that sleeps until woken.
#[derive(Clone, Debug, Default)]
pub struct Alarms {
    pub expirer: Arc<Alarm>,
    pub heartbeats: Arc<Alarm>,
    pub dependencies: Arc<Alarm>,
    pub cron: Arc<Alarm>,
    pub batches: Arc<Alarm>,
}

impl Alarms {
    pub fn of(&self, l: WakeLoop) -> &Alarm {
        match l {
            WakeLoop::Expirer => &self.expirer,
            WakeLoop::Heartbeats => &self.heartbeats,
            WakeLoop::Dependencies => &self.dependencies,
            WakeLoop::Cron => &self.cron,
            WakeLoop::Batches => &self.batches,
        }
    }

    /// Rings the alarm a message names; ignores one this build does not know.
    pub fn ring(&self, payload: &str) {
        match WakeUp::decode(payload) {
            Some(m) => self.of(m.to).raise_ms(m.at_ms),
            None => tracing::debug!(payload, "ignored an unknown wake-up message"),
        }
    }

    fn ring_all(&self) {
        for l in WakeLoop::ALL {
            self.of(l).raise(None);
        }
    }
}

/// Listens on `channel` until shutdown, ringing `alarms`.
pub async fn listen(client: redis::Client, channel: String, alarms: Alarms, shutdown: Shutdown) {
    let mut failures = 0;
    loop {
        let subscribed = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let subscribed = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = tokio::time::timeout(Duration::from_secs(5), subscribed) => r,
        };
        match subscribed {
            Ok(Ok(pubsub)) => {
                if failures > 0 {
                    tracing::info!(channel, "listening for scheduler wake-ups again");
                }
                alarms.ring_all();
                let mut messages = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        m = messages.next() => match m {
                            Some(m) => match m.get_payload::<String>() {
                                Ok(p) => alarms.ring(&p),
                                Err(e) => tracing::debug!(error = %e, "unreadable wake-up message"),
                            },
                            None => break,
                        },
                    }
                }
                tracing::warn!(channel, "lost the wake-up subscription; subscribing again");
                // A fresh failure count: the connection worked until now.
                failures = 1;
            }
            Ok(Err(e)) => {
                failures += 1;
                tracing::warn!(error = %e, failures, "cannot subscribe to scheduler wake-ups; loops fall back to their cap");
            }
            Err(_) => {
                failures += 1;
                tracing::warn!(failures, "subscribing to scheduler wake-ups timed out; loops fall back to their cap");
            }
        }
        if !pace::sleep(pace::error_backoff(failures), &shutdown).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_ring_the_named_alarm() {
        let a = Alarms::default();
        a.ring("expirer 1700000000000");
        a.ring("cron");
        a.ring("somebody-else's-loop 5");
        assert_eq!(a.expirer.raised().await.map(|t| t.timestamp_millis()), Some(1_700_000_000_000));
        assert_eq!(a.cron.raised().await, None);
        let quiet = tokio::time::timeout(Duration::from_millis(20), a.heartbeats.raised()).await;
        assert!(quiet.is_err());
    }
}
