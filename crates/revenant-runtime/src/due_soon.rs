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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A small margin past a retry's due time: the store's `run_at` is in whole
/// milliseconds and was set at its write, a little after the delay was decided.
const MARGIN: Duration = Duration::from_millis(2);

/// Due times of this worker's short retries, per queue.
#[derive(Debug)]
pub(crate) struct DueSoon {
    horizon: Duration,
    due: Mutex<HashMap<String, BinaryHeap<Reverse<Instant>>>>,
}

impl DueSoon {
    /// Notes retries due within `horizon` (the poll interval).
    pub(crate) fn new(horizon: Duration) -> Self {
        DueSoon {
            horizon,
            due: Mutex::new(HashMap::new()),
        }
    }

    /// A retry of `queue` was written just now, due after `delay`.
    pub(crate) fn note(&self, queue: &str, delay: Duration) {
        if delay >= self.horizon {
            return;
        }
        let at = Instant::now() + delay + MARGIN;
        let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        due.entry(queue.to_string()).or_default().push(Reverse(at));
    }

    /// How long the fetcher of `queue` may sleep: `poll`, or less when one of the
    /// noted retries comes due sooner. Retries already due are forgotten: the claim
    /// that follows this wait finds them.
    pub(crate) fn wait_for(&self, queue: &str, poll: Duration) -> Duration {
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
}
