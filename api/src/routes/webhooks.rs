//! Webhook subscriptions (a project's listeners for run and workflow-run
//! events) and the delivery outbox every notification goes through: list,
//! read, and retry a failed delivery. Sending is the scheduler's
//! (`scheduler/src/deliveries.rs`).

use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;
use switchyard_shared::domain::rules::{check_url, Text};
use switchyard_shared::domain::FieldErrors;
use switchyard_shared::secrets;
use switchyard_shared::store::deliveries::{self, Delivery, Subscription, SubscriptionWrite};

use super::secrets::seal_signing_key;
use super::{check_id, patch, project_of, tenant, Tag};
use crate::audit::{self, Change};
use crate::auth::Auth;
use crate::document::rules::Place;
use crate::error::{ApiError, ApiResult};
use crate::pagination::{Page, Window};
use crate::state::AppState;
use crate::strict_json::JsonBody;

pub struct WebhooksApi;

/// The events a subscription may name; `*` is every one.
pub const EVENT_TYPES: [&str; 9] = [
    "run.completed",
    "run.failed",
    "run.timed_out",
    "run.cancelled",
    "run.expired",
    "workflow_run.completed",
    "workflow_run.failed",
    "workflow_run.cancelled",
    "*",
];
/// The statuses of a webhook delivery, the `status` filter of the list.
pub const DELIVERY_STATUSES: [&str; 4] = ["pending", "delivered", "failed", "dead"];
/// A subscription's signing key and description.
pub const SECRET: Text = Text::stored(1, 256);
pub const DESCRIPTION: Text = Text::stored(0, 1000);

#[derive(Object, Debug)]
#[oai(deny_unknown_fields)]
pub struct CreateSubscription {
    pub project_id: Option<String>,
    /// Where events are POSTed (http or https).
    pub webhook_url: String,
    /// Any of run.completed, run.failed, run.timed_out, run.cancelled,
    /// run.expired, workflow_run.completed, workflow_run.failed (a timed-out
    /// workflow run too), workflow_run.cancelled, or `*` for all.
    pub event_types: Vec<String>,
    /// The signing key (1 to 256 characters). Never returned.
    pub secret: String,
    /// Default true.
    pub active: Option<bool>,
    pub description: Option<String>,
}

#[derive(Object, Debug)]
#[oai(deny_unknown_fields)]
pub struct UpdateSubscription {
    pub webhook_url: Option<String>,
    pub event_types: Option<Vec<String>>,
    /// A new signing key; absent keeps the old one.
    pub secret: Option<String>,
    pub active: Option<bool>,
    #[oai(nullable)]
    pub description: MaybeUndefined<String>,
}

/// The value rules of CreateSubscription and UpdateSubscription (see
/// `document::rules`).
pub(crate) fn value_rules() -> Vec<(Place, Value)> {
    use crate::document::rules::{count, text};
    use switchyard_shared::domain::job;
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::Property;
    let mut r = vec![(Property("CreateSubscription", "project_id"), text(&ID))];
    for schema in ["CreateSubscription", "UpdateSubscription"] {
        r.push((Property(schema, "webhook_url"), text(&job::URL)));
        r.push((Property(schema, "event_types"), count(1, usize::MAX)));
        r.push((Property(schema, "secret"), text(&SECRET)));
        r.push((Property(schema, "description"), text(&DESCRIPTION)));
    }
    r
}

