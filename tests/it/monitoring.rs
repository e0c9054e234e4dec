//! What dashboards and autoscalers read: the scheduler's queue gauges, and
//! every metric the Grafana dashboard (deploy/grafana/dashboards) queries,
//! found with samples in a scrape of a system that ran a few runs, so the
//! dashboard cannot silently name a metric nobody exports.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::TestEnv;
use crate::support::sdk::{metric_sum, scrape};
use crate::target::Target;

const T: Duration = Duration::from_secs(20);
const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/dashboards/switchyard.json");

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
    let listed = |text: &str| text.lines().any(|l| l.starts_with("svc_queue_depth{") && l.contains(job_id));
    assert!(listed(&text), "still listed at 0");
    gauges.measure_once(chrono::Utc::now() + chrono::Duration::minutes(9)).await.unwrap();
    assert!(listed(&scrape(&env).await), "listed at 0 for ten minutes");
    gauges.measure_once(chrono::Utc::now() + chrono::Duration::minutes(11)).await.unwrap();
    let text = scrape(&env).await;
    assert!(!listed(&text), "then no longer exported: {text}");
    assert!(text.contains("# TYPE svc_queue_depth gauge"), "the family stays described");
}

/// Every PromQL text of the dashboard: panel targets and variable queries.
fn queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "definition", Value::String(s)) => out.push(s.clone()),
                    ("query", Value::String(s)) if s.contains('(') => out.push(s.clone()),
                    _ => queries(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| queries(x, out)),
        _ => {}
    }
}

/// The metric names in PromQL text: `svc_` identifiers.
fn metric_names(promql: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = promql.as_bytes();
    let mut i = 0;
    while let Some(at) = promql[i..].find("svc_") {
        let start = i + at;
        let boundary = start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = promql[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map(|n| start + n)
            .unwrap_or(promql.len());
        if boundary {
            names.insert(promql[start..end].to_string());
        }
        i = end;
    }
    names
}

#[test]
fn metric_names_are_read_from_promql() {
    let q = r#"histogram_quantile(0.9, sum by (le) (rate(svc_dispatch_duration_seconds_bucket{job_id=~"$job"}[5m]))) / my_svc_x"#;
    assert_eq!(metric_names(q), BTreeSet::from(["svc_dispatch_duration_seconds_bucket".to_string()]));
}

#[tokio::test]
async fn every_metric_the_dashboard_queries_is_exported() {
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap();
    let mut promql = Vec::new();
    queries(&dashboard, &mut promql);
    let wanted: BTreeSet<String> = promql.iter().flat_map(|q| metric_names(q)).collect();
    assert!(wanted.len() >= 10, "the dashboard's queries were found: {wanted:?}");

    // A system that did some work: a run counted by the scheduler's gauges
    // while queued, then dispatched by a worker.
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    env.scheduler().gauges().measure_once(chrono::Utc::now()).await.unwrap();
    env.spawn_worker();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;

    let text = scrape(&env).await;
    let sampled: BTreeSet<&str> =
        text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split(['{', ' ']).next()).collect();
    let missing: Vec<&String> = wanted.iter().filter(|n| !sampled.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "the dashboard queries metrics /metrics does not export: {missing:?}");
}

/// Beside the spec's `svc_*` families: HTTP requests by route template and
/// status with their latency, run transitions by job, the process's own
/// figures and the build.
#[tokio::test]
async fn requests_job_transitions_process_and_build_are_exported() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let trigger = |text: &str| {
        let series = r#"route="/v1/jobs/{job_id}/trigger",status="201""#;
        metric_sum(text, "svc_http_requests_total", &[r#"method="POST""#, series])
    };
    let before = scrape(&env).await;
    let run = env.trigger(job_id, json!({})).await;
    env.spawn_worker();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;
    let (s, _) = env.get("/v1/runs/run_0000000000000000000000000000000/nothing").await;
    assert_eq!(s, 404);
    // Refused by the body check, and by authentication before routing:
    // still counted under their routes.
    let (s, _) = env.post(&format!("/v1/jobs/{job_id}/trigger"), json!({"priorty": 1})).await;
    assert_eq!(s, 400);
    let refused = env
        .http
        .get(format!("{}/v1/webhooks/subscriptions", env.base))
        .bearer_auth("svc_not_a_key")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let text = scrape(&env).await;

    // Counted under the route's template, never its ids; a path no route
    // has, as `unmatched`.
    assert!(trigger(&text) >= trigger(&before) + 1.0, "{text}");
    assert!(!text.contains(&format!("route=\"/v1/jobs/{job_id}")), "a raw path is a label: {text}");
    assert!(metric_sum(&text, "svc_http_requests_total", &[r#"route="unmatched",status="404""#]) >= 1.0, "{text}");
    let bad_body = [r#"route="/v1/jobs/{job_id}/trigger",status="400""#];
    assert!(metric_sum(&text, "svc_http_requests_total", &bad_body) >= 1.0, "{text}");
    let no_key = [r#"route="/v1/webhooks/subscriptions",status="401""#];
    assert!(metric_sum(&text, "svc_http_requests_total", &no_key) >= 1.0, "{text}");
    let timed = r#"route="/v1/jobs/{job_id}/trigger""#;
    assert!(metric_sum(&text, "svc_http_request_duration_seconds_count", &[timed]) >= 1.0, "{text}");

    // This job's own run moved none → queued → running → completed.
    let job_label = format!("job_id=\"{job_id}\"");
    for (from, to) in [("none", "queued"), ("queued", "running"), ("running", "completed")] {
        let pair = [job_label.as_str(), &format!("from_status=\"{from}\""), &format!("to_status=\"{to}\"")];
        assert_eq!(metric_sum(&text, "svc_job_run_transitions_total", &pair), 1.0, "{from} -> {to}: {text}");
    }

    for name in ["process_resident_memory_bytes", "process_open_fds", "process_threads", "process_start_time_seconds"] {
        assert!(metric_sum(&text, name, &[]) > 0.0, "{name}: {text}");
    }
    assert!(text.lines().any(|l| l.starts_with("process_cpu_seconds_total ")), "{text}");
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert_eq!(metric_sum(&text, "svc_build_info", &[&version]), 1.0, "{text}");
}
