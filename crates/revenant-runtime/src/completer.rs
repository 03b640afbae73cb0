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

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store_retry::retry;
use revenant_core::error::StoreError;
use revenant_core::store::{
    Fenced, JobCompleteParams, JobFailParams, JobFailure, JobReleaseParams, LeaseRef, Store,
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
    Complete(LeaseRef),
    Fail(JobFailure),
    Release(LeaseRef),
}

/// Why a result could not be written.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum AckError {
    #[error("store error: {0}")]
    Store(String),
    #[error("the completer has stopped")]
    Stopped,
}

struct Request {
    ack: Ack,
    reply: oneshot::Sender<Result<Fenced, AckError>>,
}

/// The executors' side.
#[derive(Clone)]
pub(crate) struct CompleterHandle {
    tx: mpsc::UnboundedSender<Request>,
    /// One permit per result handed over and not yet written.
    unwritten: Arc<Semaphore>,
    /// The permits `unwritten` started with.
    max_unwritten: u32,
}

impl CompleterHandle {
    /// Writes one result (batched with others) and returns the fenced result.
    pub(crate) async fn send(&self, ack: Ack) -> Result<Fenced, AckError> {
        self.queue(ack)?.await.map_err(|_| AckError::Stopped)?
    }

    /// [`send`](Self::send), freeing `slot` once the result is queued (see the module
    /// docs): waits, slot held, while the most results allowed are queued already.
    /// Without room for any (a worker that does not claim ahead), the slot is held
    /// until the result is written.
    pub(crate) async fn hand_over(
        &self,
        ack: Ack,
        slot: OwnedSemaphorePermit,
    ) -> Result<Fenced, AckError> {
        if self.max_unwritten == 0 {
            let written = self.send(ack).await;
            drop(slot);
            return written;
        }
        let Ok(_unwritten) = self.unwritten.clone().acquire_owned().await else {
            return Err(AckError::Stopped);
        };
        let answer = self.queue(ack)?;
        drop(slot);
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
    let task = tokio::spawn(run(store, rx, max_unwritten / 2, stop, abandon));
    let handle = CompleterHandle {
        tx,
        unwritten: Arc::new(Semaphore::new(max_unwritten)),
        max_unwritten: max_unwritten as u32,
    };
    (handle, task)
}

/// Writes what the executors send, in batches; gathers batches of `gather` results
/// (0: writes what is waiting at once).
async fn run(
    store: Arc<dyn Store>,
    mut rx: mpsc::UnboundedReceiver<Request>,
    gather: usize,
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
        gather_more(&mut rx, &mut batch, gather, &stop).await;
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
/// [`GATHER_GAP`], or [`GATHER_MAX`] has passed since the call, or `stop` fires (see
/// the module docs).
async fn gather_more<T>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    batch: &mut Vec<T>,
    target: usize,
    stop: &CancellationToken,
) {
    let until = Instant::now() + GATHER_MAX;
    while batch.len() < target.min(MAX_BATCH) {
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
            Ack::Complete(lease) => completes.push((lease, request.reply)),
            Ack::Fail(failure) => fails.push((failure, request.reply)),
            Ack::Release(lease) => releases.push((lease, request.reply)),
        }
    }
    if !completes.is_empty() {
        let leases: Vec<LeaseRef> = completes.iter().map(|(lease, _)| *lease).collect();
        let result = call_batched(&leases, abandon, "job_complete", |leases| {
            store.job_complete(JobCompleteParams { leases, now: None })
        })
        .await;
        reply_all(completes.into_iter().map(|(_, reply)| reply), result);
    }
    if !fails.is_empty() {
        let failures: Vec<JobFailure> = fails.iter().map(|(failure, _)| failure.clone()).collect();
        let result = call_batched(&failures, abandon, "job_fail", |failures| {
            store.job_fail(JobFailParams {
                failures,
                now: None,
            })
        })
        .await;
        reply_all(fails.into_iter().map(|(_, reply)| reply), result);
    }
    if !releases.is_empty() {
        let leases: Vec<LeaseRef> = releases.iter().map(|(lease, _)| *lease).collect();
        let result = call_batched(&leases, abandon, "job_release", |leases| {
            store.job_release(JobReleaseParams { leases, now: None })
        })
        .await;
        reply_all(releases.into_iter().map(|(_, reply)| reply), result);
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

fn reply_all(
    replies: impl Iterator<Item = oneshot::Sender<Result<Fenced, AckError>>>,
    results: Vec<Result<Fenced, AckError>>,
) {
    for (reply, result) in replies.zip(results) {
        // The executor may be gone (aborted at shutdown); nothing to tell it then.
        let _ = reply.send(result);
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

    async fn first_and_more(
        rx: &mut mpsc::UnboundedReceiver<usize>,
        target: usize,
        stop: &CancellationToken,
    ) -> (Vec<usize>, Duration) {
        let mut batch = vec![rx.recv().await.expect("a first item")];
        let started = Instant::now();
        gather_more(rx, &mut batch, target, stop).await;
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
    async fn no_batch_grows_past_the_most_written_at_once() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..MAX_BATCH * 2 {
            tx.send(i).unwrap();
        }
        let (batch, _) = first_and_more(&mut rx, MAX_BATCH * 2, &CancellationToken::new()).await;
        assert_eq!(batch.len(), MAX_BATCH);
    }
}
