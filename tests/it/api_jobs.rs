//! Jobs: create, get, list, update (versions), delete, validation.

use serde_json::json;

use crate::harness::{assert_problem, TestEnv};

#[tokio::test]
async fn job_fields_round_trip_and_secret_is_never_returned() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let body = json!({
        "project_id": project, "name": "Send email", "description": "welcome mail",
        "endpoint_url": "https://example.test/hook", "fallback_endpoint_url": "https://backup.test/hook",
        "cron": "*/5 * * * *", "timezone": "Europe/Paris", "execution_window_cron": "* 9-17 * * 1-5",
        "payload_schema": {"type": "object"}, "tags": {"team": "growth"},
        "max_attempts": 5, "timeout_secs": 12, "max_concurrency": 3, "max_concurrency_per_key": 1,
        "rate_limit_max": 10, "rate_limit_window_secs": 60,
        "rate_limit_keys": [{"name": "smtp", "max": 100, "window_secs": 60}],
        "default_run_metadata": {"source": "signup"}, "dedup_window_secs": 30, "run_ttl_secs": 3600,
        "enabled": true, "webhook_url": "https://example.test/done", "webhook_secret": "s3cret-value",
        "retry_strategy": "custom", "retry_delays_secs": [1, 5, 30], "version_policy": "latest",
        "backwards_compatible": false
    });
    let (s, job) = env.post("/v1/jobs", body.clone()).await;
    assert_eq!(s, 201, "{job}");
    for (k, v) in body.as_object().unwrap() {
        if k == "webhook_secret" {
            continue;
        }
        assert_eq!(&job[k], v, "field {k}");
    }
    assert_eq!(job["slug"], "send-email");
    assert_eq!(job["version"], 1);
    assert!(job["version_id"].as_str().unwrap().starts_with("jobv_"));
    assert_eq!(job["has_webhook_secret"], true);
    assert!(!job.to_string().contains("s3cret-value"));
    let id = job["id"].as_str().unwrap();
    let (_, got) = env.get(&format!("/v1/jobs/{id}")).await;
    assert!(!got.to_string().contains("s3cret-value"));
    assert_eq!(got["cron"], "*/5 * * * *");
    let (_, versions) = env.get(&format!("/v1/jobs/{id}/versions")).await;
    assert!(!versions.to_string().contains("s3cret-value"), "versions hide the secret too");
}

#[tokio::test]
async fn update_makes_versions_and_delete_cancels_runs() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/hook", json!({"cron": "0 * * * *"})).await;
    let id = job["id"].as_str().unwrap();
    let run = env.trigger(id, json!({"payload": {"n": 1}})).await;
    assert_eq!(run["job_version"], 1);

    let (s, v2) =
        env.patch(&format!("/v1/jobs/{id}"), json!({"timeout_secs": 5, "cron": null, "max_concurrency": 2})).await;
    assert_eq!(s, 200, "{v2}");
    assert_eq!((v2["version"].as_i64(), v2["timeout_secs"].as_i64()), (Some(2), Some(5)));
    assert!(v2.get("cron").is_none(), "null clears cron");
    assert_ne!(v2["version_id"], job["version_id"]);
    let run2 = env.trigger(id, json!({})).await;
    assert_eq!((run2["job_version"].as_i64(), &run2["job_version_id"]), (Some(2), &v2["version_id"]));

    let bad = env.patch(&format!("/v1/jobs/{id}"), json!({"timeout_secs": -1, "endpoint_url": "nope"})).await;
    assert_eq!(assert_problem(422, bad, 422)["errors"].as_array().unwrap().len(), 2);
    let (_, after) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(after["version"], 2, "a rejected update makes no version");

    let (_, versions) = env.get(&format!("/v1/jobs/{id}/versions")).await;
    let vs: Vec<_> = versions["data"].as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect();
    assert_eq!(vs, vec![2, 1]);
    assert_eq!(versions["data"][1]["definition"]["cron"], "0 * * * *");

    let (s, _) = env.delete(&format!("/v1/jobs/{id}")).await;
    assert_eq!(s, 204);
    assert_problem(404, env.get(&format!("/v1/jobs/{id}")).await, 404);
    assert_problem(404, env.post(&format!("/v1/jobs/{id}/trigger"), json!({})).await, 404);
    assert_eq!(env.run(run["id"].as_str().unwrap()).await["status"], "cancelled");
    assert_eq!(env.run(run2["id"].as_str().unwrap()).await["status"], "cancelled");
}

