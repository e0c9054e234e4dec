//! The HTTP client every dispatch and webhook goes through, and the
//! measurement of connection setup for a dispatch's execution trace.
//!
//! Connect time is measured by a tower layer around reqwest's connector: the
//! connector only runs when the pool has no idle keep-alive connection for
//! the host, so a reused connection costs (and reports) 0 ms. The time lands
//! in a [`ConnectClock`] that the caller installs as a task-local around its
//! request ([`ConnectClock::measure`]). A connect that hyper finishes in the
//! background after the request took a pooled connection instead runs
//! outside that scope and is, rightly, not counted.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use std::error::Error as StdError;

use tower_layer::Layer;
use tower_service::Service;

use super::target::{self, DenyPrivateResolver};

/// How long establishing a connection (DNS, TCP, TLS) may take before it
/// counts as a connection error, which lets the fallback endpoint be tried
/// within the same attempt instead of the attempt timing out.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle keep-alive connections are closed after this; targets commonly close
/// theirs after 60 to 120 seconds.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The client plus what its resolver cannot judge: URLs naming an IP literal
/// never reach the resolver, so [`Http::target`] judges them before sending.
#[derive(Clone, Debug)]
pub struct Http {
    pub client: reqwest::Client,
    pub deny_private: bool,
}

impl Http {
    /// `pool_per_host` idle keep-alive connections are kept per host: as many
    /// as requests to one host may be in flight at once.
    pub fn new(pool_per_host: usize, deny_private: bool) -> Result<Http, reqwest::Error> {
        Ok(Http { client: build(pool_per_host, deny_private)?, deny_private })
    }

    /// Parses `raw` and applies the private-address policy to what the URL
    /// itself shows: IP literals and the local host's names.
    pub fn target(&self, raw: &str) -> Result<url::Url, TargetError> {
        let url = url::Url::parse(raw).map_err(|e| TargetError::Invalid(format!("invalid URL: {e}")))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(TargetError::Invalid(format!("unsupported URL scheme {:?}", url.scheme())));
        }
        if self.deny_private {
            target::check_host(&url).map_err(TargetError::Denied)?;
        }
        Ok(url)
    }

    /// Why a URL about to be saved could never be sent to, by the same rule
    /// as at dispatch. A URL that does not parse is the caller's own
    /// validation's to report, so it yields `None` here.
    pub fn refusal(&self, raw: &str) -> Option<target::TargetDenied> {
        match self.target(raw) {
            Err(TargetError::Denied(d)) => Some(d),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetError {
    Invalid(String),
    Denied(target::TargetDenied),
}

fn build(pool_per_host: usize, deny_private: bool) -> Result<reqwest::Client, reqwest::Error> {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        // Targets are addressed directly: an environment proxy would see
        // every payload and run token.
        .no_proxy()
        // A redirect is reported, not followed: following could leave the
        // allowed hosts and would re-send the body to a URL nobody configured.
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
        .pool_max_idle_per_host(pool_per_host.max(1))
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        // One name whichever process sends (the api and the scheduler send
        // terminal webhooks too), so a target's allow-list needs one entry.
        .user_agent(concat!("switchyard-worker/", env!("CARGO_PKG_VERSION")))
        .connector_layer(TimeConnectLayer);
    if deny_private {
        b = b.dns_resolver(Arc::new(DenyPrivateResolver));
    }
    b.build()
}

/// The causes under reqwest's top-level message (which repeats the URL, and
/// with it any credentials in its query string).
pub fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        let msg = s.to_string();
        if !msg.starts_with("client error (") && parts.last() != Some(&msg) {
            parts.push(msg);
        }
        cur = s.source();
    }
    if parts.is_empty() {
        return e.to_string();
    }
    parts.join(": ")
}

tokio::task_local! {
    static CLOCK: Arc<ConnectClock>;
}

/// Time spent establishing connections on behalf of one request.
#[derive(Debug, Default)]
pub struct ConnectClock {
    micros: AtomicU64,
}

impl ConnectClock {
    /// Runs `fut` with this clock collecting the connect time of the requests it makes.
    pub async fn measure<F: Future>(self: &Arc<Self>, fut: F) -> F::Output {
        CLOCK.scope(Arc::clone(self), fut).await
    }

    pub fn elapsed(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::Relaxed))
    }

    fn add(&self, d: Duration) {
        self.micros.fetch_add(d.as_micros().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }
}

/// Wraps reqwest's connector so each connection attempt reports its duration.
#[derive(Clone, Copy, Debug, Default)]
pub struct TimeConnectLayer;

impl<S> Layer<S> for TimeConnectLayer {
    type Service = TimeConnect<S>;
    fn layer(&self, inner: S) -> TimeConnect<S> {
        TimeConnect { inner }
    }
}

#[derive(Clone, Debug)]
pub struct TimeConnect<S> {
    inner: S,
}

impl<S, R> Service<R> for TimeConnect<S>
where
    S: Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        let started = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let out = fut.await;
            // Read at completion, not at call: if hyper moved this connect to
            // a background task, the request no longer waits for it.
            let _ = CLOCK.try_with(|c| c.add(started.elapsed()));
            out
        })
    }
}
