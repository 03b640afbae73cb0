//! `revenant policy`: a retry policy's schedule, printed before anyone trusts it.

use std::process::ExitCode;
use std::time::Duration;

use revenant::duration::{format, parse};
use revenant::policy::ScheduleStep;
use revenant::{Backoff, InputError, Jitter, RetryPolicy};
use serde::Serialize;

use crate::cli::PolicyArgs;
use crate::error::CliError;
use crate::output::{self, Table};

#[derive(Serialize)]
struct Report {
    policy: RetryPolicy,
    schedule: Vec<Step>,
    #[serde(with = "revenant::backoff::duration_str")]
    span_min: Duration,
    #[serde(with = "revenant::backoff::duration_str")]
    span_nominal: Duration,
    #[serde(with = "revenant::backoff::duration_str")]
    span_max: Duration,
    span_min_secs: f64,
    span_nominal_secs: f64,
    span_max_secs: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    outage: Option<Outage>,
}

#[derive(Serialize)]
struct Step {
    #[serde(flatten)]
    step: ScheduleStep,
    /// Time from the first failure to this retry, shortest and longest.
    #[serde(with = "revenant::backoff::duration_str")]
    at_min: Duration,
    #[serde(with = "revenant::backoff::duration_str")]
    at_max: Duration,
}

#[derive(Serialize)]
struct Outage {
    #[serde(with = "revenant::backoff::duration_str")]
    length: Duration,
    /// True when even the shortest span outlasts the outage.
    survived_by_every_job: bool,
    /// True when the longest span outlasts it (some jobs survive).
    survived_by_some_jobs: bool,
}

/// Prints the schedule of the policy the flags describe.
pub fn run(args: PolicyArgs) -> Result<ExitCode, CliError> {
    if args.attempts < 1 || args.attempts > i64::from(RetryPolicy::MAX_ATTEMPTS) {
        return Err(InputError::new(
            "attempts",
            format!(
                "{} is out of range; use 1..={}",
                args.attempts,
                RetryPolicy::MAX_ATTEMPTS
            ),
        )
        .into());
    }
    let backoff = Backoff::new(
        parse("base", &args.base)?,
        args.multiplier,
        parse("cap", &args.cap)?,
    )?;
    let jitter: Jitter = args.jitter.parse()?;
    // The schedule does not depend on the timeout and lease; keep the defaults valid.
    let policy = RetryPolicy::builder()
        .max_attempts(args.attempts as u32)
        .backoff(backoff)
        .jitter(jitter)
        .build()?;
    let outage = args
        .outage
        .as_deref()
        .map(|text| parse("outage", text))
        .transpose()?;

    let (span_min, span_nominal, span_max) = policy.span();
    let mut at_min = Duration::ZERO;
    let mut at_max = Duration::ZERO;
    let schedule: Vec<Step> = policy
        .schedule()
        .into_iter()
        .map(|step| {
            at_min += step.min;
            at_max += step.max;
            Step {
                step,
                at_min,
                at_max,
            }
        })
        .collect();
    let report = Report {
        policy,
        schedule,
        span_min,
        span_nominal,
        span_max,
        span_min_secs: span_min.as_secs_f64(),
        span_nominal_secs: span_nominal.as_secs_f64(),
        span_max_secs: span_max.as_secs_f64(),
        outage: outage.map(|length| Outage {
            length,
            survived_by_every_job: span_min > length,
            survived_by_some_jobs: span_max > length,
        }),
    };
    if args.json {
        output::json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }

    println!(
        "{} attempts; backoff {} x{} capped at {}; jitter {}",
        policy.max_attempts(),
        format(backoff.base),
        backoff.multiplier,
        format(backoff.cap),
        jitter
    );
    let mut table = Table::new(vec![
        "RETRY",
        "AFTER FAILURE",
        "DELAY",
        "DELAY RANGE",
        "SINCE FIRST FAILURE",
    ]);
    for step in &report.schedule {
        table.row(vec![
            format!("#{}", step.step.failure + 1),
            step.step.failure.to_string(),
            format(round(step.step.nominal)),
            range(step.step.min, step.step.max),
            range(step.at_min, step.at_max),
        ]);
    }
    table.print("no retries: the first failure is final")?;
    println!(
        "total span from the first failure to the last attempt: {} nominal ({} to {} with jitter), about {:.0} minutes",
        format(round(span_nominal)),
        format(round(span_min)),
        format(round(span_max)),
        span_nominal.as_secs_f64() / 60.0
    );
    if let Some(outage) = &report.outage {
        let verdict = if outage.survived_by_every_job {
            "dead-letters no job that fails at its start".to_string()
        } else if outage.survived_by_some_jobs {
            "dead-letters SOME jobs that fail at its start (their retries can all fall inside it)"
                .to_string()
        } else {
            "dead-letters EVERY job that fails at its start".to_string()
        };
        println!("an outage of {}: {verdict}", format(outage.length));
    }
    Ok(ExitCode::SUCCESS)
}

fn range(min: Duration, max: Duration) -> String {
    if min == max {
        format(round(min))
    } else {
        format!("{} - {}", format(round(min)), format(round(max)))
    }
}

/// Whole seconds above a minute, whole milliseconds below: easier to read.
fn round(d: Duration) -> Duration {
    if d >= Duration::from_secs(60) {
        Duration::from_secs(d.as_secs_f64().round() as u64)
    } else {
        Duration::from_millis(d.as_millis() as u64)
    }
}
