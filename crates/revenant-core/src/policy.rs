//! The retry policy: how many attempts, how long between them, how long one may run,
//! and how long a claim stays leased. Set per kind, per queue, and as a global default
//! ([`PolicySet`]); the most specific wins.
//!
//! # Defaults, and why
//!
//! | field | default | why |
//! | --- | --- | --- |
//! | `max_attempts` | 12 | with the backoff below, the last retry comes at least 1 h 42 min after the first failure, so a 30-minute outage dead-letters nothing (see docs/retry-policy.md) |
//! | `backoff` | 10 s × 2, capped at 1 h | the first retry is soon enough for a blip; the cap keeps a job from vanishing for days |
//! | `jitter` | `equal` | spreads retries over `[d/2, d]`; unlike `full`, it never shortens the total span below half, so the outage guarantee holds for every job |
//! | `attempt_timeout` | 30 s | an attempt that runs longer is almost always stuck |
//! | `lease` | 60 s | long enough to ride out a slow heartbeat; short enough that a crashed worker's jobs come back within a minute or so |
//! | `heartbeat` | lease / 3 | two heartbeats may be lost before the lease runs out |
//!
//! A policy that cannot work is refused when it is built, with the field named:
//! `max_attempts < 1`, a cap below the base, an attempt timeout not below the lease,
//! a heartbeat interval not below the lease.
//!
//! ```
//! use std::time::Duration;
//! use revenant_core::{Jitter, RetryPolicy};
//! let policy = RetryPolicy::builder()
//!     .max_attempts(5)
//!     .jitter(Jitter::Full)
//!     .build()
//!     .unwrap();
//! assert_eq!(policy.max_attempts(), 5);
//!
//! let err = RetryPolicy::builder()
//!     .attempt_timeout(Duration::from_secs(120))
//!     .lease(Duration::from_secs(60))
//!     .build()
//!     .unwrap_err();
//! assert!(err.to_string().contains("attempt_timeout"));
//! ```

use std::collections::HashMap;
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::backoff::{Backoff, Jitter};
use crate::error::InputError;

/// A policy that cannot work.
pub type PolicyError = InputError;

/// One retry policy. Build it with [`RetryPolicy::builder`]; every field is checked
/// there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    max_attempts: u32,
    backoff: Backoff,
    jitter: Jitter,
    #[serde(with = "crate::backoff::duration_str")]
    attempt_timeout: Duration,
    #[serde(with = "crate::backoff::duration_str")]
    lease: Duration,
    #[serde(with = "crate::backoff::duration_str")]
    heartbeat: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 12,
            backoff: Backoff {
                base: Duration::from_secs(10),
                multiplier: 2.0,
                cap: Duration::from_secs(3600),
            },
            jitter: Jitter::Equal,
            attempt_timeout: Duration::from_secs(30),
            lease: Duration::from_secs(60),
            heartbeat: Duration::from_secs(20),
        }
    }
}

/// One row of a policy's schedule: what happens after the n-th failure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScheduleStep {
    /// The failed attempt (1-based).
    pub failure: u32,
    /// The shortest delay jitter can give.
    #[serde(with = "crate::backoff::duration_str")]
    pub min: Duration,
    /// The delay before jitter.
    #[serde(with = "crate::backoff::duration_str")]
    pub nominal: Duration,
    /// The longest delay jitter can give.
    #[serde(with = "crate::backoff::duration_str")]
    pub max: Duration,
}

impl RetryPolicy {
    /// The most attempts a policy may allow.
    pub const MAX_ATTEMPTS: u32 = 1000;

