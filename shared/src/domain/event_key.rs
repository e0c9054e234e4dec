//! Event keys, the patterns event sources match them with, and the
//! idempotency key of the run a source triggers for an event
//! (docs/contract.md, "Events").
//!
//! A key is what a client names an event with (`order.created`). A pattern
//! is either a key, matched exactly, or a prefix ending in one `*`
//! (`order.*`, or `*` for every key). `*` never appears in a key, so a
//! pattern and the keys it matches cannot be confused.

use super::field_errors::FieldErrors;
use super::rules::Text;

/// Longest key or pattern, in characters.
pub const MAX_LEN: usize = 255;
/// The length and alphabet of keys and patterns alike.
const PRINTABLE: Text = Text::printable(1, MAX_LEN);

/// A key, as the document states it ([`check_key`] checks it).
pub const KEY: Text =
    Text::form(1, MAX_LEN, r"^[^\u0000-\u001f\u007f-\u009f*]+$", |k| PRINTABLE.ok(k) && !k.contains('*'));

/// A pattern, as the document states it ([`check_pattern`] checks it).
pub const PATTERN: Text = Text::form(1, MAX_LEN, r"^[^\u0000-\u001f\u007f-\u009f*]*\*?$", |p| {
    PRINTABLE.ok(p) && !p.strip_suffix('*').unwrap_or(p).contains('*')
});

/// Checks a dispatched event's key: 1 to 255 bytes, no control
/// characters, no `*`.
pub fn check_key(e: &mut FieldErrors, location: &str, key: &str) {
    let before = e.len();
    e.text(location, Some(key), &PRINTABLE);
    if e.len() == before {
        e.check(!key.contains('*'), location, "`*` is only for the patterns of event sources", Some(key.into()));
    }
}

/// Checks a source's pattern: a key, or a prefix followed by one `*` at
/// the end.
pub fn check_pattern(e: &mut FieldErrors, location: &str, pattern: &str) {
    let before = e.len();
    e.text(location, Some(pattern), &PRINTABLE);
    if e.len() == before {
        let prefix = pattern.strip_suffix('*').unwrap_or(pattern);
        e.check(
            !prefix.contains('*'),
            location,
            "an exact key, or a prefix with one `*` at the end (`order.*`)",
            Some(pattern.into()),
        );
    }
}

/// Whether `pattern` matches `key`. The store matches in SQL with the same
/// rule; this is its statement, kept next to the checks that shape it.
pub fn matches(pattern: &str, key: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => key.starts_with(prefix),
        None => pattern == key,
    }
}

/// The idempotency key of the run `source_id` triggers for `event_id`: the
/// same every time the event is handled, so handling it again (a crash
/// before it was marked complete) finds the run instead of making another.
pub fn trigger_key(event_id: &str, source_id: &str) -> String {
    format!("{event_id}:{source_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stated_rules_are_the_checks() {
        let checked = |f: fn(&mut FieldErrors, &str, &str), v: &str| {
            let mut e = FieldErrors::new();
            f(&mut e, "body.k", v);
            e.is_empty()
        };
        for s in crate::domain::rules::corpus(&["order.created", "order.*", "*", "a*b*", "**"]) {
            assert_eq!(KEY.ok(&s), checked(check_key, &s), "{s:?}");
            assert_eq!(PATTERN.ok(&s), checked(check_pattern, &s), "{s:?}");
        }
        assert_eq!(crate::domain::rules::agrees(&KEY, &["order.created"]), Ok(()));
        assert_eq!(crate::domain::rules::agrees(&PATTERN, &["order.*", "**", "a*b"]), Ok(()));
    }

    fn failures(f: impl FnOnce(&mut FieldErrors)) -> Vec<String> {
        let mut e = FieldErrors::new();
        f(&mut e);
        e.into_vec().into_iter().map(|f| format!("{}: {}", f.location, f.message)).collect()
    }

    #[test]
    fn keys_are_printable_bounded_and_never_patterns() {
        for ok in ["order.created", "a", "with space/and:colon", &"k".repeat(255)] {
            assert!(failures(|e| check_key(e, "body.event_key", ok)).is_empty(), "{ok:?}");
        }
        for bad in ["", "tab\there", &"k".repeat(256)] {
            let got = failures(|e| check_key(e, "body.event_key", bad));
            assert_eq!(got, ["body.event_key: must be 1 to 255 characters, no control characters"], "{bad:?}");
        }
        let got = failures(|e| check_key(e, "body.event_key", "order.*"));
        assert_eq!(got, ["body.event_key: `*` is only for the patterns of event sources"]);
    }

    #[test]
    fn a_pattern_has_at_most_one_star_at_its_end() {
        for ok in ["order.created", "order.*", "*", "o*"] {
            assert!(failures(|e| check_pattern(e, "body.event_key", ok)).is_empty(), "{ok:?}");
        }
        for bad in ["order.*.created", "*.created", "**", "order**"] {
            let got = failures(|e| check_pattern(e, "body.event_key", bad));
            assert_eq!(got.len(), 1, "{bad:?}");
            assert!(got[0].contains("one `*` at the end"), "{bad:?}: {got:?}");
        }
        assert_eq!(failures(|e| check_pattern(e, "body.event_key", "")).len(), 1);
    }

    #[test]
    fn exact_patterns_match_one_key_and_prefixes_their_family() {
        assert!(matches("order.created", "order.created"));
        assert!(!matches("order.created", "order.created.v2"));
        assert!(matches("order.*", "order.created"));
        assert!(matches("order.*", "order."));
        assert!(!matches("order.*", "order"));
        assert!(!matches("order.*", "orders.created"));
        assert!(matches("*", "anything"));
    }

    #[test]
    fn a_trigger_key_names_the_event_and_the_source() {
        assert_eq!(trigger_key("evt_1", "evs_2"), "evt_1:evs_2");
    }
}
