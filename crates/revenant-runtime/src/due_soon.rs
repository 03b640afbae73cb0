//! Retries this worker scheduled that come due before its next poll.
//!
//! A job that fails with a short backoff (milliseconds, as in tests and fast
//! dependencies) comes due with nothing to wake the fetcher: wake-ups announce jobs
//! that are due now, and a retry in backoff is not. Without this, such a retry waits
//! out the poll interval (1 s by default) however short its backoff, and a job retried
//! four times spends four poll intervals waiting. The executor notes each retry it
//! wrote whose delay is shorter than the poll interval; the fetcher sleeps no longer
//! than until the earliest one. Retries due later than one poll interval are found by
//! the poll, at most one interval late, which is small next to their delay. Retries
//! written by other processes are found by the poll too.
//!
//! A fetcher that is already asleep when a retry is noted wakes to shorten its sleep
//! ([`DueSoon::wait`]): a retry is noted once its failure is written, and on a worker
//! that claims ahead the completer writes up to 10 ms after the slot was freed, so the
//! fetcher's claim often came back short (and it went to sleep for the poll interval)
//! before the retry was noted. Without the wake-up, W2's failing drain took about 3.5 s
//! instead of 0.6 in about one run of four: three retries that each waited out a
//! whole second.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// A small margin past a retry's due time: the store's `run_at` is in whole
/// milliseconds and was set at its write, a little after the delay was decided.
const MARGIN: Duration = Duration::from_millis(2);

/// Due times of this worker's short retries, per queue.
#[derive(Debug)]
pub(crate) struct DueSoon {
    horizon: Duration,
    due: Mutex<HashMap<String, BinaryHeap<Reverse<Instant>>>>,
    /// Signalled at every note, for the fetchers asleep in [`DueSoon::wait`].
    noted: Notify,
}

impl DueSoon {
    /// Notes retries due within `horizon` (the poll interval).
    pub(crate) fn new(horizon: Duration) -> Self {
        DueSoon {
            horizon,
            due: Mutex::new(HashMap::new()),
            noted: Notify::new(),
        }
    }

    /// A retry of `queue` was written just now, due after `delay`.
    pub(crate) fn note(&self, queue: &str, delay: Duration) {
        if delay >= self.horizon {
            return;
        }
        let at = Instant::now() + delay + MARGIN;
        {
            let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
            due.entry(queue.to_string()).or_default().push(Reverse(at));
        }
        self.noted.notify_waiters();
    }

    /// Sleeps until `woken` ends (the store's wake-up for `queue`, with `poll` as its
    /// longest wait) or until the earliest noted retry of `queue` comes due, whichever
    /// is first; a retry noted meanwhile shortens the sleep.
    pub(crate) async fn wait(&self, queue: &str, poll: Duration, woken: impl Future<Output = ()>) {
        tokio::pin!(woken);
        loop {
            // Listening before reading the due times: a note between the two wakes it.
            let noted = self.noted.notified();
            tokio::pin!(noted);
            noted.as_mut().enable();
            let sleep = self.wait_for(queue, poll);
            tokio::select! {
                () = &mut woken => return,
                () = tokio::time::sleep(sleep) => return,
                () = noted => {}
            }
        }
    }

    /// How long the fetcher of `queue` may sleep: `poll`, or less when one of the
    /// noted retries comes due sooner. Retries already due are forgotten: the claim
    /// that follows this wait finds them.
    fn wait_for(&self, queue: &str, poll: Duration) -> Duration {
        let now = Instant::now();
        let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        let Some(heap) = due.get_mut(queue) else {
            return poll;
        };
        while heap.peek().is_some_and(|Reverse(at)| *at <= now) {
            heap.pop();
        }
        heap.peek()
            .map_or(poll, |Reverse(at)| poll.min(at.duration_since(now)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_fetcher_sleeps_until_the_earliest_short_retry() {
        let poll = Duration::from_secs(1);
        let soon = DueSoon::new(poll);
        assert_eq!(soon.wait_for("q", poll), poll, "nothing noted");
        soon.note("q", Duration::from_millis(300));
        soon.note("q", Duration::from_millis(100));
        soon.note("q", Duration::from_secs(5)); // past the horizon: the poll finds it
        soon.note("other", Duration::from_millis(10));
        assert_eq!(soon.wait_for("q", poll), Duration::from_millis(102));
        tokio::time::advance(Duration::from_millis(150)).await;
        assert_eq!(soon.wait_for("q", poll), Duration::from_millis(152));
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(soon.wait_for("q", poll), poll, "every noted retry is due");
        assert_eq!(soon.wait_for("other", poll), poll);
    }

    /// A fetcher asleep for the poll interval wakes for a retry noted after it fell
    /// asleep, at the retry's due time, not at the end of the interval.
    #[tokio::test(start_paused = true)]
    async fn a_retry_noted_during_the_sleep_shortens_it() {
        let poll = Duration::from_secs(1);
        let soon = std::sync::Arc::new(DueSoon::new(poll));
        let start = Instant::now();
        let sleeper = tokio::spawn({
            let soon = soon.clone();
            async move {
                soon.wait("q", poll, std::future::pending()).await;
                start.elapsed()
            }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        soon.note("other", Duration::from_millis(10)); // another queue's: no shorter sleep
        tokio::time::sleep(Duration::from_millis(5)).await;
        soon.note("q", Duration::from_millis(10));
        let slept = sleeper.await.unwrap();
        assert_eq!(slept, Duration::from_millis(5 + 5 + 10) + MARGIN);
    }

    /// The store's wake-up ends the sleep at once, and nothing noted, the sleep ends at
    /// the poll interval.
    #[tokio::test(start_paused = true)]
    async fn the_sleep_ends_at_the_wake_up_or_the_poll_interval() {
        let poll = Duration::from_secs(1);
        let soon = DueSoon::new(poll);
        let start = Instant::now();
        soon.wait("q", poll, tokio::time::sleep(Duration::from_millis(30)))
            .await;
        assert_eq!(start.elapsed(), Duration::from_millis(30));
        let start = Instant::now();
        soon.wait("q", poll, std::future::pending()).await;
        assert_eq!(start.elapsed(), poll);
    }
}
