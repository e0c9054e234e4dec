//! Reports: `GET /v1/analytics/workflows/summary`, `/v1/analytics/jobs/by-version`,
//! `/v1/analytics/performance`, `/v1/usage/projects`, and the queue
//! history of `/v1/stats/queues`, checked figure by figure against runs of
//! known outcomes and durations, before and after the scheduler's rollup
//! folds them in.

use std::time::Duration;

use chrono::{DateTime, Datelike, TimeZone, Utc};
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_shared::store::analytics;

use crate::harness::{assert_problem, TestEnv};
use crate::support::sdk::{api_key, call_as};

const NOWHERE: &str = "http://127.0.0.1:9/x";

/// A run of `job` (version, version id) that ended `ago` before now with
/// `status`, having run `ms` milliseconds (never started: `None`).
async fn ended(
    env: &TestEnv,
    project: &str,
    job: &(String, i64, String),
    status: &str,
    ms: Option<i64>,
    ago: chrono::Duration,
) -> String {
    let id = format!("run_{}", uuid::Uuid::now_v7().simple());
    let finished = Utc::now() - ago;
    let started = ms.map(|ms| finished - chrono::Duration::milliseconds(ms));
    sqlx::query(
        "INSERT INTO job_runs (id, project_id, job_id, job_version, job_version_id, status, attempt, triggered_by,
                               started_at, finished_at)
         VALUES ($1, $2, $3, $4, $5, $6, 1, 'api', $7, $8)",
    )
    .bind(&id)
    .bind(project)
    .bind(&job.0)
    .bind(job.1 as i32)
    .bind(&job.2)
    .bind(status)
    .bind(started)
    .bind(finished)
    .execute(&env.pool)
    .await
    .unwrap();
    id
}

async fn usage(env: &TestEnv, run: &str, cost: i64, tokens: (i64, i64), cpu: i64, at: DateTime<Utc>) {
    sqlx::query(
        "INSERT INTO job_run_usage (id, run_id, attempt, cost_microusd, tokens_in, tokens_out, cpu_ms, created_at)
         VALUES ($1, $2, 1, $3, $4, $5, $6, $7)",
    )
    .bind(format!("use_{}", uuid::Uuid::now_v7().simple()))
    .bind(run)
    .bind(cost)
    .bind(tokens.0)
    .bind(tokens.1)
    .bind(cpu)
    .bind(at)
    .execute(&env.pool)
    .await
    .unwrap();
}

fn job_of(v: &Value) -> (String, i64, String) {
    (v["id"].as_str().unwrap().into(), v["version"].as_i64().unwrap(), v["version_id"].as_str().unwrap().into())
}

fn mins(n: i64) -> chrono::Duration {
    chrono::Duration::minutes(n)
}

/// (ended, [completed, failed, timed_out, cancelled, expired], success, failure, [count, p50, p95, p99, max]).
type Figures = (i64, [i64; 5], f64, f64, [i64; 5]);

fn figures(o: &Value) -> Figures {
    let c = &o["status_counts"];
    let n = |k: &str| c[k].as_i64().unwrap_or(-1);
    let d = &o["duration"];
    let ms = |k: &str| d[k].as_i64().unwrap();
    (
        o["ended"].as_i64().unwrap(),
        [n("completed"), n("failed"), n("timed_out"), n("cancelled"), n("expired")],
        o["success_rate"].as_f64().unwrap(),
        o["failure_rate"].as_f64().unwrap(),
        [ms("count"), ms("p50_ms"), ms("p95_ms"), ms("p99_ms"), ms("max_ms")],
    )
}

/// A report without its `to` (the moment it was made), to compare two.
async fn report(env: &TestEnv, path: &str) -> Value {
    let (s, mut v) = env.get(path).await;
    assert_eq!(s, 200, "{path}: {v}");
    v.as_object_mut().unwrap().remove("to");
    v
}

