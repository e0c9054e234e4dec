//! Fair queueing (`fairness: round_robin`): a job's concurrency keys served
//! in turn, so one key's backlog does not hold back another key's run;
//! against an oldest-first job that does. The tags it keeps in Redis go
//! with the runs, including after a cancel and a Redis loss, and the key
//! ends with the reconciler's sweep: a job's clock is all that stays.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::target::{Reply, Span, Target};

const T: Duration = Duration::from_secs(30);

/// Fields left in the `fair` hashes of every partition.
async fn fair_fields(env: &TestEnv) -> Vec<String> {
    let mut c = env.queue.conn().await.unwrap();
    let mut out = Vec::new();
    for k in env.queue.partitions() {
        let keys: Vec<String> = redis::cmd("HKEYS").arg(&k.fair).query_async(&mut c).await.unwrap();
        out.extend(keys);
    }
    out.sort();
    out
}

/// Once every run ended: no tag or count is left, and after a reconciler's
/// sweep no key end either; what stays is each job's clock.
async fn only_clocks_left(env: &TestEnv, jobs: &[&str]) {
    let left = fair_fields(env).await;
    assert!(
        left.iter().all(|f| f.starts_with("v:") || f.starts_with("f:")),
        "no tag or count outlives the runs: {left:?}"
    );
    let report = env.scheduler().reconciler().sweep(chrono::Utc::now()).await.unwrap();
    assert!(report.fair_ends_dropped > 0, "the key ends were left for the sweep");
    let mut clocks: Vec<String> = jobs.iter().map(|j| format!("v:{j}")).collect();
    clocks.sort();
    assert_eq!(fair_fields(env).await, clocks);
}

/// Triggers `n` runs of `key` at once (one bulk call), then returns their ids.
async fn bulk(env: &TestEnv, job: &str, tag: &str, key: &str, n: usize) -> Vec<String> {
    let items: Vec<Value> =
        (0..n).map(|i| json!({"concurrency_key": key, "payload": {"job": tag, "k": key, "i": i}})).collect();
    let (s, v) = env.post(&format!("/v1/jobs/{job}/trigger/bulk"), json!({"items": items})).await;
    assert_eq!(s, 200, "{v}");
    v["results"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().expect("created").to_string()).collect()
}

/// The keys of `tag`'s dispatches, in the order they started.
fn order(spans: &[Span], tag: &str) -> Vec<String> {
    let mut of: Vec<&Span> = spans.iter().filter(|s| s.body["payload"]["job"] == tag).collect();
    of.sort_by_key(|s| s.start);
    of.iter().map(|s| s.body["payload"]["k"].as_str().unwrap().to_string()).collect()
}

fn first_of(keys: &[String], key: &str) -> usize {
    keys.iter().position(|k| k == key).unwrap_or_else(|| panic!("no {key} in {keys:?}"))
}

#[tokio::test]
async fn round_robin_serves_a_waiting_key_before_another_keys_backlog() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::slow(Duration::from_millis(40)));
    let fair = env.job(&target.url, json!({"max_concurrency": 1, "fairness": "round_robin"})).await;
    assert_eq!(fair["fairness"], "round_robin");
    let fifo = env.job(&target.url, json!({"max_concurrency": 1})).await;
    assert_eq!(fifo["fairness"], "oldest_first", "the default is said");
    env.spawn_worker();

    let mut runs = Vec::new();
    for (job, tag) in [(&fair, "fair"), (&fifo, "fifo")] {
        let id = job["id"].as_str().unwrap();
        // Key a's backlog first: one run takes the job's slot, the rest wait
        // parked behind the cap; then one run each of keys b and c.
        runs.extend(bulk(&env, id, tag, "a", 12).await);
        runs.extend(bulk(&env, id, tag, "b", 2).await);
        runs.extend(bulk(&env, id, tag, "c", 1).await);
    }
    for r in &runs {
        env.wait_status(r, "completed", T).await;
    }
    let spans = target.spans();
    assert_eq!(spans.len(), runs.len(), "each run dispatched once");

    let fair_order = order(&spans, "fair");
    assert!(first_of(&fair_order, "b") <= 3, "b waits at most a turn of each key: {fair_order:?}");
    assert!(first_of(&fair_order, "c") <= 3, "c too: {fair_order:?}");
    let second_b = fair_order.iter().enumerate().filter(|(_, k)| *k == "b").nth(1).unwrap().0;
    assert!(second_b <= 6, "b's second run comes a turn later, not after a's backlog: {fair_order:?}");
    let fifo_order = order(&spans, "fifo");
    assert!(
        first_of(&fifo_order, "b") >= 10,
        "oldest first, b waits behind a's backlog (the test can tell the two apart): {fifo_order:?}"
    );
    only_clocks_left(&env, &[fair["id"].as_str().unwrap()]).await;
}

