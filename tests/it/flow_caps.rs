//! Concurrency caps and priorities with real workers: the per-key cap held
//! at the target by two workers, slots released when a crashed worker's
//! lease expires and when a parked run is cancelled, priority order.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::TestEnv;
use crate::support::queue::active_slots;
use crate::target::{Reply, Span, Target};

const T: Duration = Duration::from_secs(20);

/// Most spans of `spans` in progress at one moment.
pub fn max_overlap(spans: &[&Span]) -> usize {
    spans.iter().map(|s| spans.iter().filter(|t| t.start <= s.start && s.start < t.end).count()).max().unwrap_or(0)
}

async fn trigger_n(env: &TestEnv, job: &str, n: usize, body: Value) -> Vec<String> {
    let mut ids = vec![];
    for _ in 0..n {
        ids.push(env.trigger(job, body.clone()).await["id"].as_str().unwrap().to_string());
    }
    ids
}

#[tokio::test]
async fn two_workers_hold_max_concurrency_per_key_at_the_target() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::slow(Duration::from_millis(200)));
    let job = env.job(&target.url, json!({"max_concurrency_per_key": 2})).await;
    let id = job["id"].as_str().unwrap();
    let mut runs = trigger_n(&env, id, 6, json!({"concurrency_key": "tenant-a", "payload": {"k": "a"}})).await;
    runs.extend(trigger_n(&env, id, 6, json!({"concurrency_key": "tenant|b", "payload": {"k": "b"}})).await);
    runs.extend(trigger_n(&env, id, 3, json!({"payload": {"k": ""}})).await);
    env.spawn_worker();
    env.spawn_worker();
    for rid in &runs {
        env.wait_status(rid, "completed", T).await;
    }
    let spans = target.spans();
    assert_eq!(spans.len(), 15);
    for key in ["a", "b"] {
        let of_key: Vec<&Span> = spans.iter().filter(|s| s.body["payload"]["k"] == key).collect();
        assert_eq!(max_overlap(&of_key), 2, "key {key}: the cap is reached and never exceeded");
    }
    let all: Vec<&Span> = spans.iter().collect();
    assert!(max_overlap(&all) > 2, "the cap is per key, not per job");
    assert!(active_slots(&env).await.is_empty(), "every slot released: {:?}", active_slots(&env).await);
}

