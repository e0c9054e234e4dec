//! Reports: workflow and job analytics over a period of hours, and usage
//! (cost, tokens, CPU) per project over a calendar month. The figures come
//! from `store::analytics` (rollups plus the runs since their watermark);
//! this file cuts them into the answers.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Timelike, Utc};
use poem::web::Data;
use poem_openapi::param::Query;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use switchyard_shared::store::analytics::{self as reports, Named, Percentiles, Tally};
use switchyard_shared::store::{self, stats};

use super::{project_of, Tag};
use crate::auth::Auth;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The period of a report when `period_hours` is not given.
pub const DEFAULT_PERIOD_HOURS: i64 = 24;
/// The longest period; the `maximum` the validators state (a test checks
/// the document against it).
pub use reports::MAX_PERIOD_HOURS;
/// The slowest jobs `getPerformanceAnalytics` lists by default, and at most.
pub const DEFAULT_TOP: i64 = 10;
pub const MAX_TOP: i64 = 100;
/// A billing period: a calendar month (UTC).
pub const BILLING_PERIOD_PATTERN: &str = "^[0-9]{4}-(0[1-9]|1[0-2])$";

pub struct AnalyticsApi;
pub struct UsageApi;

/// Durations of the runs that started, in milliseconds, from start (of the
/// last attempt, for a job run) to end. Percentiles are nearest-rank: the
/// smallest duration with at least that share of durations at or below
/// it. All 0 when no run started.
#[derive(Object, Clone, Debug)]
pub struct DurationStats {
    /// How many durations the percentiles are taken over.
    pub count: i64,
    pub p50_ms: i32,
    pub p95_ms: i32,
    pub p99_ms: i32,
    pub max_ms: i32,
}

impl From<Percentiles> for DurationStats {
    fn from(p: Percentiles) -> Self {
        DurationStats { count: p.count, p50_ms: p.p50, p95_ms: p.p95, p99_ms: p.p99, max_ms: p.max }
    }
}

/// The runs that ended in the period. A run restarted after it ended
/// counts again when it ends again.
#[derive(Object, Clone, Debug)]
pub struct Outcomes {
    /// Every ending: the sum of `status_counts`.
    pub ended: i64,
    /// Endings by terminal status, each listed (0 included): `completed`,
    /// `failed`, `timed_out`, `cancelled` and, for job runs, `expired`.
    pub status_counts: BTreeMap<String, i64>,
    /// `completed` / `ended` (0 when nothing ended).
    pub success_rate: f64,
    /// (`failed` + `timed_out`) / `ended` (0 when nothing ended);
    /// cancelled and expired runs count as neither.
    pub failure_rate: f64,
    pub duration: DurationStats,
}

fn outcomes(mut t: Tally, job_runs: bool) -> Outcomes {
    let mut status_counts = BTreeMap::from([
        ("completed".to_string(), t.completed),
        ("failed".to_string(), t.failed),
        ("timed_out".to_string(), t.timed_out),
        ("cancelled".to_string(), t.cancelled),
    ]);
    if job_runs {
        status_counts.insert("expired".into(), t.expired);
    }
    Outcomes {
        ended: t.ended(),
        success_rate: t.success_rate(),
        failure_rate: t.failure_rate(),
        duration: t.percentiles().into(),
        status_counts,
    }
}

/// Unfinished workflow runs, now.
#[derive(Object, Clone, Debug, Default)]
pub struct ActiveWorkflowRuns {
    pub pending: i64,
    pub running: i64,
    pub paused: i64,
}

impl ActiveWorkflowRuns {
    fn add(&mut self, status: &str, n: i64) {
        match status {
            "pending" => self.pending += n,
            "running" => self.running += n,
            _ => self.paused += n,
        }
    }
}

/// One workflow's figures.
#[derive(Object, Clone, Debug)]
pub struct WorkflowAnalytics {
    pub workflow_id: String,
    pub slug: String,
    pub name: String,
    pub outcomes: Outcomes,
    pub active: ActiveWorkflowRuns,
}

