//! Shutdown is a value handed to every task: a cancellation token that fires
//! on SIGTERM or Ctrl-C. Tasks stop taking work when it fires and finish what
//! they hold within the grace period.

pub use tokio_util::sync::CancellationToken as Shutdown;

/// A token that is cancelled on SIGTERM or SIGINT.
pub fn on_signals() -> Shutdown {
    let token = Shutdown::new();
    let t = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("install SIGTERM handler");
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = ctrl_c.await;
        }
        tracing::info!("shutdown requested");
        t.cancel();
    });
    token
}
