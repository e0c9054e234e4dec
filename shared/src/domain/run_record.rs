//! The rules for what a run's target may record over the SDK: log levels,
//! state keys, and the size of texts and JSON values. Each check adds its
//! failure to a [`FieldErrors`] at the location it is given.

use serde_json::Value;

use super::rules::Text;
use super::FieldErrors;

/// The levels of a log line.
pub const LOG_LEVELS: [&str; 4] = ["debug", "info", "warn", "error"];
/// Serialized size of one state value, output or tool call input/output.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;

/// Most bytes (as JSON text) a run's outputs may hold together: a run may
/// keep 1,000 outputs of up to [`MAX_VALUE_BYTES`] each, which without this
/// would let one run hold 256 MB of a shared database. 16 MiB is twice the
/// largest result a run may return.
pub const MAX_OUTPUT_BYTES_PER_RUN: i64 = 16 * 1024 * 1024;

/// Most bytes (as JSON text) a run's state store may hold together: state
/// is the working memory of a resumable run (cursors, small maps), read back
/// whole on resume, so a quarter of the outputs' quota.
pub const MAX_STATE_BYTES_PER_RUN: i64 = 4 * 1024 * 1024;

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

/// The texts the SDK records (U+0000 is scrubbed from each): a required
/// one is not blank ([`Text::filled`]), an optional one only bounded.
pub const NAME: Text = Text::filled(1, 256);
pub const TOOL_STATUS: Text = Text::filled(1, 64);
pub const ERROR: Text = Text::filled(1, 4096);
pub const CHECKPOINT_LABEL: Text = Text::any(0, 256);
pub const PROGRESS_MESSAGE: Text = Text::any(0, 1024);
pub const LOG_MESSAGE: Text = Text::any(0, 16 * 1024);
/// A state key ([`is_valid_state_key`]).
pub const STATE_KEY: Text = Text::form(1, 128, "^[A-Za-z0-9_.:-]+$", is_valid_state_key);

/// Records a text that breaks `rule` (one of the above; not echoed back).
pub fn check_text(errors: &mut FieldErrors, location: &str, v: &str, rule: &Text) {
    if !rule.ok(v) {
        errors.push(location, rule.length_words(), None);
    }
}

/// Largest amount one SDK record may report (cost in micro-dollars, tokens,
/// milliseconds): a million dollars, or 31 years. Reports sum records over
/// projects and hours in bigint; at this size ten thousand records of a run
/// still sum far inside it, and the sums saturate beyond.
pub const MAX_AMOUNT: i64 = 1_000_000_000_000;

/// Records an amount outside 0 to [`MAX_AMOUNT`].
pub fn check_amount(errors: &mut FieldErrors, location: &str, n: Option<i64>) {
    if let Some(n) = n.filter(|n| !(0..=MAX_AMOUNT).contains(n)) {
        errors.push(location, format!("must be 0 to {MAX_AMOUNT}"), Some(n.into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stated_rules_are_the_checks() {
        for r in [NAME, TOOL_STATUS, ERROR, CHECKPOINT_LABEL, PROGRESS_MESSAGE, LOG_MESSAGE] {
            assert_eq!(super::super::rules::agrees(&r, &[]), Ok(()), "{r:?}");
        }
        assert_eq!(super::super::rules::agrees(&STATE_KEY, &["a-b_c.d:1"]), Ok(()));
    }

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
        let (optional, required) = (Text::any(0, 4), Text::filled(1, 4));
        check_text(&mut e, "body.a", "", &optional);
        check_text(&mut e, "body.b", "abcd", &required);
        check_text(&mut e, "body.b", "日本語x", &required);
        check_value_size(&mut e, "body.c", &Value::String("x".repeat(10)));
        check_amount(&mut e, "body.d", Some(0));
        check_amount(&mut e, "body.d", Some(MAX_AMOUNT));
        check_amount(&mut e, "body.d", None);
        assert!(e.is_empty());
        check_text(&mut e, "body.a", " ", &required);
        check_text(&mut e, "body.b", "abcde", &optional);
        check_value_size(&mut e, "body.c", &Value::String("x".repeat(MAX_VALUE_BYTES)));
        check_amount(&mut e, "body.d", Some(-1));
        check_amount(&mut e, "body.e", Some(i64::MAX));
        let got: Vec<(String, String)> = e.into_vec().into_iter().map(|f| (f.location, f.message)).collect();
        assert_eq!(
            got,
            [
                ("body.a".to_string(), "1 to 4 characters".to_string()),
                ("body.b".into(), "at most 4 characters".into()),
                ("body.c".into(), format!("at most {MAX_VALUE_BYTES} bytes of JSON")),
                ("body.d".into(), format!("must be 0 to {MAX_AMOUNT}")),
                ("body.e".into(), format!("must be 0 to {MAX_AMOUNT}")),
            ]
        );
    }
}
