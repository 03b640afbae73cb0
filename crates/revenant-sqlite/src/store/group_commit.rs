//! Group commit: the enqueue calls and batches of results (completions, failed
//! attempts) waiting for the writer share one transaction, so they share its commit.
//!
//! Every write is a transaction of its own, and in WAL mode with `synchronous = FULL`
//! every commit syncs the WAL to disk. An enqueue of one job was a commit of its own:
//! at 1,000 single enqueues a second beside a worker's claims and completions, the one
//! writer spent its time syncing, fell behind its arrivals, and enqueue-to-start
//! latency grew to seconds (`bench/run --workload w3`: p50 0.5 s to 3 s at 1,000
//! jobs/s, 2 ms at 100). Results came the same way: the runtime's completer writes a
//! batch's failures and its completions as two calls at once (on PostgreSQL, two
//! connections), and each was a commit of its own, writing the pages the two share
//! (the jobs of one claim sit side by side) to the WAL twice.
//!
//! A call queues its work here, then waits for the writer's turn. The call that gets
//! the turn takes every call queued by then (its own, unless an earlier turn took it)
//! and writes them in one transaction: one `BEGIN`, each call's statements as the
//! call alone would make them, in arrival order, one commit. Nothing is acknowledged
//! before that commit, so durability is unchanged. While the writer is idle a turn
//! holds one call and this is exactly the old path; the busier the writer, the more
//! calls a turn holds, so the writer keeps up instead of falling behind.
//!
//! Failures stay per call. A call whose statements fail, or a commit that fails, rolls
//! the shared transaction back; each call of the turn is then written alone, in its own
//! transaction, and answered with its own result, as if there had been no sharing.
//! Unique keys: the calls of a turn run in queue order in one transaction, each seeing
//! the writes of those before it, so a key taken by an earlier call of the turn makes a
//! later one a duplicate, as written one after the other. Results cannot meet in a
//! turn: a lease has one result in flight, and a result under a lease that is gone
//! matches no running row.
//!
//! Cancellation: a turn runs in a task of its own, so a caller dropped half-way (a
//! timeout, an HTTP client gone) cannot roll back the others' writes or leave their
//! answer unknown. A call dropped before its turn began is skipped: nothing of it is
//! written.

use std::collections::BTreeSet;
use std::sync::Arc;

use revenant_core::store::{Enqueued, Fenced, JobCompleteParams, JobEnqueueParams, JobFailParams};
use revenant_core::StoreError;
use sqlx::sqlite::SqlitePool;
use sqlx::{Sqlite, Transaction};
use tokio::sync::{oneshot, OwnedMutexGuard};

use super::{begin_write, clock, SqliteStore};
use crate::error::classify;

/// A batch of results to write.
pub(super) enum Settle {
    Complete(JobCompleteParams),
    Fail(JobFailParams),
}

/// What one call writes.
enum Work {
    /// Jobs to insert, with their payloads serialized before the call queued.
    Enqueue {
        params: JobEnqueueParams,
        payloads: Vec<String>,
    },
    Settle(Settle),
}

/// What one call wrote.
#[derive(Debug)]
enum Written {
    Enqueued(Vec<Enqueued>),
    Settled(Vec<Fenced>),
}

impl Written {
    /// An enqueue call's results.
    fn enqueued(self) -> Result<Vec<Enqueued>, StoreError> {
        match self {
            Written::Enqueued(enqueued) => Ok(enqueued),
            Written::Settled(_) => Err(mismatched()),
        }
    }

    /// A batch of results' answers.
    fn settled(self) -> Result<Vec<Fenced>, StoreError> {
        match self {
            Written::Settled(fenced) => Ok(fenced),
            Written::Enqueued(_) => Err(mismatched()),
        }
    }
}

/// What one call gets back: what it wrote, and the queues to wake.
type Answer = Result<(Written, BTreeSet<String>), StoreError>;

/// One call waiting for the writer.
pub(super) struct Pending {
    work: Work,
    reply: oneshot::Sender<Answer>,
}

