//! The flags that protect a dependency (circuit breaker, rate limit, retry budget,
//! bulkhead, slow calls), shared by `revenant work`, `revenant simulate` and
//! `revenant demo`.

use revenant::dependency::{
    BreakerPolicy, Bulkhead, DependencyPolicies, DependencyPolicy, RateLimit, RetryBudget, SlowCall,
};
use revenant::duration::parse;
use revenant::{names, InputError};

/// Dependency protection flags. The defaults are revenant's: a breaker at 50%
/// transient failures over 10 s (at least 10 answers), a 5 s cool-down doubling to
/// 15 s, a retry budget of 20% of first attempts (at least 10 retries per 10 s), and
/// no rate limit unless one is given.
#[derive(Debug, Clone, clap::Args)]
pub struct ProtectionArgs {
    /// No circuit breaker, rate limit or retry budget: every due job is sent, as
    /// before dependencies were protected. For comparing.
    #[arg(long)]
    pub no_breaker: bool,
    /// The share of transient failures (0 to 1) in the window that opens the breaker.
    #[arg(long, default_value_t = 0.5, value_name = "SHARE")]
    pub breaker_threshold: f64,
    /// The window the failure share is measured over.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub breaker_window: String,
    /// The breaker never opens on fewer answers than this in the window.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub breaker_min_requests: u32,
    /// How long the breaker stays open before the first probe.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub breaker_cooldown: String,
    /// Each failed probe doubles the cool-down up to this.
    #[arg(long, default_value = "15s", value_name = "DURATION")]
    pub breaker_max_cooldown: String,
    /// A rate limit shared by every worker: `RATE` requests a second for every
    /// dependency, `KEY=RATE` for one, with `/BURST` requests at once (default 1):
    /// `50`, `email-provider=50/5`. Repeat for several keys.
    #[arg(long = "rate-limit", value_name = "[KEY=]RATE[/BURST]")]
    pub rate_limits: Vec<String>,
    /// Retries may be at most this share (0 to 1) of first attempts in the window;
    /// a retry over it waits its backoff again, attempt given back. 0 turns the
    /// budget off.
    #[arg(long, default_value_t = 0.2, value_name = "SHARE")]
    pub retry_budget: f64,
    /// Retries the budget allows per `--breaker-window` whatever the share says.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub retry_budget_min: u32,
    /// A call running this long counts as slow for the breaker (counted while it
    /// still runs), so a provider that hangs opens it before every slot sits in a
    /// timeout.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub slow_call: String,
    /// The share of slow calls (0 to 1) in the window that opens the breaker.
    #[arg(long, default_value_t = 0.5, value_name = "SHARE")]
    pub slow_call_threshold: f64,
    /// Count only failures for the breaker, not slow calls.
    #[arg(long)]
    pub no_slow_call: bool,
    /// At most this share (0 to 1) of a queue's slots run one dependency's jobs at
    /// once in each worker; a job past it waits, attempt given back, its slot free
    /// for other dependencies. 1 lets one dependency take every slot. Default 0.5
    /// (`revenant demo`, whose queue calls one provider, has no bulkhead unless a
    /// bulkhead flag is given).
    #[arg(long, value_name = "SHARE")]
    pub bulkhead_share: Option<f64>,
    /// A fixed per-worker limit instead of the share: `N` for every dependency,
    /// `KEY=N` for one. Repeat for several keys.
    #[arg(long = "bulkhead", value_name = "[KEY=]N")]
    pub bulkheads: Vec<String>,
    /// A limit across every worker, kept in the store: `N` for every dependency,
    /// `KEY=N` for one. Repeat for several keys.
    #[arg(long = "bulkhead-shared", value_name = "[KEY=]N")]
    pub bulkheads_shared: Vec<String>,
    /// How long a job turned back at a bulkhead waits before it is claimed again.
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    pub bulkhead_wait: String,
    /// Adapt each worker's per-dependency limit (AIMD): halve it on a failure or a
    /// slow call, grow it back by one per limit's worth of fast successes, never
    /// above the bulkhead's limit.
    #[arg(long)]
    pub adaptive_concurrency: bool,
    /// No bulkhead: one dependency may hold every slot.
    #[arg(long)]
    pub no_bulkhead: bool,
}

/// One `--bulkhead` or `--bulkhead-shared`: `N` or `KEY=N`.
fn limit_flag(flag: &'static str, text: &str) -> Result<(Option<String>, u32), InputError> {
    let (key, n) = match text.rsplit_once('=') {
        Some((key, n)) => {
            names::validate_key(flag, key.trim())?;
            (Some(key.trim().to_string()), n)
        }
        None => (None, text),
    };
    let n: u32 = n
        .trim()
        .parse()
        .ok()
        .filter(|n| (1..=1_000_000).contains(n))
        .ok_or_else(|| {
            InputError::new(
                flag,
                format!("{text:?} is not N or KEY=N with N from 1 to 1000000, e.g. 8 or email-provider=8"),
            )
        })?;
    Ok((key, n))
}

