//! The rules of a request's text values, each written once in the two forms
//! it takes: the check a handler runs ([`Text::ok`]) and the JSON Schema
//! keywords the served document states for the same value
//! ([`Text::schema`], read by the api's value rules, which live beside
//! each request type and are gathered by `document::value_rules`). The
//! bounds are one pair of numbers; the alphabet is a predicate and the
//! `pattern` that says the same, and the tests here hold the two to each
//! other on a corpus of edge cases, through the same JSON Schema validator
//! a generator of the document's values uses (`jsonschema`).
//!
//! Lengths count characters (Unicode scalar values), as JSON Schema's
//! `minLength` and `maxLength` do. Patterns are ECMA-262, as the document's
//! dialect requires, and spell their character classes out rather than use
//! `\s`, whose members differ between regex dialects: [`SPACE`] is exactly
//! `char::is_whitespace` (which `str::trim` uses) and [`CONTROL`] exactly
//! `char::is_control`.

use serde_json::{json, Map, Value};

/// An http(s) URL with a host; the private-address check happens at the API,
/// which knows the configuration (see [`JobSpec::target_urls`]).
pub fn check_url(raw: &str) -> Result<url::Url, String> {
    let u = url::Url::parse(raw).map_err(|e| format!("not a valid URL: {e}"))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return Err("must be an http or https URL".into());
    }
    if u.host_str().is_none_or(|h| h.is_empty()) {
        return Err("must name a host".into());
    }
    Ok(u)
}

/// The characters `char::is_whitespace` (Unicode White_Space) takes, as
/// the inside of a regex character class.
pub const SPACE: &str = r"\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
/// The characters `char::is_control` (Unicode Cc) takes, likewise.
pub const CONTROL: &str = r"\u0000-\u001f\u007f-\u009f";

/// A rule on a text value: its length in characters and its form.
#[derive(Clone, Copy, Debug)]
pub struct Text {
    pub min: usize,
    pub max: usize,
    /// The form as the document states it (an ECMA-262 regex, matched
    /// anywhere in the value unless anchored); `None`: any characters.
    pub pattern: Option<&'static str>,
    /// The same form, for the check.
    form: fn(&str) -> bool,
}

fn any(_: &str) -> bool {
    true
}

/// Not only [`SPACE`]s.
pub fn not_blank(s: &str) -> bool {
    !s.trim().is_empty()
}

/// No [`CONTROL`] characters.
pub fn printable(s: &str) -> bool {
    !s.chars().any(char::is_control)
}

/// No U+0000, which Postgres text and jsonb cannot hold.
pub fn storable(s: &str) -> bool {
    !s.contains('\0')
}

fn label(s: &str) -> bool {
    not_blank(s) && printable(s)
}

/// A regex of "not only spaces, no U+0000".
const NOT_BLANK_PATTERN: &str = concat!(
    r"^[^\u0000]*",
    r"[^\u0000\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]",
    r"[^\u0000]*$"
);
/// A regex of "not only spaces": one character that is not a space.
const FILLED_PATTERN: &str = r"[^\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";
/// A regex of "no U+0000".
const STORABLE_PATTERN: &str = r"^[^\u0000]*$";
/// A regex of "no control characters".
const PRINTABLE_PATTERN: &str = r"^[^\u0000-\u001f\u007f-\u009f]*$";
/// A regex of "not blank, no control characters".
const LABEL_PATTERN: &str = concat!(
    r"^[^\u0000-\u001f\u007f-\u009f]*",
    r"[^\u0000-\u001f\u007f-\u009f\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]",
    r"[^\u0000-\u001f\u007f-\u009f]*$"
);

impl Text {
    /// Any characters, `min` to `max` of them.
    pub const fn any(min: usize, max: usize) -> Text {
        Text { min, max, pattern: None, form: any }
    }

    /// `min` to `max` characters but U+0000: free text kept in Postgres,
    /// which cannot hold that one.
    pub const fn stored(min: usize, max: usize) -> Text {
        Text { min, max, pattern: Some(STORABLE_PATTERN), form: storable }
    }

    /// `min` to `max` characters, not only spaces, any of them (U+0000
    /// too: for texts the caller scrubs it from).
    pub const fn filled(min: usize, max: usize) -> Text {
        Text { min, max, pattern: Some(FILLED_PATTERN), form: not_blank }
    }

    /// `min` to `max` characters, not only spaces, kept in Postgres (no
    /// U+0000).
    pub const fn not_blank(min: usize, max: usize) -> Text {
        Text { min, max, pattern: Some(NOT_BLANK_PATTERN), form: |s| not_blank(s) && storable(s) }
    }

    /// `min` to `max` characters, none of them a control character.
    pub const fn printable(min: usize, max: usize) -> Text {
        Text { min, max, pattern: Some(PRINTABLE_PATTERN), form: printable }
    }

    /// `min` to `max` characters, not only spaces, no control characters:
    /// what a person names a thing with.
    pub const fn label(min: usize, max: usize) -> Text {
        Text { min, max, pattern: Some(LABEL_PATTERN), form: label }
    }

    /// A form of its own: `pattern` and `form` must say the same (a test
    /// next to the rule holds them to it, see [`agrees`]).
    pub const fn form(min: usize, max: usize, pattern: &'static str, form: fn(&str) -> bool) -> Text {
        Text { min, max, pattern: Some(pattern), form }
    }

