//! Runs dispatched for real: a worker and a scheduler against a local target.

use std::time::Duration;

use chrono::Utc;
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use crate::harness::TestEnv;
use crate::support::access::eventually;
use crate::target::{refused_url, Reply, Target};

const T: Duration = Duration::from_secs(15);

#[tokio::test]
async fn run_goes_queued_running_completed_with_the_dispatch_protocol() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::json(200, r#"{"sent": true}"#)]);
    let job = env.job(&target.url, json!({})).await;
    let run =
        env.trigger(job["id"].as_str().unwrap(), json!({"payload": {"to": "a@b.c"}, "metadata": {"m": "1"}})).await;
    let rid = run["id"].as_str().unwrap();
    assert_eq!(run["status"], "queued");
    env.spawn_worker();
    let done = env.wait_status(rid, "completed", T).await;
    assert_eq!(done["result"], json!({"sent": true}));
    assert_eq!(done["attempt"], 1);
    assert!(done["started_at"].is_string() && done["finished_at"].is_string());
    let trace = &done["execution_trace"];
    for k in ["connect_ms", "dequeue_ms", "dispatch_ms", "queue_wait_ms", "total_ms", "transfer_ms", "ttfb_ms"] {
        assert!(trace[k].is_i64(), "trace.{k}: {trace}");
    }
    assert!(trace["total_ms"].as_i64() >= trace["dispatch_ms"].as_i64());

    let req = &target.requests()[0];
    assert_eq!(req.body["run_id"], rid);
    assert_eq!(req.body["job_id"], job["id"]);
    assert_eq!(req.body["project_id"], job["project_id"]);
    assert_eq!(req.body["attempt"], 1);
    assert_eq!(req.body["payload"], json!({"to": "a@b.c"}));
    assert_eq!(req.body["metadata"], json!({"m": "1"}));
    assert!(req.body.get("checkpoint").is_some());
    assert_eq!(req.header("x-svc-run-id"), Some(rid));
    assert_eq!(req.header("x-svc-attempt"), Some("1"));
    assert_eq!(req.header("idempotency-key"), Some(format!("{rid}:1").as_str()));
    let token = req.header("x-svc-run-token").expect("run token");
    let claims = jsonwebtoken::decode::<serde_json::Value>(
        token,
        &jsonwebtoken::DecodingKey::from_secret(b"test-jwt-signing-key-0123456789abcdef"),
        &jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256),
    )
    .expect("a valid HS256 run token");
    assert_eq!(claims.claims["sub"], rid);
    assert!(req.header("x-svc-signature").is_none(), "unsigned without a secret");

    // The durable record: transitions and the attempt.
    assert_eq!(env.transition_path(rid).await, ["queued", "running", "completed"]);
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM job_run_attempts WHERE run_id = $1")
        .bind(rid)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 1);
    // The lease is released after the outcome commits (the worker acks
    // then), so the completed status can be read before it is gone.
    let released = || async { env.redis_keys().await.iter().all(|k| !k.ends_with(":leases")).then_some(()) };
    eventually(T, released).await;
}

#[tokio::test]
async fn dispatch_and_webhook_are_signed() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let hook = format!("{}-done", target.url);
    let job = env.job(&target.url, json!({"webhook_secret": "whsec-test", "webhook_url": hook})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({"payload": {"x": 1}})).await;
    env.spawn_worker();
    // The scheduler's delivery sender sends the terminal webhook.
    env.spawn_scheduler();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;
    let reqs = target.wait_count(2, T).await;
    for req in &reqs {
        let ts = req.header("x-svc-timestamp").expect("timestamp");
        let sig = req.header("x-svc-signature").expect("signature");
        let mut mac = Hmac::<Sha256>::new_from_slice(b"whsec-test").unwrap();
        mac.update(format!("{ts}.{}", req.raw).as_bytes());
        assert_eq!(sig, format!("sha256={}", hex::encode(mac.finalize().into_bytes())), "{}", req.path);
        assert!((Utc::now().timestamp() - ts.parse::<i64>().unwrap()).abs() < 60);
    }
    let webhook = reqs.iter().find(|r| r.path.ends_with("-done")).expect("terminal webhook");
    assert_eq!(webhook.body["status"], "completed");
    assert_eq!(webhook.body["run_id"], run["id"]);
    assert_eq!(webhook.body["attempt"], 1);
    assert!(webhook.body["timestamp"].is_string());
    assert_eq!(webhook.header("x-webhook-signature"), webhook.header("x-svc-signature"));
    assert!(
        webhook.header("x-svc-delivery-id").is_some_and(|id| id.starts_with("whd_")),
        "{:?}",
        webhook.header("x-svc-delivery-id")
    );
}

#[tokio::test]
async fn server_error_then_success_retries_through_the_scheduler() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::status(500), Reply::status(503)]);
    let job = env
        .job(&target.url, json!({"retry_strategy": "fixed", "retry_initial_delay_secs": 1, "max_attempts": 3}))
        .await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let rid = run["id"].as_str().unwrap();
    env.spawn_worker();
    let retrying = env.wait_status(rid, "retrying", T).await;
    assert!(retrying["next_retry_at"].is_string());
    assert_eq!(retrying["error_class"], "http_5xx");
    env.spawn_scheduler();
    let done = env.wait_status(rid, "completed", T).await;
    assert_eq!(done["attempt"], 3);
    let keys: Vec<_> = target.requests().iter().map(|r| r.header("idempotency-key").unwrap().to_string()).collect();
    assert_eq!(keys, [format!("{rid}:1"), format!("{rid}:2"), format!("{rid}:3")]);
    let outcomes: Vec<(i32, String)> =
        sqlx::query_as("SELECT attempt, outcome FROM job_run_attempts WHERE run_id = $1 ORDER BY attempt")
            .bind(rid)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(outcomes, [(1, "retrying".into()), (2, "retrying".into()), (3, "completed".into())]);
}

