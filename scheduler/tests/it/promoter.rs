use std::time::Duration;

use switchyard_shared::queue::Entry;
use switchyard_shared::store::runs;

use crate::common::{at_ms, now_ms, with_env};

#[tokio::test]
async fn promotes_a_run_only_after_postgres_says_queued() {
    with_env(|env| async move {
        let now = now_ms();
        let delayed = env.new_run("pending", |r| r.scheduled_at = Some(at_ms(now - 1_000))).await;
        let retry = env.new_run("retrying", |_| {}).await;
        env.update_run(&retry.id, "attempt = 1, next_retry_at = now() - interval '1 second'").await;
        // A pass that flipped the run and died before moving the entry.
        let already = env.new_run("queued", |_| {}).await;
        let cancelled = env.new_run("cancelled", |_| {}).await;
        let running = env.new_run("running", |_| {}).await;
        let later = env.new_run("retrying", |_| {}).await;
        let gone = Entry::new(&"run_gone".into(), &env.job_id, &env.project_id, 0, at_ms(now), None);
        for (entry, due) in [
            (delayed.entry(), now - 1_000),
            (retry.entry(), now - 500),
            (already.entry(), now - 100),
            (cancelled.entry(), now - 100),
            (running.entry(), now - 100),
            (gone.clone(), now - 100),
            (later.entry(), now + 60_000),
        ] {
            env.schedule(&entry, due).await;
        }

        let report = env.scheduler.promote_once(now).await?;
        assert_eq!((report.due, report.promoted, report.dropped), (6, 3, 3), "{report:?}");
        let next = report.next_due.expect("`later` is still scheduled");
        assert!(next > Duration::from_secs(59) && next <= Duration::from_secs(60), "{next:?}");

        for r in [&delayed, &retry, &already] {
            assert_eq!(env.run(&r.id).await.status, "queued", "{}", r.id);
            assert_eq!(env.place_of(&r.entry()).await, Some("ready"), "{}", r.id);
        }
        assert_eq!(env.run(&cancelled.id).await.status, "cancelled");
        assert_eq!(env.run(&running.id).await.status, "running");
        for e in [cancelled.entry(), running.entry(), gone] {
            assert_eq!(env.place_of(&e).await, None, "{e:?} should be dropped");
        }
        assert_eq!(env.run(&later.id).await.status, "retrying", "not due yet");
        assert_eq!(env.place_of(&later.entry()).await, Some("scheduled"));

        // The flip happened before the move: a worker can claim what it dequeues.
        let leased = env.queue.dequeue(10, Duration::from_secs(30), now).await?;
        assert_eq!(leased.len(), 3);
        for e in leased {
            assert!(runs::claim(&env.pool, &e.run_id).await?.is_some(), "claim of {}", e.run_id);
        }
        let retried = env.run(&retry.id).await;
        assert_eq!(retried.attempt, 2);

        // A second pass finds nothing due.
        let again = env.scheduler.promote_once(now).await?;
        assert_eq!((again.due, again.promoted, again.dropped), (0, 0, 0));
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn queue_moves_and_drops_only_named_entries_still_due() {
    with_env(|env| async move {
        let now = now_ms();
        let t = at_ms(now);
        let a = Entry::new(&"run_a".into(), &env.job_id, &env.project_id, 0, t, None);
        let b = Entry::new(&"run_b".into(), &env.job_id, &env.project_id, 0, t, Some("tenant|1"));
        let c = Entry::new(&"run_c".into(), &env.job_id, &env.project_id, 0, t, None);
        env.schedule(&a, now - 10).await;
        env.schedule(&b, now - 10).await;
        env.schedule(&c, now + 10_000).await;

        let due = env.queue.due_scheduled(now, 10).await?;
        assert_eq!(due.len(), 2);
        assert!(due.contains(&a) && due.contains(&b));
        assert_eq!(env.queue.due_scheduled(now, 1).await?.len(), 1, "limit applies");

        // Only named, still-due entries move: `b` is due but not named,
        // `c` is named but not due.
        let (moved, next) = env.queue.promote(&[a.clone(), c.clone()], now).await?;
        assert_eq!(moved, 1);
        assert_eq!(next, Some(Duration::ZERO), "`b` is due");
        assert_eq!(env.place_of(&a).await, Some("ready"));
        assert_eq!(env.place_of(&b).await, Some("scheduled"));
        assert_eq!(env.place_of(&c).await, Some("scheduled"));
        assert_eq!(env.queue.promote(std::slice::from_ref(&a), now).await?.0, 0, "moves once");

        // Dropping spares an entry scheduled for later than the caller's now.
        assert_eq!(env.queue.remove_scheduled(&[b.clone(), c.clone(), a.clone()], now).await?, 1);
        assert_eq!(env.place_of(&b).await, None);
        assert_eq!(env.place_of(&c).await, Some("scheduled"));
        assert_eq!(env.place_of(&a).await, Some("ready"), "not in scheduled, untouched");

        let (moved, next) = env.queue.promote(&[], now).await?;
        assert_eq!(moved, 0);
        let next = next.expect("c is scheduled");
        assert!(next > Duration::from_secs(9) && next <= Duration::from_secs(10), "{next:?}");
        env.queue.remove_scheduled(std::slice::from_ref(&c), now + 10_000).await?;
        assert_eq!(env.queue.promote(&[], now).await?, (0, None));
        Ok(())
    })
    .await;
}
