//! `revenant check`: evaluates the alert rules once, for cron and monitoring systems.
//!
//! Exit codes follow the Nagios plugin convention that cron wrappers and monitoring
//! agents (Nagios, Icinga, Sensu, Zabbix) already understand: 0 OK, 1 warning,
//! 2 critical, 3 unknown (the check itself could not run: a bad flag, a bad rules
//! file, a store it cannot reach). So for `check` alone, 2 means critical, never bad
//! usage: bad usage is 3.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use revenant::alert::{self, AlertConfig, Severity};
use revenant::store::QueueStatsParams;
use serde_json::json;

use crate::error::CliError;
use crate::output;

/// Exit code for "the check could not run".
pub const UNKNOWN: u8 = 3;

/// `revenant check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The alert rules file (TOML; see docs/alerts.md). Without it: every queue warns
    /// when any job is dead, when its oldest due job waited over 5 minutes, and when
    /// jobs are due with no worker alive.
    #[arg(long, env = "REVENANT_ALERTS", value_name = "FILE")]
    pub alerts: Option<PathBuf>,
    /// A worker seen within this long counts as alive.
    #[arg(long, default_value = "30s")]
    pub alive_within: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `revenant check`; any error is exit 3 (unknown).
pub async fn run(url: &str, args: CheckArgs) -> Result<ExitCode, CliError> {
    match check(url, &args).await {
        Ok(code) => Ok(code),
        Err(err) => {
            if args.json {
                let _ = output::json(
                    &json!({"status": "unknown", "exit_code": UNKNOWN, "error": err.to_string()}),
                );
            }
            eprintln!("UNKNOWN: {err}");
            Ok(ExitCode::from(UNKNOWN))
        }
    }
}

async fn check(url: &str, args: &CheckArgs) -> Result<ExitCode, CliError> {
    let config = match &args.alerts {
        Some(path) => AlertConfig::load(path).map_err(|err| CliError::Failed(err.to_string()))?,
        None => AlertConfig::builtin(),
    };
    let alive_within = revenant::duration::parse("alive-within", &args.alive_within)?;
    let store = revenant::connect(url).await?;
    let stats = store
        .queue_stats(QueueStatsParams {
            worker_alive_within: alive_within,
            ..QueueStatsParams::default()
        })
        .await?;
    let mut breaches = alert::breaches(&config, &stats);
    breaches.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then_with(|| a.queue.cmp(&b.queue))
    });
    let (status, code) = match alert::worst(&breaches) {
        None => ("ok", 0),
        Some(Severity::Warning) => ("warning", 1),
        Some(Severity::Critical) => ("critical", 2),
    };
    if args.json {
        let alerts: Vec<_> = breaches
            .iter()
            .map(|b| {
                json!({
                    "queue": b.queue, "rule": b.rule, "severity": b.severity,
                    "value": number(b.value), "threshold": number(b.threshold),
                    "text": b.describe(),
                })
            })
            .collect();
        output::json(&json!({
            "status": status, "exit_code": code, "queues": stats.len(), "alerts": alerts,
        }))?;
    } else if breaches.is_empty() {
        println!("OK: {} queues, no alert", stats.len());
    } else {
        println!(
            "{}: {} alert{}",
            status.to_uppercase(),
            breaches.len(),
            if breaches.len() == 1 { "" } else { "s" }
        );
        for b in &breaches {
            println!("{:<9} {}", b.severity.as_str().to_uppercase(), b.describe());
        }
    }
    Ok(ExitCode::from(code))
}

/// Counts as integers (`1`, not `1.0`), as in the webhook's body.
fn number(value: f64) -> serde_json::Value {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        json!(value as i64)
    } else {
        json!(value)
    }
}
