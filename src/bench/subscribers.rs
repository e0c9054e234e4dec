//! Live-stream subscribers during the measured phases (`--streams N`): N
//! clients following the bench project's stream (`GET /v1/stream`), each
//! reading every event, so the run path pays what watching costs (the
//! triggers' change rows and NOTIFYs, the api's reads). Without
//! `--streams`, the project is watched by nobody, as a project without a
//! dashboard open is; `--without-stream-triggers` drops the triggers
//! altogether, for the A side of what they cost when nobody watches. From
//! migration 0032 on, a run's own statements log its changes (no trigger
//! on `job_runs` is left to drop): their A side is a build before streams.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;

use super::client::Api;

/// The triggers of migration 0030 (the two on `job_runs` until 0032).
const TRIGGERS: [(&str, &str); 5] = [
    ("job_runs_stream_insert", "job_runs"),
    ("job_runs_stream_update", "job_runs"),
    ("workflow_runs_stream_insert", "workflow_runs"),
    ("workflow_runs_stream_update", "workflow_runs"),
    ("workflow_step_runs_stream_update", "workflow_step_runs"),
];

/// Drops the live streams' triggers in the bench database.
pub async fn drop_triggers(pool: &PgPool) -> anyhow::Result<()> {
    for (t, table) in TRIGGERS {
        sqlx::query(&format!("DROP TRIGGER IF EXISTS {t} ON {table}")).execute(pool).await.with_context(|| t)?;
    }
    Ok(())
}

/// Open streams and the events they have read.
pub struct Subscribers {
    events: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Subscribers {
    /// Opens `n` streams of `project` and waits until each has answered.
    pub async fn open(api: &Api, project: &str, n: usize) -> anyhow::Result<Subscribers> {
        let events = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::with_capacity(n);
        for _ in 0..n {
            let mut resp = api.stream(&format!("/v1/stream?project_id={project}")).await?;
            let events = Arc::clone(&events);
            tasks.push(tokio::spawn(async move {
                while let Ok(Some(chunk)) = resp.chunk().await {
                    let n = chunk.windows(7).filter(|w| w == b"event: ").count() as u64;
                    events.fetch_add(n, Ordering::Relaxed);
                }
            }));
        }
        // Every stream's watch is in before the load starts.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(Subscribers { events, tasks })
    }

    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }
}

impl Drop for Subscribers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
