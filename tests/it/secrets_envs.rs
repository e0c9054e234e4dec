//! Environments and job secrets: secrets are write-only, encrypted at rest, and
//! reach the target only in the dispatch body.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use switchyard_shared::config::Secret;

use crate::harness::{assert_problem, TestEnv};
use crate::support::sdk::{api_key, call_as};
use crate::target::Target;

const T: Duration = Duration::from_secs(15);
const VALUE: &str = "sk-live-0123456789-very-secret";

async fn env_with_key() -> TestEnv {
    TestEnv::start_with(|c| c.secrets_key = Some(Secret::new("test-secrets-key"))).await
}

#[tokio::test]
async fn environments_crud_and_jobs_name_only_their_projects() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (s, prod) =
        env.post("/v1/environments", json!({"project_id": project, "name": "production", "description": "live"})).await;
    assert_eq!(s, 201, "{prod}");
    let prod_id = prod["id"].as_str().unwrap();
    assert!(prod_id.starts_with("env_"));
    assert_eq!((prod["project_id"].as_str(), prod["name"].as_str()), (Some(project.as_str()), Some("production")));
    assert!(prod["created_at"].is_string());
    let (s, staging) = env.post("/v1/environments", json!({"project_id": project, "name": "staging"})).await;
    assert_eq!(s, 201);
    assert_problem(409, env.post("/v1/environments", json!({"project_id": project, "name": "production"})).await, 409);
    assert_problem(422, env.post("/v1/environments", json!({"project_id": project, "name": "Prod Env"})).await, 422);
    assert_problem(
        400,
        env.post("/v1/environments", json!({"project_id": project, "name": "x", "tier": 1})).await,
        400,
    );
    assert_problem(422, env.post("/v1/environments", json!({"project_id": "prj_nope", "name": "x"})).await, 422);
    assert_problem(422, env.post("/v1/environments", json!({"name": "x"})).await, 422);

    let (s, list) = env.get(&format!("/v1/environments?project_id={project}")).await;
    assert_eq!(s, 200);
    let names: Vec<_> = list["data"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["staging", "production"], "newest first");
    let (s, one) = env.get(&format!("/v1/environments/{prod_id}")).await;
    assert_eq!((s, &one), (200, &prod));

    // A job may name an environment of its own project only.
    let other = env.project().await;
    let (s, foreign) = env.post("/v1/environments", json!({"project_id": other, "name": "production"})).await;
    assert_eq!(s, 201);
    let job = env.job_in(&project, "http://127.0.0.1:9/hook", json!({"environment_id": prod_id})).await;
    assert_eq!(job["environment_id"], prod_id);
    let refused = env
        .post("/v1/jobs", json!({"project_id": project, "name": "x", "endpoint_url": "http://127.0.0.1:9/x", "environment_id": foreign["id"]}))
        .await;
    let p = assert_problem(422, refused, 422);
    assert_eq!(p["errors"][0]["location"], "body.environment_id");
    let job_url = format!("/v1/jobs/{}", job["id"].as_str().unwrap());
    assert_problem(422, env.patch(&job_url, json!({"environment_id": "env_nope"})).await, 422);
    let (s, moved) = env.patch(&job_url, json!({"environment_id": staging["id"]})).await;
    assert_eq!((s, &moved["environment_id"]), (200, &staging["id"]));

    // In use: 409; unused: deleted.
    let staging_url = format!("/v1/environments/{}", staging["id"].as_str().unwrap());
    assert_problem(409, env.delete(&staging_url).await, 409);
    assert_eq!(env.delete(&format!("/v1/environments/{prod_id}")).await.0, 204);
    assert_problem(404, env.get(&format!("/v1/environments/{prod_id}")).await, 404);
    assert_problem(404, env.delete(&format!("/v1/environments/{prod_id}")).await, 404);

    // Another project's key sees none of it.
    let key = api_key(&env, &other, &["jobs:read", "jobs:write"]).await;
    let (s, _) = call_as(&env, Method::GET, &staging_url, &key, None).await;
    assert_eq!(s, 404);
    let (s, _) = call_as(&env, Method::DELETE, &staging_url, &key, None).await;
    assert_eq!(s, 404);
    let (s, mine) = call_as(&env, Method::GET, "/v1/environments", &key, None).await;
    assert_eq!(s, 200);
    assert_eq!(mine["data"].as_array().unwrap().len(), 1, "its own project's only");
}

