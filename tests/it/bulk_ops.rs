//! Bulk operations, replay, restart and cancellation with children
//! (docs/runs.md, "Run records, bulk operations, environments and secrets";
//! the sizes: docs/contract.md, "Limits").

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::support::sdk::{accepted_async_run, api_key, batch_runs, call_as, metric_sum, scrape};
use crate::target::{Reply, Target};

const T: Duration = Duration::from_secs(15);
/// A target nothing dispatches to in tests that run no worker.
const NOWHERE: &str = "http://127.0.0.1:9/hook";

fn ids(results: &Value, field: &str) -> Vec<String> {
    results.as_array().unwrap().iter().map(|r| r[field].as_str().unwrap_or_default().to_string()).collect()
}

#[tokio::test]
async fn bulk_trigger_reports_each_item_and_tags_one_batch() {
    let env = TestEnv::start().await;
    let job = env.job(NOWHERE, json!({})).await;
    let (job_id, project) = (job["id"].as_str().unwrap(), job["project_id"].as_str().unwrap());
    let before = scrape(&env).await;

    let items = json!([
        {"payload": {"i": 0}, "tags": {"src": "import"}},
        {"payload": {"i": 1}, "idempotency_key": "k-1", "priority": 5},
        {"priority": 5000},
        {"payload": {"i": 3}, "idempotency_key": "k-1"},
    ]);
    let (s, v) = env.post(&format!("/v1/jobs/{job_id}/trigger/bulk"), json!({"items": items})).await;
    assert_eq!(s, 200, "{v}");
    let batch_id = v["batch_id"].as_str().unwrap();
    assert!(batch_id.starts_with("bat_"));
    let results = v["results"].as_array().unwrap();
    let statuses: Vec<_> = results.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["created", "created", "error", "duplicate"]);
    let indexes: Vec<_> = results.iter().map(|r| r["index"].as_i64().unwrap()).collect();
    assert_eq!(indexes, [0, 1, 2, 3]);
    assert!(results[2]["error"].as_str().unwrap().contains("priority"), "{}", results[2]);
    assert!(results[2].get("run_id").is_none());
    assert_eq!(results[3]["run_id"], results[1]["run_id"], "the key's run is returned");

    // Every created run carries the batch, and only those.
    let runs = batch_runs(&env, project, batch_id).await;
    let mut got: Vec<String> = runs.iter().map(|r| r["id"].as_str().unwrap().to_string()).collect();
    got.sort();
    let mut want =
        vec![results[0]["run_id"].as_str().unwrap().to_string(), results[1]["run_id"].as_str().unwrap().to_string()];
    want.sort();
    assert_eq!(got, want);
    for r in &runs {
        assert_eq!(r["batch_id"], batch_id);
        assert_eq!(r["triggered_by"], "bulk");
    }
    let first = runs.iter().find(|r| r["payload"] == json!({"i": 0})).unwrap();
    assert_eq!(first["tags"], json!({"src": "import"}));

    // The batch's status.
    let (s, page) = env.get(&format!("/v1/batch-operations?project_id={project}")).await;
    assert_eq!(s, 200, "{page}");
    let b = &page["data"][0];
    assert_eq!(b["batch_id"], batch_id);
    assert_eq!(b["job_id"], job_id);
    assert_eq!(
        (b["total"].as_i64(), b["created"].as_i64(), b["duplicates"].as_i64(), b["errors"].as_i64()),
        (Some(4), Some(2), Some(1), Some(1))
    );
    assert_eq!(b["counts"], json!({"queued": 2}));
    assert!(b["created_at"].is_string());
    let (s, one) = env.get(&format!("/v1/batch-operations/{batch_id}")).await;
    assert_eq!(s, 200);
    assert_eq!(one["counts"], json!({"queued": 2}));
    let (s, _) = env.post(&format!("/v1/runs/{}/cancel", want[0]), json!({})).await;
    assert_eq!(s, 200);
    let (_, one) = env.get(&format!("/v1/batch-operations/{batch_id}")).await;
    assert_eq!(one["counts"], json!({"queued": 1, "cancelled": 1}), "counts follow the runs");

    let after = scrape(&env).await;
    assert!(
        metric_sum(&after, "svc_bulk_operations_total", &[])
            >= metric_sum(&before, "svc_bulk_operations_total", &[]) + 1.0
    );
    assert!(
        metric_sum(&after, "svc_bulk_items_processed_total", &[])
            >= metric_sum(&before, "svc_bulk_items_processed_total", &[]) + 4.0
    );
}

