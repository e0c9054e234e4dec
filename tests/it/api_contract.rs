//! The served document states every rule the server enforces,
//! and the server reads input strictly: a value of the wrong type or a
//! `null` where none is allowed is a 400, never coerced or taken as absent.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv, SECRET};

/// The `errors[]` of a problem as (location, message).
fn errors(p: &Value) -> Vec<(String, String)> {
    let list = p["errors"].as_array().unwrap_or_else(|| panic!("no errors[]: {p}"));
    list.iter().map(|e| (e["location"].as_str().unwrap().into(), e["message"].as_str().unwrap().into())).collect()
}

#[tokio::test]
async fn a_value_of_the_wrong_type_is_400_and_nothing_is_coerced() {
    let env = TestEnv::start().await;
    // A number or a boolean where a string is required.
    for name in [json!(5), json!(true), json!(["x"]), json!({"x": 1})] {
        let p = assert_problem(400, env.post("/v1/projects", json!({ "name": name })).await, 400);
        let e = errors(&p);
        assert_eq!(e[0].0, "body.name", "{p}");
        assert!(e[0].1.starts_with("expected string"), "{p}");
    }
    // A string where a number or a boolean is required, nested too.
    let project = env.project().await;
    let p = assert_problem(400, env.post("/v1/projects", json!({"id": 7, "name": "x"})).await, 400);
    assert_eq!(errors(&p)[0].0, "body.id", "{p}");
    let job = env.job_in(&project, "http://127.0.0.1:9/x", json!({})).await;
    let id = job["id"].as_str().unwrap();
    let p = assert_problem(400, env.patch(&format!("/v1/jobs/{id}"), json!({"enabled": "false"})).await, 400);
    assert_eq!(errors(&p)[0].0, "body.enabled", "{p}");
    let p = assert_problem(400, env.post(&format!("/v1/jobs/{id}/trigger"), json!({"priority": 1.5})).await, 400);
    assert_eq!(errors(&p)[0].0, "body.priority", "{p}");
    // Only the project made through the harness exists: no "5", no "true".
    let (_, list) = env.get("/v1/projects").await;
    let names: Vec<&str> = list["data"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["acme"]);
}

#[tokio::test]
async fn null_for_a_field_that_is_not_nullable_is_400_and_null_clears_a_nullable_one() {
    let env = TestEnv::start().await;
    let p = assert_problem(400, env.post("/v1/projects", json!({"name": null})).await, 400);
    assert_eq!(errors(&p), [("body.name".to_string(), "must not be null".to_string())]);
    // An optional field: null is not "absent".
    let p = assert_problem(400, env.post("/v1/projects", json!({"name": "x", "id": null})).await, 400);
    assert_eq!(errors(&p)[0].0, "body.id", "{p}");
    let project = env.project().await;
    let job = env.job_in(&project, "http://127.0.0.1:9/x", json!({"description": "d"})).await;
    let id = job["id"].as_str().unwrap();
    let p = assert_problem(400, env.patch(&format!("/v1/jobs/{id}"), json!({"name": null})).await, 400);
    assert_eq!(errors(&p)[0].0, "body.name", "{p}");
    // A field documented as nullable takes null: PATCH clears it.
    let (s, v) = env.patch(&format!("/v1/jobs/{id}"), json!({"description": null})).await;
    assert_eq!(s, 200, "{v}");
    assert!(v["description"].is_null(), "{v}");
}

