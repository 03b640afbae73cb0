//! What the API answers with: the JSON shapes of `openapi.json`'s schemas, built from
//! the core's types. Kept apart from the core's own serde so the API can name things
//! for HTTP clients (`state`, `attempt`) without changing what the CLI prints.

use revenant::store::{FingerprintGroup, QueueStats, WorkerInfo};
use revenant::{DeadReason, ErrorEntry, FailureClass, Job, JobState, Timestamp};
use serde::Serialize;

/// One failed attempt (schema `ErrorEntry`).
#[derive(Debug, Clone, Serialize)]
pub struct ErrorView {
    /// Which attempt.
    pub attempt: i32,
    /// When.
    pub at: Timestamp,
    /// What kind of failure.
    pub class: FailureClass,
    /// The message.
    pub message: String,
    /// The worker, when known.
    pub worker: Option<String>,
}

impl From<&ErrorEntry> for ErrorView {
    fn from(entry: &ErrorEntry) -> Self {
        ErrorView {
            attempt: entry.attempt,
            at: entry.at,
            class: entry.class,
            message: entry.message.clone(),
            worker: entry.worker.clone(),
        }
    }
}

/// A job with its history (schema `Job`). The lease token is left out: it belongs to
/// the worker holding the lease.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    /// The id.
    pub id: i64,
    /// The queue.
    pub queue: String,
    /// The kind.
    pub kind: String,
    /// The payload.
    pub payload: serde_json::Value,
    /// The state.
    pub state: JobState,
    /// The priority.
    pub priority: i32,
    /// Attempts made, counted at claim.
    pub attempt: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// When it becomes (or became) claimable.
    pub run_at: Timestamp,
    /// When it was enqueued.
    pub created_at: Timestamp,
    /// When its current or last attempt was claimed.
    pub attempted_at: Option<Timestamp>,
    /// When it reached a terminal state.
    pub finished_at: Option<Timestamp>,
    /// When the current lease runs out, while running.
    pub lease_expires_at: Option<Timestamp>,
    /// The worker holding (or that last held) the lease.
    pub worker: Option<String>,
    /// The FIFO group.
    pub group_key: Option<String>,
    /// The idempotency key.
    pub unique_key: Option<String>,
    /// The correlation id.
    pub correlation_id: Option<String>,
    /// Why it is dead, while it is.
    pub dead_reason: Option<DeadReason>,
    /// The fingerprint of the error it died of, while dead.
    pub fingerprint: Option<String>,
    /// The newest history entry.
    pub last_error: Option<ErrorView>,
    /// Every failed attempt, oldest first.
    pub errors: Vec<ErrorView>,
    /// Times redriven.
    pub redrives: i32,
}

impl From<Job> for JobView {
    fn from(job: Job) -> Self {
        JobView {
            id: job.id,
            queue: job.queue,
            kind: job.kind,
            payload: job.payload,
            state: job.status,
            priority: job.priority,
            attempt: job.attempts,
            max_attempts: job.max_attempts,
            run_at: job.run_at,
            created_at: job.created_at,
            attempted_at: job.attempted_at,
            finished_at: job.finished_at,
            lease_expires_at: job.lease_expires_at,
            worker: job.worker,
            group_key: job.group_key,
            unique_key: job.unique_key,
            correlation_id: job.correlation_id,
            dead_reason: job.dead_reason,
            fingerprint: job.fingerprint,
            last_error: job.last_error.as_ref().map(ErrorView::from),
            errors: job.errors.iter().map(ErrorView::from).collect(),
            redrives: job.redrives,
        }
    }
}

/// A page of jobs (schema `JobList`).
#[derive(Debug, Serialize)]
pub struct JobList {
    /// The jobs, newest first.
    pub jobs: Vec<JobView>,
    /// The `before` of the next page; `None` on the last one.
    pub next_before: Option<i64>,
}

impl JobList {
    /// A page from a store answer to a request for `limit` jobs.
    pub fn page(jobs: Vec<Job>, limit: u32) -> Self {
        let next_before = match jobs.last() {
            Some(last) if jobs.len() as u32 == limit => Some(last.id),
            _ => None,
        };
        JobList {
            jobs: jobs.into_iter().map(JobView::from).collect(),
            next_before,
        }
    }
}

/// A job as a claim hands it to a remote worker (schema `ClaimedJob`).
#[derive(Debug, Clone, Serialize)]
pub struct ClaimedJob {
    /// The id.
    pub id: i64,
    /// The queue.
    pub queue: String,
    /// The kind.
    pub kind: String,
    /// The payload.
    pub payload: serde_json::Value,
    /// This attempt's number (1 for the first).
    pub attempt: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// The priority.
    pub priority: i32,
    /// The proof of the lease: every call about this attempt carries it.
    pub lease_token: i64,
    /// When the lease runs out unless heartbeated.
    pub lease_expires_at: Timestamp,
    /// When the job became due.
    pub run_at: Timestamp,
    /// When it was enqueued.
    pub created_at: Timestamp,
    /// The FIFO group.
    pub group_key: Option<String>,
    /// The idempotency key.
    pub unique_key: Option<String>,
    /// The correlation id.
    pub correlation_id: Option<String>,
    /// Times redriven.
    pub redrives: i32,
    /// Earlier attempts' failures, oldest first.
    pub errors: Vec<ErrorView>,
}