#[derive(Object, Debug)]
pub struct WebhookSubscription {
    pub id: String,
    pub project_id: String,
    pub webhook_url: String,
    pub event_types: Vec<String>,
    pub active: bool,
    #[oai(skip_serializing_if_is_none)]
    pub description: Option<String>,
    /// Always true: the secret is write-only.
    pub has_secret: bool,
    #[oai(skip_serializing_if_is_none)]
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

fn subscription_view(s: Subscription) -> WebhookSubscription {
    WebhookSubscription {
        id: s.id,
        project_id: s.project_id,
        webhook_url: s.url,
        event_types: s.event_types,
        active: s.active,
        description: s.description,
        has_secret: true,
        created_by: s.created_by,
        created_at: s.created_at,
        updated_at: s.updated_at,
    }
}

/// One notification in the outbox.
#[derive(Object, Debug)]
pub struct WebhookDelivery {
    pub id: String,
    pub project_id: String,
    /// job_run, subscription, event_trigger, or step_stage (a step's
    /// stage change to a URL its stage_notifications names).
    pub kind: String,
    pub url: String,
    pub event_type: String,
    /// pending, delivered, failed (attempts remain, see next_retry_at) or
    /// dead (none remain).
    pub status: String,
    pub attempts: i32,
    pub max_attempts: i32,
    pub next_retry_at: DateTime<Utc>,
    #[oai(skip_serializing_if_is_none)]
    pub last_status_code: Option<i32>,
    #[oai(skip_serializing_if_is_none)]
    pub last_error: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub event_trigger_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub subscription_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub run_id: Option<String>,
    #[oai(skip_serializing_if_is_none)]
    pub workflow_run_id: Option<String>,
    /// The body sent.
    pub payload: Value,
    #[oai(skip_serializing_if_is_none)]
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

fn delivery_view(d: Delivery) -> WebhookDelivery {
    WebhookDelivery {
        id: d.id,
        project_id: d.project_id,
        kind: d.kind,
        url: d.url,
        event_type: d.event_type,
        status: d.status,
        attempts: d.attempts,
        max_attempts: d.max_attempts,
        next_retry_at: d.next_retry_at,
        last_status_code: d.last_status_code,
        last_error: d.last_error,
        event_trigger_id: d.event_trigger_id,
        subscription_id: d.subscription_id,
        run_id: d.run_id,
        workflow_run_id: d.workflow_run_id,
        payload: d.payload.0,
        delivered_at: d.delivered_at,
        created_at: d.created_at,
    }
}

/// Checks a subscription's fields as they will be saved.
fn check(
    state: &AppState,
    e: &mut FieldErrors,
    url: &str,
    types: &[String],
    secret: Option<&str>,
    description: Option<&str>,
) {
    if let Err(m) = check_url(url) {
        e.push("body.webhook_url", m, Some(url.into()));
    } else if let Some(d) = state.webhooks.refusal(url) {
        e.push("body.webhook_url", d.to_string(), Some(url.into()));
    }
    e.check(!types.is_empty(), "body.event_types", "name at least one event type", None);
    for (i, t) in types.iter().enumerate() {
        e.check(
            EVENT_TYPES.contains(&t.as_str()),
            format!("body.event_types/{i}"),
            format!("must be one of {}", EVENT_TYPES.join(", ")),
            Some(t.clone().into()),
        );
    }
    if let Some(s) = secret {
        e.check(SECRET.ok(s), "body.secret", SECRET.length_words(), None);
    }
    if let Some(d) = description {
        e.check(DESCRIPTION.ok(d), "body.description", DESCRIPTION.length_words(), None);
    }
}

async fn load_subscription(state: &AppState, auth: &Auth, id: &str) -> ApiResult<Subscription> {
    check_id("subscription", id)?;
    deliveries::get_subscription(&state.pool, tenant(&auth.0), id)
        .await?
        .ok_or_else(|| ApiError::not_found("subscription", id))
}

#[OpenApi(tag = "Tag::Webhooks")]
impl WebhooksApi {
    /// Subscribe a URL to events of a project. Answers 200 with the
    /// subscription (the secret is never returned). Each event it names is
    /// POSTed to it, signed with its secret, with up to 5 attempts (5 s,
    /// 25 s, 125 s, 625 s apart); a 4xx makes the delivery `dead` at once.
    #[oai(path = "/v1/webhooks/subscriptions", method = "post", operation_id = "createWebhookSubscription")]
    async fn create(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        body: JsonBody<CreateSubscription>,
    ) -> ApiResult<Json<WebhookSubscription>> {
        let b = body.0;
        let project_id = project_of(&auth.0, "body", b.project_id.as_deref())?;
        super::project_exists(&state, &project_id).await?;
        let mut e = FieldErrors::new();
        check(&state, &mut e, &b.webhook_url, &b.event_types, Some(&b.secret), b.description.as_deref());
        e.finish()?;
        let id = switchyard_shared::ids::new_id("whs");
        let sealed = seal_signing_key(&state, &id, secrets::SUBSCRIPTION_SECRET, &b.secret)?;
        let actor = auth.0.actor();
        let w = SubscriptionWrite {
            url: &b.webhook_url,
            event_types: &b.event_types,
            active: b.active.unwrap_or(true),
            description: b.description.as_deref(),
            secret: Some(&sealed),
            actor: actor.as_deref(),
        };
        let mut tx = state.pool.begin().await?;
        let s = deliveries::create_subscription(&mut tx, &id, &project_id, &w).await?;
        let details = serde_json::json!({"webhook_url": s.url, "event_types": s.event_types, "active": s.active});
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(&project_id, "webhook_subscription.created", ("webhook_subscription", &id), details),
        )
        .await?;
        tx.commit().await?;
        Ok(Json(subscription_view(s)))
    }

