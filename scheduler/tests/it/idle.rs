//! What an idle scheduler costs, and that its sleeping loops are woken on
//! time when work appears.

use std::time::Duration;

use chrono::Utc;
use switchyard_scheduler::{Scheduler, SchedulerOptions};
use switchyard_shared::db;
use switchyard_shared::queue::{self, Queue, WakeLoop};
use switchyard_shared::shutdown::Shutdown;

use crate::common::{pg_addr, pg_base, redis_addr, with_env, Env};
use crate::tap::{Protocol, Tap};

/// Starts every loop of `scheduler`; cancel the token to stop them.
fn spawn(scheduler: Scheduler) -> (Shutdown, tokio::task::JoinHandle<()>) {
    let shutdown = Shutdown::new();
    let stop = shutdown.clone();
    (
        shutdown,
        tokio::spawn(async move {
            scheduler.run(stop, Duration::from_secs(5)).await;
        }),
    )
}

/// Waits until `run_id` has `status`, up to `within`; returns how long it took.
async fn wait_status(env: &Env, run_id: &str, status: &str, within: Duration) -> anyhow::Result<Duration> {
    let t0 = tokio::time::Instant::now();
    loop {
        let run = env.run(run_id).await;
        if run.status == status {
            return Ok(t0.elapsed());
        }
        anyhow::ensure!(t0.elapsed() < within, "run still {} after {within:?}, not {status}", run.status);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The idle budget (benchmark phase f): with nothing to do, a scheduler issues
/// at most one Postgres statement a second and does not busy-poll Redis.
/// Counted at the wire (every `Query` and `Execute` message, every Redis
/// command), so a transaction of three statements counts three.
#[tokio::test]
async fn an_idle_scheduler_issues_at_most_one_postgres_statement_a_second() {
    let Some(redis_addr) = redis_addr() else {
        // A cluster's clients reach its nodes by their own addresses, past
        // any tap: the single-node pass counts this.
        eprintln!("skipped on a Redis Cluster: its commands cannot be counted through one tap");
        return;
    };
    with_env(|env| async move {
        let pg = Tap::start(&pg_addr(), Protocol::Postgres).await;
        let rd = Tap::start(&redis_addr, Protocol::Redis).await;
        let through_tap = pg_base().replacen(&pg_addr(), &pg.addr.to_string(), 1);
        let pool = db::lazy_pool(&format!("{through_tap}/{}?sslmode=disable", env.db_name()), 4)?;
        let redis_url = format!("redis://{}", rd.addr);
        let queue = Queue::new(queue::Redis::open(&redis_url)?, env.queue.keys().prefix());
        let scheduler = Scheduler::new(pool, queue, redis::Client::open(redis_url)?, SchedulerOptions::default())?;
        let (shutdown, task) = spawn(scheduler);

        // Start-up: each loop passes once, the reconciler sweeps, and the
        // new wake-up subscription rings every alarm once.
        tokio::time::sleep(Duration::from_secs(3)).await;
        anyhow::ensure!(pg.count() > 0, "the scheduler never reached Postgres through the tap");
        let (pg0, rd0) = (pg.count(), rd.count());
        let window = Duration::from_secs(10);
        tokio::time::sleep(window).await;
        let (statements, commands) = (pg.count() - pg0, rd.count() - rd0);
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await??;

        let secs = window.as_secs_f64();
        eprintln!(
            "idle scheduler: {:.2} Postgres statements/s, {:.2} Redis commands/s",
            statements as f64 / secs,
            commands as f64 / secs
        );
        anyhow::ensure!(
            statements as f64 <= secs,
            "{statements} Postgres statements in {secs} s of idling: more than one a second"
        );
        // The promoter, reaper and reconciler each read Redis about once a
        // second (each read costs the pool's recycle check too): a few
        // commands a second, not a busy loop.
        anyhow::ensure!(commands as f64 <= 20.0 * secs, "{commands} Redis commands in {secs} s of idling");
        Ok(())
    })
    .await;
}

/// The expirer sleeps its 30 s cap when no run can expire; a run made then,
/// announced as the api announces it, still expires within about a second
/// of its deadline.
#[tokio::test]
async fn a_run_made_while_the_expirer_sleeps_expires_on_time() {
    with_env(|env| async move {
        let (shutdown, task) = spawn(env.scheduler.clone());
        tokio::time::sleep(Duration::from_secs(2)).await;

        let expires_at = Utc::now() + chrono::Duration::seconds(1);
        let run = env.new_run("queued", |r| r.expires_at = Some(expires_at)).await;
        env.queue.wake(WakeLoop::Expirer, Some(expires_at));
        let took = wait_status(&env, &run.id, "expired", Duration::from_secs(5)).await?;
        let expired = env.run(&run.id).await;
        let finished = expired.finished_at.expect("finished_at");
        anyhow::ensure!(finished >= expires_at, "expired at {finished}, before its deadline {expires_at}");
        anyhow::ensure!(took <= Duration::from_millis(2_300), "expired {took:?} after it was made, deadline 1 s");

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await??;
        Ok(())
    })
    .await;
}

/// The dependency resolver sleeps while no run waits; a dependent made then
/// is released within about a second of its dependency completing.
#[tokio::test]
async fn a_dependent_made_while_the_resolver_sleeps_is_released_promptly() {
    with_env(|env| async move {
        let (shutdown, task) = spawn(env.scheduler.clone());
        tokio::time::sleep(Duration::from_secs(2)).await;

        let dep = env.new_run("queued", |_| {}).await;
        let waiting = env.new_run("pending", |r| r.awaiting_dependencies = true).await;
        sqlx::query("INSERT INTO job_run_dependencies (run_id, depends_on_run_id, position) VALUES ($1, $2, 0)")
            .bind(&waiting.id)
            .bind(&dep.id)
            .execute(&env.pool)
            .await?;
        env.queue.wake(WakeLoop::Dependencies, None);
        tokio::time::sleep(Duration::from_millis(700)).await;
        anyhow::ensure!(env.run(&waiting.id).await.status == "pending", "released before its dependency completed");

        env.update_run(&dep.id, "status = 'completed', finished_at = now()").await;
        let took = wait_status(&env, &waiting.id, "queued", Duration::from_secs(5)).await?;
        anyhow::ensure!(took <= Duration::from_millis(1_200), "released {took:?} after its dependency completed");

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await??;
        Ok(())
    })
    .await;
}

/// A wake-up is a Redis pub/sub message on the queue's channel, which every
/// scheduler process listens to. On a cluster the processes listen on its
/// first node and a message published on any node reaches every node, but
/// PUBLISH counts only the listeners of the node that took it: the
/// listeners are counted where they listen.
#[tokio::test]
async fn every_scheduler_process_hears_a_wake_up() {
    with_env(|env| async move {
        let (a, ta) = spawn(env.scheduler.clone());
        let other = Scheduler::new(env.pool.clone(), env.queue.clone(), env.wake_ups(), SchedulerOptions::default())?;
        let (b, tb) = spawn(other);
        let mut listeners = env.wake_ups().get_multiplexed_async_connection().await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let (_, n): (String, i64) =
                redis::cmd("PUBSUB").arg("NUMSUB").arg(&env.queue.keys().wake).query_async(&mut listeners).await?;
            if n == 2 {
                break;
            }
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "{n} processes listen, not 2");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let heard = env.queue.publish_wake(queue::WakeUp { to: WakeLoop::Cron, at_ms: None }).await?;
        if redis_addr().is_some() {
            anyhow::ensure!(heard == 2, "{heard} heard the wake-up, not 2");
        }
        a.cancel();
        b.cancel();
        tokio::time::timeout(Duration::from_secs(5), ta).await??;
        tokio::time::timeout(Duration::from_secs(5), tb).await??;
        Ok(())
    })
    .await;
}
