//! Found by a penetration test: resource policies were bypassed by four
//! indirect paths. The class is closed by one authorization function
//! (`policy::authorize`) that every path calls with the direct operation's
//! action, and proved here by enumeration: every operation of the served
//! OpenAPI document that names a job, run, workflow, workflow run or job
//! group in its path is refused (403) for a key a deny policy bars from that
//! resource, and so is every operation that reaches those resources without
//! naming them (bulk, group, event and filter paths).

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::support::access::{key, with};
use crate::support::workflows::{trigger, wait_run, workflow};

const TARGET: &str = "http://127.0.0.1:9/hook";

/// A deny of every action on one resource, for one key.
async fn deny(env: &TestEnv, project: &str, key_id: &str, kind: &str, id: &str) -> String {
    let body = json!({"project_id": project, "name": format!("no {kind}"), "effect": "deny",
        "principal_type": "api_key", "principal_id": key_id, "actions": ["*"], "resource_type": kind,
        "resource_ids": [id]});
    let (s, v) = env.post("/v1/resource-policies", body).await;
    assert_eq!(s, 201, "{v}");
    v["id"].as_str().unwrap().to_string()
}

/// Bodies for operations whose body has required fields: without them the
/// request is refused (400) before anything is looked up, which proves
/// nothing about policies.
fn body_for(method: &str, path: &str) -> Option<Value> {
    Some(match (method, path) {
        ("post", p) if p.ends_with("/secrets") => json!({"name": "K", "value": "v"}),
        ("post", p) if p.ends_with("/trigger/bulk") => json!({"items": [{}]}),
        ("put", p) if p.ends_with("/debug-mode") => json!({"enabled": true}),
        ("patch", p) if p.ends_with("/metadata") => json!({"metadata": {}}),
        ("post", p) if p.ends_with("/restart") => json!({"machine_preset": "small"}),
        _ => return None,
    })
}

