//! The executor: runs one attempt of one job and hands its result on.
//!
//! - The handler runs in its own task, so a panic is caught by the runtime (the join
//!   error carries it) and recorded with its message as a transient failure; the
//!   worker process lives on.
//! - The attempt timeout fires the job's cancellation token and drops the handler's
//!   future; the attempt is recorded as a `timeout`. A handler that blocks its thread
//!   cannot be dropped until it returns: the timeout is written at once, and the
//!   attempt's slot stays taken until the handler returns (`hold_until_returned`).
//! - A heartbeat every `policy.heartbeat()` (lease / 3 by default) extends the lease.
//!   When it finds the lease lost (reclaimed after a stall, cancelled by an operator),
//!   the handler is cancelled and its result discarded: another attempt owns the job.
//!   When no heartbeat has got through for a whole lease (the database unreachable, or
//!   a network that swallows packets without a reset, so the call never answers), the
//!   handler is cancelled too, shortly before the lease can have run out by the
//!   database's clock: the worker cannot know the job is still its own.
//! - Past the shutdown grace period, the handler is cancelled and the lease released
//!   (back to `ready`, attempt given back).
//! - Otherwise [`decide()`] turns the outcome into a transition, which is written through
//!   the completer (completes and failures, batched) or directly (snooze, cancel).
//! - **Short retries are kept**, on a worker that claims ahead: a retry due within
//!   [`KEEP_MAX`] is not written (the job stays running under its lease) and comes
//!   back from [`run`] as a [`Kept`] job, which goes back to its queue's fetcher, to
//!   start again ahead of the jobs claimed after it once it is due, without a claim.
//!   Its failure goes with the job's next write ([`KeptFailure`]): its next result,
//!   written as if the failure had been written as [`FailAction::Keep`] first (the
//!   entry recorded, the next attempt counted); or the first heartbeat of a next
//!   attempt that runs that long, so a long attempt does not hide it; or, before a
//!   snooze or a cancel, a write of its own; or its release, as a retry. The worker
//!   numbers the failure (the attempt that ran) and times it on the store's clock
//!   ([`kept_at`]), and the store writes both as they are, fenced on the job's stored
//!   attempts. Written on their own, kept failures were a write of the job's row
//!   each, and a drain where
//!   three jobs in ten failed ran at 0.62 to 0.80 of a clean one (docs/benchmarks.md,
//!   W2). A worker that dies loses the kept failures it has not written. Through the
//!   queue such a retry would wait behind every job due before it: in a backlog, a job
//!   failing four times in a row ran its attempts one backlog apart, and a failed
//!   attempt cost a claim on top of its write. A kept job holds no slot while it waits;
//!   it waits in the fetcher as a job claimed ahead does ([`crate::fetcher`]: at most
//!   the buffer hold, counted from its claim), and at shutdown it is released with the
//!   attempt given back. Not kept: a job that came through the dependency gate (it
//!   must pass the gate again), one claimed off an expired lease (a suspect), one of a
//!   kind whose lease is shorter than its queue's (the hold is counted from the
//!   queue's lease), and any retry once shutdown began.
//! - A job that calls a protected dependency (it came through the dependency gate
//!   with a ticket) first waits for its rate-limit turn and this process's spacing,
//!   and its answer (success, transient failure, or neither) is counted for the
//!   dependency's breaker afterwards.
//!
//! [`FailAction::Keep`]: revenant_core::store::FailAction::Keep
//! [`KeptFailure`]: revenant_core::store::KeptFailure

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::completer::{Ack, Slot, Unwritten};
use crate::context::{JobContext, JobContextParts};
use crate::gate::{Answer, Ticket};
use crate::metrics::{AttemptOutcome, JobSeries};
use crate::registry::Payload;
use crate::settle::{self, SettleWrite, Settled, Settlement};
use crate::store_retry::retry;
use crate::worker::Shared;
use revenant_core::decide::Transition;
use revenant_core::job::{ClaimedJob, Timestamp};
use revenant_core::outcome::Outcome;
use revenant_core::policy::RetryPolicy;
use revenant_core::store::{
    CancelTarget, Fenced, JobCancelParams, JobHeartbeatParams, JobSnoozeParams, LeaseRef,
};

/// The longest retry delay a worker keeps (see the module docs): about the time a
/// retry takes to come back through the queue on a busy worker (its write gathered for
/// up to 10 ms, then a claim), so a retry this short gains most from skipping it, and a
/// kept job's wait is short next to its lease. Longer retries go through the queue,
/// where any worker may take them.
pub(crate) const KEEP_MAX: Duration = Duration::from_millis(20);

