//! What one attempt came to, as the runtime observed it.
//!
//! Handlers speak in [`crate::store`]-free terms (their error type says retry,
//! permanent, snooze, ...); the runtime adds what only it can see (a panic, a timeout,
//! a payload that did not decode, a kind with no handler) and hands the result to
//! [`crate::decide()`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The result of one attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    /// The handler succeeded.
    Success,
    /// A transient failure: retry after the policy's backoff.
    Retry {
        /// The error message.
        message: String,
    },
    /// A transient failure that says when to come back (HTTP `Retry-After`). The
    /// delay is a floor under the backoff, capped at the backoff's cap (see
    /// [`crate::RetryPolicy::retry_delay`] for why it is not a replacement).
    RetryAfter {
        /// The error message.
        message: String,
        /// When to come back.
        after: Duration,
    },
    /// A failure that will never pass: dead at once.
    Permanent {
        /// The error message.
        message: String,
    },
    /// Not now: try again after `after` without spending an attempt.
    Snooze {
        /// How long to wait.
        after: Duration,
    },
    /// The handler cancelled the job.
    Cancel {
        /// Why.
        message: String,
    },
    /// The handler panicked; transient, with the panic message.
    Panic {
        /// The panic message.
        message: String,
    },
    /// The attempt ran past its timeout; transient.
    Timeout {
        /// The timeout that fired.
        after: Duration,
    },
    /// The payload did not decode into the handler's type: dead at once.
    DecodeError {
        /// The decoder's message.
        message: String,
    },
    /// No handler is registered for the kind: dead at once.
    UnknownKind {
        /// The kind that has no handler.
        kind: String,
    },
}

impl Outcome {
    /// A short name for logs and metrics (`success`, `retry`, `panic`, ...).
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Retry { .. } => "retry",
            Outcome::RetryAfter { .. } => "retry_after",
            Outcome::Permanent { .. } => "permanent",
            Outcome::Snooze { .. } => "snooze",
            Outcome::Cancel { .. } => "cancel",
            Outcome::Panic { .. } => "panic",
            Outcome::Timeout { .. } => "timeout",
            Outcome::DecodeError { .. } => "decode_error",
            Outcome::UnknownKind { .. } => "unknown_kind",
        }
    }
}
