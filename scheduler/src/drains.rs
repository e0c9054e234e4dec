//! The log drain sender: ships each enabled drain's new run log lines to
//! its receiver as newline-delimited JSON (docs/notifications.md, "Log
//! drains").
//!
//! ```text
//! claim due drain ─► read ≤ batch_size lines after cursor ─► none: release
//!                     └ full batch and backlog > max_backlog: skip the oldest (lines_dropped)
//!                  ─► POST ─► 2xx: cursor = last line, due again at once
//!                          └► else: cursor stays, last_error, due after the back-off
//! ```
//!
//! Delivery is at least once: a batch whose answer is lost, or whose
//! claim ran out before the cursor moved, is sent again, under the same
//! `X-Svc-Drain-Batch` (first..last line id) so receivers can drop repeats.
//! Memory is one batch per claimed drain; the lines wait in Postgres.
//!
//! Safe with any number of schedulers: a drain is claimed with `FOR UPDATE
//! SKIP LOCKED` until `claimed_until`, and every write is fenced by it
//! (`store::log_drains`). With no drain due, a pass is one statement.

use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use sqlx::PgPool;
use switchyard_shared::config::Secret;
use switchyard_shared::outbound::client::error_chain;
use switchyard_shared::outbound::{signing, target, Http, TargetError};
use switchyard_shared::secrets::{self, SecretsKey};
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::log_drains::{self, Claimed, DrainLine};
use switchyard_shared::telemetry::{LOG_DRAIN_LINES_DROPPED, LOG_DRAIN_LINES_SENT};

use crate::alarm::Alarm;
use crate::error::{check_batch, check_max_sleep, check_positive, Error, OptionsError};
use crate::pace::{self, Next, Pacing};

/// The header naming a batch's first and last line ids (`first..last`).
pub const BATCH_HEADER: &str = "X-Svc-Drain-Batch";
pub const NDJSON: &str = "application/x-ndjson";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainOptions {
    /// Least time between passes while a drain is enabled (default 1 s):
    /// roughly how late a line is shipped (a full batch passes again at
    /// once).
    pub interval: Duration,
    /// Time between passes while no drain is enabled (default 5 s): how
    /// late a new drain's first lines may be (none are lost: a drain
    /// starts at the end of the log when created, not at its first pass).
    pub idle_sleep: Duration,
    /// Lines per POST (default 500).
    pub batch_size: usize,
    /// Most lines a drain may have waiting (default 100,000); beyond it the
    /// oldest are skipped and counted in `lines_dropped`.
    pub max_backlog: u64,
    /// Wait after a drain's first failed send (default 1 s), doubling per
    /// failure up to `backoff_max` (default 60 s).
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Drains one pass claims and sends to at once (default 16).
    pub drains_per_pass: usize,
    /// Time allowed for one POST (default 10 s).
    pub send_timeout: Duration,
    /// Opens drains' sealed secrets (SECRETS_KEY). Without it a drain with
    /// a sealed secret fails its sends, as a job with secrets fails its
    /// runs, rather than ship unsigned.
    pub secrets_key: Option<Secret>,
    /// Whether receivers may be loopback or private addresses
    /// (`TARGET_DENY_PRIVATE`), as for dispatches.
    pub deny_private: bool,
}

impl Default for DrainOptions {
    fn default() -> Self {
        DrainOptions {
            interval: Duration::from_secs(1),
            idle_sleep: Duration::from_secs(5),
            batch_size: 500,
            max_backlog: 100_000,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            drains_per_pass: 16,
            send_timeout: Duration::from_secs(10),
            deny_private: false,
            secrets_key: None,
        }
    }
}

impl DrainOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("drains.interval", self.interval)?;
        check_max_sleep("drains.idle_sleep", self.idle_sleep, "drains.interval", self.interval)?;
        check_batch("drains.batch_size", self.batch_size)?;
        if self.max_backlog < self.batch_size as u64 || self.max_backlog > i64::MAX as u64 {
            return Err(OptionsError::new("drains.max_backlog", "must be at least drains.batch_size"));
        }
        check_positive("drains.backoff_min", self.backoff_min)?;
        if self.backoff_max < self.backoff_min {
            return Err(OptionsError::new("drains.backoff_max", "must not be shorter than drains.backoff_min"));
        }
        if self.drains_per_pass == 0 || self.drains_per_pass > 1000 {
            return Err(OptionsError::new("drains.drains_per_pass", "must be between 1 and 1000"));
        }
        check_positive("drains.send_timeout", self.send_timeout)
    }

    /// The wait after the `failures`-th consecutive failure (from 1).
    pub fn backoff(&self, failures: i32) -> Duration {
        let exp = failures.saturating_sub(1).clamp(0, 30) as u32;
        self.backoff_min.saturating_mul(1u32 << exp).min(self.backoff_max)
    }

    /// How long a claim holds: the reads, the POST and the write after it,
    /// with room to spare.
    fn hold(&self) -> Duration {
        self.send_timeout * 2 + Duration::from_secs(30)
    }
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Drains claimed.
    pub drains: usize,
    /// Lines their receivers accepted.
    pub sent: u64,
    /// Lines skipped by the backlog cap.
    pub dropped: u64,
    /// Sends that failed.
    pub failed: usize,
    /// Whether a drain shipped a full batch (more may wait).
    pub more: bool,
    /// When the earliest enabled drain is due; None: no drain is enabled.
    pub upcoming: Option<chrono::DateTime<Utc>>,
}

