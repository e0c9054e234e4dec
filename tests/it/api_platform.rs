//! /health, /health/ready, /metrics, /openapi.json, /docs, the dashboard at
//! /ui, and the problem+json contract for the framework's own errors.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv, SECRET};

#[tokio::test]
async fn health_and_readiness() {
    let env = TestEnv::start().await;
    let (s, v) = env.get("/health").await;
    assert_eq!((s, v["status"].as_str()), (200, Some("ok")));
    let (s, v) = env.get("/health/ready").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v, json!({"ready": true, "checks": {"postgres": "ok", "redis": "ok"}}));
}

#[tokio::test]
async fn readiness_reports_each_dependency_down() {
    // Nothing listens on port 1: both dependencies are down.
    let env = TestEnv::start().await;
    let mut cfg = env.config.clone();
    cfg.database_url = "postgres://postgres@127.0.0.1:1/nope".into();
    cfg.redis_url = "redis://127.0.0.1:1".into();
    let state = switchyard_api::state_from_config(cfg).unwrap();
    let cli = poem::test::TestClient::new(switchyard_api::app(state));
    let resp = cli.get("/health/ready").send().await;
    resp.assert_status(poem::http::StatusCode::SERVICE_UNAVAILABLE);
    let v: Value = serde_json::from_str(&resp.0.into_body().into_string().await.unwrap()).unwrap();
    assert_eq!(v, json!({"ready": false, "checks": {"postgres": "unavailable", "redis": "unavailable"}}));
}

#[tokio::test]
async fn postgres_down_is_503_and_nothing_is_accepted() {
    let env = TestEnv::start().await;
    let mut cfg = env.config.clone();
    cfg.database_url = "postgres://postgres@127.0.0.1:1/nope".into();
    let state = switchyard_api::state_from_config(cfg).unwrap();
    let cli = poem::test::TestClient::new(switchyard_api::app(state));
    let resp = cli
        .post("/v1/projects")
        .header("authorization", format!("Bearer {SECRET}"))
        .body_json(&json!({"name": "x"}))
        .send()
        .await;
    resp.assert_status(poem::http::StatusCode::SERVICE_UNAVAILABLE);
    resp.assert_content_type("application/problem+json");
}

#[tokio::test]
async fn metrics_lists_every_spec_metric() {
    let env = TestEnv::start().await;
    let resp = env.http.get(format!("{}/metrics", env.base)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    for name in [
        "svc_run_transitions_total",
        "svc_dispatch_duration_seconds",
        "svc_dequeue_duration_seconds",
        "svc_worker_pool_active",
        "svc_worker_pool_queued",
        "svc_analytics_query_duration_seconds",
        "svc_bulk_operations_total",
        "svc_bulk_items_processed_total",
        "svc_bulk_child_cancellations_total",
        "svc_webhook_retry_attempts_total",
    ] {
        assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing from /metrics:\n{text}");
    }
}

#[tokio::test]
async fn openapi_document_is_complete() {
    let env = TestEnv::start().await;
    let resp = env.http.get(format!("{}/openapi.json", env.base)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let doc: Value = resp.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["version"], "1.0.0");
    assert_eq!(doc["components"]["securitySchemes"]["bearerAuth"]["scheme"], "bearer");
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/v1/projects",
        "/v1/projects/{project_id}/settings",
        "/v1/job-groups",
        "/v1/job-groups/{group_id}/stats",
        "/v1/jobs",
        "/v1/jobs/{job_id}/trigger",
        "/v1/jobs/{job_id}/versions",
        "/v1/runs",
        "/v1/runs/{run_id}/cancel",
        "/health/ready",
    ] {
        assert!(paths.contains_key(p), "{p} missing");
    }
    // Every authenticated operation documents its problem+json errors.
    for (path, ops) in paths {
        for (method, op) in ops.as_object().unwrap() {
            if op.get("security").is_none() {
                continue;
            }
            for code in ["401", "404", "422", "500", "503"] {
                let ct = &op["responses"][code]["content"]["application/problem+json"];
                assert!(ct.is_object(), "{method} {path} lacks a problem+json {code}");
            }
        }
    }
    let docs = env.http.get(format!("{}/docs", env.base)).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    assert!(docs.text().await.unwrap().to_lowercase().contains("swagger"));
}

