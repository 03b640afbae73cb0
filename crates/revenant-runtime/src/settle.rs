//! The settle step: one attempt's outcome turned into the store transition, the log
//! event and the metrics, in one place.
//!
//! Two kinds of worker report outcomes: the in-process runtime (its executor) and
//! remote workers over HTTP (`POST /v1/jobs/{id}/fail` and friends, through
//! `revenant::Client::settle`). Both go through here, so a dead letter is the same
//! `error` event with the same fields, and the same `revenant_dead_letters_total`
//! increment, whichever worker ran the job (Oban turns every outcome into a state
//! change in one place and instruments it there; this is that place).
//!
//! The step has three parts, because the runtime batches its writes and a remote
//! worker's route does not:
//! 1. [`Settlement::decide`]: pure. [`decide()`] with the job's policy gives the
//!    transition; the settlement says which write it needs ([`SettleWrite`]).
//! 2. The write: [`Settlement::apply`] calls the store directly (remote workers); the
//!    runtime sends completes and failures through its batching completer instead.
//! 3. [`Settlement::record`]: the log event and the metrics for what the store
//!    answered ([`Settled`]). Nothing is logged or counted before the store answered,
//!    so a late result rejected by the fence is a `lease_lost`, not a dead letter.

use std::time::Duration;

use rand::Rng;
use revenant_core::decide::{decide, Transition};
use revenant_core::job::{ClaimedJob, DeadReason, FailureClass, Job, JobId, LeaseToken};
use revenant_core::outcome::Outcome;
use revenant_core::policy::RetryPolicy;
use revenant_core::store::{
    CancelResult, CancelTarget, FailAction, Fenced, JobCancelParams, JobCompleteParams,
    JobFailParams, JobFailure, JobSnoozeParams, LeaseRef,
};
use revenant_core::{Store, StoreError};

use crate::metrics::{self, AttemptOutcome, JobSeries};

/// The store write an attempt's outcome needs.
#[derive(Debug, Clone)]
pub enum SettleWrite {
    /// running → completed.
    Complete(LeaseRef),
    /// running → ready after a backoff, or running → dead (the failure says which).
    Fail(JobFailure),
    /// running → ready after `delay`, the attempt given back.
    Snooze {
        /// The job's lease.
        lease: LeaseRef,
        /// How long until it runs again.
        delay: Duration,
    },
    /// running → cancelled, by the handler.
    Cancel {
        /// The job's lease.
        lease: LeaseRef,
        /// Why, recorded in the history.
        message: String,
    },
}

/// What the store answered to a settlement's write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The transition was written.
    Applied,
    /// The fence matched nothing: the lease was lost (reclaimed, released, cancelled)
    /// and another attempt or an operator owns the job. Nothing changed.
    LeaseLost,
    /// A handler's cancel found the job already finished (or gone); nothing changed.
    NotCancelled(CancelResult),
    /// The write failed; the job is reclaimed when its lease expires.
    Unwritten(String),
}

impl From<Fenced> for Settled {
    fn from(fenced: Fenced) -> Self {
        match fenced {
            Fenced::Applied => Settled::Applied,
            Fenced::LeaseLost => Settled::LeaseLost,
        }
    }
}

/// The job an outcome belongs to, as the settle step reads it: a claimed job
/// ([`ClaimedJob`], what the runtime holds) or a whole one read back ([`Job`], what a
/// remote worker's route and the lease sweep hold).
#[derive(Debug, Clone, Copy)]
pub struct AttemptOf<'a> {
    /// The job's id.
    pub id: JobId,
    /// Its queue.
    pub queue: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// The attempt (attempts so far, this one included).
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// The attempt's lease token, when the job still has one.
    pub lease_token: Option<LeaseToken>,
    /// The caller's correlation id.
    pub correlation_id: Option<&'a str>,
}

impl<'a> From<&'a ClaimedJob> for AttemptOf<'a> {
    fn from(job: &'a ClaimedJob) -> Self {
        AttemptOf {
            id: job.id,
            queue: &job.queue,
            kind: &job.kind,
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            lease_token: Some(job.lease_token),
            correlation_id: job.correlation_id.as_deref(),
        }
    }
}

impl<'a> From<&'a Job> for AttemptOf<'a> {
    fn from(job: &'a Job) -> Self {
        AttemptOf {
            id: job.id,
            queue: &job.queue,
            kind: &job.kind,
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            lease_token: job.lease_token,
            correlation_id: job.correlation_id.as_deref(),
        }
    }
}

/// One attempt's outcome, decided against the job's policy: the transition and the
/// write it needs. Build it with [`Settlement::decide`].
#[derive(Debug, Clone)]
pub struct Settlement {
    transition: Transition,
    write: SettleWrite,
    worker: String,
}

