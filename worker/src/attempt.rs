//! The life of one dequeued entry: read the run, load its job, dispatch,
//! decide, record, ack. A terminal outcome of a job with a `webhook_url` is
//! recorded with its terminal webhook in the notification outbox, by the
//! same statement; the scheduler's delivery sender
//! (`scheduler/src/deliveries.rs`) sends it and retries it, not the worker.
//!
//! Nothing is written to Postgres before the request leaves: the run is
//! taken in memory (next attempt, next dispatch token) and its `running`
//! transition is recorded with the outcome, or after [`MARK_RUNNING_AFTER`]
//! for a long attempt. A crash before either leaves the run `queued` with a
//! lease that lapses: a redelivery of the same attempt, never a lost run.
//!
//! ```text
//! entry ─► read ─ none ─► ack (cancelled, finished or taken meanwhile)
//!            │
//!            ▼
//!       job spec ─ missing ─► failed (job_missing)
//!            │
//!            ▼
//!   POST endpoint ─► verdict ─► retry policy ─► finish_attempt ─► ack (+ retry due)
//!                        │                           │
//!                        └ 202 async: ack only       └ terminal + webhook_url ─► outbox row
//! ```

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chrono::Utc;
use serde_json::{json, Value};
use switchyard_shared::domain::{JobSpec, RetryPolicy, RetryStrategy};
use switchyard_shared::outbound::signing;
use switchyard_shared::queue::{Entry, WakeLoop};
use switchyard_shared::run_token::RunClaims;
use switchyard_shared::store::{self, Outcome, Run};
use switchyard_shared::telemetry::{self, DISPATCH_DURATION};
use switchyard_shared::traces::{self, Place, SpanId, TRACEPARENT};
use tokio::sync::OwnedSemaphorePermit;

use crate::dispatch::{self, DispatchRequest, Timing};
use crate::leases::ActiveGuard;
use crate::outcome::{self, Decision, ErrorClass, Verdict};
use crate::record::{self, with_db_retry};
use crate::spans;
use crate::trace::ExecutionTrace;
use crate::worker::Inner;

/// How long an attempt may be in flight before `running` is written for it
/// (until then the run reads `queued`; see `store::runs::load_for_dispatch`).
pub const MARK_RUNNING_AFTER: Duration = Duration::from_millis(500);

/// Runs one entry to the end. `key` is its slot in the in-flight registry,
/// released here on normal completion; an aborted or panicked dispatch
/// leaves the slot for the caller, which hands the entry back.
pub(crate) async fn run(
    w: Arc<Inner>,
    entry: Entry,
    key: u64,
    dequeue: Duration,
    permit: Option<OwnedSemaphorePermit>,
) {
    let _active = ActiveGuard::start();
    handle(&w, &entry, key, dequeue).await;
    w.inflight.remove(key);
    drop(permit);
}

