//! The one seam between the runtime and a database.
//!
//! Operations are named after the transition they make, noun first (`job_claim`,
//! `job_complete`, `queue_pause`). Each takes one params struct carrying
//! `now: Option<Timestamp>`: `None` in production (the backend's clock), pinned in
//! tests. Each returns domain types. A fenced update that matched nothing is a value
//! ([`Fenced::LeaseLost`]), never an error.
//!
//! Every backend runs the conformance suite (`revenant-conformance`) unchanged.
//!
//! # Nothing unreadable gets written
//!
//! Every params struct has a `validate()` that every backend calls first, before it
//! touches the database. It range-checks every time and duration the call carries:
//! times in the years 1970 to 9999 ([`crate::job::check_timestamp`]), leases above
//! zero and at most [`NewJob::MAX_DELAY`], windows at most [`MAX_WINDOW`], a
//! redrive's spacing at most [`MAX_SPACING`]. A time a backend writes is either one
//! of those or `now` plus a bounded duration, so no write can produce a row a later
//! read cannot decode. Reads that list rows skip (and log) a row that still cannot be
//! decoded, written by hand or by an older version, instead of failing the page.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::decide::Failure;
use crate::dependency::{
    BreakerAction, Decision, DependencyPolicy, DependencyRecord, DependencyState, PermitInput,
    ProbeOutcome, WaitReason,
};
use crate::error::StoreError;
use crate::job::{
    check_timestamp, ClaimedJob, DeadReason, Job, JobId, JobState, LeaseToken, NewJob, Timestamp,
};
use crate::{InputError, RetryPolicy};

/// The longest gap a paced redrive may leave between two jobs: one hour. A redrive
/// slower than one job an hour is not a redrive anyone waits for, and a spacing read
/// in the wrong unit (`--rate 1e-15`: one job every 31 million years) would write a
/// `run_at` no store can read back.
pub const MAX_SPACING: Duration = Duration::from_secs(3600);

/// The longest look-back a read or a clean-up accepts (a retention, a stats window, a
/// stale-worker age): ten years, the limit of [`crate::duration::parse`].
pub const MAX_WINDOW: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// How many jobs an unlimited redrive (`limit: None`) is assumed to move when its
/// spacing is checked: ten million. `start + spacing * MAX_UNLIMITED_REDRIVE` must
/// stay in range, which with the largest spacing leaves more than a thousand years.
pub const MAX_UNLIMITED_REDRIVE: u32 = 10_000_000;

/// A duration in whole milliseconds, as every backend stores time, saturating at
/// `i64::MAX`. Callers validate the duration first; the saturation is a guard, not a
/// behaviour anyone should rely on.
///
/// ```
/// use std::time::Duration;
/// use revenant_core::store::millis;
/// assert_eq!(millis(Duration::from_micros(1_500)), 1);
/// assert_eq!(millis(Duration::MAX), i64::MAX);
/// ```
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A retry or snooze delay as stores apply it: at most [`NewJob::MAX_DELAY`]. Longer
/// is a unit mistake or an unbounded backoff cap; the job's failure or snooze must
/// still be recorded (refusing it would leave the job running until its lease runs
/// out), so it is held at 365 days rather than refused.
pub fn held_delay(delay: Duration) -> Duration {
    delay.min(NewJob::MAX_DELAY)
}

/// Checks a pinned clock (`now`) against the timestamp range.
fn check_now(now: Option<Timestamp>) -> Result<(), InputError> {
    now.map_or(Ok(()), |now| check_timestamp("now", now))
}

/// Checks a lease length: above zero, at most [`NewJob::MAX_DELAY`].
fn check_lease(field: &'static str, lease: Duration) -> Result<(), InputError> {
    if lease.is_zero() {
        return Err(InputError::new(field, "must be longer than zero"));
    }
    if lease > NewJob::MAX_DELAY {
        return Err(InputError::new(field, "must be at most 365 days"));
    }
    Ok(())
}

/// Checks a look-back window: at most [`MAX_WINDOW`].
fn check_window(field: &'static str, window: Duration) -> Result<(), InputError> {
    if window > MAX_WINDOW {
        return Err(InputError::new(
            field,
            format!(
                "{} is longer than ten years",
                crate::duration::format(window)
            ),
        ));
    }
    Ok(())
}

/// Checks that `start + spacing * steps` stays in the timestamp range.
fn check_span(
    field: &'static str,
    start: Timestamp,
    spacing: Duration,
    steps: u32,
) -> Result<(), InputError> {
    let end = start
        .timestamp_millis()
        .saturating_add(millis(spacing).saturating_mul(i64::from(steps)));
    if end > crate::job::MAX_TIMESTAMP_MILLIS {
        return Err(InputError::new(
            field,
            format!(
                "{} between {steps} jobs from {start} runs past the year 9999",
                crate::duration::format(spacing)
            ),
        ));
    }
    Ok(())
}

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

impl JobEnqueueParams {
    /// Checks the default attempt count, every job ([`NewJob::validate`]) and the
    /// clock. Every backend calls it first: one bad job writes nothing.
    pub fn validate(&self) -> Result<(), InputError> {
        if !(1..=NewJob::MAX_ATTEMPTS).contains(&self.default_max_attempts) {
            return Err(InputError::new(
                "max_attempts",
                format!(
                    "default {} is out of range; use 1..={}",
                    self.default_max_attempts,
                    NewJob::MAX_ATTEMPTS
                ),
            ));
        }
        self.jobs.iter().try_for_each(NewJob::validate)?;
        check_now(self.now)
    }
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
///
/// A claim takes at most one expired lease, and none when `reclaim` is false: the jobs
/// a crashed process held expire together, and reclaimed in one batch they would share
/// a process again, so a job that crashes its worker would take the same neighbours
/// down with it on every attempt. The runtime claims with `reclaim: false` while it
/// runs a job it reclaimed (see the fetcher).
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
    /// Take an expired lease (at most one) as well as ready jobs. Usually true.
    pub reclaim: bool,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl JobClaimParams {
    /// Checks the queue, the worker, the lease (above zero, at most 365 days) and the
    /// clock. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        crate::names::validate_name("queue", &self.queue)?;
        crate::names::validate_key("worker", &self.worker)?;
        check_lease("lease", self.lease)?;
        check_now(self.now)
    }
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

impl JobHeartbeatParams {
    /// Checks the lease length (above zero, at most 365 days) and the clock. Every
    /// backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        check_lease("lease_for", self.lease_for)?;
        check_now(self.now)
    }
}

