//! Cron: exactly one run per tick with several schedulers, the missed-tick
//! and daylight-saving policies on an injected clock, inactive jobs.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::harness::TestEnv;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// Ticks of the job's cron runs, in order.
async fn cron_ticks(env: &TestEnv, job_id: &str) -> Vec<DateTime<Utc>> {
    sqlx::query_scalar("SELECT cron_tick FROM job_runs WHERE job_id = $1 AND triggered_by = 'cron' ORDER BY cron_tick")
        .bind(job_id)
        .fetch_all(&env.pool)
        .await
        .unwrap()
}

/// Ticks before `since` never fire: pretend the job became active then.
async fn active_since(env: &TestEnv, job_id: &str, since: DateTime<Utc>) {
    sqlx::query("UPDATE jobs SET cron_since = $2 WHERE id = $1")
        .bind(job_id)
        .bind(since)
        .execute(&env.pool)
        .await
        .unwrap();
}

/// Steps the clock from `from` to `to` by `step`, one cron pass each.
async fn walk(env: &TestEnv, from: &str, to: &str, step: chrono::Duration) {
    let sched = env.scheduler();
    let (mut t, end) = (utc(from), utc(to));
    while t <= end {
        sched.cron_once(t).await.unwrap();
        t += step;
    }
}

#[tokio::test]
async fn racing_schedulers_fire_each_tick_once_and_missed_ticks_once() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/", json!({"cron": "*/5 * * * *"})).await;
    let id = job["id"].as_str().unwrap();
    active_since(&env, id, utc("2027-01-01T00:00:00Z")).await;
    let schedulers: Vec<_> = (0..4).map(|_| env.scheduler()).collect();

    let at = utc("2027-01-01T00:07:00Z");
    let reports = futures::future::join_all(schedulers.iter().map(|s| s.cron_once(at))).await;
    let fired: usize = reports.iter().map(|r| r.as_ref().unwrap().fired).sum();
    assert_eq!(fired, 1, "{reports:?}");
    assert_eq!(cron_ticks(&env, id).await, [utc("2027-01-01T00:05:00Z")]);
    let run: (String, String, Option<String>) =
        sqlx::query_as("SELECT status, triggered_by, created_by FROM job_runs WHERE job_id = $1")
            .bind(id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(run, ("queued".into(), "cron".into(), Some("cron".into())));
    assert_eq!(env.zcard_all(|k| &k.ready).await, 1, "enqueued");

    // Scheduler down from 00:07 to 00:27: four ticks missed, one catch-up.
    let at = utc("2027-01-01T00:27:10Z");
    let reports = futures::future::join_all(schedulers.iter().map(|s| s.cron_once(at))).await;
    assert_eq!(reports.iter().map(|r| r.as_ref().unwrap().fired).sum::<usize>(), 1);
    assert_eq!(cron_ticks(&env, id).await, [utc("2027-01-01T00:05:00Z"), utc("2027-01-01T00:25:00Z")]);
    // Then the schedule resumes.
    schedulers[0].cron_once(utc("2027-01-01T00:29:59Z")).await.unwrap();
    schedulers[1].cron_once(utc("2027-01-01T00:30:00Z")).await.unwrap();
    schedulers[2].cron_once(utc("2027-01-01T00:30:01Z")).await.unwrap();
    assert_eq!(cron_ticks(&env, id).await.len(), 3);
    assert_eq!(cron_ticks(&env, id).await[2], utc("2027-01-01T00:30:00Z"));
}

#[tokio::test]
async fn two_scheduler_loops_fire_every_second_exactly_once() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/", json!({"cron": "* * * * * *"})).await;
    let id = job["id"].as_str().unwrap();
    let a = env.spawn_scheduler();
    let b = env.spawn_scheduler();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    a.cancel();
    b.cancel();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ticks = cron_ticks(&env, id).await;
    assert!(ticks.len() >= 2, "{ticks:?}");
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], chrono::Duration::seconds(1), "each second once, none skipped: {ticks:?}");
    }
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM job_runs WHERE job_id = $1")
        .bind(id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(runs as usize, ticks.len());
}

#[tokio::test]
async fn a_skipped_local_time_fires_once_at_the_transition() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    // Europe/Berlin, 2027-03-28: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
    let daily = env
        .job_in(
            &project,
            "http://127.0.0.1:9/",
            json!({"slug": "d", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}),
        )
        .await;
    let hourly = env
        .job_in(&project, "http://127.0.0.1:9/", json!({"slug": "h", "cron": "0 * * * *", "timezone": "Europe/Berlin"}))
        .await;
    let (d, h) = (daily["id"].as_str().unwrap(), hourly["id"].as_str().unwrap());
    active_since(&env, d, utc("2027-03-27T00:00:00Z")).await;
    active_since(&env, h, utc("2027-03-27T23:30:00Z")).await;
    walk(&env, "2027-03-27T00:00:00Z", "2027-03-29T02:00:00Z", chrono::Duration::minutes(10)).await;
    assert_eq!(
        cron_ticks(&env, d).await,
        [utc("2027-03-27T01:30:00Z"), utc("2027-03-28T01:00:00Z"), utc("2027-03-29T00:30:00Z")],
        "02:30 did not exist on the 28th: it fired once, at the transition"
    );
    let hours = cron_ticks(&env, h).await;
    // 01:00 CET, then 02:00 (skipped) and 03:00 CEST are one instant: one run.
    assert_eq!(&hours[..3], [utc("2027-03-28T00:00:00Z"), utc("2027-03-28T01:00:00Z"), utc("2027-03-28T02:00:00Z")]);
    assert_eq!(hours.len(), 27, "once per real hour from 00:00Z on the 28th to 02:00Z on the 29th");
}