/// The calls waiting for the writer, in arrival order.
#[derive(Default)]
pub(super) struct Queue(std::sync::Mutex<Vec<Pending>>);

impl Queue {
    fn push(&self, pending: Pending) {
        self.lock().push(pending);
    }

    fn take(&self) -> Vec<Pending> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        // A panic while the lock is held cannot leave the list half-changed (push and
        // take are single steps), so a poisoned lock is still a good list.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl SqliteStore {
    /// Writes `params` (validated, `payloads` serialized) with whatever other calls
    /// are waiting for the writer; returns this call's results and the queues to wake.
    pub(super) async fn enqueue_grouped(
        &self,
        params: JobEnqueueParams,
        payloads: Vec<String>,
    ) -> Result<(Vec<Enqueued>, BTreeSet<String>), StoreError> {
        let (written, queues) = self.grouped(Work::Enqueue { params, payloads }).await?;
        Ok((written.enqueued()?, queues))
    }

    /// Writes a batch of results (validated, not empty) with whatever other calls are
    /// waiting for the writer; returns one result per item and the queues to wake.
    pub(super) async fn settle_grouped(
        &self,
        settle: Settle,
    ) -> Result<(Vec<Fenced>, BTreeSet<String>), StoreError> {
        let (written, queues) = self.grouped(Work::Settle(settle)).await?;
        Ok((written.settled()?, queues))
    }

    async fn grouped(&self, work: Work) -> Answer {
        let (reply, mut answer) = oneshot::channel();
        self.waiting.push(Pending { work, reply });
        // Lets calls made at the same moment queue beside this one before its turn
        // begins: the completer's completions and failures of one batch come as two
        // calls at once (`tokio::join!`), and with the writer idle the first would
        // otherwise take its turn alone.
        tokio::task::yield_now().await;
        // Either a turn that began before ours writes our call, or ours does.
        let turn = tokio::select! {
            biased;
            answered = &mut answer => return received(answered),
            turn = Arc::clone(&self.write_lock).lock_owned() => turn,
        };
        let turn_calls = self.waiting.take();
        if turn_calls.is_empty() {
            // An earlier turn took ours as we got the lock; its answer is on the way.
            drop(turn);
        } else {
            tokio::spawn(write_turn(turn, self.writer.clone(), turn_calls));
        }
        received(answer.await)
    }
}

/// A call answered with another kind's result: a bug in this module, not the data.
fn mismatched() -> StoreError {
    StoreError::Backend {
        message: "a grouped write was answered with another kind of result".into(),
        source: None,
    }
}

fn received(answer: Result<Answer, oneshot::error::RecvError>) -> Answer {
    answer.unwrap_or_else(|_| {
        Err(StoreError::Backend {
            message: "the task writing this call ended without an answer".into(),
            source: None,
        })
    })
}

/// Writes one turn's calls, holding the writer's turn throughout, and answers each.
/// Returns how many transactions it committed or tried (for the tests).
async fn write_turn(_turn: OwnedMutexGuard<()>, writer: SqlitePool, calls: Vec<Pending>) -> usize {
    let calls: Vec<Pending> = calls
        .into_iter()
        .filter(|call| !call.reply.is_closed())
        .collect();
    let mut transactions = 0;
    if calls.len() > 1 {
        transactions += 1;
        match write_shared(&writer, &calls).await {
            Ok(answers) => {
                for (call, answer) in calls.into_iter().zip(answers) {
                    let _ = call.reply.send(Ok(answer));
                }
                return transactions;
            }
            Err(err) => tracing::debug!(
                calls = calls.len(),
                error = %err,
                "a shared write transaction failed; writing its calls one at a time"
            ),
        }
    }
    for call in calls {
        transactions += 1;
        let answer = write_alone(&writer, &call).await;
        let _ = call.reply.send(answer);
    }
    transactions
}

