//! The one seam between the runtime and a database.
//!
//! Operations are named after the transition they make, noun first (`job_claim`,
//! `job_complete`, `queue_pause`). Each takes one params struct carrying
//! `now: Option<Timestamp>`: `None` in production (the backend's clock), pinned in
//! tests. Each returns domain types. A fenced update that matched nothing is a value
//! ([`Fenced::LeaseLost`]), never an error.
//!
//! Every backend runs the conformance suite (`revenant-conformance`) unchanged.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::decide::Failure;
use crate::error::StoreError;
use crate::job::{DeadReason, Job, JobId, JobState, LeaseToken, NewJob, Timestamp};

/// The result of a fenced transition of a running job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fenced {
    /// The job was running under this lease token; the transition was made.
    Applied,
    /// The job was not running under this token (reclaimed, released, cancelled,
    /// finished, or gone). Nothing changed.
    LeaseLost,
}

/// A claimed job's identity and lease: what every fenced call carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseRef {
    /// The job.
    pub id: JobId,
    /// The lease token the claim returned.
    pub lease_token: LeaseToken,
}

/// `job_enqueue`: insert one or many jobs, atomically (all or none).
#[derive(Debug, Clone)]
pub struct JobEnqueueParams {
    /// The jobs. Each is validated first; one bad job fails the call and writes none.
    pub jobs: Vec<NewJob>,
    /// Used for a job whose `max_attempts` is `None`.
    pub default_max_attempts: i32,
    /// The clock.
    pub now: Option<Timestamp>,
}

/// What `job_enqueue` did with one job, in input order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The new job's id, or the existing job's id when its unique key was taken.
    pub id: JobId,
    /// True when the unique key was already held and no job was inserted.
    pub duplicate: bool,
}

/// `job_claim`: lease up to `limit` claimable jobs of one queue.
///
/// A job is claimable when it is `ready` and due, or `running` with an expired lease,
/// its queue is not paused, and, if it has a group key, no other job of its group is
/// running and no earlier job of its group is ready. Higher priority first, then
/// earlier `run_at`, then lower id.
///
/// Each claimed job gets `attempts += 1`, a fresh lease token and
/// `lease_expires_at = now + lease`. An expired job with no attempt left is not
/// claimed but made dead with reason `lease_expired`. A reclaimed expired job gets a
/// `lease_expired` entry in its history for the attempt that was lost.
#[derive(Debug, Clone)]
pub struct JobClaimParams {
    /// The queue.
    pub queue: String,
    /// The claiming worker's id (recorded on the job).
    pub worker: String,
    /// At most this many jobs. Zero claims nothing.
    pub limit: u32,
    /// The lease length.
    pub lease: Duration,
    /// The clock.
    pub now: Option<Timestamp>,
}

/// `job_heartbeat`: extend a running job's lease to `now + lease`. Fenced.
#[derive(Debug, Clone)]
pub struct JobHeartbeatParams {
    /// The job and its lease.
    pub lease: LeaseRef,
    /// The new lease length from now.
    pub lease_for: Duration,
    /// The clock.
    pub now: Option<Timestamp>,
}

/// `job_complete`: running → completed, for many jobs in one call. Fenced per job.
#[derive(Debug, Clone)]
pub struct JobCompleteParams {
    /// The jobs and their leases.
    pub leases: Vec<LeaseRef>,
    /// The clock.
    pub now: Option<Timestamp>,
}

/// What to do with a failed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailAction {
    /// Back to `ready` at `now + delay`; the attempt stays spent.
    Retry {
        /// The delay.
        delay: Duration,
    },
    /// To `dead` with this reason.
    Dead {
        /// Why.
        reason: DeadReason,
    },
}

/// One failed attempt to record.
#[derive(Debug, Clone)]
pub struct JobFailure {
    /// The job and its lease.
    pub lease: LeaseRef,
    /// What to record in the error history.
    pub failure: Failure,
    /// Where the job goes.
    pub action: FailAction,
    /// The worker that ran the attempt (recorded in the history).
    pub worker: Option<String>,
}

/// `job_fail`: record failures and move each job to `ready` (retry) or `dead`. Fenced
/// per job. The history keeps the newest [`crate::ErrorEntry::HISTORY_LIMIT`] entries.
#[derive(Debug, Clone)]
pub struct JobFailParams {
    /// The failures.
    pub failures: Vec<JobFailure>,
    /// The clock.
    pub now: Option<Timestamp>,
}

