//! Pinned time and a staging factory that puts a job in any state purely through
//! [`Store`] operations, so every backend is staged the same way.
//!
//! Every staged job is enqueued and then claimed from its own queue with `limit = 1`,
//! and the claim is checked to have taken that job: stage jobs in a queue where they
//! are the head (their own queue, or before other due jobs are enqueued), or the
//! staging call panics and says so.

use std::sync::Arc;
use std::time::Duration;

use chrono::DateTime;
use revenant_core::decide::Failure;
use revenant_core::store::{
    CancelResult, CancelTarget, FailAction, Fenced, JobCancelParams, JobClaimParams,
    JobCompleteParams, JobEnqueueParams, JobFailParams, JobFailure, JobGetParams, JobListParams,
    LeaseRef,
};
use revenant_core::{DeadReason, FailureClass, Job, JobId, NewJob, Store, Timestamp};

/// The base time of every case: 2026-01-01T00:00:00Z, in whole milliseconds as stores
/// keep them.
pub const T0_MILLIS: i64 = 1_767_225_600_000;

/// The lease every staged claim takes unless told otherwise.
pub const LEASE: Duration = Duration::from_secs(30);

/// The worker every staged claim is made by unless told otherwise.
pub const WORKER: &str = "worker-a";

/// The attempt budget used when a job does not set its own.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 3;

/// The base time.
pub fn t0() -> Timestamp {
    DateTime::from_timestamp_millis(T0_MILLIS).expect("T0 is a valid time")
}

/// `t0 + secs` seconds (negative for before).
pub fn at(secs: i64) -> Timestamp {
    t0() + chrono::Duration::seconds(secs)
}

/// `t0 + ms` milliseconds.
pub fn at_ms(ms: i64) -> Timestamp {
    t0() + chrono::Duration::milliseconds(ms)
}

/// `n` seconds.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A job with an empty object payload.
pub fn job(queue: &str, kind: &str) -> NewJob {
    NewJob::new(queue, kind, serde_json::json!({}))
}

/// The lease of a claimed job.
pub fn lease_of(job: &Job) -> LeaseRef {
    LeaseRef {
        id: job.id,
        lease_token: job
            .lease_token
            .unwrap_or_else(|| panic!("job {} has no lease token: {job:?}", job.id)),
    }
}

/// A failure to record.
pub fn failure(class: FailureClass, message: &str) -> Failure {
    Failure {
        class,
        message: message.to_string(),
    }
}

/// One failed attempt of a claimed job, as the runtime hands it to `job_fail`.
pub fn failure_of(job: &Job, failure: Failure, action: FailAction) -> JobFailure {
    JobFailure {
        lease: lease_of(job),
        failure,
        action,
        worker: job.worker.clone(),
    }
}

/// A failure storm over claimed jobs, for one `job_fail` batch: one in four a
/// timeout, the rest transient, each retried in a minute.
pub fn failure_storm(jobs: &[Job]) -> Vec<JobFailure> {
    jobs.iter()
        .enumerate()
        .map(|(i, job)| {
            let class = if i % 4 == 0 {
                FailureClass::Timeout
            } else {
                FailureClass::Transient
            };
            failure_of(
                job,
                failure(class, "the provider said 503"),
                FailAction::Retry {
                    delay: Duration::from_secs(60),
                },
            )
        })
        .collect()
}

/// Claim params for `queue` by `worker` at `now` with [`LEASE`].
pub fn claim_params(queue: &str, worker: &str, limit: u32, now: Timestamp) -> JobClaimParams {
    JobClaimParams {
        queue: queue.to_string(),
        worker: worker.to_string(),
        limit,
        lease: LEASE,
        reclaim: true,
        now: Some(now),
    }
}

/// Stages jobs through a store with a pinned clock.
#[derive(Clone)]
pub struct Stage {
    store: Arc<dyn Store>,
}

impl Stage {
    /// A stage over `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Stage { store }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Enqueues `job` at `now` (default budget [`DEFAULT_MAX_ATTEMPTS`]).
    pub async fn enqueue_at(&self, job: NewJob, now: Timestamp) -> JobId {
        let out = self
            .store
            .job_enqueue(JobEnqueueParams {
                jobs: vec![job],
                default_max_attempts: DEFAULT_MAX_ATTEMPTS,
                now: Some(now),
            })
            .await
            .expect("enqueue");
        assert_eq!(out.len(), 1, "one job in, one result out");
        out[0].id
    }

    /// Enqueues `job` at [`t0`].
    pub async fn enqueue(&self, job: NewJob) -> JobId {
        self.enqueue_at(job, t0()).await
    }

    /// Reads a job that must exist.
    pub async fn get(&self, id: JobId) -> Job {
        self.store
            .job_get(JobGetParams { id })
            .await
            .expect("job_get")
            .unwrap_or_else(|| panic!("job {id} does not exist"))
    }

    /// Reads a job that may be gone.
    pub async fn find(&self, id: JobId) -> Option<Job> {
        self.store
            .job_get(JobGetParams { id })
            .await
            .expect("job_get")
    }

    /// Every job, newest first.
    pub async fn all(&self) -> Vec<Job> {
        self.store
            .job_list(JobListParams {
                limit: 10_000,
                ..JobListParams::default()
            })
            .await
            .expect("job_list")
    }

    /// Claims up to `limit` jobs of `queue` at `now` as [`WORKER`] with [`LEASE`].
    pub async fn claim(&self, queue: &str, limit: u32, now: Timestamp) -> Vec<Job> {
        self.claim_as(queue, WORKER, limit, now).await
    }