/// The calls' writes in one transaction, in order; all or nothing.
async fn write_shared(
    writer: &SqlitePool,
    calls: &[Pending],
) -> Result<Vec<(Written, BTreeSet<String>)>, StoreError> {
    let mut tx = begin_write(writer).await?;
    let mut answers = Vec::with_capacity(calls.len());
    for call in calls {
        answers.push(write_one(&mut tx, &call.work).await?);
    }
    tx.commit().await.map_err(classify)?;
    Ok(answers)
}

/// One call's statements in `tx`, at the call's clock.
async fn write_one(
    tx: &mut Transaction<'static, Sqlite>,
    work: &Work,
) -> Result<(Written, BTreeSet<String>), StoreError> {
    Ok(match work {
        Work::Enqueue { params, payloads } => {
            let now = clock(params.now);
            let (enqueued, queues) = SqliteStore::enqueue_in(tx, params, payloads, now).await?;
            (Written::Enqueued(enqueued), queues)
        }
        Work::Settle(Settle::Complete(params)) => {
            let (fenced, queues) = SqliteStore::complete_in(tx, params, clock(params.now)).await?;
            (Written::Settled(fenced), queues)
        }
        Work::Settle(Settle::Fail(params)) => {
            let (fenced, queues) = SqliteStore::fail_in(tx, params, clock(params.now)).await?;
            (Written::Settled(fenced), queues)
        }
    })
}