/// `job_complete`: running → completed, for many jobs in one call. Fenced per job.
#[derive(Debug, Clone)]
pub struct JobCompleteParams {
    /// The jobs and their leases.
    pub leases: Vec<LeaseRef>,
    /// Failed attempts of these jobs that their worker kept and has not written yet
    /// ([`KeptFailure`]), recorded with the completion.
    pub kept: Vec<KeptFailure>,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl JobCompleteParams {
    /// Checks the clock and the kept failures ([`KeptFailure::check`]). Every backend
    /// calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        KeptFailure::check(&self.kept, self.leases.iter().map(|lease| lease.id))?;
        check_now(self.now)
    }
}

/// A failed attempt of a job its worker kept for a short retry (see
/// [`FailAction::Keep`]), not written when it failed but with the job's next write:
/// its completion, its next failure, or (at shutdown, or when the kept job waited too
/// long) its release, written as a retry of its last failure.
///
/// Written one by one, each kept failure was a write of the job's row of its own, and
/// a drain where three jobs in ten fail ran at 0.66 to 0.80 of a clean one on
/// PostgreSQL, 0.62 to 0.69 on SQLite (docs/benchmarks.md, W2). Carried, a job that
/// fails and passes on its kept retry is one write. The cost: a failure is seen by an
/// operator only when the job's next attempt ends, and a worker that dies in between
/// loses it, as it loses the result of an attempt it ran and did not write; the
/// attempts it counted are not counted either, so the job may run more attempts than
/// its `max_attempts` in all (one crash's worth of kept retries at most).
///
/// A backend applies a job's kept failures in the order given, before the batch's
/// own entry for the job and only if the job holds its lease, as if each had been
/// written as [`FailAction::Keep`] in turn: each is an entry of the history, as given,
/// and counts one attempt.
///
/// **The worker numbers and times them.** A kept failure carries its attempt and its
/// time, and the backend writes them as they are: on PostgreSQL, an entry built in the
/// statement from an age (the clock less it, numbered from the stored attempts) cost
/// as much as the rest of a completion of hundreds put together (W2 at 5,000 jobs:
/// completions took 37 ms in all clean and 61 ms failing). So that a wrong number
/// cannot slip into a history, the attempt fences the write as the lease token does:
/// a job's first kept failure must be numbered as the job's stored attempts (the
/// attempt its claim counted, which nothing else changes while the lease holds), or
/// nothing of the job is written and its result is a lost lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptFailure {
    /// The job: one of the batch's.
    pub id: JobId,
    /// The attempt that failed. A job's kept failures are consecutive, the first
    /// numbered as its stored attempts.
    pub attempt: i32,
    /// When it failed, on the store's clock: the worker counts it from the time its
    /// claim took the job (`attempted_at`), with its own monotonic clock from when the
    /// claim's answer came, so it is never later than the failure and the history
    /// keeps one clock. In the years 1970 to 9999 ([`check_timestamp`]).
    pub at: Timestamp,
    /// What to record in the error history.
    pub failure: Failure,
    /// The worker that ran the attempt.
    pub worker: Option<String>,
}

impl KeptFailure {
    /// Checks that every kept failure is of a job in the batch (`ids`), so none is
    /// dropped unwritten without a word; that a job's kept failures are numbered one
    /// after the other from at least 1; and that each time is in range.
    pub fn check(kept: &[KeptFailure], ids: impl Iterator<Item = JobId>) -> Result<(), InputError> {
        if kept.is_empty() {
            return Ok(());
        }
        // Hashed with foldhash, sized up front: a batch's ids are the store's own, and
        // SipHash over a batch of 500 cost about 500 instructions a job of the
        // worker's (callgrind, W2's failing drain).
        let mut batch: foldhash::HashSet<JobId> =
            foldhash::HashSetExt::with_capacity(ids.size_hint().0);
        batch.extend(ids);
        let mut last: foldhash::HashMap<JobId, i32> =
            foldhash::HashMapExt::with_capacity(kept.len());
        for failure in kept {
            let refuse = |why: String| {
                Err(InputError::new(
                    "kept",
                    format!("a kept failure of job {} {why}", failure.id),
                ))
            };
            if !batch.contains(&failure.id) {
                return refuse("is not of a job in the batch".into());
            }
            match last.insert(failure.id, failure.attempt) {
                None if failure.attempt < 1 => {
                    return refuse(format!(
                        "is numbered {}: attempts count from 1",
                        failure.attempt
                    ));
                }
                Some(before) if before.checked_add(1) != Some(failure.attempt) => {
                    return refuse(format!(
                        "is numbered {} after {before}: a job's kept failures are consecutive",
                        failure.attempt
                    ));
                }
                _ => {}
            }
            if check_timestamp("kept", failure.at).is_err() {
                return refuse(format!(
                    "failed at {}, out of range: use a time in the years 1970 to 9999",
                    failure.at
                ));
            }
        }
        Ok(())
    }
}

