//! An in-memory [`Store`] for the runtime's unit tests: just enough of the contract,
//! plus fault injection. The real contract is the conformance suite's business.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use tokio::sync::Notify;

use revenant_core::dependency::{DependencyRecord, DependencyState, WaitReason, WaitingCounts};
use revenant_core::error::StoreError;
use revenant_core::job::{ErrorEntry, FailureClass, Job, JobId, JobState, LeaseToken, Timestamp};
use revenant_core::store::*;

#[derive(Default)]
pub(crate) struct MemoryStore {
    jobs: Mutex<BTreeMap<JobId, Job>>,
    workers: Mutex<Vec<WorkerInfo>>,
    dependencies: Mutex<BTreeMap<String, DependencyRecord>>,
    /// Stored retry policies, by scope.
    policies: Mutex<HashMap<PolicyScope, PolicyRecord>>,
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

    /// The jobs waiting on `key`, by reason.
    fn waiting(&self, key: &str) -> WaitingCounts {
        let mut counts = WaitingCounts::default();
        for job in self.jobs.lock().unwrap().values() {
            if job.status != JobState::Ready || job.dependency.as_deref() != Some(key) {
                continue;
            }
            match job.dependency_wait {
                Some(WaitReason::Breaker) => counts.breaker += 1,
                Some(WaitReason::RateLimit) => counts.rate_limit += 1,
                Some(WaitReason::RetryBudget) => counts.retry_budget += 1,
                None => {}
            }
        }
        counts
    }

