//! The driver's side: enqueue in bulk, start and stop worker processes, wait for a
//! queue to drain, read the final job table. Used by the tests and the drain benchmark.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use revenant::store::{JobEnqueueParams, JobFilter, JobListParams, QueueStatsParams};
use revenant::{NewJob, Store, StoreError};

use crate::behaviour::Plan;
use crate::checker::FinalJob;
use crate::ledger::{now_micros, Event, LedgerWriter};
use crate::worker::KIND;

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
    let mut ids = Vec::with_capacity(count);
    let mut left = count;
    while left > 0 {
        let n = left.min(batch.max(1));
        let enqueued = store
            .job_enqueue(JobEnqueueParams {
                jobs: (0..n)
                    .map(|_| NewJob::new(queue, KIND, serde_json::json!({})))
                    .collect(),
                default_max_attempts: max_attempts,
                now: None,
            })
            .await?;
        let batch_ids: Vec<i64> = enqueued.iter().map(|e| e.id).collect();
        if let Some(ledger) = ledger {
            ledger
                .record(&Event::Enqueued {
                    ids: batch_ids.clone(),
                    max_attempts,
                    t: now_micros(),
                })
                .map_err(StoreError::unavailable)?;
        }
        ids.extend(batch_ids);
        left -= n;
    }
    Ok(ids)
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
        jobs.extend(page.iter().map(FinalJob::from));
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
    /// The queue.
    pub queue: String,
    /// Jobs at once per process.
    pub concurrency: usize,
    /// What the handlers do.
    pub plan: Plan,
    /// Where the ledger goes; None for none.
    pub ledger_dir: Option<PathBuf>,
    /// Where each process's stderr goes (`worker-<n>.log`).
    pub log_dir: PathBuf,
    /// The lease, in milliseconds.
    pub lease_ms: u64,
    /// The fallback poll interval, in milliseconds.
    pub poll_ms: u64,
    /// How long running jobs may finish after SIGTERM, in milliseconds.
    pub grace_ms: u64,
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
            queue: queue.into(),
            concurrency: 50,
            plan: Plan::default(),
            ledger_dir: None,
            log_dir: std::env::temp_dir(),
            lease_ms: 30_000,
            poll_ms: 200,
            grace_ms: 5_000,
        }
    }

    /// Starts worker number `index` (it names the log file and the worker id).
    pub fn spawn(&self, index: usize) -> std::io::Result<WorkerProcess> {
        std::fs::create_dir_all(&self.log_dir)?;
        let log = self.log_dir.join(format!("worker-{index}.log"));
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
            .arg("--grace-ms")
            .arg(self.grace_ms.to_string())
            .arg("--worker-id")
            .arg(format!("torture-{}-{index}", std::process::id()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log)?);
        if let Some(schema) = &self.schema {
            command.arg("--schema").arg(schema);
        }
        if let Some(n) = self.max_connections {
            command.arg("--max-connections").arg(n.to_string());
        }
        if let Some(dir) = &self.ledger_dir {
            command.arg("--ledger-dir").arg(dir);
        }
        Ok(WorkerProcess {
            child: command.spawn()?,
            log,
        })
    }
}

/// A running worker process. Dropping it kills it (SIGKILL) if it still runs, so a
/// failed test leaves no process behind.
#[derive(Debug)]
pub struct WorkerProcess {
    child: Child,
    log: PathBuf,
}

impl WorkerProcess {
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
    })?;
    Ok(Arc::new(writer))
}
