//! Roles and members: system and custom roles, inheritance, and the
//! permission check of a user (docs/contract.md, "Access control").

use reqwest::Method;
use serde_json::{json, Value};

use super::oidc::{member, oidc_env, user_token};
use super::{call_as, key, second_api, with, TARGET};
use crate::harness::{assert_problem, TestEnv};

#[tokio::test]
async fn system_roles_are_built_in_and_immutable() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (s, v) = env.get(&format!("/v1/roles?project_id={project}")).await;
    assert_eq!(s, 200, "{v}");
    let perms = |id: &str| -> Value {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .map(|r| r["permissions"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(perms("admin"), json!(["*"]));
    assert_eq!(perms("viewer"), json!(["jobs:read", "runs:read", "workflows:read", "stats:read"]));
    assert_eq!(
        perms("triggerer"),
        json!(["jobs:read", "jobs:trigger", "runs:read", "workflows:read", "workflows:trigger"])
    );
    assert_eq!(
        perms("operator"),
        json!([
            "jobs:read",
            "jobs:write",
            "jobs:trigger",
            "runs:read",
            "runs:write",
            "workflows:read",
            "workflows:write",
            "workflows:trigger",
            "secrets:read",
            "stats:read",
            "rbac:manage"
        ])
    );
    let (s, viewer) = env.get("/v1/roles/viewer").await;
    assert_eq!((s, viewer["system"].as_bool()), (200, Some(true)));
    assert_problem(403, env.patch("/v1/roles/admin", json!({"permissions": ["jobs:read"]})).await, 403);
    assert_problem(403, env.delete("/v1/roles/viewer").await, 403);
    let (_, after) = env.get("/v1/roles/admin").await;
    assert_eq!(after["permissions"], json!(["*"]));
}

#[tokio::test]
async fn custom_roles_inherit_without_cycles() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let create = |body: Value| {
        let mut b = body;
        b["project_id"] = json!(project);
        let env = &env;
        async move { env.post("/v1/roles", b).await }
    };
    let (s, deployer) = create(
        json!({"name": "deployer", "description": "ships", "permissions": ["jobs:trigger"], "inherits": "viewer"}),
    )
    .await;
    assert_eq!(s, 201, "{deployer}");
    let deployer_id = deployer["id"].as_str().unwrap().to_string();
    let (s, lead) = create(json!({"name": "lead", "permissions": ["runs:write"], "inherits": deployer_id})).await;
    assert_eq!(s, 201, "{lead}");
    let lead_id = lead["id"].as_str().unwrap().to_string();

    let (_, with_lineage) = env.get(&format!("/v1/roles/{lead_id}?include_lineage=true")).await;
    let chain: Vec<&str> =
        with_lineage["lineage"].as_array().unwrap().iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(chain, vec![lead_id.as_str(), deployer_id.as_str(), "viewer"]);
    let effective = with_lineage["effective_permissions"].as_array().unwrap();
    for p in ["runs:write", "jobs:trigger", "jobs:read", "stats:read"] {
        assert!(effective.contains(&json!(p)), "{p} in {effective:?}");
    }
    let (_, plain) = env.get(&format!("/v1/roles/{lead_id}")).await;
    assert!(plain.get("lineage").is_none());

    // Cycles and bad values.
    let p =
        assert_problem(422, env.patch(&format!("/v1/roles/{deployer_id}"), json!({"inherits": lead_id})).await, 422);
    assert!(p["detail"].as_str().unwrap().contains("cycle"), "{p}");
    assert_problem(422, env.patch(&format!("/v1/roles/{deployer_id}"), json!({"inherits": deployer_id})).await, 422);
    assert_problem(400, create(json!({"name": "x", "permissions": ["jobs:fly"]})).await, 400);
    assert_problem(422, create(json!({"name": "Admin", "permissions": []})).await, 422);
    assert_problem(409, create(json!({"name": "deployer", "permissions": []})).await, 409);
    assert_problem(422, create(json!({"name": "y", "permissions": [], "inherits": "role_nope"})).await, 422);
    let other = env.project().await;
    let (_, foreign) = env.post("/v1/roles", json!({"project_id": other, "name": "theirs", "permissions": []})).await;
    assert_problem(422, create(json!({"name": "z", "permissions": [], "inherits": foreign["id"]})).await, 422);

    // Update, then delete in dependency order.
    let (s, v) = env
        .patch(
            &format!("/v1/roles/{deployer_id}"),
            json!({"permissions": ["jobs:trigger", "runs:read"], "description": null}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(v.get("description").is_none());
    assert_problem(409, env.delete(&format!("/v1/roles/{deployer_id}")).await, 409);
    member_in(&env, &project, "u1", &lead_id).await;
    assert_problem(409, env.delete(&format!("/v1/roles/{lead_id}")).await, 409);
    assert_eq!(env.delete(&format!("/v1/members/u1?project_id={project}")).await.0, 204);
    assert_eq!(env.delete(&format!("/v1/roles/{lead_id}")).await.0, 204);
    assert_eq!(env.delete(&format!("/v1/roles/{deployer_id}")).await.0, 204);
    assert_problem(404, env.get(&format!("/v1/roles/{deployer_id}")).await, 404);

    // Another project's credential does not see the role.
    let theirs_id = foreign["id"].as_str().unwrap();
    let (k, _) = key(&env, &project, &["rbac:manage"]).await;
    assert_problem(404, with(&env, &k, Method::GET, &format!("/v1/roles/{theirs_id}"), None).await, 404);
}

async fn member_in(env: &TestEnv, project: &str, user: &str, role: &str) {
    let (s, v) = env.post("/v1/members", json!({"project_id": project, "user_id": user, "role_id": role})).await;
    assert!(s == 201 || s == 200, "{v}");
}

#[tokio::test]
async fn members_are_assigned_changed_listed_and_removed() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let body = |user: &str, role: &str| json!({"project_id": project, "user_id": user, "role_id": role});
    let (s, m) = env.post("/v1/members", body("auth0|ada", "viewer")).await;
    assert_eq!(s, 201, "{m}");
    assert_eq!((m["user_id"].as_str(), m["role_id"].as_str()), (Some("auth0|ada"), Some("viewer")));
    let (s, _) = env.post("/v1/members", body("auth0|ada", "viewer")).await;
    assert_eq!(s, 200, "unchanged");
    let (s, m) = env.post("/v1/members", body("auth0|ada", "operator")).await;
    assert_eq!((s, m["role_id"].as_str()), (200, Some("operator")));
    assert_problem(422, env.post("/v1/members", body("bob", "role_missing")).await, 422);
    assert_problem(422, env.post("/v1/members", body("has space", "viewer")).await, 422);

    let (s, bulk) = env
        .post(
            "/v1/members/bulk",
            json!({"project_id": project, "members": [
                {"user_id": "bob", "role_id": "viewer"},
                {"user_id": "carol", "role_id": "nope"},
                {"user_id": "auth0|ada", "role_id": "admin"},
                {"user_id": "bob", "role_id": "viewer"}
            ]}),
        )
        .await;
    assert_eq!(s, 200, "{bulk}");
    let statuses: Vec<&str> =
        bulk["results"].as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, vec!["assigned", "error", "updated", "unchanged"]);
    assert!(bulk["results"][1]["error"].as_str().unwrap().contains("role"), "{bulk}");
    assert_eq!(bulk["results"][1]["index"], 1);
    assert_problem(422, env.post("/v1/members/bulk", json!({"project_id": project, "members": []})).await, 422);

    let (_, list) = env.get(&format!("/v1/members?project_id={project}")).await;
    let users: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["user_id"].as_str().unwrap()).collect();
    assert_eq!(users, vec!["auth0|ada", "bob"]);
    let (_, admins) = env.get(&format!("/v1/members?project_id={project}&role_id=admin")).await;
    assert_eq!(admins["data"].as_array().unwrap().len(), 1);
    assert_eq!(env.delete(&format!("/v1/members/bob?project_id={project}")).await.0, 204);
    assert_problem(404, env.delete(&format!("/v1/members/bob?project_id={project}")).await, 404);
}

