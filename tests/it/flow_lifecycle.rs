//! The run lifecycle around dispatch: dedup and idempotency (also under
//! concurrent triggers), run TTL (scheduler and claim), delays with the
//! scheduler, dependencies, payload schemas and execution windows.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::support::queue::active_slots;
use crate::target::{Reply, Target};

const T: Duration = Duration::from_secs(20);

fn ts(v: &Value) -> DateTime<Utc> {
    v.as_str().and_then(|s| DateTime::parse_from_rfc3339(s).ok()).expect("a timestamp").with_timezone(&Utc)
}

async fn count_runs(env: &TestEnv, job_id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job_runs WHERE job_id = $1")
        .bind(job_id)
        .fetch_one(&env.pool)
        .await
        .unwrap()
}

/// Fires `n` identical triggers at once; returns the statuses and run ids.
async fn concurrent_triggers(env: &TestEnv, job_id: &str, body: Value, n: usize) -> Vec<(u16, String)> {
    let path = format!("/v1/jobs/{job_id}/trigger");
    let calls = (0..n).map(|_| env.post(&path, body.clone()));
    futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|(s, v)| (s, v["id"].as_str().unwrap_or_default().to_string()))
        .collect()
}

#[tokio::test]
async fn equal_payloads_inside_the_dedup_window_return_the_first_run() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/", json!({"dedup_window_secs": 2})).await;
    let id = job["id"].as_str().unwrap();
    let first = env.trigger(id, json!({"payload": {"a": 1, "b": [1, 2]}})).await;
    let (s, same) = env.post(&format!("/v1/jobs/{id}/trigger"), json!({"payload": {"b": [1, 2], "a": 1}})).await;
    assert_eq!((s, &same["id"]), (200, &first["id"]), "key order does not matter");
    let (s, _) = env.post(&format!("/v1/jobs/{id}/trigger"), json!({"payload": {"a": 2}})).await;
    assert_eq!(s, 201, "another payload is another run");
    assert_eq!(env.zcard_all(|k| &k.ready).await, 2, "the duplicate enqueued nothing");

    // Concurrent equal triggers create one run.
    let results = concurrent_triggers(&env, id, json!({"payload": {"burst": true}}), 12).await;
    let created: Vec<_> = results.iter().filter(|(s, _)| *s == 201).collect();
    assert_eq!(created.len(), 1, "{results:?}");
    assert!(results.iter().all(|(s, rid)| (*s == 200 || *s == 201) && rid == &created[0].1), "{results:?}");
    assert_eq!(count_runs(&env, id).await, 3);

    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (s, later) = env.post(&format!("/v1/jobs/{id}/trigger"), json!({"payload": {"b": [1, 2], "a": 1}})).await;
    assert_eq!(s, 201, "outside the window the payload is new again");
    assert_ne!(later["id"], first["id"]);

    // Without a window, equal payloads are separate runs; a key still dedups,
    // even when sent concurrently.
    let plain = env.job("http://127.0.0.1:9/", json!({})).await;
    let pid = plain["id"].as_str().unwrap();
    env.trigger(pid, json!({"payload": {"x": 1}})).await;
    env.trigger(pid, json!({"payload": {"x": 1}})).await;
    let results = concurrent_triggers(&env, pid, json!({"idempotency_key": "once", "payload": {"n": 1}}), 12).await;
    assert_eq!(results.iter().filter(|(s, _)| *s == 201).count(), 1, "{results:?}");
    assert_eq!(count_runs(&env, pid).await, 3);
}

#[tokio::test]
async fn a_run_not_started_within_its_ttl_expires_in_the_scheduler() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/", json!({"run_ttl_secs": 2})).await;
    let id = job["id"].as_str().unwrap();
    let now = Utc::now();
    let queued = env.trigger(id, json!({})).await;
    let delayed = env.trigger(id, json!({"delay_secs": 5})).await;
    assert!(ts(&queued["expires_at"]) >= now + chrono::Duration::seconds(2));
    assert!(
        ts(&delayed["expires_at"]) >= ts(&delayed["scheduled_at"]) + chrono::Duration::seconds(2),
        "a delay does not eat the ttl"
    );
    let sched = env.scheduler();
    assert_eq!(sched.expire_once(now + chrono::Duration::milliseconds(1500)).await.unwrap(), 0);
    assert_eq!(sched.expire_once(now + chrono::Duration::seconds(4)).await.unwrap(), 1);
    let expired = env.run(queued["id"].as_str().unwrap()).await;
    assert_eq!((expired["status"].as_str(), expired["error_class"].as_str()), (Some("expired"), Some("expired")));
    assert!(expired["finished_at"].is_string());
    let path = env.transition_path(queued["id"].as_str().unwrap()).await;
    assert_eq!(path, ["queued", "expired"]);
    assert_eq!(env.zcard_all(|k| &k.ready).await, 0, "its entry is gone");
    assert_eq!(env.run(delayed["id"].as_str().unwrap()).await["status"], "pending");
    assert_eq!(sched.expire_once(now + chrono::Duration::seconds(8)).await.unwrap(), 1);
    assert_eq!(env.run(delayed["id"].as_str().unwrap()).await["status"], "expired");
}

