//! What to simulate: arrivals, the provider and its outage, the retry policy, the
//! workers.
//!
//! Every struct starts from [`Default`], which is the seed story (11 jobs a second,
//! the provider down from the first minute for 30 minutes, revenant's default retry
//! policy), and is changed field by field:
//!
//! ```
//! use std::time::Duration;
//! use revenant_sim::{seed_policy, SimConfig};
//! use revenant_core::Jitter;
//! let mut config = SimConfig::default();
//! config.policy = seed_policy(Jitter::Full);
//! config.provider.retry_after = Some(Duration::from_secs(60));
//! config.validate().unwrap();
//! ```
//!
//! The structs are `#[non_exhaustive]` so fields can be added with defaults that keep
//! old scenarios as they were. [`SimConfig::dependency`] is one: the provider's
//! circuit breaker, rate limit and retry budget, off by default here (`revenant
//! simulate` turns them on; `--no-breaker` turns them off again). They sit between "a
//! job is due" and "a request reaches the provider", run by the very state machine the
//! stores run ([`revenant_core::dependency::DependencyRecord`]), and send jobs back to
//! wait without spending an attempt, as the runtime does.

use std::time::Duration;

use revenant_core::dependency::{DependencyPolicy, RateLimit};
use revenant_core::{Backoff, InputError, Jitter, RetryPolicy};
use serde::Serialize;

/// The whole scenario. `Default` is the seed story under revenant's default policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SimConfig {
    /// How jobs arrive.
    pub arrivals: Arrivals,
    /// The provider the jobs call, and its outage.
    pub provider: Provider,
    /// The retry policy every job runs under. Default: [`RetryPolicy::default`]
    /// (12 attempts, 10 s doubling to a 1 h cap, equal jitter), what the runtime uses
    /// when nothing is configured.
    pub policy: RetryPolicy,
    /// The workers that run the jobs.
    pub workers: Workers,
    /// The share of jobs (0 to 1) that can never succeed: their first attempt fails
    /// permanently, whatever the provider's state (think of a template that crashes
    /// on one restaurant's name before any request is sent), so they are dead at once
    /// and send the provider nothing. Default 0. Each job is drawn independently from
    /// the seeded random source.
    pub poison_share: f64,
    /// The seed of every random draw (Poisson arrivals, poison jobs, jitter). The same
    /// seed and config give the same report, to the request. Default 1.
    pub seed: u64,
    /// How the provider is protected: its circuit breaker, rate limit and retry
    /// budget. Default [`DependencyPolicy::off`]: nothing, every due job is sent.
    pub dependency: DependencyPolicy,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            arrivals: Arrivals::default(),
            provider: Provider::default(),
            policy: RetryPolicy::default(),
            workers: Workers::default(),
            poison_share: 0.0,
            seed: 1,
            dependency: DependencyPolicy::off(),
        }
    }
}

/// How jobs arrive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Arrivals {
    /// Jobs per second. Default 11, the seed story's receipts.
    pub rate: f64,
    /// Evenly spaced (default) or Poisson.
    pub spacing: Spacing,
    /// How long jobs keep arriving, from time zero. `None` (the default) means until
    /// five minutes after the outage ends, so the chart shows the provider back under
    /// its normal load as well as the backlog.
    #[serde(with = "opt_secs")]
    pub duration: Option<Duration>,
}

impl Arrivals {
    /// What `duration: None` stands for: arrivals go on this long after the outage.
    pub const AFTER_OUTAGE: Duration = Duration::from_secs(5 * 60);
}

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals {
            rate: 11.0,
            spacing: Spacing::Even,
            duration: None,
        }
    }
}

/// How arrivals are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Spacing {
    /// One job every `1 / rate` seconds exactly. Jobs that fail together with no
    /// jitter then retry together to the microsecond: the worst case for waves.
    Even,
    /// A Poisson process: exponential gaps with mean `1 / rate`, drawn from the seed.
    Poisson,
}

