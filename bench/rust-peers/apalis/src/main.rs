//! apalis's driver in the benchmark harness, on PostgreSQL (apalis-postgres): one task,
//! one JSON line (see `bench/README.md`).
//!
//! The worker uses apalis-postgres's LISTEN/NOTIFY wake-ups (`with_pubsub`), fetches
//! batches of `concurrency` and runs at most `concurrency` tasks at once. A failed task
//! is fetched again while its attempts are below `max_attempts` (apalis-postgres has
//! no backoff between attempts).

#[path = "../../common.rs"]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apalis::prelude::*;
use apalis_postgres::{Config, PostgresStorage};
use common::{Progress, Task};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Payload {
    #[serde(default)]
    i: u64,
    #[serde(default)]
    t: u64,
}

#[derive(Debug, Default)]
struct Shared {
    fail_percent: u64,
    poison_every: u64,
    max_attempts: u64,
    tries: Mutex<HashMap<u64, u64>>,
    samples: Mutex<Vec<f64>>,
    latency: bool,
    starts: common::LastStart,
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
            eprintln!("apalis driver: {err}");
            std::process::exit(1);
        }
    }
}

async fn pool(task: &Task) -> Result<PgPool, Error> {
    let pool = PgPoolOptions::new()
        .max_connections(10)
        .connect(&task.url)
        .await?;
    PostgresStorage::setup(&pool).await?;
    Ok(pool)
}

fn storage(pool: &PgPool, task: &Task) -> PostgresStorage<Payload> {
    PostgresStorage::new(pool).with_config(
        Config::default()
            .queue(&task.queue)
            .batch_size(task.concurrency.max(1) as usize),
    )
}

fn build(payload: Payload, task: &Task) -> apalis_core::task::Task<Payload> {
    TaskBuilder::new(payload)
        .max_attempts(task.max_attempts as usize)
        .build()
}

async fn enqueue_jobs(
    pool: &PgPool,
    task: &Task,
    payload: impl Fn(u64) -> Payload,
    deadline: Instant,
) -> Result<u64, Error> {
    let mut backend = storage(pool, task);
    let mut progress = Progress::new(task.jobs);
    let mut done = 0;
    while done < task.jobs && Instant::now() < deadline {
        let n = task.batch.max(1).min(task.jobs - done);
        let tasks: Vec<_> = (done..done + n).map(|i| build(payload(i), task)).collect();
        backend
            .push_all(&mut futures::stream::iter(tasks))
            .await
            .map_err(|e| format!("push: {e:?}"))?;
        done += n;
        progress.tick(done);
    }
    Ok(done)
}

async fn enqueue(task: &Task) -> Result<serde_json::Value, Error> {
    let pool = pool(task).await?;
    let started = Instant::now();
    let done = enqueue_jobs(&pool, task, |_| Payload::default(), task.deadline()).await?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(json!({
        "enqueued": done, "seconds": seconds, "per_sec": done as f64 / seconds,
        "partial": done < task.jobs,
    }))
}

/// (done, dead) tasks of the queue: dead is killed, or failed with no attempt left.
async fn counts(pool: &PgPool, queue: &str) -> Result<(u64, u64), Error> {
    let (done, dead): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'Done'),
                count(*) FILTER (WHERE status = 'Killed'
                                 OR (status = 'Failed' AND attempts >= max_attempts))
         FROM apalis.jobs WHERE job_type = $1",
    )
    .bind(queue)
    .fetch_one(pool)
    .await?;
    Ok((done as u64, dead as u64))
}

async fn handler(p: Payload, shared: Data<Arc<Shared>>) -> Result<(), BoxDynError> {
    shared.starts.mark();
    if shared.latency {
        let started = common::micros();
        shared
            .samples
            .lock()
            .unwrap()
            .push(started.saturating_sub(p.t) as f64 / 1000.0);
        return Ok(());
    }
    if shared.fail_percent > 0 || shared.poison_every > 0 {
        let attempt = {
            let mut tries = shared.tries.lock().unwrap();
            let n = tries.entry(p.i).or_insert(0);
            *n += 1;
            *n
        };
        if common::attempt_fails(
            p.i,
            attempt,
            shared.fail_percent,
            shared.poison_every,
            shared.max_attempts,
        ) {
            return Err("planned transient failure".into());
        }
    }
    Ok(())
}

