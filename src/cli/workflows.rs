//! `switchyard workflows list|get|create|update|trigger`, and
//! `switchyard workflows runs get|watch|approve|reject|skip`.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::client::Client;
use super::follow::{describe_workflow_event, follow, watch, Progress};
use super::output;
use super::{exit, list, print_page, read_file, read_payload, seg, Failure, Global, Paging};

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
    /// One workflow's definition, its steps as a table.
    Get { workflow_id: String },
    /// Create a workflow from a JSON file (the body of `POST
    /// /v1/workflows`: at least `name` and `steps`); `--project` fills in
    /// its `project_id` when the file has none. Prints the workflow.
    Create {
        /// The workflow as JSON; `-` reads stdin.
        #[arg(long, short = 'f')]
        file: String,
    },
    /// Change a workflow from a JSON file (the body of `PATCH
    /// /v1/workflows/{id}`); a new version. Prints the workflow.
    Update {
        workflow_id: String,
        /// The changes as JSON; `-` reads stdin.
        #[arg(long, short = 'f')]
        file: String,
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
    /// One workflow run: its status, then its steps as a table (status,
    /// attempts, times, who decided a step and how).
    Get { workflow_run_id: String },
    /// Approve a waiting approval step (or cost gate): the run goes on.
    Approve(Decision),
    /// Reject a waiting approval step: it fails, and its on_failure decides
    /// what the run does.
    Reject(Decision),
    /// Skip a step that has not ended: the run goes on without it.
    Skip(Decision),
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

/// A person's decision on a step of a workflow run.
#[derive(Args, Debug)]
pub struct Decision {
    workflow_run_id: String,
    /// The step's `step_ref`.
    step_ref: String,
    /// Why, kept with the decision (`decision_comment`).
    #[arg(long)]
    comment: Option<String>,
}

const HEADERS: [&str; 6] = ["ID", "SLUG", "NAME", "ENABLED", "VERSION", "CRON"];

const DETAIL: [&str; 14] = [
    "id",
    "project_id",
    "name",
    "slug",
    "description",
    "enabled",
    "version",
    "cron",
    "cron_timezone",
    "timeout_secs",
    "max_concurrent_runs",
    "max_parallel_steps",
    "created_at",
    "updated_at",
];

/// The columns of a workflow's steps.
const STEP_DEFS: [&str; 5] = ["STEP", "TYPE", "JOB", "DEPENDS_ON", "ON_FAILURE"];

/// The columns of a workflow run's steps.
const STEPS: [&str; 9] =
    ["STEP", "TYPE", "STATUS", "ATTEMPT", "STARTED", "FINISHED", "DECISION", "DECIDED_BY", "ERROR"];

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
            if g.is_json() {
                output::json(&page);
                return Ok(exit::OK);
            }
            print_page(&page, &HEADERS, &["SLUG", "CRON", "VERSION"], |w| {
                vec![
                    output::cell(&w["id"]),
                    output::cell(&w["slug"]),
                    output::cell(&w["name"]),
                    output::cell(&w["enabled"]),
                    output::cell(&w["version"]),
                    output::cell(&w["cron"]),
                ]
            });
            Ok(exit::OK)
        }
        WorkflowsCmd::Get { workflow_id } => {
            let w = client.get(&format!("/v1/workflows/{}", seg(&workflow_id)), &[]).await?;
            show(g, &w);
            Ok(exit::OK)
        }
        WorkflowsCmd::Create { file } => {
            let w = client.post("/v1/workflows", Some(g.with_project(read_file(&file)?))).await?;
            show(g, &w);
            Ok(exit::OK)
        }
        WorkflowsCmd::Update { workflow_id, file } => {
            let w = client.patch(&format!("/v1/workflows/{}", seg(&workflow_id)), read_file(&file)?).await?;
            show(g, &w);
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
                let id = r["id"].as_str().unwrap_or_default();
                let path = format!("/v1/workflow-runs/{}/stream", seg(id));
                let limit = Duration::from_secs(timeout);
                let progress = Progress::start(format!("workflow run {id}"), r["status"].as_str(), limit);
                follow(&client, &path, "workflow_run", limit, |e| {
                    if let Some(s) = e.data["workflow_run"]["status"].as_str() {
                        progress.note(s);
                    }
                    if let Some(line) = describe_workflow_event(e) {
                        eprintln!("{line}");
                    }
                })
                .await?
            } else {
                r
            };
            if g.is_json() {
                output::json(&shown);
            } else {
                print!("{}", output::fields(&shown, &RUN_DETAIL));
            }
            Ok(if !wait || shown["status"] == "completed" { exit::OK } else { exit::OUTCOME })
        }
        WorkflowsCmd::Runs(WorkflowRunsCmd::Watch { workflow_run_id, timeout }) => {
            let path = format!("/v1/workflow-runs/{}/stream", seg(&workflow_run_id));
            watch(&client, &path, "workflow_run", Duration::from_secs(timeout), g.is_json(), describe_workflow_event)
                .await
        }
        WorkflowsCmd::Runs(WorkflowRunsCmd::Get { workflow_run_id }) => {
            let r = client.get(&format!("/v1/workflow-runs/{}", seg(&workflow_run_id)), &[]).await?;
            show_run(g, &r);
            Ok(exit::OK)
        }
        WorkflowsCmd::Runs(WorkflowRunsCmd::Approve(d)) => decide(&client, g, "approve", d).await,
        WorkflowsCmd::Runs(WorkflowRunsCmd::Reject(d)) => decide(&client, g, "reject", d).await,
        WorkflowsCmd::Runs(WorkflowRunsCmd::Skip(d)) => decide(&client, g, "skip", d).await,
    }
}