    /// Claims up to `limit` jobs of `queue` at `now` as `worker` with [`LEASE`].
    pub async fn claim_as(
        &self,
        queue: &str,
        worker: &str,
        limit: u32,
        now: Timestamp,
    ) -> Vec<Job> {
        self.store
            .job_claim(claim_params(queue, worker, limit, now))
            .await
            .expect("job_claim")
    }

    /// Claims exactly job `id` (it must be the head of its queue at `now`).
    pub async fn claim_id(&self, id: JobId, now: Timestamp, worker: &str) -> Job {
        let queue = self.get(id).await.queue;
        let claimed = self.claim_as(&queue, worker, 1, now).await;
        assert_eq!(
            claimed.iter().map(|j| j.id).collect::<Vec<_>>(),
            vec![id],
            "staging expected to claim job {id} from queue {queue:?} at {now}"
        );
        claimed.into_iter().next().expect("one job")
    }

    /// Enqueues `job` at `claimed_at` and claims it then: running, lease until
    /// `claimed_at + LEASE`, attempt 1.
    pub async fn running(&self, job: NewJob, claimed_at: Timestamp) -> Job {
        let id = self.enqueue_at(job, claimed_at).await;
        self.claim_id(id, claimed_at, WORKER).await
    }

    /// A running job whose lease expired `ago` before `now`.
    pub async fn running_expired(&self, job: NewJob, now: Timestamp, ago: Duration) -> Job {
        let ago = chrono::Duration::from_std(ago + LEASE).expect("small duration");
        self.running(job, now - ago).await
    }

    /// Records one failure of a claimed job at `now`.
    pub async fn fail(&self, job: &Job, failure: Failure, action: FailAction, now: Timestamp) {
        let result = self
            .store
            .job_fail(JobFailParams {
                kept: Vec::new(),
                failures: vec![failure_of(job, failure, action)],
                now: Some(now),
            })
            .await
            .expect("job_fail");
        assert_eq!(
            result,
            vec![Fenced::Applied],
            "staged failure of job {}",
            job.id
        );
    }

    /// Completes a claimed job at `now`.
    pub async fn complete(&self, job: &Job, now: Timestamp) {
        let result = self
            .store
            .job_complete(JobCompleteParams {
                kept: Vec::new(),
                leases: vec![lease_of(job)],
                now: Some(now),
            })
            .await
            .expect("job_complete");
        assert_eq!(
            result,
            vec![Fenced::Applied],
            "staged completion of job {}",
            job.id
        );
    }

    /// Ready, retrying: claimed at `failed_at`, failed transiently then, back at
    /// `failed_at + delay` with attempt 1 spent.
    pub async fn retrying(&self, job: NewJob, failed_at: Timestamp, delay: Duration) -> Job {
        let claimed = self.running(job, failed_at).await;
        self.fail(
            &claimed,
            failure(FailureClass::Transient, "503 service unavailable"),
            FailAction::Retry { delay },
            failed_at,
        )
        .await;
        self.get(claimed.id).await
    }

    /// Dead after every attempt failed transiently: the job's own `max_attempts` (or
    /// [`DEFAULT_MAX_ATTEMPTS`]) claims 10 s apart from `first_at`, each failing with
    /// "failure N", the last one dead with `attempts_exhausted`. Dead at
    /// `first_at + 10 s × (attempts − 1)`.
    pub async fn dead_after_attempts(&self, job: NewJob, first_at: Timestamp) -> Job {
        let max = job.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        let id = self.enqueue_at(job, first_at).await;
        let mut now = first_at;
        for attempt in 1..=max {
            let claimed = self.claim_id(id, now, WORKER).await;
            assert_eq!(claimed.attempts, attempt);
            let action = if attempt < max {
                FailAction::Retry { delay: secs(10) }
            } else {
                FailAction::Dead {
                    reason: DeadReason::AttemptsExhausted,
                }
            };
            self.fail(
                &claimed,
                failure(FailureClass::Transient, &format!("failure {attempt}")),
                action,
                now,
            )
            .await;
            if attempt < max {
                now += chrono::Duration::seconds(10);
            }
        }
        self.get(id).await
    }

    /// Dead at once at `at` with `reason` and `message` (claimed and failed at `at`).
    pub async fn dead(&self, job: NewJob, reason: DeadReason, message: &str, at: Timestamp) -> Job {
        let claimed = self.running(job, at).await;
        let class = match reason {
            DeadReason::Permanent => FailureClass::Permanent,
            DeadReason::AttemptsExhausted => FailureClass::Transient,
            DeadReason::LeaseExpired => FailureClass::LeaseExpired,
            DeadReason::DecodeError => FailureClass::DecodeError,
            DeadReason::UnknownKind => FailureClass::UnknownKind,
        };
        self.fail(
            &claimed,
            failure(class, message),
            FailAction::Dead { reason },
            at,
        )
        .await;
        self.get(claimed.id).await
    }

    /// Completed at `at` (claimed at `at`).
    pub async fn completed(&self, job: NewJob, at: Timestamp) -> Job {
        let claimed = self.running(job, at).await;
        self.complete(&claimed, at).await;
        self.get(claimed.id).await
    }

    /// Cancelled by an operator at `at` while ready (never claimed).
    pub async fn cancelled(&self, job: NewJob, at: Timestamp) -> Job {
        let id = self.enqueue_at(job, at).await;
        let result = self
            .store
            .job_cancel(JobCancelParams {
                target: CancelTarget::Id(id),
                message: None,
                now: Some(at),
            })
            .await
            .expect("job_cancel");
        assert_eq!(result, CancelResult::Cancelled, "staged cancel of job {id}");
        self.get(id).await
    }
}
