//! The bounds shared by more than one kind of request (a job, a trigger, a
//! workflow and its steps): each written once, here, so that the modules
//! that check those requests need not import each other.

use super::rules::Text;

/// Limits that keep one job from hurting the service or its target.
pub const MAX_ATTEMPTS_LIMIT: i64 = 100;
pub const MAX_TIMEOUT_SECS: i64 = 24 * 3600;

/// A run's priority: higher is dequeued first.
pub const MIN_PRIORITY: i32 = -1000;
pub const MAX_PRIORITY: i32 = 1000;

/// How a workflow's (or a job's) runs follow its versions.
pub const VERSION_POLICIES: [&str; 2] = ["pin", "latest"];

/// Longest idempotency or concurrency key.
pub const MAX_KEY_LEN: usize = 256;
/// An idempotency or concurrency key.
pub const KEY: Text = Text::printable(1, MAX_KEY_LEN);
/// Most entries of `tags` or `metadata` (of a trigger and of a job), and
/// the longest key and value.
pub const MAX_MAP_ENTRIES: usize = 64;
pub const MAX_MAP_KEY_LEN: usize = 128;
pub const MAX_MAP_VALUE_LEN: usize = 1024;
/// A key and a value of `tags` or `metadata`.
pub const MAP_KEY: Text = Text::stored(1, MAX_MAP_KEY_LEN);
pub const MAP_VALUE: Text = Text::stored(0, MAX_MAP_VALUE_LEN);
/// Whether a map of `tags` or `metadata` keeps to its bounds.
pub fn map_ok<'a>(len: usize, mut pairs: impl Iterator<Item = (&'a String, &'a String)>) -> bool {
    len <= MAX_MAP_ENTRIES && pairs.all(|(k, v)| MAP_KEY.ok(k) && MAP_VALUE.ok(v))
}
/// The bounds of the numbers a trigger (or a workflow's job step) may
/// override: `(min, max)`.
pub const MAX_ATTEMPTS_OVERRIDE: (i64, i64) = (1, MAX_ATTEMPTS_LIMIT);
pub const TIMEOUT_SECS_OVERRIDE: (i64, i64) = (1, MAX_TIMEOUT_SECS);
pub const RETRY_INITIAL_DELAY_SECS: (i64, i64) = (0, 86_400);
pub const RETRY_MAX_DELAY_SECS: (i64, i64) = (0, 86_400 * 7);