#[tokio::test]
async fn member_changes_reach_every_api_process_at_once() {
    let env = oidc_env().await;
    let other = second_api(&env).await;
    let project = env.project().await;
    member(&env, &project, "dana", "viewer").await;
    let token = user_token("dana", Some(&project));
    let new_job = json!({"name": "j", "endpoint_url": TARGET});
    // Warm both processes' permission caches.
    for base in [env.base.as_str(), other.as_str()] {
        assert_eq!(call_as(&env, base, Some(&token), &[], Method::GET, "/v1/jobs", None).await.0, 200);
        let got = call_as(&env, base, Some(&token), &[], Method::POST, "/v1/jobs", Some(new_job.clone())).await;
        assert_problem(403, got, 403);
    }
    member(&env, &project, "dana", "operator").await;
    let (s, v) = call_as(&env, &other, Some(&token), &[], Method::POST, "/v1/jobs", Some(new_job.clone())).await;
    assert_eq!(s, 201, "the other process sees the new role at once: {v}");
    assert_eq!(env.delete(&format!("/v1/members/dana?project_id={project}")).await.0, 204);
    for base in [env.base.as_str(), other.as_str()] {
        let got = call_as(&env, base, Some(&token), &[], Method::GET, "/v1/jobs", None).await;
        assert_problem(403, got, 403);
    }
    // A role's change reaches its members at once too.
    let (_, role) =
        env.post("/v1/roles", json!({"project_id": project, "name": "readers", "permissions": ["jobs:read"]})).await;
    member(&env, &project, "dana", role["id"].as_str().unwrap()).await;
    assert_eq!(call_as(&env, &other, Some(&token), &[], Method::GET, "/v1/jobs", None).await.0, 200);
    let (s, _) =
        env.patch(&format!("/v1/roles/{}", role["id"].as_str().unwrap()), json!({"permissions": ["runs:read"]})).await;
    assert_eq!(s, 200);
    assert_problem(403, call_as(&env, &other, Some(&token), &[], Method::GET, "/v1/jobs", None).await, 403);
}

