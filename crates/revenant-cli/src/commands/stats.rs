//! `revenant stats`: the four numbers per queue.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use revenant::store::QueueStatsParams;
use revenant::{names, Store};

use crate::cli::StatsArgs;
use crate::error::CliError;
use crate::output::{self, Table};

/// A worker seen within this long counts as alive, unless `--alive-within` says
/// otherwise: a little over the runtime's registry heartbeat.
pub const DEFAULT_ALIVE_WITHIN: Duration = Duration::from_secs(30);

/// Runs `revenant stats`.
pub async fn run(store: &Arc<dyn Store>, args: StatsArgs) -> Result<ExitCode, CliError> {
    if let Some(queue) = &args.queue {
        names::validate_name("queue", queue)?;
    }
    let alive_within = revenant::duration::parse("alive-within", &args.alive_within)?;
    print(store, args.queue, alive_within, args.json).await
}

/// Prints the numbers of one queue or all.
pub async fn print(
    store: &Arc<dyn Store>,
    queue: Option<String>,
    alive_within: Duration,
    json: bool,
) -> Result<ExitCode, CliError> {
    let stats = store
        .queue_stats(QueueStatsParams {
            queue,
            worker_alive_within: alive_within,
            now: None,
        })
        .await?;
    if json {
        output::json(&stats)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Table::new(vec![
        "QUEUE",
        "READY",
        "OLDEST DUE",
        "SCHEDULED",
        "RETRYING",
        "RUNNING",
        "DEAD",
        "DEAD 1H",
        "WORKERS",
        "LAST COMPLETED",
    ]);
    for q in &stats {
        let name = if q.paused {
            format!("{} (paused)", q.queue)
        } else {
            q.queue.clone()
        };
        table.row(vec![
            name,
            q.ready.to_string(),
            if q.ready > 0 {
                output::age(q.oldest_due_age_secs)
            } else {
                "-".into()
            },
            q.scheduled.to_string(),
            q.retrying.to_string(),
            q.running.to_string(),
            q.dead.to_string(),
            q.dead_last_hour.to_string(),
            q.workers_alive.to_string(),
            output::time_opt(q.last_completed_at),
        ]);
    }
    table.print("no queues yet: enqueue a job to create one")?;
    Ok(ExitCode::SUCCESS)
}
