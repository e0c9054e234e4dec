use std::time::Duration;

use chrono::Utc;
use switchyard_shared::domain::RunStatus;
use switchyard_shared::store::{runs, Outcome};

use crate::common::{at_ms, now_ms, with_env};

const LEASE: Duration = Duration::from_secs(30);

fn outcome(status: RunStatus, next_retry_at: Option<chrono::DateTime<Utc>>) -> Outcome {
    Outcome {
        status,
        result: None,
        error: None,
        error_class: None,
        status_code: Some(200),
        endpoint_url: "http://127.0.0.1:9/never".into(),
        next_retry_at,
        attempt_started_at: Utc::now(),
        trace: serde_json::json!({}),
        webhook_url: None,
        // No webhook or subscription here names what its notifications say.
        job_id: Default::default(),
        project_id: String::new(),
        attempt: 1,
        workflow_step_run_id: None,
    }
}

#[tokio::test]
async fn expired_lease_is_redelivered_on_the_same_attempt() {
    with_env(|env| async move {
        let now = now_ms();
        let run = env.new_run("queued", |_| {}).await;
        assert!(env.queue.enqueue(&run.entry(), 0, now).await?);
        let leased = env.queue.dequeue(1, LEASE, now).await?;
        assert_eq!(leased, vec![run.entry()]);
        let first = runs::claim(&env.pool, &run.id).await?.expect("claim");
        assert_eq!(first.attempt, 1);

        // The lease is still good: nothing happens.
        let report = env.scheduler.reap_once(now + 10_000).await?;
        assert_eq!(report.expired, 0);
        assert_eq!(env.run(&run.id).await.status, "running");

        // The worker died: its lease runs out.
        let later = now + LEASE.as_millis() as i64 + 1_000;
        let report = env.scheduler.reap_once(later).await?;
        assert_eq!((report.expired, report.redelivered, report.failed), (1, 1, 0), "{report:?}");
        let requeued = env.run(&run.id).await;
        assert_eq!(requeued.status, "queued");
        assert_eq!(requeued.attempt, first.attempt - 1);
        assert_eq!(env.place_of(&run.entry()).await, Some("ready"));

        // The next worker gets the same attempt number, hence the same
        // idempotency key at the target.
        let leased = env.queue.dequeue(1, LEASE, later).await?;
        assert_eq!(leased, vec![run.entry()]);
        let second = runs::claim(&env.pool, &run.id).await?.expect("claim again");
        assert_eq!(second.attempt, first.attempt);
        assert!(second.dispatch_token > first.dispatch_token, "the stalled worker is fenced off");
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn expired_lease_of_a_recorded_outcome_follows_postgres() {
    with_env(|env| async move {
        let now = now_ms();
        let done = env.new_run("queued", |_| {}).await;
        let failing = env.new_run("queued", |_| {}).await;
        let overdue = env.new_run("queued", |_| {}).await;
        for r in [&done, &failing, &overdue] {
            assert!(env.queue.enqueue(&r.entry(), 0, now).await?);
        }
        assert_eq!(env.queue.dequeue(3, LEASE, now).await?.len(), 3);
        let retry_at = at_ms(now + 120_000);
        let overdue_at = at_ms(now + 1_000);
        for (r, o) in [
            (&done, outcome(RunStatus::Completed, None)),
            (&failing, outcome(RunStatus::Retrying, Some(retry_at))),
            (&overdue, outcome(RunStatus::Retrying, Some(overdue_at))),
        ] {
            let claimed = runs::claim(&env.pool, &r.id).await?.expect("claim");
            // Outcome committed, then the worker died before its ack.
            assert!(runs::finish_attempt(&env.pool, &r.id, claimed.dispatch_token, &o).await?);
        }

        let later = now + LEASE.as_millis() as i64 + 1;
        let report = env.scheduler.reap_once(later).await?;
        assert_eq!((report.expired, report.requeued, report.released), (3, 2, 1), "{report:?}");
        assert_eq!(env.place_of(&done.entry()).await, None);
        assert_eq!(env.run(&done.id).await.status, "completed");
        assert_eq!(env.place_of(&failing.entry()).await, Some("scheduled"));
        let score = env.score(&env.queue.keys().scheduled, &failing.entry()).await;
        assert_eq!(score, Some(retry_at.timestamp_millis() as f64), "due at next_retry_at");
        assert_eq!(env.run(&failing.id).await.status, "retrying");

        // Past its retry time but still `retrying`: it waits in `scheduled`
        // for the promoter rather than reaching a worker that cannot claim it.
        assert_eq!(env.place_of(&overdue.entry()).await, Some("scheduled"));
        let promoted = env.scheduler.promote_once(later).await?;
        assert_eq!(promoted.promoted, 1);
        assert_eq!(env.run(&overdue.id).await.status, "queued");
        assert_eq!(env.place_of(&overdue.entry()).await, Some("ready"));
        Ok(())
    })
    .await;
}
