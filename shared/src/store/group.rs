//! Group commit: many concurrent callers, one statement.
//!
//! Callers [`GroupCommit::submit`] an item and wait for its result. A few
//! writer tasks each take whatever is waiting (up to `max_batch`) and hand
//! it to one batch function, i.e. one statement and one commit for many
//! items. Nothing waits for a batch to fill: an idle system writes each item
//! at once, a busy one batches naturally because items pile up while the
//! previous commit is in flight. Several writers keep commits overlapping,
//! so Postgres can also group their fsyncs. The worker batches its Redis
//! acks through the same type (one script call per batch): the batch
//! function's error type is a parameter, `sqlx::Error` unless said.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

#[derive(Debug, thiserror::Error)]
pub enum GroupError<E = sqlx::Error> {
    /// The batch failed; every item of the batch gets the error.
    #[error("{0}")]
    Batch(Arc<E>),
    /// The batch function returned a result count other than its item
    /// count (a bug): no item can be told its own result.
    #[error("batch result count mismatch")]
    Mismatch,
    /// The writers are gone (the process is shutting down).
    #[error("the writer has stopped")]
    Closed,
}

// By hand: a derived Clone would ask `E: Clone`, and the error is shared.
impl<E> Clone for GroupError<E> {
    fn clone(&self) -> Self {
        match self {
            GroupError::Batch(e) => GroupError::Batch(Arc::clone(e)),
            GroupError::Mismatch => GroupError::Mismatch,
            GroupError::Closed => GroupError::Closed,
        }
    }
}

impl GroupError<sqlx::Error> {
    /// A `sqlx::Error` of the same kind, for callers that classify errors
    /// (an outage stays an outage, so retry loops keep retrying it).
    pub fn into_sqlx(self) -> sqlx::Error {
        match self {
            GroupError::Closed => sqlx::Error::PoolClosed,
            GroupError::Mismatch => sqlx::Error::Protocol("batch result count mismatch".into()),
            GroupError::Batch(e) => match &*e {
                sqlx::Error::PoolTimedOut => sqlx::Error::PoolTimedOut,
                sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
                sqlx::Error::Io(io) => sqlx::Error::Io(std::io::Error::new(io.kind(), io.to_string())),
                other => sqlx::Error::Protocol(other.to_string()),
            },
        }
    }
}

type Job<I, O, E> = (I, oneshot::Sender<Result<O, GroupError<E>>>);

pub struct GroupCommit<I, O, E = sqlx::Error> {
    tx: mpsc::Sender<Job<I, O, E>>,
}

impl<I, O, E> Clone for GroupCommit<I, O, E> {
    fn clone(&self) -> Self {
        GroupCommit { tx: self.tx.clone() }
    }
}

impl<I: Send + 'static, O: Send + 'static, E: std::fmt::Display + Send + Sync + 'static> GroupCommit<I, O, E> {
    /// Starts `writers` tasks. `write` gets a batch and must return one
    /// result per item, in order.
    pub fn spawn<F, Fut>(writers: usize, max_batch: usize, write: F) -> GroupCommit<I, O, E>
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, E>> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<Job<I, O, E>>(max_batch * writers.max(1) * 4);
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
                            tracing::error!(
                                items = n,
                                results = outs.len(),
                                "group commit returned the wrong number of results"
                            );
                            for reply in replies {
                                let _ = reply.send(Err(GroupError::Mismatch));
                            }
                        }
                        Err(e) => {
                            let e = GroupError::Batch(Arc::new(e));
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
    pub async fn submit(&self, item: I) -> Result<O, GroupError<E>> {
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
                Ok::<_, sqlx::Error>(items.into_iter().map(|i| i * 2).collect())
            }
        });
        let handles: Vec<_> = (0..400u32)
            .map(|i| {
                let g = g.clone();
                tokio::spawn(async move { (i, g.submit(i).await.unwrap()) })
            })
            .collect();
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
        assert!(matches!(g.submit(1).await, Err(GroupError::Batch(_))));
    }

    #[tokio::test]
    async fn any_error_type_reaches_every_item_of_its_batch() {
        let g = GroupCommit::spawn(1, 10, |_items: Vec<u32>| async {
            Err::<Vec<()>, _>(std::io::Error::other("redis down"))
        });
        match g.submit(1).await {
            Err(GroupError::Batch(e)) => assert_eq!(e.to_string(), "redis down"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_batch_with_the_wrong_result_count_fails_its_items() {
        let g = GroupCommit::spawn(1, 10, |_items: Vec<u32>| async { Ok::<_, sqlx::Error>(Vec::<u32>::new()) });
        assert!(matches!(g.submit(1).await, Err(GroupError::Mismatch)));
    }
}
