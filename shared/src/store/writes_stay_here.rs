//! A run's row and its history are written only in `shared/src/store`, so
//! that each change of a status has one home that records its event and
//! counts it. This test reads the workspace's other sources (api, worker,
//! scheduler, the `switchyard` binary, the rest of shared; not tests) and
//! fails on any SQL string there that writes `job_runs` or
//! `job_run_events`, or assigns a `status` in an UPDATE. Reading runs
//! (`WHERE status = ...`) is fine anywhere. A second test reads every
//! source for the statements that set a workflow step's status: each must
//! return its stage changes (`deliveries::STAGE_RETURNING`), which no
//! trigger writes for it.

use std::path::{Path, PathBuf};

/// The string literals of Rust source `src` (plain, raw and byte strings),
/// with escapes left as written. Comments and char literals are skipped.
fn string_literals(src: &str) -> Vec<String> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            // A raw string: r"..." or r#"..."# (also br).
            b'r' if (i == 0 || !ident(b[i - 1]) || (b[i - 1] == b'b' && (i < 2 || !ident(b[i - 2]))))
                && matches!(b.get(i + 1), Some(b'"') | Some(b'#')) =>
            {
                let mut j = i + 1;
                while b.get(j) == Some(&b'#') {
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let hashes = j - i - 1;
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                let start = j + 1;
                let end = src[start..].find(std::str::from_utf8(&close).unwrap()).map_or(b.len(), |e| start + e);
                out.push(src[start..end].to_string());
                i = end + close.len();
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                out.push(src[start..j.min(b.len())].to_string());
                i = j + 1;
            }
            // A char literal ('x', '\n', '"'); otherwise a lifetime.
            b'\'' => {
                if b.get(i + 1) == Some(&b'\\') {
                    let mut j = i + 2;
                    while j < b.len() && b[j] != b'\'' {
                        j += 1;
                    }
                    i = j + 1;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// Lower case, escapes and line breaks as single spaces.
fn normalized(sql: &str) -> String {
    let mut s = String::with_capacity(sql.len());
    for w in sql.replace("\\n", " ").replace('\\', " ").split_whitespace() {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(&w.to_lowercase());
    }
    s
}

/// Why the SQL string `sql` may only be in the store, if it may.
fn violation(sql: &str) -> Option<&'static str> {
    let s = normalized(sql);
    for (write, why) in [
        ("update job_runs", "updates job_runs"),
        ("insert into job_runs", "inserts into job_runs"),
        ("delete from job_runs", "deletes from job_runs"),
        ("insert into job_run_events", "writes a run's history"),
    ] {
        if s.contains(write) {
            return Some(why);
        }
    }
    // `UPDATE <any table> SET ... status = ...`: the SET list runs up to its
    // WHERE, FROM or RETURNING.
    let mut rest = s.as_str();
    while let Some(at) = rest.find("update ") {
        rest = &rest[at + "update ".len()..];
        let Some(set) = rest.find(" set ") else { continue };
        let list = &rest[set + " set ".len()..];
        let end = [" where ", " from ", " returning ", ";"].iter().filter_map(|k| list.find(k)).min();
        let list = &list[..end.unwrap_or(list.len())];
        if assigns(list, "status") {
            return Some("assigns a status");
        }
    }
    None
}

/// Whether the SET list `list` assigns the column `col` (also `x.col`).
fn assigns(list: &str, col: &str) -> bool {
    list.match_indices(col).any(|(at, _)| {
        let before = list[..at].chars().next_back();
        let after = list[at + col.len()..].trim_start();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && after.starts_with('=')
            && !after.starts_with("==")
    })
}

/// Whether the SQL string `sql` changes a workflow step's status without
/// returning what its stage deliveries are written from (RETURNING
/// `deliveries::STAGE_RETURNING`, a `{}` in the format string; see
/// `deliveries::step_stages`). A step taken back to `pending` has no stage.
fn unnotified_step_status(sql: &str) -> bool {
    let s = normalized(sql);
    let Some(at) = s.find("update workflow_step_runs") else { return false };
    let rest = &s[at..];
    let Some(set) = rest.find(" set ") else { return false };
    let list = &rest[set + " set ".len()..];
    let end = [" where ", " from ", " returning ", ";"].iter().filter_map(|k| list.find(k)).min();
    let list = &list[..end.unwrap_or(list.len())];
    let returned = rest.find(" returning ").is_some_and(|r| {
        let returning = &rest[r..];
        returning[..returning.find(')').unwrap_or(returning.len())].contains("{}")
    });
    assigns(list, "status") && !list.contains("status = 'pending'") && !returned
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_sql_outside_the_store_writes_a_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let store = root.join("shared/src/store");
    let mut files = Vec::new();
    for dir in ["api/src", "worker/src", "scheduler/src", "shared/src", "src"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 20, "the sources were found under {}", root.display());
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(&store)) {
        let src = std::fs::read_to_string(f).unwrap();
        for lit in string_literals(&src) {
            if let Some(why) = violation(&lit) {
                let shown: String = normalized(&lit).chars().take(120).collect();
                found.push(format!("{} {why}: {shown}", f.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(found.is_empty(), "SQL that writes runs belongs in shared/src/store:\n{}", found.join("\n"));
}

/// Stage notifications are written by the code that changes a step, not
/// by a trigger (migration 0029): a statement that sets a step's status
/// and returns nothing for them would change steps silently.
#[test]
fn every_change_of_a_steps_status_returns_its_stage_changes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let mut files = Vec::new();
    for dir in ["api/src", "worker/src", "scheduler/src", "shared/src", "src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut found = Vec::new();
    let mut seen = 0;
    for f in files.iter().filter(|f| !f.ends_with("writes_stay_here.rs")) {
        let src = std::fs::read_to_string(f).unwrap();
        for lit in string_literals(&src) {
            seen += usize::from(normalized(&lit).contains("update workflow_step_runs"));
            if unnotified_step_status(&lit) {
                let shown: String = normalized(&lit).chars().take(120).collect();
                found.push(format!("{}: {shown}", f.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(seen >= 5, "the updates of workflow_step_runs were found ({seen})");
    assert!(found.is_empty(), "a step's status changes without its stage deliveries:\n{}", found.join("\n"));
    assert!(unnotified_step_status("UPDATE workflow_step_runs s SET status = $2 WHERE id = $1"));
    assert!(!unnotified_step_status("UPDATE workflow_step_runs s SET status = $2 WHERE id = $1 RETURNING {}"));
    assert!(!unnotified_step_status(
        "WITH h AS (UPDATE workflow_step_runs s SET status = 'x' RETURNING s.a, {}) SELECT"
    ));
    assert!(unnotified_step_status("WITH h AS (UPDATE workflow_step_runs s SET status = 'x' RETURNING s.a) SELECT {}"));
    assert!(!unnotified_step_status("UPDATE workflow_step_runs SET status = 'pending', output = NULL WHERE x"));
    assert!(!unnotified_step_status("UPDATE workflow_step_runs SET emitted_event_id = $2 WHERE id = $1"));
}

#[test]
fn writes_are_told_from_reads() {
    for sql in [
        "UPDATE job_runs SET metadata = $2 WHERE id = $1",
        "WITH u AS (\n    UPDATE job_runs r SET status = 'cancelled' FROM old WHERE r.id = old.id) SELECT 1",
        "update  JOB_RUNS\\n   set progress = 1",
        "INSERT INTO job_run_events (run_id) VALUES ($1)",
        "INSERT INTO job_runs (id) VALUES ($1)",
        "DELETE FROM job_runs WHERE id = $1",
        "UPDATE runs_view SET error = NULL, status = 'queued' WHERE id = $1",
        "UPDATE t SET r.status=$2",
    ] {
        assert!(violation(sql).is_some(), "{sql}");
    }
    for sql in [
        "SELECT id FROM job_runs WHERE status = 'queued'",
        "UPDATE jobs SET deleted_at = now() WHERE id = $1 AND status = 'x'",
        "UPDATE job_run_tool_calls_x SET from_status = 1",
        "UPDATE run_batches SET created = $2 FROM job_runs r WHERE r.status = 'queued'",
        "CREATE TRIGGER t AFTER UPDATE ON job_runs FOR EACH ROW",
        "SELECT status, count(*) FROM job_runs GROUP BY status",
    ] {
        assert_eq!(violation(sql), None, "{sql}");
    }
}

#[test]
fn literals_are_found_and_comments_are_not() {
    let src = r####"
        // "UPDATE job_runs SET status = 'x'" in a comment
        /* "so is this" */
        let a = 'x'; let q = '"'; let l: &'static str = "one \" two";
        let r = r#"raw "quoted" text"#;
        let b = br"bytes";
    "####;
    assert_eq!(string_literals(src), ["one \\\" two", "raw \"quoted\" text", "bytes"]);
}
