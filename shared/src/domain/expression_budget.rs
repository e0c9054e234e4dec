//! What a step's user expressions may cost, known before they run.
//!
//! A `condition` (JSONLogic) and an `output_transform` (JMESPath) are
//! written by any holder of `workflows:write` and evaluated in the api
//! (simulate), the scheduler (the engine) and the worker. Neither crate has
//! a fuel counter or a memory cap, and both can be made to grow without
//! bound from a short text: a JMESPath `[@,@]|` doubles its output every six
//! characters, and a JSONLogic `reduce` that merges its accumulator copies
//! it at every item (quadratic). Evaluations cannot be interrupted once
//! begun, so the bound is proved first, from the expression's shape and the
//! size of the data it will see.
//!
//! The proof is an abstract evaluation over sizes. Every expression gets two
//! upper bounds, each linear in the size `x` of the value it is applied to
//! ([`Linear`]): the size of what it returns (`out`) and the work it does
//! (`work`, in units of one byte of JSON touched or built). Iterations
//! (`map`, `filter`, projections, ...) multiply: a body costing `k·x + c`
//! per item, over an array of size `L`, costs at most `(k + c + 1)·L`,
//! since the items' sizes sum to at most `L` and there are at most `L` of
//! them. Two rules keep every expression linear so that this holds:
//!
//! - a JSONLogic `reduce` starts from and returns a number, boolean or
//!   null (its accumulator never grows, so each step costs its item's size);
//!   collections are built with `map`, `filter` and `merge`, which are
//!   linear;
//! - `val`/`var` may not reach an outer scope (`{"val": [[1], "x"]}`), so a
//!   body's cost depends only on its item.
//!
//! At save ([`check_condition_cost`], [`check_transform_cost`]) the data is
//! unknown: each factor must be at most [`MAX_FACTOR`], which lets nested
//! iterations and multi-selects through and refuses exponential shapes with
//! a 422. At run time ([`condition_budget`], [`transform_budget`]) the
//! sizes are real: a condition's root paths are resolved against its input,
//! and the bounds must fit [`WORK_BUDGET`] and [`OUTPUT_BUDGET`]; a step
//! whose expression does not fit fails with [`ERROR_CLASS`] before anything
//! is evaluated.

use serde_json::Value;

/// Largest factor between an expression's work (or output) and the size of
/// its input that a saved expression may have. Nested iterations of a few
/// levels stay well under it (a `some` inside a `map` is about 30); each
/// doubling multi-select or duplicated `merge` multiplies it, so ten of them
/// exceed it.
pub const MAX_FACTOR: f64 = 1_000.0;

/// Most work one evaluation may do, in bytes of JSON touched or built:
/// about a quarter to half a second of one core for either crate on this
/// kind of machine, so a step's expression cannot hold a scheduler pass.
pub const WORK_BUDGET: f64 = 256.0 * 1024.0 * 1024.0;

/// Largest value one evaluation may build: a transformed output becomes the
/// step's output, so it is held to a run result's largest size.
pub const OUTPUT_BUDGET: f64 = super::result::MAX_RESULT_BYTES as f64;

/// Deepest nesting of operators or sub-expressions walked. The crates
/// recurse on the expression too; this keeps every walk well inside a
/// thread's stack.
pub const MAX_DEPTH: usize = 64;

/// The error_class a step gets when its expression is over budget at run
/// time, and the start of its error message.
pub const ERROR_CLASS: &str = "expression_budget_exceeded";

/// Size of a number, boolean or null as any operator may render it (a
/// float's text is at most 24 characters).
const SCALAR: f64 = 24.0;

/// Largest factor by which turning a value into text can grow it (a control
/// character becomes `\u0001`).
const STRINGIFY: f64 = 6.0;

/// An upper bound `k·x + c`, where `x` is the size of the value the
/// expression is applied to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Linear {
    pub k: f64,
    pub c: f64,
}

impl Linear {
    const ZERO: Linear = Linear { k: 0.0, c: 0.0 };
    /// The value itself.
    const X: Linear = Linear { k: 1.0, c: 0.0 };

    fn fixed(c: f64) -> Linear {
        Linear { k: 0.0, c }
    }

    fn plus(self, o: Linear) -> Linear {
        Linear { k: self.k + o.k, c: self.c + o.c }
    }

    fn times(self, f: f64) -> Linear {
        Linear { k: self.k * f, c: self.c * f }
    }

