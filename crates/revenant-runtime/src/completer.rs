//! The completer: batches acks, failures and releases into few store calls.
//!
//! Executors hand their result over and wait for the store's answer (so they can log a
//! rejected ack and record what was applied). The completer takes whatever is waiting,
//! up to [`MAX_BATCH`], and makes at most three calls: one `job_complete`, one
//! `job_fail`, one `job_release`. Under load, results pile up while the previous call
//! is in flight, so batches grow by themselves; when idle, a result is written at once
//! (no linger).
//!
//! **Slots free at hand-over, on a worker that claims ahead.** A worker with
//! [`claim_ahead`](crate::WorkerBuilder::claim_ahead) set has already traded a longer
//! crash window for throughput on short jobs, and takes the same trade here: an
//! attempt that finished hands its completion or failure over with
//! [`CompleterHandle::hand_over`], which frees its slot as soon as the result is
//! queued, not when it is written. The next job starts while the write is in flight,
//! and the results of every slot gather into one batch instead of each slot waiting
//! out its own round trip. At most `claim_ahead` results (and at most [`MAX_BATCH`])
//! wait to be written; past that, a finished attempt keeps its slot until there is
//! room, so a slow or unreachable store holds the worker back instead of piling
//! results up in memory. What this changes, on such a worker only:
//! - a crash can run again, when their leases expire, the attempts that finished and
//!   whose results were not written: at most `claim_ahead` more than the running ones
//!   (at-least-once either way);
//! - the store may show up to `claim_ahead` more of this worker's jobs `running` than
//!   it has slots, for the length of a write; what the store decides from `running`
//!   rows (a group's one-at-a-time order) counts them until they are written, so it
//!   errs on the side of fewer starts;
//! - shutdown waits for the queued results ([`CompleterHandle::written`]) as well as
//!   for the slots.
//!
//! A worker that does not claim ahead (the default) keeps each slot until its result
//! is written: a crash re-runs at most one attempt per slot, finished or not.
//!
//! **Gathering, on a worker that claims ahead.** Since its slots do not wait for the
//! write, such a worker's completer does not write the moment one result is queued:
//! while results keep coming (each within [`GATHER_GAP`] of the last) it gathers them
//! into one batch of up to half of what may wait (`claim_ahead / 2`, at most
//! [`MAX_BATCH`] / 2), for at most [`GATHER_MAX`]. A write is a commit, and a commit
//! waits for the log to reach the disk whatever its size: written as they came, the
//! results of a drain of short jobs on PostgreSQL went out in batches of about 140,
//! and a statement log had a write of 140 at 2.2 ms and one of 500 at 5.1 (about 1 ms
//! of each the same whatever its size). A queue that goes quiet is written within
//! [`GATHER_GAP`] of its last result; shutdown writes what it has at once. What it
//! costs: a result is written up to [`GATHER_MAX`] later, so the next job of a group
//! (which waits for the previous one's completion) and the store's view of
//! `completed` lag by as much. A worker that does not claim ahead never gathers: its
//! slots wait for the write.
//!
//! **A failure is written at once when no attempt runs.** Each attempt holds a
//! [`Slot`] from its start until it hands its result over. A batch that holds a
//! failure ends its gathering when no slot is held: a retry through the queue waits
//! for its failure's write, and the results that could still join the batch are
//! those of jobs not started yet. (A kept retry (see [`crate::executor`]) no longer
//! waits for a write: its failure goes with its job's next result, [`Unwritten`].) In a failure-heavy drain
//! (W2 in docs/benchmarks.md) the chains of retries left at its end each waited out a
//! last [`GATHER_GAP`] per attempt. A batch of completions alone gathers as before: a
//! drain's slots are all free for a moment whenever its buffer runs dry, and writing
//! then cost about 10% more commits in a drain of no-op jobs (W4).
//!
//! **Failures beside completions.** A batch's failures and its completions go out
//! together, two calls on two connections (on SQLite, whose one writer takes them
//! one after the other, the store's group commit writes the two in one transaction).
//! The rows the two change are never the same: a lease has one result in
//! flight (a kept job's failures go with its next attempt's result), and a result
//! under a lease that is gone matches no row, so it takes no row lock; the two cannot
//! wait on each other. Written one after the other, completions first, a kept retry
//! waited for the completions' write as well as its own: in W2's failing drain on
//! PostgreSQL, a job's first two attempts came 50 to 66 ms apart (medians of two
//! runs), and 20 to 34 ms with both changes here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store_retry::retry;
use revenant_core::decide::Failure;
use revenant_core::error::StoreError;
use revenant_core::job::{JobId, Timestamp};
use revenant_core::store::{
    FailAction, Fenced, JobCompleteParams, JobFailParams, JobFailure, JobReleaseParams,
    KeptFailure, LeaseRef, Store,
};

