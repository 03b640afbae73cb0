//! Exponential backoff with jitter.
//!
//! The n-th failure waits `delay(n) = min(cap, base * multiplier^(n-1))`, then jitter
//! spreads it so that jobs which failed together do not come back together.
//!
//! ```
//! use std::time::Duration;
//! use revenant_core::Backoff;
//! let backoff = Backoff::new(Duration::from_secs(10), 2.0, Duration::from_secs(3600)).unwrap();
//! assert_eq!(backoff.delay(1), Duration::from_secs(10));
//! assert_eq!(backoff.delay(4), Duration::from_secs(80));
//! assert_eq!(backoff.delay(20), Duration::from_secs(3600)); // capped
//! assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(3600)); // no overflow
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::error::InputError;

/// Base, multiplier and cap of an exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Backoff {
    /// The delay after the first failure.
    #[serde(with = "duration_str")]
    pub base: Duration,
    /// How much each further failure multiplies the delay. At least 1.
    pub multiplier: f64,
    /// No delay is longer than this (retry-after included).
    #[serde(with = "duration_str")]
    pub cap: Duration,
}

impl Backoff {
    /// The largest multiplier accepted; more is a typo.
    pub const MAX_MULTIPLIER: f64 = 100.0;

    /// A backoff; refuses a zero base, a multiplier below 1 or not finite, and a cap
    /// below the base. The error names the field.
    pub fn new(base: Duration, multiplier: f64, cap: Duration) -> Result<Self, InputError> {
        let backoff = Backoff {
            base,
            multiplier,
            cap,
        };
        backoff.validate()?;
        Ok(backoff)
    }

    /// Checks the fields; see [`Backoff::new`].
    pub fn validate(&self) -> Result<(), InputError> {
        if self.base.is_zero() {
            return Err(InputError::new("backoff.base", "must be above zero"));
        }
        if !self.multiplier.is_finite() || !(1.0..=Self::MAX_MULTIPLIER).contains(&self.multiplier)
        {
            return Err(InputError::new(
                "backoff.multiplier",
                format!(
                    "{} is out of range; use 1.0 to {}",
                    self.multiplier,
                    Self::MAX_MULTIPLIER
                ),
            ));
        }
        if self.cap < self.base {
            return Err(InputError::new(
                "backoff.cap",
                format!(
                    "{} is below the base delay of {}",
                    crate::duration::format(self.cap),
                    crate::duration::format(self.base)
                ),
            ));
        }
        Ok(())
    }

    /// The delay after the `failure`-th failure (1-based) before jitter. Never above
    /// the cap, never overflows: the arithmetic is done in floating point and clamped.
    pub fn delay(&self, failure: u32) -> Duration {
        let exponent = failure.saturating_sub(1) as f64;
        let base_ms = self.base.as_secs_f64() * 1000.0;
        let cap_ms = self.cap.as_secs_f64() * 1000.0;
        let raw_ms = base_ms * self.multiplier.powf(exponent);
        // powf overflows to +inf for large exponents; min() clamps it to the cap.
        Duration::from_secs_f64(raw_ms.min(cap_ms) / 1000.0)
    }
}

/// How randomness spreads a delay `d`. Every variant keeps the result at or below the
/// cap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "factor")]
pub enum Jitter {
    /// Exactly `d`. Jobs that failed together retry together: only for tests.
    None,
    /// `U(0, d)`: the widest spread, but a short total span, so long outages
    /// dead-letter jobs that retried early (see docs/retry-policy.md).
    Full,
    /// `d/2 + U(0, d/2)`: never less than half the delay, so the worst-case span is
    /// half the nominal one. The default.
    Equal,
    /// `U(d(1-f), d(1+f))` for `0 < f <= 1`, capped.
    Proportional(f64),
    /// `min(cap, U(base, 3 * previous))`, AWS's "decorrelated jitter".
    Decorrelated,
}

impl Jitter {
    /// Checks the proportional factor.
    pub fn validate(&self) -> Result<(), InputError> {
        if let Jitter::Proportional(f) = self {
            if !f.is_finite() || *f <= 0.0 || *f > 1.0 {
                return Err(InputError::new(
                    "jitter",
                    format!("proportional factor {f} is out of range; use a number in (0, 1]"),
                ));
            }
        }
        Ok(())
    }

