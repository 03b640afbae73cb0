//! `revenant jobs list|show|cancel`, and the job view `revenant dead show` shares.

use std::process::ExitCode;
use std::sync::Arc;

use revenant::store::{CancelResult, JobGetParams};
use revenant::{Client, Job, JobState, Store};

use crate::cli::JobsCommand;
use crate::commands::filter;
use crate::error::CliError;
use crate::output::{self, clip, time, time_opt, Table};

/// Runs a `jobs` subcommand.
pub async fn run(client: &Client, command: JobsCommand) -> Result<ExitCode, CliError> {
    let store = client.store();
    match command {
        JobsCommand::List {
            filter: args,
            status,
            limit,
            before,
            json,
        } => {
            let now = store.now().await?;
            let mut filter = filter::build(&args, now)?;
            if let Some(status) = status {
                filter.statuses = Some(vec![status.parse::<JobState>()?]);
            }
            let jobs = client.jobs(filter, before, filter::limit(limit)?).await?;
            if json {
                output::json(&list_json(&jobs))?;
            } else {
                print_list(&jobs, "no jobs match")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        JobsCommand::Show { id, json } => show(store, id, json, None).await,
        JobsCommand::Cancel { id, reason, json } => {
            let result = client.cancel(id, reason).await?;
            if json {
                output::json(&serde_json::json!({ "id": id, "result": result }))?;
            }
            match result {
                CancelResult::Cancelled => {
                    if !json {
                        println!("cancelled job {id}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                CancelResult::NotCancellable(state) => Err(CliError::Failed(format!(
                    "job {id} is {state}; only ready and running jobs can be cancelled"
                ))),
                CancelResult::NotFound => Err(CliError::Failed(format!("no job with id {id}"))),
                CancelResult::LeaseLost => Err(CliError::Failed(format!(
                    "job {id} changed while cancelling; try again"
                ))),
            }
        }
    }
}

/// Prints one job in full. With `expect`, a job in another state is an error (so
/// `dead show` on a live job says so instead of pretending).
pub async fn show(
    store: &Arc<dyn Store>,
    id: i64,
    json: bool,
    expect: Option<JobState>,
) -> Result<ExitCode, CliError> {
    let job = store
        .job_get(JobGetParams { id })
        .await?
        .ok_or_else(|| CliError::Failed(format!("no job with id {id}")))?;
    if let Some(expected) = expect {
        if job.status != expected {
            return Err(CliError::Failed(format!(
                "job {id} is {}, not {expected}",
                job.status
            )));
        }
    }
    if json {
        output::json(&with_schedule(&job))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("job {}  {} in {}", job.id, job.kind, job.queue);
    if let Some(schedule) = job.schedule() {
        match job.schedule_tick() {
            Some(tick) => println!("  schedule      {schedule}, tick {}", time(tick)),
            None => println!("  schedule      {schedule}, run by hand"),
        }
    }
    println!("  status        {}", job.status);
    if let Some(reason) = job.dead_reason {
        println!("  dead reason   {reason}");
    }
    if let Some(print) = &job.fingerprint {
        println!("  fingerprint   {print}  (revenant dead list --fingerprint {print})");
    }
    println!("  attempts      {} of {}", job.attempts, job.max_attempts);
    println!("  redrives      {}", job.redrives);
    println!("  priority      {}", job.priority);
    println!("  created       {}", time(job.created_at));
    println!("  run at        {}", time(job.run_at));
    println!("  last attempt  {}", time_opt(job.attempted_at));
    println!("  finished      {}", time_opt(job.finished_at));
    if job.status == JobState::Running {
        println!(
            "  lease until   {}  (worker {})",
            time_opt(job.lease_expires_at),
            job.worker.as_deref().unwrap_or("-")
        );
    }
    for (label, value) in [
        ("group", &job.group_key),
        ("unique key", &job.unique_key),
        ("correlation", &job.correlation_id),
    ] {
        if let Some(value) = value {
            println!("  {label:<13} {value}");
        }
    }
    println!(
        "  payload       {}",
        serde_json::to_string(&job.payload).unwrap_or_default()
    );
    if job.errors.is_empty() {
        println!("  errors        none");
    } else {
        println!("  errors ({}, oldest first):", job.errors.len());
        for entry in &job.errors {
            println!(
                "    #{:<3} {}  {:<13} {}{}",
                entry.attempt,
                time(entry.at),
                entry.class,
                entry.message.replace('\n', "\n         "),
                entry
                    .worker
                    .as_deref()
                    .map(|w| format!("  [{w}]"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A job as `--json` prints it: the job, with `schedule` (the schedule that enqueued
/// it) when it is a periodic job.
pub fn with_schedule(job: &Job) -> serde_json::Value {
    let mut value = serde_json::to_value(job).unwrap_or_default();
    if let (Some(schedule), Some(map)) = (job.schedule(), value.as_object_mut()) {
        map.insert("schedule".into(), schedule.into());
    }
    value
}

/// Jobs as `--json` prints them ([`with_schedule`]).
pub fn list_json(jobs: &[Job]) -> Vec<serde_json::Value> {
    jobs.iter().map(with_schedule).collect()
}

/// A table of jobs.
pub fn print_list(jobs: &[Job], empty: &str) -> Result<(), CliError> {
    let mut table = Table::new(vec![
        "ID",
        "QUEUE",
        "KIND",
        "SCHEDULE",
        "STATUS",
        "ATTEMPTS",
        "RUN AT",
        "LAST ERROR",
    ]);
    for job in jobs {
        let status = match job.dead_reason {
            Some(reason) => format!("{} ({reason})", job.status),
            None => job.status.to_string(),
        };
        table.row(vec![
            job.id.to_string(),
            job.queue.clone(),
            job.kind.clone(),
            job.schedule().unwrap_or_default().to_string(),
            status,
            format!("{}/{}", job.attempts, job.max_attempts),
            time(job.run_at),
            job.last_error
                .as_ref()
                .map(|e| clip(&e.message, 60))
                .unwrap_or_default(),
        ]);
    }
    table.print(empty)
}
