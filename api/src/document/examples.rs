//! A real example of every request body, shown by /docs and used by
//! schemathesis's `examples` phase. They live in one reviewed table,
//! `api/src/request_examples.json` (operationId → the body a user would
//! send), and each is written here into its operation's request body media
//! types as `example`. The tests hold the table to the document: every
//! operation with a body has an example, every example names such an
//! operation, and every example is valid against its body's schema (JSON
//! Schema draft 2020-12) and accepted by `strict_json::check_body`.

use serde_json::{Map, Value};

/// The table, as committed.
const TABLE: &str = include_str!("../request_examples.json");

/// operationId → example body.
pub(crate) fn table() -> Map<String, Value> {
    serde_json::from_str(TABLE).expect("api/src/request_examples.json is a JSON object")
}

/// Writes each operation's example into its request body's media types.
pub(crate) fn annotate(doc: &mut Value) {
    let examples = table();
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for op in item.values_mut() {
            let Some(example) = op.get("operationId").and_then(Value::as_str).and_then(|id| examples.get(id)) else {
                continue;
            };
            let example = example.clone();
            for media in op.pointer_mut("/requestBody/content").and_then(Value::as_object_mut).into_iter().flatten() {
                if let Some(media) = media.1.as_object_mut() {
                    media.insert("example".into(), example.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map, Value};

    /// (operationId, the body's schema, its example as served) of every
    /// operation with a request body, from the served document.
    fn bodies() -> Vec<(String, Value, Option<Value>)> {
        let doc = crate::openapi_value();
        let mut out = Vec::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                let Some(content) = op.pointer("/requestBody/content").and_then(Value::as_object) else { continue };
                assert!(!content.is_empty(), "{}", op["operationId"]);
                for media in content.values() {
                    let id = op["operationId"].as_str().unwrap().to_string();
                    out.push((id, media["schema"].clone(), media.get("example").cloned()));
                }
            }
        }
        assert!(out.len() >= 54, "{}", out.len());
        out
    }

    fn components() -> &'static Map<String, Value> {
        crate::openapi_value()["components"].as_object().unwrap()
    }

    /// The component schemas, by name: what `strict_json::check_body`
    /// resolves a `$ref` in, as the server's body check passes them.
    fn schemas() -> &'static Map<String, Value> {
        crate::openapi_value()["components"]["schemas"].as_object().unwrap()
    }

    /// The body schema as a standalone draft 2020-12 schema whose `$ref`s
    /// resolve into the document's components.
    fn validator(schema: &Value) -> jsonschema::Validator {
        let mut root = schema.as_object().unwrap().clone();
        root.insert("$schema".into(), json!("https://json-schema.org/draft/2020-12/schema"));
        root.insert("components".into(), Value::Object(components().clone()));
        jsonschema::draft202012::options()
            .should_validate_formats(true)
            .build(&Value::Object(root))
            .unwrap_or_else(|e| panic!("{schema}: {e}"))
    }

    fn errors(schema: &Value, example: &Value) -> Vec<String> {
        validator(schema).iter_errors(example).map(|e| format!("{}: {e}", e.instance_path())).collect()
    }

    #[test]
    fn every_request_body_has_an_example_and_every_example_an_operation() {
        let bodies = bodies();
        let missing: Vec<&str> = bodies.iter().filter(|b| b.2.is_none()).map(|b| b.0.as_str()).collect();
        assert!(missing.is_empty(), "no example in api/src/request_examples.json for {missing:?}");
        let stale: Vec<String> =
            super::table().keys().filter(|id| !bodies.iter().any(|b| &b.0 == *id)).cloned().collect();
        assert!(stale.is_empty(), "api/src/request_examples.json names no operation with a body: {stale:?}");
        for (id, _, example) in &bodies {
            assert_eq!(example.as_ref(), super::table().get(id), "{id}: served as in the table");
        }
    }

    #[test]
    fn every_example_is_valid_against_its_schema() {
        let mut failures = Vec::new();
        for (id, schema, example) in bodies() {
            let example = example.unwrap_or_else(|| panic!("{id}: no example"));
            failures.extend(errors(&schema, &example).into_iter().map(|e| format!("{id} {e}")));
            if let Err(refused) = crate::strict_json::check_body(schemas(), &schema, &example) {
                failures.push(format!("{id}: strict_json refuses it: {}", refused.detail));
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    /// The check above is not vacuous: the validator refuses an example
    /// with a wrong type, an out-of-range value, an unknown property, a
    /// value outside a closed set, or a missing required property, and
    /// `check_body` a wrong type or an unknown property.
    #[test]
    fn a_wrong_example_is_refused() {
        let (_, schema, example) = bodies().into_iter().find(|b| b.0 == "createJob").unwrap();
        let example = example.unwrap();
        assert!(errors(&schema, &example).is_empty());
        for (key, value) in [
            ("timeout_secs", json!("60")),
            ("timeout_secs", json!(0)),
            ("no_such_field", json!(1)),
            ("retry_strategy", json!("sometimes")),
            ("tags", json!({"team": 5})),
        ] {
            let mut wrong = example.clone();
            wrong[key] = value.clone();
            assert!(!errors(&schema, &wrong).is_empty(), "{key}: {value} was accepted");
        }
        let mut wrong = example.clone();
        wrong.as_object_mut().unwrap().remove("endpoint_url");
        assert!(!errors(&schema, &wrong).is_empty(), "a missing endpoint_url was accepted");
        // The strict body check refuses the shape errors too (400).
        for (key, value) in [("timeout_secs", json!("60")), ("no_such_field", json!(1))] {
            let mut wrong = example.clone();
            wrong[key] = value.clone();
            assert!(crate::strict_json::check_body(schemas(), &schema, &wrong).is_err(), "{key}: {value}");
        }
    }
}