impl Settlement {
    /// Decides what follows the attempt `job.attempts` of `job`, leased under `lease`:
    /// [`decide()`] with the job's own `max_attempts` (fixed at enqueue) and the backoff
    /// and jitter of `policy` (the one its queue and kind resolve to now). `worker` is
    /// who ran it, recorded in the failure history and the log.
    pub fn decide<'a, R: Rng + ?Sized>(
        job: impl Into<AttemptOf<'a>>,
        lease: LeaseRef,
        outcome: &Outcome,
        policy: &RetryPolicy,
        worker: &str,
        rng: &mut R,
    ) -> Settlement {
        let job = job.into();
        let transition = decide(outcome, job.attempts, job.max_attempts, policy, rng);
        let fail = |failure: &revenant_core::decide::Failure, action| {
            SettleWrite::Fail(JobFailure {
                lease,
                failure: failure.clone(),
                action,
                worker: Some(worker.to_string()),
            })
        };
        let write = match &transition {
            Transition::Complete => SettleWrite::Complete(lease),
            Transition::Retry { delay, failure } => {
                fail(failure, FailAction::Retry { delay: *delay })
            }
            Transition::Dead { reason, failure } => {
                fail(failure, FailAction::Dead { reason: *reason })
            }
            Transition::Snooze { delay } => SettleWrite::Snooze {
                lease,
                delay: *delay,
            },
            Transition::Cancel { message } => SettleWrite::Cancel {
                lease,
                message: message.clone(),
            },
        };
        Settlement {
            transition,
            write,
            worker: worker.to_string(),
        }
    }

    /// The transition [`decide()`] chose.
    pub fn transition(&self) -> &Transition {
        &self.transition
    }

    /// The store write the transition needs.
    pub fn write(&self) -> &SettleWrite {
        &self.write
    }

    /// Makes a retry one the worker keeps ([`FailAction::Keep`]: the job stays running
    /// under its lease, its next attempt counted and due after the same delay), and
    /// returns that delay; `None`, and nothing changed, when the write is not a retry.
    /// The executor does not write it then: it carries the failure to the job's next
    /// write (see `crate::executor`).
    /// The transition, and so the log event and the metrics, stay a retry's: to an
    /// operator a kept retry is a retry that did not wait behind the queue.
    pub(crate) fn keep(&mut self) -> Option<Duration> {
        if let SettleWrite::Fail(JobFailure { action, .. }) = &mut self.write {
            if let FailAction::Retry { delay } = *action {
                *action = FailAction::Keep { delay };
                return Some(delay);
            }
        }
        None
    }

    /// Writes the transition straight to the store, one statement, fenced on the
    /// lease. A store error is returned as it is (the caller decides whether to retry);
    /// a lost lease is a value.
    pub async fn apply(&self, store: &dyn Store) -> Result<Settled, StoreError> {
        let fenced = |results: Vec<Fenced>| match results.first() {
            Some(Fenced::Applied) => Settled::Applied,
            _ => Settled::LeaseLost,
        };
        Ok(match &self.write {
            SettleWrite::Complete(lease) => fenced(
                store
                    .job_complete(JobCompleteParams {
                        kept: Vec::new(),
                        leases: vec![*lease],
                        now: None,
                    })
                    .await?,
            ),
            SettleWrite::Fail(failure) => fenced(
                store
                    .job_fail(JobFailParams {
                        kept: Vec::new(),
                        failures: vec![failure.clone()],
                        now: None,
                    })
                    .await?,
            ),
            SettleWrite::Snooze { lease, delay } => match store
                .job_snooze(JobSnoozeParams {
                    lease: *lease,
                    delay: *delay,
                    now: None,
                })
                .await?
            {
                Fenced::Applied => Settled::Applied,
                Fenced::LeaseLost => Settled::LeaseLost,
            },
            SettleWrite::Cancel { lease, message } => cancelled(
                store
                    .job_cancel(JobCancelParams {
                        target: CancelTarget::Lease(*lease),
                        message: Some(message.clone()),
                        now: None,
                    })
                    .await?,
            ),
        })
    }

    /// The log event and the metrics for what the store answered. Every failed
    /// attempt is a `warn` event and every dead letter an `error` event, with
    /// `job_id`, `queue`, `kind`, `attempt`, `max_attempts`, `class`, `error`,
    /// `correlation_id` and `worker`; a dead letter also counts in
    /// `revenant_dead_letters_total`.
    pub fn record<'a>(&self, job: impl Into<AttemptOf<'a>>, settled: &Settled) {
        self.record_in(job.into(), settled, None);
    }

    /// [`Settlement::record`], counting the attempt in `series` when given (a worker's
    /// series of the job's queue and kind, registered once: [`JobSeries`]).
    pub(crate) fn record_in(
        &self,
        job: AttemptOf<'_>,
        settled: &Settled,
        series: Option<&JobSeries>,
    ) {
        match settled {
            Settled::Applied => {}
            Settled::LeaseLost => return lease_lost(job, &self.worker, op(&self.write), series),
            Settled::Unwritten(error) => {
                return unwritten(job, &self.worker, op(&self.write), error, series)
            }
            Settled::NotCancelled(result) => {
                return tracing::warn!(job_id = job.id, queue = %job.queue, kind = %job.kind, result = ?result, "handler's cancel was not applied");
            }
        }
        match &self.transition {
            Transition::Complete => {
                count(job, AttemptOutcome::Completed, "none", series);
                tracing::debug!(job_id = job.id, queue = %job.queue, kind = %job.kind, attempt = job.attempts, worker = %self.worker, "job completed");
            }
            Transition::Retry { delay, failure } => {
                count(job, AttemptOutcome::Retried, failure.class.as_str(), series);
                tracing::warn!(
                    job_id = job.id,
                    queue = %job.queue,
                    kind = %job.kind,
                    attempt = job.attempts,
                    max_attempts = job.max_attempts,
                    class = %failure.class,
                    error = %failure.message,
                    correlation_id = job.correlation_id,
                    worker = %self.worker,
                    retry_in_ms = delay.as_millis() as u64,
                    "job attempt failed; retrying"
                );
            }
            Transition::Dead { reason, failure } => {
                count(job, AttemptOutcome::Dead, failure.class.as_str(), series);
                dead_letter(job, &self.worker, *reason, failure.class, &failure.message)
            }
            Transition::Snooze { delay } => {
                count(job, AttemptOutcome::Snoozed, "none", series);
                tracing::info!(job_id = job.id, queue = %job.queue, kind = %job.kind, snooze_ms = delay.as_millis() as u64, worker = %self.worker, "job snoozed; attempt given back");
            }
            Transition::Cancel { message } => {
                count(job, AttemptOutcome::Cancelled, "none", series);
                tracing::info!(job_id = job.id, queue = %job.queue, kind = %job.kind, reason = %message, worker = %self.worker, "job cancelled by its handler");
            }
        }
    }
}