/// The answer of `GET /v1/analytics/workflows/summary`.
#[derive(Object, Clone, Debug)]
pub struct WorkflowAnalyticsSummary {
    pub project_id: String,
    pub period_hours: i64,
    /// Start of the period: the whole hour (UTC) `period_hours` before the
    /// current one. The period runs from it to `to`.
    pub from: DateTime<Utc>,
    /// When the report was made.
    pub to: DateTime<Utc>,
    /// Every workflow run of the project that ended in the period.
    pub totals: Outcomes,
    /// Every unfinished workflow run of the project.
    pub active: ActiveWorkflowRuns,
    /// Each workflow with a run that ended in the period or is unfinished,
    /// by id.
    pub workflows: Vec<WorkflowAnalytics>,
}

/// One job version's figures.
#[derive(Object, Clone, Debug)]
pub struct JobVersionAnalytics {
    pub job_id: String,
    pub job_slug: String,
    pub job_name: String,
    pub job_version: i32,
    pub job_version_id: String,
    pub outcomes: Outcomes,
}

/// The answer of `GET /v1/analytics/jobs/by-version`.
#[derive(Object, Clone, Debug)]
pub struct JobAnalyticsByVersion {
    pub project_id: String,
    pub period_hours: i64,
    /// Start of the period (see `WorkflowAnalyticsSummary.from`).
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Each version with a run that ended in the period: by job id, newest
    /// version first.
    pub versions: Vec<JobVersionAnalytics>,
}

/// The project's state: what ended in the period and what waits now.
#[derive(Object, Clone, Debug)]
pub struct HealthSummary {
    /// Every job run of the project that ended in the period.
    pub outcomes: Outcomes,
    /// Unfinished runs now, by status.
    pub pending: i64,
    pub queued: i64,
    pub running: i64,
    pub retrying: i64,
    /// Seconds the longest-waiting `queued` run has waited since it became
    /// due; absent when none is queued.
    #[oai(skip_serializing_if_is_none)]
    pub oldest_queued_age_secs: Option<i64>,
}

/// Job runs that ended in one hour.
#[derive(Object, Clone, Debug)]
pub struct ThroughputPoint {
    /// The hour's start (UTC).
    pub hour: DateTime<Utc>,
    pub ended: i64,
    pub completed: i64,
    /// Failed or timed out.
    pub failed: i64,
}

/// Endings per hour over the period.
#[derive(Object, Clone, Debug)]
pub struct Throughput {
    /// Endings divided by the hours from `from` to `to`.
    pub ended_per_hour: f64,
    /// One point per hour from `from` to the current hour, oldest first.
    pub points: Vec<ThroughputPoint>,
}

/// A job among the slowest.
#[derive(Object, Clone, Debug)]
pub struct SlowJob {
    pub job_id: String,
    pub slug: String,
    pub name: String,
    /// Its runs that ended in the period.
    pub ended: i64,
    pub duration: DurationStats,
}

/// The answer of `GET /v1/analytics/performance`.
#[derive(Object, Clone, Debug)]
pub struct PerformanceAnalytics {
    pub project_id: String,
    pub period_hours: i64,
    /// Start of the period (see `WorkflowAnalyticsSummary.from`).
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub health: HealthSummary,
    pub throughput: Throughput,
    /// The jobs whose runs that ended in the period and started have the
    /// highest p95 duration (then p99, then job id), at most `top`.
    pub slowest_jobs: Vec<SlowJob>,
}

/// Usage figures: sums of the SDK's usage records (`POST
/// /sdk/v1/runs/{run_id}/usage`).
#[derive(Object, Clone, Debug, Default)]
pub struct UsageFigures {
    /// Usage records summed.
    pub records: i64,
    /// Micro-dollars.
    pub cost_microusd: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cpu_ms: i64,
}

impl UsageFigures {
    /// Saturating, as the sums in SQL are: a figure at bigint's largest
    /// value says "at least this much", never an error or a wrap.
    fn add(&mut self, u: &reports::JobUsage) {
        self.records = self.records.saturating_add(u.records);
        self.cost_microusd = self.cost_microusd.saturating_add(u.cost_microusd);
        self.tokens_in = self.tokens_in.saturating_add(u.tokens_in);
        self.tokens_out = self.tokens_out.saturating_add(u.tokens_out);
        self.cpu_ms = self.cpu_ms.saturating_add(u.cpu_ms);
    }
}

