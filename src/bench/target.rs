//! The HTTP target the benchmark's job points at: answers every POST with
//! 200 `{"ok":true}` and records, per request, the run id, the attempt and
//! the instant it arrived; a workflow step's request (its body's metadata
//! names `workflow_run_id` and `step_ref`) is also recorded with the wall
//! clock, to be set against timestamps Postgres wrote. It runs on its own
//! thread with a single-threaded runtime, so its CPU time can be read apart
//! from the load generator's. Requests under `/notify/` are notifications
//! (phase n), not dispatches: see [`Notice`].

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use chrono::{DateTime, Utc};
use poem::listener::TcpAcceptor;
use poem::web::Data;
use poem::{handler, post, Body, EndpointExt, Request, Response, Route, Server};
use serde::Deserialize;

/// One request the target received.
#[derive(Clone, Debug)]
pub struct Hit {
    pub run_id: String,
    pub attempt: i64,
    pub at: Instant,
}

/// One request of a workflow step.
#[derive(Clone, Debug)]
pub struct StepHit {
    pub workflow_run_id: String,
    pub step_ref: String,
    /// The wall clock at arrival: Postgres' clock on this machine.
    pub wall: DateTime<Utc>,
}

/// Which notification a request under `/notify/` was, by its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoticeKind {
    /// `/notify/run`: a job's terminal webhook (`run_id` at the top of the body).
    JobWebhook,
    /// `/notify/sub`: a subscription's event (`data.run_id`).
    Subscription,
}

/// One notification the target received.
#[derive(Clone, Debug)]
pub struct Notice {
    pub kind: NoticeKind,
    pub run_id: String,
    /// The `X-Svc-Delivery-Id` header: the same on a redelivery.
    pub delivery_id: String,
    /// The wall clock at arrival, to set against the run's `finished_at`.
    pub wall: DateTime<Utc>,
}

#[derive(Default)]
struct Hits {
    count: AtomicUsize,
    list: Mutex<Vec<Hit>>,
    steps: Mutex<Vec<StepHit>>,
    /// Requests whose body named no run.
    unreadable: AtomicUsize,
    notices: Mutex<Vec<Notice>>,
    notice_count: AtomicUsize,
}

pub struct Target {
    pub url: String,
    hits: Arc<Hits>,
    tid: Option<u32>,
}

#[derive(Deserialize)]
struct Dispatch {
    run_id: String,
    #[serde(default)]
    attempt: i64,
    #[serde(default)]
    metadata: Option<Metadata>,
}

/// The part of a run's metadata that a workflow's engine sets.
#[derive(Deserialize)]
struct Metadata {
    workflow_run_id: Option<String>,
    step_ref: Option<String>,
}

