//! `revenant queues list|pause|resume`.

use revenant::Client;
use std::process::ExitCode;

use crate::cli::QueuesCommand;
use crate::commands::stats;
use crate::error::CliError;
use crate::output;

/// Runs a `queues` subcommand.
pub async fn run(client: &Client, command: QueuesCommand) -> Result<ExitCode, CliError> {
    match command {
        QueuesCommand::List { json } => {
            stats::print(client.store(), None, stats::DEFAULT_ALIVE_WITHIN, json).await
        }
        QueuesCommand::Pause { queue, json } => {
            client.pause(&queue).await?;
            report(&queue, true, json)
        }
        QueuesCommand::Resume { queue, json } => {
            client.resume(&queue).await?;
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
