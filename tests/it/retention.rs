//! Retention: the scheduler's pruner deletes finished work older than its
//! project's retention_days, with what hangs off it, and nothing else.

use serde_json::json;

use crate::harness::TestEnv;
use crate::target::Target;

/// Copies row `src` of `table` under the id `id` with `changes` (a JSON
/// object of columns), as work made long ago would look.
async fn copy_row(env: &TestEnv, table: &str, src: &str, id: &str, changes: serde_json::Value) {
    let mut changes = changes;
    changes["id"] = json!(id);
    sqlx::query(&format!(
        "INSERT INTO {table} SELECT (jsonb_populate_record(NULL::{table}, to_jsonb(r) || $2::jsonb)).* FROM {table} r WHERE id = $1"
    ))
    .bind(src)
    .bind(changes)
    .execute(&env.pool)
    .await
    .unwrap();
}

/// An id of `prefix` made `days` days ago (ids begin with their time).
fn old_id(prefix: &str, days: i64) -> String {
    let ms = (chrono::Utc::now() - chrono::Duration::days(days)).timestamp_millis();
    format!("{prefix}_{ms:012x}7000{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

async fn count(env: &TestEnv, sql: &str, id: &str) -> i64 {
    sqlx::query_scalar(sql).bind(id).fetch_one(&env.pool).await.unwrap()
}

#[tokio::test]
async fn finished_work_past_its_projects_retention_is_pruned_and_nothing_else() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, &target.url, json!({})).await;
    let job_id = job["id"].as_str().unwrap().to_string();
    env.spawn_worker();
    let run = env.trigger(&job_id, json!({"payload": {"n": 1}})).await["id"].as_str().unwrap().to_string();
    env.wait_status(&run, "completed", std::time::Duration::from_secs(20)).await;
    let (s, v) = env
        .call(reqwest::Method::PATCH, &format!("/v1/projects/{project}/settings"), Some(json!({"retention_days": 0})))
        .await;
    assert_eq!(s, 422, "{v}");
    let (s, v) = env
        .call(reqwest::Method::PATCH, &format!("/v1/projects/{project}/settings"), Some(json!({"retention_days": 7})))
        .await;
    assert_eq!((s, v["retention_days"].as_i64()), (200, Some(7)), "{v}");

    // Work of 10 days ago: a finished run (with an attempt), a run still
    // queued, a finished workflow-less delivery, a pending one, an event.
    let long_ago = (chrono::Utc::now() - chrono::Duration::days(10)).to_rfc3339();
    let old_done = old_id("run", 10);
    copy_row(&env, "job_runs", &run, &old_done, json!({"finished_at": long_ago, "idempotency_key": null})).await;
    sqlx::query(
        "INSERT INTO job_run_attempts (run_id, attempt, outcome, started_at, finished_at) VALUES ($1, 1, 'completed', now(), now())",
    )
    .bind(&old_done)
    .execute(&env.pool)
    .await
    .unwrap();
    let old_queued = old_id("run", 10);
    copy_row(
        &env,
        "job_runs",
        &run,
        &old_queued,
        json!({"status": "queued", "finished_at": null, "idempotency_key": null}),
    )
    .await;
    // Finished 3 days ago, inside the window.
    let recent = old_id("run", 10);
    let three_days = (chrono::Utc::now() - chrono::Duration::days(3)).to_rfc3339();
    copy_row(&env, "job_runs", &run, &recent, json!({"finished_at": three_days, "idempotency_key": null})).await;
    for (id, status) in [(old_id("whd", 10), "delivered"), (old_id("whd", 10), "pending")] {
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, project_id, kind, url, event_type, payload, status, max_attempts, created_at)
             VALUES ($1, $2, 'subscription', 'http://127.0.0.1:9/x', 'run.completed', '{}', $3, 5, now() - interval '10 days')",
        )
        .bind(&id)
        .bind(&project)
        .bind(status)
        .execute(&env.pool)
        .await
        .unwrap();
    }
    let old_event = old_id("evt", 10);
    sqlx::query(
        "INSERT INTO events (id, project_id, event_key, completed_at, created_at)
         VALUES ($1, $2, 'k', now() - interval '10 days', now() - interval '10 days')",
    )
    .bind(&old_event)
    .bind(&project)
    .execute(&env.pool)
    .await
    .unwrap();
    // A trigger batch closed 10 days ago goes with its items; one still
    // open, however old, stays.
    let (closed_batch, open_batch) = (old_id("tbat", 10), old_id("tbat", 10));
    for (id, closed) in [(&closed_batch, true), (&open_batch, false)] {
        sqlx::query(
            "INSERT INTO trigger_batches (id, project_id, job_id, batch_key, size, max_size, opened_at, closes_at, closed_at)
             VALUES ($1, $2, 'job_x', $1, 1, 5, now() - interval '10 days', now() - interval '10 days',
                     CASE WHEN $3 THEN now() - interval '10 days' END)",
        )
        .bind(id)
        .bind(&project)
        .bind(closed)
        .execute(&env.pool)
        .await
        .unwrap();
        sqlx::query("INSERT INTO trigger_batch_items (batch_id, position, trigger_id) VALUES ($1, 0, $1 || ':t')")
            .bind(id)
            .execute(&env.pool)
            .await
            .unwrap();
    }
    // Another project keeps the default 30 days: its 10-day-old run stays.
    let other = env.project().await;
    let other_job = env.job_in(&other, &target.url, json!({})).await;
    let other_run = env.trigger(other_job["id"].as_str().unwrap(), json!({})).await["id"].as_str().unwrap().to_string();
    env.wait_status(&other_run, "completed", std::time::Duration::from_secs(20)).await;
    let other_old = old_id("run", 10);
    copy_row(&env, "job_runs", &other_run, &other_old, json!({"finished_at": long_ago, "idempotency_key": null})).await;

    let report = env.scheduler().prune_once().await.unwrap();
    assert_eq!(report.deleted, [1, 0, 1, 1, 1], "one run, one delivery, one event, one batch: {report:?}");
    let items = "SELECT count(*) FROM trigger_batch_items WHERE batch_id = $1";
    assert_eq!((count(&env, items, &closed_batch).await, count(&env, items, &open_batch).await), (0, 1));
    let runs = "SELECT count(*) FROM job_runs WHERE id = $1";
    assert_eq!(count(&env, runs, &old_done).await, 0);
    assert_eq!(
        count(&env, "SELECT count(*) FROM job_run_attempts WHERE run_id = $1", &old_done).await,
        0,
        "with its attempts"
    );
    for (id, why) in
        [(&old_queued, "not finished"), (&recent, "inside the window"), (&run, "new"), (&other_old, "30 days there")]
    {
        assert_eq!(count(&env, runs, id).await, 1, "{why}");
    }
    assert_eq!(
        count(&env, "SELECT count(*) FROM webhook_deliveries WHERE project_id = $1", &project).await,
        1,
        "the pending one stays"
    );
    assert_eq!(count(&env, "SELECT count(*) FROM events WHERE id = $1", &old_event).await, 0);
    let again = env.scheduler().prune_once().await.unwrap();
    assert_eq!(again.deleted, [0, 0, 0, 0, 0]);
}