/// The batch body: one JSON object per line, each ended by `\n`.
pub fn ndjson(lines: &[DrainLine]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines.len() * 256);
    for l in lines {
        let w = serde_json::json!({
            "run_id": l.run_id,
            "job_id": l.job_id,
            "project_id": l.project_id,
            "level": l.level,
            "message": l.message,
            "fields": l.fields,
            "timestamp": l.timestamp.to_rfc3339_opts(SecondsFormat::Millis, true),
            "line_id": l.line_id,
        });
        // Strings and JSON values always serialize.
        if serde_json::to_writer(&mut out, &w).is_ok() {
            out.push(b'\n');
        }
    }
    out
}

#[derive(Clone)]
pub struct DrainSender {
    pool: PgPool,
    opts: DrainOptions,
    http: Http,
    key: Option<SecretsKey>,
}

impl DrainSender {
    pub fn new(pool: PgPool, opts: DrainOptions) -> Result<DrainSender, OptionsError> {
        opts.validate()?;
        let http = Http::new(4, opts.deny_private)
            .map_err(|e| OptionsError::new("drains.http", format!("cannot build the drain client: {e}")))?;
        let key = opts.secrets_key.as_ref().map(SecretsKey::from_secret);
        Ok(DrainSender { pool, opts, http, key })
    }

    pub fn options(&self) -> &DrainOptions {
        &self.opts
    }

    /// One pass: claims the due drains and sends each one batch, at once.
    pub async fn pass_once(&self) -> Result<DrainReport, Error> {
        let claim = log_drains::claim_due(&self.pool, self.opts.hold(), self.opts.drains_per_pass as i64).await?;
        let mut report =
            DrainReport { drains: claim.claimed.len(), upcoming: claim.upcoming, ..DrainReport::default() };
        let results = futures::future::join_all(claim.claimed.into_iter().map(|c| self.drain_one(c))).await;
        for r in results {
            let one = r?;
            report.sent += one.sent;
            report.dropped += one.dropped;
            report.failed += usize::from(one.failed);
            report.more |= one.full;
        }
        Ok(report)
    }

