//! Tracing and the Prometheus metrics every process exposes (the list is
//! [`METRICS`]; docs/contract.md, "Metrics").
//!
//! One recorder per process (installed on first use); every metric is
//! described at start so `/metrics` lists it even before it is used.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};

use chrono::{DateTime, Utc};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

pub const RUN_TRANSITIONS: &str = "svc_run_transitions_total";
pub const DISPATCH_DURATION: &str = "svc_dispatch_duration_seconds";
pub const DEQUEUE_DURATION: &str = "svc_dequeue_duration_seconds";
pub const WORKER_POOL_ACTIVE: &str = "svc_worker_pool_active";
pub const WORKER_POOL_QUEUED: &str = "svc_worker_pool_queued";
pub const ANALYTICS_QUERY_DURATION: &str = "svc_analytics_query_duration_seconds";
pub const BULK_OPERATIONS: &str = "svc_bulk_operations_total";
pub const BULK_ITEMS_PROCESSED: &str = "svc_bulk_items_processed_total";
pub const BULK_CHILD_CANCELLATIONS: &str = "svc_bulk_child_cancellations_total";
pub const WEBHOOK_RETRY_ATTEMPTS: &str = "svc_webhook_retry_attempts_total";
pub const LOG_DRAIN_LINES_SENT: &str = "svc_log_drain_lines_sent_total";
pub const LOG_DRAIN_LINES_DROPPED: &str = "svc_log_drain_lines_dropped_total";
pub const QUEUE_DEPTH: &str = "svc_queue_depth";
pub const QUEUE_OLDEST_AGE: &str = "svc_queue_oldest_age_seconds";
pub const JOB_RUN_TRANSITIONS: &str = "svc_job_run_transitions_total";
pub const HTTP_REQUESTS: &str = "svc_http_requests_total";
pub const HTTP_REQUEST_DURATION: &str = "svc_http_request_duration_seconds";
pub const BUILD_INFO: &str = "svc_build_info";

/// The most jobs a process gives [`JOB_RUN_TRANSITIONS`] series of their
/// own. Each job's transitions are a handful of series (one per pair of
/// statuses it moves through); past this many jobs, the runs of jobs not
/// yet seen are counted under `job_id="_other"`, so a project with
/// thousands of jobs cannot grow the exposition (and Prometheus) without
/// bound. The spec's [`RUN_TRANSITIONS`] counts every run either way.
pub const MAX_JOB_SERIES: usize = 500;

/// (name, type, labels, help) of every metric `/metrics` shows.
pub const METRICS: [(&str, &str, &[&str], &str); 18] = [
    (RUN_TRANSITIONS, "counter", &["from_status", "to_status"], "Run status transitions."),
    (
        JOB_RUN_TRANSITIONS,
        "counter",
        &["job_id", "from_status", "to_status"],
        "Run status transitions by job (at most MAX_JOB_SERIES jobs per process; later ones as job_id _other).",
    ),
    (HTTP_REQUESTS, "counter", &["method", "route", "status"], "HTTP requests answered, by route template."),
    (HTTP_REQUEST_DURATION, "histogram", &["method", "route"], "Time to answer an HTTP request (to its headers)."),
    (BUILD_INFO, "gauge", &["service", "version"], "Always 1; its labels name the running build."),
    (DISPATCH_DURATION, "histogram", &["job_id", "outcome"], "Time from sending a dispatch to its outcome."),
    (DEQUEUE_DURATION, "histogram", &[], "Time of one dequeue call to Redis."),
    (WORKER_POOL_ACTIVE, "gauge", &[], "Dispatches in flight in this worker process."),
    (WORKER_POOL_QUEUED, "gauge", &[], "Runs ready in the queue, as last seen by this process."),
    (ANALYTICS_QUERY_DURATION, "histogram", &["period_hours"], "Time of an analytics query."),
    (BULK_OPERATIONS, "counter", &[], "Bulk operations performed."),
    (BULK_ITEMS_PROCESSED, "counter", &[], "Items processed by bulk operations."),
    (BULK_CHILD_CANCELLATIONS, "counter", &[], "Child runs cancelled with their parent."),
    (WEBHOOK_RETRY_ATTEMPTS, "counter", &[], "Webhook delivery attempts after the first."),
    (LOG_DRAIN_LINES_SENT, "counter", &[], "Run log lines a log drain's receiver accepted."),
    (LOG_DRAIN_LINES_DROPPED, "counter", &[], "Run log lines skipped because a log drain's backlog exceeded its cap."),
    (
        QUEUE_DEPTH,
        "gauge",
        &["project_id", "job_id"],
        "Runs in status queued per job, as the scheduler last counted them.",
    ),
    (
        QUEUE_OLDEST_AGE,
        "gauge",
        &["project_id", "job_id"],
        "Seconds the longest-waiting queued run of the job has waited since it became due (0 when none).",
    ),
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's Prometheus recorder, installed on first call.
pub fn metrics_handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let buckets =
            [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
            .expect("static buckets are valid")
            .install_recorder()
            .unwrap_or_else(|_| {
                // Another recorder is installed (an embedding program's):
                // keep a private one so /metrics still renders ours.
                PrometheusBuilder::new().build_recorder().handle()
            });
        for (name, kind, _, help) in METRICS {
            match kind {
                "counter" => metrics::describe_counter!(name, help),
                "gauge" => metrics::describe_gauge!(name, help),
                _ => metrics::describe_histogram!(name, metrics::Unit::Seconds, help),
            }
        }
        process_collector().describe();
        for (name, kind, labels, _) in METRICS {
            if labels.is_empty() {
                match kind {
                    "counter" => metrics::counter!(name).absolute(0),
                    "gauge" => metrics::gauge!(name).set(0.0),
                    _ => {}
                }
            }
        }
        handle
    })
}

