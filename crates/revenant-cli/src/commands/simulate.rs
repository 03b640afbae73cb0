//! `revenant simulate`: the Friday outage in virtual time, without a database.
//!
//! Jobs arrive at `--rate`, the provider is down from `--outage-start` for
//! `--outage` and allows `--capacity` requests a second when up, and every answer goes
//! through the runtime's own `decide()` with the policy the flags describe. The
//! provider is protected as a worker protects a dependency (breaker, rate limit equal
//! to its capacity, retry budget; the same state machine the stores run) unless
//! `--no-breaker` says otherwise. It prints what the provider went through (requests per
//! fresh job, requests per second during and after the outage), what was lost (jobs
//! dead-lettered) and how long the queue took to drain; `--compare` does it for every
//! jitter kind side by side, `--chart` draws it. The model and its limits are in
//! docs/simulator.md.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use revenant::dependency::{DependencyPolicy, RateLimit};
use revenant::duration::parse;
use revenant::{Backoff, InputError, Jitter, RetryPolicy};
use revenant_sim::{chart, compare, simulate, table, Report, Series, SimConfig, Spacing};
use serde::Serialize;

use crate::commands::protection::ProtectionArgs;
use crate::error::CliError;
use crate::output;

/// `revenant simulate`: defaults are the design's story (11 jobs/s, a 30-minute
/// outage from the first minute) under revenant's default policy.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Jobs arriving per second.
    #[arg(long, default_value_t = 11.0, allow_negative_numbers = true)]
    pub rate: f64,
    /// Arrivals as a Poisson process (random gaps drawn from --seed) instead of
    /// evenly spaced.
    #[arg(long)]
    pub poisson: bool,
    /// When the provider goes down, from the start of the run.
    #[arg(long, default_value = "60s")]
    pub outage_start: String,
    /// How long the provider answers 503 to every request.
    #[arg(long, default_value = "30m")]
    pub outage: String,
    /// How long jobs keep arriving, from the start. Default: until five minutes after
    /// the outage ends.
    #[arg(long)]
    pub arrivals_for: Option<String>,
    /// Attempts in all (the first try included).
    #[arg(long, default_value_t = 12, allow_negative_numbers = true)]
    pub attempts: i64,
    /// The delay after the first failure.
    #[arg(long, default_value = "10s")]
    pub base: String,
    /// How much each further failure multiplies the delay.
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    pub multiplier: f64,
    /// No delay is longer than this.
    #[arg(long, default_value = "1h")]
    pub cap: String,
    /// none, full, equal, proportional(F) or decorrelated. Ignored with --compare.
    #[arg(long, default_value = "equal")]
    pub jitter: String,
    /// The provider sends this Retry-After with its 503s (e.g. `60s`); it replaces
    /// the backoff, capped at --cap.
    #[arg(long)]
    pub retry_after: Option<String>,
    /// Requests a second the provider serves when up; it refuses the rest of each
    /// second with a 503. 0: unlimited. The default is the seed story's provider.
    #[arg(long, default_value_t = 50.0, allow_negative_numbers = true)]
    pub capacity: f64,
    /// Attempts that can run at once across all workers. Needs --latency (the
    /// throughput is workers / latency). Default: unlimited.
    #[arg(long)]
    pub workers: Option<u32>,
    /// How long the provider takes to answer; holds a worker slot that long.
    #[arg(long, default_value = "0s")]
    pub latency: String,
    /// The share of jobs (0 to 1) that fail permanently on their first attempt.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub poison_share: f64,
    /// The seed of every random draw: the same seed gives the same figures.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run every jitter kind (none, full, equal, decorrelated, proportional(0.2)) on
    /// the same jobs and print a table.
    #[arg(long)]
    pub compare: bool,
    /// Write an SVG chart of provider requests per second and queue depth here. With
    /// --compare, one file per jitter kind: PATH's stem followed by `-KIND`.
    #[arg(long, value_name = "PATH")]
    pub chart: Option<PathBuf>,
    /// The time series' bucket in the JSON output and the chart's resolution is
    /// 10 s; this sets the JSON's (e.g. `1s`).
    #[arg(long, default_value = "10s")]
    pub bucket: String,
    /// Print JSON: every figure, the scenario, and the time series.
    #[arg(long)]
    pub json: bool,
    /// How the provider is protected. Without a `--rate-limit`, its rate limit is its
    /// `--capacity`.
    #[command(flatten)]
    pub protection: ProtectionArgs,
}