async fn handle(w: &Inner, entry: &Entry, key: u64, dequeue: Duration) {
    let loaded = with_db_retry("loading a run", || async {
        w.loader.submit(entry.run_id.clone()).await.map_err(|e| e.into_sqlx())
    })
    .await;
    let loaded = match loaded {
        Ok(Some(l)) => l,
        Ok(None) => {
            record::ack_grouped(w, entry, None).await;
            return;
        }
        Err(e) => {
            tracing::error!(run_id = %entry.run_id, error = %e, "loading the run failed; leaving the lease to lapse");
            return;
        }
    };
    if loaded.expired {
        match store::runs::expire_unstarted(&w.pool, std::slice::from_ref(&entry.run_id)).await {
            Ok(_) => record::ack_grouped(w, entry, None).await,
            Err(e) => {
                tracing::warn!(run_id = %entry.run_id, error = %e, "could not expire the run; its lease will lapse")
            }
        }
        return;
    }
    // A retry waits from when it fell due again (`next_retry_at`, which the
    // dispatch clears); a delayed run was not waiting before its time.
    let due_at = loaded.run.next_retry_at;
    let claimed_at = Utc::now();
    let run = loaded.run.taken_for_dispatch(claimed_at);
    w.inflight.set_token(key, run.dispatch_token);
    // A run that can expire is marked running before it is sent, as the
    // expirer takes any queued run past its expires_at that never started.
    if run.expires_at.is_some() {
        let marked = with_db_retry("marking a run running", || submit_mark(w, &run)).await;
        match marked {
            Ok(true) => {}
            Ok(false) => {
                // Expired, cancelled or taken meanwhile.
                record::ack_grouped(w, entry, None).await;
                return;
            }
            Err(e) => {
                tracing::error!(run_id = %run.id, error = %e, "marking the run failed; leaving the lease to lapse");
                return;
            }
        }
    }
    // Counted here, once nothing but a shutdown stops the attempt (a job
    // gone missing still ends as an attempt), whichever statement records
    // it: the outcome, the lazy mark, an SDK call or a 202.
    telemetry::transition(run.job_id.as_str(), Some("queued"), "running");

    let waiting_since = due_at.or(run.scheduled_at.filter(|s| *s > run.created_at)).unwrap_or(run.created_at);
    let trace = ExecutionTrace::new(waiting_since, claimed_at, dequeue);
    let place = run.trace();

    let current = loaded.current_version_id.as_deref();
    let spec = match with_db_retry("loading a job", || w.specs.for_run(&w.pool, &run, current)).await {
        Ok(Some(spec)) => Ok(spec),
        Ok(None) => Err(format!("job {} (version {}) no longer exists", run.job_id, run.job_version_id)),
        Err(e) => Err(format!("job {} (version {}) could not be read: {e}", run.job_id, run.job_version_id)),
    };
    let extras = Extras {
        checkpoint: loaded.checkpoint.as_ref(),
        secrets: &loaded.secrets,
        webhook_secret: loaded.webhook_secret.as_deref(),
    };

    let (attempted, policy) = match &spec {
        Err(why) => (Attempted::without_call(Verdict::permanent(ErrorClass::JobMissing, why.clone())), no_retry()),
        Ok(spec) => match call_target(w, &run, &place, spec, &extras).await {
            Some(a) => (a, policy_for(spec, &run)),
            None => {
                let held =
                    crate::leases::Held { entry: entry.clone(), epoch: String::new(), token: Some(run.dispatch_token) };
                record::hand_back(&w.pool, &w.queue, &held).await;
                return;
            }
        },
    };

    let now = Utc::now();
    let rec = match outcome::decide(attempted.verdict, run.attempt.max(1) as u32, &policy, now, rand::random::<f64>()) {
        Decision::StaysRunning => {
            // Async mode: the target took the run and finishes it over the
            // SDK (complete/fail), which records the outcome then. The lease
            // is released now, and with it the concurrency slot: from here
            // heartbeats, not the lease, keep the run alive (the scheduler's
            // heartbeat sweep times it out when they stop).
            let trace = trace.with_http(attempted.timing).finished(run.created_at, now).to_json();
            let marked = with_db_retry("recording an async acceptance", || {
                store::settle::mark_async_accepted(&w.pool, &run.id, run.dispatch_token, &trace)
            })
            .await;
            match &marked {
                // The heartbeat sweep sleeps until the first deadline it
                // knows of: this run's may be sooner.
                Ok(true) => w.queue.wake(WakeLoop::Heartbeats, None),
                Ok(false) => {
                    tracing::info!(run_id = %run.id, "async acceptance not recorded: the run moved on meanwhile")
                }
                Err(e) => tracing::error!(run_id = %run.id, error = %e, "could not record the async acceptance"),
            }
            if matches!(marked, Ok(true)) || still_ours(w, &run).await {
                record::ack_grouped(w, entry, None).await;
            }
            return;
        }
        Decision::Record(rec) => rec,
    };
    let trace = trace.with_http(attempted.timing).finished(run.created_at, now);
    let outcome = Outcome {
        status: rec.status,
        result: rec.result,
        error: rec.error,
        error_class: rec.error_class.map(|c| c.as_str().to_string()),
        status_code: attempted.status_code.map(i32::from),
        endpoint_url: attempted.endpoint_url,
        next_retry_at: rec.next_retry_at,
        attempt_started_at: claimed_at,
        trace: trace.to_json(),
        webhook_url: spec.as_ref().ok().and_then(|s| s.webhook_url.clone()).filter(|u| !u.is_empty()),
        job_id: run.job_id.clone(),
        project_id: run.project_id.clone(),
        attempt: run.attempt,
        workflow_step_run_id: run.workflow_step_run_id.clone(),
    };
    let recording = SystemTime::now();
    let recorded = record::finish_attempt(&w.finisher, &run.id, run.dispatch_token, &outcome).await;
    if recorded && place.recorded() {
        spans::attempt(
            &run,
            &place,
            &spans::Attempt {
                waiting_since,
                claimed_at,
                dequeue,
                sent: attempted.sent,
                span_id: attempted.span_id,
                timing: attempted.timing,
                outcome: &outcome,
                recording,
            },
        );
    }
    let dispatch_secs = (attempted.timing.ttfb + attempted.timing.transfer).as_secs_f64();
    metrics::histogram!(DISPATCH_DURATION, "job_id" => run.job_id.to_string(), "outcome" => outcome.status.as_str())
        .record(dispatch_secs);
    let retry_due = outcome.next_retry_at.filter(|_| recorded).map(|t| t.timestamp_millis());
    if recorded || still_ours(w, &run).await {
        if !recorded {
            tracing::info!(run_id = %run.id, "outcome not recorded: the run was cancelled meanwhile");
        }
        record::ack_grouped(w, entry, retry_due).await;
    } else {
        // Our lease lapsed and another worker claimed the run: the lease on
        // this entry is now theirs, and releasing it would free their
        // concurrency slot while they still dispatch.
        tracing::warn!(run_id = %run.id, "outcome not recorded: the run was handed to another worker");
    }
    tracing::debug!(
        run_id = %run.id, attempt = run.attempt, status = outcome.status.as_str(),
        error_class = outcome.error_class.as_deref().unwrap_or(""), recorded, "attempt finished"
    );
}

