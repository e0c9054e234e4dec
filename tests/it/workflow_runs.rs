//! Workflow runs end to end: a worker and a scheduler against a local
//! target run DAGs of job, sleep and sub-workflow steps; conditions,
//! on_failure, pause, resume, cancel, timeouts, step retry and replay,
//! version policies, run caps, and a crash between a step's outcome and
//! the next step's enqueue with two workers and two schedulers.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use switchyard_shared::domain::RunStatus;
use switchyard_shared::store::workflow_moves;
use switchyard_shared::store::workflow_runs::{NewWorkflowRun, Triggered};
use switchyard_shared::store::{step_outcomes, workflow_engine, workflows, Outcome, Tenant};

use crate::harness::{assert_problem, TestEnv};
use crate::support::workflows::{get_run, job, step, trigger, wait_run, wait_status, workflow, T};
use crate::target::{Reply, Target};

fn statuses(run: &Value) -> HashMap<String, String> {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step_ref"].as_str().unwrap().to_string(), s["status"].as_str().unwrap().to_string()))
        .collect()
}

/// The step refs the target was called for, in arrival order.
fn called(target: &Target) -> Vec<String> {
    target.requests().iter().map(|r| r.body["metadata"]["step_ref"].as_str().unwrap_or("?").to_string()).collect()
}

fn diamond(job: &str) -> Value {
    json!([
        {"step_ref": "a", "job_id": job},
        {"step_ref": "b", "job_id": job, "depends_on": ["a"], "output_transform": "n"},
        {"step_ref": "c", "job_id": job, "depends_on": ["a"], "payload": {"own": true}, "retry_max_attempts": 2,
         "retry_backoff": "fixed", "timeout_secs_override": 9, "concurrency_key": "tenant-1", "resource_class": "large"},
        {"step_ref": "d", "job_id": job, "depends_on": ["b", "c"]},
    ])
}

