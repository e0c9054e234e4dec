//! Keyset pagination (docs/contract.md, "Limits"): `limit` (default 50, at most
//! 100) and an opaque `cursor`, which is the id of the last item returned. Ids
//! are time-ordered, so "older than the cursor" is `id < cursor`. A list
//! reads both through [`Window`]; a run's events, whose cursor is a position
//! in its history, check only their [`limit`] here.

use poem_openapi::types::{ParseFromJSON, ToJSON, Type};
use poem_openapi::Object;

use crate::error::{ApiError, ApiResult};

pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 100;

pub fn limit(raw: Option<i64>) -> ApiResult<i64> {
    match raw {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(n) => {
            Err(ApiError::invalid_field("query.limit", format!("must be between 1 and {MAX_LIMIT}"), Some(n.into())))
        }
    }
}

/// The cursors a list takes, stated in the document (`document::cursors`):
/// every string matching it is a position (`id < cursor`), so none is
/// refused; it is `ids::is_valid_external_id`.
pub const CURSOR_PATTERN: &str = "^[A-Za-z0-9_.-]{1,64}$";

fn cursor(raw: Option<String>) -> ApiResult<Option<String>> {
    match raw {
        None => Ok(None),
        Some(c) if switchyard_shared::ids::is_valid_external_id(&c) => Ok(Some(c)),
        Some(c) => Err(ApiError::invalid_field("query.cursor", "not a cursor returned by this API", Some(c.into()))),
    }
}

/// A page of results.
#[derive(Object)]
pub struct Page<T: ParseFromJSON + ToJSON + Type + Send + Sync> {
    pub data: Vec<T>,
    /// Whether more results follow.
    pub has_more: bool,
    /// Pass as `cursor` to get the next page; present when has_more.
    #[oai(skip_serializing_if_is_none)]
    pub next_cursor: Option<String>,
}

/// A request's `limit` and `cursor`, checked.
pub struct Window {
    pub limit: i64,
    pub cursor: Option<String>,
}

impl Window {
    pub fn parse(limit: Option<i64>, cursor: Option<String>) -> ApiResult<Window> {
        Ok(Window { limit: self::limit(limit)?, cursor: self::cursor(cursor)? })
    }

    /// Where the page starts: the last id (or key) of the previous one.
    pub fn after(&self) -> Option<&str> {
        self.cursor.as_deref()
    }

    /// How many rows to fetch: one more than the page holds, to learn
    /// whether another page follows.
    pub fn fetch(&self) -> i64 {
        self.limit + 1
    }

    /// Cuts the fetched rows (at most `limit + 1`) into a page.
    pub fn page<R, T: ParseFromJSON + ToJSON + Type + Send + Sync>(
        &self,
        mut rows: Vec<R>,
        id: impl Fn(&R) -> String,
        view: impl Fn(R) -> T,
    ) -> Page<T> {
        let has_more = rows.len() as i64 > self.limit;
        rows.truncate(self.limit as usize);
        let next_cursor = if has_more { rows.last().map(&id) } else { None };
        Page { data: rows.into_iter().map(view).collect(), has_more, next_cursor }
    }
}
