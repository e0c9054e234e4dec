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

pub fn annotate(doc: &mut Value) {
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
