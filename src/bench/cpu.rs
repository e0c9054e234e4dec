//! CPU accounting from /proc: whole-box busy time, and CPU seconds of a
//! process or of one thread (user + system).

use std::collections::HashMap;

/// USER_HZ: the unit of the tick counts in /proc on Linux.
const TICKS_PER_SEC: f64 = 100.0;

/// utime + stime of a `/proc/.../stat` file, in seconds.
fn stat_secs(path: &str) -> Option<f64> {
    let s = std::fs::read_to_string(path).ok()?;
    // The command name may hold spaces; fields are counted after its ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SEC)
}

pub fn pid_secs(pid: u32) -> Option<f64> {
    stat_secs(&format!("/proc/{pid}/stat"))
}

/// A thread of this process, by its kernel thread id.
pub fn thread_secs(tid: u32) -> Option<f64> {
    stat_secs(&format!("/proc/self/task/{tid}/stat"))
}

pub fn own_secs() -> Option<f64> {
    stat_secs("/proc/self/stat")
}

/// The kernel id of the calling thread.
pub fn current_tid() -> Option<u32> {
    let s = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    s.split(' ').next()?.parse().ok()
}

/// Whole-box CPU counters of /proc/stat, in ticks.
#[derive(Clone, Copy, Debug, Default)]
pub struct BoxTicks {
    total: u64,
    idle: u64,
}

impl BoxTicks {
    pub fn read() -> BoxTicks {
        let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let line = s.lines().next().unwrap_or_default();
        let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        // idle + iowait count as not busy.
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        BoxTicks { total: v.iter().sum(), idle }
    }

    /// Busy share of the whole box between `self` and `later`, in percent.
    pub fn busy_pct(&self, later: &BoxTicks) -> f64 {
        let dt = later.total.saturating_sub(self.total);
        let di = later.idle.saturating_sub(self.idle);
        if dt == 0 {
            return 0.0;
        }
        100.0 * (dt - di) as f64 / dt as f64
    }

    /// Busy CPU seconds of the whole box between `self` and `later`.
    pub fn busy_secs(&self, later: &BoxTicks) -> f64 {
        let dt = later.total.saturating_sub(self.total);
        let di = later.idle.saturating_sub(self.idle);
        dt.saturating_sub(di) as f64 / TICKS_PER_SEC
    }
}

/// The uid of a user name, from /etc/passwd.
pub fn uid_of(user: &str) -> Option<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&user)).then(|| f.get(2)?.parse().ok()).flatten()
    })
}

/// CPU seconds of every process whose real uid is `uid`.
pub fn secs_by_uid(uid: u32) -> HashMap<u32, f64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
        let owner = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse::<u32>().ok());
        if owner == Some(uid) {
            if let Some(s) = pid_secs(pid) {
                out.insert(pid, s);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process_and_thread() {
        let tid = current_tid().expect("tid");
        assert!(thread_secs(tid).is_some());
        assert!(own_secs().is_some());
        assert!(pid_secs(std::process::id()).is_some());
        let a = BoxTicks::read();
        assert!(a.total > 0);
    }
}