#[tokio::test]
async fn a_crashed_workers_slot_comes_back_when_its_lease_expires() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::slow(Duration::from_secs(30))]);
    let job = env.job(&target.url, json!({"max_concurrency": 1, "timeout_secs": 60})).await;
    let id = job["id"].as_str().unwrap();
    let first = env.trigger(id, json!({})).await;
    let second = env.trigger(id, json!({})).await;

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("worker")
        .envs(env.process_env())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start a worker process");
    target.wait_count(1, T).await;
    // The cap is held by the hanging dispatch: the second run waits parked.
    let deadline = tokio::time::Instant::now() + T;
    while env.zcard_all(|k| &k.parked).await != 1 {
        assert!(tokio::time::Instant::now() < deadline, "second run never parked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.start_kill().expect("SIGKILL");
    child.wait().await.unwrap();
    assert_eq!(
        active_slots(&env).await.get(&format!("j:{id}")).map(String::as_str),
        Some("1"),
        "the dead worker's slot"
    );

    env.spawn_scheduler();
    env.spawn_worker();
    for r in [&first, &second] {
        env.wait_status(r["id"].as_str().unwrap(), "completed", T).await;
    }
    assert_eq!(target.count(), 3, "the first run is redelivered once, the second runs once");
    assert!(active_slots(&env).await.is_empty(), "no slot leaked: {:?}", active_slots(&env).await);
    assert_eq!(env.zcard_all(|k| &k.parked).await, 0);
    assert_eq!(env.zcard_all(|k| &k.leases).await, 0);
}

#[tokio::test]
async fn cancelling_a_parked_run_frees_nothing_and_dispatches_nothing() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::slow(Duration::from_millis(1500))]);
    let job = env.job(&target.url, json!({"max_concurrency": 1})).await;
    let id = job["id"].as_str().unwrap();
    let first = env.trigger(id, json!({})).await;
    env.spawn_worker();
    target.wait_count(1, T).await;
    let parked = env.trigger(id, json!({})).await;
    let pid = parked["id"].as_str().unwrap();
    let deadline = tokio::time::Instant::now() + T;
    while env.zcard_all(|k| &k.parked).await != 1 {
        assert!(tokio::time::Instant::now() < deadline, "the run was never parked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (s, c) = env.post(&format!("/v1/runs/{pid}/cancel"), json!({})).await;
    assert_eq!((s, c["status"].as_str()), (200, Some("cancelled")), "{c}");
    assert_eq!(env.zcard_all(|k| &k.parked).await, 0, "taken out of `parked`");
    let third = env.trigger(id, json!({})).await;

    env.wait_status(first["id"].as_str().unwrap(), "completed", T).await;
    env.wait_status(third["id"].as_str().unwrap(), "completed", T).await;
    assert_eq!(env.run(pid).await["status"], "cancelled");
    let dispatched: Vec<String> = target.requests().iter().map(|r| r.body["run_id"].as_str().unwrap().into()).collect();
    assert_eq!(dispatched, [first["id"].as_str().unwrap(), third["id"].as_str().unwrap()]);
    assert!(active_slots(&env).await.is_empty(), "{:?}", active_slots(&env).await);
}

#[tokio::test]
async fn the_worker_dispatches_higher_priority_first_then_older() {
    let env = TestEnv::start_with(|c| c.worker_concurrency = 1).await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    let id = job["id"].as_str().unwrap();
    let mut runs = vec![];
    for p in [0, 5, -3, 10, 5] {
        runs.push(env.trigger(id, json!({"priority": p})).await["id"].as_str().unwrap().to_string());
    }
    env.spawn_worker();
    for rid in &runs {
        env.wait_status(rid, "completed", T).await;
    }
    let order: Vec<String> = target.requests().iter().map(|r| r.body["run_id"].as_str().unwrap().into()).collect();
    let want = [&runs[3], &runs[1], &runs[4], &runs[0], &runs[2]];
    assert_eq!(order.iter().collect::<Vec<_>>(), want, "10, 5 (older), 5, 0, -3");
}

/// A dequeue that stops at its scan limit (eight entries per one asked for,
/// here all parked behind a cap) while entries remain in `ready` leaves a
/// wake-up token: a worker waits for a token as soon as a dequeue returns
/// fewer entries than it asked for, and must not wait out its idle second
/// with runnable entries queued behind the parked ones.
#[tokio::test]
async fn a_dequeue_stopped_by_its_scan_limit_leaves_a_wake_up() {
    use switchyard_shared::queue::Entry;
    let env = TestEnv::start().await;
    let q = &env.queue;
    let now = chrono::Utc::now();
    let now_ms = now.timestamp_millis();
    let lease = Duration::from_secs(30);
    q.set_limits("p", "job_capped", Some("1|0|0|0|0")).await.unwrap();
    q.set_limits("p", "job_free", Some("0|0|0|0|0")).await.unwrap();
    let capped: Vec<Entry> = (0..20)
        .map(|i| {
            Entry::new(
                &format!("run_c{i}").into(),
                &"job_capped".into(),
                "p",
                0,
                now - chrono::Duration::seconds(100 - i),
                None,
            )
        })
        .collect();
    let free = Entry::new(&"run_free".into(), &"job_free".into(), "p", 0, now, None);
    let all: Vec<(&Entry, i64)> = capped.iter().chain([&free]).map(|e| (e, 0)).collect();
    assert_eq!(q.enqueue_many(&all, now_ms).await.unwrap(), 21);
    take_tokens(q).await;

    let first = q.dequeue(1, lease, now_ms).await.unwrap();
    assert_eq!(first, vec![capped[0].clone()], "the oldest takes the job's one slot");
    assert_eq!(take_tokens(q).await, 0, "a full batch needs no wake-up");

    // Eight capped entries parked, none taken, twelve entries left behind.
    assert!(q.dequeue(1, lease, now_ms).await.unwrap().is_empty());
    assert_eq!(take_tokens(q).await, 1, "stopped at the scan limit with entries left");
    assert!(q.dequeue(1, lease, now_ms).await.unwrap().is_empty());
    assert_eq!(take_tokens(q).await, 1);
    assert_eq!(q.dequeue(1, lease, now_ms).await.unwrap(), vec![free.clone()], "the runnable entry behind them");
    assert_eq!(take_tokens(q).await, 0);

    // An empty `ready` leaves none.
    assert!(q.dequeue(1, lease, now_ms).await.unwrap().is_empty());
    assert_eq!(take_tokens(q).await, 0, "nothing left to wake anyone for");
}

/// The wake-up tokens waiting in the `signal` list of project "p"'s
/// partition, removed.
async fn take_tokens(q: &switchyard_shared::queue::Queue) -> i64 {
    let signal = &q.partitions()[q.partition_of_project("p")].signal;
    let mut c = q.conn().await.unwrap();
    let n: i64 = redis::cmd("LLEN").arg(signal).query_async(&mut c).await.unwrap();
    let _: () = redis::cmd("DEL").arg(signal).query_async(&mut c).await.unwrap();
    n
}
