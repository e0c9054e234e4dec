use switchyard_shared::{db, shutdown, telemetry, Config};

switchyard_shared::service_allocator!();

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("switchyard-api: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = config.require_jwt_key() {
        eprintln!("switchyard-api: {e}");
        std::process::exit(2);
    }
    if let Err(e) = telemetry::init_tracing("switchyard-api") {
        eprintln!("switchyard-api: {e}");
        std::process::exit(2);
    }
    // Migrations run under sqlx's advisory lock; a Postgres that is still
    // starting gets a minute to answer.
    if let Err(e) = db::prepare(&config.database_url, std::time::Duration::from_secs(60)).await {
        tracing::warn!(error = %e, "could not prepare the database; serving and reporting not ready");
    }
    let served = switchyard_api::run(config, shutdown::on_signals()).await;
    switchyard_shared::traces::flush();
    served
}
