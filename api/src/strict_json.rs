//! Request bodies are read strictly, against the schema the served document
//! states for them (`crate::openapi_value`): the document is the one source
//! of the rules, and this is their check. poem-openapi's own `Json` is
//! lenient where the contract is not: it reads `{"name": 5}` as the string
//! `"5"`, and `null` for a field that is not nullable as absent.
//!
//! [`JsonBody`] is `Json` with the check in front. A body that breaks the
//! document's shape (a value of the wrong type, `null` where the schema
//! does not allow it, a missing required property, an unknown property of
//! a closed object) is 400, with every failure in `errors[]`, located as
//! `body.<path>`. A well-formed value outside a stated rule (an enum, a
//! minimum or maximum, a length) is found here too, but answered (422) by
//! the checks after this one, which read the same sources (see
//! `check_body`).

use std::ops::{Deref, DerefMut};

use poem::http::StatusCode;
use poem::{FromRequest, Request, RequestBody};
use poem_openapi::error::ParseRequestPayloadError;
use poem_openapi::payload::{Json, ParsePayload, Payload};
use poem_openapi::registry::MetaRequest;
use poem_openapi::registry::{MetaSchemaRef, Registry};
use poem_openapi::types::{ParseFromJSON, Type};
use poem_openapi::{ApiExtractor, ApiExtractorType, ExtractParamOptions};
use serde_json::{Map, Value};
use switchyard_shared::domain::{child, FieldError};

/// A JSON request body, checked against its documented schema before it is
/// parsed (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct JsonBody<T>(pub T);

impl<T> Deref for JsonBody<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for JsonBody<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T: Type> Payload for JsonBody<T> {
    const CONTENT_TYPE: &'static str = <Json<T> as Payload>::CONTENT_TYPE;

    fn check_content_type(content_type: &str) -> bool {
        <Json<T> as Payload>::check_content_type(content_type)
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: ParseFromJSON> ParsePayload for JsonBody<T> {
    const IS_REQUIRED: bool = T::IS_REQUIRED;

    async fn from_request(request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        let data = <Vec<u8> as FromRequest>::from_request(request, body).await?;
        let mut value = if data.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&data).map_err(|err| ParseRequestPayloadError { reason: err.to_string() })?
        };
        // An optional body that is not sent reads as absent; one sent as
        // `null` is checked like any other (the document does not say null).
        if !data.is_empty() || T::IS_REQUIRED {
            let schema = serde_json::to_value(T::schema_ref()).unwrap_or(Value::Null);
            static NONE: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
            let components = crate::openapi_value()["components"]["schemas"].as_object().unwrap_or(&NONE);
            check_body(components, &schema, &value)?;
            integers_as_integers(components, &schema, &mut value);
        }
        let value =
            T::parse_from_json(Some(value)).map_err(|err| ParseRequestPayloadError { reason: err.into_message() })?;
        Ok(JsonBody(value))
    }
}

poem_openapi::impl_apirequest_for_payload!(JsonBody<T>, T: ParseFromJSON);

/// A JSON body the client may leave out: a request that sends none (no
/// Content-Type, no length) reads as `None`, so `curl -X POST .../plan`
/// needs no `-d '{}'`. A body that is sent is read as `JsonBody` reads it.
pub struct OptionalBody<T>(pub Option<T>);

impl<'a, T: ParseFromJSON + Send> ApiExtractor<'a> for OptionalBody<T> {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        <JsonBody<Option<T>> as ApiExtractor>::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        <JsonBody<Option<T>> as ApiExtractor>::request_meta()
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        opts: ExtractParamOptions<Self::ParamType>,
    ) -> poem::Result<Self> {
        let no_length = request.header("content-length").is_none_or(|l| l.trim() == "0");
        if request.content_type().is_none() && no_length {
            return Ok(OptionalBody(None));
        }
        let JsonBody(v) = <JsonBody<Option<T>> as ApiExtractor>::from_request(request, body, opts).await?;
        Ok(OptionalBody(v))
    }
}