#[tokio::test]
async fn the_worker_refuses_to_start_an_expired_run_and_frees_its_slot() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"run_ttl_secs": 1, "max_concurrency": 1})).await;
    let id = job["id"].as_str().unwrap();
    let stale = env.trigger(id, json!({})).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let worker = env.worker();
    assert_eq!(worker.run_once().await.unwrap(), 1, "the entry is taken");
    let run = env.run(stale["id"].as_str().unwrap()).await;
    assert_eq!(run["status"], "expired");
    assert_eq!(run["attempt"], 0, "never started");
    assert_eq!(target.count(), 0, "never dispatched");
    assert!(active_slots(&env).await.is_empty(), "the cap's slot is released");

    let fresh = env.trigger(id, json!({})).await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    env.wait_status(fresh["id"].as_str().unwrap(), "completed", T).await;
    assert_eq!(target.count(), 1);
}

#[tokio::test]
async fn delayed_and_scheduled_runs_start_when_due() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    let id = job["id"].as_str().unwrap();
    // Triggered in the order they fall due, so that even a promoter pass
    // late enough to move both at once keeps the order (older first).
    let delayed = env.trigger(id, json!({"delay_secs": 1})).await;
    let at = Utc::now() + chrono::Duration::milliseconds(1500);
    let scheduled = env.trigger(id, json!({"scheduled_at": at.to_rfc3339()})).await;
    let past = env.trigger(id, json!({"scheduled_at": "2020-01-01T00:00:00Z"})).await;
    assert_eq!((scheduled["status"].as_str(), delayed["status"].as_str()), (Some("pending"), Some("pending")));
    assert_eq!(past["status"], "queued", "a time already passed is due now");
    env.spawn_worker();
    env.spawn_scheduler();
    for r in [&scheduled, &delayed, &past] {
        let done = env.wait_status(r["id"].as_str().unwrap(), "completed", T).await;
        if r["status"] == "pending" {
            assert!(ts(&done["started_at"]) >= ts(&r["scheduled_at"]), "{done}");
        }
    }
    let order: Vec<String> = target.requests().iter().map(|r| r.body["run_id"].as_str().unwrap().into()).collect();
    assert_eq!(order, [&past["id"], &delayed["id"], &scheduled["id"]].map(|v| v.as_str().unwrap().to_string()));
}

