//! The words a value rule is written in: where it applies ([`Place`]) and
//! the JSON Schema keywords it writes there ([`text`], [`range`],
//! [`count`], [`entries`], [`map`]).
//!
//! A module that defines request bodies states their value rules in a
//! `value_rules()` right after them: every rule a request's values keep
//! that is not a closed set (lengths, alphabets, bounds, item and entry
//! counts), each written from the constant or the [`Text`] rule the
//! handler's check reads, so the two cannot drift. `document::value_rules`
//! gathers them into the served document; a place the document lacks
//! panics (`every_value_rule_has_its_place`).

use serde_json::{json, Value};
use switchyard_shared::domain::rules::Text;

/// Where a rule applies: a property of a component schema, the items of
/// an array property, the values or the keys of a map property, a query
/// parameter of an operation, or every path parameter of a name.
pub(crate) enum Place {
    Property(&'static str, &'static str),
    Items(&'static str, &'static str),
    Values(&'static str, &'static str),
    Keys(&'static str, &'static str),
    Query(&'static str, &'static str),
    /// Every query parameter of a name, on whichever operation takes it.
    QueryAll(&'static str),
    Path(&'static str),
}

impl Place {
    pub(crate) fn describe(&self) -> String {
        match self {
            Place::Property(s, p) => format!("{s}.{p}"),
            Place::Items(s, p) => format!("{s}.{p}[]"),
            Place::Values(s, p) => format!("{s}.{p}{{*}}"),
            Place::Keys(s, p) => format!("{s}.{p} keys"),
            Place::Query(o, p) => format!("{o}?{p}"),
            Place::QueryAll(p) => format!("*?{p}"),
            Place::Path(p) => format!("{{{p}}}"),
        }
    }
}

/// The JSON Schema keywords of a text rule.
pub(crate) fn text(rule: &Text) -> Value {
    rule.schema()
}

/// `min..=max`.
pub(crate) fn range((min, max): (i64, i64)) -> Value {
    json!({"minimum": min, "maximum": max})
}

/// An array of `min..=max` items (`usize::MAX`: no most).
pub(crate) fn count(min: usize, max: usize) -> Value {
    let mut v = json!({});
    if max < usize::MAX {
        v["maxItems"] = json!(max);
    }
    if min > 0 {
        v["minItems"] = json!(min);
    }
    v
}

/// A map of at most `max` entries.
pub(crate) fn entries(max: usize) -> Value {
    json!({"maxProperties": max})
}

/// A map property: at most `max` entries, its keys and its values each
/// keeping a text rule.
pub(crate) fn map(
    schema: &'static str,
    prop: &'static str,
    max: usize,
    key: &Text,
    value: &Text,
) -> [(Place, Value); 3] {
    [
        (Place::Property(schema, prop), entries(max)),
        (Place::Keys(schema, prop), text(key)),
        (Place::Values(schema, prop), text(value)),
    ]
}
