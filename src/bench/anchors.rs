//! The peer figures of the anchors' `run.sh` (`../shared/anchors/run.sh`
//! beside this repository, or `ANCHORS_DIR`; `ONLY=composite`): its
//! RESULT lines (`RESULT\tname\tvalue\tunit\tjson`), medians per name, and
//! the ratios of ours against them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

pub const RUNS_PER_S: &str = "composite.bullmq+pg.http.sync_on";

#[derive(Debug, Default, Serialize)]
pub struct Anchors {
    /// Median per RESULT name.
    pub figures: BTreeMap<String, f64>,
    /// Why there are no figures, when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl Anchors {
    pub fn load(results: &Path, log: Option<&Path>) -> Anchors {
        let text = std::fs::read_to_string(results).unwrap_or_default();
        let mut all: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            if let (Some(&"RESULT"), Some(name), Some(Ok(v))) =
                (f.first(), f.get(1), f.get(2).map(|v| v.parse::<f64>()))
            {
                // A failed composite run reports 0 runs/s; it is no figure.
                if v > 0.0 {
                    all.entry(name.to_string()).or_default().push(v);
                }
            }
        }
        let figures: BTreeMap<String, f64> = all
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_by(f64::total_cmp);
                (k, v[v.len() / 2])
            })
            .collect();
        let failure = (!figures.contains_key(RUNS_PER_S)).then(|| {
            let log = log.and_then(|l| std::fs::read_to_string(l).ok()).unwrap_or_default();
            let why: Vec<&str> = log
                .lines()
                .filter(|l| {
                    let l = l.to_ascii_lowercase();
                    ["fail", "missing", "refus", "did not", "error", "timeout", "in use", "skip"]
                        .iter()
                        .any(|w| l.contains(w))
                })
                .take(8)
                .collect();
            if why.is_empty() {
                format!("no {RUNS_PER_S} result in {}", results.display())
            } else {
                why.join(" | ")
            }
        });
        Anchors { figures, failure }
    }

    pub fn get(&self, name: &str) -> Option<f64> {
        self.figures.get(name).copied()
    }

    /// p99 of the composite's trigger→terminal latency at `rate`, if run.
    pub fn p99_at(&self, rate: u32) -> Option<f64> {
        self.get(&format!("composite.latency.r{rate}.p99"))
    }
}

/// ours / theirs, for "higher is better" figures.
pub fn ratio(ours: f64, theirs: Option<f64>) -> Option<f64> {
    theirs.filter(|t| *t > 0.0).map(|t| (ours / t * 100.0).round() / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_result_lines() {
        let dir = std::env::temp_dir().join(format!("sybench-anchors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("r.tsv");
        std::fs::write(
            &f,
            "# header\nRESULT\tcomposite.bullmq+pg.http.sync_on\t1600\truns/s\t{}\n\
             RESULT\tcomposite.bullmq+pg.http.sync_on\t1700\truns/s\t{}\n\
             RESULT\tcomposite.bullmq+pg.http.sync_on\t1650\truns/s\t{}\n\
             RESULT\tcomposite.latency.r500.p99\t9.1\tms\t\n",
        )
        .unwrap();
        let a = Anchors::load(&f, None);
        assert_eq!(a.get(RUNS_PER_S), Some(1650.0));
        assert_eq!(a.p99_at(500), Some(9.1));
        assert!(a.failure.is_none());
        assert_eq!(ratio(3300.0, a.get(RUNS_PER_S)), Some(2.0));
        let missing = Anchors::load(&dir.join("none.tsv"), None);
        assert!(missing.failure.is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
