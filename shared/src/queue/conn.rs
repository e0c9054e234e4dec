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
//! so it takes a connection of its own from the pool; its health check is
//! paid only by an idle worker.
//!
//! Connections are made on first use, so a process starts while Redis is
//! down. The shared one is made again after an I/O error (Redis restarted,
//! the connection killed): the command that met the error fails, later ones
//! go to the new connection.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Config as PoolConfig, Pool, Runtime};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use super::QueueError;

/// How long to wait for Redis to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a command may wait for its answer on the shared connection
/// before it fails. Every script finishes in milliseconds, so this only ends
/// the wait on a Redis that has stopped answering.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections for blocking pops: a worker process waits in one at a time;
/// tests run a few workers in one process.
const BLOCKING_CONNS: usize = 8;

/// The Redis connections of one process (cheap to clone: clones share them).
#[derive(Clone)]
pub struct Redis {
    client: redis::Client,
    shared: Arc<OnceCell<ConnectionManager>>,
    blocking: Pool,
}

impl Redis {
    /// Checks `url`; connects on first use.
    pub fn open(url: &str) -> Result<Redis, QueueError> {
        let client = redis::Client::open(url).map_err(|e| QueueError::Config(e.to_string()))?;
        let blocking = PoolConfig::from_url(url)
            .builder()
            .map_err(|e| QueueError::Config(e.to_string()))?
            .max_size(BLOCKING_CONNS)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| QueueError::Config(e.to_string()))?;
        Ok(Redis { client, shared: Arc::default(), blocking })
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

    /// A connection of its own, for a blocking command (BLPOP).
    pub async fn blocking_conn(&self) -> Result<deadpool_redis::Connection, QueueError> {
        Ok(self.blocking.get().await?)
    }
}