/// The served document lists exactly the operations the service routes:
/// an operation routed but missing from the document (or documented but
/// not routed) fails here.
#[tokio::test]
async fn the_document_lists_every_routed_operation() {
    let env = TestEnv::start().await;
    let doc: Value = env.http.get(format!("{}/openapi.json", env.base)).send().await.unwrap().json().await.unwrap();
    let mut documented: Vec<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            // Parameters as the router spells them: unnamed.
            let path: String =
                path.split('/').map(|s| if s.starts_with('{') { "{}" } else { s }).collect::<Vec<_>>().join("/");
            item.as_object().unwrap().keys().map(move |m| (m.to_uppercase(), path.clone()))
        })
        .collect();
    documented.sort();
    let routed = switchyard_api::routed_operations();
    let missing: Vec<_> = routed.iter().filter(|o| !documented.contains(o)).collect();
    let unrouted: Vec<_> = documented.iter().filter(|o| !routed.contains(o)).collect();
    assert!(missing.is_empty(), "routed but not in /openapi.json: {missing:?}");
    assert!(unrouted.is_empty(), "in /openapi.json but not routed: {unrouted:?}");
    assert!(documented.contains(&("GET".into(), "/v1/stats/queues".into())), "{documented:?}");
    assert!(routed.len() > 40, "{routed:?}");
}

/// The committed document must match what the code serves, so interface
/// changes show up in review. `UPDATE_OPENAPI=1` rewrites it.
#[test]
fn committed_openapi_matches() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
    let live: Value = serde_json::from_str(&switchyard_api::openapi_json()).unwrap();
    let pretty = serde_json::to_string_pretty(&live).unwrap() + "\n";
    if std::env::var("UPDATE_OPENAPI").is_ok() {
        std::fs::write(path, &pretty).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == pretty,
        "openapi.json is stale: run `UPDATE_OPENAPI=1 cargo test --test it committed_openapi` and commit it"
    );
}

#[tokio::test]
async fn framework_errors_are_problem_json() {
    let env = TestEnv::start().await;
    let url = |p: &str| format!("{}{}", env.base, p);
    let send = |req: reqwest::RequestBuilder| async move {
        let r = req.bearer_auth(SECRET).send().await.unwrap();
        let status = r.status().as_u16();
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        assert_eq!(ct, "application/problem+json", "status {status}: {body}");
        (status, body)
    };
    // Unknown route, wrong method.
    assert_problem(404, send(env.http.get(url("/v1/nothing-here"))).await, 404);
    assert_problem(405, send(env.http.request(Method::PUT, url("/v1/projects"))).await, 405);
    // Malformed JSON, wrong content type, unknown property: 400.
    let bad_json = env.http.post(url("/v1/projects")).header("content-type", "application/json").body("{\"name\":");
    assert_problem(400, send(bad_json).await, 400);
    let wrong_ct = env.http.post(url("/v1/projects")).header("content-type", "text/plain").body("name=x");
    assert_problem(400, send(wrong_ct).await, 400);
    // No Content-Type and no body where one is required: 400 as well, as
    // the document states (the framework's own answer is 415).
    assert_problem(400, send(env.http.post(url("/v1/projects"))).await, 400);
    assert_problem(400, send(env.http.patch(url("/v1/job-groups/x"))).await, 400);
    let unknown = env.http.post(url("/v1/projects")).json(&json!({"name": "x", "colour": "red"}));
    assert_problem(400, send(unknown).await, 400);
    // Over 1 MB: 413.
    let big = json!({"name": "x".repeat(1_100_000)});
    assert_problem(413, send(env.http.post(url("/v1/projects")).json(&big)).await, 413);
    // Nothing was created by any of it.
    let (_, list) = env.get("/v1/projects").await;
    assert_eq!(list["data"], json!([]));
}

/// Found by schemathesis (scripts/contract): requests the document calls
/// valid that the server refused.
#[tokio::test]
async fn what_the_document_calls_valid_is_accepted() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    // An integer written as a float (`3.0`) is an integer (JSON Schema).
    let job = env.job_in(&project, "http://127.0.0.1:9/x", json!({"max_attempts": 3.0, "timeout_secs": 1e1})).await;
    assert_eq!((job["max_attempts"].clone(), job["timeout_secs"].clone()), (json!(3), json!(10)), "{job}");
    let job_id = job["id"].as_str().unwrap();
    let run = env.trigger(job_id, json!({"priority": 7.0, "payload": {"n": 1.0}})).await;
    assert_eq!(run["priority"], json!(7), "{run}");
    assert_eq!(run["payload"], json!({"n": 1.0}), "a payload keeps its numbers: {run}");
    let (s, v) = env.post(&format!("/v1/jobs/{job_id}/trigger"), json!({"priority": 7.5})).await;
    assert_problem(400, (s, v), 400);
    // Any cursor of the form the document states is a position, not a 422.
    let run_id = run["id"].as_str().unwrap();
    for path in [
        "/v1/projects?cursor=zzz".to_string(),
        format!("/v1/jobs?project_id={project}&cursor=job_0"),
        format!("/v1/runs/{run_id}/events?cursor=9999999"),
    ] {
        let (s, v) = env.get(&path).await;
        assert_eq!(s, 200, "{path}: {v}");
    }
}

