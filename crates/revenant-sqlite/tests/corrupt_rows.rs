//! Rows this version cannot read (written by hand, by another version, or by a bug
//! such as the `run_at` of a redrive paced at one job every 31 million years): a
//! listing names the row in the log and goes on; reading that row alone fails naming
//! it. The rows are broken with raw SQL, which the shared suite cannot do.

use revenant_conformance::stage::{job, t0};
use revenant_core::store::{
    JobEnqueueParams, JobGetParams, JobListParams, PolicyScope, PolicySetParams,
};
use revenant_core::{RetryPolicy, Store, StoreError};
use revenant_sqlite::SqliteStore;
use sqlx::sqlite::SqlitePool;

/// A store on a file, and a second pool on the same file for raw SQL.
async fn store_and_raw(dir: &tempfile::TempDir) -> (SqliteStore, SqlitePool) {
    let url = format!("sqlite://{}", dir.path().join("revenant.db").display());
    let store = SqliteStore::connect(&url).await.expect("open the store");
    let raw = SqlitePool::connect(&url).await.expect("a raw pool");
    (store, raw)
}

/// Three ready jobs of queue `q`, enqueued at t0; their ids.
async fn enqueue_three(store: &SqliteStore) -> Vec<i64> {
    store
        .job_enqueue(JobEnqueueParams {
            jobs: (0..3).map(|_| job("q", "k")).collect(),
            default_max_attempts: 3,
            now: Some(t0()),
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect()
}

#[tokio::test]
async fn job_list_skips_a_row_that_cannot_be_decoded_and_job_get_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, raw) = store_and_raw(&dir).await;
    let ids = enqueue_three(&store).await;
    // What an unchecked redrive at one job every 31 million years wrote.
    sqlx::query("UPDATE jobs SET run_at = ?1 WHERE id = ?2")
        .bind(i64::MAX)
        .bind(ids[1])
        .execute(&raw)
        .await
        .unwrap();

    let listed = store.job_list(JobListParams::default()).await.unwrap();
    let listed: Vec<i64> = listed.iter().map(|job| job.id).collect();
    assert_eq!(listed, vec![ids[2], ids[0]], "the other jobs still list");

    match store.job_get(JobGetParams { id: ids[1] }).await {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.contains(&format!("job {}", ids[1])), "{message}");
            assert!(message.contains("run_at"), "{message}");
        }
        other => panic!("expected a corrupt-row error, got {other:?}"),
    }
}

#[tokio::test]
async fn policy_list_skips_a_stored_policy_that_no_longer_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let (store, raw) = store_and_raw(&dir).await;
    for scope in [PolicyScope::Default, PolicyScope::Queue("emails".into())] {
        store
            .policy_set(PolicySetParams {
                scope,
                policy: RetryPolicy::default(),
                now: Some(t0()),
            })
            .await
            .unwrap();
    }
    sqlx::query(
        "UPDATE policies SET policy = '{\"max_attempts\": \"many\"}' WHERE scope = 'queue'",
    )
    .execute(&raw)
    .await
    .unwrap();
    let scopes: Vec<PolicyScope> = store
        .policy_list()
        .await
        .expect("one bad policy does not fail the list")
        .into_iter()
        .map(|record| record.scope)
        .collect();
    assert_eq!(scopes, vec![PolicyScope::Default]);
}

/// A claimed batch is handed over as one JSON value (job_claimed.sql, and
/// job_claimed_run.sql for the runtime's claim); a payload in it that is not JSON still
/// fails the claim naming the job and the column, and the claim writes nothing: every
/// job stays ready. A history that is not JSON does not fail the runtime's claim, which
/// reads no history beyond whether the last attempt's lease expired.
#[tokio::test]
async fn a_claim_names_a_job_whose_payload_cannot_be_decoded_and_claims_nothing() {
    use revenant_core::store::JobClaimParams;
    use revenant_core::JobState;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let (store, raw) = store_and_raw(&dir).await;
    let ids = enqueue_three(&store).await;
    sqlx::query("UPDATE jobs SET payload = 'not {json' WHERE id = ?1")
        .bind(ids[1])
        .execute(&raw)
        .await
        .unwrap();

    let claim = JobClaimParams {
        queue: "q".into(),
        worker: "w".into(),
        limit: 10,
        lease: Duration::from_secs(30),
        now: Some(t0()),
        reclaim: true,
    };
    for run in [false, true] {
        let answer = if run {
            store
                .job_claim_run(claim.clone())
                .await
                .map(|jobs| jobs.len())
        } else {
            store.job_claim(claim.clone()).await.map(|jobs| jobs.len())
        };
        match answer {
            Err(StoreError::Corrupt(message)) => {
                assert!(message.contains(&format!("job {}", ids[1])), "{message}");
                assert!(message.contains("payload"), "{message}");
            }
            other => panic!("expected a corrupt-row error (run: {run}), got {other:?}"),
        }
        for id in [ids[0], ids[2]] {
            let job = store.job_get(JobGetParams { id }).await.unwrap().unwrap();
            assert_eq!(job.status, JobState::Ready, "job {id} was not claimed");
            assert_eq!(job.attempts, 0);
        }
    }

    sqlx::query("UPDATE jobs SET payload = '{}', errors = '[not json' WHERE id = ?1")
        .bind(ids[1])
        .execute(&raw)
        .await
        .unwrap();
    let claimed = store
        .job_claim_run(claim)
        .await
        .expect("the runtime's claim");
    assert_eq!(claimed.len(), 3);
    assert!(claimed.iter().all(|job| !job.reclaimed));
}
