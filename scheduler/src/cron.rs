//! The cron enqueuer: makes the runs of jobs and workflows that have a
//! `cron` schedule. Workflows follow the rules below as jobs do (their
//! `cron_since` is migration 0010's), and a tick of a workflow with
//! skip_if_running while one of its runs is active makes no run: the
//! active run records the skipped tick (`explain`).
//!
//! Each pass reads every live, enabled, unpaused job with a schedule and,
//! at `now`, finds its ticks (in the job's `timezone`, with the
//! daylight-saving policy of
//! [`schedule`](switchyard_shared::domain::schedule): a skipped local time
//! fires once at the transition, a repeated one once) that are later than
//! both the job's `cron_since` and the last tick it already has a run for,
//! and makes a run (triggered_by `cron`, no payload) for each tick it fires
//! ([`due_ticks`]).
//!
//! - **Exactly once per tick.** The run carries `cron_tick`, unique per job
//!   in Postgres, so any number of schedulers racing on one tick insert one
//!   run; the losers find it and do nothing.
//! - **Late ticks.** A tick up to `max_lateness` (default 10 s) old still
//!   fires, each one: a busy or restarting scheduler delays ticks, it does
//!   not lose them.
//! - **Missed ticks.** Ticks missed for longer (no scheduler ran) fire at
//!   most one catch-up run, for the latest of them, when a scheduler is back
//!   and no tick within `max_lateness` is due; the schedule then resumes.
//!   The other missed ticks are skipped.
//! - **Not active, not fired.** Disabled, paused (group pause-all) and
//!   deleted jobs are not read. Enabling, resuming or changing the schedule
//!   moves `cron_since` to that moment (a trigger in migration 0004), so the
//!   ticks of the inactive period are not caught up.
//! - **Windows, TTL.** A cron run is admitted like any other run: outside
//!   the job's execution window it waits as `pending`; run_ttl_secs counts
//!   from the tick's firing. Payload dedup does not apply (each tick is its
//!   own run) and there is no payload to check against payload_schema.
//!
//! A pass sleeps until the earliest next tick of all jobs, between
//! `min_sleep` and `max_sleep`: with no cron job it reads Postgres once per
//! `max_sleep`. The api publishes a wake-up (`Queue::wake`) when a job with
//! a schedule is created, changed or resumed, so its first tick is not
//! missed; `max_sleep` bounds how late it is noticed when that is lost.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use sqlx::PgPool;
use switchyard_shared::domain::schedule::{self, CronSchedule};
use switchyard_shared::domain::RunStatus;
use switchyard_shared::queue::{Queue, WakeLoop};
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::flow::{self, CreateOptions, CronJob, Gated};
use switchyard_shared::store::one_per_key::Gate;
use switchyard_shared::store::transitions;
use switchyard_shared::store::workflow_engine::Versions;
use switchyard_shared::store::workflow_moves;
use switchyard_shared::store::workflow_runs::{self, NewWorkflowRun, Triggered};
use switchyard_shared::store::{runs, workflows, NewRun, Tenant};

use crate::alarm::Alarm;
use crate::error::{check_batch, check_max_sleep, check_positive, Error, OptionsError};
use crate::pace::{self, Next, Pacing};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronOptions {
    /// Longest sleep between passes (default 30 s): bounds the delay when
    /// a wake-up is lost.
    pub max_sleep: Duration,
    /// Least time between passes (default 50 ms).
    pub min_sleep: Duration,
    /// Jobs read per query (default 500).
    pub page_size: usize,
    /// How late a tick may be and still fire as itself (default 10 s); older
    /// missed ticks collapse into one catch-up run.
    pub max_lateness: Duration,
}

impl Default for CronOptions {
    fn default() -> Self {
        CronOptions {
            max_sleep: Duration::from_secs(30),
            min_sleep: Duration::from_millis(50),
            page_size: 500,
            max_lateness: Duration::from_secs(10),
        }
    }
}

impl CronOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("cron.min_sleep", self.min_sleep)?;
        check_max_sleep("cron.max_sleep", self.max_sleep, "cron.min_sleep", self.min_sleep)?;
        if self.max_lateness > Duration::from_secs(3600) {
            return Err(OptionsError::new("cron.max_lateness", "must be at most an hour"));
        }
        check_batch("cron.page_size", self.page_size)
    }
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CronReport {
    /// Jobs with a schedule looked at.
    pub jobs: usize,
    /// Runs made by this pass.
    pub fired: usize,
    /// Ticks another scheduler had already made a run for.
    pub already_fired: usize,
    /// Workflows with a schedule looked at.
    pub workflows: usize,
    /// Workflow ticks skipped (skip_if_running with a run active).
    pub skipped: usize,
    /// The earliest tick after `now` of all jobs.
    pub next_tick: Option<DateTime<Utc>>,
}

/// Most late ticks of one job fired by one pass.
const MAX_LATE_TICKS: usize = 1000;