/// `job_snooze`: running → ready at `now + delay`, attempt given back. Fenced.
#[derive(Debug, Clone)]
pub struct JobSnoozeParams {
    /// The job and its lease.
    pub lease: LeaseRef,
    /// How long to wait.
    pub delay: Duration,
    /// The clock.
    pub now: Option<Timestamp>,
}

/// `job_release`: running → ready at `now`, attempt given back (graceful shutdown).
/// Fenced per job.
#[derive(Debug, Clone)]
pub struct JobReleaseParams {
    /// The jobs and their leases.
    pub leases: Vec<LeaseRef>,
    /// The clock.
    pub now: Option<Timestamp>,
}

/// Who is cancelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelTarget {
    /// The handler of a running attempt: fenced on its lease.
    Lease(LeaseRef),
    /// An operator: any `ready` or `running` job with this id. A running job's
    /// handler finds its lease lost at its next heartbeat.
    Id(JobId),
}

/// `job_cancel`: ready or running → cancelled.
#[derive(Debug, Clone)]
pub struct JobCancelParams {
    /// Which job, and by whom.
    pub target: CancelTarget,
    /// Why; recorded in the history when given.
    pub message: Option<String>,
    /// The clock.
    pub now: Option<Timestamp>,
}

/// What `job_cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "result", content = "status")]
pub enum CancelResult {
    /// The job is now cancelled.
    Cancelled,
    /// The job is in a terminal state (given) and was left alone.
    NotCancellable(JobState),
    /// For a lease target: the lease was lost. Nothing changed.
    LeaseLost,
    /// No job with that id.
    NotFound,
}

/// `job_get`: one job with its whole error history.
#[derive(Debug, Clone)]
pub struct JobGetParams {
    /// The job.
    pub id: JobId,
}

/// A filter over jobs, shared by listing, dead-letter redrive and purge. Every field
/// narrows; an empty filter matches every job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobFilter {
    /// Only these ids.
    pub ids: Option<Vec<JobId>>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only these states.
    pub statuses: Option<Vec<JobState>>,
    /// Only this group.
    pub group_key: Option<String>,
    /// Only this correlation id.
    pub correlation_id: Option<String>,
    /// Only dead jobs with this reason.
    pub dead_reason: Option<DeadReason>,
    /// Only jobs whose last error message contains this text (case-sensitive).
    pub error_contains: Option<String>,
    /// Only jobs finished at or after this time.
    pub finished_after: Option<Timestamp>,
    /// Only jobs finished before this time.
    pub finished_before: Option<Timestamp>,
    /// Only dead jobs with this [`crate::fingerprint`] (12 hex digits).
    pub fingerprint: Option<String>,
}

/// `job_list`: jobs matching a filter, newest id first, paged by id.
#[derive(Debug, Clone)]
pub struct JobListParams {
    /// What to match.
    pub filter: JobFilter,
    /// Only jobs with an id below this (the last id of the previous page).
    pub before_id: Option<JobId>,
    /// At most this many (the store caps it at 10,000). Default 100.
    pub limit: u32,
}

impl Default for JobListParams {
    fn default() -> Self {
        JobListParams {
            filter: JobFilter::default(),
            before_id: None,
            limit: 100,
        }
    }
}

/// `job_sweep`: make dead (reason `lease_expired`) every running job whose lease
/// expired with no attempt left. Jobs with attempts left are left for `job_claim` to
/// reclaim. Returns the ids made dead.
#[derive(Debug, Clone, Default)]
pub struct JobSweepParams {
    /// The clock.
    pub now: Option<Timestamp>,
}

