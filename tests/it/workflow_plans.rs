//! What a workflow's definition says before any run: plans (levels, critical
//! path, overrides), simulations under assumed outcomes, version diffs, and
//! who may ask.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::support::access::{key, with};

const TARGET: &str = "http://127.0.0.1:9/hook";

/// A project with one job: (project, job).
async fn setup(env: &TestEnv) -> (String, String) {
    let project = env.project().await;
    let job = env.job_in(&project, TARGET, json!({"name": "work"})).await;
    (project, job["id"].as_str().unwrap().into())
}

async fn create(env: &TestEnv, project: &str, name: &str, steps: Value) -> Value {
    let (s, v) = env.post("/v1/workflows", json!({"project_id": project, "name": name, "steps": steps})).await;
    assert_eq!(s, 201, "{v}");
    v
}

/// fetch -> (small, large) -> merge, expected 10, 5, 30 and 1 seconds.
fn diamond(job: &str) -> Value {
    json!([
        {"step_ref": "fetch", "job_id": job, "expected_duration_secs": 10},
        {"step_ref": "small", "job_id": job, "depends_on": ["fetch"], "expected_duration_secs": 5},
        {"step_ref": "large", "job_id": job, "depends_on": ["fetch"], "expected_duration_secs": 30},
        {"step_ref": "merge", "job_id": job, "depends_on": ["small", "large"], "expected_duration_secs": 1}
    ])
}

fn levels(plan: &Value) -> Vec<(i64, Vec<String>)> {
    plan["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let refs = l["step_refs"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_string()).collect();
            (l["level"].as_i64().unwrap(), refs)
        })
        .collect()
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect()
}

