//! What a torture job does: a pure function of (seed, job id, attempt), so the worker
//! processes and the checker agree on it without talking to each other.
//!
//! A [`Plan`] (a seed and a [`Mix`] of weights) gives each job one [`Behaviour`]; the
//! behaviour gives each attempt one [`Action`], and predicts the job's end
//! ([`Expected`]) for a given `max_attempts`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How often each behaviour is drawn, as integer weights (they need not sum to 100).
///
/// Written and parsed as `succeed:90,transient:5,permanent:3,sleep:2`; a missing name
/// weighs 0. The default is all `succeed`: a no-op job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mix {
    /// Succeeds at its first attempt.
    pub succeed: u32,
    /// Fails transiently on its first k attempts (1 ≤ k ≤ [`Mix::max_transient`]), then
    /// succeeds; dead (`attempts_exhausted`) when k ≥ max_attempts.
    pub transient: u32,
    /// Fails permanently at its first attempt.
    pub permanent: u32,
    /// Sleeps [`Mix::sleep_ms`] milliseconds, then succeeds.
    pub sleep: u32,
    /// The most transient failures a `transient` job has. Default 2.
    pub max_transient: u32,
    /// How long a `sleep` job sleeps. Default 20 ms.
    pub sleep_ms: u64,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            succeed: 1,
            transient: 0,
            permanent: 0,
            sleep: 0,
            max_transient: 2,
            sleep_ms: 20,
        }
    }
}

impl Mix {
    /// Every job sleeps `ms` milliseconds, then succeeds.
    pub fn all_sleep(ms: u64) -> Mix {
        Mix {
            succeed: 0,
            sleep: 1,
            sleep_ms: ms,
            ..Mix::default()
        }
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "succeed:{},transient:{},permanent:{},sleep:{},max_transient:{},sleep_ms:{}",
            self.succeed,
            self.transient,
            self.permanent,
            self.sleep,
            self.max_transient,
            self.sleep_ms
        )
    }
}

impl FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut mix = Mix {
            succeed: 0,
            ..Mix::default()
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once(':')
                .ok_or_else(|| format!("{part:?}: expected name:number"))?;
            let n: u64 = value
                .parse()
                .map_err(|_| format!("{part:?}: {value:?} is not a number"))?;
            let weight = || u32::try_from(n).map_err(|_| format!("{part:?}: too large"));
            match name {
                "succeed" => mix.succeed = weight()?,
                "transient" => mix.transient = weight()?,
                "permanent" => mix.permanent = weight()?,
                "sleep" => mix.sleep = weight()?,
                "max_transient" => mix.max_transient = weight()?.max(1),
                "sleep_ms" => mix.sleep_ms = n,
                other => {
                    return Err(format!(
                        "unknown behaviour {other:?}; use succeed, transient, permanent, sleep, max_transient, sleep_ms"
                    ))
                }
            }
        }
        if mix.succeed + mix.transient + mix.permanent + mix.sleep == 0 {
            return Err("every weight is 0: give at least one behaviour a weight".into());
        }
        Ok(mix)
    }
}

/// What one job does over its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Behaviour {
    /// Succeeds at once.
    Succeed,
    /// Fails transiently on attempts `1..=failures`, then succeeds.
    TransientThenSucceed {
        /// How many attempts fail.
        failures: u32,
    },
    /// Fails permanently at attempt 1.
    Permanent,
    /// Sleeps, then succeeds.
    Sleep {
        /// For how long, in milliseconds.
        ms: u64,
    },
}

/// What one attempt does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Return `Ok(())`.
    Succeed,
    /// Return a retryable error.
    FailTransient,
    /// Return a permanent error.
    FailPermanent,
    /// Sleep, then return `Ok(())`.
    SleepThenSucceed(Duration),
}

/// The end the seed predicts for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// `completed` after exactly this many attempts.
    Completed {
        /// Attempts spent.
        attempts: i32,
    },
    /// `dead` with reason `permanent` at this attempt.
    DeadPermanent {
        /// Attempts spent.
        attempts: i32,
    },
    /// `dead` with reason `attempts_exhausted` after `max_attempts` attempts.
    DeadExhausted {
        /// Attempts spent (= max_attempts).
        attempts: i32,
    },
}

impl Expected {
    /// The attempts the job is predicted to spend: the handler runs it should see.
    pub fn attempts(self) -> i32 {
        match self {
            Expected::Completed { attempts }
            | Expected::DeadPermanent { attempts }
            | Expected::DeadExhausted { attempts } => attempts,
        }
    }
}

/// A seed and a mix: everything needed to know what every job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Plan {
    /// The seed.
    pub seed: u64,
    /// The weights.
    pub mix: Mix,
}