/// The first `errors[]` entry of a validation-class problem, after checking
/// that every entry has the one shape: a location and a message.
fn first_error(p: &Value) -> &Value {
    let errors = p["errors"].as_array().unwrap_or_else(|| panic!("no errors[]: {p}"));
    assert!(!errors.is_empty(), "{p}");
    for e in errors {
        assert!(e["location"].is_string() && e["message"].is_string(), "{e}");
    }
    &errors[0]
}

#[tokio::test]
async fn every_validation_error_lists_its_errors() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, "http://127.0.0.1:9/x", json!({})).await;
    let trigger = format!("/v1/jobs/{}/trigger", job["id"].as_str().unwrap());

    // An unknown property: located at it.
    let p = assert_problem(400, env.post(&trigger, json!({"payload": 1, "priorty": 5})).await, 400);
    assert_eq!(first_error(&p)["location"], "body.priorty", "{p}");
    // A value of the wrong type: located at it. A body that is not JSON:
    // the body.
    let p = assert_problem(400, env.post(&trigger, json!({"priority": "high"})).await, 400);
    assert_eq!(first_error(&p)["location"], "body.priority", "{p}");
    let resp = env
        .http
        .post(format!("{}{trigger}", env.base))
        .bearer_auth(SECRET)
        .header("content-type", "application/json")
        .body("{\"priority\":")
        .send()
        .await
        .unwrap();
    let got = (resp.status().as_u16(), resp.json::<Value>().await.unwrap());
    let p = assert_problem(400, got, 400);
    assert_eq!(first_error(&p)["location"], "body", "{p}");
    // A query parameter that does not parse: located at it.
    let p = assert_problem(400, env.get(&format!("/v1/runs?project_id={project}&limit=many")).await, 400);
    assert_eq!(first_error(&p)["location"], "query.limit", "{p}");
    // An unknown scope: each one, with its value.
    let body = json!({"project_id": project, "name": "k", "scopes": ["runs:read", "runs:destroy"]});
    let p = assert_problem(400, env.post("/v1/api-keys", body).await, 400);
    let e = first_error(&p);
    assert_eq!((e["location"].as_str(), e["value"].as_str()), (Some("body.scopes/1"), Some("runs:destroy")), "{p}");
    // And a 422, as before.
    let p = assert_problem(422, env.post(&trigger, json!({"priority": 5000})).await, 422);
    assert_eq!(first_error(&p)["location"], "body.priority", "{p}");
}

#[tokio::test]
async fn credentials_are_required_and_checked() {
    let env = TestEnv::start().await;
    let url = format!("{}/v1/projects", env.base);
    for req in [
        env.http.get(&url),
        env.http.get(&url).bearer_auth("wrong-secret-of-some-length"),
        env.http.get(&url).bearer_auth("svc_unknownkey"),
        env.http.get(&url).header("x-internal-secret", "nope"),
    ] {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    // The X-Internal-Secret form of the credential.
    let r = env.http.get(&url).header("x-internal-secret", SECRET).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // Health, metrics and the documents need no credential.
    for p in ["/health", "/metrics", "/openapi.json"] {
        assert_eq!(env.http.get(format!("{}{p}", env.base)).send().await.unwrap().status(), 200, "{p}");
    }
}

/// The dashboard is served by the whole application, without credentials
/// (it asks for them), with its types, a strict CSP and revalidation; its
/// routes are not operations of the document.
#[tokio::test]
async fn the_dashboard_is_served_at_ui() {
    let env = TestEnv::start().await;
    for (path, ty) in
        [("/ui", "text/html"), ("/ui/", "text/html"), ("/ui/app.js", "text/javascript"), ("/ui/app.css", "text/css")]
    {
        let resp = env.http.get(format!("{}{path}", env.base)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers();
        assert!(h["content-type"].to_str().unwrap().starts_with(ty), "{path}: {:?}", h["content-type"]);
        assert_eq!(h["cache-control"], "no-cache", "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.starts_with("default-src 'none'") && !csp.contains("unsafe"), "{path}: {csp}");
        let etag = h["etag"].clone();
        let again = env.http.get(format!("{}{path}", env.base)).header("if-none-match", etag).send().await.unwrap();
        assert_eq!(again.status(), 304, "{path}");
    }
    let page = env.http.get(format!("{}/ui", env.base)).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"<script type="module" src="/ui/app.js">"#), "{page}");
    let doc: Value = env.http.get(format!("{}/openapi.json", env.base)).send().await.unwrap().json().await.unwrap();
    assert!(doc["paths"].as_object().unwrap().keys().all(|p| !p.starts_with("/ui")));
}
