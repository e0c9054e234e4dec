//! Traces: W3C Trace Context in and out, and OpenTelemetry spans over OTLP
//! when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set
//! (docs/traces.md).
//!
//! A run lives in several processes (the api inserts it, a worker
//! dispatches it, the scheduler sends its webhook), so its spans cannot be
//! one in-process span tree. Each process records its part as a finished
//! span ([`record`]) with explicit times and ids, and the ids are derived,
//! not kept: a run's own span id is a hash of the run's id ([`Place`]), so
//! whichever process ends the run can emit its span, and every process can
//! parent a child to it, from the run's id and the one `traceparent`
//! column the run stores (the context it descends from: the trigger
//! request's span, a caller's `traceparent`, or a workflow step's span).
//! A run stored without one began its own trace: its trace id is a hash of
//! its id too, and its span is the trace's root.
//!
//! Without the variables nothing is exported: [`enabled`] is false, no
//! span is built, and what remains is reading an incoming header and
//! writing an outgoing one.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceFlags, TraceState};
pub use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;
use sha2::{Digest, Sha256};

pub use opentelemetry::trace::SpanKind as Kind;
pub use opentelemetry::KeyValue as Attr;

/// The header of W3C Trace Context.
pub const TRACEPARENT: &str = "traceparent";

/// The target of the `tracing` spans the OpenTelemetry layer exports (the
/// api's request spans); nothing else of the logs becomes a span.
pub const TARGET: &str = "switchyard_otel";

/// One `traceparent`: a trace, the span that is the parent, and whether
/// the trace is sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub sampled: bool,
}

impl TraceParent {
    /// Parses a `traceparent` header (version 00, or a later version's
    /// first four fields, as the spec asks). `None` for anything invalid:
    /// an invalid header starts a new trace, it does not fail a request.
    pub fn parse(s: &str) -> Option<TraceParent> {
        let s = s.trim();
        let mut parts = s.split('-');
        let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex =
            |v: &str, n: usize| v.len() == n && v.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
            return None;
        }
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
        let span_id = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        Some(TraceParent { trace_id, span_id, sampled: flags & 1 == 1 })
    }

    /// The header's value.
    pub fn header(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.span_id, u8::from(self.sampled))
    }

    /// As a remote parent of a span this process starts.
    pub fn context(&self) -> SpanContext {
        let flags = if self.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
        SpanContext::new(self.trace_id, self.span_id, flags, true, TraceState::default())
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.header())
    }
}

/// Where a run, a workflow run or a step sits in its trace: its own span
/// (id derived from its id) and that span's parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// `None`: the span is its trace's root.
    pub parent: Option<SpanId>,
    pub sampled: bool,
}

impl Place {
    /// The place of the thing with id `id`, which stored `traceparent`.
    pub fn of(id: &str, traceparent: Option<&str>) -> Place {
        match traceparent.and_then(TraceParent::parse) {
            Some(tp) => Place::under(id, tp),
            None => {
                let (trace, span) = derived(id);
                Place { trace_id: trace, span_id: span, parent: None, sampled: root_sampled(trace) }
            }
        }
    }

    /// The place of the thing with id `id` whose parent is `self`'s span
    /// (a workflow step under its run).
    pub fn child(&self, id: &str) -> Place {
        Place::under(id, self.as_parent())
    }

    fn under(id: &str, tp: TraceParent) -> Place {
        let span = derived(id).1;
        Place {
            trace_id: tp.trace_id,
            span_id: span,
            parent: Some(tp.span_id).filter(|p| *p != span),
            sampled: tp.sampled,
        }
    }

    /// The `traceparent` that makes something a child of this place's span
    /// (a workflow step's job run is stored with its step's).
    pub fn as_parent(&self) -> TraceParent {
        TraceParent { trace_id: self.trace_id, span_id: self.span_id, sampled: self.sampled }
    }

    /// Whether this place's spans are exported.
    pub fn recorded(&self) -> bool {
        self.sampled && enabled()
    }