#[tokio::test]
async fn client_error_fails_without_retry() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::json(422, r#"{"error":"bad address"}"#));
    let job = env.job(&target.url, json!({"max_attempts": 5, "retry_initial_delay_secs": 0})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let failed = env.wait_status(run["id"].as_str().unwrap(), "failed", T).await;
    assert_eq!(failed["attempt"], 1);
    assert_eq!(failed["error_class"], "http_4xx");
    assert!(failed["error"].as_str().unwrap().contains("422"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(target.count(), 1, "no retry after a 4xx");
}

#[tokio::test]
async fn slow_target_times_out() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::slow(Duration::from_secs(4)));
    let job = env.job(&target.url, json!({"timeout_secs": 1, "max_attempts": 1})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    env.spawn_worker();
    let out = env.wait_status(run["id"].as_str().unwrap(), "timed_out", T).await;
    assert_eq!(out["error_class"], "timeout");
}

#[tokio::test]
async fn refused_connection_uses_the_fallback_then_retries() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let dead = refused_url().await;
    let job = env.job(&dead, json!({"fallback_endpoint_url": target.url})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    env.spawn_worker();
    let done = env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;
    assert_eq!(done["attempt"], 1, "the fallback is tried within the same attempt");
    assert_eq!(target.count(), 1);

    let job =
        env.job(&dead, json!({"max_attempts": 2, "retry_strategy": "fixed", "retry_initial_delay_secs": 0})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    env.spawn_scheduler();
    let failed = env.wait_status(run["id"].as_str().unwrap(), "failed", T).await;
    assert_eq!((failed["attempt"].as_i64(), failed["error_class"].as_str()), (Some(2), Some("connection")));
}

#[tokio::test]
async fn priority_first_then_age() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/", json!({})).await;
    let id = job["id"].as_str().unwrap();
    let low_old = env.trigger(id, json!({})).await;
    let low_new = env.trigger(id, json!({})).await;
    let high = env.trigger(id, json!({"priority": 10})).await;
    let q = env.new_queue();
    let now = Utc::now().timestamp_millis();
    let order: Vec<String> = {
        let mut v = vec![];
        for _ in 0..3 {
            v.extend(
                q.dequeue(1, Duration::from_secs(30), now).await.unwrap().into_iter().map(|e| e.run_id.into_string()),
            );
        }
        v
    };
    assert_eq!(order, [&high["id"], &low_old["id"], &low_new["id"]].map(|v| v.as_str().unwrap().to_string()));
}

#[tokio::test]
async fn concurrency_cap_and_pause_hold_runs_in_redis() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (_, g) = env.post("/v1/job-groups", json!({"project_id": project, "name": "g", "slug": "g"})).await;
    let job = env.job_in(&project, "http://127.0.0.1:9/", json!({"max_concurrency": 1, "group_id": g["id"]})).await;
    let id = job["id"].as_str().unwrap();
    env.trigger(id, json!({})).await;
    env.trigger(id, json!({})).await;
    let q = env.new_queue();
    let now = Utc::now().timestamp_millis();
    let first = q.dequeue(10, Duration::from_secs(30), now).await.unwrap();
    assert_eq!(first.len(), 1, "max_concurrency 1 admits one");
    assert!(q.dequeue(10, Duration::from_secs(30), now).await.unwrap().is_empty());
    q.ack(&first[0], None).await.unwrap();
    let second = q.dequeue(10, Duration::from_secs(30), now).await.unwrap();
    assert_eq!(second.len(), 1, "the released slot admits the parked run");
    q.ack(&second[0], None).await.unwrap();

    env.post(&format!("/v1/job-groups/{}/pause-all", g["id"].as_str().unwrap()), json!({})).await;
    env.trigger(id, json!({})).await;
    assert!(q.dequeue(10, Duration::from_secs(30), now).await.unwrap().is_empty(), "paused");
    env.post(&format!("/v1/job-groups/{}/resume-all", g["id"].as_str().unwrap()), json!({})).await;
    assert_eq!(q.dequeue(10, Duration::from_secs(30), now).await.unwrap().len(), 1, "resumed");
}

#[tokio::test]
async fn two_workers_never_exceed_max_concurrency_at_the_target() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::slow(Duration::from_millis(150)));
    let job = env.job(&target.url, json!({"max_concurrency": 3})).await;
    let mut runs = vec![];
    for _ in 0..15 {
        runs.push(env.trigger(job["id"].as_str().unwrap(), json!({})).await["id"].as_str().unwrap().to_string());
    }
    env.spawn_worker();
    env.spawn_worker();
    for rid in &runs {
        env.wait_status(rid, "completed", T).await;
    }
    assert_eq!(target.count(), 15);
    assert_eq!(target.max_in_flight(), 3, "the cap is reached and never exceeded");
}
