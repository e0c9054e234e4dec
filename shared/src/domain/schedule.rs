//! Cron schedules and execution windows evaluated in a time zone, with the
//! daylight-saving policy written down once.
//!
//! Expressions match wall-clock (local) times. Each matching local time is
//! turned into one instant:
//!
//! - a local time that exists once is that instant;
//! - a local time that exists twice (the repeated hour when clocks go back)
//!   is its first occurrence: the repeated hour fires once;
//! - a local time that does not exist (skipped when clocks go forward) fires
//!   at the transition, the first instant after the gap. Several skipped
//!   times (every 15 minutes across a one-hour gap) all land on that one
//!   instant, so they fire once.
//!
//! The mapping never goes backwards, so ticks stay ordered in real time.
//!
//! An execution window is the set of local minutes its expression matches
//! (a 6-field window's seconds field is ignored). A minute skipped by a
//! clock change is not in any window; a repeated minute is in it both times.

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use super::cron_expr::{parse_cron, parse_timezone};
use super::job::JobSpec;
use super::status::RunStatus;

/// Ticks examined at most by one search, so a pathological expression
/// cannot stall a loop (a repeated hour of a per-second schedule is 3600).
const MAX_STEPS: usize = 20_000;

/// The zone of `timezone`, UTC when unset.
fn zone(timezone: Option<&str>) -> Result<Tz, String> {
    match timezone.map(str::trim).filter(|t| !t.is_empty()) {
        None => Ok(Tz::UTC),
        Some(t) => parse_timezone(t),
    }
}

/// A naive local time as if it were UTC: how the cron crate is made to
/// iterate wall-clock times without a zone's gaps and repeats.
fn as_utc(n: NaiveDateTime) -> DateTime<Utc> {
    Utc.from_utc_datetime(&n)
}

/// The instant a local tick fires at (see the module doc).
fn fire_at(tz: Tz, local: NaiveDateTime) -> DateTime<Utc> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc),
        LocalResult::None => {
            // Walk minute by minute to the end of the gap (real gaps are
            // whole minutes and at most a few hours long).
            let mut m = local.with_second(0).and_then(|m| m.with_nanosecond(0)).unwrap_or(local);
            for _ in 0..(48 * 60) {
                m += Duration::minutes(1);
                match tz.from_local_datetime(&m) {
                    LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => return t.with_timezone(&Utc),
                    LocalResult::None => {}
                }
            }
            // No zone has a two-day gap; fall back to reading the time as UTC.
            as_utc(local)
        }
    }
}

/// A job's `cron` in its `timezone`.
#[derive(Clone, Debug)]
pub struct CronSchedule {
    schedule: cron::Schedule,
    tz: Tz,
}

impl CronSchedule {
    /// `expr`: 5 fields, or 6 with seconds first. `timezone`: IANA, UTC when unset.
    pub fn parse(expr: &str, timezone: Option<&str>) -> Result<CronSchedule, String> {
        Ok(CronSchedule { schedule: parse_cron(expr)?, tz: zone(timezone)? })
    }

    /// The latest tick at or before `now`.
    pub fn latest_at_or_before(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = now.with_timezone(&self.tz).naive_local();
        // Ticks strictly before the next whole second: every tick <= now.
        let from = local.with_nanosecond(0)? + Duration::seconds(1);
        self.schedule
            .after(&as_utc(from))
            .rev()
            .take(MAX_STEPS)
            .map(|t| fire_at(self.tz, t.naive_utc()))
            .find(|t| *t <= now)
    }

    /// The ticks `t` with `after < t <= until`, oldest first; at most the
    /// `limit` latest of them.
    pub fn ticks_in(&self, after: DateTime<Utc>, until: DateTime<Utc>, limit: usize) -> Vec<DateTime<Utc>> {
        let local = until.with_timezone(&self.tz).naive_local();
        let Some(from) = local.with_nanosecond(0).map(|l| l + Duration::seconds(1)) else {
            return vec![];
        };
        let mut out: Vec<DateTime<Utc>> = Vec::new();
        for t in self.schedule.after(&as_utc(from)).rev().take(MAX_STEPS) {
            let t = fire_at(self.tz, t.naive_utc());
            if t > until || out.last() == Some(&t) {
                continue;
            }
            if t <= after || out.len() >= limit {
                break;
            }
            out.push(t);
        }
        out.reverse();
        out
    }

