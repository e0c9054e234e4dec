//! `switchyard workflows list|trigger`.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::client::Client;
use super::output;
use super::{exit, list, print_page, read_payload, seg, wait_until_ended, Failure, Global, Paging};

/// A workflow run's statuses from which it never moves again.
const TERMINAL: [&str; 4] = ["completed", "failed", "cancelled", "timed_out"];

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
        /// Poll the workflow run until it ends; exit 0 only if it completed.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this many seconds (exit 6).
        #[arg(long, default_value_t = 600, requires = "wait")]
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
                let path = format!("/v1/workflow-runs/{}", seg(r["id"].as_str().unwrap_or_default()));
                wait_until_ended(&client, &path, &TERMINAL, Duration::from_secs(timeout)).await?
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
    }
}