#[tokio::test]
async fn a_round_robin_backlog_survives_a_cancel_and_redis_loss() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"max_concurrency": 1, "fairness": "round_robin"})).await;
    let id = job["id"].as_str().unwrap();
    let a = bulk(&env, id, "j", "a", 10).await;
    let b = bulk(&env, id, "j", "b", 3).await;
    assert!(!fair_fields(&env).await.is_empty(), "the waiting runs hold tags");

    // A waiting run cancelled: its tag goes with it.
    let (s, v) = env.post(&format!("/v1/runs/{}/cancel", a[4]), json!({})).await;
    assert_eq!((s, v["status"].as_str()), (200, Some("cancelled")), "{v}");

    // Redis loses everything; the reconciler rebuilds it, tags included.
    env.wipe_redis().await;
    env.spawn_scheduler();
    env.spawn_worker();
    for r in a.iter().chain(&b).filter(|r| **r != a[4]) {
        env.wait_status(r, "completed", T).await;
    }
    let keys = order(&target.spans(), "j");
    assert_eq!(keys.len(), 12, "each run once, the cancelled one never: {keys:?}");
    let last_b = keys.iter().rposition(|k| k == "b").unwrap();
    assert!(last_b <= 6, "after the rebuild the keys still take turns: {keys:?}");
    assert_eq!(env.run(&a[4]).await["status"], "cancelled");
    only_clocks_left(&env, &[id]).await;
}

/// The job's field of the queue's `limits` hash.
async fn job_limits(env: &TestEnv, id: &str) -> String {
    let mut c = env.queue.conn().await.unwrap();
    let mut got = None;
    for k in env.queue.partitions() {
        let v: Option<String> = redis::cmd("HGET").arg(&k.limits).arg(id).query_async(&mut c).await.unwrap();
        got = got.or(v);
    }
    got.expect("the job's limits are in Redis")
}

#[tokio::test]
async fn fairness_is_validated_changed_and_pushed_to_the_queue() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/x", json!({})).await;
    let id = job["id"].as_str().unwrap();
    assert_eq!(job_limits(&env, id).await, "0|0|0|0|0");
    let (s, v) = env.patch(&format!("/v1/jobs/{id}"), json!({"fairness": "round_robin"})).await;
    assert_eq!((s, v["fairness"].as_str()), (200, Some("round_robin")), "{v}");
    assert_eq!(job_limits(&env, id).await, "0|0|0|0|2", "the flag reaches dequeue.lua");
    let p = assert_problem(400, env.patch(&format!("/v1/jobs/{id}"), json!({"fairness": "fair"})).await, 400);
    assert!(p["detail"].as_str().unwrap_or_default().contains("\"fair\""), "names the value: {p}");
    assert_eq!(env.get(&format!("/v1/jobs/{id}")).await.1["fairness"], "round_robin", "nothing changed");
    let (s, v) = env.patch(&format!("/v1/jobs/{id}"), json!({"fairness": "oldest_first"})).await;
    assert_eq!((s, v["fairness"].as_str()), (200, Some("oldest_first")), "{v}");
    let (_, got) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(got["fairness"], "oldest_first");
    // A bulk item's key is held to a trigger's rules, in its own result.
    let items = json!({"items": [{"concurrency_key": "k".repeat(300)}, {"concurrency_key": "tenant-1"}]});
    let (s, v) = env.post(&format!("/v1/jobs/{id}/trigger/bulk"), items).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["results"][0]["status"], "error", "{v}");
    assert!(v["results"][0]["error"].as_str().unwrap().contains("concurrency_key"), "{v}");
    let run = v["results"][1]["run_id"].as_str().expect("the other item runs");
    assert_eq!(env.run(run).await["concurrency_key"], "tenant-1");
}

/// A parked tag is written as `Entry::encode` writes a rank, to the unit:
/// odd ranks and the bands of high and low priority included.
#[tokio::test]
async fn a_tag_is_written_as_an_entrys_rank() {
    let env = TestEnv::start().await;
    let script = redis::Script::new(concat!(
        include_str!("../../lua/lib/fair.lua"),
        "local out = {} for i = 1, #ARGV do out[i] = fair_hex(tonumber(ARGV[i])) end return out"
    ));
    let job = switchyard_shared::ids::job_id();
    let run = switchyard_shared::ids::run_id();
    let at = chrono::DateTime::parse_from_rfc3339("2026-11-28T05:00:00.001Z").unwrap().to_utc();
    let mut ranks = Vec::new();
    let mut want = Vec::new();
    for priority in [-1000, -1, 0, 1, 1000] {
        for ms in [0, 1, 2, 3] {
            let e = switchyard_shared::queue::Entry::new(
                &run,
                &job,
                "p",
                priority,
                at + chrono::Duration::milliseconds(ms),
                None,
            );
            ranks.push(e.rank());
            want.push(e.encode().split('|').nth(2).unwrap().to_string());
        }
    }
    let mut c = env.queue.conn().await.unwrap();
    let mut call = script.prepare_invoke();
    for r in &ranks {
        call.arg(r);
    }
    let got: Vec<String> = call.invoke_async(&mut c).await.unwrap();
    assert_eq!(got, want);
}
