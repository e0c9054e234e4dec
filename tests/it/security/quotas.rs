//! Per-run quotas on what a run may store: its outputs and its state are
//! bounded in bytes together, not only in count (a run could otherwise keep
//! 1,000 outputs of 256 KB each).

use reqwest::Method;
use serde_json::json;
use switchyard_shared::domain::run_record::{MAX_OUTPUT_BYTES_PER_RUN, MAX_STATE_BYTES_PER_RUN};

use crate::harness::{assert_problem, TestEnv};
use crate::sdk_client::{accepted_async_run, call_as, sdk_post};

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
