//! Running one attempt of a handler the way the worker does: decode the JSON payload
//! into the handler's type, run it, and turn its result into the [`Outcome`] that
//! `decide()` sees.

use std::time::Duration;

use revenant_core::Outcome;
use revenant_runtime::{Handler, JobContext, JobContextParts};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A context for attempt `attempt` of job `id`, whose attempt times out in `deadline_in`.
pub fn context(id: i64, attempt: i32, deadline_in: Duration) -> JobContext {
    JobContext::new(JobContextParts {
        id,
        queue: "tests".into(),
        kind: "builtin".into(),
        attempt,
        max_attempts: 10,
        deadline: Instant::now() + deadline_in,
        correlation_id: None,
        worker: "test-worker".into(),
        cancel: CancellationToken::new(),
    })
}

/// Decodes `payload` and runs one attempt, as the worker's registry does.
pub async fn run<H: Handler>(handler: &H, ctx: JobContext, payload: serde_json::Value) -> Outcome {
    let payload: H::Payload = match serde_json::from_value(payload) {
        Ok(payload) => payload,
        Err(err) => {
            return Outcome::DecodeError {
                message: err.to_string(),
            }
        }
    };
    match handler.run(ctx, payload).await {
        Ok(()) => Outcome::Success,
        Err(err) => err.into_outcome(),
    }
}

/// The message of a failed outcome; panics on success, so a test expecting a failure
/// cannot pass on one.
#[allow(dead_code)] // Each test binary uses its own subset of these.
pub fn message(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Retry { message }
        | Outcome::RetryAfter { message, .. }
        | Outcome::Permanent { message }
        | Outcome::Cancel { message }
        | Outcome::Panic { message }
        | Outcome::DecodeError { message } => message,
        other => panic!("expected a failure with a message, got {other:?}"),
    }
}