/// When the claim that leased a job was sent, and when its answer came.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claimed {
    /// The job's lease lasts at least from here.
    pub(crate) sent: Instant,
    /// A kept failure's time is counted from here ([`kept_at`]).
    pub(crate) answered: Instant,
}

/// A job whose retry this worker keeps: running under its lease, its next attempt
/// counted, due at `due`.
pub(crate) struct Kept {
    pub(crate) job: ClaimedJob,
    pub(crate) due: Instant,
    /// The claim that leased it.
    pub(crate) claimed: Claimed,
    /// Counts the job as waiting in this worker until its fetcher takes it or it is
    /// released: shutdown waits for it ([`Shared::kept`]).
    pub(crate) waiting: TaskTrackerToken,
    /// Its failed attempts, written with its next result (see the module docs).
    pub(crate) unwritten: Unwritten,
}

/// How an attempt ended, before its result is written.
enum Ended {
    Outcome(Outcome),
    LeaseLost,
    /// No heartbeat got through within the lease: the lease may be gone.
    GivenUp,
    Shutdown,
}

/// Runs one attempt of `job`, leased by `claimed`, and writes its result. `keep_until`:
/// the worker may keep the job's retry if it comes due before then (see the module
/// docs); the kept job is returned, for its fetcher to start again. `unwritten`: the
/// failures of a kept job's earlier attempts, written with this attempt's result.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    shared: Arc<Shared>,
    claim_lease: Duration,
    claimed: Claimed,
    mut job: ClaimedJob,
    mut slot: Slot,
    ticket: Option<Ticket>,
    keep_until: Option<Instant>,
    mut unwritten: Unwritten,
) -> Option<Kept> {
    let lease = LeaseRef {
        id: job.id,
        lease_token: job.lease_token,
    };
    // The snapshot the maintenance loop keeps fresh: an attempt never waits on a
    // store read for its policy (a pool busy with handlers would eat its lease).
    let policy = *shared.policies.cached().resolve(&job.queue, &job.kind);
    if let (Some(ticket), Some(dependencies)) = (&ticket, &shared.dependencies) {
        // The rate limit's pacing: the turn the store gave (at most its max_wait
        // away, well within the lease), then this process's own spacing.
        let paced = async {
            if !ticket.wait.is_zero() {
                tokio::time::sleep(ticket.wait).await;
            }
            if let Some(slot) = dependencies.pace(ticket) {
                tokio::time::sleep_until(slot).await;
            }
            while let Some(at) = dependencies.hold_back(ticket) {
                tokio::time::sleep_until(at).await;
            }
        };
        tokio::select! {
            _ = paced => {}
            _ = shared.hard_stop.cancelled() => {
                report(&shared, Some(ticket), job.id, Answer::Neutral, None);
                match shared.completer.send(Ack::Release(lease, unwritten)).await {
                    Ok(fenced) => tracing::info!(job_id = job.id, result = ?fenced, "shutdown before the job's turn: lease released, attempt given back"),
                    Err(err) => tracing::warn!(job_id = job.id, error = %err, "shutdown: could not release the lease; the job is reclaimed when it expires"),
                }
                return None;
            }
        }
    }
    // The lease lasts at least this long from when the call that set it was sent.
    let mut held = (claim_lease, claimed.sent);
    if shared.heartbeats
        && Instant::now() >= claimed.sent + claim_lease.saturating_sub(give_up_margin(claim_lease))
    {
        // The claim was answered (or the job's turn came) only when its lease could have
        // run out (a partition held the answer back, a write waited long): run it only
        // if a heartbeat finds the lease still this worker's.
        match confirm_lease(&shared, lease, &policy).await {
            Some(sent) => held = (policy.lease(), sent),
            None => {
                report(&shared, ticket.as_ref(), job.id, Answer::Neutral, None);
                tracing::warn!(job_id = job.id, queue = %job.queue, kind = %job.kind, lease_ms = claim_lease.as_millis() as u64, "claim answered after its lease could have run out, and the lease is gone: not run");
                return None;
            }
        }
    }
    let cancel = CancellationToken::new();
    let started = Instant::now();
    // The attempt timeout's deadline: the handler's, the select's below and the
    // heartbeat's (no beat renews the lease past it).
    let deadline = started + policy.attempt_timeout();
    let ctx = JobContext::new(JobContextParts {
        id: job.id,
        queue: job.queue.clone(),
        kind: job.kind.clone(),
        attempt: job.attempts,
        max_attempts: job.max_attempts,
        deadline,
        correlation_id: job.correlation_id.clone(),
        worker: shared.worker_id.clone(),
        cancel: cancel.clone(),
    });
    tracing::debug!(job_id = job.id, queue = %job.queue, kind = %job.kind, attempt = job.attempts, max_attempts = job.max_attempts, "attempt started");
    // Both times are on the store's clock. A job reclaimed after a lost lease counts
    // its whole wait since run_at, which is what its customer saw.
    let waited = (job.attempted_at - job.run_at).num_milliseconds() as f64 / 1000.0;
    let series = shared.series.of(&job.queue, &job.kind);
    series.wait_time(waited);

    let span = shared
        .tracer
        .as_ref()
        .map(|tracer| tracer.start(&job, &shared.worker_id));
    let slow = ticket
        .as_ref()
        .and_then(|ticket| SlowTimer::start(&shared, ticket, job.id));
    // The handler takes the payload; nothing after it reads the job's copy, unless the
    // job may be kept for its next attempt: then the handler's payload is decoded from
    // the job's copy, which the job keeps ([`Payload`]). (A kind whose
    // lease is shorter than its queue's has set its own at its first beat, so the
    // claim's hold, counted from the queue's lease, would outlast it.)
    let keep_until = keep_until.filter(|_| {
        ticket.is_none()
            && !job.reclaimed
            && job.attempts < job.max_attempts
            && policy.lease() >= claim_lease
            && may_keep(&policy, job.attempts)
    });
    let payload = if keep_until.is_some() {
        Payload::Borrowed(&job.payload)
    } else {
        Payload::Owned(std::mem::take(&mut job.payload))
    };
    let alive = shared.alive.enter();
    let handler = shared.registry.dispatch(ctx, payload);
    let mut task = tokio::spawn(async move {
        let _alive = alive;
        handler.await
    });
    // The heartbeat runs in its own task and is stopped, never cancelled mid-call: a
    // store call dropped half-way can leave its write turn (SQLite) or a row lock
    // (Postgres) behind, and the result written below would wait on it forever. The
    // worker froze this way when a handler finished while a heartbeat was in flight.
    //
    // The task starts when it first has something to do (`Held::first_beat`): most
    // jobs end long before their first heartbeat is due, and a task with its timers
    // for each of them was a tenth of a short job's cost in the runtime.
    let held = Held {
        claim_lease,
        lease: held.0,
        sent: held.1,
        deadline,
    };
    let first_beat = held.first_beat(&policy, shared.heartbeats);
    // The heartbeat task and what stops it, once started.
    let mut beats: Option<(tokio::task::JoinHandle<Beat>, CancellationToken)> = None;
    // A kept job's earlier failures, written at the first beat when this attempt runs
    // that long (see `write_unwritten`); what is left unwritten comes back.
    let mut writing: Option<tokio::task::JoinHandle<Unwritten>> = None;
    // One timer for the attempt, across the loop's turns (it turns once more when the
    // heartbeat task starts).
    let timeout = tokio::time::sleep_until(deadline);
    tokio::pin!(timeout);
    let ended = loop {
        tokio::select! {
            biased;
            joined = &mut task => break Ended::Outcome(match joined {
                Ok(outcome) => outcome,
                Err(err) if err.is_panic() => Outcome::Panic { message: panic_message(err.into_panic()) },
                Err(err) => Outcome::Retry { message: format!("handler task ended: {err}") },
            }),
            _ = &mut timeout => {
                break Ended::Outcome(Outcome::Timeout { after: policy.attempt_timeout() });
            }
            beat = async {
                match beats.as_mut() {
                    Some((beats, _)) => beats.await,
                    None => std::future::pending().await,
                }
            } => break match beat {
                Ok(Beat::LeaseLost) => Ended::LeaseLost,
                Ok(Beat::GivenUp) => Ended::GivenUp,
                // Stopped (not by us) or the task failed: the lease can no longer be
                // kept, so the attempt cannot be trusted either.
                _ => Ended::LeaseLost,
            },
            next = async {
                match first_beat {
                    Some(at) => {
                        tokio::time::sleep_until(at).await;
                        at
                    }
                    None => std::future::pending().await,
                }
            }, if beats.is_none() => {
                let stop = CancellationToken::new();
                let task = tokio::spawn(heartbeat(shared.clone(), lease, policy, held, next, stop.clone()));
                beats = Some((task, stop));
                if !unwritten.is_empty() {
                    let shared = shared.clone();
                    let failures = std::mem::take(&mut unwritten);
                    writing = Some(tokio::spawn(async move {
                        match write_unwritten(&shared, lease, failures.clone()).await {
                            // Written; or the lease is gone, and so is what this
                            // attempt would write.
                            Ok(_) => Unwritten::default(),
                            Err(_) => failures,
                        }
                    }));
                }
            }
            _ = shared.hard_stop.cancelled() => break Ended::Shutdown,
        }
    };
    if let Some((_, stop)) = &beats {
        stop.cancel();
    }
    if matches!(ended, Ended::Outcome(_)) {
        series.run_time(started.elapsed().as_secs_f64());
    }
    if !task.is_finished() {
        // Tell the handler first (it may be watching), then drop its future at its
        // next await. A handler that blocks its thread keeps that thread busy, but its
        // result is never written. Before waiting for the heartbeat below: a heartbeat
        // that a partition keeps from answering must not keep a timed-out handler
        // running until the heal.
        cancel.cancel();
        task.abort();
        // Its result is written below all the same; its slot waits for it.
        if let Some(permit) = slot.take_permit() {
            tokio::spawn(hold_until_returned(
                task,
                permit,
                job.id,
                job.kind.clone(),
                shared.hard_stop.clone(),
            ));
        }
    }
    if let Some((beats, _)) = beats.filter(|(beats, _)| !beats.is_finished()) {
        // Lets a heartbeat already in flight finish its store call, so the result is
        // written after it, not overtaken by it.
        let _ = beats.await;
    }
    if let Some(writing) = writing {
        // So is the write of the earlier failures: what it could not write goes with
        // the result.
        unwritten = writing.await.unwrap_or_default();
    }
    match &ended {
        Ended::Outcome(outcome) => report(
            &shared,
            ticket.as_ref(),
            job.id,
            Answer::of(outcome),
            slow.as_ref(),
        ),
        // A probe that ends without an answer frees its place for another.
        Ended::LeaseLost | Ended::GivenUp | Ended::Shutdown => report(
            &shared,
            ticket.as_ref(),
            job.id,
            Answer::Neutral,
            slow.as_ref(),
        ),
    }
    match ended {
        Ended::LeaseLost => {
            if let Some(span) = span {
                span.ended("lease_lost");
            }
            series.attempt(AttemptOutcome::LeaseLost, "none");
            tracing::warn!(
                job_id = job.id,
                queue = %job.queue,
                kind = %job.kind,
                attempt = job.attempts,
                max_attempts = job.max_attempts,
                correlation_id = job.correlation_id.as_deref(),
                worker = %shared.worker_id,
                "lease lost: handler cancelled, its result discarded"
            );
        }
        Ended::GivenUp => {
            series.attempt(AttemptOutcome::LeaseLost, "none");
            // Fenced: if the job is still ours, it runs again at once with the attempt
            // given back. A heartbeat still in flight may land first and renew the
            // lease; the release then ends it all the same.
            let released = shared.completer.send(Ack::Release(lease, unwritten)).await;
            tracing::warn!(
                job_id = job.id,
                queue = %job.queue,
                kind = %job.kind,
                attempt = job.attempts,
                worker = %shared.worker_id,
                result = ?released,
                "no heartbeat got through within the lease: handler cancelled, its result discarded, lease released"
            );
        }
        Ended::Shutdown => match shared.completer.send(Ack::Release(lease, unwritten)).await {
            Ok(fenced) => {
                if let Some(span) = span {
                    span.ended("released");
                }
                series.attempt(AttemptOutcome::Released, "none");
                tracing::info!(job_id = job.id, queue = %job.queue, kind = %job.kind, result = ?fenced, "shutdown: handler cancelled, lease released, attempt given back")
            }
            Err(err) => {
                series.attempt(AttemptOutcome::Unwritten, "none");
                tracing::warn!(job_id = job.id, queue = %job.queue, kind = %job.kind, error = %err, "shutdown: could not release the lease; the job is reclaimed when it expires")
            }
        },
        Ended::Outcome(outcome) => {
            let (transition, settled, kept) = finish(
                &shared, &job, lease, &policy, outcome, slot, keep_until, claimed, unwritten,
                &series,
            )
            .await;
            if let Some(span) = span {
                span.settled(&transition, &settled);
            }
            if let Some((due, waiting, unwritten)) = kept {
                // The next attempt is counted (in the store with the job's next
                // write); it starts when this worker runs it.
                job.attempts += 1;
                job.run_at = job.attempted_at;
                return Some(Kept {
                    job,
                    due,
                    claimed,
                    waiting,
                    unwritten,
                });
            }
        }
    }
    None
}

