//! What a worker protects a dependency with: a circuit breaker, a rate limit and a
//! retry budget, each optional, with the defaults and the reasons for them.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::InputError;

/// How one dependency is protected. [`Default`] is a breaker and a retry budget with
/// their defaults and no rate limit (a provider's capacity is not something we can
/// guess); [`DependencyPolicy::off`] protects nothing.
///
/// Every worker should be given the same policy for a key: the state is shared
/// through the store, and each call carries the caller's policy, so two workers with
/// different thresholds would each apply their own to the one shared state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DependencyPolicy {
    /// The circuit breaker. Default on, with [`BreakerPolicy::default`].
    pub breaker: Option<BreakerPolicy>,
    /// The rate limit, shared by every worker. Default none.
    pub rate_limit: Option<RateLimit>,
    /// The retry budget, shared by every worker. Default on, with
    /// [`RetryBudget::default`].
    pub retry_budget: Option<RetryBudget>,
    /// The bulkhead: how many attempts of the dependency may be in flight at once.
    /// Default on, with [`Bulkhead::default`] (half a queue's slots per worker), so
    /// a dependency that hangs cannot hold every slot of a queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bulkhead: Option<Bulkhead>,
}

impl Default for DependencyPolicy {
    fn default() -> Self {
        DependencyPolicy {
            breaker: Some(BreakerPolicy::default()),
            rate_limit: None,
            retry_budget: Some(RetryBudget::default()),
            bulkhead: Some(Bulkhead::default()),
        }
    }
}

impl DependencyPolicy {
    /// No breaker, no rate limit, no budget: what a worker did before dependencies
    /// existed (`--no-breaker`).
    pub fn off() -> Self {
        DependencyPolicy {
            breaker: None,
            rate_limit: None,
            retry_budget: None,
            bulkhead: None,
        }
    }

    /// Whether anything is protected.
    pub fn is_off(&self) -> bool {
        self.breaker.is_none()
            && self.rate_limit.is_none()
            && self.retry_budget.is_none()
            && self.bulkhead.is_none()
    }

    /// Sets the bulkhead.
    pub fn with_bulkhead(mut self, bulkhead: Bulkhead) -> Self {
        self.bulkhead = Some(bulkhead);
        self
    }

    /// The policy in the shape releases before the bulkhead and slow calls could
    /// read (`deny_unknown_fields`): without them. The store's record keeps this copy
    /// (and the new parts beside it), so an older worker reading the record during a
    /// rolling deploy still decodes it.
    pub fn without_new_parts(&self) -> DependencyPolicy {
        DependencyPolicy {
            breaker: self.breaker.map(|b| BreakerPolicy {
                slow_call: None,
                ..b
            }),
            bulkhead: None,
            ..self.clone()
        }
    }

    /// Sets the rate limit.
    pub fn with_rate_limit(mut self, rate_limit: RateLimit) -> Self {
        self.rate_limit = Some(rate_limit);
        self
    }

    /// Refuses settings that cannot work, naming the field.
    pub fn validate(&self) -> Result<(), InputError> {
        if let Some(breaker) = &self.breaker {
            breaker.validate()?;
        }
        if let Some(rate) = &self.rate_limit {
            rate.validate()?;
        }
        if let Some(budget) = &self.retry_budget {
            budget.validate()?;
        }
        if let Some(bulkhead) = &self.bulkhead {
            bulkhead.validate()?;
        }
        Ok(())
    }

    /// The same policy with every duration divided by `factor` and every rate
    /// multiplied by it: what `revenant demo` runs when one real second plays
    /// `factor` simulated ones. Counts (burst, minimum requests) are unchanged, and so
    /// is the rate limit's `max_wait` (see the comment inside).
    pub fn time_scaled(&self, factor: f64) -> DependencyPolicy {
        let shrink = |d: Duration| Duration::from_secs_f64(d.as_secs_f64() / factor);
        DependencyPolicy {
            breaker: self.breaker.map(|b| BreakerPolicy {
                window: shrink(b.window),
                cooldown: shrink(b.cooldown),
                max_cooldown: shrink(b.max_cooldown),
                park_for: shrink(b.park_for),
                slow_call: b.slow_call.map(|s| SlowCall {
                    duration: shrink(s.duration),
                    ..s
                }),
                ..b
            }),
            bulkhead: self.bulkhead.map(|b| Bulkhead {
                wait: shrink(b.wait),
                ..b
            }),
            // max_wait is how long a worker slot may sit idle waiting for a turn: a
            // real-time cost of the worker, not a duration of the story, so it stays.
            rate_limit: self.rate_limit.map(|r| RateLimit {
                per_second: r.per_second * factor,
                window: shrink(r.window),
                ..r
            }),
            retry_budget: self.retry_budget.map(|b| RetryBudget {
                window: shrink(b.window),
                ..b
            }),
        }
    }
}

