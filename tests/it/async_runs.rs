//! Async execution (docs/runs.md, "Run records, bulk operations,
//! environments and secrets"): a 202 keeps the run running without a lease
//! or a concurrency slot; `complete` / `fail` over the SDK finish it under
//! the retry policy; silence past the timeout is a timed-out attempt; a
//! checkpoint reaches the next attempt.

use std::time::Duration;

use chrono::Utc;
use reqwest::Method;
use serde_json::json;

use crate::harness::{assert_problem, TestEnv};
use crate::support::sdk::{accepted_async_run, call_as, next_token, sdk_post};

const T: Duration = Duration::from_secs(15);

#[tokio::test]
async fn an_accepted_async_run_holds_no_slot_and_completes_over_the_sdk() {
    let env = TestEnv::start().await;
    // `latest`: the webhook_url set below applies to the runs already made.
    let a = accepted_async_run(&env, json!({"max_concurrency": 1, "version_policy": "latest"}), json!({})).await;
    let hook = format!("{}-done", a.target.url);
    let (s, _) = env.patch(&format!("/v1/jobs/{}", a.job["id"].as_str().unwrap()), json!({"webhook_url": hook})).await;
    assert_eq!(s, 200);
    assert_eq!(env.zcard_all(|k| &k.leases).await, 0, "the worker let go of the lease");
    let accepted_at: Option<chrono::DateTime<Utc>> =
        sqlx::query_scalar("SELECT async_accepted_at FROM job_runs WHERE id = $1")
            .bind(&a.run_id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert!(accepted_at.is_some());

    // The job's only slot is free: a second run is dispatched while the first runs.
    let second = env.trigger(a.job["id"].as_str().unwrap(), json!({"execution_mode": "async"})).await;
    let second_token = next_token(&env, &a.target, 2).await;
    let sid = second["id"].as_str().unwrap();
    assert_eq!(env.run(sid).await["status"], "running");
    assert_eq!(env.run(&a.run_id).await["status"], "running");

    let (s, v) = sdk_post(&env, &a.run_id, "complete", &a.token, json!({"result": {"sent": 3}})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!((v["status"].as_str(), v["attempt"].as_i64()), (Some("completed"), Some(1)));
    let (s, v) = sdk_post(&env, sid, "complete", &second_token, json!({})).await;
    assert_eq!((s, v["status"].as_str()), (200, Some("completed")), "{v}");
    assert_eq!(v["result"], serde_json::Value::Null);

    // The terminal webhook goes out for an SDK-finished run too (sent by
    // the scheduler's delivery sender).
    env.spawn_scheduler();
    let reqs = a.target.wait_count(4, T).await;
    let webhook = reqs
        .iter()
        .find(|r| r.path.ends_with("-done") && r.body["run_id"] == json!(a.run_id))
        .expect("terminal webhook");
    assert_eq!(webhook.body["status"], "completed");
    assert_eq!(webhook.body["result"], json!({"sent": 3}));
    let attempts: Vec<(i32, String)> =
        sqlx::query_as("SELECT attempt, outcome FROM job_run_attempts WHERE run_id = $1")
            .bind(&a.run_id)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(attempts, [(1, "completed".to_string())]);
}

#[tokio::test]
async fn a_retryable_failure_follows_the_policy_and_hands_on_the_checkpoint() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(
        &env,
        json!({"retry_strategy": "fixed", "retry_initial_delay_secs": 1, "max_attempts": 2}),
        json!({}),
    )
    .await;
    let rid = a.run_id.as_str();
    assert_eq!(a.target.requests()[0].body["checkpoint"], serde_json::Value::Null);
    let (s, _) = sdk_post(&env, rid, "checkpoints", &a.token, json!({"data": {"step": 5}, "label": "half"})).await;
    assert_eq!(s, 201);

    let (s, v) = sdk_post(
        &env,
        rid,
        "fail",
        &a.token,
        json!({"error": "rate limited upstream", "error_class": "upstream_429", "retryable": true}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "retrying");
    assert_eq!(v["error_class"], "upstream_429");
    assert!(v["next_retry_at"].is_string());
    assert_eq!(env.zcard_all(|k| &k.scheduled).await, 1, "the retry is scheduled");

    // The scheduler brings it back; attempt 2 gets the checkpoint.
    env.spawn_scheduler();
    let token2 = next_token(&env, &a.target, 2).await;
    let second = &a.target.requests()[1];
    assert_eq!(second.body["attempt"], 2);
    assert_eq!(second.body["checkpoint"], json!({"step": 5}));

    // The first attempt's token can no longer finish the run.
    let p = assert_problem(409, sdk_post(&env, rid, "complete", &a.token, json!({})).await, 409);
    assert!(p["detail"].as_str().unwrap().contains("attempt 1"), "{p}");
    let (s, v) = sdk_post(&env, rid, "fail", &token2, json!({"error": "still limited", "retryable": true})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (v["status"].as_str(), v["error_class"].as_str()),
        (Some("failed"), Some("target_failed")),
        "attempts exhausted"
    );
    assert_eq!(v["error"], "still limited");
}

#[tokio::test]
async fn a_non_retryable_failure_fails_at_once() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({"max_attempts": 5}), json!({})).await;
    let (s, v) = sdk_post(&env, &a.run_id, "fail", &a.token, json!({"error": "bad input"})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!((v["status"].as_str(), v["attempt"].as_i64()), (Some("failed"), Some(1)));
    assert_problem(409, sdk_post(&env, &a.run_id, "fail", &a.token, json!({"error": "again"})).await, 409);
}

#[tokio::test]
async fn a_silent_async_run_times_out_and_retries_by_its_policy() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(
        &env,
        json!({"timeout_secs": 2, "retry_strategy": "fixed", "retry_initial_delay_secs": 1, "max_attempts": 2}),
        json!({}),
    )
    .await;
    let rid = a.run_id.as_str();
    let sched = env.scheduler();
    let r = sched.sweep_heartbeats_once(Utc::now()).await.unwrap();
    assert_eq!(r.overdue, 0, "within its timeout");
    let r = sched.sweep_heartbeats_once(Utc::now() + chrono::Duration::seconds(5)).await.unwrap();
    assert_eq!((r.overdue, r.retrying, r.ended), (1, 1, 0), "{r:?}");
    let v = env.run(rid).await;
    assert_eq!((v["status"].as_str(), v["error_class"].as_str()), (Some("retrying"), Some("heartbeat_timeout")), "{v}");

    // Attempt 2: heartbeats keep it alive, silence ends it.
    env.spawn_scheduler();
    let token2 = next_token(&env, &a.target, 2).await;
    let beat = json!({"progress": 0.25, "message": "a quarter"});
    let (s, hb) = call_as(&env, Method::POST, &format!("/sdk/v1/runs/{rid}/heartbeat"), &token2, Some(beat)).await;
    assert_eq!((s, &hb["cancel_requested"]), (200, &json!(false)), "{hb}");
    let v = env.run(rid).await;
    assert_eq!((v["progress"].as_f64(), v["progress_message"].as_str()), (Some(0.25), Some("a quarter")), "{v}");
    let r = sched.sweep_heartbeats_once(Utc::now() + chrono::Duration::milliseconds(1500)).await.unwrap();
    assert_eq!(r.overdue, 0, "the heartbeat reset the clock");
    let r = sched.sweep_heartbeats_once(Utc::now() + chrono::Duration::seconds(10)).await.unwrap();
    assert_eq!((r.overdue, r.ended), (1, 1), "{r:?}");
    let v = env.run(rid).await;
    assert_eq!((v["status"].as_str(), v["attempt"].as_i64()), (Some("timed_out"), Some(2)), "{v}");
    assert!(v["error"].as_str().unwrap().contains("heartbeat"), "{v}");
    assert_problem(409, sdk_post(&env, rid, "complete", &token2, json!({})).await, 409);
}

