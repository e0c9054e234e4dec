//! Singleton and debounce with real workers and schedulers (two of each):
//! one run per key under concurrent triggers, the newest payload, the
//! window's limit, and Redis losing its data in the middle.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::target::{Reply, Target};

const T: Duration = Duration::from_secs(30);

/// Fires `bodies` at the job at once; returns each answer's status and body.
async fn trigger_all(env: &TestEnv, job: &str, bodies: Vec<Value>) -> Vec<(u16, Value)> {
    let path = format!("/v1/jobs/{job}/trigger");
    let calls = bodies.into_iter().map(|b| env.post(&path, b));
    futures::future::join_all(calls).await
}

fn time(v: &Value, field: &str) -> DateTime<Utc> {
    v[field].as_str().unwrap_or_else(|| panic!("{field} in {v}")).parse().unwrap()
}

async fn two_of_each(env: &TestEnv) {
    env.spawn_worker();
    env.spawn_worker();
    env.spawn_scheduler();
    env.spawn_scheduler();
}

#[tokio::test]
async fn a_singleton_skips_triggers_while_its_keys_run_is_unfinished() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::slow(Duration::from_millis(400)));
    let job = env.job(&target.url, json!({"singleton": {"key": "user", "mode": "skip"}})).await;
    assert_eq!(job["singleton"], json!({"key": "user", "mode": "skip"}));
    let id = job["id"].as_str().unwrap();

    let bodies = (0..24).map(|i| json!({"payload": {"user": if i % 2 == 0 { "a" } else { "b" }, "i": i}})).collect();
    let answers = trigger_all(&env, id, bodies).await;
    let mut made: HashMap<String, String> = HashMap::new();
    for (s, v) in &answers {
        let user = v["payload"]["user"].as_str().unwrap().to_string();
        if *s == 201 {
            assert!(made.insert(user, v["id"].as_str().unwrap().into()).is_none(), "a second run for one key: {v}");
            assert!(v.get("skipped").is_none(), "{v}");
        } else {
            assert_eq!((*s, &v["skipped"]), (200, &json!(true)), "{v}");
        }
    }
    assert_eq!(made.len(), 2, "one run per key: {answers:?}");
    for (s, v) in &answers {
        if *s == 200 {
            assert_eq!(v["id"], json!(made[v["payload"]["user"].as_str().unwrap()]), "the skip names its key's run");
        }
    }

    // Redis loses its data: the decision is Postgres', so nothing doubles.
    env.wipe_redis().await;
    let (s, v) = env.post(&format!("/v1/jobs/{id}/trigger"), json!({"payload": {"user": "a"}})).await;
    assert_eq!((s, v["id"].as_str()), (200, Some(made["a"].as_str())), "{v}");
    // A replay is held like a trigger while the key's run is unfinished
    // (no worker runs yet: it is queued).
    let v = assert_problem(409, env.post(&format!("/v1/runs/{}/replay", made["a"]), json!({})).await, 409);
    assert!(v["detail"].as_str().unwrap().contains("singleton"), "{v}");
    two_of_each(&env).await;
    for run in made.values() {
        env.wait_status(run, "completed", T).await;
    }
    assert_eq!(target.count(), 2, "each key's run dispatched once");

    // Finished, the key is free again.
    let again = env.trigger(id, json!({"payload": {"user": "a"}})).await;
    assert_ne!(again["id"], json!(made["a"]));
    env.wait_status(again["id"].as_str().unwrap(), "completed", T).await;
}

#[tokio::test]
async fn a_singleton_in_cancel_mode_replaces_the_unfinished_run() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"singleton": {"mode": "cancel"}})).await;
    let id = job["id"].as_str().unwrap();
    let first = env.trigger(id, json!({"payload": {"n": 0}})).await;
    let second = env.trigger(id, json!({"payload": {"n": 1}})).await;
    assert_eq!(second["replaced_run_id"], first["id"], "{second}");
    let first = env.run(first["id"].as_str().unwrap()).await;
    assert_eq!(first["status"], "cancelled");
    assert!(first["error"].as_str().unwrap().contains(second["id"].as_str().unwrap()), "{first}");

    // Many at once: each replaces the one before it, one is left.
    let answers = trigger_all(&env, id, (2..12).map(|n| json!({"payload": {"n": n}})).collect()).await;
    assert!(answers.iter().all(|(s, _)| *s == 201), "{answers:?}");
    let replaced: HashSet<&str> = answers.iter().filter_map(|(_, v)| v["replaced_run_id"].as_str()).collect();
    assert_eq!(replaced.len(), 10, "each trigger replaced a different run: {answers:?}");
    two_of_each(&env).await;
    let project = job["project_id"].as_str().unwrap();
    let (s, page) = env.get(&format!("/v1/runs?project_id={project}&job_id={id}&limit=100")).await;
    assert_eq!(s, 200, "{page}");
    let runs = page["data"].as_array().unwrap();
    assert_eq!(runs.len(), 12);
    let live: Vec<&Value> = runs.iter().filter(|r| r["status"] != "cancelled").collect();
    assert_eq!(live.len(), 1, "one run is left of twelve: {runs:?}");
    env.wait_status(live[0]["id"].as_str().unwrap(), "completed", T).await;
    assert_eq!(target.count(), 1, "only the survivor was dispatched");
}