/// One job's usage in the month.
#[derive(Object, Clone, Debug)]
pub struct JobUsage {
    pub job_id: String,
    pub slug: String,
    pub name: String,
    #[oai(flatten)]
    pub usage: UsageFigures,
}

/// One project's usage in the month.
#[derive(Object, Clone, Debug)]
pub struct ProjectUsage {
    pub project_id: String,
    #[oai(flatten)]
    pub usage: UsageFigures,
    /// Each job with a usage record in the month, by id.
    pub jobs: Vec<JobUsage>,
}

/// The answer of `GET /v1/usage/projects`.
#[derive(Object, Clone, Debug)]
pub struct ProjectUsageReport {
    /// The billing period, `YYYY-MM`.
    pub period: String,
    /// The month's first instant (UTC).
    pub from: DateTime<Utc>,
    /// The next month's first instant (UTC); the month runs up to it.
    pub to: DateTime<Utc>,
    /// By project id.
    pub projects: Vec<ProjectUsage>,
}

/// A report's period: from the whole hour `hours` before the current one,
/// to now.
fn window(hours: Option<i64>) -> ApiResult<(i64, DateTime<Utc>, DateTime<Utc>)> {
    let hours = hours.unwrap_or(DEFAULT_PERIOD_HOURS);
    if !(1..=MAX_PERIOD_HOURS).contains(&hours) {
        let m = format!("must be between 1 and {MAX_PERIOD_HOURS}");
        return Err(ApiError::invalid_field("query.period_hours", m, Some(hours.into())));
    }
    let now = Utc::now();
    let hour = now.with_nanosecond(0).and_then(|t| t.with_second(0)).and_then(|t| t.with_minute(0)).unwrap_or(now);
    Ok((hours, hour - Duration::hours(hours), now))
}

/// The project of a report, which must exist (404 otherwise).
async fn report_project(state: &AppState, auth: &Auth, named: Option<&str>) -> ApiResult<String> {
    let project_id = project_of(&auth.0, "query", named)?;
    if !store::projects::exists(&state.pool, &project_id).await? {
        return Err(ApiError::not_found("project", &project_id));
    }
    Ok(project_id)
}

fn names(list: Vec<Named>) -> HashMap<String, Named> {
    list.into_iter().map(|n| (n.id.clone(), n)).collect()
}

/// The slug and name of `id` (empty when it is gone altogether).
fn name_of(names: &HashMap<String, Named>, id: &str) -> (String, String) {
    names.get(id).map(|n| (n.slug.clone(), n.name.clone())).unwrap_or_default()
}

#[OpenApi(tag = "Tag::Analytics")]
impl AnalyticsApi {
    /// Workflow runs of a project over a period: how many ended, by status,
    /// success and failure rates and duration percentiles, in total and
    /// per workflow, with the runs unfinished now.
    ///
    /// The period starts at the whole hour (UTC) `period_hours` before the
    /// current one and ends now. Figures are exact: the hours folded into
    /// the rollup each minute, and the runs that ended since, read from
    /// the runs. A project with no runs gets zeros.
    #[oai(path = "/v1/analytics/workflows/summary", method = "get", operation_id = "getWorkflowAnalyticsSummary")]
    async fn workflows_summary(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        /// The project (a key's own project when omitted).
        project_id: Query<Option<String>>,
        /// Hours before the current one the period covers (default 24).
        #[oai(validator(minimum(value = "1"), maximum(value = "720")))]
        period_hours: Query<Option<i64>>,
    ) -> ApiResult<Json<WorkflowAnalyticsSummary>> {
        let (hours, from, to) = window(period_hours.0)?;
        let project_id = report_project(&state, &auth, project_id.0.as_deref()).await?;
        let started = Instant::now();
        let rows = reports::workflow_hours(&state.pool, &project_id, from).await?;
        let active_rows = reports::active_workflow_runs(&state.pool, &project_id).await?;
        let names = names(reports::workflow_names(&state.pool, &project_id).await?);
        let mut per: BTreeMap<String, (Tally, ActiveWorkflowRuns)> = BTreeMap::new();
        let mut totals = Tally::default();
        let mut active = ActiveWorkflowRuns::default();
        for h in &rows {
            totals.add_workflow_hour(h);
            per.entry(h.workflow_id.clone()).or_default().0.add_workflow_hour(h);
        }
        for (workflow_id, status, n) in active_rows {
            active.add(&status, n);
            per.entry(workflow_id).or_default().1.add(&status, n);
        }
        let workflows = per
            .into_iter()
            .map(|(workflow_id, (t, active))| {
                let (slug, name) = name_of(&names, &workflow_id);
                WorkflowAnalytics { slug, name, outcomes: outcomes(t, false), active, workflow_id }
            })
            .collect();
        let totals = outcomes(totals, false);
        switchyard_shared::telemetry::analytics_query(hours, started.elapsed());
        Ok(Json(WorkflowAnalyticsSummary { project_id, period_hours: hours, from, to, totals, active, workflows }))
    }

