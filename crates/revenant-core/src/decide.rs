//! The one pure function that turns an attempt's [`Outcome`] into a state transition,
//! including "attempts exhausted means dead". Everything that decides a job's fate
//! after an attempt goes through here, so it is tested as a table.
//!
//! ```
//! use std::time::Duration;
//! use revenant_core::{decide, DeadReason, Outcome, RetryPolicy, Transition};
//! let policy = RetryPolicy::default();
//! let mut rng = rand::rng();
//! let boom = || Outcome::Retry { message: "503".into() };
//! assert!(matches!(decide(&boom(), 1, 3, &policy, &mut rng), Transition::Retry { .. }));
//! assert!(matches!(
//!     decide(&boom(), 3, 3, &policy, &mut rng),
//!     Transition::Dead { reason: DeadReason::AttemptsExhausted, .. }
//! ));
//! ```

use std::time::Duration;

use rand::Rng;

use crate::job::{DeadReason, FailureClass};
use crate::outcome::Outcome;
use crate::policy::RetryPolicy;

/// A failure to record in the job's error history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What kind of failure.
    pub class: FailureClass,
    /// The message.
    pub message: String,
}

/// What the store should do with a running job after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// running → completed.
    Complete,
    /// running → ready at `now + delay`; the attempt stays spent.
    Retry {
        /// The backoff (or retry-after) delay.
        delay: Duration,
        /// The failure to record.
        failure: Failure,
    },
    /// running → ready at `now + delay`; the attempt is given back.
    Snooze {
        /// How long to wait.
        delay: Duration,
    },
    /// running → dead.
    Dead {
        /// Why.
        reason: DeadReason,
        /// The failure to record.
        failure: Failure,
    },
    /// running → cancelled.
    Cancel {
        /// Why (recorded in the history).
        message: String,
    },
}