/// The circuit breaker: closed (requests go through), open (none go; jobs wait
/// without spending attempts), half-open (one probe at a time).
///
/// | field | default | why |
/// | --- | --- | --- |
/// | `failure_threshold` | 0.5 | half the answers failing is not a bad day, it is an outage |
/// | `window` | 10 s | long enough to see a pattern, short enough to trip within seconds |
/// | `min_requests` | 10 | two failures out of three requests should not trip anything |
/// | `cooldown` | 5 s | the first probe comes soon: most blips are short |
/// | `max_cooldown` | 15 s | each failed probe doubles the cool-down up to this: four probes a minute during a long outage (nothing next to the traffic it holds back), and the provider's recovery is seen within 15 s, so the backlog starts draining at once |
/// | `park_for` | 1 h | a safety net: a job parked by an open breaker is looked at again after this long even if nothing closes the breaker (a worker without the breaker, a lost row) |
/// | `slow_call` | calls over 5 s, at 50% | a provider that hangs holds a slot per call until its timeout: counting slow calls opens the breaker while they are still running, not a timeout later |
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerPolicy {
    /// The share of transient failures (0 to 1) among the answers in the window at
    /// which the breaker opens. Permanent failures are not counted at all: they say
    /// something about the job, not about the dependency.
    pub failure_threshold: f64,
    /// The sliding window the share is measured over.
    #[serde(with = "crate::backoff::duration_str")]
    pub window: Duration,
    /// The breaker does not open on fewer answers than this in the window.
    pub min_requests: u32,
    /// How long the breaker stays open before the first probe.
    #[serde(with = "crate::backoff::duration_str")]
    pub cooldown: Duration,
    /// The longest cool-down; each failed probe doubles it up to this.
    #[serde(with = "crate::backoff::duration_str")]
    pub max_cooldown: Duration,
    /// How long a parked job waits before it is looked at again even if the breaker
    /// has not closed (it is parked again if it is still open).
    #[serde(with = "crate::backoff::duration_str")]
    pub park_for: Duration,
    /// Slow calls: the breaker also opens when this share of the answers in the
    /// window were slower than its duration. Default [`SlowCall::default`]; `None`
    /// counts only failures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_call: Option<SlowCall>,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            failure_threshold: 0.5,
            window: Duration::from_secs(10),
            min_requests: 10,
            cooldown: Duration::from_secs(5),
            max_cooldown: Duration::from_secs(15),
            park_for: Duration::from_secs(3600),
            slow_call: Some(SlowCall::default()),
        }
    }
}

/// Slow calls as the breaker counts them (Resilience4j's slow-call rate). A call is
/// counted slow the moment it has run for `duration`, while it is still running, and
/// then not counted again when it ends: so a provider that hangs opens the breaker
/// `duration` after the calls start, not when their timeouts fire. A slow probe is a
/// failed probe.
///
/// | field | default | why |
/// | --- | --- | --- |
/// | `duration` | 5 s | far above what a healthy HTTP provider takes, and at most the `http` kind's default timeout: set it to a few times the provider's normal p99 |
/// | `threshold` | 0.5 | as the failure threshold: half the calls stuck is an outage |
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlowCall {
    /// A call running this long is slow.
    #[serde(with = "crate::backoff::duration_str")]
    pub duration: Duration,
    /// The share of slow calls (0 to 1) among the answers in the window at which the
    /// breaker opens (with at least the breaker's `min_requests` answers).
    pub threshold: f64,
}

impl Default for SlowCall {
    fn default() -> Self {
        SlowCall {
            duration: Duration::from_secs(5),
            threshold: 0.5,
        }
    }
}