/// What to do with a failed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailAction {
    /// Back to `ready` at `now + delay`; the attempt stays spent.
    Retry {
        /// The delay. Held at [`NewJob::MAX_DELAY`] (see [`held_delay`]), not refused.
        delay: Duration,
    },
    /// To `dead` with this reason.
    Dead {
        /// Why.
        reason: DeadReason,
    },
    /// A retry the worker that holds the lease keeps: the job stays `running` under
    /// the same lease, the failed attempt is recorded, and the next attempt is counted
    /// at once (`attempts += 1`, `attempted_at = now + delay`), as a claim counts it.
    /// The worker runs that attempt itself once `delay` has passed, without a claim,
    /// or releases the job (the attempt given back) if it cannot.
    ///
    /// For the in-process runtime's short retries (see `revenant-runtime`'s executor),
    /// not for a remote worker: a job kept by a worker that dies is reclaimed when its
    /// lease expires, with the counted attempt spent, as a job claimed ahead is. The
    /// runtime mostly does not write a kept failure on its own but carries it to the
    /// job's next write ([`KeptFailure`]); it writes `Keep` for those it carries when
    /// the next attempt outlasts its first heartbeat, or ends in a snooze or a cancel. A
    /// departure from the state table (running → ready on a transient failure): the
    /// job never shows `ready` for the milliseconds of its backoff. The update changes
    /// no indexed column, so on PostgreSQL it is a heap-only update (no index entries).
    Keep {
        /// When the next attempt is due. Held at [`NewJob::MAX_DELAY`] (see
        /// [`held_delay`]), not refused.
        delay: Duration,
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

/// `job_fail`: record failures and move each job to `ready` (retry) or `dead`, or keep
/// it `running` for its next attempt ([`FailAction::Keep`]). Fenced per job. The history keeps the newest [`crate::ErrorEntry::HISTORY_LIMIT`] entries.
#[derive(Debug, Clone)]
pub struct JobFailParams {
    /// The failures.
    pub failures: Vec<JobFailure>,
    /// Earlier failed attempts of these jobs that their worker kept and has not
    /// written yet ([`KeptFailure`]), recorded before the batch's own.
    pub kept: Vec<KeptFailure>,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl JobFailParams {
    /// Checks the clock and the kept failures ([`KeptFailure::check`]). A retry delay
    /// is not refused but held at 365 days ([`held_delay`]), so `now + delay` stays in
    /// range. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        KeptFailure::check(&self.kept, self.failures.iter().map(|f| f.lease.id))?;
        check_now(self.now)
    }
}

/// `job_snooze`: running → ready at `now + delay`, attempt given back. Fenced.
#[derive(Debug, Clone)]
pub struct JobSnoozeParams {
    /// The job and its lease.
    pub lease: LeaseRef,
    /// How long to wait. Held at [`NewJob::MAX_DELAY`] ([`held_delay`]), not refused.
    pub delay: Duration,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl JobSnoozeParams {
    /// Checks the clock (the delay is held, see [`held_delay`]). Every backend calls it
    /// first.
    pub fn validate(&self) -> Result<(), InputError> {
        check_now(self.now)
    }
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

impl JobReleaseParams {
    /// Checks the clock. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        check_now(self.now)
    }
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

impl JobCancelParams {
    /// Checks the message (no control characters but newline and tab) and the clock.
    /// Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        if let Some(message) = &self.message {
            if message
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
            {
                return Err(InputError::new(
                    "message",
                    "must not contain control characters",
                ));
            }
        }
        check_now(self.now)
    }
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

impl JobFilter {
    /// Checks the queue and kind names and the finished range's times. Every operation
    /// that takes a filter checks it first.
    pub fn validate(&self) -> Result<(), InputError> {
        if let Some(queue) = &self.queue {
            crate::names::validate_name("queue", queue)?;
        }
        if let Some(kind) = &self.kind {
            crate::names::validate_name("kind", kind)?;
        }
        if let Some(at) = self.finished_after {
            check_timestamp("finished_after", at)?;
        }
        if let Some(at) = self.finished_before {
            check_timestamp("finished_before", at)?;
        }
        Ok(())
    }
}

/// `job_list`: jobs matching a filter, newest id first, paged by id.
///
/// A row that cannot be decoded (a state this version does not know, a history that
/// is not JSON: written by hand or by another version) is skipped and logged at error
/// level with its id, so one bad row does not hide every other job; `job_get` of that
/// id still fails with [`StoreError::Corrupt`] naming it.
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

impl JobListParams {
    /// Checks the filter. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        self.filter.validate()
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

impl JobSweepParams {
    /// Checks the clock. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        check_now(self.now)
    }
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
    /// Gap between consecutive redriven jobs' `run_at`; zero for all at once. At most
    /// [`MAX_SPACING`] (one hour), and the last job's `run_at` must fall before the
    /// year 10000 (see [`JobRedriveParams::validate`]).
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
    /// Checks the filter; the times (`start_at`, `now`); the spacing: at most
    /// [`MAX_SPACING`], and `start + spacing * limit` in range (`start` is the later of
    /// `start_at` and `now`, the process clock when neither is pinned; an unlimited
    /// redrive counts as [`MAX_UNLIMITED_REDRIVE`] jobs), refused with field `spacing`;
    /// and the audit's free-text fields (`actor`, `note`, `audit_key`): one line each,
    /// no control characters, at most 1024 bytes. Every backend calls it first, so a
    /// refused redrive moves nothing.
    pub fn validate(&self) -> Result<(), crate::InputError> {
        self.filter.validate()?;
        check_now(self.now)?;
        if let Some(at) = self.start_at {
            check_timestamp("start_at", at)?;
        }
        if self.spacing > MAX_SPACING {
            return Err(InputError::new(
                "spacing",
                format!(
                    "{} is longer than the limit of 1h; a paced redrive goes at least one job an hour",
                    crate::duration::format(self.spacing)
                ),
            ));
        }
        let now = self.now.unwrap_or_else(chrono::Utc::now);
        let start = self.start_at.map_or(now, |at| at.max(now));
        let steps = self
            .limit
            .unwrap_or(MAX_UNLIMITED_REDRIVE)
            .saturating_sub(1);
        check_span("spacing", start, self.spacing, steps)?;
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

impl DeadFingerprintsParams {
    /// Checks the filter. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        self.filter.validate()
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
    /// That message normalised under the rules the fingerprint was made with
    /// ([`crate::fingerprint::pattern`]): what the group has in common, the grouped
    /// form `revenant dead fingerprints` and the dashboard show.
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

impl JobPurgeParams {
    /// Checks the filter. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        self.filter.validate()
    }
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

impl JobPruneParams {
    /// Checks the retention (at most [`MAX_WINDOW`]) and the clock. Every backend
    /// calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        check_window("retention", self.retention)?;
        check_now(self.now)
    }
}

/// `job_vacuum`: reclaim the jobs table's dead row versions now, when enough have piled
/// up, rather than wait for the database's own schedule.
///
/// Every job leaves dead row versions behind (its claim and its settlement are
/// updates), and until a vacuum removes them every claim steps over their index
/// entries. PostgreSQL's autovacuum visits a database once a minute by default (a
/// server setting), so at thousands of jobs a second each pass has a minute of dead
/// rows to clear and a growing table to read; the claims slow while it runs. The
/// runtime's maintenance calls this every few seconds, so each pass is short.
///
/// Cheap when there is nothing to do: one read of the table's statistics. Never waits
/// on another vacuum of the table: with one running (another worker's, or the
/// server's), it returns [`JobVacuumed::Busy`]. A backend that reclaims space by
/// itself (SQLite reuses freed pages) returns [`JobVacuumed::NotApplicable`].
#[derive(Debug, Clone, PartialEq)]
pub struct JobVacuumParams {
    /// Vacuum only with at least this many dead rows...
    pub min_dead_rows: u64,
    /// ...and at least this fraction of the live rows dead (0.01 is 1%), so a large
    /// table with little churn is not read in full for a few dead rows.
    pub min_dead_fraction: f64,
}

impl JobVacuumParams {
    /// Checks the fraction (finite, from 0 to 1). Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        if !self.min_dead_fraction.is_finite() || !(0.0..=1.0).contains(&self.min_dead_fraction) {
            return Err(InputError::new(
                "min_dead_fraction",
                format!("{} is not a fraction from 0 to 1", self.min_dead_fraction),
            ));
        }
        Ok(())
    }

    /// Whether `dead` dead rows beside `live` live ones call for a vacuum.
    pub fn wants_vacuum(&self, live: u64, dead: u64) -> bool {
        dead >= self.min_dead_rows && dead as f64 >= live as f64 * self.min_dead_fraction
    }
}

/// What [`Store::job_vacuum`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobVacuumed {
    /// A pass ran over the jobs table.
    Vacuumed {
        /// Live rows before it, as the database's statistics count them (an estimate).
        live_rows: u64,
        /// Dead rows before it, likewise.
        dead_rows: u64,
    },
    /// Fewer dead rows than the thresholds.
    NotNeeded {
        /// Live rows, as the database's statistics count them (an estimate).
        live_rows: u64,
        /// Dead rows, likewise.
        dead_rows: u64,
    },
    /// Another vacuum of the table was running; nothing was done.
    Busy,
    /// The store's database role may not vacuum the table (PostgreSQL allows the
    /// table's owner, the database's owner and superusers, and from version 17 a role
    /// holding MAINTAIN on the table). The database's own autovacuum still runs.
    NotPermitted,
    /// The backend needs no vacuum from its workers.
    NotApplicable,
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

impl QueuePauseParams {
    /// Checks the queue name and the clock. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        crate::names::validate_name("queue", &self.queue)?;
        check_now(self.now)
    }
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

impl QueueStatsParams {
    /// Checks the queue name, both windows (at most [`MAX_WINDOW`]) and the clock.
    /// Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        if let Some(queue) = &self.queue {
            crate::names::validate_name("queue", queue)?;
        }
        check_window("worker_alive_within", self.worker_alive_within)?;
        check_window("interval", self.interval)?;
        check_now(self.now)
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

/// `queue_history`: one queue's depth and dead count at evenly spaced points of the
/// recent past, reconstructed from the jobs' own timestamps. Nothing is sampled or
/// stored for it, so a stateless reader (the HTTP server's chart) can ask any time.
///
/// The points are at `now - (points - 1 - i) * step` for `i` in `0..points`, oldest
/// first; the last is `now`. At a point `t`, a job of the queue counts as:
///
/// - depth (ready and due) when `created_at <= t` and `run_at <= t`, and it is `ready`
///   now, or it is not `ready` now and neither its last claim (`attempted_at`) nor its
///   finish (`finished_at`) is at or before `t`;
/// - dead when it is `dead` now and `finished_at <= t`.
///
/// It is a reconstruction from what each job holds now, not a record: a job's earlier
/// attempts are not seen (a retried job counts from its current `run_at`), a redriven
/// job no longer counts as dead before its redrive, and pruned or purged jobs are gone.
/// Good for a chart of the last hour; not an audit.
#[derive(Debug, Clone)]
pub struct QueueHistoryParams {
    /// The queue.
    pub queue: String,
    /// The gap between points; at least 1 ms, in whole milliseconds.
    pub step: Duration,
    /// How many points, 1..=[`QueueHistoryParams::MAX_POINTS`].
    pub points: u32,
    /// The clock (the last point).
    pub now: Option<Timestamp>,
}

impl QueueHistoryParams {
    /// The most points one call returns.
    pub const MAX_POINTS: u32 = 10_000;

    /// Checks the queue name, the step and the number of points. Every backend calls
    /// it first.
    pub fn validate(&self) -> Result<(), crate::InputError> {
        crate::names::validate_name("queue", &self.queue)?;
        if self.step < Duration::from_millis(1) {
            return Err(crate::InputError::new("step", "must be at least 1ms"));
        }
        if !(1..=Self::MAX_POINTS).contains(&self.points) {
            return Err(crate::InputError::new(
                "points",
                format!(
                    "{} is out of range; use 1..={}",
                    self.points,
                    Self::MAX_POINTS
                ),
            ));
        }
        let span = self.step.saturating_mul(self.points - 1);
        if span > NewJob::MAX_DELAY.saturating_mul(10) {
            return Err(crate::InputError::new(
                "step",
                "step times points reaches back more than ten years",
            ));
        }
        check_now(self.now)
    }

    /// The time of point `i` given the last point's time `now` (the step in whole
    /// milliseconds, as every backend stores time).
    pub fn point_at(&self, now: Timestamp, i: u32) -> Timestamp {
        let step_ms = i64::try_from(self.step.as_millis()).unwrap_or(i64::MAX);
        let back = step_ms.saturating_mul(i64::from(self.points - 1 - i.min(self.points - 1)));
        now - chrono::Duration::milliseconds(back)
    }
}

impl QueueHistoryParams {
    /// Builds the points from bucketed counts, for backends that count in SQL: rows
    /// of (`edge`, `bucket`, `count`) where the bucket of a time is the first point at
    /// or after it (0 for anything before the first point) and `edge` is `start` (a
    /// job entered the depth), `stop` (it left) or `dead` (it died). Each point's
    /// depth is the starts by it less the stops by it; its dead count, the deaths by
    /// it. A bucket outside the points or an unknown edge is a [`StoreError::Corrupt`].
    pub fn assemble(
        &self,
        now: Timestamp,
        counts: &[(String, i64, i64)],
    ) -> Result<Vec<QueueHistoryPoint>, StoreError> {
        let points = self.points as usize;
        let (mut starts, mut stops, mut deaths) = (
            vec![0_i64; points],
            vec![0_i64; points],
            vec![0_i64; points],
        );
        for (edge, bucket, count) in counts {
            let slot = usize::try_from(*bucket)
                .ok()
                .filter(|b| *b < points)
                .ok_or_else(|| StoreError::Corrupt(format!("queue_history bucket {bucket}")))?;
            match edge.as_str() {
                "start" => starts[slot] += count,
                "stop" => stops[slot] += count,
                "dead" => deaths[slot] += count,
                other => return Err(StoreError::Corrupt(format!("queue_history edge {other:?}"))),
            }
        }
        let (mut depth, mut dead) = (0, 0);
        Ok((0..points)
            .map(|i| {
                depth += starts[i] - stops[i];
                dead += deaths[i];
                QueueHistoryPoint {
                    at: self.point_at(now, i as u32),
                    depth,
                    dead,
                }
            })
            .collect())
    }
}

/// One point of a [`QueueHistoryParams`] history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueHistoryPoint {
    /// The point in time.
    pub at: Timestamp,
    /// Jobs ready and due at `at`.
    pub depth: i64,
    /// Jobs dead at `at`.
    pub dead: i64,
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

impl WorkerHeartbeatParams {
    /// Checks the worker id, the host (no control characters), the queue names and the
    /// clock. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        crate::names::validate_key("worker", &self.worker)?;
        if self.host.chars().any(char::is_control) {
            return Err(InputError::new(
                "host",
                "must not contain control characters",
            ));
        }
        for queue in &self.queues {
            crate::names::validate_name("queue", queue)?;
        }
        check_now(self.now)
    }
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

impl WorkerRemoveParams {
    /// Checks the age (at most [`MAX_WINDOW`]) and the clock. Every backend calls it
    /// first.
    pub fn validate(&self) -> Result<(), InputError> {
        match self {
            WorkerRemoveParams::Worker(_) => Ok(()),
            WorkerRemoveParams::StaleFor { stale_after, now } => {
                check_window("stale_after", *stale_after)?;
                check_now(*now)
            }
        }
    }
}

/// One claimed job asking [`Store::dependency_acquire`] whether it may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitRequest {
    /// The job and its lease.
    pub lease: LeaseRef,
    /// How long the job waits if the retry budget turns it back: the backoff its next
    /// retry would wait (the runtime computes it from the job's retry policy). At most
    /// [`NewJob::MAX_DELAY`].
    pub retry_delay: Duration,
}

/// `dependency_acquire`: for claimed jobs of one dependency, decide in order which
/// may run now, and send the others back to `ready`, all in one transaction that
/// holds the dependency's row, so every worker process sees one breaker, one rate
/// limit and one budget.
///
/// Per job (see [`crate::dependency::DependencyRecord::acquire`]): an open breaker
/// parks it (`ready`, `run_at = now + park_for`, `dependency_wait = breaker`); when
/// the cool-down is over the first job is the probe and the rest are parked; a retry
/// over the budget waits `retry_delay` (`retry_budget`); a job whose rate-limit turn
/// is more than `max_wait` away waits until it (`rate_limit`) and keeps the turn. A
/// job sent back gets its attempt back, as with a snooze. A job that may run gets
/// `dependency = <key>` and its `dependency_wait` cleared. Fenced per job: a job not
/// running under its lease is [`Permit::LeaseLost`] and changes nothing (a lease
/// repeated in the call counts once).
#[derive(Debug, Clone)]
pub struct DependencyAcquireParams {
    /// The dependency's key.
    pub dependency: String,
    /// The caller's policy for it.
    pub policy: DependencyPolicy,
    /// The worker asking (recorded as the probe's holder).
    pub worker: String,
    /// The jobs' lease: how long a probe may go unanswered before another may go.
    pub lease: Duration,
    /// The jobs, in the order they should get turns.
    pub requests: Vec<PermitRequest>,
    /// How many more attempts of the key the caller may start under its own
    /// (per-worker) bulkhead limit; the jobs past it wait
    /// ([`WaitReason::Bulkhead`]). `None`: no per-worker limit.
    pub local_free: Option<u32>,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl DependencyAcquireParams {
    /// Checks the key, the worker, the lease, each request's retry delay (at most 365
    /// days: a job turned back waits that long), the policy and the clock. Every
    /// backend calls it first.
    pub fn validate(&self) -> Result<(), crate::InputError> {
        crate::names::validate_key("dependency", &self.dependency)?;
        crate::names::validate_key("worker", &self.worker)?;
        if self.lease.is_zero() || self.lease > NewJob::MAX_DELAY {
            return Err(crate::InputError::new(
                "lease",
                "must be above zero and at most 365 days",
            ));
        }
        if self
            .requests
            .iter()
            .any(|request| request.retry_delay > NewJob::MAX_DELAY)
        {
            return Err(InputError::new("retry_delay", "must be at most 365 days"));
        }
        self.policy.validate()?;
        check_now(self.now)
    }
}

/// What one job of a [`DependencyAcquireParams`] may do, in the order asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "permit")]
pub enum Permit {
    /// Run it, after `wait` (the rate limit's pacing, at most its `max_wait`; zero
    /// for most jobs). Counted from the call's `now`.
    Run {
        /// How long to wait before running.
        #[serde(with = "crate::backoff::duration_str")]
        wait: Duration,
    },
    /// Run it as the breaker's probe now; report its answer with
    /// [`DependencyReportParams::probe`].
    Probe,
    /// It is back in `ready` until `until`, its attempt given back.
    Wait {
        /// Why.
        reason: WaitReason,
        /// Until when.
        until: Timestamp,
    },
    /// It was not running under this lease; nothing changed.
    LeaseLost,
}

/// What a backend does to one job of an acquire, from [`plan_acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobGate {
    /// It runs: set `dependency`, clear `dependency_wait`.
    Run,
    /// Back to `ready` at `run_at` (whole milliseconds), attempts - 1, lease cleared,
    /// `dependency` set and `dependency_wait = reason`. Fenced on its lease.
    Defer {
        /// When it is due again.
        run_at: Timestamp,
        /// Why it waits.
        reason: WaitReason,
    },
    /// Leave it alone (lease lost).
    Nothing,
}

/// A running job as a backend read it for [`plan_acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatedJob {
    /// Its lease token now (a request with another token is lease lost).
    pub lease_token: LeaseToken,
    /// Its attempts, this claim included.
    pub attempts: i32,
    /// What it was waiting for before this claim, if anything.
    pub waited_for: Option<WaitReason>,
}

