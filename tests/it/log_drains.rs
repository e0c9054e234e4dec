//! Log drains (docs/notifications.md, "Log drains"): the API, and the
//! scheduler's sender against a local receiver: order, NDJSON, signatures,
//! a receiver that is down for a while, the backlog cap, filters.

use std::time::Duration;

use chrono::Utc;
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_scheduler::{DrainOptions, DrainSender};
use switchyard_shared::outbound::signing;
use switchyard_shared::store::run_records::{self, NewLogLine};

use crate::harness::{assert_problem, TestEnv};
use crate::support::sdk::{accepted_async_run, api_key, call_as, sdk_post};
use crate::target::{Recorded, Reply, Target};

const T: Duration = Duration::from_secs(20);

/// Quick options: a pass every 50 ms, short back-off.
fn quick(batch_size: usize, max_backlog: u64) -> DrainOptions {
    DrainOptions {
        interval: Duration::from_millis(50),
        batch_size,
        max_backlog,
        backoff_min: Duration::from_millis(200),
        backoff_max: Duration::from_secs(1),
        send_timeout: Duration::from_secs(5),
        secrets_key: Some(switchyard_shared::config::Secret::new(crate::harness::SECRETS_KEY)),
        ..DrainOptions::default()
    }
}

async fn create_drain(env: &TestEnv, body: Value) -> Value {
    let (s, v) = env.post("/v1/log-drains", body).await;
    assert_eq!(s, 201, "{v}");
    v
}

/// A queued run of `job_id` (no worker needed: lines are appended as the
/// SDK route appends them).
async fn run_of(env: &TestEnv, job_id: &str) -> String {
    env.trigger(job_id, json!({})).await["id"].as_str().unwrap().to_string()
}

async fn append(env: &TestEnv, run_id: &str, lines: &[(&str, &str)]) {
    let lines = lines
        .iter()
        .map(|(level, message)| NewLogLine {
            level: level.to_string(),
            message: message.to_string(),
            fields: json!({"n": message}),
            logged_at: Utc::now(),
        })
        .collect();
    run_records::append_logs(&env.pool, run_id, 1, lines).await.unwrap();
}

/// The NDJSON lines of a request.
fn lines_of(r: &Recorded) -> Vec<Value> {
    r.raw.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect()
}

fn messages(reqs: &[Recorded]) -> Vec<String> {
    reqs.iter().flat_map(lines_of).map(|l| l["message"].as_str().unwrap().to_string()).collect()
}

/// Passes until the receiver has seen `want` lines (in requests from `from` on).
async fn pass_until(sender: &DrainSender, target: &Target, from: usize, want: usize) -> Vec<Recorded> {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        sender.pass_once().await.expect("drain pass");
        let reqs: Vec<Recorded> = target.requests().into_iter().skip(from).collect();
        if messages(&reqs).len() >= want {
            return reqs;
        }
        assert!(tokio::time::Instant::now() < deadline, "receiver got {:?}, want {want} lines", messages(&reqs));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn lines_reach_the_receiver_in_order_as_signed_ndjson() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({}), json!({})).await;
    let (rid, tok) = (a.run_id.as_str(), a.token.as_str());
    let project = a.job["project_id"].as_str().unwrap();
    let post = |lines: Value| sdk_post(&env, rid, "logs", tok, json!({ "lines": lines }));
    assert_eq!(post(json!([{"message": "before the drain"}])).await.0, 200);

    let receiver = Target::start().await;
    let drain = create_drain(
        &env,
        json!({"project_id": project, "name": "to receiver", "url": receiver.url, "secret": "drain-key-1"}),
    )
    .await;
    assert_eq!(post(json!([{"message": "one", "level": "warn", "fields": {"k": 1}}, {"message": "two"}])).await.0, 200);
    assert_eq!(post(json!([{"message": "three", "level": "error"}])).await.0, 200);

    let sender = DrainSender::new(env.pool.clone(), quick(500, 1_000)).unwrap();
    let reqs = pass_until(&sender, &receiver, 0, 3).await;
    assert_eq!(messages(&reqs), ["one", "two", "three"], "in order, and history is not replayed");
    for r in &reqs {
        assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
        let ts: i64 = r.header("x-svc-timestamp").unwrap().parse().unwrap();
        assert_eq!(r.header("x-svc-signature").unwrap(), signing::signature("drain-key-1", ts, r.raw.as_bytes()));
        let lines = lines_of(r);
        let batch = format!(
            "{}..{}",
            lines[0]["line_id"].as_str().unwrap(),
            lines.last().unwrap()["line_id"].as_str().unwrap()
        );
        assert_eq!(r.header("x-svc-drain-batch"), Some(batch.as_str()));
    }
    let first = &lines_of(&reqs[0])[0];
    assert_eq!(first["run_id"], rid);
    assert_eq!(first["job_id"], a.job["id"]);
    assert_eq!(first["project_id"], project);
    assert_eq!(first["level"], "warn");
    assert_eq!(first["fields"], json!({"k": 1}));
    assert!(first["line_id"].as_str().unwrap().starts_with("log_"));
    assert!(first["timestamp"].as_str().unwrap().ends_with('Z'));

    // Nothing new: nothing is sent again.
    let seen = receiver.count();
    for _ in 0..3 {
        sender.pass_once().await.unwrap();
    }
    assert_eq!(receiver.count(), seen);
    let (_, got) = env.get(&format!("/v1/log-drains/{}", drain["id"].as_str().unwrap())).await;
    assert!(got["last_success_at"].is_string(), "{got}");
    assert_eq!(got["failures"], 0);

    let (_, metrics) = env.get("/metrics").await;
    let text = metrics.as_str().unwrap_or_default();
    assert!(text.contains("svc_log_drain_lines_dropped_total"), "exposed from start");
    assert!(text.contains("svc_log_drain_lines_sent_total"));
}

