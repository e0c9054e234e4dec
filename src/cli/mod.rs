//! The operator commands of `switchyard`: `runs`, `jobs`, `workflows`,
//! `queues` and `dlq`. Each talks to the public HTTP API only (the same
//! calls as curl or an SDK), so it works against any deployment it can
//! reach with a token.
//!
//! - [`client`]: the HTTP call and the exit code a failure maps to.
//! - [`follow`]: following a run or a workflow run through its live stream
//!   (`--wait`, `watch`).
//! - [`output`]: tables that fit the terminal and `key value` blocks for
//!   people, `--output json` for scripts.
//! - [`runs`], [`jobs`], [`workflows`], [`queues`], [`dlq`]: one file per
//!   resource, each a clap subcommand and its handlers.

pub mod client;
pub mod dlq;
pub mod follow;
pub mod jobs;
pub mod output;
pub mod queues;
pub mod runs;
pub mod workflows;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

pub use client::exit;
use client::Client;

/// The exit codes, as `--help` shows them (docs/cli.md says the same).
pub const EXIT_CODES: &str = "Exit codes:
  0  success
  1  the outcome was not success: a run waited on (--wait) did not complete,
     or an item of a bulk call (dlq replay) failed
  2  usage error: unknown command or flag, a value not among a flag's
     (--status, --output, --level), --payload or --file not JSON, an
     unreadable file
  3  the API answered 404: no such run, job or workflow (in this project)
  4  the API refused the request (another 4xx: 400, 401, 403, 409, 422, 429)
  5  the API failed (5xx) or could not be reached
  6  --wait gave up (--timeout) before the run ended
The API's problem title and detail go to stderr.";

/// The operator commands (flattened into `switchyard`'s own).
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Job runs: list, get, events, logs, watch, cancel, replay.
    Runs(runs::Runs),
    /// Jobs: list, get, create, update, trigger (and wait), pause, resume,
    /// disable, enable.
    Jobs(jobs::Jobs),
    /// Workflows: list, create, update, trigger (and wait); workflow runs:
    /// get, watch, approve, reject and skip a step.
    Workflows(workflows::Workflows),
    /// Queue depths per job of a project.
    Queues(queues::Queues),
    /// The dead-letter queue: failed and timed-out runs with no attempt left.
    Dlq(dlq::Dlq),
}

/// Where the API is and who calls it; every operator command takes these.
#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "API")]
pub struct Global {
    /// Base URL of the Switchyard API.
    #[arg(
        long,
        global = true,
        env = "SWITCHYARD_API",
        hide_env_values = true,
        default_value = "http://127.0.0.1:8080"
    )]
    pub api: String,
    /// An API key (`svc_...`) or the internal secret, sent as
    /// `Authorization: Bearer`.
    #[arg(long, global = true, env = "SWITCHYARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The project to act in: needed with the internal secret, implied by
    /// an API key.
    #[arg(long, global = true, env = "SWITCHYARD_PROJECT", hide_env_values = true)]
    pub project: Option<String>,
    /// How to print answers: `table` fits the terminal (cut cells, fewer
    /// columns), `wide` keeps every column whole, `json` is the API's JSON
    /// as it came.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = output::Format::Table)]
    pub output: output::Format,
    /// Same as `--output json`.
    #[arg(long, global = true)]
    pub json: bool,
}

impl Global {
    /// Whether answers are printed as the API's JSON (`--output json` or
    /// `--json`).
    pub fn is_json(&self) -> bool {
        self.json || self.output == output::Format::Json
    }

    /// The body of a create call: the file's JSON, with `--project` as its
    /// `project_id` when the file names none.
    fn with_project(&self, mut body: Value) -> Value {
        if let (Some(p), Some(obj)) = (&self.project, body.as_object_mut()) {
            obj.entry("project_id").or_insert_with(|| Value::String(p.clone()));
        }
        body
    }

    /// `project_id` for a query, when a project was named.
    fn project_query(&self) -> Vec<(&'static str, String)> {
        self.project.iter().map(|p| ("project_id", p.clone())).collect()
    }
}

/// How much of a list to show.
#[derive(Args, Clone, Debug)]
pub struct Paging {
    /// Show at most this many items; pages of up to 100 are followed
    /// until there are this many.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// Start after this position: the `next_cursor` an earlier listing
    /// printed.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// Why a command failed, and the exit code that says so.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into() }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(exit::USAGE, message)
    }
}

/// Runs one operator command; returns the process's exit code, having
/// printed any failure on stderr.
pub async fn run(cmd: Command) -> u8 {
    let g = match &cmd {
        Command::Runs(c) => &c.global,
        Command::Jobs(c) => &c.global,
        Command::Workflows(c) => &c.global,
        Command::Queues(c) => &c.global,
        Command::Dlq(c) => &c.global,
    };
    output::set_format(if g.json { output::Format::Json } else { g.output });
    let outcome = match cmd {
        Command::Runs(c) => runs::run(c).await,
        Command::Jobs(c) => jobs::run(c).await,
        Command::Workflows(c) => workflows::run(c).await,
        Command::Queues(c) => queues::run(c).await,
        Command::Dlq(c) => dlq::run(c).await,
    };
    match outcome {
        Ok(code) => code,
        Err(f) => {
            eprintln!("switchyard: {}", f.message);
            f.code
        }
    }
}

