//! `revenant enqueue`.

use std::io::Read;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use revenant::{duration, Client, InputError, NewJob};
use serde::Serialize;

use crate::cli::EnqueueArgs;
use crate::error::CliError;
use crate::output;

#[derive(Serialize)]
struct Enqueued {
    #[serde(flatten)]
    job: revenant::Job,
    /// True when the unique key was already held and no job was added.
    duplicate: bool,
}

/// Validates everything before the store is touched, then enqueues one job.
/// The job's `max_attempts`, unless `--max-attempts` gives it, is the stored policy's
/// for its queue and kind (`revenant policy set`), resolved by the client.
pub async fn run(client: &Client, args: EnqueueArgs) -> Result<ExitCode, CliError> {
    let job = build(&args)?;
    let first = client.enqueue(job).await?;
    let job = client.job(first.id).await?.ok_or_else(|| {
        CliError::Failed(format!(
            "job {} vanished right after enqueue (pruned or purged?)",
            first.id
        ))
    })?;
    if args.json {
        output::json(&Enqueued {
            job,
            duplicate: first.duplicate,
        })?;
    } else if first.duplicate {
        println!(
            "unique key already held: job {} ({}, {} in {})",
            job.id, job.status, job.kind, job.queue
        );
    } else {
        println!(
            "enqueued job {} ({} in {}, runs at {})",
            job.id,
            job.kind,
            job.queue,
            output::time(job.run_at)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn build(args: &EnqueueArgs) -> Result<NewJob, CliError> {
    let payload_text = match args.payload.as_deref() {
        None => "{}".to_string(),
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .take(NewJob::MAX_PAYLOAD_BYTES as u64 + 1)
                .read_to_string(&mut text)
                .map_err(|err| {
                    InputError::new("payload", format!("cannot read standard input: {err}"))
                })?;
            text
        }
        Some(text) => text.to_string(),
    };
    if payload_text.len() > NewJob::MAX_PAYLOAD_BYTES {
        return Err(InputError::new(
            "payload",
            format!(
                "is larger than the limit of {} bytes",
                NewJob::MAX_PAYLOAD_BYTES
            ),
        )
        .into());
    }
    let payload: serde_json::Value = serde_json::from_str(&payload_text)
        .map_err(|err| InputError::new("payload", format!("is not valid JSON: {err}")))?;
    let mut job =
        NewJob::new(args.queue.clone(), args.kind.clone(), payload).with_priority(args.priority);
    if let Some(delay) = &args.delay {
        job = job.with_delay(duration::parse("delay", delay)?);
    }
    if let Some(at) = &args.run_at {
        let at = DateTime::parse_from_rfc3339(at).map_err(|err| {
            InputError::new(
                "run_at",
                format!("{at:?} is not an RFC 3339 time ({err}); write e.g. 2026-12-01T08:00:00Z"),
            )
        })?;
        job = job.with_run_at(at.with_timezone(&Utc));
    }
    job.max_attempts = args.max_attempts;
    job.group_key = args.group.clone();
    job.unique_key = args.unique_key.clone();
    job.correlation_id = args.correlation_id.clone();
    if let Some(parent) = &args.traceparent {
        job.trace_context = Some(revenant::trace::TraceContext::new(
            parent,
            args.tracestate.as_deref(),
        )?);
    }
    job.validate()?;
    Ok(job)
}
