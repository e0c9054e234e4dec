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
    telemetry::init_tracing();
    // Migrations run under sqlx's advisory lock; a Postgres that is still
    // starting gets a minute to answer.
    if let Err(e) = db::prepare(&config.database_url, std::time::Duration::from_secs(60)).await {
        tracing::warn!(error = %e, "could not prepare the database; serving and reporting not ready");
    }
    switchyard_api::run(config, shutdown::on_signals()).await
}