/// A body refused by its schema: 400 for its shape, 422 for its values.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub struct BodyRefused {
    pub status: u16,
    pub detail: String,
    pub errors: Vec<FieldError>,
}

impl poem::error::ResponseError for BodyRefused {
    fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST)
    }
}

/// Whether a failure is of the request's shape (400) or of a value (422).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Shape,
    Value,
}

/// `value` against `schema` (whose `$ref`s name `components`): `Ok`, or
/// the refusal listing every failure of its shape (400).
pub fn check_body(components: &Map<String, Value>, schema: &Value, value: &Value) -> Result<(), BodyRefused> {
    let mut found = Vec::new();
    check(components, schema, value, "body", &mut found);
    // A value outside a stated rule is left to the checks after this one,
    // which read the same sources: poem-openapi's validators (bounds,
    // lengths) and the handlers' parses of the domain's closed sets
    // (`document::closed_sets`). The handlers report every invalid value
    // of a request together (422), which a refusal here would cut short.
    let errors: Vec<FieldError> = found.into_iter().filter(|(c, _)| *c == Class::Shape).map(|(_, e)| e).collect();
    let status = 400;
    let detail = match errors.as_slice() {
        [] => return Ok(()),
        [one] => format!("{}: {}", one.location, one.message),
        many => format!("{} invalid values", many.len()),
    };
    Err(BodyRefused { status, detail, errors })
}

fn resolve<'a>(components: &'a Map<String, Value>, mut schema: &'a Value) -> &'a Value {
    // A chain of references ends (poem-openapi names each schema once);
    // the bound keeps a broken document from looping.
    for _ in 0..16 {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => schema = components.get(r.rsplit('/').next().unwrap_or_default()).unwrap_or(&Value::Null),
            None => break,
        }
    }
    schema
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_type(v: &Value, ty: &str) -> bool {
    match ty {
        "number" => v.is_number(),
        "integer" => json_type(v) == "integer" || integral(v).is_some(),
        other => json_type(v) == other,
    }
}

/// A number with a zero fractional part written as a float (`449.0`,
/// `1e3`): an integer to JSON Schema (2020-12, section 6.1.1), as `449`.
fn integral(v: &Value) -> Option<i64> {
    let f = v.as_f64().filter(|_| v.is_f64())?;
    (f.fract() == 0.0 && f.abs() < 9.2e18).then_some(f as i64)
}

/// `value` with every integer the schema states written as a float
/// (`integral`) rewritten as the integer it is, so that the parse after
/// the check reads it as one. Nothing else changes: a client's own JSON
/// (a payload, metadata) keeps its numbers as they were sent.
fn integers_as_integers(components: &Map<String, Value>, schema: &Value, v: &mut Value) {
    let schema = resolve(components, schema);
    let Some(s) = schema.as_object() else { return };
    for key in ["allOf", "anyOf"] {
        for sub in s.get(key).and_then(Value::as_array).into_iter().flatten() {
            integers_as_integers(components, sub, v);
        }
    }
    let integer = match s.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer") && !ts.iter().any(|t| t == "number"),
        _ => false,
    };
    if integer {
        if let Some(n) = integral(v) {
            *v = Value::from(n);
        }
    }
    match v {
        Value::Array(items) => {
            if let Some(item) = s.get("items") {
                for x in items {
                    integers_as_integers(components, item, x);
                }
            }
        }
        Value::Object(obj) => {
            let props = s.get("properties").and_then(Value::as_object);
            for (k, x) in obj.iter_mut() {
                if let Some(p) =
                    props.and_then(|p| p.get(k)).or(s.get("additionalProperties").filter(|e| e.is_object()))
                {
                    integers_as_integers(components, p, x);
                }
            }
        }
        _ => {}
    }
}

