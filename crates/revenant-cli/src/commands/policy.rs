//! `revenant policy`: the retry policies stored in the database, and a policy's
//! schedule printed before anyone trusts it.
//!
//! The store is the one source of truth: `revenant enqueue`, `POST /v1/jobs` and
//! library code fix a job's `max_attempts` from it at enqueue, and every worker (in
//! process or remote over HTTP) takes the backoff and jitter from it when an attempt
//! fails. Ten workers on five machines therefore agree without sharing a file.

use std::process::ExitCode;
use std::time::Duration;

use revenant::duration::{format, parse};
use revenant::policy::ScheduleStep;
use revenant::store::PolicyRecord;
use revenant::{Backoff, Client, InputError, Jitter, PolicyScope, RetryPolicy};
use serde::Serialize;

use crate::cli::{PolicyArgs, ScheduleArgs};
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

/// `revenant policy list|set|unset`.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// The policies stored in the database, and the default in effect.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Store a policy for the default, a queue or a kind. Flags left out keep the
    /// scope's stored values (revenant's defaults when none is stored). Jobs enqueued
    /// from now on take its max attempts; failures from now on its backoff and jitter.
    Set(SetArgs),
    /// Remove a scope's stored policy: its jobs fall back to the next scope (kind,
    /// then queue, then the default).
    Unset {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Which scope a stored policy applies to. Resolution: the job's kind, else its
/// queue, else the default.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct ScopeArgs {
    /// The default policy, for every queue and kind without one of its own.
    #[arg(long)]
    default: bool,
    /// A queue's policy.
    #[arg(long)]
    queue: Option<String>,
    /// A kind's policy (on every queue).
    #[arg(long)]
    kind: Option<String>,
}

impl ScopeArgs {
    fn scope(&self) -> Result<PolicyScope, InputError> {
        Ok(match (&self.queue, &self.kind) {
            (Some(queue), _) => {
                revenant::names::validate_name("queue", queue)?;
                PolicyScope::Queue(queue.clone())
            }
            (_, Some(kind)) => {
                revenant::names::validate_name("kind", kind)?;
                PolicyScope::Kind(kind.clone())
            }
            _ => PolicyScope::Default,
        })
    }
}

/// `revenant policy set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    #[command(flatten)]
    scope: ScopeArgs,
    /// Attempts in all, the first try included (1..=1000).
    #[arg(long, allow_negative_numbers = true)]
    attempts: Option<i64>,
    /// The delay after the first failure, e.g. 10s.
    #[arg(long)]
    base: Option<String>,
    /// How much each further failure multiplies the delay.
    #[arg(long)]
    multiplier: Option<f64>,
    /// No delay is longer than this.
    #[arg(long)]
    cap: Option<String>,
    /// none, full, equal, proportional(F) or decorrelated.
    #[arg(long)]
    jitter: Option<String>,
    /// How long one attempt may run (below the lease).
    #[arg(long)]
    attempt_timeout: Option<String>,
    /// How long a claim stays invisible without a heartbeat; heartbeats follow at a
    /// third of it.
    #[arg(long)]
    lease: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `revenant policy`: a subcommand against the store, or the schedule of the
/// flags' policy (no database needed).
pub async fn run(url: &str, args: PolicyArgs) -> Result<ExitCode, CliError> {
    match args.command {
        None => schedule(args.schedule),
        Some(command) => {
            let client = Client::connect(url).await?;
            stored(&client, command).await
        }
    }
}

