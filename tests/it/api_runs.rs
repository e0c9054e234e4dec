//! Runs through the API: trigger, get, list, cancel (no worker running).

use serde_json::json;

use crate::harness::{assert_problem, TestEnv};

#[tokio::test]
async fn trigger_records_every_field_and_enqueues() {
    let env = TestEnv::start().await;
    let job =
        env.job("http://127.0.0.1:9/hook", json!({"default_run_metadata": {"source": "signup", "tier": "free"}})).await;
    let id = job["id"].as_str().unwrap();
    let run = env
        .trigger(
            id,
            json!({
                "payload": {"user": "42", "plan": "pro"}, "priority": 7, "idempotency_key": "k-1",
                "tags": {"env": "test"}, "metadata": {"tier": "pro"}, "concurrency_key": "tenant-9",
                "debug_mode": true, "max_attempts_override": 2, "timeout_secs_override": 4,
                "retry_backoff": "linear", "retry_initial_delay_secs": 1, "retry_max_delay_secs": 10,
                "execution_mode": "sync"
            }),
        )
        .await;
    assert_eq!(run["status"], "queued");
    assert_eq!(run["attempt"], 0);
    assert_eq!(run["priority"], 7);
    assert_eq!(run["triggered_by"], "api");
    assert_eq!(run["lineage_depth"], 0);
    assert_eq!(run["payload"], json!({"user": "42", "plan": "pro"}));
    assert_eq!(run["metadata"], json!({"source": "signup", "tier": "pro"}), "request metadata wins over defaults");
    assert_eq!(run["tags"], json!({"env": "test"}));
    assert_eq!(run["concurrency_key"], "tenant-9");
    assert_eq!((run["debug_mode"].as_bool(), run["max_attempts_override"].as_i64()), (Some(true), Some(2)));
    assert_eq!(run["job_version_id"], job["version_id"]);
    assert_eq!(env.zcard_all(|k| &k.ready).await, 1, "enqueued in redis");
    // The answer is built from the request, not read back: it must be what
    // was stored, field for field.
    assert_eq!(env.run(run["id"].as_str().unwrap()).await, run, "the trigger's answer is the stored run");

    // Same idempotency key: the same run, 200, nothing new.
    let (s, again) =
        env.post(&format!("/v1/jobs/{id}/trigger"), json!({"idempotency_key": "k-1", "payload": {}})).await;
    assert_eq!(s, 200);
    assert_eq!(again["id"], run["id"]);
    assert_eq!(env.zcard_all(|k| &k.ready).await, 1);

    // A child run.
    let child = env.trigger(id, json!({"parent_run_id": run["id"]})).await;
    assert_eq!((child["lineage_depth"].as_i64(), &child["parent_run_id"]), (Some(1), &run["id"]));

    // Delayed: pending, in the scheduled set.
    let later = env.trigger(id, json!({"delay_secs": 3600})).await;
    assert_eq!(later["status"], "pending");
    assert!(later["scheduled_at"].is_string());
    assert_eq!(env.zcard_all(|k| &k.scheduled).await, 1);
}

#[tokio::test]
async fn trigger_validation_changes_nothing() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/hook", json!({})).await;
    let id = job["id"].as_str().unwrap();
    let cases = [
        (json!({"priority": 5000}), "body.priority"),
        (json!({"execution_mode": "later"}), "body.execution_mode"),
        (json!({"retry_backoff": "random"}), "body.retry_backoff"),
        (json!({"max_attempts_override": 0}), "body.max_attempts_override"),
        (json!({"delay_secs": -1}), "body.delay_secs"),
        (json!({"delay_secs": 5, "scheduled_at": "2030-01-01T00:00:00Z"}), "body.delay_secs"),
        (json!({"parent_run_id": "run_nope"}), "body.parent_run_id"),
        (json!({"concurrency_key": ""}), "body.concurrency_key"),
        (json!({"depends_on": ["run_x"]}), "body.depends_on/0"),
    ];
    for (body, loc) in cases {
        let v = assert_problem(422, env.post(&format!("/v1/jobs/{id}/trigger"), body.clone()).await, 422);
        assert_eq!(v["errors"][0]["location"], loc, "{body}");
    }
    assert_problem(400, env.post(&format!("/v1/jobs/{id}/trigger"), json!({"payload": 1, "bogus": true})).await, 400);
    assert_problem(400, env.post(&format!("/v1/jobs/{id}/trigger"), json!({"priority": "high"})).await, 400);
    let (_, runs) = env.get(&format!("/v1/runs?project_id={}", job["project_id"].as_str().unwrap())).await;
    assert_eq!(runs["data"], json!([]));
    assert!(env.redis_keys().await.iter().all(|k| !k.ends_with(":ready")), "nothing enqueued");

    let (s, _) = env.patch(&format!("/v1/jobs/{id}"), json!({"enabled": false})).await;
    assert_eq!(s, 200);
    assert_problem(409, env.post(&format!("/v1/jobs/{id}/trigger"), json!({})).await, 409);
}