    /// The `traceparent` of a request sent for this place: its span when
    /// Switchyard exports (the request's own client span, `span`, when it
    /// has one); otherwise the context the place came with, so the callee
    /// continues the caller's trace rather than a span nobody exported.
    pub fn outgoing(&self, span: Option<SpanId>) -> String {
        let span_id = match (enabled(), span) {
            (true, Some(s)) => s,
            (true, None) => self.span_id,
            (false, _) => self.parent.unwrap_or(self.span_id),
        };
        TraceParent { trace_id: self.trace_id, span_id, sampled: self.sampled }.header()
    }
}

/// The `traceparent` of what a workflow step starts (its job run, its
/// child workflow run): a child of the step's span, itself a child of the
/// workflow run's.
pub fn step_parent(workflow_run_id: &str, workflow_traceparent: Option<&str>, step_run_id: &str) -> String {
    Place::of(workflow_run_id, workflow_traceparent).child(step_run_id).as_parent().header()
}

/// The trace id and span id a thing's id stands for (sha-256 of the id).
fn derived(id: &str) -> (TraceId, SpanId) {
    let h = Sha256::digest(id.as_bytes());
    let mut t = [0u8; 16];
    let mut s = [0u8; 8];
    t.copy_from_slice(&h[..16]);
    s.copy_from_slice(&h[16..24]);
    (TraceId::from_bytes(t), SpanId::from_bytes(s))
}

/// A fresh span id, for a span that nothing else needs to name.
pub fn new_span_id() -> SpanId {
    loop {
        let id = SpanId::from_bytes(rand::random::<[u8; 8]>());
        if id != SpanId::INVALID {
            return id;
        }
    }
}

/// A fresh `traceparent` for a request that belongs to no run (a log
/// drain's batch), so every request Switchyard sends carries one.
pub fn fresh() -> TraceParent {
    let trace_id = TraceId::from_bytes(rand::random::<[u8; 16]>());
    TraceParent { trace_id, span_id: new_span_id(), sampled: root_sampled(trace_id) }
}

/// Whether a trace Switchyard begins is sampled: by the ratio of
/// `OTEL_TRACES_SAMPLER`, decided on the trace id as the SDK's
/// `TraceIdRatioBased` does, so every process decides alike. Without
/// export the flag is set: the callee's own sampler then decides.
fn root_sampled(trace_id: TraceId) -> bool {
    let Some(e) = EXPORT.get() else { return true };
    ratio_samples(e.ratio, trace_id)
}

fn ratio_samples(ratio: f64, trace_id: TraceId) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    let bytes = trace_id.to_bytes();
    let low = u64::from_be_bytes(bytes[8..].try_into().unwrap_or([0; 8]));
    (low >> 1) < bound
}

/// The sampler ratio the standard variables ask for (a parent's decision
/// is always followed: spans are recorded only under a sampled parent).
fn sampler_ratio() -> f64 {
    let arg = || std::env::var("OTEL_TRACES_SAMPLER_ARG").ok().and_then(|v| v.trim().parse::<f64>().ok());
    match std::env::var("OTEL_TRACES_SAMPLER").unwrap_or_default().trim() {
        "always_off" | "parentbased_always_off" => 0.0,
        "traceidratio" | "parentbased_traceidratio" => arg().unwrap_or(1.0).clamp(0.0, 1.0),
        _ => 1.0,
    }
}

/// One finished span.
pub struct SpanRecord {
    pub name: Cow<'static, str>,
    pub kind: SpanKind,
    /// The trace and the parent span; `span_id` is the span's own.
    pub trace_id: TraceId,
    pub parent: Option<SpanId>,
    pub span_id: SpanId,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    /// An error message: the span's status is then Error.
    pub error: Option<String>,
}

impl SpanRecord {
    /// A child span of `place`'s span, with a fresh id.
    pub fn child(place: &Place, name: impl Into<Cow<'static, str>>, start: SystemTime, end: SystemTime) -> Self {
        Self::child_with_id(place, name, new_span_id(), start, end)
    }

