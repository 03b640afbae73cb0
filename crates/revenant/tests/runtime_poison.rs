//! Poison jobs on the real SQLite store: one that panics on every attempt, and one
//! that aborts its worker process.

mod harness;

use std::time::Duration;

use harness::*;
use revenant::{
    DeadReason, FailureClass, JobContext, JobError, JobState, NewJob, PolicySet, Worker,
};

async fn poison(_ctx: JobContext, what: String) -> Result<(), JobError> {
    match what.as_str() {
        "panic" => panic!("template crashed on 'Café Ünï'"),
        "abort" => std::process::abort(),
        _ => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_panics_every_attempt_is_dead_and_a_thousand_others_complete() {
    let db = Db::new();
    let store = db.store().await;
    let mut jobs =
        vec![NewJob::new("q", "poison", serde_json::json!("panic")).with_max_attempts(4)];
    jobs.extend((0..1000).map(|_| NewJob::new("q", "poison", serde_json::json!("ok"))));
    let ids = enqueue(store.as_ref(), jobs).await;
    let worker = Worker::builder(store.clone())
        .queue("q", 8)
        .policies(PolicySet::new(policy(4, ms(1000))))
        .poll_interval(ms(20))
        .handler_fn("poison", poison)
        .build()
        .unwrap();
    let (stop, task) = start(worker);
    let jobs = wait_for_jobs(
        store.as_ref(),
        "every job to finish",
        Duration::from_secs(30),
        all_terminal,
    )
    .await;

    // The worker lives on: a job enqueued after the poison died still runs.
    let later = enqueue(
        store.as_ref(),
        vec![NewJob::new("q", "poison", serde_json::json!("ok"))],
    )
    .await[0];
    wait_for_jobs(
        store.as_ref(),
        "a later job",
        Duration::from_secs(10),
        |jobs| {
            jobs.iter()
                .any(|j| j.id == later && j.status == JobState::Completed)
        },
    )
    .await;
    stop.shutdown();
    task.await.expect("the worker task did not panic");

    let poison = &jobs[0];
    assert_eq!(poison.id, ids[0]);
    assert_eq!(
        (poison.status, poison.attempts, poison.dead_reason),
        (JobState::Dead, 4, Some(DeadReason::AttemptsExhausted))
    );
    assert_eq!(poison.errors.len(), 4);
    for entry in &poison.errors {
        assert_eq!(entry.class, FailureClass::Panic);
        assert_eq!(
            entry.message,
            "handler panicked: template crashed on 'Café Ünï'"
        );
    }
    assert_eq!(count(&jobs, JobState::Completed), 1000);
    assert!(jobs[1..]
        .iter()
        .all(|j| j.attempts == 1 && j.errors.is_empty()));
}

/// The child side of the abort test: a worker on the parent's database, run until the
/// poison aborts the process or the parent sends SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_job_that_aborts_its_worker_process_is_dead_with_lease_expired"]
async fn child_worker_with_an_aborting_job() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let store = std::sync::Arc::new(revenant::sqlite::SqliteStore::connect(&url).await.unwrap());
    let worker = Worker::builder(store)
        .queue("q", 4)
        .policies(PolicySet::new(policy(10, ms(400))))
        .poll_interval(ms(20))
        .maintenance(revenant::runtime::MaintenanceConfig {
            sweep_interval: ms(100),
            ..Default::default()
        })
        .handler_fn("poison", |ctx: JobContext, what: String| async move {
            if what == "ok" {
                // Slow enough that some are in flight when the process dies.
                tokio::time::sleep(ms(20)).await;
            }
            poison(ctx, what).await
        })
        .build()
        .unwrap();
    worker.run().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_aborts_its_worker_process_is_dead_with_lease_expired() {
    let db = Db::new();
    let store = db.store().await;
    let mut jobs =
        vec![NewJob::new("q", "poison", serde_json::json!("abort")).with_max_attempts(3)];
    jobs.extend(
        (0..200).map(|_| NewJob::new("q", "poison", serde_json::json!("ok")).with_max_attempts(10)),
    );
    let ids = enqueue(store.as_ref(), jobs).await;

    let mut crashes = 0;
    let mut child = spawn_child("child_worker_with_an_aborting_job", &db);
    loop {
        let poison = get(store.as_ref(), ids[0]).await;
        if poison.status == JobState::Dead {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                !status.success(),
                "the child only ends by aborting here: {status:?}"
            );
            crashes += 1;
            assert!(crashes <= 3, "more crashes than the poison has attempts");
            child = spawn_child("child_worker_with_an_aborting_job", &db);
        }
        tokio::time::sleep(ms(20)).await;
    }
    // The rest finish on the surviving child; then it is stopped gracefully.
    let jobs = wait_for_jobs(
        store.as_ref(),
        "every job to finish",
        Duration::from_secs(20),
        all_terminal,
    )
    .await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = wait_child(&mut child, Duration::from_secs(10)).await;
    assert!(
        status.success(),
        "the last child exits 0 on SIGTERM: {status:?}"
    );

    assert_eq!(crashes, 3, "each attempt of the poison crashed one worker");
    let poison = &jobs[0];
    assert_eq!(
        (poison.status, poison.attempts, poison.dead_reason),
        (JobState::Dead, 3, Some(DeadReason::LeaseExpired)),
        "{poison:#?}"
    );
    let others = &jobs[1..];
    assert_eq!(others.len(), 200, "no job lost");
    assert!(
        others.iter().all(|j| j.status == JobState::Completed),
        "no other job dead: {:#?}",
        others
            .iter()
            .filter(|j| j.status != JobState::Completed)
            .collect::<Vec<_>>()
    );
}
