//! The torture worker process: one revenant [`Worker`] serving one queue, whose handler
//! does what the [`Plan`] says and writes every start and end to the ledger, over a
//! [`RecordingStore`] that writes every claim and ack answer. With `--produce N` it
//! also enqueues N jobs itself (recording each acknowledged batch), so one process can
//! be a producer and a worker at once, or (`--no-work`) only a producer.
//!
//! The `revenant-torture-worker` binary is a thin `main` over [`main`]. It exits 0
//! after a graceful shutdown (SIGTERM or Ctrl-C) or, with `--no-work`, once it has
//! produced; 2 on bad arguments (a policy that cannot work included), 1 when it cannot
//! start.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use revenant::backoff::{Backoff, Jitter};
use revenant::policy::{PolicySet, RetryPolicy};
use revenant::postgres::{PgStore, PgStoreOptions};
use revenant::runtime::{JobContext, JobError, MaintenanceConfig, Worker};
use revenant::store::JobGetParams;
use revenant::Store;

use crate::behaviour::{Action, Mix, Plan};
use crate::ledger::{
    now_micros, raw_now_micros, set_clock_offset_micros, Event, LedgerWriter, RunResult, StopCause,
};
use crate::produce::{self, Shape};
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
    /// The PostgreSQL connections' `application_name`, so a test can find (and
    /// terminate) exactly this process's connections. Default `revenant`.
    #[arg(long)]
    pub application_name: Option<String>,
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
    /// The lease claims take, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub lease_ms: u64,
    /// The attempt timeout, in milliseconds. Default half the lease (of the kind, when
    /// `--kind-lease-ms` is given). One not below its lease is refused at start.
    #[arg(long)]
    pub attempt_timeout_ms: Option<u64>,
    /// The heartbeat interval, in milliseconds. Default a third of the lease.
    #[arg(long)]
    pub heartbeat_ms: Option<u64>,
    /// Gives the torture kind its own, longer lease: claims take `--lease-ms`, the
    /// first heartbeat extends it to this (and with `--no-heartbeats` it stays short,
    /// which is how a stalled worker looks).
    #[arg(long)]
    pub kind_lease_ms: Option<u64>,
    /// Turns lease heartbeats off (the runtime's test-only switch).
    #[arg(long)]
    pub no_heartbeats: bool,
    /// The expired-lease sweep's interval, in milliseconds. Default the runtime's (5 s).
    #[arg(long)]
    pub sweep_ms: Option<u64>,
    /// The fallback poll interval, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub poll_ms: u64,
    /// Jobs the fetcher may claim beyond its free slots (`WorkerBuilder::claim_ahead`).
    /// Default the runtime's (0).
    #[arg(long)]
    pub claim_ahead: Option<usize>,
    /// The first retry's delay, in milliseconds (doubling, capped at 20 times it,
    /// equal jitter: each delay d is drawn from [d/2, d]).
    #[arg(long, default_value_t = 50)]
    pub backoff_ms: u64,
    /// How long running jobs may finish after SIGTERM, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub grace_ms: u64,
    /// How far this process's clock is ahead of the machine's, in milliseconds (a
    /// libfaketime skew); the ledger subtracts it so its times compare with the other
    /// processes'. The worker itself never uses it.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub clock_offset_ms: i64,
    /// The async runtime's worker threads. Default: one per core.
    #[arg(long)]
    pub runtime_threads: Option<usize>,
    /// Jobs this process enqueues itself (in `--queue`), recorded in its ledger.
    #[arg(long, default_value_t = 0)]
    pub produce: usize,
    /// Jobs per enqueue call (one transaction each).
    #[arg(long, default_value_t = 50)]
    pub produce_batch: usize,
    /// The produced jobs' `max_attempts`.
    #[arg(long, default_value_t = 3)]
    pub produce_max_attempts: i32,
    /// A pause between two enqueue calls, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub produce_pause_ms: u64,
    /// Produced job number i gets the unique key `u<i mod K>` (0: no keys). Processes
    /// given the same K race for the same keys.
    #[arg(long, default_value_t = 0)]
    pub unique_keys: usize,
    /// Produced job number i joins the FIFO group `g<i mod G>` (0: no groups).
    #[arg(long, default_value_t = 0)]
    pub groups: usize,
    /// Only produce, then exit 0: no worker.
    #[arg(long)]
    pub no_work: bool,
}