/// The ticks a job fires at `now`, oldest first: those later than both
/// `since` and `last` and at most `max_lateness` old; when there is none
/// such but older ones were missed, the latest of those (the catch-up).
pub fn due_ticks(
    schedule: &CronSchedule,
    since: DateTime<Utc>,
    last: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    max_lateness: Duration,
) -> Vec<DateTime<Utc>> {
    let bound = last.map_or(since, |l| l.max(since));
    let lateness = chrono::Duration::from_std(max_lateness).unwrap_or(chrono::Duration::zero());
    let recent = schedule.ticks_in(bound.max(now - lateness - chrono::Duration::milliseconds(1)), now, MAX_LATE_TICKS);
    if !recent.is_empty() {
        return recent;
    }
    schedule.latest_at_or_before(now).filter(|t| *t > bound).into_iter().collect()
}

#[derive(Clone)]
pub struct CronEnqueuer {
    pool: PgPool,
    queue: Queue,
    opts: CronOptions,
    alarm: Arc<Alarm>,
    /// Workflow versions' steps, for the first pass of a run a tick starts.
    versions: Arc<Versions>,
}

impl CronEnqueuer {
    pub fn new(pool: PgPool, queue: Queue, opts: CronOptions) -> Result<CronEnqueuer, OptionsError> {
        opts.validate()?;
        Ok(CronEnqueuer { pool, queue, opts, alarm: Arc::default(), versions: Arc::default() })
    }

    /// What brings the next pass forward (rung by the wake-up listener).
    pub fn alarm(&self) -> &Arc<Alarm> {
        &self.alarm
    }

    pub fn options(&self) -> &CronOptions {
        &self.opts
    }