/// Each step of a simulation: (step_ref, predicted_status, reason).
fn predicted(sim: &Value) -> Vec<(String, String, Option<String>)> {
    sim["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step_ref"].as_str().unwrap().to_string(),
                s["predicted_status"].as_str().unwrap().to_string(),
                s["reason"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_diamond_plans_in_three_levels_and_overrides_reshape_it() {
    let env = TestEnv::start().await;
    let (project, job) = setup(&env).await;
    let w = create(&env, &project, "diamond", diamond(&job)).await;
    let path = format!("/v1/workflows/{}/plan", w["id"].as_str().unwrap());

    // No body at all: the plan of the definition as saved.
    let (s, p) = env.call(Method::POST, &path, None).await;
    assert_eq!(s, 200, "{p}");
    assert_eq!((&p["workflow_id"], &p["version_id"], &p["version"]), (&w["id"], &w["version_id"], &json!(1)));
    assert_eq!(
        levels(&p),
        [
            (0, vec!["fetch".to_string()]),
            (1, vec!["small".to_string(), "large".to_string()]),
            (2, vec!["merge".to_string()])
        ]
    );
    assert_eq!((p["step_count"].as_i64(), p["max_parallelism"].as_i64()), (Some(4), Some(2)));
    assert_eq!(strings(&p["critical_path"]["step_refs"]), ["fetch", "large", "merge"]);
    assert_eq!(p["critical_path"]["estimated_duration_secs"], 41.0);
    let (_, same) = env.post(&path, json!({})).await;
    assert_eq!(same, p, "an empty body plans the same");

    // Skipping the long branch: its dependents wait for what it waited for.
    let (s, p) = env.post(&path, json!({"overrides": {"large": {"skip": true}}})).await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(
        levels(&p),
        [(0, vec!["fetch".to_string()]), (1, vec!["small".to_string()]), (2, vec!["merge".to_string()])]
    );
    assert_eq!((p["step_count"].as_i64(), p["max_parallelism"].as_i64()), (Some(3), Some(1)));
    assert_eq!(strings(&p["critical_path"]["step_refs"]), ["fetch", "small", "merge"]);
    assert_eq!(p["critical_path"]["estimated_duration_secs"], 16.0);

    // A longer expected duration moves the critical path.
    let (_, p) = env.post(&path, json!({"overrides": {"small": {"expected_duration_secs": 100}}})).await;
    assert_eq!(strings(&p["critical_path"]["step_refs"]), ["fetch", "small", "merge"]);
    assert_eq!(p["critical_path"]["estimated_duration_secs"], 111.0);
}

#[tokio::test]
async fn bad_plan_and_simulate_requests_are_refused_where_they_are_wrong() {
    let env = TestEnv::start().await;
    let (project, job) = setup(&env).await;
    let w = create(&env, &project, "diamond", diamond(&job)).await;
    let id = w["id"].as_str().unwrap();
    let plan = format!("/v1/workflows/{id}/plan");
    let simulate = format!("/v1/workflows/{id}/simulate");

    let got = env.post(&plan, json!({"overrides": {"ghost": {"skip": true}, "fetch": {"skip": true}}})).await;
    let p = assert_problem(422, got, 422);
    assert_eq!(p["errors"].as_array().unwrap().len(), 1, "{p}");
    assert_eq!(p["errors"][0]["location"], "body.overrides/ghost");
    assert_eq!(p["errors"][0]["message"], "names no step of the workflow");
    let got = env.post(&plan, json!({"overrides": {"fetch": {"expected_duration_secs": -1}}})).await;
    let p = assert_problem(422, got, 422);
    assert_eq!(p["errors"][0]["location"], "body.overrides/fetch/expected_duration_secs");
    let p = assert_problem(400, env.post(&plan, json!({"overrides": {}, "extra": 1})).await, 400);
    assert_eq!(p["errors"][0]["location"], "body.extra");

    let got =
        env.post(&simulate, json!({"outcomes": {"fetch": "exploded", "nope": "failed"}, "outputs": {"zz": 1}})).await;
    let p = assert_problem(422, got, 422);
    let at: Vec<_> = p["errors"].as_array().unwrap().iter().map(|e| e["location"].as_str().unwrap()).collect();
    assert_eq!(at, ["body.outcomes/nope", "body.outputs/zz", "body.outcomes/fetch"], "{p}");
    assert_eq!(p["errors"][2]["message"], "must be one of completed, failed, timed_out");
    let p = assert_problem(400, env.post(&simulate, json!({"payload": 1, "outcome": {}})).await, 400);
    assert_eq!(p["errors"][0]["location"], "body.outcome");
}

#[tokio::test]
async fn a_false_condition_skips_its_step_and_the_simulation_says_so() {
    let env = TestEnv::start().await;
    let (project, job) = setup(&env).await;
    let steps = json!([
        {"step_ref": "fetch", "job_id": job, "output_transform": "length(rows)"},
        {"step_ref": "notify", "job_id": job, "depends_on": ["fetch"],
         "condition": {"==": [{"var": "payload.tier"}, "gold"]}},
        {"step_ref": "load", "job_id": job, "depends_on": ["fetch"],
         "condition": {">": [{"var": "steps.fetch.output"}, 2]}},
        {"step_ref": "report", "job_id": job, "depends_on": ["notify", "load"]}
    ]);
    let w = create(&env, &project, "conditional", steps).await;
    let path = format!("/v1/workflows/{}/simulate", w["id"].as_str().unwrap());

    let body = json!({"payload": {"tier": "silver"}, "outputs": {"fetch": {"rows": [1, 2, 3]}}});
    let (s, sim) = env.post(&path, body).await;
    assert_eq!(s, 200, "{sim}");
    assert_eq!((&sim["workflow_id"], &sim["version_id"]), (&w["id"], &w["version_id"]));
    assert_eq!(strings(&sim["predicted_order"]), ["fetch", "load", "report"]);
    assert_eq!(sim["step_count"], 3);
    assert_eq!(sim["predicted_status"], "completed");
    assert_eq!(
        predicted(&sim),
        [
            ("fetch".into(), "completed".into(), None),
            ("notify".into(), "skipped".into(), Some("condition evaluated to false".into())),
            ("load".into(), "completed".into(), None),
            ("report".into(), "completed".into(), None)
        ],
        "a skipped dependency counts as satisfied"
    );

    // A smaller output, through the transform, fails load's condition too.
    let body = json!({"payload": {"tier": "gold"}, "outputs": {"fetch": {"rows": [1]}}});
    let (_, sim) = env.post(&path, body).await;
    assert_eq!(strings(&sim["predicted_order"]), ["fetch", "notify", "report"]);
    assert_eq!(predicted(&sim)[2], ("load".into(), "skipped".into(), Some("condition evaluated to false".into())));

    // Without a body everything completes; the conditions see a null payload.
    let (s, sim) = env.call(Method::POST, &path, None).await;
    assert_eq!(s, 200, "{sim}");
    assert_eq!(strings(&sim["predicted_order"]), ["fetch", "report"]);
}

#[tokio::test]
async fn failures_skip_dependents_or_fail_the_run_by_their_policy() {
    let env = TestEnv::start().await;
    let (project, job) = setup(&env).await;
    let steps = |policy: &str| {
        json!([
            {"step_ref": "extract", "job_id": job, "on_failure": policy},
            {"step_ref": "audit", "job_id": job},
            {"step_ref": "transform", "job_id": job, "depends_on": ["extract"]},
            {"step_ref": "load", "job_id": job, "depends_on": ["transform", "audit"]}
        ])
    };
    let w = create(&env, &project, "skip", steps("skip_dependents")).await;
    let path = format!("/v1/workflows/{}/simulate", w["id"].as_str().unwrap());
    let (s, sim) = env.post(&path, json!({"outcomes": {"extract": "failed"}})).await;
    assert_eq!(s, 200, "{sim}");
    assert_eq!(strings(&sim["predicted_order"]), ["extract", "audit"]);
    assert_eq!(sim["predicted_status"], "completed");
    // The reasons are the engine's own, as explain would give them.
    assert_eq!(
        predicted(&sim),
        [
            ("extract".into(), "failed".into(), None),
            ("audit".into(), "completed".into(), None),
            (
                "transform".into(),
                "skipped".into(),
                Some("dependency extract failed (on_failure skip_dependents)".into())
            ),
            ("load".into(), "skipped".into(), Some("dependency transform was skipped after a failure upstream".into()))
        ]
    );

    let w = create(&env, &project, "strict", steps("fail_workflow")).await;
    let path = format!("/v1/workflows/{}/simulate", w["id"].as_str().unwrap());
    let (_, sim) = env.post(&path, json!({"outcomes": {"extract": "timed_out"}})).await;
    assert_eq!(sim["predicted_status"], "failed");
    // audit starts with extract, as the engine starts both: only the steps
    // not started when extract failed are not reached.
    assert_eq!(strings(&sim["predicted_order"]), ["extract", "audit"]);
    let why = Some("the run failed at step extract (fail_workflow)".to_string());
    assert_eq!(
        predicted(&sim),
        [
            ("extract".into(), "timed_out".into(), None),
            ("audit".into(), "completed".into(), None),
            ("transform".into(), "not_reached".into(), why.clone()),
            ("load".into(), "not_reached".into(), why)
        ]
    );
    let (_, sim) = env.post(&path, json!({"outcomes": {"audit": "completed"}})).await;
    assert_eq!(sim["predicted_status"], "completed");
    assert_eq!(strings(&sim["predicted_order"]), ["extract", "audit", "transform", "load"]);
}

#[tokio::test]
async fn a_diff_names_what_a_patch_changed() {
    let env = TestEnv::start().await;
    let (project, job) = setup(&env).await;
    let other = env.job_in(&project, TARGET, json!({"name": "other"})).await;
    let other = other["id"].as_str().unwrap();
    let v1 = create(&env, &project, "etl", diamond(&job)).await;
    let id = v1["id"].as_str().unwrap();
    let steps = json!([
        {"step_ref": "fetch", "job_id": job, "expected_duration_secs": 10},
        {"step_ref": "large", "job_id": other, "depends_on": ["fetch"], "on_failure": "continue"},
        {"step_ref": "wait", "sleep_duration_secs": 60, "depends_on": ["fetch"]},
        {"step_ref": "merge", "job_id": job, "depends_on": ["wait", "large"], "expected_duration_secs": 1}
    ]);
    let (s, v2) = env.patch(&format!("/v1/workflows/{id}"), json!({"steps": steps})).await;
    assert_eq!(s, 200, "{v2}");
    assert_eq!(v2["version"], 2);
    let (a, b) = (v1["version_id"].as_str().unwrap(), v2["version_id"].as_str().unwrap());

    let (s, d) = env.get(&format!("/v1/workflows/{id}/versions/{a}/diff/{b}")).await;
    assert_eq!(s, 200, "{d}");
    assert_eq!(
        (d["workflow_id"].as_str(), d["from_version_id"].as_str(), d["to_version_id"].as_str()),
        (Some(id), Some(a), Some(b))
    );
    assert_eq!((d["from_version"].as_i64(), d["to_version"].as_i64()), (Some(1), Some(2)));
    assert_eq!(strings(&d["added"]), ["wait"]);
    assert_eq!(strings(&d["removed"]), ["small"]);
    assert_eq!(
        d["changed"],
        json!([
            {"step_ref": "large", "fields": ["expected_duration_secs", "job_id", "on_failure"]},
            {"step_ref": "merge", "fields": ["depends_on"]}
        ]),
        "fetch is unchanged although its id is new"
    );

    let (_, back) = env.get(&format!("/v1/workflows/{id}/versions/{b}/diff/{a}")).await;
    assert_eq!((strings(&back["added"]), strings(&back["removed"])), (vec!["small"], vec!["wait"]));
    let (_, none) = env.get(&format!("/v1/workflows/{id}/versions/{a}/diff/{a}")).await;
    assert_eq!((&none["added"], &none["removed"], &none["changed"]), (&json!([]), &json!([]), &json!([])));
}

#[tokio::test]
async fn only_readers_of_the_project_see_plans_simulations_and_diffs() {
    let env = TestEnv::start().await;
    let (project, job) = setup(&env).await;
    let w = create(&env, &project, "mine", diamond(&job)).await;
    let id = w["id"].as_str().unwrap();
    let v = w["version_id"].as_str().unwrap();
    let sibling = create(&env, &project, "sibling", json!([{"step_ref": "a", "job_id": job}])).await;
    let foreign_version = sibling["version_id"].as_str().unwrap();
    let ops = |id: &str, from: &str, to: &str| {
        [
            (Method::POST, format!("/v1/workflows/{id}/plan"), Some(json!({}))),
            (Method::POST, format!("/v1/workflows/{id}/simulate"), Some(json!({}))),
            (Method::GET, format!("/v1/workflows/{id}/versions/{from}/diff/{to}"), None),
        ]
    };

    let (reader, _) = key(&env, &project, &["workflows:read"]).await;
    for (m, path, body) in ops(id, v, v) {
        let (s, got) = with(&env, &reader, m, &path, body).await;
        assert_eq!(s, 200, "{path}: {got}");
    }
    let (jobs_only, _) = key(&env, &project, &["jobs:read"]).await;
    for (m, path, body) in ops(id, v, v) {
        assert_problem(403, with(&env, &jobs_only, m, &path, body).await, 403);
    }

    let other = env.project().await;
    let (stranger, _) = key(&env, &other, &["*"]).await;
    for (m, path, body) in ops(id, v, v) {
        let p = assert_problem(404, with(&env, &stranger, m, &path, body).await, 404);
        assert!(p["detail"].as_str().unwrap().starts_with("workflow "), "{p}");
    }

    // A version of another workflow, even of the same project, is missing.
    for (from, to) in [(v, foreign_version), (foreign_version, v), (v, "wfv_nope")] {
        let got = env.get(&format!("/v1/workflows/{id}/versions/{from}/diff/{to}")).await;
        let p = assert_problem(404, got, 404);
        assert!(p["detail"].as_str().unwrap().starts_with("workflow version "), "{p}");
    }
    let (s, _) = env.delete(&format!("/v1/workflows/{id}")).await;
    assert_eq!(s, 204);
    assert_problem(404, env.post(&format!("/v1/workflows/{id}/plan"), json!({})).await, 404);
}