/// What the target's side of an attempt came to.
struct Attempted {
    verdict: Verdict,
    endpoint_url: String,
    status_code: Option<u16>,
    timing: Timing,
    /// When the request left (or the attempt was given up without one).
    sent: SystemTime,
    /// The dispatch's span, named in the request's `traceparent` (when
    /// the run's trace is recorded).
    span_id: Option<SpanId>,
}

impl Attempted {
    fn without_call(verdict: Verdict) -> Attempted {
        Attempted {
            verdict,
            endpoint_url: String::new(),
            status_code: None,
            timing: Timing::default(),
            sent: SystemTime::now(),
            span_id: None,
        }
    }
}

/// What the dispatch read brought besides the run.
struct Extras<'a> {
    checkpoint: Option<&'a Value>,
    secrets: &'a [store::secrets::StoredSecret],
    /// The job's webhook_secret as stored (see `Loaded::webhook_secret`).
    webhook_secret: Option<&'a str>,
}

/// POSTs the run to its job's endpoint. `None` only when the run token
/// cannot be signed (the attempt cannot be made at all).
async fn call_target(w: &Inner, run: &Run, place: &Place, spec: &JobSpec, extras: &Extras<'_>) -> Option<Attempted> {
    let timeout = timeout_for(spec, run);
    let token = match w.signer.sign(&RunClaims::for_attempt(run, timeout, Utc::now())) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(run_id = %run.id, error = %e, "cannot sign the run token; handing the run back");
            return None;
        }
    };
    let secrets = match open_secrets(w, &run.job_id, extras.secrets) {
        Ok(s) => s,
        Err(why) => return Some(Attempted::without_call(Verdict::permanent(ErrorClass::SecretsUnavailable, why))),
    };
    // Under the rule of job secrets: a key this worker cannot open fails
    // the run rather than send it unsigned.
    let signing = match open_webhook_secret(w, &run.job_id, extras.webhook_secret) {
        Ok(s) => s,
        Err(why) => return Some(Attempted::without_call(Verdict::permanent(ErrorClass::SecretsUnavailable, why))),
    };
    let body = request_body(run, extras.checkpoint, secrets.as_ref());
    let span_id = place.recorded().then(traces::new_span_id);
    let mut headers = request_headers(run, signing.as_deref(), token, &body);
    headers.push((TRACEPARENT, place.outgoing(span_id)));
    let req = DispatchRequest {
        endpoint_url: &spec.endpoint_url,
        fallback_url: spec.fallback_endpoint_url.as_deref().filter(|u| !u.is_empty()),
        headers: &headers,
        body: &body,
        timeout,
        mode: run.execution_mode.parse().unwrap_or_default(),
    };
    // Rate limits are promised at the target, so each window counts the
    // moment requests leave, not when they were dequeued (lua/README.md).
    // If Redis misses this, the admission's provisional place stands in.
    if spec.rate_limit_max > 0 || !spec.rate_limit_keys.is_empty() {
        if let Err(e) = w.queue.record_dispatch(&run.entry(), crate::now_ms()).await {
            tracing::warn!(run_id = %run.id, error = %e, "could not log the dispatch in its rate limit buckets");
        }
    }
    let sent = SystemTime::now();
    let send = dispatch::send(&w.http, &req);
    tokio::pin!(send);
    let d = tokio::select! {
        d = &mut send => d,
        _ = tokio::time::sleep(MARK_RUNNING_AFTER) => tokio::join!(send, mark_running(w, run)).0,
    };
    Some(Attempted {
        verdict: d.verdict,
        endpoint_url: d.endpoint_url,
        status_code: d.status_code,
        timing: d.timing,
        sent,
        span_id,
    })
}

