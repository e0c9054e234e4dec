//! Traces end to end: a `switchyard dev` process exporting over OTLP/HTTP
//! to a receiver here, which decodes what it gets with the protobuf types
//! of `opentelemetry-proto`. One trace per run, parented to the caller's
//! `traceparent`; the target receives the dispatch span's context.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use poem::listener::{Acceptor, Listener, TcpListener};
use poem::{handler, post, web::Data, Body, EndpointExt, Route};
use prost::Message as _;
use serde_json::{json, Value};

use crate::harness::{TestEnv, SECRET};
use crate::support::workflows;
use crate::target::Target;

const T: Duration = Duration::from_secs(30);

/// One span as the receiver got it.
#[derive(Clone, Debug)]
struct Got {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    start_ns: u64,
    end_ns: u64,
    attrs: HashMap<String, String>,
}

#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Got>>>);

#[handler]
async fn receive(body: Body, Data(got): Data<&Received>) -> poem::http::StatusCode {
    let bytes = body.into_vec().await.unwrap_or_default();
    let Ok(req) = ExportTraceServiceRequest::decode(bytes.as_slice()) else {
        return poem::http::StatusCode::BAD_REQUEST;
    };
    let mut all = got.0.lock().unwrap();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .map(|a| value(a.value.as_ref()))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                all.push(Got {
                    service: service.clone(),
                    name: s.name,
                    trace_id: hex::encode(s.trace_id),
                    span_id: hex::encode(s.span_id),
                    parent: hex::encode(s.parent_span_id),
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                    attrs: s.attributes.iter().map(|a| (a.key.clone(), value(a.value.as_ref()))).collect(),
                });
            }
        }
    }
    poem::http::StatusCode::OK
}

