//! `revenant-bench`: revenant's side of the benchmark harness in `bench/` (its README
//! says what each workload measures and how the figures are compared).
//!
//! One invocation does one task against one system and prints one JSON line of
//! figures on stdout; while it runs it prints `@progress DONE TOTAL` lines on stderr
//! for the harness's live display. Every task stops by itself at `--time-limit`.
//!
//! Systems:
//!
//! - `revenant`: the library's public API, `revenant::connect(url)` and a
//!   [`revenant::runtime::Worker`] with a no-op handler (the full runtime: fetcher,
//!   executors, heartbeats, batched completer, maintenance);
//! - `store`: the same store's `job_claim`/`job_complete` in a loop with no runtime
//!   (a diagnostic: what the runtime costs on top of the store's SQL);
//! - `ceiling`: raw SQL on revenant's own tables, the claim and complete statements
//!   in `ceiling/<backend>/` with no library around them (the harness's ceiling);
//! - `ceiling-batched`: the same statements claiming and completing at least 500 jobs
//!   each (the batched ceiling: the limit a queue that batches can approach).
//!
//! Tasks:
//!
//! - `enqueue`: `--jobs` no-op jobs, `--batch` per call (1: one at a time);
//! - `drain`: run `--concurrency` slots until `--jobs` jobs of the queue are finished
//!   (every process of a multi-process drain waits for the whole queue);
//! - `failures`: enqueue and drain `--jobs` jobs where `--fail-percent` of attempts
//!   fail transiently and every `--poison-every`-th job always fails, at most 5
//!   attempts; checks that exactly the poison jobs end dead;
//! - `latency`: open-loop arrivals at each of `--rates` jobs/s for `--seconds` each,
//!   enqueue-to-start p50/p99/max (the handler's start, same process clock);
//! - `scale` (W5): a baseline drain of `--baseline-jobs`; `--jobs` due jobs drained
//!   beside `--scheduled` jobs scheduled for later in the same table; then
//!   `--steady-seconds` of open-loop load at `--steady-rate`, pickup latency and the
//!   table's size and dead tuples by window (see `scale.rs`).

mod ceiling;
mod driver;
mod protocol;
mod scale;

use std::time::Duration;

use clap::{Parser, ValueEnum};

/// The allocator of a measured run: jemalloc, as `bench/run` builds this driver for one
/// (the `jemalloc` feature). On PostgreSQL a quarter of a drain's CPU is the worker's,
/// and the system allocator's calls were a fifth of the worker's instructions; every
/// Rust driver of the harness, the peers' included, links jemalloc so that the
/// comparison is of queues, not of allocators (bench/README.md, "The allocator").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The allocator this build runs on, as the figures' settings name it.
pub const ALLOCATOR_NAME: &str = if cfg!(feature = "jemalloc") {
    "jemalloc"
} else {
    "system"
};

