//! The scheduler's errors: one enum for the library, with the option
//! validation failure as its own type so a bad setting names its field.

use switchyard_shared::queue::QueueError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("postgres: {0}")]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Options(#[from] OptionsError),
}

/// A loop's options failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct OptionsError {
    /// `<loop>.<field>`, e.g. `promoter.batch_size`.
    pub field: &'static str,
    pub reason: String,
}

impl OptionsError {
    pub(crate) fn new(field: &'static str, reason: impl Into<String>) -> OptionsError {
        OptionsError { field, reason: reason.into() }
    }
}

/// Checks that a batch size is usable: at least one, and small enough that
/// one script call or query stays short.
pub(crate) fn check_batch(field: &'static str, n: usize) -> Result<(), OptionsError> {
    if n == 0 || n > 10_000 {
        return Err(OptionsError::new(field, format!("must be between 1 and 10000, got {n}")));
    }
    Ok(())
}

pub(crate) fn check_positive(field: &'static str, d: std::time::Duration) -> Result<(), OptionsError> {
    if d.is_zero() {
        return Err(OptionsError::new(field, "must be positive"));
    }
    Ok(())
}

/// Checks that a loop's longest sleep is not shorter than its shortest.
pub(crate) fn check_max_sleep(
    field: &'static str,
    max_sleep: std::time::Duration,
    min_field: &str,
    min: std::time::Duration,
) -> Result<(), OptionsError> {
    if max_sleep < min {
        return Err(OptionsError::new(field, format!("must not be shorter than {min_field}")));
    }
    Ok(())
}
