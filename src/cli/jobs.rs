//! `switchyard jobs list|get|create|update|trigger|pause|resume|disable|enable`.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::client::Client;
use super::follow::{follow, Progress};
use super::output;
use super::{exit, list, print_page, read_file, read_payload, runs, seg, Failure, Global, Paging};

#[derive(Args, Debug)]
#[command(after_help = super::EXIT_CODES)]
pub struct Jobs {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub cmd: JobsCmd,
}

#[derive(Subcommand, Debug)]
pub enum JobsCmd {
    /// The project's jobs, newest first.
    List {
        /// Only the jobs of this group.
        #[arg(long)]
        group: Option<String>,
        #[command(flatten)]
        paging: Paging,
    },
    /// One job's definition.
    Get { job_id: String },
    /// Create a job from a JSON file (the body of `POST /v1/jobs`: at
    /// least `name` and `endpoint_url`); `--project` fills in its
    /// `project_id` when the file has none. Prints the job.
    Create {
        /// The job as JSON; `-` reads stdin.
        #[arg(long, short = 'f')]
        file: String,
    },
    /// Change a job from a JSON file (the body of `PATCH /v1/jobs/{id}`:
    /// the fields to change); a new version of the job. Prints the job.
    Update {
        job_id: String,
        /// The changes as JSON; `-` reads stdin.
        #[arg(long, short = 'f')]
        file: String,
    },
    /// Trigger a run of a job; prints the run (with --wait, once it ended).
    Trigger {
        job_id: String,
        /// The run's payload: JSON text, `@file` for a file's content, or
        /// `@-` for stdin.
        #[arg(long)]
        payload: Option<String>,
        /// A second trigger with the same key returns the first run.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Higher runs first (-1000 to 1000).
        #[arg(long, allow_negative_numbers = true)]
        priority: Option<i64>,
        /// Follow the run's live stream until it ends, printing each change
        /// of status on stderr; exit 0 only if it completed (1 if it
        /// failed, timed out, was cancelled or expired).
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this many seconds (exit 6).
        #[arg(long, default_value_t = 300, requires = "wait")]
        timeout: u64,
    },
    /// Pause a job: triggers are still accepted and their runs wait, queued
    /// runs and retries are held, cron stops; running runs finish.
    Pause { job_id: String },
    /// Resume a paused job: its waiting runs go out again.
    Resume { job_id: String },
    /// Disable a job (`enabled: false`, a new version): triggers are
    /// refused (409) and cron stops; runs already queued still go out.
    Disable { job_id: String },
    /// Enable a disabled job (`enabled: true`).
    Enable { job_id: String },
}

const HEADERS: [&str; 7] = ["ID", "SLUG", "NAME", "ENABLED", "PAUSED", "VERSION", "ENDPOINT"];

const DETAIL: [&str; 22] = [
    "id",
    "project_id",
    "group_id",
    "name",
    "slug",
    "description",
    "enabled",
    "paused",
    "version",
    "endpoint_url",
    "fallback_endpoint_url",
    "cron",
    "timezone",
    "execution_window_cron",
    "max_attempts",
    "retry_strategy",
    "timeout_secs",
    "max_concurrency",
    "max_concurrency_per_key",
    "rate_limit_max",
    "created_at",
    "updated_at",
];