impl WorkerArgs {
    /// The plan the handler follows.
    pub fn plan(&self) -> Plan {
        Plan {
            seed: self.seed,
            mix: self.mix,
        }
    }

    /// The policies: claims (the default and the queue) lease `--lease-ms`; the kind
    /// has its own lease when `--kind-lease-ms` is given.
    fn policies(&self) -> Result<PolicySet, String> {
        let base = Duration::from_millis(self.backoff_ms.max(1));
        let backoff = Backoff::new(base, 2.0, base * 20).map_err(|e| e.to_string())?;
        let make = |lease_ms: u64, timeout: Option<u64>| {
            let lease = Duration::from_millis(lease_ms);
            let mut builder = RetryPolicy::builder()
                .backoff(backoff)
                .jitter(Jitter::Equal)
                .lease(lease)
                .attempt_timeout(timeout.map_or(lease / 2, Duration::from_millis));
            if let Some(ms) = self.heartbeat_ms {
                builder = builder.heartbeat(Duration::from_millis(ms));
            }
            builder.build().map_err(|e| e.to_string())
        };
        match self.kind_lease_ms {
            None => {
                let policy = make(self.lease_ms, self.attempt_timeout_ms)?;
                Ok(PolicySet::new(policy).with_queue(self.queue.clone(), policy))
            }
            Some(kind_lease) => {
                let claims = make(self.lease_ms, None)?;
                let kind = make(kind_lease, self.attempt_timeout_ms)?;
                Ok(PolicySet::new(claims)
                    .with_queue(self.queue.clone(), claims)
                    .with_kind(KIND, kind))
            }
        }
    }
}

/// A store, and the PostgreSQL pool behind it when there is one (for handlers that use
/// the application's side of the pool).
pub struct Connected {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The PostgreSQL store's pool.
    pub pg_pool: Option<sqlx::PgPool>,
}

/// Opens the store a URL names; for PostgreSQL, in `schema` when given (default
/// `revenant`) with a pool of at most `max_connections` (default 10).
pub async fn connect(
    url: &str,
    schema: Option<&str>,
    max_connections: Option<u32>,
) -> Result<Arc<dyn Store>, revenant::StoreError> {
    Ok(connect_with(url, schema, max_connections, None)
        .await?
        .store)
}

/// [`connect`], with an `application_name` for PostgreSQL, keeping the pool.
pub async fn connect_with(
    url: &str,
    schema: Option<&str>,
    max_connections: Option<u32>,
    application_name: Option<&str>,
) -> Result<Connected, revenant::StoreError> {
    match revenant::Backend::from_url(url)? {
        revenant::Backend::Postgres => {
            let defaults = PgStoreOptions::default();
            let options = PgStoreOptions {
                schema: schema.map_or(defaults.schema.clone(), str::to_string),
                max_connections: max_connections.unwrap_or(defaults.max_connections),
                application_name: application_name
                    .map_or(defaults.application_name.clone(), str::to_string),
                ..defaults
            };
            let store = PgStore::connect_with(url, options).await?;
            let pg_pool = Some(store.pool().clone());
            Ok(Connected {
                store: Arc::new(store),
                pg_pool,
            })
        }
        revenant::Backend::Sqlite => Ok(Connected {
            store: revenant::connect(url).await?,
            pg_pool: None,
        }),
    }
}

/// Records how one handler run ends: [`RunGuard::end`] when it returns, else (from
/// `Drop`) a `stopped` line when it unwinds from a panic or its future is dropped. A
/// run that stops without a line would count, for the checker, as running until its
/// lease ran out; if its process is then killed before the ack that followed it is
/// recorded, the next attempt looks like it overlapped a live lease.
struct RunGuard {
    ledger: Option<Arc<LedgerWriter>>,
    job: i64,
    attempt: i32,
    pid: u32,
    ended: bool,
}

