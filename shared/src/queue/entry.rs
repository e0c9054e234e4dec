//! A queue entry: `<run_id>|<job_id>|<rank hex>|<concurrency_key>`.
//!
//! The rank orders `ready`: higher priority first, then older first. It is
//! `-priority * 2^42 + (created_ms - 2025-01-01)`, which stays exact in a
//! Redis score (a double) for |priority| <= 1000 and the next 139 years. The
//! same run always gives the same entry, so enqueueing is idempotent and an
//! entry can move between sets without a lookup.
//!
//! An entry also knows its shard (a hash of its run's project), which picks
//! its queue partition (`Queue::partition_of`): every run of a project lives
//! in one partition, so a job's caps and every rate limit of the project
//! (named ones are shared by the project's jobs) are counted by one script
//! on one Redis node. The shard is routing, not identity: it is not written
//! to Redis, and two entries of one run are equal whatever their shard. An
//! entry read back from a partition carries that partition's index instead.

use chrono::{DateTime, Utc};

pub use crate::domain::limits::{MAX_PRIORITY, MIN_PRIORITY};
const EPOCH_MS: i64 = 1_735_689_600_000;
const PRIORITY_STEP: i64 = 1 << 42;
/// Added to the rank before it is written as hex, so it is never negative.
const HEX_OFFSET: i64 = 1 << 53;

#[derive(Clone, Debug)]
pub struct Entry {
    pub run_id: crate::ids::RunId,
    pub job_id: crate::ids::JobId,
    pub rank: i64,
    pub concurrency_key: String,
    /// Picks the partition: `shard % partitions`.
    pub shard: u32,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        (&self.run_id, &self.job_id, self.rank, &self.concurrency_key)
            == (&other.run_id, &other.job_id, other.rank, &other.concurrency_key)
    }
}

impl Eq for Entry {}

impl std::hash::Hash for Entry {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.run_id, &self.job_id, self.rank, &self.concurrency_key).hash(state);
    }
}

/// The shard of a project's entries: FNV-1a of its id, the same in every
/// process and build.
pub fn shard_of(project_id: &str) -> u32 {
    project_id.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("malformed queue entry {0:?}")]
pub struct EntryError(pub String);

impl Entry {
    pub fn new(
        run_id: &crate::ids::RunId,
        job_id: &crate::ids::JobId,
        project_id: &str,
        priority: i32,
        created_at: DateTime<Utc>,
        concurrency_key: Option<&str>,
    ) -> Entry {
        let p = priority.clamp(MIN_PRIORITY, MAX_PRIORITY) as i64;
        let age = (created_at.timestamp_millis() - EPOCH_MS).clamp(0, PRIORITY_STEP - 1);
        Entry {
            run_id: run_id.clone(),
            job_id: job_id.clone(),
            rank: -p * PRIORITY_STEP + age,
            concurrency_key: concurrency_key.unwrap_or("").to_string(),
            shard: shard_of(project_id),
        }
    }

    pub fn rank(&self) -> i64 {
        self.rank
    }

    pub fn encode(&self) -> String {
        format!("{}|{}|{:016x}|{}", self.run_id, self.job_id, self.rank + HEX_OFFSET, self.concurrency_key)
    }

    /// An entry as written by [`Entry::encode`], read from partition `shard`.
    pub fn decode_in(s: &str, shard: u32) -> Result<Entry, EntryError> {
        Ok(Entry { shard, ..Entry::decode(s)? })
    }

    pub fn decode(s: &str) -> Result<Entry, EntryError> {
        let bad = || EntryError(s.to_string());
        let mut parts = s.splitn(4, '|');
        let run_id = parts.next().filter(|p| !p.is_empty()).ok_or_else(bad)?;
        let job_id = parts.next().filter(|p| !p.is_empty()).ok_or_else(bad)?;
        let rank_hex = parts.next().filter(|p| p.len() == 16).ok_or_else(bad)?;
        let key = parts.next().ok_or_else(bad)?;
        let rank = i64::from_str_radix(rank_hex, 16).map_err(|_| bad())? - HEX_OFFSET;
        Ok(Entry { run_id: run_id.into(), job_id: job_id.into(), rank, concurrency_key: key.into(), shard: 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn round_trips_including_keys_with_separators() {
        let t = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        for key in [None, Some("tenant-1"), Some("a|b|c")] {
            let e = Entry::new(&"run_1".into(), &"job_1".into(), "p", 7, t, key);
            assert_eq!(Entry::decode(&e.encode()).unwrap(), e);
        }
        assert!(Entry::decode("run_1|job_1|zz|").is_err());
        assert!(Entry::decode("run_1").is_err());
    }

    #[test]
    fn the_shard_follows_the_project_and_is_not_identity() {
        let t = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        let a = Entry::new(&"run_1".into(), &"job_1".into(), "proj_a", 0, t, None);
        assert_eq!(a.shard, shard_of("proj_a"));
        assert_ne!(shard_of("proj_a"), shard_of("proj_b"));
        // FNV-1a of "a": fixed, so every process routes a project alike.
        assert_eq!(shard_of("a"), 0xe40c_292c);
        assert_eq!(Entry::decode_in(&a.encode(), 3).unwrap(), a);
    }

    #[test]
    fn priority_first_then_age() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let t1 = t0 + chrono::Duration::seconds(1);
        let old_low = Entry::new(&"a".into(), &"j".into(), "p", 0, t0, None).rank();
        let new_low = Entry::new(&"b".into(), &"j".into(), "p", 0, t1, None).rank();
        let new_high = Entry::new(&"c".into(), &"j".into(), "p", 5, t1, None).rank();
        assert!(new_high < old_low && old_low < new_low);
        let top = Entry::new(&"d".into(), &"j".into(), "p", MAX_PRIORITY, t1, None).rank();
        let bottom = Entry::new(&"e".into(), &"j".into(), "p", MIN_PRIORITY, t1, None).rank();
        // Exact in a double: the score Redis stores.
        assert_eq!(top as f64 as i64, top);
        assert_eq!(bottom as f64 as i64, bottom);
    }
}
