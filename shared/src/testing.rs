//! What the integration tests of every crate stand on (the `testing`
//! feature, enabled by the crates' dev-dependencies): where Postgres and
//! Redis are, and a [`Scratch`] per test, its own migrated database and its
//! own Redis key prefix, removed when the test ends.
//!
//! - `TEST_PG_BASE`: the server's URL without a database
//!   (`postgres://postgres@127.0.0.1:5432` unless set).
//! - `TEST_REDIS_URL`: `redis://127.0.0.1:6379` unless set; `scripts/test`
//!   runs the suites again with a local Redis Cluster's URL there.
//! - `TEST_QUEUE_PARTITIONS`: queue partitions of a test's queue (1 unless
//!   set; the cluster pass sets more).
//! - `TEST_PG_CONNECTIONS`: how many Postgres connections the tests of one
//!   process may hold at once ([`admit`]); unless set, what the server has
//!   free when the first test starts, less a margin for other work.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};

use crate::{db, ids, queue};

pub fn pg_base() -> String {
    std::env::var("TEST_PG_BASE").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

pub fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

pub fn queue_partitions() -> usize {
    std::env::var("TEST_QUEUE_PARTITIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}

/// How long a test waits for its database to be created and migrated: on
/// a busy machine a `CREATE DATABASE` waits for others' checkpoints.
const PREPARE: Duration = Duration::from_secs(30);
/// How long a test's cleanup keeps trying to drop its database: a server
/// at its connection limit refuses the drop's own connection until other
/// tests end.
const DROP_FOR: Duration = Duration::from_secs(60);
/// Connection slots [`admit`] leaves to the rest of the machine's work
/// (psql, a dev system, the cleanup's own connections).
const MARGIN: u32 = 10;
/// The fewest connections [`admit`] hands out, whatever the server says:
/// a test that runs two systems at once holds the first while it waits for
/// the second, so the budget fits three systems (two such tests never
/// wait on each other).
const FLOOR: u32 = 36;
/// A test database older than this is a leftover of a run that was killed
/// (a test's cleanup runs even when it fails, not when its process dies).
const STALE_AFTER: Duration = Duration::from_secs(3 * 3600);

/// The connections the tests of this process may hold at once.
static CONNECTIONS: OnceCell<(Arc<Semaphore>, u32)> = OnceCell::const_new();

/// Waits until `connections` more Postgres connections fit the budget of
/// this process, and holds them until the permit drops. A suite run beside
/// other work on a shared server then waits for room instead of failing
/// its tests with 503s when the server refuses connections. The first call
/// also drops the test databases that killed runs left behind.
pub async fn admit(connections: u32) -> OwnedSemaphorePermit {
    let (slots, budget) = CONNECTIONS
        .get_or_init(|| async {
            let budget = match std::env::var("TEST_PG_CONNECTIONS").ok().and_then(|v| v.parse().ok()) {
                Some(n) => n,
                None => free_slots().await.map_or(FLOOR, |free| free.saturating_sub(MARGIN).max(FLOOR)),
            };
            drop_leftovers().await;
            (Arc::new(Semaphore::new(budget as usize)), budget)
        })
        .await
        .clone();
    // A test wanting more than the whole budget runs alone.
    slots.acquire_many_owned(connections.min(budget)).await.expect("the semaphore is never closed")
}

/// The connection slots the server has free for ordinary users now.
async fn free_slots() -> Option<u32> {
    let mut c = PgConnection::connect(&format!("{}/postgres", pg_base())).await.ok()?;
    let free: i64 = sqlx::query_scalar(
        "SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
                - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')",
    )
    .fetch_one(&mut c)
    .await
    .ok()?;
    let _ = c.close().await;
    u32::try_from(free).ok()
}

/// Drops the test databases (`sy_it_`, `sy_test_` and a UUIDv7)
/// made over [`STALE_AFTER`] ago that nobody is connected to. The age is
/// read from the name, whose id starts with its creation time.
pub async fn drop_leftovers() {
    let Ok(mut c) = PgConnection::connect(&format!("{}/postgres", pg_base())).await else { return };
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database d WHERE datname ~ '^sy_(it|test)_[0-9a-f]{32}$'
            AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datid = d.oid)",
    )
    .fetch_all(&mut c)
    .await
    .unwrap_or_default();
    let now_ms = chrono::Utc::now().timestamp_millis();
    for name in names {
        let hex = &name[name.len() - 32..];
        let Ok(made_ms) = i64::from_str_radix(&hex[..12], 16) else { continue };
        if now_ms - made_ms > STALE_AFTER.as_millis() as i64 {
            let dropped = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\"")).execute(&mut c).await;
            if let Err(e) = dropped {
                eprintln!("test setup: could not drop the leftover {name}: {e}");
            }
        }
    }
    let _ = c.close().await;
}

