//! `switchyard queues stats`.

use clap::{Args, Subcommand};

use super::client::Client;
use super::output::{self, Table};
use super::{exit, Failure, Global};

#[derive(Args, Debug)]
#[command(after_help = super::EXIT_CODES)]
pub struct Queues {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub cmd: QueuesCmd,
}

#[derive(Subcommand, Debug)]
pub enum QueuesCmd {
    /// Per job of the project: where its runs wait in Redis (ready,
    /// scheduled, throttled, parked, leased), its unfinished runs by status
    /// (Postgres), and how long the oldest queued run has waited.
    Stats,
}

const HEADERS: [&str; 12] = [
    "JOB",
    "SLUG",
    "READY",
    "SCHEDULED",
    "THROTTLED",
    "PARKED",
    "LEASED",
    "PENDING",
    "QUEUED",
    "RUNNING",
    "RETRYING",
    "OLDEST_QUEUED_S",
];

pub async fn run(c: Queues) -> Result<u8, Failure> {
    let g = &c.global;
    let client = Client::new(g)?;
    match c.cmd {
        QueuesCmd::Stats => {
            let s = client.get("/v1/stats/queues", &g.project_query()).await?;
            if g.is_json() {
                output::json(&s);
                return Ok(exit::OK);
            }
            let mut t = Table::new(&HEADERS);
            for j in s["jobs"].as_array().into_iter().flatten() {
                let mut row = vec![output::cell(&j["job_id"]), output::cell(&j["slug"])];
                for k in &HEADERS[2..] {
                    let key =
                        if *k == "OLDEST_QUEUED_S" { "oldest_queued_age_secs".to_string() } else { k.to_lowercase() };
                    row.push(output::cell(&j[key.as_str()]));
                }
                t.row(row);
            }
            t.print();
        }
    }
    Ok(exit::OK)
}
