//! Credentials (two findings of a penetration test): a key manager cannot
//! revoke a stronger key, and an OIDC token is refused before its `nbf`.

use jsonwebtoken::Algorithm;
use reqwest::Method;
use serde_json::json;

use crate::harness::{assert_problem, TestEnv};
use crate::support::access::{call_as, key, with};
use crate::support::oidc::{member, oidc_env, token_with};

#[tokio::test]
async fn a_key_manager_cannot_revoke_a_key_with_scopes_it_could_not_grant() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (manager, _) = key(&env, &project, &["api-keys:manage"]).await;
    let (_, strong) = key(&env, &project, &["*"]).await;
    let (_, weak) = key(&env, &project, &["api-keys:manage"]).await;
    let p =
        assert_problem(403, with(&env, &manager, Method::DELETE, &format!("/v1/api-keys/{strong}"), None).await, 403);
    assert!(p["detail"].as_str().unwrap().contains("fewer scopes"), "{p}");
    let (_, v) = env.get(&format!("/v1/api-keys/{strong}")).await;
    assert_eq!(v["status"], "active", "the refused revoke changed nothing: {v}");
    // A key within the caller's own scopes it may revoke.
    assert_eq!(with(&env, &manager, Method::DELETE, &format!("/v1/api-keys/{weak}"), None).await.0, 204);
}

#[tokio::test]
async fn an_oidc_token_is_refused_before_its_not_before_time() {
    let env = oidc_env().await;
    let project = env.project().await;
    member(&env, &project, "u1", "viewer").await;
    let now = chrono::Utc::now().timestamp();
    let claims = |nbf: i64| json!({"sub": "u1", "project_id": project, "nbf": nbf});
    let later = token_with("rsa_private.pem", Algorithm::RS256, claims(now + 3600));
    let got = call_as(&env, &env.base, Some(&later), &[], Method::GET, "/v1/jobs", None).await;
    let p = assert_problem(401, got, 401);
    assert!(p["detail"].as_str().unwrap().contains("not valid yet"), "{p}");
    let valid = token_with("rsa_private.pem", Algorithm::RS256, claims(now - 10));
    let got = call_as(&env, &env.base, Some(&valid), &[], Method::GET, "/v1/jobs", None).await;
    assert_eq!(got.0, 200, "{}", got.1);
}

#[tokio::test]
async fn a_role_cannot_pass_for_a_system_role() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    for name in ["ad\u{200B}min", "\u{0430}dmin", "\u{FF56}\u{FF49}\u{FF45}\u{FF57}\u{FF45}\u{FF52}"] {
        let body = json!({"project_id": project, "name": name, "permissions": ["jobs:read"]});
        let p = assert_problem(422, env.post("/v1/roles", body).await, 422);
        assert_eq!(p["errors"][0]["location"], "body.name", "{p}");
    }
    let (_, roles) = env.get(&format!("/v1/roles?project_id={project}")).await;
    let custom = roles["data"].as_array().unwrap().iter().filter(|r| r["system"] == false).count();
    assert_eq!(custom, 0, "nothing was created: {roles}");
}
