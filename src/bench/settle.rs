//! Waiting for a phase's runs to end: first on the target's request count
//! (free to read), then on Postgres, until no run of the phase's job is open.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::system::System;

/// A phase gives up when the target has seen no new request for this long.
const STALL: Duration = Duration::from_secs(20);

#[derive(Debug)]
pub struct Settled {
    /// Runs of the job still without `finished_at`.
    pub open: i64,
    pub last_finished: Option<DateTime<Utc>>,
    pub timed_out: bool,
}

/// Waits until the target has received `hits_goal` requests in all and the
/// job has `expected` runs, none open; or until `deadline`, or a stall.
pub async fn settle(
    sys: &System,
    job: &str,
    expected: usize,
    hits_goal: usize,
    deadline: Instant,
) -> anyhow::Result<Settled> {
    let mut progress = (sys.target().count(), Instant::now());
    loop {
        let n = sys.target().count();
        if n != progress.0 {
            progress = (n, Instant::now());
        }
        let give_up = Instant::now() > deadline || progress.1.elapsed() > STALL;
        if n >= hits_goal || give_up {
            let (open, total, last_finished): (i64, i64, Option<DateTime<Utc>>) = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE finished_at IS NULL), count(*), max(finished_at)
                 FROM job_runs WHERE job_id = $1",
            )
            .bind(job)
            .fetch_one(sys.pool())
            .await?;
            if (open == 0 && total >= expected as i64) || give_up {
                return Ok(Settled { open, last_finished, timed_out: open > 0 || total < expected as i64 });
            }
        }
        tokio::time::sleep(Duration::from_millis(if n >= hits_goal { 20 } else { 10 })).await;
    }
}
