//! Group commit: many concurrent callers, one statement.
//!
//! Callers [`GroupCommit::submit`] an item and wait for its result. A few
//! writer tasks each take whatever is waiting (up to `max_batch`) and hand
//! it to one batch function, i.e. one statement and one commit for many
//! items. Nothing waits for a batch to fill: an idle system writes each item
//! at once, a busy one batches naturally because items pile up while the
//! previous commit is in flight. Several writers keep commits overlapping,
//! so Postgres can also group their fsyncs. The worker batches its Redis
//! acks through the same type (one script call per batch), with Redis's
//! error as each item's result.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

#[derive(Debug, thiserror::Error, Clone)]
pub enum GroupError {
    /// The batch statement failed; every item of the batch gets the error.
    #[error("{0}")]
    Db(Arc<sqlx::Error>),
    /// The writers are gone (the process is shutting down).
    #[error("the writer has stopped")]
    Closed,
}

impl GroupError {
    /// A `sqlx::Error` of the same kind, for callers that classify errors
    /// (an outage stays an outage, so retry loops keep retrying it).
    pub fn into_sqlx(self) -> sqlx::Error {
        match self {
            GroupError::Closed => sqlx::Error::PoolClosed,
            GroupError::Db(e) => match &*e {
                sqlx::Error::PoolTimedOut => sqlx::Error::PoolTimedOut,
                sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
                sqlx::Error::Io(io) => sqlx::Error::Io(std::io::Error::new(io.kind(), io.to_string())),
                other => sqlx::Error::Protocol(other.to_string()),
            },
        }
    }

    /// The underlying database error, if any.
    pub fn db(&self) -> Option<&sqlx::Error> {
        match self {
            GroupError::Db(e) => Some(e),
            GroupError::Closed => None,
        }
    }
}

type Job<I, O> = (I, oneshot::Sender<Result<O, GroupError>>);

pub struct GroupCommit<I, O> {
    tx: mpsc::Sender<Job<I, O>>,
}

impl<I, O> Clone for GroupCommit<I, O> {
    fn clone(&self) -> Self {
        GroupCommit { tx: self.tx.clone() }
    }
}

impl<I: Send + 'static, O: Send + 'static> GroupCommit<I, O> {
    /// Starts `writers` tasks. `write` gets a batch and must return one
    /// result per item, in order.
    pub fn spawn<F, Fut>(writers: usize, max_batch: usize, write: F) -> GroupCommit<I, O>
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, sqlx::Error>> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<Job<I, O>>(max_batch * writers.max(1) * 4);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let write = Arc::new(write);
        for _ in 0..writers.max(1) {
            let rx = Arc::clone(&rx);
            let write = Arc::clone(&write);
            tokio::spawn(async move {
                loop {
                    let mut batch = Vec::with_capacity(max_batch);
                    {
                        // One writer gathers at a time, so batches are not
                        // split item by item between idle writers.
                        let mut rx = rx.lock().await;
                        match rx.recv().await {
                            Some(job) => batch.push(job),
                            None => return,
                        }
                        // Let the tasks that are ready to run submit too
                        // (a request being parsed, a dispatch that just
                        // ended): microseconds, not a timer, and batches
                        // grow at moderate load where they would hold one.
                        tokio::task::yield_now().await;
                        while batch.len() < max_batch {
                            match rx.try_recv() {
                                Ok(job) => batch.push(job),
                                Err(_) => break,
                            }
                        }
                    }
                    let (items, replies): (Vec<I>, Vec<_>) = batch.into_iter().unzip();
                    let n = items.len();
                    match write(items).await {
                        Ok(outs) if outs.len() == n => {
                            for (reply, out) in replies.into_iter().zip(outs) {
                                let _ = reply.send(Ok(out));
                            }
                        }
                        Ok(outs) => {
                            tracing::error!(items = n, results = outs.len(), "group commit returned the wrong number of results");
                            let e = GroupError::Db(Arc::new(sqlx::Error::Protocol("batch result count mismatch".into())));
                            for reply in replies {
                                let _ = reply.send(Err(e.clone()));
                            }
                        }
                        Err(e) => {
                            let e = GroupError::Db(Arc::new(e));
                            for reply in replies {
                                let _ = reply.send(Err(e.clone()));
                            }
                        }
                    }
                }
            });
        }
        GroupCommit { tx }
    }

    /// Queues `item` for the next batch and waits for its result.
    pub async fn submit(&self, item: I) -> Result<O, GroupError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send((item, reply)).await.map_err(|_| GroupError::Closed)?;
        rx.await.map_err(|_| GroupError::Closed)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn batches_under_load_and_keeps_order_of_results() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&calls);
        let g = GroupCommit::spawn(2, 50, move |items: Vec<u32>| {
            let c = Arc::clone(&c);
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                Ok(items.into_iter().map(|i| i * 2).collect())
            }
        });
        let handles: Vec<_> = (0..400u32).map(|i| {
            let g = g.clone();
            tokio::spawn(async move { (i, g.submit(i).await.unwrap()) })
        }).collect();
        for h in handles {
            let (i, out) = h.await.unwrap();
            assert_eq!(out, i * 2);
        }
        let n = calls.load(Ordering::SeqCst);
        assert!(n < 100, "400 items in {n} statements: batching happened");
    }

    #[tokio::test]
    async fn a_failed_batch_fails_each_item() {
        let g = GroupCommit::spawn(1, 10, |_items: Vec<u32>| async { Err::<Vec<u32>, _>(sqlx::Error::PoolTimedOut) });
        assert!(matches!(g.submit(1).await, Err(GroupError::Db(_))));
    }
}