/// One call in a transaction of its own.
async fn write_alone(writer: &SqlitePool, call: &Pending) -> Answer {
    let mut answers = write_shared(writer, std::slice::from_ref(call)).await?;
    Ok(answers.remove(0))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use revenant_core::decide::Failure;
    use revenant_core::store::{FailAction, JobClaimParams, JobFailure, LeaseRef, Store};
    use revenant_core::{FailureClass, NewJob};
    use serde_json::json;

    use super::*;
    use crate::store::serialize_payloads;

    fn call(job: NewJob) -> (Pending, oneshot::Receiver<Answer>) {
        let params = JobEnqueueParams {
            jobs: vec![job],
            default_max_attempts: 3,
            now: None,
        };
        let payloads = serialize_payloads(&params).unwrap();
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            work: Work::Enqueue { params, payloads },
            reply,
        };
        (pending, answer)
    }

    async fn turn(store: &SqliteStore, calls: Vec<Pending>) -> usize {
        let guard = Arc::clone(&store.write_lock).lock_owned().await;
        write_turn(guard, store.writer.clone(), calls).await
    }

    /// An enqueue call's answer: its jobs and queues.
    fn enqueued(answer: Answer) -> Result<(Vec<Enqueued>, BTreeSet<String>), StoreError> {
        let (written, queues) = answer?;
        Ok((written.enqueued()?, queues))
    }

    async fn kinds(store: &SqliteStore) -> Vec<String> {
        sqlx::query_scalar("SELECT kind FROM jobs ORDER BY id")
            .fetch_all(&store.pool)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_calls_of_a_turn_share_one_transaction_and_each_gets_its_own_answer() {
        let store = SqliteStore::open_temporary().await.unwrap();
        let (calls, answers): (Vec<_>, Vec<_>) = ["a", "b", "c"]
            .into_iter()
            .map(|kind| call(NewJob::new("q", kind, json!({}))))
            .unzip();
        assert_eq!(turn(&store, calls).await, 1, "one transaction for the turn");
        let mut ids = Vec::new();
        for answer in answers {
            let (enqueued, queues) = enqueued(answer.await.unwrap()).unwrap();
            assert_eq!(enqueued.len(), 1);
            assert!(!enqueued[0].duplicate);
            assert_eq!(queues.into_iter().collect::<Vec<_>>(), ["q"]);
            ids.push(enqueued[0].id);
        }
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "in call order: {ids:?}"
        );
        assert_eq!(kinds(&store).await, ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn a_unique_key_taken_earlier_in_the_turn_makes_a_later_call_a_duplicate() {
        let store = SqliteStore::open_temporary().await.unwrap();
        let (first, first_answer) = call(NewJob::new("q", "a", json!({})).with_unique_key("k"));
        let (second, second_answer) = call(NewJob::new("q", "b", json!({})).with_unique_key("k"));
        assert_eq!(turn(&store, vec![first, second]).await, 1);
        let (first, _) = enqueued(first_answer.await.unwrap()).unwrap();
        let (second, _) = enqueued(second_answer.await.unwrap()).unwrap();
        assert!(!first[0].duplicate);
        assert!(second[0].duplicate);
        assert_eq!(second[0].id, first[0].id, "the holder's id");
        assert_eq!(kinds(&store).await, ["a"]);
    }

    /// A call whose inserts fail must not take the others of its turn down with it.
    #[tokio::test]
    async fn a_call_that_fails_fails_alone_and_the_others_of_its_turn_are_written() {
        let store = SqliteStore::open_temporary().await.unwrap();
        sqlx::query(
            "CREATE TRIGGER refuse BEFORE INSERT ON jobs WHEN NEW.kind = 'refused' \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
        )
        .execute(&store.writer)
        .await
        .unwrap();
        let (calls, answers): (Vec<_>, Vec<_>) = ["a", "refused", "c"]
            .into_iter()
            .map(|kind| call(NewJob::new("q", kind, json!({}))))
            .unzip();
        assert_eq!(
            turn(&store, calls).await,
            4,
            "the shared transaction, then one per call"
        );
        let answers: Vec<Answer> = futures_answers(answers).await;
        assert!(answers[0].is_ok(), "{:?}", answers[0]);
        let err = answers[1].as_ref().unwrap_err().to_string();
        assert!(err.contains("refused by the test"), "{err}");
        assert!(answers[2].is_ok(), "{:?}", answers[2]);
        assert_eq!(kinds(&store).await, ["a", "c"]);
    }

    async fn futures_answers(answers: Vec<oneshot::Receiver<Answer>>) -> Vec<Answer> {
        let mut out = Vec::new();
        for answer in answers {
            out.push(answer.await.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn a_call_whose_caller_is_gone_before_its_turn_is_not_written() {
        let store = SqliteStore::open_temporary().await.unwrap();
        let (gone, answer) = call(NewJob::new("q", "gone", json!({})));
        drop(answer);
        let (kept, kept_answer) = call(NewJob::new("q", "kept", json!({})));
        assert_eq!(turn(&store, vec![gone, kept]).await, 1);
        enqueued(kept_answer.await.unwrap()).unwrap();
        assert_eq!(kinds(&store).await, ["kept"]);
    }

    /// Two jobs of `q`, enqueued and claimed: their leases.
    async fn claimed_two(store: &SqliteStore) -> Vec<LeaseRef> {
        store
            .job_enqueue(JobEnqueueParams {
                jobs: vec![
                    NewJob::new("q", "one", json!({})),
                    NewJob::new("q", "two", json!({})),
                ],
                default_max_attempts: 3,
                now: None,
            })
            .await
            .unwrap();
        let claimed = store
            .job_claim(JobClaimParams {
                queue: "q".into(),
                worker: "w".into(),
                limit: 2,
                lease: Duration::from_secs(60),
                reclaim: false,
                now: None,
            })
            .await
            .unwrap();
        claimed
            .iter()
            .map(|job| LeaseRef {
                id: job.id,
                lease_token: job.lease_token.unwrap(),
            })
            .collect()
    }

    fn settle(settle: Settle) -> (Pending, oneshot::Receiver<Answer>) {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            work: Work::Settle(settle),
            reply,
        };
        (pending, answer)
    }

    fn failed(lease: LeaseRef) -> Settle {
        Settle::Fail(JobFailParams {
            kept: Vec::new(),
            failures: vec![JobFailure {
                lease,
                failure: Failure {
                    class: FailureClass::Transient,
                    message: "the provider answered 503".into(),
                },
                action: FailAction::Retry {
                    delay: Duration::ZERO,
                },
                worker: None,
            }],
            now: None,
        })
    }

    fn settled(answer: Answer) -> Vec<Fenced> {
        answer.unwrap().0.settled().unwrap()
    }

    async fn statuses(store: &SqliteStore) -> Vec<(String, String, i64)> {
        sqlx::query_as("SELECT kind, status, json_array_length(errors) FROM jobs ORDER BY id")
            .fetch_all(&store.pool)
            .await
            .unwrap()
    }

    /// The completer's two calls for one batch (its completions and its failures) and
    /// an enqueue beside them are one commit.
    #[tokio::test]
    async fn completions_failures_and_enqueues_waiting_together_share_one_transaction() {
        let store = SqliteStore::open_temporary().await.unwrap();
        let leases = claimed_two(&store).await;
        let (complete, completed) = settle(Settle::Complete(JobCompleteParams {
            kept: Vec::new(),
            leases: vec![leases[0]],
            now: None,
        }));
        let (fail, failed_answer) = settle(failed(leases[1]));
        let (enqueue, enqueued_answer) = call(NewJob::new("q", "three", json!({})));
        assert_eq!(turn(&store, vec![complete, fail, enqueue]).await, 1);
        assert_eq!(settled(completed.await.unwrap()), [Fenced::Applied]);
        assert_eq!(settled(failed_answer.await.unwrap()), [Fenced::Applied]);
        enqueued(enqueued_answer.await.unwrap()).unwrap();
        assert_eq!(
            statuses(&store).await,
            [
                ("one".into(), "completed".into(), 0),
                ("two".into(), "ready".into(), 1),
                ("three".into(), "ready".into(), 0),
            ]
        );
    }

    /// A batch of results whose write fails is answered with its error, alone; the
    /// other batch of its turn is written.
    #[tokio::test]
    async fn a_batch_of_results_that_fails_fails_alone() {
        let store = SqliteStore::open_temporary().await.unwrap();
        let leases = claimed_two(&store).await;
        sqlx::query(
            "CREATE TRIGGER refuse BEFORE UPDATE ON jobs WHEN NEW.status = 'completed' \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
        )
        .execute(&store.writer)
        .await
        .unwrap();
        let (complete, completed) = settle(Settle::Complete(JobCompleteParams {
            kept: Vec::new(),
            leases: vec![leases[0]],
            now: None,
        }));
        let (fail, failed_answer) = settle(failed(leases[1]));
        assert_eq!(
            turn(&store, vec![complete, fail]).await,
            3,
            "the shared transaction, then one per call"
        );
        let err = completed.await.unwrap().unwrap_err().to_string();
        assert!(err.contains("refused by the test"), "{err}");
        assert_eq!(settled(failed_answer.await.unwrap()), [Fenced::Applied]);
        assert_eq!(
            statuses(&store).await,
            [
                ("one".into(), "running".into(), 0),
                ("two".into(), "ready".into(), 1),
            ]
        );
    }

    /// Through the public call: enqueues made while the writer is busy wait for one
    /// turn, and every one is answered and written once the writer is free.
    #[tokio::test]
    async fn enqueues_waiting_for_a_busy_writer_are_written_together() {
        let store = Arc::new(SqliteStore::open_temporary().await.unwrap());
        let busy = Arc::clone(&store.write_lock).lock_owned().await;
        let calls: Vec<_> = (0..50)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    store
                        .job_enqueue(JobEnqueueParams {
                            jobs: vec![NewJob::new("q", format!("k{i}"), json!({}))],
                            default_max_attempts: 3,
                            now: None,
                        })
                        .await
                })
            })
            .collect();
        // Generous: on a busy machine the spawned calls may take a while to queue.
        let queued = async {
            while store.waiting.lock().len() < 50 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), queued)
            .await
            .expect("all 50 calls queue while the writer is busy");
        drop(busy);
        let mut ids = Vec::new();
        for call in calls {
            let enqueued = call.await.unwrap().unwrap();
            ids.push(enqueued[0].id);
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 50, "50 distinct jobs");
        assert_eq!(kinds(&store).await.len(), 50);
        assert!(store.waiting.lock().is_empty());
    }
}
