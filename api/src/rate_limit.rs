//! Per-client-address rate limits (docs/contract.md, "Limits"), shared by every
//! api process through Redis (`lua/hit_client_rate.lua`):
//! RATE_LIMIT_GLOBAL_PER_MIN for every request, plus RATE_LIMIT_TRIGGER_PER_MIN
//! on job triggers and RATE_LIMIT_BULK_PER_MIN on bulk triggers; 0 disables a
//! limit. A refused request is 429 problem+json with `Retry-After` (seconds
//! until the client's window ends).
//!
//! The client is the connection's peer address (no proxy header is
//! trusted). /health, /health/ready and /metrics are not limited, so probes
//! and scrapers never see 429. When Redis does not answer, requests pass:
//! losing the limiter must not take the API down with it.

use std::sync::LazyLock;
use std::time::Duration;

use poem::{Addr, Endpoint, Request};
use redis::Script;

use crate::state::AppState;

static HIT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/hit_client_rate.lua")));

const WINDOW: Duration = Duration::from_secs(60);

/// The paths no limit applies to, so probes and scrapers never see 429
/// (the document lists 429 on every other operation).
pub const EXEMPT: [&str; 3] = ["/health", "/health/ready", "/metrics"];

fn is_trigger(path: &str) -> Option<&'static str> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["v1", "jobs", _, "trigger"] => Some("trigger"),
        ["v1", "jobs", _, "trigger", "bulk"] => Some("bulk"),
        _ => None,
    }
}

/// The buckets a request counts against, with their limits.
fn buckets(state: &AppState, req: &Request) -> Vec<(&'static str, u32)> {
    let path = req.uri().path();
    if EXEMPT.contains(&path) {
        return Vec::new();
    }
    let c = &state.config;
    let mut out = Vec::with_capacity(2);
    if c.rate_limit_global_per_min > 0 {
        out.push(("global", c.rate_limit_global_per_min));
    }
    if req.method() == poem::http::Method::POST {
        match is_trigger(path) {
            Some("trigger") if c.rate_limit_trigger_per_min > 0 => out.push(("trigger", c.rate_limit_trigger_per_min)),
            Some("bulk") if c.rate_limit_bulk_per_min > 0 => out.push(("bulk", c.rate_limit_bulk_per_min)),
            _ => {}
        }
    }
    out
}

pub async fn limit<E: Endpoint>(next: E, req: Request) -> poem::Result<E::Output> {
    let Some(state) = req.data::<AppState>() else { return next.call(req).await };
    let buckets = buckets(state, &req);
    if buckets.is_empty() {
        return next.call(req).await;
    }
    let client = match req.remote_addr().0 {
        Addr::SocketAddr(a) => a.ip().to_string(),
        _ => "unknown".to_string(),
    };
    let keys = state.queue.keys();
    let mut inv = HIT.prepare_invoke();
    inv.arg(WINDOW.as_millis() as u64);
    for (name, max) in &buckets {
        inv.key(keys.client_rate(&client, name));
        inv.arg(*max);
    }
    let hit = async {
        let mut c = state.queue.conn().await.map_err(|e| e.to_string())?;
        inv.invoke_async::<(i64, i64)>(&mut c).await.map_err(|e| e.to_string())
    };
    match tokio::time::timeout(Duration::from_millis(500), hit).await {
        Ok(Ok((0, _))) => {}
        Ok(Ok((i, ms))) => {
            let (bucket, max) = buckets.get((i - 1).max(0) as usize).copied().unwrap_or(("global", 0));
            let secs = (ms.max(1) + 999) / 1000;
            let detail =
                format!("rate limit exceeded ({bucket}: {max} requests per minute per client); retry in {secs} s");
            let mut resp = crate::problem::problem_response(429, detail);
            resp.headers_mut().insert("retry-after", secs.into());
            return Err(poem::Error::from_response(resp));
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "rate limiter unavailable; request let through"),
        Err(_) => tracing::warn!("rate limiter timed out; request let through"),
    }
    next.call(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_paths() {
        assert_eq!(is_trigger("/v1/jobs/job_1/trigger"), Some("trigger"));
        assert_eq!(is_trigger("/v1/jobs/job_1/trigger/bulk"), Some("bulk"));
        assert_eq!(is_trigger("/v1/jobs/job_1"), None);
        assert_eq!(is_trigger("/v1/runs/x/trigger"), None);
    }

    #[test]
    fn the_script_parses() {
        assert!(!HIT.get_hash().is_empty());
    }
}
