//! The operator CLI (`switchyard runs|jobs|workflows|queues|dlq`) run as a
//! separate process against a test system's API: what it prints, and the
//! exit codes scripts rely on (docs/cli.md).

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{TestEnv, SECRET};
use crate::support::sdk::{accepted_async_run, sdk_post};
use crate::target::{refused_url, Reply, Target};

const T: Duration = Duration::from_secs(20);

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}\n--- stdout\n{}--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

/// `switchyard <args>` with the API and token from the environment
/// variables the CLI reads.
async fn cli(env: &TestEnv, args: &[&str]) -> Out {
    cli_with(args, &[("SWITCHYARD_API", env.base.as_str()), ("SWITCHYARD_TOKEN", SECRET)]).await
}

async fn cli_with(args: &[&str], vars: &[(&str, &str)]) -> Out {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .env_remove("SWITCHYARD_API")
        .env_remove("SWITCHYARD_TOKEN")
        .env_remove("SWITCHYARD_PROJECT")
        .envs(vars.iter().copied())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(T * 2, out).await.expect("the CLI finishes").expect("the CLI starts");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn id(v: &Value) -> &str {
    v["id"].as_str().unwrap()
}

#[tokio::test]
async fn trigger_wait_get_list_and_not_found() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::json(200, r#"{"sent":true}"#));
    let project = env.project().await;
    let job = env.job_in(&project, &target.url, json!({})).await;
    env.spawn_worker();

    let o = cli(&env, &["jobs", "trigger", id(&job), "--payload", r#"{"to":"ada"}"#, "--wait"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.contains("completed"), "{o:?}");
    let first = o.stderr.lines().next().unwrap_or_default();
    assert!(first.starts_with("run run_") && first.contains("waiting for it to end"), "--wait says so at once: {o:?}");
    assert!(o.stderr.lines().any(|l| l.contains("completed")), "and each change of status: {o:?}");
    assert!(!o.stdout.contains("waiting"), "stdout keeps the run alone: {o:?}");
    let run_id = o.stdout.lines().find_map(|l| l.strip_prefix("id")).map(str::trim).expect("an id line").to_string();
    assert_eq!(target.requests()[0].body["payload"], json!({"to": "ada"}));

    let o = cli(&env, &["runs", "get", &run_id]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.lines().any(|l| l.starts_with("status") && l.ends_with("completed")), "{o:?}");
    assert!(o.stdout.contains(r#"{"sent":true}"#), "the result is shown: {o:?}");
    let trace = o.stdout.lines().find_map(|l| l.strip_prefix("trace_id")).map(str::trim).expect("a trace_id line");
    assert!(trace.len() == 32 && trace.bytes().all(|b| b.is_ascii_hexdigit()), "{o:?}");
    let o = cli(&env, &["runs", "get", &run_id, "--json"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let v = o.json();
    assert_eq!((v["id"].as_str(), v["status"].as_str()), (Some(run_id.as_str()), Some("completed")));

    // A listing as a table (header first) and as the API's page.
    let o = cli(&env, &["runs", "list", "--project", &project]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let mut lines = o.stdout.lines();
    assert!(lines.next().unwrap().starts_with("ID "), "{o:?}");
    assert!(lines.next().unwrap().starts_with(&run_id), "{o:?}");
    let o = cli(&env, &["runs", "list", "--project", &project, "--status", "completed", "--json"]).await;
    assert_eq!(o.json()["data"][0]["id"], json!(run_id), "{o:?}");
    let o = cli(&env, &["jobs", "list", "--project", &project]).await;
    assert!(o.code == 0 && o.stdout.contains(id(&job)), "{o:?}");
    let o = cli(&env, &["jobs", "get", id(&job), "--json"]).await;
    assert_eq!(o.json()["endpoint_url"], json!(target.url), "{o:?}");

    // Not found is 3, with the problem on stderr; a refused request is 4.
    let o = cli(&env, &["runs", "get", "run_does_not_exist"]).await;
    assert_eq!(o.code, 3, "{o:?}");
    assert!(o.stderr.contains("404"), "{o:?}");
    assert!(o.stdout.is_empty(), "{o:?}");
    let o = cli(&env, &["runs", "cancel", &run_id]).await;
    assert_eq!(o.code, 4, "a finished run cannot be cancelled (409): {o:?}");
    assert!(o.stderr.contains("409"), "{o:?}");
    let o = cli_with(&["runs", "list", "--project", &project], &[("SWITCHYARD_API", env.base.as_str())]).await;
    assert_eq!(o.code, 4, "no token is 401: {o:?}");

    // Replay: a new run of the same job.
    let o = cli(&env, &["runs", "replay", &run_id, "--json"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let replay = o.json();
    assert_eq!(replay["continuation_of"], json!(run_id));
    env.wait_status(id(&replay), "completed", T).await;
}

#[tokio::test]
async fn flags_usage_errors_and_an_unreachable_api() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    // --api and --token as flags, after the subcommand.
    let o = cli_with(&["jobs", "list", "--api", &env.base, "--token", SECRET, "--project", &project], &[]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.starts_with("ID "), "an empty table keeps its header: {o:?}");

    let o = cli(&env, &["jobs", "trigger", "job_x", "--payload", "{not json"]).await;
    assert_eq!(o.code, 2, "{o:?}");
    assert!(o.stderr.contains("not JSON"), "{o:?}");
    let o = cli(&env, &["jobs", "trigger", "job_x", "--payload", "@/no/such/file"]).await;
    assert_eq!(o.code, 2, "{o:?}");
    let o = cli(&env, &["runs", "frobnicate"]).await;
    assert_eq!(o.code, 2, "{o:?}");
    let o = cli(&env, &["runs", "list", "--limit", "0"]).await;
    assert_eq!(o.code, 2, "{o:?}");

    let nowhere = refused_url().await.trim_end_matches("/hook").to_string();
    let o = cli_with(&["runs", "get", "run_1", "--api", &nowhere, "--token", SECRET], &[]).await;
    assert_eq!(o.code, 5, "{o:?}");
    assert!(o.stderr.contains("cannot reach the API"), "{o:?}");

    let o = cli_with(&["--help"], &[]).await;
    assert_eq!(o.code, 0);
    for line in ["runs", "jobs", "workflows", "queues", "dlq", "dev", "scheduler", "Exit codes:"] {
        assert!(o.stdout.contains(line), "{line}: {o:?}");
    }
}

#[tokio::test]
async fn pause_holds_runs_until_resume_and_disable_refuses_triggers() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    env.spawn_worker();
    let o = cli(&env, &["jobs", "pause", id(&job)]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.contains("paused=true"), "{o:?}");
    let o = cli(&env, &["jobs", "trigger", id(&job), "--json"]).await;
    assert_eq!(o.code, 0, "a paused job accepts triggers: {o:?}");
    let run = o.json()["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(env.run(&run).await["status"], "queued", "held while paused");
    assert_eq!(target.count(), 0);

    let o = cli(&env, &["jobs", "resume", id(&job), "--json"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(o.json()["paused"], json!(false));
    env.wait_status(&run, "completed", Duration::from_secs(10)).await;

    let o = cli(&env, &["jobs", "disable", id(&job)]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.contains("enabled=false"), "{o:?}");
    let o = cli(&env, &["jobs", "trigger", id(&job)]).await;
    assert_eq!(o.code, 4, "a disabled job's trigger is 409: {o:?}");
    let o = cli(&env, &["jobs", "enable", id(&job), "--json"]).await;
    assert_eq!((o.code, &o.json()["enabled"]), (0, &json!(true)), "{o:?}");
}

#[tokio::test]
async fn a_failed_run_lands_in_the_dlq_and_is_replayed() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::json(422, r#"{"error":"bad address"}"#));
    let project = env.project().await;
    let job = env.job_in(&project, &target.url, json!({"max_attempts": 1})).await;
    env.spawn_worker();

    let o = cli(&env, &["jobs", "trigger", id(&job), "--wait", "--project", &project]).await;
    assert_eq!(o.code, 1, "the run failed: {o:?}");
    assert!(o.stdout.lines().any(|l| l.starts_with("status") && l.ends_with("failed")), "{o:?}");
    let failed = env.get(&format!("/v1/runs?project_id={project}")).await.1["data"][0].clone();

    let o = cli(&env, &["dlq", "list", "--project", &project]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.lines().nth(1).unwrap_or_default().starts_with(id(&failed)), "{o:?}");
    let o = cli(&env, &["dlq", "list", "--project", &project, "--json"]).await;
    assert_eq!(o.json()["data"].as_array().unwrap().len(), 1, "{o:?}");

    target.set_default(Reply::status(200));
    let o = cli(&env, &["dlq", "replay", "--project", &project]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.contains("replayed") && o.stdout.contains("1 replayed, 0 not"), "{o:?}");
    let o = cli(&env, &["dlq", "list", "--project", &project, "--json"]).await;
    assert_eq!(o.json()["data"], json!([]), "a replayed run leaves the queue: {o:?}");
    let newest = env.get(&format!("/v1/runs?project_id={project}")).await.1["data"][0].clone();
    assert_eq!(newest["continuation_of"], failed["id"]);
    env.wait_status(id(&newest), "completed", T).await;
}

#[tokio::test]
async fn queue_stats_and_a_list_longer_than_a_page() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, &target.url, json!({})).await;
    // No worker: 101 runs wait, more than one page of the API.
    let items: Vec<Value> = (0..100).map(|i| json!({"payload": {"i": i}})).collect();
    let (s, v) = env.post(&format!("/v1/jobs/{}/trigger/bulk", id(&job)), json!({"items": items})).await;
    assert_eq!(s, 200, "{v}");
    env.trigger(id(&job), json!({})).await;

    let o = cli(&env, &["queues", "stats", "--project", &project]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let header: Vec<&str> = o.stdout.lines().next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = o.stdout.lines().nth(1).unwrap().split_whitespace().collect();
    let queued = header.iter().position(|h| *h == "QUEUED").unwrap();
    assert_eq!((row[0], row[queued]), (id(&job), "101"), "{o:?}");
    let o = cli(&env, &["queues", "stats", "--project", &project, "--json"]).await;
    assert_eq!(o.json()["jobs"][0]["queued"], json!(101), "{o:?}");

    let o = cli(&env, &["runs", "list", "--project", &project, "--limit", "101", "--json"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let page = o.json();
    assert_eq!(page["data"].as_array().unwrap().len(), 101, "two pages followed");
    assert_eq!(page["has_more"], json!(false));
    let o = cli(&env, &["runs", "list", "--project", &project, "--limit", "100"]).await;
    let cursor = o.stderr.trim().strip_prefix("more: --cursor ").expect("the next page's cursor").to_string();
    let o = cli(&env, &["runs", "list", "--project", &project, "--cursor", &cursor, "--json"]).await;
    assert_eq!(o.json()["data"].as_array().unwrap().len(), 1, "{o:?}");
}

#[tokio::test]
async fn workflows_list_and_trigger_wait() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, &target.url, json!({})).await;
    let (s, wf) = env
        .post(
            "/v1/workflows",
            json!({"project_id": project, "name": "one step", "steps": [{"step_ref": "a", "job_id": id(&job)}]}),
        )
        .await;
    assert_eq!(s, 201, "{wf}");
    env.spawn_worker();
    env.spawn_scheduler();

    let o = cli(&env, &["workflows", "list", "--project", &project]).await;
    assert!(o.code == 0 && o.stdout.contains(id(&wf)), "{o:?}");
    let o = cli(&env, &["workflows", "trigger", id(&wf), "--payload", "{}", "--wait", "--json"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(o.json()["status"], json!("completed"), "{o:?}");
    assert!(o.stderr.contains("step a"), "--wait shows the steps as they change: {o:?}");
    let run_id = o.json()["id"].as_str().unwrap().to_string();
    let o = cli(&env, &["workflows", "trigger", "wf_missing"]).await;
    assert_eq!(o.code, 3, "{o:?}");

    // Watching an ended run prints its state and its steps', and exits
    // with its outcome.
    let o = cli(&env, &["workflows", "runs", "watch", &run_id]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.lines().any(|l| l.starts_with("step a") && l.contains("completed")), "{o:?}");
    assert!(o.stdout.lines().next().is_some_and(|l| l.contains("workflow run  completed")), "{o:?}");
    let o = cli(&env, &["workflows", "runs", "watch", "wfr_missing"]).await;
    assert_eq!(o.code, 3, "{o:?}");
}

#[tokio::test]
async fn runs_watch_follows_a_run_until_it_ends() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::status(500)]);
    let job = env
        .job(&target.url, json!({"max_attempts": 2, "retry_strategy": "fixed", "retry_initial_delay_secs": 0}))
        .await;
    let run = env.trigger(id(&job), json!({})).await;
    let run_id = id(&run).to_string();
    use tokio::io::AsyncBufReadExt;
    // The watch starts before anything runs the job: the worker starts only
    // once the watch printed the run as it found it, so it sees every change.
    env.wait_status(&run_id, "queued", T).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["runs", "watch", &run_id])
        .env_remove("SWITCHYARD_PROJECT")
        .envs([("SWITCHYARD_API", env.base.as_str()), ("SWITCHYARD_TOKEN", SECRET)])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the CLI starts");
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(T, out.next_line()).await.expect("the watch prints").unwrap().unwrap_or_default();
    env.spawn_worker();
    env.spawn_scheduler();
    let mut stdout = format!("{first}\n");
    while let Some(line) = tokio::time::timeout(T * 2, out.next_line()).await.expect("the watch ends").unwrap() {
        stdout.push_str(&line);
        stdout.push('\n');
    }
    let status = child.wait().await.unwrap();
    let o = Out { code: status.code().unwrap_or(-1), stdout, stderr: String::new() };
    assert_eq!(o.code, 0, "{o:?}");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines.iter().any(|l| l.starts_with("run ") && l.contains("queued")), "{o:?}");
    assert!(lines.iter().any(|l| l.contains("-> queued (triggered)")), "{o:?}");
    assert!(lines.iter().any(|l| l.contains("attempt 1 ended retrying") && l.contains("HTTP 500")), "{o:?}");
    assert!(lines.iter().any(|l| l.contains("attempt 2 ended completed")), "{o:?}");
    assert!(lines.first().is_some_and(|l| l.starts_with("run ") && l.contains("queued")), "the run opens: {o:?}");
    assert!(lines.last().is_some_and(|l| l.starts_with("run ") && l.contains("completed")), "{o:?}");

    // --json: one event per line; a run that failed for good exits 1.
    target.set_default(Reply::status(500));
    let failing = env.job(&target.url, json!({"max_attempts": 1})).await;
    let bad = env.trigger(id(&failing), json!({})).await;
    env.wait_status(id(&bad), "failed", T).await;
    let o = cli(&env, &["runs", "watch", id(&bad), "--json"]).await;
    assert_eq!(o.code, 1, "{o:?}");
    for l in o.stdout.lines() {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not one JSON event per line ({e}): {o:?}"));
    }
    assert!(o.stdout.lines().any(|l| l.contains(r#""status":"failed""#)), "{o:?}");
}

#[tokio::test]
async fn a_batched_trigger_names_its_batch_and_waits_for_the_batchs_run() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, &target.url, json!({"batch": {"max_size": 10, "timeout_secs": 1}})).await;
    env.spawn_worker();
    env.spawn_scheduler();
    let o = cli(&env, &["jobs", "trigger", id(&job), "--payload", r#"{"row":1}"#]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(
        o.stdout.starts_with("trg_") && o.stdout.contains("batch tbat_") && o.stdout.contains("position 0"),
        "{o:?}"
    );
    let o = cli(&env, &["jobs", "trigger", id(&job), "--payload", r#"{"row":2}"#, "--wait", "--json"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let run = o.json();
    assert_eq!(
        (run["status"].as_str(), &run["payload"]),
        (Some("completed"), &json!([{"row": 1}, {"row": 2}])),
        "{o:?}"
    );
}

/// A file holding `v` as JSON, removed when dropped.
struct JsonFile(std::path::PathBuf);

impl JsonFile {
    fn new(name: &str, v: &Value) -> JsonFile {
        let path = std::env::temp_dir().join(format!("sy-cli-{}-{name}.json", std::process::id()));
        std::fs::write(&path, v.to_string()).unwrap();
        JsonFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for JsonFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The workflow run once `pred` holds for it (polled; fails after `T`).
async fn wait_workflow_run(env: &TestEnv, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let (s, r) = env.get(&format!("/v1/workflow-runs/{id}")).await;
        assert_eq!(s, 200, "{r}");
        if pred(&r) {
            return r;
        }
        assert!(tokio::time::Instant::now() < deadline, "the workflow run never got there: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn step<'a>(r: &'a Value, step_ref: &str) -> &'a Value {
    r["steps"].as_array().unwrap().iter().find(|s| s["step_ref"] == step_ref).unwrap()
}

#[tokio::test]
async fn refusals_name_the_flag_that_fixes_them_once() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let api = ("SWITCHYARD_API", env.base.as_str());

    let o = cli_with(&["runs", "list", "--project", &project], &[api]).await;
    assert_eq!(o.code, 4, "{o:?}");
    assert!(o.stderr.contains("401") && o.stderr.contains("--token"), "{o:?}");
    assert!(o.stderr.contains("SWITCHYARD_TOKEN") && o.stderr.contains("internal secret"), "{o:?}");
    let o = cli_with(&["runs", "list", "--project", &project], &[api, ("SWITCHYARD_TOKEN", "svc_nope")]).await;
    assert_eq!(o.code, 4, "{o:?}");
    assert!(o.stderr.contains("refused the token"), "{o:?}");

    // The internal secret without a project: the flag, not the query.
    let o = cli(&env, &["runs", "list"]).await;
    assert_eq!(o.code, 4, "{o:?}");
    assert!(o.stderr.contains("--project ID") && o.stderr.contains("SWITCHYARD_PROJECT"), "{o:?}");
    assert_eq!(o.stderr.matches("project_id is required").count(), 1, "the detail once: {o:?}");
    let o = cli(&env, &["runs", "list", "--project", "not an id!"]).await;
    assert_eq!(o.code, 4, "{o:?}");
    assert_eq!(o.stderr.matches("1 to 64 letters").count(), 1, "the detail once: {o:?}");

    // A status that is not one: a usage error listing the statuses.
    let o = cli(&env, &["runs", "list", "--project", &project, "--status", "nonsense"]).await;
    assert_eq!(o.code, 2, "{o:?}");
    for s in ["pending", "queued", "running", "retrying", "completed", "failed", "timed_out", "cancelled", "expired"] {
        assert!(o.stderr.contains(s), "{s}: {o:?}");
    }
    let o = cli_with(&["runs", "list", "--help"], &[]).await;
    assert!(o.code == 0 && o.stdout.contains("timed_out"), "--help lists the statuses: {o:?}");
}

#[tokio::test]
async fn jobs_from_files_in_tables_that_fit() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let name = "a job whose name is long enough to push a table past a narrow terminal";
    let file = JsonFile::new("job", &json!({"name": name, "endpoint_url": target.url}));
    let o = cli(&env, &["jobs", "create", "--file", file.path(), "--project", &project, "--json"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let job = o.json();
    assert_eq!((job["name"].as_str(), job["project_id"].as_str()), (Some(name), Some(project.as_str())));
    let change = JsonFile::new("change", &json!({"description": "sends the mail"}));
    let o = cli(&env, &["jobs", "update", id(&job), "-f", change.path()]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.lines().any(|l| l.starts_with("description") && l.ends_with("sends the mail")), "{o:?}");
    assert!(o.stdout.lines().any(|l| l.starts_with("version") && l.ends_with('2')), "{o:?}");
    let bad = JsonFile::new("bad", &json!({"name": "no endpoint"}));
    let o = cli(&env, &["jobs", "create", "--file", bad.path(), "--project", &project]).await;
    assert_eq!(o.code, 4, "{o:?}");
    let o = cli(&env, &["jobs", "create", "--file", "/no/such/file"]).await;
    assert_eq!(o.code, 2, "{o:?}");

    // Piped, a table is whole; COLUMNS fits it; wide never cuts; json is
    // the page.
    let list = ["jobs", "list", "--project", &project];
    let o = cli(&env, &list).await;
    assert!(o.code == 0 && o.stdout.contains(name), "{o:?}");
    let narrow = [("SWITCHYARD_API", env.base.as_str()), ("SWITCHYARD_TOKEN", SECRET), ("COLUMNS", "60")];
    let o = cli_with(&list, &narrow).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.lines().all(|l| l.chars().count() <= 60), "{o:?}");
    assert!(o.stdout.lines().nth(1).is_some_and(|l| l.starts_with(id(&job))), "the id is whole: {o:?}");
    let header: Vec<&str> = o.stdout.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["ID", "NAME", "ENABLED"], "the slug, endpoint, version and paused go first: {o:?}");
    let o = cli_with(&[&list[..], &["--output", "wide"]].concat(), &narrow).await;
    assert!(o.code == 0 && o.stdout.contains(name) && o.stdout.contains(&target.url), "{o:?}");
    for flag in [&["--output", "json"][..], &["-o", "json"], &["--json"]] {
        let o = cli_with(&[&list[..], flag].concat(), &narrow).await;
        assert_eq!(o.json()["data"][0]["id"], job["id"], "{flag:?}: {o:?}");
    }
    let o = cli(&env, &["jobs", "list", "--output", "yaml"]).await;
    assert_eq!(o.code, 2, "{o:?}");
}

#[tokio::test]
async fn workflows_from_files_and_decisions_on_their_steps() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let job = env.job_in(&project, &target.url, json!({})).await;
    let def = json!({"name": "gated", "steps": [
        {"step_ref": "build", "job_id": id(&job)},
        {"step_ref": "gate", "approval_approvers": ["ops"], "depends_on": ["build"]},
        {"step_ref": "ship", "job_id": id(&job), "depends_on": ["gate"]},
    ]});
    let file = JsonFile::new("wf", &def);
    let o = cli(&env, &["workflows", "create", "--file", file.path(), "--project", &project, "--json"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let wf = o.json();
    let change = JsonFile::new("wf-change", &json!({"description": "ships after a look"}));
    let o = cli(&env, &["workflows", "update", id(&wf), "--file", change.path()]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.lines().any(|l| l.starts_with("description") && l.ends_with("ships after a look")), "{o:?}");
    assert!(o.stdout.lines().any(|l| l.starts_with("gate ") && l.contains("approval")), "the steps: {o:?}");
    env.spawn_worker();
    env.spawn_scheduler();

    async fn trigger(env: &TestEnv, wf: &Value) -> String {
        let (s, r) = env.post(&format!("/v1/workflows/{}/trigger", id(wf)), json!({})).await;
        assert_eq!(s, 201, "{r}");
        r["id"].as_str().unwrap().to_string()
    }
    let run = trigger(&env, &wf).await;
    wait_workflow_run(&env, &run, |r| step(r, "gate")["status"] == "waiting").await;
    let o = cli(&env, &["workflows", "runs", "get", &run]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.lines().any(|l| l.starts_with("gate ") && l.contains("waiting")), "{o:?}");
    assert!(o.stdout.lines().any(|l| l.starts_with("build ") && l.contains("completed")), "{o:?}");

    let o = cli(&env, &["workflows", "runs", "approve", &run, "gate", "--comment", "looks right"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let r = wait_workflow_run(&env, &run, |r| r["status"] == "completed").await;
    assert_eq!(step(&r, "gate")["decision_comment"], json!("looks right"), "{r}");
    let o = cli(&env, &["workflows", "runs", "get", &run]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let gate = o.stdout.lines().find(|l| l.starts_with("gate ")).unwrap_or_default();
    assert!(gate.contains("completed") && gate.contains("approved"), "the step decided: {o:?}");
    assert!(o.stdout.lines().any(|l| l.starts_with("status") && l.ends_with("completed")), "{o:?}");
    let o = cli(&env, &["workflows", "runs", "get", &run, "--json"]).await;
    assert_eq!(step(&o.json(), "gate")["decision"], json!("approved"), "{o:?}");

    let rejected = trigger(&env, &wf).await;
    wait_workflow_run(&env, &rejected, |r| step(r, "gate")["status"] == "waiting").await;
    let o = cli(&env, &["workflows", "runs", "reject", &rejected, "gate"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    let r = wait_workflow_run(&env, &rejected, |r| step(r, "gate")["decision"] == "rejected").await;
    assert_ne!(step(&r, "ship")["status"], "completed", "{r}");
    let skipped = trigger(&env, &wf).await;
    wait_workflow_run(&env, &skipped, |r| step(r, "gate")["status"] == "waiting").await;
    let o = cli(&env, &["workflows", "runs", "skip", &skipped, "gate"]).await;
    assert_eq!(o.code, 0, "{o:?}");
    wait_workflow_run(&env, &skipped, |r| step(r, "gate")["status"] == "skipped").await;
    // A decision on a step that does not wait is refused.
    let o = cli(&env, &["workflows", "runs", "approve", &run, "gate"]).await;
    assert_eq!(o.code, 4, "{o:?}");
}

#[tokio::test]
async fn a_runs_events_and_logs() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({}), json!({})).await;
    let lines = json!({"lines": [
        {"level": "info", "message": "starting the import"},
        {"level": "error", "message": "row 7 is odd"},
    ]});
    let (s, v) = sdk_post(&env, &a.run_id, "logs", &a.token, lines).await;
    assert_eq!(s, 200, "{v}");

    let o = cli(&env, &["runs", "logs", &a.run_id]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.starts_with("TIMESTAMP"), "{o:?}");
    assert!(o.stdout.contains("starting the import") && o.stdout.contains("row 7 is odd"), "{o:?}");
    let o = cli(&env, &["runs", "logs", &a.run_id, "--level", "error", "--json"]).await;
    let data = o.json()["data"].as_array().unwrap().clone();
    assert_eq!(data.len(), 1, "{o:?}");
    assert_eq!(data[0]["message"], json!("row 7 is odd"));
    let o = cli(&env, &["runs", "logs", &a.run_id, "--level", "loud"]).await;
    assert_eq!(o.code, 2, "{o:?}");

    let o = cli(&env, &["runs", "events", &a.run_id]).await;
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.starts_with("AT"), "{o:?}");
    assert!(o.stdout.contains("-> queued"), "{o:?}");
    assert!(o.stdout.contains("-> running"), "{o:?}");
    let o = cli(&env, &["runs", "events", &a.run_id, "--json"]).await;
    assert!(!o.json()["data"].as_array().unwrap().is_empty(), "{o:?}");
    let o = cli(&env, &["runs", "events", "run_missing"]).await;
    assert_eq!(o.code, 3, "{o:?}");
}
