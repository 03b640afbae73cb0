//! The driver's side: enqueue in bulk, start and stop worker processes, wait for a
//! queue to drain, read the final job table. Used by the tests and the drain benchmark.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use revenant::store::{JobFilter, JobListParams, QueueStatsParams};
use revenant::{Job, Store, StoreError};

use crate::behaviour::Plan;
use crate::checker::FinalJob;
use crate::ledger::{now_micros, raw_now_micros, Event, LedgerWriter};
use crate::produce::{self, Shape};

/// Enqueues `count` torture jobs in `queue`, `batch` per call (each call one
/// transaction), and records every acknowledged call in `ledger`. Returns the ids.
pub async fn enqueue(
    store: &dyn Store,
    queue: &str,
    count: usize,
    batch: usize,
    max_attempts: i32,
    ledger: Option<&LedgerWriter>,
) -> Result<Vec<i64>, StoreError> {
    produce::produce(
        store,
        &Shape::plain(queue, max_attempts),
        count,
        batch,
        Duration::ZERO,
        ledger,
    )
    .await
}

/// Jobs of `queue` in a terminal state (completed, dead, cancelled).
pub async fn finished(store: &dyn Store, queue: &str) -> Result<u64, StoreError> {
    let stats = store
        .queue_stats(QueueStatsParams {
            queue: Some(queue.to_string()),
            ..QueueStatsParams::default()
        })
        .await?;
    Ok(stats
        .iter()
        .map(|s| s.completed + s.dead + s.cancelled)
        .sum::<i64>()
        .try_into()
        .unwrap_or(0))
}

/// Polls until `target` jobs of `queue` are terminal or `deadline` passes; calls
/// `progress(finished)` after every poll. Returns the last count. Store errors are
/// retried until the deadline (a database restart is part of some tests).
pub async fn wait_finished(
    store: &dyn Store,
    queue: &str,
    target: u64,
    deadline: Instant,
    poll: Duration,
    mut progress: impl FnMut(u64),
) -> u64 {
    let mut last = 0;
    loop {
        if let Ok(done) = finished(store, queue).await {
            last = done;
            progress(done);
            if done >= target {
                return done;
            }
        }
        if Instant::now() >= deadline {
            return last;
        }
        tokio::time::sleep(poll).await;
    }
}

/// Every job of `queue`, as the checker needs it.
pub async fn final_jobs(store: &dyn Store, queue: &str) -> Result<Vec<FinalJob>, StoreError> {
    Ok(all_jobs(store, queue)
        .await?
        .iter()
        .map(FinalJob::from)
        .collect())
}

/// Every job of `queue`, newest first.
pub async fn all_jobs(store: &dyn Store, queue: &str) -> Result<Vec<Job>, StoreError> {
    let mut jobs = Vec::new();
    let mut before_id = None;
    loop {
        let page = store
            .job_list(JobListParams {
                filter: JobFilter {
                    queue: Some(queue.to_string()),
                    ..JobFilter::default()
                },
                before_id,
                limit: 10_000,
            })
            .await?;
        let Some(last) = page.last() else {
            return Ok(jobs);
        };
        before_id = Some(last.id);
        jobs.extend(page);
    }
}

/// How to start worker processes.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The worker executable.
    pub exe: PathBuf,
    /// Arguments before the worker's own (a subcommand, for a binary that is also a
    /// worker).
    pub prefix_args: Vec<String>,
    /// The database URL.
    pub url: String,
    /// The PostgreSQL schema.
    pub schema: Option<String>,
    /// The PostgreSQL pool size per process; None for the store's default.
    pub max_connections: Option<u32>,
    /// The PostgreSQL connections' `application_name`; None for the store's default.
    pub application_name: Option<String>,
    /// The queue.
    pub queue: String,
    /// Jobs at once per process.
    pub concurrency: usize,
    /// What the handlers do.
    pub plan: Plan,
    /// Where the ledger goes; None for none.
    pub ledger_dir: Option<PathBuf>,
    /// Where each process's stderr goes (`worker-<n>.log`, appended to across restarts).
    pub log_dir: PathBuf,
    /// The lease claims take, in milliseconds.
    pub lease_ms: u64,
    /// The attempt timeout, in milliseconds; None for half the lease.
    pub attempt_timeout_ms: Option<u64>,
    /// The heartbeat interval, in milliseconds; None for a third of the lease.
    pub heartbeat_ms: Option<u64>,
    /// The torture kind's own lease, in milliseconds (see the worker's
    /// `--kind-lease-ms`); None for the claims' lease.
    pub kind_lease_ms: Option<u64>,
    /// Lease heartbeats on (the default) or off.
    pub heartbeats: bool,
    /// The expired-lease sweep's interval, in milliseconds; None for the runtime's.
    pub sweep_ms: Option<u64>,
    /// The fallback poll interval, in milliseconds.
    pub poll_ms: u64,
    /// The first retry's delay, in milliseconds.
    pub backoff_ms: u64,
    /// How long running jobs may finish after SIGTERM, in milliseconds.
    pub grace_ms: u64,
    /// Extra arguments for the worker (`--produce`, `--runtime-threads`, ...).
    pub extra_args: Vec<String>,
    /// Extra environment variables (`LD_PRELOAD`, `FAKETIME`).
    pub env: Vec<(String, String)>,
}