impl RunGuard {
    fn end(&mut self, result: RunResult) {
        self.ended = true;
        if let Some(ledger) = &self.ledger {
            ledger.must(&Event::End {
                job: self.job,
                attempt: self.attempt,
                pid: self.pid,
                result,
                t: now_micros(),
            });
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let cause = if std::thread::panicking() {
            StopCause::Panicked
        } else {
            StopCause::Dropped
        };
        if let Some(ledger) = &self.ledger {
            ledger.must(&Event::Stopped {
                job: self.job,
                attempt: self.attempt,
                pid: self.pid,
                cause,
                t: now_micros(),
            });
        }
    }
}

/// What a handler needs besides its job.
#[derive(Clone)]
struct HandlerEnv {
    plan: Plan,
    ledger: Option<Arc<LedgerWriter>>,
    pid: u32,
    lease_ms: u64,
    store: Arc<dyn Store>,
    pg_pool: Option<sqlx::PgPool>,
}

impl HandlerEnv {
    fn record(&self, event: Event) {
        if let Some(ledger) = &self.ledger {
            ledger.must(&event);
        }
    }

    /// One attempt: does what the plan says, recording its start and its end: an `end`
    /// line when it returns, a `stopped` line when it panics or is dropped.
    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        let (job, attempt) = (ctx.id(), ctx.attempt());
        self.record(Event::Start {
            job,
            attempt,
            pid: self.pid,
            lease_ms: self.lease_ms,
            t: now_micros(),
        });
        let mut run = RunGuard {
            ledger: self.ledger.clone(),
            job,
            attempt,
            pid: self.pid,
            ended: false,
        };
        let ok = |run: &mut RunGuard| {
            run.end(RunResult::Ok);
            Ok(())
        };
        match self.plan.action(job, attempt) {
            Action::Succeed => ok(&mut run),
            Action::SleepThenSucceed(d) => {
                tokio::time::sleep(d).await;
                ok(&mut run)
            }
            Action::FailTransient => {
                run.end(RunResult::Transient);
                Err(JobError::retry(format!(
                    "planned transient failure {attempt}"
                )))
            }
            Action::FailPermanent => {
                run.end(RunResult::Permanent);
                Err(JobError::permanent("planned permanent failure"))
            }
            Action::Panic => panic!("planned panic at attempt {attempt}"),
            Action::Overrun => {
                // Never looks at ctx.cancelled(): the runtime's timeout has to end it.
                let past = ctx.deadline() + Duration::from_millis(self.lease_ms) * 4;
                tokio::time::sleep_until(past).await;
                ok(&mut run)
            }
            Action::Abort => std::process::abort(),
            Action::Block(d) => {
                // No await: neither the cancellation token nor the task's abort can
                // stop this thread.
                std::thread::sleep(d);
                ok(&mut run)
            }
            Action::Hold(d) => {
                self.hold(job, d).await;
                ok(&mut run)
            }
            Action::StallUntilReclaimed => {
                let until = tokio::time::Instant::now() + Duration::from_secs(60);
                while tokio::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if let Ok(Some(row)) = self.store.job_get(JobGetParams { id: job }).await {
                        if row.attempts > attempt || row.status.is_terminal() {
                            break;
                        }
                    }
                }
                ok(&mut run)
            }
        }
    }

    /// Keeps a connection of the store's own pool for `d` (PostgreSQL), as a handler
    /// running its own queries in a transaction does; on SQLite, reads through the
    /// store's reader pool for `d`. Waits for a connection as long as it takes.
    async fn hold(&self, job: i64, d: Duration) {
        if let Some(pool) = &self.pg_pool {
            loop {
                match pool.acquire().await {
                    Ok(mut conn) => {
                        let _ = sqlx::query("SELECT 1").execute(&mut *conn).await;
                        tokio::time::sleep(d).await;
                        return;
                    }
                    Err(err) => {
                        tracing::debug!(job_id = job, error = %err, "hold: no connection yet");
                    }
                }
            }
        }
        let until = tokio::time::Instant::now() + d;
        while tokio::time::Instant::now() < until {
            let _ = self.store.job_get(JobGetParams { id: job }).await;
        }
    }
}