/// Up to `paging.limit` items of a list endpoint, following its cursor.
/// One page is returned exactly as the API sent it; several are joined
/// into one page of the same shape (`data`, `has_more`, `next_cursor` of
/// the last one).
pub async fn list(client: &Client, path: &str, query: &[(&str, String)], paging: &Paging) -> Result<Value, Failure> {
    let mut want = paging.limit as usize;
    let mut cursor = paging.cursor.clone();
    let mut data = Vec::new();
    let mut pages = 0;
    loop {
        let mut q = query.to_vec();
        q.push(("limit", want.min(100).to_string()));
        if let Some(c) = &cursor {
            q.push(("cursor", c.clone()));
        }
        let page = client.get(path, &q).await?;
        pages += 1;
        let items = page["data"].as_array().cloned().unwrap_or_default();
        want = want.saturating_sub(items.len());
        let next = page["next_cursor"].as_str().map(str::to_string);
        let more = page["has_more"].as_bool().unwrap_or(false);
        if pages == 1 && (want == 0 || !more || next.is_none()) {
            return Ok(page);
        }
        data.extend(items);
        if want == 0 || !more || next.is_none() {
            let mut out = json!({"data": data, "has_more": more});
            if let Some(n) = next.filter(|_| more) {
                out["next_cursor"] = Value::String(n);
            }
            return Ok(out);
        }
        cursor = next;
    }
}

/// A page of a list as a table, one row per item, and where the next page
/// starts.
/// `optional` names the columns a narrow terminal does without first.
pub fn print_page(
    page: &Value,
    headers: &[&'static str],
    optional: &[&'static str],
    row: impl Fn(&Value) -> Vec<String>,
) {
    let mut t = output::Table::new(headers).optional(optional);
    for item in page["data"].as_array().into_iter().flatten() {
        t.row(row(item));
    }
    t.print();
    print_more(page);
}

/// Tells people where the next page starts (on stderr: stdout keeps the
/// table alone).
fn print_more(page: &Value) {
    if page["has_more"].as_bool() == Some(true) {
        if let Some(c) = page["next_cursor"].as_str() {
            eprintln!("more: --cursor {c}");
        }
    }
}

/// A `--payload`: JSON text, `@path` for a file's content, `@-` for stdin.
pub fn read_payload(arg: &str) -> Result<Value, Failure> {
    let (text, from) = match arg.strip_prefix('@') {
        Some("-") => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| Failure::usage(format!("--payload @-: cannot read stdin: {e}")))?;
            (s, "stdin".to_string())
        }
        Some(path) => (
            std::fs::read_to_string(path).map_err(|e| Failure::usage(format!("--payload @{path}: {e}")))?,
            path.to_string(),
        ),
        None => (arg.to_string(), "--payload".to_string()),
    };
    serde_json::from_str(&text).map_err(|e| Failure::usage(format!("{from} is not JSON: {e}")))
}

/// A `--file`: a JSON object from a file, `-` for stdin (JSON only: the
/// CLI reads no YAML).
pub fn read_file(path: &str) -> Result<Value, Failure> {
    let text = if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| Failure::usage(format!("--file -: cannot read stdin: {e}")))?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| Failure::usage(format!("--file {path}: {e}")))?
    };
    let from = if path == "-" { "stdin" } else { path };
    let v: Value = serde_json::from_str(&text).map_err(|e| Failure::usage(format!("{from} is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(Failure::usage(format!("{from}: a JSON object is needed, not {v:.40}")));
    }
    Ok(v)
}

/// Path segments come from the command line: keep them one segment.
pub fn seg(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>().replace('+', "%20")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_json_a_file_or_a_usage_error() {
        assert_eq!(read_payload(r#"{"to":"ada"}"#).unwrap(), json!({"to": "ada"}));
        let dir = std::env::temp_dir().join(format!("sy-cli-{}", std::process::id()));
        std::fs::write(&dir, "[1, 2]").unwrap();
        assert_eq!(read_payload(&format!("@{}", dir.display())).unwrap(), json!([1, 2]));
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(read_payload("{nope").unwrap_err().code, exit::USAGE);
        assert_eq!(read_payload("@/no/such/file").unwrap_err().code, exit::USAGE);
    }

    #[test]
    fn a_file_is_one_json_object() {
        let path = std::env::temp_dir().join(format!("sy-cli-file-{}", std::process::id()));
        std::fs::write(&path, r#"{"name":"n"}"#).unwrap();
        assert_eq!(read_file(&path.to_string_lossy()).unwrap(), json!({"name": "n"}));
        std::fs::write(&path, "[1]").unwrap();
        assert_eq!(read_file(&path.to_string_lossy()).unwrap_err().code, exit::USAGE);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(read_file("/no/such/file").unwrap_err().code, exit::USAGE);
    }

    #[test]
    fn a_path_segment_stays_one_segment() {
        assert_eq!(seg("run_01"), "run_01");
        assert_eq!(seg("a/b c"), "a%2Fb%20c");
    }
}
