//! The status changes the api makes go through `store::transitions`: every
//! way of cancelling counts the status each run really left, a deleted
//! job's runs are cancelled like any other (no retry left pending), and a
//! status the build does not know is an error, not a guess.

use serde_json::{json, Value};
use switchyard_shared::domain::RunStatus;
use switchyard_shared::store;

use crate::harness::TestEnv;
use crate::support::sdk::{metric_sum, scrape};

/// A target nothing dispatches to in tests that run no worker.
const NOWHERE: &str = "http://127.0.0.1:9/hook";

async fn put_status(env: &TestEnv, run_id: &str, status: &str) {
    sqlx::query(
        "UPDATE job_runs SET status = $2,
            next_retry_at = CASE WHEN $2 = 'retrying' THEN now() + interval '1 hour' END,
            attempt = CASE WHEN $2 = 'queued' THEN attempt ELSE 1 END
         WHERE id = $1",
    )
    .bind(run_id)
    .bind(status)
    .execute(&env.pool)
    .await
    .unwrap();
}

fn cancelled_from(metrics: &str, from: &str) -> f64 {
    metric_sum(metrics, "svc_run_transitions_total", &[&format!("from_status=\"{from}\""), "to_status=\"cancelled\""])
}

#[tokio::test]
async fn every_api_cancel_counts_the_status_the_run_left() {
    let env = TestEnv::start().await;
    let job = env.job(NOWHERE, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let project = job["project_id"].as_str().unwrap();
    let envr = &env;
    let trigger = |body: Value| async move { envr.trigger(job_id, body).await["id"].as_str().unwrap().to_string() };
    // Single cancel: a running parent with a retrying child.
    let parent = trigger(json!({})).await;
    let child = trigger(json!({"parent_run_id": parent})).await;
    put_status(&env, &parent, "running").await;
    put_status(&env, &child, "retrying").await;
    // Bulk cancel: a delayed (pending) run.
    let delayed = trigger(json!({"delay_secs": 3600})).await;
    // Cancel-all: two queued runs.
    let queued = [trigger(json!({})).await, trigger(json!({})).await];
    let before = scrape(&env).await;

    let (s, v) = env.post(&format!("/v1/runs/{parent}/cancel"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = env.post("/v1/runs/bulk-cancel", json!({"run_ids": [delayed]})).await;
    assert_eq!((s, v["results"][0]["status"].as_str()), (200, Some("cancelled")), "{v}");
    let (s, v) = env.post("/v1/runs/bulk-cancel-all", json!({"project_id": project})).await;
    assert_eq!((s, v["cancelled"].as_i64()), (200, Some(2)), "{v}");
    for id in [&parent, &child, &delayed, &queued[0], &queued[1]] {
        assert_eq!(env.run(id).await["status"], "cancelled", "{id}");
    }

    let after = scrape(&env).await;
    for (from, n) in [("running", 1.0), ("retrying", 1.0), ("pending", 1.0), ("queued", 2.0)] {
        let grew = cancelled_from(&after, from) - cancelled_from(&before, from);
        assert!(grew >= n, "{from} -> cancelled counted {grew} times, want at least {n}");
    }
    assert_eq!(cancelled_from(&after, "none"), 0.0, "no cancel is counted from no status");
    // The history names the same statuses.
    for (id, want) in [(&parent, "running"), (&child, "retrying"), (&delayed, "pending"), (&queued[0], "queued")] {
        let from: String =
            sqlx::query_scalar("SELECT from_status FROM job_run_events WHERE run_id = $1 AND to_status = 'cancelled'")
                .bind(id)
                .fetch_one(&env.pool)
                .await
                .unwrap();
        assert_eq!(from, want, "{id}");
    }
}

#[tokio::test]
async fn deleting_a_job_cancels_its_runs_without_a_retry_left_pending() {
    let env = TestEnv::start().await;
    let job = env.job(NOWHERE, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let retrying = env.trigger(job_id, json!({})).await["id"].as_str().unwrap().to_string();
    let queued = env.trigger(job_id, json!({})).await["id"].as_str().unwrap().to_string();
    put_status(&env, &retrying, "retrying").await;
    let before = scrape(&env).await;

    let (s, v) = env.delete(&format!("/v1/jobs/{job_id}")).await;
    assert_eq!(s, 204, "{v}");
    for id in [&retrying, &queued] {
        let run = store::runs::get(&env.pool, &id.into()).await.unwrap().unwrap();
        assert_eq!((run.status, run.error.as_deref()), (RunStatus::Cancelled, Some("job deleted")), "{id}");
        assert_eq!(run.next_retry_at, None, "{id}: a cancelled run has no retry due");
        assert!(run.finished_at.is_some());
    }
    let after = scrape(&env).await;
    assert!(cancelled_from(&after, "retrying") - cancelled_from(&before, "retrying") >= 1.0);
    assert!(cancelled_from(&after, "queued") - cancelled_from(&before, "queued") >= 1.0);
    assert_eq!(cancelled_from(&after, "none"), 0.0);
    assert_eq!(env.zcard_all(|k| &k.ready).await, 0, "their queue entries went with them");
}

#[tokio::test]
async fn a_status_the_build_does_not_know_is_an_error_not_failed() {
    let env = TestEnv::start().await;
    let job = env.job(NOWHERE, json!({})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await["id"].as_str().unwrap().to_string();
    let known: RunStatus =
        sqlx::query_scalar("SELECT status FROM job_runs WHERE id = $1").bind(&run).fetch_one(&env.pool).await.unwrap();
    assert_eq!(known, RunStatus::Queued);

    // A newer build's status (the CHECK is this build's; a newer one would
    // have widened it).
    sqlx::query("ALTER TABLE job_runs DROP CONSTRAINT job_runs_status_check").execute(&env.pool).await.unwrap();
    sqlx::query("UPDATE job_runs SET status = 'hibernating' WHERE id = $1")
        .bind(&run)
        .execute(&env.pool)
        .await
        .unwrap();
    let err = store::runs::get(&env.pool, &run.as_str().into()).await.expect_err("an unknown status does not decode");
    assert!(matches!(err, sqlx::Error::ColumnDecode { .. }), "{err:?}");
    assert!(err.to_string().contains("hibernating"), "{err}");
    let (s, v) = env.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(s, 500, "not shown as some other status: {v}");
}