impl SlowCall {
    /// Refuses a zero or absurd duration and a threshold outside (0, 1].
    pub fn validate(&self) -> Result<(), InputError> {
        if self.duration.is_zero() || self.duration > crate::NewJob::MAX_DELAY {
            return Err(InputError::new(
                "breaker.slow_call.duration",
                "must be above zero and at most 365 days",
            ));
        }
        let t = self.threshold;
        if !(t.is_finite() && t > 0.0 && t <= 1.0) {
            return Err(InputError::new(
                "breaker.slow_call.threshold",
                format!("{t} is out of range; use a share above 0 and at most 1"),
            ));
        }
        Ok(())
    }
}

/// The bulkhead (Resilience4j's, Hystrix's thread pools, Envoy's concurrency
/// limits): at most so many attempts of one dependency in flight at once. A job
/// whose dependency is at its limit is not run and spends no attempt: it goes back
/// to `ready` for `wait`, its worker slot free for other jobs, and the jobs behind it
/// in the queue are claimed in its place.
///
/// | field | default | why |
/// | --- | --- | --- |
/// | `max_in_flight` | none: `share` of the queue's slots | a fixed number fits one queue and not the next |
/// | `share` | 0.5 | a dependency that hangs holds at most half a queue's slots, so the others keep at least half: at most twice as slow beside it, not stopped |
/// | `shared` | none | a limit across every worker, kept in the store like the rate limit; set it to what the provider can take at once |
/// | `wait` | 500 ms | how long a turned-back job waits before it is claimed again: short enough to take a slot that frees, long enough that a hanging dependency's backlog is not claimed and turned back in a loop |
/// | `adaptive` | off | see [`Bulkhead::adaptive`] |
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Bulkhead {
    /// Attempts in flight per worker process. `None`: `share` of the slots of the
    /// job's queue (at least 1).
    pub max_in_flight: Option<u32>,
    /// The share of a queue's slots one dependency may hold, when `max_in_flight` is
    /// not set: above 0, at most 1 (1 turns the per-worker limit off).
    pub share: f64,
    /// Attempts in flight across every worker, counted in the store. A permit is
    /// held from the acquire until the attempt's answer is reported (within the
    /// report interval, 200 ms) or, if its worker dies, until the job's lease ends.
    pub shared: Option<u32>,
    /// How long a job turned back at the limit waits before it is claimed again.
    #[serde(with = "crate::backoff::duration_str")]
    pub wait: Duration,
    /// Adaptive concurrency (AIMD, as TCP's congestion window and Netflix's
    /// concurrency-limits' AIMD limiter): the per-worker limit starts at its maximum,
    /// halves on each failure or slow call, and grows by one per limit's worth of
    /// fast successes, back up to the maximum. Off by default.
    pub adaptive: bool,
}

impl Default for Bulkhead {
    fn default() -> Self {
        Bulkhead {
            max_in_flight: None,
            share: 0.5,
            shared: None,
            wait: Duration::from_millis(500),
            adaptive: false,
        }
    }
}

impl Bulkhead {
    /// A fixed limit per worker.
    pub fn per_worker(max_in_flight: u32) -> Self {
        Bulkhead {
            max_in_flight: Some(max_in_flight),
            ..Bulkhead::default()
        }
    }

    /// The per-worker limit for a job of a queue with `slots` slots: `max_in_flight`,
    /// else `share` of the slots rounded up, at least 1.
    ///
    /// ```
    /// use revenant_core::dependency::Bulkhead;
    /// assert_eq!(Bulkhead::default().limit_for(10), 5);
    /// assert_eq!(Bulkhead::default().limit_for(1), 1);
    /// assert_eq!(Bulkhead::per_worker(3).limit_for(10), 3);
    /// ```
    pub fn limit_for(&self, slots: usize) -> u32 {
        match self.max_in_flight {
            Some(n) => n,
            None => {
                let slots = u32::try_from(slots).unwrap_or(u32::MAX);
                ((f64::from(slots) * self.share).ceil() as u32).clamp(1, slots.max(1))
            }
        }
    }

