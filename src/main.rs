//! `switchyard`: the services and the operator CLI.
//!
//! - `switchyard dev`: api + worker + scheduler in one process, with
//!   development defaults for the secrets it needs.
//! - `switchyard migrate`: create the database if missing and apply migrations.
//! - `switchyard api|worker|scheduler`: run one service alone (the same as
//!   the `switchyard-api`, `switchyard-worker`, `switchyard-scheduler` binaries).
//! - `switchyard openapi`: print the OpenAPI document.
//! - `switchyard health [URL]`: a container healthcheck.
//! - `switchyard runs|jobs|workflows|queues|dlq ...`: operator commands
//!   over the public HTTP API ([`cli`]).
//!
//! The services take their configuration from the environment only; the
//! operator commands take flags (`--api`, `--token`, `--project`, with
//! environment fallbacks).

mod cli;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use switchyard_shared::config::Secret;
use switchyard_shared::{db, shutdown, telemetry, Config};

switchyard_shared::service_allocator!();

/// The internal secret `switchyard dev` uses when INTERNAL_SECRET is unset.
/// For local development only; README's quickstart uses it.
const DEV_INTERNAL_SECRET: &str = "dev-internal-secret";
/// The secrets key `switchyard dev` uses when SECRETS_KEY is unset: fixed,
/// so job secrets saved before a restart still decrypt after it.
const DEV_SECRETS_KEY: &str = "switchyard-dev-secrets-key";

#[derive(Parser, Debug)]
#[command(
    name = "switchyard",
    version,
    about = "Switchyard: run its services, or operate a running one over its HTTP API.",
    long_about = "Switchyard: run its services, or operate a running one over its HTTP API.\n\n\
        The services (dev, api, worker, scheduler, migrate) are configured from the environment \
        (docs/configuration.md). The operator commands (runs, jobs, workflows, queues, dlq) \
        call the API at --api with --token; see `switchyard <command> --help`.",
    after_help = cli::EXIT_CODES,
    arg_required_else_help = true
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run api, worker and scheduler in one process.
    Dev,
    /// Run the api alone.
    Api,
    /// Run a worker alone.
    Worker,
    /// Run a scheduler alone.
    Scheduler,
    /// Create the database if missing and apply migrations.
    Migrate,
    /// Print the OpenAPI document (JSON).
    Openapi,
    /// Ask a process's health endpoint, for container healthchecks (the
    /// images have no curl): exit 0 when it answers 2xx within 3 s, else 1.
    Health {
        /// The api's is /health/ready (Postgres and Redis answer); a
        /// worker's or scheduler's is /health on its METRICS_ADDR.
        #[arg(default_value = "http://127.0.0.1:8080/health/ready")]
        url: String,
    },
    #[command(flatten)]
    Operator(cli::Command),
}

/// Parses the command line (usage errors exit 2, `--help` 0) and runs the
/// command. A service that fails prints `Error: ...` and exits 1, as a
/// `main` returning `anyhow::Result` does; an operator command exits with
/// the codes in [`cli::EXIT_CODES`].
#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let service = match args.command {
        Command::Operator(cmd) => return ExitCode::from(cli::run(cmd).await),
        Command::Openapi => {
            println!("{}", switchyard_api::openapi_json());
            Ok(())
        }
        Command::Health { url } => return health(&url).await,
        Command::Migrate => migrate().await,
        Command::Dev => dev().await,
        Command::Api => single("api").await,
        Command::Worker => single("worker").await,
        Command::Scheduler => single("scheduler").await,
    };
    switchyard_shared::traces::flush();
    match service {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            ExitCode::FAILURE
        }
    }
}

