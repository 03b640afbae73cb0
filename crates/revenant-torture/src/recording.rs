//! A [`Store`] that writes every claim and every fenced call's answer to the ledger,
//! then passes the answer on unchanged.
//!
//! The runtime does not show a handler its lease token, nor the answer its completer
//! got for an ack; wrapping the store shows both: a claim records (job, attempt, lease
//! token), an ack records (job, lease token, answer). The checker joins them to the
//! handler's start and end lines on (pid, job, attempt).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use revenant::dependency::DependencyState;
use revenant::store::*;
use revenant::{ClaimedJob, Job, JobId, Store, StoreError, Timestamp};

use crate::ledger::{now_micros, AckOp, AckResult, Event, LedgerWriter};

/// The wrapper. See the module docs.
pub struct RecordingStore {
    inner: Arc<dyn Store>,
    ledger: Arc<LedgerWriter>,
    pid: u32,
}

impl RecordingStore {
    /// Wraps `inner`, recording to `ledger`.
    pub fn new(inner: Arc<dyn Store>, ledger: Arc<LedgerWriter>) -> RecordingStore {
        RecordingStore {
            inner,
            ledger,
            pid: std::process::id(),
        }
    }

    fn acks(&self, op: AckOp, leases: &[LeaseRef], t0: i64, answers: &[AckResult]) {
        let t = now_micros();
        for (i, lease) in leases.iter().enumerate() {
            self.ledger.must(&Event::Ack {
                op,
                job: lease.id,
                token: lease.lease_token.0,
                result: answers.get(i).copied().unwrap_or(AckResult::Error),
                pid: self.pid,
                t0,
                t,
            });
        }
    }
}

fn answer(fenced: Fenced) -> AckResult {
    match fenced {
        Fenced::Applied => AckResult::Applied,
        Fenced::LeaseLost => AckResult::LeaseLost,
    }
}

/// One answer per lease: an error answers `Error` for all of them.
fn answers(result: &Result<Vec<Fenced>, StoreError>) -> Vec<AckResult> {
    match result {
        Ok(fenced) => fenced.iter().copied().map(answer).collect(),
        Err(_) => Vec::new(),
    }
}

fn answer_one(result: &Result<Fenced, StoreError>) -> Vec<AckResult> {
    result
        .as_ref()
        .map(|f| vec![answer(*f)])
        .unwrap_or_default()
}

#[async_trait]
impl Store for RecordingStore {
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
        let t0 = now_micros();
        let result = self.inner.job_claim(p).await;
        if let Ok(jobs) = &result {
            let t = now_micros();
            for job in jobs {
                self.ledger.must(&Event::Claimed {
                    job: job.id,
                    attempt: job.attempts,
                    token: job.lease_token.map_or(0, |l| l.0),
                    pid: self.pid,
                    t0,
                    t,
                    run_at: job.run_at.timestamp_micros(),
                    db_t: job.attempted_at.map_or(0, |at| at.timestamp_micros()),
                    lease_until: job.lease_expires_at.map_or(0, |at| at.timestamp_micros()),
                });
            }
        }
        result
    }
    async fn job_claim_run(&self, p: JobClaimParams) -> Result<Vec<ClaimedJob>, StoreError> {
        let t0 = now_micros();
        let result = self.inner.job_claim_run(p).await;
        if let Ok(jobs) = &result {
            let t = now_micros();
            for job in jobs {
                self.ledger.must(&Event::Claimed {
                    job: job.id,
                    attempt: job.attempts,
                    token: job.lease_token.0,
                    pid: self.pid,
                    t0,
                    t,
                    run_at: job.run_at.timestamp_micros(),
                    db_t: job.attempted_at.timestamp_micros(),
                    lease_until: job.lease_expires_at.timestamp_micros(),
                });
            }
        }
        result
    }
    async fn job_heartbeat(&self, p: JobHeartbeatParams) -> Result<Fenced, StoreError> {
        let (lease, t0) = (p.lease, now_micros());
        let result = self.inner.job_heartbeat(p).await;
        self.acks(AckOp::Heartbeat, &[lease], t0, &answer_one(&result));
        result
    }
    async fn job_complete(&self, p: JobCompleteParams) -> Result<Vec<Fenced>, StoreError> {
        let (leases, t0) = (p.leases.clone(), now_micros());
        let result = self.inner.job_complete(p).await;
        self.acks(AckOp::Complete, &leases, t0, &answers(&result));
        result
    }
    async fn job_fail(&self, p: JobFailParams) -> Result<Vec<Fenced>, StoreError> {
        let leases: Vec<LeaseRef> = p.failures.iter().map(|f| f.lease).collect();
        let t0 = now_micros();
        let result = self.inner.job_fail(p).await;
        self.acks(AckOp::Fail, &leases, t0, &answers(&result));
        result
    }
    async fn job_snooze(&self, p: JobSnoozeParams) -> Result<Fenced, StoreError> {
        let (lease, t0) = (p.lease, now_micros());
        let result = self.inner.job_snooze(p).await;
        self.acks(AckOp::Snooze, &[lease], t0, &answer_one(&result));
        result
    }
    async fn job_release(&self, p: JobReleaseParams) -> Result<Vec<Fenced>, StoreError> {
        let (leases, t0) = (p.leases.clone(), now_micros());
        let result = self.inner.job_release(p).await;
        self.acks(AckOp::Release, &leases, t0, &answers(&result));
        result
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
    ) -> Result<DependencyState, StoreError> {
        self.inner.dependency_report(p).await
    }
    async fn dependency_set(&self, p: DependencySetParams) -> Result<DependencyState, StoreError> {
        self.inner.dependency_set(p).await
    }
    async fn dependency_list(
        &self,
        p: DependencyListParams,
    ) -> Result<Vec<DependencyState>, StoreError> {
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
    async fn schedule_list(&self) -> Result<Vec<revenant::schedule::ScheduleRecord>, StoreError> {
        self.inner.schedule_list().await
    }
    async fn schedule_set(&self, p: revenant::store::ScheduleSetParams) -> Result<(), StoreError> {
        self.inner.schedule_set(p).await
    }
    async fn schedule_delete(
        &self,
        p: revenant::store::ScheduleDeleteParams,
    ) -> Result<bool, StoreError> {
        self.inner.schedule_delete(p).await
    }
    async fn schedule_pause(
        &self,
        p: revenant::store::SchedulePauseParams,
    ) -> Result<bool, StoreError> {
        self.inner.schedule_pause(p).await
    }
    async fn schedule_fire(
        &self,
        p: revenant::store::ScheduleFireParams,
    ) -> Result<revenant::store::ScheduleFired, StoreError> {
        self.inner.schedule_fire(p).await
    }
}
