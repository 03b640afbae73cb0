//! Graceful shutdown: the signals that start it and the handle that starts it by hand.
//! What happens after is in [`crate::Worker::run_until`].

use tokio_util::sync::CancellationToken;

/// Starts a worker's graceful shutdown, as SIGTERM would. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ShutdownHandle {
    token: CancellationToken,
}

impl ShutdownHandle {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Stops claiming and starts the grace period. Calling it again does nothing.
    pub fn shutdown(&self) {
        self.token.cancel();
    }

    /// Whether shutdown has started.
    pub fn is_shutdown(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// Completes at the first SIGTERM or Ctrl-C (SIGINT). If the signal handlers cannot be
/// installed, logs it and never completes (the worker then runs until killed, like
/// any process without handlers).
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(term) => term,
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                return std::future::pending().await;
            }
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            result = tokio::signal::ctrl_c() => match result {
                Ok(()) => tracing::info!("Ctrl-C received"),
                Err(err) => {
                    tracing::error!(error = %err, "cannot listen for Ctrl-C");
                    term.recv().await;
                }
            },
        }
    }
    #[cfg(not(unix))]
    {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}