/// The receiver is down for 30 s (the sender backs off from 200 ms to 1 s)
/// while lines keep coming, then comes back and gets every line in order.
#[tokio::test]
async fn a_receiver_down_for_a_while_gets_every_line_once_it_is_back() {
    let env = TestEnv::start().await;
    let receiver = Target::start().await;
    receiver.set_default(Reply::status(503));
    let job = env.job(&receiver.url, json!({})).await;
    let project = job["project_id"].as_str().unwrap();
    let drain = create_drain(&env, json!({"project_id": project, "name": "flaky", "url": receiver.url})).await;
    let drain_url = format!("/v1/log-drains/{}", drain["id"].as_str().unwrap());
    let run = run_of(&env, job["id"].as_str().unwrap()).await;
    let sender = DrainSender::new(env.pool.clone(), quick(50, 1_000)).unwrap();

    // Down for at least 30 s and until the sender has tried 3 times (a
    // loaded box makes passes slower, not fewer tries).
    let mut want = Vec::new();
    let down_at_least = tokio::time::Instant::now() + Duration::from_secs(30);
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    let (mut n, mut passes) = (0, 0);
    while tokio::time::Instant::now() < down_at_least || receiver.count() < 3 {
        assert!(tokio::time::Instant::now() < give_up, "the sender stopped trying ({} requests)", receiver.count());
        let batch: Vec<String> = (0..3).map(|i| format!("line {:03}", n + i)).collect();
        n += 3;
        let refs: Vec<(&str, &str)> = batch.iter().map(|m| ("info", m.as_str())).collect();
        append(&env, &run, &refs).await;
        want.extend(batch);
        sender.pass_once().await.unwrap();
        passes += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let tried = receiver.count();
    assert!(tried < passes, "with a back-off, not every pass sends ({tried} requests in {passes} passes)");
    let (_, got) = env.get(&drain_url).await;
    assert_eq!(got["last_error"], "HTTP 503", "{got}");
    assert!(got["failures"].as_i64().unwrap() >= 2, "{got}");

    // Back up. No pass is in flight, so every request from here on is
    // answered 200.
    receiver.set_default(Reply::status(200));
    let reqs = pass_until(&sender, &receiver, tried, want.len()).await;
    let mut got_lines = messages(&reqs);
    got_lines.dedup();
    assert_eq!(got_lines, want, "every line, in order, no gap");
    let (_, got) = env.get(&drain_url).await;
    assert!(got.get("last_error").is_none(), "{got}");
    assert_eq!(got["failures"], 0);
    assert_eq!(got["lines_dropped"], 0);
}

#[tokio::test]
async fn a_backlog_over_the_cap_drops_the_oldest_and_counts_them() {
    let env = TestEnv::start().await;
    let receiver = Target::start().await;
    let job = env.job(&receiver.url, json!({})).await;
    let project = job["project_id"].as_str().unwrap();
    let drain = create_drain(&env, json!({"project_id": project, "name": "capped", "url": receiver.url})).await;
    let run = run_of(&env, job["id"].as_str().unwrap()).await;
    let all: Vec<String> = (0..12).map(|i| format!("m{i:02}")).collect();
    append(&env, &run, &all.iter().map(|m| ("info", m.as_str())).collect::<Vec<_>>()).await;

    let sender = DrainSender::new(env.pool.clone(), quick(3, 5)).unwrap();
    let deadline = tokio::time::Instant::now() + T;
    let mut dropped = 0;
    while messages(&receiver.requests()).len() < 5 {
        assert!(tokio::time::Instant::now() < deadline, "got {:?}", messages(&receiver.requests()));
        dropped += sender.pass_once().await.unwrap().dropped;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..3 {
        sender.pass_once().await.unwrap();
    }
    assert_eq!(messages(&receiver.requests()), all[7..], "the newest five, in order");
    assert_eq!(dropped, 7);
    let (_, got) = env.get(&format!("/v1/log-drains/{}", drain["id"].as_str().unwrap())).await;
    assert_eq!(got["lines_dropped"], 7, "{got}");
}

#[tokio::test]
async fn filters_by_job_and_level() {
    let env = TestEnv::start().await;
    let receiver = Target::start().await;
    let job_a = env.job(&receiver.url, json!({})).await;
    let project = job_a["project_id"].as_str().unwrap();
    let job_b = env.job_in(project, &receiver.url, json!({"name": "other job"})).await;
    let elsewhere = env.job(&receiver.url, json!({})).await;
    let ja = job_a["id"].as_str().unwrap();
    create_drain(
        &env,
        json!({"project_id": project, "name": "a warnings", "url": receiver.url, "job_ids": [ja], "min_level": "warn"}),
    )
    .await;
    let (ra, rb, rx) = (
        run_of(&env, ja).await,
        run_of(&env, job_b["id"].as_str().unwrap()).await,
        run_of(&env, elsewhere["id"].as_str().unwrap()).await,
    );
    append(&env, &ra, &[("debug", "a debug"), ("info", "a info"), ("warn", "a warn")]).await;
    append(&env, &rb, &[("error", "b error")]).await;
    append(&env, &rx, &[("error", "other project error")]).await;
    append(&env, &ra, &[("error", "a error")]).await;

    let sender = DrainSender::new(env.pool.clone(), quick(500, 1_000)).unwrap();
    pass_until(&sender, &receiver, 0, 2).await;
    for _ in 0..3 {
        sender.pass_once().await.unwrap();
    }
    assert_eq!(messages(&receiver.requests()), ["a warn", "a error"]);
}

#[tokio::test]
async fn the_api_keeps_the_secret_write_only_validates_and_hides_other_projects() {
    let env = TestEnv::start().await;
    let receiver = Target::start().await;
    let job = env.job(&receiver.url, json!({})).await;
    let project = job["project_id"].as_str().unwrap().to_string();
    const SECRET: &str = "very-secret-drain-key";

    let mut bodies = Vec::new();
    let d = create_drain(
        &env,
        json!({"project_id": project, "name": "main", "url": receiver.url, "secret": SECRET, "min_level": "info",
               "job_ids": [job["id"], job["id"]]}),
    )
    .await;
    bodies.push(d.clone());
    let id = d["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("drn_"));
    assert_eq!(d["has_secret"], true);
    assert_eq!(d["job_ids"], json!([job["id"]]), "repeats kept once");
    assert_eq!(d["min_level"], "info");
    assert_eq!(d["enabled"], true);
    assert_eq!(d["lines_dropped"], 0);
    assert!(d.get("secret").is_none());
    let url = format!("/v1/log-drains/{id}");

    let (s, got) = env.get(&url).await;
    assert_eq!(s, 200);
    bodies.push(got);
    let (s, list) = env.get(&format!("/v1/log-drains?project_id={project}&limit=1")).await;
    assert_eq!(s, 200, "{list}");
    assert_eq!(list["data"][0]["id"], id.as_str());
    assert_eq!(list["has_more"], false);
    bodies.push(list);
    let (s, changed) = env.patch(&url, json!({"name": "renamed", "enabled": false})).await;
    assert_eq!(s, 200, "{changed}");
    assert_eq!(
        (changed["name"].as_str(), changed["enabled"].as_bool(), changed["has_secret"].as_bool()),
        (Some("renamed"), Some(false), Some(true))
    );
    bodies.push(changed);
    let (_, unsigned) = env.patch(&url, json!({"secret": null})).await;
    assert_eq!(unsigned["has_secret"], false, "null removes the key");
    bodies.push(unsigned);

    // Validation: located errors, the secret never echoed.
    let bad = [
        (json!({"project_id": project, "name": "x", "url": "ftp://example.com/in"}), "body.url"),
        (json!({"project_id": project, "name": "x", "url": receiver.url, "min_level": "fatal"}), "body.min_level"),
        (json!({"project_id": project, "name": "x", "url": receiver.url, "job_ids": ["job_nope"]}), "body.job_ids/0"),
        (json!({"project_id": project, "name": "x", "url": receiver.url, "secret": ""}), "body.secret"),
        (json!({"project_id": project, "name": "", "url": receiver.url}), "body.name"),
    ];
    for (body, at) in bad {
        let p = assert_problem(422, env.post("/v1/log-drains", body).await, 422);
        assert_eq!(p["errors"][0]["location"], at, "{p}");
    }
    let elsewhere = env.job(&receiver.url, json!({})).await;
    let p = assert_problem(422, env.patch(&url, json!({"job_ids": [elsewhere["id"]]})).await, 422);
    assert_eq!(p["errors"][0]["location"], "body.job_ids/0", "another project's job is no job of this one");
    let got =
        env.post("/v1/log-drains", json!({"project_id": project, "name": "x", "url": receiver.url, "color": 1})).await;
    assert!(got.0 == 400 || got.0 == 422, "unknown properties are refused: {got:?}");
    let p = assert_problem(422, env.patch(&url, json!({"secret": "s".repeat(300)})).await, 422);
    assert!(!p.to_string().contains("sss"), "{p}");

    // Another project's key: 404 on every operation, and an empty list.
    let other = env.project().await;
    let key = api_key(&env, &other, &["jobs:read", "jobs:write"]).await;
    for (m, body) in [(Method::GET, None), (Method::PATCH, Some(json!({"name": "x"}))), (Method::DELETE, None)] {
        assert_problem(404, call_as(&env, m, &url, &key, body).await, 404);
    }
    let (s, theirs) = call_as(&env, Method::GET, "/v1/log-drains", &key, None).await;
    assert_eq!(s, 200, "{theirs}");
    assert_eq!(theirs["data"], json!([]));
    // Scopes: jobs:read reads, only jobs:write writes.
    let reader = api_key(&env, &project, &["jobs:read"]).await;
    assert_eq!(call_as(&env, Method::GET, &url, &reader, None).await.0, 200);
    assert_problem(403, call_as(&env, Method::PATCH, &url, &reader, Some(json!({"name": "y"}))).await, 403);

    assert_eq!(env.delete(&url).await.0, 204);
    assert_problem(404, env.get(&url).await, 404);
    let (_, audit) = env.get(&format!("/v1/audit-events?project_id={project}")).await;
    let actions: Vec<&str> = audit["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    for a in ["log_drain.created", "log_drain.updated", "log_drain.deleted"] {
        assert!(actions.contains(&a), "{actions:?}");
    }
    bodies.push(audit);
    for b in &bodies {
        assert!(!b.to_string().contains(SECRET), "the secret leaked: {b}");
    }
}

#[tokio::test]
async fn private_receivers_are_refused_under_target_deny_private() {
    let env = TestEnv::start_with(|c| c.target_deny_private = true).await;
    let project = env.project().await;
    let p = assert_problem(
        422,
        env.post("/v1/log-drains", json!({"project_id": project, "name": "x", "url": "http://127.0.0.1:9/in"})).await,
        422,
    );
    assert_eq!(p["errors"][0]["location"], "body.url");
}

/// The worker's record of each finished attempt is a line too: `warn` for
/// a failed attempt, `info` for the one that completed, in order with the
/// SDK's lines.
#[tokio::test]
async fn each_finished_attempt_is_a_line() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::status(503)]);
    let receiver = Target::start().await;
    let job = env
        .job(&target.url, json!({"retry_strategy": "fixed", "retry_initial_delay_secs": 1, "max_attempts": 3}))
        .await;
    let project = job["project_id"].as_str().unwrap();
    create_drain(&env, json!({"project_id": project, "name": "attempts", "url": receiver.url})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    env.wait_status(run["id"].as_str().unwrap(), "completed", Duration::from_secs(20)).await;
    let sender = DrainSender::new(env.pool.clone(), quick(100, 1_000)).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut lines: Vec<Value> = Vec::new();
    while lines.len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "attempt lines never came: {lines:?}");
        sender.pass_once().await.unwrap();
        lines = receiver.requests().iter().flat_map(lines_of).collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let attempts: Vec<(String, String)> = lines
        .iter()
        .filter(|l| l["fields"]["source"] == "worker")
        .map(|l| (l["level"].as_str().unwrap().to_string(), l["message"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(attempts.len(), 2, "{lines:?}");
    assert_eq!(attempts[0].0, "warn");
    assert!(attempts[0].1.starts_with("attempt 1 retrying (HTTP 503)"), "{attempts:?}");
    assert_eq!(attempts[1], ("info".to_string(), "attempt 2 completed (HTTP 200)".to_string()));
    assert!(lines.iter().all(|l| l["run_id"] == run["id"]));
}
