//! Retrying the store from inside the runtime.
//!
//! A storage error is the database's problem, not the job's: it never spends an
//! attempt and never ends the worker. Every store call the runtime makes goes through
//! [`retry`], which backs off exponentially (50 ms doubling to 5 s, full jitter, so a
//! fleet of workers does not hammer a recovering database in step) and logs each
//! failure.
//!
//! - A retryable error ([`StoreError::is_retryable`]: connection lost, database busy)
//!   is retried until it succeeds or `stop` fires.
//! - Any other error (a constraint, corrupt data) is retried a few times, in case it
//!   was misclassified, then returned. The caller logs it and moves on; a job whose
//!   ack was lost that way is reclaimed when its lease expires (at-least-once).

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;

use revenant_core::error::StoreError;

/// The first delay.
const BASE: Duration = Duration::from_millis(50);
/// The longest delay: short enough that work resumes within seconds of the database
/// coming back.
const CAP: Duration = Duration::from_secs(5);
/// Tries of a call that fails with a non-retryable error.
const NON_RETRYABLE_TRIES: u32 = 5;

/// The delay before try `n + 1` (n from 1): full jitter over `min(cap, base * 2^(n-1))`.
fn delay(n: u32) -> Duration {
    let nominal = BASE
        .saturating_mul(1 << n.saturating_sub(1).min(16))
        .min(CAP);
    let ms = u64::try_from(nominal.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rand::rng().random_range(ms / 2..=ms))
}

/// Runs `call` until it succeeds, `stop` fires, or a non-retryable error persists.
/// `op` names the call in logs.
pub(crate) async fn retry<T, F, Fut>(
    op: &'static str,
    stop: &CancellationToken,
    mut call: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut tries = 0_u32;
    let mut non_retryable = 0_u32;
    loop {
        tries += 1;
        let err = match call().await {
            Ok(value) => {
                if tries > 1 {
                    tracing::info!(op, tries, "store call succeeded after retrying");
                }
                return Ok(value);
            }
            Err(err) => err,
        };
        if !err.is_retryable() {
            non_retryable += 1;
        }
        if non_retryable >= NON_RETRYABLE_TRIES || stop.is_cancelled() {
            tracing::error!(op, tries, error = %err, "store call failed; giving up");
            return Err(err);
        }
        let wait = delay(tries);
        tracing::warn!(
            op,
            tries,
            retry_in_ms = wait.as_millis() as u64,
            retryable = err.is_retryable(),
            error = %err,
            "store call failed; retrying"
        );
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => {
                tracing::error!(op, tries, error = %err, "store call failed; giving up at shutdown");
                return Err(err);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn unavailable() -> StoreError {
        StoreError::Unavailable {
            message: "database is locked".into(),
            source: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retryable_errors_are_retried_until_the_call_succeeds() {
        let calls = AtomicU32::new(0);
        let stop = CancellationToken::new();
        let got = retry("job_claim", &stop, || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 20 {
                Err(unavailable())
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(got.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 21);
    }

    #[tokio::test(start_paused = true)]
    async fn non_retryable_errors_are_given_up_after_a_few_tries() {
        let calls = AtomicU32::new(0);
        let stop = CancellationToken::new();
        let got: Result<(), _> = retry("job_fail", &stop, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(StoreError::Corrupt("status = 'zombie'".into()))
        })
        .await;
        assert!(matches!(got, Err(StoreError::Corrupt(_))));
        assert_eq!(calls.load(Ordering::SeqCst), NON_RETRYABLE_TRIES);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_ends_the_retrying() {
        let stop = CancellationToken::new();
        let stopper = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            stopper.cancel();
        });
        let got: Result<(), _> = retry("job_claim", &stop, || async { Err(unavailable()) }).await;
        assert!(got.is_err());
    }

    #[test]
    fn delays_stay_within_the_cap_for_any_try() {
        for n in [1, 2, 10, 100, u32::MAX] {
            let d = delay(n);
            assert!(d <= CAP, "{n}: {d:?}");
        }
        assert!(delay(1) <= BASE);
    }
}
