//! How answers are shown: aligned tables and `key: value` blocks for people,
//! the API's JSON unchanged for scripts (`--output json`, or `--json`).
//!
//! A table fits the terminal: its widest cells are cut (with `…`) and, if
//! that is not enough, its rightmost columns are left out. The width is
//! `COLUMNS` when set, else the terminal's (`stty size`) when stdout is one;
//! piped output is never cut, nor is `--output wide`.

use std::fmt::Write;
use std::io::IsTerminal;
use std::sync::OnceLock;

use serde_json::Value;

/// How answers are printed (`--output`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// Tables that fit the terminal.
    #[default]
    Table,
    /// Tables with every column, nothing cut.
    Wide,
    /// The API's JSON as it came, one document.
    Json,
}

/// The width tables are fitted to, chosen once per process (`set_format`).
static WIDTH: OnceLock<Option<usize>> = OnceLock::new();
/// Whether tables show values whole (`--output wide`).
static WIDE: OnceLock<bool> = OnceLock::new();

/// Chooses how wide tables may be for this process's output.
pub fn set_format(f: Format) {
    let width = match f {
        Format::Table => terminal_width(),
        Format::Wide | Format::Json => None,
    };
    let _ = WIDTH.set(width);
    let _ = WIDE.set(f == Format::Wide);
}

/// `COLUMNS` when it is a number (a person asked for that width, piped or
/// not), else the terminal's when stdout is one (100 when it cannot be
/// told), else none: piped output is for grep and awk, which want whole
/// values.
fn terminal_width() -> Option<usize> {
    if let Some(n) = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok()).filter(|n| *n > 0) {
        return Some(n);
    }
    if !std::io::stdout().is_terminal() {
        return None;
    }
    Some(stty_columns().unwrap_or(100))
}

/// The terminal's columns as `stty size` reads them from /dev/tty (the
/// workspace forbids the `unsafe` an ioctl would need).
fn stty_columns() -> Option<usize> {
    let tty = std::fs::File::open("/dev/tty").ok()?;
    let out =
        std::process::Command::new("stty").arg("size").stdin(tty).stderr(std::process::Stdio::null()).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace().nth(1)?.parse().ok().filter(|n: &usize| *n > 0)
}

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

/// A timestamp as table text: `2026-11-28T10:18:34Z` for the API's UTC
/// `2026-11-28T10:18:34.451644+00:00` (the fraction and the long offset
/// cost a narrow table a column); whole with `--output wide`, or when it
/// is not UTC.
pub fn time(v: &Value) -> String {
    let s = cell(v);
    let utc = s.len() > 19 && s.is_char_boundary(19) && s.as_bytes()[10] == b'T' && s.ends_with("+00:00");
    if !utc || WIDE.get().copied().unwrap_or(false) {
        return s;
    }
    format!("{}Z", &s[..19])
}

/// Columns padded to their widest cell, two spaces apart; the last column
/// is not padded.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    /// Columns a narrow terminal does without first, in this order.
    optional: Vec<&'static str>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table { headers: headers.to_vec(), rows: Vec::new(), optional: Vec::new() }
    }

    /// Names the columns of least value: when the table is too wide they
    /// are left out, in this order, before any cell is cut.
    pub fn optional(mut self, headers: &[&'static str]) -> Table {
        self.optional = headers.to_vec();
        self
    }

    /// One row; line breaks and tabs in a cell become spaces, so a row is
    /// one line.
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells.into_iter().map(|c| c.replace(['\n', '\r', '\t'], " ")).collect());
    }

    /// The table with every cell whole.
    #[cfg(test)]
    pub fn render(&self) -> String {
        self.render_within(None)
    }

    /// The table in at most `width` columns when given: first the optional
    /// columns are left out, then the rightmost ones while the rest would
    /// not fit even cut; then the widest cells but the first column's (the
    /// id a person copies) are cut, none below 10 characters (or its
    /// header's width), so a status stays whole.
    pub fn render_within(&self, width: Option<usize>) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        // The columns shown, by index, in their order.
        let mut shown: Vec<usize> = (0..widths.len()).collect();
        if let Some(max) = width {
            let total = |cols: &[usize], ws: &[usize]| {
                cols.iter().map(|&i| ws[i]).sum::<usize>() + 2 * cols.len().saturating_sub(1)
            };
            let floor: Vec<usize> = (0..widths.len())
                .map(|i| if i == 0 { widths[0] } else { widths[i].min(self.headers[i].chars().count().max(10)) })
                .collect();
            for name in &self.optional {
                if total(&shown, &widths) <= max {
                    break;
                }
                shown.retain(|&i| i == 0 || self.headers[i] != *name);
            }
            while shown.len() > 1 && total(&shown, &floor) > max {
                shown.pop();
            }
            while total(&shown, &widths) > max {
                match shown.iter().copied().filter(|&i| widths[i] > floor[i]).max_by_key(|&i| widths[i]) {
                    Some(i) => widths[i] -= 1,
                    None => break,
                }
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for r in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (n, &i) in shown.iter().enumerate() {
                let c = cut(&r[i], widths[i]);
                if n + 1 == shown.len() {
                    line.push_str(&c);
                } else {
                    let _ = write!(line, "{c}{}  ", " ".repeat(widths[i] - c.chars().count()));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// Prints the table, fitted to the width `set_format` chose.
    pub fn print(&self) {
        print!("{}", self.render_within(WIDTH.get().copied().flatten()));
    }
}

/// `s` in at most `max` characters, the last one `…` when cut.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
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
    fn a_narrow_width_drops_optional_columns_then_cuts_the_widest_cells() {
        let mut t = Table::new(&["ID", "JOB", "STATUS", "ERROR"]).optional(&["JOB"]);
        t.row(vec!["run_1".into(), "job_1".into(), "completed".into(), "a long error message".into()]);
        assert_eq!(t.render_within(Some(30)), "ID     STATUS     ERROR\nrun_1  completed  a long erro…\n");
        assert!(t.render_within(Some(30)).lines().all(|l| l.chars().count() <= 30));
        assert_eq!(t.render_within(Some(16)), "ID     STATUS\nrun_1  completed\n");
        assert_eq!(t.render_within(Some(60)), t.render(), "what fits is whole");
        assert_eq!(t.render_within(None), t.render());
        assert!(t.render().contains("a long error message"));
    }

    #[test]
    fn utc_times_are_short_in_tables() {
        assert_eq!(time(&json!("2026-11-28T10:18:34.451644+00:00")), "2026-11-28T10:18:34Z");
        assert_eq!(time(&json!("2026-11-28T10:18:34+02:00")), "2026-11-28T10:18:34+02:00");
        assert_eq!(time(&json!(null)), "-");
    }

    #[test]
    fn cells_are_plain_text() {
        assert_eq!(cell(&json!("a")), "a");
        assert_eq!(cell(&json!(null)), "-");
        assert_eq!(cell(&json!(3)), "3");
        assert_eq!(cell(&json!({"a": 1})), "{\"a\":1}");
        assert_eq!(cut("abcdef", 4), "abc…");
    }

    #[test]
    fn fields_skip_what_is_absent() {
        let v = json!({"id": "run_1", "status": "queued"});
        assert_eq!(fields(&v, &["id", "error", "status"]), "id      run_1\nstatus  queued\n");
    }
}