/// The part of `dependency_acquire` every backend shares: given the dependency's
/// record (locked) and the requested jobs that are running (by id), checks each
/// request's lease, decides each job's permit and what to write to it, and updates the record.
/// `now` is the store's clock in whole milliseconds.
pub fn plan_acquire(
    record: &mut DependencyRecord,
    params: &DependencyAcquireParams,
    now: Timestamp,
    running: &std::collections::HashMap<JobId, GatedJob>,
) -> Vec<(Permit, JobGate)> {
    let now_us = crate::dependency::micros(now);
    let mut seen = std::collections::HashSet::new();
    let mut inputs = Vec::new();
    let mut fenced = Vec::with_capacity(params.requests.len());
    for request in &params.requests {
        let job = running
            .get(&request.lease.id)
            .filter(|job| job.lease_token == request.lease.lease_token)
            .filter(|_| seen.insert(request.lease.id));
        fenced.push(job.is_some());
        if let Some(job) = job {
            inputs.push(PermitInput {
                job: request.lease.id,
                attempts: job.attempts,
                reserved: job.waited_for == Some(WaitReason::RateLimit),
                retry_delay: request.retry_delay,
            });
        }
    }
    let mut decisions = record
        .acquire_bounded(
            &params.policy,
            now_us,
            &params.worker,
            params.lease,
            &inputs,
            params.local_free,
        )
        .into_iter();
    fenced
        .into_iter()
        .map(|ok| {
            if !ok {
                return (Permit::LeaseLost, JobGate::Nothing);
            }
            match decisions.next().expect("one decision per fenced job") {
                Decision::Run { wait_us } => (
                    Permit::Run {
                        wait: Duration::from_micros(u64::try_from(wait_us).unwrap_or(0)),
                    },
                    JobGate::Run,
                ),
                Decision::Probe => (Permit::Probe, JobGate::Run),
                Decision::Wait { reason, until_us } => {
                    // Whole milliseconds, rounded up: never due before its time.
                    let ms = until_us.div_euclid(1000) + i64::from(until_us.rem_euclid(1000) > 0);
                    let run_at = chrono::DateTime::from_timestamp_millis(ms).unwrap_or(now);
                    (
                        Permit::Wait {
                            reason,
                            until: run_at,
                        },
                        JobGate::Defer { run_at, reason },
                    )
                }
            }
        })
        .collect()
}

