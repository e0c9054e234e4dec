//! `switchyard-worker`: configuration, tracing and signals; the work is in the library.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use switchyard_shared::{db, shutdown, telemetry, Config};

switchyard_shared::service_allocator!();

#[tokio::main]
async fn main() -> ExitCode {
    let config = match Config::from_env().and_then(|c| c.require_jwt_key().map(|()| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("switchyard-worker: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = telemetry::init_tracing("switchyard-worker") {
        eprintln!("switchyard-worker: {e}");
        return ExitCode::from(2);
    }
    let started = start(config).await;
    switchyard_shared::traces::flush();
    match started {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "switchyard-worker failed");
            ExitCode::FAILURE
        }
    }
}

async fn start(config: Config) -> anyhow::Result<()> {
    db::prepare(&config.database_url, Duration::from_secs(60)).await.context("preparing the database")?;
    let shutdown = shutdown::on_signals();
    telemetry::spawn_metrics(config.metrics_addr, config.metrics_token.clone(), shutdown.clone());
    switchyard_worker::run(config, shutdown).await.context("running the worker")
}