    /// A project's subscriptions, newest first.
    #[oai(path = "/v1/webhooks/subscriptions", method = "get", operation_id = "listWebhookSubscriptions")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<WebhookSubscription>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows = deliveries::list_subscriptions(&state.pool, &project_id, w.after(), w.fetch()).await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), subscription_view)))
    }

    #[oai(
        path = "/v1/webhooks/subscriptions/:subscription_id",
        method = "get",
        operation_id = "getWebhookSubscription"
    )]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        subscription_id: Path<String>,
    ) -> ApiResult<Json<WebhookSubscription>> {
        Ok(Json(subscription_view(load_subscription(&state, &auth, &subscription_id).await?)))
    }

    /// Change a subscription's URL, event types, activity, description or
    /// secret. Deliveries already written keep the URL they were made for.
    #[oai(
        path = "/v1/webhooks/subscriptions/:subscription_id",
        method = "patch",
        operation_id = "updateWebhookSubscription"
    )]
    async fn update(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        subscription_id: Path<String>,
        body: JsonBody<UpdateSubscription>,
    ) -> ApiResult<Json<WebhookSubscription>> {
        let cur = load_subscription(&state, &auth, &subscription_id).await?;
        let b = body.0;
        let url = b.webhook_url.unwrap_or(cur.url.clone());
        let types = b.event_types.unwrap_or(cur.event_types.clone());
        let description = patch(b.description, cur.description.clone());
        let mut e = FieldErrors::new();
        check(&state, &mut e, &url, &types, b.secret.as_deref(), description.as_deref());
        e.finish()?;
        let sealed = match &b.secret {
            Some(plain) => Some(seal_signing_key(&state, &cur.id, secrets::SUBSCRIPTION_SECRET, plain)?),
            None => None,
        };
        let actor = auth.0.actor();
        let w = SubscriptionWrite {
            url: &url,
            event_types: &types,
            active: b.active.unwrap_or(cur.active),
            description: description.as_deref(),
            secret: sealed.as_deref(),
            actor: actor.as_deref(),
        };
        let mut tx = state.pool.begin().await?;
        let s = deliveries::update_subscription(&mut tx, &cur.id, &w)
            .await?
            .ok_or_else(|| ApiError::not_found("subscription", &cur.id))?;
        let details = serde_json::json!({
            "webhook_url": s.url, "event_types": s.event_types, "active": s.active, "secret_changed": b.secret.is_some(),
        });
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(&s.project_id, "webhook_subscription.updated", ("webhook_subscription", &s.id), details),
        )
        .await?;
        tx.commit().await?;
        Ok(Json(subscription_view(s)))
    }

    /// Delete a subscription. Its deliveries already written are kept.
    #[oai(
        path = "/v1/webhooks/subscriptions/:subscription_id",
        method = "delete",
        operation_id = "deleteWebhookSubscription"
    )]
    async fn delete(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        subscription_id: Path<String>,
    ) -> ApiResult<super::Done> {
        let cur = load_subscription(&state, &auth, &subscription_id).await?;
        let mut tx = state.pool.begin().await?;
        if !deliveries::delete_subscription(&mut tx, &cur.id).await? {
            return Err(ApiError::not_found("subscription", &cur.id));
        }
        let details = serde_json::json!({"webhook_url": cur.url});
        audit::record(
            &mut *tx,
            &auth.0,
            Change::new(&cur.project_id, "webhook_subscription.deleted", ("webhook_subscription", &cur.id), details),
        )
        .await?;
        tx.commit().await?;
        Ok(super::Done::NoContent)
    }

    /// The notification outbox of a project, newest first: every
    /// subscription delivery and event-trigger notification, and the job-run
    /// webhooks still in flight (a job-run webhook leaves no record once it
    /// is delivered or dropped).
    #[oai(path = "/v1/webhook-deliveries", method = "get", operation_id = "listWebhookDeliveries")]
    #[allow(clippy::too_many_arguments)]
    async fn deliveries(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        project_id: Query<Option<String>>,
        status: Query<Option<String>>,
        kind: Query<Option<String>>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] limit: Query<Option<i64>>,
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Page<WebhookDelivery>>> {
        let project_id = project_of(&auth.0, "query", project_id.0.as_deref())?;
        let mut e = FieldErrors::new();
        if let Some(s) = status.0.as_deref() {
            let ok = DELIVERY_STATUSES.contains(&s);
            let message = format!("must be one of {}", DELIVERY_STATUSES.join(", "));
            e.check(ok, "query.status", message, Some(s.into()));
        }
        if let Some(k) = kind.0.as_deref() {
            let ok = deliveries::Kind::parse(k).is_some();
            e.check(ok, "query.kind", format!("must be one of {}", deliveries::Kind::NAMES.join(", ")), Some(k.into()));
        }
        e.finish()?;
        let w = Window::parse(limit.0, cursor.0)?;
        let rows =
            deliveries::list(&state.pool, &project_id, status.0.as_deref(), kind.0.as_deref(), w.after(), w.fetch())
                .await?;
        Ok(Json(w.page(rows, |r| r.id.clone(), delivery_view)))
    }

    #[oai(path = "/v1/webhook-deliveries/:delivery_id", method = "get", operation_id = "getWebhookDelivery")]
    async fn delivery(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        delivery_id: Path<String>,
    ) -> ApiResult<Json<WebhookDelivery>> {
        check_id("delivery", &delivery_id)?;
        let d = deliveries::get(&state.pool, tenant(&auth.0), &delivery_id)
            .await?
            .ok_or_else(|| ApiError::not_found("delivery", &delivery_id))?;
        Ok(Json(delivery_view(d)))
    }

    /// Retry a `failed` delivery now: it goes back to `pending` with its
    /// attempts counted from zero. Any other status is 409: a pending one is
    /// on its way, a delivered one arrived, and a dead one was refused by
    /// its receiver (a 4xx) or used all its attempts.
    #[oai(path = "/v1/webhook-deliveries/:delivery_id/retry", method = "post", operation_id = "retryWebhookDelivery")]
    async fn retry(
        &self,
        state: Data<&AppState>,
        auth: Auth,
        delivery_id: Path<String>,
    ) -> ApiResult<Json<WebhookDelivery>> {
        check_id("delivery", &delivery_id)?;
        match deliveries::retry(&state.pool, tenant(&auth.0), &delivery_id).await? {
            None => Err(ApiError::not_found("delivery", &delivery_id)),
            Some(Err(status)) => {
                Err(ApiError::conflict(format!("only a failed delivery can be retried; this one is {status}")))
            }
            Some(Ok(d)) => {
                metrics::counter!(switchyard_shared::telemetry::WEBHOOK_RETRY_ATTEMPTS).increment(1);
                let details = serde_json::json!({"event_type": d.event_type});
                audit::record(
                    &state.pool,
                    &auth.0,
                    Change::new(&d.project_id, "webhook_delivery.retried", ("webhook_delivery", &d.id), details),
                )
                .await?;
                Ok(Json(delivery_view(d)))
            }
        }
    }
}