/// How long a cancelled handler may take to return before the worker says it blocks
/// its thread.
const BLOCKING_AFTER: Duration = Duration::from_secs(1);

/// Holds the slot (`permit`) of an attempt that ended before its handler did, until
/// the handler returns or the worker stops past its grace period.
///
/// An aborted handler's future is dropped at its next `.await`, at once for one that
/// awaits. One that blocks its thread runs on until it returns, and the thread is not
/// the runtime's meanwhile. Were its slot freed when its attempt ended, the next job
/// would start while the thread is still taken: a worker whose handlers block past
/// their timeout would run more of them at once than it has slots, each taking one
/// more thread, until none was left to fire timeouts, send heartbeats or read the
/// store's answers. Held, the slot counts the thread as taken.
async fn hold_until_returned(
    mut handler: tokio::task::JoinHandle<Outcome>,
    permit: tokio::sync::OwnedSemaphorePermit,
    job: revenant_core::job::JobId,
    kind: String,
    stop: CancellationToken,
) {
    let cancelled = Instant::now();
    tokio::select! {
        _ = &mut handler => return,
        _ = stop.cancelled() => return,
        _ = tokio::time::sleep(BLOCKING_AFTER) => {}
    }
    tracing::warn!(
        job_id = job,
        kind = %kind,
        "a handler cancelled {} ms ago has not returned: it blocks its thread (run blocking code \
         with tokio::task::spawn_blocking); its slot stays taken until it returns",
        BLOCKING_AFTER.as_millis()
    );
    tokio::select! {
        _ = handler => tracing::info!(
            job_id = job,
            kind = %kind,
            after_ms = cancelled.elapsed().as_millis() as u64,
            "the handler that blocked its thread returned: its slot is free"
        ),
        _ = stop.cancelled() => {}
    }
    drop(permit);
}

