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

use std::str::FromStr;

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

/// The terminal run statuses as a SQL list, for statements that pick ended
/// runs: `concat!("status IN ", run_ended_sql!())`. A macro, so that
/// `concat!` joins it to a statement's text at compile time; a test holds
/// it to [`RunStatus::is_terminal`].
#[macro_export]
macro_rules! run_ended_sql {
    () => {
        "('completed', 'failed', 'timed_out', 'cancelled', 'expired')"
    };
}

/// [`RunStatus::ACTIVE`] as a SQL list, like [`run_ended_sql`]. The partial
/// index of unfinished runs (migrations 0005 and 0019) states the same
/// text, which lets the planner match a statement's predicate to it.
#[macro_export]
macro_rules! run_active_sql {
    () => {
        "('pending', 'queued', 'running', 'retrying')"
    };
}

/// Display, FromStr, a comparison with `&str` and the sqlx mapping of a
/// status enum with `ALL` and `as_str`. Stored as text (the column's CHECK
/// lists the values): a value this build does not know is a decode error,
/// never taken for another status.
#[macro_export]
macro_rules! stored_as_text {
    ($t:ty, $what:literal) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                <$t>::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| format!(concat!("unknown ", $what, " {:?}"), s))
            }
        }

        /// Compares with a status's text, as the api and the database spell it.
        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl sqlx::Type<sqlx::Postgres> for $t {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::Type<sqlx::Postgres>>::type_info()
            }

            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }

        impl sqlx::postgres::PgHasArrayType for $t {
            fn array_type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::postgres::PgHasArrayType>::array_type_info()
            }
        }

        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $t {
            fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(<&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?.parse()?)
            }
        }

        impl sqlx::Encode<'_, sqlx::Postgres> for $t {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.as_str(), buf)
            }
        }
    };
}

stored_as_text!(RunStatus, "run status");

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExecutionMode {
    /// The 2xx response body is the result.
    #[default]
    Sync,
    /// The target answers 202 and finishes the run over the SDK.
    Async,
}

impl ExecutionMode {
    pub const ALL: [ExecutionMode; 2] = [ExecutionMode::Sync, ExecutionMode::Async];

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

    #[test]
    fn the_sql_lists_name_the_terminal_and_the_active_statuses() {
        let list = |f: fn(&RunStatus) -> bool| {
            let names: Vec<String> = RunStatus::ALL.iter().filter(|s| f(s)).map(|s| format!("'{s}'")).collect();
            format!("({})", names.join(", "))
        };
        assert_eq!(crate::run_ended_sql!(), list(|s| s.is_terminal()));
        assert_eq!(crate::run_active_sql!(), list(|s| RunStatus::ACTIVE.contains(s)));
    }
}
