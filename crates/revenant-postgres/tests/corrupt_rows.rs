//! Rows this version cannot read (written by hand or by another version): a listing
//! names the row in the log and goes on; reading that row alone fails naming it. The
//! rows are broken with raw SQL, which the shared suite cannot do. Each test runs on a
//! fresh schema and skips (loudly) without a server, as `tests/store.rs` does.

mod support;

use chrono::DateTime;
use std::time::Duration;

use revenant_core::store::{
    JobClaimParams, JobEnqueueParams, JobGetParams, JobListParams, PolicyScope, PolicySetParams,
};
use revenant_core::{NewJob, RetryPolicy, Store, StoreError, Timestamp};
use support::TestDb;

fn t0() -> Timestamp {
    DateTime::from_timestamp_millis(1_767_225_600_000).expect("valid time")
}

#[tokio::test]
async fn job_list_skips_a_row_that_cannot_be_decoded_and_job_get_names_it() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let ids: Vec<i64> = db
        .store
        .job_enqueue(JobEnqueueParams {
            jobs: (0..3)
                .map(|_| NewJob::new("q", "k", serde_json::json!({})))
                .collect(),
            default_max_attempts: 3,
            now: Some(t0()),
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    // A history that is JSON but not a list of entries.
    sqlx::query(&format!(
        "UPDATE \"{}\".jobs SET errors = '{{\"not\": \"a list\"}}'::jsonb WHERE id = $1",
        db.schema
    ))
    .bind(ids[1])
    .execute(db.store.pool())
    .await
    .unwrap();

    let listed = db.store.job_list(JobListParams::default()).await.unwrap();
    let listed: Vec<i64> = listed.iter().map(|job| job.id).collect();
    assert_eq!(listed, vec![ids[2], ids[0]], "the other jobs still list");

    match db.store.job_get(JobGetParams { id: ids[1] }).await {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.contains(&format!("job {}", ids[1])), "{message}");
            assert!(message.contains("errors"), "{message}");
        }
        other => panic!("expected a corrupt-row error, got {other:?}"),
    }
    db.drop_schema().await;
}

#[tokio::test]
async fn policy_list_skips_a_stored_policy_that_no_longer_decodes() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    for scope in [PolicyScope::Default, PolicyScope::Queue("emails".into())] {
        db.store
            .policy_set(PolicySetParams {
                scope,
                policy: RetryPolicy::default(),
                now: Some(t0()),
            })
            .await
            .unwrap();
    }
    sqlx::query(&format!(
        "UPDATE \"{}\".policies SET policy = '{{\"max_attempts\": \"many\"}}'::jsonb \
         WHERE scope = 'queue'",
        db.schema
    ))
    .execute(db.store.pool())
    .await
    .unwrap();
    let scopes: Vec<PolicyScope> = db
        .store
        .policy_list()
        .await
        .expect("one bad policy does not fail the list")
        .into_iter()
        .map(|record| record.scope)
        .collect();
    assert_eq!(scopes, vec![PolicyScope::Default]);
    db.drop_schema().await;
}

/// A claim comes back as one row of arrays, a column each (`queries/job_claim_run.sql`):
/// a column whose declared type is not the one this version reads is refused by name,
/// whatever its values, NULLs included.
#[tokio::test]
async fn a_claim_refuses_a_column_of_another_type_by_name() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let claim = JobClaimParams {
        queue: "q".into(),
        worker: "w".into(),
        limit: 3,
        lease: Duration::from_secs(60),
        reclaim: true,
        now: Some(t0()),
    };
    let enqueue = |n| JobEnqueueParams {
        jobs: (0..n)
            .map(|_| NewJob::new("q", "k", serde_json::json!({})))
            .collect(),
        default_max_attempts: 3,
        now: Some(t0()),
    };
    // Every job's correlation id is NULL, and the column now declares a number. (Altered
    // before any claim: a session that has run the claim keeps its plan, made for the
    // table as it was, and the server refuses to run it.)
    db.store.job_enqueue(enqueue(3)).await.unwrap();
    sqlx::query(&format!(
        "ALTER TABLE \"{}\".jobs ALTER COLUMN correlation_id TYPE int8 USING NULL",
        db.schema
    ))
    .execute(db.store.pool())
    .await
    .unwrap();
    match db.store.job_claim_run(claim).await {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.contains("correlation_id"), "{message}");
            assert!(message.contains("INT8"), "{message}");
        }
        other => panic!("expected a corrupt-column error, got {other:?}"),
    }
    db.drop_schema().await;
}