/// Runs a worker (and its producer) until SIGTERM; the process's exit code.
pub async fn run(args: WorkerArgs) -> i32 {
    let policies = match args.policies() {
        Ok(policies) => policies,
        Err(err) => {
            eprintln!("revenant-torture-worker: bad policy: {err}");
            return 2;
        }
    };
    set_clock_offset_micros(args.clock_offset_ms.saturating_mul(1000));
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
    // Opening retries what retrying fixes (a SQLite file another process holds locked
    // for a while, a server restarting) for up to 30 s, as the runtime does once it
    // runs; the long blocking-handler test found workers exiting at start instead.
    let opening_until = tokio::time::Instant::now() + Duration::from_secs(30);
    let opened = loop {
        let opened = connect_with(
            &args.url,
            args.schema.as_deref(),
            args.max_connections,
            args.application_name.as_deref(),
        )
        .await;
        match opened {
            Err(err) if err.is_retryable() && tokio::time::Instant::now() < opening_until => {
                tracing::warn!(error = %err, "cannot open the store yet; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => break other,
        }
    };
    let connected = match opened {
        Ok(connected) => connected,
        Err(err) => {
            eprintln!(
                "revenant-torture-worker: cannot open {}: {err}",
                revenant::redact(&args.url)
            );
            return 1;
        }
    };
    let store: Arc<dyn Store> = match &ledger {
        Some(ledger) => Arc::new(RecordingStore::new(connected.store.clone(), ledger.clone())),
        None => connected.store.clone(),
    };
    let pid = std::process::id();
    let producer = (args.produce > 0).then(|| {
        let shape = Shape {
            queue: args.queue.clone(),
            max_attempts: args.produce_max_attempts,
            unique_keys: args.unique_keys,
            groups: args.groups,
        };
        let (store, ledger) = (connected.store.clone(), ledger.clone());
        let (count, batch) = (args.produce, args.produce_batch);
        let pause = Duration::from_millis(args.produce_pause_ms);
        tokio::spawn(async move {
            produce::produce(
                store.as_ref(),
                &shape,
                count,
                batch,
                pause,
                ledger.as_deref(),
            )
            .await
        })
    });
    if args.no_work {
        let Some(producer) = producer else {
            eprintln!("revenant-torture-worker: --no-work without --produce does nothing");
            return 2;
        };
        return match producer.await {
            Ok(Ok(_)) => 0,
            Ok(Err(err)) => {
                eprintln!("revenant-torture-worker: enqueue failed: {err}");
                1
            }
            Err(err) => {
                eprintln!("revenant-torture-worker: the producer failed: {err}");
                1
            }
        };
    }
    let env = HandlerEnv {
        plan: args.plan(),
        ledger: ledger.clone(),
        pid,
        lease_ms: args.kind_lease_ms.unwrap_or(args.lease_ms),
        store: store.clone(),
        pg_pool: connected.pg_pool.clone(),
    };
    let mut maintenance = MaintenanceConfig::default();
    if let Some(ms) = args.sweep_ms {
        maintenance.sweep_interval = Duration::from_millis(ms.max(1));
    }
    let mut builder = Worker::builder(store)
        .queue(args.queue.clone(), args.concurrency)
        .policies(policies)
        .poll_interval(Duration::from_millis(args.poll_ms.max(1)))
        .shutdown_grace(Duration::from_millis(args.grace_ms))
        .heartbeats(!args.no_heartbeats)
        .maintenance(maintenance)
        .handler_fn(KIND, move |ctx: JobContext, _payload: serde_json::Value| {
            env.clone().run(ctx)
        });
    if let Some(id) = &args.worker_id {
        builder = builder.worker_id(id.clone());
    }
    if let Some(jobs) = args.claim_ahead {
        builder = builder.claim_ahead(jobs);
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
            t_raw: raw_now_micros(),
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
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(n) = args.runtime_threads {
        builder.worker_threads(n.max(1));
    }
    let runtime = match builder.build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("revenant-torture-worker: cannot start the async runtime: {err}");
            return 1;
        }
    };
    runtime.block_on(run(args))
}
