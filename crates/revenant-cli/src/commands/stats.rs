//! `revenant stats`: the four numbers per queue, once or `--watch`ed, and under them
//! the dependencies' breakers, rate limits and retry budgets (`revenant breaker list`).
//!
//! `--json` prints the queues alone, as it always has (`GET /v1/stats` serves the same
//! document); the dependencies' JSON is `revenant breaker list --json`.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use revenant::store::{DependencyListParams, QueueStats, QueueStatsParams};
use revenant::{names, InputError, Store};

use crate::cli::StatsArgs;
use crate::error::CliError;
use crate::output::{self, Table};

/// A worker seen within this long counts as alive, unless `--alive-within` says
/// otherwise: a little over the runtime's registry heartbeat.
pub const DEFAULT_ALIVE_WITHIN: Duration = Duration::from_secs(30);

/// The window of the completed and failed counts unless `--window` says otherwise.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// Runs `revenant stats`.
pub async fn run(store: &Arc<dyn Store>, args: StatsArgs) -> Result<ExitCode, CliError> {
    if let Some(queue) = &args.queue {
        names::validate_name("queue", queue)?;
    }
    let alive_within = revenant::duration::parse("alive-within", &args.alive_within)?;
    let window = revenant::duration::parse("window", &args.window)?;
    let Some(every) = &args.watch else {
        return print_window(store, args.queue, alive_within, window, args.json).await;
    };
    let every = revenant::duration::parse("watch", every)?;
    if every < Duration::from_millis(100) {
        return Err(InputError::new("watch", "must be at least 100ms").into());
    }
    watch(store, args.queue, alive_within, window, every, args.json).await
}

/// Prints the numbers of one queue or all, counting the default window.
pub async fn print(
    store: &Arc<dyn Store>,
    queue: Option<String>,
    alive_within: Duration,
    json: bool,
) -> Result<ExitCode, CliError> {
    print_window(store, queue, alive_within, DEFAULT_WINDOW, json).await
}

async fn fetch(
    store: &Arc<dyn Store>,
    queue: Option<String>,
    alive_within: Duration,
    window: Duration,
) -> Result<Vec<QueueStats>, CliError> {
    Ok(store
        .queue_stats(QueueStatsParams {
            queue,
            worker_alive_within: alive_within,
            interval: window,
            now: None,
        })
        .await?)
}

async fn print_window(
    store: &Arc<dyn Store>,
    queue: Option<String>,
    alive_within: Duration,
    window: Duration,
    json: bool,
) -> Result<ExitCode, CliError> {
    let stats = fetch(store, queue, alive_within, window).await?;
    if json {
        output::json(&stats)?;
    } else {
        table(&stats, window)?;
        dependencies(store).await?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Refreshes until Ctrl-C (exit 0). On a terminal the screen is cleared and redrawn
/// in place; otherwise (a pipe, a file) each refresh is appended: a table and a blank
/// line, or with `--json` one compact JSON line per refresh (JSON Lines).
async fn watch(
    store: &Arc<dyn Store>,
    queue: Option<String>,
    alive_within: Duration,
    window: Duration,
    every: Duration,
    json: bool,
) -> Result<ExitCode, CliError> {
    let in_place = !json && std::io::stdout().is_terminal();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let stats = fetch(store, queue.clone(), alive_within, window).await?;
        if json {
            let mut out = std::io::stdout().lock();
            serde_json::to_writer(&mut out, &stats)
                .map_err(|err| CliError::Failed(err.to_string()))?;
            writeln!(out)?;
            out.flush()?;
        } else {
            if in_place {
                // Home the cursor and clear the screen, then draw.
                print!("\x1b[H\x1b[2J");
                println!(
                    "every {} (Ctrl-C to stop)  {}",
                    revenant::duration::format(every),
                    output::time(store.now().await?)
                );
            }
            table(&stats, window)?;
            dependencies(store).await?;
            if !in_place {
                println!();
            }
            std::io::stdout().flush()?;
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut ctrl_c => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// The dependencies' table, when a worker has recorded any.
async fn dependencies(store: &Arc<dyn Store>) -> Result<(), CliError> {
    let states = store
        .dependency_list(DependencyListParams::default())
        .await?;
    if !states.is_empty() {
        println!();
        super::breaker::table(&states)?;
    }
    Ok(())
}

fn table(stats: &[QueueStats], window: Duration) -> Result<(), CliError> {
    let mut table = Table::new(vec![
        "QUEUE",
        "READY",
        "OLDEST DUE",
        "SCHEDULED",
        "RETRYING",
        "RUNNING",
        "COMPLETED",
        "FAILED",
        "DEAD",
        "DEAD 1H",
        "WORKERS",
        "LAST COMPLETED",
    ]);
    for q in stats {
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
            q.completed_last_interval.to_string(),
            q.failed_last_interval.to_string(),
            q.dead.to_string(),
            q.dead_last_hour.to_string(),
            q.workers_alive.to_string(),
            output::time_opt(q.last_completed_at),
        ]);
    }
    table.print("no queues yet: enqueue a job to create one")?;
    if !stats.is_empty() {
        println!(
            "COMPLETED and FAILED (failed attempts, retried or dead) count the last {}",
            revenant::duration::format(window)
        );
    }
    Ok(())
}
