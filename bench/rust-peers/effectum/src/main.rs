//! effectum's driver in the benchmark harness: one task, one JSON line (see
//! `bench/README.md`). effectum is SQLite only; `url` is the database file's path.
//!
//! effectum's own settings are kept (it opens its file with `synchronous = normal`).
//! Its retry backoff is set in whole seconds; W2 uses 0 s, the nearest to the 10 ms
//! the other systems use.

#[path = "../../common.rs"]
mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Progress, Task};
use effectum::{Job, JobRunner, Queue, Retries, RunningJob, Worker};
use serde_json::json;

type Error = Box<dyn std::error::Error + Send + Sync>;

const KIND: &str = "noop";

#[derive(Debug, Default)]
struct Ctx {
    handled: AtomicU64,
    starts: common::LastStart,
    fail_percent: u64,
    poison_every: u64,
    max_attempts: u64,
    /// Attempts per job, counted here: effectum 0.7.0's retry bumps `current_try` of
    /// every job in the table (its UPDATE has no WHERE clause), so the job's own count
    /// cannot be trusted.
    tries: Mutex<std::collections::HashMap<u64, u64>>,
    samples: Mutex<Vec<f64>>,
}

#[tokio::main]
async fn main() {
    let task = Task::from_args();
    let result = match task.task.as_str() {
        "enqueue" => enqueue(&task).await,
        "drain" => drain(&task, false).await,
        "failures" => drain(&task, true).await,
        "latency" => latency(&task).await,
        other => Err(format!("unknown task {other}").into()),
    };
    match result {
        Ok(figures) => common::result(figures),
        Err(err) => {
            eprintln!("effectum driver: {err}");
            std::process::exit(1);
        }
    }
}

fn job(payload: serde_json::Value, task: &Task) -> Result<Job, Error> {
    Ok(Job::builder(KIND)
        .json_payload(&payload)?
        .retries(Retries {
            max_retries: u32::try_from(task.max_attempts.max(1) - 1)?,
            backoff_initial_interval: Duration::ZERO,
            backoff_multiplier: 2.0,
            backoff_randomization: 0.2,
        })
        .build())
}

async fn enqueue_jobs(
    queue: &Queue,
    task: &Task,
    payload: impl Fn(u64) -> serde_json::Value,
    deadline: Instant,
) -> Result<u64, Error> {
    let mut progress = Progress::new(task.jobs);
    let mut done = 0;
    while done < task.jobs && Instant::now() < deadline {
        let n = task.batch.max(1).min(task.jobs - done);
        if n == 1 {
            queue.add_job(job(payload(done), task)?).await?;
        } else {
            let jobs = (done..done + n)
                .map(|i| job(payload(i), task))
                .collect::<Result<Vec<_>, _>>()?;
            queue.add_jobs(jobs).await?;
        }
        done += n;
        progress.tick(done);
    }
    Ok(done)
}

async fn enqueue(task: &Task) -> Result<serde_json::Value, Error> {
    let queue = Queue::new(Path::new(&task.url)).await?;
    let started = Instant::now();
    let done = enqueue_jobs(&queue, task, |_| json!({}), task.deadline()).await?;
    let seconds = started.elapsed().as_secs_f64();
    queue.close(Duration::from_secs(5)).await?;
    Ok(json!({
        "enqueued": done, "seconds": seconds, "per_sec": done as f64 / seconds,
        "partial": done < task.jobs,
    }))
}

/// (succeeded, failed) jobs, read from the file.
fn counts(db: &rusqlite::Connection) -> Result<(u64, u64), Error> {
    Ok(db.query_row(
        "SELECT coalesce(sum(status = 'succeeded'), 0), coalesce(sum(status = 'failed'), 0) FROM jobs",
        [],
        |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
    )?)
}

async fn runner(job: RunningJob, ctx: Arc<Ctx>) -> Result<(), String> {
    ctx.handled.fetch_add(1, Ordering::Relaxed);
    ctx.starts.mark();
    if ctx.fail_percent > 0 || ctx.poison_every > 0 {
        let p: serde_json::Value = job.json_payload().map_err(|e| e.to_string())?;
        let i = p["i"].as_u64().unwrap_or(0);
        let attempt = {
            let mut tries = ctx.tries.lock().unwrap();
            let n = tries.entry(i).or_insert(0);
            *n += 1;
            *n
        };
        if common::attempt_fails(
            i,
            attempt,
            ctx.fail_percent,
            ctx.poison_every,
            ctx.max_attempts,
        ) {
            return Err("planned transient failure".into());
        }
    }
    Ok(())
}

