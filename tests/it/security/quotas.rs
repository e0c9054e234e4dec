//! Per-run quotas on what a run may store: its outputs and its state are
//! bounded in bytes together, not only in count (a run could otherwise keep
//! 1,000 outputs of 256 KB each).

use reqwest::Method;
use serde_json::json;
use switchyard_shared::domain::run_record::{MAX_OUTPUT_BYTES_PER_RUN, MAX_STATE_BYTES_PER_RUN};

use crate::harness::{assert_problem, TestEnv};
use crate::support::sdk::{accepted_async_run, call_as, sdk_post};

#[tokio::test]
async fn a_runs_outputs_and_state_are_bounded_in_bytes() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({}), json!({})).await;
    let (rid, tok) = (a.run_id.as_str(), a.token.as_str());
    let chunk = "x".repeat(200 * 1024);

    let fits = MAX_OUTPUT_BYTES_PER_RUN / (200 * 1024 + 2);
    for i in 0..fits {
        let (s, v) = sdk_post(&env, rid, "outputs", tok, json!({"name": format!("o{i}"), "data": chunk})).await;
        assert_eq!(s, 201, "output {i} of {fits}: {v}");
    }
    let got = sdk_post(&env, rid, "outputs", tok, json!({"name": "one too many", "data": chunk})).await;
    let p = assert_problem(422, got, 422);
    assert!(p["errors"][0]["message"].as_str().unwrap().contains("more than"), "{p}");

    let state = |k: usize| format!("/sdk/v1/runs/{rid}/state/k{k}");
    let fits = MAX_STATE_BYTES_PER_RUN / (200 * 1024 + 2);
    for k in 0..fits as usize {
        let (s, v) = call_as(&env, Method::PUT, &state(k), tok, Some(json!({"value": chunk}))).await;
        assert_eq!(s, 200, "key {k}: {v}");
    }
    let got = call_as(&env, Method::PUT, &state(fits as usize), tok, Some(json!({"value": chunk}))).await;
    assert_problem(422, got, 422);
    // Replacing a key's value is measured without its old value.
    let (s, v) = call_as(&env, Method::PUT, &state(0), tok, Some(json!({"value": chunk}))).await;
    assert_eq!(s, 200, "{v}");
}

#[tokio::test]
async fn a_project_holds_at_most_its_quota_of_jobs_and_of_cron_jobs() {
    use switchyard_shared::domain::job::{MAX_CRON_JOBS_PER_PROJECT, MAX_JOBS_PER_PROJECT};
    let env = TestEnv::start().await;
    let project = env.project().await;
    let target = "http://127.0.0.1:9/hook";
    for i in 0..MAX_CRON_JOBS_PER_PROJECT {
        let j = env.job_in(&project, target, json!({"name": format!("c{i}"), "cron": "0 0 * * * *"})).await;
        assert!(j["id"].is_string());
    }
    let body =
        json!({"project_id": project, "name": "one cron too many", "endpoint_url": target, "cron": "0 0 * * * *"});
    let p = assert_problem(422, env.post("/v1/jobs", body).await, 422);
    assert_eq!(p["errors"][0]["location"], "body.cron", "{p}");
    // Without a cron it fits; giving it one later is held to the same quota.
    let plain = env.job_in(&project, target, json!({"name": "plain"})).await;
    let path = format!("/v1/jobs/{}", plain["id"].as_str().unwrap());
    assert_problem(422, env.patch(&path, json!({"cron": "0 0 * * * *"})).await, 422);

    // Fill the project to its job quota (rows copied from the plain job).
    let have: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE project_id = $1 AND deleted_at IS NULL")
        .bind(&project)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO jobs SELECT (jsonb_populate_record(j, jsonb_build_object(
                'id', 'job_' || lpad(g::text, 32, '0'), 'slug', 'filler-' || g, 'name', 'filler ' || g))).*
           FROM jobs j, generate_series(1, $2) g WHERE j.id = $1",
    )
    .bind(plain["id"].as_str().unwrap())
    .bind((MAX_JOBS_PER_PROJECT - have) as i32)
    .execute(&env.pool)
    .await
    .unwrap();
    let body = json!({"project_id": project, "name": "one job too many", "endpoint_url": target});
    let p = assert_problem(422, env.post("/v1/jobs", body).await, 422);
    assert!(p["errors"][0]["message"].as_str().unwrap().contains("most jobs"), "{p}");
}
