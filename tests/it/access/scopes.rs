//! Every operation of the served OpenAPI document declares what it needs
//! (`x-required-scope`), and the server enforces exactly that: a credential
//! lacking it gets 403, one holding it does not. A new operation without a
//! declaration fails here.

use std::collections::HashMap;

use chrono::Utc;
use reqwest::Method;
use serde_json::{json, Value};
use switchyard_shared::run_token::{RunClaims, TokenSigner};

use super::{call_as, key, TARGET};
use crate::harness::{TestEnv, SECRET};

pub const SCOPES: [&str; 13] = [
    "jobs:read",
    "jobs:write",
    "jobs:trigger",
    "runs:read",
    "runs:write",
    "workflows:read",
    "workflows:write",
    "workflows:trigger",
    "secrets:read",
    "secrets:write",
    "api-keys:manage",
    "rbac:manage",
    "stats:read",
];

pub const JWT_KEY: &[u8] = b"test-jwt-signing-key-0123456789abcdef";

/// A run token as the worker mints it.
pub fn run_token(run_id: &str, job_id: &str, project_id: &str) -> String {
    let now = Utc::now();
    let claims = RunClaims {
        sub: run_id.into(),
        iat: now.timestamp(),
        exp: now.timestamp() + 600,
        job_id: job_id.into(),
        project_id: project_id.into(),
        attempt: 1,
    };
    TokenSigner::new(JWT_KEY).sign(&claims).unwrap()
}