fn value(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    match v.and_then(|v| v.value.as_ref()) {
        Some(V::StringValue(s)) => s.clone(),
        Some(V::IntValue(i)) => i.to_string(),
        Some(V::BoolValue(b)) => b.to_string(),
        Some(V::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

impl Received {
    async fn start() -> (Received, String) {
        let got = Received::default();
        let acceptor = TcpListener::bind("127.0.0.1:0").into_acceptor().await.unwrap();
        let addr = acceptor.local_addr()[0].as_socket_addr().copied().unwrap();
        let app = Route::new().at("/v1/traces", post(receive)).data(got.clone());
        tokio::spawn(poem::Server::new_with_acceptor(acceptor).run(app));
        (got, format!("http://{addr}"))
    }

    fn of_trace(&self, trace_id: &str) -> Vec<Got> {
        self.0.lock().unwrap().iter().filter(|s| s.trace_id == trace_id).cloned().collect()
    }

    /// The trace's spans once one named `name` arrived.
    async fn wait_for(&self, trace_id: &str, name: &str) -> Vec<Got> {
        let deadline = tokio::time::Instant::now() + T;
        loop {
            let spans = self.of_trace(trace_id);
            if spans.iter().any(|s| s.name == name) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no span {name:?} in trace {trace_id}; got {:#?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn one<'a>(spans: &'a [Got], name: &str) -> &'a Got {
    let found: Vec<&Got> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one span {name:?} in {:#?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    found[0]
}

/// The trace as a tree (name, service, duration), for the eye and the log.
fn tree(spans: &[Got]) -> String {
    fn walk(spans: &[Got], parent: &str, depth: usize, out: &mut String) {
        let mut kids: Vec<&Got> = spans.iter().filter(|s| s.parent == parent).collect();
        kids.sort_by_key(|s| s.start_ns);
        for s in kids {
            let ms = (s.end_ns.saturating_sub(s.start_ns)) as f64 / 1e6;
            out.push_str(&format!("{}{} [{}] {ms:.1} ms\n", "  ".repeat(depth), s.name, s.service));
            walk(spans, &s.span_id, depth + 1, out);
        }
    }
    let ids: std::collections::HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut out = String::new();
    let roots: std::collections::BTreeSet<&str> =
        spans.iter().filter(|s| !ids.contains(s.parent.as_str())).map(|s| s.parent.as_str()).collect();
    for r in roots {
        out.push_str(&format!("(parent {r})\n"));
        walk(spans, r, 1, &mut out);
    }
    out
}

/// A `switchyard dev` of the test's database exporting to `otlp`; its api base.
async fn exporting_system(env: &TestEnv, otlp: &str) -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("dev")
        .envs(env.process_env())
        .env("INTERNAL_SECRET", SECRET)
        .env("API_ADDR", format!("127.0.0.1:{port}"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_SERVICE_NAME", "switchyard-under-test")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start switchyard dev");
    let base = format!("http://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + T;
    while env.http.get(format!("{base}/health/ready")).send().await.map(|r| !r.status().is_success()).unwrap_or(true) {
        assert!(tokio::time::Instant::now() < deadline, "switchyard dev never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (child, base)
}

async fn post_traced(env: &TestEnv, base: &str, path: &str, traceparent: &str, body: Value) -> Value {
    let resp = env
        .http
        .post(format!("{base}{path}"))
        .bearer_auth(SECRET)
        .header("traceparent", traceparent)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    resp.json().await.unwrap()
}

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_run_is_one_trace_under_the_callers_span() {
    let env = TestEnv::start().await;
    let (received, otlp) = Received::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"webhook_url": format!("{}/hook", target.url)})).await;
    let (_system, base) = exporting_system(&env, &otlp).await;

    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let run =
        post_traced(&env, &base, &format!("/v1/jobs/{}/trigger", job["id"].as_str().unwrap()), &traceparent, json!({}))
            .await;
    assert_eq!(run["trace_id"], CALLER_TRACE, "the run joins the caller's trace");
    let rid = run["id"].as_str().unwrap();
    env.wait_status(rid, "completed", T).await;
    received.wait_for(CALLER_TRACE, "webhook.deliver").await;
    let spans = received.wait_for(CALLER_TRACE, &format!("run {}", job["id"].as_str().unwrap())).await;
    eprintln!("the trace of run {rid}:\n{}", tree(&spans));

    let request = one(&spans, "POST /v1/jobs/{id}/trigger");
    assert_eq!(request.parent, CALLER_SPAN, "the trigger request continues the caller's span");
    let run_span = one(&spans, &format!("run {}", job["id"].as_str().unwrap()));
    assert_eq!(run_span.parent, request.span_id, "the run is a child of its trigger request");
    assert_eq!(run_span.attrs["switchyard.status"], "completed");
    for name in ["run.insert", "run.enqueue", "queue.wait", "dequeue", "dispatch", "run.record", "webhook.deliver"] {
        assert_eq!(one(&spans, name).parent, run_span.span_id, "{name} is a child of the run's span");
    }
    let dispatch = one(&spans, "dispatch");
    assert_eq!(dispatch.attrs["http.response.status_code"], "200");
    assert_eq!(dispatch.attrs["switchyard.outcome"], "completed");
    assert_eq!(dispatch.attrs["switchyard.retry"], "no retry");
    assert!(spans.iter().all(|s| s.service == "switchyard-under-test"));
    assert!(spans.iter().all(|s| s.end_ns >= s.start_ns));

    // The target continues the trace from the dispatch's own span, and the
    // webhook's receiver from the delivery's.
    let reqs = target.requests();
    let sent = reqs.iter().find(|r| r.header("x-svc-run-id") == Some(rid)).expect("the dispatch");
    assert_eq!(sent.header("traceparent"), Some(format!("00-{CALLER_TRACE}-{}-01", dispatch.span_id).as_str()));
    let hook = reqs.iter().find(|r| r.header("x-svc-delivery-id").is_some()).expect("the webhook");
    let deliver = one(&spans, "webhook.deliver");
    assert_eq!(hook.header("traceparent"), Some(format!("00-{CALLER_TRACE}-{}-01", deliver.span_id).as_str()));

    // A run triggered without a traceparent begins its own trace, with the
    // run's span as its root's child (the request) all the same.
    let (s, own) = env.post(&format!("/v1/jobs/{}/trigger", job["id"].as_str().unwrap()), json!({})).await;
    assert_eq!(s, 201);
    let own_trace = own["trace_id"].as_str().unwrap();
    assert_eq!(own_trace.len(), 32);
    assert_ne!(own_trace, CALLER_TRACE);
}

#[tokio::test]
async fn a_workflow_run_is_a_trace_whose_steps_are_child_spans() {
    let env = TestEnv::start().await;
    let (received, otlp) = Received::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = workflows::job(&env, &project, &target.url, json!({})).await;
    let wf = workflows::workflow(
        &env,
        &project,
        json!({"steps": [
            {"step_ref": "fetch", "job_id": j},
            {"step_ref": "transform", "job_id": j, "depends_on": ["fetch"]},
            {"step_ref": "load", "job_id": j, "depends_on": ["transform"]}
        ]}),
    )
    .await;
    let (_system, base) = exporting_system(&env, &otlp).await;

    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let run = post_traced(
        &env,
        &base,
        &format!("/v1/workflows/{}/trigger", wf["id"].as_str().unwrap()),
        &traceparent,
        json!({}),
    )
    .await;
    assert_eq!(run["trace_id"], CALLER_TRACE);
    let id = run["id"].as_str().unwrap();
    let done = workflows::wait_status(&env, id, "completed").await;
    let wf_name = format!("workflow {}", wf["id"].as_str().unwrap());
    let spans = received.wait_for(CALLER_TRACE, &wf_name).await;
    eprintln!("the trace of workflow run {id}:\n{}", tree(&spans));

    let request = one(&spans, "POST /v1/workflows/{id}/trigger");
    assert_eq!(request.parent, CALLER_SPAN);
    let workflow = one(&spans, &wf_name);
    assert_eq!(workflow.parent, request.span_id);
    assert_eq!(one(&spans, "workflow_run.insert").parent, workflow.span_id);
    for step_ref in ["fetch", "transform", "load"] {
        let step = one(&spans, &format!("step {step_ref}"));
        assert_eq!(step.parent, workflow.span_id, "step {step_ref} is a child of the workflow run");
        assert_eq!(step.attrs["switchyard.status"], "completed");
        // The step's job run is a child of the step, and its dispatch of the job run.
        let job_run = workflows::step(&done, step_ref)["job_run_id"].as_str().unwrap().to_string();
        let run_span =
            spans.iter().find(|s| s.attrs.get("switchyard.run_id") == Some(&job_run)).expect("the step's job run span");
        assert_eq!(run_span.parent, step.span_id, "step {step_ref}'s job run is a child of the step");
        assert!(spans.iter().any(|s| s.name == "dispatch" && s.parent == run_span.span_id));
    }
    // The steps ran one after another, as the chain says.
    let start = |r: &str| one(&spans, &format!("step {r}")).start_ns;
    assert!(start("fetch") <= start("transform") && start("transform") <= start("load"));
}