#[derive(Serialize)]
struct Run<'a> {
    #[serde(flatten)]
    report: &'a Report,
    series: Series,
}

/// Runs the simulation the flags describe and prints it.
pub async fn run(args: SimulateArgs) -> Result<ExitCode, CliError> {
    let config = config(&args)?;
    let bucket = parse("bucket", &args.bucket)?;
    if bucket < Duration::from_secs(1) {
        return Err(InputError::new("bucket", "must be at least 1s").into());
    }
    let reports = if args.compare {
        compare(&config, &revenant_sim::COMPARED_JITTERS)?
    } else {
        vec![simulate(&config)?]
    };

    let mut charts = Vec::new();
    if let Some(path) = &args.chart {
        for report in &reports {
            let file = if args.compare {
                suffixed(path, &chart::file_stem(report.config.policy.jitter()))
            } else {
                path.clone()
            };
            std::fs::write(&file, chart::render_report(report)).map_err(|err| {
                CliError::Failed(format!(
                    "cannot write the chart to {}: {err}",
                    file.display()
                ))
            })?;
            charts.push(file);
        }
    }

    if args.json {
        let runs: Vec<Run> = reports
            .iter()
            .map(|report| Run {
                report,
                series: report.series(bucket),
            })
            .collect();
        if args.compare {
            output::json(&runs)?;
        } else {
            output::json(&runs[0])?;
        }
        return Ok(ExitCode::SUCCESS);
    }

    if args.compare {
        print!("{}", table::scenario(&config, false));
        println!();
        print!("{}", table::compare_table(&reports));
    } else {
        print!("{}", table::summary(&reports[0]));
    }
    for file in &charts {
        println!("chart written to {}", file.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The scenario the flags describe; a bad flag is an [`InputError`] naming it.
fn config(args: &SimulateArgs) -> Result<SimConfig, InputError> {
    if args.attempts < 1 || args.attempts > i64::from(RetryPolicy::MAX_ATTEMPTS) {
        return Err(InputError::new(
            "attempts",
            format!(
                "{} is out of range; use 1..={}",
                args.attempts,
                RetryPolicy::MAX_ATTEMPTS
            ),
        ));
    }
    let backoff = Backoff::new(
        parse("base", &args.base)?,
        args.multiplier,
        parse("cap", &args.cap)?,
    )
    .map_err(|err| InputError {
        // Name the flag, not the policy's field.
        field: err.field.strip_prefix("backoff.").unwrap_or(err.field),
        message: err.message,
    })?;
    let jitter: Jitter = args.jitter.parse()?;
    let policy = RetryPolicy::builder()
        .max_attempts(args.attempts as u32)
        .backoff(backoff)
        .jitter(jitter)
        .build()?;

    let mut config = SimConfig::default();
    config.policy = policy;
    config.arrivals.rate = args.rate;
    config.arrivals.spacing = if args.poisson {
        Spacing::Poisson
    } else {
        Spacing::Even
    };
    config.arrivals.duration = args
        .arrivals_for
        .as_deref()
        .map(|text| parse("arrivals-for", text))
        .transpose()?;
    config.provider.outage_start = parse("outage-start", &args.outage_start)?;
    config.provider.outage_length = parse("outage", &args.outage)?;
    config.provider.retry_after = args
        .retry_after
        .as_deref()
        .map(|text| parse("retry-after", text))
        .transpose()?;
    config.provider.capacity = (args.capacity != 0.0).then_some(args.capacity);
    config.dependency = match args.protection.policies()? {
        None => DependencyPolicy::off(),
        Some(policies) => {
            let mut policy = policies.default;
            if policy.rate_limit.is_none() {
                policy.rate_limit = config.provider.capacity.map(RateLimit::per_second);
            }
            policy
        }
    };
    config.provider.latency = parse("latency", &args.latency)?;
    config.workers.slots = args.workers;
    config.poison_share = args.poison_share;
    config.seed = args.seed;
    config.validate()?;
    Ok(config)
}

/// `out/chart.svg` with `full` → `out/chart-full.svg`.
fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "chart".to_string());
    let extension = path
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "svg".to_string());
    path.with_file_name(format!("{stem}-{suffix}.{extension}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimulateArgs,
    }

    fn args(flags: &[&str]) -> SimulateArgs {
        Cli::try_parse_from(std::iter::once("simulate").chain(flags.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn the_defaults_are_the_protected_seed_story_under_the_default_policy() {
        let config = config(&args(&[])).unwrap();
        assert_eq!(config, SimConfig::protected_seed_story());
        // Unprotected and unlimited: the seed story as it was first told.
        let config = config_of(&["--no-breaker", "--capacity", "0"]);
        assert_eq!(config, SimConfig::default());
    }

    fn config_of(flags: &[&str]) -> SimConfig {
        config(&args(flags)).unwrap()
    }

    #[test]
    fn protection_flags_set_the_providers_protection() {
        let config = config_of(&["--rate-limit", "40/5", "--retry-budget", "0"]);
        assert_eq!(
            config.dependency.rate_limit,
            Some(RateLimit::per_second(40.0).with_burst(5))
        );
        assert_eq!(config.dependency.retry_budget, None);
        let config = config_of(&["--capacity", "0"]);
        assert_eq!(config.dependency.rate_limit, None, "no capacity, no limit");
        assert!(config_of(&["--no-breaker"]).dependency.is_off());
    }

    #[test]
    fn flags_set_the_scenario() {
        let config = config(&args(&[
            "--rate",
            "5",
            "--outage",
            "10m",
            "--attempts",
            "10",
            "--jitter",
            "full",
            "--retry-after",
            "1m",
            "--poisson",
            "--workers",
            "8",
            "--latency",
            "200ms",
        ]))
        .unwrap();
        assert_eq!(config.arrivals.rate, 5.0);
        assert_eq!(config.arrivals.spacing, Spacing::Poisson);
        assert_eq!(config.provider.outage_length, Duration::from_secs(600));
        assert_eq!(config.provider.retry_after, Some(Duration::from_secs(60)));
        assert_eq!(config.policy.max_attempts(), 10);
        assert_eq!(config.policy.jitter(), Jitter::Full);
        assert_eq!(config.workers.slots, Some(8));
    }

    #[test]
    fn bad_flags_are_named() {
        let field = |flags: &[&str]| config(&args(flags)).unwrap_err().field;
        assert_eq!(field(&["--rate", "-1"]), "rate");
        assert_eq!(field(&["--outage", "30"]), "outage");
        assert_eq!(field(&["--outage-start", "soon"]), "outage-start");
        assert_eq!(field(&["--arrivals-for", "1x"]), "arrivals-for");
        assert_eq!(field(&["--attempts", "0"]), "attempts");
        assert_eq!(field(&["--base", "0s"]), "base");
        assert_eq!(field(&["--multiplier", "0.5"]), "multiplier");
        assert_eq!(field(&["--cap", "1s"]), "cap");
        assert_eq!(field(&["--jitter", "gaussian"]), "jitter");
        assert_eq!(field(&["--retry-after=-1s"]), "retry-after");
        assert_eq!(field(&["--poison-share", "2"]), "poison-share");
        assert_eq!(field(&["--workers", "4"]), "workers");
        assert_eq!(field(&["--capacity", "-3"]), "capacity");
        assert_eq!(field(&["--breaker-threshold", "0"]), "breaker-threshold");
    }

    #[test]
    fn compare_charts_get_one_file_per_jitter_kind() {
        assert_eq!(
            suffixed(Path::new("out/chart.svg"), "full"),
            PathBuf::from("out/chart-full.svg")
        );
        assert_eq!(
            suffixed(Path::new("chart"), "proportional-0.2"),
            PathBuf::from("chart-proportional-0.2.svg")
        );
    }
}
