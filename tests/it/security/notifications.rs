//! Found by a penetration test: a step's stage notifications to URLs and a
//! wait_for_event step's event_notify_url notices went out unsigned, so a
//! receiver could not tell them from a forgery. Every delivery of the outbox
//! is now signed (docs/contract.md, "Signatures"); those without a secret of
//! their own (and a job's terminal webhook without a webhook_secret) with
//! the project's signing secret, which `secrets:read` reads from
//! `GET /v1/projects/{project_id}/signing-secret`.

use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::json;
use sha2::Sha256;

use crate::harness::TestEnv;
use crate::support::access::{key as api_key, with};
use crate::support::workflows::{job, step, trigger, wait_run, wait_status, workflow, T};
use crate::target::{Recorded, Target};

/// The project's signing secret, read as its admin would.
async fn signing_secret(env: &TestEnv, project: &str) -> String {
    let (s, v) = env.get(&format!("/v1/projects/{project}/signing-secret")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["project_id"], project);
    v["signing_secret"].as_str().unwrap().to_string()
}

/// Whether `sig` is what a receiver computes from the documented recipe:
/// `sha256=` and the hex HMAC-SHA256 of `<ts>.<raw body>` under `key`.
/// Independent of the server's signing code on purpose.
fn verifies(key: &str, ts: &str, body: &str, sig: &str) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(format!("{ts}.{body}").as_bytes());
    let Some(hex_sig) = sig.strip_prefix("sha256=") else { return false };
    let Ok(bytes) = hex::decode(hex_sig) else { return false };
    mac.verify_slice(&bytes).is_ok()
}

/// The request carries both headers, fresh, and verifies under `key`; the
/// same request with its body changed, or checked with another key, does not.
fn assert_signed(r: &Recorded, key: &str, other_key: &str) {
    let what = r.body["event_type"].as_str().or(r.body["outcome"].as_str()).unwrap_or("?").to_string();
    let ts = r.header("x-svc-timestamp").unwrap_or_else(|| panic!("{what}: no X-Svc-Timestamp"));
    let sig = r.header("x-svc-signature").unwrap_or_else(|| panic!("{what}: no X-Svc-Signature"));
    let age = chrono::Utc::now().timestamp() - ts.parse::<i64>().unwrap();
    assert!((0..300).contains(&age), "{what}: a timestamp of now, not {age} s ago");
    assert!(verifies(key, ts, &r.raw, sig), "{what}: verifies with the project's signing secret");
    let tampered = r.raw.replacen("\"workflow_run_id\":\"", "\"workflow_run_id\":\"x", 1);
    assert_ne!(tampered, r.raw, "{what}: the body names its workflow run");
    assert!(!verifies(key, ts, &tampered, sig), "{what}: a changed body does not verify");
    let later = (ts.parse::<i64>().unwrap() + 1).to_string();
    assert!(!verifies(key, &later, &r.raw, sig), "{what}: the timestamp is signed too");
    assert!(!verifies(other_key, ts, &r.raw, sig), "{what}: another project's key does not verify");
}