#[tokio::test]
async fn the_reconciler_leaves_an_accepted_async_run_to_its_heartbeats() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({"timeout_secs": 3600}), json!({})).await;
    // Silent for longer than a lease, but well within its own timeout.
    sqlx::query("UPDATE job_runs SET heartbeat_at = now() - interval '10 minutes', started_at = now() - interval '10 minutes' WHERE id = $1")
        .bind(&a.run_id)
        .execute(&env.pool)
        .await
        .unwrap();
    let report = env.scheduler().reconcile_once().await.unwrap();
    assert_eq!(report.recovered_running, 0, "{report:?}");
    assert_eq!(env.run(&a.run_id).await["status"], "running");
    assert_eq!(a.target.count(), 1, "not dispatched again");
    let r = env.scheduler().sweep_heartbeats_once(Utc::now()).await.unwrap();
    assert_eq!(r.overdue, 0);
}

#[tokio::test]
async fn a_cancelled_async_run_learns_it_from_its_heartbeat() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({}), json!({})).await;
    assert_eq!(env.post(&format!("/v1/runs/{}/cancel", a.run_id), json!({})).await.0, 200);
    let (s, hb) =
        call_as(&env, Method::POST, &format!("/sdk/v1/runs/{}/heartbeat", a.run_id), &a.token, Some(json!({}))).await;
    assert_eq!((s, &hb["cancel_requested"]), (200, &json!(true)));
    assert_problem(409, sdk_post(&env, &a.run_id, "complete", &a.token, json!({})).await, 409);
    assert_eq!(env.run(&a.run_id).await["status"], "cancelled");
}

