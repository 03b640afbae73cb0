//! Wake-ups: LISTEN/NOTIFY across processes, a direct signal within one, polling as the
//! fallback.
//!
//! # How a worker wakes
//!
//! [`crate::PgStore::wait_for_jobs`] waits on a per-queue signal. The signal fires
//! when this process makes a job of the queue due (enqueue, release, retry with no
//! delay, redrive) and when a notification arrives on the store's channel
//! (`<schema>.wakeup`, payload: the queue name) from any process. A dedicated
//! connection (not one of the pool's) LISTENs; when it drops, a background task
//! reconnects with backoff, and while it is down waits are cut to the fallback poll
//! interval so claiming continues by polling. On every (re)connect all waiters are
//! woken, since notifications sent while it was down are lost.
//!
//! # Why notifications are coalesced
//!
//! PostgreSQL serializes the commits of transactions that sent a NOTIFY (they take one
//! database-wide lock to append to the notification queue). One NOTIFY per enqueued
//! job would make every enqueue commit wait in that line. So:
//!
//! - a statement notifies once per distinct queue, never per row, and only for jobs due
//!   now (a scheduled job or a retry in backoff wakes nobody; the worker's poll finds
//!   it);
//! - jobs written by the store itself are announced after their transaction commits,
//!   in a separate `pg_notify` statement, so the enqueue's own commit never takes the
//!   notification lock;
//! - each process sends at most one notification per queue per `notify_interval`
//!   (default 50 ms): the first goes at once (an idle fleet wakes within
//!   milliseconds), later ones inside the window are folded into one trailing
//!   notification at the window's end. Under load that caps notifying commits at
//!   about 20 per second per queue per process, whatever the enqueue rate, while a
//!   busy worker keeps claiming without needing wake-ups at all.
//! - a transactional enqueue ([`crate::PgStore::job_enqueue_tx`]) notifies inside the
//!   caller's transaction (a notification is delivered only at commit, so a rolled-back
//!   job wakes nobody), subject to the same per-queue window.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The per-store wake-up hub. Shared by the store and its listener task.
#[derive(Debug)]
pub(crate) struct Wakeups {
    /// The NOTIFY channel: `<schema>.wakeup`.
    channel: String,
    /// Signals per queue, created on first use.
    queues: Mutex<HashMap<String, Arc<Notify>>>,
    /// When this process last notified each queue, and whether a trailing notification
    /// is already scheduled.
    sent: Mutex<HashMap<String, Sent>>,
    /// Whether the listener connection is up (waits are cut to the fallback poll
    /// interval when it is not).
    listening: AtomicBool,
    /// Whether the listener task was started (it starts on the first wait).
    started: AtomicBool,
    /// Stops the listener task when the store is dropped.
    stop: CancellationToken,
    /// The pool for the listener's one connection.
    listener_pool: PgPool,
    /// The store's pool, for trailing notifications.
    pool: PgPool,
    /// The rendered `job_notify` statement.
    notify_sql: String,
    notify_interval: Duration,
    fallback_poll: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    at: Instant,
    trailing: bool,
}

impl Wakeups {
    pub(crate) fn new(
        schema: &str,
        pool: PgPool,
        listener_pool: PgPool,
        notify_sql: String,
        notify_interval: Duration,
        fallback_poll: Duration,
    ) -> Self {
        Wakeups {
            channel: channel_for(schema),
            queues: Mutex::new(HashMap::new()),
            sent: Mutex::new(HashMap::new()),
            listening: AtomicBool::new(false),
            started: AtomicBool::new(false),
            stop: CancellationToken::new(),
            listener_pool,
            pool,
            notify_sql,
            notify_interval,
            fallback_poll,
        }
    }