/// The most results written per batch: as many as may wait to be written on a worker
/// that claims the most ahead ([`crate::worker::MAX_CLAIM_AHEAD`]), so that such a
/// worker gathers batches of up to 500 (half of it). At 500 here (batches of 250), a
/// drain of no-op jobs (100,000 on PostgreSQL, 50,000 on SQLite, 64 and 16 slots, 3
/// pairs by hand) ran about 3% slower on PostgreSQL with 8% more of the driver's CPU,
/// and 12% slower on SQLite, whose one writer paid a commit and its sync for every
/// batch.
pub(crate) const MAX_BATCH: usize = crate::worker::MAX_CLAIM_AHEAD;

/// Gathering (see the module docs) ends when no result came for this long. Two
/// milliseconds, not one: tokio's timers tick in whole milliseconds, and a gap of one
/// could end a gathering between two results that came a millisecond apart.
pub(crate) const GATHER_GAP: Duration = Duration::from_millis(2);

/// Gathering ends this long after its first result, whatever still comes.
pub(crate) const GATHER_MAX: Duration = Duration::from_millis(10);

/// One result to write.
#[derive(Debug)]
pub(crate) enum Ack {
    Complete(LeaseRef, Unwritten),
    Fail(JobFailure, Unwritten),
    /// A release of a kept job with failures unwritten is written as a retry of its
    /// last failure ([`Unwritten::release`]).
    Release(LeaseRef, Unwritten),
}

/// The failed attempts of a kept job that its worker has not written yet
/// ([`KeptFailure`]: they go with the job's next result), each numbered and timed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Unwritten(Vec<KeptFailure>);

impl Unwritten {
    /// Adds the failure of attempt `attempt` of job `id`, which failed just now: `at`
    /// on the store's clock (see [`KeptFailure::at`]).
    pub(crate) fn push(
        &mut self,
        id: JobId,
        attempt: i32,
        at: Timestamp,
        failure: Failure,
        worker: Option<String>,
    ) {
        self.0.push(KeptFailure {
            id,
            attempt,
            at,
            failure,
            worker,
        });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A batch's results and, apart, the kept failures they carry, as the store takes
    /// them.
    fn split<T>(batch: Vec<(T, Unwritten)>) -> (Vec<T>, Vec<KeptFailure>) {
        let mut kept = Vec::new();
        let results = batch
            .into_iter()
            .map(|(result, unwritten)| {
                kept.extend(unwritten.0);
                result
            })
            .collect();
        (results, kept)
    }

    /// These failures written on their own while the kept job `lease` runs its next
    /// attempt: the last one as [`FailAction::Keep`] (the attempt running now is the
    /// one it counts), due now, with the others before it. `None` when there are none.
    pub(crate) fn keep(self, lease: LeaseRef) -> Option<(JobFailure, Unwritten)> {
        self.last_as(
            lease,
            FailAction::Keep {
                delay: Duration::ZERO,
            },
        )
    }

    /// A release of the kept job `lease` that carries these failures: a retry of its
    /// last failure, due now, with the others before it. Either way the job goes back
    /// to `ready` with the attempt its worker counted and did not start given back:
    /// the store counts one attempt per failure it records, and the last one's retry
    /// counts none. `None` when there are none.
    fn release(self, lease: LeaseRef) -> Option<(JobFailure, Unwritten)> {
        self.last_as(
            lease,
            FailAction::Retry {
                delay: Duration::ZERO,
            },
        )
    }

    /// The last failure as a write of its own with `action`, and the others.
    fn last_as(mut self, lease: LeaseRef, action: FailAction) -> Option<(JobFailure, Unwritten)> {
        let last = self.0.pop()?;
        let failure = JobFailure {
            lease,
            failure: last.failure,
            action,
            worker: last.worker,
        };
        Some((failure, self))
    }
}

/// Why a result could not be written.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum AckError {
    #[error("store error: {0}")]
    Store(String),
    #[error("the completer has stopped")]
    Stopped,
}

