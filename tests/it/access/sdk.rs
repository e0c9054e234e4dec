//! Run tokens and the SDK heartbeat (docs/contract.md, "Run tokens").

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::json;
use switchyard_shared::run_token::{RunClaims, TokenSigner};

use super::scopes::{run_token, JWT_KEY};
use super::{key, with, TARGET};
use crate::harness::{assert_problem, TestEnv};
use crate::target::{Reply, Target};

#[tokio::test]
async fn a_run_token_reaches_only_its_own_run_under_sdk() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, TARGET, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let run = env.trigger(job_id, json!({})).await;
    let run_id = run["id"].as_str().unwrap();
    let other = env.trigger(job_id, json!({})).await;
    let other_id = other["id"].as_str().unwrap();
    let token = run_token(run_id, job_id, &project);
    let beat = format!("/sdk/v1/runs/{run_id}/heartbeat");

    let (s, v) = with(&env, &token, Method::POST, &beat, Some(json!({"progress": 0.5, "message": "halfway"}))).await;
    assert_eq!((s, v.clone()), (200, json!({"cancel_requested": false})), "{v}");
    let beat_at: Option<DateTime<Utc>> = sqlx::query_scalar("SELECT heartbeat_at FROM job_runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert!(beat_at.is_some_and(|t| (Utc::now() - t).num_seconds() < 10));

    // Someone else's run, another path, another credential.
    let p = assert_problem(
        403,
        with(&env, &token, Method::POST, &format!("/sdk/v1/runs/{other_id}/heartbeat"), Some(json!({}))).await,
        403,
    );
    assert!(p["detail"].as_str().unwrap().contains("another run"), "{p}");
    assert_problem(401, with(&env, &token, Method::GET, &format!("/v1/runs/{run_id}"), None).await, 401);
    assert_problem(401, with(&env, &token, Method::GET, "/v1/jobs", None).await, 401);
    let (full, _) = key(&env, &project, &[]).await;
    assert_problem(403, with(&env, &full, Method::POST, &beat, Some(json!({}))).await, 403);
    assert_problem(422, with(&env, &token, Method::POST, &beat, Some(json!({"progress": 2}))).await, 422);
    assert_problem(400, with(&env, &token, Method::POST, &beat, Some(json!({"pace": 1}))).await, 400);

    // Expired, or signed with another key.
    let now = Utc::now().timestamp();
    let claims = RunClaims {
        sub: run_id.into(),
        iat: now - 900,
        exp: now - 600,
        job_id: job_id.into(),
        project_id: project.clone(),
        attempt: 1,
    };
    let expired = TokenSigner::new(JWT_KEY).sign(&claims).unwrap();
    assert_problem(401, with(&env, &expired, Method::POST, &beat, Some(json!({}))).await, 401);
    let forged = TokenSigner::new(b"another-key").sign(&RunClaims { exp: now + 600, ..claims }).unwrap();
    assert_problem(401, with(&env, &forged, Method::POST, &beat, Some(json!({}))).await, 401);

    // A cancelled run asks its target to stop.
    let (s, _) = env.post(&format!("/v1/runs/{run_id}/cancel"), json!({})).await;
    assert_eq!(s, 200);
    let (s, v) = with(&env, &token, Method::POST, &beat, Some(json!({}))).await;
    assert_eq!((s, v), (200, json!({"cancel_requested": true})));
    // The internal secret may act for any run.
    let (s, _) = env.post(&format!("/sdk/v1/runs/{other_id}/heartbeat"), json!({})).await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn the_token_a_worker_sends_is_accepted() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::status(200));
    let job = env.job(&target.url, json!({})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let run_id = run["id"].as_str().unwrap();
    let _worker = env.spawn_worker();
    let got = target.wait_count(1, Duration::from_secs(10)).await;
    let token = got[0].header("x-svc-run-token").expect("the dispatch carries a run token").to_string();
    let (s, v) = with(&env, &token, Method::POST, &format!("/sdk/v1/runs/{run_id}/heartbeat"), Some(json!({}))).await;
    assert_eq!(s, 200, "{v}");
}
