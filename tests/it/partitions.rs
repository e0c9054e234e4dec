//! A queue of many partitions (QUEUE_PARTITIONS): a project's runs live in
//! its own partition, and idle workers are woken through the list all
//! partitions share. The whole suite also runs partitioned on a Redis
//! Cluster (scripts/test); these check the routing itself, on any Redis.

use std::time::Duration;

use serde_json::json;

use crate::harness::TestEnv;
use crate::target::Target;

const T: Duration = Duration::from_secs(15);

#[tokio::test]
async fn each_projects_runs_live_in_its_partition_and_are_dispatched() {
    let env = TestEnv::start_with(|c| c.queue_partitions = 4).await;
    let target = Target::start().await;
    let q = &env.queue;
    // Two projects of different partitions (a project's partition is a hash of its id).
    let first = env.project().await;
    let second = loop {
        let p = env.project().await;
        if q.partition_of_project(&p) != q.partition_of_project(&first) {
            break p;
        }
    };
    let mut runs = vec![];
    for project in [&first, &second] {
        let job = env.job_in(project, &target.url, json!({})).await;
        runs.push(env.trigger(job["id"].as_str().unwrap(), json!({})).await["id"].as_str().unwrap().to_string());
    }
    for (i, k) in q.partitions().iter().enumerate() {
        let here = [&first, &second].iter().filter(|p| q.partition_of_project(p) == i).count() as u64;
        assert_eq!(env.zcard(&k.ready).await, here, "partition {i} holds its projects' runs only");
    }
    let mut c = q.conn().await.unwrap();
    let tokens: i64 = redis::cmd("LLEN").arg(q.keys().workers_signal()).query_async(&mut c).await.unwrap();
    assert!(tokens >= 1, "idle workers of a partitioned queue are woken through the shared list");

    env.spawn_worker();
    for run in &runs {
        env.wait_status(run, "completed", T).await;
    }
    assert_eq!(env.zcard_all(|k| &k.leases).await, 0, "every lease released in its own partition");
}