/// One `--rate-limit`.
#[derive(Debug, Clone, PartialEq)]
struct RateFlag {
    key: Option<String>,
    limit: RateLimit,
}

fn rate_flag(text: &str) -> Result<RateFlag, InputError> {
    let bad = |why: &str| {
        InputError::new(
            "rate-limit",
            format!("{text:?} {why}; write RATE, RATE/BURST or KEY=RATE/BURST, e.g. 50 or email-provider=50/5"),
        )
    };
    let (key, rest) = match text.rsplit_once('=') {
        Some((key, rest)) => {
            names::validate_key("rate-limit", key.trim())?;
            (Some(key.trim().to_string()), rest)
        }
        None => (None, text),
    };
    let (rate, burst) = match rest.split_once('/') {
        Some((rate, burst)) => (
            rate,
            burst
                .trim()
                .parse::<u32>()
                .map_err(|_| bad("has a burst that is not a whole number"))?,
        ),
        None => (rest, 1),
    };
    let per_second: f64 = rate
        .trim()
        .parse()
        .map_err(|_| bad("has a rate that is not a number"))?;
    let limit = RateLimit::per_second(per_second).with_burst(burst);
    limit.validate().map_err(|err| bad(&err.message))?;
    Ok(RateFlag { key, limit })
}

impl ProtectionArgs {
    /// True when a flag sets the bulkhead (its share, a limit, a shared limit, or
    /// adaptive concurrency).
    pub fn sets_bulkhead(&self) -> bool {
        self.bulkhead_share.is_some()
            || !self.bulkheads.is_empty()
            || !self.bulkheads_shared.is_empty()
            || self.adaptive_concurrency
    }

    /// The policy for every key (without per-key rate limits), or `None` with
    /// `--no-breaker`.
    pub fn policies(&self) -> Result<Option<DependencyPolicies>, InputError> {
        let flags = self
            .rate_limits
            .iter()
            .map(|text| rate_flag(text))
            .collect::<Result<Vec<_>, _>>()?;
        if self.no_breaker {
            return Ok(None);
        }
        let fixed = self
            .bulkheads
            .iter()
            .map(|text| limit_flag("bulkhead", text))
            .collect::<Result<Vec<_>, _>>()?;
        let shared = self
            .bulkheads_shared
            .iter()
            .map(|text| limit_flag("bulkhead-shared", text))
            .collect::<Result<Vec<_>, _>>()?;
        let slow_call = if self.no_slow_call {
            None
        } else {
            Some(SlowCall {
                duration: parse("slow-call", &self.slow_call)?,
                threshold: self.slow_call_threshold,
            })
        };
        let breaker = BreakerPolicy {
            failure_threshold: self.breaker_threshold,
            window: parse("breaker-window", &self.breaker_window)?,
            min_requests: self.breaker_min_requests,
            cooldown: parse("breaker-cooldown", &self.breaker_cooldown)?,
            max_cooldown: parse("breaker-max-cooldown", &self.breaker_max_cooldown)?,
            slow_call,
            ..BreakerPolicy::default()
        };
        let last_for = |flags: &[(Option<String>, u32)], key: Option<&str>| {
            flags
                .iter()
                .rev()
                .find(|(k, _)| k.as_deref() == key)
                .map(|(_, n)| *n)
        };
        let bulkhead_wait = parse("bulkhead-wait", &self.bulkhead_wait)?;
        let bulkhead_for = |key: Option<&str>| {
            (!self.no_bulkhead).then(|| Bulkhead {
                max_in_flight: last_for(&fixed, key).or(last_for(&fixed, None)),
                share: self.bulkhead_share.unwrap_or(Bulkhead::default().share),
                shared: last_for(&shared, key).or(last_for(&shared, None)),
                wait: bulkhead_wait,
                adaptive: self.adaptive_concurrency,
            })
        };
        let retry_budget = (self.retry_budget > 0.0).then_some(RetryBudget {
            ratio: self.retry_budget,
            min_retries: self.retry_budget_min,
            window: breaker.window,
        });
        let default = DependencyPolicy {
            breaker: Some(breaker),
            rate_limit: flags
                .iter()
                .rev()
                .find(|f| f.key.is_none())
                .map(|f| f.limit),
            retry_budget,
            bulkhead: bulkhead_for(None),
        };
        let mut policies = DependencyPolicies::new(default.clone());
        let keys: std::collections::BTreeSet<&String> = flags
            .iter()
            .filter_map(|f| f.key.as_ref())
            .chain(fixed.iter().chain(&shared).filter_map(|(k, _)| k.as_ref()))
            .collect();
        for key in keys {
            let rate_limit = flags
                .iter()
                .rev()
                .find(|f| f.key.as_ref() == Some(key))
                .map(|f| f.limit)
                .or(default.rate_limit);
            let policy = DependencyPolicy {
                rate_limit,
                bulkhead: bulkhead_for(Some(key)),
                ..default.clone()
            };
            policies = policies.with_key(key.clone(), policy);
        }
        policies.validate().map_err(|err| InputError {
            // Name the flag, not the policy's field.
            field: match err.field {
                "breaker.failure_threshold" => "breaker-threshold",
                "breaker.window" => "breaker-window",
                "breaker.min_requests" => "breaker-min-requests",
                "breaker.cooldown" => "breaker-cooldown",
                "breaker.max_cooldown" => "breaker-max-cooldown",
                "retry_budget.ratio" => "retry-budget",
                "retry_budget.window" => "breaker-window",
                "breaker.slow_call.duration" => "slow-call",
                "breaker.slow_call.threshold" => "slow-call-threshold",
                "bulkhead.share" => "bulkhead-share",
                "bulkhead.wait" => "bulkhead-wait",
                "bulkhead.max_in_flight" => "bulkhead",
                "bulkhead.shared" => "bulkhead-shared",
                other => other,
            },
            message: err.message,
        })?;
        Ok(Some(policies))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        protection: ProtectionArgs,
    }

