//! `switchyard runs list|get|events|logs|watch|cancel|replay`.

use std::time::Duration;

use clap::builder::PossibleValuesParser;
use clap::{Args, Subcommand};
use serde_json::Value;
use switchyard_shared::domain::RunStatus;

use super::client::Client;
use super::follow::{describe_run_event, history_text, watch};
use super::output;
use super::{exit, list, print_page, seg, Failure, Global, Paging};

#[derive(Args, Debug)]
#[command(after_help = super::EXIT_CODES)]
pub struct Runs {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub cmd: RunsCmd,
}

#[derive(Subcommand, Debug)]
pub enum RunsCmd {
    /// The project's runs, newest first.
    List {
        /// Only this job's runs.
        #[arg(long)]
        job: Option<String>,
        /// Only runs in this status.
        #[arg(long, value_parser = run_statuses())]
        status: Option<String>,
        #[command(flatten)]
        paging: Paging,
    },
    /// One run, with its payload, result and error.
    Get { run_id: String },
    /// A run's history, oldest first: each change of status and each
    /// attempt (its HTTP status, duration and error).
    Events {
        run_id: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// The log lines a run's code sent (over the SDK), oldest first.
    Logs {
        run_id: String,
        /// Only lines of this level.
        #[arg(long, value_parser = ["debug", "info", "warn", "error"])]
        level: Option<String>,
        #[command(flatten)]
        paging: Paging,
    },
    /// Follow a run as it changes (its live stream) until it ends: each
    /// status change and each entry of its history, one line each (with
    /// --json, each event's JSON). Exit 0 only if it completed.
    Watch {
        run_id: String,
        /// Give up after this many seconds (exit 6).
        #[arg(long, default_value_t = 86_400)]
        timeout: u64,
    },
    /// Cancel a run that has not finished (and its unfinished child runs).
    Cancel { run_id: String },
    /// A new run of the same job with the same payload; the original stays.
    Replay { run_id: String },
}

/// `--status` of runs: the statuses a run has (shared with the API, so
/// `--help` and a wrong value's usage error list the same ones).
fn run_statuses() -> PossibleValuesParser {
    PossibleValuesParser::new(RunStatus::ALL.map(RunStatus::as_str))
}

/// The columns of a run in a listing.
pub const HEADERS: [&str; 7] = ["ID", "JOB", "STATUS", "ATTEMPT", "CREATED", "FINISHED", "ERROR"];

/// The columns a narrow terminal does without first: the job (a listing is
/// often of one job), the attempt, the end.
const OPTIONAL: [&str; 3] = ["JOB", "ATTEMPT", "FINISHED"];

pub fn row(r: &Value) -> Vec<String> {
    vec![
        output::cell(&r["id"]),
        output::cell(&r["job_id"]),
        output::cell(&r["status"]),
        output::cell(&r["attempt"]),
        output::time(&r["created_at"]),
        output::time(&r["finished_at"]),
        output::cell(&r["error"]),
    ]
}

/// The fields `runs get` shows, in this order.
const DETAIL: [&str; 23] = [
    "id",
    "project_id",
    "job_id",
    "job_version",
    "status",
    "attempt",
    "max_attempts_override",
    "priority",
    "triggered_by",
    "continuation_of",
    "parent_run_id",
    "idempotency_key",
    "created_at",
    "scheduled_at",
    "started_at",
    "next_retry_at",
    "finished_at",
    "error_class",
    "error",
    "payload",
    "result",
    "metadata",
    "trace_id",
];

/// Prints one run for people.
pub fn show(r: &Value) {
    print!("{}", output::fields(r, &DETAIL));
}

pub async fn run(c: Runs) -> Result<u8, Failure> {
    let g = &c.global;
    let client = Client::new(g)?;
    match c.cmd {
        RunsCmd::List { job, status, paging } => {
            let mut q = g.project_query();
            q.extend(job.map(|j| ("job_id", j)));
            q.extend(status.map(|s| ("status", s)));
            let page = list(&client, "/v1/runs", &q, &paging).await?;
            if g.is_json() {
                output::json(&page);
            } else {
                print_runs(&page);
            }
        }
        RunsCmd::Get { run_id } => {
            let r = client.get(&format!("/v1/runs/{}", seg(&run_id)), &[]).await?;
            if g.is_json() {
                output::json(&r);
            } else {
                show(&r);
            }
        }
        RunsCmd::Events { run_id, paging } => {
            let page = list(&client, &format!("/v1/runs/{}/events", seg(&run_id)), &[], &paging).await?;
            if g.is_json() {
                output::json(&page);
            } else {
                print_page(&page, &["AT", "ATTEMPT", "EVENT", "ERROR"], &["ATTEMPT"], |e| {
                    vec![output::time(&e["at"]), output::cell(&e["attempt"]), event_text(e), output::cell(&e["error"])]
                });
            }
        }
        RunsCmd::Logs { run_id, level, paging } => {
            let q: Vec<_> = level.map(|l| ("level", l)).into_iter().collect();
            let page = list(&client, &format!("/v1/runs/{}/logs", seg(&run_id)), &q, &paging).await?;
            if g.is_json() {
                output::json(&page);
            } else {
                print_page(
                    &page,
                    &["TIMESTAMP", "LEVEL", "ATTEMPT", "MESSAGE", "FIELDS"],
                    &["FIELDS", "ATTEMPT"],
                    |l| {
                        vec![
                            output::time(&l["timestamp"]),
                            output::cell(&l["level"]),
                            output::cell(&l["attempt"]),
                            output::cell(&l["message"]),
                            output::cell(&l["fields"]),
                        ]
                    },
                );
            }
        }
        RunsCmd::Watch { run_id, timeout } => {
            let path = format!("/v1/runs/{}/stream", seg(&run_id));
            return watch(&client, &path, "run", Duration::from_secs(timeout), g.is_json(), describe_run_event).await;
        }
        RunsCmd::Cancel { run_id } => {
            let r = client.post(&format!("/v1/runs/{}/cancel", seg(&run_id)), None).await?;
            if g.is_json() {
                output::json(&r);
            } else {
                println!("{}  {}", output::cell(&r["id"]), output::cell(&r["status"]));
            }
        }
        RunsCmd::Replay { run_id } => {
            let r = client.post(&format!("/v1/runs/{}/replay", seg(&run_id)), None).await?;
            if g.is_json() {
                output::json(&r);
            } else {
                println!(
                    "{}  {}  (replay of {})",
                    output::cell(&r["id"]),
                    output::cell(&r["status"]),
                    output::cell(&r["continuation_of"])
                );
            }
        }
    }
    Ok(exit::OK)
}

/// A page of runs as a table, and where the next page starts.
pub fn print_runs(page: &Value) {
    print_page(page, &HEADERS, &OPTIONAL, row);
}

/// An entry of a run's history in the events table, whose attempt and
/// error have their own columns.
fn event_text(e: &Value) -> String {
    match e["type"] == "attempt" {
        true => format!("attempt {}", history_text(e)),
        false => history_text(e),
    }
}