/// Whether attempt `attempt` of a job under `policy` may fail with a retry short enough
/// to keep ([`KEEP_MAX`]): only then does the executor keep a copy of the payload. A
/// handler's `retry_after` may be shorter than the backoff; such a retry is kept only
/// when the backoff could have been.
fn may_keep(policy: &RetryPolicy, attempt: i32) -> bool {
    let failure = u32::try_from(attempt).unwrap_or(1).max(1);
    policy.jitter().bounds(policy.backoff(), failure).0 <= KEEP_MAX
}

/// Counts an attempt's answer for its dependency, if it has one.
///
/// Called once per attempt, when it ends: frees its bulkhead permit, and counts its
/// answer unless the slow-call timer already counted it (`slow`).
fn report(
    shared: &Shared,
    ticket: Option<&Ticket>,
    job: revenant_core::job::JobId,
    answer: Answer,
    slow: Option<&SlowTimer>,
) {
    if let (Some(ticket), Some(dependencies)) = (ticket, &shared.dependencies) {
        let counted = slow.is_some_and(SlowTimer::take);
        let answer = if counted { Answer::Neutral } else { answer };
        if ticket.bulkhead.is_some() {
            if ticket.bulkhead.is_some_and(|b| b.adaptive) {
                dependencies.adapt(&ticket.key, answer);
            }
            dependencies.release(&ticket.key, 1);
        }
        dependencies
            .reporter
            .record_once(ticket, job, answer, true, !counted);
    }
}