/// splitmix64: small and well mixed, so the harness needs no RNG crate and every
/// process computes the same thing.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Plan {
    /// The behaviour of job `id`.
    pub fn behaviour(&self, id: i64) -> Behaviour {
        let m = &self.mix;
        let h = mix64(self.seed ^ mix64(id as u64));
        let total = u64::from(m.succeed)
            + u64::from(m.transient)
            + u64::from(m.permanent)
            + u64::from(m.sleep);
        let mut pick = h % total.max(1);
        let mut take = |w: u32| {
            if pick < u64::from(w) {
                true
            } else {
                pick -= u64::from(w);
                false
            }
        };
        if take(m.succeed) {
            Behaviour::Succeed
        } else if take(m.transient) {
            let failures = 1 + ((h >> 32) % u64::from(m.max_transient.max(1))) as u32;
            Behaviour::TransientThenSucceed { failures }
        } else if take(m.permanent) {
            Behaviour::Permanent
        } else {
            Behaviour::Sleep { ms: m.sleep_ms }
        }
    }

    /// What attempt `attempt` (1-based) of job `id` does.
    pub fn action(&self, id: i64, attempt: i32) -> Action {
        match self.behaviour(id) {
            Behaviour::Succeed => Action::Succeed,
            Behaviour::TransientThenSucceed { failures } => {
                if i64::from(attempt) <= i64::from(failures) {
                    Action::FailTransient
                } else {
                    Action::Succeed
                }
            }
            Behaviour::Permanent => Action::FailPermanent,
            Behaviour::Sleep { ms } => Action::SleepThenSucceed(Duration::from_millis(ms)),
        }
    }

    /// How job `id` ends when allowed `max_attempts` attempts.
    pub fn expected(&self, id: i64, max_attempts: i32) -> Expected {
        match self.behaviour(id) {
            Behaviour::Succeed | Behaviour::Sleep { .. } => Expected::Completed { attempts: 1 },
            Behaviour::Permanent => Expected::DeadPermanent { attempts: 1 },
            Behaviour::TransientThenSucceed { failures } => {
                let failures = i32::try_from(failures).unwrap_or(i32::MAX);
                if failures >= max_attempts {
                    Expected::DeadExhausted {
                        attempts: max_attempts,
                    }
                } else {
                    Expected::Completed {
                        attempts: failures + 1,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mix_round_trips_through_its_text_form() {
        let mix: Mix = "succeed:90,transient:5,permanent:3,sleep:2"
            .parse()
            .unwrap();
        assert_eq!(mix.succeed, 90);
        assert_eq!(mix.sleep, 2);
        assert_eq!(mix.to_string().parse::<Mix>().unwrap(), mix);
        assert!("".parse::<Mix>().is_err());
        assert!("bogus:1".parse::<Mix>().is_err());
    }

    #[test]
    fn behaviour_is_a_pure_function_of_seed_and_id_and_follows_the_weights() {
        let plan = Plan {
            seed: 7,
            mix: "succeed:50,transient:30,permanent:20".parse().unwrap(),
        };
        let mut counts = [0_u32; 3];
        for id in 1..=10_000 {
            assert_eq!(plan.behaviour(id), plan.behaviour(id));
            match plan.behaviour(id) {
                Behaviour::Succeed => counts[0] += 1,
                Behaviour::TransientThenSucceed { failures } => {
                    assert!((1..=2).contains(&failures));
                    counts[1] += 1;
                }
                Behaviour::Permanent => counts[2] += 1,
                Behaviour::Sleep { .. } => panic!("sleep has weight 0"),
            }
        }
        assert!((4_500..5_500).contains(&counts[0]), "{counts:?}");
        assert!((2_500..3_500).contains(&counts[1]), "{counts:?}");
        assert!((1_500..2_500).contains(&counts[2]), "{counts:?}");
    }

    #[test]
    fn transient_jobs_succeed_after_their_failures_or_die_exhausted() {
        let plan = Plan {
            seed: 1,
            mix: "transient:1,max_transient:3".parse().unwrap(),
        };
        for id in 1..200 {
            let Behaviour::TransientThenSucceed { failures } = plan.behaviour(id) else {
                panic!("only transient jobs");
            };
            let failures = failures as i32;
            for attempt in 1..=failures {
                assert_eq!(plan.action(id, attempt), Action::FailTransient);
            }
            assert_eq!(plan.action(id, failures + 1), Action::Succeed);
            assert_eq!(
                plan.expected(id, 3),
                if failures >= 3 {
                    Expected::DeadExhausted { attempts: 3 }
                } else {
                    Expected::Completed {
                        attempts: failures + 1,
                    }
                }
            );
        }
    }
}
