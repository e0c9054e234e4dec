//! How answers are shown: aligned tables and `key: value` blocks for people,
//! the API's JSON unchanged for scripts (`--json`).

use std::fmt::Write;

use serde_json::Value;

/// Prints `v` as the API sent it (one JSON document, one line).
pub fn json(v: &Value) {
    println!("{v}");
}

/// A JSON field as table text: strings bare, absent as `-`, anything else
/// as compact JSON.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) if s.is_empty() => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `cell`, cut to `max` characters (with `…`) so one long value (an error,
/// a URL) does not push every other column off the screen.
pub fn short(v: &Value, max: usize) -> String {
    let s = cell(v).replace(['\n', '\r', '\t'], " ");
    if s.chars().count() <= max {
        return s;
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Columns padded to their widest cell, two spaces apart; the last column
/// is not padded.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table { headers: headers.to_vec(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for r in std::iter::once(&header).chain(&self.rows) {
            let last = r.len().saturating_sub(1);
            let mut line = String::new();
            for (i, (c, w)) in r.iter().zip(&widths).enumerate() {
                if i == last {
                    line.push_str(c);
                } else {
                    let _ = write!(line, "{c}{}  ", " ".repeat(w - c.chars().count()));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    pub fn print(&self) {
        print!("{}", self.render());
    }
}

/// `key: value` lines, keys aligned, for one resource; absent fields are
/// left out.
pub fn fields(v: &Value, keys: &[&str]) -> String {
    let width = keys.iter().map(|k| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for k in keys {
        let f = &v[*k];
        if f.is_null() {
            continue;
        }
        let _ = writeln!(out, "{k:<width$}  {}", cell(f));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn columns_line_up_on_the_widest_cell() {
        let mut t = Table::new(&["ID", "STATUS", "ERROR"]);
        t.row(vec!["run_1".into(), "completed".into(), "-".into()]);
        t.row(vec!["run_22".into(), "failed".into(), "boom".into()]);
        assert_eq!(t.render(), "ID      STATUS     ERROR\nrun_1   completed  -\nrun_22  failed     boom\n");
    }

    #[test]
    fn cells_are_plain_text() {
        assert_eq!(cell(&json!("a")), "a");
        assert_eq!(cell(&json!(null)), "-");
        assert_eq!(cell(&json!(3)), "3");
        assert_eq!(cell(&json!({"a": 1})), "{\"a\":1}");
        assert_eq!(short(&json!("abcdef"), 4), "abc…");
        assert_eq!(short(&json!("line\nbreak"), 20), "line break");
    }

    #[test]
    fn fields_skip_what_is_absent() {
        let v = json!({"id": "run_1", "status": "queued"});
        assert_eq!(fields(&v, &["id", "error", "status"]), "id      run_1\nstatus  queued\n");
    }
}