#[tokio::test]
async fn list_filters_and_pages() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/hook", json!({})).await;
    let project = job["project_id"].as_str().unwrap();
    let id = job["id"].as_str().unwrap();
    let other = env.job_in(project, "http://127.0.0.1:9/hook", json!({"slug": "other"})).await;
    let mut runs = vec![];
    for i in 0..4 {
        runs.push(env.trigger(id, json!({"payload": {"i": i, "kind": if i % 2 == 0 { "even" } else { "odd" }}})).await);
    }
    env.trigger(other["id"].as_str().unwrap(), json!({})).await;

    let (_, all) = env.get(&format!("/v1/runs?project_id={project}")).await;
    assert_eq!(all["data"].as_array().unwrap().len(), 5);
    let (_, by_job) = env.get(&format!("/v1/runs?project_id={project}&job_id={id}&limit=3")).await;
    assert_eq!(by_job["data"].as_array().unwrap().len(), 3);
    assert_eq!(by_job["data"][0]["id"], runs[3]["id"], "newest first");
    let (_, rest) = env
        .get(&format!(
            "/v1/runs?project_id={project}&job_id={id}&limit=3&cursor={}",
            by_job["next_cursor"].as_str().unwrap()
        ))
        .await;
    assert_eq!(rest["data"].as_array().unwrap().len(), 1);
    assert_eq!(rest["has_more"], false);

    let q = urlencode(r#"{"kind":"even"}"#);
    let (s, even) = env.get(&format!("/v1/runs?project_id={project}&payload_contains={q}")).await;
    assert_eq!(s, 200, "{even}");
    assert_eq!(even["data"].as_array().unwrap().len(), 2);

    let (s, _) = env.post(&format!("/v1/runs/{}/cancel", runs[0]["id"].as_str().unwrap()), json!({})).await;
    assert_eq!(s, 200);
    let (_, cancelled) = env.get(&format!("/v1/runs?project_id={project}&status=cancelled")).await;
    assert_eq!(cancelled["data"].as_array().unwrap().len(), 1);

    assert_problem(422, env.get(&format!("/v1/runs?project_id={project}&status=done")).await, 422);
    assert_problem(422, env.get(&format!("/v1/runs?project_id={project}&payload_contains=%7Bnope")).await, 422);
    assert_problem(422, env.get(&format!("/v1/runs?project_id={project}&limit=500")).await, 422);
    assert_problem(422, env.get("/v1/runs").await, 422);
    assert_problem(404, env.get("/v1/runs/run_doesnotexist").await, 404);
}

