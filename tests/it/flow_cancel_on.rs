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
        (json!([{"event_key": "order.*"}]), "body.cancel_on/0/event_key"),
        (json!([{"event_key": "a", "match": {"no_such_op": [1]}}]), "body.cancel_on/0/match"),
        (json!([{"event_key": "a", "timeout_secs": 0}]), "body.cancel_on/0/timeout_secs"),
        (json!((0..11).map(|i| json!({"event_key": format!("k{i}")})).collect::<Vec<_>>()), "body.cancel_on"),
    ];
    for (rules, at) in bad {
        let body =
            json!({"project_id": project, "name": "c", "endpoint_url": "http://127.0.0.1:9/x", "cancel_on": rules});
        let v = assert_problem(422, env.post("/v1/jobs", body).await, 422);
        assert_eq!(v["errors"][0]["location"], at, "{v}");
    }
}

/// A workflow's rules cancel its unfinished runs as a person's cancel
/// would: the run, its waiting step and its step's job run in flight; the
/// run the match does not hold for goes on, and the event counts the
/// workflow runs it cancelled.
#[tokio::test]
async fn an_event_cancels_the_workflow_runs_its_match_holds_for() {
    use crate::support::workflows::{job, step, trigger, wait_run, wait_status, workflow};
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::slow(Duration::from_secs(30)));
    let project = env.project().await;
    let slow = job(&env, &project, &target.url, json!({"name": "slow", "timeout_secs": 60})).await;
    let steps = json!([{"step_ref": "work", "job_id": slow}, {"step_ref": "hold", "event_key": "order.paid"}]);
    let wf = workflow(&env, &project, json!({"steps": steps, "cancel_on": [rule(json!({}))]})).await;
    assert_eq!(wf["cancel_on"][0]["event_key"], "order.cancelled", "{wf}");
    assert!(wf["cancel_on"][0].get("timeout_secs").is_none(), "an absent field is left out, not null: {wf}");
    env.spawn_worker();
    env.spawn_scheduler();
    let a = trigger(&env, &wf, json!({"payload": {"order_id": "a"}})).await["id"].as_str().unwrap().to_string();
    let b = trigger(&env, &wf, json!({"payload": {"order_id": "b"}})).await["id"].as_str().unwrap().to_string();
    let going = |r: &Value| step(r, "hold")["status"] == "waiting" && step(r, "work")["status"] == "running";
    let before = wait_run(&env, &a, going).await;
    wait_run(&env, &b, going).await;
    target.wait_count(2, T).await;

    let d = dispatch(&env, &project, "order.cancelled", json!({"order_id": "a"})).await;
    assert_eq!(d["cancelled_runs"], 1, "{d}");
    let run = wait_status(&env, &a, "cancelled").await;
    assert!(run["error"].as_str().unwrap_or_default().contains("order.cancelled"), "the reason names the event: {run}");
    assert_eq!(step(&run, "hold")["status"], "cancelled", "{run}");
    let job_run = step(&before, "work")["job_run_id"].as_str().expect("the step's job run").to_string();
    env.wait_status(&job_run, "cancelled", T).await;
    let other = wait_run(&env, &b, going).await;
    assert_eq!(other["status"], "running", "{other}");

    // Rules are replaced by a PATCH and checked like a job's.
    let path = format!("/v1/workflows/{}", wf["id"].as_str().unwrap());
    let p = assert_problem(422, env.patch(&path, json!({"cancel_on": [{"event_key": ""}]})).await, 422);
    assert_eq!(p["errors"][0]["location"], "body.cancel_on/0/event_key", "{p}");
    let (s, v) = env.patch(&path, json!({"cancel_on": []})).await;
    assert_eq!((s, v["cancel_on"].clone()), (200, json!([])), "{v}");
    let d = dispatch(&env, &project, "order.cancelled", json!({"order_id": "b"})).await;
    assert_eq!(d["cancelled_runs"], 0, "no rule, no cancel: {d}");
    assert_eq!(wait_run(&env, &b, going).await["status"], "running");
}
