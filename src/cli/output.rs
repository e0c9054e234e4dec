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

/// Chooses how wide tables may be for this process's output.
pub fn set_format(f: Format) {
    let width = match f {
        Format::Table => terminal_width(),
        Format::Wide | Format::Json => None,
    };
    let _ = WIDTH.set(width);
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

    /// The table in at most `width` columns when given: the rightmost
    /// columns are left out while the rest would not fit even cut, then the
    /// widest cells but the first column's (the id a person copies) are
    /// cut, each down to its header's width or 6.
    pub fn render_within(&self, width: Option<usize>) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut shown = widths.len();
        if let Some(max) = width {
            let total = |ws: &[usize]| ws.iter().sum::<usize>() + 2 * ws.len().saturating_sub(1);
            let floor: Vec<usize> = (0..widths.len())
                .map(|i| if i == 0 { widths[0] } else { widths[i].min(self.headers[i].chars().count().max(6)) })
                .collect();
            while shown > 1 && total(&floor[..shown]) > max {
                shown -= 1;
            }
            while total(&widths[..shown]) > max {
                match (1..shown).filter(|&i| widths[i] > floor[i]).max_by_key(|&i| widths[i]) {
                    Some(i) => widths[i] -= 1,
                    None => break,
                }
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for r in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (c, w)) in r.iter().zip(&widths).take(shown).enumerate() {
                let c = cut(c, *w);
                if i + 1 == shown {
                    line.push_str(&c);
                } else {
                    let _ = write!(line, "{c}{}  ", " ".repeat(w - c.chars().count()));
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
    fn a_narrow_width_cuts_the_widest_cells_then_drops_columns() {
        let mut t = Table::new(&["ID", "STATUS", "ERROR"]);
        t.row(vec!["run_1".into(), "completed".into(), "a long error message".into()]);
        assert_eq!(t.render_within(Some(30)), "ID     STATUS     ERROR\nrun_1  completed  a long erro…\n");
        assert!(t.render_within(Some(30)).lines().all(|l| l.chars().count() <= 30));
        assert_eq!(t.render_within(Some(16)), "ID     STATUS\nrun_1  completed\n");
        assert_eq!(t.render_within(None), t.render());
        assert!(t.render().contains("a long error message"));
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