/// Records `running` for an attempt still in flight after
/// [`MARK_RUNNING_AFTER`] (group-committed with other dispatches' marks).
/// Quick attempts never pay for it: their outcome records both transitions.
async fn mark_running(w: &Inner, run: &Run) {
    match submit_mark(w, run).await {
        Ok(true) => {}
        Ok(false) => tracing::debug!(run_id = %run.id, "not marked running: the run moved on meanwhile"),
        Err(e) => tracing::warn!(run_id = %run.id, error = %e, "could not mark the run running; its outcome will"),
    }
}

/// `queued -> running` for the attempt `run` holds, through the marker's
/// group commit. False when the run moved on (expired, cancelled, taken).
async fn submit_mark(w: &Inner, run: &Run) -> Result<bool, sqlx::Error> {
    let started = run.started_at.unwrap_or_else(Utc::now);
    w.marker.submit((run.id.clone(), run.dispatch_token, started)).await.map_err(|e| e.into_sqlx())
}

/// The job's secrets in plaintext, `None` when it has none. An error (no
/// key, or one that does not open them) is the run's failure message.
fn open_secrets(
    w: &Inner,
    job_id: &str,
    stored: &[store::secrets::StoredSecret],
) -> Result<Option<serde_json::Map<String, Value>>, String> {
    if stored.is_empty() {
        return Ok(None);
    }
    let Some(key) = &w.secrets else {
        return Err("the job has secrets but this worker has no SECRETS_KEY to decrypt them".into());
    };
    let mut out = serde_json::Map::new();
    for s in stored {
        match key.decrypt(job_id, &s.name, &s.nonce, &s.ciphertext) {
            Ok(v) => {
                out.insert(s.name.clone(), Value::String(v));
            }
            Err(e) => return Err(format!("job secret {:?}: {e}", s.name)),
        }
    }
    Ok(Some(out))
}

