//! Live streams: a run's, a workflow run's and a project's Server-Sent
//! Events, followed to their end, resumed after a disconnect, confined to
//! their project and scope, and served by any api process.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{assert_problem, TestEnv};
use crate::support::access::{key, second_api};
use crate::support::sse::{Sse, SseEvent};
use crate::support::workflows::{self, workflow};
use crate::target::{Reply, Target};

const T: Duration = Duration::from_secs(20);

fn statuses(events: &[SseEvent]) -> Vec<String> {
    events.iter().filter(|e| e.event == "run").map(|e| e.data["run"]["status"].as_str().unwrap().to_string()).collect()
}

fn history(events: &[SseEvent]) -> Vec<(String, Value)> {
    events.iter().filter(|e| e.event == "history").map(|e| (e.id.clone(), e.data["entry"].clone())).collect()
}

/// Opens a run's stream on the test's api.
async fn run_stream(env: &TestEnv, run_id: &str, last: Option<&str>) -> Sse {
    let s = Sse::open(env, &env.base, &format!("/v1/runs/{run_id}/stream"), None, last).await;
    assert_eq!(s.status, 200);
    assert!(s.content_type.starts_with("text/event-stream"), "{}", s.content_type);
    s
}

#[tokio::test]
async fn a_run_stream_follows_the_run_to_its_end_and_closes() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({"payload": {"n": 1}})).await;
    let id = run["id"].as_str().unwrap();

    let mut s = run_stream(&env, id, None).await;
    let opening = s.until(|e| e.event == "run").await;
    assert_eq!(statuses(&opening), ["queued"], "the stream opens with the run as it is");
    env.spawn_worker();
    let rest = s.rest().await;
    let all: Vec<SseEvent> = opening.into_iter().chain(rest).collect();

    assert_eq!(all.last().unwrap().event, "end", "{all:#?}");
    assert_eq!(statuses(&all).last().map(String::as_str), Some("completed"));
    let h = history(&all);
    let ids: Vec<String> = h.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids, (1..=h.len()).map(|n| n.to_string()).collect::<Vec<_>>(), "positions count up from 1");
    let moves: Vec<&str> = h.iter().filter_map(|(_, e)| e["to_status"].as_str()).collect();
    assert_eq!(moves, ["queued", "running", "completed"]);
    assert!(h.iter().any(|(_, e)| e["type"] == "attempt" && e["status_code"] == 200), "{h:#?}");
    // The history it streamed is the history the API lists.
    let (st, listed) = env.get(&format!("/v1/runs/{id}/events?limit=100")).await;
    assert_eq!(st, 200);
    assert_eq!(listed["data"].as_array().unwrap().len(), h.len());
}

#[tokio::test]
async fn a_run_stream_ends_at_every_terminal_state() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let ok = env.job_in(&project, &target.url, json!({"name": "ok"})).await;
    let parked = env.job_in(&project, "http://127.0.0.1:9/never", json!({"name": "parked", "run_ttl_secs": 1})).await;
    let failing_target = Target::start().await;
    failing_target.set_default(Reply::status(500));
    let failing = env.job_in(&project, &failing_target.url, json!({"name": "failing", "max_attempts": 1})).await;
    let slow_target = Target::start().await;
    slow_target.set_default(Reply::slow(Duration::from_secs(4)));
    let slow =
        env.job_in(&project, &slow_target.url, json!({"name": "slow", "timeout_secs": 1, "max_attempts": 1})).await;
    let trigger = |job: &Value| {
        let id = job["id"].as_str().unwrap().to_string();
        let env = &env;
        async move { env.trigger(&id, json!({})).await["id"].as_str().unwrap().to_string() }
    };
    let completed = trigger(&ok).await;
    let cancelled = trigger(&ok).await;
    let expired = trigger(&parked).await;

    // Cancelled while queued, before any worker runs.
    let mut c = run_stream(&env, &cancelled, None).await;
    let (st, _) = env.post(&format!("/v1/runs/{cancelled}/cancel"), json!({})).await;
    assert_eq!(st, 200);
    let events = c.rest().await;
    assert_eq!(statuses(&events).last().map(String::as_str), Some("cancelled"), "{events:#?}");
    assert_eq!(events.last().unwrap().event, "end");

    // Expired in the scheduler: its ttl passes unstarted.
    let mut e = run_stream(&env, &expired, None).await;
    let sched = env.scheduler();
    sched.expire_once(chrono::Utc::now() + chrono::Duration::seconds(5)).await.unwrap();
    let events = e.rest().await;
    assert_eq!(statuses(&events).last().map(String::as_str), Some("expired"), "{events:#?}");

    let failed = trigger(&failing).await;
    let timed_out = trigger(&slow).await;
    let mut streams = Vec::new();
    for id in [&completed, &failed, &timed_out] {
        streams.push(run_stream(&env, id, None).await);
    }
    env.spawn_worker();
    for (mut s, want) in streams.into_iter().zip(["completed", "failed", "timed_out"]) {
        let events = s.rest().await;
        assert_eq!(events.last().unwrap().event, "end", "{want}: {events:#?}");
        assert_eq!(statuses(&events).last().map(String::as_str), Some(want), "{events:#?}");
    }

    // A stream of a run that has ended gives its state and ends at once.
    let mut again = run_stream(&env, &completed, None).await;
    let events = again.rest().await;
    assert_eq!(statuses(&events), ["completed"]);
    assert_eq!(events.last().unwrap().event, "end");
}