    /// The first tick after `now`; `None` when there is none (or it is too
    /// far to find within the search bound).
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Local times before now's fire at or before now (the mapping never
        // goes backwards), so the search starts at now's local time; in the
        // second pass of a repeated hour it walks past that hour's ticks,
        // which fired in the first.
        let local = now.with_timezone(&self.tz).naive_local();
        self.schedule.after(&as_utc(local)).take(MAX_STEPS).map(|t| fire_at(self.tz, t.naive_utc())).find(|t| *t > now)
    }
}

/// A job's `execution_window_cron` in its `timezone`.
#[derive(Clone, Debug)]
pub struct Window {
    schedule: cron::Schedule,
    tz: Tz,
}

impl Window {
    pub fn parse(expr: &str, timezone: Option<&str>) -> Result<Window, String> {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let minutes = match fields.len() {
            5 => fields.join(" "),
            6 => fields[1..].join(" "),
            n => return Err(format!("expected 5 fields, or 6 with seconds first; got {n}")),
        };
        Ok(Window { schedule: parse_cron(&minutes)?, tz: zone(timezone)? })
    }

    /// Whether the local minute containing `at` is in the window.
    pub fn is_open(&self, at: DateTime<Utc>) -> bool {
        let local = at.with_timezone(&self.tz).naive_local();
        match local.with_second(0).and_then(|m| m.with_nanosecond(0)) {
            Some(minute) => self.schedule.includes(as_utc(minute)),
            None => false,
        }
    }

    /// `at` when the window is open then, else the start of the next
    /// minute in it; `None` when it never opens again.
    pub fn next_open(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.is_open(at) {
            return Some(at);
        }
        let local = at.with_timezone(&self.tz).naive_local();
        for m in self.schedule.after(&as_utc(local)).take(MAX_STEPS) {
            let candidate = match self.tz.from_local_datetime(&m.naive_utc()) {
                LocalResult::Single(t) => Some(t),
                LocalResult::Ambiguous(a, b) => Some(if a.with_timezone(&Utc) > at { a } else { b }),
                LocalResult::None => None,
            };
            if let Some(t) = candidate.map(|t| t.with_timezone(&Utc)).filter(|t| *t > at) {
                return Some(t);
            }
        }
        None
    }
}

/// When a run that wants to start at `due` may become `queued`: `due`
/// itself without a window or inside it, else the window's next opening.
/// `Err` when the window never opens again; a window that does not parse
/// (impossible for a validated job) holds nothing.
pub fn admit_at(window: Option<&str>, timezone: Option<&str>, due: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let Some(expr) = window.filter(|w| !w.trim().is_empty()) else {
        return Ok(due);
    };
    match Window::parse(expr, timezone) {
        Ok(w) => w.next_open(due).ok_or_else(|| format!("the execution window {expr:?} never opens again")),
        Err(_) => Ok(due),
    }
}

/// Where a new run starts: `queued` now, or `pending` until `scheduled_at`
/// (a delay, or the job's execution window opening), or `pending` with no
/// time while it waits for dependencies.
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    pub status: RunStatus,
    pub scheduled_at: Option<DateTime<Utc>>,
    /// `run_ttl_secs` after the run was due (its requested time, else now):
    /// a delay does not eat into the TTL, a window or dependencies do.
    pub expires_at: Option<DateTime<Utc>>,
}

