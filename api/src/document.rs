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
//! - The value rules ([`value_rules`]): lengths, alphabets, bounds, item
//!   and entry counts, each from the constant or the text rule the
//!   handler's check reads. A request type's rules live beside it, in its
//!   module's `value_rules()` (written with [`rules`]); only the rules of
//!   the operations' path and query parameters are here
//!   ([`parameter_rules`]).
//! - An example of every request body ([`examples`]), from the reviewed
//!   table `api/src/request_examples.json`.

pub(crate) mod examples;
pub(crate) mod rules;

use rules::{text, Place};
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

/// Every closed set the API takes or answers with: its name (a component
/// schema), its values from the domain, where it applies.
fn closed_sets() -> Vec<(&'static str, Vec<&'static str>, Vec<Place>)> {
    use crate::routes::policies;
    use switchyard_shared::domain::workflow::{self, StepType};
    use switchyard_shared::domain::workflow_plan::Outcome;
    use switchyard_shared::domain::workflow_run::{StepStatus, WorkflowRunStatus};
    use switchyard_shared::domain::{limits, run_record, ExecutionMode, RetryStrategy, RunStatus};
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
        (
            "WebhookDeliveryKind",
            switchyard_shared::store::deliveries::Kind::NAMES.to_vec(),
            vec![Query("listWebhookDeliveries", "kind")],
        ),
        (
            "Scope",
            crate::auth::scopes::SCOPES.to_vec(),
            vec![
                Items("CreateApiKey", "scopes"),
                Items("CreateRole", "permissions"),
                Items("UpdateRole", "permissions"),
                Items("CreateResourcePolicy", "actions"),
                Items("UpdateResourcePolicy", "actions"),
            ],
        ),
        ("PolicyEffect", policies::EFFECTS.to_vec(), both_policies("effect")),
        ("PolicyPrincipalType", policies::PRINCIPAL_TYPES.to_vec(), both_policies("principal_type")),
        ("PolicyResourceType", policies::RESOURCE_TYPES.to_vec(), both_policies("resource_type")),
        (
            "TagPolicyResourceType",
            policies::TAG_RESOURCE_TYPES.to_vec(),
            vec![Property("CreateTagPolicy", "resource_type"), Property("TagPolicy", "resource_type")],
        ),
        (
            "VersionPolicy",
            limits::VERSION_POLICIES.to_vec(),
            ["CreateJob", "UpdateJob", "Job", "CreateWorkflow", "UpdateWorkflow", "Workflow"]
                .map(|s| Property(s, "version_policy"))
                .into(),
        ),
        ("StepOnFailure", workflow::ON_FAILURE.to_vec(), vec![Property("WorkflowStepRequest", "on_failure")]),
        (
            "CostGateAction",
            workflow::COST_GATE_ACTIONS.to_vec(),
            vec![Property("WorkflowStepRequest", "cost_gate_default_action")],
        ),
        (
            "RetryBackoff",
            RetryStrategy::NAMES.to_vec(),
            vec![Property("TriggerRequest", "retry_backoff"), Property("WorkflowStepRequest", "retry_backoff")],
        ),
        (
            "MachinePreset",
            crate::routes::run_ops::MACHINE_PRESETS.to_vec(),
            vec![Property("RestartRequest", "machine_preset")],
        ),
        (
            "UnfinishedRunStatus",
            RunStatus::ACTIVE.iter().map(|s| s.as_str()).collect(),
            vec![Property("CancelAllRequest", "status")],
        ),
        (
            "EventSourceTargetType",
            crate::routes::events::TARGET_TYPES.to_vec(),
            ["CreateEventSource", "UpdateEventSource", "EventSource"].map(|s| Property(s, "target_type")).into(),
        ),
        (
            "StepOutcome",
            Outcome::ALL.iter().map(|o| o.as_str()).collect(),
            vec![Values("WorkflowSimulateRequest", "outcomes")],
        ),
        (
            "PolicyStepType",
            StepType::ALL.iter().map(|s| s.as_str()).collect(),
            vec![
                Items("WorkflowPolicyBody", "allowed_step_types"),
                Items("WorkflowPolicyBody", "approval_required_before"),
            ],
        ),
        ("AuditOrder", crate::routes::audit::ORDERS.to_vec(), vec![Query("listAuditEvents", "order")]),
    ]
}