#[tokio::test]
async fn a_debounce_makes_one_run_per_window_with_the_newest_payload() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"debounce": {"key": "user", "period_secs": 2}})).await;
    let id = job["id"].as_str().unwrap();
    two_of_each(&env).await;

    let answers = trigger_all(&env, id, (0..10).map(|i| json!({"payload": {"user": "a", "i": i}})).collect()).await;
    let created: Vec<&Value> = answers.iter().filter(|(s, _)| *s == 201).map(|(_, v)| v).collect();
    assert_eq!(created.len(), 1, "one run per window: {answers:?}");
    let run = created[0]["id"].as_str().unwrap().to_string();
    assert_eq!(created[0]["status"], "pending");
    for (s, v) in answers.iter().filter(|(s, _)| *s != 201) {
        assert_eq!((*s, v["id"].as_str(), &v["debounced"]), (200, Some(run.as_str()), &json!(true)), "{v}");
    }
    // The last trigger of the window gives the payload; another key has
    // its own window.
    let last = env.post(&format!("/v1/jobs/{id}/trigger"), json!({"payload": {"user": "a", "i": "last"}})).await;
    assert_eq!((last.0, last.1["id"].as_str()), (200, Some(run.as_str())), "{last:?}");
    let other = env.trigger(id, json!({"payload": {"user": "b"}})).await;

    let done = env.wait_status(&run, "completed", T).await;
    env.wait_status(other["id"].as_str().unwrap(), "completed", T).await;
    assert!(time(&done, "started_at") >= time(&last.1, "scheduled_at"), "started once the key was quiet: {done}");
    let sent: Vec<Value> = target.requests().iter().map(|r| r.body["payload"].clone()).collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent.contains(&json!({"user": "a", "i": "last"})), "the newest payload: {sent:?}");

    // The window closed with its run: the next trigger opens another.
    let next = env.trigger(id, json!({"payload": {"user": "a"}})).await;
    assert_ne!(next["id"].as_str(), Some(run.as_str()));
    // A replay is asked for on purpose: no window takes it in.
    let (s, replay) = env.post(&format!("/v1/runs/{run}/replay"), json!({})).await;
    assert_eq!((s, replay["status"].as_str()), (201, Some("queued")), "{replay}");
    assert_eq!(
        env.run(next["id"].as_str().unwrap()).await["payload"],
        json!({"user": "a"}),
        "the open window kept its payload"
    );
}

#[tokio::test]
async fn a_debounce_window_never_outlasts_max_wait() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"debounce": {"period_secs": 30, "max_wait_secs": 30}})).await;
    let id = job["id"].as_str().unwrap();
    let first = env.trigger(id, json!({"payload": 1})).await;
    let cap = time(&first, "created_at") + chrono::Duration::seconds(30);
    for n in 2..6 {
        let (s, v) = env.post(&format!("/v1/jobs/{id}/trigger"), json!({"payload": n})).await;
        assert_eq!((s, &v["id"]), (200, &first["id"]), "{v}");
        assert!(time(&v, "scheduled_at") <= cap, "moved past the first trigger plus max_wait: {v}");
        assert_eq!(v["payload"], json!(n));
    }
}

#[tokio::test]
async fn a_debounce_window_survives_redis_losing_its_data() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"debounce": {"period_secs": 1}})).await;
    let id = job["id"].as_str().unwrap();
    let first = env.trigger(id, json!({"payload": {"n": 1}})).await;
    env.wipe_redis().await;
    let (s, v) = env.post(&format!("/v1/jobs/{id}/trigger"), json!({"payload": {"n": 2}})).await;
    assert_eq!((s, &v["id"], &v["debounced"]), (200, &first["id"], &json!(true)), "{v}");
    two_of_each(&env).await;
    env.wait_status(first["id"].as_str().unwrap(), "completed", T).await;
    let sent: Vec<Value> = target.requests().iter().map(|r| r.body["payload"].clone()).collect();
    assert_eq!(sent, [json!({"n": 2})], "one run, rebuilt from Postgres, with the newest payload");
}

