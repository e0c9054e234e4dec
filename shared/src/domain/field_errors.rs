//! Validation failures of a request, one per invalid value, and the one
//! accumulator every validator collects them in. A validator reports every
//! problem it finds, not just the first, so a client fixes a request in one
//! round; the api answers them as a 422 whose `errors[]` lists each.

use serde_json::Value;

/// A validation failure of one value: where (`body.priority`,
/// `query.limit`, `body.payload/user/age`; see [`child`]), what, and the
/// offending value when it is worth echoing.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub location: String,
    pub message: String,
    pub value: Option<Value>,
}

/// The location of `token` (a property name or an array index) inside the
/// value located at `parent`: `body` and `steps` give `body.steps`, then
/// `0` gives `body.steps/0`. Every location has this one notation: the
/// request's part (`body`, `query`, `header`, `path`), a dot, and a JSON
/// pointer (RFC 6901) to the value without its leading slash, so a `~` or
/// `/` in a key is written `~0` or `~1`.
pub fn child(parent: &str, token: impl std::fmt::Display) -> String {
    let token = token.to_string().replace('~', "~0").replace('/', "~1");
    if parent.contains('.') {
        format!("{parent}/{token}")
    } else {
        format!("{parent}.{token}")
    }
}

impl FieldError {
    pub fn new(location: impl Into<String>, message: impl Into<String>, value: Option<Value>) -> FieldError {
        FieldError { location: location.into(), message: message.into(), value }
    }
}

/// Collects [`FieldError`]s in the order they are found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldErrors(Vec<FieldError>);

impl FieldErrors {
    pub fn new() -> FieldErrors {
        FieldErrors::default()
    }

    pub fn push(&mut self, location: impl Into<String>, message: impl Into<String>, value: Option<Value>) {
        self.0.push(FieldError::new(location, message, value));
    }

    /// Records the failure unless `ok`.
    pub fn check(&mut self, ok: bool, location: impl Into<String>, message: impl Into<String>, value: Option<Value>) {
        if !ok {
            self.push(location, message, value);
        }
    }

    /// `v` when it lies in `min..=max`; otherwise records
    /// "must be between min and max" and gives `None`.
    pub fn in_range(&mut self, location: &str, v: Option<i64>, min: i64, max: i64) -> Option<i64> {
        match v {
            Some(n) if !(min..=max).contains(&n) => {
                self.push(location, format!("must be between {min} and {max}"), Some(n.into()));
                None
            }
            other => other,
        }
    }

    /// An optional text that must keep to `rule` (a
    /// [`Text::printable`](super::rules::Text::printable) one: its message
    /// says so).
    pub fn text(&mut self, location: &str, v: Option<&str>, rule: &super::rules::Text) {
        if let Some(v) = v {
            let message = format!("must be {}, no control characters", rule.length_words());
            self.check(rule.ok(v), location, message, Some(v.into()));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// `Ok` when nothing was recorded, else every failure in order.
    pub fn finish(self) -> Result<(), Vec<FieldError>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }

    pub fn into_vec(self) -> Vec<FieldError> {
        self.0
    }
}

impl Extend<FieldError> for FieldErrors {
    fn extend<I: IntoIterator<Item = FieldError>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_is_a_part_then_a_json_pointer() {
        let steps = child("body", "steps");
        assert_eq!(steps, "body.steps");
        assert_eq!(child(&child(&steps, 0), "step_type"), "body.steps/0/step_type");
        assert_eq!(child("body.metadata", "a/b~c"), "body.metadata/a~1b~0c");
        assert_eq!(child("query", "limit"), "query.limit");
    }

    #[test]
    fn keeps_every_failure_in_order() {
        let mut e = FieldErrors::new();
        e.check(true, "body.a", "fine", None);
        e.check(false, "body.b", "bad", Some(1.into()));
        e.push("body.c", "worse", None);
        let got = e.finish().unwrap_err();
        assert_eq!(got.iter().map(|f| f.location.as_str()).collect::<Vec<_>>(), ["body.b", "body.c"]);
        assert_eq!(got[0].value, Some(1.into()));
        assert_eq!(FieldErrors::new().finish(), Ok(()));
    }

    #[test]
    fn in_range_reports_and_drops_the_value_outside() {
        let mut e = FieldErrors::new();
        assert_eq!(e.in_range("body.n", Some(5), 0, 10), Some(5));
        assert_eq!(e.in_range("body.n", None, 0, 10), None);
        assert!(e.is_empty());
        assert_eq!(e.in_range("body.n", Some(11), 0, 10), None);
        let got = e.into_vec();
        assert_eq!(got, [FieldError::new("body.n", "must be between 0 and 10", Some(11.into()))]);
    }

    #[test]
    fn text_refuses_empty_long_and_control_characters() {
        let mut e = FieldErrors::new();
        let rule = super::super::rules::Text::printable(1, 4);
        e.text("body.k", None, &rule);
        e.text("body.k", Some("abcd"), &rule);
        e.text("body.k", Some("日本語!"), &rule);
        assert!(e.is_empty());
        for bad in ["", "abcde", "a\nb"] {
            e.text("body.k", Some(bad), &rule);
        }
        assert_eq!(e.len(), 3);
        assert_eq!(e.into_vec()[0].message, "must be 1 to 4 characters, no control characters");
    }
}