/// One test's own database and Redis key prefix.
#[derive(Clone, Debug)]
pub struct Scratch {
    /// `<pg_base>/<db_name>`.
    pub database_url: String,
    pub db_name: String,
    /// Every Redis key of the test starts with `<redis_prefix>:`.
    pub redis_prefix: String,
    pub redis_url: String,
}

impl Scratch {
    /// A new database `<db_tag>_<id>`, created and migrated, and a new
    /// prefix `<prefix_tag><id>`.
    pub async fn create(db_tag: &str, prefix_tag: &str) -> Scratch {
        let scratch = Scratch::named(db_tag, prefix_tag);
        let setup = RemoveOnDrop::new(&scratch);
        scratch.prepare().await;
        setup.disarm();
        scratch
    }

    /// The names, nothing created yet: for a test that settles its
    /// configuration first ([`at`](Self::at), then [`prepare`](Self::prepare)).
    pub fn named(db_tag: &str, prefix_tag: &str) -> Scratch {
        Scratch::at(&format!("{}/{}", pg_base(), ids::new_id(db_tag)), &redis_url(), &ids::new_id(prefix_tag))
    }

    /// The database at `database_url` and the keys of `redis_prefix` on
    /// `redis_url`, as a test's configuration ended up naming them.
    pub fn at(database_url: &str, redis_url: &str, redis_prefix: &str) -> Scratch {
        Scratch {
            database_url: database_url.to_string(),
            db_name: database_url.rsplit('/').next().unwrap_or_default().to_string(),
            redis_prefix: redis_prefix.to_string(),
            redis_url: redis_url.to_string(),
        }
    }

    /// Creates and migrates the database.
    pub async fn prepare(&self) {
        db::prepare(&self.database_url, PREPARE).await.expect("create and migrate the test database");
    }

    /// Drops the database (closing whatever is still connected) and unlinks
    /// the prefix's keys on every node. Leaves nothing behind: CI runs on a
    /// long-lived machine, and databases piling up make every later `DROP
    /// DATABASE` (which checkpoints) slower.
    pub async fn remove(&self) {
        let admin = format!("{}/postgres", pg_base());
        let drop = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.db_name);
        // The test's own tasks may still be reconnecting as they stop: a
        // connection made between the drop's termination of the others and
        // the drop itself fails it ("being accessed by other users"). A
        // server at its connection limit refuses the drop's own connection.
        // Either passes, so it is tried again, for up to a minute.
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            let dropped = async {
                let mut c = PgConnection::connect(&admin).await?;
                sqlx::query(&drop).execute(&mut c).await?;
                c.close().await
            }
            .await;
            match dropped {
                Ok(()) => break,
                Err(e) if started.elapsed() > DROP_FOR => {
                    eprintln!("test cleanup: could not drop {} (the next test run drops it): {e}", self.db_name);
                    break;
                }
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
        if let Err(e) = queue::unlink_matching(&self.redis_url, &format!("{}:*", self.redis_prefix)).await {
            eprintln!("test cleanup: could not remove the keys of {}: {e}", self.redis_prefix);
        }
    }

    /// [`remove`](Self::remove) from a `Drop`, which cannot await: on a
    /// thread and runtime of its own, waited for.
    pub fn remove_now(&self) {
        let me = self.clone();
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(me.remove());
        });
        let _ = cleanup.join();
    }
}

/// Removes a test's database and keys when dropped, unless
/// [`disarm`](Self::disarm)ed: it covers a setup that fails between making
/// them and handing them to what removes them at the end.
pub struct RemoveOnDrop(Option<Scratch>);

impl RemoveOnDrop {
    pub fn new(scratch: &Scratch) -> RemoveOnDrop {
        RemoveOnDrop(Some(scratch.clone()))
    }

    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.remove_now();
        }
    }
}