#[tokio::test]
async fn a_diamond_runs_each_step_once_after_its_dependencies() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::json(200, r#"{"n": 7}"#));
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let wf = workflow(&env, &project, json!({"steps": diamond(&j)})).await;
    let run = trigger(&env, &wf, json!({"payload": {"order": 42}, "tags": {"env": "test"}})).await;
    assert_eq!(run["status"], "running");
    assert_eq!(run["version_id"], wf["version_id"]);
    assert_eq!(run["steps"].as_array().unwrap().len(), 4, "every step is listed from the start: {run}");
    // The trigger's own transaction started the first step.
    let first = statuses(&run);
    assert_eq!(
        (first.get("a").map(String::as_str), first.get("b").map(String::as_str), first.get("d").map(String::as_str)),
        (Some("running"), Some("pending"), Some("pending"))
    );
    assert!(step(&run, "a")["job_run_id"].is_string(), "{run}");
    env.spawn_worker();
    env.spawn_scheduler();
    let id = run["id"].as_str().unwrap();
    let done = wait_status(&env, id, "completed").await;
    assert!(statuses(&done).values().all(|s| s == "completed"), "{done}");
    let order = called(&target);
    assert_eq!(order.len(), 4, "each step dispatched once: {order:?}");
    assert_eq!(order[0], "a");
    assert_eq!(order[3], "d");
    // The step's payload when it has one, the run's otherwise.
    let by_ref: HashMap<String, Value> = target
        .requests()
        .iter()
        .map(|r| (r.body["metadata"]["step_ref"].as_str().unwrap().to_string(), r.body["payload"].clone()))
        .collect();
    assert_eq!(by_ref["a"], json!({"order": 42}));
    assert_eq!(by_ref["c"], json!({"own": true}));
    // output_transform shaped b's output; the run's output holds them all.
    assert_eq!(step(&done, "b")["output"], json!(7));
    assert_eq!(step(&done, "a")["output"], json!({"n": 7}));
    assert_eq!(done["output"]["b"], json!(7));
    assert_eq!(step(&done, "a")["attempt"], 1);
    let (s, g) = env.get(&format!("/v1/workflow-runs/{id}/graph")).await;
    assert_eq!(s, 200, "{g}");
    assert_eq!(g["nodes"].as_array().unwrap().len(), 4);
    assert_eq!(g["edges"].as_array().unwrap().len(), 4);
    assert_eq!(g["runnable"], json!([]));
    let path = g["critical_path"]["step_refs"].as_array().unwrap();
    assert_eq!((path.len(), &path[0], &path[2]), (3, &json!("a"), &json!("d")), "{g}");
    // Each step's job run is a run of the job, triggered by the workflow.
    let jr = env.run(step(&done, "d")["job_run_id"].as_str().unwrap()).await;
    assert_eq!(jr["triggered_by"], "workflow");
    assert_eq!(jr["status"], "completed");
    assert_eq!(jr["tags"]["env"], "test");
    assert_eq!(jr["workflow_step_run_id"], step(&done, "d")["id"]);
    // A step's overrides reach its job run, so the job's rules apply with them.
    let jc = env.run(step(&done, "c")["job_run_id"].as_str().unwrap()).await;
    for (k, v) in [
        ("max_attempts_override", json!(2)),
        ("retry_backoff", json!("fixed")),
        ("timeout_secs_override", json!(9)),
        ("concurrency_key", json!("tenant-1")),
        ("resource_class", json!("large")),
    ] {
        assert_eq!(jc[k], v, "{k}: {jc}");
    }
    // The listing finds it by workflow and status.
    let (s, page) = env
        .get(&format!(
            "/v1/workflow-runs?project_id={project}&workflow_id={}&status=completed",
            wf["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(s, 200);
    assert_eq!(page["data"][0]["id"], id);
    assert!(page["data"][0].get("steps").is_none(), "listings leave steps out");
}

#[tokio::test]
async fn a_false_condition_skips_the_step_and_explain_says_why() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let steps = json!([
        {"step_ref": "a", "job_id": j},
        {"step_ref": "vip", "job_id": j, "depends_on": ["a"], "condition": {"==": [{"var": "payload.tier"}, "gold"]}},
        {"step_ref": "after", "job_id": j, "depends_on": ["vip"]},
    ]);
    let wf = workflow(&env, &project, json!({"steps": steps})).await;
    let run = trigger(&env, &wf, json!({"payload": {"tier": "silver"}})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let id = run["id"].as_str().unwrap();
    let done = wait_status(&env, id, "completed").await;
    assert_eq!(step(&done, "vip")["status"], "skipped");
    assert_eq!(step(&done, "after")["status"], "completed", "a skipped dependency is satisfied");
    assert_eq!(called(&target), ["a", "after"]);

    let (s, ex) = env.get(&format!("/v1/workflow-runs/{id}/explain?step_ref=vip&decision_type=skipped")).await;
    assert_eq!(s, 200, "{ex}");
    let d = &ex["decisions"].as_array().unwrap()[0];
    assert_eq!(d["step_ref"], "vip");
    assert!(d["reason"].as_str().unwrap().contains("false"), "{d}");
    assert_eq!(d["details"]["input"]["payload"]["tier"], "silver", "the evaluated input is recorded: {d}");
    assert_eq!(d["details"]["input"]["steps"]["a"]["status"], "completed");
    let (_, all) = env.get(&format!("/v1/workflow-runs/{id}/explain")).await;
    let kinds: Vec<&str> =
        all["decisions"].as_array().unwrap().iter().map(|d| d["decision_type"].as_str().unwrap()).collect();
    for k in ["scheduled", "step_completed", "skipped", "run_ended"] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
}

#[tokio::test]
async fn a_failed_step_fails_the_run_and_a_step_retry_takes_it_up_again() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    // 400: failed at once, no job-level retry.
    target.script([Reply::status(200), Reply::status(400)]);
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let steps = json!([
        {"step_ref": "a", "job_id": j},
        {"step_ref": "b", "job_id": j, "depends_on": ["a"]},
        {"step_ref": "c", "job_id": j, "depends_on": ["b"]},
    ]);
    let wf = workflow(&env, &project, json!({"steps": steps})).await;
    let run = trigger(&env, &wf, json!({})).await;
    let id = run["id"].as_str().unwrap();
    env.spawn_worker();
    env.spawn_scheduler();
    let failed = wait_status(&env, id, "failed").await;
    assert_eq!(step(&failed, "b")["status"], "failed");
    assert_eq!(step(&failed, "c")["status"], "pending", "never reached");
    assert!(failed["error"].as_str().unwrap().contains("step b failed"), "{failed}");

    // Only an ended step can be retried; an unknown one is 404.
    let (s, _) = env.post(&format!("/v1/workflow-runs/{id}/steps/c/retry"), json!({})).await;
    assert_eq!(s, 409);
    assert_problem(404, env.post(&format!("/v1/workflow-runs/{id}/steps/nope/retry"), json!({})).await, 404);
    let (s, v) = env.post(&format!("/v1/workflow-runs/{id}/steps/b/retry"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "running");
    let done = wait_status(&env, id, "completed").await;
    assert_eq!(step(&done, "b")["attempt"], 2);
    assert_eq!(step(&done, "a")["attempt"], 1, "a retry does not run the steps before it");
    assert_eq!(called(&target), ["a", "b", "b", "c"]);

    // Replay-subtree runs b and everything below it again.
    let (s, v) = env.post(&format!("/v1/workflow-runs/{id}/steps/b/replay-subtree"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    wait_run(&env, id, |r| r["status"] == "completed" && step(r, "c")["attempt"] == 2).await;
    assert_eq!(called(&target), ["a", "b", "b", "c", "b", "c"]);
    let (_, audit) = env.get(&format!("/v1/audit-events?project_id={project}")).await;
    let actions: Vec<&str> = audit["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert!(
        actions.contains(&"workflow_run.step_retried") && actions.contains(&"workflow_run.subtree_replayed"),
        "{actions:?}"
    );
}

#[tokio::test]
async fn on_failure_continue_and_skip_dependents() {
    let env = TestEnv::start().await;
    let ok = Target::start().await;
    let bad = Target::start().await;
    bad.set_default(Reply::status(400));
    let project = env.project().await;
    let good = job(&env, &project, &ok.url, json!({"name": "good"})).await;
    let broken = job(&env, &project, &bad.url, json!({"name": "broken"})).await;
    let steps = json!([
        {"step_ref": "tolerated", "job_id": broken, "on_failure": "continue"},
        {"step_ref": "after_tolerated", "job_id": good, "depends_on": ["tolerated"]},
        {"step_ref": "optional", "job_id": broken, "on_failure": "skip_dependents"},
        {"step_ref": "needs_optional", "job_id": good, "depends_on": ["optional"]},
        {"step_ref": "deeper", "job_id": good, "depends_on": ["needs_optional"]},
    ]);
    let wf = workflow(&env, &project, json!({"steps": steps})).await;
    let run = trigger(&env, &wf, json!({})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let done = wait_status(&env, run["id"].as_str().unwrap(), "completed").await;
    let st = statuses(&done);
    assert_eq!(st["tolerated"], "failed");
    assert_eq!(st["after_tolerated"], "completed");
    assert_eq!(st["optional"], "failed");
    assert_eq!(st["needs_optional"], "skipped");
    assert_eq!(st["deeper"], "skipped", "skip_dependents reaches every descendant");
}

#[tokio::test]
async fn pause_holds_new_steps_resume_releases_them_and_cancel_stops_the_run() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let steps = json!([
        {"step_ref": "nap", "sleep_duration_secs": 1},
        {"step_ref": "after", "job_id": j, "depends_on": ["nap"]},
    ]);
    let wf = workflow(&env, &project, json!({"steps": steps})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let run = trigger(&env, &wf, json!({})).await;
    let id = run["id"].as_str().unwrap();
    wait_run(&env, id, |r| step(r, "nap")["status"] == "waiting").await;
    let (s, v) = env.post(&format!("/v1/workflow-runs/{id}/pause"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "paused");
    assert_eq!(env.post(&format!("/v1/workflow-runs/{id}/pause"), json!({})).await.0, 409);
    // The sleep ends while paused: it completes, but nothing starts.
    wait_run(&env, id, |r| step(r, "nap")["status"] == "completed").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let r = get_run(&env, id).await;
    assert_eq!(step(&r, "after")["status"], "pending", "{r}");
    assert_eq!(target.count(), 0);
    let (s, g) = env.get(&format!("/v1/workflow-runs/{id}/graph")).await;
    assert_eq!(s, 200, "{g}");
    assert_eq!(g["runnable"], json!(["after"]), "ready, held by the pause: {g}");
    assert_eq!(g["edges"], json!([{"from": "nap", "to": "after"}]));
    assert!(g["nodes"][0]["observed_duration_secs"].as_f64().unwrap() >= 0.9, "the sleep took its second: {g}");
    let (s, v) = env.post(&format!("/v1/workflow-runs/{id}/resume"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    wait_status(&env, id, "completed").await;
    assert_eq!(target.count(), 1);

    // Cancel mid-step: the step's job run is cancelled with the run.
    target.set_default(Reply::slow(Duration::from_secs(10)));
    let slow = workflow(&env, &project, json!({"steps": [{"step_ref": "long", "job_id": j}, {"step_ref": "never", "job_id": j, "depends_on": ["long"]}]})).await;
    let run = trigger(&env, &slow, json!({})).await;
    let id = run["id"].as_str().unwrap();
    let r = wait_run(&env, id, |r| step(r, "long")["job_run_id"].is_string()).await;
    let job_run = step(&r, "long")["job_run_id"].as_str().unwrap().to_string();
    let (s, v) = env.post(&format!("/v1/workflow-runs/{id}/cancel"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "cancelled");
    assert_eq!(step(&v, "long")["status"], "cancelled");
    assert_eq!(step(&v, "never")["status"], "pending");
    assert_eq!(env.run(&job_run).await["status"], "cancelled");
    assert_eq!(env.post(&format!("/v1/workflow-runs/{id}/cancel"), json!({})).await.0, 409);
}

#[tokio::test]
async fn a_run_past_its_timeout_ends_timed_out_with_its_steps_cancelled() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::slow(Duration::from_secs(10)));
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({"timeout_secs": 30})).await;
    let wf = workflow(&env, &project, json!({"timeout_secs": 1, "steps": [{"step_ref": "long", "job_id": j}]})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    // The trigger's own pass starts the step, unless a busy box held the
    // trigger past the one-second deadline first: that run ends timed_out
    // with nothing started (the pass looks at the deadline before the
    // rules), which is not what this test is about, so another is made.
    let mut tries = 0;
    let run = loop {
        let run = trigger(&env, &wf, json!({})).await;
        if step(&run, "long")["status"] == "running" {
            break run;
        }
        assert_eq!(run["status"], "timed_out", "a step not started at once means the deadline passed: {run}");
        tries += 1;
        assert!(tries < 5, "the box never let a trigger start its step within a second: {run}");
    };
    assert!(run["deadline_at"].is_string());
    let done = wait_status(&env, run["id"].as_str().unwrap(), "timed_out").await;
    assert_eq!(step(&done, "long")["status"], "cancelled");
    let jr = env.run(step(&done, "long")["job_run_id"].as_str().unwrap()).await;
    assert_eq!(jr["status"], "cancelled");
}

#[tokio::test]
async fn a_sub_workflow_step_completes_with_its_child_runs_output() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::json(200, r#"{"v": 1}"#));
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let child = workflow(&env, &project, json!({"steps": [{"step_ref": "inner", "job_id": j}]})).await;
    let parent = workflow(
        &env,
        &project,
        json!({"steps": [
            {"step_ref": "sub", "sub_workflow_id": child["id"], "output_transform": "inner.v"},
            {"step_ref": "then", "job_id": j, "depends_on": ["sub"]},
        ]}),
    )
    .await;
    env.spawn_worker();
    env.spawn_scheduler();
    let run = trigger(&env, &parent, json!({"payload": {"p": 1}})).await;
    let done = wait_status(&env, run["id"].as_str().unwrap(), "completed").await;
    assert_eq!(step(&done, "sub")["output"], json!(1));
    let child_run = get_run(&env, step(&done, "sub")["child_workflow_run_id"].as_str().unwrap()).await;
    assert_eq!(child_run["status"], "completed");
    assert_eq!(child_run["triggered_by"], "workflow");
    assert_eq!(child_run["payload"], json!({"p": 1}));
    assert_eq!(called(&target), ["inner", "then"]);
}

#[tokio::test]
async fn pin_keeps_a_runs_version_and_latest_moves_it_at_the_next_step() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    // v2 adds a step and drops one that has not started when it lands
    // (the nap gives the update 2 s to land first).
    let v1 = json!([
        {"step_ref": "nap", "sleep_duration_secs": 2},
        {"step_ref": "b", "job_id": j, "depends_on": ["nap"]},
        {"step_ref": "gone", "job_id": j, "depends_on": ["nap"]},
    ]);
    let v2 = json!([
        {"step_ref": "nap", "sleep_duration_secs": 2},
        {"step_ref": "b", "job_id": j, "depends_on": ["nap"]},
        {"step_ref": "added", "job_id": j, "depends_on": ["b"]},
    ]);
    let pinned = workflow(&env, &project, json!({"steps": v1, "version_policy": "pin"})).await;
    let latest = workflow(&env, &project, json!({"steps": v1, "version_policy": "latest"})).await;
    env.spawn_scheduler();
    env.spawn_worker();
    let rp = trigger(&env, &pinned, json!({})).await;
    let rl = trigger(&env, &latest, json!({})).await;
    for (wf, run) in [(&pinned, &rp), (&latest, &rl)] {
        wait_run(&env, run["id"].as_str().unwrap(), |r| step(r, "nap")["status"] == "waiting").await;
        let (s, p) = env
            .patch(
                &format!("/v1/workflows/{}", wf["id"].as_str().unwrap()),
                json!({"steps": v2, "breaking_change": true}),
            )
            .await;
        assert_eq!(s, 200, "{p}");
        assert_eq!(p["previous_version_id"], wf["version_id"], "{p}");
        assert_eq!(p["active_runs_on_previous_version"], 1);
    }
    let p = wait_status(&env, rp["id"].as_str().unwrap(), "completed").await;
    assert_eq!(p["steps"].as_array().unwrap().len(), 3, "pin: the run keeps v1: {p}");
    assert_eq!(step(&p, "gone")["status"], "completed", "{p}");
    assert_eq!(p["version_id"], pinned["version_id"]);
    let l = wait_status(&env, rl["id"].as_str().unwrap(), "completed").await;
    assert_eq!(step(&l, "added")["status"], "completed", "latest: the new step ran: {l}");
    let refs: Vec<&str> = l["steps"].as_array().unwrap().iter().map(|s| s["step_ref"].as_str().unwrap()).collect();
    assert!(!refs.contains(&"gone"), "latest: the dropped step that had not started is gone: {l}");
    let (_, explain) = env.get(&format!("/v1/workflow-runs/{}/explain", rl["id"].as_str().unwrap())).await;
    assert!(explain.to_string().contains("version_moved"), "{explain}");
    assert_ne!(l["version_id"], latest["version_id"]);
    assert_eq!(l["started_version_id"], latest["version_id"]);
    let (_, audit) = env.get(&format!("/v1/audit-events?project_id={project}")).await;
    let breaking =
        audit["data"].as_array().unwrap().iter().filter(|e| e["action"] == "workflow.updated_breaking").count();
    assert_eq!(breaking, 2);
}

#[tokio::test]
async fn max_concurrent_runs_queue_the_rest_and_skip_if_running_skips() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let steps =
        json!([{"step_ref": "nap", "sleep_duration_secs": 1}, {"step_ref": "b", "job_id": j, "depends_on": ["nap"]}]);
    let capped = workflow(&env, &project, json!({"steps": steps, "max_concurrent_runs": 1})).await;
    let first = trigger(&env, &capped, json!({})).await;
    let second = trigger(&env, &capped, json!({})).await;
    assert_eq!(first["status"], "running");
    assert_eq!(second["status"], "pending");
    // The same idempotency key returns the same run with 200.
    let path = format!("/v1/workflows/{}/trigger", capped["id"].as_str().unwrap());
    let (s1, a) = env.post(&path, json!({"idempotency_key": "k1"})).await;
    let (s2, b) = env.post(&path, json!({"idempotency_key": "k1"})).await;
    assert_eq!((s1, s2), (201, 200));
    assert_eq!(a["id"], b["id"]);
    let (s, av) = env.get(&format!("/v1/workflows/{}/active-versions", capped["id"].as_str().unwrap())).await;
    assert_eq!(s, 200);
    assert_eq!(av["versions"][0]["running"], 1);
    assert_eq!(av["versions"][0]["pending"], 2);
    let (s, imp) = env
        .get(&format!(
            "/v1/workflows/{}/versions/{}/impact",
            capped["id"].as_str().unwrap(),
            capped["version_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(s, 200, "{imp}");
    assert_eq!(imp["active_runs"], 3);
    env.spawn_worker();
    env.spawn_scheduler();
    let f = wait_status(&env, first["id"].as_str().unwrap(), "completed").await;
    let s = wait_status(&env, second["id"].as_str().unwrap(), "completed").await;
    assert!(s["started_at"].as_str().unwrap() >= f["finished_at"].as_str().unwrap(), "one at a time: {f} {s}");

    let single = workflow(&env, &project, json!({"steps": steps, "skip_if_running": true})).await;
    trigger(&env, &single, json!({})).await;
    let p = assert_problem(
        409,
        env.post(&format!("/v1/workflows/{}/trigger", single["id"].as_str().unwrap()), json!({})).await,
        409,
    );
    assert!(p["detail"].as_str().unwrap().contains("skip_if_running"), "{p}");
}

#[tokio::test]
async fn bad_requests_change_nothing() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let other = env.project().await;
    let target = Target::start().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let wf = workflow(&env, &project, json!({"steps": [{"step_ref": "a", "job_id": j}]})).await;
    let path = format!("/v1/workflows/{}/trigger", wf["id"].as_str().unwrap());
    assert_problem(400, env.post(&path, json!({"payload": 1, "nope": true})).await, 400);
    assert_problem(422, env.post(&path, json!({"idempotency_key": ""})).await, 422);
    assert_problem(404, env.post("/v1/workflows/wf_missing/trigger", json!({})).await, 404);
    assert_problem(422, env.get(&format!("/v1/workflow-runs?project_id={project}&status=bogus")).await, 422);
    let (_, page) = env.get(&format!("/v1/workflow-runs?project_id={project}")).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 0, "nothing was created");
    // Another project's key sees nothing of this project's runs.
    let run = trigger(&env, &wf, json!({})).await;
    let (key, _) = crate::support::access::key(&env, &other, &["*"]).await;
    let (s, _) = crate::support::access::with(
        &env,
        &key,
        reqwest::Method::GET,
        &format!("/v1/workflow-runs/{}", run["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(s, 404);
    let (s, _) = crate::support::access::with(
        &env,
        &key,
        reqwest::Method::POST,
        &format!("/v1/workflow-runs/{}/cancel", run["id"].as_str().unwrap()),
        Some(json!({})),
    )
    .await;
    assert_eq!(s, 404);
    // A key without workflows:trigger may read but not trigger.
    let (reader, _) = crate::support::access::key(&env, &project, &["workflows:read"]).await;
    let (s, _) = crate::support::access::with(&env, &reader, reqwest::Method::POST, &path, Some(json!({}))).await;
    assert_eq!(s, 403);
}

/// Two workers and two schedulers on a diamond, with a crash after the
/// engine committed a step's successors and before it enqueued them (the
/// enqueue goes to a Redis that is not there): the reconciler enqueues
/// them from Postgres, and every step runs exactly once.
#[tokio::test]
async fn a_crash_between_a_steps_outcome_and_the_next_enqueue_loses_and_doubles_nothing() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let wf = workflow(&env, &project, json!({"steps": diamond(&j)})).await;
    let dead_redis = switchyard_shared::queue::Queue::new(
        switchyard_shared::queue::Redis::open("redis://127.0.0.1:1/").unwrap(),
        &env.config.redis_key_prefix,
    );
    let versions = workflow_engine::Versions::default();

    // The trigger's transaction starts `a`, and "crashes" before its enqueue.
    let record = workflows::get(&env.pool, Tenant::Any, &wf["id"].as_str().unwrap().into()).await.unwrap().unwrap();
    let new = NewWorkflowRun { triggered_by: "api".into(), ..NewWorkflowRun::default() };
    let Triggered::Created(created) =
        workflow_moves::trigger(&env.pool, &dead_redis, &versions, &record, &new).await.unwrap()
    else {
        panic!("a new run")
    };
    let id = created.id;
    let r = get_run(&env, &id).await;
    assert_eq!(step(&r, "a")["status"], "running");
    assert_eq!(env.zcard_all(|k| &k.ready).await, 0, "nothing reached redis");

    // `a`'s outcome is recorded, `b` and `c` start in the same transaction,
    // and the process "crashes" again before enqueueing them.
    let a_run = step(&r, "a")["job_run_id"].as_str().unwrap().to_string();
    let token: i64 = sqlx::query_scalar("SELECT dispatch_token FROM job_runs WHERE id = $1")
        .bind(&a_run)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let outcome = Outcome {
        status: RunStatus::Completed,
        result: Some(json!({"n": 1})),
        error: None,
        error_class: None,
        status_code: Some(200),
        endpoint_url: target.url.clone(),
        next_retry_at: None,
        attempt_started_at: Utc::now(),
        trace: json!({}),
        webhook_url: None,
        job_id: j.as_str().into(),
        project_id: project.clone(),
        attempt: 1,
        workflow_step_run_id: step(&r, "a")["id"].as_str().map(Into::into),
    };
    let (recorded, pending) =
        step_outcomes::finish_steps(&env.pool, &versions, vec![(a_run.as_str().into(), token + 1, outcome)])
            .await
            .unwrap();
    assert_eq!(recorded, [true]);
    assert_eq!(pending.iter().map(|p| p.advanced.steps_started).sum::<usize>(), 2);
    drop(pending);
    let r = get_run(&env, &id).await;
    assert_eq!(
        (step(&r, "b")["status"].as_str(), step(&r, "c")["status"].as_str()),
        (Some("running"), Some("running"))
    );
    let (rows,): (i64,) = sqlx::query_as("SELECT count(*) FROM workflow_outbox").fetch_one(&env.pool).await.unwrap();
    assert_eq!(rows, 0, "the outcome's own transaction moved the run on: no outbox row");
    assert_eq!(env.zcard_all(|k| &k.ready).await, 0, "nothing reached redis");

    // The whole system comes up twice over; the reconciler finds `b` and `c`.
    env.scheduler().reconcile_once().await.unwrap();
    for _ in 0..2 {
        env.spawn_worker();
        env.spawn_scheduler();
    }
    let done = wait_status(&env, &id, "completed").await;
    assert!(statuses(&done).values().all(|s| s == "completed"));
    let mut order = called(&target);
    order.sort();
    assert_eq!(order, ["b", "c", "d"], "each step exactly once (`a` was recorded by hand)");
    let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM job_runs WHERE workflow_step_run_id IS NOT NULL")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(n, 4);
    let (left,): (i64,) = sqlx::query_as("SELECT count(*) FROM workflow_outbox").fetch_one(&env.pool).await.unwrap();
    assert_eq!(left, 0, "every event was consumed");
}

fn utc(s: &str) -> chrono::DateTime<Utc> {
    chrono::DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

async fn workflow_ticks(env: &TestEnv, workflow_id: &str) -> Vec<chrono::DateTime<Utc>> {
    sqlx::query_scalar(
        "SELECT cron_tick FROM workflow_runs WHERE workflow_id = $1 AND triggered_by = 'cron' ORDER BY cron_tick",
    )
    .bind(workflow_id)
    .fetch_all(&env.pool)
    .await
    .unwrap()
}

/// A workflow's cron follows the jobs' rules: one run per tick however
/// many schedulers race, one catch-up for missed ticks, the schedule's
/// time zone; with skip_if_running a tick during an active run is
/// skipped, and that run's explain says so.
#[tokio::test]
async fn a_workflow_cron_fires_each_tick_once_and_skip_if_running_skips_ticks() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let j = job(&env, &project, "http://127.0.0.1:9/hook", json!({})).await;
    let wf = workflow(
        &env,
        &project,
        json!({"cron": "0 9 * * *", "cron_timezone": "Europe/Paris", "skip_if_running": true,
               "steps": [{"step_ref": "a", "job_id": j}]}),
    )
    .await;
    let id = wf["id"].as_str().unwrap();
    sqlx::query("UPDATE workflows SET cron_since = $2 WHERE id = $1")
        .bind(id)
        .bind(utc("2027-01-01T00:00:00Z"))
        .execute(&env.pool)
        .await
        .unwrap();
    let schedulers: Vec<_> = (0..3).map(|_| env.scheduler()).collect();
    // 09:00 in Paris is 08:00 UTC in winter.
    let at = utc("2027-01-01T08:00:02Z");
    let reports = futures::future::join_all(schedulers.iter().map(|s| s.cron_once(at))).await;
    assert_eq!(reports.iter().map(|r| r.as_ref().unwrap().fired).sum::<usize>(), 1, "{reports:?}");
    assert_eq!(workflow_ticks(&env, id).await, [utc("2027-01-01T08:00:00Z")]);
    let (s, page) = env.get(&format!("/v1/workflow-runs?project_id={project}&workflow_id={id}")).await;
    assert_eq!(s, 200);
    let first = page["data"][0].clone();
    assert_eq!((first["triggered_by"].as_str(), first["status"].as_str()), (Some("cron"), Some("running")));

    // The next day's tick finds that run still active: skipped, and said so.
    let report = schedulers[0].cron_once(utc("2027-01-02T08:00:01Z")).await.unwrap();
    assert_eq!((report.fired, report.skipped), (0, 1), "{report:?}");
    assert_eq!(workflow_ticks(&env, id).await.len(), 1);
    let (_, ex) = env
        .get(&format!("/v1/workflow-runs/{}/explain?decision_type=tick_skipped", first["id"].as_str().unwrap()))
        .await;
    assert!(ex["decisions"][0]["reason"].as_str().unwrap().contains("skip_if_running"), "{ex}");
}

/// Resource policies select workflows by id or tags, and an operation on a
/// workflow run is checked against its workflow.
#[tokio::test]
async fn resource_policies_govern_workflows_and_their_runs() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let j = job(&env, &project, "http://127.0.0.1:9/hook", json!({})).await;
    let steps = json!([{"step_ref": "a", "job_id": j}]);
    let prod = workflow(&env, &project, json!({"steps": steps, "tags": {"env": "prod"}})).await;
    let dev = workflow(&env, &project, json!({"steps": steps, "tags": {"env": "dev"}})).await;
    let (k, k_id) =
        crate::support::access::key(&env, &project, &["workflows:read", "workflows:trigger", "workflows:write"]).await;
    let (s, p) = env
        .post(
            "/v1/resource-policies",
            json!({"project_id": project, "name": "no prod workflow runs", "effect": "deny", "principal_type": "api_key",
                   "principal_id": k_id, "actions": ["workflows:trigger", "workflows:write"], "resource_type": "workflow",
                   "tag_selector": {"env": "prod"}}),
        )
        .await;
    assert_eq!(s, 201, "{p}");
    let trigger_path = |w: &Value| format!("/v1/workflows/{}/trigger", w["id"].as_str().unwrap());
    let as_key = |m: reqwest::Method, path: String, body: Option<Value>| {
        let (env, k) = (&env, &k);
        async move { crate::support::access::with(env, k, m, &path, body).await }
    };
    assert_eq!(as_key(reqwest::Method::POST, trigger_path(&dev), Some(json!({}))).await.0, 201);
    let refused = assert_problem(403, as_key(reqwest::Method::POST, trigger_path(&prod), Some(json!({}))).await, 403);
    assert!(refused["detail"].as_str().unwrap().contains(p["id"].as_str().unwrap()), "{refused}");
    // Another action on the same workflow is not denied.
    assert_eq!(
        as_key(reqwest::Method::GET, format!("/v1/workflows/{}", prod["id"].as_str().unwrap()), None).await.0,
        200
    );
    // A run of the prod workflow (triggered by the internal secret) cannot be cancelled with the key.
    let run = trigger(&env, &prod, json!({})).await;
    let cancel = format!("/v1/workflow-runs/{}/cancel", run["id"].as_str().unwrap());
    assert_problem(403, as_key(reqwest::Method::POST, cancel.clone(), Some(json!({}))).await, 403);
    assert_eq!(get_run(&env, run["id"].as_str().unwrap()).await["status"], "running", "nothing changed");
    // Creating a workflow is matched by its tags.
    let (s, _) = env
        .post(
            "/v1/resource-policies",
            json!({"project_id": project, "name": "no prod workflows", "effect": "deny", "principal_type": "api_key",
                   "principal_id": k_id, "actions": ["workflows:write"], "resource_type": "workflow",
                   "tag_selector": {"env": "prod"}}),
        )
        .await;
    assert_eq!(s, 201);
    let new = json!({"name": "another", "steps": steps, "tags": {"env": "prod"}});
    assert_problem(403, as_key(reqwest::Method::POST, "/v1/workflows".into(), Some(new)).await, 403);
}

/// An approval step waits for a person: only its approvers may decide
/// (403 for anyone else, whatever their scopes); approve lets the run go
/// on, reject fails the step (on_failure applies), skip lets dependents
/// run; an undecided step times out; a decision on a step that is not
/// waiting is 409. Each decision is on the step run, in explain and in
/// the audit trail.
#[tokio::test]
async fn approval_steps_wait_for_an_approver_and_time_out() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let steps = json!([
        {"step_ref": "review", "approval_approvers": ["alice", "admin"]},
        {"step_ref": "ship", "job_id": j, "depends_on": ["review"]},
    ]);
    let wf = workflow(&env, &project, json!({"steps": steps})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let run = trigger(&env, &wf, json!({})).await;
    let id = run["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "review")["status"] == "waiting").await;
    let approve = format!("/v1/workflow-runs/{id}/steps/review/approve");

    // A key with every scope is not an approver.
    let (key, _) = crate::support::access::key(&env, &project, &["*"]).await;
    let (s, p) = crate::support::access::with(&env, &key, reqwest::Method::POST, &approve, Some(json!({}))).await;
    assert_eq!(s, 403, "{p}");
    assert_eq!(step(&get_run(&env, &id).await, "review")["status"], "waiting", "nothing changed");
    // Alice is.
    let (s, v) =
        env.call_as_actor("alice", reqwest::Method::POST, &approve, Some(json!({"comment": "looks good"}))).await;
    assert_eq!(s, 200, "{v}");
    let done = wait_status(&env, &id, "completed").await;
    let review = step(&done, "review");
    assert_eq!((review["status"].as_str(), review["decision"].as_str()), (Some("completed"), Some("approved")));
    assert_eq!(
        (review["decided_by"].as_str(), review["decision_comment"].as_str()),
        (Some("alice"), Some("looks good"))
    );
    assert_eq!(step(&done, "ship")["status"], "completed");
    assert_eq!(env.post(&approve, json!({})).await.0, 409, "decided already");
    let (_, ex) = env.get(&format!("/v1/workflow-runs/{id}/explain?decision_type=approved")).await;
    assert_eq!(ex["decisions"][0]["details"]["comment"], "looks good", "{ex}");

    // Reject: the step fails and the run with it (fail_workflow).
    let run = trigger(&env, &wf, json!({})).await;
    let id = run["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "review")["status"] == "waiting").await;
    let (s, v) = env
        .call_as_actor(
            "alice",
            reqwest::Method::POST,
            &format!("/v1/workflow-runs/{id}/steps/review/reject"),
            Some(json!({"comment": "no"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let failed = wait_status(&env, &id, "failed").await;
    assert!(step(&failed, "review")["error"].as_str().unwrap().contains("rejected by alice: no"), "{failed}");

    // Skip: dependents run.
    let run = trigger(&env, &wf, json!({})).await;
    let id = run["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "review")["status"] == "waiting").await;
    let (s, _) = env.post(&format!("/v1/workflow-runs/{id}/steps/review/skip"), json!({})).await;
    assert_eq!(s, 200, "the internal secret naming no actor is the operator");
    let done = wait_status(&env, &id, "completed").await;
    assert_eq!(step(&done, "review")["status"], "skipped");
    assert_eq!(step(&done, "ship")["status"], "completed");

    // Nobody decides: the wait times out and on_failure applies.
    let timed = workflow(
        &env,
        &project,
        json!({"steps": [{"step_ref": "review", "approval_approvers": ["alice"], "approval_timeout_secs": 1}]}),
    )
    .await;
    let run = trigger(&env, &timed, json!({})).await;
    let out = wait_status(&env, run["id"].as_str().unwrap(), "failed").await;
    assert_eq!(step(&out, "review")["status"], "timed_out", "{out}");
    let (_, audit) = env.get(&format!("/v1/audit-events?project_id={project}")).await;
    let actions: Vec<&str> = audit["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    for a in ["workflow_run.step_approved", "workflow_run.step_rejected", "workflow_run.step_skipped"] {
        assert!(actions.contains(&a), "{a} in {actions:?}");
    }
}

/// A wait_for_event step waits for an event of its key dispatched after it
/// began: the event's payload becomes its output and the run goes on. A
/// step that begins after the event waits for the next one; a repeated
/// dispatch (same idempotency key) resumes nothing more.
#[tokio::test]
async fn an_event_resumes_the_steps_waiting_for_it() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let notify = Target::start().await;
    let steps = json!([
        {"step_ref": "paid", "event_key": "order.paid", "event_timeout_secs": 600, "event_notify_url": notify.url},
        {"step_ref": "ship", "job_id": j, "depends_on": ["paid"]},
    ]);
    let wf = workflow(&env, &project, json!({"steps": steps})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let run = trigger(&env, &wf, json!({})).await;
    let id = run["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "paid")["status"] == "waiting").await;
    let event =
        json!({"project_id": project, "event_key": "order.paid", "payload": {"amount": 5}, "idempotency_key": "e1"});
    let (s, v) = env.post("/v1/events/dispatch", event.clone()).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["resumed_steps"], 1);
    let done = wait_status(&env, &id, "completed").await;
    assert_eq!(step(&done, "paid")["output"], json!({"amount": 5}));
    assert_eq!(step(&done, "ship")["status"], "completed");
    // The event-trigger notification goes to event_notify_url through the outbox.
    let n = notify.wait_count(1, T).await;
    assert_eq!((n[0].body["outcome"].as_str(), n[0].body["step_ref"].as_str()), (Some("received"), Some("paid")));
    assert_eq!(n[0].body["event_payload"], json!({"amount": 5}));
    assert_eq!(n[0].body["event_trigger_id"], step(&done, "paid")["id"]);
    assert!(n[0].header("x-svc-delivery-id").is_some());
    let (s, again) = env.post("/v1/events/dispatch", event).await;
    assert_eq!((s, &again["resumed_steps"]), (200, &json!(1)), "the same event, nothing resumed twice: {again}");
    // Begun after the event: waits for the next one.
    let late = trigger(&env, &wf, json!({})).await;
    let late_id = late["id"].as_str().unwrap().to_string();
    wait_run(&env, &late_id, |r| step(r, "paid")["status"] == "waiting").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(step(&get_run(&env, &late_id).await, "paid")["status"], "waiting");
    let (_, v) =
        env.post("/v1/events/dispatch", json!({"project_id": project, "event_key": "order.paid", "payload": 2})).await;
    assert_eq!(v["resumed_steps"], 1, "{v}");
    wait_status(&env, &late_id, "completed").await;

    // No event in time: the step times out, and the notification says so.
    let slow = workflow(
        &env,
        &project,
        json!({"steps": [{"step_ref": "paid", "event_key": "never", "event_timeout_secs": 1, "event_notify_url": notify.url}]}),
    )
    .await;
    let run = trigger(&env, &slow, json!({})).await;
    let out = wait_status(&env, run["id"].as_str().unwrap(), "failed").await;
    assert_eq!(step(&out, "paid")["status"], "timed_out");
    let n = notify.wait_count(3, T).await;
    let timed: Vec<_> = n.iter().filter(|r| r.body["outcome"] == "timed_out").collect();
    assert_eq!(timed.len(), 1, "{:?}", n.iter().map(|r| &r.body).collect::<Vec<_>>());
    assert_eq!(timed[0].body["event_key"], "never");
    let (_, ds) = env.get(&format!("/v1/webhook-deliveries?project_id={project}&kind=event_trigger")).await;
    assert_eq!(ds["data"].as_array().unwrap().len(), 3, "kept, with their status: {ds}");
}

#[tokio::test]
async fn triggers_that_arrive_together_are_written_together_and_a_refused_one_fails_alone() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let wf = workflow(
        &env,
        &project,
        json!({"steps": [
            {"step_ref": "a", "job_id": j},
            {"step_ref": "b", "job_id": j, "depends_on": ["a"]},
        ]}),
    )
    .await;
    let wf_id = wf["id"].as_str().unwrap();

    // The store's group: every run created with its first step started,
    // in the order asked.
    let record = workflows::get(&env.pool, Tenant::Any, &wf_id.into()).await.unwrap().unwrap();
    let news: Vec<NewWorkflowRun> = (0..3)
        .map(|n| NewWorkflowRun { payload: Some(json!({ "n": n })), triggered_by: "api".into(), ..Default::default() })
        .collect();
    let items: Vec<_> = news.iter().map(|n| (&record, n)).collect();
    let versions = workflow_engine::Versions::default();
    let runs = workflow_moves::trigger_many(&env.pool, &env.queue, &versions, &items).await.unwrap();
    assert_eq!(runs.len(), 3);
    for (n, (r, steps)) in runs.iter().enumerate() {
        assert_eq!(r.payload.as_ref().unwrap().0, json!({ "n": n }), "in input order");
        let got = get_run(&env, &r.id).await;
        let want = HashMap::from([("a".into(), "running".into()), ("b".into(), "pending".into())]);
        assert_eq!(statuses(&got), want);
        // Its steps as the first pass left them, for the answer.
        let given: HashMap<String, String> =
            steps.iter().map(|s| (s.step_ref.clone(), s.status.as_str().to_string())).collect();
        assert_eq!(given, want);
    }
    // One row Postgres refuses fails the whole group, and writes nothing.
    let bad = NewWorkflowRun {
        payload: Some(json!({ "note": "a\u{0}b" })),
        triggered_by: "api".into(),
        ..Default::default()
    };
    let items = vec![(&record, &news[0]), (&record, &bad)];
    let e = workflow_moves::trigger_many(&env.pool, &env.queue, &versions, &items).await.unwrap_err();
    assert!(matches!(e, sqlx::Error::Database(_)), "{e}");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM workflow_runs WHERE workflow_id = $1")
        .bind(wf_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(count, 3, "the refused group left nothing behind");

    // Through the api, at once: each trigger gets its own answer, the
    // refused one a problem, the others their runs, which all complete.
    env.spawn_worker();
    env.spawn_scheduler();
    let path = format!("/v1/workflows/{wf_id}/trigger");
    let answers = futures::future::join_all((0..24).map(|n| {
        let payload = if n == 7 { json!({ "note": "a\u{0}b" }) } else { json!({ "n": n }) };
        env.post(&path, json!({ "payload": payload }))
    }))
    .await;
    let mut ids = std::collections::HashSet::new();
    for (n, (s, v)) in answers.into_iter().enumerate() {
        if n == 7 {
            assert_eq!(s, 422, "{v}");
            continue;
        }
        assert_eq!(s, 201, "{v}");
        assert_eq!(v["payload"], json!({ "n": n }), "each trigger is answered with its own run");
        // Started by the group's pass (a worker may have finished it since).
        assert!(step(&v, "a")["job_run_id"].is_string(), "{v}");
        ids.insert(v["id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 23);
    for id in runs.iter().map(|(r, _)| r.id.to_string()).chain(ids) {
        wait_status(&env, &id, "completed").await;
    }
    assert_eq!(target.requests().len(), 26 * 2, "each step of each run dispatched once");
}
