//! The delivery sender: sends the outbox's due deliveries
//! (`store::deliveries`) and records each attempt.
//!
//! Every new delivery notifies the Postgres channel `switchyard_deliveries`
//! at commit, so the sender wakes at once; otherwise it sleeps until the
//! next delivery falls due (a retry's `next_retry_at`), at most
//! `max_sleep`, which also bounds how late a lapsed claim is taken up. A
//! pass claims up to `batch_size` due deliveries for `hold` (`FOR UPDATE
//! SKIP LOCKED`: any number of schedulers share the work, none sends what
//! another holds) and sends up to `parallel` at once. A process killed
//! mid-send leaves its claims to lapse: the deliveries go out again with
//! the same `X-Svc-Delivery-Id`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chrono::Utc;
use futures::StreamExt;
use sqlx::PgPool;
use switchyard_shared::config::Secret;
use switchyard_shared::outbound::{webhook, Http};
use switchyard_shared::secrets::{self, SecretsKey};
use switchyard_shared::shutdown::Shutdown;
use switchyard_shared::store::deliveries::{self, Attempt, Claimed};
use switchyard_shared::telemetry::WEBHOOK_RETRY_ATTEMPTS;
use switchyard_shared::traces;
use tokio::sync::Notify;

use crate::error::{check_batch, check_positive, Error, OptionsError};
use crate::pace;

/// The channel new deliveries notify (migration 0011).
pub const CHANNEL: &str = "switchyard_deliveries";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryOptions {
    /// Longest sleep between passes (default 5 s).
    pub max_sleep: Duration,
    /// Deliveries claimed per pass (default 100).
    pub batch_size: usize,
    /// Deliveries in flight at once (default 16).
    pub parallel: usize,
    /// How long a claim holds (default 30 s): longer than an attempt may take.
    pub hold: Duration,
    /// Refuse private and loopback addresses (TARGET_DENY_PRIVATE).
    pub deny_private: bool,
    /// Opens sealed signing keys (SECRETS_KEY). Without it a delivery whose
    /// key is sealed fails its attempt rather than go out unsigned.
    pub secrets_key: Option<Secret>,
}

impl Default for DeliveryOptions {
    fn default() -> Self {
        DeliveryOptions {
            max_sleep: Duration::from_secs(5),
            batch_size: 100,
            parallel: 16,
            hold: Duration::from_secs(30),
            deny_private: false,
            secrets_key: None,
        }
    }
}

impl DeliveryOptions {
    pub fn validate(&self) -> Result<(), OptionsError> {
        check_positive("deliveries.max_sleep", self.max_sleep)?;
        check_batch("deliveries.batch_size", self.batch_size)?;
        check_batch("deliveries.parallel", self.parallel)?;
        if self.hold <= webhook::ATTEMPT_TIMEOUT {
            return Err(OptionsError::new("deliveries.hold", "must be longer than one attempt's timeout (10 s)"));
        }
        Ok(())
    }
}

#[derive(Clone)]
pub struct DeliverySender {
    pool: PgPool,
    http: Http,
    opts: DeliveryOptions,
    woken: Arc<Notify>,
    key: Option<SecretsKey>,
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    pub sent: usize,
    pub delivered: usize,
    pub to_retry: usize,
}

impl DeliverySender {
    pub fn new(pool: PgPool, opts: DeliveryOptions) -> Result<DeliverySender, OptionsError> {
        opts.validate()?;
        let http = Http::new(opts.parallel, opts.deny_private)
            .map_err(|e| OptionsError::new("deliveries.http", format!("cannot build the webhook client: {e}")))?;
        let key = opts.secrets_key.as_ref().map(SecretsKey::from_secret);
        Ok(DeliverySender { pool, http, opts, woken: Arc::default(), key })
    }

    /// Claims and sends what is due now (tests step the sender with this).
    pub async fn send_once(&self) -> Result<SendReport, Error> {
        let claimed = deliveries::claim_due(&self.pool, self.opts.batch_size as i64, self.opts.hold).await?;
        let mut report = SendReport { sent: claimed.len(), ..Default::default() };
        let sent: Vec<(Claimed, Attempt)> = futures::stream::iter(claimed)
            .map(|c| self.send_one(c))
            .buffer_unordered(self.opts.parallel)
            .collect()
            .await;
        // One write for the whole pass: a sender killed before it leaves
        // the pass's claims to lapse, and the deliveries go out again.
        let items: Vec<_> = sent.iter().map(|(c, a)| (&c.delivery, a.clone())).collect();
        let retries = deliveries::record_attempts(&self.pool, &items).await?;
        for ((_, a), retry) in sent.iter().zip(retries) {
            report.delivered += usize::from(matches!(a, Attempt::Delivered { .. }));
            report.to_retry += usize::from(retry);
        }
        Ok(report)
    }