#[tokio::test]
async fn job_reports_count_rate_and_rank_the_runs_that_ended() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let a = env.job_in(&project, NOWHERE, json!({"name": "alpha"})).await;
    let a1 = job_of(&a);
    let (s, a2) = env.patch(&format!("/v1/jobs/{}", a1.0), json!({"description": "second version"})).await;
    assert_eq!(s, 200, "{a2}");
    let a2 = job_of(&a2);
    assert_eq!(a2.1, 2);
    let b1 = job_of(&env.job_in(&project, NOWHERE, json!({"name": "beta"})).await);
    // Another project's runs count only there.
    let other = env.project().await;
    let o1 = job_of(&env.job_in(&other, NOWHERE, json!({})).await);
    ended(&env, &other, &o1, "failed", Some(9_999), mins(3)).await;

    // alpha v1: four completed (100..400 ms) and one failed (500 ms).
    for (i, ms) in [100, 200, 300, 400].into_iter().enumerate() {
        ended(&env, &project, &a1, "completed", Some(ms), mins(10 + i as i64)).await;
    }
    ended(&env, &project, &a1, "failed", Some(500), mins(5)).await;
    // alpha v2: two completed of 1 s, one timed out after 3 s, one
    // cancelled and one expired before they started.
    ended(&env, &project, &a2, "completed", Some(1_000), mins(4)).await;
    ended(&env, &project, &a2, "completed", Some(1_000), mins(3)).await;
    ended(&env, &project, &a2, "timed_out", Some(3_000), mins(2)).await;
    ended(&env, &project, &a2, "cancelled", None, mins(2)).await;
    ended(&env, &project, &a2, "expired", None, mins(1)).await;
    // beta: one of 50 ms now, one of 70 ms 40 hours ago (in 48 h, not 24 h).
    ended(&env, &project, &b1, "completed", Some(50), mins(1)).await;
    ended(&env, &project, &b1, "completed", Some(70), chrono::Duration::hours(40)).await;
    // One run waits: the health summary's backlog.
    env.trigger(&b1.0, json!({})).await;

    let by_version = format!("/v1/analytics/jobs/by-version?project_id={project}");
    let performance = format!("/v1/analytics/performance?project_id={project}");
    let before = (report(&env, &by_version).await, report(&env, &performance).await);
    let v = &before.0;
    assert_eq!(v["period_hours"], 24);
    assert_eq!(v["project_id"], project.as_str());
    let rows = v["versions"].as_array().unwrap();
    let keys: Vec<(String, i64)> =
        rows.iter().map(|r| (r["job_id"].as_str().unwrap().into(), r["job_version"].as_i64().unwrap())).collect();
    let mut want = vec![(a1.0.clone(), 2), (a1.0.clone(), 1), (b1.0.clone(), 1)];
    want.sort_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
    assert_eq!(keys, want, "by job id, newest version first: {v}");
    let row = |job: &str, version: i64| {
        rows.iter().find(|r| r["job_id"] == job && r["job_version"] == version).unwrap_or_else(|| panic!("{v}"))
    };
    let r = row(&a1.0, 1);
    assert_eq!((r["job_slug"].as_str(), r["job_name"].as_str()), (Some("alpha"), Some("alpha")));
    assert_eq!(r["job_version_id"], a1.2.as_str());
    assert_eq!(figures(&r["outcomes"]), (5, [4, 1, 0, 0, 0], 0.8, 0.2, [5, 300, 500, 500, 500]));
    let r = row(&a1.0, 2);
    assert_eq!(r["job_version_id"], a2.2.as_str());
    assert_eq!(figures(&r["outcomes"]), (5, [2, 0, 1, 1, 1], 0.4, 0.2, [3, 1_000, 3_000, 3_000, 3_000]));
    assert_eq!(figures(&row(&b1.0, 1)["outcomes"]), (1, [1, 0, 0, 0, 0], 1.0, 0.0, [1, 50, 50, 50, 50]));
    let (s, one) = env.get(&format!("{by_version}&job_id={}", b1.0)).await;
    assert_eq!((s, one["versions"].as_array().map(Vec::len)), (200, Some(1)), "{one}");

    let p = &before.1;
    let h = &p["health"];
    // Eleven endings; nine started: 50 100 200 300 400 500 1000 1000 3000.
    assert_eq!(figures(&h["outcomes"]), (11, [7, 1, 1, 1, 1], 7.0 / 11.0, 2.0 / 11.0, [9, 400, 3_000, 3_000, 3_000]));
    assert_eq!([&h["pending"], &h["queued"], &h["running"], &h["retrying"]], [0, 1, 0, 0], "{h}");
    assert!(h["oldest_queued_age_secs"].as_i64().is_some(), "{h}");
    let slow: Vec<(&str, i64, i64)> = p["slowest_jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (j["job_id"].as_str().unwrap(), j["ended"].as_i64().unwrap(), j["duration"]["p95_ms"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(slow, [(a1.0.as_str(), 10, 3_000), (b1.0.as_str(), 1, 50)], "{p}");
    let points = p["throughput"]["points"].as_array().unwrap();
    assert_eq!(points.len(), 25, "24 whole hours and the current one");
    let sum = |k: &str| points.iter().map(|x| x[k].as_i64().unwrap()).sum::<i64>();
    assert_eq!((sum("ended"), sum("completed"), sum("failed")), (11, 7, 2));
    let per_hour = p["throughput"]["ended_per_hour"].as_f64().unwrap();
    assert!(per_hour > 11.0 / 25.0 && per_hour <= 11.0 / 24.0, "{per_hour}");
    let (s, top1) = env.get(&format!("{performance}&top=1&period_hours=48")).await;
    assert_eq!(s, 200, "{top1}");
    assert_eq!(top1["slowest_jobs"].as_array().unwrap().len(), 1);
    assert_eq!(top1["health"]["outcomes"]["ended"], 12, "the run of 40 hours ago: {top1}");
    assert_eq!(top1["throughput"]["points"].as_array().unwrap().len(), 49);

    // Folded into the rollups, the reports are the same.
    let r = analytics::roll_up(&env.pool, Utc::now(), Duration::ZERO, Duration::from_secs(6 * 3600)).await.unwrap();
    assert!(r.span.is_some());
    while !analytics::roll_up(&env.pool, Utc::now(), Duration::ZERO, Duration::from_secs(6 * 3600))
        .await
        .unwrap()
        .caught_up
    {}
    let rolled: i64 = sqlx::query_scalar("SELECT count(*) FROM job_run_rollups").fetch_one(&env.pool).await.unwrap();
    assert!(rolled >= 4, "the rollup holds the hours: {rolled}");
    let after = (report(&env, &by_version).await, report(&env, &performance).await);
    assert_eq!(after.0, before.0);
    let strip = |mut v: Value| {
        v["health"].as_object_mut().unwrap().remove("oldest_queued_age_secs");
        v["throughput"].as_object_mut().unwrap().remove("ended_per_hour");
        v
    };
    assert_eq!(strip(after.1), strip(before.1));
    // A run that ends after the pass is read from the runs.
    ended(&env, &project, &b1, "failed", Some(10), chrono::Duration::zero()).await;
    let (_, v) = env.get(&by_version).await;
    let b = v["versions"].as_array().unwrap().iter().find(|r| r["job_id"] == b1.0.as_str()).unwrap().clone();
    assert_eq!(figures(&b["outcomes"]), (2, [1, 1, 0, 0, 0], 0.5, 0.5, [2, 10, 50, 50, 50]));

    // The queue history: each job's endings of the last hour, minute by
    // minute, and the sampled backlog (beta's queued run).
    let (s, q) = env.get(&format!("/v1/stats/queues?project_id={project}")).await;
    assert_eq!(s, 200, "{q}");
    assert!(q["history_through"].is_string(), "{q}");
    let hist = |job: &str| {
        let j = q["jobs"].as_array().unwrap().iter().find(|j| j["job_id"] == job).unwrap();
        j["history"].as_array().unwrap().clone()
    };
    let alpha = hist(&a1.0);
    assert_eq!(alpha.len(), 60);
    let total = |h: &[Value], k: &str| h.iter().map(|x| x[k].as_i64().unwrap()).sum::<i64>();
    assert_eq!((total(&alpha, "ended"), total(&alpha, "completed"), total(&alpha, "failed")), (10, 6, 2));
    let beta = hist(&b1.0);
    assert_eq!(total(&beta, "ended"), 1, "the 40-hour-old run is not in the last hour; the newest not yet folded");
    assert!(beta.iter().any(|x| x["queued"] == 1), "{beta:?}");
    let minutes: Vec<&str> = alpha.iter().map(|x| x["minute"].as_str().unwrap()).collect();
    assert!(minutes.windows(2).all(|w| w[0] < w[1]), "oldest first");

    // Each analytics query is timed, by period.
    let (_, metrics) = env.get("/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(metrics.contains("svc_analytics_query_duration_seconds_count{period_hours=\"48\"}"), "{metrics}");
}

