//! Shared by the runtime's integration tests: a fresh SQLite file per test, short
//! policies, polling with a deadline (never a sleep to wait for something), a store
//! wrapper that records what the runtime asked and got, and child worker processes.

// Each test file uses a different part of this module.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use revenant::sqlite::SqliteStore;
use revenant::store::*;
use revenant::{
    Backoff, Jitter, Job, JobId, JobState, NewJob, RetryPolicy, ShutdownHandle, Store, StoreError,
    Timestamp, Worker,
};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A temporary directory holding one SQLite file.
pub struct Db {
    pub dir: tempfile::TempDir,
}

impl Db {
    pub fn new() -> Self {
        Db {
            dir: tempfile::tempdir().expect("a temp dir"),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("revenant.db")
    }

    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path().display())
    }

    pub async fn store(&self) -> Arc<SqliteStore> {
        Arc::new(SqliteStore::connect(&self.url()).await.expect("connect"))
    }
}

/// A short policy: tests finish in seconds, and the lease rules still hold.
pub fn policy(max_attempts: u32, lease: Duration) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(max_attempts)
        .backoff(Backoff {
            base: ms(5),
            multiplier: 2.0,
            cap: ms(20),
        })
        .jitter(Jitter::None)
        .lease(lease)
        .attempt_timeout(lease * 2 / 3)
        .build()
        .expect("a valid policy")
}

pub async fn enqueue(store: &dyn Store, jobs: Vec<NewJob>) -> Vec<JobId> {
    let mut ids = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(1000) {
        let got = store
            .job_enqueue(JobEnqueueParams {
                jobs: chunk.to_vec(),
                default_max_attempts: 3,
                now: None,
            })
            .await
            .expect("enqueue");
        ids.extend(got.into_iter().map(|e| e.id));
    }
    ids
}

pub async fn get(store: &dyn Store, id: JobId) -> Job {
    store
        .job_get(JobGetParams { id })
        .await
        .expect("job_get")
        .expect("the job exists")
}

/// Every job in the database, paged.
pub async fn all_jobs(store: &dyn Store) -> Vec<Job> {
    let mut jobs = Vec::new();
    let mut before_id = None;
    loop {
        let page = store
            .job_list(JobListParams {
                filter: JobFilter::default(),
                before_id,
                limit: 5000,
            })
            .await
            .expect("job_list");
        let Some(last) = page.last() else { break };
        before_id = Some(last.id);
        jobs.extend(page);
    }
    jobs.sort_by_key(|j| j.id);
    jobs
}

/// Polls the store until `done` holds over every job, or panics with the jobs that
/// are not done at the deadline.
pub async fn wait_for_jobs(
    store: &dyn Store,
    what: &str,
    limit: Duration,
    done: impl Fn(&[Job]) -> bool,
) -> Vec<Job> {
    let deadline = Instant::now() + limit;
    loop {
        let jobs = all_jobs(store).await;
        if done(&jobs) {
            return jobs;
        }
        if Instant::now() > deadline {
            let unfinished: Vec<_> = jobs
                .iter()
                .filter(|j| !j.status.is_terminal())
                .take(5)
                .collect();
            panic!("timed out after {limit:?} waiting for {what}; some unfinished jobs: {unfinished:#?}");
        }
        tokio::time::sleep(ms(20)).await;
    }
}

/// Polls the queue counts (cheap, unlike listing every job) until nothing in `queue`
/// is ready, scheduled, retrying or running, or panics at the deadline.
pub async fn wait_for_drain(store: &dyn Store, queue: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let stats = store
            .queue_stats(QueueStatsParams {
                queue: Some(queue.to_string()),
                worker_alive_within: Duration::from_secs(60),
                interval: Duration::from_secs(60),
                now: None,
            })
            .await
            .expect("queue_stats");
        let open: i64 = stats
            .iter()
            .map(|s| s.ready + s.scheduled + s.retrying + s.running)
            .sum();
        if open == 0 && !stats.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {queue} to drain: {stats:#?}"
        );
        tokio::time::sleep(ms(100)).await;
    }
}

/// Polls a condition with a deadline.
pub async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(ms(5)).await;
    }
}

pub fn all_terminal(jobs: &[Job]) -> bool {
    jobs.iter().all(|j| j.status.is_terminal())
}

pub fn count(jobs: &[Job], status: JobState) -> usize {
    jobs.iter().filter(|j| j.status == status).count()
}

