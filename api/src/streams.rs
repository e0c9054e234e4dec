//! The live streams' plumbing in one api process: which projects it watches,
//! and the changes Postgres announces (see `store::streams` for how they are
//! recorded).
//!
//! - A stream holds a [`Watch`] on its project while it is open. Every
//!   [`RENEW_EVERY`] the process renews its watched projects for
//!   [`WATCH_SECS`], so a project stays watched (its changes logged) for
//!   that long after its last stream closed: a client that reconnects
//!   within it resumes without a gap.
//! - One `LISTEN switchyard_changes` connection per process, opened with
//!   the first stream, turns each NOTIFY into a [`Hint`] on a broadcast
//!   channel. Hints only say "look again": every stream reads what it sends
//!   from Postgres, from its own position, so a hint lost (a full channel, a
//!   dropped connection: then [`Hint::Resync`]) delays an event, never
//!   loses it. Streams also look again every [`RECHECK`] on their own.
//! - A slow client is never buffered for: each stream reads the next events
//!   only when the previous ones were taken (a channel of [`BUFFER`]
//!   events between the reader and the response), and a hint it missed
//!   while blocked is covered by its next read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use switchyard_shared::db;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::streams as store;
use tokio::sync::{broadcast, OnceCell};

/// How long a project stays watched after it was last renewed.
pub const WATCH_SECS: i64 = 120;
/// How often a process renews the watches of its open streams.
pub const RENEW_EVERY: Duration = Duration::from_secs(15);
/// How long the change log keeps a change: the limit of a resume.
pub const KEEP_SECS: i64 = 600;
/// How often a stream looks again without a hint.
pub const RECHECK: Duration = Duration::from_secs(5);
/// Events waiting for a slow client, per stream.
pub const BUFFER: usize = 32;
/// The interval of the keep-alive comment on an idle stream.
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// Streams one api process serves at once; past it, a new one is refused
/// (503) rather than let clients hold the process's tasks and reads
/// without bound.
pub const MAX_STREAMS: usize = 2_000;

/// A change announced by Postgres.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hint {
    Change {
        project: Arc<str>,
        kind: Arc<str>,
        id: Arc<str>,
        workflow_run_id: Option<Arc<str>>,
    },
    /// Announcements may have been missed: every stream looks again.
    Resync,
}

impl Hint {
    /// `<project> <kind> <id> <workflow_run_id or ->`, as the triggers send it.
    pub fn decode(payload: &str) -> Option<Hint> {
        let mut p = payload.split(' ');
        let (project, kind, id, wfr) = (p.next()?, p.next()?, p.next()?, p.next()?);
        Some(Hint::Change {
            project: project.into(),
            kind: kind.into(),
            id: id.into(),
            workflow_run_id: (wfr != "-").then(|| wfr.into()),
        })
    }

    /// Whether a stream of `project` (and, when given, of the run or
    /// workflow run `id`) should look again.
    pub fn concerns(&self, project: &str, id: Option<&str>) -> bool {
        match self {
            Hint::Resync => true,
            Hint::Change { project: p, id: changed, workflow_run_id, .. } => {
                &**p == project && id.is_none_or(|id| &**changed == id || workflow_run_id.as_deref() == Some(id))
            }
        }
    }
}

/// The streams' shared state of one api process.
pub struct Hub {
    pool: PgPool,
    database_url: String,
    hints: broadcast::Sender<Hint>,
    watched: Mutex<HashMap<String, usize>>,
    open: AtomicUsize,
    started: OnceCell<()>,
    shutdown: Shutdown,
}

impl Hub {
    pub fn new(pool: PgPool, database_url: String) -> Hub {
        Hub {
            pool,
            database_url,
            hints: broadcast::channel(4096).0,
            watched: Mutex::default(),
            open: AtomicUsize::new(0),
            started: OnceCell::new(),
            shutdown: Shutdown::new(),
        }
    }

    /// Fires when the server shuts down: streams end so the grace period
    /// is not spent waiting for them.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    pub fn hints(&self) -> broadcast::Receiver<Hint> {
        self.hints.subscribe()
    }

    /// Watches `project` (its changes are logged and announced) until the
    /// returned guard drops, starting the listener with the first stream.
    /// Returns once the watch is recorded, so every change committed after
    /// it is in the change log.
    /// `None` when the process already serves [`MAX_STREAMS`].
    pub async fn watch(self: &Arc<Self>, project: &str) -> Result<Option<Watch>, sqlx::Error> {
        if self.open.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return Ok(None);
        }
        self.start().await;
        *self.watched.lock().unwrap_or_else(|p| p.into_inner()).entry(project.to_string()).or_default() += 1;
        let guard = Watch { hub: Arc::clone(self), project: project.to_string() };
        // Recorded by every stream that opens (not only the project's
        // first): a stream must not start reading before its watch is in.
        store::watch(&self.pool, &[project.to_string()], WATCH_SECS).await?;
        Ok(Some(guard))
    }

    fn unwatch(&self, project: &str) {
        self.open.fetch_sub(1, Ordering::SeqCst);
        let mut w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = w.get_mut(project) {
            *n -= 1;
            if *n == 0 {
                w.remove(project);
            }
        }
    }

    fn watched_projects(&self) -> Vec<String> {
        self.watched.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
    }

    async fn start(self: &Arc<Self>) {
        self.started
            .get_or_init(|| async {
                tokio::spawn(listen(Arc::clone(self)));
                tokio::spawn(renew(Arc::clone(self)));
            })
            .await;
    }
}

