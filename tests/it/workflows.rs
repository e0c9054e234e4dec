//! Workflow definitions: create, get, list, update (a new version for
//! every change, none for a PATCH that changes nothing), delete, every 422
//! of a save, the workflow policy, scopes and isolation.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::support::access::{key, with};

const TARGET: &str = "http://127.0.0.1:9/hook";

/// A project with two jobs: (project, job a, job b).
async fn setup(env: &TestEnv) -> (String, String, String) {
    let project = env.project().await;
    let a = env.job_in(&project, TARGET, json!({"name": "extract"})).await;
    let b = env.job_in(&project, TARGET, json!({"name": "load"})).await;
    (project, a["id"].as_str().unwrap().into(), b["id"].as_str().unwrap().into())
}

fn chain(a: &str, b: &str) -> Value {
    json!([
        {"step_ref": "extract", "job_id": a},
        {"step_ref": "pause", "sleep_duration_secs": 30, "depends_on": ["extract"]},
        {"step_ref": "load", "job_id": b, "depends_on": ["pause"], "on_failure": "continue",
         "condition": {"==": [{"var": "steps.extract.status"}, "completed"]}, "output_transform": "rows[].id"}
    ])
}

async fn create(env: &TestEnv, project: &str, name: &str, steps: Value) -> Value {
    let (s, v) = env.post("/v1/workflows", json!({"project_id": project, "name": name, "steps": steps})).await;
    assert_eq!(s, 201, "{v}");
    v
}

