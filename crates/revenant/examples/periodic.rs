//! Periodic jobs: a schedule declared on the worker builder, stored in the database
//! where every worker, `revenant cron` and the HTTP API see it. Two workers share one
//! SQLite file here, as two processes would share a database; each tick of the
//! every-second schedule is enqueued once, by whichever worker gets to it first.
//!
//! `cargo run -p revenant --example periodic`

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use revenant::{Client, JobContext, JobError, Misfire, ScheduleSpec, ScheduledJob};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("periodic.db").display());
    let client = Client::connect(&url).await?;

    // Every second, a heartbeat report; a tick missed while no worker ran is skipped.
    let every_second = ScheduleSpec::cron(
        "heartbeat-report",
        "* * * * * *",
        ScheduledJob {
            queue: "reports".into(),
            kind: "report".into(),
            payload: serde_json::json!({"what": "heartbeat"}),
            priority: 0,
            max_attempts: None,
        },
    );
    // At 02:30 in New York, every day; on the day the clocks skip 02:30 it runs at
    // 03:00, and if no worker ran at 02:30 the last missed run is enqueued late.
    let nightly = ScheduleSpec::cron(
        "nightly-report",
        "30 2 * * *",
        ScheduledJob {
            queue: "reports".into(),
            kind: "report".into(),
            payload: serde_json::json!({"what": "nightly"}),
            priority: 0,
            max_attempts: Some(3),
        },
    )
    .in_timezone("America/New_York")
    .with_misfire(Misfire::Last);

    let ran = Arc::new(AtomicU32::new(0));
    let mut workers = Vec::new();
    for name in ["worker-a", "worker-b"] {
        let ran = ran.clone();
        let worker = client
            .worker()
            .worker_id(name)
            .queue("reports", 2)
            .schedule(every_second.clone())
            .schedule(nightly.clone())
            .handler_fn(
                "report",
                move |ctx: JobContext, payload: serde_json::Value| {
                    let ran = ran.clone();
                    async move {
                        ran.fetch_add(1, Ordering::SeqCst);
                        println!("job {} ran on {}: {payload}", ctx.id(), ctx.worker());
                        Ok::<(), JobError>(())
                    }
                },
            )
            .build()?;
        workers.push(tokio::spawn(
            worker.run_until(tokio::time::sleep(Duration::from_millis(5500))),
        ));
    }
    for worker in workers {
        worker.await??;
    }

    for record in client.schedules().await? {
        println!(
            "{:<17} {:<40} next {}  last {}",
            record.spec.name,
            record.spec.describe(),
            record.next_tick,
            record
                .last_tick
                .map_or_else(|| "never".to_string(), |t| t.to_string()),
        );
    }
    println!(
        "{} jobs ran in about five seconds, one per tick, by two workers",
        ran.load(Ordering::SeqCst)
    );
    Ok(())
}