/// A notification: recorded with its delivery id and the wall clock.
async fn notice(kind: NoticeKind, req: &Request, body: Body, hits: &Hits) {
    let wall = Utc::now();
    let delivery_id = req.header("x-svc-delivery-id").unwrap_or_default().to_string();
    let v: Option<serde_json::Value> = body.into_bytes().await.ok().and_then(|b| serde_json::from_slice(&b).ok());
    let run_id = v.as_ref().and_then(|v| match kind {
        NoticeKind::JobWebhook => v.get("run_id"),
        NoticeKind::Subscription => v.get("data").and_then(|d| d.get("run_id")),
    });
    match run_id.and_then(|r| r.as_str()) {
        Some(run_id) => {
            let n = Notice { kind, run_id: run_id.to_string(), delivery_id, wall };
            hits.notices.lock().expect("hits lock").push(n);
            hits.notice_count.fetch_add(1, Ordering::Relaxed);
        }
        None => {
            hits.unreadable.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[handler]
async fn hook(req: &Request, body: Body, hits: Data<&Arc<Hits>>) -> Response {
    let at = Instant::now();
    let kind = match req.uri().path() {
        "/notify/run" => Some(NoticeKind::JobWebhook),
        "/notify/sub" => Some(NoticeKind::Subscription),
        _ => None,
    };
    if let Some(kind) = kind {
        notice(kind, req, body, &hits).await;
        return Response::builder().content_type("application/json").body(r#"{"ok":true}"#);
    }
    match body.into_bytes().await.ok().and_then(|b| serde_json::from_slice::<Dispatch>(&b).ok()) {
        Some(d) => {
            if let Some(Metadata { workflow_run_id: Some(workflow_run_id), step_ref: Some(step_ref) }) = d.metadata {
                let step = StepHit { workflow_run_id, step_ref, wall: Utc::now() };
                hits.steps.lock().expect("hits lock").push(step);
            }
            hits.list.lock().expect("hits lock").push(Hit { run_id: d.run_id, attempt: d.attempt, at });
            hits.count.fetch_add(1, Ordering::Relaxed);
        }
        None => {
            hits.unreadable.fetch_add(1, Ordering::Relaxed);
        }
    }
    Response::builder().content_type("application/json").body(r#"{"ok":true}"#)
}

impl Target {
    pub fn start() -> anyhow::Result<Target> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the target")?;
        listener.set_nonblocking(true)?;
        let addr: SocketAddr = listener.local_addr()?;
        let hits = Arc::new(Hits::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let served = hits.clone();
        std::thread::Builder::new().name("bench-target".into()).spawn(move || {
            let _ = tx.send(super::cpu::current_tid());
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return eprintln!("bench: target runtime: {e}"),
            };
            rt.block_on(async move {
                let app = Route::new().at("/*path", post(hook)).data(served);
                match TcpAcceptor::from_std(listener) {
                    Ok(acceptor) => {
                        if let Err(e) = Server::new_with_acceptor(acceptor).run(app).await {
                            eprintln!("bench: target stopped: {e}");
                        }
                    }
                    Err(e) => eprintln!("bench: target listener: {e}"),
                }
            });
        })?;
        let tid = rx.recv().context("target thread did not start")?;
        Ok(Target { url: format!("http://{addr}/hook"), hits, tid })
    }

    /// Where a notification of `kind` is to be sent.
    pub fn notify_url(&self, kind: NoticeKind) -> String {
        let base = self.url.trim_end_matches("/hook");
        match kind {
            NoticeKind::JobWebhook => format!("{base}/notify/run"),
            NoticeKind::Subscription => format!("{base}/notify/sub"),
        }
    }

    /// Notifications received so far (with a readable run id).
    pub fn notice_count(&self) -> usize {
        self.hits.notice_count.load(Ordering::Relaxed)
    }

    /// Every notification received so far.
    pub fn notices(&self) -> Vec<Notice> {
        self.hits.notices.lock().expect("hits lock").clone()
    }

    /// Requests received so far (with a readable run id).
    pub fn count(&self) -> usize {
        self.hits.count.load(Ordering::Relaxed)
    }

    pub fn unreadable(&self) -> usize {
        self.hits.unreadable.load(Ordering::Relaxed)
    }

    /// The hits of the given runs, grouped by run id.
    pub fn hits_of(&self, runs: &HashSet<&str>) -> HashMap<String, Vec<Hit>> {
        let mut out: HashMap<String, Vec<Hit>> = HashMap::new();
        for h in self.hits.list.lock().expect("hits lock").iter() {
            if runs.contains(h.run_id.as_str()) {
                out.entry(h.run_id.clone()).or_default().push(h.clone());
            }
        }
        out
    }

    /// The step requests of the given workflow runs, grouped by workflow run.
    pub fn step_hits_of(&self, workflow_runs: &HashSet<&str>) -> HashMap<String, Vec<StepHit>> {
        let mut out: HashMap<String, Vec<StepHit>> = HashMap::new();
        for h in self.hits.steps.lock().expect("hits lock").iter() {
            if workflow_runs.contains(h.workflow_run_id.as_str()) {
                out.entry(h.workflow_run_id.clone()).or_default().push(h.clone());
            }
        }
        out
    }

    /// CPU seconds of the target's thread.
    pub fn cpu_secs(&self) -> Option<f64> {
        self.tid.and_then(super::cpu::thread_secs)
    }
}