#[tokio::test]
async fn bulk_trigger_refusals() {
    let env = TestEnv::start().await;
    let job = env.job(NOWHERE, json!({})).await;
    let path = format!("/v1/jobs/{}/trigger/bulk", job["id"].as_str().unwrap());
    let many: Vec<Value> = (0..101).map(|i| json!({"payload": {"i": i}})).collect();
    let p = assert_problem(422, env.post(&path, json!({"items": many})).await, 422);
    assert_eq!(p["errors"][0]["location"], "body.items");
    assert_problem(422, env.post(&path, json!({"items": []})).await, 422);
    assert_problem(400, env.post(&path, json!({"items": [{"payload": 1, "delay_secs": 5}]})).await, 400);
    assert_problem(400, env.post(&path, json!({"items": "nope"})).await, 400);
    assert_problem(404, env.post("/v1/jobs/job_nope/trigger/bulk", json!({"items": [{}]})).await, 404);
    // Nothing above created a run or a batch.
    let project = job["project_id"].as_str().unwrap();
    let (_, runs) = env.get(&format!("/v1/runs?project_id={project}")).await;
    assert_eq!(runs["data"], json!([]));
    let (_, batches) = env.get(&format!("/v1/batch-operations?project_id={project}")).await;
    assert_eq!(batches["data"], json!([]));

    // Another project's key does not see the job.
    let other = env.project().await;
    let key = api_key(&env, &other, &["jobs:trigger"]).await;
    let (s, _) = call_as(&env, Method::POST, &path, &key, Some(json!({"items": [{}]}))).await;
    assert_eq!(s, 404);
    let (s, _) = call_as(&env, Method::GET, &format!("/v1/batch-operations?project_id={project}"), &key, None).await;
    assert_eq!(s, 403, "a key cannot name another project");

    let (s, _) = env.patch(&format!("/v1/jobs/{}", job["id"].as_str().unwrap()), json!({"enabled": false})).await;
    assert_eq!(s, 200);
    assert_problem(409, env.post(&path, json!({"items": [{}]})).await, 409);
}

