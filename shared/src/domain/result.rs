//! What a run's result, error and SDK records may hold, whichever process
//! writes them: a result's largest size, and text Postgres can store.

use serde_json::Value;

/// Largest run result, in bytes: of a dispatch's 2xx body (larger is
/// `response_too_large`), and of the serialized result of an SDK `complete`.
pub const MAX_RESULT_BYTES: usize = 8 * 1024 * 1024;

/// Postgres text and jsonb cannot hold U+0000, which JSON and raw bodies
/// can; one would make the outcome unrecordable, so it becomes U+FFFD.
pub fn scrub(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(scrub_str(s)),
        Value::Array(a) => Value::Array(a.into_iter().map(scrub).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (scrub_str(k), scrub(v))).collect()),
        other => other,
    }
}

/// [`scrub`] for one string.
pub fn scrub_str(s: String) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{fffd}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nul_becomes_the_replacement_character_in_keys_and_values() {
        assert_eq!(scrub_str("a\0b\0".into()), "a\u{fffd}b\u{fffd}");
        assert_eq!(scrub_str("plain".into()), "plain");
        assert_eq!(
            scrub(json!({"k\u{0}": ["x\u{0}", 1, null, {"n": "\u{0}"}], "ok": true})),
            json!({"k\u{fffd}": ["x\u{fffd}", 1, null, {"n": "\u{fffd}"}], "ok": true})
        );
    }
}