#[tokio::test]
async fn member_management_cannot_escalate() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (k, _) = key(&env, &project, &["rbac:manage", "jobs:read", "runs:read", "workflows:read", "stats:read"]).await;
    let assign = |role: &str| {
        let (env, k, role) = (&env, k.clone(), role.to_string());
        async move { with(env, &k, Method::POST, "/v1/members", Some(json!({"user_id": "eve", "role_id": role}))).await }
    };
    assert_problem(403, assign("admin").await, 403);
    assert_problem(403, assign("operator").await, 403);
    assert_eq!(assign("viewer").await.0, 201);
    let got =
        with(&env, &k, Method::POST, "/v1/roles", Some(json!({"name": "sneaky", "permissions": ["jobs:write"]}))).await;
    assert_problem(403, got, 403);
    let got = with(
        &env,
        &k,
        Method::POST,
        "/v1/roles",
        Some(json!({"name": "sneaky", "permissions": [], "inherits": "admin"})),
    )
    .await;
    assert_problem(403, got, 403);
    let (s, v) =
        with(&env, &k, Method::POST, "/v1/roles", Some(json!({"name": "fine", "permissions": ["jobs:read"]}))).await;
    assert_eq!(s, 201, "{v}");
    // An admin cannot be removed or demoted by a lesser credential.
    member_in(&env, &project, "root", "admin").await;
    assert_problem(403, with(&env, &k, Method::DELETE, "/v1/members/root", None).await, 403);
    let got = with(&env, &k, Method::POST, "/v1/members", Some(json!({"user_id": "root", "role_id": "viewer"}))).await;
    assert_problem(403, got, 403);
}