/// The path with every parameter filled: the run's id for `{run_id}`, an
/// id that exists nowhere for the rest.
fn concrete(path: &str, run_id: &str) -> String {
    path.split('/')
        .map(|seg| match seg {
            "{run_id}" => run_id.to_string(),
            s if s.starts_with('{') => "missing_1".to_string(),
            s => s.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn required_query(op: &Value) -> String {
    let names: Vec<String> = op["parameters"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter(|p| p["in"] == "query" && p["required"] == true)
                .map(|p| format!("{}=x", p["name"].as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    if names.is_empty() {
        String::new()
    } else {
        format!("?{}", names.join("&"))
    }
}

#[tokio::test]
async fn every_operation_requires_its_scope() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, TARGET, json!({})).await;
    let job_id = job["id"].as_str().unwrap();
    let run = env.trigger(job_id, json!({})).await;
    let run_id = run["id"].as_str().unwrap();
    let token = run_token(run_id, job_id, &project);
    let other_run_token = run_token("run_someone_else", job_id, &project);

    let doc: Value = env.http.get(format!("{}/openapi.json", env.base)).send().await.unwrap().json().await.unwrap();
    let mut keys: HashMap<String, String> = HashMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let name = format!("{} {path}", method.to_uppercase());
            let Some(label) = op["x-required-scope"].as_str() else {
                problems.push(format!("{name}: no x-required-scope (add it to auth::scopes::OPERATIONS)"));
                continue;
            };
            checked += 1;
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let url = format!("{}{}", concrete(path, run_id), required_query(op));
            let body = matches!(method.as_str(), "post" | "put" | "patch").then(|| json!({}));
            let expect = |problems: &mut Vec<String>, who: &str, refused: bool, got: u16| {
                let ok = if refused { got == 403 } else { got != 403 && got != 401 };
                if !ok {
                    let want = if refused { "want 403" } else { "want neither 401 nor 403" };
                    problems.push(format!("{name} ({label}) as {who}: got {got}, {want}"));
                }
            };
            match label {
                "none" => {
                    if op.get("security").is_some() {
                        problems.push(format!("{name}: public but declares security"));
                    }
                    let (s, _) = call_as(&env, &env.base, None, &[], m.clone(), &url, body.clone()).await;
                    expect(&mut problems, "nobody", false, s);
                }
                "internal" => {
                    let all = key_for(&env, &mut keys, &project, &["*"]).await;
                    let (s, _) = call_as(&env, &env.base, Some(&all), &[], m.clone(), &url, body.clone()).await;
                    expect(&mut problems, "a full-access key", true, s);
                    let (s, _) = call_as(&env, &env.base, Some(SECRET), &[], m.clone(), &url, body.clone()).await;
                    expect(&mut problems, "the internal secret", false, s);
                }
                "run-token" => {
                    let all = key_for(&env, &mut keys, &project, &["*"]).await;
                    let (s, _) = call_as(&env, &env.base, Some(&all), &[], m.clone(), &url, body.clone()).await;
                    expect(&mut problems, "a full-access key", true, s);
                    let (s, _) =
                        call_as(&env, &env.base, Some(&other_run_token), &[], m.clone(), &url, body.clone()).await;
                    expect(&mut problems, "another run's token", true, s);
                    let (s, _) = call_as(&env, &env.base, Some(&token), &[], m.clone(), &url, body.clone()).await;
                    expect(&mut problems, "the run's token", false, s);
                }
                scope => {
                    if !SCOPES.contains(&scope) {
                        problems.push(format!("{name}: {scope} is not a scope"));
                        continue;
                    }
                    let others: Vec<&str> = SCOPES.iter().copied().filter(|s| *s != scope).collect();
                    let lacking = key_for(&env, &mut keys, &project, &others).await;
                    let (s, _) = call_as(&env, &env.base, Some(&lacking), &[], m.clone(), &url, body.clone()).await;
                    expect(&mut problems, "a key with every other scope", true, s);
                    let holding = key_for(&env, &mut keys, &project, &[scope]).await;
                    let (s, _) = call_as(&env, &env.base, Some(&holding), &[], m.clone(), &url, body.clone()).await;
                    expect(&mut problems, "a key with the scope", false, s);
                    if !path.starts_with("/sdk/") {
                        let (s, _) = call_as(&env, &env.base, Some(&token), &[], m.clone(), &url, body.clone()).await;
                        if s != 401 {
                            problems.push(format!("{name}: a run token outside /sdk/v1 got {s}, want 401"));
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 40, "the document lists the operations ({checked})");
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}

async fn key_for(env: &TestEnv, keys: &mut HashMap<String, String>, project: &str, scopes: &[&str]) -> String {
    let label = scopes.join(",");
    if let Some(k) = keys.get(&label) {
        return k.clone();
    }
    let (raw, _) = key(env, project, scopes).await;
    keys.insert(label, raw.clone());
    raw
}

#[tokio::test]
async fn platform_endpoints_need_no_credential() {
    let env = TestEnv::start().await;
    for path in ["/health", "/health/ready", "/metrics", "/openapi.json", "/docs"] {
        let resp = env.http.get(format!("{}{path}", env.base)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    let (s, _) = call_as(&env, &env.base, None, &[], Method::GET, "/v1/jobs", None).await;
    assert_eq!(s, 401, "everything else needs a credential");
    let (s, _) = call_as(&env, &env.base, Some("garbage"), &[], Method::GET, "/v1/jobs", None).await;
    assert_eq!(s, 401);
}

#[tokio::test]
async fn the_document_states_each_requirement() {
    let env = TestEnv::start().await;
    let doc: Value = env.http.get(format!("{}/openapi.json", env.base)).send().await.unwrap().json().await.unwrap();
    let op = &doc["paths"]["/v1/jobs/{job_id}/trigger"]["post"];
    assert_eq!(op["x-required-scope"], "jobs:trigger");
    assert!(op["description"].as_str().unwrap().contains("Required scope: `jobs:trigger`"), "{op}");
    assert_eq!(doc["paths"]["/v1/projects"]["post"]["x-required-scope"], "internal");
    assert_eq!(doc["paths"]["/health"]["get"]["x-required-scope"], "none");
    assert_eq!(doc["paths"]["/sdk/v1/runs/{run_id}/heartbeat"]["post"]["x-required-scope"], "run-token");
}
