//! Cancel on event: an event of a job's `cancel_on` key cancels the
//! unfinished runs its `match` holds for, made before it and (with
//! `timeout_secs`) not too long before; running attempts included.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::target::{Reply, Target};

const T: Duration = Duration::from_secs(30);

fn rule(extra: Value) -> Value {
    let mut r = json!({"event_key": "order.cancelled",
                       "match": {"==": [{"var": "event.order_id"}, {"var": "run.order_id"}]}});
    r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    r
}

async fn dispatch(env: &TestEnv, project: &str, key: &str, payload: Value) -> Value {
    let body = json!({"project_id": project, "event_key": key, "payload": payload});
    let (s, v) = env.post("/v1/events/dispatch", body).await;
    assert_eq!(s, 200, "{v}");
    v
}

fn id(v: &Value) -> &str {
    v["id"].as_str().unwrap()
}

#[tokio::test]
async fn an_event_cancels_the_runs_its_match_holds_for_and_none_it_makes() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/", json!({"cancel_on": [rule(json!({}))]})).await;
    assert_eq!(job["cancel_on"][0]["match"], rule(json!({}))["match"], "{job}");
    let project = job["project_id"].as_str().unwrap().to_string();
    let other = env.job_in(&project, "http://127.0.0.1:9/", json!({"name": "other"})).await;
    let a = env.trigger(id(&job), json!({"payload": {"order_id": "a"}})).await;
    let a2 = env.trigger(id(&job), json!({"payload": {"order_id": "a"}, "delay_secs": 600})).await;
    let b = env.trigger(id(&job), json!({"payload": {"order_id": "b"}})).await;
    let plain = env.trigger(id(&other), json!({"payload": {"order_id": "a"}})).await;
    // A source on the same key makes a run of the job from the event:
    // the event does not cancel what it makes.
    let body = json!({"project_id": project, "name": "again", "event_key": "order.cancelled",
                      "target_type": "job", "target_id": id(&job)});
    let (s, v) = env.post("/v1/event-sources", body).await;
    assert_eq!(s, 201, "{v}");

    assert_eq!(dispatch(&env, &project, "order.created", json!({"order_id": "a"})).await["cancelled_runs"], 0);
    let d = dispatch(&env, &project, "order.cancelled", json!({"order_id": "a"})).await;
    assert_eq!(d["cancelled_runs"], 2, "{d}");
    let made = d["triggered_runs"][0]["id"].as_str().expect("the source's run");
    for r in [&a, &a2] {
        let run = env.run(id(r)).await;
        assert_eq!(run["status"], "cancelled", "{run}");
        assert!(run["error"].as_str().unwrap().starts_with("cancelled by event order.cancelled"), "{run}");
    }
    for r in [id(&b), id(&plain), made] {
        let run = env.run(r).await;
        assert_ne!(run["status"], "cancelled", "{run}");
    }
    let (s, e) = env.get(&format!("/v1/events/{}", d["event_id"].as_str().unwrap())).await;
    assert_eq!((s, &e["cancelled_runs"]), (200, &json!(2)), "{e}");
}

#[tokio::test]
async fn a_rules_timeout_spares_older_runs_and_a_running_attempt_is_cancelled() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::slow(Duration::from_secs(2)));
    let job = env.job(&target.url, json!({"cancel_on": [rule(json!({"timeout_secs": 600}))]})).await;
    let project = job["project_id"].as_str().unwrap().to_string();
    let old = env.trigger(id(&job), json!({"payload": {"order_id": "a"}, "delay_secs": 3600})).await;
    sqlx::query("UPDATE job_runs SET created_at = now() - interval '1 hour' WHERE id = $1")
        .bind(id(&old))
        .execute(&env.pool)
        .await
        .unwrap();
    let live = env.trigger(id(&job), json!({"payload": {"order_id": "a"}})).await;
    env.spawn_worker();
    env.wait_status(id(&live), "running", T).await;

    let d = dispatch(&env, &project, "order.cancelled", json!({"order_id": "a"})).await;
    assert_eq!(d["cancelled_runs"], 1, "only the run inside the timeout: {d}");
    assert_eq!(env.run(id(&old)).await["status"], "pending");
    assert_eq!(env.run(id(&live)).await["status"], "cancelled");
    // The attempt in flight ends; the run stays cancelled.
    target.wait_count(1, T).await;
    let deadline = tokio::time::Instant::now() + T;
    while env.zcard_all(|k| &k.leases).await != 0 {
        assert!(tokio::time::Instant::now() < deadline, "the lease was never released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(env.run(id(&live)).await["status"], "cancelled");
}

#[tokio::test]
async fn cancel_on_rules_are_checked() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let bad = [
        (json!([{"event_key": "order.*"}]), "body.cancel_on[0].event_key"),
        (json!([{"event_key": "a", "match": {"no_such_op": [1]}}]), "body.cancel_on[0].match"),
        (json!([{"event_key": "a", "timeout_secs": 0}]), "body.cancel_on[0].timeout_secs"),
        (json!((0..11).map(|i| json!({"event_key": format!("k{i}")})).collect::<Vec<_>>()), "body.cancel_on"),
    ];
    for (rules, at) in bad {
        let body =
            json!({"project_id": project, "name": "c", "endpoint_url": "http://127.0.0.1:9/x", "cancel_on": rules});
        let v = assert_problem(422, env.post("/v1/jobs", body).await, 422);
        assert_eq!(v["errors"][0]["location"], at, "{v}");
    }
}