/// The Prometheus text exposition, with every metric of [`METRICS`] present:
/// one not yet observed is listed with its HELP and TYPE (and zero samples
/// where it has no labels).
pub fn render_metrics() -> String {
    let handle = metrics_handle();
    process_collector().collect();
    let mut out = handle.render();
    for (name, kind, labels, help) in METRICS {
        if out.contains(&format!("# TYPE {name} ")) {
            continue;
        }
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        if labels.is_empty() && kind == "histogram" {
            out.push_str(&format!("{name}_bucket{{le=\"+Inf\"}} 0\n{name}_sum 0\n{name}_count 0\n"));
        }
        if name == QUEUE_DEPTH || name == QUEUE_OLDEST_AGE {
            render_queue_series(name, &mut out);
        }
        if name == BUILD_INFO {
            let service = SERVICE.get().copied().unwrap_or("switchyard");
            let _ = writeln!(out, "{name}{{service=\"{service}\",version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
        }
    }
    out
}

/// The process's name in [`BUILD_INFO`], as `init_tracing` was told it.
static SERVICE: OnceLock<&'static str> = OnceLock::new();

/// `process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_open_fds` and the rest of the Prometheus client libraries'
/// standard process metrics, read from /proc at each scrape.
fn process_collector() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// How long a job's queue gauges stay at 0 once its queue emptied: long
/// enough for any scrape (and an autoscaler or a graph) to see it reach
/// 0, after which the series is no longer exported.
pub const QUEUE_SERIES_LINGER: chrono::Duration = chrono::Duration::minutes(10);

/// One job's queue gauges: depth, oldest age, and since when it is empty.
#[derive(Clone, Copy, Debug)]
struct QueueSeries {
    depth: f64,
    age: f64,
    empty_since: Option<DateTime<Utc>>,
}

/// The per-job queue gauges ([`QUEUE_DEPTH`], [`QUEUE_OLDEST_AGE`]) live
/// here rather than in the metrics recorder, which cannot forget a series:
/// a job that once had a backlog would be exported at 0 until the process
/// ends, and the exposition would grow with every job ever queued.
static QUEUE_SERIES: Mutex<BTreeMap<(String, String), QueueSeries>> = Mutex::new(BTreeMap::new());

fn queue_series() -> std::sync::MutexGuard<'static, BTreeMap<(String, String), QueueSeries>> {
    QUEUE_SERIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets a job's queue gauges (it has queued runs).
pub fn set_queue_gauges(project_id: &str, job_id: &str, depth: f64, age_secs: f64) {
    let s = QueueSeries { depth, age: age_secs, empty_since: None };
    queue_series().insert((project_id.to_string(), job_id.to_string()), s);
}

/// Sets a job's queue gauges to 0 (its queue is empty as of `now`), and
/// drops them once empty for [`QUEUE_SERIES_LINGER`]; whether they were
/// dropped.
pub fn empty_queue_gauges(project_id: &str, job_id: &str, now: DateTime<Utc>) -> bool {
    let mut all = queue_series();
    let key = (project_id.to_string(), job_id.to_string());
    let since = all.get(&key).and_then(|s| s.empty_since).unwrap_or(now);
    if now - since >= QUEUE_SERIES_LINGER {
        all.remove(&key);
        return true;
    }
    all.insert(key, QueueSeries { depth: 0.0, age: 0.0, empty_since: Some(since) });
    false
}

fn render_queue_series(name: &str, out: &mut String) {
    // Ids are `<prefix>_<hex>`; escaped all the same, as the text format asks.
    let esc = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    for ((p, j), s) in queue_series().iter() {
        let v = if name == QUEUE_DEPTH { s.depth } else { s.age };
        let _ = writeln!(out, "{name}{{project_id=\"{}\",job_id=\"{}\"}} {v}", esc(p), esc(j));
    }
}

/// Counts one run status transition of a run of `job_id`.
pub fn transition(job_id: &str, from: Option<&str>, to: &str) {
    let from = from.unwrap_or("none");
    let mut cache = TRANSITIONS.lock().unwrap_or_else(|e| e.into_inner());
    // The handles must come from the process's recorder, not the no-op one
    // of a process that has not installed it yet.
    let cache = cache.get_or_insert_with(|| {
        metrics_handle();
        Transitions::default()
    });
    pair(
        &mut cache.all,
        from,
        to,
        || metrics::counter!(RUN_TRANSITIONS, "from_status" => from.to_string(), "to_status" => to.to_string()),
    )
    .increment(1);
    let job = if cache.jobs.contains_key(job_id) || cache.jobs.len() < MAX_JOB_SERIES { job_id } else { "_other" };
    let pairs = match cache.jobs.get_mut(job) {
        Some(p) => p,
        None => cache.jobs.entry(job.to_string()).or_default(),
    };
    pair(pairs, from, to, || {
        let (job, from, to) = (job.to_string(), from.to_string(), to.to_string());
        metrics::counter!(JOB_RUN_TRANSITIONS, "job_id" => job, "from_status" => from, "to_status" => to)
    })
    .increment(1);
}

/// The transition counters' handles, kept so that counting a transition
/// (several per run, on the hot path) finds its series without building
/// its labels and looking them up in the recorder each time. `jobs` holds
/// at most [`MAX_JOB_SERIES`] jobs, and `_other`.
#[derive(Default)]
struct Transitions {
    all: Vec<(String, String, metrics::Counter)>,
    jobs: std::collections::HashMap<String, Vec<(String, String, metrics::Counter)>>,
}

static TRANSITIONS: Mutex<Option<Transitions>> = Mutex::new(None);

/// The counter of (`from`, `to`) among `pairs`, made by `make` the first
/// time (a job's runs move through a handful of pairs).
fn pair<'a>(
    pairs: &'a mut Vec<(String, String, metrics::Counter)>,
    from: &str,
    to: &str,
    make: impl FnOnce() -> metrics::Counter,
) -> &'a metrics::Counter {
    let at = match pairs.iter().position(|(f, t, _)| f == from && t == to) {
        Some(at) => at,
        None => {
            pairs.push((from.to_string(), to.to_string(), make()));
            pairs.len() - 1
        }
    };
    &pairs[at].2
}