/// The partition of `table` that holds run `id`'s row (`key`: the run id's column).
async fn partition_of(env: &TestEnv, table: &str, key: &str, id: &str) -> String {
    sqlx::query_scalar(&format!("SELECT tableoid::regclass::text FROM {table} WHERE {key} = $1 LIMIT 1"))
        .bind(id)
        .fetch_one(&env.pool)
        .await
        .unwrap()
}

/// The name of the weekly partition of `table` for the week holding `t`.
fn week_partition(table: &str, t: chrono::DateTime<chrono::Utc>) -> String {
    use chrono::Datelike;
    let monday = t.date_naive() - chrono::Duration::days(t.weekday().num_days_from_monday().into());
    format!("{table}_w{}", monday.format("%Y%m%d"))
}

async fn exists(env: &TestEnv, table: &str) -> bool {
    sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL").bind(table).fetch_one(&env.pool).await.unwrap()
}

#[tokio::test]
async fn runs_live_in_weekly_partitions_that_the_pruner_makes_and_drops_once_emptied() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, &target.url, json!({})).await;
    let job_id = job["id"].as_str().unwrap().to_string();
    env.spawn_worker();
    let run = env.trigger(&job_id, json!({})).await["id"].as_str().unwrap().to_string();
    env.wait_status(&run, "completed", std::time::Duration::from_secs(20)).await;
    let now = chrono::Utc::now();
    assert_eq!(
        partition_of(&env, "job_runs", "id", &run).await,
        week_partition("job_runs", now),
        "a new run is in this week's"
    );

    // A run of 10 days ago, from before its week had a partition, waits in
    // the default partition; the pruner's pass moves it into its week's.
    let ten_days = now - chrono::Duration::days(10);
    let old = old_id("run", 10);
    copy_row(&env, "job_runs", &run, &old, json!({"finished_at": ten_days.to_rfc3339(), "idempotency_key": null}))
        .await;
    sqlx::query(
        "INSERT INTO job_run_attempts (run_id, attempt, outcome, started_at, finished_at) VALUES ($1, 1, 'completed', now(), now())",
    )
    .bind(&old)
    .execute(&env.pool)
    .await
    .unwrap();
    assert_eq!(partition_of(&env, "job_runs", "id", &old).await, "job_runs_default");
    let made = switchyard_shared::store::retention::ensure_partitions(&env.pool, ten_days, now).await.unwrap();
    assert!(made >= 3, "the past weeks' partitions of the three tables: {made}");
    let old_week = week_partition("job_runs", ten_days);
    assert_eq!(partition_of(&env, "job_runs", "id", &old).await, old_week, "moved out of the default partition");
    assert_eq!(
        partition_of(&env, "job_run_attempts", "run_id", &old).await,
        week_partition("job_run_attempts", ten_days),
        "its attempt too"
    );

    // Kept while a run is in it, dropped (all three tables) once retention
    // deleted the run; this week's stays, and so does the new run.
    // (An empty past week between them goes at once.)
    env.scheduler().prune_once().await.unwrap();
    assert!(exists(&env, &old_week).await);
    let (s, v) = env
        .call(reqwest::Method::PATCH, &format!("/v1/projects/{project}/settings"), Some(json!({"retention_days": 7})))
        .await;
    assert_eq!(s, 200, "{v}");
    let report = env.scheduler().prune_once().await.unwrap();
    assert_eq!(report.deleted[0], 1, "{report:?}");
    assert!(report.weeks_dropped >= 1, "{report:?}");
    for table in ["job_runs", "job_run_attempts", "job_run_events"] {
        assert!(!exists(&env, &week_partition(table, ten_days)).await, "{table}'s partition of that week dropped");
        assert!(exists(&env, &week_partition(table, now)).await, "{table}'s partition of this week kept");
        let next = week_partition(table, now + chrono::Duration::weeks(2));
        assert!(exists(&env, &next).await, "{next} made ahead");
    }
    assert_eq!(count(&env, "SELECT count(*) FROM job_runs WHERE id = $1", &run).await, 1);
    let (s, v) = env.call(reqwest::Method::GET, &format!("/v1/runs/{run}"), None).await;
    assert_eq!((s, v["status"].as_str()), (200, Some("completed")), "{v}");
}