/// A property of a resource policy, its create and its update.
fn both_policies(prop: &'static str) -> Vec<Place> {
    ["CreateResourcePolicy", "UpdateResourcePolicy", "ResourcePolicy"].map(|s| Place::Property(s, prop)).into()
}

/// Every value rule of the document (see [`rules`]): the operations'
/// parameters ([`parameter_rules`]), then each module's request bodies,
/// whose rules live beside their types. A later rule overwrites the keys
/// an earlier one wrote at the same place, so keep this order.
fn value_rules() -> Vec<(Place, Value)> {
    use crate::routes::{api_keys, bulk, environments, events, groups, jobs, log_drains, members, policies, projects};
    use crate::routes::{roles, run_ops, sdk, sdk_runs, secrets, webhooks, workflow_plans, workflow_runs, workflows};
    [
        parameter_rules(),
        projects::value_rules(),
        groups::value_rules(),
        environments::value_rules(),
        secrets::value_rules(),
        jobs::value_rules(),
        crate::views::value_rules(),
        crate::views::runs::value_rules(),
        bulk::value_rules(),
        api_keys::value_rules(),
        roles::value_rules(),
        members::value_rules(),
        policies::value_rules(),
        events::value_rules(),
        webhooks::value_rules(),
        log_drains::value_rules(),
        workflows::value_rules(),
        workflow_plans::value_rules(),
        workflow_runs::value_rules(),
        run_ops::value_rules(),
        sdk_runs::value_rules(),
        sdk::value_rules(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The rules of the operations' path and query parameters. They stay here
/// rather than beside a request type: a parameter is declared in a
/// handler's signature, not in a type; a path parameter's rule is one per
/// name, on every operation of every module that takes it; and the list
/// filters share one rule.
fn parameter_rules() -> Vec<(Place, Value)> {
    use crate::routes::{self, members};
    use switchyard_shared::domain::rules::Text as T;
    use switchyard_shared::domain::{run_record as rec, workflow};
    use switchyard_shared::ids::EXTERNAL_ID as ID;
    use Place::*;

    // Free text a filter compares with stored text: any but U+0000.
    let filter = text(&T::stored(0, usize::MAX));
    let mut r: Vec<(Place, Value)> = Vec::new();

    // Ids: in paths and in queries naming a project (a body's are its
    // type's, beside it).
    for name in [
        "run_id",
        "key_id",
        "batch_id",
        "environment_id",
        "event_source_id",
        "event_id",
        "group_id",
        "job_id",
        "log_drain_id",
        "project_id",
        "policy_id",
        "role_id",
        "delivery_id",
        "subscription_id",
        "workflow_run_id",
        "workflow_id",
        "from_version_id",
        "to_version_id",
        "version_id",
    ] {
        r.push((Path(name), text(&ID)));
    }
    r.push((Path("user_id"), text(&members::USER_ID)));
    r.push((Path("key"), text(&rec::STATE_KEY)));
    r.push((Path("name"), text(&switchyard_shared::secrets::NAME)));
    r.push((Path("step_ref"), text(&workflow::STEP_REF)));
    // Every query parameter naming a project (`project_of` checks it).
    r.push((QueryAll("project_id"), text(&ID)));
    // The time range of the audit trail.
    for param in ["from", "to"] {
        r.push((Query("listAuditEvents", param), json!({"format": "date-time", "pattern": routes::audit::RFC3339})));
    }
    // The time range of the runs list.
    for param in ["created_after", "created_before"] {
        r.push((Query("listRuns", param), json!({"format": "date-time", "pattern": routes::audit::RFC3339})));
    }
    // Filters: any text but U+0000 (Postgres compares text with them).
    for (op, param) in [
        ("listAuditEvents", "action"),
        ("listAuditEvents", "resource_type"),
        ("listAuditEvents", "resource_id"),
        ("listAuditEvents", "actor_id"),
        ("listBatchOperations", "job_id"),
        ("listDeadLetterRuns", "job_id"),
        ("listRuns", "job_id"),
        ("listRuns", "batch_id"),
        ("listEvents", "event_key"),
        ("listJobs", "group_id"),
        ("listMembers", "role_id"),
        ("listWorkflowRuns", "workflow_id"),
        ("explainWorkflowRun", "step_ref"),
        ("explainWorkflowRun", "decision_type"),
    ] {
        r.push((Query(op, param), filter.clone()));
    }
    r
}

/// Writes each value rule into its place(s).
fn annotate_value_rules(doc: &mut Value) {
    for (place, rule) in value_rules() {
        let found = targets(doc, &place);
        assert!(!found.is_empty(), "value rule {rule}: no such place in the document ({})", place.describe());
        for target in found {
            let Some(t) = target.as_object_mut() else { continue };
            for (k, v) in rule.as_object().into_iter().flatten() {
                t.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Names each closed set as a component and points its places at it.
fn annotate_closed_sets(doc: &mut Value) {
    for (name, values, places) in closed_sets() {
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        for place in places {
            // A place the document does not have is a table out of date.
            let target = targets(doc, &place);
            assert!(!target.is_empty(), "closed set {name}: no such place in the document");
            for target in target {
                let mut with_ref = reference.clone();
                if let Some(d) = target.get("description") {
                    with_ref["description"] = d.clone();
                }
                *target = with_ref;
            }
        }
        let values: Vec<Value> = values.into_iter().map(Value::from).collect();
        doc["components"]["schemas"][name] = json!({"type": "string", "enum": values});
    }
}

/// The schemas a place names (every path parameter of a name: many).
fn targets<'a>(doc: &'a mut Value, place: &Place) -> Vec<&'a mut Value> {
    let property = |schema: &str, prop: &str| format!("/components/schemas/{schema}/properties/{prop}");
    let one = match place {
        Place::Property(schema, prop) => doc.pointer_mut(&property(schema, prop)),
        Place::Items(schema, prop) => doc.pointer_mut(&format!("{}/items", property(schema, prop))),
        Place::Values(schema, prop) => doc.pointer_mut(&property(schema, prop)).and_then(|p| {
            // A map of a type with no rule of its own says `{}`.
            p.get_mut("additionalProperties").filter(|v| v.is_object())
        }),
        Place::Keys(schema, prop) => doc.pointer_mut(&property(schema, prop)).and_then(|p| {
            let p = p.as_object_mut()?;
            p.contains_key("additionalProperties").then(|| p.entry("propertyNames").or_insert_with(|| json!({})))
        }),
        Place::Query(op, param) => query_parameter(doc, op, param).map(|p| &mut p["schema"]),
        Place::Path(name) | Place::QueryAll(name) => {
            let within = if matches!(place, Place::Path(_)) { "path" } else { "query" };
            let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return vec![] };
            return paths
                .values_mut()
                .filter_map(Value::as_object_mut)
                .flat_map(|item| item.values_mut())
                .filter_map(|op| op.get_mut("parameters").and_then(Value::as_array_mut))
                .flatten()
                .filter(|p| p["in"] == within && p["name"] == *name)
                .map(|p| &mut p["schema"])
                .collect();
        }
    };
    one.into_iter().collect()
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

/// Query parameters whose value is a JSON document: (operation, name).
const JSON_PARAMETERS: [(&str, &str); 1] = [("listRuns", "payload_contains")];

pub fn annotate(doc: &mut Value) {
    annotate_value_rules(doc);
    examples::annotate(doc);
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
        // A parameter whose value is a JSON document says so (OpenAPI's
        // `content` form): the handler parses it, 422 when it is not JSON.
        if p["in"] == "query" && JSON_PARAMETERS.contains(&(operation_id.as_str(), p["name"].as_str().unwrap_or(""))) {
            if let Some(o) = p.as_object_mut() {
                o.remove("schema");
                o.remove("explode");
                o.remove("style");
                o.insert("content".into(), json!({"application/json": {"schema": {}}}));
            }
        }
    }
    if secured {
        let params = op.as_object_mut().map(|o| o.entry("parameters").or_insert_with(|| json!([])));
        if let Some(Value::Array(params)) = params {
            for (name, about, rule) in crate::auth::CALLER_HEADERS {
                let mut schema = rule.schema();
                schema["type"] = json!("string");
                params.push(json!({
                    "name": name, "in": "header", "required": false, "description": about, "schema": schema
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
    fn every_value_rule_has_its_place() {
        // annotate_value_rules panics on a place the document lacks; here,
        // each rule's keywords are in every place it names, as written.
        let mut doc = crate::openapi_value().clone();
        for (place, rule) in super::value_rules() {
            for target in super::targets(&mut doc, &place) {
                for (k, v) in rule.as_object().unwrap() {
                    assert_eq!(target.get(k), Some(v), "{}: {k}", place.describe());
                }
            }
        }
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