#[tokio::test]
async fn a_run_starts_after_its_dependencies_complete() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::slow(Duration::from_millis(400)), Reply::slow(Duration::from_millis(400))]);
    let job = env.job(&target.url, json!({})).await;
    let id = job["id"].as_str().unwrap();
    let a = env.trigger(id, json!({})).await;
    let b = env.trigger(id, json!({})).await;
    let c = env.trigger(id, json!({"depends_on": [a["id"], b["id"], a["id"]]})).await;
    let cid = c["id"].as_str().unwrap();
    assert_eq!(c["status"], "pending");
    let (s, st) = env.get(&format!("/v1/runs/{cid}/dependency-status")).await;
    assert_eq!(s, 200, "{st}");
    assert_eq!(st["run_id"], c["id"]);
    assert_eq!(st["unblocked"], false);
    assert_eq!(st["dependencies"].as_array().unwrap().len(), 2, "repeats are dropped");
    assert_eq!(st["dependencies"][0], json!({"run_id": a["id"], "status": "queued", "satisfied": false}));

    env.spawn_worker();
    env.spawn_scheduler();
    let done = env.wait_status(cid, "completed", T).await;
    for dep in [&a, &b] {
        let d = env.run(dep["id"].as_str().unwrap()).await;
        assert!(ts(&done["started_at"]) >= ts(&d["finished_at"]), "started after {}", dep["id"]);
    }
    let (_, st) = env.get(&format!("/v1/runs/{cid}/dependency-status")).await;
    assert_eq!(st["unblocked"], true);
    assert!(st["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["satisfied"] == true && d["status"] == "completed"));
    let path = env.transition_path(cid).await;
    assert_eq!(path, ["pending", "queued", "running", "completed"]);

    // Already completed: a new dependent is queued at once.
    let d = env.trigger(id, json!({"depends_on": [a["id"]]})).await;
    assert_eq!(d["status"], "queued");
    let (_, none) = env.get(&format!("/v1/runs/{}/dependency-status", a["id"].as_str().unwrap())).await;
    assert_eq!(none, json!({"run_id": a["id"], "unblocked": true, "dependencies": []}));
}

#[tokio::test]
async fn a_failed_dependency_fails_its_dependents_down_the_chain() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::status(422));
    let failing = env.job(&target.url, json!({})).await;
    let ok = env.job_in(failing["project_id"].as_str().unwrap(), "http://127.0.0.1:9/", json!({"slug": "ok"})).await;
    let x = env.trigger(failing["id"].as_str().unwrap(), json!({})).await;
    let y = env.trigger(ok["id"].as_str().unwrap(), json!({"depends_on": [x["id"]]})).await;
    let z = env.trigger(ok["id"].as_str().unwrap(), json!({"depends_on": [y["id"]]})).await;
    // A cancelled dependency counts as failed too.
    let later = env.trigger(ok["id"].as_str().unwrap(), json!({"delay_secs": 3600})).await;
    let w = env.trigger(ok["id"].as_str().unwrap(), json!({"depends_on": [later["id"]]})).await;
    env.post(&format!("/v1/runs/{}/cancel", later["id"].as_str().unwrap()), json!({})).await;

    env.spawn_worker();
    env.spawn_scheduler();
    env.wait_status(x["id"].as_str().unwrap(), "failed", T).await;
    for (run, dep, how) in [(&y, &x, "failed"), (&z, &y, "failed"), (&w, &later, "cancelled")] {
        let f = env.wait_status(run["id"].as_str().unwrap(), "failed", T).await;
        assert_eq!(f["error_class"], "dependency_failed");
        assert_eq!(f["error"], format!("dependency {} ended {how}", dep["id"].as_str().unwrap()));
        assert_eq!(f["attempt"], 0, "never dispatched");
    }
    assert_eq!(target.count(), 1, "only x reached a target");
    let (_, st) = env.get(&format!("/v1/runs/{}/dependency-status", y["id"].as_str().unwrap())).await;
    assert_eq!((st["unblocked"].as_bool(), st["dependencies"][0]["status"].as_str()), (Some(false), Some("failed")));
}

#[tokio::test]
async fn dependencies_must_be_runs_of_the_project() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/", json!({})).await;
    let id = job["id"].as_str().unwrap();
    let mine = env.trigger(id, json!({})).await;
    let foreign_job = env.job("http://127.0.0.1:9/", json!({})).await;
    let foreign = env.trigger(foreign_job["id"].as_str().unwrap(), json!({})).await;
    let path = format!("/v1/jobs/{id}/trigger");
    let v = assert_problem(
        422,
        env.post(&path, json!({"depends_on": [mine["id"], "run_nope", foreign["id"], "a|b"]})).await,
        422,
    );
    let locs: Vec<&str> = v["errors"].as_array().unwrap().iter().map(|e| e["location"].as_str().unwrap()).collect();
    assert_eq!(locs, ["body.depends_on/1", "body.depends_on/2", "body.depends_on/3"]);
    assert_eq!(v["errors"][1]["value"], foreign["id"]);
    let many: Vec<String> = (0..101).map(|_| mine["id"].as_str().unwrap().to_string()).collect();
    assert_problem(422, env.post(&path, json!({"depends_on": many})).await, 422);
    assert_eq!(count_runs(&env, id).await, 1, "nothing was created");
    assert_problem(404, env.get("/v1/runs/run_missing/dependency-status").await, 404);
}