    /// One pass at `now` (see the module doc).
    pub async fn tick_once(&self, now: DateTime<Utc>) -> Result<CronReport, Error> {
        let mut report = CronReport::default();
        let mut after = String::new();
        loop {
            let jobs = flow::cron_jobs_page(&self.pool, &after, self.opts.page_size as i64).await?;
            for job in &jobs {
                report.jobs += 1;
                let spec = &job.spec.0;
                let Some(expr) = spec.cron.as_deref() else { continue };
                let sched = match CronSchedule::parse(expr, spec.timezone.as_deref()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(job_id = %job.id, error = %e, "job has an unusable cron schedule; skipped");
                        continue;
                    }
                };
                for tick in due_ticks(&sched, job.cron_since, job.last_tick, now, self.opts.max_lateness) {
                    if self.fire(job, tick, now).await? {
                        report.fired += 1;
                    } else {
                        report.already_fired += 1;
                    }
                }
                if let Some(next) = sched.next_after(now) {
                    report.next_tick = Some(report.next_tick.map_or(next, |n| n.min(next)));
                }
            }
            match jobs.last() {
                Some(last) if jobs.len() == self.opts.page_size => after = last.id.to_string(),
                _ => break,
            }
        }
        self.workflow_ticks(now, &mut report).await?;
        if report.fired > 0 {
            tracing::debug!(fired = report.fired, "fired cron ticks");
        }
        Ok(report)
    }

    /// The same pass over workflows with a schedule: a tick makes a run
    /// (triggered_by `cron`), once however many schedulers race for it; a
    /// tick of a workflow with skip_if_running and an active run is
    /// skipped, and the active run records why.
    async fn workflow_ticks(&self, now: DateTime<Utc>, report: &mut CronReport) -> Result<(), Error> {
        let mut after = String::new();
        loop {
            let page = workflow_runs::cron_page(&self.pool, &after, self.opts.page_size as i64).await?;
            for w in &page {
                report.workflows += 1;
                let sched = match CronSchedule::parse(&w.cron, w.cron_timezone.as_deref()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(workflow_id = %w.id, error = %e, "workflow has an unusable cron schedule; skipped");
                        continue;
                    }
                };
                for tick in due_ticks(&sched, w.cron_since, w.last_tick, now, self.opts.max_lateness) {
                    let Some(wf) = workflows::get(&self.pool, Tenant::Any, &w.id.as_str().into()).await? else { break };
                    let new = NewWorkflowRun {
                        triggered_by: "cron".into(),
                        created_by: Some("cron".into()),
                        cron_tick: Some(tick),
                        ..NewWorkflowRun::default()
                    };
                    match workflow_moves::trigger(&self.pool, &self.queue, &self.versions, &wf, &new).await? {
                        Triggered::Created(run) => {
                            tracing::info!(workflow_id = %w.id, workflow_run_id = %run.id, tick = %tick, "workflow cron tick fired");
                            report.fired += 1;
                        }
                        Triggered::Existing(_) => report.already_fired += 1,
                        Triggered::Skipped { active_run_id } => {
                            tracing::info!(workflow_id = %w.id, %active_run_id, tick = %tick, "workflow cron tick skipped: a run is active (skip_if_running)");
                            report.skipped += 1;
                        }
                    }
                }
                if let Some(next) = sched.next_after(now) {
                    report.next_tick = Some(report.next_tick.map_or(next, |n| n.min(next)));
                }
            }
            match page.last() {
                Some(last) if page.len() == self.opts.page_size => after = last.id.clone(),
                _ => return Ok(()),
            }
        }
    }

    /// Makes the run of `tick`; false when one exists already.
    async fn fire(&self, job: &CronJob, tick: DateTime<Utc>, now: DateTime<Utc>) -> Result<bool, Error> {
        let spec = &job.spec.0;
        let admitted = match schedule::admission(spec, now, None, false) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(job_id = %job.id, error = %e, "cron tick not fired");
                return Ok(false);
            }
        };
        let metadata: Map<String, Value> =
            spec.default_run_metadata.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        let new = NewRun {
            id: switchyard_shared::ids::run_id(),
            project_id: job.project_id.clone(),
            job_id: job.id.clone(),
            job_version: job.version,
            job_version_id: job.version_id.clone(),
            status: admitted.status,
            triggered_by: "cron".into(),
            created_by: Some("cron".into()),
            execution_mode: "sync".into(),
            metadata: Value::Object(metadata),
            tags: Value::Object(Map::new()),
            scheduled_at: admitted.scheduled_at,
            expires_at: admitted.expires_at,
            cron_tick: Some(tick),
            ..NewRun::default()
        };
        // A singleton holds its cron ticks too: the common case of "never
        // two of this schedule at once".
        let (run, created) = match spec.singleton.as_ref().and_then(|_| Gate::of(spec, None).ok().flatten()) {
            None => runs::insert(&self.pool, &new).await?,
            Some(gate) => {
                let opts = CreateOptions { gate: Some(gate), ..CreateOptions::default() };
                let (made, replaced) = flow::create(&self.pool, new, &opts).await?;
                transitions::drop_entries(&self.queue, &replaced).await;
                if made.gated == Some(Gated::Skipped) {
                    tracing::info!(job_id = %job.id, run_id = %made.run.id, tick = %tick,
                        "cron tick skipped: the singleton's run is unfinished");
                }
                (made.run, made.created)
            }
        };
        if !created {
            return Ok(false);
        }
        tracing::info!(job_id = %job.id, run_id = %run.id, tick = %tick, "cron tick fired");
        if run.expires_at.is_some() {
            self.queue.wake(WakeLoop::Expirer, run.expires_at);
        }
        let due_ms = match admitted.status {
            RunStatus::Pending => admitted.scheduled_at.map_or(0, |t| t.timestamp_millis()),
            _ => 0,
        };
        // A Redis outage leaves the run to the reconciler: it is durable.
        if let Err(e) = self.queue.enqueue(&run.entry(), due_ms, now.timestamp_millis()).await {
            tracing::warn!(run_id = %run.id, error = %e, "enqueue of a cron run failed; the reconciler will");
        }
        Ok(true)
    }

    /// Runs passes until shutdown, each at the next tick of any job (see
    /// the module doc).
    pub async fn run(&self, shutdown: Shutdown) {
        let pacing = Pacing { min_gap: self.opts.min_sleep, max_sleep: self.opts.max_sleep };
        pace::paced_passes("cron pass", pacing, &self.alarm, &shutdown, || async {
            let report = self.tick_once(Utc::now()).await?;
            Ok::<_, Error>(report.next_tick.map_or(Next::Idle, Next::At))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn late_ticks_fire_missed_ones_collapse_and_nothing_before_since() {
        let lateness = Duration::from_secs(10);
        let every_min = CronSchedule::parse("* * * * *", None).unwrap();
        let since = utc("2027-01-01T10:00:30Z");
        // Ten ticks missed: only the latest fires.
        let t = |s| utc(s);
        assert_eq!(
            due_ticks(&every_min, since, None, t("2027-01-01T10:10:20Z"), lateness),
            [t("2027-01-01T10:10:00Z")]
        );
        assert!(due_ticks(&every_min, since, Some(t("2027-01-01T10:10:00Z")), t("2027-01-01T10:10:50Z"), lateness)
            .is_empty());
        assert!(
            due_ticks(&every_min, since, None, t("2027-01-01T10:00:50Z"), lateness).is_empty(),
            "10:00 predates the job"
        );
        // A pass three seconds late fires each of the three seconds.
        let every_sec = CronSchedule::parse("* * * * * *", None).unwrap();
        let last = Some(t("2027-01-01T10:00:00Z"));
        assert_eq!(
            due_ticks(&every_sec, since - chrono::Duration::hours(1), last, t("2027-01-01T10:00:03.5Z"), lateness),
            [t("2027-01-01T10:00:01Z"), t("2027-01-01T10:00:02Z"), t("2027-01-01T10:00:03Z")]
        );
        // A minute without a scheduler: the last ten seconds fire, no older catch-up.
        let got = due_ticks(&every_sec, since - chrono::Duration::hours(1), last, t("2027-01-01T10:01:00Z"), lateness);
        assert_eq!((got.len(), got[0]), (11, t("2027-01-01T10:00:50Z")));
    }

    #[test]
    fn options_are_validated() {
        assert!(CronOptions::default().validate().is_ok());
        let e = CronOptions { min_sleep: Duration::ZERO, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "cron.min_sleep");
        let e = CronOptions { max_sleep: Duration::from_millis(1), ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "cron.max_sleep");
        let e = CronOptions { max_lateness: Duration::from_secs(7200), ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "cron.max_lateness");
    }
}