/// What acquiring permits gave, with the store's clock (which a `Run`'s wait counts
/// from).
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyAcquired {
    /// The store's clock when the permits were given.
    pub now: Timestamp,
    /// One permit per request, in order.
    pub permits: Vec<Permit>,
}

/// A probe's answer, for [`DependencyReportParams`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeReport {
    /// The probe's job (a report for a job that is not the current probe changes
    /// nothing).
    pub job: JobId,
    /// What it said about the dependency.
    pub outcome: ProbeOutcome,
}

/// `dependency_report`: answers of attempts sent to a dependency (batched by the
/// caller), and a probe's answer. Counts them in the breaker's window and moves the
/// breaker ([`crate::dependency::DependencyRecord::report`]). When the breaker closes,
/// its parked jobs are released in the same transaction, in claim order (priority,
/// run_at, id): all due now, or, with a rate limit, on consecutive turns of its
/// schedule (`dependency_wait = rate_limit`), so the backlog is paced, not stampeded.
/// Returns the dependency's state without its `waiting` counts (left at zero): they
/// are a count over the jobs, which a worker reporting five times a second should not
/// pay for; [`Store::dependency_list`] gives them.
#[derive(Debug, Clone)]
pub struct DependencyReportParams {
    /// The dependency's key.
    pub dependency: String,
    /// The caller's policy for it.
    pub policy: DependencyPolicy,
    /// Attempts that succeeded.
    pub successes: u64,
    /// Attempts that failed transiently (retry, retry-after, timeout). Permanent
    /// failures are not reported: they say nothing about the dependency.
    pub failures: u64,
    /// A probe's answer.
    pub probe: Option<ProbeReport>,
    /// Attempts counted slow (they ran past the breaker's slow-call duration; such
    /// an attempt is not counted again when it ends).
    pub slow: u64,
    /// Attempts that ended (whatever their answer): their bulkhead permits are freed.
    /// At most [`DependencyReportParams::MAX_FINISHED`].
    pub finished: Vec<JobId>,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl DependencyReportParams {
    /// The most ended attempts one report may free.
    pub const MAX_FINISHED: usize = 100_000;

    /// Checks the key, the policy, the ended attempts and the clock. Every backend
    /// calls it first.
    pub fn validate(&self) -> Result<(), crate::InputError> {
        crate::names::validate_key("dependency", &self.dependency)?;
        if self.finished.len() > Self::MAX_FINISHED {
            return Err(InputError::new(
                "finished",
                format!("at most {} per report", Self::MAX_FINISHED),
            ));
        }
        self.policy.validate()?;
        check_now(self.now)
    }

    /// The answers as the record counts them.
    pub fn calls(&self) -> crate::dependency::Calls {
        crate::dependency::Calls {
            successes: self.successes,
            failures: self.failures,
            slow: self.slow,
            probe: self.probe.map(|p| (p.job, p.outcome)),
            finished: self.finished.clone(),
        }
    }
}

/// `dependency_set`: an operator's action on a breaker ([`BreakerAction`]); a key not
/// seen yet is created. `Close` releases the parked jobs as a closing probe does.
/// Returns the dependency's state.
#[derive(Debug, Clone)]
pub struct DependencySetParams {
    /// The dependency's key.
    pub dependency: String,
    /// What to do.
    pub action: BreakerAction,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl DependencySetParams {
    /// Checks the key and the clock. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        crate::names::validate_key("dependency", &self.dependency)?;
        check_now(self.now)
    }
}

/// `dependency_list`: every known dependency (or one), by key, with the jobs waiting
/// on it.
#[derive(Debug, Clone, Default)]
pub struct DependencyListParams {
    /// Only this key.
    pub dependency: Option<String>,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl DependencyListParams {
    /// Checks the key and the clock. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        if let Some(key) = &self.dependency {
            crate::names::validate_key("dependency", key)?;
        }
        check_now(self.now)
    }
}