    /// Job runs of a project over a period, per job version: how many
    /// ended, by status, success and failure rates and duration
    /// percentiles.
    ///
    /// The period is as in `getWorkflowAnalyticsSummary`. Only versions
    /// with a run that ended in the period are listed.
    #[oai(path = "/v1/analytics/jobs/by-version", method = "get", operation_id = "getJobAnalyticsByVersion")]
    async fn jobs_by_version(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        /// The project (a key's own project when omitted).
        project_id: Query<Option<String>>,
        /// Only this job's versions.
        job_id: Query<Option<String>>,
        /// Hours before the current one the period covers (default 24).
        #[oai(validator(minimum(value = "1"), maximum(value = "720")))]
        period_hours: Query<Option<i64>>,
    ) -> ApiResult<Json<JobAnalyticsByVersion>> {
        let (hours, from, to) = window(period_hours.0)?;
        let project_id = report_project(&state, &auth, project_id.0.as_deref()).await?;
        let started = Instant::now();
        let rows = reports::job_hours(&state.pool, &project_id, from).await?;
        let names = names(reports::job_names(&state.pool, Some(&project_id)).await?);
        let mut per: BTreeMap<(String, std::cmp::Reverse<i32>), (String, Tally)> = BTreeMap::new();
        for h in rows.iter().filter(|h| job_id.0.as_deref().is_none_or(|j| j == h.job_id)) {
            let e = per.entry((h.job_id.clone(), std::cmp::Reverse(h.job_version))).or_default();
            e.0.clone_from(&h.job_version_id);
            e.1.add_job_hour(h);
        }
        let versions = per
            .into_iter()
            .map(|((job_id, version), (job_version_id, t))| {
                let (job_slug, job_name) = name_of(&names, &job_id);
                JobVersionAnalytics {
                    job_slug,
                    job_name,
                    job_version: version.0,
                    job_version_id,
                    outcomes: outcomes(t, true),
                    job_id,
                }
            })
            .collect();
        switchyard_shared::telemetry::analytics_query(hours, started.elapsed());
        Ok(Json(JobAnalyticsByVersion { project_id, period_hours: hours, from, to, versions }))
    }

