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

use std::time::Duration;

use sqlx::{Connection, PgConnection};

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
/// Tries of a test database's drop.
const DROP_TRIES: u32 = 10;

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
        scratch.prepare().await;
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
        // the drop itself fails it ("being accessed by other users"), so it
        // is tried again.
        for attempt in 1..=DROP_TRIES {
            let dropped = async {
                let mut c = PgConnection::connect(&admin).await?;
                sqlx::query(&drop).execute(&mut c).await?;
                c.close().await
            }
            .await;
            match dropped {
                Ok(()) => break,
                Err(e) if attempt == DROP_TRIES => eprintln!("test cleanup: could not drop {}: {e}", self.db_name),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
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
