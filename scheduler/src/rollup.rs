//! The rollup loop: once a minute, folds what ended (job runs, workflow
//! runs) and the usage recorded since the last pass into the reports'
//! hourly rollups and the queue history, and samples every job's
//! unfinished runs (`store::analytics::roll_up`; migration 0018 says why).
//!
//! A pass stops `grace` short of now, so that a run whose end is being
//! committed as the pass reads is folded next time rather than missed; a
//! report reads the runs after the watermark itself, so the figures are
//! whole either way. Behind (the first pass over an existing history, or
//! after the scheduler was down), a pass folds at most `max_span` and the
//! next one follows at once. Passes serialize on the watermark row in
//! Postgres, so any number of schedulers may run the loop; a second one
//! only finds less to do.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::analytics::{self, RollupReport};

use crate::alarm::Alarm;
use crate::error::{check_positive, Error, OptionsError};
use crate::pace::{self, Next, Pacing};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollupOptions {
    /// Time between passes (default 1 min: the queue history's resolution).
    pub interval: Duration,
    /// How far behind now a pass stops (default 1 min).
    pub grace: Duration,
    /// The most one pass folds in (default 6 h of endings).
    pub max_span: Duration,
}

impl Default for RollupOptions {
    fn default() -> Self {
        RollupOptions {
            interval: Duration::from_secs(60),
            grace: Duration::from_secs(60),
            max_span: Duration::from_secs(6 * 3600),
        }
    }
}

impl RollupOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("rollup.interval", self.interval)?;
        check_positive("rollup.max_span", self.max_span)
    }
}

#[derive(Clone)]
pub struct Rollup {
    pool: PgPool,
    opts: RollupOptions,
    alarm: Arc<Alarm>,
}

impl Rollup {
    pub fn new(pool: PgPool, opts: RollupOptions) -> Result<Rollup, OptionsError> {
        opts.validate()?;
        Ok(Rollup { pool, opts, alarm: Arc::default() })
    }

    /// One pass now.
    pub async fn roll_up_once(&self) -> Result<RollupReport, Error> {
        Ok(analytics::roll_up(&self.pool, Utc::now(), self.opts.grace, self.opts.max_span).await?)
    }

    async fn pass(&self) -> Result<Next, Error> {
        let r = self.roll_up_once().await?;
        if let Some((from, upto)) = r.span.filter(|_| !r.caught_up) {
            tracing::info!(%from, %upto, runs = r.runs, "analytics rollup catching up");
            return Ok(Next::Now);
        }
        Ok(Next::Idle)
    }

    /// Passes every `interval` until shutdown.
    pub async fn run(&self, shutdown: Shutdown) {
        let pacing = Pacing { min_gap: Duration::ZERO, max_sleep: self.opts.interval };
        pace::paced_passes("analytics rollup pass", pacing, &self.alarm, &shutdown, || self.pass()).await
    }
}
