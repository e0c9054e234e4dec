//! Percentiles of latency samples.

use std::time::Duration;

use serde::Serialize;

/// p50 / p95 / p99 / max in milliseconds, nearest-rank (as the anchors).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

pub fn summarize(mut v: Vec<Duration>) -> Summary {
    if v.is_empty() {
        return Summary::default();
    }
    v.sort_unstable();
    let at = |p: f64| {
        let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        ms(v[i])
    };
    Summary { n: v.len(), p50: at(0.50), p95: at(0.95), p99: at(0.99), max: ms(v[v.len() - 1]) }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.n == 0 {
            return f.write_str("-");
        }
        write!(f, "{:.2} / {:.2} / {:.2} / {:.1}", self.p50, self.p95, self.p99, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = summarize(v);
        assert_eq!((s.n, s.p50, s.p95, s.p99, s.max), (100, 50.0, 95.0, 99.0, 100.0));
        assert_eq!(summarize(vec![]).n, 0);
    }
}