    /// Refuses a zero limit, a share outside (0, 1] and a wait that is zero or over
    /// an hour.
    pub fn validate(&self) -> Result<(), InputError> {
        if self.max_in_flight == Some(0) || self.max_in_flight > Some(1_000_000) {
            return Err(InputError::new(
                "bulkhead.max_in_flight",
                "must be 1 to 1000000",
            ));
        }
        if self.shared == Some(0) || self.shared > Some(1_000_000) {
            return Err(InputError::new("bulkhead.shared", "must be 1 to 1000000"));
        }
        let s = self.share;
        if !(s.is_finite() && s > 0.0 && s <= 1.0) {
            return Err(InputError::new(
                "bulkhead.share",
                format!("{s} is out of range; use a share above 0 and at most 1"),
            ));
        }
        if self.wait.is_zero() || self.wait > Duration::from_secs(3600) {
            return Err(InputError::new(
                "bulkhead.wait",
                "must be above zero and at most 1h",
            ));
        }
        Ok(())
    }
}

impl BreakerPolicy {
    /// Refuses a threshold outside (0, 1], a zero window or cool-down, and a maximum
    /// cool-down below the cool-down.
    pub fn validate(&self) -> Result<(), InputError> {
        let t = self.failure_threshold;
        if !(t.is_finite() && t > 0.0 && t <= 1.0) {
            return Err(InputError::new(
                "breaker.failure_threshold",
                format!("{t} is out of range; use a share above 0 and at most 1"),
            ));
        }
        for (field, d) in [
            ("breaker.window", self.window),
            ("breaker.cooldown", self.cooldown),
            ("breaker.park_for", self.park_for),
        ] {
            if d.is_zero() {
                return Err(InputError::new(field, "must be above zero"));
            }
            if d > crate::NewJob::MAX_DELAY {
                return Err(InputError::new(field, "must be at most 365 days"));
            }
        }
        if self.max_cooldown < self.cooldown {
            return Err(InputError::new(
                "breaker.max_cooldown",
                "must be at least the cool-down",
            ));
        }
        if self.max_cooldown > crate::NewJob::MAX_DELAY {
            return Err(InputError::new(
                "breaker.max_cooldown",
                "must be at most 365 days",
            ));
        }
        if self.min_requests == 0 {
            return Err(InputError::new(
                "breaker.min_requests",
                "must be at least 1: one failure alone would open the breaker",
            ));
        }
        if let Some(slow) = &self.slow_call {
            slow.validate()?;
        }
        Ok(())
    }
}

/// A rate limit shared by every worker: at most `per_second` requests a second on
/// average, `burst` at once. Requests are paced, not refused: a job over the limit
/// waits for its turn, in the order it was claimed, without spending an attempt.
///
/// With `burst` 1 (the default) requests are scheduled `1 / per_second` apart, and a
/// worker never sends more than `per_second × window` (plus `burst − 1`) of them in
/// any `window` (default 1 s), the way providers count their limit: a worker whose
/// timers fire late (a busy machine) catches up within that, it does not bunch its
/// sends past it. The network can still bunch them a little on the way.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Requests a second.
    pub per_second: f64,
    /// Requests that may go at once after a quiet spell. Default 1.
    #[serde(default = "one")]
    pub burst: u32,
    /// A job whose turn is at most this far away waits for it in its worker slot;
    /// one further away goes back to the queue until its turn. Default 1 s. Never
    /// more than a third of the job's lease (the lease is not heartbeated before the
    /// handler starts).
    #[serde(default = "one_second", with = "crate::backoff::duration_str")]
    pub max_wait: Duration,
    /// The window the limit is counted over: no worker sends more than
    /// `per_second × window + burst − 1` requests in any window this long. Default 1 s.
    #[serde(default = "one_second", with = "crate::backoff::duration_str")]
    pub window: Duration,
}

fn one() -> u32 {
    1
}

fn one_second() -> Duration {
    Duration::from_secs(1)
}

impl RateLimit {
    /// `per_second` with a burst of 1 and the default `max_wait`.
    pub fn per_second(per_second: f64) -> Self {
        RateLimit {
            per_second,
            burst: 1,
            max_wait: one_second(),
            window: one_second(),
        }
    }

    /// The most requests one worker sends in any [`RateLimit::window`]: the rate over
    /// the window (at least 1), plus the burst beyond the first.
    pub fn window_requests(&self) -> usize {
        // The nudge: a window shrunk by a time scale is rounded to the nanosecond, and
        // 1,410 a second over 33.333333 ms must still count 47.
        let over_window = (self.per_second * self.window.as_secs_f64() + 1e-6)
            .floor()
            .max(1.0);
        (over_window as usize).saturating_add(self.burst.saturating_sub(1) as usize)
    }