    /// Performance of a project's jobs over a period: the slowest jobs (by
    /// p95 duration), throughput per hour, and a health summary (what
    /// ended, and the unfinished runs now).
    ///
    /// The period is as in `getWorkflowAnalyticsSummary`.
    #[oai(path = "/v1/analytics/performance", method = "get", operation_id = "getPerformanceAnalytics")]
    async fn performance(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        /// The project (a key's own project when omitted).
        project_id: Query<Option<String>>,
        /// Hours before the current one the period covers (default 24).
        #[oai(validator(minimum(value = "1"), maximum(value = "720")))]
        period_hours: Query<Option<i64>>,
        /// How many of the slowest jobs to list (default 10).
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))]
        top: Query<Option<i64>>,
    ) -> ApiResult<Json<PerformanceAnalytics>> {
        let (hours, from, to) = window(period_hours.0)?;
        let top = top.0.unwrap_or(DEFAULT_TOP).clamp(1, MAX_TOP) as usize;
        let project_id = report_project(&state, &auth, project_id.0.as_deref()).await?;
        let started = Instant::now();
        let rows = reports::job_hours(&state.pool, &project_id, from).await?;
        let backlog = stats::backlog(&state.pool, &project_id).await?;
        let names = names(reports::job_names(&state.pool, Some(&project_id)).await?);
        let mut totals = Tally::default();
        let mut per_job: BTreeMap<String, Tally> = BTreeMap::new();
        let mut per_hour: BTreeMap<DateTime<Utc>, (i64, i64, i64)> = BTreeMap::new();
        for h in &rows {
            totals.add_job_hour(h);
            per_job.entry(h.job_id.clone()).or_default().add_job_hour(h);
            let p = per_hour.entry(h.hour).or_default();
            p.0 += i64::from(h.completed + h.failed + h.timed_out + h.cancelled + h.expired);
            p.1 += i64::from(h.completed);
            p.2 += i64::from(h.failed + h.timed_out);
        }
        let points = (0..=hours)
            .map(|i| {
                let hour = from + Duration::hours(i);
                let (ended, completed, failed) = per_hour.get(&hour).copied().unwrap_or_default();
                ThroughputPoint { hour, ended, completed, failed }
            })
            .collect();
        let elapsed_hours = (to - from).num_milliseconds() as f64 / 3_600_000.0;
        let throughput = Throughput { ended_per_hour: totals.ended() as f64 / elapsed_hours, points };
        let mut slowest: Vec<SlowJob> = per_job
            .into_iter()
            .filter(|(_, t)| !t.durations_ms.is_empty())
            .map(|(job_id, mut t)| {
                let (slug, name) = name_of(&names, &job_id);
                SlowJob { slug, name, ended: t.ended(), duration: t.percentiles().into(), job_id }
            })
            .collect();
        slowest.sort_by(|a, b| {
            (b.duration.p95_ms, b.duration.p99_ms)
                .cmp(&(a.duration.p95_ms, a.duration.p99_ms))
                .then(a.job_id.cmp(&b.job_id))
        });
        slowest.truncate(top);
        let now = Utc::now();
        let health = HealthSummary {
            outcomes: outcomes(totals, true),
            pending: backlog.iter().map(|j| j.pending).sum(),
            queued: backlog.iter().map(|j| j.queued).sum(),
            running: backlog.iter().map(|j| j.running).sum(),
            retrying: backlog.iter().map(|j| j.retrying).sum(),
            oldest_queued_age_secs: backlog
                .iter()
                .filter_map(|j| j.oldest_queued_at)
                .min()
                .map(|t| (now - t).num_seconds().max(0)),
        };
        switchyard_shared::telemetry::analytics_query(hours, started.elapsed());
        Ok(Json(PerformanceAnalytics {
            project_id,
            period_hours: hours,
            from,
            to,
            health,
            throughput,
            slowest_jobs: slowest,
        }))
    }
}

/// The month `period` names (`YYYY-MM`), or the current one: its first
/// instant and the next month's.
fn billing_month(period: Option<&str>) -> ApiResult<(String, DateTime<Utc>, DateTime<Utc>)> {
    let now = Utc::now();
    let (y, m) = match period {
        None => (now.year(), now.month()),
        Some(p) => {
            let parsed = p.split_once('-').and_then(|(y, m)| Some((y.parse::<i32>().ok()?, m.parse::<u32>().ok()?)));
            match parsed {
                Some((y, m)) if p.len() == 7 && (1..=12).contains(&m) => (y, m),
                _ => {
                    return Err(ApiError::invalid_field("query.period", "a month, YYYY-MM", Some(p.into())));
                }
            }
        }
    };
    let first = |y: i32, m: u32| NaiveDate::from_ymd_opt(y, m, 1).map(|d| Utc.from_utc_datetime(&d.into()));
    let next = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    match (first(y, m), first(next.0, next.1)) {
        (Some(from), Some(to)) => Ok((format!("{y:04}-{m:02}"), from, to)),
        _ => Err(ApiError::invalid_field("query.period", "a month, YYYY-MM", period.map(Into::into))),
    }
}

