//! OIDC bearer tokens: verification, claims to actor and project, member roles.

use std::time::Duration;

use chrono::Utc;
use jsonwebtoken::Algorithm;
use reqwest::Method;
use serde_json::{json, Value};

use super::{call_as, eventually, TARGET};
use crate::harness::{assert_problem, TestEnv, SECRET};
pub(crate) use crate::support::oidc::{fixture, member, oidc_env, token_with, user_token, AUDIENCE, ISSUER};

#[tokio::test]
async fn rs256_token_acts_as_its_member() {
    let env = oidc_env().await;
    let project = env.project().await;
    member(&env, &project, "user-ada", "operator").await;
    let token = user_token("user-ada", Some(&project));
    let as_ada = |m: Method, path: &str, body: Option<Value>| {
        let (env, token, path) = (&env, token.clone(), path.to_string());
        async move { call_as(env, &env.base, Some(&token), &[("x-actor-id", "someone-else")], m, &path, body).await }
    };
    let (s, job) = as_ada(Method::POST, "/v1/jobs", Some(json!({"name": "j", "endpoint_url": TARGET}))).await;
    assert_eq!(s, 201, "{job}");
    assert_eq!(job["created_by"], "user-ada", "the token's sub is the actor; X-Actor-Id is not trusted");
    assert_eq!(job["project_id"], project.as_str());
    // An operator has no api-keys:manage.
    let got = as_ada(Method::POST, "/v1/api-keys", Some(json!({"name": "k", "scopes": []}))).await;
    assert_problem(403, got, 403);
    // The profile is recorded off the request path.
    let row: (Option<String>, Option<String>) = eventually(Duration::from_secs(5), || async {
        sqlx::query_as("SELECT email, name FROM known_actors WHERE id = 'user-ada'")
            .fetch_optional(&env.pool)
            .await
            .unwrap()
    })
    .await;
    assert_eq!(row, (Some("user-ada@example.test".into()), Some("Ada Lovelace".into())));
}

#[tokio::test]
async fn es256_key_from_a_file() {
    let env = TestEnv::start_with(|c| {
        c.oidc_issuer = Some(ISSUER.into());
        c.oidc_audience = Some(AUDIENCE.into());
        c.oidc_public_key = Some(fixture("ec_public.pem"));
    })
    .await;
    let project = env.project().await;
    member(&env, &project, "user-ec", "viewer").await;
    let token = token_with("ec_private.pem", Algorithm::ES256, json!({"sub": "user-ec", "project_id": project}));
    let (s, v) = call_as(&env, &env.base, Some(&token), &[], Method::GET, "/v1/jobs", None).await;
    assert_eq!(s, 200, "{v}");
    let got = call_as(
        &env,
        &env.base,
        Some(&token),
        &[],
        Method::POST,
        "/v1/jobs",
        Some(json!({"name": "j", "endpoint_url": TARGET})),
    )
    .await;
    assert_problem(403, got, 403);
    // An RS256 token is not accepted by an ES256 verifier.
    let rs = user_token("user-ec", Some(&project));
    assert_problem(401, call_as(&env, &env.base, Some(&rs), &[], Method::GET, "/v1/jobs", None).await, 401);
}

#[tokio::test]
async fn bad_tokens_are_401() {
    let env = oidc_env().await;
    let project = env.project().await;
    member(&env, &project, "u1", "admin").await;
    let now = Utc::now().timestamp();
    let good = user_token("u1", Some(&project));
    assert_eq!(call_as(&env, &env.base, Some(&good), &[], Method::GET, "/v1/jobs", None).await.0, 200);
    let cases = [
        (
            "wrong issuer",
            token_with(
                "rsa_private.pem",
                Algorithm::RS256,
                json!({"sub": "u1", "project_id": project, "iss": "https://evil.test"}),
            ),
        ),
        (
            "wrong audience",
            token_with(
                "rsa_private.pem",
                Algorithm::RS256,
                json!({"sub": "u1", "project_id": project, "aud": "other"}),
            ),
        ),
        (
            "wrong signature",
            token_with("other_rsa_private.pem", Algorithm::RS256, json!({"sub": "u1", "project_id": project})),
        ),
        (
            "expired",
            token_with(
                "rsa_private.pem",
                Algorithm::RS256,
                json!({"sub": "u1", "project_id": project, "exp": now - 3600}),
            ),
        ),
        ("no sub", token_with("rsa_private.pem", Algorithm::RS256, json!({"project_id": project}))),
        ("garbage", "not.a.token".to_string()),
    ];
    for (what, token) in cases {
        let got = call_as(&env, &env.base, Some(&token), &[], Method::GET, "/v1/jobs", None).await;
        assert_eq!(got.0, 401, "{what}: {}", got.1);
        assert_problem(401, got, 401);
    }
    // Without OIDC configured, a JWT is just an invalid credential.
    let plain = TestEnv::start().await;
    assert_problem(401, call_as(&plain, &plain.base, Some(&good), &[], Method::GET, "/v1/jobs", None).await, 401);
}

#[tokio::test]
async fn the_project_comes_from_the_claim_or_the_header() {
    let env = oidc_env().await;
    let a = env.project().await;
    let b = env.project().await;
    member(&env, &a, "u2", "viewer").await;
    let header_only = user_token("u2", None);
    let (s, v) =
        call_as(&env, &env.base, Some(&header_only), &[("x-project-id", &a)], Method::GET, "/v1/jobs", None).await;
    assert_eq!(s, 200, "{v}");
    let p = assert_problem(
        403,
        call_as(&env, &env.base, Some(&header_only), &[], Method::GET, "/v1/jobs", None).await,
        403,
    );
    assert!(p["detail"].as_str().unwrap().contains("project"), "{p}");
    // Not a member of b.
    let got =
        call_as(&env, &env.base, Some(&header_only), &[("x-project-id", &b)], Method::GET, "/v1/jobs", None).await;
    assert_problem(403, got, 403);
    let claim_a = user_token("u2", Some(&a));
    let got = call_as(&env, &env.base, Some(&claim_a), &[("x-project-id", &b)], Method::GET, "/v1/jobs", None).await;
    assert_problem(403, got, 403);
    // A job of b is not found through a's token.
    let job_b = env.job_in(&b, TARGET, json!({})).await;
    let path = format!("/v1/jobs/{}", job_b["id"].as_str().unwrap());
    assert_problem(404, call_as(&env, &env.base, Some(&claim_a), &[], Method::GET, &path, None).await, 404);
}

#[tokio::test]
async fn oidc_identity_can_travel_with_the_internal_secret() {
    let env = oidc_env().await;
    let project = env.project().await;
    let token = user_token("gateway-user", None);
    let headers = [("x-internal-secret", SECRET), ("x-project-id", project.as_str())];
    let (s, job) = call_as(
        &env,
        &env.base,
        Some(&token),
        &headers,
        Method::POST,
        "/v1/jobs",
        Some(json!({"name": "j", "endpoint_url": TARGET})),
    )
    .await;
    assert_eq!(s, 201, "full access without membership: {job}");
    assert_eq!(job["created_by"], "gateway-user");
    let bad = token_with("other_rsa_private.pem", Algorithm::RS256, json!({"sub": "x"}));
    let got = call_as(&env, &env.base, Some(&bad), &headers, Method::GET, "/v1/jobs", None).await;
    assert_problem(401, got, 401);
}
