//! Found by a penetration test: webhook, subscription and log-drain secrets
//! were stored in the clear, and a job's webhook_secret was copied into
//! every job version. They are now sealed with SECRETS_KEY like job secrets,
//! kept out of version rows, opened only by the sender that signs with them,
//! and never returned by the API.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use switchyard_scheduler::{DrainOptions, DrainSender};
use switchyard_shared::config::Secret;
use switchyard_shared::outbound::signing;
use switchyard_shared::store::run_records::{self, NewLogLine};

use crate::harness::{TestEnv, SECRETS_KEY};
use crate::target::{Recorded, Target};

const T: Duration = Duration::from_secs(20);
const JOB_SECRET: &str = "job-webhook-secret-plaintext-1";
const SUB_SECRET: &str = "subscription-secret-plaintext-2";
const DRAIN_SECRET: &str = "drain-secret-plaintext-3";

fn signed_with(r: &Recorded, secret: &str) -> bool {
    let Some(ts) = r.header("x-svc-timestamp").and_then(|t| t.parse::<i64>().ok()) else { return false };
    r.header("x-svc-signature") == Some(signing::signature(secret, ts, r.raw.as_bytes()).as_str())
}

async fn stored(env: &TestEnv, sql: &str, id: &str) -> String {
    sqlx::query_scalar::<_, String>(sql).bind(id).fetch_one(&env.pool).await.unwrap()
}

#[tokio::test]
async fn signing_secrets_are_sealed_out_of_versions_and_still_sign() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let target = Target::start().await;
    let job_hook = Target::start().await;
    let sub_hook = Target::start().await;
    let drain_hook = Target::start().await;

    let job =
        env.job_in(&project, &target.url, json!({"webhook_url": job_hook.url, "webhook_secret": JOB_SECRET})).await;
    let job_id = job["id"].as_str().unwrap();
    // A second version, the secret kept.
    let (s, v) = env.patch(&format!("/v1/jobs/{job_id}"), json!({"description": "v2"})).await;
    assert_eq!((s, &v["has_webhook_secret"]), (200, &json!(true)), "{v}");
    let (s, sub) = env
        .post(
            "/v1/webhooks/subscriptions",
            json!({"project_id": project, "webhook_url": sub_hook.url, "event_types": ["run.completed"],
                   "secret": SUB_SECRET}),
        )
        .await;
    assert_eq!(s, 200, "{sub}");
    let (s, drain) = env
        .post(
            "/v1/log-drains",
            json!({"project_id": project, "name": "d", "url": drain_hook.url, "secret": DRAIN_SECRET}),
        )
        .await;
    assert_eq!(s, 201, "{drain}");

    // At rest: sealed, and no version row holds the job's key in any form.
    let job_row = stored(&env, "SELECT spec::text FROM jobs WHERE id = $1", job_id).await;
    let sub_row =
        stored(&env, "SELECT secret FROM webhook_subscriptions WHERE id = $1", sub["id"].as_str().unwrap()).await;
    let drain_row = stored(&env, "SELECT secret FROM log_drains WHERE id = $1", drain["id"].as_str().unwrap()).await;
    for (what, row, plain) in
        [("job", &job_row, JOB_SECRET), ("subscription", &sub_row, SUB_SECRET), ("drain", &drain_row, DRAIN_SECRET)]
    {
        assert!(!row.contains(plain), "the {what} row holds the plaintext");
        assert!(row.contains("sealed:v1:"), "the {what} row is sealed: {row}");
    }
    let versions: Vec<String> =
        sqlx::query_scalar("SELECT spec::text FROM job_versions WHERE job_id = $1 ORDER BY version")
            .bind(job_id)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(versions.len(), 2);
    for v in &versions {
        assert!(!v.contains(JOB_SECRET) && !v.contains("sealed:v1:") && !v.contains("\"webhook_secret\""), "{v}");
        assert!(v.contains("\"has_webhook_secret\": true"), "the version keeps the flag: {v}");
    }

    // Never returned.
    for path in [
        format!("/v1/jobs/{job_id}"),
        format!("/v1/jobs/{job_id}/versions"),
        format!("/v1/webhooks/subscriptions/{}", sub["id"].as_str().unwrap()),
        format!("/v1/log-drains/{}", drain["id"].as_str().unwrap()),
    ] {
        let (s, v) = env.get(&path).await;
        assert_eq!(s, 200, "{path}: {v}");
        let text = v.to_string();
        for secret in [JOB_SECRET, SUB_SECRET, DRAIN_SECRET, "sealed:v1:"] {
            assert!(!text.contains(secret), "{path} returned {secret}: {text}");
        }
    }

    // Signed with the plaintext: the dispatch, the job's webhook, the
    // subscription's event.
    let run = env.trigger(job_id, json!({})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;
    let dispatch = target.wait_count(1, T).await;
    assert!(signed_with(&dispatch[0], JOB_SECRET), "the dispatch is signed with the job's webhook_secret");
    let hook = job_hook.wait_count(1, T).await;
    assert!(signed_with(&hook[0], JOB_SECRET), "the run's webhook is signed with the job's webhook_secret");
    let event = sub_hook.wait_count(1, T).await;
    assert!(signed_with(&event[0], SUB_SECRET), "the event is signed with the subscription's secret");

    // The drain's batch.
    let line = NewLogLine { level: "info".into(), message: "m".into(), fields: json!({}), logged_at: Utc::now() };
    run_records::append_logs(&env.pool, run["id"].as_str().unwrap(), 1, vec![line]).await.unwrap();
    let opts = DrainOptions {
        interval: Duration::from_millis(50),
        secrets_key: Some(Secret::new(SECRETS_KEY)),
        ..DrainOptions::default()
    };
    let sender = DrainSender::new(env.pool.clone(), opts).unwrap();
    let deadline = tokio::time::Instant::now() + T;
    while drain_hook.count() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the drain never shipped");
        sender.pass_once().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(signed_with(&drain_hook.requests()[0], DRAIN_SECRET), "the batch is signed with the drain's secret");
}

