//! Failure handling: a worker killed mid-dispatch, Redis losing its data,
//! Redis down while a trigger is accepted.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use crate::harness::TestEnv;
use crate::target::{Reply, Target};

const T: Duration = Duration::from_secs(20);

#[tokio::test]
async fn worker_killed_mid_dispatch_loses_nothing() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    // The first delivery hangs; the killed worker never sees its answer.
    target.script([Reply::slow(Duration::from_secs(30))]);
    let job = env.job(&target.url, json!({"timeout_secs": 60})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let rid = run["id"].as_str().unwrap();

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("worker")
        .envs(env.process_env())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start a worker process");
    target.wait_count(1, T).await;
    // `running` is written lazily, once the attempt has been out a while.
    env.wait_status(rid, "running", Duration::from_secs(5)).await;
    child.start_kill().expect("SIGKILL");
    child.wait().await.unwrap();

    env.spawn_scheduler();
    env.spawn_worker();
    let done = env.wait_status(rid, "completed", T).await;
    let reqs = target.requests();
    assert_eq!(reqs.len(), 2, "redelivered once");
    let key = format!("{rid}:1");
    assert!(reqs.iter().all(|r| r.header("idempotency-key") == Some(key.as_str())), "same attempt, same key");
    assert_eq!(done["attempt"], 1);
}

#[tokio::test]
async fn redis_lost_is_rebuilt_from_postgres_without_duplicates() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    let id = job["id"].as_str().unwrap();
    let mut runs = vec![];
    for _ in 0..5 {
        runs.push(env.trigger(id, json!({})).await["id"].as_str().unwrap().to_string());
    }
    let delayed = env.trigger(id, json!({"delay_secs": 1})).await;
    env.wipe_redis().await;
    assert!(env.redis_keys().await.is_empty());

    let sched = env.scheduler();
    sched.reconcile_once().await.unwrap();
    sched.reconcile_once().await.unwrap();
    assert_eq!(env.zcard_all(|k| &k.ready).await, 5, "each queued run once, not twice");
    assert_eq!(env.zcard_all(|k| &k.scheduled).await, 1);

    env.spawn_worker();
    env.spawn_scheduler();
    for rid in runs.iter().chain([&delayed["id"].as_str().unwrap().to_string()]) {
        env.wait_status(rid, "completed", T).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(target.count(), 6, "every run dispatched exactly once");
}

#[tokio::test]
async fn trigger_accepted_while_redis_is_down_is_dispatched_later() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    // A second api whose Redis is unreachable: the trigger is still durable.
    let mut cfg = env.config.clone();
    cfg.redis_url = "redis://127.0.0.1:1".into();
    let state = switchyard_api::state_from_config(cfg).unwrap();
    let cli = poem::test::TestClient::new(switchyard_api::app(state));
    let resp = cli
        .post(format!("/v1/jobs/{}/trigger", job["id"].as_str().unwrap()))
        .header("authorization", format!("Bearer {}", crate::harness::SECRET))
        .body_json(&json!({"payload": {"n": 1}}))
        .send()
        .await;
    resp.assert_status(poem::http::StatusCode::CREATED);
    let run: serde_json::Value = serde_json::from_str(&resp.0.into_body().into_string().await.unwrap()).unwrap();
    assert_eq!(env.zcard_all(|k| &k.ready).await, 0);

    env.spawn_worker();
    env.scheduler().reconcile_once().await.unwrap();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;
    assert_eq!(target.count(), 1);
}

