//! What a torture job does: a pure function of (seed, job id, attempt), so the worker
//! processes and the checker agree on it without talking to each other.
//!
//! A [`Plan`] (a seed and a [`Mix`] of weights) gives each job one [`Behaviour`]; the
//! behaviour gives each attempt one [`Action`]; each action ends one way ([`End`]), and
//! from the ends of its attempts the plan predicts the job's end ([`Expected`]) for a
//! given `max_attempts`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How often each behaviour is drawn, as integer weights (they need not sum to 100),
/// and the numbers the behaviours take.
///
/// Written and parsed as `succeed:90,transient:5,permanent:3,sleep:2`; a missing weight
/// is 0, a missing number keeps its default. The default is all `succeed`: a no-op job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mix {
    /// Succeeds at its first attempt.
    pub succeed: u32,
    /// Fails transiently on its first k attempts (1 ≤ k ≤ [`Mix::max_transient`]), then
    /// succeeds; dead (`attempts_exhausted`) when k ≥ max_attempts.
    pub transient: u32,
    /// Fails transiently on every attempt: dead, `attempts_exhausted`.
    pub always_transient: u32,
    /// Fails transiently before attempt j, permanently at j (1 ≤ j ≤
    /// [`Mix::max_permanent_at`]); dead `attempts_exhausted` when j > max_attempts.
    pub permanent: u32,
    /// Sleeps [`Mix::sleep_ms`] milliseconds, then succeeds.
    pub sleep: u32,
    /// Panics on its first k attempts (as `transient`), then succeeds.
    pub panic: u32,
    /// Panics on every attempt: the poison of RELIABILITY.md test 14.
    pub poison_panic: u32,
    /// Runs past its attempt timeout on its first k attempts (as `transient`), without
    /// ever looking at its cancellation token, then succeeds.
    pub timeout: u32,
    /// Aborts its worker process on every attempt: the poison of test 15. Dead with
    /// `lease_expired` after max_attempts crashes.
    pub abort: u32,
    /// Blocks its thread for [`Mix::block_ms`] on every attempt (`std::thread::sleep`:
    /// no await, so cancellation cannot reach it). `block_ms` must exceed the attempt
    /// timeout: each attempt times out (or, when every runtime thread is blocked, loses
    /// its lease), and the job ends dead.
    pub block: u32,
    /// Holds a database connection of the worker's own pool for [`Mix::hold_ms`], then
    /// succeeds (PostgreSQL; on SQLite it keeps the store's readers busy instead).
    pub hold: u32,
    /// Stalls its first attempt until another worker has claimed the job again (its
    /// lease must run out first: a worker without heartbeats), then returns `Ok`, late;
    /// later attempts succeed at once. RELIABILITY.md test 7.
    pub stall: u32,
    /// The most transient failures (or panics, or time-outs) of a job that has k of them.
    /// Default 2.
    pub max_transient: u32,
    /// The latest attempt a `permanent` job fails permanently at. Default 1.
    pub max_permanent_at: u32,
    /// How long a `sleep` job sleeps. Default 20 ms.
    pub sleep_ms: u64,
    /// How long a `block` job blocks. Default 3000 ms.
    pub block_ms: u64,
    /// How long a `hold` job holds its connection. Default 100 ms.
    pub hold_ms: u64,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            succeed: 1,
            transient: 0,
            always_transient: 0,
            permanent: 0,
            sleep: 0,
            panic: 0,
            poison_panic: 0,
            timeout: 0,
            abort: 0,
            block: 0,
            hold: 0,
            stall: 0,
            max_transient: 2,
            max_permanent_at: 1,
            sleep_ms: 20,
            block_ms: 3000,
            hold_ms: 100,
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

    /// The weights in drawing order, with their names.
    fn weights(&self) -> [(&'static str, u32); 12] {
        [
            ("succeed", self.succeed),
            ("transient", self.transient),
            ("permanent", self.permanent),
            ("sleep", self.sleep),
            ("always_transient", self.always_transient),
            ("panic", self.panic),
            ("poison_panic", self.poison_panic),
            ("timeout", self.timeout),
            ("abort", self.abort),
            ("block", self.block),
            ("hold", self.hold),
            ("stall", self.stall),
        ]
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, weight) in self.weights() {
            if weight > 0 {
                write!(f, "{name}:{weight},")?;
            }
        }
        write!(
            f,
            "max_transient:{},max_permanent_at:{},sleep_ms:{},block_ms:{},hold_ms:{}",
            self.max_transient, self.max_permanent_at, self.sleep_ms, self.block_ms, self.hold_ms
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
                "always_transient" => mix.always_transient = weight()?,
                "permanent" => mix.permanent = weight()?,
                "sleep" => mix.sleep = weight()?,
                "panic" => mix.panic = weight()?,
                "poison_panic" => mix.poison_panic = weight()?,
                "timeout" => mix.timeout = weight()?,
                "abort" => mix.abort = weight()?,
                "block" => mix.block = weight()?,
                "hold" => mix.hold = weight()?,
                "stall" => mix.stall = weight()?,
                "max_transient" => mix.max_transient = weight()?.max(1),
                "max_permanent_at" => mix.max_permanent_at = weight()?.max(1),
                "sleep_ms" => mix.sleep_ms = n,
                "block_ms" => mix.block_ms = n,
                "hold_ms" => mix.hold_ms = n,
                other => {
                    return Err(format!(
                        "unknown behaviour {other:?}; use succeed, transient, always_transient, \
                         permanent, sleep, panic, poison_panic, timeout, abort, block, hold, stall, \
                         max_transient, max_permanent_at, sleep_ms, block_ms, hold_ms"
                    ))
                }
            }
        }
        if mix.weights().iter().all(|(_, w)| *w == 0) {
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
    /// Fails transiently on every attempt.
    AlwaysTransient,
    /// Fails transiently before attempt `at`, permanently at it.
    PermanentAt {
        /// The attempt that fails permanently.
        at: u32,
    },
    /// Sleeps, then succeeds.
    Sleep {
        /// For how long, in milliseconds.
        ms: u64,
    },
    /// Panics on attempts `1..=failures`, then succeeds.
    PanicThenSucceed {
        /// How many attempts panic.
        failures: u32,
    },
    /// Panics on every attempt.
    AlwaysPanic,
    /// Overruns the attempt timeout on attempts `1..=failures`, then succeeds.
    TimeoutThenSucceed {
        /// How many attempts time out.
        failures: u32,
    },
    /// Aborts the worker process on every attempt.
    Abort,
    /// Blocks its thread on every attempt.
    Block {
        /// For how long, in milliseconds.
        ms: u64,
    },
    /// Holds a database connection, then succeeds.
    Hold {
        /// For how long, in milliseconds.
        ms: u64,
    },
    /// Stalls attempt 1 until the job is claimed again, then succeeds.
    StallOnce,
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
    /// `panic!`.
    Panic,
    /// Sleep well past the attempt's deadline without looking at the cancellation
    /// token; the runtime's timeout must end it.
    Overrun,
    /// `std::process::abort()`.
    Abort,
    /// `std::thread::sleep`, then return `Ok(())` (too late: the attempt timed out).
    Block(Duration),
    /// Hold a database connection, then return `Ok(())`.
    Hold(Duration),
    /// Wait until the job has been claimed again (or a minute passes), then return
    /// `Ok(())`: a result that comes after the lease was lost.
    StallUntilReclaimed,
}

