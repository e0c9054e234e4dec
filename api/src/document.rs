//! What the generated document cannot say by itself, added from the tables
//! the server's own checks read, so the two cannot drift:
//!
//! - `servers`: the default `API_ADDR` (`Config::defaults`).
//! - The answers every operation may get from the layers around the
//!   handlers ([`ANSWERS`]): 405 with `Allow` (the router), 413 (the body
//!   limit, any method), 429 with `Retry-After` (the rate limit, but for
//!   `rate_limit::EXEMPT`), 400 for a request that cannot be read, each
//!   a problem+json.
//! - The headers an internal-secret caller may send
//!   (`auth::CALLER_HEADERS`) as header parameters of every operation that
//!   takes a credential.
//! - `additionalProperties: false` on every object a request body holds:
//!   `strict_json` refuses an unknown property, on this word.
//! - The form of each list's `cursor` ([`cursors`]): every string of it
//!   is a position the list takes, so a cursor is refused (422) only when
//!   the document already says it is not one.
//! - The closed sets ([`closed_sets`]): each a named string enum whose
//!   values come from the domain type the handlers parse with, referred to
//!   by the properties and query parameters that take it. `strict_json`
//!   refuses a body value outside one (422); a query value is refused by
//!   the handler's parse of the same type (422).

use serde_json::{json, Map, Value};

/// When a layer around the handlers answers an operation.
#[derive(Clone, Copy)]
enum When {
    Always,
    /// Unless the path is exempt from the rate limit.
    RateLimited,
    /// When it takes a body or a parameter: something that may not parse.
    HasInput,
}

struct Answer {
    status: u16,
    description: &'static str,
    /// A response header, with its description.
    header: Option<(&'static str, &'static str)>,
    when: When,
}

/// The statuses the layers around the handlers answer with, and when.
const ANSWERS: [Answer; 4] = [
    Answer {
        status: 400,
        description: "The request cannot be read as the operation's input: malformed JSON, a missing or wrong \
                      Content-Type (not application/json; this API answers 400 for it, never 415), a value of the \
                      wrong type, null for a field that is not nullable, a missing required or an unknown \
                      property, a parameter that does not parse. `errors` lists each.",
        header: None,
        when: When::HasInput,
    },
    Answer {
        status: 405,
        description: "The path exists but not with this method.",
        header: Some(("Allow", "The methods the path takes, e.g. `GET, POST`.")),
        when: When::Always,
    },
    Answer {
        status: 413,
        description: "The request body is larger than the limit (MAX_BODY_BYTES, 1 MiB by default).",
        header: None,
        when: When::Always,
    },
    Answer {
        status: 429,
        description: "A rate limit of the client's address was reached.",
        header: Some(("Retry-After", "Seconds until the client's window ends.")),
        when: When::RateLimited,
    },
];

