//! Run records: written over the SDK with the run token, read under /v1
//! (docs/runs.md, "Run records, bulk operations, environments and secrets");
//! metadata, debug mode, the debug bundle.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::support::sdk::{accepted_async_run, api_key, call_as, sdk_post};
use crate::target::{Reply, Target};

const T: Duration = Duration::from_secs(15);

#[tokio::test]
async fn sdk_records_reach_the_read_side() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({"webhook_secret": "whsec-hidden"}), json!({})).await;
    let (rid, tok) = (a.run_id.as_str(), a.token.as_str());

    let (s, v) = sdk_post(
        &env,
        rid,
        "logs",
        tok,
        json!({"lines": [
            {"level": "info", "message": "starting", "fields": {"batch": 3}, "timestamp": "2026-01-01T00:00:00Z"},
            {"level": "error", "message": "row 7 is odd"},
            {"message": "defaults to info"},
        ]}),
    )
    .await;
    assert_eq!((s, &v), (200, &json!({"accepted": 3})));
    let (s, c1) = sdk_post(&env, rid, "checkpoints", tok, json!({"data": {"step": 1}, "label": "first"})).await;
    assert_eq!(s, 201, "{c1}");
    let (s, c2) = sdk_post(&env, rid, "checkpoints", tok, json!({"data": {"step": 2}})).await;
    assert_eq!(s, 201, "{c2}");
    assert_eq!(c2["attempt"], 1);
    let (s, latest) = call_as(&env, Method::GET, &format!("/sdk/v1/runs/{rid}/checkpoints/latest"), tok, None).await;
    assert_eq!((s, &latest["data"]), (200, &json!({"step": 2})));
    let (s, p) = sdk_post(&env, rid, "progress", tok, json!({"progress": 0.5, "message": "half way"})).await;
    assert_eq!(s, 200, "{p}");
    let run = env.run(rid).await;
    assert_eq!((run["progress"].as_f64(), run["progress_message"].as_str()), (Some(0.5), Some("half way")));
    let (s, o) = sdk_post(&env, rid, "outputs", tok, json!({"name": "report", "data": {"rows": 3}})).await;
    assert_eq!(s, 201, "{o}");
    for body in [
        json!({"cost_microusd": 1500, "tokens_in": 100, "tokens_out": 20, "model": "m-1"}),
        json!({"cost_microusd": 500, "tokens_in": 10, "cpu_ms": 30}),
    ] {
        let (s, u) = sdk_post(&env, rid, "usage", tok, body).await;
        assert_eq!(s, 201, "{u}");
    }
    let (s, t) = sdk_post(
        &env,
        rid,
        "tool-calls",
        tok,
        json!({"name": "search", "input": {"q": "x"}, "output": ["a"], "duration_ms": 12, "status": "ok"}),
    )
    .await;
    assert_eq!(s, 201, "{t}");
    let state_url = |k: &str| format!("/sdk/v1/runs/{rid}/state/{k}");
    let (s, e) = call_as(&env, Method::PUT, &state_url("cursor"), tok, Some(json!({"value": 41}))).await;
    assert_eq!((s, &e["value"]), (200, &json!(41)));
    let (s, e) = call_as(&env, Method::PUT, &state_url("cursor"), tok, Some(json!({"value": 42}))).await;
    assert_eq!((s, &e["value"]), (200, &json!(42)), "a put replaces");
    let (s, _) = call_as(&env, Method::PUT, &state_url("scratch.v1"), tok, Some(json!({"value": {"x": true}}))).await;
    assert_eq!(s, 200);
    let (s, e) = call_as(&env, Method::GET, &state_url("cursor"), tok, None).await;
    assert_eq!((s, &e["key"], &e["value"]), (200, &json!("cursor"), &json!(42)));
    assert_eq!(call_as(&env, Method::DELETE, &state_url("scratch.v1"), tok, None).await.0, 204);
    assert_problem(404, call_as(&env, Method::DELETE, &state_url("scratch.v1"), tok, None).await, 404);
    assert_problem(404, call_as(&env, Method::GET, &state_url("scratch.v1"), tok, None).await, 404);

    // The read side.
    let (s, logs) = env.get(&format!("/v1/runs/{rid}/logs")).await;
    assert_eq!(s, 200, "{logs}");
    let lines = logs["data"].as_array().unwrap();
    let msgs: Vec<_> = lines.iter().map(|l| l["message"].as_str().unwrap()).collect();
    assert_eq!(msgs, ["starting", "row 7 is odd", "defaults to info"], "oldest first");
    assert_eq!(lines[0]["fields"], json!({"batch": 3}));
    assert_eq!(
        lines[0]["timestamp"].as_str().unwrap().parse::<chrono::DateTime<chrono::Utc>>().unwrap().timestamp(),
        1_767_225_600
    );
    assert_eq!(lines[2]["level"], "info");
    assert_eq!(lines[0]["attempt"], 1);
    let (_, errs) = env.get(&format!("/v1/runs/{rid}/logs?level=error")).await;
    assert_eq!(errs["data"].as_array().unwrap().len(), 1);
    let (_, page) = env.get(&format!("/v1/runs/{rid}/logs?limit=2")).await;
    assert_eq!(page["has_more"], true);
    let (_, rest) =
        env.get(&format!("/v1/runs/{rid}/logs?limit=2&cursor={}", page["next_cursor"].as_str().unwrap())).await;
    assert_eq!(rest["data"][0]["message"], "defaults to info");
    let (_, cps) = env.get(&format!("/v1/runs/{rid}/checkpoints")).await;
    let labels: Vec<_> = cps["data"].as_array().unwrap().iter().map(|c| c["data"]["step"].as_i64().unwrap()).collect();
    assert_eq!(labels, [2, 1], "newest first");
    assert_eq!(cps["data"][1]["label"], "first");
    let (_, outs) = env.get(&format!("/v1/runs/{rid}/outputs")).await;
    assert_eq!((&outs["data"][0]["name"], &outs["data"][0]["data"]), (&json!("report"), &json!({"rows": 3})));
    let (_, usage) = env.get(&format!("/v1/runs/{rid}/usage")).await;
    assert_eq!(
        usage["totals"],
        json!({"records": 2, "cost_microusd": 2000, "tokens_in": 110, "tokens_out": 20, "cpu_ms": 30})
    );
    assert_eq!(usage["data"].as_array().unwrap().len(), 2);
    assert_eq!(usage["data"][1]["model"], "m-1");
    let (_, tools) = env.get(&format!("/v1/runs/{rid}/tool-calls")).await;
    assert_eq!(tools["data"][0]["output"], json!(["a"]));
    assert_eq!(tools["data"][0]["duration_ms"], 12);
    let (_, st) = env.get(&format!("/v1/runs/{rid}/state")).await;
    assert_eq!(st, json!({"run_id": rid, "state": {"cursor": 42}}));

    // The target finishes it.
    let (s, done) = sdk_post(&env, rid, "complete", tok, json!({"result": {"ok": 1}})).await;
    assert_eq!(s, 200, "{done}");
    assert_eq!((done["status"].as_str(), &done["result"]), (Some("completed"), &json!({"ok": 1})));
    assert!(done["finished_at"].is_string());
    assert_problem(409, sdk_post(&env, rid, "complete", tok, json!({})).await, 409);
    assert_problem(409, sdk_post(&env, rid, "checkpoints", tok, json!({"data": 1})).await, 409);
    assert_problem(409, call_as(&env, Method::PUT, &state_url("late"), tok, Some(json!({"value": 1}))).await, 409);
    let (s, _) = sdk_post(&env, rid, "logs", tok, json!({"lines": [{"message": "flushed after the end"}]})).await;
    assert_eq!(s, 200, "logs are accepted after the end");

    let (s, ev) = env.get(&format!("/v1/runs/{rid}/events")).await;
    assert_eq!(s, 200, "{ev}");
    let kinds: Vec<String> = ev["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| match e["type"].as_str().unwrap() {
            "transition" => e["to_status"].as_str().unwrap().to_string(),
            other => format!("{other}:{}", e["outcome"].as_str().unwrap()),
        })
        .collect();
    assert_eq!(kinds, ["queued", "running", "running", "completed", "attempt:completed"]);
    let accepted = &ev["data"][2];
    assert!(accepted["reason"].as_str().unwrap().contains("202"), "{accepted}");
    let attempt = &ev["data"][4];
    assert_eq!(attempt["attempt"], 1);
    assert!(attempt["duration_ms"].is_i64() && attempt["started_at"].is_string(), "{attempt}");

    let (s, bundle) = env.get(&format!("/v1/runs/{rid}/debug-bundle")).await;
    assert_eq!(s, 200, "{bundle}");
    assert_eq!(bundle["run"]["id"], rid);
    assert_eq!(bundle["job_version"]["job_id"], a.job["id"]);
    assert_eq!(bundle["job_version"]["definition"]["endpoint_url"], json!(a.target.url));
    assert!(!bundle.to_string().contains("whsec-hidden"), "no webhook secret in the bundle");
    assert_eq!(bundle["events"].as_array().unwrap().len(), 5);
    assert_eq!(bundle["logs"].as_array().unwrap().len(), 4);
    assert_eq!(bundle["checkpoints"].as_array().unwrap().len(), 2);
    assert_eq!(bundle["state"], json!({"cursor": 42}));
    assert_eq!(bundle["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(bundle["usage_totals"]["records"], 2);
    assert_eq!(bundle["tool_calls"].as_array().unwrap().len(), 1);
    assert_eq!(bundle["secret_names"], json!([]));
}

#[tokio::test]
async fn sdk_refuses_wrong_credentials_and_bad_bodies() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({}), json!({})).await;
    let b = accepted_async_run(&env, json!({}), json!({})).await;
    let (rid, tok) = (a.run_id.as_str(), a.token.as_str());
    let line = json!({"lines": [{"message": "x"}]});

    assert_problem(403, sdk_post(&env, rid, "logs", &b.token, line.clone()).await, 403);
    assert_problem(401, sdk_post(&env, rid, "logs", "not-a-token", line.clone()).await, 401);
    let forged = {
        let mut parts: Vec<String> = tok.split('.').map(String::from).collect();
        parts[2] = parts[2].chars().rev().collect();
        parts.join(".")
    };
    assert_problem(401, sdk_post(&env, rid, "logs", &forged, line.clone()).await, 401);
    let project = a.job["project_id"].as_str().unwrap();
    let key = api_key(&env, project, &["*"]).await;
    assert_problem(403, sdk_post(&env, rid, "logs", &key, line.clone()).await, 403);
    assert_problem(401, call_as(&env, Method::GET, &format!("/v1/runs/{rid}/logs"), tok, None).await, 401);
    let (s, _) = env
        .http
        .post(format!("{}/sdk/v1/runs/{rid}/logs", env.base))
        .json(&line)
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(s, 401);

    let many: Vec<Value> = (0..101).map(|_| json!({"message": "x"})).collect();
    for (what, body, want) in [
        ("logs", json!({"lines": []}), 422),
        ("logs", json!({"lines": many}), 422),
        ("logs", json!({"lines": [{"message": "x", "level": "fatal"}]}), 422),
        // fields is an object and data any JSON but null: the document says
        // so, and a value of another type is 400, as every wrong type is.
        ("logs", json!({"lines": [{"message": "x", "fields": [1]}]}), 400),
        ("logs", json!({"lines": [{"msg": "x"}]}), 400),
        ("checkpoints", json!({"label": "no data"}), 400),
        ("checkpoints", json!({"data": null}), 400),
        ("checkpoints", json!({"data": 1, "labels": "x"}), 400),
        ("progress", json!({"progress": 1.5}), 422),
        ("progress", json!({"progress": "half"}), 400),
        ("outputs", json!({"name": "", "data": 1}), 422),
        ("usage", json!({"tokens_in": -1}), 422),
        ("usage", json!({"price": 1}), 400),
        ("tool-calls", json!({"name": "t", "duration_ms": -5}), 422),
        ("fail", json!({"error": "x", "error_class": "Not\nValid"}), 422),
        ("fail", json!({"retryable": true}), 400),
        ("complete", json!({"result": 1, "extra": 2}), 400),
    ] {
        let got = sdk_post(&env, rid, what, tok, body.clone()).await;
        assert_problem(want, got, want);
    }
    let (s, p) =
        call_as(&env, Method::PUT, &format!("/sdk/v1/runs/{rid}/state/bad%20key"), tok, Some(json!({"value": 1})))
            .await;
    assert_eq!((s, &p["errors"][0]["location"]), (422, &json!("path.key")), "{p}");
    let big = "x".repeat(300 * 1024);
    let (s, _) =
        call_as(&env, Method::PUT, &format!("/sdk/v1/runs/{rid}/state/k"), tok, Some(json!({"value": big}))).await;
    assert_eq!(s, 422);
    // Nothing of the refused calls was stored; the run is still running.
    let (_, logs) = env.get(&format!("/v1/runs/{rid}/logs")).await;
    assert_eq!(logs["data"], json!([]));
    assert_eq!(env.run(rid).await["status"], "running");

    // The read side: another project's run is missing; paging is checked.
    let other = env.project().await;
    let other_key = api_key(&env, &other, &["runs:read", "runs:write"]).await;
    for path in ["logs", "events", "state", "outputs", "checkpoints", "usage", "tool-calls", "debug-bundle"] {
        let (s, _) = call_as(&env, Method::GET, &format!("/v1/runs/{rid}/{path}"), &other_key, None).await;
        assert_eq!(s, 404, "{path}");
    }
    let own_key = api_key(&env, project, &["runs:read"]).await;
    let (s, _) = call_as(&env, Method::GET, &format!("/v1/runs/{rid}/logs"), &own_key, None).await;
    assert_eq!(s, 200);
    assert_problem(404, env.get("/v1/runs/run_nope/outputs").await, 404);
    assert_problem(422, env.get(&format!("/v1/runs/{rid}/outputs?limit=0")).await, 422);
    assert_problem(422, env.get(&format!("/v1/runs/{rid}/logs?cursor=a|b")).await, 422);
    assert_problem(422, env.get(&format!("/v1/runs/{rid}/events?cursor=-1")).await, 422);
    assert_problem(422, env.get(&format!("/v1/runs/{rid}/logs?level=loud")).await, 422);

    // NUL characters, which Postgres text cannot hold, are stored as U+FFFD.
    let (s, nul) =
        sdk_post(&env, rid, "logs", tok, json!({"lines": [{"message": "a\u{0}b", "fields": {"k\u{0}": "v"}}]})).await;
    assert_eq!(s, 200, "{nul}");
    let (_, logs) = env.get(&format!("/v1/runs/{rid}/logs")).await;
    assert_eq!(logs["data"][0]["message"], "a\u{fffd}b");
    assert_eq!(logs["data"][0]["fields"], json!({"k\u{fffd}": "v"}));
}