    fn policies(flags: &[&str]) -> Result<Option<DependencyPolicies>, InputError> {
        Cli::try_parse_from(std::iter::once("x").chain(flags.iter().copied()))
            .unwrap()
            .protection
            .policies()
    }

    #[test]
    fn the_defaults_are_revenants_breaker_and_budget_without_a_rate_limit() {
        let defaults = policies(&[]).unwrap().unwrap();
        assert_eq!(defaults.default, DependencyPolicy::default());
        assert!(defaults.keys.is_empty());
        assert!(policies(&["--no-breaker"]).unwrap().is_none());
    }

    #[test]
    fn rate_limits_apply_to_every_key_or_to_one() {
        let policies = policies(&["--rate-limit", "50", "--rate-limit", "email-provider=20/5"])
            .unwrap()
            .unwrap();
        assert_eq!(
            policies.default.rate_limit,
            Some(RateLimit::per_second(50.0))
        );
        assert_eq!(
            policies.resolve("email-provider").rate_limit,
            Some(RateLimit::per_second(20.0).with_burst(5))
        );
        assert_eq!(
            policies.resolve("other").rate_limit,
            Some(RateLimit::per_second(50.0))
        );
        let policies = policies_no_budget();
        assert!(policies.default.retry_budget.is_none());
    }

    fn policies_no_budget() -> DependencyPolicies {
        policies(&["--retry-budget", "0"]).unwrap().unwrap()
    }

    #[test]
    fn bad_flags_are_named() {
        let field = |flags: &[&str]| policies(flags).unwrap_err().field;
        assert_eq!(field(&["--rate-limit", "fast"]), "rate-limit");
        assert_eq!(field(&["--rate-limit", "50/x"]), "rate-limit");
        assert_eq!(field(&["--rate-limit", "0"]), "rate-limit");
        assert_eq!(field(&["--breaker-threshold", "2"]), "breaker-threshold");
        assert_eq!(field(&["--breaker-window", "0s"]), "breaker-window");
        assert_eq!(field(&["--breaker-cooldown", "10"]), "breaker-cooldown");
        assert_eq!(
            field(&["--breaker-cooldown", "1m", "--breaker-max-cooldown", "30s"]),
            "breaker-max-cooldown"
        );
        assert_eq!(field(&["--retry-budget", "1.5"]), "retry-budget");
        assert_eq!(field(&["--slow-call", "0s"]), "slow-call");
        assert_eq!(
            field(&["--slow-call-threshold", "0"]),
            "slow-call-threshold"
        );
        assert_eq!(field(&["--bulkhead-share", "1.5"]), "bulkhead-share");
        assert_eq!(field(&["--bulkhead", "0"]), "bulkhead");
        assert_eq!(field(&["--bulkhead", "=3"]), "bulkhead");
        assert_eq!(field(&["--bulkhead-shared", "x"]), "bulkhead-shared");
        assert_eq!(field(&["--bulkhead-wait", "2h"]), "bulkhead-wait");
    }

    #[test]
    fn bulkheads_apply_to_every_key_or_to_one_and_keep_the_rate_limits() {
        let policies = policies(&[
            "--bulkhead",
            "6",
            "--bulkhead-shared",
            "slow-host=3",
            "--rate-limit",
            "email-provider=20",
            "--adaptive-concurrency",
        ])
        .unwrap()
        .unwrap();
        let every = policies.default.bulkhead.unwrap();
        assert_eq!(every.max_in_flight, Some(6));
        assert_eq!(every.shared, None);
        assert!(every.adaptive);
        let slow = policies.resolve("slow-host").bulkhead.unwrap();
        assert_eq!((slow.max_in_flight, slow.shared), (Some(6), Some(3)));
        assert_eq!(
            policies.resolve("email-provider").rate_limit,
            Some(RateLimit::per_second(20.0))
        );
        assert_eq!(
            policies.resolve("email-provider").bulkhead.unwrap().shared,
            None
        );
        let off = policies_from(&["--no-bulkhead", "--no-slow-call"]);
        assert_eq!(off.default.bulkhead, None);
        assert_eq!(off.default.breaker.unwrap().slow_call, None);
    }

    fn policies_from(flags: &[&str]) -> DependencyPolicies {
        policies(flags).unwrap().unwrap()
    }
}