/// `dependency_sweep`: for every breaker that wants a probe
/// ([`crate::dependency::DependencyRecord::wants_probe`]) and has parked jobs but
/// none due, make the first parked job (claim order) due now, so a probe goes even
/// when no new job of the key arrives. Returns those keys. Maintenance calls it on
/// the lease sweep's interval.
#[derive(Debug, Clone, Default)]
pub struct DependencySweepParams {
    /// The clock.
    pub now: Option<Timestamp>,
}

impl DependencySweepParams {
    /// Checks the clock. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        check_now(self.now)
    }
}

/// Where a stored retry policy applies. Resolution (kind, then queue, then default)
/// is [`crate::PolicySet::resolve`]'s, not the store's: the store only keeps one
/// policy per scope.
///
/// In JSON: `{"scope": "default"}`, `{"scope": "queue", "name": "emails"}`,
/// `{"scope": "kind", "name": "send_receipt"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "scope", content = "name", rename_all = "snake_case")]
pub enum PolicyScope {
    /// Every job whose kind and queue have no policy of their own.
    Default,
    /// Every job of this queue whose kind has no policy of its own.
    Queue(String),
    /// Every job of this kind, whatever its queue.
    Kind(String),
}

impl PolicyScope {
    /// The scope's column value and name as stores keep them: `("default", "")`,
    /// `("queue", name)`, `("kind", name)`.
    pub fn as_parts(&self) -> (&'static str, &str) {
        match self {
            PolicyScope::Default => ("default", ""),
            PolicyScope::Queue(name) => ("queue", name),
            PolicyScope::Kind(name) => ("kind", name),
        }
    }