/// The one error of a 422 save: (location, message).
async fn refused(env: &TestEnv, project: &str, steps: Value) -> Vec<(String, String)> {
    let got = env.post("/v1/workflows", json!({"project_id": project, "name": "bad", "steps": steps})).await;
    let p = assert_problem(422, got, 422);
    p["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["location"].as_str().unwrap().to_string(), e["message"].as_str().unwrap().to_string()))
        .collect()
}

#[tokio::test]
async fn create_get_list_and_delete() {
    let env = TestEnv::start().await;
    let (project, a, b) = setup(&env).await;
    let body = json!({
        "project_id": project, "name": "Nightly ETL", "description": "copy rows", "steps": chain(&a, &b),
        "cron": "0 3 * * *", "cron_timezone": "Europe/Paris", "max_concurrent_runs": 2, "max_parallel_steps": 4,
        "skip_if_running": true, "timeout_secs": 600, "tags": {"team": "data"}, "version_policy": "latest",
        "backwards_compatible": false
    });
    let (s, w) = env.post("/v1/workflows", body.clone()).await;
    assert_eq!(s, 201, "{w}");
    for k in ["name", "description", "cron", "cron_timezone", "max_concurrent_runs", "max_parallel_steps"] {
        assert_eq!(w[k], body[k], "{k}");
    }
    for k in ["skip_if_running", "timeout_secs", "tags", "version_policy", "backwards_compatible"] {
        assert_eq!(w[k], body[k], "{k}");
    }
    assert_eq!(
        (w["slug"].as_str(), w["version"].as_i64(), w["enabled"].as_bool()),
        (Some("nightly-etl"), Some(1), Some(true))
    );
    assert!(w["id"].as_str().unwrap().starts_with("wf_"));
    assert!(w["version_id"].as_str().unwrap().starts_with("wfv_"));
    let steps = w["steps"].as_array().unwrap();
    let types: Vec<_> = steps.iter().map(|s| s["step_type"].as_str().unwrap()).collect();
    assert_eq!(types, ["job", "sleep", "job"], "types are inferred");
    for s in steps {
        assert!(s["id"].as_str().unwrap().starts_with("wfs_"));
        assert_eq!(s["workflow_id"], w["id"]);
        assert!(s["created_at"].is_string() && s["depends_on"].is_array());
    }
    assert_eq!(steps[0]["on_failure"], "fail_workflow");
    assert_eq!(steps[2]["on_failure"], "continue");
    assert_eq!(steps[2]["output_transform"], "rows[].id");
    assert_eq!(w["created_by"], w["updated_by"]);

    let id = w["id"].as_str().unwrap();
    let (s, got) = env.get(&format!("/v1/workflows/{id}")).await;
    assert_eq!(s, 200);
    assert_eq!(got, w, "get answers what create answered");

    let second = create(&env, &project, "second", json!([{"step_ref": "only", "job_id": a}])).await;
    let (_, page) = env.get(&format!("/v1/workflows?project_id={project}&limit=1")).await;
    assert_eq!(page["data"][0]["id"], second["id"], "newest first");
    assert_eq!(page["has_more"], true);
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, page2) = env.get(&format!("/v1/workflows?project_id={project}&limit=1&cursor={cursor}")).await;
    assert_eq!(page2["data"][0]["id"], w["id"]);
    assert_eq!(page2["has_more"], false);

    let dup = env.post("/v1/workflows", json!({"project_id": project, "name": "Nightly ETL", "steps": []})).await;
    assert_problem(409, dup, 409);

    let (s, _) = env.delete(&format!("/v1/workflows/{id}")).await;
    assert_eq!(s, 204);
    assert_problem(404, env.get(&format!("/v1/workflows/{id}")).await, 404);
    assert_problem(404, env.delete(&format!("/v1/workflows/{id}")).await, 404);
    let (_, page) = env.get(&format!("/v1/workflows?project_id={project}")).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    create(&env, &project, "Nightly ETL", json!([])).await;

    let (_, events) = env.get(&format!("/v1/audit-events?project_id={project}")).await;
    let actions: Vec<_> = events["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert!(actions.contains(&"workflow.created") && actions.contains(&"workflow.deleted"), "{actions:?}");
}

/// A workflow's or a version's steps without their `created_at` (that of
/// the version holding them).
fn defs(w: &Value) -> Vec<Value> {
    let mut steps = w["steps"].as_array().unwrap().clone();
    for s in &mut steps {
        s.as_object_mut().unwrap().remove("created_at");
    }
    steps
}

#[tokio::test]
async fn every_change_makes_a_new_version_and_no_change_keeps_it() {
    let env = TestEnv::start().await;
    let (project, a, b) = setup(&env).await;
    let w = create(&env, &project, "etl", chain(&a, &b)).await;
    let id = w["id"].as_str().unwrap();
    let path = format!("/v1/workflows/{id}");

    // Each field alone, steps aside, makes the next version with a new id.
    let mut seen = vec![w["version_id"].clone()];
    let changes = [
        json!({"name": "etl renamed"}),
        json!({"slug": "etl-2"}),
        json!({"description": "copy rows"}),
        json!({"tags": {"team": "data"}}),
        json!({"cron": "0 * * * *"}),
        json!({"cron_timezone": "Europe/Paris"}),
        json!({"timeout_secs": 600}),
        json!({"max_concurrent_runs": 3}),
        json!({"max_parallel_steps": 2}),
        json!({"skip_if_running": true}),
        json!({"version_policy": "latest"}),
        json!({"backwards_compatible": false}),
        json!({"enabled": false}),
        json!({"cron": null}),
    ];
    let mut last = w.clone();
    for change in &changes {
        let (s, got) = env.patch(&path, change.clone()).await;
        assert_eq!(s, 200, "{change}: {got}");
        assert_eq!(got["version"], last["version"].as_i64().unwrap() + 1, "{change}: {got}");
        assert!(!seen.contains(&got["version_id"]), "{change}: a new version_id: {got}");
        for (k, v) in change.as_object().unwrap() {
            assert_eq!(got.get(k).unwrap_or(&Value::Null), v, "{change}");
        }
        assert_eq!(defs(&got), defs(&last), "{change}: the steps stay as they were, ids and all");
        seen.push(got["version_id"].clone());
        last = got;
    }
    assert_eq!(last["version"], 15);

    // Nothing to change: the version, its id and updated_at stay.
    let same_values = json!({
        "name": "etl renamed", "slug": "etl-2", "description": "copy rows", "tags": {"team": "data"},
        "cron": null, "cron_timezone": "Europe/Paris", "timeout_secs": 600, "max_concurrent_runs": 3,
        "max_parallel_steps": 2, "skip_if_running": true, "version_policy": "latest",
        "backwards_compatible": false, "enabled": false, "steps": chain(&a, &b),
    });
    for body in [json!({}), json!({"breaking_change": true}), same_values] {
        let (s, got) = env.patch(&path, body.clone()).await;
        assert_eq!(s, 200, "{body}: {got}");
        assert_eq!(got, last, "{body}: nothing changed");
    }

    let mut steps = chain(&a, &b);
    steps[1]["sleep_duration_secs"] = json!(60);
    let (s, next) = env.patch(&path, json!({"steps": steps, "breaking_change": true})).await;
    assert_eq!(s, 200, "{next}");
    assert_eq!(next["version"], 16);
    assert!(!seen.contains(&next["version_id"]));
    assert_eq!(next["steps"][1]["sleep_duration_secs"], 60);
    assert_ne!(next["steps"][0]["id"], last["steps"][0]["id"], "new steps, new step ids");
    assert!(next.get("previous_version_id").is_none(), "no runs exist: {next}");

    for bad in [json!({"steps": [{"step_ref": "x"}]}), json!({"name": "", "description": "changed"})] {
        assert_problem(422, env.patch(&path, bad).await, 422);
    }
    let (_, after) = env.get(&path).await;
    assert_eq!(after, next, "a refused update changes nothing");

    let (_, versions) = env.get(&format!("{path}/versions?limit=100")).await;
    let data = versions["data"].as_array().unwrap();
    let nums: Vec<_> = data.iter().map(|v| v["version"].as_i64().unwrap()).collect();
    assert_eq!(nums, (1..=16).rev().collect::<Vec<_>>(), "one version row per change, none for the rest");
    assert_eq!(data[0]["id"], next["version_id"]);
    assert_eq!(data[1]["id"], last["version_id"]);
    assert_eq!(defs(&data[1]), defs(&data[15]), "a change of settings keeps the steps, ids and all");
    assert_eq!(data[15]["id"], w["version_id"]);

    let details: Vec<_> =
        audited(&env, &project, "workflow.updated").await.into_iter().map(|e| e["details"].clone()).collect();
    assert_eq!(details.len(), 15, "one per change, none for a PATCH that changed nothing: {details:?}");
    let d = details.iter().find(|d| d["version"] == 16).unwrap();
    assert_eq!((&d["changed"], &d["breaking_change"]), (&json!(["steps"]), &json!(true)), "{d}");
    assert_eq!(d["previous_version_id"], last["version_id"]);
    let d = details.iter().find(|d| d["version"] == 2).unwrap();
    assert_eq!(d["changed"], json!(["name"]), "{d}");
}

#[tokio::test]
async fn concurrent_updates_take_turns() {
    let env = TestEnv::start().await;
    let (project, a, b) = setup(&env).await;
    let w = create(&env, &project, "etl", chain(&a, &b)).await;
    let path = format!("/v1/workflows/{}", w["id"].as_str().unwrap());
    let changes = [
        json!({"description": "copy rows"}),
        json!({"tags": {"team": "data"}}),
        json!({"timeout_secs": 600}),
        json!({"max_parallel_steps": 2}),
    ];
    let answers = futures::future::join_all(changes.iter().map(|c| env.patch(&path, c.clone()))).await;
    let mut versions: Vec<i64> = answers
        .iter()
        .map(|(s, got)| {
            assert_eq!(*s, 200, "{got}");
            got["version"].as_i64().unwrap()
        })
        .collect();
    versions.sort();
    assert_eq!(versions, [2, 3, 4, 5], "each its own version");
    let (_, now) = env.get(&path).await;
    assert_eq!(now["version"], 5);
    for change in &changes {
        for (k, v) in change.as_object().unwrap() {
            assert_eq!(&now[k], v, "no update undid another's {k}: {now}");
        }
    }
}

/// The project's audit events of `action`.
async fn audited(env: &TestEnv, project: &str, action: &str) -> Vec<Value> {
    let (s, events) = env.get(&format!("/v1/audit-events?project_id={project}&action={action}&limit=100")).await;
    assert_eq!(s, 200, "{events}");
    events["data"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_change_of_settings_alone_reports_the_runs_on_the_version_it_replaces() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    // Nothing runs the naps here: a triggered run stays active.
    let w = create(&env, &project, "naps", json!([{"step_ref": "nap", "sleep_duration_secs": 3600}])).await;
    let id = w["id"].as_str().unwrap();
    let path = format!("/v1/workflows/{id}");
    let trigger = || async {
        let (s, run) = env.post(&format!("{path}/trigger"), json!({})).await;
        assert_eq!(s, 201, "{run}");
        assert!(["pending", "running", "paused"].contains(&run["status"].as_str().unwrap()), "{run}");
        run
    };
    trigger().await;
    trigger().await;

    let (s, v2) = env.patch(&path, json!({"description": "longer naps"})).await;
    assert_eq!(s, 200, "{v2}");
    assert_eq!(v2["version"], 2);
    assert_ne!(v2["version_id"], w["version_id"]);
    assert_eq!(v2["previous_version_id"], w["version_id"], "{v2}");
    assert_eq!(v2["active_runs_on_previous_version"], 2);
    assert!(audited(&env, &project, "workflow.updated_breaking").await.is_empty(), "not acknowledged as breaking");

    let run = trigger().await;
    assert_eq!(run["version_id"], v2["version_id"]);
    let (s, v3) = env.patch(&path, json!({"max_concurrent_runs": 5, "breaking_change": true})).await;
    assert_eq!(s, 200, "{v3}");
    assert_eq!(v3["version"], 3);
    assert_eq!(v3["previous_version_id"], v2["version_id"], "{v3}");
    assert_eq!(v3["active_runs_on_previous_version"], 1, "the runs on version 1 follow version 1");
    let breaking = audited(&env, &project, "workflow.updated_breaking").await;
    assert_eq!(breaking.len(), 1, "{breaking:?}");
    assert_eq!(breaking[0]["resource_id"], id);
    assert_eq!(
        breaking[0]["details"],
        json!({"previous_version_id": v2["version_id"], "version_id": v3["version_id"],
               "active_runs_on_previous_version": 1})
    );

    // Runs on the current version, and a PATCH that changes nothing:
    // no version is replaced, so nothing is reported or recorded.
    trigger().await;
    let (s, same) = env.patch(&path, json!({"max_concurrent_runs": 5, "breaking_change": true})).await;
    assert_eq!(s, 200, "{same}");
    assert_eq!((&same["version"], &same["version_id"]), (&v3["version"], &v3["version_id"]));
    assert!(same.get("previous_version_id").is_none() && same.get("active_runs_on_previous_version").is_none());
    assert_eq!(audited(&env, &project, "workflow.updated_breaking").await.len(), 1);

    let (_, active) = env.get(&format!("{path}/active-versions")).await;
    let mut on: Vec<_> = active["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let n = ["pending", "running", "paused"].iter().map(|k| v[*k].as_i64().unwrap()).sum::<i64>();
            (v["version"].as_i64().unwrap(), n)
        })
        .collect();
    on.sort();
    assert_eq!(on, [(1, 2), (2, 1), (3, 1)], "{active}");
}

#[tokio::test]
async fn every_invalid_save_is_located_at_its_step() {
    let env = TestEnv::start().await;
    let (project, a, _) = setup(&env).await;
    let other = env.project().await;
    let foreign = env.job_in(&other, TARGET, json!({})).await;
    let foreign = foreign["id"].as_str().unwrap();
    let job = |r: &str, deps: Value| json!({"step_ref": r, "job_id": a, "depends_on": deps});

    let got = refused(&env, &project, json!([job("a", json!([])), job("a", json!([]))])).await;
    assert_eq!(got, [("body.steps/1/step_ref".into(), "duplicate step_ref: step 0 has it too".into())]);

    let got = refused(&env, &project, json!([job("a", json!([])), job("b", json!(["ghost"]))])).await;
    assert_eq!(got, [("body.steps/1/depends_on".into(), "names no step: \"ghost\"".into())]);

    let got =
        refused(&env, &project, json!([job("a", json!(["c"])), job("b", json!(["a"])), job("c", json!(["b"]))])).await;
    assert_eq!(got, [("body.steps/0/depends_on".into(), "depends_on forms a cycle: a -> b -> c -> a".into())]);

    let got =
        refused(&env, &project, json!([{"step_ref": "a", "job_id": foreign}, {"step_ref": "b", "job_id": "job_nope"}]))
            .await;
    let want = "no such job in this project".to_string();
    assert_eq!(got, [("body.steps/0/job_id".into(), want.clone()), ("body.steps/1/job_id".into(), want)]);

    let got = refused(&env, &project, json!([{"step_ref": "a", "step_type": "sleep", "job_id": a}])).await;
    assert_eq!(
        got[0],
        ("body.steps/0/job_id".into(), "a sleep step does not take job_id (a field of job steps)".into())
    );

    let got = refused(&env, &project, json!([{"step_ref": "a", "job_id": a, "condition": {"nope": [1]}}])).await;
    assert_eq!(got[0].0, "body.steps/0/condition");
    assert!(got[0].1.starts_with("not a valid JSONLogic expression"), "{got:?}");

    let got = refused(&env, &project, json!([{"step_ref": "a", "job_id": a, "output_transform": "a[?"}])).await;
    assert_eq!(got[0].0, "body.steps/0/output_transform");
    assert!(got[0].1.starts_with("not a valid JMESPath expression"), "{got:?}");

    let got = refused(&env, &project, json!([{"step_ref": "a"}])).await;
    assert_eq!(got[0].0, "body.steps/0/step_type");

    // A step's kind is `step_type`: `type` is a 400 at it, in the same
    // notation as the 422s above, with a hint.
    let sent = json!({"project_id": project, "name": "bad", "steps": [{"step_ref": "a", "type": "approval"}]});
    let p = assert_problem(400, env.post("/v1/workflows", sent).await, 400);
    assert_eq!(p["errors"][0]["location"], "body.steps/0/type", "{p}");
    assert_eq!(p["errors"][0]["message"], "unknown property; did you mean `step_type`?", "{p}");
    assert_eq!(p["detail"], "body.steps/0/type: unknown property; did you mean `step_type`?", "{p}");
    let got = refused(&env, &project, json!([{"step_ref": "a", "step_type": "approval"}])).await;
    assert_eq!(got, [("body.steps/0/approval_approvers".into(), "an approval step needs approval_approvers".into())]);

    let got = refused(&env, &project, json!([{"step_ref": "a", "sub_workflow_id": "wf_nope"}])).await;
    assert_eq!(got, [("body.steps/0/sub_workflow_id".into(), "no such workflow in this project".into())]);

    // A workflow may not (through its sub-workflows) include itself.
    let child = create(&env, &project, "child", json!([job("a", json!([]))])).await;
    let child_id = child["id"].as_str().unwrap();
    let parent = create(&env, &project, "parent", json!([{"step_ref": "sub", "sub_workflow_id": child_id}])).await;
    let parent_id = parent["id"].as_str().unwrap();
    let bad = env
        .patch(
            &format!("/v1/workflows/{child_id}"),
            json!({"steps": [{"step_ref": "back", "sub_workflow_id": parent_id}]}),
        )
        .await;
    let p = assert_problem(422, bad, 422);
    assert_eq!(p["errors"][0]["location"], "body.steps/0/sub_workflow_id");
    let msg = p["errors"][0]["message"].as_str().unwrap();
    assert!(msg.starts_with("the sub-workflow chain includes this workflow itself"), "{msg}");
    let deep = json!([{"step_ref": "sub", "sub_workflow_id": parent_id, "max_nesting_depth": 1}]);
    let got = refused(&env, &project, deep).await;
    assert_eq!(got[0].1, "sub-workflows nest 2 levels deep here, more than max_nesting_depth 1");
}

#[tokio::test]
async fn the_project_policy_governs_saves() {
    let env = TestEnv::start().await;
    let (project, a, b) = setup(&env).await;
    let (s, empty) = env.get(&format!("/v1/workflow-policies/{project}")).await;
    assert_eq!(s, 200, "{empty}");
    assert_eq!(empty, json!({"project_id": project}));

    let bad = env.call(Method::PUT, &format!("/v1/workflow-policies/{project}"), Some(json!({"max_fan_out": 0}))).await;
    assert_eq!(assert_problem(422, bad, 422)["errors"][0]["location"], "body.max_fan_out");

    let policy = json!({"max_steps": 10, "max_depth": 2, "allowed_step_types": ["job", "sleep", "approval"],
                        "approval_required_before": ["sleep"]});
    let (s, saved) = env.call(Method::PUT, &format!("/v1/workflow-policies/{project}"), Some(policy.clone())).await;
    assert_eq!(s, 200, "{saved}");
    assert_eq!(saved["max_depth"], 2);
    assert!(saved["updated_at"].is_string());
    let (_, got) = env.get(&format!("/v1/workflow-policies/{project}")).await;
    assert_eq!(got, saved);

    let got = refused(&env, &project, chain(&a, &b)).await;
    let locations: Vec<_> = got.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(locations, ["body.steps/2/depends_on", "body.steps/1/step_type"], "{got:?}");
    assert!(got[0].1.starts_with("workflow policy max_depth:"), "{got:?}");
    assert!(got[1].1.starts_with("workflow policy approval_required_before:"), "{got:?}");
    let got = refused(&env, &project, json!([{"step_ref": "e", "event_key": "paid"}])).await;
    assert!(got[0].1.starts_with("workflow policy allowed_step_types:"), "{got:?}");
    create(
        &env,
        &project,
        "ok",
        json!([{"step_ref": "a", "job_id": a}, {"step_ref": "b", "job_id": b, "depends_on": ["a"]}]),
    )
    .await;

    let (_, events) = env.get(&format!("/v1/audit-events?project_id={project}&action=workflow_policy.updated")).await;
    assert_eq!(events["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn scopes_and_projects_bound_who_sees_and_changes_workflows() {
    let env = TestEnv::start().await;
    let (project, a, _) = setup(&env).await;
    let w = create(&env, &project, "etl", json!([{"step_ref": "a", "job_id": a}])).await;
    let id = w["id"].as_str().unwrap();
    let (reader, _) = key(&env, &project, &["workflows:read"]).await;
    let (s, _) = with(&env, &reader, Method::GET, &format!("/v1/workflows/{id}"), None).await;
    assert_eq!(s, 200);
    let (s, _) = with(&env, &reader, Method::GET, &format!("/v1/workflow-policies/{project}"), None).await;
    assert_eq!(s, 200);
    let create_body = json!({"name": "x", "steps": []});
    for (m, path, body) in [
        (Method::POST, "/v1/workflows".to_string(), Some(create_body.clone())),
        (Method::PATCH, format!("/v1/workflows/{id}"), Some(json!({"description": "x"}))),
        (Method::DELETE, format!("/v1/workflows/{id}"), None),
        (Method::PUT, format!("/v1/workflow-policies/{project}"), Some(json!({}))),
    ] {
        let got = with(&env, &reader, m.clone(), &path, body).await;
        assert_problem(403, got, 403);
    }
    let (jobs_only, _) = key(&env, &project, &["jobs:read"]).await;
    assert_problem(403, with(&env, &jobs_only, Method::GET, "/v1/workflows", None).await, 403);

    let (writer, _) = key(&env, &project, &["workflows:write", "workflows:read"]).await;
    let (s, mine) = with(&env, &writer, Method::POST, "/v1/workflows", Some(create_body)).await;
    assert_eq!(s, 201, "{mine}");
    assert!(mine["created_by"].as_str().unwrap().starts_with("apikey:"), "{mine}");

    let other = env.project().await;
    let (stranger, _) = key(&env, &other, &["*"]).await;
    for (m, path) in [
        (Method::GET, format!("/v1/workflows/{id}")),
        (Method::PATCH, format!("/v1/workflows/{id}")),
        (Method::DELETE, format!("/v1/workflows/{id}")),
        (Method::GET, format!("/v1/workflows/{id}/versions")),
        (Method::GET, format!("/v1/workflow-policies/{project}")),
        (Method::PUT, format!("/v1/workflow-policies/{project}")),
    ] {
        let body = matches!(m, Method::PATCH | Method::PUT).then(|| json!({}));
        let got = with(&env, &stranger, m.clone(), &path, body).await;
        assert_problem(404, got, 404);
    }
    let (_, theirs) = with(&env, &stranger, Method::GET, "/v1/workflows", None).await;
    assert_eq!(theirs["data"].as_array().unwrap().len(), 0);
    // A step of another project's workflow may not name this project's job.
    let (s, v) = with(
        &env,
        &stranger,
        Method::POST,
        "/v1/workflows",
        Some(json!({"name": "x", "steps": [{"step_ref": "a", "job_id": a}]})),
    )
    .await;
    assert_eq!(s, 422, "{v}");
    assert_eq!(v["errors"][0]["location"], "body.steps/0/job_id");
}

#[tokio::test]
async fn a_value_that_cannot_be_stored_is_located_at_that_value() {
    let env = TestEnv::start().await;
    let (project, a, _) = setup(&env).await;
    let nul = "a\u{0}b";
    let cases = [
        (json!([{"step_ref": "x", "job_id": a, "payload": {"note": nul}}]), "body.steps/0/payload/note"),
        (
            json!([{"step_ref": "x", "job_id": a}, {"step_ref": "y", "job_id": a, "payload": {"list": [1, {"a/b": nul}]}}]),
            "body.steps/1/payload/list/1/a~1b",
        ),
        (
            json!([{"step_ref": "x", "job_id": a, "condition": {"==": [{"var": "payload.k"}, nul]}}]),
            "body.steps/0/condition/==/1",
        ),
    ];
    for (steps, at) in cases {
        let got = refused(&env, &project, steps).await;
        assert!(got.iter().any(|(l, m)| l == at && m.contains("NUL")), "{at}: {got:?}");
    }
    let (_, list) = env.get(&format!("/v1/workflows?project_id={project}")).await;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(0), "nothing was saved: {list}");
}

/// Triggers read workflows through a cache (`store::recent`); a change made
/// through the same api applies to the very next trigger.
#[tokio::test]
async fn a_trigger_right_after_a_change_sees_the_change() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let w = create(&env, &project, "naps", json!([{"step_ref": "nap", "sleep_duration_secs": 3600}])).await;
    let path = format!("/v1/workflows/{}", w["id"].as_str().unwrap());
    let trigger = format!("{path}/trigger");
    let (s, run) = env.post(&trigger, json!({})).await;
    assert_eq!(s, 201, "{run}");

    let (s, off) = env.patch(&path, json!({"enabled": false})).await;
    assert_eq!(s, 200, "{off}");
    assert_problem(409, env.post(&trigger, json!({})).await, 409);

    let (s, on) = env.patch(&path, json!({"enabled": true})).await;
    assert_eq!(s, 200, "{on}");
    let (s, run) = env.post(&trigger, json!({})).await;
    assert_eq!(s, 201, "{run}");
    assert_eq!(run["version_id"], on["version_id"], "the version the change made");

    let (s, _) = env.delete(&path).await;
    assert_eq!(s, 204);
    assert_problem(404, env.post(&trigger, json!({})).await, 404);
}

/// docs/steps.md's examples, `(kind, steps)` in the order written: each
/// ```json block under a "### `kind`" heading.
fn step_reference_examples() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/steps.md")).unwrap();
    let (mut out, mut kind, mut block) = (Vec::new(), String::new(), None::<String>);
    for line in text.lines() {
        match (&mut block, line) {
            (None, l) if l.starts_with("### `") => kind = l.trim_start_matches("### `").trim_end_matches('`').into(),
            (None, "```json") => block = Some(String::new()),
            (Some(b), "```") => {
                out.push((kind.clone(), std::mem::take(b)));
                block = None;
            }
            (Some(b), l) => b.push_str(l),
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn every_example_of_the_step_reference_is_accepted() {
    let env = TestEnv::start().await;
    let (project, a, _) = setup(&env).await;
    let child = create(&env, &project, "child", json!([{"step_ref": "a", "job_id": a}])).await;
    let examples = step_reference_examples();
    let kinds: Vec<&str> = examples.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["job", "sub_workflow", "sleep", "wait_for_event", "approval", "cost_gate"]);
    for (i, (kind, steps)) in examples.iter().enumerate() {
        let steps = steps.replace("$JOB", &a).replace("$CHILD", child["id"].as_str().unwrap());
        let steps: Value = serde_json::from_str(&steps).unwrap_or_else(|e| panic!("{kind}: {e}: {steps}"));
        let saved = create(&env, &project, &format!("example {i}"), steps).await;
        let last = saved["steps"].as_array().unwrap().last().cloned().unwrap();
        assert_eq!(last["step_type"], kind.as_str(), "{saved}");
    }
}