/// `POST /v1/workflow-runs/{id}/steps/{ref}/approve|reject|skip`; prints
/// the workflow run as it is after the decision.
async fn decide(client: &Client, g: &Global, verb: &str, d: Decision) -> Result<u8, Failure> {
    let path = format!("/v1/workflow-runs/{}/steps/{}/{verb}", seg(&d.workflow_run_id), seg(&d.step_ref));
    let body = d.comment.map_or_else(|| json!({}), |c| json!({"comment": c}));
    let r = client.post(&path, Some(body)).await?;
    show_run(g, &r);
    Ok(exit::OK)
}

/// Prints one workflow: its fields, then its steps as a table.
fn show(g: &Global, w: &Value) {
    if g.is_json() {
        output::json(w);
        return;
    }
    print!("{}", output::fields(w, &DETAIL));
    println!();
    let mut t = output::Table::new(&STEP_DEFS).optional(&["ON_FAILURE", "JOB"]);
    for s in w["steps"].as_array().into_iter().flatten() {
        let deps: Vec<&str> = s["depends_on"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        t.row(vec![
            output::cell(&s["step_ref"]),
            output::cell(&s["step_type"]),
            output::cell(&s["job_id"]),
            if deps.is_empty() { "-".into() } else { deps.join(",") },
            output::cell(&s["on_failure"]),
        ]);
    }
    t.print();
}

/// Prints one workflow run: its fields, then its steps as a table.
fn show_run(g: &Global, r: &Value) {
    if g.is_json() {
        output::json(r);
        return;
    }
    print!("{}", output::fields(r, &RUN_DETAIL));
    println!();
    let mut t = output::Table::new(&STEPS).optional(&["STARTED", "ATTEMPT", "DECIDED_BY", "TYPE"]);
    for s in r["steps"].as_array().into_iter().flatten() {
        t.row(vec![
            output::cell(&s["step_ref"]),
            output::cell(&s["step_type"]),
            output::cell(&s["status"]),
            output::cell(&s["attempt"]),
            output::time(&s["started_at"]),
            output::time(&s["finished_at"]),
            output::cell(&s["decision"]),
            output::cell(&s["decided_by"]),
            output::cell(&s["error"]),
        ]);
    }
    t.print();
}