#[tokio::test]
async fn a_repeated_local_hour_fires_once() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    // Europe/Berlin, 2027-10-31: 03:00 CEST goes back to 02:00 CET (01:00 UTC).
    let daily = env
        .job_in(
            &project,
            "http://127.0.0.1:9/",
            json!({"slug": "d", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}),
        )
        .await;
    let every_20 = env
        .job_in(
            &project,
            "http://127.0.0.1:9/",
            json!({"slug": "m", "cron": "*/20 2 * * *", "timezone": "Europe/Berlin"}),
        )
        .await;
    let (d, m) = (daily["id"].as_str().unwrap(), every_20["id"].as_str().unwrap());
    active_since(&env, d, utc("2027-10-30T00:00:00Z")).await;
    active_since(&env, m, utc("2027-10-30T12:00:00Z")).await;
    walk(&env, "2027-10-30T00:00:00Z", "2027-11-01T02:00:00Z", chrono::Duration::minutes(10)).await;
    assert_eq!(
        cron_ticks(&env, d).await,
        [utc("2027-10-30T00:30:00Z"), utc("2027-10-31T00:30:00Z"), utc("2027-11-01T01:30:00Z")],
        "02:30 happened twice on the 31st: it fired once, the first time"
    );
    assert_eq!(
        cron_ticks(&env, m).await,
        [
            utc("2027-10-31T00:00:00Z"),
            utc("2027-10-31T00:20:00Z"),
            utc("2027-10-31T00:40:00Z"),
            utc("2027-11-01T01:00:00Z"),
            utc("2027-11-01T01:20:00Z"),
            utc("2027-11-01T01:40:00Z")
        ],
        "the repeated 02:xx CET hour of the 31st adds nothing"
    );
}

#[tokio::test]
async fn disabled_paused_and_deleted_jobs_do_not_fire_nor_catch_up() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (_, g) = env.post("/v1/job-groups", json!({"project_id": project, "name": "g", "slug": "g"})).await;
    let mk = |slug: &'static str, extra: serde_json::Value| {
        let mut body = json!({"slug": slug, "cron": "* * * * *"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let active = env.job_in(&project, "http://127.0.0.1:9/", mk("on", json!({}))).await;
    let disabled = env.job_in(&project, "http://127.0.0.1:9/", mk("off", json!({"enabled": false}))).await;
    let paused = env.job_in(&project, "http://127.0.0.1:9/", mk("paused", json!({"group_id": g["id"]}))).await;
    let deleted = env.job_in(&project, "http://127.0.0.1:9/", mk("gone", json!({}))).await;
    let ids: Vec<String> =
        [&active, &disabled, &paused, &deleted].iter().map(|j| j["id"].as_str().unwrap().to_string()).collect();
    let old = Utc::now() - chrono::Duration::minutes(30);
    for id in &ids {
        active_since(&env, id, old).await;
    }
    env.post(&format!("/v1/job-groups/{}/pause-all", g["id"].as_str().unwrap()), json!({})).await;
    let (s, _) = env.delete(&format!("/v1/jobs/{}", ids[3])).await;
    assert_eq!(s, 204);

    let sched = env.scheduler();
    let now = Utc::now();
    let report = sched.cron_once(now).await.unwrap();
    assert_eq!((report.jobs, report.fired), (1, 1), "only the active job: {report:?}");
    assert_eq!(cron_ticks(&env, &ids[0]).await.len(), 1, "one catch-up for the half hour");
    for id in &ids[1..] {
        assert!(cron_ticks(&env, id).await.is_empty(), "{id}");
    }

    // Enabled and resumed again: the ticks they were inactive for are not caught up.
    let (s, _) = env.patch(&format!("/v1/jobs/{}", ids[1]), json!({"enabled": true})).await;
    assert_eq!(s, 200);
    env.post(&format!("/v1/job-groups/{}/resume-all", g["id"].as_str().unwrap()), json!({})).await;
    let report = sched.cron_once(now).await.unwrap();
    assert_eq!((report.jobs, report.fired), (3, 0), "{report:?}");
    // Their next ticks fire as usual.
    let next = sched.cron_once(now + chrono::Duration::seconds(120)).await.unwrap();
    assert_eq!(next.fired, 3);
}