/// How an attempt ends, as far as the job's state goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The job completes.
    Ok,
    /// A transient failure: retried, or dead `attempts_exhausted` on the last attempt.
    Transient,
    /// Dead `permanent`.
    Permanent,
    /// The process dies: the lease expires; dead `lease_expired` on the last attempt.
    Crash,
    /// Either [`End::Transient`] (the attempt timeout fired) or [`End::Ok`] (every
    /// runtime thread was blocked, so the timeout could not fire before the handler
    /// returned, and its success is written: the work was done). A handler that blocks
    /// its thread past the timeout ends this way.
    Late,
}

impl Action {
    /// How this action ends its attempt.
    pub fn end(self) -> End {
        match self {
            Action::Succeed
            | Action::SleepThenSucceed(_)
            | Action::Hold(_)
            | Action::StallUntilReclaimed => End::Ok,
            Action::FailTransient | Action::Panic | Action::Overrun => End::Transient,
            Action::Block(_) => End::Late,
            Action::FailPermanent => End::Permanent,
            Action::Abort => End::Crash,
        }
    }
}

/// The end the seed predicts for a job when no fault interrupts it (a
/// [`End::Late`] attempt counted as a time-out).
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
    /// `dead` with reason `lease_expired` after `max_attempts` crashed attempts.
    DeadLeaseExpired {
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
            | Expected::DeadExhausted { attempts }
            | Expected::DeadLeaseExpired { attempts } => attempts,
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
    /// A plan from a seed and a mix in its text form; panics on a bad mix (for tests).
    pub fn new(seed: u64, mix: &str) -> Plan {
        Plan {
            seed,
            mix: mix
                .parse()
                .unwrap_or_else(|err| panic!("mix {mix:?}: {err}")),
        }
    }

    /// The behaviour of job `id`.
    pub fn behaviour(&self, id: i64) -> Behaviour {
        let m = &self.mix;
        let h = mix64(self.seed ^ mix64(id as u64));
        let total: u64 = m.weights().iter().map(|(_, w)| u64::from(*w)).sum();
        let mut pick = h % total.max(1);
        let mut chosen = "succeed";
        for (name, weight) in m.weights() {
            if pick < u64::from(weight) {
                chosen = name;
                break;
            }
            pick -= u64::from(weight);
        }
        let k = || 1 + ((h >> 32) % u64::from(m.max_transient.max(1))) as u32;
        match chosen {
            "transient" => Behaviour::TransientThenSucceed { failures: k() },
            "permanent" => Behaviour::PermanentAt {
                at: 1 + ((h >> 32) % u64::from(m.max_permanent_at.max(1))) as u32,
            },
            "sleep" => Behaviour::Sleep { ms: m.sleep_ms },
            "always_transient" => Behaviour::AlwaysTransient,
            "panic" => Behaviour::PanicThenSucceed { failures: k() },
            "poison_panic" => Behaviour::AlwaysPanic,
            "timeout" => Behaviour::TimeoutThenSucceed { failures: k() },
            "abort" => Behaviour::Abort,
            "block" => Behaviour::Block { ms: m.block_ms },
            "hold" => Behaviour::Hold { ms: m.hold_ms },
            "stall" => Behaviour::StallOnce,
            _ => Behaviour::Succeed,
        }
    }

    /// What attempt `attempt` (1-based) of job `id` does.
    pub fn action(&self, id: i64, attempt: i32) -> Action {
        let first = |failures: u32| i64::from(attempt) <= i64::from(failures);
        match self.behaviour(id) {
            Behaviour::Succeed => Action::Succeed,
            Behaviour::TransientThenSucceed { failures } if first(failures) => {
                Action::FailTransient
            }
            Behaviour::AlwaysTransient => Action::FailTransient,
            Behaviour::PermanentAt { at } => {
                if i64::from(attempt) < i64::from(at) {
                    Action::FailTransient
                } else {
                    Action::FailPermanent
                }
            }
            Behaviour::Sleep { ms } => Action::SleepThenSucceed(Duration::from_millis(ms)),
            Behaviour::PanicThenSucceed { failures } if first(failures) => Action::Panic,
            Behaviour::AlwaysPanic => Action::Panic,
            Behaviour::TimeoutThenSucceed { failures } if first(failures) => Action::Overrun,
            Behaviour::Abort => Action::Abort,
            Behaviour::Block { ms } => Action::Block(Duration::from_millis(ms)),
            Behaviour::Hold { ms } => Action::Hold(Duration::from_millis(ms)),
            Behaviour::StallOnce if attempt == 1 => Action::StallUntilReclaimed,
            Behaviour::StallOnce
            | Behaviour::TransientThenSucceed { .. }
            | Behaviour::PanicThenSucceed { .. }
            | Behaviour::TimeoutThenSucceed { .. } => Action::Succeed,
        }
    }

    /// How job `id` ends when allowed `max_attempts` attempts and no fault interrupts
    /// any of them: the first attempt whose action ends the job, or the last one.
    pub fn expected(&self, id: i64, max_attempts: i32) -> Expected {
        let max_attempts = max_attempts.max(1);
        for attempt in 1..=max_attempts {
            let last = attempt == max_attempts;
            match self.action(id, attempt).end() {
                End::Ok => return Expected::Completed { attempts: attempt },
                End::Permanent => return Expected::DeadPermanent { attempts: attempt },
                End::Transient | End::Late if last => {
                    return Expected::DeadExhausted { attempts: attempt }
                }
                End::Crash if last => return Expected::DeadLeaseExpired { attempts: attempt },
                End::Transient | End::Late | End::Crash => {}
            }
        }
        unreachable!("the last attempt always ends the job")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mix_round_trips_through_its_text_form() {
        let mix: Mix = "succeed:90,transient:5,permanent:3,sleep:2,panic:1,abort:1,hold_ms:7"
            .parse()
            .unwrap();
        assert_eq!(mix.succeed, 90);
        assert_eq!(mix.sleep, 2);
        assert_eq!(mix.hold_ms, 7);
        assert_eq!(mix.to_string().parse::<Mix>().unwrap(), mix);
        assert!("".parse::<Mix>().is_err());
        assert!("bogus:1".parse::<Mix>().is_err());
        assert!("sleep_ms:5".parse::<Mix>().is_err(), "no weight");
    }

    #[test]
    fn behaviour_is_a_pure_function_of_seed_and_id_and_follows_the_weights() {
        let plan = Plan::new(7, "succeed:50,transient:30,permanent:20");
        let mut counts = [0_u32; 3];
        for id in 1..=10_000 {
            assert_eq!(plan.behaviour(id), plan.behaviour(id));
            match plan.behaviour(id) {
                Behaviour::Succeed => counts[0] += 1,
                Behaviour::TransientThenSucceed { failures } => {
                    assert!((1..=2).contains(&failures));
                    counts[1] += 1;
                }
                Behaviour::PermanentAt { at: 1 } => counts[2] += 1,
                other => panic!("weight 0 drawn: {other:?}"),
            }
        }
        assert!((4_500..5_500).contains(&counts[0]), "{counts:?}");
        assert!((2_500..3_500).contains(&counts[1]), "{counts:?}");
        assert!((1_500..2_500).contains(&counts[2]), "{counts:?}");
    }

    #[test]
    fn transient_jobs_succeed_after_their_failures_or_die_exhausted() {
        let plan = Plan::new(1, "transient:1,max_transient:3");
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

    #[test]
    fn each_behaviour_predicts_its_end() {
        let plan = Plan::new(5, "permanent:1,max_permanent_at:4");
        for id in 1..100 {
            let Behaviour::PermanentAt { at } = plan.behaviour(id) else {
                panic!("only permanent jobs");
            };
            let at = at as i32;
            let expected = if at > 3 {
                Expected::DeadExhausted { attempts: 3 }
            } else {
                Expected::DeadPermanent { attempts: at }
            };
            assert_eq!(plan.expected(id, 3), expected, "at {at}");
        }
        let poison = Plan::new(5, "poison_panic:1");
        assert_eq!(poison.action(1, 7), Action::Panic);
        assert_eq!(
            poison.expected(1, 4),
            Expected::DeadExhausted { attempts: 4 }
        );
        let abort = Plan::new(5, "abort:1");
        assert_eq!(abort.action(1, 1).end(), End::Crash);
        assert_eq!(
            abort.expected(1, 3),
            Expected::DeadLeaseExpired { attempts: 3 }
        );
        let timeout = Plan::new(5, "timeout:1,max_transient:1");
        assert_eq!(timeout.action(1, 1), Action::Overrun);
        assert_eq!(timeout.action(1, 2), Action::Succeed);
        assert_eq!(timeout.expected(1, 3), Expected::Completed { attempts: 2 });
        let block = Plan::new(5, "block:1,block_ms:10");
        assert_eq!(block.action(1, 1), Action::Block(Duration::from_millis(10)));
        assert_eq!(
            block.expected(1, 2),
            Expected::DeadExhausted { attempts: 2 }
        );
    }
}
