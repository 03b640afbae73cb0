//! `revenant queues list|pause|resume`.

use std::process::ExitCode;
use std::sync::Arc;

use revenant::store::QueuePauseParams;
use revenant::{names, Store};

use crate::cli::QueuesCommand;
use crate::commands::stats;
use crate::error::CliError;
use crate::output;

/// Runs a `queues` subcommand.
pub async fn run(store: &Arc<dyn Store>, command: QueuesCommand) -> Result<ExitCode, CliError> {
    match command {
        QueuesCommand::List { json } => {
            stats::print(store, None, stats::DEFAULT_ALIVE_WITHIN, json).await
        }
        QueuesCommand::Pause { queue, json } => {
            names::validate_name("queue", &queue)?;
            store
                .queue_pause(QueuePauseParams {
                    queue: queue.clone(),
                    now: None,
                })
                .await?;
            report(&queue, true, json)
        }
        QueuesCommand::Resume { queue, json } => {
            names::validate_name("queue", &queue)?;
            store
                .queue_resume(QueuePauseParams {
                    queue: queue.clone(),
                    now: None,
                })
                .await?;
            report(&queue, false, json)
        }
    }
}

fn report(queue: &str, paused: bool, json: bool) -> Result<ExitCode, CliError> {
    if json {
        output::json(&serde_json::json!({ "queue": queue, "paused": paused }))?;
    } else if paused {
        println!("paused queue {queue}: no job will be claimed from it until `revenant queues resume {queue}`");
    } else {
        println!("resumed queue {queue}");
    }
    Ok(ExitCode::SUCCESS)
}