/// A synchronous run whose target takes `delay` to answer, with a worker
/// running, returned once its request has reached the target.
async fn slow_sync_run(env: &TestEnv, delay: Duration) -> (crate::target::Target, String) {
    let target = crate::target::Target::start().await;
    target.script([crate::target::Reply::slow(delay)]);
    let job = env.job(&target.url, json!({})).await;
    let rid = env.trigger(job["id"].as_str().unwrap(), json!({})).await["id"].as_str().unwrap().to_string();
    env.spawn_worker();
    target.wait_count(1, T).await;
    (target, rid)
}

/// Workers write `running` lazily (with the outcome, or once an attempt has
/// been out a while). An SDK call that arrives before that, from inside a
/// synchronous dispatch, marks the run running on its token's attempt; the
/// worker's outcome then lands on top of it with one `running` event.
#[tokio::test]
async fn an_sdk_call_during_a_sync_dispatch_sees_the_run_running() {
    let env = TestEnv::start().await;
    let (target, rid) = slow_sync_run(&env, Duration::from_millis(1500)).await;
    let reqs = target.requests();
    let token = reqs[0].header("x-svc-run-token").expect("run token").to_string();
    assert_eq!(env.run(&rid).await["status"], "queued", "not marked before it has been out a while");

    let (s, v) = sdk_post(&env, &rid, "progress", &token, json!({"progress": 0.5})).await;
    assert_eq!(s, 200, "{v}");
    let now = env.run(&rid).await;
    assert_eq!((now["status"].as_str(), now["attempt"].as_i64()), (Some("running"), Some(1)));

    let done = env.wait_status(&rid, "completed", T).await;
    assert_eq!(done["attempt"], 1);
    assert_eq!(env.transition_path(&rid).await, ["queued", "running", "completed"]);
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM job_run_attempts WHERE run_id = $1")
        .bind(&rid)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 1);
}

/// A long synchronous attempt is marked running while it is out, once.
#[tokio::test]
async fn a_long_sync_attempt_is_marked_running_while_in_flight() {
    let env = TestEnv::start().await;
    let (_target, rid) = slow_sync_run(&env, Duration::from_secs(2)).await;
    let running = env.wait_status(&rid, "running", Duration::from_secs(2)).await;
    assert_eq!(running["attempt"], 1);
    assert!(running["started_at"].is_string());
    env.wait_status(&rid, "completed", T).await;
    assert_eq!(env.transition_path(&rid).await, ["queued", "running", "completed"]);
}

/// error_class is the target's own classification: any printable string up
/// to 200 characters, in whatever case and punctuation its authors use.
#[tokio::test]
async fn fail_takes_a_free_form_error_class() {
    let env = TestEnv::start().await;
    for class in ["ProviderDown", "provider.down"] {
        let a = accepted_async_run(&env, json!({}), json!({})).await;
        let (s, v) = sdk_post(&env, &a.run_id, "fail", &a.token, json!({"error": "down", "error_class": class})).await;
        assert_eq!(s, 200, "{class}: {v}");
        assert_eq!((v["status"].as_str(), v["error_class"].as_str()), (Some("failed"), Some(class)));
    }
    let a = accepted_async_run(&env, json!({}), json!({})).await;
    for bad in ["line\nbreak".to_string(), "   ".to_string(), "x".repeat(201)] {
        let got = sdk_post(&env, &a.run_id, "fail", &a.token, json!({"error": "down", "error_class": bad})).await;
        let p = assert_problem(got.0, got, 422);
        assert_eq!(p["errors"][0]["location"], "body.error_class", "{p}");
    }
    assert_eq!(env.run(&a.run_id).await["status"], "running", "a refused call changes nothing");
}
