//! Notifications: subscriptions, the delivery outbox, its sender, retries
//! and the rules of each kind, and a sender that dies mid-delivery.

use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use switchyard_shared::store::deliveries;

use crate::harness::{assert_problem, TestEnv};
use crate::target::{Reply, Target};

const T: Duration = Duration::from_secs(20);

async fn subscribe(env: &TestEnv, project: &str, url: &str, types: Value) -> Value {
    let (s, v) = env
        .post(
            "/v1/webhooks/subscriptions",
            json!({"project_id": project, "webhook_url": url, "event_types": types, "secret": "sub-secret"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    v
}

async fn deliveries_of(env: &TestEnv, project: &str, query: &str) -> Vec<Value> {
    let (s, v) = env.get(&format!("/v1/webhook-deliveries?project_id={project}{query}")).await;
    assert_eq!(s, 200, "{v}");
    v["data"].as_array().unwrap().clone()
}

async fn wait_deliveries(env: &TestEnv, project: &str, query: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let d = deliveries_of(env, project, query).await;
        if pred(&d) {
            return d;
        }
        assert!(tokio::time::Instant::now() < deadline, "deliveries never got there: {d:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn signed_by(req: &crate::target::Recorded, secret: &str) -> bool {
    let (Some(ts), Some(sig)) = (req.header("x-svc-timestamp"), req.header("x-svc-signature")) else { return false };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{ts}.{}", req.raw).as_bytes());
    sig == format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[tokio::test]
async fn subscriptions_get_exactly_the_events_they_name_for_their_project_only() {
    let env = TestEnv::start().await;
    let jobs_target = Target::start().await;
    let listener = Target::start().await;
    let project = env.project().await;
    let other = env.project().await;
    let completed = subscribe(&env, &project, &format!("{}-completed", listener.url), json!(["run.completed"])).await;
    assert!(completed.get("secret").is_none(), "the secret is never returned: {completed}");
    assert_eq!(completed["has_secret"], true);
    subscribe(&env, &project, &format!("{}-failed", listener.url), json!(["run.failed", "workflow_run.completed"]))
        .await;
    subscribe(&env, &other, &format!("{}-other", listener.url), json!(["*"])).await;

    let ok = env.job_in(&project, &jobs_target.url, json!({"name": "ok"})).await;
    let run = env.trigger(ok["id"].as_str().unwrap(), json!({"payload": {"n": 1}})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;
    let got = listener.wait_count(1, T).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = if listener.count() > got.len() { listener.requests() } else { got };
    assert_eq!(
        got.len(),
        1,
        "only run.completed of this project: {:?}",
        got.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    let r = &got[0];
    assert!(r.path.ends_with("-completed"));
    assert_eq!(r.body["event_type"], "run.completed");
    assert_eq!(r.body["data"]["run_id"], run["id"]);
    assert!(signed_by(r, "sub-secret"), "signed with the subscription's secret");
    assert!(r.header("x-svc-delivery-id").is_some());

    let ds =
        wait_deliveries(&env, &project, "&kind=subscription", |d| d.iter().all(|x| x["status"] == "delivered")).await;
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0]["status"], "delivered");
    assert_eq!(ds[0]["attempts"], 1);

    // A workflow run's end is an event too.
    let wf = env
        .post(
            "/v1/workflows",
            json!({"project_id": project, "name": "wf", "steps": [{"step_ref": "a", "job_id": ok["id"]}]}),
        )
        .await
        .1;
    let (s, wr) = env.post(&format!("/v1/workflows/{}/trigger", wf["id"].as_str().unwrap()), json!({})).await;
    assert_eq!(s, 201, "{wr}");
    let got = listener.wait_count(3, T).await;
    let wfe = got.iter().find(|r| r.body["event_type"] == "workflow_run.completed").expect("workflow_run.completed");
    assert_eq!(wfe.body["data"]["workflow_run_id"], wr["id"]);
    assert_eq!(wfe.body["data"]["workflow_id"], wf["id"]);
    assert_eq!((&wfe.body["data"]["status"], &wfe.body["data"]["error"]), (&json!("completed"), &Value::Null));
    assert_eq!(wfe.body["project_id"], json!(project));
    assert!(wfe.body["occurred_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{}", wfe.body);
    assert!(wfe.path.ends_with("-failed"), "the subscription that names it");

    // Subscription management: change, list, delete, refuse what is wrong.
    let id = completed["id"].as_str().unwrap();
    let (s, v) = env.patch(&format!("/v1/webhooks/subscriptions/{id}"), json!({"active": false})).await;
    assert_eq!((s, &v["active"]), (200, &json!(false)), "{v}");
    let (_, page) = env.get(&format!("/v1/webhooks/subscriptions?project_id={project}")).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    assert!(!page.to_string().contains("sub-secret"));
    let bad = env
        .post(
            "/v1/webhooks/subscriptions",
            json!({"project_id": project, "webhook_url": "ftp://x", "event_types": ["run.exploded"], "secret": ""}),
        )
        .await;
    let p = assert_problem(422, bad, 422);
    let at: Vec<&str> = p["errors"].as_array().unwrap().iter().map(|e| e["location"].as_str().unwrap()).collect();
    assert_eq!(at, ["body.webhook_url", "body.event_types/0", "body.secret"]);
    let (key, _) = crate::support::access::key(&env, &other, &["*"]).await;
    let (s, _) = crate::support::access::with(
        &env,
        &key,
        reqwest::Method::GET,
        &format!("/v1/webhooks/subscriptions/{id}"),
        None,
    )
    .await;
    assert_eq!(s, 404, "another project's subscription");
    assert_eq!(env.delete(&format!("/v1/webhooks/subscriptions/{id}")).await.0, 204);
    assert_eq!(env.get(&format!("/v1/webhooks/subscriptions/{id}")).await.0, 404);
}

#[tokio::test]
async fn failed_deliveries_retry_on_schedule_and_by_hand_and_4xx_is_dead_at_once() {
    let env = TestEnv::start().await;
    let jobs_target = Target::start().await;
    let down = Target::start().await;
    down.set_default(Reply::status(503));
    let refusing = Target::start().await;
    refusing.set_default(Reply::status(410));
    let project = env.project().await;
    subscribe(&env, &project, &down.url, json!(["run.completed"])).await;
    subscribe(&env, &project, &refusing.url, json!(["*"])).await;
    let job = env.job_in(&project, &jobs_target.url, json!({})).await;
    env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let ds = wait_deliveries(&env, &project, "", |d| d.len() == 2 && d.iter().all(|x| x["attempts"] == 1)).await;
    let failed = ds.iter().find(|d| d["url"] == down.url.as_str()).unwrap();
    let dead = ds.iter().find(|d| d["url"] == refusing.url.as_str()).unwrap();
    assert_eq!((failed["status"].as_str(), failed["last_status_code"].as_i64()), (Some("failed"), Some(503)));
    assert_eq!(
        (dead["status"].as_str(), dead["last_status_code"].as_i64()),
        (Some("dead"), Some(410)),
        "a 4xx is dead at once"
    );
    assert_eq!(refusing.count(), 1, "and never tried again");

    // By hand: failed → pending now, attempts from zero; anything else is 409.
    let fid = failed["id"].as_str().unwrap();
    let before = prometheus_counter(&env).await;
    let (s, v) = env.post(&format!("/v1/webhook-deliveries/{fid}/retry"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!((v["status"].as_str(), v["attempts"].as_i64()), (Some("pending"), Some(0)));
    down.set_default(Reply::status(200));
    let ds = wait_deliveries(&env, &project, "&status=delivered", |d| d.len() == 1).await;
    assert_eq!(ds[0]["id"], fid);
    assert!(prometheus_counter(&env).await >= before + 1.0, "a retry by hand is counted");
    for id in [fid, dead["id"].as_str().unwrap()] {
        let p = assert_problem(409, env.post(&format!("/v1/webhook-deliveries/{id}/retry"), json!({})).await, 409);
        assert!(p["detail"].as_str().unwrap().contains("only a failed delivery"), "{p}");
    }
    assert_problem(404, env.post("/v1/webhook-deliveries/whd_nope/retry", json!({})).await, 404);
    assert_problem(422, env.get(&format!("/v1/webhook-deliveries?project_id={project}&status=lost")).await, 422);
}

/// The process's retry counter (shared by the tests of this process: only
/// a rise can be checked).
async fn prometheus_counter(_env: &TestEnv) -> f64 {
    let text = switchyard_shared::telemetry::render_metrics();
    text.lines()
        .find(|l| l.starts_with("svc_webhook_retry_attempts_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A sender that claims a delivery and dies before sending it leaves a
/// claim that lapses; the delivery then goes out, once, under its own id.
/// A job-run webhook leaves no record once delivered.
#[tokio::test]
async fn a_delivery_claimed_by_a_dead_sender_still_arrives_and_job_run_webhooks_leave_no_record() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let hook = format!("{}-done", target.url);
    let job = env.job_in(&project, &target.url, json!({"webhook_url": hook})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    env.spawn_worker();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;
    // The outcome's statement wrote the delivery; no sender runs yet.
    let ds = deliveries_of(&env, &project, "&kind=job_run").await;
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!((ds[0]["status"].as_str(), ds[0]["event_type"].as_str()), (Some("pending"), Some("run.completed")));
    let id = ds[0]["id"].as_str().unwrap().to_string();

    // A sender claims it for a second and dies (kill -9: nothing recorded).
    let claimed = deliveries::claim_due(&env.pool, 10, Duration::from_secs(1)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(deliveries::claim_due(&env.pool, 10, Duration::from_secs(1)).await.unwrap().is_empty(), "held");
    assert_eq!(deliveries::next_due(&env.pool).await.unwrap(), None, "a held delivery is not waited for");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let due = deliveries::next_due(&env.pool).await.unwrap().expect("the lapsed claim is due");
    assert!(due <= chrono::Utc::now(), "{due}");
    env.spawn_scheduler();
    let reqs = target.wait_count(2, T).await;
    let hooks: Vec<_> = reqs.iter().filter(|r| r.path.ends_with("-done")).collect();
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0].header("x-svc-delivery-id"), Some(id.as_str()));
    assert_eq!(hooks[0].body["run_id"], run["id"]);
    // Delivered: no record is kept of a job-run webhook.
    wait_deliveries(&env, &project, "&kind=job_run", |d| d.is_empty()).await;
}

#[tokio::test]
async fn with_private_targets_denied_a_subscription_to_loopback_is_refused() {
    let env = TestEnv::start_with(|c| c.target_deny_private = true).await;
    let project = env.project().await;
    let got = env
        .post(
            "/v1/webhooks/subscriptions",
            json!({"project_id": project, "webhook_url": "http://127.0.0.1:9/hook", "event_types": ["*"], "secret": "s"}),
        )
        .await;
    let p = assert_problem(422, got, 422);
    assert_eq!(p["errors"][0]["location"], "body.webhook_url", "{p}");
    let (_, page) = env.get(&format!("/v1/webhooks/subscriptions?project_id={project}")).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 0, "nothing was created");
}

/// A job-run webhook refused with a 4xx is not tried again and leaves no
/// record, as one that ran out of attempts.
#[tokio::test]
async fn a_refused_job_run_webhook_is_dropped_without_a_record() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let hooks = Target::start().await;
    hooks.set_default(Reply::status(410));
    let project = env.project().await;
    let job = env.job_in(&project, &target.url, json!({"webhook_url": hooks.url})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;
    hooks.wait_count(1, T).await;
    wait_deliveries(&env, &project, "&kind=job_run", |d| d.is_empty()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(hooks.count(), 1, "a 4xx is not retried");
}

/// Every way a run ends writes the same two notifications in the
/// transaction that ends it: its job's terminal webhook and its event to
/// the subscriptions that name it, each saying what the run's row says,
/// with the time as `YYYY-MM-DDTHH:MM:SS.mmmZ` (an outcome of the worker,
/// a cancel, the scheduler's expiry, the worker's expiry at claim).
#[tokio::test]
async fn every_way_a_run_ends_notifies_alike() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let sub = subscribe(&env, &project, "http://127.0.0.1:9/sub", json!(["*"])).await;
    let hook = "http://127.0.0.1:9/hook";
    let expiring =
        env.job_in(&project, &target.url, json!({"name": "expiring", "webhook_url": hook, "run_ttl_secs": 1})).await;
    let expiring = expiring["id"].as_str().unwrap();
    let plain = env.job_in(&project, &target.url, json!({"name": "plain", "webhook_url": hook})).await;
    let now = chrono::Utc::now();

    let stale = env.trigger(expiring, json!({})).await["id"].as_str().unwrap().to_string();
    let delayed = env.trigger(expiring, json!({"delay_secs": 5})).await["id"].as_str().unwrap().to_string();
    let later = env.trigger(expiring, json!({"delay_secs": 3600})).await["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let stale_ids = [stale.as_str().into()];
    let expired = switchyard_shared::store::runs::expire_unstarted(&env.pool, &stale_ids);
    assert_eq!(expired.await.unwrap(), 1);
    assert_eq!(env.scheduler().expire_once(now + chrono::Duration::seconds(10)).await.unwrap(), 1);
    assert_eq!(env.post(&format!("/v1/runs/{later}/cancel"), json!({})).await.0, 200);
    let done = env.trigger(plain["id"].as_str().unwrap(), json!({})).await["id"].as_str().unwrap().to_string();
    env.spawn_worker();
    env.wait_status(&done, "completed", T).await;

    for (id, status) in [(&stale, "expired"), (&delayed, "expired"), (&later, "cancelled"), (&done, "completed")] {
        let run = env.run(id).await;
        assert_eq!(run["status"], status);
        let rows: Vec<(String, String, Value, i32, String, Option<String>)> = sqlx::query_as(
            "SELECT kind, event_type, payload, max_attempts, url, subscription_id FROM webhook_deliveries
              WHERE run_id = $1 ORDER BY kind",
        )
        .bind(id)
        .fetch_all(&env.pool)
        .await
        .unwrap();
        assert_eq!(rows.len(), 2, "{status}: {rows:#?}");
        let event = format!("run.{status}");
        let (kind, event_type, mut payload, attempts, url, sub_id) = rows[0].clone();
        assert_eq!(
            (kind.as_str(), event_type.as_str(), attempts, url.as_str(), sub_id),
            ("job_run", &*event, 3, hook, None)
        );
        let at = payload.as_object_mut().unwrap().remove("timestamp").unwrap();
        assert!(is_millis_utc(&at), "{at}");
        let data = json!({
            "run_id": id, "job_id": run["job_id"], "status": status, "attempt": run["attempt"],
            "result": run["result"], "error": run["error"],
        });
        let mut flat = data.clone();
        flat["project_id"] = json!(project);
        assert_eq!(payload, flat, "{status}");

        let (kind, event_type, mut payload, attempts, url, sub_id) = rows[1].clone();
        assert_eq!(
            (kind.as_str(), event_type.as_str(), attempts, url.as_str(), sub_id.as_deref()),
            ("subscription", &*event, 5, "http://127.0.0.1:9/sub", sub["id"].as_str())
        );
        let at = payload.as_object_mut().unwrap().remove("occurred_at").unwrap();
        assert!(is_millis_utc(&at), "{at}");
        assert_eq!(payload, json!({"event_type": event, "project_id": project, "data": data}), "{status}");
    }
}

/// `2024-05-01T09:30:00.250Z`, as every payload writes a time.
fn is_millis_utc(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() == 24 && s.ends_with('Z') && &s[19..20] == "." && chrono::DateTime::parse_from_rfc3339(s).is_ok()
    })
}