    /// A bound of whichever of two values is returned.
    fn or(self, o: Linear) -> Linear {
        Linear { k: self.k.max(o.k), c: self.c.max(o.c) }
    }

    /// `self` applied to a value bounded by `inner`.
    fn after(self, inner: Linear) -> Linear {
        inner.times(self.k).plus(Linear::fixed(self.c))
    }

    /// A per-item bound summed over the items of an array bounded by `arr`.
    fn over(self, arr: Linear) -> Linear {
        arr.times(self.k + self.c + 1.0)
    }

    /// The bound at input size `x`.
    pub fn at(self, x: f64) -> f64 {
        self.k * x + self.c
    }

    fn sum(items: impl IntoIterator<Item = Linear>) -> Linear {
        items.into_iter().fold(Linear::ZERO, Linear::plus)
    }
}

/// An expression's two bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub out: Linear,
    pub work: Linear,
}

impl Cost {
    fn value(out: Linear) -> Cost {
        Cost { out, work: out }
    }

    /// The factors a saved expression may have ([`MAX_FACTOR`]).
    fn check_factors(self) -> Result<(), String> {
        let factor = self.work.k.max(self.out.k);
        if !within(factor, MAX_FACTOR) || !within(self.work.c, WORK_BUDGET) {
            return Err(format!(
                "the expression can do {} times as much work as the size of its input (at most {MAX_FACTOR}): \
                 each multi-select, duplicated value or nested iteration multiplies it",
                rounded(factor)
            ));
        }
        Ok(())
    }

    /// The budgets one evaluation over an input of `size` bytes must fit.
    fn check_budget(self, size: f64, out_budget: f64) -> Result<(), String> {
        let (work, out) = (self.work.at(size), self.out.at(size));
        if !within(work, WORK_BUDGET) {
            return Err(format!(
                "{ERROR_CLASS}: over an input of {} bytes the expression may do {} bytes of work (at most {})",
                rounded(size),
                rounded(work),
                rounded(WORK_BUDGET)
            ));
        }
        if !within(out, out_budget) {
            return Err(format!(
                "{ERROR_CLASS}: over an input of {} bytes the expression may build {} bytes (at most {})",
                rounded(size),
                rounded(out),
                rounded(out_budget)
            ));
        }
        Ok(())
    }
}

/// Whether a bound is within its limit; a bound that overflowed to infinity
/// or NaN is not.
fn within(bound: f64, limit: f64) -> bool {
    bound.partial_cmp(&limit).is_some_and(|o| o.is_le())
}

fn rounded(f: f64) -> String {
    if f.is_finite() && f < 1e15 {
        format!("{}", f.ceil() as u64)
    } else {
        "unboundedly many".into()
    }
}

/// The size of a JSON value as its text (an upper bound within a few bytes:
/// escapes are not counted, which [`STRINGIFY`] covers where text is made).
pub fn json_size(v: &Value) -> f64 {
    let mut total = 0.0;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        total += match v {
            Value::Null | Value::Bool(_) => 5.0,
            Value::Number(_) => SCALAR,
            Value::String(s) => s.len() as f64 + 2.0,
            Value::Array(a) => {
                stack.extend(a.iter());
                a.len() as f64 + 2.0
            }
            Value::Object(o) => {
                stack.extend(o.values());
                o.keys().map(|k| k.len() as f64 + 4.0).sum::<f64>() + 2.0
            }
        };
    }
    total
}

// ---- JSONLogic -------------------------------------------------------------

/// Operators whose result is a number or a boolean whatever their arguments.
const SCALAR_OPS: &[&str] = &[
    "==", "===", "!=", "!==", ">", ">=", "<", "<=", "!", "!!", "+", "-", "*", "/", "%", "max", "min", "in", "all",
    "some", "none",
];

/// What `var`/`val` resolves against where an expression is evaluated.
#[derive(Clone, Copy)]
enum Scope<'a> {
    /// The condition's input itself: at run time, paths are resolved in it.
    Root(Option<&'a Value>),
    /// An item of `map`, `filter`, `all`, `some` or `none`.
    Item,
    /// A `reduce` step: `current` is an item, `accumulator` a scalar.
    Reduce,
}

/// The static check of a condition at save: its shape keeps it linear, and
/// its factors are within [`MAX_FACTOR`].
pub fn check_condition_cost(c: &Value) -> Result<(), String> {
    logic_cost(c, Scope::Root(None), 0)?.check_factors()
}