    /// A child span of `place`'s span with a known id (one whose id left
    /// in a `traceparent` header before the span ended).
    pub fn child_with_id(
        place: &Place,
        name: impl Into<Cow<'static, str>>,
        span_id: SpanId,
        start: SystemTime,
        end: SystemTime,
    ) -> Self {
        Self::new(place.trace_id, Some(place.span_id), span_id, name, start, end)
    }

    /// The span of `place` itself (a run's, a step's, a workflow run's).
    pub fn own(place: &Place, name: impl Into<Cow<'static, str>>, start: SystemTime, end: SystemTime) -> Self {
        Self::new(place.trace_id, place.parent, place.span_id, name, start, end)
    }

    fn new(
        trace_id: TraceId,
        parent: Option<SpanId>,
        span_id: SpanId,
        name: impl Into<Cow<'static, str>>,
        start: SystemTime,
        end: SystemTime,
    ) -> Self {
        SpanRecord {
            name: name.into(),
            kind: SpanKind::Internal,
            trace_id,
            parent,
            span_id,
            start,
            end,
            attributes: Vec::new(),
            error: None,
        }
    }

    pub fn kind(mut self, kind: SpanKind) -> Self {
        self.kind = kind;
        self
    }

    pub fn attr(mut self, kv: KeyValue) -> Self {
        self.attributes.push(kv);
        self
    }

    pub fn error(mut self, error: Option<&str>) -> Self {
        self.error = error.map(str::to_string);
        self
    }
}

/// Exports a finished span, when export is on (the caller checks that the
/// trace is sampled: [`Place::recorded`]).
pub fn record(span: SpanRecord) {
    let Some(e) = EXPORT.get() else { return };
    let status = match span.error {
        Some(m) => Status::error(m),
        None => Status::Unset,
    };
    let end = span.end.max(span.start);
    e.processor.on_end(SpanData {
        span_context: SpanContext::new(span.trace_id, span.span_id, TraceFlags::SAMPLED, false, TraceState::default()),
        parent_span_id: span.parent.unwrap_or(SpanId::INVALID),
        parent_span_is_remote: false,
        span_kind: span.kind,
        name: span.name,
        start_time: span.start,
        end_time: end,
        attributes: span.attributes,
        dropped_attributes_count: 0,
        events: Default::default(),
        links: Default::default(),
        status,
        instrumentation_scope: e.scope.clone(),
    });
}

/// A `chrono` time as the spans want it.
pub fn at(t: chrono::DateTime<chrono::Utc>) -> SystemTime {
    SystemTime::from(t)
}

/// Whether spans are exported in this process.
pub fn enabled() -> bool {
    EXPORT.get().is_some()
}

struct Export {
    processor: Arc<BatchSpanProcessor>,
    provider: SdkTracerProvider,
    scope: InstrumentationScope,
    ratio: f64,
}

static EXPORT: OnceLock<Export> = OnceLock::new();

/// The batch processor, shared by the tracer (the `tracing` layer's spans)
/// and [`record`] (the spans with explicit ids and times).
#[derive(Debug)]
struct Shared(Arc<BatchSpanProcessor>);

impl SpanProcessor for Shared {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.0.on_start(span, cx)
    }
    fn on_end(&self, span: SpanData) {
        self.0.on_end(span)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
}

/// Whether the standard variables ask for export.
pub fn configured() -> bool {
    ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
        && !std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.trim() == "none")
        && !std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Starts export when [`configured`]; returns the tracer for the `tracing`
