//! `GET /v1/stats/queues`: per job of a project, where its runs wait in
//! Redis and how many of each unfinished status Postgres holds.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::support::sdk::{api_key, call_as};

const NOWHERE: &str = "http://127.0.0.1:9/x";

fn job_of<'a>(stats: &'a Value, job_id: &str) -> &'a Value {
    stats["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job_id"] == job_id)
        .unwrap_or_else(|| panic!("{job_id}: {stats}"))
}

fn counts(j: &Value) -> [i64; 9] {
    ["ready", "scheduled", "throttled", "parked", "leased", "pending", "queued", "running", "retrying"]
        .map(|k| j[k].as_i64().unwrap_or_else(|| panic!("{k} missing: {j}")))
}

#[tokio::test]
async fn queue_stats_count_each_place_a_run_waits() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let capped = env.job_in(&project, NOWHERE, json!({"name": "capped", "max_concurrency": 1})).await;
    let rated = env
        .job_in(&project, NOWHERE, json!({"name": "rated", "rate_limit_max": 1, "rate_limit_window_secs": 60}))
        .await;
    let idle = env.job_in(&project, NOWHERE, json!({"name": "idle"})).await;
    let (capped, rated, idle) =
        (capped["id"].as_str().unwrap(), rated["id"].as_str().unwrap(), idle["id"].as_str().unwrap());
    // Another project's runs are not counted.
    let other = env.job(NOWHERE, json!({})).await;
    env.trigger(other["id"].as_str().unwrap(), json!({})).await;

    let first = env.trigger(capped, json!({})).await;
    env.trigger(capped, json!({})).await;
    env.trigger(rated, json!({})).await;
    env.trigger(rated, json!({})).await;
    // One dequeue, as a worker's: each job's first run is leased, the
    // capped job's second is parked, the rated job's second throttled.
    let leased = env.queue.dequeue(10, Duration::from_secs(60), chrono::Utc::now().timestamp_millis()).await.unwrap();
    assert_eq!(leased.len(), 3, "{leased:?}");
    env.trigger(capped, json!({})).await;
    env.trigger(capped, json!({"delay_secs": 600})).await;
    // The first run has been waiting two minutes.
    sqlx::query("UPDATE job_runs SET created_at = now() - interval '120 seconds' WHERE id = $1")
        .bind(first["id"].as_str().unwrap())
        .execute(&env.pool)
        .await
        .unwrap();

    let (s, stats) = env.get(&format!("/v1/stats/queues?project_id={project}")).await;
    assert_eq!(s, 200, "{stats}");
    assert_eq!(stats["project_id"], project.as_str());
    assert_eq!(stats["jobs"].as_array().unwrap().len(), 3, "{stats}");
    let c = job_of(&stats, capped);
    // ready scheduled throttled parked leased | pending queued running retrying
    assert_eq!(counts(c), [1, 1, 0, 1, 1, 1, 3, 0, 0], "{c}");
    let age = c["oldest_queued_age_secs"].as_i64().unwrap();
    assert!((120..600).contains(&age), "{c}");
    let r = job_of(&stats, rated);
    assert_eq!(counts(r), [0, 0, 1, 0, 1, 0, 2, 0, 0], "{r}");
    let i = job_of(&stats, idle);
    assert_eq!(counts(i), [0; 9], "{i}");
    assert!(i.get("oldest_queued_age_secs").is_none(), "nothing queued: {i}");
}

#[tokio::test]
async fn queue_stats_need_stats_read_and_stay_in_the_project() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    env.job_in(&project, NOWHERE, json!({})).await;
    let stats_key = api_key(&env, &project, &["stats:read"]).await;
    let (s, v) = call_as(&env, Method::GET, "/v1/stats/queues", &stats_key, None).await;
    assert_eq!((s, v["project_id"].as_str()), (200, Some(project.as_str())), "the key's own project: {v}");
    assert_eq!(v["jobs"].as_array().unwrap().len(), 1);

    let runs_key = api_key(&env, &project, &["runs:read", "jobs:read"]).await;
    assert_problem(403, call_as(&env, Method::GET, "/v1/stats/queues", &runs_key, None).await, 403);

    let elsewhere = env.project().await;
    let path = format!("/v1/stats/queues?project_id={elsewhere}");
    assert_problem(403, call_as(&env, Method::GET, &path, &stats_key, None).await, 403);
}