#[tokio::test]
async fn metadata_merges_and_debug_mode_toggles() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/hook", json!({"default_run_metadata": {"team": "core"}})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({"metadata": {"a": "1", "b": "2"}})).await;
    let rid = run["id"].as_str().unwrap();
    let url = format!("/v1/runs/{rid}/metadata");
    let (s, v) = env.patch(&url, json!({"metadata": {"b": null, "c": "3", "team": "edge"}})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["metadata"], json!({"a": "1", "c": "3", "team": "edge"}));
    let (s, v) = env.patch(&url, json!({"metadata": {}})).await;
    assert_eq!((s, &v["metadata"]), (200, &json!({"a": "1", "c": "3", "team": "edge"})));

    // A value is a string or null, as the document says: another type is 400.
    let p = assert_problem(400, env.patch(&url, json!({"metadata": {"n": 5}})).await, 400);
    assert_eq!(p["errors"][0]["location"], "body.metadata/n");
    assert_problem(422, env.patch(&url, json!({"metadata": {"long": "x".repeat(1025)}})).await, 422);
    assert_problem(422, env.patch(&url, json!({"metadata": {"nul": "a\u{0}b"}})).await, 422);
    assert_problem(422, env.patch(&url, json!({"metadata": {"a\u{0}": "b"}})).await, 422);
    let crowd: serde_json::Map<String, Value> = (0..62).map(|i| (format!("k{i}"), json!("v"))).collect();
    assert_problem(422, env.patch(&url, json!({"metadata": crowd})).await, 422);
    assert_problem(400, env.patch(&url, json!({"meta": {}})).await, 400);
    assert_eq!(env.run(rid).await["metadata"], json!({"a": "1", "c": "3", "team": "edge"}), "refusals change nothing");

    let (s, v) = env.call(Method::PUT, &format!("/v1/runs/{rid}/debug-mode"), Some(json!({"enabled": true}))).await;
    assert_eq!((s, &v["debug_mode"]), (200, &json!(true)));
    let (s, v) = env.call(Method::PUT, &format!("/v1/runs/{rid}/debug-mode"), Some(json!({"enabled": false}))).await;
    assert_eq!((s, &v["debug_mode"]), (200, &json!(false)));
    assert_problem(
        400,
        env.call(Method::PUT, &format!("/v1/runs/{rid}/debug-mode"), Some(json!({"enabled": "yes"}))).await,
        400,
    );

    let other = env.project().await;
    let key = api_key(&env, &other, &["runs:write"]).await;
    let (s, _) = call_as(&env, Method::PATCH, &url, &key, Some(json!({"metadata": {"x": "1"}}))).await;
    assert_eq!(s, 404);
    let (s, _) =
        call_as(&env, Method::PUT, &format!("/v1/runs/{rid}/debug-mode"), &key, Some(json!({"enabled": true}))).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn events_page_through_transitions_and_attempts() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::status(500), Reply::status(500)]);
    let job = env
        .job(&target.url, json!({"retry_strategy": "fixed", "retry_initial_delay_secs": 1, "max_attempts": 3}))
        .await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let rid = run["id"].as_str().unwrap();
    env.spawn_worker();
    env.spawn_scheduler();
    env.wait_status(rid, "completed", T).await;

    let (_, all) = env.get(&format!("/v1/runs/{rid}/events?limit=100")).await;
    let all = all["data"].as_array().unwrap().clone();
    let attempts: Vec<_> = all
        .iter()
        .filter(|e| e["type"] == "attempt")
        .map(|e| (e["attempt"].as_i64().unwrap(), e["outcome"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(attempts, [(1, "retrying".to_string()), (2, "retrying".to_string()), (3, "completed".to_string())]);
    // Queued runs' creation and each attempt's two transitions are read
    // from the run and attempt rows (migration 0008); the retries' `due`
    // moves are stored events. Together they read as one history.
    let path: Vec<String> = all
        .iter()
        .map(|e| match e["type"].as_str().unwrap() {
            "transition" => {
                format!("{}>{}", e["from_status"].as_str().unwrap_or("-"), e["to_status"].as_str().unwrap())
            }
            other => format!("{other}:{}", e["outcome"].as_str().unwrap()),
        })
        .collect();
    assert_eq!(
        path,
        [
            "->queued",
            "queued>running",
            "running>retrying",
            "attempt:retrying",
            "retrying>queued",
            "queued>running",
            "running>retrying",
            "attempt:retrying",
            "retrying>queued",
            "queued>running",
            "running>completed",
            "attempt:completed",
        ]
    );
    let retry = &all[2];
    assert_eq!((retry["attempt"].as_i64(), retry["reason"].is_string()), (Some(1), true), "{retry}");
    let first_attempt = all.iter().find(|e| e["type"] == "attempt").unwrap();
    assert_eq!(first_attempt["status_code"], 500);
    assert_eq!(first_attempt["endpoint_url"], json!(target.url));
    let times: Vec<&str> = all.iter().map(|e| e["at"].as_str().unwrap()).collect();
    let mut sorted = times.clone();
    sorted.sort();
    assert_eq!(times, sorted, "oldest first");

    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..20 {
        let url = match &cursor {
            Some(c) => format!("/v1/runs/{rid}/events?limit=3&cursor={c}"),
            None => format!("/v1/runs/{rid}/events?limit=3"),
        };
        let (s, page) = env.get(&url).await;
        assert_eq!(s, 200, "{page}");
        paged.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(paged, all);
}
