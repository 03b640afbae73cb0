//! Wake-ups: a signal per queue within the owning process, polling as the fallback.
//!
//! [`crate::SqliteStore::wait_for_jobs`] waits on its queue's signal, which fires when
//! this process makes a job of the queue claimable (an enqueue, a retry, a release, a
//! redrive, a resume, a finished group head). SQLite has no notification channel, so
//! another process writing the same file (the `revenant` CLI beside a worker) wakes
//! nobody: the worker finds its jobs at its next poll. That is why the backend does not
//! declare `cross_process_wakeup`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The per-store wake-up hub: one signal per queue, created on first use.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    queues: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Wakeups {
    fn signal(&self, queue: &str) -> Arc<Notify> {
        let mut queues = self
            .queues
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        queues.entry(queue.to_string()).or_default().clone()
    }

    /// Wakes the waiters of these queues. A permit is kept for the next waiter when
    /// none is waiting, so a wake-up between a fetcher's empty claim and its wait is
    /// not lost.
    pub(crate) fn wake<'a>(&self, queues: impl IntoIterator<Item = &'a String>) {
        for queue in queues {
            let signal = self.signal(queue);
            signal.notify_one();
            signal.notify_waiters();
        }
    }

    /// Waits for a wake-up on `queue` or `timeout`, whichever comes first.
    pub(crate) async fn wait(&self, queue: &str, timeout: Duration) {
        let signal = self.signal(queue);
        let _ = tokio::time::timeout(timeout, signal.notified()).await;
    }
}