/// The check before a condition is evaluated over `input`: the static rules
/// again (a condition saved before they existed meets them here), then the
/// budgets with the input's real sizes.
pub fn condition_budget(c: &Value, input: &Value) -> Result<(), String> {
    let cost = logic_cost(c, Scope::Root(Some(input)), 0).map_err(|e| format!("{ERROR_CLASS}: {e}"))?;
    // Root paths were resolved to their real sizes, so only a path the
    // expression computes leaves a factor of the whole input.
    let size = if cost.work.k > 0.0 || cost.out.k > 0.0 { json_size(input) } else { 0.0 };
    cost.check_budget(size, 8.0 * OUTPUT_BUDGET)
}

fn args_of(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().collect(),
        other => vec![other],
    }
}

fn logic_cost(v: &Value, scope: Scope<'_>, depth: usize) -> Result<Cost, String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested more than {MAX_DEPTH} deep"));
    }
    let o = match v {
        Value::Object(o) if o.len() == 1 => o,
        Value::Object(o) => {
            let parts = o.values().map(|v| logic_cost(v, scope, depth + 1)).collect::<Result<Vec<_>, _>>()?;
            return Ok(sum_costs(&parts, o.len() as f64 + 2.0));
        }
        Value::Array(a) => {
            let parts = a.iter().map(|v| logic_cost(v, scope, depth + 1)).collect::<Result<Vec<_>, _>>()?;
            return Ok(sum_costs(&parts, a.len() as f64 + 2.0));
        }
        literal => return Ok(Cost::value(Linear::fixed(json_size(literal)))),
    };
    let (op, raw) = o.iter().next().expect("one key");
    let args = args_of(raw);
    let sub = |v: &Value, s: Scope<'_>| logic_cost(v, s, depth + 1);
    let all = |s: Scope<'_>| args.iter().map(|a| sub(a, s)).collect::<Result<Vec<_>, _>>();
    let out_sum = |parts: &[Cost]| Linear::sum(parts.iter().map(|p| p.out));
    let work_sum = |parts: &[Cost]| Linear::sum(parts.iter().map(|p| p.work));
    Ok(match op.as_str() {
        "var" | "val" => {
            if args.first().is_some_and(|a| a.is_array()) {
                return Err(format!("{op} may not reach an outer scope in a workflow condition"));
            }
            let parts = all(scope)?;
            let default = parts.get(1).map_or(Linear::ZERO, |p| p.out);
            let found = match (scope, args.first()) {
                (Scope::Root(Some(input)), Some(Value::String(path))) => Linear::fixed(resolved_size(input, path)),
                (Scope::Root(Some(input)), None | Some(Value::Null)) => Linear::fixed(json_size(input)),
                (Scope::Root(Some(input)), Some(Value::Number(n))) => {
                    Linear::fixed(resolved_size(input, &n.to_string()))
                }
                (Scope::Reduce, Some(Value::String(p))) if p == "accumulator" || p.starts_with("accumulator.") => {
                    Linear::fixed(SCALAR)
                }
                (Scope::Reduce, Some(Value::String(p))) if p == "current" || p.starts_with("current.") => Linear::X,
                (Scope::Reduce, _) => Linear::X.plus(Linear::fixed(SCALAR)),
                _ => Linear::X,
            };
            // A lookup borrows what it finds; only its path is work.
            Cost { out: found.plus(default), work: work_sum(&parts).plus(Linear::fixed(8.0)) }
        }
        "map" | "filter" | "all" | "some" | "none" => {
            let arr = sub(args.first().copied().unwrap_or(&Value::Null), scope)?;
            let body = match args.get(1) {
                Some(b) => sub(b, Scope::Item)?,
                None => Cost::value(Linear::fixed(SCALAR)),
            };
            let out = match op.as_str() {
                "map" => body.out.over(arr.out),
                "filter" => arr.out,
                _ => Linear::fixed(SCALAR),
            };
            Cost { out, work: arr.work.plus(body.work.over(arr.out)).plus(out) }
        }
        "reduce" => {
            let (body, init) = (args.get(1).copied(), args.get(2).copied());
            for (what, e) in [("reducer", body), ("initial value", init)] {
                if e.is_some_and(|e| !returns_scalar(e)) {
                    return Err(format!(
                        "a reduce's {what} must give a number, boolean or null (an accumulator that grows is \
                         copied at every item); build collections with map, filter and merge"
                    ));
                }
            }
            let arr = sub(args.first().copied().unwrap_or(&Value::Null), scope)?;
            let body = body.map(|b| sub(b, Scope::Reduce)).transpose()?.unwrap_or(Cost::value(Linear::ZERO));
            let init = init.map(|i| sub(i, scope)).transpose()?.unwrap_or(Cost::value(Linear::ZERO));
            Cost {
                out: Linear::fixed(SCALAR),
                work: arr.work.plus(init.work).plus(body.work.over(arr.out)).plus(Linear::fixed(SCALAR)),
            }
        }
        "and" | "or" | "if" | "?:" => {
            let parts = all(scope)?;
            let out = parts.iter().fold(Linear::ZERO, |acc, p| acc.or(p.out));
            Cost { out, work: work_sum(&parts).plus(Linear::fixed(args.len() as f64)) }
        }
        "cat" => {
            let parts = all(scope)?;
            let out = out_sum(&parts).times(STRINGIFY).plus(Linear::fixed(SCALAR));
            Cost { out, work: work_sum(&parts).plus(out) }
        }
        "merge" | "substr" | "missing" | "missing_some" => {
            let parts = all(scope)?;
            let out = match op.as_str() {
                "substr" => parts.first().map_or(Linear::ZERO, |p| p.out),
                _ => out_sum(&parts),
            };
            Cost { out: out.plus(Linear::fixed(2.0)), work: work_sum(&parts).plus(out_sum(&parts)).plus(out) }
        }
        op if SCALAR_OPS.contains(&op) => {
            let parts = all(scope)?;
            // Comparing or coercing a collection reads all of it.
            Cost {
                out: Linear::fixed(SCALAR),
                work: work_sum(&parts).plus(out_sum(&parts)).plus(Linear::fixed(SCALAR)),
            }
        }
        // An operator the engine does not know fails when evaluated (and is
        // refused at save): it costs what its arguments do.
        _ => {
            let parts = all(scope)?;
            sum_costs(&parts, SCALAR)
        }
    })
}