    /// Sets the burst.
    pub fn with_burst(mut self, burst: u32) -> Self {
        self.burst = burst;
        self
    }

    /// The gap between two requests, in microseconds (at least 1).
    pub fn interval_us(&self) -> i64 {
        ((1_000_000.0 / self.per_second).round() as i64).max(1)
    }

    /// Refuses a rate that is not positive or above a million a second, and a burst
    /// of zero.
    pub fn validate(&self) -> Result<(), InputError> {
        let r = self.per_second;
        if !(r.is_finite() && r > 0.0 && r <= 1_000_000.0) {
            return Err(InputError::new(
                "rate_limit.per_second",
                format!("{r} is out of range; use above 0 and at most 1000000"),
            ));
        }
        if self.burst == 0 || self.burst > 1_000_000 {
            return Err(InputError::new("rate_limit.burst", "must be 1 to 1000000"));
        }
        if self.max_wait > Duration::from_secs(3600) {
            return Err(InputError::new("rate_limit.max_wait", "must be at most 1h"));
        }
        // The worker keeps one timestamp per request of the window.
        if self.window.is_zero() || self.per_second * self.window.as_secs_f64() > 1_000_000.0 {
            return Err(InputError::new(
                "rate_limit.window",
                format!(
                    "{:?} is out of range; use above 0 and at most 1000000 requests' worth ({} a second)",
                    self.window, r
                ),
            ));
        }
        Ok(())
    }
}

/// The retry budget: retries may not be more than `ratio` of the first attempts sent
/// over the window (or `min_retries` in the window, whichever is more, so a quiet
/// dependency can still retry). A retry over budget waits its backoff again without
/// spending an attempt.
///
/// | field | default | why |
/// | --- | --- | --- |
/// | `ratio` | 0.2 | Finagle's default: retries add at most a fifth to the load |
/// | `min_retries` | 10 | per window: a dependency with little traffic can still retry |
/// | `window` | 10 s | as the breaker's |
///
/// It works beside the breaker, not instead of it: while the breaker is open nothing
/// is sent, fresh or retry, so nothing is counted. Jobs parked by an open breaker get
/// their attempt back, so after recovery they are mostly first attempts; the few that
/// did fail before the breaker opened are paced by the rate limit when they are
/// released, not by the budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryBudget {
    /// Retries per first attempt, 0 to 1 (0 allows only `min_retries`).
    pub ratio: f64,
    /// Retries the window allows whatever the ratio says.
    pub min_retries: u32,
    /// The sliding window the counts cover.
    #[serde(with = "crate::backoff::duration_str")]
    pub window: Duration,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget {
            ratio: 0.2,
            min_retries: 10,
            window: Duration::from_secs(10),
        }
    }
}

impl RetryBudget {
    /// Refuses a ratio outside 0..=1 and a zero window.
    pub fn validate(&self) -> Result<(), InputError> {
        if !(self.ratio.is_finite() && (0.0..=1.0).contains(&self.ratio)) {
            return Err(InputError::new(
                "retry_budget.ratio",
                format!("{} is out of range; use 0 to 1", self.ratio),
            ));
        }
        if self.window.is_zero() || self.window > crate::NewJob::MAX_DELAY {
            return Err(InputError::new(
                "retry_budget.window",
                "must be above zero and at most 365 days",
            ));
        }
        Ok(())
    }
}

/// The policies of a worker: one for every key, and overrides per key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DependencyPolicies {
    /// For any key without its own.
    pub default: DependencyPolicy,
    /// Per key.
    pub keys: HashMap<String, DependencyPolicy>,
}

impl DependencyPolicies {
    /// A set with this default and no overrides.
    pub fn new(default: DependencyPolicy) -> Self {
        DependencyPolicies {
            default,
            keys: HashMap::new(),
        }
    }

    /// Sets one key's policy.
    pub fn with_key(mut self, key: impl Into<String>, policy: DependencyPolicy) -> Self {
        self.keys.insert(key.into(), policy);
        self
    }

    /// The policy for `key`.
    pub fn resolve(&self, key: &str) -> &DependencyPolicy {
        self.keys.get(key).unwrap_or(&self.default)
    }