#[tokio::test]
async fn bulk_cancel_takes_children_and_reports_each_run() {
    let env = TestEnv::start().await;
    let job = env.job(NOWHERE, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let project = job["project_id"].as_str().unwrap().to_string();
    let parent = env.trigger(job_id, json!({})).await["id"].as_str().unwrap().to_string();
    let child = env.trigger(job_id, json!({"parent_run_id": parent})).await["id"].as_str().unwrap().to_string();
    let grandchild = env.trigger(job_id, json!({"parent_run_id": child})).await["id"].as_str().unwrap().to_string();
    let done = env.trigger(job_id, json!({})).await["id"].as_str().unwrap().to_string();
    assert_eq!(env.post(&format!("/v1/runs/{done}/cancel"), json!({})).await.0, 200);
    let stranger_job = env.job(NOWHERE, json!({})).await;
    let stranger =
        env.trigger(stranger_job["id"].as_str().unwrap(), json!({})).await["id"].as_str().unwrap().to_string();
    let before = metric_sum(&scrape(&env).await, "svc_bulk_child_cancellations_total", &[]);

    let key = api_key(&env, &project, &["runs:write", "runs:read"]).await;
    let body = json!({"run_ids": [parent, done, "run_nope", stranger, "bad|id"]});
    let (s, v) = call_as(&env, Method::POST, "/v1/runs/bulk-cancel", &key, Some(body)).await;
    assert_eq!(s, 200, "{v}");
    let r = &v["results"];
    assert_eq!(ids(r, "run_id"), [parent.as_str(), done.as_str(), "run_nope", stranger.as_str(), "bad|id"]);
    assert_eq!(ids(r, "status"), ["cancelled", "not_cancellable", "not_found", "not_found", "not_found"]);
    assert_eq!(r[0]["children_cancelled"], 2);
    assert!(r[1]["error"].as_str().unwrap().contains("cancelled"), "{}", r[1]);
    assert!(r[3]["error"].is_string());

    for id in [&parent, &child, &grandchild] {
        assert_eq!(env.run(id).await["status"], "cancelled", "{id}");
    }
    assert_eq!(env.run(&stranger).await["status"], "queued", "another project's run is untouched");
    let reason: String = sqlx::query_scalar(
        "SELECT reason FROM job_run_transitions WHERE run_id = $1 ORDER BY at DESC, seq DESC, sub DESC LIMIT 1",
    )
    .bind(&grandchild)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert!(reason.contains("parent"), "{reason}");
    let after = metric_sum(&scrape(&env).await, "svc_bulk_child_cancellations_total", &[]);
    assert!(after >= before + 2.0, "{before} -> {after}");
    // Only the stranger's entry is still waiting in Redis.
    assert_eq!(env.zcard_all(|k| &k.ready).await, 1);

    let many: Vec<String> = (0..101).map(|i| format!("run_{i}")).collect();
    assert_problem(422, env.post("/v1/runs/bulk-cancel", json!({"run_ids": many})).await, 422);
    assert_problem(422, env.post("/v1/runs/bulk-cancel", json!({"run_ids": []})).await, 422);
    assert_problem(400, env.post("/v1/runs/bulk-cancel", json!({"ids": [parent]})).await, 400);
}

#[tokio::test]
async fn single_cancel_takes_unfinished_children_only() {
    let env = TestEnv::start().await;
    let job = env.job(NOWHERE, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let parent = env.trigger(job_id, json!({})).await["id"].as_str().unwrap().to_string();
    let kid = env.trigger(job_id, json!({"parent_run_id": parent})).await["id"].as_str().unwrap().to_string();
    let finished_kid = env.trigger(job_id, json!({"parent_run_id": parent})).await["id"].as_str().unwrap().to_string();
    assert_eq!(env.post(&format!("/v1/runs/{finished_kid}/cancel"), json!({})).await.0, 200);
    let before = metric_sum(&scrape(&env).await, "svc_bulk_child_cancellations_total", &[]);
    let (s, v) = env.post(&format!("/v1/runs/{parent}/cancel"), json!({})).await;
    assert_eq!((s, v["status"].as_str()), (200, Some("cancelled")), "{v}");
    assert_eq!(env.run(&kid).await["status"], "cancelled");
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM job_run_transitions WHERE run_id = $1 AND to_status = 'cancelled'")
            .bind(&finished_kid)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(events, 1, "an already cancelled child is not cancelled twice");
    let after = metric_sum(&scrape(&env).await, "svc_bulk_child_cancellations_total", &[]);
    assert!(after >= before + 1.0);
}

#[tokio::test]
async fn replay_makes_a_continuation_with_the_same_options() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"dedup_window_secs": 3600})).await;
    let job_id = job["id"].as_str().unwrap();
    let orig = env
        .trigger(
            job_id,
            json!({"payload": {"to": "a@b.c"}, "priority": 7, "tags": {"t": "1"}, "metadata": {"m": "2"},
            "max_attempts_override": 2, "idempotency_key": "once"}),
        )
        .await;
    let orig_id = orig["id"].as_str().unwrap();
    env.spawn_worker();
    env.wait_status(orig_id, "completed", T).await;

    let (s, v) = env.post(&format!("/v1/runs/{orig_id}/replay"), json!({})).await;
    assert_eq!(s, 201, "{v}");
    assert_ne!(v["id"], orig["id"]);
    assert_eq!(v["continuation_of"], orig_id);
    assert_eq!(v["triggered_by"], "replay");
    assert_eq!(v["payload"], json!({"to": "a@b.c"}));
    assert_eq!((v["priority"].as_i64(), v["max_attempts_override"].as_i64()), (Some(7), Some(2)));
    assert_eq!(v["tags"], json!({"t": "1"}));
    assert_eq!(v["metadata"], json!({"m": "2"}));
    assert!(v.get("idempotency_key").is_none(), "the key would return the original");
    // A dedup window does not fold a replay into the run it repeats.
    env.wait_status(v["id"].as_str().unwrap(), "completed", T).await;
    assert_eq!(target.count(), 2);

    let (s, b) = env.post("/v1/runs/bulk-replay", json!({"run_ids": [orig_id, "run_nope"]})).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(ids(&b["results"], "status"), ["replayed", "not_found"]);
    let new_id = b["results"][0]["new_run_id"].as_str().unwrap();
    assert_eq!(env.run(new_id).await["continuation_of"], orig_id);

    assert_problem(404, env.post("/v1/runs/run_nope/replay", json!({})).await, 404);
    assert_problem(422, env.post("/v1/runs/bulk-replay", json!({"run_ids": []})).await, 422);
    let other = env.project().await;
    let key = api_key(&env, &other, &["runs:write"]).await;
    let (s, _) = call_as(&env, Method::POST, &format!("/v1/runs/{orig_id}/replay"), &key, None).await;
    assert_eq!(s, 404);
}