#[tokio::test]
async fn every_operation_on_a_resource_consults_its_policies() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (group_body, group) = {
        let (s, v) = env.post("/v1/job-groups", json!({"project_id": project, "name": "G", "slug": "g"})).await;
        assert_eq!(s, 201, "{v}");
        (v.clone(), v["id"].as_str().unwrap().to_string())
    };
    let _ = group_body;
    let job = env.job_in(&project, TARGET, json!({"name": "barred", "group_id": group})).await;
    let job_id = job["id"].as_str().unwrap().to_string();
    let (s, run) = env.post(&format!("/v1/jobs/{job_id}/trigger"), json!({"delay_secs": 3600})).await;
    assert_eq!(s, 201, "{run}");
    let run_id = run["id"].as_str().unwrap().to_string();
    let wf = workflow(&env, &project, json!({"steps": [{"step_ref": "a", "approval_approvers": ["x"]}]})).await;
    let wf_id = wf["id"].as_str().unwrap().to_string();
    let version_id = wf["version_id"].as_str().unwrap();
    let wrun = trigger(&env, &wf, json!({})).await;
    let wrun_id = wrun["id"].as_str().unwrap().to_string();
    env.spawn_scheduler();
    wait_run(&env, &wrun_id, |r| r["steps"][0]["status"] == "waiting").await;

    let (barred, barred_id) = key(&env, &project, &["*"]).await;
    for (kind, id) in [("job", &job_id), ("run", &run_id), ("workflow", &wf_id), ("job_group", &group)] {
        deny(&env, &project, &barred_id, kind, id).await;
    }

    let (_, doc) = env.get("/openapi.json").await;
    let mut checked = Vec::new();
    let mut not_refused = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        let names = ["{job_id}", "{run_id}", "{workflow_id}", "{workflow_run_id}", "{group_id}"];
        if !names.iter().any(|n| path.contains(n)) {
            continue;
        }
        let concrete = path
            .replace("{job_id}", &job_id)
            .replace("{run_id}", &run_id)
            .replace("{workflow_id}", &wf_id)
            .replace("{workflow_run_id}", &wrun_id)
            .replace("{group_id}", &group)
            .replace("{step_ref}", "a")
            .replace("{version_id}", version_id)
            .replace("{from_version_id}", version_id)
            .replace("{to_version_id}", version_id)
            .replace("{name}", "K")
            .replace("{key}", "k");
        if concrete.contains('{') {
            not_refused.push(format!("{path}: an unknown path parameter"));
            continue;
        }
        for (method, _) in ops.as_object().unwrap() {
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let body = match m {
                Method::GET | Method::DELETE => None,
                _ => Some(body_for(method, path).unwrap_or(json!({}))),
            };
            let (s, v) = with(&env, &barred, m.clone(), &concrete, body).await;
            checked.push(format!("{method} {path}"));
            if s != 403 {
                not_refused.push(format!("{method} {path}: {s} {v}"));
            }
        }
    }
    assert!(checked.len() > 40, "the enumeration found the operations: {checked:#?}");
    assert!(not_refused.is_empty(), "operations that did not consult the policies:\n{}", not_refused.join("\n"));

    // The operations that reach a barred resource without naming it.
    assert_problem(
        403,
        with(&env, &barred, Method::POST, "/v1/runs/bulk-cancel-all", Some(json!({"project_id": project}))).await,
        403,
    );
    let (s, v) = env.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!((s, v["status"].as_str()), (200, Some("pending")), "the bulk cancel changed nothing: {v}");
    let (s, v) = with(&env, &barred, Method::POST, "/v1/runs/bulk-cancel", Some(json!({"run_ids": [run_id]}))).await;
    assert_eq!(s, 200, "{v}");
    assert!(v["results"][0]["error"].as_str().unwrap().contains("denies"), "{v}");
    let (s, v) = with(&env, &barred, Method::POST, "/v1/runs/bulk-replay", Some(json!({"run_ids": [run_id]}))).await;
    assert!(s == 200 && v["results"][0]["error"].as_str().unwrap().contains("denies"), "{v}");
    // An event source reaching the barred workflow: refused as its trigger would be.
    let body = json!({"project_id": project, "name": "on go", "event_key": "go", "target_type": "workflow",
                      "target_id": wf_id});
    assert_eq!(env.post("/v1/event-sources", body).await.0, 201);
    let (s, v) = with(
        &env,
        &barred,
        Method::POST,
        "/v1/events/dispatch",
        Some(json!({"project_id": project, "event_key": "go"})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["triggered_runs"][0]["status"], "error", "{v}");
    assert!(v["triggered_runs"][0]["error"].as_str().unwrap().contains("denies workflows:trigger"), "{v}");
    // A group's pause-all pauses each job: the barred one refuses it. (The
    // group itself is barred too; lift that to see the job's own refusal.)
    let (_, groups) = env.get(&format!("/v1/resource-policies?project_id={project}")).await;
    let group_deny = groups["data"].as_array().unwrap().iter().find(|p| p["resource_type"] == "job_group").unwrap();
    assert_eq!(env.delete(&format!("/v1/resource-policies/{}", group_deny["id"].as_str().unwrap())).await.0, 204);
    let p = assert_problem(
        403,
        with(&env, &barred, Method::POST, &format!("/v1/job-groups/{group}/pause-all"), Some(json!({}))).await,
        403,
    );
    assert!(p["detail"].as_str().unwrap().contains("jobs:write"), "{p}");
    let (_, j) = env.get(&format!("/v1/jobs/{job_id}")).await;
    assert_eq!(j["paused"], false, "nothing changed: {j}");
}

#[tokio::test]
async fn a_credential_cannot_lift_a_policy_that_names_it() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, TARGET, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let (admin, admin_id) = key(&env, &project, &["rbac:manage", "jobs:write", "jobs:read"]).await;
    let policy = deny(&env, &project, &admin_id, "job", job_id).await;
    let path = format!("/v1/resource-policies/{policy}");
    let p = assert_problem(403, with(&env, &admin, Method::DELETE, &path, None).await, 403);
    assert!(p["detail"].as_str().unwrap().contains("names it"), "{p}");
    let got = with(&env, &admin, Method::PATCH, &path, Some(json!({"effect": "allow"}))).await;
    assert_problem(403, got, 403);
    let got = with(&env, &admin, Method::PATCH, &format!("/v1/jobs/{job_id}"), Some(json!({"timeout_secs": 5}))).await;
    assert_problem(403, got, 403);
    // Another credential may lift it.
    let (other, _) = key(&env, &project, &["rbac:manage"]).await;
    assert_eq!(with(&env, &other, Method::DELETE, &path, None).await.0, 204);
}