/// The provider (the email service of the seed story).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Provider {
    /// When the outage starts, from time zero. Default 60 s, so the chart shows a
    /// minute of normal traffic first.
    #[serde(with = "secs")]
    pub outage_start: Duration,
    /// How long every request fails with a transient error (a 503). Default 30 min.
    #[serde(with = "secs")]
    pub outage_length: Duration,
    /// A `Retry-After` the provider sends with its 503s (and its overload answers);
    /// it replaces the policy's backoff, capped at the policy's cap. Default none.
    #[serde(with = "opt_secs")]
    pub retry_after: Option<Duration>,
    /// How many requests a second the provider serves when it is up; the rest of a
    /// second's requests are refused with a transient error (a 503, with
    /// `retry_after` if set), like a provider shedding load. Counted per whole
    /// virtual second. Default `None`: unlimited.
    pub capacity: Option<f64>,
    /// How long the provider takes to answer. It holds a worker slot that long;
    /// the retry delay counts from the answer. Default 0: ignored, which is only
    /// harmless while workers are unlimited.
    #[serde(with = "secs")]
    pub latency: Duration,
}

impl Provider {
    /// When the outage ends.
    pub fn outage_end(&self) -> Duration {
        self.outage_start + self.outage_length
    }
}

impl Default for Provider {
    fn default() -> Self {
        Provider {
            outage_start: Duration::from_secs(60),
            outage_length: Duration::from_secs(30 * 60),
            retry_after: None,
            capacity: None,
            latency: Duration::ZERO,
        }
    }
}

/// The workers that run the jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[non_exhaustive]
pub struct Workers {
    /// Attempts that can run at once, summed over every worker process. With a
    /// provider latency `l`, the workers' throughput is `slots / l` attempts a
    /// second; due jobs past that wait in the queue, oldest due first. Default
    /// `None`: unlimited, every job runs the instant it is due.
    pub slots: Option<u32>,
}

/// The seed story's policy: 10 attempts, 10 s doubling to a 1 h cap (about 85 minutes
/// from the first failure to the last attempt without jitter), with the given jitter.
/// Kept to measure against; revenant's own default is [`RetryPolicy::default`].
pub fn seed_policy(jitter: Jitter) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(10)
        .backoff(Backoff {
            base: Duration::from_secs(10),
            multiplier: 2.0,
            cap: Duration::from_secs(3600),
        })
        .jitter(jitter)
        .build()
        .expect("the seed policy is valid")
}

impl SimConfig {
    /// The seed story as issue 8 tells it: the provider allows 50 requests a second,
    /// and it is protected by revenant's default breaker and retry budget with a rate
    /// limit of 50 requests a second (a burst of 1 keeps every whole second at 50 or
    /// fewer). What `revenant simulate` runs by default.
    pub fn protected_seed_story() -> SimConfig {
        let mut config = SimConfig::default();
        config.provider.capacity = Some(50.0);
        config.dependency =
            DependencyPolicy::default().with_rate_limit(RateLimit::per_second(50.0));
        config
    }

    /// The longest arrivals, outage or backoff cap accepted: two days. The run keeps
    /// one record per virtual second, so a scenario reaching years ahead would take
    /// gigabytes; nothing the design asks about needs more.
    pub const MAX_SPAN: Duration = Duration::from_secs(2 * 24 * 3600);
    /// The highest arrival rate accepted, jobs per second; the simulation holds one
    /// record per job.
    pub const MAX_RATE: f64 = 10_000.0;

    /// How long jobs arrive for: [`Arrivals::duration`], or until five minutes after
    /// the outage ends.
    pub fn arrivals_for(&self) -> Duration {
        self.arrivals
            .duration
            .unwrap_or(self.provider.outage_end() + Arrivals::AFTER_OUTAGE)
    }