/// layer. `service`: the `service.name` unless `OTEL_SERVICE_NAME` (or
/// `OTEL_RESOURCE_ATTRIBUTES`) names one. An exporter that cannot be built
/// (an unsupported protocol, a malformed endpoint) is an error: a process
/// told to export must not start silently without.
pub fn init(service: &'static str) -> Result<Option<opentelemetry_sdk::trace::SdkTracer>, String> {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig as _;
    if !configured() {
        return Ok(None);
    }
    if let Some(e) = EXPORT.get() {
        return Ok(Some(e.provider.tracer(TARGET)));
    }
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    let protocol = match protocol.trim() {
        "" | "http/protobuf" => opentelemetry_otlp::Protocol::HttpBinary,
        "http/json" => opentelemetry_otlp::Protocol::HttpJson,
        other => {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={other:?} is not supported: use http/protobuf (the default) or http/json"
            ))
        }
    };
    install_tls_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
        .map_err(|e| format!("the OTLP span exporter: {e}"))?;
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let mut resource = Resource::builder();
    if !named {
        resource = resource.with_service_name(service);
    }
    let resource = resource.build();
    let mut batch = BatchSpanProcessor::builder(exporter).build();
    batch.set_resource(&resource);
    let processor = Arc::new(batch);
    let provider =
        SdkTracerProvider::builder().with_resource(resource).with_span_processor(Shared(processor.clone())).build();
    let scope = InstrumentationScope::builder("switchyard").with_version(env!("CARGO_PKG_VERSION")).build();
    let export = Export { processor, provider, scope, ratio: sampler_ratio() };
    let tracer = export.provider.tracer(TARGET);
    let _ = EXPORT.set(export);
    Ok(Some(tracer))
}

/// The exporter's client (reqwest 0.13) needs rustls' process-wide
/// provider: ring, as the rest of the workspace uses. An embedding program
/// that installed one keeps its own.
fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Sends what is buffered (at shutdown; the batch processor otherwise
/// sends every few seconds).
pub fn flush() {
    if let Some(e) = EXPORT.get() {
        let _ = e.processor.force_flush();
    }
}

/// The context the api's request span gives the runs it triggers: set by
/// the request middleware around each request.
pub mod request {
    use super::TraceParent;

    tokio::task_local! {
        static CURRENT: Option<TraceParent>;
    }

    /// Runs `f` with `tp` as the current request's context.
    pub async fn scope<F: std::future::Future>(tp: Option<TraceParent>, f: F) -> F::Output {
        CURRENT.scope(tp, f).await
    }

    /// The current request's context, as a run triggered by it stores it
    /// (`None`: the run begins its own trace).
    pub fn current() -> Option<String> {
        CURRENT.try_with(|c| c.map(|tp| tp.header())).ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_writes_the_header() {
        let h = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let tp = TraceParent::parse(h).unwrap();
        assert!(tp.sampled);
        assert_eq!(tp.header(), h);
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra";
        assert!(!TraceParent::parse(later).unwrap().sampled);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_place_is_derived_from_the_id_and_what_was_stored() {
        let alone = Place::of("run_1", None);
        assert_eq!(alone, Place::of("run_1", None), "derived the same in every process");
        assert_eq!(alone.parent, None, "a run stored without a context is its trace's root");
        assert_ne!(alone.span_id, Place::of("run_2", None).span_id);
        let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let child = Place::of("run_1", Some(caller));
        assert_eq!(child.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(child.parent.unwrap().to_string(), "00f067aa0ba902b7");
        assert_eq!(child.span_id, alone.span_id);
        // Without export the callee continues the caller's span.
        assert_eq!(child.outgoing(None), caller);
        let step = Place::of("wfs_1", Some(caller));
        let job_run = Place::of("run_9", Some(&step.as_parent().header()));
        assert_eq!(job_run.parent, Some(step.span_id));
        assert_eq!(job_run.trace_id, step.trace_id);
        assert_eq!(step.child("run_9"), job_run, "a child is what its stored traceparent gives");
    }

    #[test]
    fn the_exporters_client_speaks_tls() {
        // An https collector: reqwest 0.13's rustls finds the ring provider
        // (building its TLS configuration would panic without one).
        install_tls_provider();
        assert!(reqwest_otlp::blocking::Client::builder().https_only(true).build().is_ok());
    }

    #[test]
    fn the_ratio_decides_on_the_trace_id() {
        let ids: Vec<TraceId> = (0..2000).map(|i| derived(&format!("run_{i}")).0).collect();
        assert!(ids.iter().all(|t| ratio_samples(1.0, *t)));
        assert!(!ids.iter().any(|t| ratio_samples(0.0, *t)));
        let half = ids.iter().filter(|t| ratio_samples(0.5, **t)).count();
        assert!((800..1200).contains(&half), "{half}");
    }
}