/// The admission of a run of `spec` triggered at `now`, asked to start at
/// `requested` (None: now), waiting for dependencies or not. `Err` when the
/// job's window never opens again.
pub fn admission(
    spec: &JobSpec,
    now: DateTime<Utc>,
    requested: Option<DateTime<Utc>>,
    awaiting_dependencies: bool,
) -> Result<Admission, String> {
    let due = requested.filter(|t| *t > now).unwrap_or(now);
    let expires_at = (spec.run_ttl_secs > 0).then(|| due + Duration::seconds(spec.run_ttl_secs));
    if awaiting_dependencies {
        // The window is applied when the dependencies are met.
        return Ok(Admission { status: RunStatus::Pending, scheduled_at: requested, expires_at });
    }
    let start = admit_at(spec.execution_window_cron.as_deref(), spec.timezone.as_deref(), due)?;
    if start > now {
        Ok(Admission { status: RunStatus::Pending, scheduled_at: Some(start), expires_at })
    } else {
        Ok(Admission { status: RunStatus::Queued, scheduled_at: requested, expires_at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn ticks(c: &CronSchedule, from: &str, to: &str) -> Vec<DateTime<Utc>> {
        let (mut t, end) = (utc(from), utc(to));
        let mut out = vec![];
        while let Some(n) = c.next_after(t).filter(|n| *n <= end) {
            out.push(n);
            t = n;
        }
        out
    }

    #[test]
    fn latest_tick_is_at_or_before_now() {
        let c = CronSchedule::parse("*/5 * * * *", None).unwrap();
        assert_eq!(c.latest_at_or_before(utc("2027-01-01T10:07:30Z")), Some(utc("2027-01-01T10:05:00Z")));
        assert_eq!(c.latest_at_or_before(utc("2027-01-01T10:05:00Z")), Some(utc("2027-01-01T10:05:00Z")));
        assert_eq!(c.next_after(utc("2027-01-01T10:05:00Z")), Some(utc("2027-01-01T10:10:00Z")));
        let s = CronSchedule::parse("*/2 * * * * *", None).unwrap();
        assert_eq!(s.latest_at_or_before(utc("2027-01-01T10:00:03.900Z")), Some(utc("2027-01-01T10:00:02Z")));
    }

    #[test]
    fn ticks_in_a_range_are_listed_once() {
        let c = CronSchedule::parse("*/10 * * * * *", None).unwrap();
        let got = c.ticks_in(utc("2027-01-01T10:00:00Z"), utc("2027-01-01T10:00:35Z"), 10);
        assert_eq!(got, [utc("2027-01-01T10:00:10Z"), utc("2027-01-01T10:00:20Z"), utc("2027-01-01T10:00:30Z")]);
        assert_eq!(
            c.ticks_in(utc("2027-01-01T10:00:00Z"), utc("2027-01-01T10:00:35Z"), 1),
            [utc("2027-01-01T10:00:30Z")]
        );
        let berlin = CronSchedule::parse("*/30 * * * *", Some("Europe/Berlin")).unwrap();
        let gap = berlin.ticks_in(utc("2027-03-28T00:00:00Z"), utc("2027-03-28T01:30:00Z"), 10);
        assert_eq!(gap, [utc("2027-03-28T00:30:00Z"), utc("2027-03-28T01:00:00Z"), utc("2027-03-28T01:30:00Z")]);
    }

    #[test]
    fn zone_is_applied() {
        let c = CronSchedule::parse("0 9 * * *", Some("America/New_York")).unwrap();
        assert_eq!(c.next_after(utc("2027-01-05T00:00:00Z")), Some(utc("2027-01-05T14:00:00Z")));
    }

    #[test]
    fn a_skipped_time_fires_once_at_the_transition() {
        // Europe/Berlin, 2027-03-28: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
        let daily = CronSchedule::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
        assert_eq!(
            ticks(&daily, "2027-03-27T00:00:00Z", "2027-03-29T23:00:00Z"),
            [utc("2027-03-27T01:30:00Z"), utc("2027-03-28T01:00:00Z"), utc("2027-03-29T00:30:00Z")]
        );
        let quarter = CronSchedule::parse("*/15 * * * *", Some("Europe/Berlin")).unwrap();
        let around = ticks(&quarter, "2027-03-28T00:40:00Z", "2027-03-28T01:20:00Z");
        // 01:45 CET, then 02:00..02:45 (skipped) and 03:00 CEST all at 01:00 UTC, once.
        assert_eq!(around, [utc("2027-03-28T00:45:00Z"), utc("2027-03-28T01:00:00Z"), utc("2027-03-28T01:15:00Z")]);
    }

    #[test]
    fn a_repeated_hour_fires_once() {
        // Europe/Berlin, 2027-10-31: 03:00 CEST goes back to 02:00 CET (01:00 UTC).
        let daily = CronSchedule::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
        assert_eq!(
            ticks(&daily, "2027-10-30T00:00:00Z", "2027-11-01T23:00:00Z"),
            [utc("2027-10-30T00:30:00Z"), utc("2027-10-31T00:30:00Z"), utc("2027-11-01T01:30:00Z")]
        );
        let hourly = CronSchedule::parse("0 * * * *", Some("Europe/Berlin")).unwrap();
        let around = ticks(&hourly, "2027-10-30T23:30:00Z", "2027-10-31T03:30:00Z");
        // 02:00 CEST, (02:00 CET skipped), 03:00 CET, 04:00 CET.
        assert_eq!(around, [utc("2027-10-31T00:00:00Z"), utc("2027-10-31T02:00:00Z"), utc("2027-10-31T03:00:00Z")]);
        // In the second pass of the repeated hour, the latest tick is the first pass's.
        assert_eq!(hourly.latest_at_or_before(utc("2027-10-31T01:30:00Z")), Some(utc("2027-10-31T00:00:00Z")));
    }

    #[test]
    fn windows_are_sets_of_local_minutes() {
        let w = Window::parse("* 9-17 * * 1-5", Some("Europe/Paris")).unwrap();
        // Friday 2027-01-08 16:59 Paris = 15:59 UTC: open; 17:00 Paris still open; 18:00 closed.
        assert!(w.is_open(utc("2027-01-08T15:59:30Z")));
        assert!(w.is_open(utc("2027-01-08T16:59:59Z")));
        assert!(!w.is_open(utc("2027-01-08T17:00:00Z")));
        // Closed over the weekend: opens Monday 09:00 Paris.
        assert_eq!(w.next_open(utc("2027-01-08T17:00:00Z")), Some(utc("2027-01-11T08:00:00Z")));
        assert_eq!(w.next_open(utc("2027-01-11T08:30:00Z")), Some(utc("2027-01-11T08:30:00Z")));
        let seconds = Window::parse("*/10 0-29 * * * *", None).unwrap();
        assert!(seconds.is_open(utc("2027-01-01T00:29:59Z")), "seconds of a window are ignored");
        assert_eq!(seconds.next_open(utc("2027-01-01T00:30:00Z")), Some(utc("2027-01-01T01:00:00Z")));
        assert_eq!(admit_at(None, None, utc("2027-01-01T00:00:00Z")), Ok(utc("2027-01-01T00:00:00Z")));
        assert!(admit_at(Some("0 0 30 2 *"), None, utc("2027-01-01T00:00:00Z")).is_err(), "never opens");
    }

    #[test]
    fn admission_applies_delay_window_and_ttl() {
        let now = utc("2027-01-01T08:30:00Z");
        let mut spec = JobSpec::with_endpoint("http://x");
        let a = admission(&spec, now, None, false).unwrap();
        assert_eq!((a.status, a.scheduled_at, a.expires_at), (RunStatus::Queued, None, None));
        spec.run_ttl_secs = 60;
        let later = utc("2027-01-01T08:40:00Z");
        let a = admission(&spec, now, Some(later), false).unwrap();
        assert_eq!((a.status, a.scheduled_at), (RunStatus::Pending, Some(later)));
        assert_eq!(a.expires_at, Some(utc("2027-01-01T08:41:00Z")), "the TTL runs from the requested time");
        spec.execution_window_cron = Some("* 9-17 * * *".into());
        let a = admission(&spec, now, None, false).unwrap();
        assert_eq!((a.status, a.scheduled_at), (RunStatus::Pending, Some(utc("2027-01-01T09:00:00Z"))));
        let a = admission(&spec, now, None, true).unwrap();
        assert_eq!((a.status, a.scheduled_at), (RunStatus::Pending, None), "dependencies first");
    }
}
