//! The store of the runtime's unit tests: the real SQLite backend on a fresh file,
//! plus what those tests need beyond the contract: failures injected on demand, calls
//! counted per operation, and a look at the jobs.
//!
//! The contract itself is the conformance suite's business; this file only delegates.
//! Why a real backend and not an in-memory stand-in: a stand-in duplicates SQLite and
//! drifts from it, and the runtime's tests should see what production sees.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use revenant_sqlite::SqliteStore;

use revenant_core::dependency::DependencyState;
use revenant_core::error::StoreError;
use revenant_core::job::{ClaimedJob, Job, JobId, Timestamp};
use revenant_core::store::*;

/// A [`SqliteStore`] on a file in its own temporary directory (deleted on drop), whose
/// calls can be made to fail.
pub(crate) struct FaultyStore {
    /// Declared before `_dir`: the database is dropped before its directory.
    inner: SqliteStore,
    _dir: tempfile::TempDir,
    /// This many of the next calls fail with a retryable error, every other call.
    pub(crate) failures: AtomicU32,
    flip: AtomicU32,
    /// Calls made, per operation name.
    calls: Mutex<BTreeMap<&'static str, u32>>,
    /// While true, heartbeats never answer (a partition that swallows packets): each
    /// waits until it is false again.
    pub(crate) stall_heartbeats: tokio::sync::watch::Sender<bool>,
    /// While true, completions never answer: each waits until it is false again.
    pub(crate) stall_completes: tokio::sync::watch::Sender<bool>,
    /// While true, every completion fails with a retryable error (a store that is down).
    pub(crate) refuse_completes: std::sync::atomic::AtomicBool,
}

