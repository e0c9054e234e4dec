//! Workflows as the tests make and follow them: a job and a workflow in a
//! project, a trigger, a run read and waited on until it gets somewhere.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::TestEnv;

pub const T: Duration = Duration::from_secs(20);

pub async fn workflow(env: &TestEnv, project: &str, extra: Value) -> Value {
    let mut body = json!({"project_id": project, "name": format!("wf-{}", uuid::Uuid::new_v4().simple())});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (s, v) = env.post("/v1/workflows", body).await;
    assert_eq!(s, 201, "{v}");
    v
}

pub async fn job(env: &TestEnv, project: &str, url: &str, extra: Value) -> String {
    env.job_in(project, url, extra).await["id"].as_str().unwrap().to_string()
}

pub async fn trigger(env: &TestEnv, wf: &Value, body: Value) -> Value {
    let (s, v) = env.post(&format!("/v1/workflows/{}/trigger", wf["id"].as_str().unwrap()), body).await;
    assert_eq!(s, 201, "{v}");
    v
}

pub async fn get_run(env: &TestEnv, id: &str) -> Value {
    let (s, v) = env.get(&format!("/v1/workflow-runs/{id}")).await;
    assert_eq!(s, 200, "{v}");
    v
}

pub async fn wait_run(env: &TestEnv, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let r = get_run(env, id).await;
        if pred(&r) {
            return r;
        }
        assert!(tokio::time::Instant::now() < deadline, "workflow run never got there: {r:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn wait_status(env: &TestEnv, id: &str, status: &str) -> Value {
    wait_run(env, id, |r| r["status"] == status).await
}

pub fn step<'a>(run: &'a Value, r: &str) -> &'a Value {
    run["steps"].as_array().unwrap().iter().find(|s| s["step_ref"] == r).unwrap_or_else(|| panic!("no step {r}: {run}"))
}
