//! Following a run or a workflow run through its live stream
//! (`GET /v1/runs/{id}/stream`, `GET /v1/workflow-runs/{id}/stream`): what
//! `--wait` and the `watch` commands use instead of polling.
//!
//! A stream that breaks off before its `end` event is opened again with
//! `Last-Event-ID`, so no change is missed; `--timeout` bounds the whole
//! wait (exit 6).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use switchyard_shared::sse::{Event, Parser};

use super::client::{exit, Client};
use super::Failure;

/// Follows the stream at `path` until its `end` event, handing every
/// other event to `each`; returns the last state the stream showed (the
/// `state` member of its last event that had one).
pub async fn follow(
    client: &Client,
    path: &str,
    state: &str,
    timeout: Duration,
    mut each: impl FnMut(&Event),
) -> Result<Value, Failure> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_id: Option<String> = None;
    let mut last_state = Value::Null;
    let mut breaks = 0u32;
    loop {
        let attempt = async {
            let mut resp = client.open_stream(path, last_id.as_deref()).await?;
            let mut parser = Parser::default();
            loop {
                let chunk = match resp.chunk().await {
                    Ok(Some(c)) => c,
                    // Closed or broken before `end`: open it again.
                    Ok(None) | Err(_) => return Ok::<bool, Failure>(false),
                };
                for e in parser.push(&String::from_utf8_lossy(&chunk)) {
                    if !e.id.is_empty() {
                        last_id = Some(e.id.clone());
                    }
                    if e.event == "end" {
                        return Ok(true);
                    }
                    if !e.data[state].is_null() {
                        last_state = e.data[state].clone();
                    }
                    each(&e);
                }
            }
        };
        match tokio::time::timeout_at(deadline, attempt).await {
            Ok(Ok(true)) => return Ok(last_state),
            Ok(Ok(false)) => {
                breaks += 1;
                tokio::time::sleep(Duration::from_millis(200 * u64::from(breaks.min(10)))).await;
            }
            Ok(Err(f)) => return Err(f),
            Err(_) => {
                let status = last_state["status"].as_str().unwrap_or("not ended");
                return Err(Failure::new(
                    exit::WAIT_TIMEOUT,
                    format!("{path}: still {status} after {}s (--timeout)", timeout.as_secs()),
                ));
            }
        }
    }
}

/// How often `--wait` says it is still waiting when nothing changed.
const STILL_WAITING: Duration = Duration::from_secs(15);

/// What `--wait` shows on stderr (stdout keeps the final answer alone): a
/// line at once, so the wait is never silent; a line per change of
/// status; and while nothing changes, a line every 15 s with the time
/// waited. Plain lines, so a CI log reads the same as a terminal.
pub struct Progress {
    what: String,
    started: tokio::time::Instant,
    status: Arc<Mutex<String>>,
    ticker: tokio::task::JoinHandle<()>,
}

impl Progress {
    /// Says that `what` (e.g. `run run_...`) is waited on, in `status`
    /// when known.
    pub fn start(what: String, status: Option<&str>, timeout: Duration) -> Progress {
        let now = status.map_or(String::new(), |s| format!("  {s}"));
        eprintln!("{what}{now}: waiting for it to end (--timeout {}s)", timeout.as_secs());
        let started = tokio::time::Instant::now();
        let shared = Arc::new(Mutex::new(status.unwrap_or("not ended").to_string()));
        let (label, current) = (what.clone(), shared.clone());
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(started + STILL_WAITING, STILL_WAITING);
            loop {
                tick.tick().await;
                let now = current.lock().map(|s| s.clone()).unwrap_or_default();
                eprintln!("{label}  still {now} after {}s", started.elapsed().as_secs());
            }
        });
        Progress { what, started, status: shared, ticker }
    }

    /// Prints the new status when it changed.
    pub fn status(&self, status: &str) {
        if self.note(status) {
            eprintln!("{}  {status}  ({}s)", self.what, self.started.elapsed().as_secs());
        }
    }

    /// Records the status without printing it (when the caller prints its
    /// own lines); whether it changed.
    pub fn note(&self, status: &str) -> bool {
        let Ok(mut cur) = self.status.lock() else { return false };
        if *cur == status {
            return false;
        }
        *cur = status.to_string();
        true
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.ticker.abort();
    }
}

/// `runs watch` and `workflows runs watch`: follows the stream at `path`
/// to its end, printing each event (its JSON with `json`, else the line
/// `describe` makes of it); exit 0 only if it ended completed.
pub async fn watch(
    client: &Client,
    path: &str,
    state: &str,
    timeout: Duration,
    json: bool,
    describe: fn(&Event) -> Option<String>,
) -> Result<u8, Failure> {
    let done = follow(client, path, state, timeout, |e| {
        if json {
            super::output::json(&e.data);
        } else if let Some(line) = describe(e) {
            println!("{line}");
        }
    })
    .await?;
    Ok(if done["status"] == "completed" { exit::OK } else { exit::OUTCOME })
}

/// One line for a person about an event of a run's stream.
pub fn describe_run_event(e: &Event) -> Option<String> {
    let d = &e.data;
    match e.event.as_str() {
        "run" => {
            let r = &d["run"];
            Some(format!("run      {}  attempt {}  trace {}", text(&r["status"]), r["attempt"], text(&r["trace_id"])))
        }
        "history" => {
            let h = &d["entry"];
            let at = text(&h["at"]);
            if h["type"] == "attempt" {
                let err = h["error"].as_str().map_or(String::new(), |e| format!(": {e}"));
                Some(format!("{at}  attempt {} {}{err}", h["attempt"], history_text(h)))
            } else {
                Some(format!("{at}  {}", history_text(h)))
            }
        }
        _ => None,
    }
}

/// What an entry of a run's history says, without its time, attempt
/// number or error: `from -> to (reason)` for a change of status,
/// `ended OUTCOME HTTP N in M ms` for an attempt.
pub fn history_text(h: &Value) -> String {
    if h["type"] == "attempt" {
        let code = h["status_code"].as_i64().map_or(String::new(), |c| format!(" HTTP {c}"));
        let ms = h["duration_ms"].as_i64().map_or(String::new(), |m| format!(" in {m} ms"));
        return format!("ended {}{code}{ms}", text(&h["outcome"]));
    }
    let from = h["from_status"].as_str().unwrap_or("(new)");
    let why = h["reason"].as_str().map_or(String::new(), |r| format!(" ({r})"));
    format!("{from} -> {}{why}", text(&h["to_status"]))
}

/// One line for a person about an event of a workflow run's stream.
pub fn describe_workflow_event(e: &Event) -> Option<String> {
    let d = &e.data;
    match e.event.as_str() {
        "workflow_run" => Some(format!("workflow run  {}", text(&d["workflow_run"]["status"]))),
        "step" => {
            let s = &d["step"];
            let err = s["error"].as_str().map_or(String::new(), |e| format!(": {e}"));
            Some(format!("step {:<16} {}  attempt {}{err}", text(&s["step_ref"]), text(&s["status"]), s["attempt"]))
        }
        _ => None,
    }
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}
