//! `revenant breaker list|open|close|auto`: the dependencies' circuit breakers, rate
//! limits and retry budgets, and an operator's hand on a breaker.

use std::process::ExitCode;

use chrono::Utc;
use revenant::dependency::{BreakerAction, BreakerState, DependencyState};
use revenant::store::DependencyListParams;
use revenant::{names, Client};

use crate::error::CliError;
use crate::output::{self, Table};

/// `revenant breaker ...`.
#[derive(Debug, clap::Subcommand)]
pub enum BreakerCommand {
    /// Every dependency the workers have seen: its breaker, rate limit, retry budget
    /// and the jobs waiting on it.
    List {
        /// Only this dependency.
        dependency: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Hold a breaker open: no job of the dependency runs and no probe goes (jobs
    /// wait, attempts given back) until `close` or `auto`. A key not seen yet is
    /// created, so a breaker can be opened before a planned outage.
    Open {
        /// The dependency's key (`email-provider`, a URL's host).
        dependency: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Close a breaker now and release the jobs parked on it (paced by its rate
    /// limit); it opens again by itself if the failures go on.
    Close {
        /// The dependency's key.
        dependency: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Release a hold: an open breaker sends a probe at once and works by itself from
    /// there.
    Auto {
        /// The dependency's key.
        dependency: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `breaker` subcommand.
pub async fn run(client: &Client, command: BreakerCommand) -> Result<ExitCode, CliError> {
    let store = client.store();
    let (dependency, action, json) = match command {
        BreakerCommand::List { dependency, json } => {
            if let Some(key) = &dependency {
                names::validate_key("dependency", key)?;
            }
            let states = store
                .dependency_list(DependencyListParams {
                    dependency,
                    now: None,
                })
                .await?;
            if json {
                output::json(&states)?;
            } else {
                table(&states)?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        BreakerCommand::Open { dependency, json } => (dependency, BreakerAction::Open, json),
        BreakerCommand::Close { dependency, json } => (dependency, BreakerAction::Close, json),
        BreakerCommand::Auto { dependency, json } => (dependency, BreakerAction::Auto, json),
    };
    names::validate_key("dependency", &dependency)?;
    let parked = store
        .dependency_list(DependencyListParams {
            dependency: Some(dependency.clone()),
            now: None,
        })
        .await?
        .first()
        .map_or(0, |d| d.waiting.breaker);
    let state = client.breaker(&dependency, action).await?;
    if json {
        output::json(&state)?;
        return Ok(ExitCode::SUCCESS);
    }
    match action {
        BreakerAction::Open => println!(
            "breaker {dependency} held open: no job of it runs and no probe goes until `revenant breaker close {dependency}` or `revenant breaker auto {dependency}`"
        ),
        BreakerAction::Close => println!(
            "breaker {dependency} closed; {parked} parked job{} released{}",
            if parked == 1 { "" } else { "s" },
            match &state.rate_limit {
                Some(rate) if parked > 0 => format!(
                    ", paced at {}/s (the last in {})",
                    trim(rate.per_second),
                    output::age(rate.booked_secs)
                ),
                _ => String::new(),
            }
        ),
        BreakerAction::Auto => println!(
            "breaker {dependency} works by itself again: {}",
            match state.breaker {
                BreakerState::Open => "it sends a probe at once",
                BreakerState::HalfOpen => "a probe is in flight",
                BreakerState::Closed => "it is closed",
            }
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn trim(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// The bulkhead's column: attempts in flight across the workers, the limit, and the
/// jobs turned back at it so far.
fn in_flight(b: &revenant::dependency::BulkheadState) -> String {
    let limit = match (b.shared_limit, b.per_worker_limit) {
        (Some(shared), _) => format!(" of {shared}"),
        (None, Some(n)) => format!(" ({n}/worker)"),
        (None, None) => format!(" ({:.0}% of slots/worker)", b.per_worker_share * 100.0),
    };
    format!(
        "{}{limit}{}, {} turned back",
        b.in_flight,
        if b.adaptive { " adaptive" } else { "" },
        b.turned_back
    )
}

/// The dependencies as a table (also printed under `revenant stats`).
pub fn table(states: &[DependencyState]) -> Result<(), CliError> {
    let mut table = Table::new(vec![
        "DEPENDENCY",
        "BREAKER",
        "FAILED",
        "SLOW",
        "IN FLIGHT",
        "TRIPS",
        "NEXT PROBE",
        "RATE LIMIT",
        "TOKENS",
        "BOOKED",
        "RETRY BUDGET",
        "WAITING",
    ]);
    let now = Utc::now();
    for d in states {
        let a = &d.answers;
        table.row(vec![
            d.dependency.clone(),
            if d.held_open {
                "open (held)".to_string()
            } else {
                d.breaker.as_str().replace('_', "-")
            },
            format!(
                "{:.0}% of {:.0} in {}",
                a.failure_share * 100.0,
                a.successes + a.failures,
                output::age(a.window_secs)
            ),
            match (a.slow_threshold, a.slow_call_secs) {
                (Some(_), Some(secs)) => {
                    format!("{:.0}% over {}", a.slow_share * 100.0, output::age(secs))
                }
                _ => "-".to_string(),
            },
            d.bulkhead.as_ref().map_or("-".to_string(), in_flight),
            d.trips.to_string(),
            match (&d.probe, d.probe_at) {
                (Some(probe), _) => format!("in flight (job {})", probe.job_id),
                (None, Some(at)) if at - now >= chrono::Duration::seconds(1) => {
                    format!(
                        "in {}",
                        output::age((at - now).num_milliseconds() as f64 / 1e3)
                    )
                }
                (None, Some(at)) if at > now => "in <1s".to_string(),
                // The cool-down is over: the next job of the key (or the sweep) goes.
                (None, Some(_)) => "due".to_string(),
                (None, None) => "-".to_string(),
            },
            d.rate_limit.as_ref().map_or("-".to_string(), |r| {
                format!("{}/s burst {}", trim(r.per_second), r.burst)
            }),
            d.rate_limit
                .as_ref()
                .map_or("-".to_string(), |r| format!("{:.1}", r.tokens)),
            d.rate_limit
                .as_ref()
                .map_or("-".to_string(), |r| output::age(r.booked_secs)),
            d.retry_budget.as_ref().map_or("-".to_string(), |b| {
                format!("{:.0} of {:.0} retries", b.retries, b.allowed)
            }),
            format!(
                "{} breaker, {} rate, {} budget",
                d.waiting.breaker, d.waiting.rate_limit, d.waiting.retry_budget
            ),
        ]);
    }
    table.print("no dependencies yet: a worker protecting dependencies records them as it claims their jobs")
}