/// What to run.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "revenant-bench",
    about = "revenant's benchmark driver (see bench/README.md)"
)]
pub struct Args {
    /// The system to drive.
    #[arg(long, value_enum)]
    pub system: System,
    /// The task.
    #[arg(long, value_enum)]
    pub task: Task,
    /// The database: `postgres://...` or `sqlite://PATH`.
    #[arg(long)]
    pub url: String,
    /// The queue.
    #[arg(long, default_value = "bench")]
    pub queue: String,
    /// Jobs to enqueue (enqueue, failures) or to wait for (drain).
    #[arg(long, default_value_t = 10_000)]
    pub jobs: usize,
    /// Jobs per enqueue call (1: one at a time, each its own transaction).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Jobs at once (the worker's slots; the ceiling's and the store loop's claim size).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Stop after this many seconds, with whatever was done.
    #[arg(long, default_value_t = 60.0)]
    pub time_limit: f64,
    /// failures: percent of attempts that fail transiently.
    #[arg(long, default_value_t = 30)]
    pub fail_percent: u32,
    /// failures: every n-th job always fails (0: none).
    #[arg(long, default_value_t = 100)]
    pub poison_every: usize,
    /// latency: arrival rates, jobs/s.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    pub rates: Vec<f64>,
    /// latency: seconds of arrivals per rate.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// scale: jobs scheduled a week ahead beside the `--jobs` due ones (default: as
    /// many as `--jobs`).
    #[arg(long)]
    pub scheduled: Option<usize>,
    /// scale: jobs of the baseline drain (on a table holding nothing else).
    #[arg(long, default_value_t = 20_000)]
    pub baseline_jobs: usize,
    /// scale: seconds of steady load after the big drain.
    #[arg(long, default_value_t = 1800.0)]
    pub steady_seconds: f64,
    /// scale: the steady load's arrival rate, jobs/s (default: half the baseline drain).
    #[arg(long)]
    pub steady_rate: Option<f64>,
    /// scale: hold a snapshot open this many seconds from a third of the way into the
    /// steady load (0: none).
    #[arg(long, default_value_t = 0.0)]
    pub hold_snapshot_seconds: f64,
    /// scale: the steady load's figures are given per window of this many seconds.
    #[arg(long, default_value_t = 60.0)]
    pub window_seconds: f64,
    /// The worker's `claim_cooldown`, in ms. Default: the library's. For trying a
    /// hypothesis from the harness, not used by `bench/run`.
    #[arg(long)]
    pub claim_cooldown_ms: Option<u64>,
    /// The worker's `poll_interval`, in ms. Default: the library's.
    #[arg(long)]
    pub poll_interval_ms: Option<u64>,
    /// The worker's `claim_ahead`, instead of what `--profile` gives. For trying a
    /// hypothesis from the harness, not used by `bench/run`.
    #[arg(long)]
    pub claim_ahead: Option<usize>,
    /// The worker's `MaintenanceConfig::vacuum_interval`, in ms; 0 turns its vacuum of
    /// the jobs table off (the server's autovacuum alone). Default: the library's (15 s).
    /// For comparing the two, by hand or with `bench/run --w5-vacuum-interval-ms`.
    #[arg(long)]
    pub vacuum_interval_ms: Option<u64>,
    /// scale (W5): how long completed jobs are kept (`MaintenanceConfig::retention`),
    /// in seconds, the worker pruning every minute as by default. Default: the
    /// library's, 24 hours, so nothing is pruned within a W5 run. For measuring what
    /// the kept jobs cost the steady load, by hand or with `bench/run
    /// --w5-retention-s`; refused by any other task.
    #[arg(long)]
    pub retention_s: Option<u64>,
    /// failures (W2): the retry backoff's base delay, in ms, doubling to
    /// `--backoff-cap-ms`, equal jitter. Default 1 ms (and the cap its base): the shortest
    /// the library allows (a backoff's base must be above zero), as every peer runs at
    /// the shortest its own library allows (bench/README.md).
    /// Refused by any other task.
    #[arg(long)]
    pub backoff_base_ms: Option<u64>,
    /// failures (W2): the retry backoff's cap, in ms (see `--backoff-base-ms`; default
    /// its base).
    #[arg(long)]
    pub backoff_cap_ms: Option<u64>,
    /// drain: how long each job's handler waits (a call to a provider, say), in ms.
    /// Default 0, W1's no-op; refused by any other task. For trying a hypothesis from
    /// the harness, not used by `bench/run`.
    #[arg(long, default_value_t = 0)]
    pub job_ms: u64,
    /// ceiling, PostgreSQL: what a completion does with the row (see [`CompleteBy`]).
    #[arg(long, value_enum, default_value_t = CompleteBy::Update)]
    pub complete: CompleteBy,
    /// `revenant`: the worker's settings beyond its slots (see [`Profile`]).
    #[arg(long, value_enum, default_value_t = Profile::Tuned)]
    pub profile: Profile,
}

/// The settings the `revenant` system runs with, as the harness runs every peer: at
/// what its docs give for the workload, or at its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Profile {
    /// What `WorkerBuilder::claim_ahead`'s docs give for a queue of many short jobs:
    /// claim 1,000 jobs ahead (the most it allows).
    Tuned,
    /// The library's defaults: nothing set but the slots.
    Defaults,
}

