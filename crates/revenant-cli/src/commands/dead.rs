//! `revenant dead list|show|redrive|purge`: the dead-letter workbench.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use revenant::store::{JobFilter, JobListParams, JobPurgeParams, JobRedriveParams};
use revenant::{DeadReason, InputError, Job, JobState, Store};
use serde::Serialize;

use crate::cli::{DeadCommand, FilterArgs, PurgeArgs, RedriveArgs};
use crate::commands::{filter, jobs};
use crate::error::CliError;
use crate::output;

/// The most jobs a dry run looks at to count.
const DRY_RUN_SCAN: u32 = 10_000;

/// Runs a `dead` subcommand.
pub async fn run(store: &Arc<dyn Store>, command: DeadCommand) -> Result<ExitCode, CliError> {
    match command {
        DeadCommand::List {
            filter: args,
            reason,
            limit,
            before,
            json,
        } => {
            let filter = dead_filter(store, &args, reason.as_deref(), &[]).await?;
            let jobs = store
                .job_list(JobListParams {
                    filter,
                    before_id: before,
                    limit: filter::limit(limit)?,
                })
                .await?;
            if json {
                output::json(&jobs)?;
            } else {
                jobs::print_list(&jobs, "no dead jobs match")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        DeadCommand::Show { id, json } => jobs::show(store, id, json, Some(JobState::Dead)).await,
        DeadCommand::Redrive(args) => redrive(store, args).await,
        DeadCommand::Purge(args) => purge(store, args).await,
    }
}

#[derive(Serialize)]
struct Summary {
    dry_run: bool,
    count: usize,
    /// True when a dry run stopped counting at its scan limit.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    at_least: bool,
    ids: Vec<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_per_sec: Option<f64>,
}

async fn redrive(store: &Arc<dyn Store>, args: RedriveArgs) -> Result<ExitCode, CliError> {
    require_selection(
        &args.ids,
        &args.filter,
        args.reason.as_deref(),
        args.all,
        "redrive",
    )?;
    let filter = dead_filter(store, &args.filter, args.reason.as_deref(), &args.ids).await?;
    let rate = args.rate.as_deref().map(parse_rate).transpose()?;
    let spacing = rate
        .map(|per_sec| Duration::from_secs_f64(1.0 / per_sec))
        .unwrap_or(Duration::ZERO);
    let limit = args.limit.map(positive_limit).transpose()?;

    if args.dry_run {
        let (sample, at_least) = scan(store, &filter, limit).await?;
        let summary = Summary {
            dry_run: true,
            count: sample.len(),
            at_least,
            ids: sample.iter().map(|job| job.id).collect(),
            rate_per_sec: rate,
        };
        if args.json {
            output::json(&summary)?;
        } else {
            println!(
                "would redrive {}{} dead job(s){}; a sample:",
                if at_least { "at least " } else { "" },
                summary.count,
                rate.map(|r| format!(
                    " at {r}/s, over about {}",
                    output::age(summary.count as f64 / r)
                ))
                .unwrap_or_default()
            );
            jobs::print_list(&sample[..sample.len().min(10)], "nothing to redrive")?;
        }
        return Ok(ExitCode::SUCCESS);
    }

    let ids = store
        .job_redrive(JobRedriveParams {
            filter,
            limit,
            spacing,
            now: None,
        })
        .await?;
    if args.json {
        output::json(&Summary {
            dry_run: false,
            count: ids.len(),
            at_least: false,
            ids,
            rate_per_sec: rate,
        })?;
    } else if ids.is_empty() {
        println!("no dead jobs match; nothing redriven");
    } else {
        let pace = match rate {
            Some(r) => format!(
                ", spread at {r}/s over about {}",
                output::age(ids.len() as f64 / r)
            ),
            None => String::new(),
        };
        println!(
            "redrove {} job(s) back to ready with fresh attempts{pace}",
            ids.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn purge(store: &Arc<dyn Store>, args: PurgeArgs) -> Result<ExitCode, CliError> {
    require_selection(
        &args.ids,
        &args.filter,
        args.reason.as_deref(),
        args.all,
        "purge",
    )?;
    let filter = dead_filter(store, &args.filter, args.reason.as_deref(), &args.ids).await?;
    let limit = args.limit.map(positive_limit).transpose()?;
    if !args.dry_run && !args.yes && !std::io::stdin().is_terminal() {
        return Err(InputError::new(
            "yes",
            "standard input is not a terminal, so nobody can confirm; pass --yes (or --dry-run)",
        )
        .into());
    }
    let (sample, at_least) = scan(store, &filter, limit).await?;
    let counted = format!(
        "{}{}",
        if at_least { "at least " } else { "" },
        sample.len()
    );
    if args.dry_run {
        if args.json {
            output::json(&Summary {
                dry_run: true,
                count: sample.len(),
                at_least,
                ids: sample.iter().map(|job| job.id).collect(),
                rate_per_sec: None,
            })?;
        } else {
            println!("would purge {counted} dead job(s)");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if sample.is_empty() {
        if args.json {
            output::json(&Summary {
                dry_run: false,
                count: 0,
                at_least: false,
                ids: vec![],
                rate_per_sec: None,
            })?;
        } else {
            println!("no dead jobs match; nothing purged");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.yes {
        confirm(&format!("Delete {counted} dead job(s) for good? Their payloads and histories go with them. [y/N] "))?;
    }
    let purged = store.job_purge(JobPurgeParams { filter, limit }).await?;
    if args.json {
        output::json(&serde_json::json!({ "dry_run": false, "count": purged }))?;
    } else {
        println!("purged {purged} dead job(s)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses a redrive or purge with nothing to narrow it, unless `--all` says so.
fn require_selection(
    ids: &[i64],
    args: &FilterArgs,
    reason: Option<&str>,
    all: bool,
    verb: &str,
) -> Result<(), CliError> {
    let narrowed = !ids.is_empty() || !filter::is_empty(args) || reason.is_some();
    if !narrowed && !all {
        return Err(InputError::new(
            "filter",
            format!("give job ids or a filter (--queue, --kind, --reason, --error, --since ...), or --all to {verb} every dead job"),
        )
        .into());
    }
    Ok(())
}

async fn dead_filter(
    store: &Arc<dyn Store>,
    args: &FilterArgs,
    reason: Option<&str>,
    ids: &[i64],
) -> Result<JobFilter, CliError> {
    let now = store.now().await?;
    let mut filter = filter::build(args, now)?;
    filter.statuses = Some(vec![JobState::Dead]);
    filter.dead_reason = reason.map(str::parse::<DeadReason>).transpose()?;
    if !ids.is_empty() {
        filter.ids = Some(ids.to_vec());
    }
    Ok(filter)
}

/// The dead jobs a filter matches, up to `limit` (or the scan limit).
async fn scan(
    store: &Arc<dyn Store>,
    filter: &JobFilter,
    limit: Option<u32>,
) -> Result<(Vec<Job>, bool), CliError> {
    let cap = limit.unwrap_or(DRY_RUN_SCAN).min(DRY_RUN_SCAN);
    let jobs = store
        .job_list(JobListParams {
            filter: filter.clone(),
            before_id: None,
            limit: cap,
        })
        .await?;
    let at_least = jobs.len() as u32 == cap && limit.is_none_or(|l| l > cap);
    Ok((jobs, at_least))
}

fn positive_limit(limit: u32) -> Result<u32, InputError> {
    if limit == 0 {
        Err(InputError::new("limit", "must be at least 1"))
    } else {
        Ok(limit)
    }
}

/// Reads `20/s`, `600/m`, `3600/h` or a bare number (per second).
fn parse_rate(text: &str) -> Result<f64, InputError> {
    let (number, per) = match text.trim().split_once('/') {
        Some((number, unit)) => (number.trim(), unit.trim()),
        None => (text.trim(), "s"),
    };
    let seconds = match per {
        "s" | "sec" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(InputError::new(
                "rate",
                format!("unknown unit {other:?}; write e.g. 20/s, 600/m or 3600/h"),
            ))
        }
    };
    let count: f64 = number
        .parse()
        .map_err(|_| InputError::new("rate", format!("{text:?} is not a rate; write e.g. 20/s")))?;
    let per_sec = count / seconds;
    if !per_sec.is_finite() || per_sec <= 0.0 {
        return Err(InputError::new(
            "rate",
            format!("{text:?} must be above zero"),
        ));
    }
    if per_sec > 100_000.0 {
        return Err(InputError::new(
            "rate",
            format!("{text:?} is above 100000/s; leave --rate out to redrive at once"),
        ));
    }
    Ok(per_sec)
}

fn confirm(question: &str) -> Result<(), CliError> {
    let stdin = std::io::stdin();
    eprint!("{question}");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(CliError::Failed("not confirmed; nothing purged".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_every_unit_and_refuse_nonsense() {
        assert_eq!(parse_rate("20/s").unwrap(), 20.0);
        assert_eq!(parse_rate("600/m").unwrap(), 10.0);
        assert_eq!(parse_rate("5").unwrap(), 5.0);
        for bad in ["0/s", "-1/s", "x/s", "20/fortnight", "1e9/s", "NaN"] {
            assert_eq!(parse_rate(bad).unwrap_err().field, "rate", "{bad}");
        }
    }
}
