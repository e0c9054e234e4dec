//! Correctness of a phase: every accepted run reached the target exactly
//! once and ended `completed` in Postgres; every API error is counted.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use super::client::Sent;
use super::system::System;

/// What the load generator saw of its calls.
#[derive(Default)]
pub struct Calls {
    pub created: Vec<String>,
    /// "HTTP 503", "transport", ... → count.
    pub errors: BTreeMap<String, usize>,
    /// The first few distinct error messages.
    pub samples: Vec<String>,
}

impl Calls {
    pub fn record(&mut self, sent: Sent) {
        match sent {
            Sent::Created(id) => self.created.push(id),
            Sent::Rejected(status, body) => self.error(format!("HTTP {status}"), body),
            Sent::Failed(why) => self.error("transport".into(), why),
        }
    }

    pub fn error(&mut self, kind: String, message: String) {
        if self.samples.len() < 5 && !self.samples.iter().any(|s| s.ends_with(&message)) {
            self.samples.push(format!("{kind}: {message}"));
        }
        *self.errors.entry(kind).or_default() += 1;
    }

    pub fn absorb(&mut self, other: &Calls) {
        self.created.extend(other.created.iter().cloned());
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
        for s in &other.samples {
            if self.samples.len() < 5 {
                self.samples.push(s.clone());
            }
        }
    }

    pub fn error_count(&self) -> usize {
        self.errors.values().sum()
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Check {
    pub accepted: usize,
    pub api_errors: usize,
    pub api_error_kinds: BTreeMap<String, usize>,
    pub api_error_samples: Vec<String>,
    /// Accepted runs the target never saw.
    pub never_delivered: usize,
    /// Runs the target saw more than once, and the extra requests.
    pub duplicate_runs: usize,
    pub extra_deliveries: usize,
    /// Extra requests carrying an attempt number already delivered (a
    /// redelivery of the same attempt, e.g. after a lease expired).
    pub same_attempt_redeliveries: usize,
    /// Final statuses in Postgres of the accepted runs.
    pub statuses: BTreeMap<String, i64>,
    /// Runs that needed more than one attempt.
    pub multi_attempt_runs: i64,
}

impl Check {
    pub fn ok(&self) -> bool {
        self.api_errors == 0
            && self.never_delivered == 0
            && self.duplicate_runs == 0
            && self.statuses.iter().all(|(s, _)| s == "completed")
    }

    pub fn merge(&mut self, o: &Check) {
        self.accepted += o.accepted;
        self.api_errors += o.api_errors;
        for (k, v) in &o.api_error_kinds {
            *self.api_error_kinds.entry(k.clone()).or_default() += v;
        }
        for s in &o.api_error_samples {
            if self.api_error_samples.len() < 8 {
                self.api_error_samples.push(s.clone());
            }
        }
        self.never_delivered += o.never_delivered;
        self.duplicate_runs += o.duplicate_runs;
        self.extra_deliveries += o.extra_deliveries;
        self.same_attempt_redeliveries += o.same_attempt_redeliveries;
        for (k, v) in &o.statuses {
            *self.statuses.entry(k.clone()).or_default() += v;
        }
        self.multi_attempt_runs += o.multi_attempt_runs;
    }
}

/// Checks the runs of one job against the target's record and Postgres.
pub async fn check(sys: &System, job: &str, calls: &Calls) -> anyhow::Result<Check> {
    let ids: HashSet<&str> = calls.created.iter().map(String::as_str).collect();
    let hits = sys.target().hits_of(&ids);
    let mut c = Check {
        accepted: ids.len(),
        api_errors: calls.error_count(),
        api_error_kinds: calls.errors.clone(),
        api_error_samples: calls.samples.clone(),
        ..Check::default()
    };
    for id in &ids {
        match hits.get(*id) {
            None => c.never_delivered += 1,
            Some(h) if h.len() > 1 => {
                c.duplicate_runs += 1;
                c.extra_deliveries += h.len() - 1;
                let attempts: HashSet<i64> = h.iter().map(|x| x.attempt).collect();
                c.same_attempt_redeliveries += h.len() - attempts.len();
            }
            Some(_) => {}
        }
    }
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT status, count(*), count(*) FILTER (WHERE attempt > 1) FROM job_runs WHERE job_id = $1 GROUP BY status",
    )
    .bind(job)
    .fetch_all(sys.pool())
    .await?;
    for (status, n, multi) in rows {
        c.statuses.insert(status, n);
        c.multi_attempt_runs += multi;
    }
    Ok(c)
}
