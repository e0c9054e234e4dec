//! Secrets never reach the logs: an api process runs with the most verbose
//! filter while keys are created, used, rotated and revoked, and its
//! captured output is searched for every secret it saw.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

use super::scopes::run_token;
use crate::harness::{TestEnv, SECRET};

#[tokio::test]
async fn no_secret_reaches_the_log() {
    let env = TestEnv::start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("api")
        .envs(env.process_env())
        .env("API_ADDR", format!("127.0.0.1:{port}"))
        .env("INTERNAL_SECRET", SECRET)
        .env("RUST_LOG", "trace")
        .env("RATE_LIMIT_GLOBAL_PER_MIN", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start an api process");
    let mut stderr = child.stderr.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let collect = tokio::spawn(async move {
        let (mut e, mut o) = (String::new(), String::new());
        let _ = tokio::join!(stderr.read_to_string(&mut e), stdout.read_to_string(&mut o));
        e + &o
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while env.http.get(format!("{base}/health")).send().await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the api process did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let call = |method: reqwest::Method, path: &str, token: &str, body: Option<Value>| {
        let mut req = env.http.request(method, format!("{base}{path}")).bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        async move {
            let resp = req.send().await.unwrap();
            let s = resp.status().as_u16();
            (s, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    use reqwest::Method;
    let (s, project) = call(Method::POST, "/v1/projects", SECRET, Some(json!({"name": "logs"}))).await;
    assert_eq!(s, 201, "{project}");
    let project = project["id"].as_str().unwrap().to_string();
    let (s, k) =
        call(Method::POST, "/v1/api-keys", SECRET, Some(json!({"project_id": project, "name": "k", "scopes": []})))
            .await;
    assert_eq!(s, 201);
    let raw = k["key"].as_str().unwrap().to_string();
    let (s, job) = call(
        Method::POST,
        "/v1/jobs",
        &raw,
        Some(json!({"name": "j", "endpoint_url": "http://127.0.0.1:9/x",
        "webhook_secret": "whsec-very-secret-value"})),
    )
    .await;
    assert_eq!(s, 201, "{job}");
    let (s, _) = call(Method::POST, "/v1/jobs", &raw, Some(json!({"name": "bad", "endpoint_url": "not a url"}))).await;
    assert_eq!(s, 422);
    let (s, rotated) =
        call(Method::POST, &format!("/v1/api-keys/{}/rotate", k["id"].as_str().unwrap()), &raw, Some(json!({}))).await;
    assert_eq!(s, 201);
    let raw2 = rotated["key"].as_str().unwrap().to_string();
    assert_eq!(call(Method::GET, "/v1/jobs", &raw, None).await.0, 401);
    assert_eq!(
        call(Method::DELETE, &format!("/v1/api-keys/{}", rotated["id"].as_str().unwrap()), &raw2, None).await.0,
        204
    );
    assert_eq!(call(Method::GET, "/v1/jobs", &raw2, None).await.0, 401);
    assert_eq!(call(Method::GET, "/v1/jobs", "svc_guessed-key-material", None).await.0, 401);
    let token = run_token("run_x", "job_x", &project);
    assert_eq!(call(Method::GET, "/v1/jobs", &token, None).await.0, 401);

    let pid = child.id().expect("pid").to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    let log = tokio::time::timeout(Duration::from_secs(10), collect).await.expect("output closed").unwrap();
    assert!(log.contains("api listening"), "the log was captured: {}", &log[..log.len().min(2000)]);
    for (what, secret) in [
        ("the internal secret", SECRET),
        ("an API key", raw.as_str()),
        ("the rotated API key", raw2.as_str()),
        ("an API key's body", &raw["svc_".len()..]),
        ("a guessed key", "guessed-key-material"),
        ("a run token", token.as_str()),
        ("the JWT signing key", "test-jwt-signing-key-0123456789abcdef"),
        ("a webhook secret", "whsec-very-secret-value"),
    ] {
        assert!(!log.contains(secret), "{what} appears in the log");
    }
}
