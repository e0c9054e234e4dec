use std::time::Duration;

use switchyard_shared::shutdown::Shutdown;

use crate::common::{at_ms, now_ms, with_env};

/// The loops, started as `run` starts them, promote a delayed run when it
/// comes due, rebuild the empty queue at start, and all stop on shutdown
/// (`run` names any that outlives its grace).
#[tokio::test]
async fn loops_promote_on_time_and_stop_on_shutdown() {
    with_env(|env| async move {
        let due = now_ms() + 300;
        let delayed = env.new_run("pending", |r| r.scheduled_at = Some(at_ms(due))).await;
        env.schedule(&delayed.entry(), due).await;

        let shutdown = Shutdown::new();
        let scheduler = env.scheduler.clone();
        let stop = shutdown.clone();
        let task = tokio::spawn(async move { scheduler.run(stop, Duration::from_secs(20)).await });

        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let promoted = env.place_of(&delayed.entry()).await == Some("ready");
            if promoted && env.queue.is_initialised().await? {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "not promoted within 10 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(now_ms() >= due, "promoted before it was due");
        assert_eq!(env.run(&delayed.id).await.status, "queued");

        shutdown.cancel();
        let left = tokio::time::timeout(Duration::from_secs(30), task).await??;
        assert!(left.is_empty(), "loops still running after shutdown: {left:?}");
        Ok(())
    })
    .await;
}
