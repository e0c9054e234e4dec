//! `switchyard-scheduler`: loads the configuration, prepares the database
//! and runs the scheduler loops until SIGTERM or Ctrl-C.

use std::process::ExitCode;
use std::time::Duration;

use switchyard_shared::{db, shutdown, telemetry, Config};

switchyard_shared::service_allocator!();

#[tokio::main]
async fn main() -> ExitCode {
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("switchyard-scheduler: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = telemetry::init_tracing("switchyard-scheduler") {
        eprintln!("switchyard-scheduler: {e}");
        return ExitCode::from(2);
    }
    if let Err(e) = db::prepare(&config.database_url, Duration::from_secs(60)).await {
        tracing::error!(error = %e, "could not prepare the database");
        return ExitCode::FAILURE;
    }
    let shutdown = shutdown::on_signals();
    telemetry::spawn_metrics(config.metrics_addr, config.metrics_token.clone(), shutdown.clone());
    let ran = switchyard_scheduler::run(config, shutdown).await;
    switchyard_shared::traces::flush();
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "scheduler failed");
            ExitCode::FAILURE
        }
    }
}