#[tokio::test]
async fn a_worker_process_serves_metrics_when_asked() {
    let env = TestEnv::start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("worker")
        .envs(env.process_env())
        .env("METRICS_ADDR", format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start a worker process");
    let url = format!("http://127.0.0.1:{port}/metrics");
    let deadline = tokio::time::Instant::now() + T;
    let text = loop {
        if let Ok(r) = env.http.get(&url).send().await {
            break r.text().await.unwrap();
        }
        assert!(tokio::time::Instant::now() < deadline, "no metrics listener");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(text.contains("# TYPE svc_worker_pool_active gauge"), "{text}");
    assert!(text.contains("svc_dequeue_duration_seconds"), "{text}");
    child.start_kill().unwrap();
}

#[tokio::test]
async fn sigterm_lets_the_in_flight_dispatch_finish() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.script([Reply::slow(Duration::from_millis(1500))]);
    let job = env.job(&target.url, json!({})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("worker")
        .envs(env.process_env())
        .env("SHUTDOWN_GRACE_SECS", "10")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start a worker process");
    target.wait_count(1, T).await;
    let pid = child.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(T, child.wait()).await.expect("exits within the grace period").unwrap();
    assert!(status.success(), "clean exit: {status:?}");
    // The worker finished and recorded the dispatch it held before exiting.
    let v = env.run(run["id"].as_str().unwrap()).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(target.count(), 1, "no redelivery was needed");
}

#[tokio::test]
async fn a_bad_setting_stops_the_process_naming_the_variable() {
    for (var, value) in [
        ("WORKER_CONCURRENCY", "lots"),
        ("REDIS_KEY_PREFIX", "a{b}"),
        ("API_ADDR", "here"),
        ("SECRETS_KEY", "shorter-than-32-bytes"),
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .arg("api")
            .env(var, value)
            .env("JWT_SIGNING_KEY", "recovery-jwt-signing-key-0123456789")
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{var}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(var), "{var}: {err}");
    }
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("worker")
        .env_remove("JWT_SIGNING_KEY")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("JWT_SIGNING_KEY"));
}

/// A Redis connection that drops (Redis restarted, a proxy, `CLIENT KILL`)
/// is made again: the command that met the drop fails, the next ones work,
/// and triggers reach the queue again without restarting the process.
#[tokio::test]
async fn a_dropped_redis_connection_is_made_again() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({})).await;
    let id = job["id"].as_str().unwrap();
    env.spawn_worker();
    let first = env.trigger(id, json!({})).await;
    env.wait_status(first["id"].as_str().unwrap(), "completed", T).await;

    // The api's shared connection: env.queue is the api's own handle.
    let client_id = |mut c: switchyard_shared::queue::Conn| async move {
        redis::cmd("CLIENT").arg("ID").query_async::<i64>(&mut c).await
    };
    if switchyard_shared::queue::cluster_nodes(&crate::harness::redis_url()).is_some() {
        // CLIENT KILL needs the one node the connection went to; a cluster
        // connection's own reconnection is the redis crate's (tested there).
        return;
    }
    let before = client_id(env.queue.conn().await.unwrap()).await.unwrap();
    let mut admin =
        redis::Client::open(crate::harness::redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(before).query_async(&mut admin).await.unwrap();
    assert_eq!(killed, 1);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let after = loop {
        match client_id(env.queue.conn().await.unwrap()).await {
            Ok(id) => break id,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "no new connection: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(after, before, "a new connection");

    // No scheduler runs here: only the api's own enqueue brings this run to the worker.
    let second = env.trigger(id, json!({})).await;
    env.wait_status(second["id"].as_str().unwrap(), "completed", T).await;
    assert_eq!(target.count(), 2);
}

/// A scheduler process killed (SIGKILL) while it sends a terminal webhook:
/// its claim lapses and another scheduler sends the delivery again, under
/// the same delivery id, and then no record of it is left.
#[tokio::test]
async fn a_scheduler_killed_mid_delivery_loses_no_notification() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let hooks = Target::start().await;
    // The first delivery hangs; the killed scheduler never sees its answer.
    hooks.script([Reply::slow(Duration::from_secs(30))]);
    let job = env.job(&target.url, json!({"webhook_url": hooks.url})).await;
    let run = env.trigger(job["id"].as_str().unwrap(), json!({})).await;
    env.spawn_worker();
    env.wait_status(run["id"].as_str().unwrap(), "completed", T).await;

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("scheduler")
        .envs(env.process_env())
        .env("DELIVERY_CLAIM_SECS", "11")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start a scheduler process");
    hooks.wait_count(1, T).await;
    child.start_kill().expect("SIGKILL");
    child.wait().await.unwrap();

    env.spawn_scheduler();
    let reqs = hooks.wait_count(2, Duration::from_secs(30)).await;
    assert_eq!(reqs.len(), 2, "sent again once");
    let id = reqs[0].header("x-svc-delivery-id").expect("delivery id");
    assert_eq!(reqs[1].header("x-svc-delivery-id"), Some(id), "the same delivery");
    assert_eq!(reqs[1].body["run_id"], run["id"]);
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let (left,): (i64,) =
            sqlx::query_as("SELECT count(*) FROM webhook_deliveries").fetch_one(&env.pool).await.unwrap();
        if left == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "a delivered job-run webhook leaves no record");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Postgres dropping the api's connections (as a `restart -m fast` or
/// `pg_terminate_backend` does) is 503 with `Retry-After` on the requests
/// it catches, never 500, and the api answers normally once it reconnects.
#[tokio::test]
async fn connections_dropped_by_postgres_answer_503_with_retry_after_never_500() {
    let env = TestEnv::start().await;
    let job = env.job("http://127.0.0.1:9/hook", json!({})).await;
    let id = job["id"].as_str().unwrap().to_string();
    let db = env.config.database_url.rsplit('/').next().unwrap().to_string();
    let admin = sqlx::PgPool::connect(&format!("{}/postgres", crate::harness::pg_base())).await.unwrap();
    let (mut ok, mut unavailable) = (0, 0);
    for round in 0..20 {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(&db)
        .execute(&admin)
        .await
        .unwrap();
        let resp = env
            .http
            .post(format!("{}/v1/jobs/{id}/trigger", env.base))
            .bearer_auth(crate::harness::SECRET)
            .json(&json!({"payload": {"round": round}}))
            .send()
            .await
            .unwrap();
        match resp.status().as_u16() {
            201 => ok += 1,
            503 => {
                assert!(resp.headers().get("retry-after").is_some(), "a 503 says when to come back");
                unavailable += 1;
            }
            s => panic!("round {round}: {s} {}", resp.text().await.unwrap_or_default()),
        }
    }
    assert_eq!(ok + unavailable, 20);
    let (s, _) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(s, 200, "the api is back once its connections are");
    admin.close().await;
}

/// A concurrency cap holds through Redis losing its data mid-load, with two
/// workers: the in-flight counts go with Redis, so until the reconciler has
/// rebuilt it and the workers have taken back the leases they still hold
/// (`lua/extend_leases.lua`), no run of the capped job is dispatched, and
/// runs triggered into the empty Redis wait for their job's limits.
#[tokio::test]
async fn a_cap_holds_through_a_redis_wipe_with_two_workers() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    target.set_default(Reply::slow(Duration::from_millis(700)));
    let job = env.job(&target.url, json!({"max_concurrency": 3})).await;
    let id = job["id"].as_str().unwrap().to_string();
    let mut runs = vec![];
    for _ in 0..12 {
        runs.push(env.trigger(&id, json!({})).await["id"].as_str().unwrap().to_string());
    }
    env.spawn_worker();
    env.spawn_worker();
    env.spawn_scheduler();
    let deadline = tokio::time::Instant::now() + T;
    while target.spans().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "never got going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Three requests are in flight at the target when Redis loses everything.
    env.wipe_redis().await;
    for _ in 0..6 {
        runs.push(env.trigger(&id, json!({})).await["id"].as_str().unwrap().to_string());
    }
    for rid in &runs {
        env.wait_status(rid, "completed", Duration::from_secs(60)).await;
    }
    assert_eq!(target.max_in_flight(), 3, "the cap is reached and never exceeded");
    assert!(target.count() >= runs.len(), "every run reached the target");
}