/// Counts an attempt slow once it has run for the breaker's slow-call duration,
/// while it still runs: a dependency that hangs opens its breaker that much after
/// the calls start, not when their timeouts fire. Whichever comes first, the timer
/// or the attempt's end, counts the attempt; the other does not.
struct SlowTimer {
    counted: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowTimer {
    fn start(
        shared: &Arc<Shared>,
        ticket: &Ticket,
        job: revenant_core::job::JobId,
    ) -> Option<Self> {
        let dependencies = shared.dependencies.as_ref()?;
        let slow = dependencies
            .config
            .policies
            .resolve(&ticket.key)
            .breaker
            .and_then(|b| b.slow_call)?;
        let counted = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = {
            let counted = counted.clone();
            let shared = shared.clone();
            let ticket = ticket.clone();
            tokio::spawn(async move {
                tokio::time::sleep(slow.duration).await;
                if !counted.swap(true, std::sync::atomic::Ordering::AcqRel) {
                    if let Some(dependencies) = &shared.dependencies {
                        tracing::debug!(job_id = job, dependency = %ticket.key, "attempt is slow: counted for the breaker while it runs");
                        if ticket.bulkhead.is_some_and(|b| b.adaptive) {
                            dependencies.adapt(&ticket.key, Answer::Slow);
                        }
                        dependencies
                            .reporter
                            .record(&ticket, job, Answer::Slow, false);
                    }
                }
            })
        };
        Some(SlowTimer { counted, task })
    }

    /// True when the timer already counted the attempt; stops it either way.
    fn take(&self) -> bool {
        self.task.abort();
        self.counted.swap(true, std::sync::atomic::Ordering::AcqRel)
    }
}

/// Whether the lease of a claim answered late is still this worker's: a heartbeat,
/// retried on store errors until it is answered (the fence decides: applied means
/// nobody else claimed the job, and the lease is renewed). The send time of the
/// applied call, or `None` (lease lost, or a hard stop).
async fn confirm_lease(shared: &Shared, lease: LeaseRef, policy: &RetryPolicy) -> Option<Instant> {
    let sent = std::sync::Mutex::new(Instant::now());
    let confirmed = retry("job_heartbeat", &shared.hard_stop, || {
        *sent.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        shared.store.job_heartbeat(JobHeartbeatParams {
            lease,
            lease_for: policy.lease(),
            now: None,
        })
    })
    .await;
    let sent = *sent.lock().unwrap_or_else(|e| e.into_inner());
    matches!(confirmed, Ok(Fenced::Applied)).then_some(sent)
}

/// What the heartbeat task knows of the lease when it starts.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// The lease the claim took (a kind with a longer one sets it at the first beat).
    claim_lease: Duration,
    /// The lease last set, and when the call that set it was sent.
    lease: Duration,
    sent: Instant,
    /// The attempt timeout's deadline: a give-up at or past it is left to the timeout.
    deadline: Instant,
}