/// The job's webhook_secret in plaintext, `None` when it has none.
fn open_webhook_secret(w: &Inner, job_id: &str, stored: Option<&str>) -> Result<Option<String>, String> {
    let Some(stored) = stored.filter(|s| !s.is_empty()) else { return Ok(None) };
    switchyard_shared::secrets::open_stored(
        w.secrets.as_ref(),
        job_id,
        switchyard_shared::secrets::JOB_WEBHOOK_SECRET,
        stored,
    )
    .map(Some)
    .map_err(|e| format!("the job's webhook_secret: {e}"))
}

/// The run's own timeout when it sets one, else the job's.
pub fn timeout_for(spec: &JobSpec, run: &Run) -> Duration {
    store::settle::attempt_timeout(spec, run)
}

/// The job's retry policy with the run's overrides applied (the same rule
/// the SDK's `fail` and the heartbeat sweep use).
pub fn policy_for(spec: &JobSpec, run: &Run) -> RetryPolicy {
    store::settle::retry_policy(spec, run)
}

fn no_retry() -> RetryPolicy {
    RetryPolicy {
        strategy: RetryStrategy::None,
        max_attempts: 1,
        initial_delay: Duration::ZERO,
        max_delay: Duration::ZERO,
        custom_delays_secs: vec![],
    }
}

/// The dispatch body (docs/contract.md, "Dispatch protocol"): `checkpoint`
/// is the data of the run's latest checkpoint (saved by any earlier attempt)
/// or null; `secrets`, {name: value}, only when the job has secrets.
pub fn request_body(
    run: &Run,
    checkpoint: Option<&Value>,
    secrets: Option<&serde_json::Map<String, Value>>,
) -> Vec<u8> {
    let mut body = json!({
        "run_id": run.id,
        "job_id": run.job_id,
        "project_id": run.project_id,
        "attempt": run.attempt,
        "payload": run.payload.as_ref().map(|p| p.0.clone()).unwrap_or(Value::Null),
        "metadata": run.metadata.0,
        "checkpoint": checkpoint.cloned().unwrap_or(Value::Null),
    });
    if let (Some(s), Some(b)) = (secrets, body.as_object_mut()) {
        b.insert("secrets".into(), Value::Object(s.clone()));
    }
    body.to_string().into_bytes()
}

/// The dispatch's headers; signed when the job has a webhook secret
/// (`webhook_secret`, already opened: the stored one is sealed).
pub fn request_headers(
    run: &Run,
    webhook_secret: Option<&str>,
    token: String,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("X-Svc-Run-Id", run.id.to_string()),
        ("X-Svc-Attempt", run.attempt.to_string()),
        // Stable across redeliveries of one attempt, new for each retry.
        ("Idempotency-Key", format!("{}:{}", run.id, run.attempt)),
        ("X-Svc-Run-Token", token),
    ];
    if let Some(secret) = webhook_secret.filter(|s| !s.is_empty()) {
        h.extend(signing::headers(secret, Utc::now().timestamp(), body));
    }
    h
}

