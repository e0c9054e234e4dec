//! Steps that wait on the world, end to end: cost gates crossed by SDK
//! usage during the run, sagas that compensate, stage notifications,
//! events emitted by steps, and a wait that outlives every process, a
//! Redis wipe and a dispatch that died between recording the event and
//! resuming the step.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use switchyard_shared::store::events::{self, NewEvent};

use crate::harness::TestEnv;
use crate::support::sdk::sdk_post;
use crate::support::workflows::{get_run, job, step, trigger, wait_run, wait_status, workflow, T};
use crate::target::{Reply, Target};

/// The decisions of a run's explain, of one type.
async fn decisions(env: &TestEnv, run_id: &str, decision_type: &str) -> Vec<Value> {
    let (s, v) = env.get(&format!("/v1/workflow-runs/{run_id}/explain?decision_type={decision_type}")).await;
    assert_eq!(s, 200, "{v}");
    v["decisions"].as_array().unwrap().clone()
}

/// The job run id and run token of the dispatch of `step_ref` in `run_id`.
fn dispatched(target: &Target, run_id: &str, step_ref: &str) -> (String, String) {
    let r = target
        .requests()
        .into_iter()
        .find(|r| r.body["metadata"]["workflow_run_id"] == run_id && r.body["metadata"]["step_ref"] == step_ref)
        .unwrap_or_else(|| panic!("no dispatch of {step_ref} in {run_id}"));
    (r.body["run_id"].as_str().unwrap().to_string(), r.header("x-svc-run-token").unwrap().to_string())
}

