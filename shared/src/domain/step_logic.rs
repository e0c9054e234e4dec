//! The two expressions a workflow step may carry, evaluated: `condition`
//! (JSONLogic, decides whether the step runs) and `output_transform`
//! (JMESPath, shapes the output later steps see). The checks at save are in
//! [`super::workflow`]; here they meet real data, so a failure is a fact
//! about one run (reported on its step), never a panic.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Value};

use super::expression_budget;

/// What one step looks like to the conditions of the steps after it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepFacts {
    pub status: String,
    pub output: Value,
}

/// The data a condition is evaluated over: `{payload, steps: {ref: {status,
/// output}}}`. Every step of the run is there, those not ended with their
/// current status and a null output, so a condition can test
/// `{"==": [{"var": "steps.a.status"}, "skipped"]}` whatever happened.
pub fn condition_input(payload: &Value, steps: &BTreeMap<String, StepFacts>) -> Value {
    json!({ "payload": payload, "steps": steps })
}

/// Whether `condition` holds over `input` ([`condition_input`]). JSONLogic's
/// truthiness decides: `false`, `null`, `0`, `""` and `[]` are false.
/// An expression over its budget ([`expression_budget`]) is refused before
/// it is evaluated, with an error that starts with its error class.
pub fn condition_holds(condition: &Value, input: &Value) -> Result<bool, String> {
    expression_budget::condition_budget(condition, input)?;
    let out = datalogic_rs::eval_str(condition.to_string().as_str(), input.to_string().as_str())
        .map_err(|e| format!("the condition failed to evaluate: {e}"))?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("the condition gave no JSON value: {e}"))?;
    Ok(truthy(&v))
}

/// The error_class of a step's error, where it has one: an expression
/// refused by its budget says so first.
pub fn error_class_of(error: &str) -> Option<&'static str> {
    error.starts_with(expression_budget::ERROR_CLASS).then_some(expression_budget::ERROR_CLASS)
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(_) => true,
    }
}

/// The output a step shows after its `output_transform` (JMESPath) is
/// applied to what it produced, within its budget.
pub fn transform_output(expression: &str, output: &Value) -> Result<Value, String> {
    expression_budget::check_transform_text(expression)
        .map_err(|e| format!("{}: {e}", expression_budget::ERROR_CLASS))?;
    let expr = jmespath::compile(expression).map_err(|e| format!("the output_transform does not compile: {e}"))?;
    expression_budget::transform_budget(&expr, expression_budget::json_size(output))?;
    let data = jmespath::Variable::from_serializable(output).map_err(|e| format!("the output is not JSON: {e}"))?;
    let found = expr.search(data).map_err(|e| format!("the output_transform failed: {e}"))?;
    serde_json::to_value(&*found).map_err(|e| format!("the transformed output is not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(status: &str, output: Value) -> StepFacts {
        StepFacts { status: status.into(), output }
    }

    #[test]
    fn conditions_see_the_payload_and_earlier_steps() {
        let mut steps = BTreeMap::new();
        steps.insert("a".to_string(), facts("completed", json!({"n": 3})));
        let input = condition_input(&json!({"tier": "gold"}), &steps);
        let holds = |c: Value| condition_holds(&c, &input).unwrap();
        assert!(holds(json!({"==": [{"var": "payload.tier"}, "gold"]})));
        assert!(!holds(json!({"==": [{"var": "payload.tier"}, "silver"]})));
        assert!(holds(json!({">": [{"var": "steps.a.output.n"}, 2]})));
        assert!(holds(json!({"==": [{"var": "steps.a.status"}, "completed"]})));
        assert!(!holds(json!({"var": "steps.missing.output"})), "an absent value is null, so false");
        assert!(!holds(json!({"var": "payload.none"})));
        assert!(holds(json!(true)));
    }

    #[test]
    fn truthiness_is_jsonlogics() {
        for (v, t) in [
            (json!(0), false),
            (json!(""), false),
            (json!([]), false),
            (json!(null), false),
            (json!("0"), true),
            (json!([0]), true),
            (json!({}), true),
        ] {
            assert_eq!(truthy(&v), t, "{v}");
        }
    }

    #[test]
    fn output_transforms_shape_the_output() {
        let out = json!({"user": {"id": 7, "tags": ["a", "b"]}, "noise": 1});
        assert_eq!(transform_output("user.id", &out).unwrap(), json!(7));
        assert_eq!(transform_output("{id: user.id, n: length(user.tags)}", &out).unwrap(), json!({"id": 7, "n": 2}));
        assert_eq!(transform_output("missing", &out).unwrap(), json!(null));
        assert!(transform_output("length(noise)", &out).is_err(), "a type error is reported, not a panic");
    }
}
