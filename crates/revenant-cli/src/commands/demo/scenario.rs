//! The demo's scenario in simulated time, and the time scale that maps it onto real
//! time.
//!
//! Everything the story is told in (arrival rate, outage, the retry policy's
//! durations, time to drain) is in simulated seconds; the worker and the provider run
//! in real time, `scale` times faster. The policy given to the worker is revenant's
//! default with every duration divided by the scale, so a job's retry schedule, in
//! simulated time, is the default policy's exactly.
//!
//! The provider's protection maps the same way ([`DependencyPolicy::time_scaled`]):
//! windows, cool-downs and waits are divided by the scale, rates multiplied by it, so
//! 50 requests per simulated second is 3,000 per real second at 60x. Counts (the
//! breaker's minimum answers, the burst) do not change.

use std::time::{Duration, Instant};

use revenant::dependency::DependencyPolicy;
use revenant::runtime::DependencyConfig;
use revenant::{Backoff, InputError, RetryPolicy};
use revenant_sim::SimConfig;
use serde::Serialize;

/// When the provider goes down, in simulated time: one minute of normal traffic
/// first, as in `revenant simulate`.
pub const OUTAGE_START: Duration = Duration::from_secs(60);

/// Receipts keep arriving this long after the provider is back, as in the simulator.
pub const ARRIVALS_AFTER_OUTAGE: Duration = Duration::from_secs(5 * 60);

/// The poison receipt's number: it arrives before the outage, so its 422 comes at
/// once (a 503 would hide it behind retries).
pub const POISON_RECEIPT: u64 = 30;

/// The dependency key the receipts name (the `http` kind's `dependency` field).
pub const DEPENDENCY: &str = "email-provider";

/// The worker's rate limit as a share of what the provider allows. The worker paces
/// its sends exactly, but they reach the provider a millisecond or two apart from
/// when they were sent (timers, the HTTP stack, a busy machine), and at 60x a
/// millisecond is 6% of a simulated second: a little headroom keeps every simulated
/// second at or under the provider's limit as the provider counts it. Production
/// does the same for network jitter.
pub const RATE_LIMIT_SHARE: f64 = 0.94;

/// The fastest scale the demo plays with the breaker. After recovery the worker sends
/// 47 paced requests per simulated second; the provider's token bucket judges them. At
/// 60x a simulated second is 17 ms, and a busy machine's late timers bunch enough
/// requests to overflow the bucket's burst now and then; at 30x (33 ms) two release
/// runs on the busy 2-core machine this was checked on refused nothing and sent at
/// most 47 in any simulated second. A slower scale only gives the timers more room.
pub const MAX_SCALE_WITH_BREAKER: f64 = 30.0;

/// The fastest scale the demo plays without the breaker. At 60x the outage asks for
/// about 4,600 attempts a real second, which the 2-core VM this was built on keeps up
/// with (the measured requests per fresh receipt within 10% of the simulator's); past
/// it the worker falls behind the scaled schedule and the figures stop measuring the
/// policy.
pub const MAX_SCALE_WITHOUT_BREAKER: f64 = 60.0;

/// The report interval of the demo's worker, in real time: the default 200 ms is
/// 12 simulated seconds at 60x, longer than the breaker's window; 20 ms is 1.2.
const REPORT_INTERVAL: Duration = Duration::from_millis(20);

/// Maps real time to simulated time: `scale` simulated seconds per real second, from
/// the demo's start.
#[derive(Debug, Clone, Copy)]
pub struct SimClock {
    start: Instant,
    scale: f64,
}

impl SimClock {
    /// A clock starting now.
    pub fn start(scale: f64) -> Self {
        SimClock {
            start: Instant::now(),
            scale,
        }
    }

    /// Simulated seconds since the start.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * self.scale
    }
}

/// The story the demo plays, in simulated time.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// Simulated seconds per real second (60: one real second per simulated minute).
    pub scale: f64,
    /// Receipts per simulated second.
    pub rate: f64,
    /// When the provider goes down, simulated seconds from the start.
    pub outage_start_secs: f64,
    /// How long it answers 503, simulated seconds.
    pub outage_secs: f64,
    /// How long receipts arrive for, simulated seconds from the start.
    pub arrivals_for_secs: f64,
    /// How many receipts in all (the poison one included).
    pub receipts: u64,
    /// The retry policy, in simulated time (what the story is about).
    #[serde(skip)]
    pub policy: RetryPolicy,
    /// Requests per simulated second the provider allows; it refuses the rest of each
    /// second with a 503. `None`: no limit.
    pub provider_limit: Option<f64>,
    /// The provider's protection in simulated time; `None` with `--no-breaker`.
    pub protection: Option<DependencyPolicy>,
}

