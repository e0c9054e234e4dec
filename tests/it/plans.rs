//! The worker's statements must stay primary-key lookups whatever the
//! table held when their plan was made (see `db::worker_pool`): a plan made
//! on a new, empty job_runs once scanned every queued run to read one.

use chrono::Utc;
use serde_json::json;
use sqlx::PgPool;
use switchyard_shared::db;
use switchyard_shared::domain::RunStatus;
use switchyard_shared::store::{runs, Outcome};

use crate::harness::TestEnv;

/// Rows of job_runs read so far, by sequential and index scans. The worker
/// pool's one backend publishes its counts first.
async fn rows_read(env: &TestEnv, worker: &PgPool) -> i64 {
    sqlx::query("SELECT pg_stat_force_next_flush()").execute(worker).await.unwrap();
    sqlx::query_scalar(
        "SELECT sum(COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0))::int8
         FROM pg_stat_user_tables WHERE relid IN (SELECT relid FROM pg_partition_tree('job_runs'))",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap()
}

fn completed() -> Outcome {
    Outcome {
        status: RunStatus::Completed,
        result: Some(json!({"ok": true})),
        error: None,
        error_class: None,
        status_code: Some(200),
        endpoint_url: "http://127.0.0.1:9/".into(),
        next_retry_at: None,
        attempt_started_at: Utc::now(),
        trace: json!({}),
        webhook_url: None,
        job_id: "job_j".into(),
        project_id: "proj_p".into(),
        attempt: 1,
        workflow_step_run_id: None,
    }
}

#[tokio::test]
async fn worker_statements_planned_on_an_empty_table_read_only_the_runs_they_name() {
    let env = TestEnv::start().await;
    // One connection, so every call below reuses the plans made first.
    let worker = db::worker_pool(&env.config.database_url, 1).unwrap();
    for _ in 0..3 {
        runs::load_for_dispatch(&worker, vec!["run_none".into()]).await.unwrap();
        runs::finish_many(&worker, vec![("run_none".into(), 1, completed())]).await.unwrap();
        runs::mark_running_many(&worker, vec![("run_none".into(), 1, Utc::now())]).await.unwrap();
    }

    // Then the table fills with queued runs.
    sqlx::query(
        "INSERT INTO job_runs (id, project_id, job_id, job_version, job_version_id, status, triggered_by)
         SELECT 'run_' || lpad(g::text, 8, '0'), 'proj_p', 'job_j', 1, 'ver_v', 'queued', 'api'
         FROM generate_series(1, 5000) g",
    )
    .execute(&env.pool)
    .await
    .unwrap();

    let before = rows_read(&env, &worker).await;
    let loaded = runs::load_for_dispatch(&worker, vec!["run_00000007".into(), "run_00000042".into()]).await.unwrap();
    assert!(loaded.iter().all(|l| l.is_some()), "both runs are read");
    let marked = runs::mark_running_many(&worker, vec![("run_00000007".into(), 1, Utc::now())]).await.unwrap();
    assert_eq!(marked, [true]);
    let finished = runs::finish_many(
        &worker,
        vec![("run_00000007".into(), 1, completed()), ("run_00000042".into(), 1, completed())],
    )
    .await
    .unwrap();
    assert_eq!(finished, [true, true], "one from running, one from queued");
    let read = rows_read(&env, &worker).await - before;
    // Two runs, each read by three statements (and once more by the
    // update's own lookups): a scan of the queued runs reads thousands.
    assert!(read <= 40, "the worker's statements read {read} rows of job_runs to handle 2 runs");
}