    /// A builder starting from the defaults.
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder {
            policy: RetryPolicy::default(),
            heartbeat_set: false,
        }
    }

    /// A builder starting from this policy (to override a few fields).
    pub fn to_builder(&self) -> RetryPolicyBuilder {
        RetryPolicyBuilder {
            policy: *self,
            heartbeat_set: true,
        }
    }

    /// Attempts before a transient failure makes the job dead.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
    /// The exponential backoff.
    pub fn backoff(&self) -> &Backoff {
        &self.backoff
    }
    /// The jitter applied to each delay.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }
    /// How long one attempt may run before it is cancelled and counted as a timeout.
    pub fn attempt_timeout(&self) -> Duration {
        self.attempt_timeout
    }
    /// How long a claim stays invisible to other workers without a heartbeat.
    pub fn lease(&self) -> Duration {
        self.lease
    }
    /// How often a running attempt extends its lease.
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    /// The delay before retrying after the `failure`-th failure: the jittered
    /// backoff, or the `retry_after` (an HTTP `Retry-After`) when that is longer, and
    /// never more than the backoff's cap.
    ///
    /// DESIGN.md says a `retry_after` *replaces* the computed delay. We treat it as a
    /// floor instead, and say so here: a provider that answers `Retry-After: 60`
    /// throughout a 30-minute outage would otherwise shrink every job's span to
    /// `60 s * (max_attempts - 1)` and dead-letter most of them (the simulator shows
    /// 58% with the seed policy), and every job that failed in one second would come
    /// back in one second, without jitter. As a floor, the provider is never called
    /// earlier than it asked, and the outage guarantee of the defaults still holds.
    pub fn retry_delay<R: Rng + ?Sized>(
        &self,
        failure: u32,
        retry_after: Option<Duration>,
        rng: &mut R,
    ) -> Duration {
        let backoff = self.jitter.apply(&self.backoff, failure, rng);
        match retry_after {
            Some(after) => after.max(backoff).min(self.backoff.cap),
            None => backoff,
        }
    }

    /// Each retry's delay range: one step per failure that is followed by another
    /// attempt (`max_attempts - 1` steps).
    pub fn schedule(&self) -> Vec<ScheduleStep> {
        (1..self.max_attempts)
            .map(|failure| {
                let (min, max) = self.jitter.bounds(&self.backoff, failure);
                ScheduleStep {
                    failure,
                    min,
                    nominal: self.backoff.delay(failure),
                    max,
                }
            })
            .collect()
    }

    /// The shortest, nominal and longest time from the first failure to the last
    /// attempt. A provider outage shorter than the shortest span dead-letters no job
    /// whose attempts are all spent on it.
    pub fn span(&self) -> (Duration, Duration, Duration) {
        self.schedule().iter().fold(
            (Duration::ZERO, Duration::ZERO, Duration::ZERO),
            |(min, nominal, max), step| (min + step.min, nominal + step.nominal, max + step.max),
        )
    }

    fn validate(&self) -> Result<(), InputError> {
        if !(1..=Self::MAX_ATTEMPTS).contains(&self.max_attempts) {
            return Err(InputError::new(
                "max_attempts",
                format!(
                    "{} is out of range; use 1..={}",
                    self.max_attempts,
                    Self::MAX_ATTEMPTS
                ),
            ));
        }
        self.backoff.validate()?;
        self.jitter.validate()?;
        if self.lease < Duration::from_millis(100) {
            return Err(InputError::new("lease", "must be at least 100ms"));
        }
        if self.attempt_timeout.is_zero() {
            return Err(InputError::new("attempt_timeout", "must be above zero"));
        }
        if self.attempt_timeout >= self.lease {
            return Err(InputError::new(
                "attempt_timeout",
                format!(
                    "{} is not below the lease of {}; a running attempt would outlive its lease",
                    crate::duration::format(self.attempt_timeout),
                    crate::duration::format(self.lease)
                ),
            ));
        }
        if self.heartbeat.is_zero() || self.heartbeat >= self.lease {
            return Err(InputError::new(
                "heartbeat",
                format!(
                    "{} is not between zero and the lease of {}; the lease would run out between heartbeats",
                    crate::duration::format(self.heartbeat),
                    crate::duration::format(self.lease)
                ),
            ));
        }
        Ok(())
    }
}

/// Builds a [`RetryPolicy`]; [`RetryPolicyBuilder::build`] refuses one that cannot
/// work.
#[derive(Debug, Clone)]
pub struct RetryPolicyBuilder {
    policy: RetryPolicy,
    heartbeat_set: bool,
}

impl RetryPolicyBuilder {
    /// Attempts before a transient failure makes the job dead (1 to 1000).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.policy.max_attempts = max_attempts;
        self
    }
    /// The exponential backoff.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.policy.backoff = backoff;
        self
    }
    /// The jitter.
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.policy.jitter = jitter;
        self
    }
    /// The attempt timeout; must be below the lease.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.policy.attempt_timeout = timeout;
        self
    }
    /// The lease. Unless [`RetryPolicyBuilder::heartbeat`] is set, the heartbeat
    /// follows it at a third.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.policy.lease = lease;
        self
    }
    /// The heartbeat interval; must be below the lease.
    pub fn heartbeat(mut self, interval: Duration) -> Self {
        self.policy.heartbeat = interval;
        self.heartbeat_set = true;
        self
    }

    /// The policy, or the first field that cannot work.
    pub fn build(mut self) -> Result<RetryPolicy, PolicyError> {
        if !self.heartbeat_set {
            self.policy.heartbeat = self.policy.lease / 3;
        }
        self.policy.validate()?;
        Ok(self.policy)
    }
}

/// Policies per kind and per queue over a global default. The most specific wins: a
/// kind's policy, else its queue's, else the default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicySet {
    /// Used when neither the kind nor the queue has one.
    pub default: RetryPolicy,
    /// Per queue.
    #[serde(default)]
    pub queues: HashMap<String, RetryPolicy>,
    /// Per kind.
    #[serde(default)]
    pub kinds: HashMap<String, RetryPolicy>,
}

impl PolicySet {
    /// A set with this default and no overrides.
    pub fn new(default: RetryPolicy) -> Self {
        PolicySet {
            default,
            ..PolicySet::default()
        }
    }