/// What the ceiling's completion does with a completed job's row: the options issue 19
/// asks to measure for keeping completed jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompleteBy {
    /// Keeps it in the jobs table as `completed` (revenant's completion).
    Update,
    /// Deletes it (a queue that keeps no finished job).
    Delete,
    /// Moves it to `revenant.jobs_done`, an insert-only table of finished jobs.
    Move,
}

impl CompleteBy {
    /// The flag's value.
    pub fn as_str(self) -> &'static str {
        match self {
            CompleteBy::Update => "update",
            CompleteBy::Delete => "delete",
            CompleteBy::Move => "move",
        }
    }
}

/// The system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum System {
    /// The library and its worker runtime.
    Revenant,
    /// The store's claim and complete in a loop, no runtime.
    Store,
    /// Raw SQL on revenant's tables.
    Ceiling,
    /// Raw SQL on revenant's tables, hundreds of jobs per claim and per completion.
    CeilingBatched,
}

/// The task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Task {
    /// Enqueue jobs.
    Enqueue,
    /// Drain the queue.
    Drain,
    /// Drain with failing attempts and poison jobs.
    Failures,
    /// Enqueue-to-start latency under open-loop arrivals.
    Latency,
    /// W5: a big table, then steady load for a long time.
    Scale,
}

impl Args {
    fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs_f64(self.time_limit.max(0.1))
    }
}

fn main() {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // Off by default: W2's dead letters are error events by design, and a failing
        // driver says why on stderr anyway. RUST_LOG turns logs on.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    if args.complete != CompleteBy::Update
        && !matches!(args.system, System::Ceiling | System::CeilingBatched)
    {
        eprintln!(
            "revenant-bench: --complete is the ceiling's; revenant completes with its own store"
        );
        std::process::exit(2);
    }
    if args.job_ms != 0 && !(args.system == System::Revenant && args.task == Task::Drain) {
        eprintln!(
            "revenant-bench: --job-ms is revenant's drain's; no other task waits in its handler"
        );
        std::process::exit(2);
    }
    if args.retention_s.is_some() && !(args.system == System::Revenant && args.task == Task::Scale)
    {
        eprintln!("revenant-bench: --retention-s is revenant's W5 (scale) setting; no other task runs long enough to prune");
        std::process::exit(2);
    }
    if args.retention_s == Some(0) {
        eprintln!("revenant-bench: --retention-s must be above zero");
        std::process::exit(2);
    }
    if (args.backoff_base_ms.is_some() || args.backoff_cap_ms.is_some())
        && !(args.system == System::Revenant && args.task == Task::Failures)
    {
        eprintln!(
            "revenant-bench: --backoff-base-ms and --backoff-cap-ms are revenant's W2 \
             (failures) settings; no other task retries"
        );
        std::process::exit(2);
    }
    let runtime = tokio::runtime::Runtime::new().expect("an async runtime");
    let result = runtime.block_on(async {
        match (args.system, args.task) {
            (System::Ceiling | System::CeilingBatched, Task::Enqueue) => {
                ceiling::enqueue(&args).await
            }
            (System::Ceiling, Task::Drain) => ceiling::drain(&args, false).await,
            (System::CeilingBatched, Task::Drain) => ceiling::drain(&args, true).await,
            (System::Store, Task::Drain) => driver::store_drain(&args).await,
            (System::Revenant | System::Store, Task::Enqueue) => driver::enqueue(&args).await,
            (System::Revenant, Task::Drain) => driver::drain(&args).await,
            (System::Revenant, Task::Failures) => driver::failures(&args).await,
            (System::Revenant, Task::Latency) => driver::latency(&args).await,
            (System::Revenant, Task::Scale) => scale::scale(&args).await,
            (system, task) => Err(format!("{system:?} does not do {task:?}").into()),
        }
    });
    match result {
        Ok(figures) => protocol::result(&figures),
        Err(err) => {
            eprintln!("revenant-bench: {err}");
            std::process::exit(1);
        }
    }
}