/// A cost gate compares the run's spending so far with its threshold when
/// it is reached: usage an SDK reported during the run puts it over, and
/// the gate waits for a decision; without it the gate passes at once; a
/// gate nobody decides takes its default action at its timeout.
#[tokio::test]
async fn a_cost_gate_crossed_by_sdk_usage_waits_for_a_decision() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({"name": "j"})).await;
    let gated = |gate: Value| {
        let mut g = json!({"step_ref": "gate", "cost_gate_threshold_microusd": 1000, "depends_on": ["hold"]});
        g.as_object_mut().unwrap().extend(gate.as_object().unwrap().clone());
        json!({"steps": [
            {"step_ref": "spend", "job_id": j},
            // Holds the run while the test reports usage, as a long step would.
            {"step_ref": "hold", "approval_approvers": ["ops"], "depends_on": ["spend"]},
            g,
            {"step_ref": "ship", "job_id": j, "depends_on": ["gate"]},
        ]})
    };
    let wf = workflow(&env, &project, gated(json!({}))).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let approve = |id: &str, r: &str| format!("/v1/workflow-runs/{id}/steps/{r}/approve");

    // Over the threshold: the gate waits, showing what it compared.
    let id = trigger(&env, &wf, json!({})).await["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "hold")["status"] == "waiting").await;
    let (spend_run, token) = dispatched(&target, &id, "spend");
    for cost in [900, 600] {
        let (s, u) = sdk_post(&env, &spend_run, "usage", &token, json!({"cost_microusd": cost})).await;
        assert_eq!(s, 201, "{u}");
    }
    assert_eq!(env.post(&approve(&id, "hold"), json!({})).await.0, 200);
    wait_run(&env, &id, |r| step(r, "gate")["status"] == "waiting").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run = get_run(&env, &id).await;
    assert_eq!(step(&run, "gate")["status"], "waiting", "{run}");
    assert_eq!(step(&run, "ship")["status"], "pending");
    let waiting = decisions(&env, &id, "waiting").await;
    let gate = waiting.iter().find(|d| d["step_ref"] == "gate").expect("the gate's waiting decision");
    assert_eq!(
        (gate["details"]["cost_microusd"].as_i64(), gate["details"]["threshold_microusd"].as_i64()),
        (Some(1500), Some(1000))
    );
    let (s, v) =
        env.call_as_actor("bob", Method::POST, &approve(&id, "gate"), Some(json!({"comment": "worth it"}))).await;
    assert_eq!(s, 200, "a cost gate names no approvers: any holder of the scope decides: {v}");
    let done = wait_status(&env, &id, "completed").await;
    assert_eq!(step(&done, "gate")["decided_by"], "bob");
    assert_eq!(step(&done, "ship")["status"], "completed");

    // Within the threshold: the gate passes at once.
    let id = trigger(&env, &wf, json!({})).await["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "hold")["status"] == "waiting").await;
    assert_eq!(env.post(&approve(&id, "hold"), json!({})).await.0, 200);
    let done = wait_status(&env, &id, "completed").await;
    assert_eq!(
        step(&done, "gate")["output"],
        json!({"action": "proceeded", "cost_microusd": 0, "threshold_microusd": 1000})
    );
    assert_eq!(decisions(&env, &id, "cost_gate_passed").await.len(), 1);

    // Over it and nobody decides: the default action (fail) at the timeout.
    let timed = workflow(&env, &project, gated(json!({"cost_gate_timeout_secs": 1}))).await;
    let id = trigger(&env, &timed, json!({})).await["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "hold")["status"] == "waiting").await;
    let (spend_run, token) = dispatched(&target, &id, "spend");
    assert_eq!(sdk_post(&env, &spend_run, "usage", &token, json!({"cost_microusd": 5000})).await.0, 201);
    assert_eq!(env.post(&approve(&id, "hold"), json!({})).await.0, 200);
    let failed = wait_status(&env, &id, "failed").await;
    let gate = step(&failed, "gate");
    assert_eq!(gate["status"], "failed", "{failed}");
    assert!(gate["error"].as_str().unwrap().contains("cost_gate_timeout_secs"), "{gate}");
    assert_eq!(step(&failed, "ship")["status"], "pending", "never started");
}

/// A three-step saga failing at its third step compensates the second
/// and then the first, each with its step's payload and output; a
/// compensation that fails for good leaves the run failed with
/// `compensation_failed` and the earlier steps as they were.
#[tokio::test]
async fn a_saga_that_fails_at_step_three_compensates_two_then_one() {
    let env = TestEnv::start().await;
    let work = Target::start().await;
    work.set_default(Reply::json(200, r#"{"booked":true}"#));
    let failing = Target::start().await;
    failing.set_default(Reply::status(422));
    let undo = Target::start().await;
    let hang = Target::start().await;
    hang.set_default(Reply::slow(Duration::from_secs(30)));
    let project = env.project().await;
    let h = job(&env, &project, &hang.url, json!({"name": "h"})).await;
    let w = job(&env, &project, &work.url, json!({"name": "w"})).await;
    let f = job(&env, &project, &failing.url, json!({"name": "f"})).await;
    let u = job(&env, &project, &undo.url, json!({"name": "u"})).await;
    let saga = |undo_job: &str| {
        json!({"steps": [
            {"step_ref": "one", "job_id": w, "compensation_job_id": undo_job, "payload": {"seat": 1}},
            {"step_ref": "two", "job_id": w, "compensation_job_id": undo_job, "compensation_timeout_secs": 30,
             "depends_on": ["one"]},
            {"step_ref": "three", "job_id": f, "depends_on": ["two"], "on_failure": "compensate"},
            // Still running when three fails: cancelled, not compensated.
            {"step_ref": "side", "job_id": h, "depends_on": ["one"], "compensation_job_id": undo_job},
        ]})
    };
    let wf = workflow(&env, &project, saga(&u)).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let id = trigger(&env, &wf, json!({"payload": {"order": 7}})).await["id"].as_str().unwrap().to_string();
    let run = wait_status(&env, &id, "failed").await;
    for (r, status) in [("one", "compensated"), ("two", "compensated"), ("three", "failed"), ("side", "cancelled")] {
        assert_eq!(step(&run, r)["status"], status, "{r}: {run:#}");
    }
    let side_run = step(&run, "side")["job_run_id"].as_str().unwrap().to_string();
    assert_eq!(env.run(&side_run).await["status"], "cancelled", "its job run with it");
    let comp = &run["compensation"];
    assert_eq!(comp["status"], "completed", "{run:#}");
    assert_eq!(comp["failed_step"], "three");
    let order: Vec<&str> = comp["steps"].as_array().unwrap().iter().map(|s| s["step_ref"].as_str().unwrap()).collect();
    assert_eq!(order, ["two", "one"]);
    assert!(run["error_class"].is_null(), "{run}");
    assert!(run["error"].as_str().unwrap().contains("compensated: two, one"), "{run}");
    // The compensation jobs ran in that order, each with its step's payload and output.
    let calls = undo.requests();
    let undone: Vec<&str> = calls.iter().map(|r| r.body["payload"]["step_ref"].as_str().unwrap()).collect();
    assert_eq!(undone, ["two", "one"], "one at a time, latest first");
    assert_eq!(calls[1].body["payload"]["payload"], json!({"seat": 1}));
    assert_eq!(
        calls[0].body["payload"]["payload"],
        json!({"order": 7}),
        "the run's payload for a step without its own"
    );
    assert_eq!(calls[0].body["payload"]["output"], json!({"booked": true}));
    assert_eq!(calls[0].body["payload"]["failed_step"], "three");
    let (_, two_comp) =
        env.get(&format!("/v1/runs/{}", step(&run, "two")["compensation_job_run_id"].as_str().unwrap())).await;
    assert_eq!(
        (two_comp["status"].as_str(), two_comp["timeout_secs_override"].as_i64()),
        (Some("completed"), Some(30)),
        "{two_comp}"
    );
    assert_eq!(decisions(&env, &id, "step_compensated").await.len(), 2);
    // Its completed work was undone: a step retry would build on nothing.
    let (s, p) = env.post(&format!("/v1/workflow-runs/{id}/steps/three/retry"), json!({})).await;
    assert_eq!(s, 409, "{p}");

    // The compensation of two fails (422, no retry): one is left completed.
    let broken = Target::start().await;
    broken.set_default(Reply::status(422));
    let b = job(&env, &project, &broken.url, json!({"name": "b"})).await;
    let wf = workflow(
        &env,
        &project,
        json!({"steps": [
            {"step_ref": "one", "job_id": w, "compensation_job_id": u},
            {"step_ref": "two", "job_id": w, "compensation_job_id": b, "depends_on": ["one"]},
            {"step_ref": "three", "job_id": f, "depends_on": ["two"], "on_failure": "compensate"},
        ]}),
    )
    .await;
    let undone_before = undo.count();
    let id = trigger(&env, &wf, json!({})).await["id"].as_str().unwrap().to_string();
    let run = wait_status(&env, &id, "failed").await;
    assert_eq!(run["error_class"], "compensation_failed", "{run:#}");
    assert_eq!(run["compensation"]["status"], "failed");
    let steps: Vec<(&str, &str)> = run["compensation"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step_ref"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect();
    assert_eq!(steps, [("two", "failed"), ("one", "not_compensated")]);
    assert_eq!(
        (step(&run, "one")["status"].as_str(), step(&run, "two")["status"].as_str()),
        (Some("completed"), Some("completed"))
    );
    assert_eq!(undo.count(), undone_before, "one's compensation never ran");
    let failed = decisions(&env, &id, "compensation_failed").await;
    assert_eq!(failed.len(), 1, "explain records the failed compensation: {failed:?}");
    assert_eq!(failed[0]["step_ref"], "two");
    assert!(failed[0]["details"]["job_run_id"].is_string(), "{failed:?}");
}

/// A cancel during a saga ends the compensation under way with the run.
#[tokio::test]
async fn a_saga_cancelled_midway_cancels_its_compensation() {
    let env = TestEnv::start().await;
    let work = Target::start().await;
    let failing = Target::start().await;
    failing.set_default(Reply::status(422));
    let hang = Target::start().await;
    hang.set_default(Reply::slow(Duration::from_secs(30)));
    let project = env.project().await;
    let w = job(&env, &project, &work.url, json!({"name": "w"})).await;
    let f = job(&env, &project, &failing.url, json!({"name": "f"})).await;
    let h = job(&env, &project, &hang.url, json!({"name": "h"})).await;
    let wf = workflow(
        &env,
        &project,
        json!({"steps": [
            {"step_ref": "one", "job_id": w, "compensation_job_id": h},
            {"step_ref": "two", "job_id": f, "depends_on": ["one"], "on_failure": "compensate"},
        ]}),
    )
    .await;
    env.spawn_worker();
    env.spawn_scheduler();
    let id = trigger(&env, &wf, json!({})).await["id"].as_str().unwrap().to_string();
    let run = wait_run(&env, &id, |r| r["compensation"]["status"] == "running" && r["status"] == "running").await;
    hang.wait_count(1, T).await;
    assert_eq!(env.post(&format!("/v1/workflow-runs/{id}/cancel"), json!({})).await.0, 200);
    let run2 = wait_status(&env, &id, "cancelled").await;
    assert_eq!(run2["compensation"]["status"], "interrupted", "{run2:#}");
    let comp_run = step(&run, "one")["compensation_job_run_id"].as_str().unwrap().to_string();
    assert_eq!(env.run(&comp_run).await["status"], "cancelled");
}

/// stage_notifications: each stage change named goes to the step's URLs
/// (kind step_stage) and to the subscriptions it names, each signed, written
/// by the statement that changes the step, whichever path that is.
#[tokio::test]
async fn stage_notifications_follow_each_step_through_its_stages() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let hooks = Target::start().await;
    let subscriber = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({"name": "j"})).await;
    let (s, sub) = env
        .post(
            "/v1/webhooks/subscriptions",
            json!({"project_id": project, "webhook_url": subscriber.url, "event_types": ["run.failed"], "secret": "sub-secret"}),
        )
        .await;
    assert_eq!(s, 200, "{sub}");
    let sub_id = sub["id"].as_str().unwrap();
    let steps = json!([
        {"step_ref": "a", "job_id": j, "stage_notifications": {"urls": [hooks.url], "subscription_ids": [sub_id]}},
        {"step_ref": "b", "approval_approvers": ["ops"], "depends_on": ["a"],
         "stage_notifications": {"urls": [hooks.url], "stages": ["waiting", "skipped"]}},
    ]);
    let wf = workflow(&env, &project, json!({"steps": steps})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let id = trigger(&env, &wf, json!({})).await["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "b")["status"] == "waiting").await;
    assert_eq!(env.post(&format!("/v1/workflow-runs/{id}/steps/b/skip"), json!({})).await.0, 200);
    wait_status(&env, &id, "completed").await;
    let got = hooks.wait_count(4, T).await;
    let mut seen: Vec<(String, String)> = got
        .iter()
        .map(|r| (r.body["data"]["step_ref"].as_str().unwrap().into(), r.body["event_type"].as_str().unwrap().into()))
        .collect();
    seen.sort();
    let want: Vec<(String, String)> = [
        ("a", "workflow_step.completed"),
        ("a", "workflow_step.started"),
        ("b", "workflow_step.skipped"),
        ("b", "workflow_step.waiting"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(seen, want);
    let completed = got.iter().find(|r| r.body["event_type"] == "workflow_step.completed").unwrap();
    assert_eq!(completed.body["data"]["workflow_run_id"], id.as_str());
    assert_eq!(completed.body["data"]["output"], json!({"ok": true}));
    let (_, key) = env.get(&format!("/v1/projects/{project}/signing-secret")).await;
    let key = key["signing_secret"].as_str().unwrap();
    let ts = completed.header("x-svc-timestamp").unwrap().parse().unwrap();
    let sig = switchyard_shared::outbound::signing::signature(key, ts, completed.raw.as_bytes());
    assert_eq!(completed.header("x-svc-signature"), Some(sig.as_str()), "a URL's is signed with the project's key");
    let signed = subscriber.wait_count(2, T).await;
    assert!(signed.iter().all(|r| r.header("x-svc-signature").is_some()), "a subscription's is signed");
    assert!(signed.iter().all(|r| r.body["data"]["step_ref"] == "a"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!((hooks.count(), subscriber.count()), (4, 2), "each once");
    let (_, ds) = env.get(&format!("/v1/webhook-deliveries?project_id={project}&kind=step_stage")).await;
    assert_eq!(ds["data"].as_array().unwrap().len(), 4, "{ds}");

    // Bad settings are refused, naming the field.
    for (bad, at) in [
        (json!({"urls": ["ftp://x"]}), "body.steps/0/stage_notifications/urls/0"),
        (json!({"urls": [hooks.url], "stages": ["exploded"]}), "body.steps/0/stage_notifications/stages/0"),
        (json!({"subscription_ids": ["whs_nope"]}), "body.steps/0/stage_notifications/subscription_ids/0"),
        (json!({"url": hooks.url}), "body.steps/0/stage_notifications"),
        (json!({}), "body.steps/0/stage_notifications"),
    ] {
        let body = json!({"project_id": project, "name": "bad", "steps": [{"step_ref": "a", "job_id": j, "stage_notifications": bad}]});
        let (s, p) = env.post("/v1/workflows", body).await;
        assert_eq!(s, 422, "{p}");
        assert!(p["errors"].as_array().unwrap().iter().any(|e| e["location"] == at), "{at} in {p}");
    }
}

/// The stage changes an event and a cancel make are sent like the
/// engine's, from their own transactions: a wait_for_event step `waiting`,
/// then `completed` by the event it waited for (its output the event's
/// payload), an approval `waiting`, then `cancelled` with its run; each to
/// the URL and to the named subscription, saying what the step's row says.
#[tokio::test]
async fn stage_notifications_follow_an_event_and_a_cancel() {
    let env = TestEnv::start().await;
    let hooks = Target::start().await;
    let project = env.project().await;
    let (s, sub) = env
        .post(
            "/v1/webhooks/subscriptions",
            json!({"project_id": project, "webhook_url": "http://127.0.0.1:9/sub", "event_types": ["run.failed"], "secret": "s"}),
        )
        .await;
    assert_eq!(s, 200, "{sub}");
    let sub_id = sub["id"].as_str().unwrap();
    let notify =
        json!({"urls": [hooks.url], "subscription_ids": [sub_id], "stages": ["waiting", "completed", "cancelled"]});
    let steps = json!([
        {"step_ref": "paid", "event_key": "order.paid", "event_timeout_secs": 600, "stage_notifications": notify},
        {"step_ref": "ok", "approval_approvers": ["ops"], "depends_on": ["paid"], "stage_notifications": notify},
    ]);
    let wf = workflow(&env, &project, json!({"steps": steps})).await;
    env.spawn_scheduler();
    let id = trigger(&env, &wf, json!({})).await["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "paid")["status"] == "waiting").await;
    let event = json!({"project_id": project, "event_key": "order.paid", "payload": {"amount": 5}});
    let (s, v) = env.post("/v1/events/dispatch", event).await;
    assert_eq!((s, &v["resumed_steps"]), (200, &json!(1)), "{v}");
    wait_run(&env, &id, |r| step(r, "ok")["status"] == "waiting").await;
    assert_eq!(env.post(&format!("/v1/workflow-runs/{id}/cancel"), json!({})).await.0, 200);
    let run = wait_status(&env, &id, "cancelled").await;

    let rows: Vec<(String, String, Value, String, Option<String>)> = sqlx::query_as(
        "SELECT kind, event_type, payload, url, subscription_id FROM webhook_deliveries
          WHERE workflow_run_id = $1 AND event_type LIKE 'workflow_step.%' ORDER BY id",
    )
    .bind(&id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let mut seen: Vec<(String, String, String)> = rows
        .iter()
        .map(|(kind, t, p, _, _)| (p["data"]["step_ref"].as_str().unwrap().into(), t.clone(), kind.clone()))
        .collect();
    seen.sort();
    let mut want = Vec::new();
    for (r, stage) in [("ok", "cancelled"), ("ok", "waiting"), ("paid", "completed"), ("paid", "waiting")] {
        for kind in ["step_stage", "subscription"] {
            want.push((r.to_string(), format!("workflow_step.{stage}"), kind.to_string()));
        }
    }
    assert_eq!(seen, want);
    for (kind, event_type, payload, url, sub) in &rows {
        match kind.as_str() {
            "step_stage" => assert_eq!((url.as_str(), sub.as_deref()), (hooks.url.as_str(), None)),
            _ => assert_eq!((url.as_str(), sub.as_deref()), ("http://127.0.0.1:9/sub", Some(sub_id))),
        }
        assert_eq!((&payload["event_type"], &payload["project_id"]), (&json!(event_type), &json!(project)));
        let at = payload["occurred_at"].as_str().unwrap();
        assert!(at.len() == 24 && at.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{at}");
        let data = &payload["data"];
        let s = step(&run, data["step_ref"].as_str().unwrap());
        let stage = event_type.trim_start_matches("workflow_step.");
        let (status, output, error) = match stage {
            "waiting" => (json!("waiting"), Value::Null, Value::Null),
            _ => (s["status"].clone(), s["output"].clone(), s["error"].clone()),
        };
        let want = json!({
            "workflow_run_id": id, "workflow_id": wf["id"], "step_run_id": s["id"], "step_ref": s["step_ref"],
            "step_type": s["step_type"], "stage": stage, "status": status, "attempt": s["attempt"],
            "output": output, "error": error,
        });
        assert_eq!(data, &want, "{event_type}");
    }
    assert_eq!(step(&run, "paid")["output"], json!({"amount": 5}));
    assert!(step(&run, "ok")["error"].is_string(), "the cancel says why");
}

/// A step with event_emit_key dispatches an event with its output when it
/// completes: it resumes another run's wait and triggers the project's
/// sources, once.
#[tokio::test]
async fn a_step_emits_an_event_that_resumes_another_run_and_triggers_sources() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::json(200, r#"{"order":42}"#));
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({"name": "j"})).await;
    let source_target = Target::start().await;
    let sj = job(&env, &project, &source_target.url, json!({"name": "sj"})).await;
    let (s, src) = env
        .post(
            "/v1/event-sources",
            json!({"project_id": project, "name": "paid", "event_key": "order.*", "target_type": "job", "target_id": sj}),
        )
        .await;
    assert_eq!(s, 201, "{src}");
    let waiter = workflow(
        &env,
        &project,
        json!({"steps": [{"step_ref": "paid", "event_key": "order.paid"}, {"step_ref": "ship", "job_id": j, "depends_on": ["paid"]}]}),
    )
    .await;
    let payer =
        workflow(&env, &project, json!({"steps": [{"step_ref": "pay", "job_id": j, "event_emit_key": "order.paid"}]}))
            .await;
    env.spawn_worker();
    env.spawn_scheduler();
    let w = trigger(&env, &waiter, json!({})).await["id"].as_str().unwrap().to_string();
    wait_run(&env, &w, |r| step(r, "paid")["status"] == "waiting").await;
    let p = trigger(&env, &payer, json!({})).await["id"].as_str().unwrap().to_string();
    let paid = wait_status(&env, &p, "completed").await;
    let event_id = step(&paid, "pay")["emitted_event_id"].as_str().expect("emitted").to_string();
    let done = wait_status(&env, &w, "completed").await;
    assert_eq!(step(&done, "paid")["output"], json!({"order": 42}), "the emitting step's output is the payload");
    let (s, ev) = env.get(&format!("/v1/events/{event_id}")).await;
    assert_eq!(s, 200, "{ev}");
    assert_eq!((ev["event_key"].as_str(), ev["resumed_steps"].as_i64()), (Some("order.paid"), Some(1)), "{ev}");
    assert_eq!(ev["triggered_runs"][0]["status"], "created", "{ev}");
    let sources = source_target.wait_count(1, T).await;
    assert_eq!(sources[0].body["payload"], json!({"order": 42}));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, list) = env.get(&format!("/v1/events?project_id={project}&event_key=order.paid")).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "emitted once: {list}");
    assert_eq!(source_target.count(), 1);
    assert_eq!(decisions(&env, &p, "event_emitted").await.len(), 1);
}

/// A wait outlives every process and Redis: with the scheduler and worker
/// stopped and the test's Redis data gone, a dispatch records the event
/// and dies before resuming anything; the step is still waiting. New
/// processes start, the dispatch is repeated with its idempotency key and
/// finishes the event, resuming the step once, and the run completes with
/// each job step run once.
#[tokio::test]
async fn a_wait_survives_restarts_a_redis_wipe_and_a_dispatch_that_died_midway() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({"name": "j"})).await;
    let steps = json!([
        {"step_ref": "paid", "event_key": "order.paid", "event_timeout_secs": 600},
        {"step_ref": "ok", "approval_approvers": ["ops"], "approval_timeout_secs": 600, "depends_on": ["paid"]},
        {"step_ref": "ship", "job_id": j, "depends_on": ["ok"]},
    ]);
    let wf = workflow(&env, &project, json!({"steps": steps})).await;
    let worker = env.spawn_worker();
    let scheduler = env.spawn_scheduler();
    let id = trigger(&env, &wf, json!({})).await["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "paid")["status"] == "waiting").await;
    worker.cancel();
    scheduler.cancel();
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.wipe_redis().await;

    // The dispatch's first write, then a crash: the event is recorded, not complete.
    let new = NewEvent {
        id: switchyard_shared::ids::event_id(),
        project_id: project.clone(),
        event_key: "order.paid".into(),
        payload: Some(json!({"amount": 5})),
        idempotency_key: Some("evt-1".into()),
        created_by: None,
    };
    let (recorded, fresh) = events::insert(&env.pool, &new).await.expect("insert");
    assert!(fresh && recorded.completed_at.is_none());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(step(&get_run(&env, &id).await, "paid")["status"], "waiting", "nothing resumed it");

    env.spawn_worker();
    env.spawn_scheduler();
    let body = json!({"project_id": project, "event_key": "order.paid", "payload": {"amount": 999}, "idempotency_key": "evt-1"});
    let (s, v) = env.post("/v1/events/dispatch", body.clone()).await;
    assert_eq!(
        (s, v["event_id"].as_str(), v["resumed_steps"].as_i64()),
        (200, Some(recorded.id.as_str()), Some(1)),
        "{v}"
    );
    wait_run(&env, &id, |r| step(r, "ok")["status"] == "waiting").await;
    assert_eq!(step(&get_run(&env, &id).await, "paid")["output"], json!({"amount": 5}), "the recorded event's payload");
    let (s, again) = env.post("/v1/events/dispatch", body).await;
    assert_eq!((s, again["resumed_steps"].as_i64()), (200, Some(1)), "finished once: {again}");
    let (s, _) = env
        .call_as_actor("ops", Method::POST, &format!("/v1/workflow-runs/{id}/steps/ok/approve"), Some(json!({})))
        .await;
    assert_eq!(s, 200);
    let done = wait_status(&env, &id, "completed").await;
    assert_eq!(step(&done, "ship")["status"], "completed");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(target.count(), 1, "ship ran once");
}