/// Where the executor waits for its result's answer.
type Reply = oneshot::Sender<Result<Fenced, AckError>>;

struct Request {
    ack: Ack,
    reply: Reply,
}

/// An attempt's slot from its start until its result is handed over: the permit of
/// its queue's slots, and its place in the count of running attempts, which tells the
/// completer whether more results may come (see the module docs).
pub(crate) struct Slot {
    /// Taken out when the attempt ends before its handler does
    /// ([`Slot::take_permit`]).
    permit: Option<OwnedSemaphorePermit>,
    running: Arc<AtomicUsize>,
}

impl Slot {
    /// The queue's permit, to be held apart from the rest of the slot: by an aborted
    /// handler still running on its thread (see `crate::executor`).
    pub(crate) fn take_permit(&mut self) -> Option<OwnedSemaphorePermit> {
        self.permit.take()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::Release);
    }
}

/// The executors' side.
#[derive(Clone)]
pub(crate) struct CompleterHandle {
    tx: mpsc::UnboundedSender<Request>,
    /// One permit per result handed over and not yet written.
    unwritten: Arc<Semaphore>,
    /// The permits `unwritten` started with.
    max_unwritten: u32,
    /// Attempts started and not yet handed over (their [`Slot`]s).
    running: Arc<AtomicUsize>,
}

impl CompleterHandle {
    /// The slot of an attempt about to start on `permit`.
    pub(crate) fn slot(&self, permit: OwnedSemaphorePermit) -> Slot {
        self.running.fetch_add(1, Ordering::Relaxed);
        Slot {
            permit: Some(permit),
            running: self.running.clone(),
        }
    }

    /// Writes one result (batched with others) and returns the fenced result.
    pub(crate) async fn send(&self, ack: Ack) -> Result<Fenced, AckError> {
        self.queue(ack)?.await.map_err(|_| AckError::Stopped)?
    }

    /// [`send`](Self::send), freeing `slot` once the result is queued (see the module
    /// docs): waits, slot held, while the most results allowed are queued already.
    /// Without room for any (a worker that does not claim ahead), the slot is held
    /// until the result is written.
    pub(crate) async fn hand_over(&self, ack: Ack, slot: Slot) -> Result<Fenced, AckError> {
        if self.max_unwritten == 0 {
            let written = self.send(ack).await;
            drop(slot);
            return written;
        }
        let Ok(_unwritten) = self.unwritten.clone().acquire_owned().await else {
            return Err(AckError::Stopped);
        };
        // Freed before the result is queued: the completer that takes it sees the
        // attempt ended.
        drop(slot);
        let answer = self.queue(ack)?;
        answer.await.map_err(|_| AckError::Stopped)?
    }

    /// Waits until every result handed over has been written (or given up on).
    pub(crate) async fn written(&self) {
        if self.max_unwritten > 0 {
            let _ = self.unwritten.acquire_many(self.max_unwritten).await;
        }
    }

    fn queue(&self, ack: Ack) -> Result<oneshot::Receiver<Result<Fenced, AckError>>, AckError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Request { ack, reply })
            .map_err(|_| AckError::Stopped)?;
        Ok(answer)
    }
}

