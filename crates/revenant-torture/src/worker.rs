//! The torture worker process: one revenant [`Worker`] serving one queue, whose handler
//! does what the [`Plan`] says and writes every start and end to the ledger, over a
//! [`RecordingStore`] that writes every claim and ack answer.
//!
//! The `revenant-torture-worker` binary is a thin `main` over [`main`]. It exits 0
//! after a graceful shutdown (SIGTERM or Ctrl-C), 2 on bad arguments, 1 when it cannot
//! start.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use revenant::backoff::{Backoff, Jitter};
use revenant::policy::{PolicySet, RetryPolicy};
use revenant::postgres::{PgStore, PgStoreOptions};
use revenant::runtime::{JobContext, JobError, Worker};
use revenant::Store;

use crate::behaviour::{Action, Mix, Plan};
use crate::ledger::{now_micros, Event, LedgerWriter, RunResult};
use crate::recording::RecordingStore;

/// The kind every torture job has.
pub const KIND: &str = "torture";

/// The worker's command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "revenant-torture-worker",
    about = "A revenant worker for the torture harness"
)]
pub struct WorkerArgs {
    /// The database: `postgres://...` or `sqlite://PATH`.
    #[arg(long)]
    pub url: String,
    /// The PostgreSQL schema (ignored for SQLite). Default `revenant`.
    #[arg(long)]
    pub schema: Option<String>,
    /// The PostgreSQL pool's size (ignored for SQLite). Default 10, the store's
    /// default; the tests use fewer so several processes fit a shared server.
    #[arg(long)]
    pub max_connections: Option<u32>,
    /// The queue to serve.
    #[arg(long, default_value = "torture")]
    pub queue: String,
    /// Jobs run at once.
    #[arg(long, default_value_t = 50)]
    pub concurrency: usize,
    /// The plan's seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The plan's mix, `succeed:90,transient:5,permanent:3,sleep:2`.
    #[arg(long, default_value = "succeed:1")]
    pub mix: Mix,
    /// Where to write this process's ledger file. None: no ledger (benchmarks).
    #[arg(long)]
    pub ledger_dir: Option<PathBuf>,
    /// The worker id. Default `<host>-<pid>`.
    #[arg(long)]
    pub worker_id: Option<String>,
    /// The lease, in milliseconds (the attempt timeout is half of it, heartbeats a
    /// third).
    #[arg(long, default_value_t = 30_000)]
    pub lease_ms: u64,
    /// The fallback poll interval, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub poll_ms: u64,
    /// The first retry's delay, in milliseconds (doubling, capped at 20 times it).
    #[arg(long, default_value_t = 50)]
    pub backoff_ms: u64,
    /// How long running jobs may finish after SIGTERM, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub grace_ms: u64,
}

impl WorkerArgs {
    /// The plan the handler follows.
    pub fn plan(&self) -> Plan {
        Plan {
            seed: self.seed,
            mix: self.mix,
        }
    }

    fn policy(&self) -> Result<RetryPolicy, String> {
        let base = Duration::from_millis(self.backoff_ms.max(1));
        let lease = Duration::from_millis(self.lease_ms);
        RetryPolicy::builder()
            .backoff(Backoff::new(base, 2.0, base * 20).map_err(|e| e.to_string())?)
            .jitter(Jitter::Equal)
            .lease(lease)
            .attempt_timeout(lease / 2)
            .build()
            .map_err(|e| e.to_string())
    }
}

/// Opens the store a URL names; for PostgreSQL, in `schema` when given (default
/// `revenant`) with a pool of at most `max_connections` (default 10).
pub async fn connect(
    url: &str,
    schema: Option<&str>,
    max_connections: Option<u32>,
) -> Result<Arc<dyn Store>, revenant::StoreError> {
    match revenant::Backend::from_url(url)? {
        revenant::Backend::Postgres => {
            let defaults = PgStoreOptions::default();
            let options = PgStoreOptions {
                schema: schema.map_or(defaults.schema.clone(), str::to_string),
                max_connections: max_connections.unwrap_or(defaults.max_connections),
                ..defaults
            };
            Ok(Arc::new(PgStore::connect_with(url, options).await?))
        }
        revenant::Backend::Sqlite => revenant::connect(url).await,
    }
}