/// `job_redrive`: dead → ready for every dead job matching the filter (up to
/// `limit`), oldest first: attempts reset to 0, history kept, `redrives += 1`,
/// `dead_reason` and `fingerprint` cleared. The i-th job (from 0) gets
/// `run_at = start + i * spacing` (`start` is `start_at`, or now when that is absent
/// or past), so a rate-limited redrive is spread in the queue itself. A job that is no
/// longer dead is left alone. Returns the redriven ids in order.
///
/// In the same transaction, a redrive that moved at least one job writes an audit
/// record ([`RedriveRecord`], read with `redrive_history`): when, the filter, the
/// spacing, how many, the first and last id, and `actor`/`note`. Calls that share an
/// `audit_key` (the chunks of one large redrive) share one record: the first inserts
/// it, the later ones add their count and last id. A redrive that moved nothing writes
/// nothing.
#[derive(Debug, Clone, Default)]
pub struct JobRedriveParams {
    /// Which dead jobs (the store adds `status = dead`).
    pub filter: JobFilter,
    /// At most this many; `None` for all.
    pub limit: Option<u32>,
    /// Gap between consecutive redriven jobs' `run_at`; zero for all at once.
    pub spacing: Duration,
    /// The first job's `run_at`. Default (`None`) and any time in the past: now. A
    /// chunked redrive passes `first chunk's start + jobs so far * spacing` so the pace
    /// stays even across chunks.
    pub start_at: Option<Timestamp>,
    /// Who redrove (a user name, a ticket); recorded in the audit. Default none.
    pub actor: Option<String>,
    /// Why; recorded in the audit. Default none.
    pub note: Option<String>,
    /// Calls with the same key add to one audit record. Default none: each call
    /// records its own. Choose a key nobody else uses (the CLI uses time, pid and a
    /// random number).
    pub audit_key: Option<String>,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl JobRedriveParams {
    /// Checks the audit's free-text fields (`actor`, `note`, `audit_key`): one line
    /// each, no control characters, at most 1024 bytes. Every backend calls it first.
    pub fn validate(&self) -> Result<(), crate::InputError> {
        for (field, value) in [
            ("actor", &self.actor),
            ("note", &self.note),
            ("audit_key", &self.audit_key),
        ] {
            if let Some(value) = value {
                if value.chars().any(char::is_control) || value.len() > 1024 {
                    return Err(crate::InputError::new(
                        field,
                        "must be one line without control characters, at most 1024 bytes",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// One redrive, as the audit recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedriveRecord {
    /// The record's id (increasing).
    pub id: i64,
    /// When the redrive (its first chunk) ran.
    pub at: Timestamp,
    /// When its last chunk ran (equal to `at` for a single call).
    pub updated_at: Timestamp,
    /// The filter it was given (its first call's), with `status = dead` implied.
    pub filter: JobFilter,
    /// The gap between consecutive jobs' `run_at`, in milliseconds (0: all at once).
    pub spacing_ms: i64,
    /// Jobs moved back to ready.
    pub count: i64,
    /// The lowest id moved by the first call.
    pub first_job_id: JobId,
    /// The highest id moved by the last call.
    pub last_job_id: JobId,
    /// Who, when given.
    pub actor: Option<String>,
    /// Why, when given.
    pub note: Option<String>,
}

/// `redrive_history`: the audit records, newest first.
#[derive(Debug, Clone)]
pub struct RedriveHistoryParams {
    /// At most this many (the store caps it at 10,000). Default 50.
    pub limit: u32,
}

impl Default for RedriveHistoryParams {
    fn default() -> Self {
        RedriveHistoryParams { limit: 50 }
    }
}

/// `dead_fingerprints`: dead jobs matching the filter, grouped by fingerprint, the
/// largest group first (ties: the most recent last death first).
#[derive(Debug, Clone)]
pub struct DeadFingerprintsParams {
    /// Which dead jobs (the store adds `status = dead`).
    pub filter: JobFilter,
    /// At most this many groups (the store caps it at 10,000). Default 50.
    pub limit: u32,
}

impl Default for DeadFingerprintsParams {
    fn default() -> Self {
        DeadFingerprintsParams {
            filter: JobFilter::default(),
            limit: 50,
        }
    }
}

/// Dead jobs that died of one error, as `dead_fingerprints` groups them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FingerprintGroup {
    /// The fingerprint (empty for dead jobs written by a version without fingerprints
    /// and not yet backfilled).
    pub fingerprint: String,
    /// How many dead jobs carry it.
    pub count: i64,
    /// The earliest death (`finished_at`) among them.
    pub first_seen: Timestamp,
    /// The latest death among them.
    pub last_seen: Timestamp,
    /// Their kinds, sorted.
    pub kinds: Vec<String>,
    /// Their queues, sorted.
    pub queues: Vec<String>,
    /// One of them: the highest id.
    pub example_id: JobId,
    /// That job's last error message, as recorded.
    pub example_message: String,
    /// That message normalised ([`crate::fingerprint::normalize`]): what the group has
    /// in common.
    pub pattern: String,
}

/// `job_purge`: delete dead jobs matching the filter. Returns how many.
#[derive(Debug, Clone, Default)]
pub struct JobPurgeParams {
    /// Which dead jobs (the store adds `status = dead`).
    pub filter: JobFilter,
    /// At most this many; `None` for all.
    pub limit: Option<u32>,
}

/// `job_prune`: delete completed and cancelled jobs finished more than `retention`
/// ago, and failure-log records (see [`QueueStats::failed_last_interval`]) older than
/// that. Dead jobs are never pruned: they wait for an operator. Returns how many jobs.
#[derive(Debug, Clone)]
pub struct JobPruneParams {
    /// How long finished jobs are kept.
    pub retention: Duration,
    /// At most this many per call, so a large prune does not hold a long transaction.
    pub limit: u32,
    /// The clock.
    pub now: Option<Timestamp>,
}

/// `queue_pause` / `queue_resume`: stop or restart claims from a queue. Enqueues are
/// still accepted while paused. Pausing an unknown queue creates it, paused.
#[derive(Debug, Clone)]
pub struct QueuePauseParams {
    /// The queue.
    pub queue: String,
    /// The clock.
    pub now: Option<Timestamp>,
}

/// `queue_stats`: the four numbers, and more, for every known queue.
#[derive(Debug, Clone)]
pub struct QueueStatsParams {
    /// Only this queue; `None` for all.
    pub queue: Option<String>,
    /// A worker seen within this long counts as alive. Default 30 s.
    pub worker_alive_within: Duration,
    /// The window of `completed_last_interval` and `failed_last_interval`:
    /// `(now - interval, now]`. Default 60 s. Both counts are exact while the window
    /// is no longer than the prune retention (finished jobs and failure records
    /// older than that are gone); past it they are lower bounds.
    pub interval: Duration,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl Default for QueueStatsParams {
    fn default() -> Self {
        QueueStatsParams {
            queue: None,
            worker_alive_within: Duration::from_secs(30),
            interval: Duration::from_secs(60),
            now: None,
        }
    }
}

/// One queue's numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    /// The queue.
    pub queue: String,
    /// Claims are stopped.
    pub paused: bool,
    /// Depth: ready and due now.
    pub ready: i64,
    /// Ready but not yet due, never attempted (scheduled).
    pub scheduled: i64,
    /// Ready but not yet due, attempted before (waiting out a backoff).
    pub retrying: i64,
    /// Running (leased), including expired leases not yet reclaimed.
    pub running: i64,
    /// Completed and not yet pruned.
    pub completed: i64,
    /// Dead.
    pub dead: i64,
    /// Dead within the last hour.
    pub dead_last_hour: i64,
    /// Cancelled and not yet pruned.
    pub cancelled: i64,
    /// Age in seconds of the oldest due job (now − its `run_at`); 0 when none.
    pub oldest_due_age_secs: f64,
    /// Workers serving this queue that were seen within `worker_alive_within`.
    pub workers_alive: i64,
    /// When a job of this queue last completed (among jobs not yet pruned).
    pub last_completed_at: Option<Timestamp>,
    /// The window the two counts below cover, in seconds (`QueueStatsParams::interval`).
    #[serde(default)]
    pub interval_secs: f64,
    /// Jobs that completed within the window (exact: counted from the jobs
    /// themselves, which are kept until pruned).
    #[serde(default)]
    pub completed_last_interval: i64,
    /// Failed attempts recorded within the window: every `job_fail` (retried or
    /// dead) and every expired lease (reclaimed or made dead). Exact: each is one row
    /// of an append-only failure log written in the same transaction, pruned with
    /// finished jobs.
    #[serde(default)]
    pub failed_last_interval: i64,
}

/// `worker_heartbeat`: record that a worker is alive (insert or update).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerHeartbeatParams {
    /// The worker's id (unique per process; a restarted process may reuse it).
    pub worker: String,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: i64,
    /// The queues it serves.
    pub queues: Vec<String>,
    /// The clock.
    #[serde(skip)]
    pub now: Option<Timestamp>,
}

/// A worker in the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// The worker's id.
    pub worker: String,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: i64,
    /// The queues it serves.
    pub queues: Vec<String>,
    /// When it first registered (this incarnation).
    pub started_at: Timestamp,
    /// When it was last seen.
    pub last_seen_at: Timestamp,
}

/// `worker_remove`: drop a worker from the registry (clean shutdown), or every worker
/// not seen for `stale_after` (maintenance).
#[derive(Debug, Clone)]
pub enum WorkerRemoveParams {
    /// This worker.
    Worker(String),
    /// Every worker not seen for this long.
    StaleFor {
        /// The age.
        stale_after: Duration,
        /// The clock.
        now: Option<Timestamp>,
    },
}

/// What a backend can do beyond the common contract. The conformance suite checks a
/// capability's behaviour when it is declared and says aloud when it is not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// Several processes may share the database (PostgreSQL).
    pub multi_process: bool,
    /// Enqueue can join the caller's own transaction.
    pub transactional_enqueue: bool,
    /// Wake-ups cross processes (LISTEN/NOTIFY).
    pub cross_process_wakeup: bool,
}

/// The storage seam. Every method is one transition or one read; see each params
/// struct for the exact contract.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The backend's name (`sqlite`, `postgres`).
    fn backend(&self) -> &'static str;

    /// What the backend offers beyond the common contract.
    fn capabilities(&self) -> Capabilities;

    /// The store's clock (`now()` in PostgreSQL; the process clock for SQLite).
    async fn now(&self) -> Result<Timestamp, StoreError>;

    /// Waits until a job may have become claimable in `queue` (an enqueue, a retry, a
    /// release) or `timeout` passes. A hint, not a promise: callers still poll.
    async fn wait_for_jobs(&self, queue: &str, timeout: Duration);

    /// See [`JobEnqueueParams`].
    async fn job_enqueue(&self, params: JobEnqueueParams) -> Result<Vec<Enqueued>, StoreError>;
    /// See [`JobClaimParams`].
    async fn job_claim(&self, params: JobClaimParams) -> Result<Vec<Job>, StoreError>;
    /// See [`JobHeartbeatParams`].
    async fn job_heartbeat(&self, params: JobHeartbeatParams) -> Result<Fenced, StoreError>;
    /// See [`JobCompleteParams`]; one result per lease, in order.
    async fn job_complete(&self, params: JobCompleteParams) -> Result<Vec<Fenced>, StoreError>;
    /// See [`JobFailParams`]; one result per failure, in order.
    async fn job_fail(&self, params: JobFailParams) -> Result<Vec<Fenced>, StoreError>;
    /// See [`JobSnoozeParams`].
    async fn job_snooze(&self, params: JobSnoozeParams) -> Result<Fenced, StoreError>;
    /// See [`JobReleaseParams`]; one result per lease, in order.
    async fn job_release(&self, params: JobReleaseParams) -> Result<Vec<Fenced>, StoreError>;
    /// See [`JobCancelParams`].
    async fn job_cancel(&self, params: JobCancelParams) -> Result<CancelResult, StoreError>;
    /// See [`JobGetParams`].
    async fn job_get(&self, params: JobGetParams) -> Result<Option<Job>, StoreError>;
    /// See [`JobListParams`].
    async fn job_list(&self, params: JobListParams) -> Result<Vec<Job>, StoreError>;
    /// See [`JobSweepParams`].
    async fn job_sweep(&self, params: JobSweepParams) -> Result<Vec<JobId>, StoreError>;
    /// See [`JobRedriveParams`].
    async fn job_redrive(&self, params: JobRedriveParams) -> Result<Vec<JobId>, StoreError>;
    /// See [`JobPurgeParams`].
    async fn job_purge(&self, params: JobPurgeParams) -> Result<u64, StoreError>;
    /// See [`DeadFingerprintsParams`].
    async fn dead_fingerprints(
        &self,
        params: DeadFingerprintsParams,
    ) -> Result<Vec<FingerprintGroup>, StoreError>;
    /// See [`RedriveHistoryParams`].
    async fn redrive_history(
        &self,
        params: RedriveHistoryParams,
    ) -> Result<Vec<RedriveRecord>, StoreError>;
    /// See [`JobPruneParams`].
    async fn job_prune(&self, params: JobPruneParams) -> Result<u64, StoreError>;
    /// See [`QueuePauseParams`].
    async fn queue_pause(&self, params: QueuePauseParams) -> Result<(), StoreError>;
    /// See [`QueuePauseParams`].
    async fn queue_resume(&self, params: QueuePauseParams) -> Result<(), StoreError>;
    /// See [`QueueStatsParams`]. Queues are listed by name.
    async fn queue_stats(&self, params: QueueStatsParams) -> Result<Vec<QueueStats>, StoreError>;
    /// See [`WorkerHeartbeatParams`].
    async fn worker_heartbeat(&self, params: WorkerHeartbeatParams) -> Result<(), StoreError>;
    /// Every worker in the registry.
    async fn worker_list(&self) -> Result<Vec<WorkerInfo>, StoreError>;
    /// See [`WorkerRemoveParams`]. Returns how many were removed.
    async fn worker_remove(&self, params: WorkerRemoveParams) -> Result<u64, StoreError>;
}