/// A replay may carry an edited payload: it replaces the original's, and is
/// checked against the job's payload_schema as a trigger's is.
#[tokio::test]
async fn replay_with_an_edited_payload() {
    let env = TestEnv::start().await;
    let schema = json!({"type": "object", "required": ["to"], "properties": {"to": {"type": "string"}}});
    let job = env.job(NOWHERE, json!({"payload_schema": schema})).await;
    let orig = env.trigger(job["id"].as_str().unwrap(), json!({"payload": {"to": "a@b.c"}, "priority": 3})).await;
    let orig_id = orig["id"].as_str().unwrap();
    let replay = format!("/v1/runs/{orig_id}/replay");

    let (s, v) = env.post(&replay, json!({"payload": {"to": "x@y.z"}})).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["payload"], json!({"to": "x@y.z"}));
    assert_eq!((v["continuation_of"].as_str(), v["priority"].as_i64()), (Some(orig_id), Some(3)));
    assert_eq!(env.run(v["id"].as_str().unwrap()).await["payload"], json!({"to": "x@y.z"}));
    // No payload, a null one, or no body at all: the original's.
    for body in [json!({}), json!({"payload": null})] {
        let (s, v) = env.post(&replay, body).await;
        assert_eq!(s, 201, "{v}");
        assert_eq!(v["payload"], json!({"to": "a@b.c"}));
    }
    let key = api_key(&env, job["project_id"].as_str().unwrap(), &["runs:write"]).await;
    let (s, v) = call_as(&env, Method::POST, &replay, &key, None).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["payload"], json!({"to": "a@b.c"}));

    // A payload the schema refuses, an unknown field, a body that is not an
    // object: refused, and no run is made.
    let list = format!("/v1/runs?project_id={}", job["project_id"].as_str().unwrap());
    let before = env.get(&list).await.1["data"].as_array().unwrap().len();
    let v = assert_problem(422, env.post(&replay, json!({"payload": {"to": 5}})).await, 422);
    assert!(v["errors"][0]["location"].as_str().unwrap().starts_with("body.payload"), "{v}");
    assert_problem(400, env.post(&replay, json!({"payload": {"to": "a"}, "priority": 1})).await, 400);
    assert_problem(400, env.post(&replay, json!([1])).await, 400);
    let after = env.get(&list).await.1["data"].as_array().unwrap().len();
    assert_eq!(after, before, "a refused replay makes no run");
}

