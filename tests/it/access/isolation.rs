//! A credential of one project never reaches another project's resources:
//! 404 by id, 403 on another project's list or create, for API keys and
//! OIDC tokens alike.

use reqwest::Method;
use serde_json::{json, Value};

use super::oidc::{member, oidc_env, user_token};
use super::{call_as, key, TARGET};

#[tokio::test]
async fn one_projects_credentials_never_reach_another() {
    let env = oidc_env().await;
    let a = env.project().await;
    let b = env.project().await;
    // Project b's resources.
    let job = env.job_in(&b, TARGET, json!({})).await;
    let job_id = job["id"].as_str().unwrap().to_string();
    let run = env.trigger(&job_id, json!({})).await;
    let run_id = run["id"].as_str().unwrap().to_string();
    let (_, group) = env.post("/v1/job-groups", json!({"project_id": b, "name": "g", "slug": "g"})).await;
    let group_id = group["id"].as_str().unwrap().to_string();
    let (_, key_b) = key(&env, &b, &["jobs:read"]).await;
    let (_, role) = env.post("/v1/roles", json!({"project_id": b, "name": "r", "permissions": ["jobs:read"]})).await;
    let role_id = role["id"].as_str().unwrap().to_string();
    member(&env, &b, "bea", "viewer").await;
    let (_, rp) = env
        .post(
            "/v1/resource-policies",
            json!({"project_id": b, "name": "p", "effect": "deny",
        "principal_type": "role", "principal_id": "viewer", "actions": ["jobs:read"], "resource_type": "job"}),
        )
        .await;
    let rp_id = rp["id"].as_str().unwrap().to_string();
    let (_, tp) = env.post("/v1/tag-policies", json!({"project_id": b, "required_keys": ["team"]})).await;
    let tp_id = tp["id"].as_str().unwrap().to_string();

    // Credentials of project a with every permission.
    let (key_a, _) = key(&env, &a, &[]).await;
    member(&env, &a, "ann", "admin").await;
    let oidc_a = user_token("ann", Some(&a));

    let by_id: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/v1/projects/{b}"), None),
        (Method::GET, format!("/v1/projects/{b}/settings"), None),
        (Method::GET, format!("/v1/jobs/{job_id}"), None),
        (Method::PATCH, format!("/v1/jobs/{job_id}"), Some(json!({"name": "x"}))),
        (Method::DELETE, format!("/v1/jobs/{job_id}"), None),
        (Method::GET, format!("/v1/jobs/{job_id}/versions"), None),
        (Method::POST, format!("/v1/jobs/{job_id}/trigger"), Some(json!({}))),
        (Method::GET, format!("/v1/runs/{run_id}"), None),
        (Method::POST, format!("/v1/runs/{run_id}/cancel"), Some(json!({}))),
        (Method::GET, format!("/v1/job-groups/{group_id}"), None),
        (Method::PATCH, format!("/v1/job-groups/{group_id}"), Some(json!({"name": "x"}))),
        (Method::POST, format!("/v1/job-groups/{group_id}/pause-all"), Some(json!({}))),
        (Method::GET, format!("/v1/job-groups/{group_id}/jobs"), None),
        (Method::GET, format!("/v1/job-groups/{group_id}/stats"), None),
        (Method::DELETE, format!("/v1/job-groups/{group_id}"), None),
        (Method::GET, format!("/v1/api-keys/{key_b}"), None),
        (Method::DELETE, format!("/v1/api-keys/{key_b}"), None),
        (Method::POST, format!("/v1/api-keys/{key_b}/rotate"), Some(json!({}))),
        (Method::GET, format!("/v1/roles/{role_id}"), None),
        (Method::PATCH, format!("/v1/roles/{role_id}"), Some(json!({"name": "y"}))),
        (Method::DELETE, format!("/v1/roles/{role_id}"), None),
        (Method::DELETE, "/v1/members/bea".to_string(), None),
        (Method::GET, format!("/v1/resource-policies/{rp_id}"), None),
        (Method::PATCH, format!("/v1/resource-policies/{rp_id}"), Some(json!({"name": "z"}))),
        (Method::DELETE, format!("/v1/resource-policies/{rp_id}"), None),
        (Method::GET, format!("/v1/tag-policies/{tp_id}"), None),
        (Method::DELETE, format!("/v1/tag-policies/{tp_id}"), None),
    ];
    let lists: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/v1/jobs?project_id={b}"), None),
        (Method::GET, format!("/v1/runs?project_id={b}"), None),
        (Method::GET, format!("/v1/job-groups?project_id={b}"), None),
        (Method::GET, format!("/v1/api-keys?project_id={b}"), None),
        (Method::GET, format!("/v1/roles?project_id={b}"), None),
        (Method::GET, format!("/v1/members?project_id={b}"), None),
        (Method::GET, format!("/v1/resource-policies?project_id={b}"), None),
        (Method::GET, format!("/v1/tag-policies?project_id={b}"), None),
        (Method::GET, format!("/v1/audit-events?project_id={b}"), None),
        (Method::DELETE, format!("/v1/members/bea?project_id={b}"), None),
        (Method::POST, "/v1/jobs".into(), Some(json!({"project_id": b, "name": "x", "endpoint_url": TARGET}))),
        (Method::POST, "/v1/job-groups".into(), Some(json!({"project_id": b, "name": "x", "slug": "x"}))),
        (Method::POST, "/v1/api-keys".into(), Some(json!({"project_id": b, "name": "x", "scopes": []}))),
        (Method::POST, "/v1/roles".into(), Some(json!({"project_id": b, "name": "x", "permissions": []}))),
        (Method::POST, "/v1/members".into(), Some(json!({"project_id": b, "user_id": "ann", "role_id": "admin"}))),
        (
            Method::POST,
            "/v1/members/bulk".into(),
            Some(json!({"project_id": b, "members": [{"user_id": "ann", "role_id": "admin"}]})),
        ),
        (Method::POST, "/v1/tag-policies".into(), Some(json!({"project_id": b, "required_keys": ["x"]}))),
    ];
    let mut problems = Vec::new();
    for (who, token) in [("API key", key_a.as_str()), ("OIDC token", oidc_a.as_str())] {
        for (want, cases) in [(404, &by_id), (403, &lists)] {
            for (m, path, body) in cases.iter() {
                let (s, v) = call_as(&env, &env.base, Some(token), &[], m.clone(), path, body.clone()).await;
                if s != want {
                    problems.push(format!("{who}: {m} {path}: got {s}, want {want}: {v}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Nothing of b changed.
    let (_, still) = env.get(&format!("/v1/jobs/{job_id}")).await;
    assert_eq!(still["name"], job["name"]);
    let (_, r) = env.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(r["status"], run["status"]);
    let (s, _) = env.get(&format!("/v1/job-groups/{group_id}")).await;
    assert_eq!(s, 200);
    let (_, members) = env.get(&format!("/v1/members?project_id={b}")).await;
    assert_eq!(members["data"].as_array().unwrap().len(), 1);
}
