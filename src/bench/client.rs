//! The API calls of the load generator: one keep-alive HTTP/1.1 client, the
//! request bodies serialized once, responses parsed only for the run ids.

use std::time::Duration;

use anyhow::{bail, Context};
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::{json, Value};

/// The trigger body: a ~200-byte payload, the same object the anchors' peers
/// send (`../shared/anchors/common.js`, `PAYLOAD`).
pub const TRIGGER_BODY: &str = concat!(
    r#"{"payload":{"job":"send-email","attempt":1,"payload":{"to":"user@example.com","template":"welcome","#,
    r#""vars":{"name":"Ada","plan":"pro","n":42}},"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}"#
);

/// What one trigger call came to.
#[derive(Debug)]
pub enum Sent {
    Created(String),
    /// An HTTP answer other than 201: status and the start of the body.
    Rejected(u16, String),
    /// No HTTP answer at all.
    Failed(String),
}

/// What one bulk trigger call came to.
#[derive(Debug)]
pub enum BulkSent {
    /// Run ids created, and per-item errors (`status` other than created).
    Done {
        created: Vec<String>,
        item_errors: Vec<String>,
    },
    /// 404 or 405: the server has no bulk endpoint.
    NotBuilt(u16),
    Rejected(u16, String),
    Failed(String),
}

#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    auth: HeaderValue,
}

#[derive(Deserialize)]
struct Created {
    id: String,
}

#[derive(Deserialize)]
struct BulkAnswer {
    results: Vec<BulkItem>,
}

#[derive(Deserialize)]
struct BulkItem {
    status: String,
    run_id: Option<String>,
    error: Option<Value>,
}

fn snippet(s: &str) -> String {
    s.chars().take(300).collect()
}

