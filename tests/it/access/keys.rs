//! API keys: create, list, revoke, rotate, expiry, and what each state accepts.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{call_as, eventually, key, second_api, with, TARGET};
use crate::harness::{assert_problem, TestEnv};

#[tokio::test]
async fn a_key_is_shown_once_and_stored_only_as_its_hash() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (s, created) =
        env.post("/v1/api-keys", json!({"project_id": project, "name": "ci", "scopes": ["jobs:read"]})).await;
    assert_eq!(s, 201, "{created}");
    let raw = created["key"].as_str().unwrap().to_string();
    assert!(raw.starts_with("svc_") && raw.len() == 4 + 43, "svc_ plus 256 bits in base64url: {raw}");
    assert_eq!(created["status"], "active");
    assert_eq!(created["scopes"], json!(["jobs:read"]));
    let id = created["id"].as_str().unwrap();

    let (_, listed) = env.get(&format!("/v1/api-keys?project_id={project}")).await;
    assert_eq!(listed["data"][0]["id"], id);
    let (_, got) = env.get(&format!("/v1/api-keys/{id}")).await;
    for v in [&listed, &got] {
        assert!(!v.to_string().contains(&raw), "the raw key is never returned again: {v}");
        assert!(v.to_string().contains(id));
    }
    let (hash, row): (String, String) =
        sqlx::query_as("SELECT key_hash, row_to_json(k)::text FROM api_keys k WHERE id = $1")
            .bind(id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(hash, hex::encode(Sha256::digest(raw.as_bytes())));
    assert!(!row.contains(&raw["svc_".len()..]), "no column holds the raw key");

    // The key works; the scope test covers what it may do.
    let (s, v) = with(&env, &raw, Method::GET, "/v1/jobs", None).await;
    assert_eq!(s, 200, "{v}");
}

#[tokio::test]
async fn bad_create_requests() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let got = env
        .post("/v1/api-keys", json!({"project_id": project, "name": "x", "scopes": ["jobs:read", "jobs:fly"]}))
        .await;
    let p = assert_problem(400, got, 400);
    assert!(p["detail"].as_str().unwrap().contains("jobs:fly"), "{p}");
    assert_problem(422, env.post("/v1/api-keys", json!({"project_id": project, "name": " ", "scopes": []})).await, 422);
    assert_problem(
        400,
        env.post("/v1/api-keys", json!({"project_id": project, "name": "x", "scopes": [], "admin": true})).await,
        400,
    );
    assert_problem(422, env.post("/v1/api-keys", json!({"project_id": "nope", "name": "x", "scopes": []})).await, 422);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM api_keys").fetch_one(&env.pool).await.unwrap();
    assert_eq!(n, 0, "refused requests create nothing");
}

#[tokio::test]
async fn empty_scopes_keep_full_access() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (raw, _) = key(&env, &project, &[]).await;
    let (s, job) = with(&env, &raw, Method::POST, "/v1/jobs", Some(json!({"name": "j", "endpoint_url": TARGET}))).await;
    assert_eq!(s, 201, "{job}");
    let (s, _) =
        with(&env, &raw, Method::POST, &format!("/v1/jobs/{}/trigger", job["id"].as_str().unwrap()), Some(json!({})))
            .await;
    assert_eq!(s, 201);
    let (s, v) = with(&env, &raw, Method::POST, "/v1/api-keys", Some(json!({"name": "k2", "scopes": []}))).await;
    assert_eq!(s, 201, "a full-access key may mint another: {v}");
}

#[tokio::test]
async fn revoked_keys_are_refused_at_once_in_every_api_process() {
    let env = TestEnv::start().await;
    let other = second_api(&env).await;
    let project = env.project().await;
    let (raw, id) = key(&env, &project, &["jobs:read"]).await;
    // Both processes have the key in their cache.
    for base in [env.base.as_str(), other.as_str()] {
        let (s, _) = call_as(&env, base, Some(&raw), &[], Method::GET, "/v1/jobs", None).await;
        assert_eq!(s, 200);
    }
    let (s, _) = env.delete(&format!("/v1/api-keys/{id}")).await;
    assert_eq!(s, 204);
    for base in [env.base.as_str(), other.as_str()] {
        let got = call_as(&env, base, Some(&raw), &[], Method::GET, "/v1/jobs", None).await;
        let p = assert_problem(401, got, 401);
        assert!(p["detail"].as_str().unwrap().contains("revoked"), "{p}");
    }
    let (_, v) = env.get(&format!("/v1/api-keys/{id}")).await;
    assert_eq!(v["status"], "revoked");
    assert!(v["revoked_at"].is_string());
    // Revoking again changes nothing.
    assert_eq!(env.delete(&format!("/v1/api-keys/{id}")).await.0, 204);
    // Unknown keys are refused too.
    let got = with(&env, "svc_not-a-key", Method::GET, "/v1/jobs", None).await;
    assert_problem(401, got, 401);
}