type Stop = tokio::sync::oneshot::Sender<()>;
type Running = tokio::task::JoinHandle<Result<(), WorkerError>>;

fn start(pool: &PgPool, task: &Task, shared: Arc<Shared>) -> (Stop, Running) {
    let backend = storage(pool, task).with_pubsub();
    let worker = WorkerBuilder::new(format!("bench-{}", std::process::id()))
        .backend(backend)
        .data(shared)
        .concurrency(task.concurrency.max(1) as usize)
        .parallelize(tokio::spawn)
        .build(handler);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run_until(async move {
        let _ = stopped.await;
        Ok::<(), std::io::Error>(())
    }));
    (stop, running)
}

async fn stop(stop: Stop, running: Running) {
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), running).await;
}

/// `drain` (W1) and `failures` (W2, which enqueues its own jobs first).
async fn drain(task: &Task, failures: bool) -> Result<serde_json::Value, Error> {
    let deadline = task.deadline();
    let pool = pool(task).await?;
    if failures {
        enqueue_jobs(&pool, task, |i| Payload { i, t: 0 }, deadline).await?;
    }
    let shared = Arc::new(Shared {
        fail_percent: if failures { task.fail_percent } else { 0 },
        poison_every: if failures { task.poison_every } else { 0 },
        max_attempts: task.max_attempts,
        ..Shared::default()
    });
    let started_at = common::unix_seconds();
    let started = Instant::now();
    let (stopper, running) = start(&pool, task, shared.clone());
    let mut progress = Progress::new(task.jobs);
    let (mut done, mut dead);
    loop {
        (done, dead) = counts(&pool, &task.queue).await?;
        progress.tick(done + dead);
        if done + dead >= task.jobs || Instant::now() >= deadline {
            break;
        }
        common::poll_pause(&shared.starts).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let ended_at = common::unix_seconds();
    stop(stopper, running).await;
    let mut figures = json!({
        "completed": done, "dead": dead, "seconds": seconds,
        "per_sec": done as f64 / seconds, "started_at": started_at, "ended_at": ended_at,
        "partial": done + dead < task.jobs,
        "settings": common::settings(),
    });
    if failures {
        let dead_is: Vec<i64> = sqlx::query_scalar(
            "SELECT coalesce((convert_from(job, 'UTF8')::jsonb->>'i')::int8, -1) FROM apalis.jobs
             WHERE job_type = $1
               AND (status = 'Killed' OR (status = 'Failed' AND attempts >= max_attempts))",
        )
        .bind(&task.queue)
        .fetch_all(&pool)
        .await
        .unwrap_or_default();
        let ok = dead_is.len() as u64 == task.expected_dead()
            && dead_is.iter().all(|&i| i >= 0 && task.is_poison(i as u64));
        let attempts: u64 = shared.tries.lock().unwrap().values().sum();
        figures = common::merge(
            figures,
            json!({
                "expected_dead": task.expected_dead(),
                "dead_are_exactly_the_poison_jobs": ok,
                "attempts": attempts,
            }),
        );
    }
    Ok(figures)
}

/// `latency` (W3): open-loop arrivals, each enqueue its own task at its scheduled time.
async fn latency(task: &Task) -> Result<serde_json::Value, Error> {
    let deadline = task.deadline();
    let pool = pool(task).await?;
    let shared = Arc::new(Shared {
        latency: true,
        ..Shared::default()
    });
    common::micros();
    let (stopper, running) = start(&pool, task, shared.clone());
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
            let mut backend = storage(&pool, task);
            producers.push(tokio::spawn(async move {
                let p = Payload {
                    i: 0,
                    t: common::micros(),
                };
                backend.push(p).await.map_err(|e| format!("push: {e:?}"))
            }));
            progress.tick(shared.samples.lock().unwrap().len() as u64);
        }
        let arrivals = start.elapsed().as_secs_f64();
        for p in producers {
            p.await??;
        }
        loop {
            let seen = shared.samples.lock().unwrap().len() as u64;
            progress.tick(seen);
            if seen >= expected || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mine = shared
            .samples
            .lock()
            .unwrap()
            .get(first..)
            .unwrap_or_default()
            .to_vec();
        out.push(common::latency_summary(rate, n, arrivals, mine));
    }
    stop(stopper, running).await;
    Ok(json!({ "rates": out }))
}