/// Whether no other worker has taken the run since this one did: its
/// dispatch token is this attempt's, or still the one before it (nobody
/// recorded a later attempt). When Postgres cannot tell, the answer is yes:
/// a wrong ack frees one slot early, a missing one holds a slot until the
/// lease expires, and the first heals faster.
async fn still_ours(w: &Inner, run: &Run) -> bool {
    match switchyard_shared::store::runs::dispatch_token(&w.pool, &run.id).await {
        Ok(Some(token)) => token == run.dispatch_token || token == run.dispatch_token - 1,
        Ok(None) => true,
        Err(_) => true,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sqlx::types::Json;
    use switchyard_shared::domain::RunStatus;

    pub(crate) fn sample_run() -> Run {
        let now = Utc::now();
        Run {
            id: "run_1".into(),
            project_id: "prj_1".into(),
            job_id: "job_1".into(),
            job_version: 1,
            job_version_id: "jobv_1".into(),
            status: RunStatus::Running,
            attempt: 2,
            priority: 0,
            triggered_by: "api".into(),
            created_by: None,
            payload: Some(Json(json!({"n": 1}))),
            result: None,
            error: None,
            error_class: None,
            idempotency_key: None,
            concurrency_key: None,
            batch_id: None,
            parent_run_id: None,
            continuation_of: None,
            workflow_step_run_id: None,
            lineage_depth: 0,
            machine_id: None,
            debug_mode: false,
            execution_mode: "sync".into(),
            retry_backoff: None,
            max_attempts_override: None,
            retry_initial_delay_secs: None,
            retry_max_delay_secs: None,
            timeout_secs_override: None,
            metadata: Json(json!({"team": "a"})),
            tags: Json(json!({})),
            scheduled_at: None,
            expires_at: None,
            started_at: Some(now),
            finished_at: None,
            heartbeat_at: None,
            next_retry_at: None,
            execution_trace: None,
            dispatch_token: 7,
            resource_class: None,
            progress: None,
            progress_message: None,
            async_accepted_at: None,
            awaiting_dependencies: false,
            created_at: now,
            updated_at: now,
            traceparent: None,
        }
    }

    #[test]
    fn run_overrides_win_over_the_job() {
        let spec = JobSpec::with_endpoint("http://x");
        let mut run = sample_run();
        assert_eq!(policy_for(&spec, &run), spec.retry_policy());
        assert_eq!(timeout_for(&spec, &run), Duration::from_secs(30));
        run.max_attempts_override = Some(7);
        run.retry_backoff = Some("linear".into());
        run.retry_initial_delay_secs = Some(3);
        run.retry_max_delay_secs = Some(9);
        run.timeout_secs_override = Some(5);
        let p = policy_for(&spec, &run);
        assert_eq!((p.max_attempts, p.strategy), (7, RetryStrategy::Linear));
        assert_eq!((p.initial_delay, p.max_delay), (Duration::from_secs(3), Duration::from_secs(9)));
        assert_eq!(timeout_for(&spec, &run), Duration::from_secs(5));
    }

    #[test]
    fn body_and_headers_follow_the_protocol() {
        let run = sample_run();
        let body = request_body(&run, None, None);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"run_id": "run_1", "job_id": "job_1", "project_id": "prj_1", "attempt": 2,
                   "payload": {"n": 1}, "metadata": {"team": "a"}, "checkpoint": null})
        );
        let mut secrets = serde_json::Map::new();
        secrets.insert("API_TOKEN".into(), json!("t0k"));
        let with = request_body(&run, Some(&json!({"step": 3})), Some(&secrets));
        let v: Value = serde_json::from_slice(&with).unwrap();
        assert_eq!(v["checkpoint"], json!({"step": 3}));
        assert_eq!(v["secrets"], json!({"API_TOKEN": "t0k"}));
        let names = |h: &[(&'static str, String)]| h.iter().map(|(n, _)| *n).collect::<Vec<_>>();
        let h = request_headers(&run, None, "tok".into(), &body);
        assert_eq!(names(&h), ["X-Svc-Run-Id", "X-Svc-Attempt", "Idempotency-Key", "X-Svc-Run-Token"]);
        assert_eq!(h[2].1, "run_1:2");
        let h = request_headers(&run, Some("s3cret"), "tok".into(), &body);
        let ts: i64 = h[4].1.parse().unwrap();
        assert_eq!(h[4].0, "X-Svc-Timestamp");
        assert_eq!(h[5], ("X-Svc-Signature", signing::signature("s3cret", ts, &body)));
    }
}