#[tokio::test]
async fn workflow_summary_counts_ended_and_active_runs() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, NOWHERE, json!({})).await;
    let steps = json!([{"step_ref": "a", "job_id": job["id"]}]);
    let (s, w) = env.post("/v1/workflows", json!({"project_id": project, "name": "nightly", "steps": steps})).await;
    assert_eq!(s, 201, "{w}");
    let (wid, vid) = (w["id"].as_str().unwrap(), w["version_id"].as_str().unwrap());
    for ((status, ms), n) in [
        ("completed", Some(1_000)),
        ("completed", Some(2_000)),
        ("failed", Some(4_000)),
        ("cancelled", None),
        ("running", None),
    ]
    .into_iter()
    .zip(1..)
    {
        let finished = (status != "running").then(|| Utc::now() - mins(n));
        let started = match (ms, finished) {
            (Some(ms), Some(f)) => Some(f - chrono::Duration::milliseconds(ms)),
            _ => (status == "running").then(Utc::now),
        };
        sqlx::query(
            "INSERT INTO workflow_runs (id, project_id, workflow_id, version_id, version, started_version_id,
                                        version_policy, status, triggered_by, started_at, finished_at)
             VALUES ($1, $2, $3, $4, 1, $4, 'pin', $5, 'api', $6, $7)",
        )
        .bind(format!("wfr_{}", uuid::Uuid::now_v7().simple()))
        .bind(&project)
        .bind(wid)
        .bind(vid)
        .bind(status)
        .bind(started)
        .bind(finished)
        .execute(&env.pool)
        .await
        .unwrap();
    }
    let path = format!("/v1/analytics/workflows/summary?project_id={project}&period_hours=1");
    let before = report(&env, &path).await;
    assert_eq!(before["period_hours"], 1);
    let totals = &before["totals"];
    assert!(totals["status_counts"].get("expired").is_none(), "workflow runs do not expire: {totals}");
    let f = |o: &Value| {
        let mut x = figures(o);
        x.1[4] = 0;
        x
    };
    assert_eq!(f(totals), (4, [2, 1, 0, 1, 0], 0.5, 0.25, [3, 2_000, 4_000, 4_000, 4_000]));
    assert_eq!(before["active"], json!({"pending": 0, "running": 1, "paused": 0}));
    let list = before["workflows"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!((list[0]["workflow_id"].as_str(), list[0]["slug"].as_str()), (Some(wid), Some("nightly")));
    assert_eq!(f(&list[0]["outcomes"]), f(totals));
    assert_eq!(list[0]["active"]["running"], 1);

    analytics::roll_up(&env.pool, Utc::now(), Duration::ZERO, Duration::from_secs(6 * 3600)).await.unwrap();
    assert_eq!(report(&env, &path).await, before, "the same once rolled up");
}