#[OpenApi(tag = "Tag::Usage")]
impl UsageApi {
    /// Cost, tokens and CPU per project for a billing period (a calendar
    /// month, UTC), broken down by job: the sums of the usage records runs
    /// reported over the SDK in that month.
    ///
    /// Only projects the caller may read: a key or token its own project;
    /// the internal secret the one it names, or every project with usage
    /// in the month when it names none. A named project is listed even
    /// with no usage (zeros). Monthly sums are kept 13 months, longer than
    /// the runs they came from.
    #[oai(path = "/v1/usage/projects", method = "get", operation_id = "getProjectUsage")]
    async fn projects(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        /// The project (a key's own project when omitted).
        project_id: Query<Option<String>>,
        /// The month, `YYYY-MM` (default: the current month, UTC).
        #[oai(validator(pattern = "^[0-9]{4}-(0[1-9]|1[0-2])$"))]
        period: Query<Option<String>>,
    ) -> ApiResult<Json<ProjectUsageReport>> {
        let (period, from, to) = billing_month(period.0.as_deref())?;
        let named = project_id.0.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let project = match (auth.0.scopes.is_none(), named, auth.0.project_id.as_deref()) {
            (true, None, None) => None,
            _ => Some(report_project(&state, &auth, named).await?),
        };
        let rows = reports::usage(&state.pool, project.as_deref(), from, to).await?;
        let names = names(reports::job_names(&state.pool, project.as_deref()).await?);
        let mut projects: BTreeMap<String, ProjectUsage> = BTreeMap::new();
        if let Some(p) = &project {
            projects.insert(
                p.clone(),
                ProjectUsage { project_id: p.clone(), usage: UsageFigures::default(), jobs: vec![] },
            );
        }
        for r in &rows {
            let p = projects.entry(r.project_id.clone()).or_insert_with(|| ProjectUsage {
                project_id: r.project_id.clone(),
                usage: UsageFigures::default(),
                jobs: vec![],
            });
            p.usage.add(r);
            let (slug, name) = name_of(&names, &r.job_id);
            let mut usage = UsageFigures::default();
            usage.add(r);
            p.jobs.push(JobUsage { job_id: r.job_id.clone(), slug, name, usage });
        }
        Ok(Json(ProjectUsageReport { period, from, to, projects: projects.into_values().collect() }))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The bounds the document states (validator attributes cannot name a
    /// constant) are the constants the handlers read.
    #[test]
    fn stated_bounds_are_the_constants() {
        let doc = crate::openapi_value();
        let mut seen = 0;
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                for p in op["parameters"].as_array().into_iter().flatten() {
                    let s = &p["schema"];
                    let bounds = (s["minimum"].as_f64(), s["maximum"].as_f64());
                    match p["name"].as_str() {
                        Some("period_hours") => {
                            assert_eq!(bounds, (Some(1.0), Some(MAX_PERIOD_HOURS as f64)));
                            seen += 1;
                        }
                        Some("top") => assert_eq!(bounds, (Some(1.0), Some(MAX_TOP as f64))),
                        Some("period") if op["operationId"] == "getProjectUsage" => {
                            assert_eq!(s["pattern"], Value::from(BILLING_PERIOD_PATTERN));
                        }
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(seen, 3);
    }

    #[test]
    fn a_billing_month_runs_to_the_next_months_start() {
        let (p, from, to) = billing_month(Some("2024-12")).unwrap();
        assert_eq!(
            (p.as_str(), from.to_rfc3339(), to.to_rfc3339()),
            ("2024-12", "2024-12-01T00:00:00+00:00".into(), "2025-01-01T00:00:00+00:00".into())
        );
        assert!(billing_month(Some("2024-13")).is_err());
        assert!(billing_month(Some("24-01")).is_err());
        let (p, ..) = billing_month(None).unwrap();
        assert_eq!(p, Utc::now().format("%Y-%m").to_string());
    }

    #[test]
    fn a_period_starts_on_a_whole_hour_and_is_bounded() {
        let (h, from, to) = window(None).unwrap();
        assert_eq!(h, DEFAULT_PERIOD_HOURS);
        assert_eq!(from.timestamp() % 3600, 0);
        assert!(to - from >= Duration::hours(24) && to - from < Duration::hours(25));
        assert!(window(Some(0)).is_err() && window(Some(MAX_PERIOD_HOURS + 1)).is_err());
    }
}