/// A rate limit holds through Redis losing its data: the rebuild puts the
/// sends Postgres recorded back into the bucket's log, so the bucket goes
/// on where it was instead of admitting a full window at once.
#[tokio::test]
async fn a_rate_limit_holds_through_a_redis_wipe() {
    let env = TestEnv::start().await;
    let target = Target::start().await;
    let job = env.job(&target.url, json!({"rate_limit_max": 3, "rate_limit_window_secs": 4})).await;
    let id = job["id"].as_str().unwrap().to_string();
    env.spawn_worker();
    env.spawn_scheduler();
    let mut runs = vec![];
    for _ in 0..3 {
        runs.push(env.trigger(&id, json!({})).await["id"].as_str().unwrap().to_string());
    }
    for rid in &runs {
        env.wait_status(rid, "completed", T).await;
    }
    env.wipe_redis().await;
    for _ in 0..3 {
        runs.push(env.trigger(&id, json!({})).await["id"].as_str().unwrap().to_string());
    }
    for rid in &runs {
        env.wait_status(rid, "completed", T).await;
    }
    let mut at: Vec<std::time::Instant> = target.spans().iter().map(|s| s.start).collect();
    at.sort();
    assert_eq!(at.len(), 6);
    for (i, t) in at.iter().enumerate() {
        let within = at[i..].iter().filter(|u| u.duration_since(*t) < Duration::from_secs(4)).count();
        assert!(within <= 3, "{within} requests within 4 s of request {i}: {at:?}");
    }
}
