//! The handler API: what user code implements, and the error type that says what to
//! do when it fails.
//!
//! A handler is registered for one kind and receives its payload decoded into its own
//! serde type. It returns `Ok(())` or a [`JobError`], whose [`JobAction`] says what the
//! runtime does next. Plain `?` on any [`std::error::Error`] means *retry* with the
//! policy's backoff (the safe default: a transient failure that was really permanent
//! costs a few attempts, the reverse loses work). The [`ResultExt`] methods make the
//! other cases one word:
//!
//! ```
//! use std::time::Duration;
//! use revenant_runtime::{JobError, ResultExt};
//!
//! fn parse(text: &str) -> Result<u32, JobError> {
//!     // A payload we can never parse will not parse next time either.
//!     let n: u32 = text.parse().permanent()?;
//!     Ok(n)
//! }
//! assert!(parse("12").is_ok());
//! assert_eq!(parse("x").unwrap_err().action(), revenant_runtime::JobAction::Permanent);
//!
//! fn io() -> Result<(), JobError> {
//!     // `?` alone: retry with backoff.
//!     std::fs::read("/definitely/not/here")?;
//!     Ok(())
//! }
//! assert_eq!(io().unwrap_err().action(), revenant_runtime::JobAction::Retry);
//! ```

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;

use crate::context::JobContext;
use revenant_core::outcome::Outcome;

/// A job handler for one kind.
///
/// ```
/// use async_trait::async_trait;
/// use revenant_runtime::{Handler, JobContext, JobError};
///
/// #[derive(serde::Deserialize)]
/// struct Receipt { order: u64 }
///
/// struct SendReceipt;
///
/// #[async_trait]
/// impl Handler for SendReceipt {
///     const KIND: &'static str = "send_receipt";
///     type Payload = Receipt;
///     async fn run(&self, ctx: JobContext, receipt: Receipt) -> Result<(), JobError> {
///         if receipt.order == 0 {
///             return Err(JobError::permanent("order 0 does not exist"));
///         }
///         Ok(())
///     }
/// }
/// ```
///
/// The handler should watch [`JobContext::cancelled`] in long loops: when the attempt
/// times out, the lease is lost, or the worker shuts down past its grace period, the
/// token fires and, right after, the handler's future is dropped at its next `.await`.
/// A handler that blocks its thread without awaiting cannot be stopped early; its
/// result is still discarded, and its slot stays taken until it returns (the thread
/// is not the worker's meanwhile). Run blocking code with
/// `tokio::task::spawn_blocking`.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// The kind this handler is registered under (`send_receipt`).
    const KIND: &'static str;
    /// The payload type. A payload that does not decode into it makes the job dead at
    /// once with reason `decode_error`: decoding again will not help.
    type Payload: DeserializeOwned + Send + 'static;
    /// Runs one attempt.
    async fn run(&self, ctx: JobContext, payload: Self::Payload) -> Result<(), JobError>;

    /// The dependency this job calls (`email-provider`, a host name), so a worker
    /// given dependency policies ([`crate::WorkerBuilder::dependencies`])
    /// can protect it: a circuit breaker, a rate limit and a retry budget shared by
    /// every worker (see [`revenant_core::dependency`]). Asked before each attempt, with the
    /// decoded payload. Default: none, or the key given to
    /// [`crate::WorkerBuilder::dependency`] for the kind.
    fn dependency(&self, _payload: &Self::Payload) -> Option<String> {
        None
    }
}

/// What the runtime does with a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobAction {
    /// Retry after the policy's backoff; dead with `attempts_exhausted` when no attempt
    /// is left. The default for any error.
    Retry,
    /// Retry after this delay instead of the backoff (an HTTP `Retry-After`), capped at
    /// the backoff's cap. Still spends the attempt.
    RetryAfter(Duration),
    /// The failure will never pass: dead at once with reason `permanent`.
    Permanent,
    /// Not now: back to `ready` after this delay, the attempt given back. Capped at
    /// 365 days. A handler that snoozes forever runs forever; that is its choice.
    Snooze(Duration),
    /// Cancel the job (terminal, not dead: nothing to redrive).
    Cancel,
}

/// A handler's failure: what to do ([`JobAction`]) and why (the message recorded in
/// the job's error history).
///
/// It deliberately does not implement [`std::error::Error`], so that any error type
/// converts into it with `?` (as `anyhow::Error` does). The message is the error's
/// `Display` followed by its `source()` chain, joined with `: `.
pub struct JobError {
    action: JobAction,
    message: String,
    source: Option<Box<dyn StdError + Send + Sync>>,
}

impl JobError {
    /// A transient failure: retry with backoff.
    pub fn retry(message: impl Into<String>) -> Self {
        Self::new(JobAction::Retry, message.into())
    }

    /// A transient failure that says when to come back.
    pub fn retry_after(message: impl Into<String>, after: Duration) -> Self {
        Self::new(JobAction::RetryAfter(after), message.into())
    }

