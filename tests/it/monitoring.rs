//! What dashboards and autoscalers read: the scheduler's queue gauges.

use std::time::Duration;

use serde_json::json;

use crate::harness::TestEnv;
use crate::sdk_client::{metric_sum, scrape};
use crate::target::Target;

const T: Duration = Duration::from_secs(20);

#[tokio::test]
async fn the_scheduler_exports_queue_depth_and_oldest_age_per_job() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let project = job["project_id"].as_str().unwrap();
    let runs = [env.trigger(job_id, json!({})).await, env.trigger(job_id, json!({})).await];
    let gauges = env.scheduler().gauges().clone();

    // Counted as if five seconds had passed: the age is at least that.
    let report = gauges.measure_once(chrono::Utc::now() + chrono::Duration::seconds(5)).await.unwrap();
    assert!(report.queued >= 2, "{report:?}");
    let text = scrape(&env).await;
    let labels = [format!("project_id=\"{project}\""), format!("job_id=\"{job_id}\"")];
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    assert_eq!(metric_sum(&text, "svc_queue_depth", &labels), 2.0, "{text}");
    let age = metric_sum(&text, "svc_queue_oldest_age_seconds", &labels);
    assert!((5.0..60.0).contains(&age), "oldest queued age {age}");
    assert!(text.contains("# TYPE svc_queue_depth gauge"));

    env.spawn_worker();
    for r in &runs {
        env.wait_status(r["id"].as_str().unwrap(), "completed", T).await;
    }
    gauges.measure_once(chrono::Utc::now()).await.unwrap();
    let text = scrape(&env).await;
    assert_eq!(metric_sum(&text, "svc_queue_depth", &labels), 0.0, "an emptied queue reads 0");
    assert_eq!(metric_sum(&text, "svc_queue_oldest_age_seconds", &labels), 0.0);
    assert!(text.lines().any(|l| l.starts_with("svc_queue_depth{") && l.contains(job_id)), "still listed at 0");
}
