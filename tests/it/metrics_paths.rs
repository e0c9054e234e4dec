//! The worker's metrics (docs/contract.md, "Metrics") move on the real dispatch
//! path, as a scrape of the api's /metrics shows in a `switchyard dev`-like
//! process (api and worker in one process, one recorder). Other tests share
//! that recorder, so the checks are on increases and on this test's own job.

use std::time::Duration;

use serde_json::json;

use crate::harness::TestEnv;
use crate::support::sdk::{metric_sum, scrape};
use crate::target::{Reply, Target};

const T: Duration = Duration::from_secs(15);

#[tokio::test]
async fn dispatch_dequeue_and_pool_metrics_move_after_a_run() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::slow(Duration::from_millis(1500))]);
    let job = env.job(&target.url, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let before = scrape(&env).await;
    let dequeues_before = metric_sum(&before, "svc_dequeue_duration_seconds_count", &[]);
    let label = format!("job_id=\"{job_id}\"");
    assert_eq!(metric_sum(&before, "svc_dispatch_duration_seconds_count", &[&label]), 0.0);

    let run = env.trigger(job_id, json!({})).await;
    env.spawn_worker();
    target.wait_count(1, T).await;
    // The dispatch is in flight (the target holds it 1.5 s).
    let during = scrape(&env).await;
    assert!(metric_sum(&during, "svc_worker_pool_active", &[]) >= 1.0, "active while dispatching");
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;

    let after = scrape(&env).await;
    let ours = ["svc_dispatch_duration_seconds_count", "svc_dispatch_duration_seconds_sum"]
        .map(|m| metric_sum(&after, m, &[&label, "outcome=\"completed\""]));
    assert_eq!(ours[0], 1.0, "one dispatch of this job recorded");
    assert!(ours[1] >= 1.4, "its duration includes the target's 1.5 s: {}", ours[1]);
    assert!(metric_sum(&after, "svc_dequeue_duration_seconds_count", &[]) > dequeues_before);
    for gauge in ["svc_worker_pool_active", "svc_worker_pool_queued"] {
        assert!(after.contains(&format!("# TYPE {gauge} gauge")), "{gauge} is exposed");
        assert!(after.lines().any(|l| l.starts_with(gauge) && l.rsplit(' ').next().unwrap().parse::<f64>().is_ok()));
    }
}