/// Decides what follows an attempt.
///
/// - `attempt` is the attempt that just ran (1-based, counted at claim);
/// - `max_attempts` is the job's own limit (fixed at enqueue);
/// - the policy gives the backoff and jitter; `rng` draws the jitter.
///
/// Transient outcomes (retry, retry-after, panic, timeout) retry while
/// `attempt < max_attempts` and are dead with `attempts_exhausted` after that.
/// Permanent outcomes, undecodable payloads and unknown kinds are dead at once.
pub fn decide<R: Rng + ?Sized>(
    outcome: &Outcome,
    attempt: i32,
    max_attempts: i32,
    policy: &RetryPolicy,
    rng: &mut R,
) -> Transition {
    let failure = |class, message: &str| Failure {
        class,
        message: message.to_string(),
    };
    let transient = |failure: Failure, retry_after: Option<Duration>, rng: &mut R| {
        if attempt >= max_attempts {
            Transition::Dead {
                reason: DeadReason::AttemptsExhausted,
                failure,
            }
        } else {
            let n = u32::try_from(attempt.max(1)).unwrap_or(1);
            Transition::Retry {
                delay: policy.retry_delay(n, retry_after, rng),
                failure,
            }
        }
    };
    match outcome {
        Outcome::Success => Transition::Complete,
        Outcome::Retry { message } => {
            transient(failure(FailureClass::Transient, message), None, rng)
        }
        Outcome::RetryAfter { message, after } => {
            transient(failure(FailureClass::Transient, message), Some(*after), rng)
        }
        Outcome::Panic { message } => transient(failure(FailureClass::Panic, message), None, rng),
        Outcome::Timeout { after } => transient(
            failure(
                FailureClass::Timeout,
                &format!(
                    "attempt timed out after {}",
                    crate::duration::format(*after)
                ),
            ),
            None,
            rng,
        ),
        Outcome::Permanent { message } => Transition::Dead {
            reason: DeadReason::Permanent,
            failure: failure(FailureClass::Permanent, message),
        },
        Outcome::DecodeError { message } => Transition::Dead {
            reason: DeadReason::DecodeError,
            failure: failure(FailureClass::DecodeError, message),
        },
        Outcome::UnknownKind { kind } => Transition::Dead {
            reason: DeadReason::UnknownKind,
            failure: failure(
                FailureClass::UnknownKind,
                &format!("no handler is registered for kind {kind:?}"),
            ),
        },
        Outcome::Snooze { after } => Transition::Snooze {
            delay: (*after).min(crate::job::NewJob::MAX_DELAY),
        },
        Outcome::Cancel { message } => Transition::Cancel {
            message: message.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Jitter;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[derive(Debug, PartialEq)]
    enum Expect {
        Complete,
        Retry(Duration, FailureClass),
        Snooze(Duration),
        Dead(DeadReason, FailureClass),
        Cancel,
    }

    fn shape(t: Transition) -> Expect {
        match t {
            Transition::Complete => Expect::Complete,
            Transition::Retry { delay, failure } => Expect::Retry(delay, failure.class),
            Transition::Snooze { delay } => Expect::Snooze(delay),
            Transition::Dead { reason, failure } => Expect::Dead(reason, failure.class),
            Transition::Cancel { .. } => Expect::Cancel,
        }
    }

    #[test]
    fn every_outcome_maps_to_its_transition() {
        use DeadReason::*;
        use Expect::*;
        use FailureClass as C;
        let s = Duration::from_secs;
        let policy = RetryPolicy::builder()
            .max_attempts(3)
            .jitter(Jitter::None)
            .build()
            .unwrap();
        let m = || "boom".to_string();
        // (outcome, attempt, max_attempts, expected)
        let table: Vec<(Outcome, i32, i32, Expect)> = vec![
            (Outcome::Success, 1, 3, Complete),
            (Outcome::Success, 3, 3, Complete),
            (
                Outcome::Retry { message: m() },
                1,
                3,
                Retry(s(10), C::Transient),
            ),
            (
                Outcome::Retry { message: m() },
                2,
                3,
                Retry(s(20), C::Transient),
            ),
            (
                Outcome::Retry { message: m() },
                3,
                3,
                Dead(AttemptsExhausted, C::Transient),
            ),
            (
                Outcome::Retry { message: m() },
                4,
                3,
                Dead(AttemptsExhausted, C::Transient),
            ),
            (
                Outcome::RetryAfter {
                    message: m(),
                    after: s(42),
                },
                1,
                3,
                Retry(s(42), C::Transient),
            ),
            // Retry-After is a floor: one shorter than the backoff waits the backoff.
            (
                Outcome::RetryAfter {
                    message: m(),
                    after: s(1),
                },
                2,
                3,
                Retry(s(20), C::Transient),
            ),
            (
                Outcome::RetryAfter {
                    message: m(),
                    after: s(999_999),
                },
                1,
                3,
                Retry(s(3600), C::Transient),
            ),
            (
                Outcome::RetryAfter {
                    message: m(),
                    after: s(1),
                },
                3,
                3,
                Dead(AttemptsExhausted, C::Transient),
            ),
            (
                Outcome::Panic { message: m() },
                1,
                3,
                Retry(s(10), C::Panic),
            ),
            (
                Outcome::Panic { message: m() },
                3,
                3,
                Dead(AttemptsExhausted, C::Panic),
            ),
            (
                Outcome::Timeout { after: s(30) },
                2,
                3,
                Retry(s(20), C::Timeout),
            ),
            (
                Outcome::Timeout { after: s(30) },
                3,
                3,
                Dead(AttemptsExhausted, C::Timeout),
            ),
            (
                Outcome::Permanent { message: m() },
                1,
                3,
                Dead(Permanent, C::Permanent),
            ),
            (
                Outcome::DecodeError { message: m() },
                1,
                3,
                Dead(DecodeError, C::DecodeError),
            ),
            (
                Outcome::UnknownKind { kind: "x".into() },
                1,
                3,
                Dead(UnknownKind, C::UnknownKind),
            ),
            (Outcome::Snooze { after: s(5) }, 3, 3, Snooze(s(5))),
            (Outcome::Cancel { message: m() }, 1, 3, Cancel),
            // The job's own max_attempts wins over the policy's.
            (
                Outcome::Retry { message: m() },
                3,
                10,
                Retry(s(40), C::Transient),
            ),
            (
                Outcome::Retry { message: m() },
                1,
                1,
                Dead(AttemptsExhausted, C::Transient),
            ),
        ];
        let mut rng = StdRng::seed_from_u64(1);
        for (outcome, attempt, max, expected) in table {
            let got = shape(decide(&outcome, attempt, max, &policy, &mut rng));
            assert_eq!(got, expected, "{outcome:?} at attempt {attempt} of {max}");
        }
    }

    #[test]
    fn failures_keep_the_handlers_message() {
        let policy = RetryPolicy::default();
        let t = decide(
            &Outcome::Permanent {
                message: "template crashed on 'Café Ünï'".into(),
            },
            1,
            3,
            &policy,
            &mut rand::rng(),
        );
        match t {
            Transition::Dead { failure, .. } => {
                assert_eq!(failure.message, "template crashed on 'Café Ünï'")
            }
            other => panic!("{other:?}"),
        }
    }
}
