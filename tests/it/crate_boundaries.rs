//! Which crate may depend on which: the api and the scheduler share code
//! with the worker only through `switchyard-shared`, so the worker's
//! internals can change without touching the other two processes.

use std::path::Path;

/// The lines of a Cargo manifest that are not comments.
fn manifest_lines(crate_dir: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(crate_dir).join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines().map(|l| l.split('#').next().unwrap_or_default().trim().to_string()).filter(|l| !l.is_empty()).collect()
}

/// Whether a manifest names `krate` outside comments: as a dependency key
/// (`[dependencies]`, `[dev-dependencies]`, a target table) or as the
/// `package` a dependency is renamed from.
fn names_crate(lines: &[String], krate: &str) -> bool {
    lines.iter().any(|l| l.contains(krate))
}

#[test]
fn only_the_worker_and_the_cli_depend_on_the_worker_crate() {
    for dir in ["api", "scheduler", "shared"] {
        let lines = manifest_lines(dir);
        assert!(lines.iter().any(|l| l.starts_with("name = \"switchyard-")), "{dir}/Cargo.toml is a switchyard crate");
        assert!(
            !names_crate(&lines, "switchyard-worker"),
            "{dir}/Cargo.toml depends on switchyard-worker; share code through switchyard-shared instead"
        );
    }
    // The check sees a dependency where there is one.
    assert!(names_crate(&manifest_lines("."), "switchyard-worker"), "the CLI runs the worker in `switchyard dev`");
}