#[tokio::test]
async fn usage_sums_a_months_records_per_project_and_job() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let a = job_of(&env.job_in(&project, NOWHERE, json!({"name": "alpha"})).await);
    let b = job_of(&env.job_in(&project, NOWHERE, json!({"name": "beta"})).await);
    let other = env.project().await;
    let o = job_of(&env.job_in(&other, NOWHERE, json!({})).await);
    let now = Utc::now();
    let this_month = Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0).unwrap();
    let last_month = (this_month - chrono::Duration::days(1)).with_day(1).unwrap();
    let r1 = ended(&env, &project, &a, "completed", Some(10), chrono::Duration::zero()).await;
    let r2 = ended(&env, &project, &a, "completed", Some(10), chrono::Duration::zero()).await;
    let r3 = ended(&env, &project, &b, "completed", Some(10), chrono::Duration::zero()).await;
    let r4 = ended(&env, &other, &o, "completed", Some(10), chrono::Duration::zero()).await;
    usage(&env, &r1, 1_500, (10, 20), 30, now).await;
    usage(&env, &r1, 100, (1, 2), 3, now).await;
    usage(&env, &r2, 400, (0, 0), 7, now).await;
    usage(&env, &r3, 7, (5, 5), 5, now).await;
    usage(&env, &r4, 1_000_000, (1, 1), 1, now).await;
    // Last month: its own bill.
    usage(&env, &r3, 42, (4, 2), 1, last_month + chrono::Duration::hours(5)).await;

    let fig =
        |u: &Value| ["records", "cost_microusd", "tokens_in", "tokens_out", "cpu_ms"].map(|k| u[k].as_i64().unwrap());
    let path = format!("/v1/usage/projects?project_id={project}");
    let check_current = |v: &Value| {
        assert_eq!(v["period"], now.format("%Y-%m").to_string());
        let from: DateTime<Utc> = v["from"].as_str().unwrap().parse().unwrap();
        assert_eq!(from, this_month, "{v}");
        let projects = v["projects"].as_array().unwrap();
        assert_eq!(projects.len(), 1, "{v}");
        let p = &projects[0];
        assert_eq!(p["project_id"], project.as_str());
        assert_eq!(fig(p), [4, 2_007, 16, 27, 45], "{p}");
        let jobs = p["jobs"].as_array().unwrap();
        let mut want = vec![(a.0.clone(), [3, 2_000, 11, 22, 40]), (b.0.clone(), [1, 7, 5, 5, 5])];
        want.sort();
        let got: Vec<(String, [i64; 5])> =
            jobs.iter().map(|j| (j["job_id"].as_str().unwrap().to_string(), fig(j))).collect();
        assert_eq!(got, want);
        assert!(jobs.iter().any(|j| j["slug"] == "alpha"));
    };
    let (s, v) = env.get(&path).await;
    assert_eq!(s, 200, "{v}");
    check_current(&v);
    let (_, v) = env.get(&format!("{path}&period={}", last_month.format("%Y-%m"))).await;
    assert_eq!(fig(&v["projects"][0]), [1, 42, 4, 2, 1], "{v}");
    assert_eq!(v["projects"][0]["jobs"][0]["job_id"], b.0.as_str());

    // Rolled up, the same; the internal secret naming no project sees both.
    while !analytics::roll_up(&env.pool, Utc::now(), Duration::ZERO, Duration::from_secs(6 * 3600))
        .await
        .unwrap()
        .caught_up
    {}
    let (_, v) = env.get(&path).await;
    check_current(&v);
    let (s, all) = env.get("/v1/usage/projects").await;
    assert_eq!(s, 200, "{all}");
    let ids: Vec<&str> =
        all["projects"].as_array().unwrap().iter().map(|p| p["project_id"].as_str().unwrap()).collect();
    let mut want = vec![project.as_str(), other.as_str()];
    want.sort();
    assert_eq!(ids, want);

    // A key sees its own project only.
    let key = api_key(&env, &project, &["stats:read"]).await;
    let (s, mine) = call_as(&env, Method::GET, "/v1/usage/projects", &key, None).await;
    assert_eq!(s, 200, "{mine}");
    check_current(&mine);
    let elsewhere = format!("/v1/usage/projects?project_id={other}");
    assert_problem(403, call_as(&env, Method::GET, &elsewhere, &key, None).await, 403);
}