/// Runs a worker until SIGTERM; the process's exit code.
pub async fn run(args: WorkerArgs) -> i32 {
    let policy = match args.policy() {
        Ok(policy) => policy,
        Err(err) => {
            eprintln!("revenant-torture-worker: bad policy: {err}");
            return 2;
        }
    };
    let ledger = match &args.ledger_dir {
        Some(dir) => match LedgerWriter::create(dir, "worker") {
            Ok(writer) => Some(Arc::new(writer)),
            Err(err) => {
                eprintln!(
                    "revenant-torture-worker: cannot open the ledger in {}: {err}",
                    dir.display()
                );
                return 1;
            }
        },
        None => None,
    };
    let store = match connect(&args.url, args.schema.as_deref(), args.max_connections).await {
        Ok(store) => store,
        Err(err) => {
            eprintln!(
                "revenant-torture-worker: cannot open {}: {err}",
                revenant::redact(&args.url)
            );
            return 1;
        }
    };
    let store: Arc<dyn Store> = match &ledger {
        Some(ledger) => Arc::new(RecordingStore::new(store, ledger.clone())),
        None => store,
    };
    let plan = args.plan();
    let pid = std::process::id();
    let lease_ms = args.lease_ms;
    let handler_ledger = ledger.clone();
    let mut builder = Worker::builder(store)
        .queue(args.queue.clone(), args.concurrency)
        .policies(PolicySet::new(policy))
        .poll_interval(Duration::from_millis(args.poll_ms.max(1)))
        .shutdown_grace(Duration::from_millis(args.grace_ms))
        .handler_fn(KIND, move |ctx: JobContext, _payload: serde_json::Value| {
            let ledger = handler_ledger.clone();
            async move {
                let (job, attempt) = (ctx.id(), ctx.attempt());
                if let Some(ledger) = &ledger {
                    ledger.must(&Event::Start {
                        job,
                        attempt,
                        pid,
                        lease_ms,
                        t: now_micros(),
                    });
                }
                let (result, outcome) = match plan.action(job, attempt) {
                    Action::Succeed => (RunResult::Ok, Ok(())),
                    Action::SleepThenSucceed(d) => {
                        tokio::time::sleep(d).await;
                        (RunResult::Ok, Ok(()))
                    }
                    Action::FailTransient => (
                        RunResult::Transient,
                        Err(JobError::retry(format!(
                            "planned transient failure {attempt}"
                        ))),
                    ),
                    Action::FailPermanent => (
                        RunResult::Permanent,
                        Err(JobError::permanent("planned permanent failure")),
                    ),
                };
                if let Some(ledger) = &ledger {
                    ledger.must(&Event::End {
                        job,
                        attempt,
                        pid,
                        result,
                        t: now_micros(),
                    });
                }
                outcome
            }
        });
    if let Some(id) = &args.worker_id {
        builder = builder.worker_id(id.clone());
    }
    let worker = match builder.build() {
        Ok(worker) => worker,
        Err(err) => {
            eprintln!("revenant-torture-worker: {err}");
            return 2;
        }
    };
    if let Some(ledger) = &ledger {
        ledger.must(&Event::Process {
            pid,
            role: "worker".into(),
            worker: Some(worker.id().to_string()),
            t: now_micros(),
        });
    }
    match worker.run().await {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("revenant-torture-worker: {err}");
            1
        }
    }
}

/// The binary's `main`: parses `args` (the first is the program name), sets up
/// logging (`RUST_LOG`, default `warn`, to stderr) and runs the worker.
pub fn main(args: impl IntoIterator<Item = String>) -> i32 {
    let args = match WorkerArgs::try_parse_from(args) {
        Ok(args) => args,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() { 2 } else { 0 };
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("revenant-torture-worker: cannot start the async runtime: {err}");
            return 1;
        }
    };
    runtime.block_on(run(args))
}