    /// The jittered delay for the `failure`-th failure.
    ///
    /// Decorrelated jitter depends on the previous delay. Rather than store it per
    /// job, it walks the recurrence from `base` with the same random source: the
    /// result has the same distribution as a stored chain would give at step n, which
    /// is what spreads the load. The walk stops after 64 steps; by then it sits at the
    /// cap for any multiplier of interest.
    pub fn apply<R: Rng + ?Sized>(&self, backoff: &Backoff, failure: u32, rng: &mut R) -> Duration {
        let d = backoff.delay(failure).as_secs_f64();
        let cap = backoff.cap.as_secs_f64();
        let seconds = match *self {
            Jitter::None => d,
            Jitter::Full => uniform(rng, 0.0, d),
            Jitter::Equal => d / 2.0 + uniform(rng, 0.0, d / 2.0),
            Jitter::Proportional(f) => uniform(rng, d * (1.0 - f), d * (1.0 + f)).min(cap),
            Jitter::Decorrelated => {
                let base = backoff.base.as_secs_f64();
                let mut previous = base;
                for _ in 0..failure.clamp(1, 64) {
                    previous = uniform(rng, base, (previous * 3.0).min(cap).max(base)).min(cap);
                }
                previous
            }
        };
        Duration::from_secs_f64(seconds.clamp(0.0, cap))
    }

    /// The smallest and largest delay [`Jitter::apply`] can return for the
    /// `failure`-th failure.
    pub fn bounds(&self, backoff: &Backoff, failure: u32) -> (Duration, Duration) {
        let d = backoff.delay(failure);
        match *self {
            Jitter::None => (d, d),
            Jitter::Full => (Duration::ZERO, d),
            Jitter::Equal => (d / 2, d),
            Jitter::Proportional(f) => (d.mul_f64(1.0 - f), d.mul_f64(1.0 + f).min(backoff.cap)),
            Jitter::Decorrelated => {
                let steps = failure.clamp(1, 64);
                let max = backoff.base.as_secs_f64() * 3f64.powi(steps as i32 - 1);
                (
                    backoff.base,
                    Duration::from_secs_f64(max.min(backoff.cap.as_secs_f64())),
                )
            }
        }
    }
}

fn uniform<R: Rng + ?Sized>(rng: &mut R, low: f64, high: f64) -> f64 {
    if high <= low {
        low
    } else {
        rng.random_range(low..=high)
    }
}

impl fmt::Display for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Jitter::None => f.write_str("none"),
            Jitter::Full => f.write_str("full"),
            Jitter::Equal => f.write_str("equal"),
            Jitter::Proportional(factor) => write!(f, "proportional({factor})"),
            Jitter::Decorrelated => f.write_str("decorrelated"),
        }
    }
}

impl FromStr for Jitter {
    type Err = InputError;

    /// Reads `none`, `full`, `equal`, `decorrelated`, or `proportional(F)` /
    /// `proportional:F` with `0 < F <= 1`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let jitter = match text.trim() {
            "none" => Jitter::None,
            "full" => Jitter::Full,
            "equal" => Jitter::Equal,
            "decorrelated" => Jitter::Decorrelated,
            other => {
                let factor = other
                    .strip_prefix("proportional(")
                    .and_then(|rest| rest.strip_suffix(')'))
                    .or_else(|| other.strip_prefix("proportional:"))
                    .ok_or_else(|| {
                        InputError::new(
                            "jitter",
                            format!("unknown jitter {other:?}; use none, full, equal, proportional(F) or decorrelated"),
                        )
                    })?;
                let factor: f64 = factor.trim().parse().map_err(|_| {
                    InputError::new(
                        "jitter",
                        format!("proportional factor {factor:?} is not a number"),
                    )
                })?;
                Jitter::Proportional(factor)
            }
        };
        jitter.validate()?;
        Ok(jitter)
    }
}

