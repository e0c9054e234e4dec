//! Run tokens: checked against their run's project, and refused for writes
//! once the run has ended (docs/contract.md, "Run tokens", says what stays
//! allowed).

use reqwest::Method;
use serde_json::json;
use switchyard_shared::run_token::{self, TokenSigner};

use crate::harness::{assert_problem, TestEnv};
use crate::support::sdk::{accepted_async_run, call_as, sdk_post};

#[tokio::test]
async fn a_run_token_writes_nothing_more_once_its_run_has_ended() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({}), json!({})).await;
    let (rid, tok) = (a.run_id.as_str(), a.token.as_str());
    let (s, v) = sdk_post(&env, rid, "usage", tok, json!({"cost_microusd": 5})).await;
    assert_eq!(s, 201, "while running: {v}");
    let (s, v) = sdk_post(&env, rid, "complete", tok, json!({"result": {"ok": 1}})).await;
    assert_eq!(s, 200, "{v}");

    for (what, body) in [
        ("progress", json!({"progress": 0.5})),
        ("outputs", json!({"name": "late", "data": 1})),
        ("tool-calls", json!({"name": "late"})),
        ("checkpoints", json!({"data": 1})),
    ] {
        let p = assert_problem(409, sdk_post(&env, rid, what, tok, body).await, 409);
        assert!(p["detail"].as_str().unwrap().contains("ended"), "{what}: {p}");
    }
    let (_, outputs) = env.get(&format!("/v1/runs/{rid}/outputs")).await;
    assert_eq!(outputs["data"].as_array().map(Vec::len), Some(0), "nothing was added after the end: {outputs}");
    // What stays allowed: logs (a late flush), usage (a late bill), reads and heartbeats.
    let (s, _) = sdk_post(&env, rid, "usage", tok, json!({"cost_microusd": 5})).await;
    assert_eq!(s, 201);
    let (s, _) = sdk_post(&env, rid, "logs", tok, json!({"lines": [{"message": "flushed"}]})).await;
    assert_eq!(s, 200);
    let (s, _) = sdk_post(&env, rid, "heartbeat", tok, json!({})).await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn a_run_token_for_another_project_is_refused() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({}), json!({})).await;
    let claims = run_token::verify(&a.token, env.config.jwt_signing_key.as_ref().unwrap().expose().as_bytes()).unwrap();
    let forged = run_token::RunClaims { project_id: "prj_00000000000000000000000000000000".into(), ..claims };
    let signer = TokenSigner::new(env.config.jwt_signing_key.as_ref().unwrap().expose().as_bytes());
    let token = signer.sign(&forged).unwrap();
    let got = call_as(
        &env,
        Method::POST,
        &format!("/sdk/v1/runs/{}/progress", a.run_id),
        &token,
        Some(json!({"progress": 0.1})),
    )
    .await;
    let p = assert_problem(403, got, 403);
    assert!(p["detail"].as_str().unwrap().contains("another project"), "{p}");
}
