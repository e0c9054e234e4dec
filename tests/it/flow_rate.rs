//! Rate limits: a job's own limit and named limits shared by a project's
//! jobs, measured at the target with two workers, and the throttling of
//! dequeue.lua driven by an injected clock.

use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::json;
use switchyard_shared::queue::{RATE_GUARD_MS, RATE_RECHECK_MS};

use crate::harness::TestEnv;
use crate::target::Target;

const T: Duration = Duration::from_secs(30);

/// Asserts that no `window` holds more than `max` of the sorted `arrivals`.
fn assert_at_most(arrivals: &[Instant], max: usize, window: Duration, what: &str) {
    for (i, w) in arrivals.windows(max + 1).enumerate() {
        let span = w[max] - w[0];
        assert!(span >= window, "{what}: arrivals {i}..={} are only {span:?} apart ({max} per {window:?})", i + max);
    }
}

fn arrivals(target: &Target, pred: impl Fn(&serde_json::Value) -> bool) -> Vec<Instant> {
    let mut v: Vec<Instant> = target.spans().into_iter().filter(|s| pred(&s.body)).map(|s| s.start).collect();
    v.sort();
    v
}

#[tokio::test]
async fn two_workers_never_exceed_the_rate_limit_at_the_target() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"rate_limit_max": 3, "rate_limit_window_secs": 1})).await;
    let mut runs = vec![];
    for _ in 0..9 {
        runs.push(env.trigger(job["id"].as_str().unwrap(), json!({})).await["id"].as_str().unwrap().to_string());
    }
    env.spawn_worker();
    env.spawn_worker();
    for rid in &runs {
        let done = env.wait_status(rid, "completed", T).await;
        assert_eq!(done["attempt"], 1, "a limited run waits; it is not failed or retried");
    }
    let at = arrivals(&target, |_| true);
    assert_eq!(at.len(), 9, "every run dispatched once, none dropped");
    assert_at_most(&at, 3, Duration::from_secs(1), "job limit");
    assert!(at[8] - at[0] >= Duration::from_secs(2), "nine runs at three per second span two windows");
}

#[tokio::test]
async fn a_named_limit_is_shared_by_the_projects_jobs_only() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let limit = json!({"rate_limit_keys": [{"name": "crm:eu", "max": 2, "window_secs": 1}]});
    let project = env.project().await;
    let a = env.job_in(&project, &target.url, json!({"slug": "a", "rate_limit_keys": limit["rate_limit_keys"]})).await;
    let b = env.job_in(&project, &target.url, json!({"slug": "b", "rate_limit_keys": limit["rate_limit_keys"]})).await;
    let other = env.job(&target.url, limit.clone()).await;
    let mut runs = vec![];
    for job in [&a, &b, &other] {
        for _ in 0..3 {
            let r = env.trigger(job["id"].as_str().unwrap(), json!({"payload": {"project": job["project_id"]}})).await;
            runs.push(r["id"].as_str().unwrap().to_string());
        }
    }
    env.spawn_worker();
    env.spawn_worker();
    for rid in &runs {
        env.wait_status(rid, "completed", T).await;
    }
    let shared = arrivals(&target, |b| b["payload"]["project"] == project.as_str());
    let alone = arrivals(&target, |b| b["payload"]["project"] != project.as_str());
    assert_eq!((shared.len(), alone.len()), (6, 3));
    assert_at_most(&shared, 2, Duration::from_secs(1), "jobs a and b together");
    assert_at_most(&alone, 2, Duration::from_secs(1), "the other project's job");
    assert!(alone[0] < shared[2], "another project's bucket of the same name is not shared");
}

#[tokio::test]
async fn throttled_runs_wait_for_their_window_and_are_never_dropped() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/", json!({"rate_limit_max": 2, "rate_limit_window_secs": 1})).await;
    let jid = job["id"].as_str().unwrap();
    for _ in 0..5 {
        env.trigger(jid, json!({})).await;
    }
    let q = env.new_queue();
    let lease = Duration::from_secs(1);
    let t0 = Utc::now().timestamp_millis();
    let span = 1000 + RATE_GUARD_MS;
    let throttled = || async {
        let mut c = env.queue.conn().await.unwrap();
        let scores: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(&env.queue.partitions()[env.queue.partition_of_project(job["project_id"].as_str().unwrap())].throttled)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut c)
            .await
            .unwrap();
        scores.into_iter().map(|(_, s)| s as i64).collect::<Vec<i64>>()
    };
    let sent = |entries: Vec<switchyard_shared::queue::Entry>, at: i64| {
        let q = q.clone();
        async move {
            for e in entries {
                assert_eq!(q.record_dispatch(&e, at).await.unwrap(), 1);
            }
        }
    };

    let first = q.dequeue(10, lease, t0).await.unwrap();
    assert_eq!(first.len(), 2, "the window admits two");
    // Not sent yet: the others look again shortly, then are spread out.
    assert_eq!(throttled().await, [t0 + RATE_RECHECK_MS, t0 + RATE_RECHECK_MS, t0 + RATE_RECHECK_MS + span]);
    sent(first, t0 + 10).await;
    assert!(q.dequeue(10, lease, t0 + RATE_RECHECK_MS).await.unwrap().is_empty());
    assert_eq!(
        throttled().await,
        [t0 + 10 + span, t0 + 10 + span, t0 + RATE_RECHECK_MS + span],
        "windows count send times"
    );

    assert!(q.dequeue(10, lease, t0 + 10 + span - 1).await.unwrap().is_empty(), "not before the window allows");
    let second = q.dequeue(10, lease, t0 + 10 + span).await.unwrap();
    assert_eq!(second.len(), 2);
    // Only one of them is sent (the other's worker died): its provisional
    // place still counts.
    sent(second[..1].to_vec(), t0 + 10 + span).await;
    assert!(q.dequeue(10, lease, t0 + RATE_RECHECK_MS + span).await.unwrap().is_empty());
    assert_eq!(q.dequeue(10, lease, t0 + 10 + 2 * span).await.unwrap().len(), 1);
    assert_eq!(env.zcard_all(|k| &k.throttled).await, 0);
    assert_eq!(env.zcard_all(|k| &k.leases).await, 5, "all five dispatched, none dropped");
}
