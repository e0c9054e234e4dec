//! A job's `payload_schema`: a JSON Schema every triggered payload must
//! satisfy. The draft is taken from the schema's `$schema` (2020-12 when
//! absent). Remote `$ref`s are never fetched: a schema that needs one is
//! refused when the job is saved.

use serde_json::Value;

use super::field_errors::FieldError;

/// Most violations reported for one payload, so a huge invalid payload
/// cannot produce a huge error document.
pub const MAX_VIOLATIONS: usize = 50;

/// Whether `schema` is a usable JSON Schema; the message says why not.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err("must be a JSON Schema (an object)".into());
    }
    jsonschema::validator_for(schema).map(|_| ()).map_err(|e| format!("not a valid JSON Schema: {e}"))
}

/// Every way `payload` (`null` when absent) violates `schema`, each located
/// at `body.payload<json pointer>`, e.g. `body.payload/user/age`. An
/// unusable schema (impossible for a saved job) is one violation at
/// `body.payload`.
pub fn violations(schema: &Value, payload: &Value) -> Vec<FieldError> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(v) => v,
        Err(e) => {
            return vec![FieldError::new("body.payload", format!("the job's payload_schema is unusable: {e}"), None)]
        }
    };
    validator
        .iter_errors(payload)
        .take(MAX_VIOLATIONS)
        .map(|e| {
            let location = format!("body.payload{}", e.instance_path().as_str());
            FieldError::new(location, e.to_string(), Some(e.instance().clone().into_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_violation_is_located() {
        let schema = json!({
            "type": "object",
            "required": ["email"],
            "properties": {"email": {"type": "string"}, "user": {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}}}
        });
        assert!(violations(&schema, &json!({"email": "a@b.c"})).is_empty());
        let errs = violations(&schema, &json!({"user": {"age": -3}}));
        let locs: Vec<_> = errs.iter().map(|e| e.location.as_str()).collect();
        assert!(locs.contains(&"body.payload"), "missing required email: {locs:?}");
        assert!(locs.contains(&"body.payload/user/age"), "{locs:?}");
        let age = errs.iter().find(|e| e.location.ends_with("/age")).unwrap();
        assert_eq!(age.value, Some(json!(-3)));
        assert_eq!(violations(&schema, &Value::Null).len(), 1, "an absent payload is null");
    }

    #[test]
    fn bad_schemas_are_refused() {
        assert!(check_schema(&json!({"type": "object"})).is_ok());
        assert!(check_schema(&json!({"type": "nonsense"})).is_err());
        assert!(check_schema(&json!({"pattern": "(unclosed"})).is_err());
        assert!(check_schema(&json!({"$ref": "https://example.com/schema.json"})).is_err(), "no remote refs");
        assert!(check_schema(&json!(5)).is_err());
    }
}