fn sum_costs(parts: &[Cost], own: f64) -> Cost {
    let out = Linear::sum(parts.iter().map(|p| p.out)).plus(Linear::fixed(own));
    Cost { out, work: Linear::sum(parts.iter().map(|p| p.work)).plus(out) }
}

/// Whether an expression certainly gives a number, boolean or null (or the
/// accumulator of a reduce, which by this rule is one).
fn returns_scalar(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => true,
        Value::Object(o) if o.len() == 1 => {
            let (op, raw) = o.iter().next().expect("one key");
            let args = args_of(raw);
            match op.as_str() {
                op if SCALAR_OPS.contains(&op) => true,
                "var" | "val" => matches!(args.first(), Some(Value::String(p)) if p == "accumulator"),
                "and" | "or" => args.iter().all(|a| returns_scalar(a)),
                // The values of an if are its odd arguments and its last.
                "if" | "?:" => args
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % 2 == 1 || *i + 1 == args.len())
                    .all(|(_, a)| returns_scalar(a)),
                _ => false,
            }
        }
        _ => false,
    }
}

/// The size of what a dotted path finds in `input` (JSONLogic's `var`):
/// the whole input for an empty path, a null's for a path that misses.
fn resolved_size(input: &Value, path: &str) -> f64 {
    if path.is_empty() {
        return json_size(input);
    }
    let mut at = input;
    for part in path.split('.') {
        at = match at {
            Value::Object(o) => match o.get(part) {
                Some(v) => v,
                None => return 5.0,
            },
            Value::Array(a) => match part.parse::<usize>().ok().and_then(|i| a.get(i)) {
                Some(v) => v,
                None => return 5.0,
            },
            _ => return 5.0,
        };
    }
    json_size(at)
}

// ---- JMESPath --------------------------------------------------------------

/// How deeply a JMESPath text nests, read before it is compiled: the crate's
/// parser recurses once per bracket and per `!`, and about a thousand of
/// them (well inside the length limit) overflow a thread's stack, which
/// aborts the process. Quoted strings and literals are skipped.
pub fn check_transform_text(t: &str) -> Result<(), String> {
    let (mut depth, mut deepest, mut nots) = (0usize, 0usize, 0usize);
    let mut chars = t.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '"' | '\'' | '`' => {
                while let Some(c) = chars.next() {
                    if c == '\\' {
                        chars.next();
                    } else if c == ch {
                        break;
                    }
                }
            }
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '!' if chars.peek() != Some(&'=') => nots += 1,
            _ => {}
        }
    }
    if deepest + nots > MAX_DEPTH {
        return Err(format!("nested more than {MAX_DEPTH} deep (brackets and `!` together)"));
    }
    Ok(())
}