#[tokio::test]
async fn dlq_replay_takes_exhausted_failures_once() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::status(500));
    let project = env.project().await;
    let exhausted_job = env.job_in(&project, &target.url, json!({"max_attempts": 1, "slug": "exhausted"})).await;
    let other = Target::start().await;
    other.set_default(Reply::status(400));
    let early_job = env.job_in(&project, &other.url, json!({"max_attempts": 3, "slug": "early"})).await;
    let dead = env.trigger(exhausted_job["id"].as_str().unwrap(), json!({"payload": {"x": 1}})).await;
    let permanent = env.trigger(early_job["id"].as_str().unwrap(), json!({})).await;
    env.spawn_worker();
    env.wait_status(dead["id"].as_str().unwrap(), "failed", T).await;
    env.wait_status(permanent["id"].as_str().unwrap(), "failed", T).await;

    assert_problem(422, env.post("/v1/runs/bulk-dlq-replay", json!({"project_id": project, "limit": 0})).await, 422);
    assert_problem(422, env.post("/v1/runs/bulk-dlq-replay", json!({"project_id": project, "limit": 101})).await, 422);
    assert_problem(422, env.post("/v1/runs/bulk-dlq-replay", json!({})).await, 422);

    let (s, v) = env.post("/v1/runs/bulk-dlq-replay", json!({"project_id": project})).await;
    assert_eq!(s, 200, "{v}");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "only the run whose attempts are exhausted: {v}");
    assert_eq!(results[0]["run_id"], dead["id"]);
    assert_eq!(results[0]["status"], "replayed");
    let new_id = results[0]["new_run_id"].as_str().unwrap();
    let replayed = env.wait_status(new_id, "failed", T).await;
    assert_eq!(replayed["payload"], json!({"x": 1}));
    assert_eq!(replayed["continuation_of"], dead["id"]);

    // The original is out of the queue now; its replay failed too and is in
    // it in turn.
    let (_, v) =
        env.post("/v1/runs/bulk-dlq-replay", json!({"project_id": project, "job_id": exhausted_job["id"]})).await;
    let again: Vec<_> =
        v["results"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(again, [new_id.to_string()]);
    let newest = v["results"][0]["new_run_id"].as_str().unwrap().to_string();
    env.wait_status(&newest, "failed", T).await;
    let (_, v) = env.post("/v1/runs/bulk-dlq-replay", json!({"project_id": project})).await;
    let third: Vec<_> =
        v["results"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(third, [newest], "only the newest replay: {v}");
}

#[tokio::test]
async fn cancel_all_by_filter_counts_what_it_did() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let a = env.job_in(&project, NOWHERE, json!({"slug": "a"})).await;
    let b = env.job_in(&project, NOWHERE, json!({"slug": "b"})).await;
    let mut a_runs = Vec::new();
    for _ in 0..3 {
        a_runs.push(env.trigger(a["id"].as_str().unwrap(), json!({})).await["id"].as_str().unwrap().to_string());
    }
    let child = env.trigger(b["id"].as_str().unwrap(), json!({"parent_run_id": a_runs[0]})).await;
    let b_run = env.trigger(b["id"].as_str().unwrap(), json!({})).await;
    let later = env.trigger(a["id"].as_str().unwrap(), json!({"delay_secs": 3600})).await;
    assert_eq!(later["status"], "pending");

    assert_problem(
        422,
        env.post("/v1/runs/bulk-cancel-all", json!({"project_id": project, "status": "completed"})).await,
        422,
    );
    let (s, v) = env
        .post("/v1/runs/bulk-cancel-all", json!({"project_id": project, "job_id": a["id"], "status": "queued"}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v, json!({"matched": 3, "cancelled": 3, "children_cancelled": 1, "has_more": false}));
    for id in &a_runs {
        assert_eq!(env.run(id).await["status"], "cancelled");
    }
    assert_eq!(env.run(child["id"].as_str().unwrap()).await["status"], "cancelled", "a child of another job goes too");
    assert_eq!(env.run(b_run["id"].as_str().unwrap()).await["status"], "queued");
    assert_eq!(env.run(later["id"].as_str().unwrap()).await["status"], "pending", "the status filter held");

    let (_, v) = env.post("/v1/runs/bulk-cancel-all", json!({"project_id": project})).await;
    assert_eq!(v, json!({"matched": 2, "cancelled": 2, "children_cancelled": 0, "has_more": false}));
    let (_, v) = env.post("/v1/runs/bulk-cancel-all", json!({"project_id": project})).await;
    assert_eq!(v["matched"], 0);
}

#[tokio::test]
async fn restart_runs_a_finished_run_again_from_scratch() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::json(200, r#"{"first": true}"#)]);
    let job = env.job(&target.url, json!({})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({"payload": {"p": 1}})).await;
    let rid = run["id"].as_str().unwrap();
    let worker = env.worker();
    worker.run_once().await.unwrap();
    let done = env.wait_status(rid, "completed", T).await;
    assert_eq!(done["result"], json!({"first": true}));
    // Progress the run made, as the SDK would have stored it.
    for sql in [
        "INSERT INTO job_run_checkpoints (id, run_id, attempt, data) VALUES ('ckpt_1', $1, 1, '{\"step\": 2}')",
        "INSERT INTO job_run_state (run_id, key, value) VALUES ($1, 'cursor', '42')",
        "INSERT INTO job_run_outputs (id, run_id, attempt, name, data) VALUES ('out_1', $1, 1, 'report', '{}')",
        "INSERT INTO job_run_logs (id, run_id, attempt, level, message, logged_at) VALUES ('log_1', $1, 1, 'info', 'hi', now())",
    ] {
        sqlx::query(sql).bind(rid).execute(&env.pool).await.unwrap();
    }

    assert_problem(422, env.post(&format!("/v1/runs/{rid}/restart"), json!({"machine_preset": "huge"})).await, 422);
    assert_problem(400, env.post(&format!("/v1/runs/{rid}/restart"), json!({})).await, 400);
    assert_problem(404, env.post("/v1/runs/run_nope/restart", json!({"machine_preset": "small"})).await, 404);

    let (s, v) = env.post(&format!("/v1/runs/{rid}/restart"), json!({"machine_preset": "large"})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["id"], rid);
    assert_eq!(v["status"], "queued");
    assert_eq!(v["attempt"], 0);
    assert_eq!(v["resource_class"], "large");
    for gone in ["result", "finished_at", "started_at", "error", "execution_trace"] {
        assert!(v.get(gone).is_none(), "{gone} discarded: {v}");
    }
    let (_, cps) = env.get(&format!("/v1/runs/{rid}/checkpoints")).await;
    assert_eq!(cps["data"], json!([]));
    let (_, st) = env.get(&format!("/v1/runs/{rid}/state")).await;
    assert_eq!(st["state"], json!({}));
    let (_, outs) = env.get(&format!("/v1/runs/{rid}/outputs")).await;
    assert_eq!(outs["data"], json!([]));
    let (_, logs) = env.get(&format!("/v1/runs/{rid}/logs")).await;
    assert_eq!(logs["data"].as_array().unwrap().len(), 1, "logs are history and stay");

    target.script([Reply::json(200, r#"{"second": true}"#)]);
    worker.run_once().await.unwrap();
    let again = env.wait_status(rid, "completed", T).await;
    assert_eq!((again["attempt"].as_i64(), &again["result"]), (Some(1), &json!({"second": true})));
    assert_eq!(target.requests()[1].body["checkpoint"], Value::Null, "no checkpoint survives a restart");
    assert_eq!(target.requests()[1].body["payload"], json!({"p": 1}));
    let other = env.project().await;
    let key = api_key(&env, &other, &["runs:write"]).await;
    let (s, _) =
        call_as(&env, Method::POST, &format!("/v1/runs/{rid}/restart"), &key, Some(json!({"machine_preset": "small"})))
            .await;
    assert_eq!(s, 404, "another project's run");
    assert_eq!(env.patch(&format!("/v1/jobs/{}", job["id"].as_str().unwrap()), json!({"enabled": false})).await.0, 200);
    assert_problem(409, env.post(&format!("/v1/runs/{rid}/restart"), json!({"machine_preset": "small"})).await, 409);
    assert_eq!(env.run(rid).await["status"], "completed");

    // Not finished: 409, nothing changes.
    let a = accepted_async_run(&env, json!({}), json!({})).await;
    let p = assert_problem(
        409,
        env.post(&format!("/v1/runs/{}/restart", a.run_id), json!({"machine_preset": "small"})).await,
        409,
    );
    assert!(p["detail"].as_str().unwrap().contains("running"), "{p}");
    assert_eq!(env.run(&a.run_id).await["status"], "running");
}
