//! The rules for what a run's target may record over the SDK: log levels,
//! state keys, and the size of texts and JSON values. Each check adds its
//! failure to a [`FieldErrors`] at the location it is given.

use serde_json::Value;

use super::FieldErrors;

/// The levels of a log line.
pub const LOG_LEVELS: [&str; 4] = ["debug", "info", "warn", "error"];
/// Serialized size of one state value, output or tool call input/output.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;

/// A state key: 1 to 128 of `A-Z a-z 0-9 _ - . :`.
pub fn is_valid_state_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 128
        && k.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// The size of `v` as JSON, in bytes.
pub fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX)
}

/// Records a value larger than [`MAX_VALUE_BYTES`] of JSON.
pub fn check_value_size(errors: &mut FieldErrors, location: &str, v: &Value) {
    errors.check(json_len(v) <= MAX_VALUE_BYTES, location, format!("at most {MAX_VALUE_BYTES} bytes of JSON"), None);
}

/// Records a text longer than `max` bytes, or blank when `required`.
pub fn check_text(errors: &mut FieldErrors, location: &str, v: &str, max: usize, required: bool) {
    if (required && v.trim().is_empty()) || v.len() > max {
        let message = if required { format!("1 to {max} characters") } else { format!("at most {max} characters") };
        errors.push(location, message, None);
    }
}

/// Records a negative amount.
pub fn check_not_negative(errors: &mut FieldErrors, location: &str, n: Option<i64>) {
    if let Some(n) = n.filter(|n| *n < 0) {
        errors.push(location, "must be at least 0", Some(n.into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_keys() {
        assert!(is_valid_state_key("a-b_c.d:1"));
        for bad in ["", "a b", "é", &"k".repeat(129)] {
            assert!(!is_valid_state_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn texts_sizes_and_amounts() {
        let mut e = FieldErrors::new();
        check_text(&mut e, "body.a", "", 4, false);
        check_text(&mut e, "body.b", "abcd", 4, true);
        check_value_size(&mut e, "body.c", &Value::String("x".repeat(10)));
        check_not_negative(&mut e, "body.d", Some(0));
        check_not_negative(&mut e, "body.d", None);
        assert!(e.is_empty());
        check_text(&mut e, "body.a", " ", 4, true);
        check_text(&mut e, "body.b", "abcde", 4, false);
        check_value_size(&mut e, "body.c", &Value::String("x".repeat(MAX_VALUE_BYTES)));
        check_not_negative(&mut e, "body.d", Some(-1));
        let got: Vec<(String, String)> = e.into_vec().into_iter().map(|f| (f.location, f.message)).collect();
        assert_eq!(
            got,
            [
                ("body.a".to_string(), "1 to 4 characters".to_string()),
                ("body.b".into(), "at most 4 characters".into()),
                ("body.c".into(), format!("at most {MAX_VALUE_BYTES} bytes of JSON")),
                ("body.d".into(), "must be at least 0".into()),
            ]
        );
    }
}