/// The message for a count `n` outside `min..=max` ("must {verb} 1 to 5
/// {unit}", "must {verb} at least 1 {unit}", ...), or `None` inside.
fn count_outside(n: u64, min: Option<u64>, max: Option<u64>, verb: &str, unit: &str) -> Option<String> {
    if !(min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m)) {
        return None;
    }
    Some(match (min, max) {
        (Some(a), Some(b)) => format!("must {verb} {a} to {b} {unit}"),
        (Some(a), None) => format!("must {verb} at least {a} {unit}"),
        (_, Some(b)) => format!("must {verb} at most {b} {unit}"),
        (None, None) => unreachable!("outside no bound"),
    })
}

/// 1000.0 as `1000`, 0.5 as `0.5`.
fn num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

fn check(components: &Map<String, Value>, schema: &Value, v: &Value, at: &str, out: &mut Vec<(Class, FieldError)>) {
    let schema = resolve(components, schema);
    let Some(s) = schema.as_object() else { return };
    let mut fail =
        |class, message: String, value: Option<Value>| out.push((class, FieldError::new(at, message, value)));

    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        for sub in all {
            check(components, sub, v, at, out);
        }
        return;
    }
    if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
        let mut first = None;
        for sub in any {
            let mut found = Vec::new();
            check(components, sub, v, at, &mut found);
            if found.is_empty() {
                return;
            }
            // The alternative that is not just `null` explains best.
            let only_null = resolve(components, sub).get("type") == Some(&Value::from("null"));
            if first.is_none() && !only_null {
                first = Some(found);
            }
        }
        out.extend(first.unwrap_or_default());
        return;
    }

    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if v.is_null() {
        if !types.is_empty() && !types.contains(&"null") {
            fail(Class::Shape, "must not be null".into(), None);
        }
        return;
    }
    if !types.is_empty() && !types.iter().any(|t| is_type(v, t)) {
        let want = types.iter().filter(|t| **t != "null").copied().collect::<Vec<_>>().join(" or ");
        fail(Class::Shape, format!("expected {want}, got {}", json_type(v)), Some(v.clone()));
        return;
    }

    if let Some(allowed) = s.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            let list = allowed.iter().map(|a| a.as_str().map(str::to_string).unwrap_or(a.to_string()));
            fail(Class::Value, format!("must be one of: {}", list.collect::<Vec<_>>().join(", ")), Some(v.clone()));
        }
    }
    if let Some(n) = v.as_f64() {
        let min = s.get("minimum").and_then(Value::as_f64);
        let max = s.get("maximum").and_then(Value::as_f64);
        if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
            let message = match (min, max) {
                (Some(a), Some(b)) => format!("must be between {} and {}", num(a), num(b)),
                (Some(a), None) => format!("must be at least {}", num(a)),
                (_, Some(b)) => format!("must be at most {}", num(b)),
                (None, None) => unreachable!(),
            };
            fail(Class::Value, message, Some(v.clone()));
        }
    }
    if let Some(text) = v.as_str() {
        let len = text.chars().count() as u64;
        let min = s.get("minLength").and_then(Value::as_u64);
        let max = s.get("maxLength").and_then(Value::as_u64);
        if let Some(message) = count_outside(len, min, max, "be", "characters") {
            // A long text is not echoed back.
            let echo = (len <= 200).then(|| v.clone());
            fail(Class::Value, message, echo);
        }
    }
    if let Some(items) = v.as_array() {
        let n = items.len() as u64;
        let min = s.get("minItems").and_then(Value::as_u64);
        let max = s.get("maxItems").and_then(Value::as_u64);
        if let Some(message) = count_outside(n, min, max, "hold", "items") {
            fail(Class::Value, message, None);
        }
        if let Some(item) = s.get("items") {
            for (i, x) in items.iter().enumerate() {
                check(components, item, x, &child(at, i), out);
            }
        }
    }
    if let Some(obj) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        let extra = s.get("additionalProperties");
        for (k, x) in obj {
            let place = child(at, k);
            match (props.and_then(|p| p.get(k)), extra) {
                (Some(p), _) => check(components, p, x, &place, out),
                (None, Some(Value::Bool(false))) => {
                    let known = props.into_iter().flat_map(|p| p.keys());
                    let message = match nearest(k, known) {
                        Some(near) => format!("unknown property; did you mean `{near}`?"),
                        None => "unknown property".to_string(),
                    };
                    out.push((Class::Shape, FieldError::new(place, message, None)))
                }
                (None, Some(extra)) if extra.is_object() => check(components, extra, x, &place, out),
                (None, _) => {}
            }
        }
        // A required property of any type (a JSON value of the client's)
        // is left to the operation: it says which values it takes (most
        // refuse null, with a 422).
        let typed = |r: &str| {
            let p = props.and_then(|p| p.get(r)).map(|p| resolve(components, p));
            p.is_none_or(|p| p.get("type").is_some() || p.get("$ref").is_some())
        };
        for r in s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !obj.contains_key(r) && typed(r) {
                out.push((Class::Shape, FieldError::new(child(at, r), "is required", None)));
            }
        }
    }
}

