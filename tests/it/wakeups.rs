//! The scheduler's loops sleep until their next deadline (30 s at most)
//! instead of polling; the api and workers wake them through Redis when
//! they make work that may be due sooner. Each test lets the scheduler fall
//! idle first, then makes the work through the public paths and checks it
//! is handled as promptly as when the loops polled every second.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::harness::TestEnv;
use crate::support::sdk::accepted_async_run;
use crate::target::{Reply, Target};

const T: Duration = Duration::from_secs(10);
/// Long enough for every loop's first pass to find nothing and go to sleep.
const SETTLE: Duration = Duration::from_secs(2);

fn ts(v: &Value) -> DateTime<Utc> {
    v.as_str().and_then(|s| DateTime::parse_from_rfc3339(s).ok()).expect("a timestamp").with_timezone(&Utc)
}

#[tokio::test]
async fn a_run_triggered_while_the_scheduler_idles_expires_on_time() {
    let env = TestEnv::start().await;
    env.spawn_scheduler();
    tokio::time::sleep(SETTLE).await;
    // No worker: the run cannot start.
    let job = env.job("http://127.0.0.1:9/", json!({"run_ttl_secs": 1})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let done = env.wait_status(run["id"].as_str().unwrap(), "expired", T).await;
    let late = ts(&done["finished_at"]) - ts(&done["expires_at"]);
    assert!(late >= chrono::Duration::zero(), "expired before its deadline: {done}");
    assert!(late <= chrono::Duration::milliseconds(1_300), "expired {late} after its deadline");
}

#[tokio::test]
async fn a_dependent_triggered_while_the_scheduler_idles_starts_soon_after_its_dependency() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::slow(Duration::from_millis(300))]);
    let job = env.job(&target.url, json!({})).await;
    let id = job["id"].as_str().unwrap();
    env.spawn_worker();
    env.spawn_scheduler();
    tokio::time::sleep(SETTLE).await;
    let a = env.trigger(id, json!({})).await;
    let b = env.trigger(id, json!({"depends_on": [a["id"]]})).await;
    assert_eq!(b["status"], "pending");
    let b = env.wait_status(b["id"].as_str().unwrap(), "completed", T).await;
    let a = env.run(a["id"].as_str().unwrap()).await;
    let gap = ts(&b["started_at"]) - ts(&a["finished_at"]);
    assert!(gap <= chrono::Duration::milliseconds(1_500), "started {gap} after its dependency finished");
}

#[tokio::test]
async fn a_cron_job_created_while_the_scheduler_idles_fires_its_next_ticks() {
    let env = TestEnv::start().await;
    env.spawn_scheduler();
    tokio::time::sleep(SETTLE).await;
    let created = Utc::now();
    let job = env.job("http://127.0.0.1:9/", json!({"cron": "* * * * * *"})).await;
    let deadline = tokio::time::Instant::now() + T;
    let first: DateTime<Utc> = loop {
        let tick: Option<DateTime<Utc>> = sqlx::query_scalar("SELECT min(cron_tick) FROM job_runs WHERE job_id = $1")
            .bind(job["id"].as_str().unwrap())
            .fetch_one(&env.pool)
            .await
            .unwrap();
        if let Some(t) = tick {
            break t;
        }
        assert!(tokio::time::Instant::now() < deadline, "no tick fired within {T:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(first - created <= chrono::Duration::milliseconds(2_100), "first tick {first}, job made at {created}");
}

#[tokio::test]
async fn a_silent_async_run_accepted_while_the_scheduler_idles_times_out_on_time() {
    let env = TestEnv::start().await;
    env.spawn_scheduler();
    tokio::time::sleep(SETTLE).await;
    let a = accepted_async_run(&env, json!({"timeout_secs": 1, "max_attempts": 1}), json!({})).await;
    let done = env.wait_status(&a.run_id, "timed_out", T).await;
    let accepted: DateTime<Utc> = sqlx::query_scalar("SELECT async_accepted_at FROM job_runs WHERE id = $1")
        .bind(&a.run_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let silent = ts(&done["finished_at"]) - accepted;
    assert!(silent >= chrono::Duration::seconds(1), "timed out within its timeout: {done}");
    assert!(silent <= chrono::Duration::milliseconds(2_300), "timed out {silent} after acceptance, timeout 1 s");
}
