//! The worker library's error type. What a target answers is never an error
//! here (it becomes the run's outcome); these are the worker's own failures.

use switchyard_shared::queue::QueueError;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid worker options: {0}")]
    Options(String),
    #[error("building the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    #[error("postgres: {0}")]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("signing the run token: {0}")]
    Token(#[from] jsonwebtoken::errors::Error),
}