    /// Checks every policy and key.
    pub fn validate(&self) -> Result<(), InputError> {
        self.default.validate()?;
        for (key, policy) in &self.keys {
            crate::names::validate_key("dependency", key)?;
            policy.validate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_that_cannot_work_name_the_field() {
        let field = |policy: DependencyPolicy| policy.validate().unwrap_err().field;
        let breaker = |change: fn(&mut BreakerPolicy)| {
            let mut b = BreakerPolicy::default();
            change(&mut b);
            DependencyPolicy {
                breaker: Some(b),
                ..DependencyPolicy::off()
            }
        };
        assert_eq!(
            field(breaker(|b| b.failure_threshold = 0.0)),
            "breaker.failure_threshold"
        );
        assert_eq!(
            field(breaker(|b| b.failure_threshold = 1.5)),
            "breaker.failure_threshold"
        );
        assert_eq!(
            field(breaker(|b| b.window = Duration::ZERO)),
            "breaker.window"
        );
        assert_eq!(
            field(breaker(|b| b.max_cooldown = Duration::from_secs(1))),
            "breaker.max_cooldown"
        );
        assert_eq!(
            field(breaker(|b| b.min_requests = 0)),
            "breaker.min_requests"
        );
        assert_eq!(
            field(DependencyPolicy::off().with_rate_limit(RateLimit::per_second(0.0))),
            "rate_limit.per_second"
        );
        assert_eq!(
            field(
                DependencyPolicy::off().with_rate_limit(RateLimit::per_second(5.0).with_burst(0))
            ),
            "rate_limit.burst"
        );
        let windowed = |window: Duration| RateLimit {
            window,
            ..RateLimit::per_second(5.0)
        };
        assert_eq!(
            field(DependencyPolicy::off().with_rate_limit(windowed(Duration::ZERO))),
            "rate_limit.window"
        );
        assert_eq!(
            field(DependencyPolicy::off().with_rate_limit(windowed(Duration::from_secs(300_000)))),
            "rate_limit.window",
            "a window of more than a million requests' worth"
        );
        let budget = DependencyPolicy {
            retry_budget: Some(RetryBudget {
                ratio: 2.0,
                ..RetryBudget::default()
            }),
            ..DependencyPolicy::off()
        };
        assert_eq!(field(budget), "retry_budget.ratio");
        assert!(DependencyPolicy::default().validate().is_ok());
        assert!(DependencyPolicy::off().is_off());
    }

    #[test]
    fn a_time_scaled_policy_divides_durations_and_multiplies_rates() {
        let policy = DependencyPolicy::default().with_rate_limit(RateLimit::per_second(50.0));
        let fast = policy.time_scaled(60.0);
        assert_eq!(fast.rate_limit.unwrap().per_second, 3000.0);
        assert_eq!(fast.rate_limit.unwrap().burst, 1);
        assert_eq!(
            fast.rate_limit.unwrap().window,
            Duration::from_secs_f64(1.0 / 60.0)
        );
        let breaker = fast.breaker.unwrap();
        assert_eq!(breaker.window, Duration::from_secs_f64(10.0 / 60.0));
        assert_eq!(breaker.min_requests, 10);
        assert_eq!(fast.retry_budget.unwrap().ratio, 0.2);
    }

    #[test]
    fn a_policy_reads_from_json_with_defaults_for_what_it_leaves_out() {
        let policy: DependencyPolicy = serde_json::from_value(serde_json::json!({
            "breaker": {"cooldown": "10s"},
            "rate_limit": {"per_second": 50.0}
        }))
        .unwrap();
        assert_eq!(policy.breaker.unwrap().cooldown, Duration::from_secs(10));
        assert_eq!(policy.breaker.unwrap().failure_threshold, 0.5);
        assert_eq!(policy.rate_limit.unwrap().burst, 1);
        assert_eq!(policy.rate_limit.unwrap().window, Duration::from_secs(1));
        assert_eq!(policy.retry_budget, Some(RetryBudget::default()));
        let windowed: RateLimit =
            serde_json::from_value(serde_json::json!({"per_second": 50.0, "window": "500ms"}))
                .unwrap();
        assert_eq!(windowed.window, Duration::from_millis(500));
        assert_eq!(windowed.window_requests(), 25);
    }
}