#[tokio::test]
async fn an_empty_project_reports_zeros() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    env.job_in(&project, NOWHERE, json!({})).await;
    let q = format!("project_id={project}&period_hours=720");
    let w = report(&env, &format!("/v1/analytics/workflows/summary?{q}")).await;
    let zeros = (0, [0, 0, 0, 0, -1], 0.0, 0.0, [0; 5]);
    assert_eq!(figures(&w["totals"]), zeros);
    assert_eq!((w["workflows"].as_array().map(Vec::len), &w["active"]["running"]), (Some(0), &json!(0)));
    let j = report(&env, &format!("/v1/analytics/jobs/by-version?{q}")).await;
    assert_eq!(j["versions"], json!([]));
    let p = report(&env, &format!("/v1/analytics/performance?{q}")).await;
    assert_eq!(figures(&p["health"]["outcomes"]), (0, [0; 5], 0.0, 0.0, [0; 5]));
    assert_eq!((p["slowest_jobs"].clone(), p["throughput"]["ended_per_hour"].as_f64()), (json!([]), Some(0.0)));
    assert_eq!(p["throughput"]["points"].as_array().map(Vec::len), Some(721));
    let (s, u) = env.get(&format!("/v1/usage/projects?project_id={project}")).await;
    assert_eq!(s, 200, "{u}");
    assert_eq!(u["projects"][0]["cost_microusd"], 0);
    assert_eq!(u["projects"][0]["jobs"], json!([]));
    let (s, q) = env.get(&format!("/v1/stats/queues?project_id={project}")).await;
    assert_eq!(s, 200, "{q}");
    assert!(q.get("history_through").is_none(), "no rollup pass yet: {q}");
    assert!(q["jobs"][0]["history"].as_array().unwrap().iter().all(|m| m["ended"] == 0 && m["queued"] == 0));
}