/// A handler's cancel, as the store answered it.
pub(crate) fn cancelled(result: CancelResult) -> Settled {
    match result {
        CancelResult::Cancelled => Settled::Applied,
        CancelResult::LeaseLost => Settled::LeaseLost,
        other => Settled::NotCancelled(other),
    }
}

fn op(write: &SettleWrite) -> &'static str {
    match write {
        SettleWrite::Complete(_) => "complete",
        SettleWrite::Fail(_) => "fail",
        SettleWrite::Snooze { .. } => "snooze",
        SettleWrite::Cancel { .. } => "cancel",
    }
}

/// The structured event and the counter for a dead letter: everything a human needs
/// at 3am. Also used for jobs the lease sweep finds dead (`lease_expired`). The
/// attempt itself is counted by the caller, by how it ended.
pub fn dead_letter<'a>(
    job: impl Into<AttemptOf<'a>>,
    worker: &str,
    reason: DeadReason,
    class: FailureClass,
    error: &str,
) {
    let job = job.into();
    metrics::dead_letter(job.queue, job.kind, reason.as_str());
    tracing::error!(
        job_id = job.id,
        queue = %job.queue,
        kind = %job.kind,
        attempt = job.attempts,
        max_attempts = job.max_attempts,
        class = %class,
        error,
        dead_reason = %reason,
        correlation_id = job.correlation_id,
        worker,
        "job dead-lettered"
    );
}

/// Counts one attempt by how it ended, in `series` when given.
pub(crate) fn count(
    job: AttemptOf<'_>,
    outcome: AttemptOutcome,
    class: &'static str,
    series: Option<&JobSeries>,
) {
    match series {
        Some(series) => series.attempt(outcome, class),
        None => metrics::attempt(job.queue, job.kind, outcome, class),
    }
}

fn lease_lost(job: AttemptOf<'_>, worker: &str, op: &'static str, series: Option<&JobSeries>) {
    count(job, AttemptOutcome::LeaseLost, "none", series);
    tracing::warn!(
        job_id = job.id,
        queue = %job.queue,
        kind = %job.kind,
        attempt = job.attempts,
        lease_token = ?job.lease_token,
        worker,
        op,
        "late result rejected: the lease was lost (reclaimed, released or cancelled)"
    );
}

fn unwritten(
    job: AttemptOf<'_>,
    worker: &str,
    op: &'static str,
    error: &str,
    series: Option<&JobSeries>,
) {
    count(job, AttemptOutcome::Unwritten, "none", series);
    tracing::error!(
        job_id = job.id,
        queue = %job.queue,
        kind = %job.kind,
        attempt = job.attempts,
        worker,
        op,
        error,
        "could not write the attempt's result; the job is reclaimed when its lease expires"
    );
}