    /// A failure that will never pass.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(JobAction::Permanent, message.into())
    }

    /// Try again after `after` without spending an attempt.
    pub fn snooze(after: Duration) -> Self {
        Self::new(
            JobAction::Snooze(after),
            format!("snoozed for {}", revenant_core::duration::format(after)),
        )
    }

    /// Cancel the job.
    pub fn cancel(message: impl Into<String>) -> Self {
        Self::new(JobAction::Cancel, message.into())
    }

    /// Wraps an error with an action.
    pub fn with_action(action: JobAction, error: impl StdError + Send + Sync + 'static) -> Self {
        JobError {
            action,
            message: chain(&error),
            source: Some(Box::new(error)),
        }
    }

    fn new(action: JobAction, message: String) -> Self {
        JobError {
            action,
            message,
            source: None,
        }
    }

    /// What the runtime will do.
    pub fn action(&self) -> JobAction {
        self.action
    }

    /// The message recorded in the error history.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The wrapped error, when there is one.
    pub fn source(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.source.as_deref()
    }

    /// Changes the action, keeping the message and source.
    pub fn into_action(mut self, action: JobAction) -> Self {
        self.action = action;
        self
    }

    /// The outcome the runtime hands to [`revenant_core::decide()`].
    pub fn into_outcome(self) -> Outcome {
        let message = self.message;
        match self.action {
            JobAction::Retry => Outcome::Retry { message },
            JobAction::RetryAfter(after) => Outcome::RetryAfter { message, after },
            JobAction::Permanent => Outcome::Permanent { message },
            JobAction::Snooze(after) => Outcome::Snooze { after },
            JobAction::Cancel => Outcome::Cancel { message },
        }
    }
}

fn chain(error: &dyn StdError) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // Many errors repeat their source in their own message; don't say it twice.
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

impl<E: StdError + Send + Sync + 'static> From<E> for JobError {
    /// Any error is a transient failure: retry with backoff.
    fn from(error: E) -> Self {
        JobError::with_action(JobAction::Retry, error)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("action", &self.action)
            .field("message", &self.message)
            .finish()
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// One-word actions on any `Result` whose error converts into a [`JobError`]:
/// `.permanent()?`, `.retry_after(d)?`, `.snooze(d)?`, `.cancel()?`.
pub trait ResultExt<T> {
    /// On error: retry with backoff (what plain `?` does; for being explicit).
    fn retry(self) -> Result<T, JobError>;
    /// On error: retry after `after` instead of the backoff.
    fn retry_after(self, after: Duration) -> Result<T, JobError>;
    /// On error: dead at once, reason `permanent`.
    fn permanent(self) -> Result<T, JobError>;
    /// On error: try again after `after` without spending an attempt.
    fn snooze(self, after: Duration) -> Result<T, JobError>;
    /// On error: cancel the job.
    fn cancel(self) -> Result<T, JobError>;
}

impl<T, E: Into<JobError>> ResultExt<T> for Result<T, E> {
    fn retry(self) -> Result<T, JobError> {
        self.map_err(|e| e.into().into_action(JobAction::Retry))
    }
    fn retry_after(self, after: Duration) -> Result<T, JobError> {
        self.map_err(|e| e.into().into_action(JobAction::RetryAfter(after)))
    }
    fn permanent(self) -> Result<T, JobError> {
        self.map_err(|e| e.into().into_action(JobAction::Permanent))
    }
    fn snooze(self, after: Duration) -> Result<T, JobError> {
        self.map_err(|e| e.into().into_action(JobAction::Snooze(after)))
    }
    fn cancel(self) -> Result<T, JobError> {
        self.map_err(|e| e.into().into_action(JobAction::Cancel))
    }
}

/// The call a closure handler makes (see [`crate::WorkerBuilder::handler_fn`]).
pub(crate) trait HandlerFn<P>: Send + Sync + 'static {
    type Fut: Future<Output = Result<(), JobError>> + Send + 'static;
    fn call(&self, ctx: JobContext, payload: P) -> Self::Fut;
}

impl<P, F, Fut> HandlerFn<P> for F
where
    F: Fn(JobContext, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    type Fut = Fut;
    fn call(&self, ctx: JobContext, payload: P) -> Fut {
        self(ctx, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connect failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn plain_question_mark_means_retry_with_the_whole_chain() {
        fn f() -> Result<(), JobError> {
            Err(Outer(std::io::Error::other("503 from provider")))?;
            Ok(())
        }
        let err = f().unwrap_err();
        assert_eq!(err.action(), JobAction::Retry);
        assert_eq!(err.message(), "connect failed: 503 from provider");
        assert!(err.source().is_some());
    }

    #[test]
    fn extension_methods_set_the_action_and_keep_the_message() {
        let e = || Err::<(), _>(std::io::Error::other("nope"));
        let s = Duration::from_secs;
        let cases = [
            (e().retry().unwrap_err(), JobAction::Retry),
            (e().permanent().unwrap_err(), JobAction::Permanent),
            (
                e().retry_after(s(7)).unwrap_err(),
                JobAction::RetryAfter(s(7)),
            ),
            (e().snooze(s(3)).unwrap_err(), JobAction::Snooze(s(3))),
            (e().cancel().unwrap_err(), JobAction::Cancel),
            // Already a JobError: the action is replaced.
            (
                Err::<(), _>(JobError::retry("x")).permanent().unwrap_err(),
                JobAction::Permanent,
            ),
        ];
        for (err, action) in cases {
            assert_eq!(err.action(), action);
        }
        assert_eq!(e().permanent().unwrap_err().message(), "nope");
    }

    #[test]
    fn each_action_becomes_its_outcome() {
        let s = Duration::from_secs;
        assert_eq!(
            JobError::retry("a").into_outcome(),
            Outcome::Retry {
                message: "a".into()
            }
        );
        assert_eq!(
            JobError::retry_after("b", s(9)).into_outcome(),
            Outcome::RetryAfter {
                message: "b".into(),
                after: s(9)
            }
        );
        assert_eq!(
            JobError::permanent("c").into_outcome(),
            Outcome::Permanent {
                message: "c".into()
            }
        );
        assert_eq!(
            JobError::snooze(s(4)).into_outcome(),
            Outcome::Snooze { after: s(4) }
        );
        assert_eq!(
            JobError::cancel("d").into_outcome(),
            Outcome::Cancel {
                message: "d".into()
            }
        );
    }
}