impl Scenario {
    /// The scenario for these flags; refuses a scale, rate or outage that cannot run.
    /// No provider limit and no protection: see [`Scenario::protected`].
    pub fn new(scale: f64, rate: f64, outage: Duration) -> Result<Self, InputError> {
        if !(scale.is_finite() && (1.0..=600.0).contains(&scale)) {
            return Err(InputError::new(
                "scale",
                format!("{scale} is out of range; use 1 to 600 simulated seconds per real second"),
            ));
        }
        if !(rate.is_finite() && rate > 0.0 && rate <= 100.0) {
            return Err(InputError::new(
                "rate",
                format!("{rate} receipts/s is out of range; use above 0 up to 100"),
            ));
        }
        if outage.is_zero() || outage > Duration::from_secs(6 * 3600) {
            return Err(InputError::new(
                "outage",
                "must be above zero and at most 6h",
            ));
        }
        let arrivals_for = OUTAGE_START + outage + ARRIVALS_AFTER_OUTAGE;
        // Arrival k (from 0) comes at (k + 1) / rate, as in the simulator.
        let receipts = (arrivals_for.as_secs_f64() * rate).floor() as u64;
        Ok(Scenario {
            scale,
            rate,
            outage_start_secs: OUTAGE_START.as_secs_f64(),
            outage_secs: outage.as_secs_f64(),
            arrivals_for_secs: arrivals_for.as_secs_f64(),
            receipts,
            policy: RetryPolicy::default(),
            provider_limit: None,
            protection: None,
        })
    }

    /// With a provider that allows `limit` requests per simulated second (`None`: no
    /// limit) and this protection (`None`: none). Without a rate limit of its own,
    /// the protection gets [`RATE_LIMIT_SHARE`] of the provider's limit.
    pub fn protected(
        mut self,
        limit: Option<f64>,
        protection: Option<DependencyPolicy>,
    ) -> Result<Self, InputError> {
        if let Some(limit) = limit {
            if !(limit.is_finite() && limit >= 1.0) {
                return Err(InputError::new(
                    "provider-limit",
                    format!("{limit} requests/s is out of range; use 1 or more, or 0 for none"),
                ));
            }
        }
        let (max, why) = match protection {
            Some(_) => (
                MAX_SCALE_WITH_BREAKER,
                "with the breaker: faster, timers a few milliseconds late bunch the paced \
                 requests, and the provider's busiest simulated second reads over its limit \
                 though the worker sent within it (--no-breaker plays up to 60x)",
            ),
            None => (
                MAX_SCALE_WITHOUT_BREAKER,
                "without the breaker: faster, the worker cannot keep to the scaled retry \
                 schedule and the figures stop measuring the policy",
            ),
        };
        if self.scale > max {
            return Err(InputError::new(
                "scale",
                format!(
                    "{}x is too fast; the demo plays at most {}x {why}",
                    trim(self.scale),
                    trim(max)
                ),
            ));
        }
        self.provider_limit = limit;
        self.protection = protection.map(|mut policy| {
            if policy.rate_limit.is_none() {
                policy.rate_limit = limit.map(|limit| {
                    revenant::dependency::RateLimit::per_second(limit * RATE_LIMIT_SHARE)
                });
            }
            policy
        });
        Ok(self)
    }

    /// What the worker protects the provider with, in real time.
    pub fn real_dependencies(&self) -> Option<DependencyConfig> {
        let policy = self.protection.as_ref()?.time_scaled(self.scale);
        Some(DependencyConfig {
            policies: revenant::dependency::DependencyPolicies::new(policy),
            report_interval: REPORT_INTERVAL,
        })
    }

    /// When the provider is back, simulated seconds from the start.
    pub fn outage_end_secs(&self) -> f64 {
        self.outage_start_secs + self.outage_secs
    }

    /// When receipt `k` (from 0) arrives, simulated seconds from the start.
    pub fn arrival_secs(&self, k: u64) -> f64 {
        (k as f64 + 1.0) / self.rate
    }

    /// The policy the worker runs: the story's policy with every duration divided by
    /// the scale (base, cap, attempt timeout, lease and heartbeat). The lease cannot go
    /// below 100 ms (the policy refuses it), which would cap the scale at 600 with the
    /// default 60 s lease; [`Scenario::protected`] caps it lower.
    pub fn real_policy(&self) -> Result<RetryPolicy, InputError> {
        let p = &self.policy;
        let b = p.backoff();
        let shrink = |d: Duration| Duration::from_secs_f64(d.as_secs_f64() / self.scale);
        RetryPolicy::builder()
            .max_attempts(p.max_attempts())
            .backoff(Backoff::new(shrink(b.base), b.multiplier, shrink(b.cap))?)
            .jitter(p.jitter())
            .attempt_timeout(shrink(p.attempt_timeout()))
            .lease(shrink(p.lease()))
            .heartbeat(shrink(p.heartbeat()))
            .build()
            .map_err(|err| InputError::new("scale", err.to_string()))
    }