/// The request counter and the latency histogram of one (method, route,
/// status), to keep for the route's later requests (see `http_request`).
pub fn http_series(method: &str, route: &str, status: u16) -> (metrics::Counter, metrics::Histogram) {
    metrics_handle();
    let method = http_method(method);
    (
        metrics::counter!(HTTP_REQUESTS, "method" => method, "route" => route.to_string(), "status" => status.to_string()),
        metrics::histogram!(HTTP_REQUEST_DURATION, "method" => method, "route" => route.to_string()),
    )
}

fn http_method(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

/// Counts one HTTP request answered with `status` after `took`. `route` is
/// the matched route's template (`/v1/jobs/{job_id}/trigger`), or
/// `unmatched`: never the raw path, whose ids would make a series each.
pub fn http_request(method: &str, route: &str, status: u16, took: std::time::Duration) {
    let (count, time) = http_series(method, route, status);
    count.increment(1);
    time.record(took.as_secs_f64());
}

/// Times one analytics query (a report of `period_hours`).
pub fn analytics_query(period_hours: i64, took: std::time::Duration) {
    metrics::histogram!(ANALYTICS_QUERY_DURATION, "period_hours" => period_hours.to_string())
        .record(took.as_secs_f64());
}

/// Whether logs are coloured: only on a terminal, so a log redirected to a
/// file or collected by a container runtime holds no escape codes, and
/// never when `NO_COLOR` is set to anything but the empty string
/// (no-color.org).
fn colour_logs(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Logs to stderr (`RUST_LOG` filters), and exports traces over OTLP when
/// the standard OpenTelemetry variables ask for it (`crate::traces`):
/// `service` is then the `service.name` unless `OTEL_SERVICE_NAME` says
/// otherwise. A process told to export that cannot build its exporter
/// stops here, with the reason.
pub fn init_tracing(service: &'static str) -> Result<(), String> {
    let _ = SERVICE.set(service);
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let ansi = colour_logs(std::io::IsTerminal::is_terminal(&std::io::stderr()), std::env::var_os("NO_COLOR"));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi).with_filter(filter);
    // Only the spans made for export (the api's request spans) become
    // OpenTelemetry spans, whatever RUST_LOG lets into the logs.
    let otel = crate::traces::init(service)?.map(|tracer| {
        tracing_opentelemetry::layer().with_tracer(tracer).with_filter(
            tracing_subscriber::filter::Targets::new().with_target(crate::traces::TARGET, tracing::Level::INFO),
        )
    });
    let _ = tracing_subscriber::registry().with(logs).with(otel).try_init();
    if crate::traces::enabled() {
        tracing::info!(service, "exporting traces over OTLP");
    }
    Ok(())
}

/// Serves `GET /metrics` and `GET /health` on `addr` until `shutdown`, for
/// worker and scheduler processes (the api serves both on its own port).
/// Whether a request head (or a header value, with `token`) carries the
/// metrics token as a bearer credential; always, when none is configured.
/// Compared in constant time, as every credential is.
pub fn bearer_matches(head: &str, token: Option<&crate::config::Secret>) -> bool {
    let Some(token) = token else { return true };
    let given = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("authorization"))
        .and_then(|(_, v)| v.trim().strip_prefix("Bearer "))
        .unwrap_or("");
    bool::from(subtle::ConstantTimeEq::ct_eq(given.trim().as_bytes(), token.expose().as_bytes()))
}