    /// The scope from its stored parts, or `None` for a scope this version does not
    /// know (or a default with a name).
    pub fn from_parts(scope: &str, name: &str) -> Option<PolicyScope> {
        match scope {
            "default" if name.is_empty() => Some(PolicyScope::Default),
            "queue" => Some(PolicyScope::Queue(name.to_string())),
            "kind" => Some(PolicyScope::Kind(name.to_string())),
            _ => None,
        }
    }

    /// Checks a queue or kind name ([`crate::names::validate_name`]; the error names
    /// the field `queue` or `kind`).
    pub fn validate(&self) -> Result<(), InputError> {
        match self {
            PolicyScope::Default => Ok(()),
            PolicyScope::Queue(name) => crate::names::validate_name("queue", name),
            PolicyScope::Kind(name) => crate::names::validate_name("kind", name),
        }
    }
}

/// A stored retry policy, as `policy_list` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRecord {
    /// Where it applies.
    pub scope: PolicyScope,
    /// The policy.
    pub policy: RetryPolicy,
    /// When it was last set (the store's clock).
    pub updated_at: Timestamp,
}

/// `policy_set`: store the retry policy of one scope, replacing the one it had
/// (upsert). Every worker, the CLI and the server read the same table, so a change is
/// seen by every process at its next read; nothing is cached by the store.
#[derive(Debug, Clone)]
pub struct PolicySetParams {
    /// Where it applies.
    pub scope: PolicyScope,
    /// The policy. Checked again here (a policy can be deserialized without going
    /// through its builder), and refused with the field at fault if it cannot work.
    pub policy: RetryPolicy,
    /// The clock (`updated_at`).
    pub now: Option<Timestamp>,
}

impl PolicySetParams {
    /// Checks the scope's name (field `queue` or `kind`), the policy (rebuilt through
    /// [`RetryPolicy::to_builder`], so every rule of the builder holds) and the clock.
    /// Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        self.scope.validate()?;
        self.policy.to_builder().build()?;
        check_now(self.now)
    }
}

/// `policy_delete`: forget the stored retry policy of one scope. Jobs of that scope
/// fall back to the next scope's policy (kind, then queue, then default). Returns true
/// when a stored policy was deleted, false when the scope had none.
#[derive(Debug, Clone)]
pub struct PolicyDeleteParams {
    /// Which policy.
    pub scope: PolicyScope,
}

impl PolicyDeleteParams {
    /// Checks the scope's name. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        self.scope.validate()
    }
}

// ---- periodic jobs (schedules) --------------------------------------------------------

/// `schedule_set`: store a schedule, replacing the one of the same name (upsert).
///
/// A spec equal to the stored one changes nothing (not `next_tick`, not `paused`): a
/// worker declaring its schedules at every start must not move a tick or undo an
/// operator's pause. A changed spec takes `next_tick` from these params (the first
/// tick after now under the new rule) and keeps `paused`.
#[derive(Debug, Clone)]
pub struct ScheduleSetParams {
    /// The schedule. Checked here ([`crate::schedule::ScheduleSpec::validate`]).
    pub spec: crate::schedule::ScheduleSpec,
    /// The first tick to enqueue if the schedule is new or changed.
    pub next_tick: Timestamp,
    /// The clock (`updated_at`).
    pub now: Option<Timestamp>,
}

impl ScheduleSetParams {
    /// Checks the spec, the tick and the clock. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        self.spec.validate()?;
        check_timestamp("next_tick", self.next_tick)?;
        check_now(self.now)
    }
}

/// `schedule_delete`: forget a schedule. Jobs it enqueued stay. Returns true when a
/// schedule was deleted.
#[derive(Debug, Clone)]
pub struct ScheduleDeleteParams {
    /// Which schedule.
    pub name: String,
}

impl ScheduleDeleteParams {
    /// Checks the name. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        crate::names::validate_name("name", &self.name)
    }
}

/// `schedule_pause`: pause or resume a schedule. Returns false when there is no
/// schedule of that name.
///
/// Resuming sets `next_tick` to `resume_at` (the first tick after now): ticks that
/// fell while the schedule was paused are not enqueued, whatever its misfire policy.
#[derive(Debug, Clone)]
pub struct SchedulePauseParams {
    /// Which schedule.
    pub name: String,
    /// True to pause, false to resume.
    pub paused: bool,
    /// On resume, the next tick to enqueue. Ignored when pausing.
    pub resume_at: Timestamp,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl SchedulePauseParams {
    /// Checks the name, the tick and the clock. Every backend calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        crate::names::validate_name("name", &self.name)?;
        check_timestamp("resume_at", self.resume_at)?;
        check_now(self.now)
    }
}

/// `schedule_fire`: handle one tick of a schedule (or a run by hand), exactly once
/// whatever the number of workers.
///
/// With `advance`, in one transaction: move the schedule's `next_tick` from
/// `expected` to `next`, only if the row still holds `expected` and is not paused
/// (compare-and-set); then enqueue `enqueue`'s job through the store's one enqueue
/// path, and record the tick as `last_tick` and the job as `last_job`. If the row did
/// not hold `expected` (another worker handled that tick, or the spec changed) or is
/// paused, nothing is written and the answer is [`ScheduleFired::Lost`].
///
/// Without `advance` (a run by hand), the job is enqueued if the schedule exists,
/// paused or not, and `next_tick` is left alone.
#[derive(Debug, Clone)]
pub struct ScheduleFireParams {
    /// Which schedule.
    pub name: String,
    /// `(expected, next)`: the compare-and-set on `next_tick`.
    pub advance: Option<(Timestamp, Timestamp)>,
    /// The tick the job is for (`last_tick`); `None` when missed ticks are skipped or
    /// for a run by hand.
    pub tick: Option<Timestamp>,
    /// The job to enqueue (at most one, its unique key a scheduler key), with its
    /// policy resolved; `None` to only advance (missed ticks skipped).
    pub enqueue: Option<JobEnqueueParams>,
    /// The clock.
    pub now: Option<Timestamp>,
}

impl ScheduleFireParams {
    /// Checks the name, the times and the job (every field of
    /// [`NewJob::validate`]; its unique key must be this schedule's). Every backend
    /// calls it first.
    pub fn validate(&self) -> Result<(), InputError> {
        crate::names::validate_name("name", &self.name)?;
        if let Some((expected, next)) = self.advance {
            check_timestamp("expected", expected)?;
            check_timestamp("next_tick", next)?;
        }
        if let Some(tick) = self.tick {
            check_timestamp("tick", tick)?;
        }
        if let Some(enqueue) = &self.enqueue {
            let [job] = enqueue.jobs.as_slice() else {
                return Err(InputError::new("jobs", "a tick enqueues exactly one job"));
            };
            let ours = job
                .unique_key
                .as_deref()
                .and_then(crate::schedule::parse_key)
                .is_some_and(|(name, _)| name == self.name);
            if !ours {
                return Err(InputError::new(
                    "unique_key",
                    "a periodic job's unique key is its schedule's (cron:<name>@...)",
                ));
            }
            job.validate_fields()?;
            if !(1..=NewJob::MAX_ATTEMPTS).contains(&enqueue.default_max_attempts) {
                return Err(InputError::new("max_attempts", "default is out of range"));
            }
            check_now(enqueue.now)?;
        }
        check_now(self.now)
    }
}