/// The static check of an output_transform at save.
pub fn check_transform_cost(expr: &jmespath::Expression<'_>) -> Result<(), String> {
    path_cost(expr.as_ast(), 0)?.check_factors()
}

/// The check before a transform is applied to an output of `size` bytes.
pub fn transform_budget(expr: &jmespath::Expression<'_>, size: f64) -> Result<(), String> {
    let cost = path_cost(expr.as_ast(), 0).map_err(|e| format!("{ERROR_CLASS}: {e}"))?;
    cost.check_budget(size, OUTPUT_BUDGET)
}

fn path_cost(ast: &jmespath::ast::Ast, depth: usize) -> Result<Cost, String> {
    use jmespath::ast::Ast;
    if depth > MAX_DEPTH {
        return Err(format!("nested more than {MAX_DEPTH} deep"));
    }
    let sub = |a: &Ast| path_cost(a, depth + 1);
    Ok(match ast {
        // A field, an index or a slice is part of the value it reads.
        Ast::Identity { .. } | Ast::Field { .. } | Ast::Index { .. } | Ast::Slice { .. } => {
            Cost { out: Linear::X, work: Linear::fixed(8.0) }
        }
        Ast::Literal { value, .. } => {
            Cost::value(Linear::fixed(json_size(&serde_json::to_value(&**value).unwrap_or(Value::Null))))
        }
        Ast::Subexpr { lhs, rhs, .. } => {
            let (l, r) = (sub(lhs)?, sub(rhs)?);
            Cost { out: r.out.after(l.out), work: l.work.plus(r.work.after(l.out)) }
        }
        Ast::Projection { lhs, rhs, .. } => {
            let (l, r) = (sub(lhs)?, sub(rhs)?);
            let out = r.out.over(l.out);
            Cost { out, work: l.work.plus(r.work.over(l.out)).plus(out) }
        }
        Ast::Flatten { node, .. } | Ast::ObjectValues { node, .. } => {
            let n = sub(node)?;
            Cost { out: n.out, work: n.work.plus(n.out) }
        }
        Ast::Condition { predicate, then, .. } => {
            let (p, t) = (sub(predicate)?, sub(then)?);
            Cost { out: t.out.or(Linear::fixed(5.0)), work: p.work.plus(t.work) }
        }
        Ast::Comparison { lhs, rhs, .. } => {
            let (l, r) = (sub(lhs)?, sub(rhs)?);
            Cost { out: Linear::fixed(5.0), work: l.work.plus(r.work).plus(l.out).plus(r.out) }
        }
        Ast::And { lhs, rhs, .. } | Ast::Or { lhs, rhs, .. } => {
            let (l, r) = (sub(lhs)?, sub(rhs)?);
            Cost { out: l.out.or(r.out), work: l.work.plus(r.work).plus(Linear::fixed(2.0)) }
        }
        Ast::Not { node, .. } => {
            let n = sub(node)?;
            Cost { out: Linear::fixed(5.0), work: n.work.plus(Linear::fixed(1.0)) }
        }
        Ast::Expref { ast, .. } => sub(ast)?,
        Ast::MultiList { elements, .. } => {
            let parts = elements.iter().map(sub).collect::<Result<Vec<_>, _>>()?;
            sum_costs(&parts, elements.len() as f64 + 2.0)
        }
        Ast::MultiHash { elements, .. } => {
            let parts = elements.iter().map(|kv| sub(&kv.value)).collect::<Result<Vec<_>, _>>()?;
            let keys: f64 = elements.iter().map(|kv| kv.key.len() as f64 + 4.0).sum();
            sum_costs(&parts, keys + 2.0)
        }
        Ast::Function { name, args, .. } => {
            let parts = args.iter().map(sub).collect::<Result<Vec<_>, _>>()?;
            function_cost(name, args, &parts)
        }
    })
}