impl ClaimedJob {
    /// The claimed view of a job a claim returned; `None` if it somehow carries no
    /// lease (a store bug: such a job is left for its lease to expire).
    pub fn from_claim(job: Job) -> Option<Self> {
        Some(ClaimedJob {
            lease_token: job.lease_token?.0,
            lease_expires_at: job.lease_expires_at?,
            errors: job.errors.iter().map(ErrorView::from).collect(),
            id: job.id,
            queue: job.queue,
            kind: job.kind,
            payload: job.payload,
            attempt: job.attempts,
            max_attempts: job.max_attempts,
            priority: job.priority,
            run_at: job.run_at,
            created_at: job.created_at,
            group_key: job.group_key,
            unique_key: job.unique_key,
            correlation_id: job.correlation_id,
            redrives: job.redrives,
        })
    }
}

/// One queue's numbers (schema `Queue`).
#[derive(Debug, Clone, Serialize)]
pub struct QueueView {
    /// The queue.
    pub name: String,
    /// Claims are stopped.
    pub paused: bool,
    /// Ready and due now.
    pub depth: i64,
    /// Milliseconds the oldest due job has waited; `None` when none is due.
    pub oldest_due_age: Option<i64>,
    /// Dead.
    pub dead: i64,
    /// Dead within the last hour.
    pub dead_last_hour: i64,
    /// Running.
    pub running: i64,
    /// Not yet due, never attempted.
    pub scheduled: i64,
    /// Not yet due, waiting out a backoff.
    pub retrying: i64,
    /// Completed, not yet pruned.
    pub completed: i64,
    /// Cancelled, not yet pruned.
    pub cancelled: i64,
    /// Workers serving the queue seen recently.
    pub workers_alive: i64,
    /// When a job last completed.
    pub last_completed_at: Option<Timestamp>,
    /// Completed in the last minute.
    pub completed_last_minute: i64,
    /// Failed attempts in the last minute.
    pub failed_last_minute: i64,
}

impl From<QueueStats> for QueueView {
    fn from(q: QueueStats) -> Self {
        QueueView {
            oldest_due_age: (q.ready > 0).then(|| (q.oldest_due_age_secs * 1000.0).round() as i64),
            name: q.queue,
            paused: q.paused,
            depth: q.ready,
            dead: q.dead,
            dead_last_hour: q.dead_last_hour,
            running: q.running,
            scheduled: q.scheduled,
            retrying: q.retrying,
            completed: q.completed,
            cancelled: q.cancelled,
            workers_alive: q.workers_alive,
            last_completed_at: q.last_completed_at,
            completed_last_minute: q.completed_last_interval,
            failed_last_minute: q.failed_last_interval,
        }
    }
}

/// A worker in the registry (schema `Worker`).
#[derive(Debug, Clone, Serialize)]
pub struct WorkerView {
    /// Its id.
    pub worker: String,
    /// Its host (for a remote worker: the address its last claim came from).
    pub host: String,
    /// Its process id (0 for a remote worker).
    pub pid: i64,
    /// The queues it serves.
    pub queues: Vec<String>,
    /// When it registered.
    pub started_at: Timestamp,
    /// When it was last seen.
    pub last_seen_at: Timestamp,
    /// Seen within the liveness window.
    pub alive: bool,
}

impl WorkerView {
    /// The view of a registry entry, alive when seen at or after `alive_since`.
    pub fn new(info: WorkerInfo, alive_since: Timestamp) -> Self {
        WorkerView {
            alive: info.last_seen_at >= alive_since,
            worker: info.worker,
            host: info.host,
            pid: info.pid,
            queues: info.queues,
            started_at: info.started_at,
            last_seen_at: info.last_seen_at,
        }
    }
}

/// Dead jobs of one error (schema `Fingerprint`).
#[derive(Debug, Clone, Serialize)]
pub struct FingerprintView {
    /// The fingerprint.
    pub fingerprint: String,
    /// How many dead jobs carry it.
    pub count: i64,
    /// One of them's last error message.
    pub sample_error: String,
    /// The message normalised.
    pub pattern: String,
    /// The first of `kinds`.
    pub kind: String,
    /// The first of `queues`.
    pub queue: String,
    /// Their kinds.
    pub kinds: Vec<String>,
    /// Their queues.
    pub queues: Vec<String>,
    /// The sample's job id.
    pub example_id: i64,
    /// The earliest death.
    pub first_dead_at: Timestamp,
    /// The latest death.
    pub last_dead_at: Timestamp,
}

impl From<FingerprintGroup> for FingerprintView {
    fn from(group: FingerprintGroup) -> Self {
        FingerprintView {
            fingerprint: group.fingerprint,
            count: group.count,
            sample_error: group.example_message,
            pattern: group.pattern,
            kind: group.kinds.first().cloned().unwrap_or_default(),
            queue: group.queues.first().cloned().unwrap_or_default(),
            kinds: group.kinds,
            queues: group.queues,
            example_id: group.example_id,
            first_dead_at: group.first_seen,
            last_dead_at: group.last_seen,
        }
    }
}