    async fn drain_one(&self, mut c: Claimed) -> Result<One, Error> {
        let batch = self.opts.batch_size as i64;
        let mut one = One::default();
        let mut lines = log_drains::read_lines(&self.pool, &c.drain, batch).await?;
        // Only a full batch can sit on a backlog over the cap (the cap is
        // at least a batch), so the count is not paid otherwise.
        if lines.len() as i64 == batch {
            if let Some(s) = log_drains::cap_backlog(&self.pool, &c, self.opts.max_backlog as i64).await? {
                tracing::warn!(drain_id = %c.drain.id, lines = s.lines, "log drain backlog over its cap; oldest lines dropped");
                metrics::counter!(LOG_DRAIN_LINES_DROPPED).increment(s.lines as u64);
                one.dropped = s.lines as u64;
                c.drain.cursor_txid = s.cursor_txid;
                c.drain.cursor_line_id = s.cursor_line_id;
                lines = log_drains::read_lines(&self.pool, &c.drain, batch).await?;
            }
        }
        let (Some(first), Some(last)) = (lines.first(), lines.last()) else {
            log_drains::release(&self.pool, &c).await?;
            return Ok(one);
        };
        let body = ndjson(&lines);
        let batch_id = format!("{}..{}", first.line_id, last.line_id);
        match self.send(&c, &batch_id, body).await {
            Ok(()) => {
                if log_drains::shipped(&self.pool, &c, (last.txid, &last.line_id)).await? {
                    metrics::counter!(LOG_DRAIN_LINES_SENT).increment(lines.len() as u64);
                    one.sent = lines.len() as u64;
                    one.full = lines.len() as i64 == batch;
                }
            }
            Err(why) => {
                let failures = c.drain.failures.saturating_add(1);
                let wait = self.opts.backoff(failures);
                tracing::warn!(drain_id = %c.drain.id, failures, error = %why, ?wait, "log drain send failed");
                let retry_at = Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(60));
                log_drains::failed(&self.pool, &c, &why, retry_at).await?;
                one.failed = true;
            }
        }
        Ok(one)
    }

    /// POSTs one batch; the error is what `last_error` records (never the
    /// URL, which may carry credentials, nor the secret).
    async fn send(&self, c: &Claimed, batch_id: &str, body: Vec<u8>) -> Result<(), String> {
        let url = self.http.target(&c.drain.url).map_err(|e| match e {
            TargetError::Invalid(m) => m,
            TargetError::Denied(d) => d.to_string(),
        })?;
        let mut rb = self
            .http
            .client
            .post(url)
            .timeout(self.opts.send_timeout)
            .header("content-type", NDJSON)
            .header(BATCH_HEADER, batch_id)
            // A batch holds lines of many runs: it belongs to no run's trace.
            .header(switchyard_shared::traces::TRACEPARENT, switchyard_shared::traces::fresh().header());
        if let Some(stored) = c.drain.secret.as_deref().filter(|s| !s.is_empty()) {
            let secret = secrets::open_stored(self.key.as_ref(), &c.drain.id, secrets::LOG_DRAIN_SECRET, stored)
                .map_err(|e| format!("the drain's secret: {e}"))?;
            let [(tn, tv), (sn, sv)] = signing::headers(&secret, Utc::now().timestamp(), &body);
            rb = rb.header(tn, tv).header(sn, sv);
        }
        match rb.body(body).send().await {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => Err(format!("HTTP {}", resp.status().as_u16())),
            Err(e) => Err(match target::denied_in(&e) {
                Some(d) => d.to_string(),
                None if e.is_timeout() => "timed out".into(),
                None => error_chain(&e),
            }),
        }
    }

    /// Runs passes until shutdown: at once after a full batch, when the
    /// earliest drain is due (at least `interval` apart: a drain that
    /// shipped is due again at once, one backing off later), and every
    /// `idle_sleep` while no drain is enabled.
    pub async fn run(&self, shutdown: Shutdown) {
        let pacing = Pacing { min_gap: self.opts.interval, max_sleep: self.opts.idle_sleep.max(self.opts.backoff_max) };
        // Nothing rings it: a new drain is found by the idle pass.
        let alarm = Alarm::default();
        let idle = self.opts.idle_sleep;
        pace::paced_passes("log drain pass", pacing, &alarm, &shutdown, || async {
            let r = self.pass_once().await?;
            Ok::<_, Error>(match (r.more, r.upcoming) {
                (true, _) => Next::Now,
                (false, Some(at)) => Next::At(at),
                (false, None) => Next::At(Utc::now() + chrono::Duration::from_std(idle).unwrap_or_default()),
            })
        })
        .await
    }
}

/// What one drain's turn did.
#[derive(Default)]
struct One {
    sent: u64,
    dropped: u64,
    failed: bool,
    full: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        assert!(DrainOptions::default().validate().is_ok());
        let e = DrainOptions { batch_size: 0, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "drains.batch_size");
        let e = DrainOptions { max_backlog: 10, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "drains.max_backlog");
        let e = DrainOptions { backoff_max: Duration::from_millis(1), ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.field, "drains.backoff_max");
    }

    #[test]
    fn backoff_doubles_from_one_second_to_a_minute() {
        let o = DrainOptions::default();
        let secs: Vec<u64> = (1..=8).map(|n| o.backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(o.backoff(1_000).as_secs(), 60);
    }

    #[test]
    fn a_batch_is_one_json_object_per_line() {
        let line = |id: &str, msg: &str| DrainLine {
            txid: 7,
            line_id: id.into(),
            run_id: "run_1".into(),
            job_id: "job_1".into(),
            project_id: "prj_1".into(),
            level: "info".into(),
            message: msg.into(),
            fields: serde_json::json!({"k": 1}),
            timestamp: chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        };
        let body = String::from_utf8(ndjson(&[line("log_a", "one\ntwo"), line("log_b", "three")])).unwrap();
        let rows: Vec<serde_json::Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(body.ends_with('\n'));
        assert_eq!(rows.len(), 2, "a newline inside a message stays escaped");
        assert_eq!(rows[0]["message"], "one\ntwo");
        assert_eq!(rows[1]["line_id"], "log_b");
        assert_eq!(rows[0]["timestamp"], "2023-11-14T22:13:20.000Z");
        assert_eq!(rows[0]["fields"], serde_json::json!({"k": 1}));
    }
}