#[tokio::test]
async fn report_parameters_are_checked_and_access_is_the_projects() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let reports = ["/v1/analytics/workflows/summary", "/v1/analytics/jobs/by-version", "/v1/analytics/performance"];
    for r in reports {
        let at = |q: &str| format!("{r}?project_id={project}&{q}");
        for bad in ["period_hours=0", "period_hours=721", "period_hours=-5"] {
            let p = assert_problem(422, env.get(&at(bad)).await, 422);
            assert_eq!(p["errors"][0]["location"], "query.period_hours", "{r} {bad}: {p}");
        }
        for bad in ["period_hours=abc", "period_hours=1.5"] {
            let p = assert_problem(400, env.get(&at(bad)).await, 400);
            assert_eq!(p["errors"][0]["location"], "query.period_hours", "{r} {bad}: {p}");
        }
        let (s, v) = env.get(&at("period_hours=720")).await;
        assert_eq!(s, 200, "{r}: {v}");
        assert_problem(404, env.get(&format!("{r}?project_id=prj_nope")).await, 404);
    }
    assert_problem(422, env.get(&format!("/v1/analytics/performance?project_id={project}&top=0")).await, 422);
    assert_problem(422, env.get(&format!("/v1/analytics/performance?project_id={project}&top=101")).await, 422);
    for bad in ["2024-13", "2024-1", "24-01", "may"] {
        let p = assert_problem(422, env.get(&format!("/v1/usage/projects?period={bad}")).await, 422);
        assert_eq!(p["errors"][0]["location"], "query.period", "{bad}: {p}");
    }

    // stats:read reads its own project's reports (no project_id needed),
    // not another's (403); a key without it is refused (403).
    let other = env.project().await;
    let key = api_key(&env, &project, &["stats:read"]).await;
    let runs_only = api_key(&env, &project, &["runs:read", "jobs:read", "workflows:read"]).await;
    for r in reports.into_iter().chain(["/v1/usage/projects"]) {
        let (s, v) = call_as(&env, Method::GET, r, &key, None).await;
        assert_eq!(s, 200, "{r}: {v}");
        if r != "/v1/usage/projects" {
            assert_eq!(v["project_id"], project.as_str());
        }
        let elsewhere = format!("{r}?project_id={other}");
        assert_problem(403, call_as(&env, Method::GET, &elsewhere, &key, None).await, 403);
        assert_problem(403, call_as(&env, Method::GET, r, &runs_only, None).await, 403);
        assert_problem(401, call_as(&env, Method::GET, r, "svc_nope", None).await, 401);
    }
}

/// The group's run counts read from the runs themselves.
async fn counted_directly(env: &TestEnv, group: &str) -> Value {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT r.status, count(*) FROM job_runs r JOIN jobs j ON j.id = r.job_id WHERE j.group_id = $1
          GROUP BY r.status",
    )
    .bind(group)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let mut all: serde_json::Map<String, Value> =
        ["pending", "queued", "running", "retrying", "completed", "failed", "timed_out", "cancelled", "expired"]
            .iter()
            .map(|s| (s.to_string(), json!(0)))
            .collect();
    for (s, n) in rows {
        all.insert(s, json!(n));
    }
    Value::Object(all)
}

async fn group_stats(env: &TestEnv, group: &str) -> Value {
    let (s, v) = env.get(&format!("/v1/job-groups/{group}/stats")).await;
    assert_eq!(s, 200, "{v}");
    v["run_counts"].clone()
}

async fn catch_up(env: &TestEnv) {
    while !analytics::roll_up(&env.pool, Utc::now(), Duration::ZERO, Duration::from_secs(6 * 3600))
        .await
        .unwrap()
        .caught_up
    {}
}

