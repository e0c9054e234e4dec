//! Helpers for the SDK side of a run: calls with a run token, and an async
//! run that a real worker has dispatched and its target accepted (202).

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::TestEnv;
use crate::target::{Reply, Target};

/// A call with `Authorization: Bearer <token>` (a run token, or anything).
pub async fn call_as(env: &TestEnv, method: Method, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    env.call_with(env.http.request(method, format!("{}{}", env.base, path)).bearer_auth(token), body).await
}

pub async fn sdk_post(env: &TestEnv, run_id: &str, what: &str, token: &str, body: Value) -> (u16, Value) {
    call_as(env, Method::POST, &format!("/sdk/v1/runs/{run_id}/{what}"), token, Some(body)).await
}

/// An async run its target accepted with 202: running, no lease, token in hand.
pub struct AsyncRun {
    pub run_id: String,
    pub token: String,
    pub job: Value,
    pub target: Target,
}

/// Makes a job (with `job_extra`) answering 202, triggers it in async mode
/// (with `trigger_extra`), and has one worker step dispatch it.
pub async fn accepted_async_run(env: &TestEnv, job_extra: Value, trigger_extra: Value) -> AsyncRun {
    let target = Target::start().await;
    target.set_default(Reply::status(202));
    let job = env.job(&target.url, job_extra).await;
    let mut body = json!({"execution_mode": "async", "payload": {"n": 1}});
    if let (Some(b), Some(e)) = (body.as_object_mut(), trigger_extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    let run = env.trigger(job["id"].as_str().unwrap(), body).await;
    let run_id = run["id"].as_str().unwrap().to_string();
    let token = next_token(env, &target, 1).await;
    let r = env.run(&run_id).await;
    assert_eq!(r["status"], "running", "{r}");
    AsyncRun { run_id, token, job, target }
}

/// Runs worker steps until the target has seen `n` dispatches, and returns
/// the run token of the last one.
pub async fn next_token(env: &TestEnv, target: &Target, n: usize) -> String {
    let worker = env.worker();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while target.count() < n {
        assert!(tokio::time::Instant::now() < deadline, "no dispatch #{n} within 15s");
        if worker.run_once().await.expect("worker step") == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let reqs = target.requests();
    reqs[n - 1].header("x-svc-run-token").expect("run token").to_string()
}

/// The Prometheus value of one sample line (`name{labels} value`), summed
/// over every series of `name` whose labels contain all of `labels`.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            let series = l.split_whitespace().next().unwrap_or("");
            (series == name || series.starts_with(&format!("{name}{{")))
                && labels.iter().all(|want| series.contains(want))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The api's /metrics text.
pub async fn scrape(env: &TestEnv) -> String {
    env.http.get(format!("{}/metrics", env.base)).send().await.expect("metrics").text().await.expect("text")
}

/// A new API key of `project` with `scopes` (made with the internal secret).
pub async fn api_key(env: &TestEnv, project: &str, scopes: &[&str]) -> String {
    let (s, v) =
        env.post("/v1/api-keys", json!({"project_id": project, "name": "records test", "scopes": scopes})).await;
    assert_eq!(s, 201, "{v}");
    v["key"].as_str().unwrap().to_string()
}

/// Ids of the project's runs with this batch_id.
pub async fn batch_runs(env: &TestEnv, project: &str, batch_id: &str) -> Vec<Value> {
    let (s, v) = env.get(&format!("/v1/runs?project_id={project}&batch_id={batch_id}")).await;
    assert_eq!(s, 200, "{v}");
    v["data"].as_array().unwrap().clone()
}
