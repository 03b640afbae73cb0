//! An in-memory [`Store`] for the runtime's unit tests: just enough of the contract,
//! plus fault injection. The real contract is the conformance suite's business.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use tokio::sync::Notify;

use crate::error::StoreError;
use crate::job::{ErrorEntry, FailureClass, Job, JobId, JobState, LeaseToken, Timestamp};
use crate::store::*;

#[derive(Default)]
pub(crate) struct MemoryStore {
    jobs: Mutex<BTreeMap<JobId, Job>>,
    workers: Mutex<Vec<WorkerInfo>>,
    notify: Notify,
    /// This many of the next calls fail with a retryable error, every other call.
    pub(crate) failures: AtomicU32,
    flip: AtomicU32,
    /// Calls made, per operation name.
    pub(crate) calls: Mutex<BTreeMap<&'static str, u32>>,
}

fn chrono_d(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap()
}

impl MemoryStore {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn enter(&self, op: &'static str) -> Result<(), StoreError> {
        *self.calls.lock().unwrap().entry(op).or_default() += 1;
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

    pub(crate) fn calls(&self, op: &'static str) -> u32 {
        self.calls.lock().unwrap().get(op).copied().unwrap_or(0)
    }

    pub(crate) fn job(&self, id: JobId) -> Job {
        self.jobs.lock().unwrap()[&id].clone()
    }

    pub(crate) fn all(&self) -> Vec<Job> {
        self.jobs.lock().unwrap().values().cloned().collect()
    }

    fn fenced<F: FnOnce(&mut Job, Timestamp)>(&self, lease: LeaseRef, f: F) -> Fenced {
        let now = Utc::now();
        let mut jobs = self.jobs.lock().unwrap();
        match jobs.get_mut(&lease.id) {
            Some(job)
                if job.status == JobState::Running
                    && job.lease_token == Some(lease.lease_token) =>
            {
                f(job, now);
                Fenced::Applied
            }
            _ => Fenced::LeaseLost,
        }
    }
}

fn finish(job: &mut Job, state: JobState, now: Timestamp) {
    job.status = state;
    job.lease_token = None;
    job.lease_expires_at = None;
    if state.is_terminal() {
        job.finished_at = Some(now);
    }
}

fn push_error(job: &mut Job, entry: ErrorEntry) {
    job.errors.push(entry.clone());
    job.last_error = Some(entry);
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(Utc::now())
    }
    async fn wait_for_jobs(&self, _queue: &str, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.notify.notified()).await;
    }
    async fn job_enqueue(&self, params: JobEnqueueParams) -> Result<Vec<Enqueued>, StoreError> {
        self.enter("job_enqueue")?;
        let now = params.now.unwrap_or_else(Utc::now);
        let mut jobs = self.jobs.lock().unwrap();
        let mut out = Vec::new();
        for new in params.jobs {
            new.validate()?;
            let id = jobs.keys().next_back().copied().unwrap_or(0) + 1;
            let run_at = new
                .run_at
                .unwrap_or(now + chrono_d(new.delay.unwrap_or_default()));
            jobs.insert(
                id,
                Job {
                    id,
                    queue: new.queue,
                    kind: new.kind,
                    payload: new.payload,
                    status: JobState::Ready,
                    priority: new.priority,
                    attempts: 0,
                    max_attempts: new.max_attempts.unwrap_or(params.default_max_attempts),
                    run_at,
                    created_at: now,
                    attempted_at: None,
                    finished_at: None,
                    lease_token: None,
                    lease_expires_at: None,
                    worker: None,
                    group_key: new.group_key,
                    unique_key: new.unique_key,
                    correlation_id: new.correlation_id,
                    dead_reason: None,
                    last_error: None,
                    errors: Vec::new(),
                    redrives: 0,
                    fingerprint: None,
                },
            );
            out.push(Enqueued {
                id,
                duplicate: false,
            });
        }
        self.notify.notify_waiters();
        Ok(out)
    }
    async fn job_claim(&self, params: JobClaimParams) -> Result<Vec<Job>, StoreError> {
        self.enter("job_claim")?;
        let now = params.now.unwrap_or_else(Utc::now);
        let mut jobs = self.jobs.lock().unwrap();
        let mut out = Vec::new();
        for job in jobs.values_mut() {
            if out.len() >= params.limit as usize {
                break;
            }
            if job.queue != params.queue {
                continue;
            }
            let due = job.status == JobState::Ready && job.run_at <= now;
            let expired =
                job.status == JobState::Running && job.lease_expires_at.is_some_and(|at| at <= now);
            if expired && job.attempts >= job.max_attempts {
                finish(job, JobState::Dead, now);
                job.dead_reason = Some(crate::job::DeadReason::LeaseExpired);
                continue;
            }
            if !(due || expired) {
                continue;
            }
            if expired {
                push_error(
                    job,
                    ErrorEntry {
                        attempt: job.attempts,
                        at: now,
                        class: FailureClass::LeaseExpired,
                        message: "lease expired".into(),
                        worker: job.worker.clone(),
                    },
                );
            }
            job.status = JobState::Running;
            job.attempts += 1;
            job.lease_token = Some(LeaseToken::random());
            job.lease_expires_at = Some(now + chrono_d(params.lease));
            job.attempted_at = Some(now);
            job.worker = Some(params.worker.clone());
            out.push(job.clone());
        }
        Ok(out)
    }
    async fn job_heartbeat(&self, params: JobHeartbeatParams) -> Result<Fenced, StoreError> {
        self.enter("job_heartbeat")?;
        let lease_for = chrono_d(params.lease_for);
        Ok(self.fenced(params.lease, |job, now| {
            job.lease_expires_at = Some(now + lease_for)
        }))
    }
    async fn job_complete(&self, params: JobCompleteParams) -> Result<Vec<Fenced>, StoreError> {
        self.enter("job_complete")?;
        Ok(params
            .leases
            .into_iter()
            .map(|lease| self.fenced(lease, |job, now| finish(job, JobState::Completed, now)))
            .collect())
    }
    async fn job_fail(&self, params: JobFailParams) -> Result<Vec<Fenced>, StoreError> {
        self.enter("job_fail")?;
        let out = params
            .failures
            .into_iter()
            .map(|f| {
                self.fenced(f.lease, |job, now| {
                    push_error(
                        job,
                        ErrorEntry {
                            attempt: job.attempts,
                            at: now,
                            class: f.failure.class,
                            message: f.failure.message.clone(),
                            worker: f.worker.clone(),
                        },
                    );
                    match f.action {
                        FailAction::Retry { delay } => {
                            finish(job, JobState::Ready, now);
                            job.run_at = now + chrono_d(delay);
                        }
                        FailAction::Dead { reason } => {
                            finish(job, JobState::Dead, now);
                            job.dead_reason = Some(reason);
                        }
                    }
                })
            })
            .collect();
        self.notify.notify_waiters();
        Ok(out)
    }
    async fn job_snooze(&self, params: JobSnoozeParams) -> Result<Fenced, StoreError> {
        self.enter("job_snooze")?;
        let delay = chrono_d(params.delay);
        Ok(self.fenced(params.lease, |job, now| {
            finish(job, JobState::Ready, now);
            job.attempts -= 1;
            job.run_at = now + delay;
        }))
    }
    async fn job_release(&self, params: JobReleaseParams) -> Result<Vec<Fenced>, StoreError> {
        self.enter("job_release")?;
        let out = params
            .leases
            .into_iter()
            .map(|lease| {
                self.fenced(lease, |job, now| {
                    finish(job, JobState::Ready, now);
                    job.attempts -= 1;
                    job.run_at = now;
                })
            })
            .collect();
        self.notify.notify_waiters();
        Ok(out)
    }
    async fn job_cancel(&self, params: JobCancelParams) -> Result<CancelResult, StoreError> {
        self.enter("job_cancel")?;
        match params.target {
            CancelTarget::Lease(lease) => Ok(
                match self.fenced(lease, |job, now| finish(job, JobState::Cancelled, now)) {
                    Fenced::Applied => CancelResult::Cancelled,
                    Fenced::LeaseLost => CancelResult::LeaseLost,
                },
            ),
            CancelTarget::Id(id) => {
                let mut jobs = self.jobs.lock().unwrap();
                let Some(job) = jobs.get_mut(&id) else {
                    return Ok(CancelResult::NotFound);
                };
                if job.status.is_terminal() {
                    return Ok(CancelResult::NotCancellable(job.status));
                }
                finish(job, JobState::Cancelled, Utc::now());
                Ok(CancelResult::Cancelled)
            }
        }
    }
    async fn job_get(&self, params: JobGetParams) -> Result<Option<Job>, StoreError> {
        self.enter("job_get")?;
        Ok(self.jobs.lock().unwrap().get(&params.id).cloned())
    }
    async fn job_list(&self, _params: JobListParams) -> Result<Vec<Job>, StoreError> {
        self.enter("job_list")?;
        Ok(self.all())
    }
    async fn job_sweep(&self, params: JobSweepParams) -> Result<Vec<JobId>, StoreError> {
        self.enter("job_sweep")?;
        let now = params.now.unwrap_or_else(Utc::now);
        let mut out = Vec::new();
        for job in self.jobs.lock().unwrap().values_mut() {
            if job.status == JobState::Running
                && job.lease_expires_at.is_some_and(|at| at <= now)
                && job.attempts >= job.max_attempts
            {
                finish(job, JobState::Dead, now);
                job.dead_reason = Some(crate::job::DeadReason::LeaseExpired);
                out.push(job.id);
            }
        }
        Ok(out)
    }
    async fn job_redrive(&self, _params: JobRedriveParams) -> Result<Vec<JobId>, StoreError> {
        Err(StoreError::Unsupported {
            backend: "memory",
            capability: "redrive",
        })
    }
    async fn job_purge(&self, _params: JobPurgeParams) -> Result<u64, StoreError> {
        Ok(0)
    }
    async fn dead_fingerprints(
        &self,
        _params: DeadFingerprintsParams,
    ) -> Result<Vec<FingerprintGroup>, StoreError> {
        Err(StoreError::Unsupported {
            backend: "memory",
            capability: "dead_fingerprints",
        })
    }
    async fn redrive_history(
        &self,
        _params: RedriveHistoryParams,
    ) -> Result<Vec<RedriveRecord>, StoreError> {
        Ok(Vec::new())
    }
    async fn job_prune(&self, _params: JobPruneParams) -> Result<u64, StoreError> {
        self.enter("job_prune")?;
        Ok(0)
    }
    async fn queue_pause(&self, _params: QueuePauseParams) -> Result<(), StoreError> {
        Ok(())
    }
    async fn queue_resume(&self, _params: QueuePauseParams) -> Result<(), StoreError> {
        Ok(())
    }
    async fn queue_stats(&self, _params: QueueStatsParams) -> Result<Vec<QueueStats>, StoreError> {
        Ok(Vec::new())
    }
    async fn worker_heartbeat(&self, params: WorkerHeartbeatParams) -> Result<(), StoreError> {
        self.enter("worker_heartbeat")?;
        let now = Utc::now();
        let mut workers = self.workers.lock().unwrap();
        match workers.iter_mut().find(|w| w.worker == params.worker) {
            Some(w) => w.last_seen_at = now,
            None => workers.push(WorkerInfo {
                worker: params.worker,
                host: params.host,
                pid: params.pid,
                queues: params.queues,
                started_at: now,
                last_seen_at: now,
            }),
        }
        Ok(())
    }
    async fn worker_list(&self) -> Result<Vec<WorkerInfo>, StoreError> {
        Ok(self.workers.lock().unwrap().clone())
    }
    async fn worker_remove(&self, params: WorkerRemoveParams) -> Result<u64, StoreError> {
        self.enter("worker_remove")?;
        let mut workers = self.workers.lock().unwrap();
        let before = workers.len();
        match params {
            WorkerRemoveParams::Worker(id) => workers.retain(|w| w.worker != id),
            WorkerRemoveParams::StaleFor { stale_after, .. } => {
                let cutoff = Utc::now() - chrono_d(stale_after);
                workers.retain(|w| w.last_seen_at >= cutoff)
            }
        }
        Ok((before - workers.len()) as u64)
    }
}