/// A value stored before sealing still signs, and a sender without the key
/// fails rather than send unsigned.
#[tokio::test]
async fn plaintext_from_before_still_signs_and_a_sealed_key_needs_secrets_key() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let receiver = Target::start().await;
    let (s, drain) = env
        .post(
            "/v1/log-drains",
            json!({"project_id": project, "name": "d", "url": receiver.url, "secret": DRAIN_SECRET}),
        )
        .await;
    assert_eq!(s, 201, "{drain}");
    let job = env.job_in(&project, "http://127.0.0.1:9/unused", json!({})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let line = || NewLogLine { level: "info".into(), message: "m".into(), fields: json!({}), logged_at: Utc::now() };
    run_records::append_logs(&env.pool, run["id"].as_str().unwrap(), 1, vec![line()]).await.unwrap();

    // No key: the sealed secret is not opened, nothing goes out unsigned.
    // A pass ships only lines it can see as settled, so wait on the
    // drain's recorded error, not on one pass.
    let keyless = DrainSender::new(env.pool.clone(), DrainOptions::default()).unwrap();
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let report = keyless.pass_once().await.unwrap();
        assert_eq!(report.drains, 1);
        let (_, d) = env.get(&format!("/v1/log-drains/{}", drain["id"].as_str().unwrap())).await;
        if d["last_error"].as_str().unwrap_or("").contains("SECRETS_KEY") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the keyless sender never recorded its error: {d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(receiver.count(), 0, "nothing sent without the key");

    // A row written before sealing: used as it is.
    sqlx::query("UPDATE log_drains SET secret = 'legacy-plain-secret', next_attempt_at = now() WHERE id = $1")
        .bind(drain["id"].as_str().unwrap())
        .execute(&env.pool)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + T;
    while receiver.count() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the drain never shipped");
        keyless.pass_once().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(signed_with(&receiver.requests()[0], "legacy-plain-secret"));

    // And an api without the key refuses to store one (as job secrets).
    let keyless_api = TestEnv::start_with(|c| c.secrets_key = None).await;
    let p = keyless_api.project().await;
    let (s, v) = keyless_api
        .post(
            "/v1/webhooks/subscriptions",
            json!({"project_id": p, "webhook_url": receiver.url, "event_types": ["*"], "secret": SUB_SECRET}),
        )
        .await;
    assert_eq!(s, 503, "{v}");
    assert!(!v.to_string().contains(SUB_SECRET));
}
