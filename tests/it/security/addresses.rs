//! Found by a penetration test: with `TARGET_DENY_PRIVATE` on, a job's
//! endpoint_url, fallback_endpoint_url and webhook_url and a step's
//! notification URLs naming 127.0.0.1 were saved (only log drains and
//! subscriptions were judged at save), NAT64, 6to4, benchmarking and
//! multicast addresses passed both at save and at dispatch, and a refused
//! dispatch told the run what the target's name resolved to. One policy
//! (`outbound::target::refusal`, the IANA special-purpose registries) now
//! judges every URL the service sends to, at save for what the URL shows and
//! at connect for what a name resolves to, and the run only learns that the
//! address is not allowed.
//!
//! Nothing here connects beyond loopback: public literals are only saved.

use serde_json::{json, Value};
use switchyard_shared::outbound::target::is_non_public;

use crate::harness::{assert_problem, TestEnv};
use crate::support::workflows::{job, T};

/// Reached by nothing: jobs pointing here are saved, never triggered.
const PUBLIC: &str = "http://93.184.216.34/x";

async fn deny_private() -> (TestEnv, String) {
    let env = TestEnv::start_with(|c| c.target_deny_private = true).await;
    let project = env.project().await;
    (env, project)
}

/// The locations of a 422's errors.
fn locations(p: &Value) -> Vec<String> {
    p["errors"].as_array().unwrap().iter().map(|e| e["location"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn each_url_field_of_a_job_naming_loopback_is_a_422_at_save() {
    let (env, project) = deny_private().await;
    for field in ["endpoint_url", "fallback_endpoint_url", "webhook_url"] {
        let mut body = json!({"project_id": project, "name": "j", "endpoint_url": PUBLIC});
        body[field] = json!("http://127.0.0.1:9/x");
        let p = assert_problem(422, env.post("/v1/jobs", body).await, 422);
        assert_eq!(locations(&p), [format!("body.{field}")], "{p}");
        let message = p["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("loopback (127.0.0.0/8)"), "{message}");
    }
    let (_, page) = env.get(&format!("/v1/jobs?project_id={project}")).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 0, "nothing was created: {page}");

    // A change is a save too.
    let j = env.job_in(&project, PUBLIC, json!({})).await;
    let id = j["id"].as_str().unwrap();
    let p =
        assert_problem(422, env.patch(&format!("/v1/jobs/{id}"), json!({"webhook_url": "http://[::1]/h"})).await, 422);
    assert_eq!(locations(&p), ["body.webhook_url"], "{p}");
}

#[tokio::test]
async fn special_purpose_literals_are_refused_and_a_public_one_is_accepted() {
    let (env, project) = deny_private().await;
    for url in [
        "http://[64:ff9b::7f00:1]/",
        "http://[2002:7f00:1::]/",
        "http://[::ffff:127.0.0.1]/",
        "http://198.18.0.1/",
        "http://224.0.0.1/",
        "http://100.64.0.1/",
        "http://[fd00::1]/",
        "http://2130706433/",
        "http://localhost:9/",
        "http://api.localhost/",
    ] {
        let body = json!({"project_id": project, "name": "j", "endpoint_url": url});
        let p = assert_problem(422, env.post("/v1/jobs", body).await, 422);
        assert_eq!(locations(&p), ["body.endpoint_url"], "{url}: {p}");
        assert_eq!(p["errors"][0]["value"], url, "{p}");
    }
    let j = env.job_in(&project, "http://93.184.216.34/", json!({"webhook_url": "http://[2606:4700::1111]/h"})).await;
    assert_eq!(j["endpoint_url"], "http://93.184.216.34/");
}

#[tokio::test]
async fn a_steps_notification_urls_are_judged_at_save() {
    let (env, project) = deny_private().await;
    let j = job(&env, &project, PUBLIC, json!({})).await;
    let steps = json!([
        {"step_ref": "paid", "event_key": "order.paid", "event_timeout_secs": 600,
         "event_notify_url": "http://[64:ff9b::a9fe:a9fe]/n"},
        {"step_ref": "a", "job_id": j, "depends_on": ["paid"],
         "stage_notifications": {"urls": ["https://93.184.216.34/s", "http://10.0.0.1/s"]}},
    ]);
    let body = json!({"project_id": project, "name": "w", "steps": steps});
    let p = assert_problem(422, env.post("/v1/workflows", body).await, 422);
    assert_eq!(locations(&p), ["body.steps/0/event_notify_url", "body.steps/1/stage_notifications/urls/1"], "{p}");
}

/// A name is judged where it resolves: saved, it fails at dispatch, and the
/// run is told the address is not allowed, not what the name resolved to.
/// The name is this machine's, which resolves to loopback on the usual
/// hosts file; elsewhere there is nothing safe to test with.
#[tokio::test]
async fn a_refused_dispatch_does_not_say_what_the_name_resolved_to() {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_lowercase();
    let answers: Vec<_> = match tokio::net::lookup_host((host.as_str(), 0)).await {
        Ok(a) if !host.is_empty() && !host.ends_with("localhost") => a.map(|a| a.ip()).collect(),
        _ => vec![],
    };
    if answers.is_empty() || !answers.iter().all(|ip| is_non_public(*ip)) {
        eprintln!("skipped: the hostname {host:?} does not resolve to refused addresses only ({answers:?})");
        return;
    }
    let (env, project) = deny_private().await;
    let j = env.job_in(&project, &format!("http://{host}:9/x"), json!({"max_attempts": 3})).await;
    let run = env.trigger(j["id"].as_str().unwrap(), json!({})).await;
    env.spawn_worker();
    let done = env.wait_status(run["id"].as_str().unwrap(), "failed", T).await;
    let error = done["error"].as_str().unwrap();
    assert_eq!(error, "the target's address is not allowed (TARGET_DENY_PRIVATE)", "{done}");
    for ip in &answers {
        assert!(!done.to_string().contains(&ip.to_string()), "{ip} leaked: {done}");
    }
}