pub async fn run(c: Jobs) -> Result<u8, Failure> {
    let g = &c.global;
    let client = Client::new(g)?;
    match c.cmd {
        JobsCmd::List { group, paging } => {
            let mut q = g.project_query();
            q.extend(group.map(|v| ("group_id", v)));
            let page = list(&client, "/v1/jobs", &q, &paging).await?;
            if g.is_json() {
                output::json(&page);
                return Ok(exit::OK);
            }
            print_page(&page, &HEADERS, &["SLUG", "ENDPOINT", "VERSION", "PAUSED"], |j| {
                vec![
                    output::cell(&j["id"]),
                    output::cell(&j["slug"]),
                    output::cell(&j["name"]),
                    output::cell(&j["enabled"]),
                    output::cell(&j["paused"]),
                    output::cell(&j["version"]),
                    output::cell(&j["endpoint_url"]),
                ]
            });
        }
        JobsCmd::Get { job_id } => {
            let j = client.get(&format!("/v1/jobs/{}", seg(&job_id)), &[]).await?;
            show(g, &j);
        }
        JobsCmd::Create { file } => {
            let body = g.with_project(read_file(&file)?);
            let j = client.post("/v1/jobs", Some(body)).await?;
            show(g, &j);
        }
        JobsCmd::Update { job_id, file } => {
            let j = client.patch(&format!("/v1/jobs/{}", seg(&job_id)), read_file(&file)?).await?;
            show(g, &j);
        }
        JobsCmd::Trigger { job_id, payload, idempotency_key, priority, wait, timeout } => {
            let mut body = json!({});
            if let Some(p) = payload {
                body["payload"] = read_payload(&p)?;
            }
            if let Some(k) = idempotency_key {
                body["idempotency_key"] = Value::String(k);
            }
            if let Some(p) = priority {
                body["priority"] = json!(p);
            }
            let r = client.post(&format!("/v1/jobs/{}/trigger", seg(&job_id)), Some(body)).await?;
            // A batching job answers with the batch the trigger joined.
            let batched = r.get("trigger_id").is_some();
            if !wait {
                if g.is_json() {
                    output::json(&r);
                } else if batched {
                    let run = r["run_id"].as_str().map(|id| format!("  run {id}")).unwrap_or_default();
                    println!(
                        "{}  batch {} position {}{run}",
                        output::cell(&r["trigger_id"]),
                        output::cell(&r["batch_id"]),
                        r["position"]
                    );
                } else {
                    println!("{}  {}", output::cell(&r["id"]), output::cell(&r["status"]));
                }
                return Ok(exit::OK);
            }
            let limit = Duration::from_secs(timeout);
            let batch_run = if batched { Some(batch_run(&client, &r, limit).await?) } else { None };
            let id = batch_run.as_deref().or(r["id"].as_str()).unwrap_or_default();
            let path = format!("/v1/runs/{}/stream", seg(id));
            // Each change of status on stderr while it waits; the run, once
            // it ended, on stdout.
            let first = if batched { None } else { r["status"].as_str() };
            let progress = Progress::start(format!("run {id}"), first, limit);
            let done = follow(&client, &path, "run", limit, |e| {
                if e.event == "run" {
                    progress.status(e.data["run"]["status"].as_str().unwrap_or("?"));
                }
            })
            .await?;
            drop(progress);
            if g.is_json() {
                output::json(&done);
            } else {
                runs::show(&done);
            }
            return Ok(if done["status"] == "completed" { exit::OK } else { exit::OUTCOME });
        }
        JobsCmd::Pause { job_id } => set_paused(&client, g, &job_id, true).await?,
        JobsCmd::Resume { job_id } => set_paused(&client, g, &job_id, false).await?,
        JobsCmd::Disable { job_id } => set_enabled(&client, g, &job_id, false).await?,
        JobsCmd::Enable { job_id } => set_enabled(&client, g, &job_id, true).await?,
    }
    Ok(exit::OK)
}

/// Prints one job: its JSON, or its fields for people.
fn show(g: &Global, j: &Value) {
    if g.is_json() {
        output::json(j);
    } else {
        print!("{}", output::fields(j, &DETAIL));
    }
}

/// The run a batched trigger's batch made: at once when the trigger filled
/// it, else once the batch closes (polled, within `limit`).
async fn batch_run(client: &Client, r: &Value, limit: Duration) -> Result<String, Failure> {
    if let Some(id) = r["run_id"].as_str() {
        return Ok(id.to_string());
    }
    let batch = r["batch_id"].as_str().unwrap_or_default();
    eprintln!("{}  waiting in batch {batch} for it to fill or close", output::cell(&r["trigger_id"]));
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let b = client.get(&format!("/v1/trigger-batches/{}", seg(batch)), &[]).await?;
        if b["status"] == "closed" {
            return match b["run_id"].as_str() {
                Some(id) => Ok(id.to_string()),
                None => {
                    Err(Failure::new(exit::OUTCOME, format!("batch {batch} closed without a run: its job was deleted")))
                }
            };
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Failure::new(exit::WAIT_TIMEOUT, format!("batch {batch} did not close within {limit:?}")));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `POST /v1/jobs/{id}/pause` or `/resume`.
async fn set_paused(client: &Client, g: &Global, job_id: &str, paused: bool) -> Result<(), Failure> {
    let verb = if paused { "pause" } else { "resume" };
    let j = client.post(&format!("/v1/jobs/{}/{verb}", seg(job_id)), None).await?;
    if g.is_json() {
        output::json(&j);
    } else {
        println!("{}  paused={}", output::cell(&j["id"]), output::cell(&j["paused"]));
    }
    Ok(())
}

/// `PATCH /v1/jobs/{id}` with `enabled` alone (the API makes a new version
/// of the job, as for any change).
async fn set_enabled(client: &Client, g: &Global, job_id: &str, enabled: bool) -> Result<(), Failure> {
    let j = client.patch(&format!("/v1/jobs/{}", seg(job_id)), json!({"enabled": enabled})).await?;
    if g.is_json() {
        output::json(&j);
    } else {
        println!("{}  enabled={}  version={}", output::cell(&j["id"]), output::cell(&j["enabled"]), j["version"]);
    }
    Ok(())
}