    /// Releases the jobs parked on `key`, in claim order, on the record's turns.
    fn release_parked(&self, key: &str, record: &mut DependencyRecord, now: Timestamp) {
        let mut jobs = self.jobs.lock().unwrap();
        let mut parked: Vec<&mut Job> = jobs
            .values_mut()
            .filter(|j| {
                j.status == JobState::Ready
                    && j.dependency.as_deref() == Some(key)
                    && j.dependency_wait == Some(WaitReason::Breaker)
            })
            .collect();
        parked.sort_by_key(|j| (-j.priority, j.run_at, j.id));
        let now_us = now.timestamp_micros();
        let (first, spacing) = record.reserve_turns(now_us, parked.len() as u64);
        for (i, job) in parked.into_iter().enumerate() {
            let at = first + spacing * i as i64;
            job.run_at = chrono::DateTime::from_timestamp_micros(at).unwrap();
            job.dependency_wait = (spacing > 0).then_some(WaitReason::RateLimit);
        }
        drop(jobs);
        self.notify.notify_waiters();
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
                    dependency: None,
                    dependency_wait: None,
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
        // As the real stores: at most one expired lease per claim, none without
        // `reclaim`.
        let mut reclaims_left = u32::from(params.reclaim);
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
                job.dead_reason = Some(revenant_core::job::DeadReason::LeaseExpired);
                continue;
            }
            if expired && reclaims_left == 0 {
                continue;
            }
            if !(due || expired) {
                continue;
            }
            if expired {
                reclaims_left -= 1;
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
                job.dead_reason = Some(revenant_core::job::DeadReason::LeaseExpired);
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
    async fn queue_history(
        &self,
        params: QueueHistoryParams,
    ) -> Result<Vec<QueueHistoryPoint>, StoreError> {
        params.validate()?;
        let now = params.now.unwrap_or_else(Utc::now);
        let jobs = self.jobs.lock().unwrap();
        let queue: Vec<&Job> = jobs.values().filter(|j| j.queue == params.queue).collect();
        Ok((0..params.points)
            .map(|i| {
                let t = params.point_at(now, i);
                let due = |j: &&&Job| j.created_at <= t && j.run_at <= t;
                let before = |at: Option<Timestamp>| at.is_some_and(|at| at <= t);
                let depth = queue
                    .iter()
                    .filter(due)
                    .filter(|j| {
                        j.status == JobState::Ready
                            || !(before(j.attempted_at) || before(j.finished_at))
                    })
                    .count() as i64;
                let dead = queue
                    .iter()
                    .filter(|j| j.status == JobState::Dead && before(j.finished_at))
                    .count() as i64;
                QueueHistoryPoint { at: t, depth, dead }
            })
            .collect())
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
    async fn dependency_acquire(
        &self,
        params: DependencyAcquireParams,
    ) -> Result<DependencyAcquired, StoreError> {
        self.enter("dependency_acquire")?;
        params.validate()?;
        let now = params.now.unwrap_or_else(Utc::now);
        let running: std::collections::HashMap<JobId, GatedJob> = {
            let jobs = self.jobs.lock().unwrap();
            params
                .requests
                .iter()
                .filter_map(|r| {
                    let job = jobs.get(&r.lease.id)?;
                    (job.status == JobState::Running).then_some((
                        job.id,
                        GatedJob {
                            lease_token: job.lease_token?,
                            attempts: job.attempts,
                            waited_for: job.dependency_wait,
                        },
                    ))
                })
                .collect()
        };
        let mut records = self.dependencies.lock().unwrap();
        let record = records.entry(params.dependency.clone()).or_default();
        let plan = plan_acquire(record, &params, now, &running);
        let mut jobs = self.jobs.lock().unwrap();
        let mut permits = Vec::with_capacity(plan.len());
        for (request, (permit, gate)) in params.requests.iter().zip(plan) {
            if let Some(job) = jobs.get_mut(&request.lease.id) {
                match gate {
                    JobGate::Run => {
                        job.dependency = Some(params.dependency.clone());
                        job.dependency_wait = None;
                    }
                    JobGate::Defer { run_at, reason } => {
                        finish(job, JobState::Ready, now);
                        job.attempts -= 1;
                        job.run_at = run_at;
                        job.dependency = Some(params.dependency.clone());
                        job.dependency_wait = Some(reason);
                    }
                    JobGate::Nothing => {}
                }
            }
            permits.push(permit);
        }
        Ok(DependencyAcquired { now, permits })
    }
    async fn dependency_report(
        &self,
        params: DependencyReportParams,
    ) -> Result<DependencyState, StoreError> {
        self.enter("dependency_report")?;
        params.validate()?;
        let now = params.now.unwrap_or_else(Utc::now);
        let mut record = self
            .dependencies
            .lock()
            .unwrap()
            .get(&params.dependency)
            .cloned()
            .unwrap_or_default();
        let closed = record.report(
            &params.policy,
            now.timestamp_micros(),
            params.successes,
            params.failures,
            params.probe.map(|p| (p.job, p.outcome)),
        );
        if closed {
            self.release_parked(&params.dependency, &mut record, now);
        }
        self.dependencies
            .lock()
            .unwrap()
            .insert(params.dependency.clone(), record.clone());
        Ok(record.view(
            &params.dependency,
            now.timestamp_micros(),
            WaitingCounts::default(),
        ))
    }
    async fn dependency_set(
        &self,
        params: DependencySetParams,
    ) -> Result<DependencyState, StoreError> {
        revenant_core::names::validate_key("dependency", &params.dependency)?;
        let now = params.now.unwrap_or_else(Utc::now);
        let mut record = self
            .dependencies
            .lock()
            .unwrap()
            .get(&params.dependency)
            .cloned()
            .unwrap_or_default();
        if record.set(params.action, now.timestamp_micros()) {
            self.release_parked(&params.dependency, &mut record, now);
        }
        self.dependencies
            .lock()
            .unwrap()
            .insert(params.dependency.clone(), record.clone());
        Ok(record.view(
            &params.dependency,
            now.timestamp_micros(),
            self.waiting(&params.dependency),
        ))
    }
    async fn dependency_list(
        &self,
        params: DependencyListParams,
    ) -> Result<Vec<DependencyState>, StoreError> {
        let now = params.now.unwrap_or_else(Utc::now).timestamp_micros();
        let records = self.dependencies.lock().unwrap().clone();
        Ok(records
            .iter()
            .filter(|(key, _)| params.dependency.as_ref().is_none_or(|d| d == *key))
            .map(|(key, record)| record.view(key, now, self.waiting(key)))
            .collect())
    }
    async fn dependency_sweep(
        &self,
        params: DependencySweepParams,
    ) -> Result<Vec<String>, StoreError> {
        let now = params.now.unwrap_or_else(Utc::now);
        let records = self.dependencies.lock().unwrap().clone();
        let mut released = Vec::new();
        let mut jobs = self.jobs.lock().unwrap();
        for (key, record) in records {
            if !record.wants_probe(now.timestamp_micros()) {
                continue;
            }
            let mut parked: Vec<&mut Job> = jobs
                .values_mut()
                .filter(|j| {
                    j.status == JobState::Ready
                        && j.dependency.as_deref() == Some(key.as_str())
                        && j.dependency_wait == Some(WaitReason::Breaker)
                })
                .collect();
            if parked.iter().any(|j| j.run_at <= now) {
                continue;
            }
            parked.sort_by_key(|j| (-j.priority, j.run_at, j.id));
            if let Some(first) = parked.into_iter().next() {
                first.run_at = now;
                released.push(key);
            }
        }
        drop(jobs);
        self.notify.notify_waiters();
        Ok(released)
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
    async fn policy_list(&self) -> Result<Vec<PolicyRecord>, StoreError> {
        self.enter("policy_list")?;
        let mut records: Vec<PolicyRecord> =
            self.policies.lock().unwrap().values().cloned().collect();
        // Default first, then queues by name, then kinds by name.
        records.sort_by(|a, b| {
            let rank = |scope: &PolicyScope| match scope {
                PolicyScope::Default => 0,
                PolicyScope::Queue(_) => 1,
                PolicyScope::Kind(_) => 2,
            };
            (rank(&a.scope), a.scope.as_parts().1).cmp(&(rank(&b.scope), b.scope.as_parts().1))
        });
        Ok(records)
    }
    async fn policy_set(&self, params: PolicySetParams) -> Result<(), StoreError> {
        self.enter("policy_set")?;
        params.validate()?;
        let record = PolicyRecord {
            scope: params.scope.clone(),
            policy: params.policy,
            updated_at: params.now.unwrap_or_else(Utc::now),
        };
        self.policies.lock().unwrap().insert(params.scope, record);
        Ok(())
    }
    async fn policy_delete(&self, params: PolicyDeleteParams) -> Result<bool, StoreError> {
        self.enter("policy_delete")?;
        params.validate()?;
        Ok(self
            .policies
            .lock()
            .unwrap()
            .remove(&params.scope)
            .is_some())
    }
}