/// What `schedule_fire` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "result")]
pub enum ScheduleFired {
    /// The tick was this caller's: `next_tick` moved, and the job (if any) was
    /// enqueued (`duplicate` when its unique key was already held).
    Fired {
        /// The job, when one was asked for.
        job: Option<Enqueued>,
    },
    /// Another worker handled the tick, the schedule is paused or changed, or (for a
    /// run by hand) there is no such schedule. Nothing was written.
    Lost,
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
    /// The same claim as [`job_claim`](Store::job_claim), answering with only what a
    /// worker needs to run each job ([`ClaimedJob`]): the runtime claims with it. A
    /// backend reads back fewer columns (docs/benchmarks.md, "Performance work"); the
    /// default takes the whole jobs of `job_claim` and keeps that part, so a store
    /// wrapping another may leave it be.
    ///
    /// An addition to DESIGN.md's seam, not a new transition: the seam names one claim,
    /// and this is it with a narrower answer. `job_claim` stays for every reader of
    /// the whole job (a remote worker's claim over HTTP, tools, the conformance suite),
    /// and the conformance suite holds the two to the same jobs, order and values.
    async fn job_claim_run(&self, params: JobClaimParams) -> Result<Vec<ClaimedJob>, StoreError> {
        self.job_claim(params)
            .await?
            .into_iter()
            .map(ClaimedJob::from_claimed)
            .collect()
    }
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
    /// See [`JobVacuumParams`].
    async fn job_vacuum(&self, params: JobVacuumParams) -> Result<JobVacuumed, StoreError>;
    /// See [`QueuePauseParams`].
    async fn queue_pause(&self, params: QueuePauseParams) -> Result<(), StoreError>;
    /// See [`QueuePauseParams`].
    async fn queue_resume(&self, params: QueuePauseParams) -> Result<(), StoreError>;
    /// See [`QueueStatsParams`]. Queues are listed by name.
    async fn queue_stats(&self, params: QueueStatsParams) -> Result<Vec<QueueStats>, StoreError>;
    /// See [`QueueHistoryParams`]. One point per requested time, oldest first.
    async fn queue_history(
        &self,
        params: QueueHistoryParams,
    ) -> Result<Vec<QueueHistoryPoint>, StoreError>;
    /// See [`WorkerHeartbeatParams`].
    async fn worker_heartbeat(&self, params: WorkerHeartbeatParams) -> Result<(), StoreError>;
    /// Every worker in the registry.
    async fn worker_list(&self) -> Result<Vec<WorkerInfo>, StoreError>;
    /// See [`WorkerRemoveParams`]. Returns how many were removed.
    async fn worker_remove(&self, params: WorkerRemoveParams) -> Result<u64, StoreError>;
    /// See [`DependencyAcquireParams`]; one permit per request, in order.
    async fn dependency_acquire(
        &self,
        params: DependencyAcquireParams,
    ) -> Result<DependencyAcquired, StoreError>;
    /// See [`DependencyReportParams`].
    async fn dependency_report(
        &self,
        params: DependencyReportParams,
    ) -> Result<DependencyState, StoreError>;
    /// See [`DependencySetParams`].
    async fn dependency_set(
        &self,
        params: DependencySetParams,
    ) -> Result<DependencyState, StoreError>;
    /// See [`DependencyListParams`]. Ordered by key.
    async fn dependency_list(
        &self,
        params: DependencyListParams,
    ) -> Result<Vec<DependencyState>, StoreError>;
    /// See [`DependencySweepParams`].
    async fn dependency_sweep(
        &self,
        params: DependencySweepParams,
    ) -> Result<Vec<String>, StoreError>;

    /// Every stored retry policy: the default first, then queues by name, then kinds
    /// by name. A stored policy that no longer decodes (or no longer passes the
    /// builder's checks) is skipped with a warning naming its scope and the error, so
    /// one bad row does not take every policy away.
    async fn policy_list(&self) -> Result<Vec<PolicyRecord>, StoreError>;
    /// See [`PolicySetParams`].
    async fn policy_set(&self, params: PolicySetParams) -> Result<(), StoreError>;
    /// See [`PolicyDeleteParams`]. `true` when a stored policy was removed.
    async fn policy_delete(&self, params: PolicyDeleteParams) -> Result<bool, StoreError>;

    /// Every stored schedule, by name. A row that no longer decodes (or whose spec no
    /// longer passes its checks) is skipped with a warning naming it.
    async fn schedule_list(&self) -> Result<Vec<crate::schedule::ScheduleRecord>, StoreError>;
    /// See [`ScheduleSetParams`].
    async fn schedule_set(&self, params: ScheduleSetParams) -> Result<(), StoreError>;
    /// See [`ScheduleDeleteParams`]. `true` when a schedule was removed.
    async fn schedule_delete(&self, params: ScheduleDeleteParams) -> Result<bool, StoreError>;
    /// See [`SchedulePauseParams`]. `false` when there is no such schedule.
    async fn schedule_pause(&self, params: SchedulePauseParams) -> Result<bool, StoreError>;
    /// See [`ScheduleFireParams`].
    async fn schedule_fire(&self, params: ScheduleFireParams) -> Result<ScheduleFired, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vacuum_wants_both_thresholds_and_a_true_fraction() {
        let params = JobVacuumParams {
            min_dead_rows: 10_000,
            min_dead_fraction: 0.01,
        };
        params.validate().unwrap();
        // Enough rows, too small a share of a large table.
        assert!(!params.wants_vacuum(10_000_000, 10_000));
        // A large share of a small table, too few rows.
        assert!(!params.wants_vacuum(100, 9_999));
        assert!(params.wants_vacuum(100, 10_000));
        assert!(params.wants_vacuum(10_000_000, 100_000));
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            let err = JobVacuumParams {
                min_dead_fraction: bad,
                ..params.clone()
            }
            .validate()
            .unwrap_err();
            assert_eq!(err.field, "min_dead_fraction", "{bad}");
        }
    }
}