#[tokio::test]
async fn secrets_are_write_only_encrypted_and_dispatched() {
    let env = env_with_key().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let url = format!("/v1/jobs/{job_id}/secrets");

    let (s, v) = env.post(&url, json!({"name": "API_TOKEN", "value": "first"})).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["name"], "API_TOKEN");
    assert!(v.get("value").is_none());
    let (s, v) = env.post(&url, json!({"name": "API_TOKEN", "value": VALUE})).await;
    assert_eq!(s, 200, "a second write replaces: {v}");
    let (s, _) = env.post(&url, json!({"name": "DB_URL", "value": "postgres://u:p@h/db"})).await;
    assert_eq!(s, 201);
    let (s, list) = env.get(&url).await;
    assert_eq!(s, 200);
    let names: Vec<_> = list["data"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["API_TOKEN", "DB_URL"]);
    assert!(!list.to_string().contains(VALUE), "values are never listed");

    let stored: Vec<Vec<u8>> = sqlx::query_scalar("SELECT ciphertext FROM job_secrets WHERE job_id = $1")
        .bind(job_id)
        .fetch_all(&env.pool)
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    for ct in &stored {
        assert!(!ct.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()), "stored encrypted");
        assert!(!ct.windows(5).any(|w| w == b"first"));
    }

    let run = env.trigger(job_id, json!({})).await;
    env.worker().run_once().await.unwrap();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;
    let body = &target.requests()[0].body;
    assert_eq!(body["secrets"], json!({"API_TOKEN": VALUE, "DB_URL": "postgres://u:p@h/db"}));

    let (_, bundle) = env.get(&format!("/v1/runs/{}/debug-bundle", run["id"].as_str().unwrap())).await;
    assert_eq!(bundle["secret_names"], json!(["API_TOKEN", "DB_URL"]));
    assert!(!bundle.to_string().contains(VALUE), "never in the bundle");

    for (body, want) in [
        (json!({"name": "9LIVES", "value": "x"}), 422),
        (json!({"name": "has-dash", "value": "x"}), 422),
        (json!({"name": "BIG", "value": "x".repeat(65 * 1024)}), 422),
        (json!({"name": "X"}), 400),
        (json!({"name": "X", "value": "v", "note": 1}), 400),
    ] {
        let got = env.post(&url, body).await;
        let p = assert_problem(want, got, want);
        assert!(!p.to_string().contains("xxxxxxxx"), "a refused value is not echoed");
    }
    assert_eq!(env.delete(&format!("{url}/DB_URL")).await.0, 204);
    let project = job["project_id"].as_str().unwrap();
    let (s, audit) = env.get(&format!("/v1/audit-events?project_id={project}")).await;
    assert_eq!(s, 200, "{audit}");
    let actions: Vec<_> = audit["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions.iter().filter(|a| **a == "job_secret.set").count(), 3, "{actions:?}");
    assert!(actions.contains(&"job_secret.deleted"));
    assert!(!audit.to_string().contains(VALUE), "the trail names secrets, never their values");
    assert_problem(404, env.delete(&format!("{url}/DB_URL")).await, 404);
    assert_problem(404, env.delete(&format!("{url}/bad-name")).await, 404);
    assert_problem(404, env.get("/v1/jobs/job_nope/secrets").await, 404);

    // A job without secrets dispatches no `secrets` key.
    let plain = env.job(&target.url, json!({})).await;
    let run = env.trigger(plain["id"].as_str().unwrap(), json!({})).await;
    env.worker().run_once().await.unwrap();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;
    assert!(target.requests()[1].body.get("secrets").is_none());

    // Other projects: 404.
    let other = env.project().await;
    let key = api_key(&env, &other, &["secrets:read", "secrets:write"]).await;
    let (s, _) = call_as(&env, Method::GET, &url, &key, None).await;
    assert_eq!(s, 404);
    let (s, _) = call_as(&env, Method::POST, &url, &key, Some(json!({"name": "A", "value": "b"}))).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn without_secrets_key_writes_are_refused_and_dispatch_fails() {
    // The api has a key, the worker does not.
    let env = env_with_key().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"max_attempts": 3})).await;
    let job_id = job["id"].as_str().unwrap();
    let (s, _) = env.post(&format!("/v1/jobs/{job_id}/secrets"), json!({"name": "TOKEN", "value": VALUE})).await;
    assert_eq!(s, 201);
    let run = env.trigger(job_id, json!({})).await;
    let mut cfg = env.config.clone();
    cfg.secrets_key = None;
    let opts = switchyard_worker::WorkerOptions::from_config(&cfg).unwrap();
    let keyless = switchyard_worker::Worker::new(env.pool.clone(), env.new_queue(), opts).unwrap();
    keyless.run_once().await.unwrap();
    let v = env.wait_status(run["id"].as_str().unwrap(), "failed", T).await;
    assert_eq!(v["error_class"], "secrets_unavailable");
    assert!(v["error"].as_str().unwrap().contains("SECRETS_KEY"), "{v}");
    assert_eq!(target.count(), 0, "not dispatched without its secrets");

    // A worker with another key cannot open them either.
    let run = env.trigger(job_id, json!({})).await;
    cfg.secrets_key = Some(Secret::new("some-other-key"));
    let opts = switchyard_worker::WorkerOptions::from_config(&cfg).unwrap();
    let wrong = switchyard_worker::Worker::new(env.pool.clone(), env.new_queue(), opts).unwrap();
    wrong.run_once().await.unwrap();
    let v = env.wait_status(run["id"].as_str().unwrap(), "failed", T).await;
    assert_eq!(v["error_class"], "secrets_unavailable");
    assert!(!v.to_string().contains(VALUE));

    // An api without a key refuses writes, still lists and deletes.
    let bare = TestEnv::start_with(|c| c.secrets_key = None).await;
    let job = bare.job(&target.url, json!({})).await;
    let url = format!("/v1/jobs/{}/secrets", job["id"].as_str().unwrap());
    let p = assert_problem(503, bare.post(&url, json!({"name": "TOKEN", "value": "v"})).await, 503);
    assert!(p["detail"].as_str().unwrap().contains("SECRETS_KEY"), "{p}");
    let (s, list) = bare.get(&url).await;
    assert_eq!((s, &list["data"]), (200, &json!([])));
}