#[tokio::test]
async fn a_run_stream_resumes_after_a_disconnect_without_a_gap() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    // Two failed attempts, then success: a history long enough to cut.
    target.script([Reply::status(500), Reply::status(500)]);
    let job = env
        .job(&target.url, json!({"max_attempts": 3, "retry_strategy": "fixed", "retry_initial_delay_secs": 0}))
        .await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let id = run["id"].as_str().unwrap();
    let mut first = run_stream(&env, id, None).await;
    let before = first.until(|e| e.event == "history").await;
    let cut = before.last().unwrap().id.clone();
    assert_eq!(cut, "1");
    drop(first);

    env.spawn_worker();
    env.spawn_scheduler();
    env.wait_status(id, "completed", T).await;
    let mut resumed = run_stream(&env, id, Some(&cut)).await;
    let after = resumed.rest().await;
    let ids: Vec<u64> =
        history(&before).iter().chain(history(&after).iter()).map(|(i, _)| i.parse().unwrap()).collect();
    let want: Vec<u64> = (1..=ids.len() as u64).collect();
    assert_eq!(ids, want, "every position once, none missing");
    let (_, listed) = env.get(&format!("/v1/runs/{id}/events?limit=100")).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), ids.len());
    assert_eq!(statuses(&after).last().map(String::as_str), Some("completed"));

    // A resume id that is not a position is refused, not ignored.
    let (st, v) = env
        .call_with(
            env.http
                .get(format!("{}/v1/runs/{id}/stream", env.base))
                .bearer_auth(crate::harness::SECRET)
                .header("Last-Event-ID", "w12"),
            None,
        )
        .await;
    assert_problem(422, (st, v), 422);
}

#[tokio::test]
async fn a_workflow_run_stream_follows_its_steps_to_the_end() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let project = env.project().await;
    let j = workflows::job(&env, &project, &target.url, json!({})).await;
    let wf = workflow(
        &env,
        &project,
        json!({"steps": [{"step_ref": "a", "job_id": j}, {"step_ref": "b", "job_id": j, "depends_on": ["a"]}]}),
    )
    .await;
    let run = workflows::trigger(&env, &wf, json!({"payload": {}})).await;
    let id = run["id"].as_str().unwrap();
    let mut s = Sse::open(&env, &env.base, &format!("/v1/workflow-runs/{id}/stream"), None, None).await;
    assert_eq!(s.status, 200);
    env.spawn_worker();
    env.spawn_scheduler();
    let events = s.rest().await;
    assert_eq!(events.last().unwrap().event, "end", "{events:#?}");
    let runs: Vec<&str> = events
        .iter()
        .filter(|e| e.event == "workflow_run")
        .map(|e| e.data["workflow_run"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(runs.last(), Some(&"completed"), "{events:#?}");
    for r in ["a", "b"] {
        let seen: Vec<&str> = events
            .iter()
            .filter(|e| e.event == "step" && e.data["step"]["step_ref"] == r)
            .map(|e| e.data["step"]["status"].as_str().unwrap())
            .collect();
        assert_eq!(seen.last(), Some(&"completed"), "step {r}: {seen:?}");
    }
    let b_first = events.iter().position(|e| {
        e.event == "step" && e.data["step"]["step_ref"] == "b" && e.data["step"]["status"] == "completed"
    });
    let a_done = events.iter().position(|e| {
        e.event == "step" && e.data["step"]["step_ref"] == "a" && e.data["step"]["status"] == "completed"
    });
    assert!(a_done < b_first, "a completes before b: {events:#?}");

    assert_eq!(events[0].event, "workflow_run", "the run's state opens the stream");

    // Resumed from its last id, an ended run gives its state and ends.
    let last = events.last().unwrap().id.clone();
    let mut again = Sse::open(&env, &env.base, &format!("/v1/workflow-runs/{id}/stream"), None, Some(&last)).await;
    let replay = again.rest().await;
    assert_eq!(replay.first().map(|e| e.event.as_str()), Some("workflow_run"));
    assert_eq!(replay[0].data["workflow_run"]["status"], "completed");
    assert_eq!(replay.last().map(|e| e.event.as_str()), Some("end"));
}

#[tokio::test]
async fn a_workflow_run_stream_ends_cancelled() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let j = workflows::job(&env, &project, "http://127.0.0.1:9/never", json!({})).await;
    let wf = workflow(&env, &project, json!({"steps": [{"step_ref": "only", "job_id": j}]})).await;
    let run = workflows::trigger(&env, &wf, json!({"payload": {}})).await;
    let id = run["id"].as_str().unwrap();
    let mut s = Sse::open(&env, &env.base, &format!("/v1/workflow-runs/{id}/stream"), None, None).await;
    s.until(|e| e.event == "workflow_run").await;
    let (st, v) = env.post(&format!("/v1/workflow-runs/{id}/cancel"), json!({})).await;
    assert_eq!(st, 200, "{v}");
    let events = s.rest().await;
    let last_run = events.iter().rev().find(|e| e.event == "workflow_run").expect("a final state");
    assert_eq!(last_run.data["workflow_run"]["status"], "cancelled");
    assert!(events.iter().any(|e| e.event == "step" && e.data["step"]["status"] == "cancelled"), "{events:#?}");
}