#[tokio::test]
async fn stage_and_event_trigger_notifications_are_signed_with_the_projects_key() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let stages = Target::start().await;
    let notices = Target::start().await;
    let project = env.project().await;
    let other = env.project().await;
    let key = signing_secret(&env, &project).await;
    let other_key = signing_secret(&env, &other).await;
    assert!(key.starts_with("pss_") && key.len() == 68, "{key}");
    assert_ne!(key, other_key, "one key per project");

    let j = job(&env, &project, &target.url, json!({})).await;
    let steps = json!([
        {"step_ref": "a", "job_id": j, "stage_notifications": {"urls": [stages.url], "stages": ["completed"]}},
        {"step_ref": "paid", "event_key": "order.paid", "event_timeout_secs": 600, "event_notify_url": notices.url,
         "depends_on": ["a"]},
    ]);
    let wf = workflow(&env, &project, json!({"steps": steps})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let id = trigger(&env, &wf, json!({})).await["id"].as_str().unwrap().to_string();
    wait_run(&env, &id, |r| step(r, "paid")["status"] == "waiting").await;
    let event = json!({"project_id": project, "event_key": "order.paid", "payload": {"amount": 5}});
    let (s, v) = env.post("/v1/events/dispatch", event).await;
    assert_eq!((s, &v["resumed_steps"]), (200, &json!(1)), "{v}");
    wait_status(&env, &id, "completed").await;

    // A step's stage change to a URL (delivery kind step_stage).
    let got = stages.wait_count(1, T).await;
    assert_eq!(got[0].body["event_type"], "workflow_step.completed");
    assert_signed(&got[0], &key, &other_key);
    // The event-trigger notice of a step its event resumed (store::events).
    let got = notices.wait_count(1, T).await;
    assert_eq!(got[0].body["outcome"], "received");
    assert_signed(&got[0], &key, &other_key);

    // The notice of a wait that timed out (the engine's event_notices).
    let slow = workflow(
        &env,
        &project,
        json!({"steps": [{"step_ref": "w", "event_key": "never", "event_timeout_secs": 1, "event_notify_url": notices.url}]}),
    )
    .await;
    let run = trigger(&env, &slow, json!({})).await;
    wait_status(&env, run["id"].as_str().unwrap(), "failed").await;
    let got = notices.wait_count(2, T).await;
    let timed_out = got.iter().find(|r| r.body["outcome"] == "timed_out").expect("the timed_out notice");
    assert_signed(timed_out, &key, &other_key);
}

/// A job without a webhook_secret: its terminal webhook is signed with the
/// project's signing secret (one with a secret keeps its own: `execution`).
#[tokio::test]
async fn a_terminal_webhook_without_a_job_secret_is_signed_with_the_projects_key() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let hooks = Target::start().await;
    let project = env.project().await;
    let key = signing_secret(&env, &project).await;
    let other_key = signing_secret(&env, &env.project().await).await;
    let j = env.job_in(&project, &target.url, json!({"webhook_url": hooks.url})).await;
    let run = env.trigger(j["id"].as_str().unwrap(), json!({"payload": {}})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let got = hooks.wait_count(1, T).await;
    assert_eq!(got[0].body["run_id"], run["id"]);
    let (ts, sig) = (got[0].header("x-svc-timestamp").unwrap(), got[0].header("x-svc-signature").unwrap());
    assert!(verifies(&key, ts, &got[0].raw, sig));
    assert!(!verifies(&other_key, ts, &got[0].raw, sig));
    assert!(!verifies(&key, ts, &got[0].raw.replacen('{', "{ ", 1), sig));
}

/// The key is a secret: `secrets:read` of the project reads it; a viewer's
/// scopes, or a key of another project, do not.
#[tokio::test]
async fn the_signing_secret_is_read_with_secrets_read_in_its_own_project_only() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let other = env.project().await;
    let key = signing_secret(&env, &project).await;
    let path = format!("/v1/projects/{project}/signing-secret");
    let (reader, _) = api_key(&env, &project, &["secrets:read"]).await;
    let got = with(&env, &reader, Method::GET, &path, None).await;
    assert_eq!((got.0, got.1["signing_secret"].as_str()), (200, Some(key.as_str())), "{}", got.1);
    let (viewer, _) = api_key(&env, &project, &["jobs:read", "runs:read", "workflows:read", "stats:read"]).await;
    assert_eq!(with(&env, &viewer, Method::GET, &path, None).await.0, 403);
    let (stranger, _) = api_key(&env, &other, &["secrets:read"]).await;
    let got = with(&env, &stranger, Method::GET, &path, None).await;
    assert_eq!(got.0, 404, "another project's key sees no such project: {}", got.1);
    assert!(!got.1.to_string().contains(&key));
    // A project's own view never carries it.
    let (_, p) = env.get(&format!("/v1/projects/{project}")).await;
    assert!(!p.to_string().contains(&key), "{p}");
}