#[tokio::test]
async fn expiry_is_bounded_by_the_project_lifetime() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (s, v) = env.patch(&format!("/v1/projects/{project}/settings"), json!({"max_key_lifetime_days": 2})).await;
    assert_eq!(s, 200, "{v}");
    let too_late = (Utc::now() + chrono::Duration::days(3)).to_rfc3339();
    let got = env
        .post("/v1/api-keys", json!({"project_id": project, "name": "x", "scopes": [], "expires_at": too_late}))
        .await;
    assert_problem(422, got, 422);
    let past = (Utc::now() - chrono::Duration::minutes(1)).to_rfc3339();
    let got =
        env.post("/v1/api-keys", json!({"project_id": project, "name": "x", "scopes": [], "expires_at": past})).await;
    assert_problem(422, got, 422);
    let (s, v) = env.post("/v1/api-keys", json!({"project_id": project, "name": "x", "scopes": []})).await;
    assert_eq!(s, 201);
    let expires: DateTime<Utc> = v["expires_at"].as_str().unwrap().parse().unwrap();
    let expected = Utc::now() + chrono::Duration::days(2);
    assert!((expires - expected).num_seconds().abs() < 60, "defaults to the maximum lifetime: {expires}");

    // An expired key is refused (it has never been used, so nothing is cached).
    sqlx::query("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(v["id"].as_str().unwrap())
        .execute(&env.pool)
        .await
        .unwrap();
    let got = with(&env, v["key"].as_str().unwrap(), Method::GET, "/v1/jobs", None).await;
    let p = assert_problem(401, got, 401);
    assert!(p["detail"].as_str().unwrap().contains("expired"), "{p}");
}

#[tokio::test]
async fn rotation_keeps_the_old_key_for_its_grace_period() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (old, old_id) = key(&env, &project, &["jobs:read"]).await;
    assert_eq!(with(&env, &old, Method::GET, "/v1/jobs", None).await.0, 200);
    let (s, new) =
        env.post(&format!("/v1/api-keys/{old_id}/rotate"), json!({"name": "ci v2", "grace_period_seconds": 1})).await;
    assert_eq!(s, 201, "{new}");
    let raw_new = new["key"].as_str().unwrap();
    assert_eq!(new["scopes"], json!(["jobs:read"]));
    assert_eq!(new["name"], "ci v2");
    let (_, old_view) = env.get(&format!("/v1/api-keys/{old_id}")).await;
    assert_eq!(old_view["replaced_by_key_id"], new["id"]);
    assert_eq!(old_view["status"], "rotating");
    assert!(old_view["grace_expires_at"].is_string());
    assert_eq!(with(&env, raw_new, Method::GET, "/v1/jobs", None).await.0, 200);
    assert_eq!(with(&env, &old, Method::GET, "/v1/jobs", None).await.0, 200, "inside the grace period");
    // A replaced key cannot be rotated again.
    assert_problem(409, env.post(&format!("/v1/api-keys/{old_id}/rotate"), json!({})).await, 409);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let p = assert_problem(401, with(&env, &old, Method::GET, "/v1/jobs", None).await, 401);
    assert!(p["detail"].as_str().unwrap().contains("grace"), "{p}");
    assert_eq!(with(&env, raw_new, Method::GET, "/v1/jobs", None).await.0, 200);

    // Without a grace period the old key stops at once.
    let (s, newer) = env.post(&format!("/v1/api-keys/{}/rotate", new["id"].as_str().unwrap()), json!({})).await;
    assert_eq!(s, 201);
    assert_problem(401, with(&env, raw_new, Method::GET, "/v1/jobs", None).await, 401);
    assert_eq!(with(&env, newer["key"].as_str().unwrap(), Method::GET, "/v1/jobs", None).await.0, 200);
    assert_problem(
        422,
        env.post(
            &format!("/v1/api-keys/{}/rotate", newer["id"].as_str().unwrap()),
            json!({"grace_period_seconds": -1}),
        )
        .await,
        422,
    );
}

#[tokio::test]
async fn last_used_at_is_kept_without_a_write_per_request() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (raw, id) = key(&env, &project, &["jobs:read"]).await;
    let last_used = || async {
        sqlx::query_scalar::<_, Option<DateTime<Utc>>>("SELECT last_used_at FROM api_keys WHERE id = $1")
            .bind(&id)
            .fetch_one(&env.pool)
            .await
            .unwrap()
    };
    assert!(last_used().await.is_none());
    assert_eq!(with(&env, &raw, Method::GET, "/v1/jobs", None).await.0, 200);
    let first = eventually(Duration::from_secs(5), || async { last_used().await }).await;
    for _ in 0..5 {
        assert_eq!(with(&env, &raw, Method::GET, "/v1/jobs", None).await.0, 200);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(last_used().await, Some(first), "written at most once a minute per key");
    let (_, v) = env.get(&format!("/v1/api-keys/{id}")).await;
    assert!(v["last_used_at"].is_string(), "{v}");
}

#[tokio::test]
async fn nobody_grants_more_than_they_hold() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (manager, manager_id) = key(&env, &project, &["api-keys:manage", "jobs:read"]).await;
    let (_, full_id) = key(&env, &project, &[]).await;
    let mint = |scopes: serde_json::Value| {
        let m = manager.clone();
        let env = &env;
        async move { with(env, &m, Method::POST, "/v1/api-keys", Some(json!({"name": "x", "scopes": scopes}))).await }
    };
    assert_problem(403, mint(json!(["jobs:write"])).await, 403);
    assert_problem(403, mint(json!([])).await, 403);
    assert_problem(403, mint(json!(["*"])).await, 403);
    let (s, v) = mint(json!(["jobs:read"])).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["created_by"], format!("apikey:{manager_id}"), "the actor of a key is apikey:<key_id>");
    let got = with(&env, &manager, Method::POST, &format!("/v1/api-keys/{full_id}/rotate"), Some(json!({}))).await;
    assert_problem(403, got, 403);
}
