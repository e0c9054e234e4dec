//! Run statuses and the moves between them (DECISIONS §3).
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunStatus {
    Pending,
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
    }
}