async fn health(url: &str) -> ExitCode {
    let answer = reqwest::Client::new().get(url).timeout(Duration::from_secs(3)).send().await;
    match answer {
        Ok(r) if r.status().is_success() => ExitCode::SUCCESS,
        Ok(r) => {
            eprintln!("{url}: {}", r.status());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{url}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn migrate() -> anyhow::Result<()> {
    let config = load_config();
    init_tracing("switchyard");
    db::prepare(&config.database_url, Duration::from_secs(60)).await.context("migrating")?;
    println!("database ready: {}", redact(&config.database_url));
    Ok(())
}

/// Logs, and traces when the OpenTelemetry variables ask (a process that
/// cannot export as asked does not start).
fn init_tracing(service: &'static str) {
    if let Err(e) = telemetry::init_tracing(service) {
        eprintln!("{service}: {e}");
        std::process::exit(2);
    }
}

fn load_config() -> Config {
    match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("switchyard: {e}");
            std::process::exit(2);
        }
    }
}

/// One service alone, configured exactly as its own binary would be.
async fn single(which: &str) -> anyhow::Result<()> {
    let config = load_config();
    if which != "scheduler" {
        if let Err(e) = config.require_jwt_key() {
            eprintln!("switchyard {which}: {e}");
            std::process::exit(2);
        }
    }
    init_tracing(match which {
        "api" => "switchyard-api",
        "worker" => "switchyard-worker",
        _ => "switchyard-scheduler",
    });
    if let Err(e) = db::prepare(&config.database_url, Duration::from_secs(60)).await {
        tracing::warn!(error = %e, "could not prepare the database yet");
    }
    let stop = shutdown::on_signals();
    if which != "api" {
        telemetry::spawn_metrics(config.metrics_addr, config.metrics_token.clone(), stop.clone());
    }
    match which {
        "api" => switchyard_api::run(config, stop).await,
        "worker" => switchyard_worker::run(config, stop).await,
        _ => switchyard_scheduler::run(config, stop).await,
    }
}

async fn dev() -> anyhow::Result<()> {
    let mut config = load_config();
    init_tracing("switchyard");
    if config.internal_secret.is_none() {
        tracing::warn!("INTERNAL_SECRET is unset; using the development secret {DEV_INTERNAL_SECRET:?}");
        config.internal_secret = Some(Secret::new(DEV_INTERNAL_SECRET));
    }
    // One process signs and verifies run tokens, so a random key works.
    if config.jwt_signing_key.is_none() {
        config.jwt_signing_key = Some(Secret::new(random_hex()));
    }
    if config.secrets_key.is_none() {
        tracing::warn!("SECRETS_KEY is unset; encrypting job secrets with the development key");
        config.secrets_key = Some(Secret::new(DEV_SECRETS_KEY));
    }
    // Per-client rate limits protect a shared server; on a developer's box
    // the default 10 triggers a minute would stop the Quickstart's second
    // loop. Off unless asked for.
    let mut relaxed = Vec::new();
    for (var, limit) in [
        ("RATE_LIMIT_GLOBAL_PER_MIN", &mut config.rate_limit_global_per_min),
        ("RATE_LIMIT_TRIGGER_PER_MIN", &mut config.rate_limit_trigger_per_min),
        ("RATE_LIMIT_BULK_PER_MIN", &mut config.rate_limit_bulk_per_min),
    ] {
        if std::env::var_os(var).is_none() {
            *limit = 0;
            relaxed.push(var);
        }
    }
    if !relaxed.is_empty() {
        tracing::info!(off = ?relaxed, "per-client rate limits are off under switchyard dev; set them to turn them on");
    }
    db::prepare(&config.database_url, Duration::from_secs(60))
        .await
        .with_context(|| format!("preparing the database at {}", redact(&config.database_url)))?;
    let stop = shutdown::on_signals();
    // A line to paste as it is: the development secret spelled out, or the
    // variable in double quotes so that the shell expands it.
    println!(
        "switchyard dev: api on http://{}  (docs: http://{}/docs)\n  try: curl -H \"Authorization: Bearer {}\" http://{}/v1/projects",
        config.api_addr,
        config.api_addr,
        if config.internal_secret.as_ref().is_some_and(|s| s.expose() == DEV_INTERNAL_SECRET) {
            DEV_INTERNAL_SECRET
        } else {
            "$INTERNAL_SECRET"
        },
        config.api_addr
    );
    // Whichever service stops first, for whatever reason, stops the others.
    fn watched(
        name: &'static str,
        stop: shutdown::Shutdown,
        fut: impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    ) -> tokio::task::JoinHandle<(&'static str, anyhow::Result<()>)> {
        tokio::spawn(async move {
            let r = fut.await;
            stop.cancel();
            (name, r)
        })
    }
    let tasks = [
        watched("api", stop.clone(), switchyard_api::run(config.clone(), stop.clone())),
        watched("worker", stop.clone(), switchyard_worker::run(config.clone(), stop.clone())),
        watched("scheduler", stop.clone(), switchyard_scheduler::run(config.clone(), stop.clone())),
    ];
    let mut result = Ok(());
    for task in tasks {
        match task.await {
            Ok((_, Ok(()))) => {}
            Ok((name, Err(e))) => {
                tracing::error!(service = name, error = %e, "stopped with an error");
                result = Err(e.context(format!("{name} failed")));
            }
            Err(e) => result = Err(anyhow::anyhow!("a service panicked: {e}")),
        }
    }
    result
}

fn random_hex() -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for b in uuid::Uuid::new_v4().as_bytes().iter().chain(uuid::Uuid::new_v4().as_bytes()) {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}
