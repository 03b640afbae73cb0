//! Graceful shutdown on the real SQLite store, in a child process that gets a real
//! SIGTERM.

mod harness;

use std::time::Duration;

use harness::*;
use revenant::{JobContext, JobError, JobState, NewJob, PolicySet, RetryPolicy, Store, Worker};

/// The child: `quick` jobs finish within the grace period, `stuck` ones do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by sigterm_mid_run_claims_nothing_more_and_releases_unfinished_jobs"]
async fn child_worker_until_sigterm() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let store = std::sync::Arc::new(revenant::sqlite::SqliteStore::connect(&url).await.unwrap());
    let policy = RetryPolicy::builder()
        .lease(ms(30_000))
        .attempt_timeout(ms(20_000))
        .build()
        .unwrap();
    let worker = Worker::builder(store)
        .queue("q", 4)
        .policies(PolicySet::new(policy))
        .poll_interval(ms(20))
        .shutdown_grace(ms(1500))
        .handler_fn("work", |ctx: JobContext, what: String| async move {
            match what.as_str() {
                "quick" => {
                    tokio::time::sleep(ms(600)).await;
                    Ok(())
                }
                _ => {
                    ctx.cancelled().await;
                    Err(JobError::retry("cancelled"))
                }
            }
        })
        .build()
        .unwrap();
    // `run` returns Ok after SIGTERM, so the process exits 0.
    worker.run().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_run_claims_nothing_more_and_releases_unfinished_jobs() {
    let db = Db::new();
    let store = db.store().await;
    let mut jobs = vec![
        NewJob::new("q", "work", serde_json::json!("quick")),
        NewJob::new("q", "work", serde_json::json!("quick")),
        NewJob::new("q", "work", serde_json::json!("stuck")),
        NewJob::new("q", "work", serde_json::json!("stuck")),
    ];
    // Waiting behind the four running ones.
    jobs.extend((0..6).map(|_| NewJob::new("q", "work", serde_json::json!("quick"))));
    let ids = enqueue(store.as_ref(), jobs).await;

    let mut child = spawn_child("child_worker_until_sigterm", &db);
    wait_for_jobs(
        store.as_ref(),
        "four jobs to run",
        Duration::from_secs(10),
        |jobs| count(jobs, JobState::Running) == 4,
    )
    .await;
    let running: Vec<_> = all_jobs(store.as_ref())
        .await
        .into_iter()
        .filter(|j| j.status == JobState::Running)
        .map(|j| j.id)
        .collect();
    assert_eq!(running, ids[..4].to_vec(), "the first four, by id");
    let signalled_at = chrono::Utc::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = wait_child(&mut child, Duration::from_secs(10)).await;
    assert!(status.success(), "exit 0 after SIGTERM: {status:?}");

    let jobs = all_jobs(store.as_ref()).await;
    // Finished within the grace period.
    for job in &jobs[..2] {
        assert_eq!(
            (job.status, job.attempts),
            (JobState::Completed, 1),
            "{job:#?}"
        );
    }
    // Still running at the end of the grace period: released, attempt given back, due now.
    for job in &jobs[2..4] {
        assert_eq!((job.status, job.attempts), (JobState::Ready, 0), "{job:#?}");
        assert!(
            job.errors.is_empty(),
            "a release is not a failure: {job:#?}"
        );
        assert!(job.run_at <= chrono::Utc::now(), "due at once");
        assert!(job.lease_token.is_none());
    }
    // Never claimed: no claim after the signal.
    for job in &jobs[4..] {
        assert_eq!((job.status, job.attempts), (JobState::Ready, 0), "{job:#?}");
        assert!(
            job.attempted_at.is_none_or(|at| at < signalled_at),
            "claimed after the signal: {job:#?}"
        );
    }
    assert!(
        store.worker_list().await.unwrap().is_empty(),
        "the worker left the registry"
    );
}
