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

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::store_retry::retry;
use revenant_core::error::StoreError;
use revenant_core::store::{
    Fenced, JobCompleteParams, JobFailParams, JobFailure, JobReleaseParams, LeaseRef, Store,
};

/// The most results written per batch.
pub(crate) const MAX_BATCH: usize = 500;

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
    let task = tokio::spawn(run(store, rx, stop, abandon));
    let max_unwritten = unwritten.min(MAX_BATCH);
    let handle = CompleterHandle {
        tx,
        unwritten: Arc::new(Semaphore::new(max_unwritten)),
        max_unwritten: max_unwritten as u32,
    };
    (handle, task)
}

async fn run(
    store: Arc<dyn Store>,
    mut rx: mpsc::UnboundedReceiver<Request>,
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
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        write(store.as_ref(), batch, &abandon).await;
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