impl Held {
    /// When the first heartbeat is due, or `None` when heartbeats are off. A kind
    /// with its own lease sets it at once. A job started late in its claim's lease (it
    /// waited in the fetcher's buffer, or the claim was answered late) beats by half
    /// the time left, so its first heartbeat is not due after the lease could have run
    /// out, and never after the give-up time ([`Held::held_until`]) unless that has
    /// passed already. The heartbeat task has nothing to do before then.
    fn first_beat(&self, policy: &RetryPolicy, heartbeats: bool) -> Option<Instant> {
        if !heartbeats {
            return None;
        }
        let now = Instant::now();
        if policy.lease() != self.claim_lease {
            return Some(now);
        }
        let left = self.held_until().saturating_duration_since(now);
        Some(now + policy.heartbeat().min(left / 2))
    }

    /// Until when the lease surely holds, less [`give_up_margin`].
    fn held_until(&self) -> Instant {
        self.sent + self.lease.saturating_sub(give_up_margin(self.lease))
    }
}

/// How the heartbeat task ended.
enum Beat {
    /// A heartbeat found the lease lost.
    LeaseLost,
    /// No heartbeat was applied within the lease.
    GivenUp,
    /// The executor stopped it.
    Stopped,
}

/// How long before the lease's earliest possible end the worker gives an attempt up
/// when no heartbeat got through: the store rounds its clock to the millisecond, and
/// a cancelled handler stops at its next await. A twentieth of the lease, at most
/// 250 ms.
pub(crate) fn give_up_margin(lease: Duration) -> Duration {
    (lease / 20).min(Duration::from_millis(250))
}

