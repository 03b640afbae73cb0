//! Leases on the real SQLite store: a stalled worker loses its job to another and its
//! late ack is rejected; heartbeats keep a long attempt's lease.

mod harness;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use harness::*;
use revenant::store::Fenced;
use revenant::{FailureClass, JobContext, JobState, NewJob, PolicySet, RetryPolicy, Worker};

/// The queue's policy sets the claim's lease (`claim_lease`). The `slow` kind's own
/// policy allows a 5 s attempt; with heartbeats on, its first heartbeat would extend
/// the lease to its own 6 s. Heartbeats off, the lease stays at the claim's: a stalled
/// worker.
fn slow_policies(claim_lease: Duration) -> PolicySet {
    let long = RetryPolicy::builder()
        .max_attempts(3)
        .lease(ms(6000))
        .attempt_timeout(ms(5000))
        .build()
        .unwrap();
    PolicySet::new(policy(3, claim_lease))
        .with_queue("q", policy(3, claim_lease))
        .with_kind("slow", long)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_workers_job_is_reclaimed_only_after_its_lease_and_its_late_ack_is_rejected() {
    let db = Db::new();
    let sqlite = db.store().await;
    let id = enqueue(
        sqlite.as_ref(),
        vec![NewJob::new("q", "slow", serde_json::json!(null))],
    )
    .await[0];

    let runs = Arc::new(AtomicUsize::new(0));
    let handler = |runs: Arc<AtomicUsize>, sqlite: Arc<revenant::sqlite::SqliteStore>| {
        move |ctx: JobContext, _: serde_json::Value| {
            let (runs, sqlite) = (runs.clone(), sqlite.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                if ctx.attempt() == 1 {
                    // The first attempt outlives its lease: it returns only once the
                    // second attempt (on the other worker) has completed the job.
                    wait_for_jobs(
                        sqlite.as_ref(),
                        "the reclaimed attempt to complete",
                        Duration::from_secs(10),
                        |jobs| jobs[0].status == JobState::Completed,
                    )
                    .await;
                }
                Ok(())
            }
        }
    };

    let stalled = Observed::new(sqlite.clone());
    let worker_a = Worker::builder(stalled.clone())
        .worker_id("stalled")
        .queue("q", 1)
        .policies(slow_policies(ms(400)))
        .heartbeats(false)
        .poll_interval(ms(20))
        .handler_fn("slow", handler(runs.clone(), sqlite.clone()))
        .build()
        .unwrap();
    let (stop_a, task_a) = start(worker_a);
    wait_until(
        "the stalled worker to claim the job",
        Duration::from_secs(5),
        || {
            stalled
                .record
                .lock()
                .unwrap()
                .claims
                .iter()
                .any(|c| !c.1.is_empty())
        },
    )
    .await;
    let first_claim = stalled
        .record
        .lock()
        .unwrap()
        .claims
        .iter()
        .find(|c| !c.1.is_empty())
        .unwrap()
        .1[0]
        .clone();
    let lease_expired_at = first_claim.lease_expires_at.expect("a lease");

    let rescuer = Observed::new(sqlite.clone());
    // The rescuer claims under a long lease: its own attempt must not lapse on a busy
    // machine (a 400 ms stall between its claim and its first heartbeat would lose it,
    // and it would claim the job a second time), which is not what this test is about.
    let worker_b = Worker::builder(rescuer.clone())
        .worker_id("rescuer")
        .queue("q", 1)
        .policies(slow_policies(ms(10_000)))
        .poll_interval(ms(20))
        .handler_fn("slow", handler(runs.clone(), sqlite.clone()))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let (stop_b, task_b) = start(worker_b);
    wait_for_jobs(
        sqlite.as_ref(),
        "the job to complete",
        Duration::from_secs(10),
        |jobs| jobs[0].status == JobState::Completed,
    )
    .await;
    let reclaim_took = started.elapsed();

    // The first worker's handler returns now; its ack must be rejected.
    wait_until(
        "the stalled worker's late ack",
        Duration::from_secs(5),
        || !stalled.record.lock().unwrap().completes.is_empty(),
    )
    .await;
    stop_a.shutdown();
    stop_b.shutdown();
    task_a.await.unwrap();
    task_b.await.unwrap();

    let job = get(sqlite.as_ref(), id).await;
    let stalled = stalled.record.lock().unwrap();
    let rescuer = rescuer.record.lock().unwrap();
    assert_eq!(stalled.completes.len(), 1);
    assert_eq!(
        stalled.completes[0].1,
        Fenced::LeaseLost,
        "the late ack is rejected"
    );
    let reclaim = rescuer
        .claims
        .iter()
        .find(|c| !c.1.is_empty())
        .expect("the rescuer claimed it");
    let reclaimed = &reclaim.1[0];
    assert_eq!((reclaimed.id, reclaimed.attempts), (id, 2));
    assert!(
        reclaimed.attempted_at.unwrap() >= lease_expired_at,
        "reclaimed at {:?}, before the lease expired at {lease_expired_at:?}",
        reclaimed.attempted_at
    );
    assert_eq!(
        rescuer.completes,
        vec![(
            revenant::store::LeaseRef {
                id,
                lease_token: reclaimed.lease_token.unwrap()
            },
            Fenced::Applied
        )],
        "completed exactly once"
    );

    assert_eq!((job.status, job.attempts), (JobState::Completed, 2));
    assert_eq!(job.worker.as_deref(), Some("rescuer"));
    assert_eq!(job.errors.len(), 1, "{job:#?}");
    assert_eq!(
        (job.errors[0].attempt, job.errors[0].class),
        (1, FailureClass::LeaseExpired)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2, "both attempts ran");
    eprintln!("reclaimed after {reclaim_took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_hold_the_lease_for_ten_lease_lengths() {
    // The policy refuses an attempt timeout at or above the lease, so an attempt can
    // run ten lease lengths only when its kind has a longer lease than the claim: the
    // queue's claims lease jobs for 300 ms, the `long` kind may run 4 s under a 4.5 s
    // lease. The first heartbeat sets the kind's lease and later ones (every 100 ms)
    // keep it; the other worker polls every 20 ms the whole time and never gets the
    // job. Without heartbeats the same setup is reclaimed after 300 ms (the test above).
    let db = Db::new();
    let sqlite = db.store().await;
    let short = policy(3, ms(300));
    let long = RetryPolicy::builder()
        .max_attempts(3)
        .lease(ms(4500))
        .heartbeat(ms(100))
        .attempt_timeout(ms(4000))
        .build()
        .unwrap();
    let policies = PolicySet::new(short).with_kind("long", long);
    let id = enqueue(
        sqlite.as_ref(),
        vec![NewJob::new("q", "long", serde_json::json!(null))],
    )
    .await[0];
    let runs = Arc::new(AtomicUsize::new(0));
    let observed = Observed::new(sqlite.clone());
    let make = |name: &str| {
        let runs = runs.clone();
        Worker::builder(observed.clone())
            .worker_id(name)
            .queue("q", 1)
            .policies(policies.clone())
            .poll_interval(ms(20))
            .handler_fn("long", move |ctx: JobContext, _: serde_json::Value| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    // Ten claim-lease lengths.
                    tokio::select! {
                        _ = tokio::time::sleep(ms(3000)) => Ok(()),
                        _ = ctx.cancelled() => Err(revenant::JobError::retry("cancelled")),
                    }
                }
            })
            .build()
            .unwrap()
    };
    let (stop_a, task_a) = start(make("a"));
    wait_for_jobs(
        sqlite.as_ref(),
        "the job to start",
        Duration::from_secs(5),
        |jobs| jobs[0].status == JobState::Running,
    )
    .await;
    let (stop_b, task_b) = start(make("b"));
    let job = wait_for_jobs(
        sqlite.as_ref(),
        "the job to finish",
        Duration::from_secs(10),
        all_terminal,
    )
    .await
    .remove(0);
    stop_a.shutdown();
    stop_b.shutdown();
    task_a.await.unwrap();
    task_b.await.unwrap();
    assert_eq!(job.id, id);
    assert_eq!(
        (job.status, job.attempts),
        (JobState::Completed, 1),
        "{job:#?}"
    );
    assert!(job.errors.is_empty(), "no lease was lost: {job:#?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never reclaimed");
    // Every 100 ms over 3 s is about 30; each is a write, and on a busy disk writes
    // queue (19 to 24 seen while another process wrote and synced gigabytes). A third
    // of them still shows the beats went on after the first one set the kind's lease.
    let beats = observed.record.lock().unwrap().heartbeats;
    assert!(beats >= 10, "heartbeats every 100 ms over 3 s: {beats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_finishing_during_a_heartbeat_does_not_freeze_the_worker() {
    // Regression: the executor kept its heartbeat future alive, unpolled, while it
    // wrote the attempt's result. A heartbeat caught in the middle of its store call
    // held SQLite's write turn; the completer then waited on it forever and every
    // claim after it did too. Handlers that run exactly one heartbeat interval make
    // that collision near certain across a few hundred jobs.
    let db = Db::new();
    let store = db.store().await;
    let jobs: Vec<NewJob> = (0..300)
        .map(|i| NewJob::new("q", "beat", serde_json::json!(i)))
        .collect();
    enqueue(store.as_ref(), jobs).await;
    let lease = ms(300); // heartbeat every 100 ms
    let worker = Worker::builder(store.clone())
        .worker_id("w")
        .queue("q", 16)
        .policies(PolicySet::new(policy(3, lease)))
        .poll_interval(ms(20))
        .handler_fn("beat", |_ctx: JobContext, _: u64| async move {
            tokio::time::sleep(ms(100)).await;
            Ok(())
        })
        .build()
        .unwrap();
    let (stop, task) = start(worker);
    wait_for_drain(store.as_ref(), "q", Duration::from_secs(30)).await;
    stop.shutdown();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the worker shuts down")
        .unwrap();
    let jobs = all_jobs(store.as_ref()).await;
    assert_eq!(jobs.len(), 300);
    assert!(jobs.iter().all(|job| job.status == JobState::Completed));
}