    async fn send_one(&self, c: Claimed) -> (Claimed, Attempt) {
        let d = &c.delivery;
        if d.attempts > 0 {
            metrics::counter!(WEBHOOK_RETRY_ATTEMPTS).increment(1);
        }
        let body = serde_json::to_vec(&d.payload.0).unwrap_or_default();
        let place = c.trace();
        let span_id = place.recorded().then(traces::new_span_id);
        let sent = SystemTime::now();
        let attempt = match self.signing_key(&c) {
            Ok(secret) => {
                webhook::send(&self.http, &d.url, secret.as_deref(), &d.id, &place.outgoing(span_id), &body).await
            }
            Err(error) => Attempt::Failed { status_code: None, error },
        };
        if let Some(span_id) = span_id {
            trace_delivery(&place, span_id, sent, &c, &attempt);
        }
        if let Attempt::Rejected { error, .. } | Attempt::Failed { error, .. } = &attempt {
            tracing::info!(delivery_id = %d.id, kind = %d.kind, attempt = d.attempts + 1, %error, "delivery attempt failed");
        }
        (c, attempt)
    }

    /// The claimed key in plaintext. Only a job's or a subscription's key
    /// is sealed (the project's signing secret is not a stored credential
    /// of a receiver's choosing), so the owner is the one its kind names.
    fn signing_key(&self, c: &Claimed) -> Result<Option<String>, String> {
        let Some(stored) = c.secret.as_deref().filter(|s| secrets::is_sealed(s)) else {
            return Ok(c.secret.clone());
        };
        let d = &c.delivery;
        let (owner, name) = match d.kind.as_str() {
            "job_run" => (d.job_id.as_deref(), secrets::JOB_WEBHOOK_SECRET),
            _ => (d.subscription_id.as_deref(), secrets::SUBSCRIPTION_SECRET),
        };
        secrets::open_stored(self.key.as_ref(), owner.unwrap_or_default(), name, stored)
            .map(Some)
            .map_err(|e| format!("the signing secret: {e}"))
    }

    /// Sends until shutdown (see the module doc).
    pub async fn run(&self, shutdown: Shutdown) {
        let listener = tokio::spawn(listen(self.pool.clone(), self.woken.clone(), shutdown.clone()));
        let mut failures = 0u32;
        loop {
            match self.send_once().await {
                Ok(r) if r.sent >= self.opts.batch_size => {
                    failures = 0;
                    continue;
                }
                Ok(_) => failures = 0,
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, "delivery pass failed");
                    if !pace::sleep(pace::error_backoff(failures), &shutdown).await {
                        break;
                    }
                    continue;
                }
            }
            let sleep = match deliveries::next_due(&self.pool).await {
                Ok(Some(t)) => (t - Utc::now()).to_std().unwrap_or(Duration::ZERO).min(self.opts.max_sleep),
                _ => self.opts.max_sleep,
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(sleep) => {}
                _ = self.woken.notified() => {}
            }
        }
        listener.abort();
    }
}

/// Rings `woken` for every notification on [`CHANNEL`] (and after a
/// reconnect, when some may have been missed).
async fn listen(pool: PgPool, woken: Arc<Notify>, shutdown: Shutdown) {
    loop {
        let Some(mut l) = pace::listener(&pool, CHANNEL, "delivery", &shutdown).await else { return };
        woken.notify_one();
        loop {
            match l.try_recv().await {
                Ok(_) => woken.notify_one(),
                Err(e) => {
                    tracing::warn!(error = %e, "delivery listener lost its connection");
                    break;
                }
            }
        }
    }
}

/// The delivery attempt's client span, under the run it tells of.
fn trace_delivery(place: &traces::Place, span_id: traces::SpanId, sent: SystemTime, c: &Claimed, a: &Attempt) {
    let d = &c.delivery;
    let (code, error) = match a {
        Attempt::Delivered { status_code } => (Some(*status_code), None),
        Attempt::Rejected { status_code, error } | Attempt::Failed { status_code, error } => {
            (*status_code, Some(error.as_str()))
        }
    };
    let mut s = traces::SpanRecord::child_with_id(place, "webhook.deliver", span_id, sent, SystemTime::now())
        .kind(traces::Kind::Client)
        .attr(traces::Attr::new("http.request.method", "POST"))
        .attr(traces::Attr::new("switchyard.delivery_id", d.id.clone()))
        .attr(traces::Attr::new("switchyard.event_type", d.event_type.clone()))
        .attr(traces::Attr::new("switchyard.attempt", i64::from(d.attempts + 1)))
        .error(error);
    if let Some(code) = code {
        s = s.attr(traces::Attr::new("http.response.status_code", i64::from(code)));
    }
    traces::record(s);
}
