//! Phase (y): do the reports answer within 200 ms on a project with a
//! million runs? Writes `--report-runs` ended runs (with an attempt and a
//! usage record each, and a workflow run for every tenth) into a project
//! of their own, spread over the last 30 days across ten jobs of one job
//! group (`store::analytics::write_report_history`), folds them into the
//! rollups as the scheduler's loop would (`store::analytics::roll_up`,
//! timed), then times each report over HTTP, `--report-reps` times each,
//! with the shortest and the longest period.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;
use switchyard_shared::store::analytics::{self, ReportSeed};

use super::stats::{summarize, Summary};
use super::system::System;

/// Rows written per seeding statement.
const SEED_CHUNK: usize = 200_000;
const JOBS: usize = 10;
/// The history spans the longest period (720 h) less two minutes.
const SPAN_MS: i64 = 720 * 3_600_000 - 120_000;

#[derive(Debug, Serialize)]
pub struct ReportFigures {
    pub runs: usize,
    pub seed_secs: f64,
    /// Time to fold the whole history into the rollups, and how many
    /// rollup rows it made (job run rollups).
    pub rollup_secs: f64,
    pub rollup_rows: i64,
    /// Per report (path and query), its answer time over HTTP in ms.
    pub queries: BTreeMap<String, Summary>,
    /// The same reads straight from the runs, without the rollup (the
    /// watermark set back), for the longest period: why the rollup.
    pub without_rollup: BTreeMap<String, Summary>,
    /// Whether every report answered within 200 ms at p50.
    pub within_200ms: bool,
}

/// Seeds the history; the id of the group of its jobs.
async fn seed(sys: &System, project: &str, n: usize) -> anyhow::Result<String> {
    let api = sys.api();
    let group = api.create_group(project, "reports").await?;
    let mut jobs = Vec::new();
    for k in 0..JOBS {
        let id = api
            .create_job_with(project, &format!("report-{k}"), &sys.target().url, json!({ "group_id": group }))
            .await?;
        let version_id: String =
            sqlx::query_scalar("SELECT version_id FROM jobs WHERE id = $1").bind(&id).fetch_one(sys.pool()).await?;
        jobs.push((id, version_id));
    }
    let steps = serde_json::json!([{"step_ref": "a", "job_id": jobs[0].0}]);
    let workflow = api.create_workflow(project, "report-flow", steps).await?;
    let wf_version: String = sqlx::query_scalar("SELECT version_id FROM workflows WHERE id = $1")
        .bind(&workflow)
        .fetch_one(sys.pool())
        .await?;
    let s = ReportSeed { project_id: project, jobs: &jobs, workflow: (&workflow, &wf_version) };
    let newest = chrono::Utc::now().timestamp_millis() - 60_000;
    let mut done = 0;
    while done < n {
        let k = SEED_CHUNK.min(n - done);
        analytics::write_report_history(sys.pool(), &s, done..done + k, (newest, SPAN_MS), n).await?;
        done += k;
        eprintln!("bench: (y) {done} of {n} ended runs written");
    }
    for t in ["job_runs", "job_run_attempts", "job_run_usage", "workflow_runs"] {
        sqlx::query(&format!("VACUUM ANALYZE {t}")).execute(sys.pool()).await?;
    }
    Ok(group)
}

async fn time_get(sys: &System, path: &str, reps: usize) -> anyhow::Result<Summary> {
    let mut took = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        let (status, body) = sys.api().get(path).await?;
        if status != 200 {
            anyhow::bail!("GET {path}: HTTP {status}: {}", body.chars().take(300).collect::<String>());
        }
        took.push(t.elapsed());
    }
    Ok(summarize(took))
}

pub async fn run(sys: &System, n: usize, reps: usize) -> anyhow::Result<ReportFigures> {
    let project = sys.api().create_project("reports").await?;
    let t = Instant::now();
    let group = seed(sys, &project, n).await?;
    let seed_secs = t.elapsed().as_secs_f64();
    let q = |path: &str, extra: &str| format!("{path}?project_id={project}{extra}");
    let group_stats = format!("/v1/job-groups/{group}/stats");
    let reports = [
        q("/v1/analytics/workflows/summary", "&period_hours=24"),
        q("/v1/analytics/workflows/summary", "&period_hours=720"),
        q("/v1/analytics/jobs/by-version", "&period_hours=24"),
        q("/v1/analytics/jobs/by-version", "&period_hours=720"),
        q("/v1/analytics/performance", "&period_hours=24"),
        q("/v1/analytics/performance", "&period_hours=720"),
        q("/v1/usage/projects", ""),
        q("/v1/stats/queues", ""),
        group_stats.clone(),
    ];
    // Without the rollup first: the scheduler's own loop may already have
    // started folding; the watermark is set back for these reads.
    let mut without_rollup = BTreeMap::new();
    let slow = |p: &&String| p.contains("720") || p.contains("usage") || p.contains("job-groups");
    for path in reports.iter().filter(slow) {
        analytics::forget_rollups(sys.pool()).await?;
        let took = time_get(sys, path, 2.min(reps)).await?;
        // The scheduler's loop may have passed meanwhile: then the reads
        // were partly from the rollups and say nothing.
        if analytics::watermark_unset(sys.pool()).await? {
            without_rollup.insert(path.replace(&project, "P").replace(&group, "G"), took);
        } else {
            eprintln!("bench: (y) the scheduler rolled up during the read without rollups of {path}; not kept");
        }
    }
    analytics::forget_rollups(sys.pool()).await?;
    let t = Instant::now();
    loop {
        let r =
            analytics::roll_up(sys.pool(), chrono::Utc::now(), Duration::from_secs(60), Duration::from_secs(6 * 3600))
                .await?;
        if r.caught_up {
            break;
        }
    }
    let rollup_secs = t.elapsed().as_secs_f64();
    let rollup_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM job_run_rollups").fetch_one(sys.pool()).await?;
    eprintln!("bench: (y) rolled up in {rollup_secs:.1} s ({rollup_rows} rows); timing the reports");
    let mut queries = BTreeMap::new();
    for path in &reports {
        time_get(sys, path, 1).await?; // one warm-up read
        queries.insert(path.replace(&project, "P").replace(&group, "G"), time_get(sys, path, reps).await?);
    }
    let within_200ms = queries.values().all(|s| s.p50 <= 200.0);
    Ok(ReportFigures { runs: n, seed_secs, rollup_secs, rollup_rows, queries, without_rollup, within_200ms })
}