/// A JMESPath built-in function's bounds from its arguments' (an expression
/// reference's cost is per item of the array it is applied to).
fn function_cost(name: &str, args: &[jmespath::ast::Ast], parts: &[Cost]) -> Cost {
    let is_ref = |i: usize| matches!(args.get(i), Some(jmespath::ast::Ast::Expref { .. }));
    let plain: Vec<&Cost> = parts.iter().enumerate().filter(|(i, _)| !is_ref(*i)).map(|(_, p)| p).collect();
    let work_in = Linear::sum(plain.iter().map(|p| p.work));
    let out_in = Linear::sum(plain.iter().map(|p| p.out));
    // The array a function iterates, and the per-item cost of its reference.
    let array = plain.last().map_or(Linear::ZERO, |p| p.out);
    let per_item =
        parts.iter().enumerate().filter(|(i, _)| is_ref(*i)).fold(Linear::ZERO, |acc, (_, p)| acc.plus(p.work));
    let (out, extra) = match name {
        "map" => {
            let body = parts.iter().enumerate().find(|(i, _)| is_ref(*i)).map_or(Linear::ZERO, |(_, p)| p.out);
            (body.over(array), per_item.over(array))
        }
        // Sorting compares each item about log2(n) times.
        "sort" | "sort_by" | "min_by" | "max_by" => (array, per_item.over(array).plus(array.times(SCALAR))),
        // The separator goes between every two items.
        "join" => {
            let sep = plain.first().map_or(Linear::ZERO, |p| p.out);
            (array.times(sep.c + 1.0).plus(out_in), Linear::ZERO)
        }
        "to_string" => (out_in.times(STRINGIFY).plus(Linear::fixed(SCALAR)), Linear::ZERO),
        "merge" | "keys" | "values" | "reverse" | "not_null" | "to_array" | "min" | "max" => {
            (out_in.plus(Linear::fixed(2.0)), Linear::ZERO)
        }
        _ => (Linear::fixed(SCALAR), Linear::ZERO),
    };
    Cost { out, work: work_in.plus(out_in).plus(extra).plus(out) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn saved_condition(c: Value) -> Result<(), String> {
        check_condition_cost(&c)
    }

    fn saved_transform(t: &str) -> Result<(), String> {
        check_transform_cost(&jmespath::compile(t).expect("compiles"))
    }

    /// The budget table: what is accepted at save, what is refused, and why.
    #[test]
    fn linear_conditions_are_accepted_at_save() {
        for ok in [
            json!({"==": [{"var": "payload.tier"}, "gold"]}),
            json!({"some": [{"var": "payload.items"}, {">": [{"var": "qty"}, 5]}]}),
            json!({"map": [{"map": [{"var": "payload.rows"}, {"var": "cells"}]}, {"all": [{"var": ""}, {"!!": {"var": ""}}]}]}),
            json!({"reduce": [{"var": "payload.a"}, {"+": [{"var": "accumulator"}, {"var": "current.n"}]}, 0]}),
            json!({"reduce": [{"var": "payload.a"}, {"max": [{"var": "current"}, {"var": "accumulator"}]}, 0]}),
            json!({"reduce": [{"var": "payload.a"}, {"if": [{"var": "current.ok"}, {"+": [{"var": "accumulator"}, 1]}, {"var": "accumulator"}]}, 0]}),
            json!({"in": ["x", {"cat": [{"var": "payload.a"}, {"var": "payload.b"}]}]}),
            json!({"merge": [{"var": "payload.a"}, {"filter": [{"var": "payload.b"}, {"var": "ok"}]}]}),
        ] {
            assert_eq!(saved_condition(ok.clone()), Ok(()), "{ok}");
        }
    }

    #[test]
    fn the_reduce_that_merges_its_accumulator_is_refused_at_save() {
        let attack =
            json!({"reduce": [{"var": "payload.a"}, {"merge": [{"var": "accumulator"}, [{"var": "current"}]]}, []]});
        let err = saved_condition(attack).unwrap_err();
        assert!(err.contains("reducer must give a number"), "{err}");
        let grows = json!({"reduce": [{"var": "payload.a"}, {"cat": [{"var": "accumulator"}, "x"]}, 0]});
        assert!(saved_condition(grows).is_err());
        let init = json!({"reduce": [{"var": "payload.a"}, {"+": [1, 2]}, {"var": "payload"}]});
        assert!(saved_condition(init).unwrap_err().contains("initial value"));
    }

    #[test]
    fn reaching_an_outer_scope_is_refused() {
        let c = json!({"map": [{"var": "payload.a"}, {"val": [[1], "payload"]}]});
        assert!(saved_condition(c).unwrap_err().contains("outer scope"));
    }

    #[test]
    fn nested_duplication_is_refused_at_save() {
        // Each level doubles the items and adds a constant: 5x per level.
        let mut c = json!({"var": "payload.a"});
        for _ in 0..6 {
            c = json!({"map": [c, [{"var": ""}, {"var": ""}]]});
        }
        let err = saved_condition(c).unwrap_err();
        assert!(err.contains("times as much work"), "{err}");
        let mut deep = json!(1);
        for _ in 0..(MAX_DEPTH + 2) {
            deep = json!({"!": [deep]});
        }
        assert!(saved_condition(deep).unwrap_err().contains("nested"));
    }

    #[test]
    fn a_condition_over_real_data_is_held_to_the_work_budget() {
        let c = json!({"some": [{"var": "payload.items"}, {"==": [{"var": "k"}, 1]}]});
        let small = json!({"payload": {"items": [{"k": 1}, {"k": 2}], "huge": "x".repeat(1 << 20)}});
        assert_eq!(condition_budget(&c, &small), Ok(()), "only the path the condition reads counts");
        // A legacy condition saved before the rules: quadratic, refused before it runs.
        let attack =
            json!({"reduce": [{"var": "payload.a"}, {"merge": [{"var": "accumulator"}, [{"var": "current"}]]}, []]});
        let err = condition_budget(&attack, &json!({"payload": {"a": [0, 1, 2]}})).unwrap_err();
        assert!(err.starts_with(ERROR_CLASS), "{err}");
        // A linear condition over a large enough input is over the absolute budget.
        let mut c = json!({"var": "payload.a"});
        for _ in 0..3 {
            c = json!({"map": [c, [{"var": ""}, {"var": ""}]]});
        }
        let big = json!({"payload": {"a": vec![0; 400_000]}});
        let err = condition_budget(&c, &big).unwrap_err();
        assert!(err.starts_with(ERROR_CLASS) && err.contains("work"), "{err}");
    }

    #[test]
    fn linear_transforms_are_accepted_at_save() {
        for ok in [
            "user.id",
            "{id: user.id, n: length(user.tags)}",
            "items[?price > `10`].{name: name, price: price}",
            "sort_by(items, &price)[0:5]",
            "join(', ', items[*].name)",
            "map(&to_string(@), items)",
            "[a, b, c][]",
            "to_string(@)",
        ] {
            assert_eq!(saved_transform(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn the_doubling_transform_is_refused_at_save() {
        // 10 doublings: 1024x, past the factor.
        let t = format!("{}@", "[@,@]|".repeat(10));
        let err = saved_transform(&t).unwrap_err();
        assert!(err.contains("times as much work"), "{err}");
        // Five pass at save, and are then held to the output budget by size.
        let five = jmespath::compile(&format!("{}@", "[@,@]|".repeat(5))).unwrap();
        assert_eq!(check_transform_cost(&five), Ok(()));
        assert_eq!(transform_budget(&five, 1000.0), Ok(()));
        let err = transform_budget(&five, 1_000_000.0).unwrap_err();
        assert!(err.starts_with(ERROR_CLASS) && err.contains("build"), "{err}");
    }

    #[test]
    fn a_deeply_nested_transform_is_refused_not_a_crash() {
        // Within the length limit, the crate's parser copes (no stack
        // overflow); the walk refuses the depth.
        for t in [
            format!("{}a", "!".repeat(4000)),
            "[".repeat(1000) + "a" + &"]".repeat(1000),
            "(".repeat(65) + "a" + &")".repeat(65),
        ] {
            assert!(check_transform_text(&t).unwrap_err().contains("nested"), "{}", &t[..10]);
        }
        assert_eq!(
            check_transform_text("a != b && `[[[[[` == '(((' && \"[[\" == c"),
            Ok(()),
            "quoted text is not nesting"
        );
        // A long chain is not nesting for the parser, but its tree is deep.
        let chain = jmespath::compile(&("a.".repeat(2000) + "a")).unwrap();
        assert!(check_transform_cost(&chain).unwrap_err().contains("nested"));
    }

    #[test]
    fn json_size_is_at_least_the_text() {
        for v in [json!(null), json!([1, 2.5, "abc"]), json!({"a": {"b": [true, false]}, "c": "é"}), json!(1e300)] {
            assert!(json_size(&v) >= v.to_string().len() as f64, "{v}");
        }
    }
}
