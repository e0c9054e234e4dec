//! User expressions (a step's JSONLogic `condition`, its JMESPath
//! `output_transform`) are proved to fit their budget before they are
//! evaluated: shapes that grow without bound are a 422 at save, and an
//! expression over budget for the data it meets fails its step with the
//! error_class `expression_budget_exceeded` instead of taking the process's
//! memory (shared/src/domain/expression_budget.rs has the rules and limits).

use serde_json::{json, Value};
use switchyard_shared::domain::expression_budget::ERROR_CLASS;

use crate::harness::{assert_problem, TestEnv};
use crate::support::workflows::{job, step, trigger, wait_status, workflow};
use crate::target::{Reply, Target};

/// The pentest's condition: a reduce that merges its accumulator, quadratic
/// in the payload (8,000 items took 1.4 s and 750 MB).
fn quadratic_reduce() -> Value {
    json!({"reduce": [{"var": "payload.a"}, {"merge": [{"var": "accumulator"}, [{"var": "current"}]]}, []]})
}

/// The pentest's transform: `[@,@]|` doubles the output every six characters.
fn doubling(times: usize) -> String {
    format!("{}@", "[@,@]|".repeat(times))
}

#[tokio::test]
async fn expressions_that_grow_without_bound_are_refused_at_save_where_they_are() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let j = job(&env, &project, "http://127.0.0.1:9/hook", json!({})).await;
    let cases = [
        (json!({"step_ref": "a", "job_id": j, "condition": quadratic_reduce()}), "condition", "reducer"),
        (
            json!({"step_ref": "a", "job_id": j, "output_transform": doubling(19)}),
            "output_transform",
            "times as much work",
        ),
        (
            json!({"step_ref": "a", "job_id": j, "output_transform": format!("{}a", "!".repeat(3000))}),
            "output_transform",
            "nested",
        ),
        (
            json!({"step_ref": "a", "job_id": j, "condition": {"map": [{"var": "payload"}, {"val": [[1], "payload"]}]}}),
            "condition",
            "outer scope",
        ),
    ];
    for (s, field, says) in cases {
        let body = json!({"project_id": project, "name": "w", "steps": [s]});
        let p = assert_problem(422, env.post("/v1/workflows", body).await, 422);
        let e = &p["errors"][0];
        assert_eq!(e["location"], format!("body.steps/0/{field}"), "{p}");
        assert!(e["message"].as_str().unwrap().contains(says), "{p}");
    }
    let (_, list) = env.get(&format!("/v1/workflows?project_id={project}")).await;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(0), "nothing was saved: {list}");
    // The process is still here and answers.
    let (s, _) = env.get(&format!("/v1/workflows?project_id={project}")).await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn a_simulation_over_a_large_output_reports_the_budget_instead_of_building_it() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let j = job(&env, &project, "http://127.0.0.1:9/hook", json!({})).await;
    // Five doublings are accepted at save (32x); over a 1 MB output they
    // would build 32 MB, past a result's 8 MiB.
    let wf = workflow(
        &env,
        &project,
        json!({"steps": [
            {"step_ref": "a", "job_id": j, "output_transform": doubling(5)},
            {"step_ref": "b", "job_id": j, "depends_on": ["a"]}
        ]}),
    )
    .await;
    let path = format!("/v1/workflows/{}/simulate", wf["id"].as_str().unwrap());
    let big = json!({"rows": vec!["x".repeat(100); 10_000]});
    let (s, sim) = env.post(&path, json!({"outputs": {"a": big}})).await;
    assert_eq!(s, 200, "{sim}");
    assert_eq!(sim["steps"][0]["predicted_status"], "failed", "{sim}");
    assert!(sim["steps"][0]["reason"].as_str().unwrap().starts_with(ERROR_CLASS), "{sim}");
    let (s, sim) = env.post(&path, json!({"outputs": {"a": {"rows": [1, 2]}}})).await;
    assert_eq!((s, &sim["steps"][0]["predicted_status"]), (200, &json!("completed")), "a small output passes: {sim}");
}

#[tokio::test]
async fn a_step_whose_transform_is_over_budget_at_run_time_fails_with_its_error_class() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::json(200, &json!({"rows": vec!["x".repeat(100); 4_000]}).to_string()));
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let wf = workflow(
        &env,
        &project,
        json!({"steps": [
            {"step_ref": "a", "job_id": j, "output_transform": doubling(7)},
            {"step_ref": "b", "job_id": j, "depends_on": ["a"]}
        ]}),
    )
    .await;
    let run = trigger(&env, &wf, json!({})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let done = wait_status(&env, run["id"].as_str().unwrap(), "failed").await;
    assert_eq!(done["error_class"], ERROR_CLASS, "{done:#}");
    let a = step(&done, "a");
    assert_eq!(a["status"], "failed");
    assert!(a["error"].as_str().unwrap().starts_with(ERROR_CLASS), "{a}");
    assert_eq!(step(&done, "b")["status"], "pending", "never reached: {done:#}");
    assert_eq!(target.requests().len(), 1, "only step a ran");
}

#[tokio::test]
async fn a_condition_saved_before_the_rules_is_refused_before_it_runs() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = job(&env, &project, &target.url, json!({})).await;
    let wf = workflow(
        &env,
        &project,
        json!({"steps": [
            {"step_ref": "a", "job_id": j, "condition": {"==": [1, 1]}}
        ]}),
    )
    .await;
    // As a version saved before the rules existed would hold it.
    sqlx::query("UPDATE workflow_versions SET steps = jsonb_set(steps, '{0,condition}', $1) WHERE workflow_id = $2")
        .bind(quadratic_reduce())
        .bind(wf["id"].as_str().unwrap())
        .execute(&env.pool)
        .await
        .unwrap();
    let run = trigger(&env, &wf, json!({"payload": {"a": (0..8000).collect::<Vec<_>>()}})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let done = wait_status(&env, run["id"].as_str().unwrap(), "failed").await;
    assert_eq!(done["error_class"], ERROR_CLASS, "{done:#}");
    assert!(step(&done, "a")["error"].as_str().unwrap().contains("reducer"), "{done:#}");
    assert!(target.requests().is_empty(), "the step never ran");
}
