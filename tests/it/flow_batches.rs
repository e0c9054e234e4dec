//! Batching: triggers of a batching job join the open batch of their key;
//! a full batch, or one whose time is up, becomes one run whose payload is
//! the array of their payloads in arrival order. No trigger is lost or
//! taken twice, also under concurrent triggers, Redis losing its data and
//! a scheduler that starts only later.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::target::Target;

const T: Duration = Duration::from_secs(30);

async fn batch(env: &TestEnv, id: &str) -> Value {
    let (s, v) = env.get(&format!("/v1/trigger-batches/{id}")).await;
    assert_eq!(s, 200, "{v}");
    v
}

#[tokio::test]
async fn concurrent_triggers_fill_batches_of_max_size_each_taken_once() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"batch": {"key": "tenant", "max_size": 3, "timeout_secs": 3600}})).await;
    let id = job["id"].as_str().unwrap();
    let path = format!("/v1/jobs/{id}/trigger");
    let calls = (0..7).map(|i| env.post(&path, json!({"payload": {"tenant": "a", "i": i}})));
    let answers = futures::future::join_all(calls).await;
    assert!(answers.iter().all(|(s, _)| *s == 202), "{answers:?}");
    let triggers: HashSet<&str> = answers.iter().map(|(_, v)| v["trigger_id"].as_str().unwrap()).collect();
    assert_eq!(triggers.len(), 7);
    let runs: Vec<&str> = answers.iter().filter_map(|(_, v)| v["run_id"].as_str()).collect();
    assert_eq!(runs.len(), 2, "two full batches made their runs: {answers:?}");
    let batches: HashSet<&str> = answers.iter().map(|(_, v)| v["batch_id"].as_str().unwrap()).collect();
    assert_eq!(batches.len(), 3);

    // Redis loses its data: the batches and their runs are Postgres'.
    env.wipe_redis().await;
    env.spawn_worker();
    env.spawn_worker();
    env.spawn_scheduler();
    env.spawn_scheduler();
    let mut seen = HashSet::new();
    for b in &batches {
        let v = batch(&env, b).await;
        for t in v["trigger_ids"].as_array().unwrap() {
            assert!(seen.insert(t.as_str().unwrap().to_string()), "trigger {t} in two batches");
        }
        if v["status"] == "closed" {
            let run = env.wait_status(v["run_id"].as_str().unwrap(), "completed", T).await;
            assert_eq!(run["triggered_by"], "batch");
            assert_eq!(run["metadata"]["trigger_batch_id"], json!(b));
            let items = run["payload"].as_array().unwrap();
            assert_eq!(items.len(), 3);
            // Arrival order is the order of the triggers' positions.
            for (pos, t) in v["trigger_ids"].as_array().unwrap().iter().enumerate() {
                let (_, answer) = answers.iter().find(|(_, a)| a["trigger_id"] == *t).unwrap();
                assert_eq!(answer["position"], json!(pos));
                assert_eq!(items[pos], answer_payload(answer, &answers));
            }
        } else {
            assert_eq!((v["size"].as_i64(), v["run_id"].as_str()), (Some(1), None), "{v}");
        }
    }
    assert_eq!(seen, triggers.iter().map(|t| t.to_string()).collect(), "every trigger in exactly one batch");
    assert_eq!(target.count(), 2);
}

/// The payload a trigger sent, found by its answer's position in the list
/// of calls (each call's payload carried its index).
fn answer_payload(answer: &Value, answers: &[(u16, Value)]) -> Value {
    let i = answers.iter().position(|(_, a)| a["trigger_id"] == answer["trigger_id"]).unwrap();
    json!({"tenant": "a", "i": i})
}

#[tokio::test]
async fn a_batch_closes_when_its_time_is_up_even_if_no_scheduler_ran_meanwhile() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"batch": {"max_size": 100, "timeout_secs": 1}})).await;
    let id = job["id"].as_str().unwrap();
    let path = format!("/v1/jobs/{id}/trigger");
    let first = env.post(&path, json!({"payload": {"n": 1}})).await.1;
    let second = env.post(&path, json!({"payload": {"n": 2}})).await.1;
    assert_eq!(first["batch_id"], second["batch_id"]);
    assert_eq!((first["position"].as_i64(), second["position"].as_i64()), (Some(0), Some(1)));
    // A scheduler starts only now, as one would after a crash: the batch
    // waited in Postgres.
    env.spawn_scheduler();
    env.spawn_worker();
    let b = first["batch_id"].as_str().unwrap();
    let deadline = tokio::time::Instant::now() + T;
    let closed = loop {
        let v = batch(&env, b).await;
        if v["status"] == "closed" {
            break v;
        }
        assert!(tokio::time::Instant::now() < deadline, "the batch never closed: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let run = env.wait_status(closed["run_id"].as_str().unwrap(), "completed", T).await;
    assert_eq!(run["payload"], json!([{"n": 1}, {"n": 2}]));
    assert_eq!(target.requests()[0].body["payload"], json!([{"n": 1}, {"n": 2}]));
    // The next trigger opens a new batch.
    let third = env.post(&path, json!({"payload": {"n": 3}})).await.1;
    assert_ne!(third["batch_id"], first["batch_id"]);
}

#[tokio::test]
async fn batching_refuses_what_it_cannot_honour() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let bad = [
        (json!({"batch": {"max_size": 1, "timeout_secs": 5}}), "body.batch/max_size"),
        (json!({"batch": {"max_size": 5, "timeout_secs": 0}}), "body.batch/timeout_secs"),
        (json!({"batch": {"max_size": 5, "timeout_secs": 5}, "singleton": {"mode": "skip"}}), "body.batch"),
    ];
    for (extra, at) in bad {
        let mut body = json!({"project_id": project, "name": "b", "endpoint_url": "http://127.0.0.1:9/x"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let v = assert_problem(422, env.post("/v1/jobs", body).await, 422);
        assert_eq!(v["errors"].as_array().unwrap().last().unwrap()["location"], at, "{v}");
    }
    let job = env.job_in(&project, "http://127.0.0.1:9/x", json!({"batch": {"max_size": 5, "timeout_secs": 60}})).await;
    let id = job["id"].as_str().unwrap();
    let v = assert_problem(422, env.post(&format!("/v1/jobs/{id}/trigger"), json!({"delay_secs": 5})).await, 422);
    assert_eq!(v["errors"][0]["location"], "body.delay_secs", "{v}");
    let bulk = json!({"items": [{"payload": 1}]});
    let (s, v) = env.post(&format!("/v1/jobs/{id}/trigger/bulk"), bulk).await;
    assert_eq!(
        (s, &v["results"][0]["status"]),
        (200, &json!("error")),
        "a bulk trigger does not bypass the batch: {v}"
    );
    assert_problem(404, env.get("/v1/trigger-batches/tbat_nope").await, 404);
}
