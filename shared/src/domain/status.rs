//! Run statuses and the moves between them (what each status means:
//! docs/contract.md, "Run statuses").
//!
//! ```text
//!  pending ──► queued ──► running ──► completed
//!     │          ▲  ▲        │  │
//!     │          │  └────────┘  ├──► retrying ──► queued (when due)
//!     │          │  lease lost  ├──► failed / timed_out
//!     └──────────┴───────────── any non-terminal ──► cancelled / expired
//! ```

use std::fmt;
use std::str::FromStr;

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef};
use sqlx::Postgres;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum RunStatus {
    Pending,
    /// A new run's status when nothing holds it back.
    #[default]
    Queued,
    Running,
    Retrying,
    Completed,
    Failed,
    TimedOut,
    Cancelled,
    Expired,
}

impl RunStatus {
    pub const ALL: [RunStatus; 9] = [
        RunStatus::Pending,
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Retrying,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::TimedOut,
        RunStatus::Cancelled,
        RunStatus::Expired,
    ];

    /// The statuses a run can still leave (cancel, expiry); the rest are
    /// terminal.
    pub const ACTIVE: [RunStatus; 4] = [RunStatus::Pending, RunStatus::Queued, RunStatus::Running, RunStatus::Retrying];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Retrying => "retrying",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Expired => "expired",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::TimedOut | RunStatus::Cancelled | RunStatus::Expired
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL.into_iter().find(|v| v.as_str() == s).ok_or_else(|| format!("unknown run status {s:?}"))
    }
}

/// Compares with a status's text, as the api and the database spell it.
impl PartialEq<&str> for RunStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

// Stored as text (the column's CHECK lists the values): a value this
// build does not know is a decode error, never taken for another status.
impl sqlx::Type<Postgres> for RunStatus {
    fn type_info() -> PgTypeInfo {
        <&str as sqlx::Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <&str as sqlx::Type<Postgres>>::compatible(ty)
    }
}

impl PgHasArrayType for RunStatus {
    fn array_type_info() -> PgTypeInfo {
        <&str as PgHasArrayType>::array_type_info()
    }
}

impl<'r> sqlx::Decode<'r, Postgres> for RunStatus {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(<&str as sqlx::Decode<Postgres>>::decode(value)?.parse()?)
    }
}

impl sqlx::Encode<'_, Postgres> for RunStatus {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <&str as sqlx::Encode<Postgres>>::encode(self.as_str(), buf)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExecutionMode {
    /// The 2xx response body is the result.
    #[default]
    Sync,
    /// The target answers 202 and finishes the run over the SDK.
    Async,
}

impl ExecutionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionMode::Sync => "sync",
            ExecutionMode::Async => "async",
        }
    }
}

impl FromStr for ExecutionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sync" => Ok(ExecutionMode::Sync),
            "async" => Ok(ExecutionMode::Async),
            _ => Err(format!("unknown execution_mode {s:?}; expected sync or async")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_terminals_are_right() {
        for s in RunStatus::ALL {
            assert_eq!(s.as_str().parse::<RunStatus>().unwrap(), s);
        }
        let terminal: Vec<_> = RunStatus::ALL.into_iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect();
        assert_eq!(terminal, ["completed", "failed", "timed_out", "cancelled", "expired"]);
        assert!("done".parse::<RunStatus>().is_err());
        let active: Vec<_> = RunStatus::ALL.into_iter().filter(|s| !s.is_terminal()).collect();
        assert_eq!(active, RunStatus::ACTIVE);
    }
}