/// The known property an unknown `name` most likely meant: one that
/// extends it by a word (`type` for `step_type`, `url` for
/// `endpoint_url`), or one a typo or two away (`cron_expresion`). Only a
/// single best candidate is named; a tie names none.
fn nearest<'a>(name: &str, known: impl Iterator<Item = &'a String>) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    let mut best: Option<(usize, &str)> = None;
    let mut tied = false;
    for k in known {
        let by_word = k.ends_with(&format!("_{name}")) || k.starts_with(&format!("{name}_"));
        let cost = if k.eq_ignore_ascii_case(&name) {
            0
        } else if by_word {
            1
        } else {
            edit_distance(&name, k)
        };
        // Short names are a typo away from too much to guess at.
        let bound = if name.len() < 4 { 1 } else { 2 };
        if cost > bound {
            continue;
        }
        match best {
            Some((c, _)) if c < cost => {}
            Some((c, _)) if c == cost => tied = true,
            _ => {
                best = Some((cost, k));
                tied = false;
            }
        }
    }
    best.filter(|_| !tied).map(|(_, k)| k)
}

/// Levenshtein distance over bytes (property names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refusal(schema: Value, v: Value) -> (u16, Vec<(String, String)>) {
        let components = json!({
            "Inner": {"type": "object", "additionalProperties": false, "required": ["n"],
                      "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 100}}}
        });
        match check_body(components.as_object().unwrap(), &schema, &v) {
            Ok(()) => (0, Vec::new()),
            Err(r) => (r.status, r.errors.into_iter().map(|e| (e.location, e.message)).collect()),
        }
    }

    fn object() -> Value {
        json!({"type": "object", "additionalProperties": false, "required": ["name", "any"], "properties": {
            "name": {"type": "string", "maxLength": 5},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "flag": {"type": "boolean"},
            "clear": {"type": ["string", "null"]},
            "inner": {"$ref": "#/components/schemas/Inner"},
            "maybe": {"anyOf": [{"$ref": "#/components/schemas/Inner"}, {"type": "null"}]},
            "list": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}},
            "any": {}
        }})
    }

    #[test]
    fn an_integer_written_as_a_float_is_an_integer() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "m": {"type": ["integer", "null"]}, "x": {"type": "number"}, "any": {}}});
        let mut v = json!({"n": 449.0, "m": 1e3, "x": 2.0, "any": 3.0});
        assert!(check_body(&Map::new(), &schema, &v).is_ok());
        integers_as_integers(&Map::new(), &schema, &mut v);
        assert_eq!(v, json!({"n": 449, "m": 1000, "x": 2.0, "any": 3.0}));
        assert!(v["n"].is_i64() && v["m"].is_i64() && v["x"].is_f64() && v["any"].is_f64());
        assert_eq!(refusal(schema, json!({"n": 0.5})).0, 400);
    }

    #[test]
    fn a_well_formed_body_passes() {
        let v = json!({"name": "ab", "mode": "a", "flag": true, "clear": null, "inner": {"n": 3}, "maybe": null,
                       "list": ["x"], "map": {"k": 1}, "any": [1, "x", null]});
        assert_eq!(refusal(object(), v), (0, vec![]));
    }

    #[test]
    fn a_wrong_type_null_missing_or_unknown_property_is_400() {
        let at = |loc: &str, msg: &str| (loc.to_string(), msg.to_string());
        assert_eq!(refusal(object(), json!({"name": 5})), (400, vec![at("body.name", "expected string, got integer")]));
        assert_eq!(refusal(object(), json!({"name": "a", "flag": "true"})).0, 400);
        assert_eq!(refusal(object(), json!({"name": null})), (400, vec![at("body.name", "must not be null")]));
        assert_eq!(refusal(object(), json!({})), (400, vec![at("body.name", "is required")]));
        assert_eq!(
            refusal(object(), json!({"name": "a", "colour": 1})),
            (400, vec![at("body.colour", "unknown property")])
        );
        let nested = refusal(object(), json!({"name": "a", "inner": {"n": "1"}, "maybe": {"x": 1}, "map": {"k": "v"}}));
        let at_: Vec<_> = nested.1.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(nested.0, 400);
        assert_eq!(at_, ["body.inner/n", "body.map/k", "body.maybe/x", "body.maybe/n"]);
        assert_eq!(refusal(json!({"type": "object"}), json!([1])).0, 400);
        let listed = refusal(object(), json!({"name": "a", "list": ["x", 2]}));
        assert_eq!(listed, (400, vec![at("body.list/1", "expected string, got integer")]));
    }

    #[test]
    fn an_unknown_property_names_the_one_it_likely_meant() {
        let at = |loc: &str, msg: &str| (loc.to_string(), msg.to_string());
        assert_eq!(
            refusal(object(), json!({"name": "a", "flg": true})),
            (400, vec![at("body.flg", "unknown property; did you mean `flag`?")])
        );
        let known: Vec<String> =
            ["step_type", "step_ref", "job_id", "endpoint_url", "cron_expression"].map(String::from).into();
        assert_eq!(nearest("type", known.iter()), Some("step_type"));
        assert_eq!(nearest("url", known.iter()), Some("endpoint_url"));
        assert_eq!(nearest("cron_expresion", known.iter()), Some("cron_expression"));
        assert_eq!(nearest("Job_Id", known.iter()), Some("job_id"));
        // Both step_type and step_ref extend `step`: no guess.
        assert_eq!(nearest("step", known.iter()), None);
        assert_eq!(nearest("colour", known.iter()), None);
    }

    #[test]
    fn a_value_outside_a_rule_is_found_and_left_to_the_later_checks() {
        let v = json!({"name": "abcdef", "mode": "c", "inner": {"n": 0}, "list": ["a", "b", "c"]});
        assert_eq!(refusal(object(), v.clone()), (0, vec![]));
        let components = json!({"Inner": {"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 100}
        }}});
        let mut found = Vec::new();
        check(components.as_object().unwrap(), &object(), &v, "body", &mut found);
        assert!(found.iter().all(|(c, _)| *c == Class::Value));
        let msgs: Vec<_> = found.into_iter().map(|(_, e)| format!("{}: {}", e.location, e.message)).collect();
        assert_eq!(
            msgs,
            [
                "body.inner/n: must be between 1 and 100",
                "body.list: must hold at most 2 items",
                "body.mode: must be one of: a, b",
                "body.name: must be at most 5 characters",
            ]
        );
        assert_eq!(refusal(object(), json!({"name": "abcdef", "flag": 1})).0, 400);
    }
}