/// A stream's hold on its project's watch.
pub struct Watch {
    hub: Arc<Hub>,
    project: String,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.hub.unwatch(&self.project);
    }
}

/// Renews the watches of open streams, and prunes the change log.
async fn renew(hub: Arc<Hub>) {
    let mut tick = tokio::time::interval(RENEW_EVERY);
    let mut prunes = 0u32;
    loop {
        tokio::select! {
            _ = hub.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let projects = hub.watched_projects();
        if let Err(e) = store::watch(&hub.pool, &projects, WATCH_SECS).await {
            tracing::warn!(error = %e, "could not renew the watches of live streams");
        }
        // Every api process prunes; the deletes are idempotent.
        prunes += 1;
        if prunes.is_multiple_of(4) {
            if let Err(e) = store::prune(&hub.pool, KEEP_SECS).await {
                tracing::warn!(error = %e, "could not prune the live streams' change log");
            }
        }
    }
}

/// Turns NOTIFYs into hints until shutdown, reconnecting after a failure.
async fn listen(hub: Arc<Hub>) {
    let mut failures = 0u32;
    loop {
        let connected = async {
            let pool = db::lazy_pool(&hub.database_url, 1).map_err(|e| sqlx::Error::Configuration(e.into()))?;
            let mut l = PgListener::connect_with(&pool).await?;
            l.listen(store::CHANNEL).await?;
            Ok::<_, sqlx::Error>(l)
        };
        let mut listener = tokio::select! {
            _ = hub.shutdown.cancelled() => return,
            r = connected => match r {
                Ok(l) => l,
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, failures, "cannot listen for changes; streams fall back to looking every {RECHECK:?}");
                    let backoff = Duration::from_millis(250 * u64::from(failures.min(20)));
                    tokio::select! {
                        _ = hub.shutdown.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => continue,
                    }
                }
            },
        };
        failures = 0;
        // Whatever happened while not listening is looked at now.
        let _ = hub.hints.send(Hint::Resync);
        loop {
            let next = tokio::select! {
                _ = hub.shutdown.cancelled() => return,
                n = listener.try_recv() => n,
            };
            match next {
                Ok(Some(n)) => match Hint::decode(n.payload()) {
                    Some(h) => {
                        let _ = hub.hints.send(h);
                    }
                    None => tracing::debug!(payload = n.payload(), "ignored an unknown change announcement"),
                },
                // The connection dropped; the listener reconnects on the
                // next call and what was announced meanwhile is lost.
                Ok(None) => {
                    let _ = hub.hints.send(Hint::Resync);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "lost the change listener; listening again");
                    break;
                }
            }
        }
    }
}

/// Waits until a hint concerns this stream, [`RECHECK`] passes, the client
/// is gone (`closed`) or the server shuts down. `false`: stop.
pub async fn next_look(
    hints: &mut broadcast::Receiver<Hint>,
    project: &str,
    id: Option<&str>,
    closed: impl std::future::Future<Output = ()>,
    shutdown: &Shutdown,
) -> bool {
    tokio::pin!(closed);
    let recheck = tokio::time::sleep(RECHECK);
    tokio::pin!(recheck);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = &mut closed => return false,
            _ = &mut recheck => return true,
            h = hints.recv() => match h {
                Ok(h) if h.concerns(project, id) => {
                    // A burst of hints (one transaction's many rows) is one look.
                    while hints.try_recv().is_ok() {}
                    return true;
                }
                Ok(_) => {}
                // Missed some: one of them may have been ours.
                Err(broadcast::error::RecvError::Lagged(_)) => return true,
                Err(broadcast::error::RecvError::Closed) => return false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_decode() {
        let h = Hint::decode("acme step wsr_1 wfr_9").unwrap();
        assert!(h.concerns("acme", Some("wfr_9")));
        assert!(h.concerns("acme", Some("wsr_1")));
        assert!(h.concerns("acme", None));
        assert!(!h.concerns("acme", Some("run_2")));
        assert!(!h.concerns("other", None));
        let r = Hint::decode("acme run run_2 -").unwrap();
        assert!(r.concerns("acme", Some("run_2")));
        assert!(!r.concerns("acme", Some("wfr_9")));
        assert_eq!(Hint::decode("acme run"), None);
        assert!(Hint::Resync.concerns("any", Some("x")));
    }
}