    /// Refuses a scenario that cannot run, naming the field (the CLI flag of the same
    /// name): a rate that is not positive, a share outside 0..=1, slots without a
    /// latency, and so on.
    pub fn validate(&self) -> Result<(), InputError> {
        let rate = self.arrivals.rate;
        if !rate.is_finite() || rate <= 0.0 || rate > Self::MAX_RATE {
            return Err(InputError::new(
                "rate",
                format!(
                    "{rate} jobs/s is out of range; use a number above 0 and at most {}",
                    Self::MAX_RATE
                ),
            ));
        }
        // The outage first: the default arrivals follow it.
        if self.provider.outage_end() > Self::MAX_SPAN {
            return Err(InputError::new(
                "outage",
                "the outage ends more than two days after the start",
            ));
        }
        if self.arrivals_for() > Self::MAX_SPAN {
            return Err(InputError::new("arrivals-for", "is longer than two days"));
        }
        if self.policy.backoff().cap > Self::MAX_SPAN {
            return Err(InputError::new(
                "cap",
                "is longer than two days, more than the simulator can follow",
            ));
        }
        let jobs = rate * self.arrivals_for().as_secs_f64();
        if jobs > 10_000_000.0 {
            return Err(InputError::new(
                "arrivals-for",
                format!("{jobs:.0} jobs is too many to simulate; lower the rate or the duration"),
            ));
        }
        if !(0.0..=1.0).contains(&self.poison_share) {
            return Err(InputError::new(
                "poison-share",
                format!("{} is out of range; use 0 to 1", self.poison_share),
            ));
        }
        if let Some(capacity) = self.provider.capacity {
            if !capacity.is_finite() || capacity < 1.0 {
                return Err(InputError::new(
                    "capacity",
                    format!("{capacity} requests/s is out of range; use 1 or more"),
                ));
            }
        }
        self.dependency.validate()?;
        if let Some(slots) = self.workers.slots {
            if slots == 0 {
                return Err(InputError::new("workers", "must be at least 1"));
            }
            if self.provider.latency.is_zero() {
                return Err(InputError::new(
                    "workers",
                    "limits nothing while an attempt takes no time; set a latency too",
                ));
            }
        }
        Ok(())
    }
}

/// Serde for a `Duration` as seconds (JSON readers want numbers).
mod secs {
    use std::time::Duration;

    use serde::Serializer;

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(value.as_secs_f64())
    }
}

/// Serde for an `Option<Duration>` as seconds or null.
mod opt_secs {
    use std::time::Duration;

    use serde::Serializer;

    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => serializer.serialize_f64(duration.as_secs_f64()),
            None => serializer.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_seed_story_and_is_valid() {
        let config = SimConfig::default();
        config.validate().unwrap();
        assert_eq!(config.arrivals.rate, 11.0);
        assert_eq!(config.provider.outage_end(), Duration::from_secs(1860));
        assert_eq!(config.arrivals_for(), Duration::from_secs(2160));
    }

    #[test]
    fn unworkable_scenarios_name_the_flag() {
        let field = |change: fn(&mut SimConfig)| {
            let mut config = SimConfig::default();
            change(&mut config);
            config.validate().unwrap_err().field
        };
        assert_eq!(field(|c| c.arrivals.rate = 0.0), "rate");
        assert_eq!(field(|c| c.arrivals.rate = f64::NAN), "rate");
        assert_eq!(field(|c| c.poison_share = 1.5), "poison-share");
        assert_eq!(field(|c| c.provider.capacity = Some(0.0)), "capacity");
        assert_eq!(field(|c| c.workers.slots = Some(4)), "workers");
        assert_eq!(
            field(|c| c.arrivals.duration = Some(Duration::from_secs(30 * 86_400))),
            "arrivals-for"
        );
        assert_eq!(
            field(|c| c.provider.outage_length = Duration::from_secs(3 * 86_400)),
            "outage"
        );
        assert_eq!(
            field(|c| {
                c.policy = c
                    .policy
                    .to_builder()
                    .backoff(revenant_core::Backoff {
                        base: Duration::from_secs(10),
                        multiplier: 2.0,
                        cap: Duration::from_secs(30 * 86_400),
                    })
                    .build()
                    .unwrap()
            }),
            "cap"
        );
    }
}
