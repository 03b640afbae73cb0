//! The runtime end to end on the real SQLite store, a fresh file per test, with store
//! failures injected where a test asks for them ([`FaultyStore`]). More of the runtime,
//! through the facade, is proven in `crates/revenant/tests/runtime_*.rs`.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::faulty::FaultyStore;
use crate::{JobContext, JobError, ShutdownHandle, Worker, WorkerBuilder};
use revenant_core::backoff::{Backoff, Jitter};
use revenant_core::job::{DeadReason, FailureClass, Job, JobState, NewJob};
use revenant_core::policy::{PolicySet, RetryPolicy};
use revenant_core::store::{CancelTarget, JobCancelParams, JobEnqueueParams, Store};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn policy(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(max_attempts)
        .backoff(Backoff {
            base: ms(10),
            multiplier: 2.0,
            cap: ms(40),
        })
        .jitter(Jitter::None)
        .lease(ms(600))
        .attempt_timeout(ms(300))
        .heartbeat(ms(100))
        .build()
        .unwrap()
}

fn builder(store: &Arc<FaultyStore>) -> WorkerBuilder {
    builder_with(store, 4)
}

fn builder_with(store: &Arc<FaultyStore>, slots: usize) -> WorkerBuilder {
    Worker::builder(store.clone())
        .queue("q", slots)
        .policies(PolicySet::new(policy(3)))
        .poll_interval(ms(20))
        .shutdown_grace(ms(200))
        .worker_id("w1")
}

async fn enqueue(store: &FaultyStore, kind: &str, payload: serde_json::Value) -> i64 {
    store
        .job_enqueue(JobEnqueueParams {
            jobs: vec![NewJob::new("q", kind, payload)],
            default_max_attempts: 3,
            now: None,
        })
        .await
        .unwrap()[0]
        .id
}

/// Polls until `done` holds for every job, or panics at the deadline (generous: a
/// busy two-core CI machine writing SQLite files with fsync).
async fn wait_until(store: &FaultyStore, what: &str, done: impl Fn(&[Job]) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let jobs = store.all().await;
        if done(&jobs) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {jobs:#?}"
        );
        tokio::time::sleep(ms(5)).await;
    }
}

/// Polls until `done` holds, or panics at the deadline (as generous as
/// [`wait_until`]'s).
async fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(ms(5)).await;
    }
}

fn all_terminal(jobs: &[Job]) -> bool {
    jobs.iter().all(|j| j.status.is_terminal())
}