#[tokio::test]
async fn job_validation_names_each_field() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let cases = [
        (json!({"endpoint_url": "not a url"}), "body.endpoint_url"),
        (json!({"endpoint_url": "ftp://x/y"}), "body.endpoint_url"),
        (json!({"cron": "61 * * * *"}), "body.cron"),
        (json!({"cron": "* * *"}), "body.cron"),
        (json!({"timezone": "Mars/Olympus"}), "body.timezone"),
        (json!({"max_concurrency": -1}), "body.max_concurrency"),
        (json!({"timeout_secs": 0}), "body.timeout_secs"),
        (json!({"max_attempts": 0}), "body.max_attempts"),
        (json!({"retry_strategy": "sometimes"}), "body.retry_strategy"),
        (json!({"retry_strategy": "custom"}), "body.retry_delays_secs"),
        (json!({"rate_limit_max": 5}), "body.rate_limit_window_secs"),
        (json!({"version_policy": "newest"}), "body.version_policy"),
        (json!({"group_id": "grp_missing"}), "body.group_id"),
        (json!({"slug": "Has Spaces"}), "body.slug"),
        (json!({"webhook_url": "mailto:x@y"}), "body.webhook_url"),
    ];
    for (extra, location) in cases {
        let mut body = json!({"project_id": project, "name": "n", "endpoint_url": "http://127.0.0.1:9/"});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let v = assert_problem(422, env.post("/v1/jobs", body).await, 422);
        let locs: Vec<_> =
            v["errors"].as_array().unwrap().iter().map(|e| e["location"].as_str().unwrap().to_string()).collect();
        assert!(locs.iter().any(|l| l == location), "{extra}: expected {location} in {locs:?}");
    }
    assert_problem(
        422,
        env.post("/v1/jobs", json!({"project_id": "no-such-project", "name": "n", "endpoint_url": "http://x/"})).await,
        422,
    );
    assert_problem(
        400,
        env.post("/v1/jobs", json!({"project_id": project, "name": "n", "endpoint_url": "http://x/", "surprise": 1}))
            .await,
        400,
    );
    assert_problem(
        400,
        env.post(
            "/v1/jobs",
            json!({"project_id": project, "name": "n", "endpoint_url": "http://x/", "max_attempts": "three"}),
        )
        .await,
        400,
    );
    let (_, list) = env.get(&format!("/v1/jobs?project_id={project}")).await;
    assert_eq!(list["data"], json!([]), "no invalid job was stored");
    assert_problem(422, env.get("/v1/jobs").await, 422);
}

#[tokio::test]
async fn jobs_list_pages_and_filters() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let mut ids = vec![];
    for i in 0..3 {
        let j = env.job_in(&project, "http://127.0.0.1:9/", json!({"slug": format!("j{i}")})).await;
        ids.push(j["id"].as_str().unwrap().to_string());
    }
    let (_, p1) = env.get(&format!("/v1/jobs?project_id={project}&limit=2")).await;
    assert_eq!(p1["data"][0]["id"], ids[2].as_str(), "newest first");
    assert_eq!(p1["has_more"], true);
    let (_, p2) =
        env.get(&format!("/v1/jobs?project_id={project}&limit=2&cursor={}", p1["next_cursor"].as_str().unwrap())).await;
    assert_eq!(p2["data"].as_array().unwrap().len(), 1);
    assert_eq!(p2["data"][0]["id"], ids[0].as_str());
    assert_eq!(p2["has_more"], false);
    let other = env.project().await;
    let (_, none) = env.get(&format!("/v1/jobs?project_id={other}")).await;
    assert_eq!(none["data"], json!([]));
}

#[tokio::test]
async fn actor_headers_are_recorded_on_jobs_and_runs() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let send = |method: reqwest::Method, path: String, body: serde_json::Value, actor: &'static str| {
        env.http
            .request(method, format!("{}{}", env.base, path))
            .header("x-internal-secret", crate::harness::SECRET)
            .header("x-actor-id", actor)
            .header("x-actor-email", format!("{actor}@example.com"))
            .json(&body)
            .send()
    };
    let job: serde_json::Value = send(
        reqwest::Method::POST,
        "/v1/jobs".into(),
        json!({"project_id": project, "name": "n", "endpoint_url": "http://127.0.0.1:9/"}),
        "user-ada",
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!((job["created_by"].as_str(), job["updated_by"].as_str()), (Some("user-ada"), Some("user-ada")));
    let id = job["id"].as_str().unwrap();
    let up: serde_json::Value =
        send(reqwest::Method::PATCH, format!("/v1/jobs/{id}"), json!({"timeout_secs": 9}), "user-bob")
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!((up["created_by"].as_str(), up["updated_by"].as_str()), (Some("user-ada"), Some("user-bob")));
    let run: serde_json::Value = send(reqwest::Method::POST, format!("/v1/jobs/{id}/trigger"), json!({}), "user-cy")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["created_by"], "user-cy");
    // Without actor headers the internal secret acts as a service: nothing recorded.
    let anon = env.trigger(id, json!({})).await;
    assert!(anon.get("created_by").is_none());
}

#[tokio::test]
async fn pause_and_resume_a_job_without_a_new_version() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, "http://127.0.0.1:9/x", json!({})).await;
    let id = job["id"].as_str().unwrap();
    for _ in 0..2 {
        let (s, v) = env.post(&format!("/v1/jobs/{id}/pause"), json!(null)).await;
        assert_eq!((s, &v["paused"], &v["version"]), (200, &json!(true), &job["version"]), "{v}");
    }
    let (s, run) = env.post(&format!("/v1/jobs/{id}/trigger"), json!({})).await;
    assert_eq!((s, &run["status"]), (201, &json!("queued")), "a paused job accepts triggers: {run}");
    let (s, v) = env.post(&format!("/v1/jobs/{id}/resume"), json!(null)).await;
    assert_eq!((s, &v["paused"]), (200, &json!(false)), "{v}");
    let (_, audit) = env.get(&format!("/v1/audit-events?project_id={project}&resource_id={id}&order=asc")).await;
    let actions: Vec<&str> = audit["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["job.created", "job.paused", "job.resumed"], "a second pause changed nothing: {audit}");

    assert_problem(404, env.post("/v1/jobs/job_nope/pause", json!(null)).await, 404);
    env.delete(&format!("/v1/jobs/{id}")).await;
    assert_problem(404, env.post(&format!("/v1/jobs/{id}/resume"), json!(null)).await, 404);
}
