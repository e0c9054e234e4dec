//! The Redis connections of one process: one multiplexed connection that
//! every command shares, and a small pool for blocking pops.
//!
//! Commands used to take a connection from a pool, which bought nothing:
//! each connection is multiplexed already, and every checkout cost an
//! `UNWATCH`+`PING` round trip (deadpool's health check), as many round trips
//! as the commands themselves. On one shared connection, commands from
//! concurrent tasks are pipelined: Redis reads them with one syscall and
//! answers them in one write.
//!
//! A blocking pop (BLPOP) would hold up every command pipelined behind it,
//! so it has a connection of its own, taken from a deadpool-redis pool and
//! kept across pops: an idle worker pops once per run it is woken for, and
//! a health check per pop would double its round trips. A pop that fails
//! gives its connection back, and the pool checks it before lending it again.
//!
//! Connections are made on first use, so a process starts while Redis is
//! down. The shared one is made again after an I/O error (Redis restarted,
//! the connection killed): the command that met the error fails, later ones
//! go to the new connection.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Config as PoolConfig, Pool, Runtime};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;
use tokio::sync::{Mutex, OnceCell};

use super::QueueError;

/// How long to wait for Redis to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a command may wait for its answer on the shared connection
/// before it fails. Every script finishes in milliseconds, so this only ends
/// the wait on a Redis that has stopped answering.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections for blocking pops: one in use, one being checked after a
/// failed pop.
const BLOCKING_CONNS: usize = 2;

/// The Redis connections of one process (cheap to clone: clones share them).
#[derive(Clone)]
pub struct Redis {
    client: redis::Client,
    shared: Arc<OnceCell<ConnectionManager>>,
    blocking_pool: Pool,
    /// The connection blocking pops use, kept between them.
    blocking: Arc<Mutex<Option<deadpool_redis::Connection>>>,
}

impl Redis {
    /// Checks `url`; connects on first use.
    pub fn open(url: &str) -> Result<Redis, QueueError> {
        let client = redis::Client::open(url).map_err(|e| QueueError::Config(e.to_string()))?;
        let blocking_pool = PoolConfig::from_url(url)
            .builder()
            .map_err(|e| QueueError::Config(e.to_string()))?
            .max_size(BLOCKING_CONNS)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| QueueError::Config(e.to_string()))?;
        Ok(Redis { client, shared: Arc::default(), blocking_pool, blocking: Arc::default() })
    }

    /// The shared connection, for any command that answers at once.
    pub async fn conn(&self) -> Result<ConnectionManager, QueueError> {
        let conn = self
            .shared
            .get_or_try_init(|| async {
                // One retry: a caller waits seconds at most for a Redis that
                // is down, and its next command tries again.
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(CONNECT_TIMEOUT)
                    .set_response_timeout(RESPONSE_TIMEOUT)
                    .set_number_of_retries(1)
                    .set_max_delay(500);
                ConnectionManager::new_with_config(self.client.clone(), config).await
            })
            .await?;
        Ok(conn.clone())
    }

    /// BLPOP of `key` for up to `timeout`, on the blocking connection.
    /// Concurrent pops of one handle take turns.
    pub async fn blpop(&self, key: &str, timeout: Duration) -> Result<Option<(String, String)>, QueueError> {
        let mut kept = self.blocking.lock().await;
        let conn = match kept.as_mut() {
            Some(c) => c,
            None => kept.insert(self.blocking_pool.get().await?),
        };
        let popped = conn.blpop(key, timeout.as_secs_f64()).await;
        if popped.is_err() {
            *kept = None;
        }
        Ok(popped?)
    }
}
