//! Job groups: every operation under /v1/job-groups (create, list, get,
//! update, delete, pause-all, resume-all, the group's jobs and stats).

use serde_json::json;

use crate::harness::{assert_problem, TestEnv};

#[tokio::test]
async fn group_crud_jobs_and_stats() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (s, g) = env
        .post(
            "/v1/job-groups",
            json!({"project_id": project, "name": "Billing", "slug": "billing", "description": "money"}),
        )
        .await;
    assert_eq!(s, 201, "{g}");
    let gid = g["id"].as_str().unwrap();
    assert_eq!(g["project_id"], project.as_str());
    assert_problem(
        409,
        env.post("/v1/job-groups", json!({"project_id": project, "name": "B", "slug": "billing"})).await,
        409,
    );
    let v = assert_problem(
        422,
        env.post("/v1/job-groups", json!({"project_id": project, "name": "", "slug": "Bad Slug"})).await,
        422,
    );
    assert_eq!(v["errors"].as_array().unwrap().len(), 2);
    assert_problem(422, env.post("/v1/job-groups", json!({"name": "x", "slug": "x"})).await, 422);

    let (s, list) = env.get(&format!("/v1/job-groups?project_id={project}")).await;
    assert_eq!(s, 200);
    assert_eq!(list.as_array().unwrap().len(), 1, "a plain array: {list}");

    let (s, got) = env.get(&format!("/v1/job-groups/{gid}")).await;
    assert_eq!((s, &got["slug"]), (200, &json!("billing")));
    let (s, same) = env.patch(&format!("/v1/job-groups/{gid}"), json!({})).await;
    assert_eq!((s, &same["name"]), (200, &json!("Billing")), "empty patch changes nothing");
    let (s, up) = env.patch(&format!("/v1/job-groups/{gid}"), json!({"name": "Payments", "description": null})).await;
    assert_eq!(s, 200);
    assert_eq!(up["name"], "Payments");
    assert!(up.get("description").is_none(), "null clears: {up}");

    let job = env.job_in(&project, "http://127.0.0.1:9/x", json!({"group_id": gid})).await;
    let other = env.job_in(&project, "http://127.0.0.1:9/x", json!({"slug": "other"})).await;
    let (s, jobs) = env.get(&format!("/v1/job-groups/{gid}/jobs")).await;
    assert_eq!(s, 200);
    let ids: Vec<_> = jobs.as_array().unwrap().iter().map(|j| j["id"].clone()).collect();
    assert_eq!(ids, vec![job["id"].clone()]);
    assert_ne!(job["id"], other["id"]);
    let bad_group = env
        .post(
            "/v1/jobs",
            json!({"project_id": project, "name": "n", "endpoint_url": "http://x/", "group_id": "grp_nope"}),
        )
        .await;
    assert_problem(422, bad_group, 422);

    for _ in 0..3 {
        env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    }
    let (s, stats) = env.get(&format!("/v1/job-groups/{gid}/stats")).await;
    assert_eq!(s, 200, "{stats}");
    assert_eq!(stats["group_id"], gid);
    assert_eq!(stats["run_counts"]["queued"], 3);
    assert_eq!(stats["run_counts"]["completed"], 0);
    assert_eq!(stats["run_counts"].as_object().unwrap().len(), 9, "every status listed");

    let (s, _) = env.post(&format!("/v1/job-groups/{gid}/pause-all"), json!({})).await;
    assert_eq!(s, 204);
    let (_, j) = env.get(&format!("/v1/jobs/{}", job["id"].as_str().unwrap())).await;
    assert_eq!((j["paused"].as_bool(), j["enabled"].as_bool()), (Some(true), Some(true)));
    let (_, o) = env.get(&format!("/v1/jobs/{}", other["id"].as_str().unwrap())).await;
    assert_eq!(o["paused"], false, "only the group's jobs");
    let (s, _) = env.post(&format!("/v1/job-groups/{gid}/resume-all"), json!({})).await;
    assert_eq!(s, 204);
    let (_, j) = env.get(&format!("/v1/jobs/{}", job["id"].as_str().unwrap())).await;
    assert_eq!(j["paused"], false);

    let (s, _) = env.delete(&format!("/v1/job-groups/{gid}")).await;
    assert_eq!(s, 204);
    assert_problem(404, env.get(&format!("/v1/job-groups/{gid}")).await, 404);
    let (_, j) = env.get(&format!("/v1/jobs/{}", job["id"].as_str().unwrap())).await;
    assert!(j.get("group_id").is_none(), "the job stays, ungrouped: {j}");
    for path in ["", "/jobs", "/stats"] {
        assert_problem(404, env.get(&format!("/v1/job-groups/{gid}{path}")).await, 404);
    }
    assert_problem(404, env.post(&format!("/v1/job-groups/{gid}/pause-all"), json!({})).await, 404);
}
