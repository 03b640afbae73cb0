//! `revenant dead list|show|fingerprints|redrive|history|purge|export`: the dead-letter
//! workbench.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use revenant::store::{
    DeadFingerprintsParams, JobFilter, JobListParams, JobPurgeParams, JobRedriveParams,
    RedriveHistoryParams,
};
use revenant::{DeadReason, InputError, Job, JobState, Store};
use serde::Serialize;

use crate::cli::{DeadCommand, ExportArgs, FilterArgs, PurgeArgs, RedriveArgs};
use crate::commands::{filter, jobs};
use crate::error::CliError;
use crate::output::{self, Table};

/// The most jobs a dry run looks at to count.
const DRY_RUN_SCAN: u32 = 10_000;

/// A redrive moves this many jobs per store call (one transaction each), so a large
/// redrive never holds one long transaction and its progress bar moves.
const REDRIVE_CHUNK: u32 = 500;

/// `dead export` reads this many jobs per page.
const EXPORT_PAGE: u32 = 500;

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
        DeadCommand::Fingerprints {
            filter: args,
            reason,
            limit,
            json,
        } => {
            let filter = dead_filter(store, &args, reason.as_deref(), &[]).await?;
            let groups = store
                .dead_fingerprints(DeadFingerprintsParams {
                    filter,
                    limit: filter::limit(limit)?,
                })
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
                "LAST ERROR",
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
                    output::clip(&group.example_message, 70),
                ]);
            }
            table.print("no dead jobs match")?;
            Ok(ExitCode::SUCCESS)
        }
        DeadCommand::Redrive(args) => redrive(store, args).await,
        DeadCommand::History { limit, json } => {
            let records = store
                .redrive_history(RedriveHistoryParams {
                    limit: filter::limit(limit)?,
                })
                .await?;
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
        DeadCommand::Purge(args) => purge(store, args).await,
        DeadCommand::Export(args) => export(store, args).await,
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

/// Writes every dead job matching the filter as one JSON line each, newest first,
/// reading a page at a time so memory stays flat however many there are.
async fn export(store: &Arc<dyn Store>, args: ExportArgs) -> Result<ExitCode, CliError> {
    let filter = dead_filter(store, &args.filter, args.reason.as_deref(), &args.ids).await?;
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|err| {
                CliError::Failed(format!("cannot create {}: {err}", path.display()))
            })?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let mut before_id = None;
    let mut count = 0_u64;
    loop {
        let page = store
            .job_list(JobListParams {
                filter: filter.clone(),
                before_id,
                limit: EXPORT_PAGE,
            })
            .await?;
        for job in &page {
            serde_json::to_writer(&mut out, job)
                .map_err(|err| CliError::Failed(err.to_string()))?;
            out.write_all(b"\n")?;
            count += 1;
        }
        out.flush()?;
        match page.last() {
            Some(last) if page.len() == EXPORT_PAGE as usize => before_id = Some(last.id),
            _ => break,
        }
    }
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

    let ids = redrive_in_chunks(store, &args, filter, limit, spacing).await?;
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

/// Redrives in chunks of [`REDRIVE_CHUNK`], each chunk's first `run_at` following on
/// from the previous chunk's last so the pace is one even line, all under one audit
/// record. Jobs that die again while the redrive runs are not picked up again: the
/// filter is bounded to jobs that died before it started.
async fn redrive_in_chunks(
    store: &Arc<dyn Store>,
    args: &RedriveArgs,
    mut filter: JobFilter,
    limit: Option<u32>,
    spacing: Duration,
) -> Result<Vec<i64>, CliError> {
    let started = store.now().await?;
    let bound = started + chrono::Duration::milliseconds(1);
    filter.finished_before = Some(filter.finished_before.map_or(bound, |t| t.min(bound)));
    let actor = args
        .actor
        .clone()
        .or_else(|| std::env::var("REVENANT_ACTOR").ok())
        .or_else(|| std::env::var("USER").ok())
        .filter(|a| !a.is_empty());
    let audit_key = format!(
        "cli-{}-{}-{}",
        started.timestamp_millis(),
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let (expected, _) = scan(store, &filter, limit).await?;
    let bar = if args.json || args.no_progress || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new(expected.len() as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "redriving {bar:40} {pos}/{len} jobs  {elapsed}",
        ) {
            bar.set_style(style);
        }
        bar
    };
    let mut ids: Vec<i64> = Vec::new();
    loop {
        let want = match limit {
            Some(limit) => REDRIVE_CHUNK.min(limit - ids.len() as u32),
            None => REDRIVE_CHUNK,
        };
        if want == 0 {
            break;
        }
        let offset = spacing.saturating_mul(ids.len() as u32);
        let start_at = started + chrono::Duration::from_std(offset).unwrap_or_default();
        let chunk = store
            .job_redrive(JobRedriveParams {
                filter: filter.clone(),
                limit: Some(want),
                spacing,
                start_at: Some(start_at),
                actor: actor.clone(),
                note: args.note.clone(),
                audit_key: Some(audit_key.clone()),
                now: None,
            })
            .await?;
        let moved = chunk.len();
        ids.extend(chunk);
        if ids.len() as u64 > bar.length().unwrap_or(0) {
            bar.set_length(ids.len() as u64);
        }
        bar.set_position(ids.len() as u64);
        if moved < want as usize {
            break;
        }
    }
    bar.finish_and_clear();
    Ok(ids)
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
            format!("give job ids or a filter (--queue, --kind, --reason, --error, --fingerprint, --since ...), or --all to {verb} every dead job"),
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
