//! `revenant dead list|show|fingerprints|redrive|history|purge|export`: the dead-letter
//! workbench.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use revenant::store::JobFilter;
use revenant::{Client, DeadReason, DeadSelection, InputError, JobState, Rate, RedriveRequest};
use serde::Serialize;

use crate::cli::{DeadCommand, ExportArgs, FilterArgs, PurgeArgs, RedriveArgs};
use crate::commands::{filter, jobs};
use crate::error::CliError;
use crate::output::{self, Table};

/// Runs a `dead` subcommand.
pub async fn run(client: &Client, command: DeadCommand) -> Result<ExitCode, CliError> {
    match command {
        DeadCommand::List {
            filter: args,
            reason,
            limit,
            before,
            json,
        } => {
            let filter = dead_filter(client, &args, reason.as_deref(), &[]).await?;
            let jobs = client.jobs(filter, before, filter::limit(limit)?).await?;
            if json {
                output::json(&jobs::list_json(&jobs))?;
            } else {
                jobs::print_list(&jobs, "no dead jobs match")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        DeadCommand::Show { id, json } => {
            jobs::show(client.store(), id, json, Some(JobState::Dead)).await
        }
        DeadCommand::Fingerprints {
            filter: args,
            reason,
            limit,
            json,
        } => {
            let filter = dead_filter(client, &args, reason.as_deref(), &[]).await?;
            let groups = client
                .dead_fingerprints(filter, filter::limit(limit)?)
                .await?;
            if json {
                output::json(&groups)?;
                return Ok(ExitCode::SUCCESS);
            }
            let mut table = Table::new(vec![
                "COUNT",
                "FINGERPRINT",
                "FIRST SEEN",
                "LAST SEEN",
                "KINDS",
                "EXAMPLE",
                "PATTERN",
            ]);
            for group in &groups {
                table.row(vec![
                    group.count.to_string(),
                    if group.fingerprint.is_empty() {
                        "-".into()
                    } else {
                        group.fingerprint.clone()
                    },
                    output::time(group.first_seen),
                    output::time(group.last_seen),
                    group.kinds.join(","),
                    group.example_id.to_string(),
                    // The grouped form: what every job of the group died of (`dead show
                    // EXAMPLE` has one message in full).
                    output::clip(&group.pattern, 70),
                ]);
            }
            table.print("no dead jobs match")?;
            Ok(ExitCode::SUCCESS)
        }
        DeadCommand::Redrive(args) => redrive(client, args).await,
        DeadCommand::History { limit, json } => {
            let records = client.redrive_history(filter::limit(limit)?).await?;
            if json {
                output::json(&records)?;
                return Ok(ExitCode::SUCCESS);
            }
            let mut table = Table::new(vec![
                "ID", "AT", "COUNT", "RATE", "JOBS", "ACTOR", "FILTER", "NOTE",
            ]);
            for record in &records {
                table.row(vec![
                    record.id.to_string(),
                    output::time(record.at),
                    record.count.to_string(),
                    if record.spacing_ms > 0 {
                        format!("{}/s", round2(1000.0 / record.spacing_ms as f64))
                    } else {
                        "at once".into()
                    },
                    format!("{}..{}", record.first_job_id, record.last_job_id),
                    record.actor.clone().unwrap_or_else(|| "-".into()),
                    describe_filter(&record.filter),
                    record.note.clone().unwrap_or_default(),
                ]);
            }
            table.print("no redrives yet")?;
            Ok(ExitCode::SUCCESS)
        }
        DeadCommand::Purge(args) => purge(client, args).await,
        DeadCommand::Export(args) => export(client, args).await,
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A filter as its non-empty fields, compact: `queue=emails fingerprint=3f9a...`.
fn describe_filter(filter: &JobFilter) -> String {
    let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(filter) else {
        return "?".into();
    };
    let parts: Vec<String> = fields
        .iter()
        .filter(|(key, value)| !value.is_null() && key.as_str() != "statuses")
        .map(|(key, value)| match value {
            serde_json::Value::String(text) => format!("{key}={text}"),
            other => format!("{key}={other}"),
        })
        .collect();
    if parts.is_empty() {
        "all".into()
    } else {
        parts.join(" ")
    }
}

/// Writes every dead job matching the filter as one JSON line each, newest first
/// (the client pages through them, so memory stays flat).
async fn export(client: &Client, args: ExportArgs) -> Result<ExitCode, CliError> {
    let filter = dead_filter(client, &args.filter, args.reason.as_deref(), &args.ids).await?;
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|err| {
                CliError::Failed(format!("cannot create {}: {err}", path.display()))
            })?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let count = client
        .export(filter, &mut *out)
        .await
        .map_err(|err| match err {
            revenant::ExportError::Store(err) => CliError::from(err),
            other => CliError::Failed(other.to_string()),
        })?;
    if let Some(path) = &args.output {
        eprintln!("exported {count} dead job(s) to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
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

async fn redrive(client: &Client, args: RedriveArgs) -> Result<ExitCode, CliError> {
    let selection = selection(
        client,
        &args.filter,
        args.reason.as_deref(),
        &args.ids,
        args.all,
        args.limit,
    )
    .await?;
    let rate = args.rate.as_deref().map(str::parse::<Rate>).transpose()?;

    if args.dry_run {
        let preview = client.preview(&selection).await?;
        let sample = &preview.jobs;
        let summary = Summary {
            dry_run: true,
            count: sample.len(),
            at_least: preview.at_least,
            ids: sample.iter().map(|job| job.id).collect(),
            rate_per_sec: rate.map(Rate::per_second),
        };
        if args.json {
            output::json(&summary)?;
        } else {
            println!(
                "would redrive {}{} dead job(s){}; a sample:",
                if preview.at_least { "at least " } else { "" },
                summary.count,
                rate.map(|r| format!(
                    " at {r}, over about {}",
                    output::age(r.span(summary.count as u64).as_secs_f64())
                ))
                .unwrap_or_default()
            );
            jobs::print_list(&sample[..sample.len().min(10)], "nothing to redrive")?;
        }
        return Ok(ExitCode::SUCCESS);
    }

    let actor = args
        .actor
        .clone()
        .or_else(|| std::env::var("REVENANT_ACTOR").ok())
        .or_else(|| std::env::var("USER").ok())
        .filter(|a| !a.is_empty());
    let bar = if args.json || args.no_progress || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "redriving {bar:40} {pos}/{len} jobs  {elapsed}",
        ) {
            bar.set_style(style);
        }
        bar
    };
    let report = client
        .redrive(
            RedriveRequest {
                selection,
                rate,
                actor,
                note: args.note.clone(),
            },
            |progress| {
                bar.set_length(progress.expected as u64);
                bar.set_position(progress.done as u64);
            },
        )
        .await?;
    bar.finish_and_clear();
    let count = report.ids.len();
    if args.json {
        output::json(&Summary {
            dry_run: false,
            count,
            at_least: false,
            ids: report.ids,
            rate_per_sec: rate.map(Rate::per_second),
        })?;
    } else if count == 0 {
        println!("no dead jobs match; nothing redriven");
    } else {
        let pace = match rate {
            Some(r) => format!(
                ", spread at {r} over about {}",
                output::age(report.span().as_secs_f64())
            ),
            None => String::new(),
        };
        println!("redrove {count} job(s) back to ready with fresh attempts{pace}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn purge(client: &Client, args: PurgeArgs) -> Result<ExitCode, CliError> {
    let selection = selection(
        client,
        &args.filter,
        args.reason.as_deref(),
        &args.ids,
        args.all,
        args.limit,
    )
    .await?;
    if !args.dry_run && !args.yes && !std::io::stdin().is_terminal() {
        return Err(InputError::new(
            "yes",
            "standard input is not a terminal, so nobody can confirm; pass --yes (or --dry-run)",
        )
        .into());
    }
    let preview = client.preview(&selection).await?;
    let counted = format!(
        "{}{}",
        if preview.at_least { "at least " } else { "" },
        preview.jobs.len()
    );
    if args.dry_run || preview.jobs.is_empty() {
        if args.json {
            output::json(&Summary {
                dry_run: args.dry_run,
                count: preview.jobs.len(),
                at_least: preview.at_least,
                ids: preview.jobs.iter().map(|job| job.id).collect(),
                rate_per_sec: None,
            })?;
        } else if args.dry_run {
            println!("would purge {counted} dead job(s)");
        } else {
            println!("no dead jobs match; nothing purged");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.yes {
        confirm(&format!("Delete {counted} dead job(s) for good? Their payloads and histories go with them. [y/N] "))?;
    }
    let purged = client.purge(&selection).await?;
    if args.json {
        output::json(&serde_json::json!({ "dry_run": false, "count": purged }))?;
    } else {
        println!("purged {purged} dead job(s)");
    }
    Ok(ExitCode::SUCCESS)
}

/// The dead jobs a redrive or purge takes; the client refuses one that nothing
/// narrows unless `--all` says so.
async fn selection(
    client: &Client,
    args: &FilterArgs,
    reason: Option<&str>,
    ids: &[i64],
    all: bool,
    limit: Option<u32>,
) -> Result<DeadSelection, CliError> {
    let selection = DeadSelection {
        filter: dead_filter(client, args, reason, ids).await?,
        all,
        limit,
    };
    // Checked here too, so the CLI names its own flag before anything is read.
    selection.check("act on").map_err(|err| match err.field {
        "all" => InputError::new(
            "filter",
            "give job ids or a filter (--queue, --kind, --reason, --error, --fingerprint, --since ...), or --all for every dead job",
        ),
        _ => err,
    })?;
    Ok(selection)
}

async fn dead_filter(
    client: &Client,
    args: &FilterArgs,
    reason: Option<&str>,
    ids: &[i64],
) -> Result<JobFilter, CliError> {
    let now = client.store().now().await?;
    let mut filter = filter::build(args, now)?;
    filter.statuses = Some(vec![JobState::Dead]);
    filter.dead_reason = reason.map(str::parse::<DeadReason>).transpose()?;
    if !ids.is_empty() {
        filter.ids = Some(ids.to_vec());
    }
    Ok(filter)
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
