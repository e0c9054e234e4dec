//! Inbound events and event sources: a dispatch triggers the job and the
//! workflow of every matching source with the event's payload, exactly
//! once however often it is repeated or finished after a crash; a refused
//! trigger is its source's error alone; sources are checked (patterns,
//! targets), audited, isolated per project and bound by scopes.

use reqwest::Method;
use serde_json::{json, Value};
use switchyard_shared::domain::event_key::trigger_key;
use switchyard_shared::store::events::{self, NewEvent};

use crate::harness::{assert_problem, TestEnv};
use crate::support::access::{key, with};

const TARGET: &str = "http://127.0.0.1:9/hook";

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap_or_else(|| panic!("no id in {v}")).to_string()
}

async fn job(env: &TestEnv, project: &str, extra: Value) -> String {
    id(&env.job_in(project, TARGET, extra).await)
}

async fn workflow(env: &TestEnv, project: &str, job_id: &str, extra: Value) -> String {
    let mut body = json!({"project_id": project, "name": format!("wf-{}", uuid::Uuid::new_v4().simple()),
                          "steps": [{"step_ref": "a", "job_id": job_id}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (s, v) = env.post("/v1/workflows", body).await;
    assert_eq!(s, 201, "{v}");
    id(&v)
}

async fn source(env: &TestEnv, project: &str, pattern: &str, target_type: &str, target_id: &str) -> String {
    let body = json!({"project_id": project, "name": format!("on {pattern}"), "event_key": pattern,
                      "target_type": target_type, "target_id": target_id});
    let (s, v) = env.post("/v1/event-sources", body).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!((v["enabled"].as_bool(), v["event_key"].as_str()), (Some(true), Some(pattern)), "{v}");
    id(&v)
}

async fn dispatch(env: &TestEnv, body: Value) -> Value {
    let (s, v) = env.post("/v1/events/dispatch", body).await;
    assert_eq!(s, 200, "{v}");
    v
}

/// The entry of `source_id` in a dispatch's triggered_runs.
fn entry<'a>(d: &'a Value, source_id: &str) -> &'a Value {
    d["triggered_runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["source_id"] == source_id)
        .unwrap_or_else(|| panic!("no entry of {source_id}: {d}"))
}

/// The job's runs an event triggered: not those of a workflow's steps (a
/// triggered workflow run starts its first step at once).
async fn job_runs(env: &TestEnv, job_id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job_runs WHERE job_id = $1 AND workflow_step_run_id IS NULL")
        .bind(job_id)
        .fetch_one(&env.pool)
        .await
        .unwrap()
}

async fn workflow_runs(env: &TestEnv, workflow_id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM workflow_runs WHERE workflow_id = $1")
        .bind(workflow_id)
        .fetch_one(&env.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_dispatch_triggers_every_matching_source_once() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let j = job(&env, &project, json!({"name": "ship"})).await;
    let other_job = job(&env, &project, json!({"name": "bill"})).await;
    let wf = workflow(&env, &project, &j, json!({})).await;
    let exact = source(&env, &project, "order.created", "job", &j).await;
    let prefix = source(&env, &project, "order.*", "workflow", &wf).await;
    let elsewhere = source(&env, &project, "invoice.*", "job", &other_job).await;
    let off = source(&env, &project, "order.created", "job", &other_job).await;
    let (s, v) = env.patch(&format!("/v1/event-sources/{off}"), json!({"enabled": false})).await;
    assert_eq!((s, &v["enabled"]), (200, &json!(false)), "{v}");

    let payload = json!({"order": 42, "items": ["a", "b"]});
    let body =
        json!({"project_id": project, "event_key": "order.created", "payload": payload, "idempotency_key": "o-42"});
    let d = dispatch(&env, body.clone()).await;
    let event_id = d["event_id"].as_str().unwrap().to_string();
    assert!(event_id.starts_with("evt_"), "{d}");
    assert_eq!(d["resumed_steps"], 0);
    assert_eq!(
        d["triggered_runs"].as_array().unwrap().len(),
        2,
        "the exact and the prefix source, not the others: {d}"
    );
    assert!(d["triggered_runs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["source_id"] != elsewhere && t["source_id"] != off));

    let to_job = entry(&d, &exact);
    assert_eq!((to_job["kind"].as_str(), to_job["status"].as_str()), (Some("job_run"), Some("created")), "{d}");
    let run = env.run(to_job["id"].as_str().unwrap()).await;
    assert_eq!(run["job_id"], j.as_str());
    assert_eq!(run["payload"], payload);
    assert_eq!(run["triggered_by"], "event");
    assert_eq!(run["idempotency_key"], trigger_key(&event_id, &exact).as_str());
    assert_eq!(run["metadata"]["event_id"], event_id.as_str());
    assert_eq!(run["metadata"]["event_source_id"], exact.as_str());

    let to_wf = entry(&d, &prefix);
    assert_eq!((to_wf["kind"].as_str(), to_wf["status"].as_str()), (Some("workflow_run"), Some("created")), "{d}");
    let (s, wr) = env.get(&format!("/v1/workflow-runs/{}", to_wf["id"].as_str().unwrap())).await;
    assert_eq!(s, 200, "{wr}");
    assert_eq!((wr["workflow_id"].as_str(), &wr["payload"]), (Some(wf.as_str()), &payload));
    assert_eq!((wr["triggered_by"].as_str(), wr["status"].as_str()), (Some("event"), Some("running")));

    // The event records what arrived and what it triggered.
    let (s, ev) = env.get(&format!("/v1/events/{event_id}")).await;
    assert_eq!(s, 200, "{ev}");
    assert_eq!((ev["event_key"].as_str(), &ev["payload"]), (Some("order.created"), &payload));
    assert_eq!(ev["idempotency_key"], "o-42");
    assert!(ev["completed_at"].is_string(), "{ev}");
    assert_eq!(ev["triggered_runs"], d["triggered_runs"]);

    // The same idempotency key: the same event and answer, nothing new,
    // whatever the repeat carries.
    let mut again = body.clone();
    again["payload"] = json!({"order": 43});
    let d2 = dispatch(&env, again).await;
    assert_eq!(d2, d, "a repeat answers as the first dispatch did");
    assert_eq!((job_runs(&env, &j).await, workflow_runs(&env, &wf).await, job_runs(&env, &other_job).await), (1, 1, 0));

    // Another key of the family reaches only the prefix source; without an
    // idempotency key every dispatch is a new event.
    let shipped = dispatch(&env, json!({"project_id": project, "event_key": "order.shipped"})).await;
    let entries = shipped["triggered_runs"].as_array().unwrap();
    assert_eq!((entries.len(), &entries[0]["source_id"]), (1, &json!(prefix)), "{shipped}");
    assert_ne!(shipped["event_id"], d["event_id"]);
    let nothing = dispatch(&env, json!({"project_id": project, "event_key": "order"})).await;
    assert_eq!(nothing["triggered_runs"], json!([]), "`order.*` does not match `order`");
    assert_eq!(workflow_runs(&env, &wf).await, 2);

    // Listing: newest first, narrowed by key, paginated.
    let (s, page) = env.get(&format!("/v1/events?project_id={project}&limit=2")).await;
    assert_eq!(s, 200, "{page}");
    let ids: Vec<&Value> = page["data"].as_array().unwrap().iter().map(|e| &e["id"]).collect();
    assert_eq!(ids, [&nothing["event_id"], &shipped["event_id"]]);
    assert_eq!(page["has_more"], true);
    let (_, rest) = env
        .get(&format!("/v1/events?project_id={project}&limit=2&cursor={}", page["next_cursor"].as_str().unwrap()))
        .await;
    assert_eq!(rest["data"][0]["id"], event_id.as_str());
    assert_eq!(rest["has_more"], false);
    let (_, by_key) = env.get(&format!("/v1/events?project_id={project}&event_key=order.created")).await;
    assert_eq!(by_key["data"].as_array().unwrap().len(), 1, "{by_key}");
    assert_eq!(by_key["data"][0]["id"], event_id.as_str());
}

#[tokio::test]
async fn an_event_left_incomplete_is_finished_without_doubling() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let j = job(&env, &project, json!({})).await;
    let wf = workflow(&env, &project, &j, json!({})).await;
    let to_job = source(&env, &project, "user.signup", "job", &j).await;
    let to_wf = source(&env, &project, "user.*", "workflow", &wf).await;

    // A dispatch that crashed after recording its event and triggering the
    // job, before the workflow and before marking the event complete.
    let payload = json!({"user": "ada"});
    let new = NewEvent {
        id: switchyard_shared::ids::event_id(),
        project_id: project.clone(),
        event_key: "user.signup".into(),
        payload: Some(payload.clone()),
        idempotency_key: Some("signup-ada".into()),
        created_by: None,
    };
    let (row, inserted) = events::insert(&env.pool, &new).await.unwrap();
    assert!(inserted && row.completed_at.is_none());
    let early = env.trigger(&j, json!({"payload": payload, "idempotency_key": trigger_key(&new.id, &to_job)})).await;
    let (s, partial) = env.get(&format!("/v1/events/{}", new.id)).await;
    assert_eq!(s, 200, "{partial}");
    assert!(partial.get("completed_at").is_none(), "{partial}");
    assert_eq!(partial["triggered_runs"], json!([]));

    // The client's retry finishes it: the job's run is the one made before
    // the crash, the workflow's is new, and the event is complete.
    let retry = json!({"project_id": project, "event_key": "user.signup", "payload": {"user": "someone else"},
                       "idempotency_key": "signup-ada"});
    let d = dispatch(&env, retry.clone()).await;
    assert_eq!(d["event_id"], new.id.as_str());
    assert_eq!(entry(&d, &to_job)["status"], "existing");
    assert_eq!(entry(&d, &to_job)["id"], early["id"]);
    assert_eq!(entry(&d, &to_wf)["status"], "created");
    let (_, wr) = env.get(&format!("/v1/workflow-runs/{}", entry(&d, &to_wf)["id"].as_str().unwrap())).await;
    assert_eq!(wr["payload"], payload, "the stored event's payload, not the retry's");
    let (_, done) = env.get(&format!("/v1/events/{}", new.id)).await;
    assert!(done["completed_at"].is_string(), "{done}");
    assert_eq!(done["triggered_runs"], d["triggered_runs"]);

    // Once complete, a repeat returns the record and triggers nothing.
    assert_eq!(dispatch(&env, retry).await, d);
    assert_eq!((job_runs(&env, &j).await, workflow_runs(&env, &wf).await), (1, 1));
}

#[tokio::test]
async fn a_refused_trigger_is_its_sources_error_alone() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let schema = json!({"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}});
    let strict = job(&env, &project, json!({"name": "charge", "payload_schema": schema})).await;
    let lenient = job(&env, &project, json!({"name": "log"})).await;
    let disabled = job(&env, &project, json!({"name": "off"})).await;
    let (s, v) = env.patch(&format!("/v1/jobs/{disabled}"), json!({"enabled": false})).await;
    assert_eq!(s, 200, "{v}");
    let single = workflow(&env, &project, &lenient, json!({"skip_if_running": true})).await;
    let to_strict = source(&env, &project, "payment.received", "job", &strict).await;
    let to_lenient = source(&env, &project, "payment.*", "job", &lenient).await;
    let to_disabled = source(&env, &project, "payment.*", "job", &disabled).await;
    let to_single = source(&env, &project, "payment.received", "workflow", &single).await;

    let d =
        dispatch(&env, json!({"project_id": project, "event_key": "payment.received", "payload": {"amount": "ten"}}))
            .await;
    let bad = entry(&d, &to_strict);
    assert_eq!(bad["status"], "error", "{d}");
    assert!(bad.get("id").is_none(), "{d}");
    assert!(bad["error"].as_str().unwrap().contains("body.payload/amount"), "located like the job trigger's 422: {d}");
    assert!(entry(&d, &to_disabled)["error"].as_str().unwrap().contains("disabled"), "{d}");
    assert_eq!(entry(&d, &to_lenient)["status"], "created", "{d}");
    assert_eq!(entry(&d, &to_single)["status"], "created", "{d}");
    assert_eq!(
        (job_runs(&env, &strict).await, job_runs(&env, &lenient).await, job_runs(&env, &disabled).await),
        (0, 1, 0)
    );
    let (_, ev) = env.get(&format!("/v1/events/{}", d["event_id"].as_str().unwrap())).await;
    assert!(ev["completed_at"].is_string(), "refusals still complete the event: {ev}");

    // A valid payload passes the schema; the workflow's run is still
    // active, so skip_if_running skips it and says which run it gave way to.
    let d = dispatch(&env, json!({"project_id": project, "event_key": "payment.received", "payload": {"amount": 10}}))
        .await;
    assert_eq!(entry(&d, &to_strict)["status"], "created", "{d}");
    let skipped = entry(&d, &to_single);
    assert_eq!(skipped["status"], "skipped", "{d}");
    assert!(skipped.get("id").is_none());
    let first_run = sqlx::query_scalar::<_, String>("SELECT id FROM workflow_runs WHERE workflow_id = $1")
        .bind(&single)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert!(skipped["error"].as_str().unwrap().contains(&first_run), "{d}");
    assert_eq!(entry(&d, &to_lenient)["status"], "created");
    assert_eq!(workflow_runs(&env, &single).await, 1);
}

#[tokio::test]
async fn sources_are_checked_audited_and_kept_to_their_project() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let other = env.project().await;
    let j = job(&env, &project, json!({})).await;
    let wf = workflow(&env, &project, &j, json!({})).await;
    let foreign_job = job(&env, &other, json!({})).await;
    let gone = job(&env, &project, json!({"name": "gone"})).await;
    assert_eq!(env.delete(&format!("/v1/jobs/{gone}")).await.0, 204);

    let create = |pattern: &str, target_type: &str, target: &str| json!({"project_id": project, "name": "s", "event_key": pattern, "target_type": target_type, "target_id": target});
    let located = |v: &Value| v["errors"][0]["location"].as_str().unwrap().to_string();
    for bad in ["order.*.created", "*.created", "**", ""] {
        let v = assert_problem(422, env.post("/v1/event-sources", create(bad, "job", &j)).await, 422);
        assert_eq!(located(&v), "body.event_key", "{bad:?}: {v}");
    }
    for (target_type, target) in [("job", "job_nothing"), ("job", &*foreign_job), ("job", &*gone), ("job", &*wf)] {
        let v = assert_problem(422, env.post("/v1/event-sources", create("a", target_type, target)).await, 422);
        assert_eq!(located(&v), "body.target_id", "{target}: {v}");
    }
    let v = assert_problem(422, env.post("/v1/event-sources", create("a", "queue", &j)).await, 422);
    assert_eq!(located(&v), "body.target_type");

    let s = source(&env, &project, "order.*", "job", &j).await;
    let (st, v) = env.patch(&format!("/v1/event-sources/{s}"), json!({"event_key": "a*b"})).await;
    assert_eq!((st, located(&v)), (422, "body.event_key".to_string()), "{v}");
    let (st, v) = env.patch(&format!("/v1/event-sources/{s}"), json!({"target_id": foreign_job})).await;
    assert_eq!((st, located(&v)), (422, "body.target_id".to_string()), "{v}");
    let (st, v) = env
        .patch(
            &format!("/v1/event-sources/{s}"),
            json!({"name": "orders to the workflow", "target_type": "workflow", "target_id": wf, "description": "x"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["name"].as_str(), v["target_type"].as_str(), v["target_id"].as_str()),
        (Some("orders to the workflow"), Some("workflow"), Some(wf.as_str()))
    );
    assert_eq!((v["event_key"].as_str(), v["description"].as_str()), (Some("order.*"), Some("x")), "the rest is kept");
    let (_, v) = env.patch(&format!("/v1/event-sources/{s}"), json!({"description": null})).await;
    assert!(v.get("description").is_none(), "null clears: {v}");
    let (st, page) = env.get(&format!("/v1/event-sources?project_id={project}")).await;
    assert_eq!((st, page["data"].as_array().unwrap().len()), (200, 1), "{page}");
    let d = dispatch(&env, json!({"project_id": project, "event_key": "order.paid"})).await;

    // Another project's credential sees none of it.
    let (stranger, _) = key(&env, &other, &["*"]).await;
    for (m, path) in [
        (Method::GET, format!("/v1/event-sources/{s}")),
        (Method::PATCH, format!("/v1/event-sources/{s}")),
        (Method::DELETE, format!("/v1/event-sources/{s}")),
        (Method::GET, format!("/v1/events/{}", d["event_id"].as_str().unwrap())),
    ] {
        let body = (m == Method::PATCH).then(|| json!({"enabled": false}));
        assert_problem(404, with(&env, &stranger, m.clone(), &path, body).await, 404);
    }
    let (_, theirs) = with(&env, &stranger, Method::GET, "/v1/event-sources", None).await;
    assert_eq!(theirs["data"], json!([]));
    let (_, theirs) = with(&env, &stranger, Method::GET, "/v1/events", None).await;
    assert_eq!(theirs["data"], json!([]));
    // ...nor can it point a source of its own at this project's job, or
    // dispatch into this project.
    let body = json!({"name": "s", "event_key": "a", "target_type": "job", "target_id": j});
    let (st, v) = with(&env, &stranger, Method::POST, "/v1/event-sources", Some(body)).await;
    assert_eq!((st, located(&v)), (422, "body.target_id".to_string()), "{v}");
    let body = json!({"project_id": project, "event_key": "order.paid"});
    assert_problem(403, with(&env, &stranger, Method::POST, "/v1/events/dispatch", Some(body)).await, 403);
    // Its own dispatch reaches only its own sources.
    let (st, mine) =
        with(&env, &stranger, Method::POST, "/v1/events/dispatch", Some(json!({"event_key": "order.paid"}))).await;
    assert_eq!((st, &mine["triggered_runs"]), (200, &json!([])), "{mine}");
    assert_eq!(workflow_runs(&env, &wf).await, 1);

    assert_eq!(env.delete(&format!("/v1/event-sources/{s}")).await.0, 204);
    assert_problem(404, env.get(&format!("/v1/event-sources/{s}")).await, 404);
    let (_, audit) = env.get(&format!("/v1/audit-events?project_id={project}&resource_id={s}&order=asc")).await;
    let actions: Vec<&str> = audit["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        ["event_source.created", "event_source.updated", "event_source.updated", "event_source.deleted"],
        "{audit}"
    );
    assert_eq!(audit["data"][1]["details"]["target_id"], wf.as_str());
}

#[tokio::test]
async fn dispatches_are_checked_and_scopes_bound_who_may_do_what() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let j = job(&env, &project, json!({})).await;
    let wf = workflow(&env, &project, &j, json!({})).await;
    source(&env, &project, "ping", "job", &j).await;

    for (body, at) in [
        (json!({"project_id": project, "event_key": "order.*"}), "body.event_key"),
        (json!({"project_id": project, "event_key": ""}), "body.event_key"),
        (json!({"project_id": project, "event_key": "k".repeat(256)}), "body.event_key"),
        (json!({"project_id": project, "event_key": "a", "idempotency_key": "i".repeat(256)}), "body.idempotency_key"),
        (json!({"project_id": "prj_nowhere", "event_key": "a"}), "body.project_id"),
    ] {
        let v = assert_problem(422, env.post("/v1/events/dispatch", body).await, 422);
        assert_eq!(v["errors"][0]["location"], at, "{v}");
    }
    assert_eq!(job_runs(&env, &j).await, 0);

    // Reading runs is not triggering them.
    let (reader, _) = key(&env, &project, &["runs:read"]).await;
    let ping = json!({"event_key": "ping"});
    assert_problem(403, with(&env, &reader, Method::POST, "/v1/events/dispatch", Some(ping.clone())).await, 403);
    assert_eq!(job_runs(&env, &j).await, 0);
    let (s, _) = with(&env, &reader, Method::GET, "/v1/events", None).await;
    assert_eq!(s, 200);
    let (triggerer, _) = key(&env, &project, &["jobs:trigger"]).await;
    let (s, d) = with(&env, &triggerer, Method::POST, "/v1/events/dispatch", Some(ping)).await;
    assert_eq!((s, &d["triggered_runs"][0]["status"]), (200, &json!("created")), "{d}");
    let run = env.run(d["triggered_runs"][0]["id"].as_str().unwrap()).await;
    assert!(run["created_by"].as_str().unwrap().starts_with("apikey:"), "{run}");
    assert_problem(403, with(&env, &triggerer, Method::GET, "/v1/events", None).await, 403);

    // Sources: read with jobs:read, written with jobs:write, and pointed
    // only at what the writer may trigger itself.
    let (jobs_reader, _) = key(&env, &project, &["jobs:read"]).await;
    let (s, _) = with(&env, &jobs_reader, Method::GET, "/v1/event-sources", None).await;
    assert_eq!(s, 200);
    let to = |target_type: &str, target: &str| json!({"name": "s", "event_key": "e", "target_type": target_type, "target_id": target});
    let post = |k: String, body: Value| {
        let env = &env;
        async move { with(env, &k, Method::POST, "/v1/event-sources", Some(body)).await }
    };
    assert_problem(403, post(jobs_reader.clone(), to("job", &j)).await, 403);
    let (writer, _) = key(&env, &project, &["jobs:write"]).await;
    assert_problem(403, post(writer, to("job", &j)).await, 403);
    let (job_writer, _) = key(&env, &project, &["jobs:write", "jobs:trigger"]).await;
    let (s, v) = post(job_writer.clone(), to("job", &j)).await;
    assert_eq!(s, 201, "{v}");
    assert!(v["created_by"].as_str().unwrap().starts_with("apikey:"), "{v}");
    let v = assert_problem(403, post(job_writer.clone(), to("workflow", &wf)).await, 403);
    assert!(v["detail"].as_str().unwrap().contains("workflows:trigger"), "{v}");
    let (wf_writer, _) = key(&env, &project, &["jobs:write", "workflows:trigger"]).await;
    let (s, v) = post(wf_writer, to("workflow", &wf)).await;
    assert_eq!(s, 201, "{v}");
}

/// A dispatched event and an event a step emits take one path: each
/// triggers a job under its dedup window (an equal payload inside the
/// window folds into the first run, `existing`), and the run it makes is
/// enqueued at commit and reaches the job's endpoint.
#[tokio::test]
async fn every_event_triggers_a_job_under_its_dedup_window_and_its_run_is_dispatched() {
    let env = TestEnv::start().await;
    let target = crate::target::Target::start().await;
    let project = env.project().await;
    let j = id(&env.job_in(&project, &target.url, json!({"name": "folded", "dedup_window_secs": 3600})).await);
    let to_job = source(&env, &project, "order.*", "job", &j).await;
    env.spawn_worker();
    env.spawn_scheduler();

    let first = dispatch(&env, json!({"project_id": project, "event_key": "order.paid", "payload": {"n": 1}})).await;
    assert_eq!(entry(&first, &to_job)["status"], "created", "{first}");
    let hits = target.wait_count(1, std::time::Duration::from_secs(30)).await;
    assert_eq!(hits[0].body["payload"], json!({"n": 1}), "the event's run was enqueued and dispatched");

    let again = dispatch(&env, json!({"project_id": project, "event_key": "order.paid", "payload": {"n": 1}})).await;
    assert_eq!(entry(&again, &to_job)["status"], "existing", "{again}");
    assert_eq!(entry(&again, &to_job)["id"], entry(&first, &to_job)["id"], "folded into the first run");
    let other = dispatch(&env, json!({"project_id": project, "event_key": "order.paid", "payload": {"n": 2}})).await;
    assert_eq!(entry(&other, &to_job)["status"], "created", "another payload is another run: {other}");

    // A step emitting the same payload under a key the source matches
    // folds into the first run too.
    let emitter = crate::support::workflows::job(&env, &project, &target.url, json!({"name": "emitter"})).await;
    let steps = json!({"steps": [{"step_ref": "pay", "job_id": emitter, "event_emit_key": "order.emitted"}]});
    let wf = crate::support::workflows::workflow(&env, &project, steps).await;
    target.set_default(crate::target::Reply::json(200, r#"{"n":1}"#));
    let run = crate::support::workflows::trigger(&env, &wf, json!({})).await;
    let done = crate::support::workflows::wait_status(&env, &id(&run), "completed").await;
    let emitted = crate::support::workflows::step(&done, "pay")["emitted_event_id"]
        .as_str()
        .unwrap_or_else(|| panic!("emitted: {done}"))
        .to_string();
    let (_, ev) = env.get(&format!("/v1/events/{emitted}")).await;
    assert_eq!(ev["triggered_runs"][0]["status"], "existing", "{ev}");
    assert_eq!(ev["triggered_runs"][0]["id"], entry(&first, &to_job)["id"], "{ev}");
    assert_eq!(job_runs(&env, &j).await, 2);
}