/// `drain` (W1) and `failures` (W2, which enqueues its own jobs first).
async fn drain(task: &Task, failures: bool) -> Result<serde_json::Value, Error> {
    let deadline = task.deadline();
    let queue = Queue::new(Path::new(&task.url)).await?;
    if failures {
        enqueue_jobs(&queue, task, |i| json!({ "i": i }), deadline).await?;
    }
    let db = rusqlite::Connection::open(&task.url)?;
    let ctx = Arc::new(Ctx {
        fail_percent: if failures { task.fail_percent } else { 0 },
        poison_every: if failures { task.poison_every } else { 0 },
        max_attempts: task.max_attempts,
        ..Ctx::default()
    });
    let io = common::io();
    let started_at = common::unix_seconds();
    let started = Instant::now();
    let worker = Worker::builder(&queue, ctx.clone())
        .max_concurrency(u16::try_from(task.concurrency)?)
        .jobs([JobRunner::builder(KIND, runner).build()])
        .build()
        .await?;
    let mut progress = Progress::new(task.jobs);
    let (mut succeeded, mut failed);
    loop {
        (succeeded, failed) = counts(&db)?;
        progress.tick(succeeded + failed);
        if succeeded + failed >= task.jobs || Instant::now() >= deadline {
            break;
        }
        common::poll_pause(&ctx.starts).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let ended_at = common::unix_seconds();
    let io = common::io_since(io);
    worker.unregister(Some(Duration::from_secs(5))).await?;
    queue.close(Duration::from_secs(5)).await?;
    let mut figures = json!({
        "completed": succeeded, "dead": failed, "seconds": seconds,
        "per_sec": succeeded as f64 / seconds, "started_at": started_at, "ended_at": ended_at,
        "partial": succeeded + failed < task.jobs,
        "attempts": ctx.handled.load(Ordering::Relaxed),
        "settings": common::settings(),
    });
    if failures {
        let mut stmt = db.prepare("SELECT payload FROM jobs WHERE status = 'failed'")?;
        let dead: Vec<u64> = stmt
            .query_map([], |r| r.get::<_, Vec<u8>>(0))?
            .filter_map(|p| p.ok())
            .filter_map(|p| serde_json::from_slice::<serde_json::Value>(&p).ok())
            .filter_map(|p| p["i"].as_u64())
            .collect();
        let ok =
            dead.len() as u64 == task.expected_dead() && dead.iter().all(|&i| task.is_poison(i));
        figures = common::merge(
            figures,
            json!({ "expected_dead": task.expected_dead(), "dead_are_exactly_the_poison_jobs": ok }),
        );
    } else {
        figures = common::merge(figures, io);
    }
    Ok(figures)
}

async fn latency_runner(job: RunningJob, ctx: Arc<Ctx>) -> Result<(), String> {
    let started = common::micros();
    let p: serde_json::Value = job.json_payload().map_err(|e| e.to_string())?;
    let t = p["t"].as_u64().unwrap_or(started);
    ctx.samples
        .lock()
        .unwrap()
        .push(started.saturating_sub(t) as f64 / 1000.0);
    Ok(())
}

/// `latency` (W3): open-loop arrivals, each enqueue its own task at its scheduled time.
async fn latency(task: &Task) -> Result<serde_json::Value, Error> {
    let deadline = task.deadline();
    let queue = Arc::new(Queue::new(Path::new(&task.url)).await?);
    let ctx = Arc::new(Ctx::default());
    common::micros();
    let worker = Worker::builder(&queue, ctx.clone())
        .max_concurrency(u16::try_from(task.concurrency)?)
        .jobs([JobRunner::builder(KIND, latency_runner).build()])
        .build()
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let total: u64 = task
        .rates
        .iter()
        .map(|r| (r * task.seconds).round() as u64)
        .sum();
    let mut progress = Progress::new(total);
    let mut expected = 0;
    let mut out = Vec::new();
    for &rate in &task.rates {
        let n = (rate * task.seconds).round() as u64;
        let first = expected as usize;
        expected += n;
        let start = tokio::time::Instant::now();
        let mut producers = Vec::new();
        for k in 0..n {
            let at = start + Duration::from_secs_f64(k as f64 / rate);
            if at.into_std() >= deadline {
                break;
            }
            tokio::time::sleep_until(at).await;
            let queue = queue.clone();
            producers.push(tokio::spawn(async move {
                let job = Job::builder(KIND)
                    .json_payload(&json!({ "t": common::micros() }))?
                    .build();
                queue.add_job(job).await.map(|_| ())
            }));
            progress.tick(ctx.samples.lock().unwrap().len() as u64);
        }
        let arrivals = start.elapsed().as_secs_f64();
        for p in producers {
            p.await??;
        }
        loop {
            let seen = ctx.samples.lock().unwrap().len() as u64;
            progress.tick(seen);
            if seen >= expected || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mine = ctx
            .samples
            .lock()
            .unwrap()
            .get(first..)
            .unwrap_or_default()
            .to_vec();
        out.push(common::latency_summary(rate, n, arrivals, mine));
    }
    worker.unregister(Some(Duration::from_secs(5))).await?;
    queue.close(Duration::from_secs(5)).await?;
    Ok(json!({ "rates": out }))
}