#[tokio::test]
async fn a_project_named_twice_by_the_internal_secret_must_agree() {
    let env = TestEnv::start().await;
    let a = env.project().await;
    let b = env.project().await;
    let call = |method: Method, path: &str, header: &str, body: Option<Value>| {
        let mut req = env
            .http
            .request(method, format!("{}{path}", env.base))
            .bearer_auth(SECRET)
            .header("X-Project-Id", header.to_string());
        if let Some(b) = body {
            req = req.json(&b);
        }
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    // Body project_id against X-Project-Id.
    let body = json!({"project_id": b, "name": "g", "slug": "g"});
    let p = assert_problem(422, call(Method::POST, "/v1/job-groups", &a, Some(body)).await, 422);
    let e = errors(&p);
    let at: Vec<&str> = e.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(at, ["body.project_id", "header.X-Project-Id"], "{p}");
    let detail = p["detail"].as_str().unwrap();
    assert!(detail.contains(&a) && detail.contains(&b), "{p}");
    // Query project_id against X-Project-Id.
    let p = assert_problem(422, call(Method::GET, &format!("/v1/jobs?project_id={b}"), &a, None).await, 422);
    assert_eq!(errors(&p)[0].0, "query.project_id", "{p}");
    // Nothing was created in either project.
    for project in [&a, &b] {
        let (s, list) = env.get(&format!("/v1/job-groups?project_id={project}")).await;
        assert_eq!(s, 200, "{list}");
        let groups = list.as_array().or(list["data"].as_array()).unwrap_or_else(|| panic!("{list}"));
        assert!(groups.is_empty(), "{project}: {list}");
    }
    // Agreeing, or named once, is fine.
    let (s, v) =
        call(Method::POST, "/v1/job-groups", &a, Some(json!({"project_id": a, "name": "g", "slug": "g"}))).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = call(Method::POST, "/v1/job-groups", &b, Some(json!({"name": "h", "slug": "h"}))).await;
    assert_eq!((s, v["project_id"].as_str()), (201, Some(b.as_str())), "{v}");
}

#[tokio::test]
async fn a_wrong_method_is_405_with_allow() {
    let env = TestEnv::start().await;
    let r =
        env.http.request(Method::PUT, format!("{}/v1/projects", env.base)).bearer_auth(SECRET).send().await.unwrap();
    assert_eq!(r.status(), 405);
    let allow = r.headers().get("allow").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let mut methods: Vec<&str> = allow.split(',').map(str::trim).collect();
    methods.sort();
    assert_eq!(methods, ["GET", "POST"], "Allow: {allow:?}");
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let r = env.http.delete(format!("{}/v1/jobs/job_x/trigger", env.base)).bearer_auth(SECRET).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
}

#[tokio::test]
async fn metrics_answer_in_the_exposition_format() {
    let env = TestEnv::start().await;
    let r = env.http.get(format!("{}/metrics", env.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/plain; version=0.0.4; charset=utf-8");
}

/// The rules of the served document, for generators: every operation has
/// an operationId and a tag, every request body is closed, enums list
/// every value, the framework's statuses are listed.
#[tokio::test]
async fn the_document_states_the_rules() {
    let doc: Value = serde_json::from_str(&switchyard_api::openapi_json()).unwrap();
    let schemas = &doc["components"]["schemas"];
    let resolve = |s: &Value| -> Value {
        match s["$ref"].as_str() {
            Some(r) => schemas[r.rsplit('/').next().unwrap()].clone(),
            None => s.clone(),
        }
    };
    assert_eq!(doc["servers"][0]["url"], "http://127.0.0.1:8080");
    let mut ids = std::collections::HashSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(ids.insert(id.to_string()), "operationId {id} twice");
            assert!(id.chars().next().unwrap().is_ascii_lowercase() && id.chars().all(|c| c.is_ascii_alphanumeric()));
            assert_eq!(op["tags"].as_array().map(Vec::len), Some(1), "{method} {path}");
            let responses = op["responses"].as_object().unwrap();
            for code in ["405", "413"] {
                assert!(responses.contains_key(code), "{method} {path} lacks {code}");
            }
            if let Some(body) = op.get("requestBody") {
                let schema = resolve(&body["content"]["application/json; charset=utf-8"]["schema"]);
                assert_eq!(schema["additionalProperties"], json!(false), "{method} {path}: {schema}");
                for code in ["400", "413", "422"] {
                    assert!(responses.contains_key(code), "{method} {path} lacks {code}");
                }
            }
            if op.get("security").is_some() {
                assert!(responses.contains_key("429"), "{method} {path} lacks 429");
            }
        }
    }
    for id in ["triggerJob", "listRuns", "cancelRun", "createProject"] {
        assert!(ids.contains(id), "no operation {id}");
    }
    // Every run status is in the document's enum of statuses.
    let statuses = &schemas["RunStatus"]["enum"];
    for s in switchyard_shared::domain::RunStatus::ALL {
        assert!(statuses.as_array().unwrap().contains(&json!(s.as_str())), "{s:?} missing: {statuses}");
    }
    // The filter of listRuns takes the same enum, and the step types are one.
    let status = list_runs_status(&doc);
    assert_eq!(status["$ref"], "#/components/schemas/RunStatus", "{status}");
    let step_types = schemas["StepType"]["enum"].as_array().unwrap();
    for t in switchyard_shared::domain::workflow::StepType::ALL {
        assert!(step_types.contains(&json!(t.as_str())), "{t:?}");
    }
    // The list of runs takes the internal secret's project headers.
    let list_runs = &doc["paths"]["/v1/runs"]["get"];
    let params: Vec<(&str, &str)> = list_runs["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["in"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    assert!(params.contains(&("header", "X-Project-Id")), "{params:?}");
    let limit = list_runs["parameters"].as_array().unwrap().iter().find(|p| p["name"] == "limit").unwrap();
    assert_eq!((limit["schema"]["minimum"].as_f64(), limit["schema"]["maximum"].as_f64()), (Some(1.0), Some(100.0)));
}

fn list_runs_status(doc: &Value) -> Value {
    let params = doc["paths"]["/v1/runs"]["get"]["parameters"].as_array().unwrap();
    params.iter().find(|p| p["name"] == "status").unwrap()["schema"].clone()
}

#[tokio::test]
async fn a_value_outside_a_documented_enum_or_bound_is_422() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, "http://127.0.0.1:9/x", json!({})).await;
    let id = job["id"].as_str().unwrap();
    let p =
        assert_problem(422, env.patch(&format!("/v1/jobs/{id}"), json!({"retry_strategy": "sometimes"})).await, 422);
    let e = errors(&p);
    assert_eq!(e[0].0, "body.retry_strategy", "{p}");
    assert!(e[0].1.contains("fixed, linear"), "{p}");
    let p = assert_problem(422, env.get(&format!("/v1/runs?project_id={project}&limit=101")).await, 422);
    assert_eq!(errors(&p), [("query.limit".to_string(), "must be at most 100".to_string())]);
}