#[tokio::test]
async fn payloads_must_satisfy_the_jobs_schema() {
    let env = TestEnv::start().await;
    let schema = json!({
        "type": "object",
        "required": ["email"],
        "properties": {"email": {"type": "string", "format": "email"}, "age": {"type": "integer", "minimum": 18}},
        "additionalProperties": false
    });
    let job = env.job("http://127.0.0.1:9/", json!({"payload_schema": schema})).await;
    let id = job["id"].as_str().unwrap();
    let path = format!("/v1/jobs/{id}/trigger");
    env.trigger(id, json!({"payload": {"email": "ada@example.com", "age": 36}})).await;
    let v = assert_problem(422, env.post(&path, json!({"payload": {"age": 12, "extra": 1}})).await, 422);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 3, "one entry per violation: {v}");
    let age = errors.iter().find(|e| e["location"] == "body.payload/age").expect("age located");
    assert_eq!(age["value"], 12);
    assert!(age["message"].as_str().unwrap().contains("18"), "{age}");
    assert!(errors.iter().any(|e| e["location"] == "body.payload" && e["message"].as_str().unwrap().contains("email")));
    assert_problem(422, env.post(&path, json!({})).await, 422);
    assert_eq!(count_runs(&env, id).await, 1);

    // The schema itself is checked when the job is saved.
    let project = job["project_id"].as_str().unwrap();
    for bad in [json!({"type": "strnig"}), json!({"$ref": "https://example.com/s.json"}), json!([1])] {
        let body =
            json!({"project_id": project, "name": "x", "endpoint_url": "http://127.0.0.1:9/", "payload_schema": bad});
        let v = assert_problem(422, env.post("/v1/jobs", body).await, 422);
        assert_eq!(v["errors"][0]["location"], "body.payload_schema", "{v}");
    }
    let v = assert_problem(
        422,
        env.patch(&format!("/v1/jobs/{id}"), json!({"payload_schema": {"minimum": "x"}})).await,
        422,
    );
    assert_eq!(v["errors"][0]["location"], "body.payload_schema");
    let (s, _) = env.patch(&format!("/v1/jobs/{id}"), json!({"payload_schema": null})).await;
    assert_eq!(s, 200);
    assert_eq!(env.post(&path, json!({"payload": 7})).await.0, 201, "no schema, no check");
}

#[tokio::test]
async fn runs_outside_the_execution_window_wait_pending_until_it_opens() {
    let env = TestEnv::start().await;
    // Open only on 1 January, 00:00-00:59 (UTC): closed for any test run.
    let job = env.job("http://127.0.0.1:9/", json!({"execution_window_cron": "* 0 1 1 *"})).await;
    let id = job["id"].as_str().unwrap();
    let run = env.trigger(id, json!({})).await;
    assert_eq!(run["status"], "pending");
    let opens = ts(&run["scheduled_at"]);
    assert_eq!(opens.format("%m-%d %H:%M:%S").to_string(), "01-01 00:00:00", "{run}");
    assert_eq!(env.zcard_all(|k| &k.scheduled).await, 1);
    let sched = env.scheduler();
    let report = sched.promote_once(opens.timestamp_millis() + 30_000).await.unwrap();
    assert_eq!(report.promoted, 1);
    assert_eq!(env.run(run["id"].as_str().unwrap()).await["status"], "queued");

    // A run that became due while the window was closed (here: delayed,
    // then the job got a window) is held by the promoter, not started.
    let plain = env.job_in(job["project_id"].as_str().unwrap(), "http://127.0.0.1:9/", json!({"slug": "later"})).await;
    let pid = plain["id"].as_str().unwrap();
    let delayed = env.trigger(pid, json!({"delay_secs": 1})).await;
    let (s, _) = env.patch(&format!("/v1/jobs/{pid}"), json!({"execution_window_cron": "* 0 1 1 *"})).await;
    assert_eq!(s, 200);
    let due = ts(&delayed["scheduled_at"]).timestamp_millis() + 10;
    let report = sched.promote_once(due).await.unwrap();
    assert_eq!((report.held, report.promoted), (1, 0), "{report:?}");
    let held = env.run(delayed["id"].as_str().unwrap()).await;
    assert_eq!(held["status"], "pending");
    let opens = ts(&held["scheduled_at"]);
    assert_eq!(opens.format("%m-%d %H:%M").to_string(), "01-01 00:00");
    assert!(sched.promote_once(due + 1000).await.unwrap().due == 0, "its entry moved to the opening");
    assert_eq!(sched.promote_once(opens.timestamp_millis()).await.unwrap().promoted, 1);
    assert_eq!(env.run(delayed["id"].as_str().unwrap()).await["status"], "queued");
}