pub async fn serve_metrics(
    addr: std::net::SocketAddr,
    token: Option<crate::config::Secret>,
    shutdown: crate::shutdown::Shutdown,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = metrics_handle();
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "metrics listening");
    loop {
        let (mut sock, _) = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    continue;
                }
            },
        };
        let token = token.clone();
        tokio::spawn(async move {
            // A scrape is one small GET; anything else gets 404.
            let mut buf = [0u8; 1024];
            let n = tokio::time::timeout(std::time::Duration::from_secs(5), sock.read(&mut buf)).await;
            let head = match n {
                Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
                _ => return,
            };
            let path = head.split_whitespace().nth(1).unwrap_or("");
            let (status, ctype, body) = match (head.starts_with("GET "), path) {
                (true, "/metrics") if !bearer_matches(&head, token.as_ref()) => {
                    ("401 Unauthorized", "text/plain", "METRICS_TOKEN is set: send Authorization: Bearer <it>".into())
                }
                (true, "/metrics") => ("200 OK", "text/plain; version=0.0.4", render_metrics()),
                (true, "/health") => ("200 OK", "application/json", "{\"status\":\"ok\"}".to_string()),
                _ => ("404 Not Found", "text/plain", "not found".to_string()),
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
        });
    }
}

/// Starts [`serve_metrics`] in the background when an address is configured.
pub fn spawn_metrics(
    addr: Option<std::net::SocketAddr>,
    token: Option<crate::config::Secret>,
    shutdown: crate::shutdown::Shutdown,
) {
    if let Some(addr) = addr {
        tokio::spawn(async move {
            if let Err(e) = serve_metrics(addr, token, shutdown).await {
                tracing::error!(%addr, error = %e, "cannot serve metrics");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(colour_logs(true, None));
        assert!(!colour_logs(false, None), "a file or a pipe");
        assert!(!colour_logs(true, Some("1".into())));
        assert!(colour_logs(true, Some("".into())), "NO_COLOR set empty does not count");
    }

    #[test]
    fn the_metrics_token_is_a_bearer_credential() {
        let t = Secret::new("metrics-token-0123456789");
        assert!(bearer_matches("GET /metrics HTTP/1.1\r\n", None), "no token: open");
        let sent = "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer metrics-token-0123456789\r\n";
        assert!(bearer_matches(sent, Some(&t)));
        assert!(bearer_matches("authorization:  Bearer metrics-token-0123456789 \r\n", Some(&t)), "any case, spaces");
        for head in [
            "GET /metrics HTTP/1.1\r\n",
            "Authorization: Bearer metrics-token-012345678",
            "Authorization: metrics-token-0123456789",
        ] {
            assert!(!bearer_matches(head, Some(&t)), "{head:?}");
        }
    }
}