/// Starts a completer that lets up to `unwritten` results handed over wait to be
/// written with their slots freed (the worker's `claim_ahead`; 0 frees no slot before
/// its result is written); returns its handle and its task.
/// The task ends when `stop` fires and nothing is waiting, or when every handle is
/// dropped. `abandon` ends the store retries (shutdown past its drain deadline).
pub(crate) fn spawn(
    store: Arc<dyn Store>,
    unwritten: usize,
    stop: CancellationToken,
    abandon: CancellationToken,
) -> (CompleterHandle, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let max_unwritten = unwritten.min(MAX_BATCH);
    let running = Arc::new(AtomicUsize::new(0));
    let gathering = Gathering {
        target: max_unwritten / 2,
        running: running.clone(),
    };
    let task = tokio::spawn(run(store, rx, gathering, stop, abandon));
    let handle = CompleterHandle {
        tx,
        unwritten: Arc::new(Semaphore::new(max_unwritten)),
        max_unwritten: max_unwritten as u32,
        running,
    };
    (handle, task)
}

/// How the completer gathers (see the module docs).
struct Gathering {
    /// Gathers batches of this many results (0: writes what is waiting at once).
    target: usize,
    /// The attempts running (see [`Slot`]): none, and nothing more is on its way.
    running: Arc<AtomicUsize>,
}

impl Gathering {
    /// Whether a batch being gathered is to be written now: it holds a failure and no
    /// attempt is running (see the module docs). For one batch: it remembers what it
    /// has looked at.
    fn at_once(&self) -> impl FnMut(&[Request]) -> bool + '_ {
        let (mut seen, mut failure) = (0, false);
        move |batch| {
            failure |= batch[seen..].iter().any(|r| matches!(r.ack, Ack::Fail(..)));
            seen = batch.len();
            failure && self.running.load(Ordering::Acquire) == 0
        }
    }
}

/// Writes what the executors send, in batches, gathered as `gathering` says.
async fn run(
    store: Arc<dyn Store>,
    mut rx: mpsc::UnboundedReceiver<Request>,
    gathering: Gathering,
    stop: CancellationToken,
    abandon: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            biased;
            request = rx.recv() => match request {
                Some(request) => request,
                None => return,
            },
            _ = stop.cancelled() => match rx.try_recv() {
                Ok(request) => request,
                Err(_) => return,
            },
        };
        let mut batch = vec![first];
        take_waiting(&mut rx, &mut batch);
        gather_more(
            &mut rx,
            &mut batch,
            gathering.target,
            &stop,
            gathering.at_once(),
        )
        .await;
        write(store.as_ref(), batch, &abandon).await;
    }
}

/// Moves what is waiting in `rx` into `batch`, up to [`MAX_BATCH`].
fn take_waiting<T>(rx: &mut mpsc::UnboundedReceiver<T>, batch: &mut Vec<T>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
}

/// Gathers into `batch` until it holds `target` items, or nothing came for
/// [`GATHER_GAP`], or [`GATHER_MAX`] has passed since the call, or `stop` fires, or
/// `at_once` says the batch is to be written now (see the module docs).
async fn gather_more<T>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    batch: &mut Vec<T>,
    target: usize,
    stop: &CancellationToken,
    mut at_once: impl FnMut(&[T]) -> bool,
) {
    let until = Instant::now() + GATHER_MAX;
    while batch.len() < target.min(MAX_BATCH) && !at_once(batch) {
        let next = (Instant::now() + GATHER_GAP).min(until);
        let item = tokio::select! {
            biased;
            _ = stop.cancelled() => None,
            item = tokio::time::timeout_at(next, rx.recv()) => item.ok().flatten(),
        };
        let Some(item) = item else { return };
        batch.push(item);
        take_waiting(rx, batch);
    }
}

async fn write(store: &dyn Store, batch: Vec<Request>, abandon: &CancellationToken) {
    let mut completes = Vec::new();
    let mut fails = Vec::new();
    let mut releases = Vec::new();
    for request in batch {
        match request.ack {
            Ack::Complete(lease, unwritten) => completes.push(((lease, unwritten), request.reply)),
            Ack::Fail(failure, unwritten) => fails.push(((failure, unwritten), request.reply)),
            Ack::Release(lease, unwritten) => match unwritten.release(lease) {
                Some(retry) => fails.push((retry, request.reply)),
                None => releases.push((lease, request.reply)),
            },
        }
    }
    // Failures beside completions, the two calls at once (see the module docs).
    tokio::join!(
        write_kind(fails, abandon, "job_fail", |fails| {
            let (failures, kept) = Unwritten::split(fails);
            store.job_fail(JobFailParams {
                failures,
                kept,
                now: None,
            })
        }),
        write_kind(completes, abandon, "job_complete", |completes| {
            let (leases, kept) = Unwritten::split(completes);
            store.job_complete(JobCompleteParams {
                leases,
                kept,
                now: None,
            })
        }),
    );
    write_kind(releases, abandon, "job_release", |leases| {
        store.job_release(JobReleaseParams { leases, now: None })
    })
    .await;
}

