//! Resource policies and tag policies.

use reqwest::Method;
use serde_json::{json, Value};

use super::oidc::{member, oidc_env, user_token};
use super::{call_as, key, with, TARGET};
use crate::harness::{assert_problem, TestEnv};

async fn policy(env: &TestEnv, body: Value) -> String {
    let (s, v) = env.post("/v1/resource-policies", body).await;
    assert_eq!(s, 201, "{v}");
    v["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn deny_wins_and_allow_narrows() {
    let env = oidc_env().await;
    let project = env.project().await;
    let prod = env.job_in(&project, TARGET, json!({"name": "prod job", "tags": {"env": "prod"}})).await;
    let dev = env.job_in(&project, TARGET, json!({"name": "dev job", "tags": {"env": "dev"}})).await;
    let (prod_id, dev_id) = (prod["id"].as_str().unwrap(), dev["id"].as_str().unwrap());
    let trigger = |id: &str| format!("/v1/jobs/{id}/trigger");
    let (k1, k1_id) = key(&env, &project, &[]).await;
    let (k2, k2_id) = key(&env, &project, &["jobs:read", "jobs:trigger"]).await;

    let deny = policy(
        &env,
        json!({"project_id": project, "name": "no prod triggers", "effect": "deny",
        "principal_type": "api_key", "principal_id": k1_id, "actions": ["jobs:trigger"], "resource_type": "job",
        "tag_selector": {"env": "prod"}}),
    )
    .await;
    assert_eq!(with(&env, &k1, Method::POST, &trigger(dev_id), Some(json!({}))).await.0, 201);
    let p = assert_problem(403, with(&env, &k1, Method::POST, &trigger(prod_id), Some(json!({}))).await, 403);
    assert!(p["detail"].as_str().unwrap().contains(&deny), "{p}");
    assert_eq!(with(&env, &k1, Method::GET, &format!("/v1/jobs/{prod_id}"), None).await.0, 200, "another action");
    assert_eq!(with(&env, &k2, Method::POST, &trigger(prod_id), Some(json!({}))).await.0, 201, "another principal");
    assert_eq!(env.post(&trigger(prod_id), json!({})).await.0, 201, "the internal secret is never subject to policies");
    // Job creation is matched by the new job's tags.
    let new_job =
        |env_tag: &str| json!({"name": format!("n-{env_tag}"), "endpoint_url": TARGET, "tags": {"env": env_tag}});
    let deny_create = policy(
        &env,
        json!({"project_id": project, "name": "no prod jobs", "effect": "deny",
        "principal_type": "api_key", "principal_id": k1_id, "actions": ["jobs:write"], "resource_type": "job",
        "tag_selector": {"env": "prod"}}),
    )
    .await;
    assert_problem(403, with(&env, &k1, Method::POST, "/v1/jobs", Some(new_job("prod"))).await, 403);
    assert_eq!(with(&env, &k1, Method::POST, "/v1/jobs", Some(new_job("dev"))).await.0, 201);

    // An allow policy confines k2 to the dev job.
    policy(
        &env,
        json!({"project_id": project, "name": "dev only", "effect": "allow", "principal_type": "api_key",
        "principal_id": k2_id, "actions": ["*"], "resource_type": "job", "resource_ids": [dev_id]}),
    )
    .await;
    assert_problem(403, with(&env, &k2, Method::POST, &trigger(prod_id), Some(json!({}))).await, 403);
    assert_problem(403, with(&env, &k2, Method::GET, &format!("/v1/jobs/{prod_id}"), None).await, 403);
    assert_eq!(with(&env, &k2, Method::POST, &trigger(dev_id), Some(json!({}))).await.0, 201);
    // Deny wins over allow.
    policy(
        &env,
        json!({"project_id": project, "name": "allow prod", "effect": "allow", "principal_type": "api_key",
        "principal_id": k1_id, "actions": ["jobs:trigger"], "resource_type": "job", "resource_ids": [prod_id, dev_id]}),
    )
    .await;
    assert_problem(403, with(&env, &k1, Method::POST, &trigger(prod_id), Some(json!({}))).await, 403);
    // Deleting the deny takes effect at once.
    assert_eq!(env.delete(&format!("/v1/resource-policies/{deny}")).await.0, 204);
    assert_eq!(with(&env, &k1, Method::POST, &trigger(prod_id), Some(json!({}))).await.0, 201);
    assert_eq!(env.delete(&format!("/v1/resource-policies/{deny_create}")).await.0, 204);

    // Role and member principals (OIDC users), on groups and runs.
    member(&env, &project, "olga", "operator").await;
    let olga = user_token("olga", Some(&project));
    let (_, group) = env.post("/v1/job-groups", json!({"project_id": project, "name": "g", "slug": "g"})).await;
    let group_path = format!("/v1/job-groups/{}", group["id"].as_str().unwrap());
    policy(
        &env,
        json!({"project_id": project, "name": "frozen group", "effect": "deny", "principal_type": "role",
        "principal_id": "operator", "actions": ["jobs:write"], "resource_type": "job_group",
        "resource_ids": [group["id"]]}),
    )
    .await;
    let got = call_as(&env, &env.base, Some(&olga), &[], Method::PATCH, &group_path, Some(json!({"name": "h"}))).await;
    assert_problem(403, got, 403);
    assert_eq!(call_as(&env, &env.base, Some(&olga), &[], Method::GET, &group_path, None).await.0, 200);
    let (_, kept) = env.post(&trigger(dev_id), json!({"tags": {"keep": "yes"}})).await;
    let (_, other) = env.post(&trigger(dev_id), json!({})).await;
    policy(
        &env,
        json!({"project_id": project, "name": "keep", "effect": "deny", "principal_type": "member",
        "principal_id": "olga", "actions": ["runs:write"], "resource_type": "run", "tag_selector": {"keep": "yes"}}),
    )
    .await;
    let cancel = |run: &Value| format!("/v1/runs/{}/cancel", run["id"].as_str().unwrap());
    assert_problem(
        403,
        call_as(&env, &env.base, Some(&olga), &[], Method::POST, &cancel(&kept), Some(json!({}))).await,
        403,
    );
    assert_eq!(call_as(&env, &env.base, Some(&olga), &[], Method::POST, &cancel(&other), Some(json!({}))).await.0, 200);
}

#[tokio::test]
async fn resource_policy_crud() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (_, key_id) = key(&env, &project, &["jobs:read"]).await;
    let base = json!({"project_id": project, "name": "p", "effect": "deny", "principal_type": "api_key",
        "principal_id": key_id, "actions": ["jobs:read"], "resource_type": "job"});
    let with_field = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    assert_problem(422, env.post("/v1/resource-policies", with_field("effect", json!("maybe"))).await, 422);
    assert_problem(422, env.post("/v1/resource-policies", with_field("resource_type", json!("planet"))).await, 422);
    assert_problem(422, env.post("/v1/resource-policies", with_field("principal_id", json!("key_nope"))).await, 422);
    assert_problem(422, env.post("/v1/resource-policies", with_field("actions", json!([]))).await, 422);
    assert_problem(400, env.post("/v1/resource-policies", with_field("actions", json!(["jobs:fly"]))).await, 400);
    let id = policy(&env, base.clone()).await;
    let (_, list) = env.get(&format!("/v1/resource-policies?project_id={project}")).await;
    assert_eq!(list["data"][0]["id"], id.as_str());
    let (s, v) = env
        .patch(&format!("/v1/resource-policies/{id}"), json!({"effect": "allow", "tag_selector": {"team": "a"}}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!((v["effect"].as_str(), v["tag_selector"]["team"].as_str()), (Some("allow"), Some("a")));
    assert_problem(
        422,
        env.patch(&format!("/v1/resource-policies/{id}"), json!({"principal_type": "robot"})).await,
        422,
    );
    let other = env.project().await;
    let (k_other, _) = key(&env, &other, &["rbac:manage"]).await;
    assert_problem(404, with(&env, &k_other, Method::GET, &format!("/v1/resource-policies/{id}"), None).await, 404);
    assert_problem(404, with(&env, &k_other, Method::DELETE, &format!("/v1/resource-policies/{id}"), None).await, 404);
    assert_eq!(env.delete(&format!("/v1/resource-policies/{id}")).await.0, 204);
    assert_problem(404, env.delete(&format!("/v1/resource-policies/{id}")).await, 404);
}

#[tokio::test]
async fn tag_policies_govern_job_tags() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (s, tp) = env
        .post(
            "/v1/tag-policies",
            json!({"project_id": project, "required_keys": ["team"], "allowed_values": {"env": ["dev", "prod"]}}),
        )
        .await;
    assert_eq!(s, 201, "{tp}");
    assert_eq!(tp["resource_type"], "job");
    let tp_id = tp["id"].as_str().unwrap();
    let names = std::sync::atomic::AtomicUsize::new(0);
    let job = |tags: Value| {
        let n = names.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        json!({"project_id": project, "name": format!("job {n}"), "endpoint_url": TARGET, "tags": tags})
    };
    let p = assert_problem(422, env.post("/v1/jobs", job(json!({"env": "dev"}))).await, 422);
    assert_eq!(p["errors"][0]["location"], "body.tags/team", "{p}");
    let p = assert_problem(422, env.post("/v1/jobs", job(json!({"team": "a", "env": "qa"}))).await, 422);
    assert_eq!(p["errors"][0]["value"], "qa", "{p}");
    let (s, created) = env.post("/v1/jobs", job(json!({"team": "a", "env": "prod"}))).await;
    assert_eq!(s, 201, "{created}");
    let path = format!("/v1/jobs/{}", created["id"].as_str().unwrap());
    assert_problem(422, env.patch(&path, json!({"tags": {"env": "prod"}})).await, 422);
    assert_eq!(env.patch(&path, json!({"tags": {"team": "b"}})).await.0, 200);

    assert_problem(422, env.post("/v1/tag-policies", json!({"project_id": project})).await, 422);
    assert_problem(
        422,
        env.post("/v1/tag-policies", json!({"project_id": project, "resource_type": "cat", "required_keys": ["a"]}))
            .await,
        422,
    );
    let (_, list) = env.get(&format!("/v1/tag-policies?project_id={project}")).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    let (s, v) = env.patch(&format!("/v1/tag-policies/{tp_id}"), json!({"required_keys": []})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(env.post("/v1/jobs", job(json!({}))).await.0, 201, "team no longer required");
    assert_eq!(env.delete(&format!("/v1/tag-policies/{tp_id}")).await.0, 204);
    assert_eq!(env.post("/v1/jobs", job(json!({"env": "qa"}))).await.0, 201);
    assert_problem(404, env.get(&format!("/v1/tag-policies/{tp_id}")).await, 404);
}