fn problem_response(description: &str, header: Option<(&str, &str)>) -> Value {
    let mut r = json!({
        "description": description,
        "content": {crate::problem::PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    });
    if let Some((name, about)) = header {
        r["headers"] = json!({name: {"description": about, "schema": {"type": "string"}}});
    }
    r
}

/// Where a closed set applies: a property of a component schema (or the
/// items of an array property), or a query parameter of an operation.
enum Place {
    Property(&'static str, &'static str),
    Items(&'static str, &'static str),
    Query(&'static str, &'static str),
}

/// Every closed set the API takes or answers with: its name (a component
/// schema), its values from the domain, where it applies.
fn closed_sets() -> Vec<(&'static str, Vec<&'static str>, Vec<Place>)> {
    use switchyard_shared::domain::workflow::StepType;
    use switchyard_shared::domain::workflow_run::{StepStatus, WorkflowRunStatus};
    use switchyard_shared::domain::{run_record, ExecutionMode, RetryStrategy, RunStatus};
    use Place::*;
    vec![
        (
            "RunStatus",
            RunStatus::ALL.iter().map(|s| s.as_str()).collect(),
            vec![Property("JobRun", "status"), Query("listRuns", "status")],
        ),
        (
            "WorkflowRunStatus",
            WorkflowRunStatus::ALL.iter().map(|s| s.as_str()).collect(),
            vec![Property("WorkflowRun", "status"), Query("listWorkflowRuns", "status")],
        ),
        (
            "StepStatus",
            StepStatus::ALL.iter().map(|s| s.as_str()).collect(),
            vec![Property("WorkflowStepRun", "status")],
        ),
        (
            "StepType",
            StepType::ALL.iter().map(|s| s.as_str()).collect(),
            vec![
                Property("WorkflowStepRequest", "step_type"),
                Property("WorkflowStep", "step_type"),
                Property("WorkflowStepRun", "step_type"),
            ],
        ),
        (
            "RetryStrategy",
            RetryStrategy::NAMES.to_vec(),
            vec![
                Property("CreateJob", "retry_strategy"),
                Property("UpdateJob", "retry_strategy"),
                Property("Job", "retry_strategy"),
            ],
        ),
        (
            "ExecutionMode",
            ExecutionMode::ALL.iter().map(|m| m.as_str()).collect(),
            vec![Property("TriggerRequest", "execution_mode"), Property("JobRun", "execution_mode")],
        ),
        (
            "LogLevel",
            run_record::LOG_LEVELS.to_vec(),
            vec![
                Property("LogLineIn", "level"),
                Property("LogLine", "level"),
                Property("CreateLogDrain", "min_level"),
                Property("UpdateLogDrain", "min_level"),
                Property("LogDrain", "min_level"),
                Query("listRunLogs", "level"),
            ],
        ),
        (
            "WebhookEventType",
            crate::routes::webhooks::EVENT_TYPES.to_vec(),
            vec![
                Items("CreateSubscription", "event_types"),
                Items("UpdateSubscription", "event_types"),
                Items("WebhookSubscription", "event_types"),
            ],
        ),
        (
            "WebhookDeliveryStatus",
            crate::routes::webhooks::DELIVERY_STATUSES.to_vec(),
            vec![Property("WebhookDelivery", "status"), Query("listWebhookDeliveries", "status")],
        ),
    ]
}

/// Names each closed set as a component and points its places at it.
fn annotate_closed_sets(doc: &mut Value) {
    for (name, values, places) in closed_sets() {
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        for place in places {
            let target = match place {
                Place::Property(schema, prop) => {
                    doc.pointer_mut(&format!("/components/schemas/{schema}/properties/{prop}"))
                }
                Place::Items(schema, prop) => {
                    doc.pointer_mut(&format!("/components/schemas/{schema}/properties/{prop}/items"))
                }
                Place::Query(op, param) => query_parameter(doc, op, param).map(|p| &mut p["schema"]),
            };
            // A place the document does not have is a table out of date.
            let target = target.unwrap_or_else(|| panic!("closed set {name}: no such place in the document"));
            let mut with_ref = reference.clone();
            if let Some(d) = target.get("description") {
                with_ref["description"] = d.clone();
            }
            *target = with_ref;
        }
        let values: Vec<Value> = values.into_iter().map(Value::from).collect();
        doc["components"]["schemas"][name] = json!({"type": "string", "enum": values});
    }
}

fn query_parameter<'a>(doc: &'a mut Value, operation_id: &str, name: &str) -> Option<&'a mut Value> {
    let paths = doc.get_mut("paths")?.as_object_mut()?;
    let op = paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
        .find(|op| op["operationId"] == operation_id)?;
    op.get_mut("parameters")?.as_array_mut()?.iter_mut().find(|p| p["in"] == "query" && p["name"] == name)
}

/// The pattern of the `cursor` query parameter of an operation, from the
/// constants the lists' parses are written against.
fn cursors(operation_id: &str) -> &'static str {
    match operation_id {
        "listRunEvents" => crate::routes::run_records::OFFSET_CURSOR_PATTERN,
        "explainWorkflowRun" => crate::routes::workflow_runs::DECISION_CURSOR_PATTERN,
        _ => crate::pagination::CURSOR_PATTERN,
    }
}

pub fn annotate(doc: &mut Value) {
    annotate_closed_sets(doc);
    let server = switchyard_shared::Config::defaults().api_addr;
    doc["servers"] = json!([{"url": format!("http://{server}"), "description": "The default API_ADDR"}]);
    let mut closed = Vec::new();
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else { continue };
            for op in item.values_mut() {
                annotate_operation(path, op, &mut closed);
            }
        }
    }
    let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) else { return };
    let mut seen = std::collections::HashSet::new();
    while let Some(schema) = closed.pop() {
        if !seen.insert(schema.clone()) {
            continue;
        }
        if let Some(s) = schemas.get_mut(&schema) {
            close(s, &mut closed);
        }
    }
}

