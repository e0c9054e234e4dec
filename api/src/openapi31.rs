//! poem-openapi writes OpenAPI 3.0; the document Switchyard serves and
//! commits is OpenAPI 3.1.0. The two differ, for the schemas we emit, only
//! in how a nullable value is said: 3.0's `nullable: true` becomes a
//! `"null"` member of `type` (or an `anyOf` with `{"type": "null"}` around a
//! reference). This rewrite is applied to the generated document before it
//! is served or committed.

use serde_json::{json, Map, Value};

pub fn convert(mut doc: Value) -> Value {
    if let Some(o) = doc.as_object_mut() {
        o.insert("openapi".into(), json!("3.1.0"));
        o.insert("jsonSchemaDialect".into(), json!("https://spec.openapis.org/oas/3.1/dialect/base"));
    }
    rewrite(&mut doc);
    doc
}

fn rewrite(v: &mut Value) {
    match v {
        Value::Object(o) => {
            for child in o.values_mut() {
                rewrite(child);
            }
            if o.remove("nullable") == Some(Value::Bool(true)) {
                make_nullable(o);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(rewrite),
        _ => {}
    }
}

fn make_nullable(o: &mut Map<String, Value>) {
    match o.get_mut("type") {
        Some(Value::String(t)) => {
            let t = t.clone();
            o.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(ts)) => {
            if !ts.contains(&json!("null")) {
                ts.push(json!("null"));
            }
        }
        _ => {
            let inner = Value::Object(std::mem::take(o));
            o.insert("anyOf".into(), json!([inner, {"type": "null"}]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nullable_becomes_a_null_type() {
        let doc = json!({"openapi": "3.0.0", "components": {"schemas": {"A": {"properties": {
            "s": {"type": "string", "nullable": true},
            "r": {"$ref": "#/components/schemas/B", "nullable": true},
            "n": {"type": "integer"}
        }}}}});
        let out = convert(doc);
        assert_eq!(out["openapi"], "3.1.0");
        let p = &out["components"]["schemas"]["A"]["properties"];
        assert_eq!(p["s"], json!({"type": ["string", "null"]}));
        assert_eq!(p["r"], json!({"anyOf": [{"$ref": "#/components/schemas/B"}, {"type": "null"}]}));
        assert_eq!(p["n"], json!({"type": "integer"}));
    }
}
