//! Audit events (docs/contract.md, "Audit events") and GET /v1/audit-events.

use reqwest::Method;
use serde_json::{json, Value};

use super::{call_as, key, with, TARGET};
use crate::harness::{assert_problem, TestEnv, SECRET};

fn actions(page: &Value) -> Vec<String> {
    page["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn mutations_are_recorded_with_actor_resource_and_request_id() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (raw, key_id) = key(&env, &project, &[]).await;
    let (s, job) = call_as(
        &env,
        &env.base,
        Some(&raw),
        &[("x-request-id", "req-audit-1")],
        Method::POST,
        "/v1/jobs",
        Some(json!({"name": "j", "endpoint_url": TARGET})),
    )
    .await;
    assert_eq!(s, 201, "{job}");
    let job_id = job["id"].as_str().unwrap();
    let (s, events) = with(&env, &raw, Method::GET, "/v1/audit-events?action=job.created", None).await;
    assert_eq!(s, 200, "{events}");
    let e = &events["data"][0];
    assert_eq!(e["project_id"], project.as_str());
    assert_eq!(e["actor_id"], format!("apikey:{key_id}"));
    assert_eq!(e["actor_type"], "api_key");
    assert_eq!(e["resource_type"], "job");
    assert_eq!(e["resource_id"], job_id);
    assert_eq!(e["request_id"], "req-audit-1");
    assert!(e["created_at"].is_string() && e["id"].is_string());

    // Without a client request id, the one the server answered with is recorded.
    let resp = env
        .http
        .patch(format!("{}/v1/jobs/{job_id}", env.base))
        .bearer_auth(&raw)
        .json(&json!({"description": "x"}))
        .send()
        .await
        .unwrap();
    let answered = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(resp.status(), 200);
    let (_, updated) = with(&env, &raw, Method::GET, "/v1/audit-events?action=job.updated", None).await;
    assert_eq!(updated["data"][0]["request_id"], answered.as_str());

    let (_, run) = with(&env, &raw, Method::POST, &format!("/v1/jobs/{job_id}/trigger"), Some(json!({}))).await;
    let (s, _) =
        with(&env, &raw, Method::POST, &format!("/v1/runs/{}/cancel", run["id"].as_str().unwrap()), Some(json!({})))
            .await;
    assert_eq!(s, 200);
    let (s, _) = call_as(
        &env,
        &env.base,
        Some(SECRET),
        &[("x-actor-id", "root")],
        Method::POST,
        "/v1/members",
        Some(json!({"project_id": project, "user_id": "u", "role_id": "viewer"})),
    )
    .await;
    assert_eq!(s, 201);
    assert_eq!(with(&env, &raw, Method::DELETE, &format!("/v1/jobs/{job_id}"), None).await.0, 204);
    let (_, all) = with(&env, &raw, Method::GET, "/v1/audit-events?order=asc", None).await;
    assert_eq!(
        actions(&all),
        vec![
            "project.created",
            "api_key.created",
            "job.created",
            "job.updated",
            "run.cancelled",
            "member.assigned",
            "job.deleted"
        ],
        "triggers are not audited (they are run events): {all}"
    );
    let member_event = all["data"].as_array().unwrap().iter().find(|e| e["action"] == "member.assigned").unwrap();
    assert_eq!((member_event["actor_id"].as_str(), member_event["actor_type"].as_str()), (Some("root"), Some("user")));
    assert!(!all.to_string().contains(&raw), "no secret in the trail");
}

#[tokio::test]
async fn the_listing_filters_orders_and_pages() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    for i in 0..4 {
        let (s, _) =
            env.post("/v1/job-groups", json!({"project_id": project, "name": "g", "slug": format!("g{i}")})).await;
        assert_eq!(s, 201);
    }
    let path = |q: &str| format!("/v1/audit-events?project_id={project}&action=job_group.created{q}");
    let (_, desc) = env.get(&path("")).await;
    let (_, asc) = env.get(&path("&order=asc")).await;
    let ids = |p: &Value| {
        p["data"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    let mut reversed = ids(&desc);
    reversed.reverse();
    assert_eq!(ids(&asc), reversed);
    assert_eq!(ids(&asc).len(), 4);
    let (_, first) = env.get(&path("&order=asc&limit=3")).await;
    assert_eq!(first["has_more"], true);
    let (_, second) =
        env.get(&path(&format!("&order=asc&limit=3&cursor={}", first["next_cursor"].as_str().unwrap()))).await;
    assert_eq!([ids(&first), ids(&second)].concat(), ids(&asc));
    assert_eq!(second["has_more"], false);
    let (_, none) = env.get(&path("&from=2999-01-01T00:00:00Z")).await;
    assert_eq!(ids(&none).len(), 0);
    let (_, all) = env.get(&path("&from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00Z")).await;
    assert_eq!(ids(&all).len(), 4);
    assert_problem(422, env.get(&path("&order=sideways")).await, 422);
    assert_problem(422, env.get(&path("&from=yesterday")).await, 422);

    // Confined to the caller's project.
    let other = env.project().await;
    let (k, _) = key(&env, &other, &["rbac:manage"]).await;
    let got = with(&env, &k, Method::GET, &format!("/v1/audit-events?project_id={project}"), None).await;
    assert_problem(403, got, 403);
    let (_, own) = with(&env, &k, Method::GET, "/v1/audit-events", None).await;
    assert!(own["data"].as_array().unwrap().iter().all(|e| e["project_id"] == other.as_str()), "{own}");
}
