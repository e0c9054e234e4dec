//! Per-client rate limits (docs/contract.md, "Limits"), shared by every api
//! process. The other tests run with them off (0); these turn them on.

use reqwest::Method;
use serde_json::json;

use super::{call_as, second_api, TARGET};
use crate::harness::{TestEnv, SECRET};

#[tokio::test]
async fn limits_answer_429_with_retry_after_across_processes() {
    let env = TestEnv::start_with(|c| {
        c.rate_limit_global_per_min = 6;
        c.rate_limit_trigger_per_min = 2;
        c.rate_limit_bulk_per_min = 1;
    })
    .await;
    let other = second_api(&env).await;
    let project = env.project().await; // 1
    let job = env.job_in(&project, TARGET, json!({})).await; // 2
    let trigger = format!("/v1/jobs/{}/trigger", job["id"].as_str().unwrap());
    for _ in 0..2 {
        let (s, v) = env.post(&trigger, json!({})).await; // 3, 4
        assert_eq!(s, 201, "{v}");
    }
    // The trigger bucket is full, in the other process too; a refused
    // request is not counted against the global bucket.
    let resp = env.http.post(format!("{other}{trigger}")).bearer_auth(SECRET).json(&json!({})).send().await.unwrap();
    assert_eq!(resp.status(), 429);
    let retry: u64 = resp.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("application/problem+json"));
    let p: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(p["status"], 429);
    assert!(p["detail"].as_str().unwrap().contains("trigger"), "{p}");
    // The bulk bucket: one bulk trigger a minute (whatever its answer).
    let bulk = format!("{trigger}/bulk");
    let (s, _) = call_as(&env, &other, Some(SECRET), &[], Method::POST, &bulk, Some(json!({"items": [{}]}))).await; // 5
    assert_ne!(s, 429);
    let (s, _) = call_as(&env, &env.base, Some(SECRET), &[], Method::POST, &bulk, Some(json!({"items": [{}]}))).await;
    assert_eq!(s, 429);
    // The global bucket: 6 requests a minute, whatever the path.
    let list = format!("/v1/jobs?project_id={project}");
    let (s, _) = env.get(&list).await; // 6
    assert_eq!(s, 200);
    let (s, p) = call_as(&env, &other, Some(SECRET), &[], Method::GET, &list, None).await;
    assert_eq!(s, 429, "{p}");
    // Probes are never limited.
    for path in ["/health", "/health/ready", "/metrics"] {
        assert_eq!(env.http.get(format!("{}{path}", env.base)).send().await.unwrap().status(), 200, "{path}");
    }
}