    /// Whether `s` keeps to the rule.
    pub fn ok(&self, s: &str) -> bool {
        let n = s.chars().count();
        n >= self.min && n <= self.max && (self.form)(s)
    }

    /// The rule as JSON Schema keywords of a string.
    pub fn schema(&self) -> Value {
        let mut m = Map::new();
        if self.min > 0 {
            m.insert("minLength".into(), json!(self.min));
        }
        if self.max < usize::MAX {
            m.insert("maxLength".into(), json!(self.max));
        }
        if let Some(p) = self.pattern {
            m.insert("pattern".into(), json!(p));
        }
        Value::Object(m)
    }

    /// "must be 1 to 200 characters": the bounds, for messages.
    pub fn length_words(&self) -> String {
        if self.min == 0 {
            format!("at most {} characters", self.max)
        } else {
            format!("{} to {} characters", self.min, self.max)
        }
    }
}

/// Whether the JSON Schema `schema` accepts `value`, by the validator the
/// document's readers use (draft 2020-12, ECMA-262 patterns).
pub fn schema_accepts(schema: &Value, value: &Value) -> bool {
    validator(schema).is_valid(value)
}

/// The validator of [`schema_accepts`], to try many values on one schema
/// (a string's, unless it names a type).
pub fn validator(schema: &Value) -> jsonschema::Validator {
    let mut s = schema.clone();
    if let Some(o) = s.as_object_mut() {
        o.entry("type").or_insert_with(|| json!("string"));
    }
    jsonschema::validator_for(&s).unwrap_or_else(|e| panic!("{schema}: {e}"))
}

/// Test support: the strings every text rule is tried on (empty, blank,
/// each kind of space and control character, multi-byte characters at the
/// bounds, the characters ids and slugs reserve), with `extra` of a rule's own.
pub fn corpus(extra: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = [
        "",
        " ",
        "  ",
        "a",
        "A",
        "z",
        "Z",
        "0",
        "9",
        "_",
        "-",
        ".",
        ":",
        "/",
        "*",
        "|",
        "{",
        "é",
        "日本",
        "😀",
        "a b",
        " a",
        "a ",
        "a\u{0}",
        "\u{0}",
        "a\tb",
        "a\nb",
        "\n",
        "a\n",
        "\u{7f}",
        "\u{85}",
        "\u{9f}",
        "\u{a0}",
        "\u{feff}",
        "\u{1c}",
        "\u{2028}",
        "\u{3000}",
        "\u{200b}",
        "x\u{1680}",
        "abc-def_1.2",
        "abc def",
        "Abc",
        "a/b",
        "a*",
        "*a",
        "a*b",
        "order.*",
        "$",
        "é\u{301}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    out.extend(extra.iter().map(|s| s.to_string()));
    for n in [63, 64, 65, 100, 101, 127, 128, 129, 199, 200, 201, 255, 256, 257] {
        out.push("a".repeat(n));
        out.push("é".repeat(n));
        out.push("😀".repeat(n));
    }
    out
}

/// Test support: `Err` listing every string of the corpus on which the
/// rule's check and its schema disagree.
pub fn agrees(rule: &Text, extra: &[&str]) -> Result<(), Vec<(String, bool)>> {
    let schema = validator(&rule.schema());
    let wrong: Vec<(String, bool)> = corpus(extra)
        .into_iter()
        .filter_map(|s| {
            let check = rule.ok(&s);
            (check != schema.is_valid(&json!(s))).then_some((s, check))
        })
        .collect();
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_character_classes_are_the_checks_own() {
        let (space_v, control_v) = (
            validator(&json!({"pattern": format!("^[{SPACE}]$")})),
            validator(&json!({"pattern": format!("^[{CONTROL}]$")})),
        );
        let space = |c: char| space_v.is_valid(&json!(c.to_string()));
        let control = |c: char| control_v.is_valid(&json!(c.to_string()));
        for c in (0..0x3100u32).chain([0xfeff, 0x1_f600]).filter_map(char::from_u32) {
            assert_eq!(space(c), c.is_whitespace(), "{c:?}");
            assert_eq!(control(c), c.is_control(), "{c:?}");
        }
        assert!(NOT_BLANK_PATTERN.contains(SPACE) && LABEL_PATTERN.contains(SPACE) && LABEL_PATTERN.contains(CONTROL));
    }

    #[test]
    fn the_general_rules_agree_with_their_schemas() {
        for rule in [
            Text::any(0, 100),
            Text::any(1, 64),
            Text::stored(0, 100),
            Text::not_blank(1, 200),
            Text::filled(1, 256),
            Text::printable(1, 255),
            Text::label(1, 100),
        ] {
            assert_eq!(agrees(&rule, &[]), Ok(()), "{rule:?}");
        }
    }

    #[test]
    fn lengths_count_characters() {
        let r = Text::not_blank(1, 3);
        assert!(r.ok("日本語") && !r.ok("日本語x") && !r.ok("") && !r.ok("   "));
        assert_eq!(r.schema(), json!({"minLength": 1, "maxLength": 3, "pattern": NOT_BLANK_PATTERN}));
        assert_eq!(Text::any(0, 9).schema(), json!({"maxLength": 9}));
    }
}