async fn stored(client: &Client, command: PolicyCommand) -> Result<ExitCode, CliError> {
    match command {
        PolicyCommand::List { json } => {
            let records = client.stored_policies().await?;
            let effective = client.effective_policies().await?;
            if json {
                output::json(&serde_json::json!({
                    "stored": records,
                    "default": effective.default,
                }))?;
                return Ok(ExitCode::SUCCESS);
            }
            let mut table = Table::new(vec![
                "SCOPE", "ATTEMPTS", "BACKOFF", "JITTER", "TIMEOUT", "LEASE", "UPDATED",
            ]);
            if !records.iter().any(|r| r.scope == PolicyScope::Default) {
                table.row(row("default (built in)", &effective.default, None));
            }
            for record in &records {
                table.row(row(
                    &scope_name(&record.scope),
                    &record.policy,
                    Some(record),
                ));
            }
            table.print("")?;
            Ok(ExitCode::SUCCESS)
        }
        PolicyCommand::Set(args) => {
            let scope = args.scope.scope()?;
            let current = client
                .stored_policies()
                .await?
                .into_iter()
                .find(|r| r.scope == scope)
                .map_or_else(RetryPolicy::default, |r| r.policy);
            let policy = with_flags(current, &args)?;
            client.set_policy(scope.clone(), policy).await?;
            if args.json {
                output::json(&serde_json::json!({ "scope": scope, "policy": policy }))?;
            } else {
                let b = policy.backoff();
                println!(
                    "stored for {}: {} attempts; backoff {} x{} capped at {}; jitter {}; attempt timeout {}; lease {}",
                    scope_name(&scope),
                    policy.max_attempts(),
                    format(b.base),
                    b.multiplier,
                    format(b.cap),
                    policy.jitter(),
                    format(policy.attempt_timeout()),
                    format(policy.lease()),
                );
                println!("jobs enqueued from now on take it (jobs already queued keep their max attempts); workers apply it within 5s");
            }
            Ok(ExitCode::SUCCESS)
        }
        PolicyCommand::Unset { scope, json } => {
            let scope = scope.scope()?;
            let removed = client.delete_policy(scope.clone()).await?;
            if json {
                output::json(&serde_json::json!({ "scope": scope, "removed": removed }))?;
            } else if removed {
                println!("removed the stored policy for {}", scope_name(&scope));
            } else {
                println!(
                    "no policy was stored for {}; nothing changed",
                    scope_name(&scope)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn scope_name(scope: &PolicyScope) -> String {
    match scope {
        PolicyScope::Default => "default".into(),
        PolicyScope::Queue(q) => format!("queue {q}"),
        PolicyScope::Kind(k) => format!("kind {k}"),
    }
}

fn row(scope: &str, policy: &RetryPolicy, record: Option<&PolicyRecord>) -> Vec<String> {
    let b = policy.backoff();
    vec![
        scope.to_string(),
        policy.max_attempts().to_string(),
        format!("{} x{} cap {}", format(b.base), b.multiplier, format(b.cap)),
        policy.jitter().to_string(),
        format(policy.attempt_timeout()),
        format(policy.lease()),
        record.map_or_else(|| "-".into(), |r| output::time(r.updated_at)),
    ]
}

/// `current` with the flags given laid over it, checked whole.
fn with_flags(current: RetryPolicy, args: &SetArgs) -> Result<RetryPolicy, InputError> {
    let mut builder = current.to_builder();
    if let Some(attempts) = args.attempts {
        let attempts = u32::try_from(attempts)
            .ok()
            .filter(|n| (1..=RetryPolicy::MAX_ATTEMPTS).contains(n))
            .ok_or_else(|| {
                InputError::new(
                    "attempts",
                    format!(
                        "{attempts} is out of range; use 1..={}",
                        RetryPolicy::MAX_ATTEMPTS
                    ),
                )
            })?;
        builder = builder.max_attempts(attempts);
    }
    let b = current.backoff();
    let base = args
        .base
        .as_deref()
        .map(|t| parse("base", t))
        .transpose()?
        .unwrap_or(b.base);
    let cap = args
        .cap
        .as_deref()
        .map(|t| parse("cap", t))
        .transpose()?
        .unwrap_or(b.cap);
    builder = builder.backoff(Backoff::new(
        base,
        args.multiplier.unwrap_or(b.multiplier),
        cap,
    )?);
    if let Some(jitter) = &args.jitter {
        builder = builder.jitter(jitter.parse::<Jitter>()?);
    }
    if let Some(timeout) = &args.attempt_timeout {
        builder = builder.attempt_timeout(parse("attempt-timeout", timeout)?);
    }
    if let Some(lease) = &args.lease {
        let lease: Duration = parse("lease", lease)?;
        builder = builder.lease(lease).heartbeat(lease / 3);
    }
    builder.build()
}

/// Prints the schedule of the policy the flags describe.
fn schedule(args: ScheduleArgs) -> Result<ExitCode, CliError> {
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