impl WorkerSpec {
    /// A spec with the worker's defaults: the store's pool size, concurrency 50, plan all-succeed with seed
    /// 0, a 30 s lease, 200 ms polls, a 5 s shutdown grace, no ledger, logs in the temp dir.
    pub fn new(exe: impl Into<PathBuf>, url: impl Into<String>, queue: impl Into<String>) -> Self {
        WorkerSpec {
            exe: exe.into(),
            prefix_args: Vec::new(),
            url: url.into(),
            schema: None,
            max_connections: None,
            application_name: None,
            queue: queue.into(),
            concurrency: 50,
            plan: Plan::default(),
            ledger_dir: None,
            log_dir: std::env::temp_dir(),
            lease_ms: 30_000,
            attempt_timeout_ms: None,
            heartbeat_ms: None,
            kind_lease_ms: None,
            heartbeats: true,
            sweep_ms: None,
            poll_ms: 200,
            backoff_ms: 50,
            grace_ms: 5_000,
            extra_args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// The worker id process number `index` runs under: the same for every process
    /// started with that index, so a restarted worker reuses its predecessor's name.
    pub fn worker_id(&self, index: usize) -> String {
        format!("torture-{}-{index}", std::process::id())
    }

    /// Starts worker number `index` (it names the log file and the worker id).
    pub fn spawn(&self, index: usize) -> std::io::Result<WorkerProcess> {
        std::fs::create_dir_all(&self.log_dir)?;
        let log = self.log_dir.join(format!("worker-{index}.log"));
        let stderr = OpenOptions::new().create(true).append(true).open(&log)?;
        let mut command = Command::new(&self.exe);
        command
            .args(&self.prefix_args)
            .arg("--url")
            .arg(&self.url)
            .arg("--queue")
            .arg(&self.queue)
            .arg("--concurrency")
            .arg(self.concurrency.to_string())
            .arg("--seed")
            .arg(self.plan.seed.to_string())
            .arg("--mix")
            .arg(self.plan.mix.to_string())
            .arg("--lease-ms")
            .arg(self.lease_ms.to_string())
            .arg("--poll-ms")
            .arg(self.poll_ms.to_string())
            .arg("--backoff-ms")
            .arg(self.backoff_ms.to_string())
            .arg("--grace-ms")
            .arg(self.grace_ms.to_string())
            .arg("--worker-id")
            .arg(self.worker_id(index))
            .args(&self.extra_args)
            // Planned panics by the thousand: a symbolized backtrace each would be most
            // of a worker's CPU, and a starved runtime times out jobs the plan says
            // succeed. `env` may set it again.
            .env("RUST_BACKTRACE", "0")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let optional = [
            ("--schema", self.schema.clone()),
            (
                "--max-connections",
                self.max_connections.map(|n| n.to_string()),
            ),
            ("--application-name", self.application_name.clone()),
            (
                "--attempt-timeout-ms",
                self.attempt_timeout_ms.map(|n| n.to_string()),
            ),
            ("--heartbeat-ms", self.heartbeat_ms.map(|n| n.to_string())),
            ("--kind-lease-ms", self.kind_lease_ms.map(|n| n.to_string())),
            ("--sweep-ms", self.sweep_ms.map(|n| n.to_string())),
        ];
        for (flag, value) in optional {
            if let Some(value) = value {
                command.arg(flag).arg(value);
            }
        }
        if !self.heartbeats {
            command.arg("--no-heartbeats");
        }
        if let Some(dir) = &self.ledger_dir {
            command.arg("--ledger-dir").arg(dir);
        }
        Ok(WorkerProcess {
            child: command.spawn()?,
            log,
            index,
        })
    }
}

/// A running worker process. Dropping it kills it (SIGKILL) if it still runs, so a
/// failed test leaves no process behind.
#[derive(Debug)]
pub struct WorkerProcess {
    child: Child,
    log: PathBuf,
    index: usize,
}

impl WorkerProcess {
    /// The index it was started with (its worker id's suffix).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its stderr log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of its log, for a failure message.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Its exit status if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal`.
    pub fn signal(&self, signal: Signal) -> nix::Result<()> {
        let pid = i32::try_from(self.child.id()).map_err(|_| nix::Error::EINVAL)?;
        kill(Pid::from_raw(pid), signal)
    }

    /// Polls until it exits or `timeout` passes.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends SIGTERM to every process, then waits for each to exit (up to `timeout` in
/// all). Returns each one's status, None for one still running.
pub async fn terminate_all(
    workers: &mut [WorkerProcess],
    timeout: Duration,
) -> Vec<Option<ExitStatus>> {
    for worker in workers.iter() {
        let _ = worker.signal(Signal::SIGTERM);
    }
    let deadline = Instant::now() + timeout;
    let mut statuses = Vec::new();
    for worker in workers.iter_mut() {
        let left = deadline.saturating_duration_since(Instant::now());
        statuses.push(worker.wait_exit(left).await);
    }
    statuses
}

/// The worker executable next to the running one (`target/<profile>/`), if built.
pub fn sibling_worker_exe() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let sibling = exe.parent()?.join(format!(
        "revenant-torture-worker{}",
        std::env::consts::EXE_SUFFIX
    ));
    sibling.is_file().then_some(sibling)
}

/// Opens the ledger file of the driving process (role `driver`) in `dir`.
pub fn driver_ledger(dir: &Path) -> std::io::Result<Arc<LedgerWriter>> {
    let writer = LedgerWriter::create(dir, "driver")?;
    writer.record(&Event::Process {
        pid: std::process::id(),
        role: "driver".into(),
        worker: None,
        t: now_micros(),
        t_raw: raw_now_micros(),
    })?;
    Ok(Arc::new(writer))
}
