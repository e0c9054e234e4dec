//! The Redis connections of one process: one multiplexed connection that
//! every command shares, and a connection of its own for blocking pops. On
//! Redis Cluster (`REDIS_URL` = `redis+cluster://host:port,host:port` or a
//! comma list of node URLs) both are cluster connections, which route each
//! command by its keys' slot and follow the cluster's slot moves.
//!
//! Commands used to take a connection from a pool, which bought nothing:
//! each connection is multiplexed already, and every checkout cost an
//! `UNWATCH`+`PING` round trip (deadpool's health check), as many round trips
//! as the commands themselves. On one shared connection, commands from
//! concurrent tasks are pipelined: Redis reads them with one syscall and
//! answers them in one write.
//!
//! A blocking pop (BLPOP) would hold up every command pipelined behind it,
//! so it has a connection of its own, kept across pops: an idle worker pops
//! once per run it is woken for, and a health check per pop would double its
//! round trips. On a single node it comes from a deadpool-redis pool; a pop
//! that fails gives it back, and the pool checks it before lending it again.
//! On a cluster a failed pop drops its cluster connection and the next pop
//! makes a new one.
//!
//! Connections are made on first use, so a process starts while Redis is
//! down. The shared one is made again after an I/O error (Redis restarted,
//! the connection killed): the command that met the error fails, later ones
//! go to the new connection.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Config as PoolConfig, Pool, Runtime};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncCommands, Cmd, Pipeline, RedisFuture, Value};
use tokio::sync::{Mutex, OnceCell};

use super::QueueError;
use crate::redis_url::{cluster_nodes, node_urls};

/// How long to wait for Redis to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a command may wait for its answer on the shared connection
/// before it fails. Every script finishes in milliseconds, so this only ends
/// the wait on a Redis that has stopped answering.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections for blocking pops on a single node: one in use, one being
/// checked after a failed pop.
const BLOCKING_CONNS: usize = 2;

/// Where the process's Redis is.
#[derive(Clone)]
enum Server {
    Node(redis::Client, Pool),
    /// A cluster, and the client of its first node (pub/sub: a message
    /// published on any node of a cluster reaches subscribers on every node).
    Cluster(Box<ClusterClient>, redis::Client),
}

/// The Redis connections of one process (cheap to clone: clones share them).
#[derive(Clone)]
pub struct Redis {
    server: Server,
    shared: Arc<OnceCell<Conn>>,
    /// The connection blocking pops use, kept between them.
    blocking: Arc<Mutex<Option<Blocking>>>,
}

/// A connection for blocking pops.
enum Blocking {
    Node(deadpool_redis::Connection),
    Cluster(ClusterConnection),
}

/// One connection, to a single node or to a cluster: every command of
/// `redis::AsyncCommands` and every script runs on either.
#[derive(Clone)]
pub enum Conn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// UNLINKs every key matching `pattern` on every node `url` names, and
/// says how many there were: what removes a test's or a benchmark's keys
/// (a SCAN sees one node's keys, and a cluster node refuses an UNLINK of
/// keys in several slots, so each node is scanned and each key goes alone).
pub async fn unlink_matching(url: &str, pattern: &str) -> Result<usize, QueueError> {
    let mut n = 0;
    for node in node_urls(url) {
        let client = redis::Client::open(node)?;
        let mut c = client.get_multiplexed_async_connection().await?;
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut c)
                .await?;
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.unlink(k).ignore();
            }
            let _: () = pipe.query_async(&mut c).await?;
            n += keys.len();
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(n)
}

impl Redis {
    /// Checks `url`; connects on first use.
    pub fn open(url: &str) -> Result<Redis, QueueError> {
        let bad = |e: redis::RedisError| QueueError::Config(e.to_string());
        let server = match cluster_nodes(url) {
            Some(nodes) => {
                let first = nodes.first().ok_or_else(|| QueueError::Config("a cluster URL names no node".into()))?;
                let first = redis::Client::open(first.as_str()).map_err(bad)?;
                let cluster = ClusterClient::builder(nodes)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .retries(2)
                    .build()
                    .map_err(bad)?;
                Server::Cluster(Box::new(cluster), first)
            }
            None => {
                let pool = PoolConfig::from_url(url)
                    .builder()
                    .map_err(|e| QueueError::Config(e.to_string()))?
                    .max_size(BLOCKING_CONNS)
                    .wait_timeout(Some(CONNECT_TIMEOUT))
                    .create_timeout(Some(CONNECT_TIMEOUT))
                    .recycle_timeout(Some(CONNECT_TIMEOUT))
                    .runtime(Runtime::Tokio1)
                    .build()
                    .map_err(|e| QueueError::Config(e.to_string()))?;
                Server::Node(redis::Client::open(url).map_err(bad)?, pool)
            }
        };
        Ok(Redis { server, shared: Arc::default(), blocking: Arc::default() })
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.server, Server::Cluster(..))
    }

    /// A client for pub/sub (any node of a cluster hears every message).
    pub fn pubsub_client(&self) -> redis::Client {
        match &self.server {
            Server::Node(c, _) | Server::Cluster(_, c) => c.clone(),
        }
    }

    /// The shared connection, for any command that answers at once.
    pub async fn conn(&self) -> Result<Conn, QueueError> {
        let conn = self
            .shared
            .get_or_try_init(|| async {
                match &self.server {
                    Server::Node(client, _) => {
                        // One retry: a caller waits seconds at most for a Redis
                        // that is down, and its next command tries again.
                        let config = ConnectionManagerConfig::new()
                            .set_connection_timeout(CONNECT_TIMEOUT)
                            .set_response_timeout(RESPONSE_TIMEOUT)
                            .set_number_of_retries(1)
                            .set_max_delay(500);
                        Ok(Conn::Node(ConnectionManager::new_with_config(client.clone(), config).await?))
                    }
                    Server::Cluster(cluster, _) => {
                        Ok::<_, QueueError>(Conn::Cluster(cluster.get_async_connection().await?))
                    }
                }
            })
            .await?;
        Ok(conn.clone())
    }

    /// A connection for blocking pops.
    async fn blocking_conn(&self) -> Result<Blocking, QueueError> {
        Ok(match &self.server {
            Server::Node(_, pool) => Blocking::Node(pool.get().await?),
            Server::Cluster(c, _) => {
                // A pop waits longer than a command may: its own timeout.
                let config = ClusterConfig::new()
                    .set_connection_timeout(CONNECT_TIMEOUT)
                    .set_response_timeout(super::MAX_BLOCK + RESPONSE_TIMEOUT);
                Blocking::Cluster(c.get_async_connection_with_config(config).await?)
            }
        })
    }

    /// BLPOP of `key` for up to `timeout` (at most `MAX_BLOCK`), on the
    /// blocking connection. Concurrent pops of one handle take turns.
    pub async fn blpop(&self, key: &str, timeout: Duration) -> Result<Option<(String, String)>, QueueError> {
        let timeout = timeout.min(super::MAX_BLOCK).as_secs_f64();
        let mut kept = self.blocking.lock().await;
        let conn = match kept.as_mut() {
            Some(c) => c,
            None => kept.insert(self.blocking_conn().await?),
        };
        let popped = match conn {
            Blocking::Node(c) => c.blpop(key, timeout).await,
            Blocking::Cluster(c) => c.blpop(key, timeout).await,
        };
        if popped.is_err() {
            *kept = None;
        }
        Ok(popped?)
    }
}
