use std::time::Duration;

use chrono::Utc;
use switchyard_scheduler::{Reconciler, ReconcilerOptions};
use switchyard_shared::domain::JobSpec;
use switchyard_shared::store::runs;

use crate::common::{at_ms, now_ms, with_env};

#[tokio::test]
async fn rebuilds_a_lost_redis_once_and_only_once() {
    with_env(|env| async move {
        let now = now_ms();
        let mut spec = JobSpec::with_endpoint("http://127.0.0.1:9/never");
        spec.max_concurrency = 2;
        sqlx::query("UPDATE jobs SET spec = $2 WHERE id = $1")
            .bind(&env.job_id)
            .bind(sqlx::types::Json(&spec))
            .execute(&env.pool)
            .await?;

        let queued = env.new_run("queued", |_| {}).await;
        let retry_later = env.new_run("retrying", |_| {}).await;
        env.update_run(&retry_later.id, "attempt = 1, next_retry_at = now() + interval '1 hour'").await;
        let retry_due = env.new_run("retrying", |_| {}).await;
        env.update_run(&retry_due.id, "attempt = 1, next_retry_at = now() - interval '1 minute'").await;
        let delayed = env.new_run("pending", |r| r.scheduled_at = Some(at_ms(now + 3_600_000))).await;
        let blocked = env.new_run("pending", |_| {}).await;
        let done = env.new_run("completed", |_| {}).await;
        let lost = env.new_run("running", |_| {}).await;
        env.update_run(
            &lost.id,
            "attempt = 1, started_at = now() - interval '1 hour', heartbeat_at = now() - interval '1 hour'",
        )
        .await;
        let alive = env.new_run("running", |_| {}).await;
        env.update_run(&alive.id, "attempt = 1, started_at = now(), heartbeat_at = now()").await;

        // Redis as the api left it, then lost.
        assert!(env.queue.enqueue(&queued.entry(), 0, now).await?);
        env.queue.mark_initialised(0).await?;
        env.delete_all_keys().await;
        assert!(!env.queue.is_initialised().await?);

        let first = env.scheduler.reconcile_once().await?;
        assert_eq!(first.runs_seen, 7, "{first:?}");
        assert_eq!(first.re_enqueued, 4, "queued, both retrying, delayed: {first:?}");
        assert_eq!(first.recovered_running, 0, "the rebuild leaves running runs to the next sweep: {first:?}");
        assert_eq!(first.limits_pushed, 1);
        assert!(first.marked_initialised && !first.lost_during_sweep);
        assert!(env.queue.is_initialised().await?);

        let k = env.queue.keys().clone();
        assert_eq!(env.run(&lost.id).await.status, "running", "its worker may still hold it");
        // The next sweep: its worker would have taken its lease again by now.
        let next = env.scheduler.reconcile_once().await?;
        assert_eq!((next.recovered_running, next.re_enqueued, next.marked_initialised), (1, 0, false), "{next:?}");
        let counts = (env.zcard(&k.ready).await, env.zcard(&k.scheduled).await, env.zcard(&k.leases).await);
        assert_eq!(counts, (2, 3, 0), "ready: queued, lost; scheduled: both retrying, delayed");
        for (r, place) in [
            (&queued, Some("ready")),
            (&lost, Some("ready")),
            (&retry_due, Some("scheduled")),
            (&retry_later, Some("scheduled")),
            (&delayed, Some("scheduled")),
            (&blocked, None),
            (&done, None),
            (&alive, None),
        ] {
            assert_eq!(env.place_of(&r.entry()).await, place, "{}", r.id);
        }
        let retry_score = env.score(&k.scheduled, &retry_later.entry()).await.expect("scheduled");
        let next_retry = env.run(&retry_later.id).await.next_retry_at.expect("set");
        assert_eq!(retry_score, next_retry.timestamp_millis() as f64);
        assert_eq!(env.hget(&k.limits, &env.job_id).await.as_deref(), Some("2|0|0|0|0"));

        let recovered = env.run(&lost.id).await;
        assert_eq!((recovered.status.as_str(), recovered.attempt), ("queued", 0), "redelivers attempt 1");
        assert_eq!(env.run(&alive.id).await.status, "running", "a fresh heartbeat is left alone");
        // A retry whose time has passed waits in `scheduled` for the
        // promoter, which flips it to `queued` before a worker can see it.
        assert_eq!(env.run(&retry_due.id).await.status, "retrying");

        // Nothing is queued twice.
        let second = env.scheduler.reconcile_once().await?;
        assert_eq!((second.re_enqueued, second.recovered_running, second.marked_initialised), (0, 0, false));
        assert_eq!(second.limits_pushed, 1);
        let again = (env.zcard(&k.ready).await, env.zcard(&k.scheduled).await, env.zcard(&k.leases).await);
        assert_eq!(again, counts);

        let promoted = env.scheduler.promote_once(now_ms()).await?;
        assert_eq!(promoted.promoted, 1, "{promoted:?}");
        assert_eq!(env.run(&retry_due.id).await.status, "queued");
        assert_eq!(env.place_of(&retry_due.entry()).await, Some("ready"));
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn a_leased_running_run_is_not_recovered() {
    with_env(|env| async move {
        let now = now_ms();
        let run = env.new_run("queued", |_| {}).await;
        assert!(env.queue.enqueue(&run.entry(), 0, now).await?);
        env.queue.dequeue(1, Duration::from_secs(30), now).await?;
        runs::claim(&env.pool, &run.id).await?.expect("queued");
        // Silent for an hour, but its lease is live: the reaper's business.
        env.update_run(&run.id, "heartbeat_at = now() - interval '1 hour', started_at = now() - interval '1 hour'")
            .await;
        let report = env.scheduler.reconcile_once().await?;
        assert_eq!((report.re_enqueued, report.recovered_running), (0, 0), "{report:?}");
        assert_eq!(env.run(&run.id).await.status, "running");
        assert_eq!(env.place_of(&run.entry()).await, Some("leases"));
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn one_process_sweeps_per_interval_but_a_flush_frees_the_lock() {
    with_env(|env| async move {
        let opts = ReconcilerOptions { interval: Duration::from_secs(60), ..ReconcilerOptions::default() };
        let a = Reconciler::new(env.pool.clone(), env.queue.clone(), opts.clone())?;
        let b = Reconciler::new(env.pool.clone(), env.queue.clone(), opts)?;
        let queued = env.new_run("queued", |_| {}).await;

        let swept = a.sweep_if_leader(Utc::now()).await?.expect("a leads");
        assert_eq!(swept.re_enqueued, 1);
        assert!(b.sweep_if_leader(Utc::now()).await?.is_none(), "b waits for the interval");
        assert!(a.sweep_if_leader(Utc::now()).await?.is_none(), "a too: the lock is per interval");

        env.delete_all_keys().await;
        let rebuilt = b.sweep_if_leader(Utc::now()).await?.expect("the lock went with the data");
        assert_eq!((rebuilt.re_enqueued, rebuilt.marked_initialised), (1, true));
        assert_eq!(env.place_of(&queued.entry()).await, Some("ready"));
        Ok(())
    })
    .await;
}