/// Extends the lease at `next` (the first beat, [`Held::first_beat`]), then every
/// `policy.heartbeat()`, until the lease is lost or `stop` fires, and never past the
/// attempt timeout's deadline (from there it only waits for `stop`). A store call,
/// once started, always runs to its end (in its own task).
///
/// The store sets a lease from its clock some time after the call that set it was
/// sent, so the lease lasts at least until that call's send time plus its length.
/// When that time (less [`give_up_margin`]) passes before another heartbeat is
/// applied, and before the attempt timeout would end the attempt anyway, the attempt
/// is given up ([`Beat::GivenUp`]): a heartbeat still in flight then (a partition that
/// answers nothing) finishes on its own, and is fenced like any other. With the
/// attempt timeout below the lease, that happens only when a kind's lease is longer
/// than its queue's and its first heartbeat does not get through.
async fn heartbeat(
    shared: Arc<Shared>,
    lease: LeaseRef,
    policy: RetryPolicy,
    held: Held,
    mut next: Instant,
    stop: CancellationToken,
) -> Beat {
    let deadline = held.deadline;
    let mut held_until = held.held_until();
    let given_up = |held_until: Instant| {
        tracing::debug!(
            job_id = lease.id,
            late_ms = held_until.elapsed().as_millis() as u64,
            "no heartbeat got through within the lease"
        );
        Beat::GivenUp
    };
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return Beat::Stopped,
            _ = tokio::time::sleep_until(next) => {}
            _ = tokio::time::sleep_until(held_until), if held_until < deadline => return given_up(held_until),
        }
        // Past the attempt timeout's deadline the attempt is the timeout's to end, and
        // no heartbeat may renew its lease. A runtime whose every thread a handler
        // blocked wakes with this beat and the timeout both overdue; a beat sent first
        // renewed a lease that had run out before another worker could claim the job,
        // and kept the job running a lease longer (the torture suite's blocking-handler
        // test saw 3.7 s against its 3.5 s bound).
        if Instant::now() >= deadline {
            stop.cancelled().await;
            return Beat::Stopped;
        }
        let sent = Instant::now();
        let store = shared.store.clone();
        let call = tokio::spawn(async move {
            store
                .job_heartbeat(JobHeartbeatParams {
                    lease,
                    lease_for: policy.lease(),
                    now: None,
                })
                .await
        });
        let result = tokio::select! {
            biased;
            joined = call => match joined {
                Ok(result) => result,
                Err(err) => Err(revenant_core::error::StoreError::unavailable(err)),
            },
            _ = tokio::time::sleep_until(held_until), if held_until < deadline => return given_up(held_until),
        };
        next = match result {
            Ok(Fenced::Applied) => {
                held_until = sent
                    + policy
                        .lease()
                        .saturating_sub(give_up_margin(policy.lease()));
                Instant::now() + policy.heartbeat()
            }
            Ok(Fenced::LeaseLost) => return Beat::LeaseLost,
            Err(err) => {
                // Not the job's fault: try again soon. If the store stays down past the
                // lease, the next heartbeat that gets through finds the lease lost.
                let again = (policy.heartbeat() / 4).max(Duration::from_millis(10));
                tracing::warn!(job_id = lease.id, error = %err, retry_in_ms = again.as_millis() as u64, "heartbeat failed");
                Instant::now() + again
            }
        };
    }
}

/// Decides what follows the attempt (the settle step), writes it, and logs it:
/// completes and failures through the batching completer, snoozes and cancels
/// directly, each retried on storage errors until the lease would be gone.
///
/// A retry due before `keep_until` and within [`KEEP_MAX`] is kept (see the module
/// docs), and its failure not written but added to `unwritten` (numbered as the
/// attempt, timed with [`kept_at`] from the claim's answer): then the third value
/// is when the next attempt is due, the token that counts the job as waiting in this
/// worker, taken before the slot is given up, and the failures to write with the job's
/// next result. Otherwise `unwritten` goes with this attempt's result: with a
/// completion or a failure, in the same write; before a snooze or a cancel, in a
/// write of its own.
#[allow(clippy::too_many_arguments)]
async fn finish(
    shared: &Shared,
    job: &ClaimedJob,
    lease: LeaseRef,
    policy: &RetryPolicy,
    outcome: Outcome,
    slot: Slot,
    keep_until: Option<Instant>,
    claimed: Claimed,
    mut unwritten: Unwritten,
    series: &JobSeries,
) -> (
    Transition,
    Settled,
    Option<(Instant, TaskTrackerToken, Unwritten)>,
) {
    let mut settlement = Settlement::decide(
        job,
        lease,
        &outcome,
        policy,
        &shared.worker_id,
        &mut rand::rng(),
    );
    let keeps = keep_until.is_some_and(|until| {
        matches!(settlement.transition(), Transition::Retry { delay, .. }
            if *delay <= KEEP_MAX && Instant::now() + *delay < until)
            && !shared.stop_claiming.is_cancelled()
    });
    let kept = keeps
        .then(|| settlement.keep())
        .flatten()
        .map(|delay| (Instant::now() + delay, shared.kept.token()));
    let written = match settlement.write().clone() {
        // Kept: nothing to write now, and the slot is free.
        SettleWrite::Fail(failure) if kept.is_some() => {
            let at = kept_at(job, claimed.answered);
            unwritten.push(job.id, job.attempts, at, failure.failure, failure.worker);
            drop(slot);
            Ok(Settled::Applied)
        }
        // Completions and failures free the slot once queued (see crate::completer);
        // a snooze or a cancel keeps it until written.
        SettleWrite::Complete(lease) => shared
            .completer
            .hand_over(Ack::Complete(lease, std::mem::take(&mut unwritten)), slot)
            .await
            .map(Settled::from)
            .map_err(|err| err.to_string()),
        SettleWrite::Fail(failure) => shared
            .completer
            .hand_over(Ack::Fail(failure, std::mem::take(&mut unwritten)), slot)
            .await
            .map(Settled::from)
            .map_err(|err| err.to_string()),
        SettleWrite::Snooze { .. } | SettleWrite::Cancel { .. } if !unwritten.is_empty() => {
            // Written first, as a kept failure counting this attempt: the snooze then
            // gives it back, or the cancel ends it.
            let _slot = slot;
            match write_unwritten(shared, lease, std::mem::take(&mut unwritten)).await {
                Ok(Fenced::Applied) => settle_directly(shared, settlement.write()).await,
                Ok(Fenced::LeaseLost) => Ok(Settled::LeaseLost),
                Err(err) => Err(err.to_string()),
            }
        }
        write => {
            let _slot = slot;
            settle_directly(shared, &write).await
        }
    };
    let settled = written.unwrap_or_else(Settled::Unwritten);
    if let (Settled::Applied, &Transition::Retry { delay, .. }, None) =
        (&settled, settlement.transition(), &kept)
    {
        shared.due_soon.note(&job.queue, delay);
    }
    settlement.record_in(job.into(), &settled, Some(series));
    // Kept, nothing was written: the job is this worker's to run again.
    let kept = kept.map(|(due, waiting)| (due, waiting, unwritten));
    (settlement.transition().clone(), settled, kept)
}

