//! `revenant-drain-bench`: drain throughput of real worker processes.
//!
//! Enqueues N no-op jobs in bulk (batches of 1,000, one transaction each), starts P
//! `revenant-torture-worker` processes (the full runtime: fetcher, executors,
//! heartbeats, batched completer), and times from their start until every job is
//! completed. Prints a progress line while it runs, then one result line.
//!
//! ```text
//! cargo build --release -p revenant-torture --bins
//! cargo run --release -p revenant-torture --bin revenant-drain-bench -- \
//!     --url postgres://postgres@127.0.0.1:5432/postgres --jobs 50000 --processes 4
//! cargo run --release -p revenant-torture --bin revenant-drain-bench -- \
//!     --url sqlite:///tmp/drain.db --jobs 50000 --processes 1
//! ```
//!
//! PostgreSQL runs in a fresh schema (`rv_bench_<pid>`), dropped at the end. SQLite
//! uses the file the URL names, in a queue of its own (`bench_<pid>`), and leaves it.
//! The workers write no ledger. When the worker binary is not built next to this one,
//! this binary runs itself as the worker (`revenant-drain-bench worker ...`).

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Parser;
use revenant_torture::fleet::{self, WorkerSpec};

#[derive(Debug, Parser)]
#[command(
    name = "revenant-drain-bench",
    about = "Drain throughput of worker processes"
)]
struct Args {
    /// The database: `postgres://...` or `sqlite://PATH`.
    #[arg(long)]
    url: String,
    /// Jobs to enqueue and drain.
    #[arg(long, default_value_t = 50_000)]
    jobs: usize,
    /// Worker processes.
    #[arg(long, default_value_t = 1)]
    processes: usize,
    /// Jobs at once per process.
    #[arg(long, default_value_t = 100)]
    concurrency: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("worker") {
        let worker_args = std::iter::once(argv[0].clone()).chain(argv[2..].iter().cloned());
        std::process::exit(revenant_torture::worker::main(worker_args));
    }
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new().expect("an async runtime");
    if let Err(err) = runtime.block_on(bench(args)) {
        eprintln!("revenant-drain-bench: {err}");
        std::process::exit(1);
    }
}

async fn bench(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let pid = std::process::id();
    let backend = revenant::Backend::from_url(&args.url)?;
    let (schema, queue) = match backend {
        revenant::Backend::Postgres => (Some(format!("rv_bench_{pid}")), "bench".to_string()),
        revenant::Backend::Sqlite => (None, format!("bench_{pid}")),
    };
    let store = revenant_torture::worker::connect(&args.url, schema.as_deref(), None).await?;

    let started = Instant::now();
    fleet::enqueue(store.as_ref(), &queue, args.jobs, 1000, 3, None).await?;
    let enqueue = started.elapsed();

    let mut spec = match fleet::sibling_worker_exe() {
        Some(exe) => WorkerSpec::new(exe, &args.url, &queue),
        None => {
            let mut spec = WorkerSpec::new(std::env::current_exe()?, &args.url, &queue);
            spec.prefix_args = vec!["worker".into()];
            spec
        }
    };
    spec.schema = schema.clone();
    spec.concurrency = args.concurrency;
    spec.poll_ms = 100;
    let log_dir = std::env::temp_dir().join(format!("revenant-drain-bench-{pid}"));
    spec.log_dir = log_dir.clone();

    let started = Instant::now();
    let mut workers = (0..args.processes)
        .map(|i| spec.spawn(i))
        .collect::<Result<Vec<_>, _>>()?;
    let target = args.jobs as u64;
    let mut last_print = Instant::now();
    let done = fleet::wait_finished(
        store.as_ref(),
        &queue,
        target,
        started + Duration::from_secs(args.timeout_secs),
        Duration::from_millis(50),
        |done| {
            if last_print.elapsed() >= Duration::from_secs(1) {
                last_print = Instant::now();
                let rate = done as f64 / started.elapsed().as_secs_f64();
                eprint!("\r  {done}/{target} completed, {rate:.0} jobs/s so far   ");
                let _ = std::io::stderr().flush();
            }
        },
    )
    .await;
    let drain = started.elapsed();
    eprintln!();
    let statuses = fleet::terminate_all(&mut workers, Duration::from_secs(30)).await;
    let clean = statuses.iter().all(|s| s.is_some_and(|s| s.success()));
    println!(
        "backend={} processes={} concurrency={} jobs={}: drained in {:.2} s = {:.0} jobs/s (enqueue {:.0} jobs/s in batches of 1000){}",
        store.backend(),
        args.processes,
        args.concurrency,
        args.jobs,
        drain.as_secs_f64(),
        done as f64 / drain.as_secs_f64(),
        args.jobs as f64 / enqueue.as_secs_f64(),
        if clean { "" } else { "; a worker did not exit cleanly" },
    );
    if let Some(schema) = schema {
        let pg = revenant::postgres::PgStore::connect_with_schema(&args.url, &schema).await?;
        sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .execute(pg.pool())
            .await?;
    }
    if done < target {
        return Err(format!(
            "only {done} of {target} jobs finished in {} s; worker logs in {}",
            args.timeout_secs,
            log_dir.display()
        )
        .into());
    }
    let _ = std::fs::remove_dir_all(&log_dir);
    Ok(())
}
