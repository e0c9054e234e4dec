//! Calls with a credential, and the credentials to make them with: API
//! keys of a project, a second api process, a probe polled until it holds.

use std::time::Duration;

use poem::listener::{Acceptor, Listener, TcpListener};
use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::TestEnv;

/// A request with `token` as the bearer (or none), and extra headers.
pub async fn call_as(
    env: &TestEnv,
    base: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = env.http.request(method, format!("{base}{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    env.call_with(req, body).await
}

/// GET/POST/... with a bearer token against the test's api.
pub async fn with(env: &TestEnv, token: &str, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    call_as(env, &env.base, Some(token), &[], method, path, body).await
}

/// A new API key of `project` with `scopes`, made with the internal secret;
/// returns (raw key, key id).
pub async fn key(env: &TestEnv, project: &str, scopes: &[&str]) -> (String, String) {
    let (s, v) = env.post("/v1/api-keys", json!({"project_id": project, "name": "test key", "scopes": scopes})).await;
    assert_eq!(s, 201, "{v}");
    (v["key"].as_str().unwrap().to_string(), v["id"].as_str().unwrap().to_string())
}

/// A second api process on the same database and Redis prefix.
pub async fn second_api(env: &TestEnv) -> String {
    let state = switchyard_api::state_from_config(env.config.clone()).expect("state");
    let acceptor = TcpListener::bind("127.0.0.1:0").into_acceptor().await.expect("bind");
    let addr = acceptor.local_addr()[0].as_socket_addr().copied().expect("socket addr");
    tokio::spawn(switchyard_api::serve(acceptor, state, env.stop.child_token(), Duration::from_secs(1)));
    format!("http://{addr}")
}

/// Polls `probe` until it returns Some, for at most `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "condition not reached within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub const TARGET: &str = "http://127.0.0.1:9/never-called";