fn annotate_operation(path: &str, op: &mut Value, closed: &mut Vec<String>) {
    let has_input = op.get("requestBody").is_some() || op.get("parameters").is_some();
    let secured = op.get("security").is_some();
    let responses = op["responses"].as_object_mut().map(std::mem::take).unwrap_or_default();
    let mut responses: Map<String, Value> = responses;
    for a in &ANSWERS {
        let applies = match a.when {
            When::Always => true,
            When::RateLimited => !crate::rate_limit::EXEMPT.contains(&path),
            When::HasInput => has_input,
        };
        let code = a.status.to_string();
        if applies && !responses.contains_key(&code) {
            responses.insert(code, problem_response(a.description, a.header));
        } else if applies && a.status == 400 {
            // The operation's own 400 says the same, with the details.
            responses[&code]["description"] = json!(a.description);
        }
    }
    let mut sorted: Vec<(String, Value)> = responses.into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    op["responses"] = Value::Object(sorted.into_iter().collect());
    let operation_id = op["operationId"].as_str().unwrap_or_default().to_string();
    for p in op.get_mut("parameters").and_then(Value::as_array_mut).into_iter().flatten() {
        if p["in"] == "query" && p["name"] == "cursor" {
            p["schema"]["pattern"] = json!(cursors(&operation_id));
        }
    }
    if secured {
        let params = op.as_object_mut().map(|o| o.entry("parameters").or_insert_with(|| json!([])));
        if let Some(Value::Array(params)) = params {
            for (name, about) in crate::auth::CALLER_HEADERS {
                params.push(json!({
                    "name": name, "in": "header", "required": false, "description": about,
                    "schema": {"type": "string"}
                }));
            }
        }
    }
    if let Some(content) = op.pointer("/requestBody/content").and_then(Value::as_object) {
        for media in content.values() {
            refs(&media["schema"], closed);
        }
    }
}

/// The component names `schema` refers to, anywhere inside it.
fn refs(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(o) => {
            if let Some(r) = o.get("$ref").and_then(Value::as_str) {
                out.push(r.rsplit('/').next().unwrap_or_default().to_string());
            }
            o.values().for_each(|v| refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// An object schema with properties and no word on others gets
/// `additionalProperties: false`; what it refers to is closed next.
fn close(schema: &mut Value, next: &mut Vec<String>) {
    if let Some(o) = schema.as_object_mut() {
        if o.contains_key("properties") && !o.contains_key("additionalProperties") {
            o.insert("additionalProperties".into(), Value::Bool(false));
        }
    }
    refs(schema, next);
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// A bound stated by a validator attribute (which cannot name a
    /// constant) must be the constant the server's own check reads.
    #[test]
    fn stated_bounds_are_the_constants_the_checks_read() {
        use switchyard_shared::queue::{MAX_PRIORITY, MIN_PRIORITY};
        let doc = crate::openapi_value();
        let bounds = |s: &Value| (s["minimum"].as_f64(), s["maximum"].as_f64());
        let p = &doc["components"]["schemas"]["TriggerRequest"]["properties"]["priority"];
        assert_eq!(bounds(p), (Some(MIN_PRIORITY.into()), Some(MAX_PRIORITY.into())));
        let mut limits = 0;
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                for p in op["parameters"].as_array().into_iter().flatten().filter(|p| p["name"] == "limit") {
                    let max = crate::pagination::MAX_LIMIT as f64;
                    assert_eq!(bounds(&p["schema"]), (Some(1.0), Some(max)), "{}", op["operationId"]);
                    limits += 1;
                }
            }
        }
        assert!(limits >= 30, "{limits}");
    }

    #[test]
    fn every_closed_set_has_its_places() {
        // annotate_closed_sets panics on a place the document lacks.
        let doc = crate::openapi_value();
        for (name, values, _) in super::closed_sets() {
            assert_eq!(doc["components"]["schemas"][name]["enum"].as_array().map(Vec::len), Some(values.len()));
        }
    }
}
