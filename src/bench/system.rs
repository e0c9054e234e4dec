//! The system under test: a fresh database and a private Redis key prefix,
//! the target, and `switchyard api`, `worker` and `scheduler` as separate
//! processes (so /proc shows each one's CPU). [`System::stop`] undoes all of
//! it and is called on every exit path, Ctrl-C included.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sqlx::PgPool;
use switchyard_shared::db;
use switchyard_shared::queue::unlink_matching;
use tokio::process::{Child, Command};

use super::client::Api;
use super::opts::Opts;
use super::target::Target;

const SECRET: &str = "bench-internal-secret-0123456789";
const JWT_KEY: &str = "bench-jwt-signing-key-0123456789abcdef";
/// Signing secrets (webhook, subscription) are sealed with it: without one
/// the api refuses to store them, as a production server would.
const SECRETS_KEY: &str = "bench-secrets-key-0123456789abcdef";
/// The services, in the order they start (`--workers` copies of the
/// worker, whose logs are `worker.log`, `worker-2.log`, ...); they stop in
/// reverse.
const SERVICES: [&str; 3] = ["api", "worker", "scheduler"];

pub struct Service {
    pub name: &'static str,
    pub pid: u32,
    child: Child,
    pub log: PathBuf,
}

pub struct System {
    pub db_name: String,
    pub database_url: String,
    pub redis_url: String,
    pub prefix: String,
    /// Where logs of this run go (`<out>/<tag>/`).
    pub dir: PathBuf,
    pub pool: Option<PgPool>,
    /// A pool on the `postgres` database: statistics queries that do not
    /// count against the bench database.
    pub admin: Option<PgPool>,
    pub services: Vec<Service>,
    pub target: Option<Target>,
    pub api: Option<Api>,
    pidfile: Option<PathBuf>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl System {
    pub fn new(opts: &Opts) -> System {
        let tag = chrono::Utc::now().format("%Y%m%d_%H%M%S").to_string();
        let db_name = format!("switchyard_bench_{tag}");
        System {
            database_url: format!("{}/{db_name}", opts.pg_base),
            redis_url: opts.redis_url.clone(),
            prefix: format!("sybench{}", tag.replace('_', "")),
            dir: opts.out.join(&tag),
            db_name,
            pool: None,
            admin: None,
            services: Vec::new(),
            target: None,
            api: None,
            pidfile: opts.pidfile.clone(),
        }
    }

    pub fn pool(&self) -> &PgPool {
        self.pool.as_ref().expect("started")
    }
    pub fn admin(&self) -> &PgPool {
        self.admin.as_ref().expect("started")
    }
    pub fn target(&self) -> &Target {
        self.target.as_ref().expect("started")
    }
    pub fn api(&self) -> &Api {
        self.api.as_ref().expect("started")
    }

    /// Brings everything up; on error, what did start is left for [`System::stop`].
    pub async fn start(&mut self, opts: &Opts) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
        self.target = Some(Target::start()?);
        self.admin = Some(db::lazy_pool(&format!("{}/postgres", opts.pg_base), 2)?);
        // Created here so that the statistics have a database to name; the
        // services migrate it with the migrations they were built with.
        db::ensure_database(&self.database_url)
            .await
            .with_context(|| format!("creating the bench database {}", self.db_name))?;
        if let Some(v) = &opts.sync_commit {
            // Before anything connects: a database's settings apply to the
            // sessions opened after them. The server's own stays as it was.
            let alter = format!("ALTER DATABASE \"{}\" SET synchronous_commit = {v}", self.db_name);
            sqlx::query(&alter).execute(self.admin()).await.context("setting synchronous_commit")?;
        }
        self.pool = Some(db::lazy_pool(&self.database_url, 8)?);

        let bin = match &opts.bin {
            Some(b) => b.clone(),
            None => std::env::current_exe()?.with_file_name("switchyard"),
        };
        if !bin.exists() {
            bail!("{} not found: build it with `cargo build --release`", bin.display());
        }
        let api_port = free_port()?;
        let base = format!("http://127.0.0.1:{api_port}");
        for name in SERVICES {
            let copies = if name == "worker" { opts.workers } else { 1 };
            for _ in 0..copies {
                self.spawn(&bin, name, api_port)?;
            }
        }
        let api = Api::new(&base, SECRET)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !api.healthy().await {
            if Instant::now() > deadline {
                bail!("the api did not answer /health within 30 s; see {}", self.dir.join("api.log").display());
            }
            if let Some(dead) = self.exited() {
                bail!("{dead}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.api = Some(api);
        Ok(())
    }

    fn spawn(&mut self, bin: &Path, name: &'static str, api_port: u16) -> anyhow::Result<()> {
        let copy = self.services.iter().filter(|s| s.name == name).count();
        let log = match copy {
            0 => self.dir.join(format!("{name}.log")),
            n => self.dir.join(format!("{name}-{}.log", n + 1)),
        };
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .arg(name)
            // The rest of the environment (WORKER_CONCURRENCY, LEASE_SECS, ...)
            // passes through, so a setting can be benchmarked without a rebuild.
            .env_remove("METRICS_ADDR")
            .env("DATABASE_URL", &self.database_url)
            .env("REDIS_URL", &self.redis_url)
            .env("REDIS_KEY_PREFIX", &self.prefix)
            .env("API_ADDR", format!("127.0.0.1:{api_port}"))
            .env("INTERNAL_SECRET", SECRET)
            .env("JWT_SIGNING_KEY", JWT_KEY)
            .env("SECRETS_KEY", SECRETS_KEY)
            .env("RATE_LIMIT_GLOBAL_PER_MIN", "0")
            .env("RATE_LIMIT_TRIGGER_PER_MIN", "0")
            .env("RATE_LIMIT_BULK_PER_MIN", "0")
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .env("SHUTDOWN_GRACE_SECS", "2")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} {name}", bin.display()))?;
        let pid = child.id().context("child has no pid")?;
        if let Some(pidfile) = &self.pidfile {
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(pidfile)?;
            writeln!(f, "{name} {pid}")?;
        }
        self.services.push(Service { name, pid, child, log });
        Ok(())
    }

    /// Writes out what earlier work left dirty (Postgres' buffers, then the
    /// kernel's page cache) and rests for `rest`, so that a latency is not
    /// measured while the disk still flushes what came before: the fsync
    /// behind every commit waits behind that writeback, and p99 with it.
    pub async fn settle_disk(&self, rest: Duration) -> anyhow::Result<()> {
        sqlx::query("CHECKPOINT").execute(self.pool()).await?;
        tokio::task::spawn_blocking(|| std::process::Command::new("sync").status()).await??;
        tokio::time::sleep(rest).await;
        Ok(())
    }

    /// A service that has exited, described.
    pub fn exited(&mut self) -> Option<String> {
        self.services.iter_mut().find_map(|s| match s.child.try_wait() {
            Ok(Some(status)) => Some(format!("{} exited ({status}); see {}", s.name, s.log.display())),
            _ => None,
        })
    }

    /// Stops the services (SIGTERM, then SIGKILL after 5 s), drops the
    /// database and deletes the Redis keys. Never fails: it reports.
    pub async fn stop(&mut self) {
        for s in self.services.iter_mut().rev() {
            if matches!(s.child.try_wait(), Ok(None)) {
                let _ = Command::new("kill").arg("-TERM").arg(s.pid.to_string()).status().await;
                if tokio::time::timeout(Duration::from_secs(5), s.child.wait()).await.is_err() {
                    eprintln!("bench: {} did not stop on SIGTERM; killing it", s.name);
                    let _ = s.child.kill().await;
                }
            }
        }
        if let Some(pool) = self.pool.take() {
            pool.close().await;
        }
        if let Some(admin) = self.admin.take() {
            let drop = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.db_name);
            if let Err(e) = sqlx::query(&drop).execute(&admin).await {
                eprintln!("bench: could not drop database {}: {e}", self.db_name);
            }
            admin.close().await;
        }
        if let Err(e) = unlink_matching(&self.redis_url, &format!("{}*", self.prefix)).await {
            eprintln!("bench: could not delete Redis keys {}*: {e}", self.prefix);
        }
    }
}
