//! SQLite-only behaviour: URLs, reopening a file, several handles (as the CLI and a
//! worker are) writing one database at once, and what the failure log stores.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use revenant_conformance::stage::{at, claim_params, failure_storm, job, t0};
use revenant_core::store::{Fenced, JobEnqueueParams, JobFailParams, JobGetParams};
use revenant_core::{JobState, Store, StoreError};
use revenant_sqlite::SqliteStore;

fn enqueue(n: usize) -> JobEnqueueParams {
    JobEnqueueParams {
        jobs: (0..n).map(|_| job("q", "k")).collect(),
        default_max_attempts: 3,
        now: Some(t0()),
    }
}

#[tokio::test]
async fn a_url_with_another_scheme_is_refused() {
    for url in ["postgres://localhost/db", "mysql://x", "revenant.db", ""] {
        match SqliteStore::connect(url).await {
            Err(StoreError::UnsupportedUrl { url: got, .. }) => assert_eq!(got, url),
            Err(other) => panic!("{url}: expected UnsupportedUrl, got {other:?}"),
            Ok(_) => panic!("{url}: expected UnsupportedUrl, got a store"),
        }
    }
}

#[tokio::test]
async fn a_file_url_creates_the_database_and_reopening_keeps_the_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested.db");
    let url = format!("sqlite://{}", path.display());
    let id = {
        let store = SqliteStore::connect(&url).await.unwrap();
        store.job_enqueue(enqueue(1)).await.unwrap()[0].id
    };
    assert!(path.exists(), "the file was created");
    // Migrations are applied again on open and change nothing.
    let store = SqliteStore::connect(&url).await.unwrap();
    let job = store.job_get(JobGetParams { id }).await.unwrap().unwrap();
    assert_eq!(job.status, JobState::Ready);
}

#[tokio::test]
async fn an_in_memory_database_works_for_its_store() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store.job_enqueue(enqueue(3)).await.unwrap();
    let claimed = store
        .job_claim(claim_params("q", "w", 10, at(1)))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
}

/// Two handles on one file (the CLI beside a worker, or two worker processes) each have
/// their own pool and in-process lock: only SQLite's `BEGIN IMMEDIATE` and busy timeout
/// keep their claims apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_on_one_file_never_claim_the_same_job() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.unwrap());
    a.job_enqueue(enqueue(150)).await.unwrap();
    let mut tasks = Vec::new();
    for (n, store) in [a.clone(), b.clone(), a.clone(), b.clone()]
        .into_iter()
        .enumerate()
    {
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let mut params = claim_params("q", &format!("w{n}"), 2, at(1));
                params.lease = Duration::from_secs(600);
                let claimed = store.job_claim(params).await.expect("claim");
                if claimed.is_empty() {
                    return got;
                }
                got.extend(claimed.into_iter().map(|j| j.id));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    assert_eq!(all.len(), 150);
    assert_eq!(
        all.iter().collect::<BTreeSet<_>>().len(),
        150,
        "a job was claimed twice"
    );
}

/// A batch of failures logs one row per queue and class, with how many failed
/// (migration 0012), not a row for each: the one writer inserts a row or two for a
/// batch of hundreds.
#[tokio::test]
async fn a_batch_of_failures_logs_a_row_per_class() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("failures.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.job_enqueue(enqueue(100)).await.unwrap();
    let claimed = store
        .job_claim(claim_params("q", "w", 100, at(1)))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 100);
    let written = store
        .job_fail(JobFailParams {
            kept: Vec::new(),
            failures: failure_storm(&claimed),
            now: Some(at(2)),
        })
        .await
        .unwrap();
    assert!(written.iter().all(|f| *f == Fenced::Applied));
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT class, failures FROM attempt_failures ORDER BY class")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![("timeout".to_string(), 25), ("transient".to_string(), 75)]
    );
}