    /// Sets a queue's policy.
    pub fn with_queue(mut self, queue: impl Into<String>, policy: RetryPolicy) -> Self {
        self.queues.insert(queue.into(), policy);
        self
    }

    /// Sets a kind's policy.
    pub fn with_kind(mut self, kind: impl Into<String>, policy: RetryPolicy) -> Self {
        self.kinds.insert(kind.into(), policy);
        self
    }

    /// This set with the stored policies laid over it: a stored default replaces the
    /// default, a stored queue's or kind's policy replaces the one of the same name.
    /// What the store holds wins over what code declared, so an operator's
    /// `revenant policy set` reaches workers whose code says otherwise.
    pub fn overlay(&self, stored: &[crate::store::PolicyRecord]) -> PolicySet {
        use crate::store::PolicyScope;
        let mut merged = self.clone();
        for record in stored {
            match &record.scope {
                PolicyScope::Default => merged.default = record.policy,
                PolicyScope::Queue(queue) => {
                    merged.queues.insert(queue.clone(), record.policy);
                }
                PolicyScope::Kind(kind) => {
                    merged.kinds.insert(kind.clone(), record.policy);
                }
            }
        }
        merged
    }

    /// The policy for a job of `kind` on `queue`.
    pub fn resolve(&self, queue: &str, kind: &str) -> &RetryPolicy {
        self.kinds
            .get(kind)
            .or_else(|| self.queues.get(queue))
            .unwrap_or(&self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_ride_out_a_thirty_minute_outage_for_every_job() {
        // The worst case: a job fails at the first second of the outage and every
        // retry draws the shortest delay its jitter allows. Its last attempt must
        // still come after the outage ends.
        let (min_span, nominal, _) = RetryPolicy::default().span();
        assert!(
            min_span > Duration::from_secs(30 * 60),
            "min span {min_span:?}"
        );
        assert_eq!(min_span, Duration::from_millis(6_155_000));
        assert_eq!(nominal, Duration::from_secs(12_310));
    }

    #[test]
    fn seed_policy_spans_about_85_minutes_without_jitter() {
        let policy = RetryPolicy::builder()
            .max_attempts(10)
            .jitter(Jitter::None)
            .build()
            .unwrap();
        let (min, nominal, max) = policy.span();
        assert_eq!(nominal, Duration::from_secs(5110));
        assert_eq!((min, max), (nominal, nominal));
    }

    #[test]
    fn unworkable_policies_are_refused_naming_the_field() {
        let s = Duration::from_secs;
        let field = |b: RetryPolicyBuilder| b.build().unwrap_err().field;
        assert_eq!(
            field(RetryPolicy::builder().max_attempts(0)),
            "max_attempts"
        );
        assert_eq!(
            field(RetryPolicy::builder().attempt_timeout(s(60)).lease(s(60))),
            "attempt_timeout"
        );
        assert_eq!(
            field(
                RetryPolicy::builder()
                    .heartbeat(s(60))
                    .lease(s(60))
                    .attempt_timeout(s(1))
            ),
            "heartbeat"
        );
        assert_eq!(
            field(RetryPolicy::builder().backoff(Backoff {
                base: s(10),
                multiplier: 2.0,
                cap: s(5)
            })),
            "backoff.cap"
        );
    }

    #[test]
    fn heartbeat_follows_the_lease_unless_set() {
        let policy = RetryPolicy::builder()
            .lease(Duration::from_secs(9))
            .attempt_timeout(Duration::from_secs(3))
            .build()
            .unwrap();
        assert_eq!(policy.heartbeat(), Duration::from_secs(3));
    }

    #[test]
    fn retry_after_is_a_floor_under_the_backoff_and_the_cap_still_holds() {
        let policy = RetryPolicy::builder().jitter(Jitter::None).build().unwrap();
        let mut rng = rand::rng();
        let s = Duration::from_secs;
        // Longer than the backoff (10 s after the first failure): honoured.
        assert_eq!(policy.retry_delay(1, Some(s(42)), &mut rng), s(42));
        // Shorter than the backoff (80 s after the fourth failure): the backoff wins.
        assert_eq!(policy.retry_delay(4, Some(s(5)), &mut rng), s(80));
        // Longer than the cap: capped.
        assert_eq!(policy.retry_delay(1, Some(s(86_400)), &mut rng), s(3600));
    }

    #[test]
    fn the_most_specific_policy_wins() {
        let five = RetryPolicy::builder().max_attempts(5).build().unwrap();
        let two = RetryPolicy::builder().max_attempts(2).build().unwrap();
        let set = PolicySet::default()
            .with_queue("emails", five)
            .with_kind("webhook", two);
        assert_eq!(set.resolve("emails", "receipt").max_attempts(), 5);
        assert_eq!(set.resolve("emails", "webhook").max_attempts(), 2);
        assert_eq!(set.resolve("other", "receipt").max_attempts(), 12);
    }
}