/// Writes a batch's results of one kind with [`call_batched`] and answers each
/// executor; with none, does nothing.
async fn write_kind<T, F, Fut>(
    requests: Vec<(T, Reply)>,
    abandon: &CancellationToken,
    op: &'static str,
    call: F,
) where
    T: Clone,
    F: Fn(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Fenced>, StoreError>>,
{
    if requests.is_empty() {
        return;
    }
    let (items, replies): (Vec<T>, Vec<Reply>) = requests.into_iter().unzip();
    let results = call_batched(&items, abandon, op, call).await;
    for (reply, result) in replies.into_iter().zip(results) {
        // The executor may be gone (aborted at shutdown); nothing to tell it then.
        let _ = reply.send(result);
    }
}

/// One call for the whole batch; if it fails for good, one call per item, so one bad
/// row cannot sink the rest. Returns one result per item, in order.
async fn call_batched<T, F, Fut>(
    items: &[T],
    abandon: &CancellationToken,
    op: &'static str,
    call: F,
) -> Vec<Result<Fenced, AckError>>
where
    T: Clone,
    F: Fn(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Fenced>, StoreError>>,
{
    let checked = |result: Result<Vec<Fenced>, StoreError>, n: usize| match result {
        Ok(fenced) if fenced.len() == n => Ok(fenced),
        Ok(fenced) => Err(StoreError::Corrupt(format!(
            "{op} returned {} results for {n} items",
            fenced.len()
        ))),
        Err(err) => Err(err),
    };
    let whole = retry(op, abandon, || {
        let fut = call(items.to_vec());
        async move { checked(fut.await, items.len()) }
    })
    .await;
    match whole {
        Ok(fenced) => fenced.into_iter().map(Ok).collect(),
        Err(err) if items.len() == 1 || abandon.is_cancelled() => {
            vec![Err(AckError::Store(err.to_string())); items.len()]
        }
        Err(_) => {
            let mut results = Vec::with_capacity(items.len());
            for item in items {
                let one = retry(op, abandon, || {
                    let fut = call(vec![item.clone()]);
                    async move { checked(fut.await, 1) }
                })
                .await;
                results.push(match one {
                    Ok(mut fenced) => Ok(fenced.remove(0)),
                    Err(err) => Err(AckError::Store(err.to_string())),
                });
            }
            results
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `count` items `every` apart (the first at once), then keeps the channel
    /// open without sending.
    fn producer(count: usize, every: Duration) -> mpsc::UnboundedReceiver<usize> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            for i in 0..count {
                if i > 0 {
                    tokio::time::sleep(every).await;
                }
                if tx.send(i).is_err() {
                    return;
                }
            }
            std::future::pending::<()>().await;
        });
        rx
    }

    /// Gathers after a first item, attempts running throughout.
    async fn first_and_more(
        rx: &mut mpsc::UnboundedReceiver<usize>,
        target: usize,
        stop: &CancellationToken,
    ) -> (Vec<usize>, Duration) {
        first_and_more_while(rx, target, stop, |_| false).await
    }

    async fn first_and_more_while(
        rx: &mut mpsc::UnboundedReceiver<usize>,
        target: usize,
        stop: &CancellationToken,
        at_once: impl FnMut(&[usize]) -> bool,
    ) -> (Vec<usize>, Duration) {
        let mut batch = vec![rx.recv().await.expect("a first item")];
        let started = Instant::now();
        gather_more(rx, &mut batch, target, stop, at_once).await;
        (batch, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn results_that_keep_coming_are_gathered_up_to_the_target() {
        let mut rx = producer(100, GATHER_GAP / 2);
        let (batch, _) = first_and_more(&mut rx, 8, &CancellationToken::new()).await;
        assert_eq!(batch, (0..8).collect::<Vec<_>>());
        // The rest are the next batch's.
        let (batch, _) = first_and_more(&mut rx, 8, &CancellationToken::new()).await;
        assert_eq!(batch, (8..16).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_longer_than_the_gap_ends_the_gathering() {
        let mut rx = producer(3, GATHER_GAP / 2);
        let (batch, took) = first_and_more(&mut rx, 8, &CancellationToken::new()).await;
        assert_eq!(batch, vec![0, 1, 2]);
        assert!(
            took <= GATHER_GAP * 3,
            "waited {took:?} for results that stopped coming"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gathering_ends_at_its_longest_however_results_keep_coming() {
        let every = GATHER_GAP / 2;
        let mut rx = producer(usize::MAX, every);
        let (batch, took) = first_and_more(&mut rx, MAX_BATCH, &CancellationToken::new()).await;
        assert!(
            took >= GATHER_MAX && took <= GATHER_MAX + GATHER_GAP,
            "gathered for {took:?}"
        );
        let expected = (GATHER_MAX.as_micros() / every.as_micros()) as usize;
        assert!(
            batch.len().abs_diff(expected) <= 2,
            "{} gathered, about {expected} expected",
            batch.len()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_target_or_once_stopped_nothing_is_awaited() {
        let mut rx = producer(100, GATHER_GAP / 2);
        let (batch, took) = first_and_more(&mut rx, 0, &CancellationToken::new()).await;
        assert_eq!((batch, took), (vec![0], Duration::ZERO));
        let stop = CancellationToken::new();
        stop.cancel();
        let (batch, took) = first_and_more(&mut rx, 8, &stop).await;
        assert_eq!(batch.len(), 1);
        assert_eq!(took, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_to_be_written_at_once_ends_its_gathering() {
        let stop = CancellationToken::new();
        let mut rx = producer(100, GATHER_GAP / 2);
        let (batch, took) = first_and_more_while(&mut rx, 8, &stop, |_| true).await;
        assert_eq!((batch, took), (vec![0], Duration::ZERO));

        // Results keep coming; the batch is to be written at once after two gaps' time
        // (the last attempt handed over), and the gathering ends with the next look, not
        // at its longest.
        let running = Arc::new(AtomicUsize::new(1));
        let last = running.clone();
        let handed_over = Instant::now() + GATHER_GAP * 2;
        tokio::spawn(async move {
            tokio::time::sleep_until(handed_over).await;
            last.store(0, Ordering::Release);
        });
        let at_once = |_: &[usize]| running.load(Ordering::Acquire) == 0;
        let (batch, _) = first_and_more_while(&mut rx, MAX_BATCH, &stop, at_once).await;
        let ended = Instant::now();
        assert!(
            ended >= handed_over && ended <= handed_over + GATHER_GAP / 2,
            "gathered until {:?} after the last hand-over",
            ended - handed_over
        );
        // The items of those two gaps, one a gap's half apart, and no more.
        assert!((3..=5).contains(&batch.len()), "{} gathered", batch.len());
    }

    /// A batch is written at once when it holds a failure and no attempt runs; a batch
    /// of completions alone, or one while an attempt runs, gathers on.
    #[test]
    fn a_failure_is_written_at_once_when_no_attempt_runs() {
        let request = |ack: Ack| Request {
            ack,
            reply: oneshot::channel().0,
        };
        let lease = LeaseRef {
            id: 1,
            lease_token: revenant_core::job::LeaseToken(1),
        };
        let failure = JobFailure {
            lease,
            failure: revenant_core::decide::Failure {
                class: revenant_core::job::FailureClass::Transient,
                message: "503".into(),
            },
            action: revenant_core::store::FailAction::Keep {
                delay: Duration::from_millis(1),
            },
            worker: None,
        };
        let gathering = Gathering {
            target: 500,
            running: Arc::new(AtomicUsize::new(1)),
        };
        let mut at_once = gathering.at_once();
        let mut batch = vec![request(Ack::Complete(lease, Unwritten::default()))];
        assert!(!at_once(&batch), "an attempt runs");
        batch.push(request(Ack::Fail(failure, Unwritten::default())));
        assert!(!at_once(&batch), "an attempt runs");
        batch.push(request(Ack::Complete(lease, Unwritten::default())));
        gathering.running.store(0, Ordering::Release);
        // The failure, looked at before, still counts.
        assert!(at_once(&batch), "a failure, and no attempt runs");

        let mut at_once = gathering.at_once();
        let batch = vec![
            request(Ack::Complete(lease, Unwritten::default())),
            request(Ack::Release(lease, Unwritten::default())),
        ];
        assert!(!at_once(&batch), "completions alone gather on");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_counts_its_attempt_as_running_until_its_result_is_queued() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let handle = CompleterHandle {
            tx,
            unwritten: Arc::new(Semaphore::new(4)),
            max_unwritten: 4,
            running: Arc::new(AtomicUsize::new(0)),
        };
        let slots = Arc::new(Semaphore::new(2));
        let first = handle.slot(slots.clone().acquire_owned().await.unwrap());
        let second = handle.slot(slots.clone().acquire_owned().await.unwrap());
        assert_eq!(handle.running.load(Ordering::Acquire), 2);
        drop(second);
        assert_eq!(handle.running.load(Ordering::Acquire), 1);
        assert_eq!(slots.available_permits(), 1);

        let lease = LeaseRef {
            id: 7,
            lease_token: revenant_core::job::LeaseToken(3),
        };
        let sender = handle.clone();
        let handed = tokio::spawn(async move {
            sender
                .hand_over(Ack::Complete(lease, Unwritten::default()), first)
                .await
        });
        let request = rx.recv().await.expect("the result queued");
        // The completer that takes the result sees no attempt running, and the slot free.
        assert_eq!(handle.running.load(Ordering::Acquire), 0);
        assert_eq!(slots.available_permits(), 2);
        assert!(matches!(request.ack, Ack::Complete(l, _) if l == lease));
        request.reply.send(Ok(Fenced::Applied)).unwrap();
        assert!(matches!(handed.await.unwrap(), Ok(Fenced::Applied)));
    }

    /// A batch's failures are not held back by its completions: with every completion
    /// stalled, the failure of the same batch is written and answered.
    #[tokio::test]
    async fn a_batch_writes_its_failures_beside_its_completions() {
        use revenant_core::decide::Failure;
        use revenant_core::job::FailureClass;
        use revenant_core::store::FailAction;

        let store = Arc::new(crate::faulty::FaultyStore::open().await);
        let leases = store.running(2).await;
        let lease = |i: usize| leases[i];
        let failure = JobFailure {
            lease: lease(1),
            failure: Failure {
                class: FailureClass::Transient,
                message: "503".into(),
            },
            action: FailAction::Retry {
                delay: Duration::from_millis(1),
            },
            worker: None,
        };
        store.stall_completes.send_replace(true);
        let (complete, completed) = oneshot::channel();
        let (fail, failed) = oneshot::channel();
        let batch = vec![
            Request {
                ack: Ack::Complete(lease(0), Unwritten::default()),
                reply: complete,
            },
            Request {
                ack: Ack::Fail(failure, Unwritten::default()),
                reply: fail,
            },
        ];
        let writer = store.clone();
        let written = tokio::spawn(async move {
            write(writer.as_ref(), batch, &CancellationToken::new()).await;
        });
        let answer = tokio::time::timeout(Duration::from_secs(30), failed)
            .await
            .expect("the failure was written while the completion stalled");
        assert!(matches!(answer, Ok(Ok(Fenced::Applied))), "{answer:?}");
        assert!(!written.is_finished(), "the completion did not stall");
        store.stall_completes.send_replace(false);
        written.await.unwrap();
        assert!(matches!(completed.await, Ok(Ok(Fenced::Applied))));
    }

    #[tokio::test(start_paused = true)]
    async fn no_batch_grows_past_the_most_written_at_once() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..MAX_BATCH * 2 {
            tx.send(i).unwrap();
        }
        let (batch, _) = first_and_more(&mut rx, MAX_BATCH * 2, &CancellationToken::new()).await;
        assert_eq!(batch.len(), MAX_BATCH);
    }
}