    /// The NOTIFY channel.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// Stops the listener task.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    fn signal(&self, queue: &str) -> Arc<Notify> {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.entry(queue.to_string()).or_default().clone()
    }

    /// Wakes this process's waiters on `queue`. A wake with no waiter is kept for the
    /// next wait (at most one), so a wake between a claim and the next wait is not lost.
    pub(crate) fn wake_local(&self, queue: &str) {
        let signal = self.signal(queue);
        signal.notify_waiters();
        signal.notify_one();
    }

    fn wake_all_local(&self) {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        for signal in queues.values() {
            signal.notify_waiters();
            signal.notify_one();
        }
    }

    /// Waits for a wake-up on `queue` or `timeout`, whichever comes first. While the
    /// listener is down the wait is cut to the fallback poll interval.
    pub(crate) async fn wait(self: &Arc<Self>, queue: &str, timeout: Duration) {
        self.ensure_listening();
        let signal = self.signal(queue);
        let limit = if self.listening.load(Ordering::Relaxed) {
            timeout
        } else {
            timeout.min(self.fallback_poll)
        };
        let _ = tokio::time::timeout(limit, signal.notified()).await;
    }

    /// Decides whether to notify `queue` now. `false` means a notification went out
    /// within the window; a trailing one is then scheduled (once per window) so the
    /// jobs made due now still wake other processes.
    pub(crate) fn admit(self: &Arc<Self>, queue: &str) -> bool {
        let now = Instant::now();
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        match sent.get_mut(queue) {
            Some(entry) if now.duration_since(entry.at) < self.notify_interval => {
                if !entry.trailing {
                    entry.trailing = true;
                    let due = entry.at + self.notify_interval;
                    self.schedule_trailing(queue.to_string(), now, due);
                }
                false
            }
            Some(entry) => {
                // A trailing notification still pending (its timer is late) sees this
                // one went out after it was requested, and stays silent.
                entry.at = now;
                true
            }
            None => {
                sent.insert(
                    queue.to_string(),
                    Sent {
                        at: now,
                        trailing: false,
                    },
                );
                true
            }
        }
    }

    /// Sends one notification for `queue` at `due`, unless one went out after
    /// `requested` (it covered the jobs this one was for).
    fn schedule_trailing(self: &Arc<Self>, queue: String, requested: Instant, due: Instant) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(due.into()).await;
            let needed = {
                let mut sent = this.sent.lock().unwrap_or_else(|e| e.into_inner());
                let entry = sent.entry(queue.clone()).or_insert(Sent {
                    at: requested,
                    trailing: true,
                });
                entry.trailing = false;
                if entry.at > requested {
                    false
                } else {
                    entry.at = Instant::now();
                    true
                }
            };
            if needed {
                this.send(vec![queue]).await;
            }
        });
    }

    /// Announces, after a commit of this store, that jobs of `queues` are due: wakes
    /// local waiters at once and notifies other processes (coalesced, in the
    /// background: the caller does not wait for it).
    pub(crate) fn announce(self: &Arc<Self>, queues: Vec<String>) {
        let mut admitted = Vec::new();
        for queue in dedup(queues) {
            self.wake_local(&queue);
            if self.admit(&queue) {
                admitted.push(queue);
            }
        }
        if !admitted.is_empty() {
            let this = Arc::clone(self);
            tokio::spawn(async move { this.send(admitted).await });
        }
    }

    /// Sends one NOTIFY per queue in its own statement. Failures are logged: a lost
    /// wake-up costs latency (the poll finds the job), never a job.
    async fn send(&self, queues: Vec<String>) {
        let result = sqlx::query(&self.notify_sql)
            .bind(&self.channel)
            .bind(&queues)
            .execute(&self.pool)
            .await;
        if let Err(err) = result {
            tracing::debug!(error = %err, ?queues, "wake-up notification not sent; workers will poll");
        }
    }

    fn ensure_listening(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = Arc::clone(self);
        tokio::spawn(async move { this.listen_loop().await });
    }

    /// Keeps a LISTEN connection up until the store is dropped.
    async fn listen_loop(self: Arc<Self>) {
        const MIN_BACKOFF: Duration = Duration::from_millis(100);
        const MAX_BACKOFF: Duration = Duration::from_secs(5);
        let mut backoff = MIN_BACKOFF;
        loop {
            let connected = tokio::select! {
                _ = self.stop.cancelled() => return,
                connected = self.listen_connect() => connected,
            };
            let mut listener = match connected {
                Ok(listener) => listener,
                Err(err) => {
                    self.set_listening(false);
                    tracing::debug!(error = %err, retry_in = ?backoff, "wake-up listener cannot connect; polling meanwhile");
                    tokio::select! {
                        _ = self.stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            self.set_listening(true);
            backoff = MIN_BACKOFF;
            loop {
                let received = tokio::select! {
                    _ = self.stop.cancelled() => return,
                    received = listener.try_recv() => received,
                };
                match received {
                    Ok(Some(notification)) => self.wake_local(notification.payload()),
                    // The connection dropped and sqlx reconnected and re-LISTENed before
                    // returning: anything sent meanwhile is lost, so wake everyone.
                    Ok(None) => {
                        tracing::debug!("wake-up listener reconnected");
                        self.wake_all_local();
                    }
                    Err(err) => {
                        self.set_listening(false);
                        tracing::debug!(error = %err, "wake-up listener lost its connection; polling meanwhile");
                        break;
                    }
                }
            }
        }
    }

    async fn listen_connect(&self) -> Result<PgListener, sqlx::Error> {
        let mut listener = PgListener::connect_with(&self.listener_pool).await?;
        listener.listen(&self.channel).await?;
        Ok(listener)
    }

    fn set_listening(&self, up: bool) {
        let was = self.listening.swap(up, Ordering::AcqRel);
        if was != up {
            // Waits started under the other mode are re-armed with the right limit;
            // after a reconnect, notifications sent while down are lost anyway.
            self.wake_all_local();
        }
    }
}

/// The channel for a schema. PostgreSQL limits channel names to 63 bytes; schema
/// names are limited to 50 (see [`crate::PgStoreOptions::schema`]).
pub(crate) fn channel_for(schema: &str) -> String {
    format!("{schema}.wakeup")
}

fn dedup(mut queues: Vec<String>) -> Vec<String> {
    queues.sort();
    queues.dedup();
    queues
}