/// When attempt `job` failed, just now, on the store's clock, for its kept failure
/// ([`KeptFailure::at`]): the time its claim took it (`attempted_at`, set by the store)
/// and what the worker's monotonic clock counts from when the claim's answer came
/// (`answered`). The store set `attempted_at` before it answered, so this is never later
/// than the failure, nor, since its time is before the write that carries it, than
/// that write's; it is early by the claim's answer's way back, a few milliseconds.
///
/// [`KeptFailure::at`]: revenant_core::store::KeptFailure::at
fn kept_at(job: &ClaimedJob, answered: Instant) -> Timestamp {
    let since = chrono::Duration::from_std(answered.elapsed()).unwrap_or(chrono::Duration::MAX);
    job.attempted_at
        .checked_add_signed(since)
        .unwrap_or(job.attempted_at)
}

/// Writes a snooze or a cancel straight to the store (not batched), retried on storage
/// errors until the lease would be gone.
async fn settle_directly(shared: &Shared, write: &SettleWrite) -> Result<Settled, String> {
    match write.clone() {
        SettleWrite::Snooze { lease, delay } => retry("job_snooze", &shared.abandon, || {
            shared.store.job_snooze(JobSnoozeParams {
                lease,
                delay,
                now: None,
            })
        })
        .await
        .map(Settled::from)
        .map_err(|err| err.to_string()),
        SettleWrite::Cancel { lease, message } => retry("job_cancel", &shared.abandon, || {
            shared.store.job_cancel(JobCancelParams {
                target: CancelTarget::Lease(lease),
                message: Some(message.clone()),
                now: None,
            })
        })
        .await
        .map(settle::cancelled)
        .map_err(|err| err.to_string()),
        SettleWrite::Complete(_) | SettleWrite::Fail(_) => {
            unreachable!("completions and failures go through the completer")
        }
    }
}

/// Writes a kept job's failures `unwritten` on their own, through the completer: the
/// last one as [`FailAction::Keep`] of the attempt running now, the others before
/// it. The job stays running under `lease`.
///
/// For an attempt that outlasts its first heartbeat (a kept job's failures would
/// otherwise wait for the attempt's end to be seen, and be lost if the worker died
/// meanwhile), and before a snooze or a cancel, which carry none.
///
/// [`FailAction::Keep`]: revenant_core::store::FailAction::Keep
async fn write_unwritten(
    shared: &Shared,
    lease: LeaseRef,
    unwritten: Unwritten,
) -> Result<Fenced, crate::completer::AckError> {
    match unwritten.keep(lease) {
        Some((failure, earlier)) => shared.completer.send(Ack::Fail(failure, earlier)).await,
        None => Ok(Fenced::Applied),
    }
}

/// The text of a panic payload (`panic!("...")` gives a `&str` or a `String`).
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let text = if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panic with a non-string payload".to_string()
    };
    format!("handler panicked: {text}")
}
