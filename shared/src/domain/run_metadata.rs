//! A change to a run's metadata: string values set keys, `null` removes
//! them, keys not named keep their value. Keys are 1 to 128 characters and
//! values at most 1024, neither holding NUL (Postgres text and jsonb cannot
//! store U+0000); a run holds at most [`MAX_KEYS`] keys after the change.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::limits::{MAP_KEY, MAP_VALUE};
use super::{FieldError, FieldErrors};

/// Metadata keys a run may hold.
pub const MAX_KEYS: i64 = 64;

/// A valid change: the keys to set and the keys to remove.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetadataChange {
    pub set: Map<String, Value>,
    pub remove: Vec<String>,
}

/// Splits a requested change into keys set and removed, or every invalid
/// entry (located at `body.metadata.<key>`).
pub fn change(requested: HashMap<String, Value>) -> Result<MetadataChange, Vec<FieldError>> {
    let mut out = MetadataChange::default();
    let mut errors = FieldErrors::new();
    for (k, v) in requested {
        let loc = super::child("body.metadata", &k);
        if !MAP_KEY.ok(&k) {
            errors.push(loc, "keys are 1 to 128 characters, without NUL", Some(k.into()));
            continue;
        }
        match v {
            Value::Null => out.remove.push(k),
            Value::String(s) if MAP_VALUE.ok(&s) => {
                out.set.insert(k, Value::String(s));
            }
            Value::String(s) => errors.push(loc, "values are at most 1024 characters, without NUL", Some(s.into())),
            other => errors.push(loc, "must be a string, or null to remove the key", Some(other)),
        }
    }
    errors.finish().map(|()| out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn req(v: Value) -> HashMap<String, Value> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn strings_set_and_nulls_remove() {
        let got = change(req(json!({"a": "1", "b": null}))).unwrap();
        assert_eq!(got.set, json!({"a": "1"}).as_object().unwrap().clone());
        assert_eq!(got.remove, ["b"]);
    }

    #[test]
    fn refuses_bad_keys_values_and_types_each_located() {
        let long = "k".repeat(129);
        let errs = change(req(json!({
            long.clone(): "x", "nul": "a\u{0}b", "big": "v".repeat(1025), "n": 5, "ok": "fine"
        })))
        .unwrap_err();
        let mut got: Vec<(String, String)> = errs.into_iter().map(|e| (e.location, e.message)).collect();
        got.sort();
        let mut want = vec![
            (format!("body.metadata/{long}"), "keys are 1 to 128 characters, without NUL".to_string()),
            ("body.metadata/nul".into(), "values are at most 1024 characters, without NUL".into()),
            ("body.metadata/big".into(), "values are at most 1024 characters, without NUL".into()),
            ("body.metadata/n".into(), "must be a string, or null to remove the key".into()),
        ];
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn an_empty_key_is_refused() {
        let errs = change(req(json!({"": "x"}))).unwrap_err();
        assert_eq!(errs[0].location, "body.metadata/");
    }
}
