//! The Postgres side: pool, database creation, migrations.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

/// Every migration of `migrations/`, embedded: binaries and tests apply the
/// same set. sqlx takes an advisory lock while migrating, so several
/// processes starting at once apply each migration exactly once.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("bad DATABASE_URL: {0}")]
    Url(#[source] sqlx::Error),
    #[error("creating database {name}: {source}")]
    Create { name: String, source: sqlx::Error },
    #[error("migrating: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
}

/// A pool that connects lazily: processes start while Postgres is down and
/// report it through /health/ready instead of refusing to start.
pub fn lazy_pool(url: &str, max_connections: u32) -> Result<PgPool, DbError> {
    Ok(pool_with(connect_options(url)?, max_connections))
}

/// [`lazy_pool`] for the worker, whose statements all reach runs by id in
/// small batches (and for the scheduler's workflow engine, whose statements
/// reach workflow runs and their steps the same way). Two settings, both measured with pg_stat_statements on
/// the benchmark:
///
/// - `plan_cache_mode = force_generic_plan`: left to choose, Postgres
///   planned the dispatch read and the outcome write afresh on every call
///   (their custom plans looked cheaper than the generic one), and planning
///   cost more than executing (0.8 ms of 2.4 ms per outcome batch).
/// - `enable_seqscan = off`: the one plan is made on the connection's
///   first use, maybe while the tables are new and look empty, when a
///   sequential scan looks cheapest; it stayed until the next ANALYZE (1.7
///   ms and 370 buffer reads to read one run). The statements name their
///   ids (`id = ANY($1)`) and keep other conditions out of the scan, so
///   with sequential scans off the plan is the primary key's.
pub fn worker_pool(url: &str, max_connections: u32) -> Result<PgPool, DbError> {
    let opts = connect_options(url)?.options([("plan_cache_mode", "force_generic_plan"), ("enable_seqscan", "off")]);
    Ok(pool_with(opts, max_connections))
}

fn connect_options(url: &str) -> Result<PgConnectOptions, DbError> {
    Ok(PgConnectOptions::from_str(url)
        .map_err(DbError::Url)?
        .log_statements(tracing::log::LevelFilter::Trace)
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1)))
}

fn pool_with(opts: PgConnectOptions, max_connections: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        // No ping before every query: it cost a round trip per statement
        // (a tenth of the worker's CPU in the benchmark's profile). A
        // connection that died shows as an I/O error on its next use, which
        // callers already treat as an outage (retry or 503), and is dropped.
        .test_before_acquire(false)
        .connect_lazy_with(opts)
}

/// Creates the database named in `url` when it does not exist yet.
pub async fn ensure_database(url: &str) -> Result<(), DbError> {
    let opts = PgConnectOptions::from_str(url).map_err(DbError::Url)?;
    let name = opts.get_database().unwrap_or("postgres").to_string();
    let mut admin = opts.clone().database("postgres").connect().await?;
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await?;
    if !exists {
        let sql = format!("CREATE DATABASE \"{}\"", name.replace('"', "\"\""));
        if let Err(e) = sqlx::query(&sql).execute(&mut admin).await {
            // Another process may have created it a moment ago.
            let raced = e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "42P04");
            if !raced {
                return Err(DbError::Create { name, source: e });
            }
        }
    }
    admin.close().await?;
    Ok(())
}

/// Database creation plus migrations; retried until Postgres answers or the
/// deadline passes, so a process started alongside Postgres waits for it.
pub async fn prepare(url: &str, wait: Duration) -> Result<(), DbError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let attempt = async {
            ensure_database(url).await?;
            let pool = lazy_pool(url, 2)?;
            MIGRATOR.run(&pool).await?;
            pool.close().await;
            Ok::<_, DbError>(())
        }
        .await;
        match attempt {
            Ok(()) => return Ok(()),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "postgres not ready; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
