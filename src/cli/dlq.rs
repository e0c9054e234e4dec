//! `switchyard dlq list|replay`: the dead-letter queue, `failed` and
//! `timed_out` runs with no attempt left that were not replayed yet (the
//! API's definition, `GET /v1/runs/dead-letters`).

use clap::{Args, Subcommand};
use serde_json::json;

use super::client::Client;
use super::output::{self, Table};
use super::runs::print_runs;
use super::{exit, list, Failure, Global, Paging};

#[derive(Args, Debug)]
#[command(after_help = super::EXIT_CODES)]
pub struct Dlq {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub cmd: DlqCmd,
}

#[derive(Subcommand, Debug)]
pub enum DlqCmd {
    /// The dead-lettered runs, newest first.
    List {
        /// Only this job's runs.
        #[arg(long)]
        job: Option<String>,
        #[command(flatten)]
        paging: Paging,
    },
    /// Replay dead-lettered runs, oldest first: each becomes a new run
    /// (its `continuation_of` is the original) and leaves the queue.
    Replay {
        /// Only this job's runs.
        #[arg(long)]
        job: Option<String>,
        /// At most this many runs (1 to 100).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100))]
        limit: u32,
    },
}

pub async fn run(c: Dlq) -> Result<u8, Failure> {
    let g = &c.global;
    let client = Client::new(g)?;
    match c.cmd {
        DlqCmd::List { job, paging } => {
            let mut q = g.project_query();
            q.extend(job.map(|j| ("job_id", j)));
            let page = list(&client, "/v1/runs/dead-letters", &q, &paging).await?;
            if g.is_json() {
                output::json(&page);
            } else {
                print_runs(&page);
            }
            Ok(exit::OK)
        }
        DlqCmd::Replay { job, limit } => {
            let mut body = json!({"limit": limit});
            if let Some(p) = &g.project {
                body["project_id"] = json!(p);
            }
            if let Some(j) = job {
                body["job_id"] = json!(j);
            }
            let r = client.post("/v1/runs/bulk-dlq-replay", Some(body)).await?;
            let results = r["results"].as_array().cloned().unwrap_or_default();
            let failed = results.iter().filter(|x| x["status"] != "replayed").count();
            if g.is_json() {
                output::json(&r);
            } else {
                let mut t = Table::new(&["RUN", "STATUS", "NEW_RUN", "ERROR"]).optional(&["NEW_RUN"]);
                for x in &results {
                    t.row(vec![
                        output::cell(&x["run_id"]),
                        output::cell(&x["status"]),
                        output::cell(&x["new_run_id"]),
                        output::cell(&x["error"]),
                    ]);
                }
                t.print();
                println!("{} replayed, {failed} not", results.len() - failed);
            }
            Ok(if failed == 0 { exit::OK } else { exit::OUTCOME })
        }
    }
}