/// Registers kind `count`: each attempt adds one to `ran` and succeeds.
fn counting(builder: WorkerBuilder, ran: &Arc<AtomicUsize>) -> WorkerBuilder {
    let ran = ran.clone();
    builder.handler_fn("count", move |_ctx: JobContext, _: serde_json::Value| {
        let ran = ran.clone();
        async move {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    })
}

fn start(worker: Worker) -> (ShutdownHandle, tokio::task::JoinHandle<()>) {
    let handle = worker.shutdown_handle();
    let task = tokio::spawn(async move {
        worker
            .run_until(std::future::pending())
            .await
            .expect("the worker ends Ok")
    });
    (handle, task)
}

#[derive(serde::Deserialize)]
struct Step {
    what: String,
}

async fn scripted(ctx: JobContext, step: Step) -> Result<(), JobError> {
    match step.what.as_str() {
        "ok" => Ok(()),
        "retry" => Err(JobError::retry("provider said 503")),
        "retry_once" if ctx.attempt() == 1 => Err(std::io::Error::other("flaky"))?,
        "retry_once" => Ok(()),
        "permanent" => Err(JobError::permanent("template crashed on 'Café'")),
        "panic" => panic!("boom on attempt {}", ctx.attempt()),
        "hang" => {
            ctx.cancelled().await;
            Ok(())
        }
        "snooze" => {
            // The attempt is given back, so every run is attempt 1: snooze once.
            static SNOOZED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            if SNOOZED.swap(true, Ordering::SeqCst) {
                Ok(())
            } else {
                Err(JobError::snooze(ms(10)))
            }
        }
        "cancel" => Err(JobError::cancel("order refunded")),
        other => Err(JobError::permanent(format!("unknown step {other}"))),
    }
}

#[tokio::test]
async fn every_outcome_ends_in_its_state() {
    let store = Arc::new(FaultyStore::open().await);
    let (shutdown, task) = start(
        builder(&store)
            .handler_fn("step", scripted)
            .build()
            .unwrap(),
    );
    let id = |what: &str| json!({ "what": what });
    let ok = enqueue(&store, "step", id("ok")).await;
    let retry = enqueue(&store, "step", id("retry")).await;
    let once = enqueue(&store, "step", id("retry_once")).await;
    let permanent = enqueue(&store, "step", id("permanent")).await;
    let panic = enqueue(&store, "step", id("panic")).await;
    let hang = enqueue(&store, "step", id("hang")).await;
    let snooze = enqueue(&store, "step", id("snooze")).await;
    let cancel = enqueue(&store, "step", id("cancel")).await;
    let undecodable = enqueue(&store, "step", json!({ "nope": 1 })).await;
    let unknown = enqueue(&store, "nobody_handles_this", json!({})).await;
    wait_until(&store, "every job to finish", all_terminal).await;
    shutdown.shutdown();
    task.await.unwrap();

    let jobs: HashMap<i64, Job> = store.all().await.into_iter().map(|j| (j.id, j)).collect();
    let check = |id, status, attempts, reason: Option<DeadReason>| {
        let job = jobs[&id].clone();
        assert_eq!(
            (job.status, job.attempts, job.dead_reason),
            (status, attempts, reason),
            "{job:#?}"
        );
        job
    };
    check(ok, JobState::Completed, 1, None);
    let job = check(
        retry,
        JobState::Dead,
        3,
        Some(DeadReason::AttemptsExhausted),
    );
    assert_eq!(job.errors.len(), 3);
    assert!(
        job.errors.iter().all(|e| e.class == FailureClass::Transient
            && e.message == "provider said 503"
            && e.worker.as_deref() == Some("w1")),
        "{job:#?}"
    );
    let job = check(once, JobState::Completed, 2, None);
    assert_eq!(job.errors[0].message, "flaky");
    check(permanent, JobState::Dead, 1, Some(DeadReason::Permanent));
    let job = check(
        panic,
        JobState::Dead,
        3,
        Some(DeadReason::AttemptsExhausted),
    );
    assert_eq!(job.errors[2].class, FailureClass::Panic);
    assert_eq!(job.errors[2].message, "handler panicked: boom on attempt 3");
    let job = check(hang, JobState::Dead, 3, Some(DeadReason::AttemptsExhausted));
    assert_eq!(job.errors[0].class, FailureClass::Timeout);
    assert_eq!(job.errors[0].message, "attempt timed out after 300ms");
    // Snoozed once (attempt given back), then succeeded on its first counted attempt.
    check(snooze, JobState::Completed, 1, None);
    let job = check(cancel, JobState::Cancelled, 1, None);
    // The handler's reason is kept in the history (`JobCancelParams::message`).
    assert_eq!(job.errors.len(), 1, "{job:#?}");
    assert!(job.errors[0].message.contains("order refunded"), "{job:#?}");
    let job = check(
        undecodable,
        JobState::Dead,
        1,
        Some(DeadReason::DecodeError),
    );
    assert!(
        job.errors[0].message.contains("missing field `what`"),
        "{job:#?}"
    );
    let job = check(unknown, JobState::Dead, 1, Some(DeadReason::UnknownKind));
    assert!(job.errors[0].message.contains("nobody_handles_this"));
}

#[tokio::test]
async fn storage_errors_are_retried_without_spending_attempts() {
    let store = Arc::new(FaultyStore::open().await);
    for _ in 0..20 {
        enqueue(&store, "step", json!({ "what": "ok" })).await;
    }
    // Every other store call fails for a while: registration, claims, acks.
    store.failures.store(30, Ordering::SeqCst);
    let (shutdown, task) = start(
        builder(&store)
            .handler_fn("step", scripted)
            .build()
            .unwrap(),
    );
    wait_until(&store, "every job to complete", |jobs| {
        jobs.iter().all(|j| j.status == JobState::Completed)
    })
    .await;
    shutdown.shutdown();
    task.await.unwrap();
    let jobs = store.all().await;
    assert_eq!(jobs.len(), 20);
    assert!(
        jobs.iter().all(|j| j.attempts == 1 && j.errors.is_empty()),
        "{jobs:#?}"
    );
    assert!(
        store.failures.load(Ordering::SeqCst) < 25,
        "store calls failed along the way"
    );
}

#[tokio::test]
async fn concurrency_is_never_exceeded_and_acks_are_batched() {
    let store = Arc::new(FaultyStore::open().await);
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (running.clone(), peak.clone());
    let worker = builder(&store)
        .handler_fn("count", move |_ctx: JobContext, _: serde_json::Value| {
            let (running, peak) = (r.clone(), p.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(ms(2)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .build()
        .unwrap();
    for _ in 0..200 {
        enqueue(&store, "count", json!(null)).await;
    }
    let (shutdown, task) = start(worker);
    wait_until(&store, "every job to complete", |jobs| {
        jobs.len() == 200 && jobs.iter().all(|j| j.status == JobState::Completed)
    })
    .await;
    shutdown.shutdown();
    task.await.unwrap();
    assert_eq!(
        peak.load(Ordering::SeqCst),
        4,
        "concurrency 4 is used and not exceeded"
    );
    let completes = store.calls("job_complete");
    assert!(
        completes < 200,
        "{completes} job_complete calls for 200 jobs"
    );
}

/// The leases of a dead process, in a queue with nothing else to do: reclaimed one
/// after another as each reclaimed job ends, not one per poll interval, and never two
/// at once in one process (a job that crashed its worker must not take its former
/// neighbours down with it again).
#[tokio::test]
async fn expired_leases_of_an_idle_queue_are_reclaimed_one_at_a_time_without_waiting_for_the_poll()
{
    const JOBS: usize = 20;
    let store = Arc::new(FaultyStore::open().await);
    // A process enqueued them, claimed them all a second ago and died: every lease ran
    // out 950 ms ago. A clock pinned in the past, not a sleep.
    let then = chrono::Utc::now() - chrono::Duration::seconds(1);
    store
        .job_enqueue(JobEnqueueParams {
            jobs: (0..JOBS)
                .map(|_| NewJob::new("q", "count", json!(null)))
                .collect(),
            default_max_attempts: 3,
            now: Some(then),
        })
        .await
        .unwrap();
    let held = store
        .job_claim(revenant_core::store::JobClaimParams {
            queue: "q".into(),
            worker: "dead".into(),
            limit: JOBS as u32,
            lease: ms(50),
            reclaim: true,
            now: Some(then),
        })
        .await
        .unwrap();
    assert_eq!(held.len(), JOBS);

    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (running.clone(), peak.clone());
    // A poll interval far longer than the whole run should take: at one reclaim per
    // poll the 20 would need 40 s.
    let worker = builder(&store)
        .poll_interval(Duration::from_secs(2))
        .handler_fn("count", move |ctx: JobContext, _: serde_json::Value| {
            let (running, peak) = (r.clone(), p.clone());
            async move {
                // Attempt 2: a reclaimed job (fresh ones run at attempt 1).
                let reclaimed = ctx.attempt() > 1;
                if reclaimed {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                }
                tokio::time::sleep(ms(10)).await;
                if reclaimed {
                    running.fetch_sub(1, Ordering::SeqCst);
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let began = tokio::time::Instant::now();
    let (shutdown, task) = start(worker);
    // Fresh jobs arriving meanwhile wake the fetcher while a reclaimed job runs: its
    // claims take them, not another expired lease.
    for _ in 0..5 {
        enqueue(&store, "count", json!("fresh")).await;
        tokio::time::sleep(ms(5)).await;
    }
    wait_until(&store, "every job to complete", |jobs| {
        jobs.iter().all(|j| j.status == JobState::Completed)
    })
    .await;
    let took = began.elapsed();
    shutdown.shutdown();
    task.await.unwrap();
    assert!(
        took < Duration::from_secs(8),
        "20 reclaims took {took:?}: paced by the 2 s poll interval"
    );
    assert_eq!(
        peak.load(Ordering::SeqCst),
        1,
        "two reclaimed jobs ran at once"
    );
    let held: Vec<i64> = held.iter().map(|j| j.id).collect();
    let reclaimed: Vec<Job> = store
        .all()
        .await
        .into_iter()
        .filter(|j| held.contains(&j.id))
        .collect();
    assert_eq!(reclaimed.len(), JOBS);
    for job in reclaimed {
        assert_eq!(job.attempts, 2, "{job:#?}");
        assert_eq!(job.errors.len(), 1, "{job:#?}");
        assert_eq!(job.errors[0].class, FailureClass::LeaseExpired);
    }
}

#[tokio::test]
async fn a_lost_lease_cancels_the_handler_and_discards_its_result() {
    let store = Arc::new(FaultyStore::open().await);
    // Counts handler futures dropped: the runtime stops a handler by cancelling its
    // token and dropping its future.
    struct Dropped(Arc<AtomicUsize>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let saw_cancel = Arc::new(AtomicUsize::new(0));
    let seen = saw_cancel.clone();
    let worker = builder(&store)
        .handler_fn("watch", move |ctx: JobContext, _: serde_json::Value| {
            let guard = Dropped(seen.clone());
            async move {
                let _guard = guard;
                ctx.cancelled().await;
                Ok(())
            }
        })
        .build()
        .unwrap();
    let id = enqueue(&store, "watch", json!(null)).await;
    let (shutdown, task) = start(worker);
    wait_until(&store, "the job to run", |jobs| {
        jobs[0].status == JobState::Running
    })
    .await;
    // An operator cancels it; the next heartbeat finds the lease gone.
    store
        .job_cancel(JobCancelParams {
            target: CancelTarget::Id(id),
            message: None,
            now: None,
        })
        .await
        .unwrap();
    wait_for("the handler to be cancelled", || {
        saw_cancel.load(Ordering::SeqCst) > 0
    })
    .await;
    shutdown.shutdown();
    task.await.unwrap();
    let job = store.job(id).await;
    assert_eq!(job.status, JobState::Cancelled);
    assert_eq!(
        store.calls("job_complete"),
        0,
        "the discarded result was not written"
    );
}

/// A kind with a lease longer than its queue's is claimed for the queue's lease and
/// extended by its first heartbeat. When that heartbeat never answers (a partition
/// that swallows packets, no reset), the attempt timeout (below the kind's lease) would
/// let the handler run past the claim's lease, while another worker may claim the job:
/// the executor gives the attempt up before the claim's lease can run out, and
/// releases the lease (the job is still its own here: the attempt is given back).
#[tokio::test]
async fn a_handler_whose_heartbeats_never_answer_is_given_up_before_its_lease_runs_out() {
    let store = Arc::new(FaultyStore::open().await);
    let claims = RetryPolicy::builder()
        .lease(ms(1_000))
        .attempt_timeout(ms(500))
        .build()
        .unwrap();
    let long = RetryPolicy::builder()
        .max_attempts(3)
        .lease(ms(20_000))
        .attempt_timeout(ms(15_000))
        .build()
        .unwrap();
    let cancelled_after = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = cancelled_after.clone();
    let runs = Arc::new(AtomicUsize::new(0));
    let worker = builder(&store)
        .policies(PolicySet::new(claims).with_kind("long", long))
        .handler_fn("long", move |ctx: JobContext, _: serde_json::Value| {
            let seen = seen.clone();
            let run = runs.fetch_add(1, Ordering::SeqCst);
            // Records when the runtime stopped the first run: it cancels the token
            // and drops the future, so the record is made when the future goes.
            struct Stopped(Arc<std::sync::Mutex<Vec<Duration>>>, tokio::time::Instant);
            impl Drop for Stopped {
                fn drop(&mut self) {
                    self.0.lock().unwrap().push(self.1.elapsed());
                }
            }
            let stopped = (run == 0).then(|| Stopped(seen.clone(), tokio::time::Instant::now()));
            async move {
                let _stopped = stopped;
                if run > 0 {
                    return Ok(());
                }
                ctx.cancelled().await;
                Ok(())
            }
        })
        .build()
        .unwrap();
    store.stall_heartbeats.send_replace(true);
    let id = enqueue(&store, "long", json!(null)).await;
    let (shutdown, task) = start(worker);
    wait_for("the handler to be given up", || {
        !cancelled_after.lock().unwrap().is_empty()
    })
    .await;
    store.stall_heartbeats.send_replace(false);
    // Released, and run again.
    wait_until(&store, "the job to complete", |jobs| {
        jobs[0].status == JobState::Completed
    })
    .await;
    shutdown.shutdown();
    task.await.unwrap();
    let after = cancelled_after.lock().unwrap()[0];
    // Given up at the claim's lease less its margin (50 ms), not at the attempt
    // timeout (15 s): 5 s is slack for a busy machine, nowhere near the timeout.
    assert!(after < Duration::from_secs(5), "given up after {after:?}");
    let job = store.job(id).await;
    assert_eq!(job.attempts, 1, "the attempt was given back: {job:#?}");
}

#[tokio::test]
async fn shutdown_releases_unfinished_jobs_with_their_attempts_given_back() {
    let store = Arc::new(FaultyStore::open().await);
    let policy = RetryPolicy::builder()
        .lease(ms(20_000))
        .attempt_timeout(ms(10_000))
        .build()
        .unwrap();
    let worker = builder(&store)
        .policies(PolicySet::new(policy))
        .handler_fn("step", scripted)
        .build()
        .unwrap();
    for _ in 0..6 {
        enqueue(&store, "step", json!({ "what": "hang" })).await;
    }
    let (shutdown, task) = start(worker);
    wait_until(&store, "four jobs to run", |jobs| {
        jobs.iter()
            .filter(|j| j.status == JobState::Running)
            .count()
            == 4
    })
    .await;
    let claims = store.calls("job_claim");
    shutdown.shutdown();
    task.await.unwrap();
    assert_eq!(
        store.calls("job_claim"),
        claims,
        "no claim after the signal"
    );
    let jobs = store.all().await;
    assert_eq!(jobs.len(), 6);
    assert!(
        jobs.iter()
            .all(|j| j.status == JobState::Ready && j.attempts == 0),
        "{jobs:#?}"
    );
    assert_eq!(store.calls("job_release"), 1, "one batched release");
    assert!(
        store.worker_list().await.unwrap().is_empty(),
        "left the registry"
    );
}

/// A handler that holds its slot until the test lets it go, counting its starts.
#[derive(Clone)]
struct Gatekeeper {
    started: Arc<AtomicUsize>,
    go: Arc<tokio::sync::Semaphore>,
    /// The attempt number of every start, in order.
    attempts: Arc<std::sync::Mutex<Vec<i32>>>,
}

impl Default for Gatekeeper {
    fn default() -> Self {
        Gatekeeper {
            started: Arc::default(),
            go: Arc::new(tokio::sync::Semaphore::new(0)),
            attempts: Arc::default(),
        }
    }
}

impl Gatekeeper {
    fn handler(
        &self,
    ) -> impl Fn(
        JobContext,
        serde_json::Value,
    ) -> futures::future::BoxFuture<'static, Result<(), JobError>>
           + Send
           + Sync
           + 'static {
        let this = self.clone();
        move |ctx: JobContext, _: serde_json::Value| {
            let this = this.clone();
            Box::pin(async move {
                this.attempts.lock().unwrap().push(ctx.attempt());
                this.started.fetch_add(1, Ordering::SeqCst);
                let permit = this.go.acquire().await.expect("the semaphore stays open");
                permit.forget();
                Ok(())
            })
        }
    }

    fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }
}

/// A policy whose retries are due after `backoff` exactly (no jitter).
fn retry_after(backoff: Duration) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(5)
        .backoff(Backoff {
            base: backoff,
            multiplier: 1.0,
            cap: backoff,
        })
        .jitter(Jitter::None)
        .lease(ms(20_000))
        .attempt_timeout(ms(10_000))
        .build()
        .unwrap()
}

/// Runs one job that fails its first three attempts under `policy`, on a worker built
/// by `worker`, and returns the job as it ended with the lease token and the number of
/// history entries each attempt saw in the store (a claim sets a new token; a kept
/// retry keeps its lease, and its failure is written with the job's next result).
async fn three_failures_then_success(
    policies: PolicySet,
    worker: impl FnOnce(WorkerBuilder) -> WorkerBuilder,
) -> (Job, Vec<(Option<i64>, usize)>) {
    let store = Arc::new(FaultyStore::open().await);
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler = {
        let (store, tokens) = (store.clone(), tokens.clone());
        move |ctx: JobContext, _: serde_json::Value| {
            let (store, tokens) = (store.clone(), tokens.clone());
            async move {
                let job = store.job(ctx.id()).await;
                let seen = (job.lease_token.map(|t| t.0), job.errors.len());
                tokens.lock().unwrap().push(seen);
                if ctx.attempt() <= 3 {
                    return Err(JobError::retry(format!("503 on attempt {}", ctx.attempt())));
                }
                Ok(())
            }
        }
    };
    let built = worker(builder_with(&store, 2))
        .policies(policies)
        .handler_fn("flaky", handler)
        .build()
        .unwrap();
    let id = store
        .job_enqueue(JobEnqueueParams {
            jobs: vec![NewJob::new("q", "flaky", json!(null)).with_max_attempts(5)],
            default_max_attempts: 5,
            now: None,
        })
        .await
        .unwrap()[0]
        .id;
    let (shutdown, task) = start(built);
    wait_until(&store, "the job to finish", all_terminal).await;
    shutdown.shutdown();
    task.await.unwrap();
    let tokens = tokens.lock().unwrap().clone();
    (store.job(id).await, tokens)
}

/// A worker that claims ahead keeps a retry due within milliseconds: the job stays
/// running under the lease it was claimed with (every attempt sees the same token),
/// its failures are not written while it runs again (no attempt sees an entry), and
/// each is recorded with its attempt in the write of its completion, as one through
/// the queue would be, at a time on the store's clock: after the claim, in order, and
/// not after the completion.
#[tokio::test]
async fn a_worker_that_claims_ahead_keeps_its_short_retries() {
    let (job, seen) =
        three_failures_then_success(PolicySet::new(retry_after(ms(1))), |b| b.claim_ahead(4)).await;
    assert!(
        seen.iter().all(|(_, entries)| *entries == 0),
        "the kept failures wait for the job's next result: {seen:?}"
    );
    let tokens: Vec<Option<i64>> = seen.iter().map(|(token, _)| *token).collect();
    assert_eq!(job.status, JobState::Completed, "{job:#?}");
    assert_eq!(job.attempts, 4);
    let attempts: Vec<i32> = job.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 3], "{job:#?}");
    assert!(job
        .errors
        .iter()
        .all(|e| e.message.starts_with("503 on attempt")));
    let times: Vec<_> = job.errors.iter().map(|e| e.at).collect();
    let (claimed, completed) = (job.attempted_at.unwrap(), job.finished_at.unwrap());
    assert!(
        times[0] >= claimed && times.windows(2).all(|w| w[0] <= w[1]) && times[2] <= completed,
        "claimed {claimed}, failed {times:?}, completed {completed}"
    );
    assert_eq!(tokens.len(), 4);
    assert!(tokens[0].is_some());
    assert!(
        tokens.iter().all(|t| *t == tokens[0]),
        "every attempt ran under the first claim's lease: {tokens:?}"
    );
}

/// Retries go through the queue (a claim, a new lease, each attempt) when the worker
/// does not claim ahead, when they are due later than a worker keeps them, and for a
/// kind whose lease is shorter than its queue's (its own lease, set at its first
/// heartbeat, could run out within the claim's hold).
#[tokio::test]
async fn retries_go_through_the_queue_without_claim_ahead_or_when_due_later() {
    let short_lease = retry_after(ms(1))
        .to_builder()
        .lease(ms(5_000))
        .attempt_timeout(ms(2_000))
        .heartbeat(ms(1_000))
        .build()
        .unwrap();
    for (case, policies, ahead) in [
        ("no claim ahead", PolicySet::new(retry_after(ms(1))), 0),
        ("due in 40 ms", PolicySet::new(retry_after(ms(40))), 4),
        (
            "a kind's shorter lease",
            PolicySet::new(retry_after(ms(1))).with_kind("flaky", short_lease),
            4,
        ),
    ] {
        let (job, seen) = three_failures_then_success(policies, |b| b.claim_ahead(ahead)).await;
        let tokens: Vec<Option<i64>> = seen.iter().map(|(token, _)| *token).collect();
        assert_eq!(
            seen.iter().map(|(_, entries)| *entries).collect::<Vec<_>>(),
            [0, 1, 2, 3],
            "{case}: each failure written before the next attempt"
        );
        assert_eq!(
            (job.status, job.attempts),
            (JobState::Completed, 4),
            "{case}"
        );
        assert_eq!(job.errors.len(), 3, "{case}");
        let distinct: BTreeSet<Option<i64>> = tokens.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            4,
            "{case}: a new lease per attempt: {tokens:?}"
        );
    }
}

/// A kept job waiting for a slot when the shutdown signal comes is released like a
/// buffered one: back to `ready`, the attempt it was kept for given back, its failure
/// recorded (written with the release, as a retry), and not run again.
#[tokio::test]
async fn a_kept_job_waiting_for_a_slot_is_released_at_shutdown() {
    let store = Arc::new(FaultyStore::open().await);
    let gate = Gatekeeper::default();
    let runs = Arc::new(AtomicUsize::new(0));
    let flaky = {
        let runs = runs.clone();
        move |_: JobContext, _: serde_json::Value| {
            runs.fetch_add(1, Ordering::SeqCst);
            futures::future::ready(Err(JobError::retry("503")))
        }
    };
    // One slot: the flaky job runs first and fails; the held job takes the slot while
    // the flaky one is written and kept, so the kept job waits for the slot.
    let worker = builder_with(&store, 1)
        .claim_ahead(2)
        .policies(PolicySet::new(retry_after(ms(1))))
        .shutdown_grace(Duration::from_secs(20))
        .handler_fn("flaky", flaky)
        .handler_fn("hold", gate.handler())
        .build()
        .unwrap();
    let flaky_id = enqueue(&store, "flaky", json!(null)).await;
    enqueue(&store, "hold", json!(null)).await;
    let (shutdown, task) = start(worker);
    wait_for("the held job to start", || gate.started() == 1).await;
    wait_for("the flaky job's first attempt", || {
        runs.load(Ordering::SeqCst) == 1
    })
    .await;
    // Kept, its failure is not written: the job stays running with the attempt of its
    // claim. (Not kept, it would be `ready` by now; on a machine too busy to have
    // ended the attempt yet, the check passes as well, and so does the rest.)
    tokio::time::sleep(ms(200)).await;
    let kept = store.job(flaky_id).await;
    assert_eq!(
        (kept.status, kept.attempts, kept.errors.len()),
        (JobState::Running, 1, 0),
        "{kept:#?}"
    );
    shutdown.shutdown();
    wait_until(&store, "the kept job released", |jobs| {
        jobs.iter()
            .any(|j| j.id == flaky_id && j.status == JobState::Ready)
    })
    .await;
    gate.go.add_permits(1);
    task.await.unwrap();
    let job = store.job(flaky_id).await;
    assert_eq!((job.status, job.attempts), (JobState::Ready, 1), "{job:#?}");
    assert_eq!(job.errors.len(), 1, "{job:#?}");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the kept job did not run again"
    );
}

/// A kept job whose next attempt outlasts its first heartbeat has its kept failure
/// written then, while the attempt runs, not at its end: the attempt sees its entry
/// in the store and the next attempt counted. Its completion adds nothing more.
#[tokio::test]
async fn a_kept_failure_is_written_at_the_first_heartbeat_of_a_long_attempt() {
    let store = Arc::new(FaultyStore::open().await);
    let policy = retry_after(ms(1))
        .to_builder()
        .lease(ms(3_000))
        .attempt_timeout(ms(2_000))
        .heartbeat(ms(100))
        .build()
        .unwrap();
    let seen = Arc::new(std::sync::Mutex::new(None));
    let handler = {
        let (store, seen) = (store.clone(), seen.clone());
        move |ctx: JobContext, _: serde_json::Value| {
            let (store, seen) = (store.clone(), seen.clone());
            async move {
                if ctx.attempt() == 1 {
                    return Err(JobError::retry("503 on attempt 1"));
                }
                // The second attempt waits (at most its timeout) for the first
                // attempt's failure to be written.
                loop {
                    let job = store.job(ctx.id()).await;
                    if !job.errors.is_empty() {
                        *seen.lock().unwrap() = Some((job.attempts, job.errors.clone()));
                        return Ok(());
                    }
                    tokio::time::sleep(ms(20)).await;
                }
            }
        }
    };
    let worker = builder_with(&store, 1)
        .claim_ahead(2)
        .policies(PolicySet::new(policy))
        .handler_fn("flaky", handler)
        .build()
        .unwrap();
    let id = enqueue(&store, "flaky", json!(null)).await;
    let (shutdown, task) = start(worker);
    wait_until(&store, "the job to finish", all_terminal).await;
    shutdown.shutdown();
    task.await.unwrap();
    let job = store.job(id).await;
    assert_eq!(
        (job.status, job.attempts),
        (JobState::Completed, 2),
        "{job:#?}"
    );
    let (attempts, errors) = seen
        .lock()
        .unwrap()
        .clone()
        .expect("the second attempt saw the first one's failure written");
    assert_eq!(attempts, 2, "the running attempt is counted");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].attempt, 1);
    assert_eq!(errors[0].message, "503 on attempt 1");
    assert_eq!(job.errors, errors, "the completion wrote no entry twice");
}

/// Jobs claimed ahead into the buffer and not started when the shutdown signal comes
/// are released at once (back to `ready`, attempt given back, never run), while the
/// running ones finish within the grace period.
#[tokio::test]
async fn buffered_jobs_are_released_at_the_shutdown_signal_without_running() {
    let store = Arc::new(FaultyStore::open().await);
    let policy = RetryPolicy::builder()
        .lease(ms(20_000))
        .attempt_timeout(ms(10_000))
        .build()
        .unwrap();
    let gate = Gatekeeper::default();
    let worker = builder_with(&store, 2)
        .claim_ahead(2)
        .policies(PolicySet::new(policy))
        .shutdown_grace(Duration::from_secs(20))
        .handler_fn("hold", gate.handler())
        .build()
        .unwrap();
    for _ in 0..4 {
        enqueue(&store, "hold", json!(null)).await;
    }
    let (shutdown, task) = start(worker);
    // Two run, two wait in the buffer: all four are leased to this worker.
    wait_until(&store, "four jobs claimed", |jobs| {
        jobs.iter()
            .filter(|j| j.status == JobState::Running)
            .count()
            == 4
    })
    .await;
    wait_for("two handlers to start", || gate.started() >= 2).await;
    shutdown.shutdown();
    // The buffered two go back while the running two still hold their slots.
    wait_until(&store, "the two buffered jobs released", |jobs| {
        jobs.iter()
            .filter(|j| j.status == JobState::Ready && j.attempts == 0)
            .count()
            == 2
    })
    .await;
    assert_eq!(gate.started(), 2, "a buffered job ran after the signal");
    gate.go.add_permits(2);
    task.await.unwrap();
    let jobs = store.all().await;
    assert_eq!(
        jobs.iter()
            .filter(|j| j.status == JobState::Completed)
            .count(),
        2,
        "{jobs:#?}"
    );
    assert_eq!(
        jobs.iter()
            .filter(|j| j.status == JobState::Ready && j.attempts == 0 && j.errors.is_empty())
            .count(),
        2,
        "{jobs:#?}"
    );
    assert_eq!(gate.started(), 2);
}

/// A job that waits in the buffer while every slot is busy is released before its
/// lease could run out (it would have had no heartbeat): it is back in `ready` with
/// its attempt given back while the slot is still busy, and runs later as attempt 1.
#[tokio::test]
async fn a_buffered_job_is_released_before_its_lease_could_expire_and_runs_later() {
    let store = Arc::new(FaultyStore::open().await);
    // Lease 2 s, heartbeat 100 ms, give-up margin 100 ms: a job may wait in the buffer
    // 900 ms; the first job's attempt may run 1.9 s.
    let policy = RetryPolicy::builder()
        .lease(ms(2_000))
        .attempt_timeout(ms(1_900))
        .heartbeat(ms(100))
        .build()
        .unwrap();
    assert_eq!(crate::fetcher::buffer_hold(&policy), ms(900));
    let gate = Gatekeeper::default();
    let worker = builder_with(&store, 1)
        .policies(PolicySet::new(policy))
        .claim_ahead(1)
        .handler_fn("hold", gate.handler())
        .build()
        .unwrap();
    let first = enqueue(&store, "hold", json!(null)).await;
    let second = enqueue(&store, "hold", json!(null)).await;
    let (shutdown, task) = start(worker);
    wait_until(&store, "both jobs claimed", |jobs| {
        jobs.iter().all(|j| j.status == JobState::Running)
    })
    .await;
    // The first holds the only slot (its heartbeats keep its lease) past the second's
    // lease; the second must have gone back unstarted.
    wait_until(&store, "the buffered job released", |jobs| {
        let job = |id| jobs.iter().find(|j| j.id == id).unwrap();
        job(first).status == JobState::Running
            && job(second).status == JobState::Ready
            && job(second).attempts == 0
    })
    .await;
    assert_eq!(gate.started(), 1, "the buffered job ran");
    let released = store.calls("job_release");
    assert!(released >= 1);
    // Claims no more ahead until a slot frees: the second stays ready, and nothing
    // more is claimed into the buffer meanwhile.
    let claims = store.calls("job_claim");
    tokio::time::sleep(ms(100)).await;
    assert_eq!(
        store.calls("job_claim"),
        claims,
        "claimed ahead again while stalled"
    );
    gate.go.add_permits(2);
    wait_until(&store, "both jobs to complete", |jobs| {
        jobs.iter().all(|j| j.status == JobState::Completed)
    })
    .await;
    shutdown.shutdown();
    task.await.unwrap();
    assert_eq!(
        *gate.attempts.lock().unwrap(),
        vec![1, 1],
        "each ran once, as attempt 1"
    );
    let second = store.job(second).await;
    assert!(second.errors.is_empty(), "{second:#?}");
}

/// Jobs claimed by this worker and not running (leased in the database, no handler
/// started) never exceed `claim_ahead`, and the buffer is used. Leased in the database
/// at once: the running handlers, the buffered jobs, and the finished ones whose
/// results are queued for the completer (at most `claim_ahead` of them).
#[tokio::test]
async fn jobs_claimed_ahead_never_exceed_the_bound() {
    const SLOTS: usize = 2;
    const AHEAD: usize = 3;
    let store = Arc::new(FaultyStore::open().await);
    let peak_ahead = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let (peak, r, s) = (peak_ahead.clone(), running.clone(), store.clone());
    let worker = builder_with(&store, SLOTS)
        .claim_ahead(AHEAD)
        .handler_fn("look", move |_ctx: JobContext, _: serde_json::Value| {
            let (peak, running, store) = (peak.clone(), r.clone(), s.clone());
            async move {
                running.fetch_add(1, Ordering::SeqCst);
                // Leased in the database while this handler runs: the running
                // handlers (this one included), the buffered jobs, and the finished
                // ones whose results are queued (their slots freed at hand-over).
                let leased = store
                    .all()
                    .await
                    .iter()
                    .filter(|j| j.status == JobState::Running)
                    .count();
                peak.fetch_max(leased, Ordering::SeqCst);
                tokio::time::sleep(ms(2)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .build()
        .unwrap();
    for _ in 0..60 {
        enqueue(&store, "look", json!(null)).await;
    }
    let (shutdown, task) = start(worker);
    wait_until(&store, "every job to complete", |jobs| {
        jobs.iter().all(|j| j.status == JobState::Completed)
    })
    .await;
    shutdown.shutdown();
    task.await.unwrap();
    let peak = peak_ahead.load(Ordering::SeqCst);
    assert!(
        peak <= SLOTS + AHEAD + AHEAD,
        "{peak} jobs leased at once: {SLOTS} slots, {AHEAD} ahead and {AHEAD} results queued allow {}",
        SLOTS + AHEAD + AHEAD
    );
    assert!(
        peak > SLOTS,
        "the buffer was never used ({peak} leased at most)"
    );
}

/// On a worker that claims ahead, a finished attempt frees its slot once its result is
/// queued for the completer, not once it is written: while the store holds every
/// completion back, a one-slot worker with `claim_ahead(1)` runs a second job, and then
/// no third (one result may wait). Shutdown waits for the queued results, and every one
/// is written; the buffered job goes back unstarted.
#[tokio::test]
async fn a_finished_attempt_frees_its_slot_before_its_result_is_written() {
    let store = Arc::new(FaultyStore::open().await);
    store.stall_completes.send_replace(true);
    let ran = Arc::new(AtomicUsize::new(0));
    let worker = counting(builder_with(&store, 1), &ran)
        .claim_ahead(1)
        .build()
        .unwrap();
    for _ in 0..5 {
        enqueue(&store, "count", json!(null)).await;
    }
    let (shutdown, task) = start(worker);
    wait_until(
        &store,
        "two jobs to run, their completion held back",
        |jobs| {
            // Leased: the two that ran, and the one claimed ahead, if claimed yet.
            let running = jobs
                .iter()
                .filter(|j| j.status == JobState::Running)
                .count();
            ran.load(Ordering::SeqCst) == 2 && running >= 2
        },
    )
    .await;
    assert!(store.calls("job_complete") >= 1, "no completion was sent");
    // Time for a third to start if the bound did not hold (a busy machine can only
    // hide a failure here, never make one).
    tokio::time::sleep(ms(300)).await;
    assert_eq!(
        ran.load(Ordering::SeqCst),
        2,
        "a third job ran with one slot and its one result already queued"
    );
    shutdown.shutdown();
    // Past the grace period (200 ms): the worker still waits for its queued results.
    tokio::time::sleep(ms(500)).await;
    assert!(
        !task.is_finished(),
        "the worker stopped with results still queued"
    );
    store.stall_completes.send_replace(false);
    task.await.unwrap();
    let jobs = store.all().await;
    let count = |state| jobs.iter().filter(|j| j.status == state).count();
    assert_eq!(count(JobState::Completed), 2, "{jobs:#?}");
    assert_eq!(count(JobState::Ready), 3, "{jobs:#?}");
}

/// A worker that does not claim ahead (the default) keeps a slot until the result of
/// its attempt is written: while the store holds every completion back, a one-slot
/// worker runs one job and no second.
#[tokio::test]
async fn without_claim_ahead_a_slot_stays_taken_until_its_result_is_written() {
    let store = Arc::new(FaultyStore::open().await);
    store.stall_completes.send_replace(true);
    let ran = Arc::new(AtomicUsize::new(0));
    let worker = counting(builder_with(&store, 1), &ran).build().unwrap();
    for _ in 0..3 {
        enqueue(&store, "count", json!(null)).await;
    }
    let (shutdown, task) = start(worker);
    wait_until(&store, "the first completion to be sent", |_| {
        store.calls("job_complete") >= 1
    })
    .await;
    // Time for a second to start if the slot had been freed (a busy machine can only
    // hide a failure here, never make one).
    tokio::time::sleep(ms(300)).await;
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "a second job ran while the one slot's result was unwritten"
    );
    shutdown.shutdown();
    store.stall_completes.send_replace(false);
    task.await.unwrap();
    let jobs = store.all().await;
    let count = |state| jobs.iter().filter(|j| j.status == state).count();
    // Each job that ran was written; the rest went back (or were never claimed).
    assert_eq!(
        count(JobState::Completed),
        ran.load(Ordering::SeqCst),
        "{jobs:#?}"
    );
    assert_eq!(
        count(JobState::Completed) + count(JobState::Ready),
        3,
        "{jobs:#?}"
    );
}

/// A result queued for a store that stays down does not keep a stopping worker for
/// ever: past the grace period and the drain deadline the worker gives up on it and
/// returns, and the job stays leased (reclaimed when its lease expires).
#[tokio::test]
async fn shutdown_gives_up_on_queued_results_at_the_drain_deadline() {
    let store = Arc::new(FaultyStore::open().await);
    store.refuse_completes.store(true, Ordering::SeqCst);
    let worker = builder_with(&store, 1)
        .claim_ahead(1)
        .drain_timeout(ms(300))
        .handler_fn("ok", |_ctx: JobContext, _: serde_json::Value| async {
            Ok(())
        })
        .build()
        .unwrap();
    let id = enqueue(&store, "ok", json!(null)).await;
    let (shutdown, task) = start(worker);
    wait_until(&store, "the completion to be tried", |_| {
        store.calls("job_complete") >= 1
    })
    .await;
    shutdown.shutdown();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the worker returns past its drain deadline")
        .unwrap();
    assert_eq!(store.job(id).await.status, JobState::Running);
}

/// A handler that blocks its thread past its timeout cannot be stopped, but the worker
/// keeps going around it: another thread fires the timeout and writes it while the
/// handler still blocks, and the slot stays taken until the handler returns, so a
/// one-slot worker starts no second job on the one thread it has left.
/// The test waits on a thread sleep while the handler blocks, so that nothing but the
/// worker's own threads wakes the runtime (the stall [`crate::nudge`] prevents is
/// shown on its own in that module's tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_blocking_its_thread_is_timed_out_and_keeps_its_slot_until_it_returns() {
    const BLOCK: Duration = Duration::from_millis(2_000);
    let store = Arc::new(FaultyStore::open().await);
    let blocking = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let returned = Arc::new(std::sync::Mutex::new(None));
    let ran = Arc::new(AtomicUsize::new(0));
    let (flag, back) = (blocking.clone(), returned.clone());
    let worker = counting(builder_with(&store, 1), &ran)
        .handler_fn("block", move |ctx: JobContext, _: serde_json::Value| {
            let (flag, back) = (flag.clone(), back.clone());
            async move {
                if ctx.attempt() == 1 {
                    flag.store(true, Ordering::SeqCst);
                    std::thread::sleep(BLOCK);
                    *back.lock().unwrap() = Some(chrono::Utc::now());
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    // Both due before the worker starts; the blocking one, first, is claimed first.
    let blocker = enqueue(&store, "block", json!(null)).await;
    let other = enqueue(&store, "count", json!(null)).await;
    let (shutdown, task) = start(worker);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !blocking.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the handler never ran"
        );
        std::thread::sleep(ms(1));
    }
    std::thread::sleep(BLOCK);
    wait_until(&store, "both jobs to complete", |jobs| {
        jobs.iter().all(|j| j.status == JobState::Completed)
    })
    .await;
    let returned = returned.lock().unwrap().expect("the handler returned");
    let (blocked, counted) = (store.job(blocker).await, store.job(other).await);
    assert_eq!(
        blocked.errors[0].class,
        FailureClass::Timeout,
        "{blocked:#?}"
    );
    assert!(
        blocked.errors[0].at < returned,
        "the timeout was written only after the handler returned at {returned}: {blocked:#?}"
    );
    // The store keeps milliseconds.
    assert!(
        counted.attempted_at.expect("attempted").timestamp_millis() >= returned.timestamp_millis(),
        "the other job started while the one slot's handler still blocked its thread \
         (it returned at {returned}): {counted:#?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    shutdown.shutdown();
    task.await.unwrap();
}

mod dependencies {
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::DependencyConfig;
    use revenant_core::dependency::{
        BreakerPolicy, BreakerState, DependencyPolicies, DependencyPolicy, WaitReason,
    };
    use revenant_core::store::DependencyListParams;

    fn fast_breaker() -> DependencyConfig {
        DependencyConfig {
            policies: DependencyPolicies::new(DependencyPolicy {
                breaker: Some(BreakerPolicy {
                    failure_threshold: 0.5,
                    window: Duration::from_secs(2),
                    min_requests: 4,
                    cooldown: ms(100),
                    max_cooldown: ms(200),
                    park_for: Duration::from_secs(60),
                    slow_call: None,
                }),
                ..DependencyPolicy::off()
            }),
            report_interval: ms(5),
        }
    }

    async fn breaker_state(store: &FaultyStore) -> BreakerState {
        store
            .dependency_list(DependencyListParams::default())
            .await
            .unwrap()
            .first()
            .map(|d| d.breaker)
            .unwrap_or_default()
    }

    /// The provider is down: a few failures open the breaker, later jobs are parked
    /// without spending attempts (where, with 3 attempts and a 40 ms backoff cap,
    /// every job would die), and when it is back the probe closes the breaker and
    /// every job completes.
    #[tokio::test]
    async fn a_breaker_parks_jobs_through_an_outage_and_releases_them_after() {
        let store = Arc::new(FaultyStore::open().await);
        let down = Arc::new(AtomicBool::new(true));
        let calls_while_down = Arc::new(AtomicUsize::new(0));
        let (d, c) = (down.clone(), calls_while_down.clone());
        let (shutdown, task) = start(
            builder(&store)
                .handler_fn("send", move |_ctx: JobContext, _: serde_json::Value| {
                    let (down, calls) = (d.clone(), c.clone());
                    async move {
                        if down.load(Ordering::SeqCst) {
                            calls.fetch_add(1, Ordering::SeqCst);
                            return Err(JobError::retry("503"));
                        }
                        Ok(())
                    }
                })
                .dependency("send", "email-provider")
                .dependencies(fast_breaker())
                .build()
                .unwrap(),
        );
        let mut ids = Vec::new();
        for _ in 0..40 {
            ids.push(enqueue(&store, "send", json!({})).await);
            tokio::time::sleep(ms(10)).await;
        }
        assert_ne!(breaker_state(&store).await, BreakerState::Closed);
        let parked = store
            .all()
            .await
            .iter()
            .filter(|j| j.dependency_wait == Some(WaitReason::Breaker))
            .count();
        assert!(parked > 20, "jobs wait for the breaker: {parked}");
        assert!(
            store.all().await.iter().all(|j| j.status != JobState::Dead),
            "nothing died of the outage"
        );
        down.store(false, Ordering::SeqCst);
        wait_until(&store, "every job to complete", |jobs| {
            jobs.iter().all(|j| j.status == JobState::Completed)
        })
        .await;
        shutdown.shutdown();
        task.await.unwrap();
        assert_eq!(breaker_state(&store).await, BreakerState::Closed);
        // The first few failures trip it; after that, only probes (one every
        // 100-200 ms) reach the provider.
        let calls = calls_while_down.load(Ordering::SeqCst);
        assert!(calls < 20, "{calls} calls for 40 jobs while it was down");
        for id in ids {
            let job = store.job(id).await;
            assert_eq!(job.dependency.as_deref(), Some("email-provider"));
            assert!(job.attempts <= 3, "{job:#?}");
        }
    }

    /// Permanent failures say nothing about the dependency: they never open it.
    #[tokio::test]
    async fn permanent_failures_do_not_open_the_breaker() {
        let store = Arc::new(FaultyStore::open().await);
        let (shutdown, task) = start(
            builder(&store)
                .handler_fn("step", scripted)
                .dependency("step", "template-service")
                .dependencies(fast_breaker())
                .build()
                .unwrap(),
        );
        for _ in 0..20 {
            enqueue(&store, "step", json!({ "what": "permanent" })).await;
        }
        wait_until(&store, "every job to die", all_terminal).await;
        shutdown.shutdown();
        task.await.unwrap();
        let jobs = store.all().await;
        assert_eq!(jobs.len(), 20);
        assert!(
            jobs.iter()
                .all(|j| j.dead_reason == Some(DeadReason::Permanent) && j.attempts == 1),
            "{jobs:#?}"
        );
        let states = store
            .dependency_list(DependencyListParams::default())
            .await
            .unwrap();
        assert_eq!(states[0].dependency, "template-service");
        assert_eq!(states[0].breaker, BreakerState::Closed);
        assert_eq!(states[0].answers.failures, 0.0);
        assert_eq!(states[0].trips, 0);
    }

    /// A dependency that hangs holds at most its bulkhead's share of the queue's
    /// slots (2 of 4): the jobs of another dependency enqueued behind its backlog
    /// all complete while it hangs, and the hanging jobs turned back at the limit
    /// spend no attempt.
    #[tokio::test]
    async fn a_hanging_dependency_holds_at_most_its_bulkhead_and_spends_no_attempt_waiting() {
        use revenant_core::dependency::Bulkhead;
        let store = Arc::new(FaultyStore::open().await);
        let hanging = Arc::new(AtomicBool::new(true));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (h, r, m) = (hanging.clone(), running.clone(), most.clone());
        let patient = RetryPolicy::builder()
            .max_attempts(3)
            .lease(Duration::from_secs(60))
            .attempt_timeout(Duration::from_secs(50))
            .heartbeat(Duration::from_secs(5))
            .build()
            .unwrap();
        let config = DependencyConfig::new(DependencyPolicies::new(
            DependencyPolicy::off().with_bulkhead(Bulkhead::default()),
        ));
        let (shutdown, task) = start(
            builder(&store)
                .policies(PolicySet::new(patient))
                .handler_fn("hang", move |_ctx: JobContext, _: serde_json::Value| {
                    let (hanging, running, most) = (h.clone(), r.clone(), m.clone());
                    async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        while hanging.load(Ordering::SeqCst) {
                            tokio::time::sleep(ms(5)).await;
                        }
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok::<(), JobError>(())
                    }
                })
                .handler_fn("fast", |_ctx: JobContext, _: serde_json::Value| async {
                    Ok::<(), JobError>(())
                })
                .dependency("hang", "stuck-provider")
                .dependency("fast", "healthy-provider")
                .dependencies(config)
                .build()
                .unwrap(),
        );
        let mut stuck = Vec::new();
        for _ in 0..6 {
            stuck.push(enqueue(&store, "hang", json!({})).await);
        }
        let mut healthy = Vec::new();
        for _ in 0..20 {
            healthy.push(enqueue(&store, "fast", json!({})).await);
        }
        let done = healthy.clone();
        wait_until(
            &store,
            "the healthy jobs to complete beside the hang",
            |jobs| {
                jobs.iter()
                    .filter(|j| done.contains(&j.id))
                    .all(|j| j.status == JobState::Completed)
            },
        )
        .await;
        for id in &stuck {
            let job = store.job(*id).await;
            assert!(job.errors.is_empty(), "{job:#?}");
            match job.status {
                JobState::Running => assert_eq!(job.attempts, 1, "{job:#?}"),
                JobState::Ready => assert_eq!(job.attempts, 0, "given back: {job:#?}"),
                other => panic!("a hanging job is {other:?}"),
            }
        }
        hanging.store(false, Ordering::SeqCst);
        wait_until(&store, "every job to complete", |jobs| {
            jobs.iter().all(|j| j.status == JobState::Completed)
        })
        .await;
        shutdown.shutdown();
        task.await.unwrap();
        assert!(
            most.load(Ordering::SeqCst) <= 2,
            "{} hanging at once, limit 2",
            most.load(Ordering::SeqCst)
        );
        for id in stuck {
            assert_eq!(store.job(id).await.attempts, 1, "one attempt each");
        }
    }

    /// A queue whose every job calls one dependency with a bulkhead below its slots
    /// (2 of 4): the jobs past the bulkhead wait in the worker and start as permits
    /// come back, so the dependency is kept busy at its limit with no job turned back
    /// through the store and no attempt spent waiting.
    #[tokio::test]
    async fn jobs_past_their_bulkhead_wait_in_the_worker_not_in_the_store() {
        use revenant_core::dependency::Bulkhead;
        let store = Arc::new(FaultyStore::open().await);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (r, m) = (running.clone(), most.clone());
        let config = DependencyConfig::new(DependencyPolicies::new(
            DependencyPolicy::off().with_bulkhead(Bulkhead {
                max_in_flight: Some(2),
                ..Bulkhead::default()
            }),
        ));
        let (shutdown, task) = start(
            builder(&store)
                // Claims the poll interval lets through while every job waits at the
                // bulkhead would go back through the store: at most one here.
                .poll_interval(Duration::from_secs(1))
                .handler_fn("call", move |_ctx: JobContext, _: serde_json::Value| {
                    let (running, most) = (r.clone(), m.clone());
                    async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(ms(30)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok::<(), JobError>(())
                    }
                })
                .dependency("call", "one-provider")
                .dependencies(config)
                .build()
                .unwrap(),
        );
        for _ in 0..24 {
            enqueue(&store, "call", json!({})).await;
        }
        wait_until(&store, "every job to complete", |jobs| {
            jobs.iter().all(|j| j.status == JobState::Completed)
        })
        .await;
        shutdown.shutdown();
        task.await.unwrap();
        assert!(
            most.load(Ordering::SeqCst) <= 2,
            "{} at once, limit 2",
            most.load(Ordering::SeqCst)
        );
        for job in store.all().await {
            assert_eq!(job.attempts, 1, "{job:#?}");
            assert!(job.errors.is_empty(), "{job:#?}");
        }
        let states = store
            .dependency_list(DependencyListParams::default())
            .await
            .unwrap();
        assert_eq!(states[0].dependency, "one-provider");
        // The first claim takes the four slots: two run, two wait in the worker. The
        // slots those two gave back are claimed at most once before the worker waits
        // for a permit to come back, so a few jobs of that claim may go back through
        // the store; after that, none.
        let turned_back = states[0].bulkhead.as_ref().map_or(0, |b| b.turned_back);
        assert!(
            turned_back <= 4,
            "{turned_back} jobs turned back through the store"
        );
    }

    /// Calls slower than the slow-call duration open the breaker while they run,
    /// though none fails.
    #[tokio::test]
    async fn slow_calls_open_the_breaker_though_none_fails() {
        use revenant_core::dependency::SlowCall;
        let store = Arc::new(FaultyStore::open().await);
        let mut config = fast_breaker();
        if let Some(breaker) = &mut config.policies.default.breaker {
            breaker.slow_call = Some(SlowCall {
                duration: ms(20),
                threshold: 0.5,
            });
        }
        let sluggish = Arc::new(AtomicBool::new(true));
        let s = sluggish.clone();
        let (shutdown, task) = start(
            builder(&store)
                .handler_fn("slow", move |_ctx: JobContext, _: serde_json::Value| {
                    let sluggish = s.clone();
                    async move {
                        if sluggish.load(Ordering::SeqCst) {
                            tokio::time::sleep(ms(120)).await;
                        }
                        Ok::<(), JobError>(())
                    }
                })
                .dependency("slow", "sluggish-provider")
                .dependencies(config)
                .build()
                .unwrap(),
        );
        for _ in 0..12 {
            enqueue(&store, "slow", json!({})).await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let state = loop {
            let states = store
                .dependency_list(DependencyListParams::default())
                .await
                .unwrap();
            if let Some(state) = states.into_iter().find(|s| s.trips > 0) {
                break state;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the breaker never opened"
            );
            tokio::time::sleep(ms(10)).await;
        };
        assert_eq!(state.answers.failures, 0.0, "{state:#?}");
        assert!(state.answers.slow >= 1.0, "{state:#?}");
        // Fast again: the next probe closes the breaker and the parked jobs run.
        sluggish.store(false, Ordering::SeqCst);
        wait_until(&store, "every job to complete", |jobs| {
            jobs.iter().all(|j| j.status == JobState::Completed)
        })
        .await;
        shutdown.shutdown();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_dependency_config_that_cannot_work_is_refused() {
        let mut config = fast_breaker();
        config.report_interval = Duration::ZERO;
        let err = builder(&Arc::new(FaultyStore::open().await))
            .handler_fn("step", scripted)
            .dependencies(config)
            .build()
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("report_interval"), "{err}");
        let err = builder(&Arc::new(FaultyStore::open().await))
            .handler_fn("step", scripted)
            .dependency("step", "")
            .build()
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("dependency"), "{err}");
    }
}

/// SQLite needs no vacuum from its workers: maintenance asks once, hears so, and asks
/// no more, while the lease sweep goes on at the same interval. Turned off, it never
/// asks.
#[tokio::test]
async fn the_vacuum_asks_a_store_that_needs_none_once() {
    for (interval, expected) in [(Some(ms(10)), 1), (None, 0)] {
        let store = Arc::new(FaultyStore::open().await);
        let (shutdown, task) = start(
            builder(&store)
                .handler_fn("step", scripted)
                .maintenance(crate::MaintenanceConfig {
                    sweep_interval: ms(10),
                    vacuum_interval: interval,
                    ..crate::MaintenanceConfig::default()
                })
                .build()
                .unwrap(),
        );
        wait_for("the lease sweep to run 20 times", || {
            store.calls("job_sweep") >= 20
        })
        .await;
        shutdown.shutdown();
        task.await.unwrap();
        assert_eq!(
            store.calls("job_vacuum"),
            expected,
            "vacuum_interval {interval:?}"
        );
    }
}

#[tokio::test]
async fn a_payload_that_panics_as_it_decodes_is_a_panic_and_a_kept_retry_decodes_it_again() {
    use crate::registry::tests::Touchy;
    let store = Arc::new(FaultyStore::open().await);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let names = seen.clone();
    // Claiming ahead, with the policy's 10 ms backoff: a retry is kept, and its
    // payload decoded from the job's own copy.
    let (shutdown, task) = start(
        builder(&store)
            .claim_ahead(8)
            .handler_fn("greet", move |ctx: JobContext, name: Touchy| {
                names.lock().unwrap().push((name.0, ctx.attempt()));
                async move {
                    match ctx.attempt() {
                        1 => Err(JobError::retry("mail server said 451")),
                        _ => Ok(()),
                    }
                }
            })
            .build()
            .unwrap(),
    );
    let zoe = enqueue(&store, "greet", json!("Zoë")).await;
    let ada = enqueue(&store, "greet", json!("Ada")).await;
    wait_until(&store, "both jobs to finish", all_terminal).await;
    // The worker lives on past the panics.
    let bo = enqueue(&store, "greet", json!("Bo")).await;
    wait_until(&store, "the next job to finish", all_terminal).await;
    shutdown.shutdown();
    task.await.unwrap();

    let jobs: HashMap<i64, Job> = store.all().await.into_iter().map(|j| (j.id, j)).collect();
    let job = &jobs[&zoe];
    assert_eq!(
        (job.status, job.attempts, job.dead_reason),
        (JobState::Dead, 3, Some(DeadReason::AttemptsExhausted)),
        "{job:#?}"
    );
    assert!(
        job.errors.len() == 3
            && job.errors.iter().all(|e| e.class == FailureClass::Panic
                && e.message == "handler panicked: cannot render Zoë"),
        "{job:#?}"
    );
    for id in [ada, bo] {
        let job = &jobs[&id];
        assert_eq!(
            (job.status, job.attempts),
            (JobState::Completed, 2),
            "{job:#?}"
        );
        assert_eq!(job.errors[0].message, "mail server said 451");
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [("Ada", 1), ("Ada", 2), ("Bo", 1), ("Bo", 2)].map(|(n, a)| (n.to_string(), a))
    );
}