#[tokio::test]
async fn a_workflow_run_stream_ends_failed_and_timed_out() {
    let env = TestEnv::start().await;
    let project = env.project().await;
    let failing_target = Target::start().await;
    failing_target.set_default(Reply::status(500));
    let slow_target = Target::start().await;
    slow_target.set_default(Reply::slow(Duration::from_secs(10)));
    let failing =
        workflows::job(&env, &project, &failing_target.url, json!({"name": "failing", "max_attempts": 1})).await;
    let slow = workflows::job(&env, &project, &slow_target.url, json!({"name": "slow", "timeout_secs": 30})).await;
    let fails = workflow(&env, &project, json!({"steps": [{"step_ref": "boom", "job_id": failing}]})).await;
    let late =
        workflow(&env, &project, json!({"timeout_secs": 1, "steps": [{"step_ref": "long", "job_id": slow}]})).await;
    let failed = workflows::trigger(&env, &fails, json!({})).await;
    let timed_out = workflows::trigger(&env, &late, json!({})).await;
    let open = |id: &Value| {
        let path = format!("/v1/workflow-runs/{}/stream", id.as_str().unwrap());
        let env = &env;
        async move { Sse::open(env, &env.base, &path, None, None).await }
    };
    let mut f = open(&failed["id"]).await;
    let mut t = open(&timed_out["id"]).await;
    env.spawn_worker();
    env.spawn_scheduler();
    for (s, want) in [(&mut f, "failed"), (&mut t, "timed_out")] {
        let events = s.rest().await;
        assert_eq!(events.last().map(|e| e.event.as_str()), Some("end"), "{want}: {events:#?}");
        let last_run = events.iter().rev().find(|e| e.event == "workflow_run").expect("a final state");
        assert_eq!(last_run.data["workflow_run"]["status"], want, "{events:#?}");
    }
}