    /// The same story for `revenant_sim`: same rate, outage, arrivals and policy, in
    /// simulated time; evenly spaced arrivals, unlimited workers, no poison (the
    /// demo's one poison receipt is left out of the comparison).
    pub fn sim_config(&self) -> Result<SimConfig, InputError> {
        let mut config = SimConfig::default();
        config.arrivals.rate = self.rate;
        config.arrivals.duration = Some(Duration::from_secs_f64(self.arrivals_for_secs));
        config.provider.outage_start = Duration::from_secs_f64(self.outage_start_secs);
        config.provider.outage_length = Duration::from_secs_f64(self.outage_secs);
        config.provider.capacity = self.provider_limit;
        config.policy = self.policy;
        config.dependency = self
            .protection
            .clone()
            .unwrap_or_else(DependencyPolicy::off);
        config.validate()?;
        Ok(config)
    }

    /// "1 real second = 1 simulated minute (60x)".
    pub fn scale_text(&self) -> String {
        let per_real = self.scale;
        let what = if (per_real - 60.0).abs() < 1e-9 {
            "1 simulated minute".to_string()
        } else if (per_real - 1.0).abs() < 1e-9 {
            "1 simulated second".to_string()
        } else {
            format!("{} simulated seconds", trim(per_real))
        };
        format!("1 real second = {what} ({}x)", trim(per_real))
    }
}

fn trim(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_policy_is_the_default_shrunk_by_the_scale() {
        let scenario = Scenario::new(60.0, 11.0, Duration::from_secs(1800)).unwrap();
        let real = scenario.real_policy().unwrap();
        let default = RetryPolicy::default();
        assert_eq!(real.max_attempts(), default.max_attempts());
        assert_eq!(real.backoff().cap, default.backoff().cap / 60);
        assert_eq!(real.lease(), default.lease() / 60);
        assert!(real.attempt_timeout() < real.lease());
    }

    #[test]
    fn the_seed_story_has_eleven_receipts_a_second_for_thirty_six_minutes() {
        let scenario = Scenario::new(60.0, 11.0, Duration::from_secs(1800)).unwrap();
        assert_eq!(scenario.receipts, 11 * 36 * 60);
        assert_eq!(scenario.outage_end_secs(), 31.0 * 60.0);
        assert_eq!(
            scenario.scale_text(),
            "1 real second = 1 simulated minute (60x)"
        );
    }

    #[test]
    fn the_protection_runs_in_real_time_and_the_simulator_gets_it_in_simulated_time() {
        let scenario = Scenario::new(30.0, 11.0, Duration::from_secs(1800))
            .unwrap()
            .protected(Some(50.0), Some(DependencyPolicy::default()))
            .unwrap();
        let sim = scenario.sim_config().unwrap();
        assert_eq!(sim.provider.capacity, Some(50.0));
        let rate = sim.dependency.rate_limit.unwrap();
        assert_eq!(rate.per_second, 50.0 * RATE_LIMIT_SHARE);
        let real = scenario.real_dependencies().unwrap();
        let real_rate = real.policies.default.rate_limit.unwrap();
        assert!((real_rate.per_second - 50.0 * RATE_LIMIT_SHARE * 30.0).abs() < 1e-6);
        assert_eq!(
            real.policies.default.breaker.unwrap().cooldown,
            Duration::from_secs_f64(5.0 / 30.0)
        );
        let bare = Scenario::new(60.0, 11.0, Duration::from_secs(1800))
            .unwrap()
            .protected(Some(50.0), None)
            .unwrap();
        assert!(bare.real_dependencies().is_none());
        assert!(bare.sim_config().unwrap().dependency.is_off());
    }

    #[test]
    fn scales_rates_and_outages_out_of_range_are_refused() {
        assert_eq!(
            Scenario::new(0.5, 11.0, Duration::from_secs(60))
                .unwrap_err()
                .field,
            "scale"
        );
        assert_eq!(
            Scenario::new(60.0, 0.0, Duration::from_secs(60))
                .unwrap_err()
                .field,
            "rate"
        );
        assert_eq!(
            Scenario::new(60.0, 11.0, Duration::ZERO).unwrap_err().field,
            "outage"
        );
    }

    #[test]
    fn scales_past_what_the_checks_hold_at_are_refused() {
        let at = |scale| Scenario::new(scale, 11.0, Duration::from_secs(1800)).unwrap();
        let breaker = Some(DependencyPolicy::default());
        assert!(at(30.0).protected(Some(50.0), breaker.clone()).is_ok());
        let err = at(31.0).protected(Some(50.0), breaker).unwrap_err();
        assert_eq!(err.field, "scale");
        assert!(err.to_string().contains("at most 30x"), "{err}");
        assert!(at(60.0).protected(Some(50.0), None).is_ok());
        assert_eq!(
            at(61.0).protected(Some(50.0), None).unwrap_err().field,
            "scale"
        );
    }
}
