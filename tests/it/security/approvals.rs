//! Found by a penetration test: under `version_policy: latest`,
//! `workflows:write` could PATCH a waiting approval's approvers to itself
//! and then approve. A waiting approval keeps the approvers it started
//! waiting with.

use serde_json::json;

use crate::harness::TestEnv;
use crate::support::workflows::{get_run, job, step, trigger, wait_run, wait_status, workflow};
use crate::target::Target;

#[tokio::test]
async fn a_waiting_approval_keeps_its_approvers_when_the_workflow_changes() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let steps = |review: &[&str]| {
        json!([
            {"step_ref": "review", "approval_approvers": review},
            {"step_ref": "other", "approval_approvers": ["alice"]},
            {"step_ref": "ship", "job_id": j, "depends_on": ["review", "other"]},
        ])
    };
    let wf = workflow(&env, &project, json!({"version_policy": "latest", "steps": steps(&["alice"])})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let run = trigger(&env, &wf, json!({})).await;
    let id = run["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "review")["status"] == "waiting" && step(r, "other")["status"] == "waiting").await;

    let (s, v) = env
        .patch(&format!("/v1/workflows/{}", wf["id"].as_str().unwrap()), json!({"steps": steps(&["mallory"])}))
        .await;
    assert_eq!(s, 200, "{v}");
    let new_version = v["version_id"].clone();
    assert_ne!(new_version, wf["version_id"], "{v}");
    // Any pass moves a `latest` run to the new version: deciding the other step makes one.
    let (s, v) = env.post(&format!("/v1/workflow-runs/{id}/steps/other/skip"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    wait_run(&env, &id, |r| r["version_id"] == new_version).await;

    let approve = format!("/v1/workflow-runs/{id}/steps/review/approve");
    let (s, p) = env.call_as_actor("mallory", reqwest::Method::POST, &approve, Some(json!({}))).await;
    assert_eq!(s, 403, "the new version's approver does not decide a pending approval: {p}");
    assert!(p["detail"].as_str().unwrap().contains("alice"), "{p}");
    assert_eq!(step(&get_run(&env, &id).await, "review")["status"], "waiting", "nothing changed");
    let (s, v) = env.call_as_actor("alice", reqwest::Method::POST, &approve, Some(json!({}))).await;
    assert_eq!(s, 200, "{v}");
    wait_status(&env, &id, "completed").await;
}
