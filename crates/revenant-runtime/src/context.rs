//! What a handler knows about the attempt it is running.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::handler::JobError;
use revenant_core::job::JobId;

/// The attempt a handler is running: who the job is, how many tries it has had, when
/// the attempt must end, and a cancellation token.
///
/// Cheap to clone (one `Arc`).
#[derive(Clone, Debug)]
pub struct JobContext {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: JobId,
    queue: String,
    kind: String,
    attempt: i32,
    max_attempts: i32,
    deadline: Instant,
    correlation_id: Option<String>,
    worker: String,
    cancel: CancellationToken,
}

/// The fields of a [`JobContext`], for the runtime and for tests of handlers.
#[derive(Debug, Clone)]
pub struct JobContextParts {
    /// The job's id.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// This attempt (1-based, counted at claim).
    pub attempt: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// When the attempt times out.
    pub deadline: Instant,
    /// The job's correlation id.
    pub correlation_id: Option<String>,
    /// The worker running it.
    pub worker: String,
    /// Fired when the attempt must stop.
    pub cancel: CancellationToken,
}

impl JobContext {
    /// A context from its parts. The runtime builds these; handler unit tests may too.
    pub fn new(parts: JobContextParts) -> Self {
        let JobContextParts {
            id,
            queue,
            kind,
            attempt,
            max_attempts,
            deadline,
            correlation_id,
            worker,
            cancel,
        } = parts;
        JobContext {
            inner: Arc::new(Inner {
                id,
                queue,
                kind,
                attempt,
                max_attempts,
                deadline,
                correlation_id,
                worker,
                cancel,
            }),
        }
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.inner.id
    }

    /// The job's queue.
    pub fn queue(&self) -> &str {
        &self.inner.queue
    }

    /// The job's kind.
    pub fn kind(&self) -> &str {
        &self.inner.kind
    }

    /// This attempt, 1-based. Attempts are counted at claim, so a crashed attempt
    /// counts too.
    pub fn attempt(&self) -> i32 {
        self.inner.attempt
    }

    /// Attempts allowed before a transient failure makes the job dead.
    pub fn max_attempts(&self) -> i32 {
        self.inner.max_attempts
    }

    /// Whether a transient failure now would make the job dead.
    pub fn is_last_attempt(&self) -> bool {
        self.inner.attempt >= self.inner.max_attempts
    }

    /// When the attempt times out (the policy's `attempt_timeout` after it started).
    pub fn deadline(&self) -> Instant {
        self.inner.deadline
    }

    /// Time left before the attempt times out (zero once it has).
    pub fn remaining(&self) -> Duration {
        self.inner
            .deadline
            .saturating_duration_since(Instant::now())
    }

    /// The job's correlation id, when it was enqueued with one.
    pub fn correlation_id(&self) -> Option<&str> {
        self.inner.correlation_id.as_deref()
    }

    /// The id of the worker running this attempt.
    pub fn worker(&self) -> &str {
        &self.inner.worker
    }

    /// The token that fires when the attempt must stop: it timed out, its lease was
    /// lost, or the worker is shutting down past its grace period. Whatever the
    /// handler returns after that is discarded.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    /// Whether the attempt has been told to stop.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Completes when the attempt is told to stop. Use it in `tokio::select!`.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await
    }

    /// Runs an external call under its own timeout. The limit is also cut to the
    /// attempt's remaining time, so a call can never outlive its attempt.
    ///
    /// Running past the limit is a transient error (`retry`): a slow provider usually
    /// recovers. The call's own output is returned as is, so its error can still be
    /// classified: `ctx.timeout(d, send()).await?.permanent()?`.
    pub async fn timeout<F: Future>(
        &self,
        limit: Duration,
        call: F,
    ) -> Result<F::Output, JobError> {
        let limit = limit.min(self.remaining());
        match tokio::time::timeout(limit, call).await {
            Ok(output) => Ok(output),
            Err(_) => Err(JobError::retry(format!(
                "external call timed out after {}",
                revenant_core::duration::format(limit)
            ))),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::handler::JobAction;

    pub(crate) fn context(deadline_in: Duration) -> JobContext {
        JobContext::new(JobContextParts {
            id: 7,
            queue: "emails".into(),
            kind: "send_receipt".into(),
            attempt: 2,
            max_attempts: 2,
            deadline: Instant::now() + deadline_in,
            correlation_id: Some("order-1".into()),
            worker: "w1".into(),
            cancel: CancellationToken::new(),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_limit_is_a_transient_error() {
        let ctx = context(Duration::from_secs(30));
        let err = ctx
            .timeout(
                Duration::from_secs(2),
                tokio::time::sleep(Duration::from_secs(5)),
            )
            .await
            .unwrap_err();
        assert_eq!(err.action(), JobAction::Retry);
        assert_eq!(err.message(), "external call timed out after 2s");
        assert_eq!(
            ctx.timeout(Duration::from_secs(2), async { 5 })
                .await
                .unwrap(),
            5
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_never_outlives_its_attempt() {
        let ctx = context(Duration::from_secs(1));
        let started = Instant::now();
        let err = ctx
            .timeout(
                Duration::from_secs(60),
                tokio::time::sleep(Duration::from_secs(120)),
            )
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(err.action(), JobAction::Retry);
    }

    #[test]
    fn the_context_says_what_it_was_given() {
        let ctx = context(Duration::from_secs(1));
        assert_eq!(
            (ctx.id(), ctx.queue(), ctx.kind()),
            (7, "emails", "send_receipt")
        );
        assert!(ctx.is_last_attempt());
        assert_eq!(ctx.correlation_id(), Some("order-1"));
        assert!(!ctx.is_cancelled());
        ctx.cancellation().cancel();
        assert!(ctx.is_cancelled());
    }
}