impl FaultyStore {
    /// A fresh, empty database: every test gets its own.
    pub(crate) async fn open() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("revenant-runtime-")
            .tempdir()
            .expect("a temporary directory");
        let inner = SqliteStore::open(dir.path().join("revenant.db"))
            .await
            .expect("a fresh SQLite store opens");
        FaultyStore {
            inner,
            _dir: dir,
            failures: AtomicU32::new(0),
            flip: AtomicU32::new(0),
            calls: Mutex::new(BTreeMap::new()),
            stall_heartbeats: tokio::sync::watch::Sender::new(false),
            stall_completes: tokio::sync::watch::Sender::new(false),
            refuse_completes: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Counts a call of `op`.
    fn count(&self, op: &'static str) {
        *self.calls.lock().unwrap().entry(op).or_default() += 1;
    }

    /// Counts a call of `op`, and fails it while `failures` is above zero, every other
    /// call, with the error of a database that cannot be reached (retryable).
    fn enter(&self, op: &'static str) -> Result<(), StoreError> {
        self.count(op);
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0
            && self.flip.fetch_add(1, Ordering::SeqCst) % 2 == 0
            && self
                .failures
                .compare_exchange(left, left - 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return Err(StoreError::Unavailable {
                message: format!("injected failure in {op}"),
                source: None,
            });
        }
        Ok(())
    }

    /// How many times `op` was called (injected failures included).
    pub(crate) fn calls(&self, op: &'static str) -> u32 {
        self.calls.lock().unwrap().get(op).copied().unwrap_or(0)
    }

    /// Job `id`, read from the database. The test's own look: not counted, never
    /// failed. Panics when there is no such job.
    pub(crate) async fn job(&self, id: JobId) -> Job {
        self.inner
            .job_get(JobGetParams { id })
            .await
            .expect("job_get")
            .unwrap_or_else(|| panic!("no job {id}"))
    }

    /// The leases of `n` jobs of queue `q`, enqueued and claimed for a minute: running
    /// jobs whose results a test writes. Not counted, never failed.
    pub(crate) async fn running(&self, n: usize) -> Vec<LeaseRef> {
        self.inner
            .job_enqueue(JobEnqueueParams {
                jobs: vec![revenant_core::job::NewJob::new("q", "k", serde_json::json!(null)); n],
                default_max_attempts: 3,
                now: None,
            })
            .await
            .expect("job_enqueue");
        let claimed = self
            .inner
            .job_claim(JobClaimParams {
                queue: "q".into(),
                worker: "w".into(),
                limit: u32::try_from(n).expect("a small claim"),
                lease: Duration::from_secs(60),
                reclaim: true,
                now: None,
            })
            .await
            .expect("job_claim");
        assert_eq!(claimed.len(), n, "every job claimed");
        claimed
            .into_iter()
            .map(|job| LeaseRef {
                id: job.id,
                lease_token: job.lease_token.expect("a claimed job's lease"),
            })
            .collect()
    }

    /// Every job, by id. Read as [`FaultyStore::job`] is.
    pub(crate) async fn all(&self) -> Vec<Job> {
        let mut jobs = Vec::new();
        let mut before_id = None;
        // `job_list` pages newest first; the store caps a page at 10,000.
        loop {
            let page = self
                .inner
                .job_list(JobListParams {
                    before_id,
                    limit: 10_000,
                    ..JobListParams::default()
                })
                .await
                .expect("job_list");
            let Some(last) = page.last() else { break };
            before_id = Some(last.id);
            jobs.extend(page);
        }
        jobs.reverse();
        jobs
    }
}

/// Every call is delegated; every call that can fail is counted and may be failed.
#[async_trait]
impl Store for FaultyStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.enter("now")?;
        self.inner.now().await
    }
    async fn wait_for_jobs(&self, queue: &str, timeout: Duration) {
        // Infallible by contract: counted only.
        self.count("wait_for_jobs");
        self.inner.wait_for_jobs(queue, timeout).await
    }
    async fn job_enqueue(&self, params: JobEnqueueParams) -> Result<Vec<Enqueued>, StoreError> {
        self.enter("job_enqueue")?;
        self.inner.job_enqueue(params).await
    }
    async fn job_claim(&self, params: JobClaimParams) -> Result<Vec<Job>, StoreError> {
        self.enter("job_claim")?;
        self.inner.job_claim(params).await
    }
    async fn job_claim_run(&self, params: JobClaimParams) -> Result<Vec<ClaimedJob>, StoreError> {
        // Counted and failed as a claim: the runtime's claim is this one.
        self.enter("job_claim")?;
        self.inner.job_claim_run(params).await
    }
    async fn job_heartbeat(&self, params: JobHeartbeatParams) -> Result<Fenced, StoreError> {
        self.enter("job_heartbeat")?;
        let mut stalled = self.stall_heartbeats.subscribe();
        let _ = stalled.wait_for(|stalled| !*stalled).await;
        self.inner.job_heartbeat(params).await
    }
    async fn job_complete(&self, params: JobCompleteParams) -> Result<Vec<Fenced>, StoreError> {
        self.enter("job_complete")?;
        let mut stalled = self.stall_completes.subscribe();
        let _ = stalled.wait_for(|stalled| !*stalled).await;
        if self.refuse_completes.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable {
                message: "injected: completions refused".to_string(),
                source: None,
            });
        }
        self.inner.job_complete(params).await
    }
    async fn job_fail(&self, params: JobFailParams) -> Result<Vec<Fenced>, StoreError> {
        self.enter("job_fail")?;
        self.inner.job_fail(params).await
    }
    async fn job_snooze(&self, params: JobSnoozeParams) -> Result<Fenced, StoreError> {
        self.enter("job_snooze")?;
        self.inner.job_snooze(params).await
    }
    async fn job_release(&self, params: JobReleaseParams) -> Result<Vec<Fenced>, StoreError> {
        self.enter("job_release")?;
        self.inner.job_release(params).await
    }
    async fn job_cancel(&self, params: JobCancelParams) -> Result<CancelResult, StoreError> {
        self.enter("job_cancel")?;
        self.inner.job_cancel(params).await
    }
    async fn job_get(&self, params: JobGetParams) -> Result<Option<Job>, StoreError> {
        self.enter("job_get")?;
        self.inner.job_get(params).await
    }
    async fn job_list(&self, params: JobListParams) -> Result<Vec<Job>, StoreError> {
        self.enter("job_list")?;
        self.inner.job_list(params).await
    }
    async fn job_sweep(&self, params: JobSweepParams) -> Result<Vec<JobId>, StoreError> {
        self.enter("job_sweep")?;
        self.inner.job_sweep(params).await
    }
    async fn job_redrive(&self, params: JobRedriveParams) -> Result<Vec<JobId>, StoreError> {
        self.enter("job_redrive")?;
        self.inner.job_redrive(params).await
    }
    async fn job_purge(&self, params: JobPurgeParams) -> Result<u64, StoreError> {
        self.enter("job_purge")?;
        self.inner.job_purge(params).await
    }
    async fn dead_fingerprints(
        &self,
        params: DeadFingerprintsParams,
    ) -> Result<Vec<FingerprintGroup>, StoreError> {
        self.enter("dead_fingerprints")?;
        self.inner.dead_fingerprints(params).await
    }
    async fn redrive_history(
        &self,
        params: RedriveHistoryParams,
    ) -> Result<Vec<RedriveRecord>, StoreError> {
        self.enter("redrive_history")?;
        self.inner.redrive_history(params).await
    }
    async fn job_prune(&self, params: JobPruneParams) -> Result<u64, StoreError> {
        self.enter("job_prune")?;
        self.inner.job_prune(params).await
    }
    async fn job_vacuum(&self, params: JobVacuumParams) -> Result<JobVacuumed, StoreError> {
        self.enter("job_vacuum")?;
        self.inner.job_vacuum(params).await
    }
    async fn queue_pause(&self, params: QueuePauseParams) -> Result<(), StoreError> {
        self.enter("queue_pause")?;
        self.inner.queue_pause(params).await
    }
    async fn queue_resume(&self, params: QueuePauseParams) -> Result<(), StoreError> {
        self.enter("queue_resume")?;
        self.inner.queue_resume(params).await
    }
    async fn queue_stats(&self, params: QueueStatsParams) -> Result<Vec<QueueStats>, StoreError> {
        self.enter("queue_stats")?;
        self.inner.queue_stats(params).await
    }
    async fn queue_history(
        &self,
        params: QueueHistoryParams,
    ) -> Result<Vec<QueueHistoryPoint>, StoreError> {
        self.enter("queue_history")?;
        self.inner.queue_history(params).await
    }
    async fn worker_heartbeat(&self, params: WorkerHeartbeatParams) -> Result<(), StoreError> {
        self.enter("worker_heartbeat")?;
        self.inner.worker_heartbeat(params).await
    }
    async fn worker_list(&self) -> Result<Vec<WorkerInfo>, StoreError> {
        self.enter("worker_list")?;
        self.inner.worker_list().await
    }
    async fn worker_remove(&self, params: WorkerRemoveParams) -> Result<u64, StoreError> {
        self.enter("worker_remove")?;
        self.inner.worker_remove(params).await
    }
    async fn dependency_acquire(
        &self,
        params: DependencyAcquireParams,
    ) -> Result<DependencyAcquired, StoreError> {
        self.enter("dependency_acquire")?;
        self.inner.dependency_acquire(params).await
    }
    async fn dependency_report(
        &self,
        params: DependencyReportParams,
    ) -> Result<DependencyState, StoreError> {
        self.enter("dependency_report")?;
        self.inner.dependency_report(params).await
    }
    async fn dependency_set(
        &self,
        params: DependencySetParams,
    ) -> Result<DependencyState, StoreError> {
        self.enter("dependency_set")?;
        self.inner.dependency_set(params).await
    }
    async fn dependency_list(
        &self,
        params: DependencyListParams,
    ) -> Result<Vec<DependencyState>, StoreError> {
        self.enter("dependency_list")?;
        self.inner.dependency_list(params).await
    }
    async fn dependency_sweep(
        &self,
        params: DependencySweepParams,
    ) -> Result<Vec<String>, StoreError> {
        self.enter("dependency_sweep")?;
        self.inner.dependency_sweep(params).await
    }
    async fn policy_list(&self) -> Result<Vec<PolicyRecord>, StoreError> {
        self.enter("policy_list")?;
        self.inner.policy_list().await
    }
    async fn policy_set(&self, params: PolicySetParams) -> Result<(), StoreError> {
        self.enter("policy_set")?;
        self.inner.policy_set(params).await
    }
    async fn policy_delete(&self, params: PolicyDeleteParams) -> Result<bool, StoreError> {
        self.enter("policy_delete")?;
        self.inner.policy_delete(params).await
    }
    // Schedules are delegated, never failed or counted: every worker's scheduler reads
    // them each second, which would shift the failures other tests aim at.
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