/// Runs a worker in the background until its handle says stop.
pub fn start(worker: Worker) -> (ShutdownHandle, tokio::task::JoinHandle<()>) {
    let handle = worker.shutdown_handle();
    let task = tokio::spawn(async move {
        worker
            .run_until(std::future::pending())
            .await
            .expect("the worker returns Ok");
    });
    (handle, task)
}

/// What a worker asked the store and got back.
#[derive(Default)]
pub struct Record {
    /// (limit asked, jobs returned, when)
    pub claims: Vec<(u32, Vec<Job>, Timestamp)>,
    /// (lease, result)
    pub completes: Vec<(LeaseRef, Fenced)>,
    pub complete_calls: usize,
    /// Heartbeats that were applied.
    pub heartbeats: usize,
    pub fail_calls: usize,
    pub failures: usize,
}

/// A store that records what passes through it, for one worker.
pub struct Observed {
    pub inner: Arc<dyn Store>,
    pub record: Mutex<Record>,
}

impl Observed {
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Observed {
            inner,
            record: Mutex::new(Record::default()),
        })
    }
}

#[async_trait]
impl Store for Observed {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.inner.now().await
    }
    async fn wait_for_jobs(&self, queue: &str, timeout: Duration) {
        self.inner.wait_for_jobs(queue, timeout).await
    }
    async fn job_enqueue(&self, p: JobEnqueueParams) -> Result<Vec<Enqueued>, StoreError> {
        self.inner.job_enqueue(p).await
    }
    async fn job_claim(&self, p: JobClaimParams) -> Result<Vec<Job>, StoreError> {
        let limit = p.limit;
        let jobs = self.inner.job_claim(p).await?;
        let at = chrono::Utc::now();
        self.record
            .lock()
            .unwrap()
            .claims
            .push((limit, jobs.clone(), at));
        Ok(jobs)
    }
    async fn job_heartbeat(&self, p: JobHeartbeatParams) -> Result<Fenced, StoreError> {
        let result = self.inner.job_heartbeat(p).await?;
        if result == Fenced::Applied {
            self.record.lock().unwrap().heartbeats += 1;
        }
        Ok(result)
    }
    async fn job_complete(&self, p: JobCompleteParams) -> Result<Vec<Fenced>, StoreError> {
        let leases = p.leases.clone();
        let result = self.inner.job_complete(p).await?;
        let mut record = self.record.lock().unwrap();
        record.complete_calls += 1;
        record
            .completes
            .extend(leases.into_iter().zip(result.iter().copied()));
        Ok(result)
    }
    async fn job_fail(&self, p: JobFailParams) -> Result<Vec<Fenced>, StoreError> {
        let n = p.failures.len();
        let result = self.inner.job_fail(p).await?;
        let mut record = self.record.lock().unwrap();
        record.fail_calls += 1;
        record.failures += n;
        Ok(result)
    }
    async fn job_snooze(&self, p: JobSnoozeParams) -> Result<Fenced, StoreError> {
        self.inner.job_snooze(p).await
    }
    async fn job_release(&self, p: JobReleaseParams) -> Result<Vec<Fenced>, StoreError> {
        self.inner.job_release(p).await
    }
    async fn job_cancel(&self, p: JobCancelParams) -> Result<CancelResult, StoreError> {
        self.inner.job_cancel(p).await
    }
    async fn job_get(&self, p: JobGetParams) -> Result<Option<Job>, StoreError> {
        self.inner.job_get(p).await
    }
    async fn job_list(&self, p: JobListParams) -> Result<Vec<Job>, StoreError> {
        self.inner.job_list(p).await
    }
    async fn job_sweep(&self, p: JobSweepParams) -> Result<Vec<JobId>, StoreError> {
        self.inner.job_sweep(p).await
    }
    async fn job_redrive(&self, p: JobRedriveParams) -> Result<Vec<JobId>, StoreError> {
        self.inner.job_redrive(p).await
    }
    async fn job_purge(&self, p: JobPurgeParams) -> Result<u64, StoreError> {
        self.inner.job_purge(p).await
    }
    async fn dead_fingerprints(
        &self,
        p: DeadFingerprintsParams,
    ) -> Result<Vec<FingerprintGroup>, StoreError> {
        self.inner.dead_fingerprints(p).await
    }
    async fn redrive_history(
        &self,
        p: RedriveHistoryParams,
    ) -> Result<Vec<RedriveRecord>, StoreError> {
        self.inner.redrive_history(p).await
    }
    async fn job_prune(&self, p: JobPruneParams) -> Result<u64, StoreError> {
        self.inner.job_prune(p).await
    }
    async fn job_vacuum(&self, p: JobVacuumParams) -> Result<JobVacuumed, StoreError> {
        self.inner.job_vacuum(p).await
    }
    async fn queue_pause(&self, p: QueuePauseParams) -> Result<(), StoreError> {
        self.inner.queue_pause(p).await
    }
    async fn queue_resume(&self, p: QueuePauseParams) -> Result<(), StoreError> {
        self.inner.queue_resume(p).await
    }
    async fn queue_stats(&self, p: QueueStatsParams) -> Result<Vec<QueueStats>, StoreError> {
        self.inner.queue_stats(p).await
    }
    async fn queue_history(
        &self,
        p: QueueHistoryParams,
    ) -> Result<Vec<QueueHistoryPoint>, StoreError> {
        self.inner.queue_history(p).await
    }
    async fn worker_heartbeat(&self, p: WorkerHeartbeatParams) -> Result<(), StoreError> {
        self.inner.worker_heartbeat(p).await
    }
    async fn worker_list(&self) -> Result<Vec<WorkerInfo>, StoreError> {
        self.inner.worker_list().await
    }
    async fn worker_remove(&self, p: WorkerRemoveParams) -> Result<u64, StoreError> {
        self.inner.worker_remove(p).await
    }
    async fn dependency_acquire(
        &self,
        p: DependencyAcquireParams,
    ) -> Result<DependencyAcquired, StoreError> {
        self.inner.dependency_acquire(p).await
    }
    async fn dependency_report(
        &self,
        p: DependencyReportParams,
    ) -> Result<revenant::dependency::DependencyState, StoreError> {
        self.inner.dependency_report(p).await
    }
    async fn dependency_set(
        &self,
        p: DependencySetParams,
    ) -> Result<revenant::dependency::DependencyState, StoreError> {
        self.inner.dependency_set(p).await
    }
    async fn dependency_list(
        &self,
        p: DependencyListParams,
    ) -> Result<Vec<revenant::dependency::DependencyState>, StoreError> {
        self.inner.dependency_list(p).await
    }
    async fn dependency_sweep(&self, p: DependencySweepParams) -> Result<Vec<String>, StoreError> {
        self.inner.dependency_sweep(p).await
    }
    async fn policy_list(&self) -> Result<Vec<PolicyRecord>, StoreError> {
        self.inner.policy_list().await
    }
    async fn policy_set(&self, p: PolicySetParams) -> Result<(), StoreError> {
        self.inner.policy_set(p).await
    }
    async fn policy_delete(&self, p: PolicyDeleteParams) -> Result<bool, StoreError> {
        self.inner.policy_delete(p).await
    }
    async fn schedule_list(
        &self,
    ) -> Result<Vec<revenant_core::schedule::ScheduleRecord>, StoreError> {
        self.inner.schedule_list().await
    }
    async fn schedule_set(
        &self,
        p: revenant_core::store::ScheduleSetParams,
    ) -> Result<(), StoreError> {
        self.inner.schedule_set(p).await
    }
    async fn schedule_delete(
        &self,
        p: revenant_core::store::ScheduleDeleteParams,
    ) -> Result<bool, StoreError> {
        self.inner.schedule_delete(p).await
    }
    async fn schedule_pause(
        &self,
        p: revenant_core::store::SchedulePauseParams,
    ) -> Result<bool, StoreError> {
        self.inner.schedule_pause(p).await
    }
    async fn schedule_fire(
        &self,
        p: revenant_core::store::ScheduleFireParams,
    ) -> Result<revenant_core::store::ScheduleFired, StoreError> {
        self.inner.schedule_fire(p).await
    }
}

/// The environment variable that tells a re-executed test binary which database its
/// child worker serves.
pub const CHILD_DB: &str = "REVENANT_TEST_CHILD_DB";

/// Starts this test binary again as a child running only `test` (an `#[ignore]`d test
/// that runs a worker on the database at `db`).
pub fn spawn_child(test: &str, db: &Db) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DB, db.url())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn the child worker")
}

/// Waits for a child with a deadline; kills it and panics past the deadline.
pub async fn wait_child(
    child: &mut std::process::Child,
    limit: Duration,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the child worker did not exit within {limit:?}");
        }
        tokio::time::sleep(ms(10)).await;
    }
}