/// `created_after` (inclusive) and `created_before` (exclusive) cut the list
/// at a time; a value that is no RFC 3339 time is 422 naming its parameter.
#[tokio::test]
async fn list_filters_by_creation_time() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/hook", json!({})).await;
    let project = job["project_id"].as_str().unwrap();
    let id = job["id"].as_str().unwrap();
    for i in 0..3 {
        env.trigger(id, json!({"payload": {"i": i}})).await;
    }
    let (_, all) = env.get(&format!("/v1/runs?project_id={project}")).await;
    let all = all["data"].as_array().unwrap().clone();
    assert_eq!(all.len(), 3);
    let created = |r: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(r["created_at"].as_str().unwrap()).unwrap().with_timezone(&chrono::Utc)
    };
    // Cut at the middle run's time: what each side holds follows from the
    // runs' own times (two triggers may share a microsecond).
    let cut = created(&all[1]);
    let side = |keep: &dyn Fn(chrono::DateTime<chrono::Utc>) -> bool| -> Vec<String> {
        all.iter().filter(|r| keep(created(r))).map(|r| r["id"].as_str().unwrap().to_string()).collect()
    };
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["data"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
    };
    let at = urlencode(&cut.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
    let (s, after) = env.get(&format!("/v1/runs?project_id={project}&created_after={at}")).await;
    assert_eq!(s, 200, "{after}");
    assert_eq!(ids(&after), side(&|t| t >= cut));
    assert!(ids(&after).contains(&all[1]["id"].as_str().unwrap().to_string()), "the bound is inclusive");
    let (s, before) = env.get(&format!("/v1/runs?project_id={project}&created_before={at}")).await;
    assert_eq!(s, 200, "{before}");
    assert_eq!(ids(&before), side(&|t| t < cut));
    assert!(!ids(&before).contains(&all[1]["id"].as_str().unwrap().to_string()), "the bound is exclusive");
    // Both bounds, in another offset, with the other filters.
    let from = urlencode(
        &(cut - chrono::Duration::hours(1)).with_timezone(&chrono::FixedOffset::east_opt(7200).unwrap()).to_rfc3339(),
    );
    let (_, window) = env
        .get(&format!(
            "/v1/runs?project_id={project}&job_id={id}&created_after={from}&created_before=2999-01-01T00:00:00Z"
        ))
        .await;
    assert_eq!(window["data"].as_array().unwrap().len(), 3);
    let (_, none) = env.get(&format!("/v1/runs?project_id={project}&created_after=2999-01-01T00:00:00Z")).await;
    assert_eq!(none["data"].as_array().unwrap().len(), 0);

    for (param, bad) in
        [("created_after", "yesterday"), ("created_before", "2025-02-30T00:00:00Z"), ("created_after", "2025-01-31")]
    {
        let v = assert_problem(422, env.get(&format!("/v1/runs?project_id={project}&{param}={bad}")).await, 422);
        assert_eq!(v["errors"][0]["location"], format!("query.{param}"), "{v}");
    }
}

#[tokio::test]
async fn cancel_removes_from_queue_and_is_final() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/hook", json!({})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let rid = run["id"].as_str().unwrap();
    assert_eq!(env.zcard_all(|k| &k.ready).await, 1);
    let (s, c) = env.post(&format!("/v1/runs/{rid}/cancel"), json!({})).await;
    assert_eq!(s, 200, "{c}");
    assert_eq!(c["status"], "cancelled");
    assert!(c["finished_at"].is_string());
    assert_eq!(env.zcard_all(|k| &k.ready).await, 0);
    assert_problem(409, env.post(&format!("/v1/runs/{rid}/cancel"), json!({})).await, 409);
    assert_problem(404, env.post("/v1/runs/run_missing/cancel", json!({})).await, 404);
}

fn urlencode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// Triggers are group-committed: concurrent ones share one insert. Each
/// still gets its own answer, and one that Postgres refuses fails alone.
#[tokio::test]
async fn concurrent_triggers_are_committed_together_and_fail_alone() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/hook", json!({})).await;
    let id = job["id"].as_str().unwrap().to_string();
    let path = format!("/v1/jobs/{id}/trigger");
    let calls = (0..40).map(|i| {
        // A NUL character cannot be stored in jsonb.
        let payload = if i == 17 { json!({"s": "nul \u{0}"}) } else { json!({"i": i}) };
        let (env, path) = (&env, path.clone());
        async move { env.post(&path, json!({"payload": payload, "idempotency_key": format!("k{}", i % 20)})).await }
    });
    let answers = futures::future::join_all(calls).await;
    let bad = &answers[17];
    assert!(bad.0 == 422 || bad.0 == 400, "the refused row is the caller's error: {bad:?}");
    let mut ids = std::collections::HashMap::new();
    for (i, (s, v)) in answers.iter().enumerate() {
        if i == 17 {
            continue;
        }
        assert!(*s == 201 || *s == 200, "trigger {i}: {s} {v}");
        if let Some(other) = ids.insert(format!("k{}", i % 20), v["id"].clone()) {
            assert_eq!(other, v["id"], "one run per idempotency key (k{})", i % 20);
        }
    }
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM job_runs WHERE job_id = $1")
        .bind(&id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(stored, 20, "one run per key, none for the refused payload's key alone");

    // Alone in its batch, the same payload is the same 422.
    let (s, v) = env.post(&path, json!({"payload": {"s": "nul \u{0}"}})).await;
    assert_eq!(s, 422, "{v}");
    assert_eq!(env.zcard_all(|k| &k.ready).await, 20, "each stored run enqueued once");
}