#[tokio::test]
async fn a_project_stream_sees_its_project_only_and_resumes() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let mine = env.project().await;
    let other = env.project().await;
    let my_job = env.job_in(&mine, &target.url, json!({})).await;
    let their_job = env.job_in(&other, &target.url, json!({})).await;
    let (token, _) = key(&env, &mine, &["runs:read"]).await;

    let mut s = Sse::open(&env, &env.base, "/v1/stream", Some(&token), None).await;
    assert_eq!(s.status, 200);
    env.trigger(their_job["id"].as_str().unwrap(), json!({})).await;
    let first = env.trigger(my_job["id"].as_str().unwrap(), json!({})).await;
    let got = s.until(|e| e.data["change"]["id"] == first["id"]).await;
    for e in &got {
        assert_eq!(e.event, "change");
        assert_eq!(e.data["change"]["job_id"], my_job["id"], "only its own project: {got:#?}");
        assert_eq!(e.data["change"]["kind"], "run");
    }
    let cut = got.last().unwrap().id.clone();
    drop(s);

    // While nobody listens, the run runs and another is triggered.
    env.spawn_worker();
    env.wait_status(first["id"].as_str().unwrap(), "completed", T).await;
    let second = env.trigger(my_job["id"].as_str().unwrap(), json!({})).await;
    env.wait_status(second["id"].as_str().unwrap(), "completed", T).await;

    let mut resumed = Sse::open(&env, &env.base, "/v1/stream", Some(&token), Some(&cut)).await;
    let later =
        resumed.until(|e| e.data["change"]["id"] == second["id"] && e.data["change"]["status"] == "completed").await;
    let of = |id: &Value| -> Vec<String> {
        later
            .iter()
            .filter(|e| e.data["change"]["id"] == *id)
            .map(|e| e.data["change"]["status"].as_str().unwrap().to_string())
            .collect()
    };
    // A quick attempt goes from queued to its outcome in the run's row
    // (`running` is written for attempts that last), so `running` may or
    // may not show; what the stream missed while away all does.
    let first_seen = of(&first["id"]);
    assert_eq!(first_seen.last().map(String::as_str), Some("completed"), "{later:#?}");
    assert!(!first_seen.contains(&"queued".to_string()), "nothing from before the cut again: {later:#?}");
    let second_seen = of(&second["id"]);
    assert_eq!(second_seen.first().map(String::as_str), Some("queued"), "{later:#?}");
    assert_eq!(second_seen.last().map(String::as_str), Some("completed"), "{later:#?}");
    assert!(later.iter().all(|e| e.data["change"]["job_id"] == my_job["id"]));
}

#[tokio::test]
async fn streams_keep_to_the_scopes_and_projects_of_their_credential() {
    let env = TestEnv::start().await;
    let mine = env.project().await;
    let other = env.project().await;
    let job = env.job_in(&other, "http://127.0.0.1:9/", json!({})).await;
    let theirs = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let my_job = env.job_in(&mine, "http://127.0.0.1:9/", json!({})).await;
    let my_run = env.trigger(my_job["id"].as_str().unwrap(), json!({})).await;
    let (jobs_only, _) = key(&env, &mine, &["jobs:read"]).await;
    let (runs_only, _) = key(&env, &mine, &["runs:read"]).await;
    let call = |token: String, path: String| {
        let env = &env;
        async move { crate::support::access::with(env, &token, Method::GET, &path, None).await }
    };
    let my_run_id = my_run["id"].as_str().unwrap();
    assert_problem(403, call(jobs_only.clone(), format!("/v1/runs/{my_run_id}/stream")).await, 403);
    assert_problem(403, call(jobs_only.clone(), "/v1/stream".into()).await, 403);
    let their_run = theirs["id"].as_str().unwrap();
    assert_problem(404, call(runs_only.clone(), format!("/v1/runs/{their_run}/stream")).await, 404);
    assert_problem(403, call(runs_only.clone(), format!("/v1/stream?project_id={other}")).await, 403);
    assert_problem(403, call(runs_only.clone(), "/v1/stream?kinds=step".into()).await, 403);
    assert_problem(422, call(runs_only.clone(), "/v1/stream?kinds=run,jobs".into()).await, 422);
    assert_problem(422, call(runs_only, "/v1/stream?last_event_id=nope".into()).await, 422);
    let (st, _) = env.get("/v1/runs/run_doesnotexist/stream").await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn a_stream_on_one_api_process_sees_changes_made_through_another() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let other_api = second_api(&env).await;
    let job = env.job(&target.url, json!({})).await;
    let project = job["project_id"].as_str().unwrap().to_string();
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let id = run["id"].as_str().unwrap();
    let mut s = Sse::open(&env, &other_api, &format!("/v1/runs/{id}/stream"), None, None).await;
    let mut p = Sse::open(&env, &other_api, &format!("/v1/stream?project_id={project}"), None, None).await;
    s.until(|e| e.event == "run").await;
    // Cancelled through the first api process.
    let (st, _) = env.post(&format!("/v1/runs/{id}/cancel"), json!({})).await;
    assert_eq!(st, 200);
    let events = s.rest().await;
    assert_eq!(statuses(&events).last().map(String::as_str), Some("cancelled"));
    let change = p.until(|e| e.data["change"]["id"] == id).await;
    assert_eq!(change.last().unwrap().data["change"]["status"], "cancelled");
}
