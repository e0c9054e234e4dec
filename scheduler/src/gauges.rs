//! The queue gauges: per job, how many runs are `queued` and how long the
//! oldest of them has waited (`svc_queue_depth`,
//! `svc_queue_oldest_age_seconds`, labels `project_id` and `job_id`), for
//! dashboards and autoscalers (docs/monitoring.md).
//!
//! Counted from Postgres, the record of every status, every `interval`
//! (default 15 s, a usual scrape interval) with one grouped query over the
//! unfinished runs (`store::stats::queued_by_job`); the dequeue path is not
//! touched. Every scheduler process counts and exports the same values, so
//! queries take `max by (project_id, job_id)` rather than a sum. A job whose
//! queue emptied reads 0 for ten minutes (`telemetry::QUEUE_SERIES_LINGER`),
//! then is no longer exported.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::stats;
use switchyard_shared::telemetry;

use crate::alarm::Alarm;
use crate::error::{check_positive, Error, OptionsError};
use crate::pace::{self, Next, Pacing};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GaugeOptions {
    /// Time between two counts (default 15 s).
    pub interval: Duration,
}

impl Default for GaugeOptions {
    fn default() -> Self {
        GaugeOptions { interval: Duration::from_secs(15) }
    }
}

impl GaugeOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("gauges.interval", self.interval)
    }
}

/// What one count saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GaugeReport {
    /// Jobs with queued runs.
    pub jobs: usize,
    /// Queued runs over all of them.
    pub queued: i64,
}

#[derive(Clone)]
pub struct QueueGauges {
    pool: PgPool,
    opts: GaugeOptions,
    /// (project_id, job_id) of every series this process exports: those
    /// missing from a count go to 0, then away.
    seen: Arc<Mutex<HashSet<(String, String)>>>,
    alarm: Arc<Alarm>,
}

impl QueueGauges {
    pub fn new(pool: PgPool, opts: GaugeOptions) -> Result<QueueGauges, OptionsError> {
        opts.validate()?;
        Ok(QueueGauges { pool, opts, seen: Arc::default(), alarm: Arc::default() })
    }

    /// Counts once and sets the gauges, ages as of `now`.
    pub async fn measure_once(&self, now: DateTime<Utc>) -> Result<GaugeReport, Error> {
        let rows = stats::queued_by_job(&self.pool).await?;
        let mut report = GaugeReport::default();
        let mut current = HashSet::with_capacity(rows.len());
        for r in rows {
            let age = r.oldest_queued_at.map(|t| age_secs(now, t)).unwrap_or(0.0);
            telemetry::set_queue_gauges(&r.project_id, &r.job_id, r.queued as f64, age);
            report.jobs += 1;
            report.queued += r.queued;
            current.insert((r.project_id, r.job_id));
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.retain(|(p, j)| current.contains(&(p.clone(), j.clone())) || !telemetry::empty_queue_gauges(p, j, now));
        seen.extend(current);
        Ok(report)
    }

    async fn pass(&self) -> Result<Next, Error> {
        self.measure_once(Utc::now()).await?;
        Ok(Next::Idle)
    }

    /// Counts every `interval` until shutdown.
    pub async fn run(&self, shutdown: Shutdown) {
        let pacing = Pacing { min_gap: self.opts.interval, max_sleep: self.opts.interval };
        pace::paced_passes("queue gauges", pacing, &self.alarm, &shutdown, || self.pass()).await
    }
}

/// Seconds from `since` to `now`, never negative (a due time a clock skew
/// puts in the future counts as just due).
fn age_secs(now: DateTime<Utc>, since: DateTime<Utc>) -> f64 {
    ((now - since).num_milliseconds().max(0) as f64) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_age_is_never_negative() {
        let t = Utc::now();
        assert_eq!(age_secs(t, t - chrono::Duration::milliseconds(2500)), 2.5);
        assert_eq!(age_secs(t, t + chrono::Duration::seconds(3)), 0.0);
    }

    #[test]
    fn the_interval_must_be_positive() {
        assert!(GaugeOptions { interval: Duration::ZERO }.validate().is_err());
        assert!(GaugeOptions::default().validate().is_ok());
    }
}