/// Serde for a `Duration` written as `"10s"` (or a number of milliseconds).
pub mod duration_str {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `"1m30s"`.
    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&crate::duration::format(*value))
    }

    /// Reads `"10s"` or whole milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Millis(u64),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Text(text) => {
                crate::duration::parse("duration", &text).map_err(serde::de::Error::custom)
            }
            Raw::Millis(ms) => Ok(Duration::from_millis(ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn jitters() -> impl Strategy<Value = Jitter> {
        prop_oneof![
            Just(Jitter::None),
            Just(Jitter::Full),
            Just(Jitter::Equal),
            (0.01f64..=1.0).prop_map(Jitter::Proportional),
            Just(Jitter::Decorrelated),
        ]
    }

    fn backoffs() -> impl Strategy<Value = Backoff> {
        (1u64..=600_000, 1.0f64..=10.0, 0u64..=86_400_000).prop_map(
            |(base_ms, multiplier, extra_ms)| {
                Backoff::new(
                    Duration::from_millis(base_ms),
                    multiplier,
                    Duration::from_millis(base_ms + extra_ms),
                )
                .unwrap()
            },
        )
    }

    proptest! {
        #[test]
        fn delay_stays_within_its_jitter_bounds_and_the_cap(
            backoff in backoffs(), jitter in jitters(), failure in 1u32..=10_000, seed: u64,
        ) {
            let mut rng = StdRng::seed_from_u64(seed);
            let delay = jitter.apply(&backoff, failure, &mut rng);
            let (low, high) = jitter.bounds(&backoff, failure);
            // One millisecond of slack for floating point rounding.
            let slack = Duration::from_millis(1);
            prop_assert!(delay + slack >= low, "{delay:?} below {low:?}");
            prop_assert!(delay <= high + slack, "{delay:?} above {high:?}");
            prop_assert!(delay <= backoff.cap);
        }

        #[test]
        fn delay_is_deterministic_under_a_seed(
            backoff in backoffs(), jitter in jitters(), failure in 1u32..=10_000, seed: u64,
        ) {
            let a = jitter.apply(&backoff, failure, &mut StdRng::seed_from_u64(seed));
            let b = jitter.apply(&backoff, failure, &mut StdRng::seed_from_u64(seed));
            prop_assert_eq!(a, b);
        }

        #[test]
        fn nominal_delay_never_decreases_and_never_passes_the_cap(backoff in backoffs(), failure in 1u32..=10_000) {
            prop_assert!(backoff.delay(failure) <= backoff.delay(failure + 1));
            prop_assert!(backoff.delay(failure) <= backoff.cap);
        }
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let backoff =
            Backoff::new(Duration::from_secs(10), 100.0, Duration::from_secs(3600)).unwrap();
        let mut rng = StdRng::seed_from_u64(7);
        for jitter in [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Proportional(1.0),
            Jitter::Decorrelated,
        ] {
            for failure in [10_000, 1_000_000, u32::MAX] {
                assert!(jitter.apply(&backoff, failure, &mut rng) <= backoff.cap);
            }
        }
    }

    #[test]
    fn invalid_backoffs_name_the_field() {
        let s = Duration::from_secs;
        assert_eq!(
            Backoff::new(Duration::ZERO, 2.0, s(1)).unwrap_err().field,
            "backoff.base"
        );
        assert_eq!(
            Backoff::new(s(1), 0.5, s(1)).unwrap_err().field,
            "backoff.multiplier"
        );
        assert_eq!(
            Backoff::new(s(1), f64::NAN, s(1)).unwrap_err().field,
            "backoff.multiplier"
        );
        assert_eq!(
            Backoff::new(s(10), 2.0, s(1)).unwrap_err().field,
            "backoff.cap"
        );
    }

    #[test]
    fn jitter_parses_every_spelling() {
        assert_eq!("none".parse::<Jitter>().unwrap(), Jitter::None);
        assert_eq!(
            "proportional(0.25)".parse::<Jitter>().unwrap(),
            Jitter::Proportional(0.25)
        );
        assert_eq!(
            "proportional:0.5".parse::<Jitter>().unwrap(),
            Jitter::Proportional(0.5)
        );
        assert!("proportional(1.5)".parse::<Jitter>().is_err());
        assert!("proportional(x)".parse::<Jitter>().is_err());
        assert!("gaussian".parse::<Jitter>().is_err());
    }
}