impl Api {
    pub fn new(base: &str, secret: &str) -> anyhow::Result<Api> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .http1_only()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(512)
            .timeout(Duration::from_secs(30))
            .build()?;
        let auth = HeaderValue::from_str(&format!("Bearer {secret}"))?;
        Ok(Api { http, base: base.trim_end_matches('/').to_string(), auth })
    }

    pub async fn healthy(&self) -> bool {
        let r = self.http.get(format!("{}/health", self.base)).send().await;
        r.is_ok_and(|r| r.status().is_success())
    }

    async fn create(&self, path: &str, body: Value) -> anyhow::Result<String> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header(AUTHORIZATION, self.auth.clone())
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        if status != 201 {
            bail!("POST {path}: HTTP {status}: {}", snippet(&text));
        }
        Ok(serde_json::from_str::<Created>(&text).with_context(|| format!("POST {path}: {}", snippet(&text)))?.id)
    }

    /// A GET with the internal secret: its status and body.
    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .header(AUTHORIZATION, self.auth.clone())
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = r.status().as_u16();
        Ok((status, r.text().await.unwrap_or_default()))
    }

    /// Opens a stream (an endless GET) with the internal secret.
    pub async fn stream(&self, path: &str) -> anyhow::Result<reqwest::Response> {
        // The client's timeout bounds whole requests; a stream has none.
        let http = reqwest::Client::builder().no_proxy().http1_only().build()?;
        let r = http
            .get(format!("{}{path}", self.base))
            .header(AUTHORIZATION, self.auth.clone())
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        anyhow::ensure!(r.status().as_u16() == 200, "GET {path}: HTTP {}", r.status());
        Ok(r)
    }

    pub async fn create_project(&self, name: &str) -> anyhow::Result<String> {
        self.create("/v1/projects", json!({ "name": name })).await
    }

    pub async fn create_job(&self, project: &str, name: &str, endpoint: &str) -> anyhow::Result<String> {
        self.create("/v1/jobs", json!({ "project_id": project, "name": name, "endpoint_url": endpoint })).await
    }

    /// A job group; its id.
    pub async fn create_group(&self, project: &str, slug: &str) -> anyhow::Result<String> {
        self.create("/v1/job-groups", json!({ "project_id": project, "name": slug, "slug": slug })).await
    }

    /// A job with more fields than [`Api::create_job`]'s (`extra`, an
    /// object: a `group_id`, a `webhook_url`).
    pub async fn create_job_with(
        &self,
        project: &str,
        name: &str,
        endpoint: &str,
        extra: Value,
    ) -> anyhow::Result<String> {
        let mut body = json!({ "project_id": project, "name": name, "endpoint_url": endpoint });
        if let (Some(b), Value::Object(x)) = (body.as_object_mut(), extra) {
            b.extend(x);
        }
        self.create("/v1/jobs", body).await
    }

    /// A webhook subscription of the project to `event_types` (answered 200, not 201); its id.
    pub async fn create_subscription(&self, project: &str, url: &str, event_types: &[&str]) -> anyhow::Result<String> {
        let path = "/v1/webhooks/subscriptions";
        let body =
            json!({ "project_id": project, "webhook_url": url, "event_types": event_types, "secret": "bench-secret" });
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header(AUTHORIZATION, self.auth.clone())
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        if !(200..300).contains(&status) {
            bail!("POST {path}: HTTP {status}: {}", snippet(&text));
        }
        Ok(serde_json::from_str::<Created>(&text).with_context(|| format!("POST {path}: {}", snippet(&text)))?.id)
    }

    /// A workflow of `steps` (the API's step objects); its id.
    pub async fn create_workflow(&self, project: &str, name: &str, steps: Value) -> anyhow::Result<String> {
        self.create("/v1/workflows", json!({ "project_id": project, "name": name, "steps": steps })).await
    }

    /// Where a workflow is triggered: [`Api::trigger`] posts the same
    /// `{"payload": ...}` body there, and the answer's `id` is the workflow run's.
    pub fn workflow_trigger_url(&self, workflow: &str) -> String {
        format!("{}/v1/workflows/{workflow}/trigger", self.base)
    }

    pub fn trigger_url(&self, job: &str) -> String {
        format!("{}/v1/jobs/{job}/trigger", self.base)
    }

    pub fn bulk_url(&self, job: &str) -> String {
        format!("{}/v1/jobs/{job}/trigger/bulk", self.base)
    }

    async fn post(&self, url: &str, body: impl Into<reqwest::Body>) -> Result<(u16, Vec<u8>), String> {
        let r = self
            .http
            .post(url)
            .header(AUTHORIZATION, self.auth.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body)
            .send()
            .await
            .map_err(|e| format!("{e:#}"))?;
        let status = r.status().as_u16();
        let body = r.bytes().await.map_err(|e| format!("{e:#}"))?;
        Ok((status, body.to_vec()))
    }

    pub async fn trigger(&self, url: &str) -> Sent {
        match self.post(url, TRIGGER_BODY).await {
            Ok((201, body)) => match serde_json::from_slice::<Created>(&body) {
                Ok(c) => Sent::Created(c.id),
                Err(_) => Sent::Rejected(201, snippet(&String::from_utf8_lossy(&body))),
            },
            Ok((status, body)) => Sent::Rejected(status, snippet(&String::from_utf8_lossy(&body))),
            Err(e) => Sent::Failed(e),
        }
    }

    pub async fn trigger_bulk(&self, url: &str, body: String) -> BulkSent {
        match self.post(url, body).await {
            Ok((status @ (404 | 405), _)) => BulkSent::NotBuilt(status),
            Ok((status, body)) if (200..300).contains(&status) => match serde_json::from_slice::<BulkAnswer>(&body) {
                Ok(a) => {
                    let mut created = Vec::new();
                    let mut item_errors = Vec::new();
                    for item in a.results {
                        match (item.status.as_str(), item.run_id) {
                            ("created", Some(id)) => created.push(id),
                            (s, _) => item_errors.push(format!("{s}: {}", item.error.unwrap_or(Value::Null))),
                        }
                    }
                    BulkSent::Done { created, item_errors }
                }
                Err(e) => BulkSent::Rejected(
                    status,
                    format!("unreadable answer ({e}): {}", snippet(&String::from_utf8_lossy(&body))),
                ),
            },
            Ok((status, body)) => BulkSent::Rejected(status, snippet(&String::from_utf8_lossy(&body))),
            Err(e) => BulkSent::Failed(e),
        }
    }
}

/// The bulk request body: `items` trigger bodies in one call.
pub fn bulk_body(items: usize) -> String {
    let item: Value = serde_json::from_str(TRIGGER_BODY).expect("static JSON");
    json!({ "items": vec![item; items] }).to_string()
}