#[tokio::test]
async fn gates_refuse_what_they_cannot_honour() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let bad = [
        (json!({"debounce": {"period_secs": 0}}), "body.debounce/period_secs"),
        (json!({"debounce": {"period_secs": 10, "max_wait_secs": 5}}), "body.debounce/max_wait_secs"),
        (json!({"debounce": {"key": "a[", "period_secs": 10}}), "body.debounce/key"),
        (json!({"singleton": {"mode": "skip"}, "debounce": {"period_secs": 1}}), "body.singleton"),
    ];
    for (extra, at) in bad {
        let mut body = json!({"project_id": project, "name": "gated", "endpoint_url": "http://127.0.0.1:9/x"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let v = assert_problem(422, env.post("/v1/jobs", body).await, 422);
        assert_eq!(v["errors"][0]["location"], at, "{v}");
    }
    let body = json!({"project_id": project, "name": "g", "endpoint_url": "http://127.0.0.1:9/x",
                      "singleton": {"mode": "sometimes"}});
    assert_problem(400, env.post("/v1/jobs", body).await, 400);

    let job = env.job_in(&project, "http://127.0.0.1:9/x", json!({"singleton": {"key": "k", "mode": "skip"}})).await;
    let id = job["id"].as_str().unwrap();
    let long = json!({"payload": {"k": "x".repeat(300)}});
    let v = assert_problem(422, env.post(&format!("/v1/jobs/{id}/trigger"), long).await, 422);
    assert_eq!(v["errors"][0]["location"], "body.payload", "{v}");
    let dep = env.trigger(id, json!({"payload": {"k": "a"}})).await;
    let body = json!({"payload": {"k": "b"}, "depends_on": [dep["id"]]});
    assert_problem(422, env.post(&format!("/v1/jobs/{id}/trigger"), body).await, 422);
    let (s, none) = env.get(&format!("/v1/runs?project_id={project}&job_id={id}")).await;
    assert_eq!((s, none["data"].as_array().map(Vec::len)), (200, Some(1)), "nothing was written: {none}");

    // Cleared with null, like any optional setting.
    let (s, v) = env.patch(&format!("/v1/jobs/{id}"), json!({"singleton": null})).await;
    assert_eq!(s, 200, "{v}");
    assert!(v.get("singleton").is_none(), "{v}");
    env.trigger(id, json!({"payload": {"k": "a"}})).await;
}

#[tokio::test]
async fn a_singleton_holds_its_cron_ticks_with_racing_schedulers() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/", json!({"cron": "*/5 * * * *", "singleton": {"mode": "skip"}})).await;
    let id = job["id"].as_str().unwrap();
    let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
    sqlx::query("UPDATE jobs SET cron_since = $2 WHERE id = $1")
        .bind(id)
        .bind(at("2027-01-01T00:00:00Z"))
        .execute(&env.pool)
        .await
        .unwrap();
    let ticks = || async {
        let rows: Vec<(DateTime<Utc>, String)> =
            sqlx::query_as("SELECT cron_tick, status FROM job_runs WHERE job_id = $1 ORDER BY cron_tick")
                .bind(id)
                .fetch_all(&env.pool)
                .await
                .unwrap();
        rows
    };
    let schedulers: Vec<_> = (0..3).map(|_| env.scheduler()).collect();
    let fire = |t: DateTime<Utc>| futures::future::join_all(schedulers.iter().map(move |s| s.cron_once(t)));
    for r in fire(at("2027-01-01T00:05:01Z")).await {
        r.unwrap();
    }
    assert_eq!(ticks().await, [(at("2027-01-01T00:05:00Z"), "queued".into())], "one run, however many schedulers");
    // Nothing ran it: the next tick finds the key's run unfinished.
    for r in fire(at("2027-01-01T00:10:01Z")).await {
        r.unwrap();
    }
    assert_eq!(ticks().await.len(), 1, "the tick was skipped");
    // Once it ended, the next tick fires.
    let run: String =
        sqlx::query_scalar("SELECT id FROM job_runs WHERE job_id = $1").bind(id).fetch_one(&env.pool).await.unwrap();
    let (s, v) = env.post(&format!("/v1/runs/{run}/cancel"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    for r in fire(at("2027-01-01T00:15:01Z")).await {
        r.unwrap();
    }
    assert_eq!(ticks().await.last(), Some(&(at("2027-01-01T00:15:00Z"), "queued".to_string())));
}