/// The document states the value rules (lengths, alphabets, bounds, item
/// and entry counts, closed sets) from the constants the checks read.
#[tokio::test]
async fn the_document_states_value_rules_from_the_checks_constants() {
    use switchyard_shared::domain::{limits, trigger};
    let doc: Value = serde_json::from_str(&switchyard_api::openapi_json()).unwrap();
    let schemas = &doc["components"]["schemas"];
    let name = &schemas["CreateProject"]["properties"]["name"];
    assert_eq!((name["minLength"].as_u64(), name["maxLength"].as_u64()), (Some(1), Some(200)), "{name}");
    assert!(name["pattern"].is_string(), "{name}");
    let id = &schemas["CreateProject"]["properties"]["id"];
    assert_eq!(id["pattern"], switchyard_shared::ids::EXTERNAL_ID.pattern.unwrap());
    let job_props = &schemas["CreateJob"]["properties"];
    assert_eq!(job_props["timeout_secs"]["maximum"].as_i64(), Some(limits::MAX_TIMEOUT_SECS));
    assert_eq!(job_props["tags"]["maxProperties"].as_u64(), Some(limits::MAX_MAP_ENTRIES as u64));
    assert_eq!(job_props["tags"]["propertyNames"]["maxLength"].as_u64(), Some(limits::MAX_MAP_KEY_LEN as u64));
    let depends_on = &schemas["TriggerRequest"]["properties"]["depends_on"];
    assert_eq!(depends_on["maxItems"].as_u64(), Some(trigger::MAX_DEPENDENCIES as u64));
    let scopes: Vec<&str> = schemas["Scope"]["enum"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(scopes, switchyard_api::auth::scopes::SCOPES);
    assert_eq!(schemas["CreateApiKey"]["properties"]["scopes"]["items"]["$ref"], "#/components/schemas/Scope");
    // Path ids, the caller headers and the audit trail's times.
    let get_job = &doc["paths"]["/v1/jobs/{job_id}"]["get"]["parameters"];
    let param = |ps: &Value, name: &str| ps.as_array().unwrap().iter().find(|p| p["name"] == name).unwrap().clone();
    assert_eq!(param(get_job, "job_id")["schema"]["maxLength"], 64);
    let actor = param(get_job, "X-Actor-Id");
    assert_eq!((actor["schema"]["maxLength"].as_u64(), actor["schema"]["pattern"].is_string()), (Some(256), true));
    let audit = &doc["paths"]["/v1/audit-events"]["get"]["parameters"];
    assert_eq!(param(audit, "from")["schema"]["format"], "date-time");
}

/// A caller header the internal secret sends is read as the document says,
/// or refused (422) at `header.<name>`; it is never silently dropped.
#[tokio::test]
async fn a_caller_header_outside_its_rule_is_422() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let call = |headers: Vec<(&'static str, String)>| {
        let mut req = env.http.get(format!("{}/v1/jobs?project_id={project}", env.base)).bearer_auth(SECRET);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let p = assert_problem(422, call(vec![("X-Actor-Id", "a".repeat(257))]).await, 422);
    assert_eq!(errors(&p)[0].0, "header.X-Actor-Id", "{p}");
    let p = assert_problem(422, call(vec![("X-Project-Id", "a|b".into())]).await, 422);
    assert_eq!(errors(&p)[0].0, "header.X-Project-Id", "{p}");
    let (s, v) = call(vec![("X-Actor-Id", "a".repeat(256)), ("X-Project-Id", project.clone())]).await;
    assert_eq!(s, 200, "{v}");
    // A project_id that is not an id is refused, not looked up.
    let p = assert_problem(422, env.get("/v1/jobs?project_id=a%7Cb").await, 422);
    assert_eq!(errors(&p)[0].0, "query.project_id", "{p}");
}

/// Lengths count characters, as JSON Schema does; a NUL, which Postgres
/// cannot store, is refused by the rule that states it.
#[tokio::test]
async fn lengths_count_characters_and_names_keep_their_stated_form() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let group = |name: String| json!({"project_id": project, "name": name, "slug": format!("g{}", rand_suffix())});
    let (s, v) = env.post("/v1/job-groups", group("é".repeat(200))).await;
    assert_eq!(s, 201, "{v}");
    let p = assert_problem(422, env.post("/v1/job-groups", group("é".repeat(201))).await, 422);
    assert_eq!(errors(&p)[0].0, "body.name", "{p}");
    let p = assert_problem(422, env.post("/v1/job-groups", group("a\u{0}b".into())).await, 422);
    assert_eq!(errors(&p)[0].0, "body.name", "{p}");
    // A job without a slug takes its name's, or "job" when the name has no
    // letter or digit (a valid name must not make an invalid slug).
    let (s, v) = env
        .post("/v1/jobs", json!({"project_id": project, "name": "!!!", "endpoint_url": "http://127.0.0.1:9/x"}))
        .await;
    assert_eq!((s, v["slug"].as_str()), (201, Some("job")), "{v}");
    // A system role's name, in any case, is not a custom role's.
    let role = |name: &str| json!({"project_id": project, "name": name, "permissions": []});
    let p = assert_problem(422, env.post("/v1/roles", role(" Admin ")).await, 422);
    assert_eq!(errors(&p)[0].0, "body.name", "{p}");
}

/// An optional body sent as JSON `null` is not an absent body: the
/// document does not allow null there (400).
#[tokio::test]
async fn an_optional_body_sent_as_null_is_400() {
    let env = TestEnv::start().await;
    let r = env
        .http
        .post(format!("{}/v1/workflows/wf_x/plan", env.base))
        .bearer_auth(SECRET)
        .header("content-type", "application/json")
        .body("null")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

fn rand_suffix() -> String {
    uuid::Uuid::now_v7().simple().to_string()[20..].to_string()
}
