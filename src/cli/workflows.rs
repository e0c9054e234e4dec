//! `switchyard workflows list|trigger`, `switchyard workflows runs watch`.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::client::Client;
use super::follow::{describe_workflow_event, follow, watch};
use super::output;
use super::{exit, list, print_page, read_payload, seg, Failure, Global, Paging};

#[derive(Args, Debug)]
#[command(after_help = super::EXIT_CODES)]
pub struct Workflows {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub cmd: WorkflowsCmd,
}

#[derive(Subcommand, Debug)]
pub enum WorkflowsCmd {
    /// The project's workflows, newest first.
    List {
        #[command(flatten)]
        paging: Paging,
    },
    /// Trigger a run of a workflow's current version; prints the workflow
    /// run (with --wait, once it ended).
    Trigger {
        workflow_id: String,
        /// The run's input: JSON text, `@file`, or `@-` for stdin.
        #[arg(long)]
        payload: Option<String>,
        /// A second trigger with the same key returns the first run.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Follow the workflow run's live stream until it ends, printing
        /// each change of its status and its steps' on stderr; exit 0 only
        /// if it completed.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this many seconds (exit 6).
        #[arg(long, default_value_t = 600, requires = "wait")]
        timeout: u64,
    },
    /// Workflow runs.
    #[command(subcommand)]
    Runs(WorkflowRunsCmd),
}

#[derive(Subcommand, Debug)]
pub enum WorkflowRunsCmd {
    /// Follow a workflow run as it changes (its live stream) until it
    /// ends: its status and each step's, one line each (with --json, each
    /// event's JSON). Exit 0 only if it completed.
    Watch {
        workflow_run_id: String,
        /// Give up after this many seconds (exit 6).
        #[arg(long, default_value_t = 86_400)]
        timeout: u64,
    },
}

const HEADERS: [&str; 6] = ["ID", "SLUG", "NAME", "ENABLED", "VERSION", "CRON"];

const RUN_DETAIL: [&str; 10] = [
    "id",
    "workflow_id",
    "version",
    "status",
    "triggered_by",
    "created_at",
    "started_at",
    "finished_at",
    "error",
    "output",
];

pub async fn run(c: Workflows) -> Result<u8, Failure> {
    let g = &c.global;
    let client = Client::new(g)?;
    match c.cmd {
        WorkflowsCmd::List { paging } => {
            let page = list(&client, "/v1/workflows", &g.project_query(), &paging).await?;
            if g.json {
                output::json(&page);
                return Ok(exit::OK);
            }
            print_page(&page, &HEADERS, |w| {
                vec![
                    output::cell(&w["id"]),
                    output::cell(&w["slug"]),
                    output::short(&w["name"], 40),
                    output::cell(&w["enabled"]),
                    output::cell(&w["version"]),
                    output::cell(&w["cron"]),
                ]
            });
            Ok(exit::OK)
        }
        WorkflowsCmd::Trigger { workflow_id, payload, idempotency_key, wait, timeout } => {
            let mut body = json!({});
            if let Some(p) = payload {
                body["payload"] = read_payload(&p)?;
            }
            if let Some(k) = idempotency_key {
                body["idempotency_key"] = Value::String(k);
            }
            let r = client.post(&format!("/v1/workflows/{}/trigger", seg(&workflow_id)), Some(body)).await?;
            let shown = if wait {
                let path = format!("/v1/workflow-runs/{}/stream", seg(r["id"].as_str().unwrap_or_default()));
                follow(&client, &path, "workflow_run", Duration::from_secs(timeout), |e| {
                    if let Some(line) = describe_workflow_event(e) {
                        eprintln!("{line}");
                    }
                })
                .await?
            } else {
                r
            };
            if g.json {
                output::json(&shown);
            } else {
                print!("{}", output::fields(&shown, &RUN_DETAIL));
            }
            Ok(if !wait || shown["status"] == "completed" { exit::OK } else { exit::OUTCOME })
        }
        WorkflowsCmd::Runs(WorkflowRunsCmd::Watch { workflow_run_id, timeout }) => {
            let path = format!("/v1/workflow-runs/{}/stream", seg(&workflow_run_id));
            watch(&client, &path, "workflow_run", Duration::from_secs(timeout), g.json, describe_workflow_event).await
        }
    }
}