#[tokio::test]
async fn group_stats_count_every_run_through_rollups_restarts_and_pruning() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let (s, g) = env.post("/v1/job-groups", json!({"project_id": project, "name": "G", "slug": "g"})).await;
    assert_eq!(s, 201, "{g}");
    let gid = g["id"].as_str().unwrap().to_string();
    let a = job_of(&env.job_in(&project, NOWHERE, json!({"group_id": gid, "slug": "a"})).await);
    let b = job_of(&env.job_in(&project, NOWHERE, json!({"group_id": gid, "slug": "b"})).await);
    let outside = job_of(&env.job_in(&project, NOWHERE, json!({"slug": "outside"})).await);
    let mut restart_me = String::new();
    for k in 0..3 {
        restart_me = ended(&env, &project, &a, "completed", Some(5), chrono::Duration::hours(2) + mins(k)).await;
    }
    ended(&env, &project, &a, "failed", Some(5), chrono::Duration::hours(3)).await;
    let old = ended(&env, &project, &a, "completed", Some(5), chrono::Duration::days(40)).await;
    // Ids begin with their creation ms (UUIDv7), which the pruner bounds
    // its scan by: this run's must say 40 days ago too.
    let ms = (Utc::now() - chrono::Duration::days(40)).timestamp_millis();
    sqlx::query("UPDATE job_runs SET id = $2 WHERE id = $1")
        .bind(&old)
        .bind(format!("run_{ms:012x}{}", &old[16..]))
        .execute(&env.pool)
        .await
        .unwrap();
    ended(&env, &project, &b, "cancelled", None, chrono::Duration::hours(1)).await;
    ended(&env, &project, &b, "expired", None, chrono::Duration::hours(1)).await;
    for _ in 0..4 {
        ended(&env, &project, &outside, "completed", Some(5), chrono::Duration::hours(1)).await;
    }
    for _ in 0..2 {
        env.trigger(&a.0, json!({})).await;
    }
    let want = json!({"pending": 0, "queued": 2, "running": 0, "retrying": 0, "completed": 4, "failed": 1,
                      "timed_out": 0, "cancelled": 1, "expired": 1});
    assert_eq!(counted_directly(&env, &gid).await, want, "the test's own runs");
    assert_eq!(group_stats(&env, &gid).await, want, "before any rollup pass: read from the runs");

    catch_up(&env).await;
    let totals: i64 = sqlx::query_scalar("SELECT sum(n)::int8 FROM job_run_totals").fetch_one(&env.pool).await.unwrap();
    assert_eq!(totals, 11, "the rollup counted every ended run, the outside job's too");
    assert_eq!(group_stats(&env, &gid).await, want, "after the pass: from the totals");
    // A run that ends after the pass is read from the runs.
    ended(&env, &project, &b, "failed", Some(5), chrono::Duration::zero()).await;
    let want = counted_directly(&env, &gid).await;
    assert_eq!(want["failed"], 2);
    assert_eq!(group_stats(&env, &gid).await, want);

    // A restarted run leaves the totals (it is queued again), and counts
    // once when it ends again.
    let (s, v) = env.post(&format!("/v1/runs/{restart_me}/restart"), json!({"machine_preset": "small"})).await;
    assert_eq!(s, 200, "{v}");
    let want = counted_directly(&env, &gid).await;
    assert_eq!((want["completed"].as_i64(), want["queued"].as_i64()), (Some(3), Some(3)));
    assert_eq!(group_stats(&env, &gid).await, want);
    catch_up(&env).await;
    assert_eq!(group_stats(&env, &gid).await, want);
    sqlx::query("UPDATE job_runs SET status = 'completed', started_at = now(), finished_at = now() WHERE id = $1")
        .bind(&restart_me)
        .execute(&env.pool)
        .await
        .unwrap();
    let want = counted_directly(&env, &gid).await;
    assert_eq!((want["completed"].as_i64(), want["queued"].as_i64()), (Some(4), Some(2)));
    assert_eq!(group_stats(&env, &gid).await, want, "ended again: from the runs");
    catch_up(&env).await;
    assert_eq!(group_stats(&env, &gid).await, want, "and once folded in again");

    // Pruning takes the 40-day-old run out of the totals as it deletes it.
    let gone = switchyard_shared::store::retention::prune(
        &env.pool,
        switchyard_shared::store::retention::Kind::JobRuns,
        &project,
        Utc::now() - chrono::Duration::days(30),
        100,
    )
    .await
    .unwrap();
    assert_eq!(gone, 1);
    let want = counted_directly(&env, &gid).await;
    assert_eq!(want["completed"], 3);
    assert_eq!(group_stats(&env, &gid).await, want);
    catch_up(&env).await;
    assert_eq!(group_stats(&env, &gid).await, want);
}
