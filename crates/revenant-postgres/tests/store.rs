//! PostgreSQL-specific behaviour: what the shared conformance suite cannot check
//! (transactional enqueue, several processes, wake-ups across connections, connection
//! loss). Every test runs on its own fresh schema.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::DateTime;
use revenant_conformance::stage::failure_storm;
use revenant_core::store::{
    Fenced, JobClaimParams, JobCompleteParams, JobEnqueueParams, JobFailParams, JobGetParams,
    JobListParams, JobSweepParams, JobVacuumParams, JobVacuumed, LeaseRef,
};
use revenant_core::{DeadReason, FailureClass, JobState, NewJob, Store, StoreError, Timestamp};
use revenant_postgres::{PgStore, PgStoreOptions};
use support::TestDb;

fn t0() -> Timestamp {
    DateTime::from_timestamp_millis(1_767_225_600_123).expect("valid time")
}

fn at(secs: i64) -> Timestamp {
    t0() + chrono::Duration::seconds(secs)
}

fn enqueue_params(jobs: Vec<NewJob>, now: Option<Timestamp>) -> JobEnqueueParams {
    JobEnqueueParams {
        jobs,
        default_max_attempts: 3,
        now,
    }
}

fn claim(queue: &str, limit: u32, now: Option<Timestamp>) -> JobClaimParams {
    JobClaimParams {
        queue: queue.to_string(),
        worker: "worker-a".to_string(),
        limit,
        lease: Duration::from_secs(30),
        reclaim: true,
        now,
    }
}

fn lease(job: &revenant_core::Job) -> LeaseRef {
    LeaseRef {
        id: job.id,
        lease_token: job.lease_token.expect("claimed job has a token"),
    }
}

fn job(queue: &str) -> NewJob {
    NewJob::new(queue, "noop", serde_json::json!({"n": 1}))
}

/// Starts the store's listener and waits until a wait on `queue` is quiet (the
/// listener's connect wakes every waiter once).
async fn settle(store: &PgStore, queue: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let start = Instant::now();
        store.wait_for_jobs(queue, Duration::from_millis(150)).await;
        if start.elapsed() >= Duration::from_millis(150) {
            return;
        }
        assert!(Instant::now() < deadline, "wait_for_jobs never went quiet");
    }
}

#[tokio::test]
async fn claim_complete_and_fence_round_trip_with_pinned_milliseconds() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = &db.store;
    let ids = store
        .job_enqueue(enqueue_params(
            vec![
                job("q"),
                job("q").with_priority(5),
                job("q").with_delay(Duration::from_secs(60)),
            ],
            Some(t0()),
        ))
        .await
        .unwrap();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|e| !e.duplicate));
    let stored = store
        .job_get(JobGetParams { id: ids[0].id })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.run_at,
        t0(),
        "a pinned millisecond time round-trips exactly"
    );
    assert_eq!(stored.created_at, t0());
    assert_eq!(stored.payload, serde_json::json!({"n": 1}));

    let claimed = store.job_claim(claim("q", 10, Some(t0()))).await.unwrap();
    assert_eq!(
        claimed.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![ids[1].id, ids[0].id],
        "priority first; the delayed job is not due"
    );
    let first = &claimed[0];
    assert_eq!(first.status, JobState::Running);
    assert_eq!(first.attempts, 1);
    assert_eq!(first.lease_expires_at, Some(at(30)));
    let token = first.lease_token.unwrap();
    assert!(token.0 > 0 && token.0 < (1 << 53));

    let stale = LeaseRef {
        id: first.id,
        lease_token: revenant_core::LeaseToken(token.0 ^ 1),
    };
    let results = store
        .job_complete(JobCompleteParams {
            kept: Vec::new(),
            leases: vec![stale, lease(first), lease(first)],
            now: Some(at(1)),
        })
        .await
        .unwrap();
    assert_eq!(
        results,
        vec![Fenced::LeaseLost, Fenced::Applied, Fenced::LeaseLost]
    );
    let done = store
        .job_get(JobGetParams { id: first.id })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.status, JobState::Completed);
    assert_eq!(done.finished_at, Some(at(1)));
    assert_eq!(done.lease_token, None);
    db.drop_schema().await;
}

#[tokio::test]
async fn expired_leases_are_reclaimed_once_then_die_with_lease_expired() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = &db.store;
    let id = store
        .job_enqueue(enqueue_params(
            vec![job("q").with_max_attempts(2)],
            Some(t0()),
        ))
        .await
        .unwrap()[0]
        .id;
    let first = store.job_claim(claim("q", 1, Some(t0()))).await.unwrap();
    assert_eq!(first.len(), 1);
    let second = store.job_claim(claim("q", 1, Some(at(31)))).await.unwrap();
    assert_eq!(second.len(), 1, "an expired lease is claimable");
    assert_eq!(second[0].attempts, 2);
    assert_ne!(second[0].lease_token, first[0].lease_token);
    assert_eq!(second[0].errors.len(), 1);
    assert_eq!(second[0].errors[0].class, FailureClass::LeaseExpired);
    assert_eq!(second[0].errors[0].attempt, 1);
    let late = store
        .job_complete(JobCompleteParams {
            kept: Vec::new(),
            leases: vec![lease(&first[0])],
            now: Some(at(32)),
        })
        .await
        .unwrap();
    assert_eq!(
        late,
        vec![Fenced::LeaseLost],
        "the first worker's late ack is rejected"
    );

    assert!(store
        .job_sweep(JobSweepParams { now: Some(at(40)) })
        .await
        .unwrap()
        .is_empty());
    let swept = store
        .job_sweep(JobSweepParams { now: Some(at(62)) })
        .await
        .unwrap();
    assert_eq!(swept, vec![id]);
    let dead = store.job_get(JobGetParams { id }).await.unwrap().unwrap();
    assert_eq!(dead.status, JobState::Dead);
    assert_eq!(dead.dead_reason, Some(DeadReason::LeaseExpired));
    assert_eq!(dead.errors.len(), 2);
    db.drop_schema().await;
}

#[tokio::test]
async fn only_the_head_of_a_group_is_claimable() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = &db.store;
    let ids = store
        .job_enqueue(enqueue_params(
            vec![job("q").with_group("g"), job("q").with_group("g"), job("q")],
            Some(t0()),
        ))
        .await
        .unwrap();
    let claimed = store.job_claim(claim("q", 10, Some(t0()))).await.unwrap();
    let claimed_ids: Vec<i64> = claimed.iter().map(|j| j.id).collect();
    assert_eq!(claimed_ids, vec![ids[0].id, ids[2].id]);
    assert!(store
        .job_claim(claim("q", 10, Some(t0())))
        .await
        .unwrap()
        .is_empty());
    store
        .job_complete(JobCompleteParams {
            kept: Vec::new(),
            leases: vec![lease(&claimed[0])],
            now: Some(t0()),
        })
        .await
        .unwrap();
    let next = store.job_claim(claim("q", 10, Some(t0()))).await.unwrap();
    assert_eq!(
        next.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![ids[1].id]
    );
    db.drop_schema().await;
}

#[tokio::test]
async fn concurrent_enqueues_with_one_unique_key_make_one_job() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let other = db.another_store().await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = if i % 2 == 0 {
            db.store.clone()
        } else {
            other.clone()
        };
        tasks.push(tokio::spawn(async move {
            store
                .job_enqueue(enqueue_params(
                    vec![
                        job("q").with_unique_key("receipt-42"),
                        job("q").with_unique_key("receipt-42"),
                    ],
                    None,
                ))
                .await
                .unwrap()
        }));
    }
    let mut ids = HashSet::new();
    let mut inserted = 0;
    for task in tasks {
        for enqueued in task.await.unwrap() {
            ids.insert(enqueued.id);
            inserted += usize::from(!enqueued.duplicate);
        }
    }
    assert_eq!(ids.len(), 1, "every enqueue returns the same job");
    assert_eq!(inserted, 1, "exactly one enqueue inserted it");
    let all = db
        .store
        .job_list(JobListParams {
            limit: 100,
            ..JobListParams::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 1);
    db.drop_schema().await;
}

#[tokio::test]
async fn a_job_enqueued_in_a_rolled_back_transaction_never_existed() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = &db.store;

    let mut tx = store.pool().begin().await.unwrap();
    let rolled_back = store
        .job_enqueue_tx(&mut tx, enqueue_params(vec![job("outbox")], None))
        .await
        .unwrap()[0]
        .id;
    // While the transaction is open, no worker sees the job.
    assert!(store
        .job_claim(claim("outbox", 10, None))
        .await
        .unwrap()
        .is_empty());
    tx.rollback().await.unwrap();
    assert!(store
        .job_get(JobGetParams { id: rolled_back })
        .await
        .unwrap()
        .is_none());
    assert!(store
        .job_claim(claim("outbox", 10, None))
        .await
        .unwrap()
        .is_empty());

    // In a spawned task, as an application handler would (the future is Send).
    let producer = store.clone();
    let (committed, tx) = tokio::spawn(async move {
        let mut tx = producer.pool().begin().await.unwrap();
        let id = producer
            .job_enqueue_tx(&mut tx, enqueue_params(vec![job("outbox")], None))
            .await
            .unwrap()[0]
            .id;
        (id, tx)
    })
    .await
    .unwrap();
    assert!(store
        .job_claim(claim("outbox", 10, None))
        .await
        .unwrap()
        .is_empty());
    tx.commit().await.unwrap();
    let claimed = store.job_claim(claim("outbox", 10, None)).await.unwrap();
    assert_eq!(
        claimed.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![committed]
    );
    db.drop_schema().await;
}

#[tokio::test]
async fn a_transactional_enqueue_wakes_other_processes_only_on_commit() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let worker = db.another_store().await;
    settle(&worker, "outbox").await;

    let waiting = tokio::spawn({
        let worker = worker.clone();
        async move {
            let start = Instant::now();
            worker
                .wait_for_jobs("outbox", Duration::from_secs(20))
                .await;
            start.elapsed()
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut tx = db.store.pool().begin().await.unwrap();
    db.store
        .job_enqueue_tx(&mut tx, enqueue_params(vec![job("outbox")], None))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "no wake-up before commit");
    tx.commit().await.unwrap();
    let waited = waiting.await.unwrap();
    assert!(
        waited < Duration::from_secs(5),
        "woken by the commit, waited {waited:?}"
    );
    db.drop_schema().await;
}

#[tokio::test]
async fn an_enqueue_wakes_a_worker_in_another_process_within_milliseconds() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let worker = db.another_store().await;
    settle(&worker, "emails").await;
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        let waiting = tokio::spawn({
            let worker = worker.clone();
            async move {
                worker
                    .wait_for_jobs("emails", Duration::from_secs(20))
                    .await;
                Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sent = Instant::now();
        db.store
            .job_enqueue(enqueue_params(vec![job("emails")], None))
            .await
            .unwrap();
        let woke = waiting.await.unwrap();
        worst = worst.max(woke.saturating_duration_since(sent));
        // Past the coalescing window, so each enqueue notifies at once.
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert!(
        worst < Duration::from_secs(2),
        "slowest wake-up took {worst:?}"
    );
    db.drop_schema().await;
}

#[tokio::test]
async fn four_stores_claiming_at_once_never_share_a_job() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let jobs: Vec<NewJob> = (0..400).map(|_| job("drain")).collect();
    db.store
        .job_enqueue(enqueue_params(jobs, None))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let store = db.another_store().await;
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claimed = store
                    .job_claim(JobClaimParams {
                        worker: format!("w{w}"),
                        ..claim("drain", 7, None)
                    })
                    .await
                    .unwrap();
                if claimed.is_empty() {
                    return mine;
                }
                let leases: Vec<LeaseRef> = claimed.iter().map(lease).collect();
                let results = store
                    .job_complete(JobCompleteParams {
                        leases,
                        kept: Vec::new(),
                        now: None,
                    })
                    .await
                    .unwrap();
                assert!(results.iter().all(|r| *r == Fenced::Applied));
                mine.extend(claimed.iter().map(|j| j.id));
            }
        }));
    }
    let mut seen = HashSet::new();
    for task in tasks {
        for id in task.await.unwrap() {
            assert!(seen.insert(id), "job {id} claimed twice");
        }
    }
    assert_eq!(seen.len(), 400);
    db.drop_schema().await;
}

#[tokio::test]
async fn migrations_are_idempotent_when_many_processes_start_at_once() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let schema = support::fresh_schema();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let url = db.url.clone();
        let schema = schema.clone();
        tasks.push(tokio::spawn(async move {
            PgStore::connect_with_schema(&url, &schema)
                .await
                .map(|_| ())
        }));
    }
    for task in tasks {
        task.await
            .unwrap()
            .expect("every concurrent start succeeds");
    }
    let again = PgStore::connect_with_schema(&db.url, &schema)
        .await
        .unwrap();
    let versions: i64 =
        sqlx::query_scalar(&format!("SELECT count(*) FROM \"{schema}\".migrations"))
            .fetch_one(again.pool())
            .await
            .unwrap();
    // One ledger row per migration file, each applied once (counted from the
    // directory, so a new migration needs no edit here).
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".sql"))
        })
        .count();
    assert!(files >= 5, "{files} migration files");
    assert_eq!(versions, i64::try_from(files).unwrap());
    sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(again.pool())
        .await
        .unwrap();
    db.drop_schema().await;
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_not_a_panic() {
    let options = PgStoreOptions {
        acquire_timeout: Duration::from_secs(1),
        ..PgStoreOptions::default()
    };
    // Port 1 on localhost: nothing listens there.
    let err = PgStore::connect_with("postgres://postgres@127.0.0.1:1/postgres", options)
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "expected Unavailable, got {err:?}");
    let err = PgStore::connect("mysql://localhost/db").await.unwrap_err();
    assert!(matches!(err, StoreError::UnsupportedUrl { .. }), "{err:?}");
}

#[tokio::test]
async fn the_store_recovers_after_its_connections_are_killed() {
    let Some(db) = TestDb::with_options(PgStoreOptions {
        application_name: "revenant-kill-test".to_string(),
        ..PgStoreOptions::default()
    })
    .await
    else {
        return;
    };
    let store = Arc::new(db.store.clone());
    store
        .job_enqueue(enqueue_params(vec![job("q")], None))
        .await
        .unwrap();
    store.wait_for_jobs("q", Duration::from_millis(100)).await;

    let mut admin = support::admin().await.expect("admin connection");
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE application_name = 'revenant-kill-test' AND datname = current_database()
           AND pid <> pg_backend_pid()",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(killed >= 1, "the test killed the store's connections");

    // Every call either works (the pool found the connection dead before using it and
    // reconnected) or reports Unavailable; within a few tries it works again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.job_claim(claim("q", 1, None)).await {
            Ok(claimed) => {
                assert_eq!(claimed.len(), 1);
                break;
            }
            Err(err) => {
                assert!(
                    err.is_retryable(),
                    "connection loss must be Unavailable: {err:?}"
                );
                assert!(Instant::now() < deadline, "the store did not recover");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    // The listener reconnects by itself: a wake-up still arrives.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting = tokio::spawn({
            let store = Arc::clone(&store);
            async move {
                let start = Instant::now();
                store.wait_for_jobs("q2", Duration::from_secs(3)).await;
                start.elapsed()
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let other = db.another_store().await;
        other
            .job_enqueue(enqueue_params(vec![job("q2")], None))
            .await
            .unwrap();
        if waiting.await.unwrap() < Duration::from_millis(900) {
            break;
        }
        assert!(Instant::now() < deadline, "the listener never came back");
    }
    db.drop_schema().await;
}

#[tokio::test]
async fn nul_characters_are_refused_in_payloads_and_replaced_in_error_messages() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = &db.store;
    let bad = NewJob::new("q", "noop", serde_json::json!({"name": "a\u{0}b"}));
    let err = store
        .job_enqueue(enqueue_params(vec![job("q"), bad], Some(t0())))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Input(ref e) if e.field == "payload"),
        "{err:?}"
    );
    assert!(store
        .job_claim(claim("q", 10, Some(t0())))
        .await
        .unwrap()
        .is_empty());

    store
        .job_enqueue(enqueue_params(vec![job("q")], Some(t0())))
        .await
        .unwrap();
    let claimed = store.job_claim(claim("q", 1, Some(t0()))).await.unwrap();
    let results = store
        .job_fail(revenant_core::store::JobFailParams {
            kept: Vec::new(),
            failures: vec![revenant_core::store::JobFailure {
                lease: lease(&claimed[0]),
                failure: revenant_core::decide::Failure {
                    class: FailureClass::Transient,
                    message: "bad\u{0}byte".to_string(),
                },
                action: revenant_core::store::FailAction::Retry {
                    delay: Duration::from_secs(1),
                },
                worker: Some("w\u{0}1".to_string()),
            }],
            now: Some(t0()),
        })
        .await
        .unwrap();
    assert_eq!(results, vec![Fenced::Applied]);
    let stored = store
        .job_get(JobGetParams { id: claimed[0].id })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.errors[0].message, "bad\u{FFFD}byte");
    db.drop_schema().await;
}

#[tokio::test]
async fn a_burst_of_enqueues_sends_few_notifications() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let mut listener = sqlx::postgres::PgListener::connect(&db.url).await.unwrap();
    let channel = format!("{}.wakeup", db.schema);
    listener.listen(&channel).await.unwrap();

    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let store = db.store.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..100 {
                store
                    .job_enqueue(enqueue_params(vec![job("burst")], None))
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    // Let the trailing notification of the last window go out.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut received = 0;
    while let Ok(Ok(notification)) =
        tokio::time::timeout(Duration::from_millis(100), listener.recv()).await
    {
        assert_eq!(notification.payload(), "burst");
        received += 1;
    }
    // One leading and at most one trailing notification per 50 ms window.
    let windows = elapsed.as_millis() / 50 + 1;
    assert!(received >= 1, "the burst woke nobody");
    assert!(
        received as u128 <= 2 * windows,
        "{received} notifications for 400 enqueues in {elapsed:?}"
    );
    eprintln!("400 enqueues in {elapsed:?} sent {received} notifications");
    db.drop_schema().await;
}

#[tokio::test]
async fn scheduled_jobs_send_no_notification() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let mut listener = sqlx::postgres::PgListener::connect(&db.url).await.unwrap();
    listener
        .listen(&format!("{}.wakeup", db.schema))
        .await
        .unwrap();
    db.store
        .job_enqueue(enqueue_params(
            vec![job("later").with_delay(Duration::from_secs(600))],
            None,
        ))
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_millis(300), listener.recv()).await;
    assert!(
        got.is_err(),
        "a job due in 10 minutes woke someone: {got:?}"
    );
    db.drop_schema().await;
}

#[tokio::test]
async fn a_store_can_share_the_applications_pool() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&db.url)
        .await
        .unwrap();
    let store = PgStore::from_pool(pool.clone(), PgStoreOptions::with_schema(&db.schema))
        .await
        .unwrap();
    let id = store
        .job_enqueue(enqueue_params(vec![job("shared")], None))
        .await
        .unwrap()[0]
        .id;
    let seen: i64 = sqlx::query_scalar(&format!(
        "SELECT id FROM \"{}\".jobs WHERE queue = 'shared'",
        db.schema
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(seen, id);
    drop(store);
    pool.close().await;
    db.drop_schema().await;
}

/// `n` ready jobs of queue `big` enqueued in batches of 1,000, then `ANALYZE`: the
/// statistics a plan test reads, taken when no job runs (as after a bulk enqueue).
/// Returns the quoted schema and a connection for `EXPLAIN`.
async fn analyzed_jobs(
    db: &TestDb,
    n: usize,
) -> (String, sqlx::pool::PoolConnection<sqlx::Postgres>) {
    for start in (0..n).step_by(1000) {
        let jobs = (start..n.min(start + 1000)).map(|_| job("big")).collect();
        db.store
            .job_enqueue(enqueue_params(jobs, None))
            .await
            .unwrap();
    }
    let schema = format!("\"{}\"", db.schema);
    let mut conn = db.store.pool().acquire().await.unwrap();
    sqlx::raw_sql(&format!("ANALYZE {schema}.jobs"))
        .execute(&mut *conn)
        .await
        .unwrap();
    (schema, conn)
}

/// The statements the claim functions run, for `schema`, each named by its function:
/// the query of the function's last `RETURN QUERY`, whose parameters are the
/// function's. `job_claim_v1` (migration 0008) is the whole claim; `job_claim_v2`
/// (migration 0013), which the store calls, runs its own statement when the queue has
/// no expired lease and `job_claim_v1` when it has.
fn claim_statements(schema: &str) -> [(&'static str, String); 2] {
    let statement = |function: &str| {
        let start = function
            .rfind("RETURN QUERY")
            .expect("the claim's RETURN QUERY")
            + 12;
        let end = function
            .rfind(";\nEND")
            .expect("the end of the claim's statement");
        function[start..end].replace("{schema}", schema)
    };
    [
        (
            "job_claim_v1",
            statement(include_str!("../migrations/0008_job_claim.sql")),
        ),
        (
            "job_claim_v2",
            statement(include_str!("../migrations/0013_job_claim_v2.sql")),
        ),
    ]
}

/// The statement of `function` in `migration`: the query of its `RETURN QUERY`, whose
/// parameters are the function's.
fn function_statement(migration: &str, function: &str, schema: &str) -> String {
    let start = migration
        .find(&format!("CREATE FUNCTION {{schema}}.{function}("))
        .expect("the function");
    let body = &migration[start..];
    let from = body.find("RETURN QUERY").expect("its RETURN QUERY") + 12;
    let to = body.find(";\nEND").expect("the end of its statement");
    body[from..to].replace("{schema}", schema)
}

/// The batch writes of a worker's results (migration 0014, and 0016 that the store
/// calls for a batch with kept failures), each with its function's name, its
/// parameters' types and, for `EXPLAIN EXECUTE`, arguments with `{ids}`, `{tokens}`,
/// `{kept}` (kept failures) and `{firsts}` (their first attempts) to fill in.
fn write_statements(schema: &str) -> [(&'static str, String, &'static str, &'static str); 5] {
    let migration = include_str!("../migrations/0014_job_writes.sql");
    let kept = include_str!("../migrations/0016_kept_entries.sql");
    [
        (
            "job_complete_v3",
            function_statement(kept, "job_complete_v3", schema),
            "timestamptz, int8[], int8[], jsonb[], int4[], int4",
            "NULL, {ids}, {tokens}, {kept}, {firsts}, 20",
        ),
        (
            "job_fail_v3",
            function_statement(kept, "job_fail_v3", schema),
            "timestamptz, int8[], int8[], text[], text[], text[], int8[], text[], int4, text[], bool[], jsonb[], int4[]",
            "NULL, {ids}, {tokens}, '{}', '{}', '{}', '{}', '{}', 20, '{}', '{}', {kept}, {firsts}",
        ),
        (
            "job_complete_v1",
            function_statement(migration, "job_complete_v1", schema),
            "timestamptz, int8[], int8[]",
            "NULL, {ids}, {tokens}",
        ),
        (
            "job_fail_v1",
            function_statement(migration, "job_fail_v1", schema),
            "timestamptz, int8[], int8[], text[], text[], text[], int8[], text[], int4, text[], bool[]",
            "NULL, {ids}, {tokens}, '{}', '{}', '{}', '{}', '{}', 20, '{}', '{}'",
        ),
        (
            "job_release_v1",
            function_statement(migration, "job_release_v1", schema),
            "timestamptz, int8[], int8[]",
            "NULL, {ids}, {tokens}",
        ),
    ]
}

/// `n` elements' kept failures (migration 16), one each, as an array literal, and the
/// attempt of each one's first.
fn kept_literals(n: usize) -> (String, String) {
    let one = r#"'[{"attempt": 1, "at": "2026-01-01T00:00:00.000+00:00", "class": "transient", "message": "503"}]'::jsonb"#;
    (
        format!("ARRAY[{}]::jsonb[]", vec![one; n].join(", ")),
        format!("ARRAY[{}]::int4[]", vec!["1"; n].join(", ")),
    )
}

/// The claim's parameter types, for `PREPARE`.
const CLAIM_TYPES: &str = "timestamptz, text, int8, text, int8, int4, text, boolean";

/// Arguments for `EXPLAIN EXECUTE` of a claim of `limit` jobs of queue `big`.
fn claim_args(limit: i64) -> String {
    format!("NULL, 'big', {limit}, 'worker-a', 30000, 20, 'fingerprint', true")
}

/// The plan of `statement` (parameters of `types`) prepared and run with `args` in a
/// transaction that `settings` (`SET LOCAL` statements) begin with: the generic plan
/// when they force it. Rolled back and deallocated after.
async fn explain_prepared(
    conn: &mut sqlx::PgConnection,
    settings: &str,
    types: &str,
    statement: &str,
    args: &str,
) -> Vec<String> {
    sqlx::raw_sql(&format!(
        "BEGIN; {settings} PREPARE statement ({types}) AS {statement}"
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN EXECUTE statement ({args})"))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql("ROLLBACK; DEALLOCATE statement")
        .execute(&mut *conn)
        .await
        .unwrap();
    plan
}

/// `SET LOCAL` of the generic plan alone.
const GENERIC_PLAN: &str = "SET LOCAL plan_cache_mode = force_generic_plan;";

/// The settings the function `function` runs with (its `SET` clauses, as PostgreSQL
/// keeps them), as the statements that set them for a transaction.
async fn function_settings(conn: &mut sqlx::PgConnection, schema: &str, function: &str) -> String {
    let settings: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT unnest(proconfig) FROM pg_proc WHERE oid = '{schema}.{function}'::regproc"
    ))
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    settings
        .iter()
        .map(|setting| {
            let (name, value) = setting.split_once('=').expect("name=value");
            format!("SET LOCAL {name} = {value};")
        })
        .collect()
}

/// The claim writes the jobs it chose by primary key, whatever the table's size.
/// Joined to its chosen rows instead, the planner judged a sequential scan of the
/// whole table and a hash of it cheaper than a hundred index probes once the table
/// held 20,000 rows: 3 to 8 ms a claim of 128, against 0.3 by primary key. Reads the
/// statements the claim functions run, as the generic plans they run on (their
/// settings force them) and as custom plans.
#[tokio::test]
async fn the_claim_writes_its_chosen_jobs_by_primary_key_on_a_large_table() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (schema, mut conn) = analyzed_jobs(&db, 20_000).await;
    let seq_scan = |plan: &[String]| {
        plan.iter()
            .any(|line| line.contains("Seq Scan on jobs"))
            .then(|| plan.join("\n"))
    };
    for (function, claim) in claim_statements(&schema) {
        for limit in [64_i64, 128, 500] {
            let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {claim}"))
                .bind(None::<Timestamp>)
                .bind("big")
                .bind(limit)
                .bind("worker-a")
                .bind(30_000_i64)
                .bind(20_i32)
                .bind("fingerprint")
                .bind(true)
                .fetch_all(&mut *conn)
                .await
                .unwrap();
            assert_eq!(
                seq_scan(&plan),
                None,
                "{function}, custom plan, limit {limit}"
            );
        }
        let plan = explain_prepared(
            &mut conn,
            GENERIC_PLAN,
            CLAIM_TYPES,
            &claim,
            &claim_args(500),
        )
        .await;
        assert_eq!(seq_scan(&plan), None, "{function}, generic plan");
    }
    drop(conn);
    db.drop_schema().await;
}

/// The claim is never compiled with JIT. Its generic plan is costed on the whole
/// table, and beside 1,000,000 jobs scheduled for later that cost passed
/// `jit_optimize_above_cost`: every claim compiled about a hundred functions, a second
/// a claim for a statement that runs in 1 ms. Here the thresholds are set to zero in
/// the session, standing in for a table that large: the generic plan compiles with
/// the server's `jit`, and not with the settings of the claim functions (their `SET`
/// clauses, read from the database: the functions the store calls).
#[tokio::test]
async fn the_claim_is_never_compiled_with_jit() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (schema, mut conn) = analyzed_jobs(&db, 200).await;
    let jit_available: bool = sqlx::query_scalar("SELECT pg_jit_available()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql(
        "SET jit_above_cost = 0; SET jit_optimize_above_cost = 0; SET jit_inline_above_cost = 0",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    for (function, claim) in claim_statements(&schema) {
        let settings = function_settings(&mut conn, &schema, function).await;
        assert!(
            settings.contains("SET LOCAL jit = off;"),
            "{function}'s settings: {settings}"
        );
        let compiles = |plan: &[String]| plan.iter().any(|line| line.trim_start() == "JIT:");
        // The check can fail: with the server's `jit`, the same generic plan compiles.
        let args = claim_args(64);
        let plain = explain_prepared(&mut conn, GENERIC_PLAN, CLAIM_TYPES, &claim, &args).await;
        if jit_available {
            assert!(compiles(&plain), "{function}, plan:\n{}", plain.join("\n"));
        }
        let store = explain_prepared(&mut conn, &settings, CLAIM_TYPES, &claim, &args).await;
        assert!(!compiles(&store), "{function}, plan:\n{}", store.join("\n"));
        // And it is the generic plan: its conditions name parameters, not values.
        assert!(
            store.iter().any(|line| line.contains("(queue = $2)")),
            "{function}, plan:\n{}",
            store.join("\n")
        );
    }
    sqlx::raw_sql(
        "RESET jit_above_cost; RESET jit_optimize_above_cost; RESET jit_inline_above_cost",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    drop(conn);
    db.drop_schema().await;
}

/// The claim and the batch writes find their jobs by index even when their plans were
/// made on a new table. A connection makes a statement's generic plan at its first run
/// and keeps it until the table's statistics change; made when the table held a few
/// jobs, the plan read the whole table to find the jobs by id, and kept doing so as the
/// table grew (a claim of one job read 658 pages twelve seconds into W3). Here: a table
/// of five jobs, never analyzed, and each function's statement on its generic plan,
/// with the function's settings (read from the database) and with the generic plan
/// alone. The check can fail: on the generic plan alone each statement reads the table.
#[tokio::test]
async fn the_claim_and_the_writes_go_by_index_on_plans_made_on_a_new_table() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let jobs = (0..5).map(|_| job("big")).collect();
    let ids: Vec<String> = db
        .store
        .job_enqueue(enqueue_params(jobs, None))
        .await
        .unwrap()
        .iter()
        .map(|e| e.id.to_string())
        .collect();
    let ids = format!("'{{{}}}'::int8[]", ids.join(","));
    let schema = format!("\"{}\"", db.schema);
    let mut conn = db.store.pool().acquire().await.unwrap();
    let [_, (claim_function, claim)] = claim_statements(&schema);
    let mut statements = vec![(claim_function, claim, CLAIM_TYPES, claim_args(1))];
    let (kept, firsts) = kept_literals(5);
    for (function, statement, types, args) in write_statements(&schema) {
        let args = args
            .replace("{ids}", &ids)
            .replace("{tokens}", &ids)
            .replace("{kept}", &kept)
            .replace("{firsts}", &firsts);
        statements.push((function, statement, types, args));
    }
    for (function, statement, types, args) in statements {
        let settings = function_settings(&mut conn, &schema, function).await;
        assert!(
            settings.contains("SET LOCAL enable_seqscan = off;"),
            "{function}: {settings}"
        );
        let reads_the_table =
            |plan: &[String]| plan.iter().any(|line| line.contains("Seq Scan on jobs"));
        let plain = explain_prepared(&mut conn, GENERIC_PLAN, types, &statement, &args).await;
        assert!(
            reads_the_table(&plain),
            "{function}, plan:\n{}",
            plain.join("\n")
        );
        let store = explain_prepared(&mut conn, &settings, types, &statement, &args).await;
        assert!(
            !reads_the_table(&store),
            "{function}, plan:\n{}",
            store.join("\n")
        );
    }
    drop(conn);
    db.drop_schema().await;
}

/// The batch writes that fence on a lease (complete, fail, release) find each job of
/// the batch by primary key, on their generic plans too, with statistics taken when no
/// job ran (as after a bulk enqueue) and hundreds running now. With `status =
/// 'running'` in their conditions the partial index `jobs_running_idx` matched, and
/// the generic plan walked every running job for each element of the batch.
#[tokio::test]
async fn the_batch_writes_find_their_jobs_by_primary_key() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (schema, mut conn) = analyzed_jobs(&db, 2_000).await;
    let running = db.store.job_claim(claim("big", 500, None)).await.unwrap();
    assert_eq!(running.len(), 500);
    // EXPLAIN EXECUTE takes no bound parameters: the batch goes in as array literals.
    let array = |values: Vec<i64>| {
        let items: Vec<String> = values.iter().map(i64::to_string).collect();
        format!("'{{{}}}'::int8[]", items.join(","))
    };
    let ids = array(running.iter().map(|job| job.id).take(100).collect());
    let tokens = array(
        running
            .iter()
            .map(|job| job.lease_token.unwrap().0)
            .take(100)
            .collect(),
    );
    let (kept, firsts) = kept_literals(100);
    for (name, statement, types, args) in write_statements(&schema) {
        let args = args
            .replace("{ids}", &ids)
            .replace("{tokens}", &tokens)
            .replace("{kept}", &kept)
            .replace("{firsts}", &firsts);
        let plan = explain_prepared(&mut conn, GENERIC_PLAN, types, &statement, &args).await;
        let on_jobs: Vec<&String> = plan
            .iter()
            .filter(|line| line.contains(" on jobs") && !line.contains("Update on"))
            .collect();
        assert!(
            !on_jobs.is_empty() && on_jobs.iter().all(|line| line.contains("using jobs_pkey")),
            "{name}: every access to jobs goes by primary key; plan:\n{}",
            plan.join("\n")
        );
    }
    drop(conn);
    db.drop_schema().await;
}

/// `min_connections` opens that many connections at start and keeps them (a worker
/// then never waits for a connection to open at the start of a burst); above
/// `max_connections` it is refused, naming the field, before anything connects.
#[tokio::test]
async fn a_pool_with_min_connections_opens_them_at_start() {
    let name = format!("rv-min-{:08x}", rand::random::<u32>());
    let Some(db) = TestDb::with_options(PgStoreOptions {
        max_connections: 4,
        min_connections: 3,
        application_name: name.clone(),
        ..PgStoreOptions::default()
    })
    .await
    else {
        return;
    };
    let mut admin = support::admin().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let open = loop {
        let open: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
                .bind(&name)
                .fetch_one(&mut admin)
                .await
                .unwrap();
        if open >= 3 || Instant::now() >= deadline {
            break open;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(open >= 3, "{open} connections open, not the 3 asked for");
    db.drop_schema().await;

    let refused = PgStore::connect_with(
        &support::database_url(),
        PgStoreOptions {
            max_connections: 2,
            min_connections: 3,
            ..PgStoreOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused, StoreError::Input(ref e) if e.field == "min_connections"),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("max_connections (2)"),
        "{refused}"
    );
}

/// The jobs table vacuums early (2% of dead rows, not 20%) and at full speed (no
/// cost-based delay, migration 0009), and leaves half of a page free for the new versions
/// of its rows (migration 0011): every claim reads the claim index's entries of
/// the jobs claimed since the last vacuum, so the time between two passes is time
/// every claim slows down in (docs/deploy.md, "Vacuum").
#[tokio::test]
async fn the_jobs_table_vacuums_early_and_without_delay() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let options: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT unnest(reloptions) FROM pg_class WHERE oid = '\"{}\".jobs'::regclass",
        db.schema
    ))
    .fetch_all(db.store.pool())
    .await
    .unwrap();
    for expected in [
        "autovacuum_vacuum_scale_factor=0.02",
        "autovacuum_analyze_scale_factor=0.02",
        "autovacuum_vacuum_cost_delay=0",
        "fillfactor=50",
    ] {
        assert!(
            options.iter().any(|o| o == expected),
            "{expected} is not among the jobs table's options: {options:?}"
        );
    }
    db.drop_schema().await;
}

/// A claim writes the job's new version on the page that holds it (fillfactor 50,
/// migration 0011): the page keeps room for it, so PostgreSQL logs what changed instead
/// of locking the old version, moving the whole row to another page and logging it
/// there. With pages filled to the brim (the default) no claimed row of a bulk enqueue
/// stays where it was.
#[tokio::test]
async fn a_claimed_job_stays_on_its_page() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (schema, mut conn) = analyzed_jobs(&db, 1_000).await;
    // The page of a row is the first number of its ctid, "(page,item)".
    let pages = format!(
        "SELECT id, split_part(trim(both '()' from ctid::text), ',', 1)::bigint \
         FROM {schema}.jobs ORDER BY id"
    );
    let before: Vec<(i64, i64)> = sqlx::query_as(&pages).fetch_all(&mut *conn).await.unwrap();
    let claimed = db.store.job_claim(claim("big", 1_000, None)).await.unwrap();
    assert_eq!(claimed.len(), 1_000);
    let after: Vec<(i64, i64)> = sqlx::query_as(&pages).fetch_all(&mut *conn).await.unwrap();
    assert_eq!(before.len(), after.len());
    let stayed = before.iter().zip(&after).filter(|(b, a)| b == a).count();
    let pages_used: std::collections::BTreeSet<i64> = before.iter().map(|(_, p)| *p).collect();
    // The claim makes each row longer (the lease, the worker, the start time), so the
    // half a page left free holds most of its rows' new versions, not all. Measured:
    // 835 of 1,000 on 34 pages; at the default fillfactor none, on 17 pages.
    assert!(
        stayed >= 500,
        "{stayed} of 1,000 claimed jobs stayed on their page (rows were on {} pages)",
        pages_used.len()
    );
    drop(conn);
    db.drop_schema().await;
}

/// A worker's claims and batch writes follow each other on the connection that ran
/// the last one (warm.rs): one after the other, they all run on one server process,
/// where the pool alone (which takes a connection back only after pinging it, in a
/// task of its own) handed each the connection idle the longest, and they went round
/// every connection it had open.
#[tokio::test]
async fn a_workers_statements_run_on_the_connection_of_the_last_one() {
    let name = format!("rv-warm-{:x}", rand::random::<u64>());
    let options = PgStoreOptions {
        application_name: name.clone(),
        ..PgStoreOptions::default()
    };
    let Some(db) = TestDb::with_options(options).await else {
        return;
    };
    let store = &db.store;
    let jobs = (0..10).map(|_| job("warm")).collect();
    store.job_enqueue(enqueue_params(jobs, None)).await.unwrap();
    for round in 0..10 {
        let claimed = store.job_claim_run(claim("warm", 1, None)).await.unwrap();
        assert_eq!(claimed.len(), 1, "round {round}");
        let leases = vec![LeaseRef {
            id: claimed[0].id,
            lease_token: claimed[0].lease_token,
        }];
        let written = store
            .job_complete(JobCompleteParams {
                leases,
                kept: Vec::new(),
                now: None,
            })
            .await
            .unwrap();
        assert_eq!(written, vec![Fenced::Applied], "round {round}");
    }
    // Each of the store's server processes shows the last statement it ran.
    let mut conn = support::admin()
        .await
        .expect("the test server answered just now");
    let ran: Vec<String> = sqlx::query_scalar(
        "SELECT query FROM pg_stat_activity WHERE application_name = $1 \
         AND (query LIKE '%job_claim_v2%' OR query LIKE '%job_complete_v1%')",
    )
    .bind(&name)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        ran.len(),
        1,
        "the claims and the writes ran on {} server processes",
        ran.len()
    );
    drop(conn);
    db.drop_schema().await;
}

/// A batch of failures logs one row per queue and class, with how many failed
/// (migration 0012), not a row for each: a failure storm's batches of hundreds write a
/// row or two to the failure log instead of hundreds, each with its two index entries.
#[tokio::test]
async fn a_batch_of_failures_logs_a_row_per_class() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (schema, mut conn) = analyzed_jobs(&db, 1_000).await;
    let claimed = db.store.job_claim(claim("big", 1_000, None)).await.unwrap();
    assert_eq!(claimed.len(), 1_000);
    let written = db
        .store
        .job_fail(JobFailParams {
            kept: Vec::new(),
            failures: failure_storm(&claimed),
            now: None,
        })
        .await
        .unwrap();
    assert!(written.iter().all(|f| *f == Fenced::Applied));
    let rows: Vec<(String, i32)> = sqlx::query_as(&format!(
        "SELECT class, failures FROM {schema}.attempt_failures ORDER BY class"
    ))
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![("timeout".to_string(), 250), ("transient".to_string(), 750)]
    );
    drop(conn);
    db.drop_schema().await;
}

/// A store on a fresh schema whose pool holds one connection, so a test's own query
/// runs on the session the store's last operation used.
async fn one_connection_db() -> Option<TestDb> {
    TestDb::with_options(PgStoreOptions {
        max_connections: 1,
        ..PgStoreOptions::default()
    })
    .await
}

/// The claim runs on its generic plan with JIT and table scans off (its function's
/// `SET` clauses); the connection goes back to the pool with the server's settings,
/// for the statements whose plans depend on their parameters (the filters of
/// `job_list`, say).
#[tokio::test]
async fn the_claims_plan_setting_does_not_outlive_the_claim() {
    let Some(db) = one_connection_db().await else {
        return;
    };
    db.store
        .job_enqueue(enqueue_params(vec![job("one")], None))
        .await
        .unwrap();
    // The pool's only connection is the one the claim uses.
    let settings = async || -> (String, String, String) {
        sqlx::query_as(
            "SELECT current_setting('plan_cache_mode'), current_setting('jit'), \
             current_setting('enable_seqscan')",
        )
        .fetch_one(db.store.pool())
        .await
        .unwrap()
    };
    let before = settings().await;
    assert_eq!((before.0.as_str(), before.2.as_str()), ("auto", "on"));
    let claimed = db.store.job_claim(claim("one", 10, None)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(settings().await, before);
    db.drop_schema().await;
}

fn vacuum_past(min_dead_rows: u64) -> JobVacuumParams {
    JobVacuumParams {
        min_dead_rows,
        min_dead_fraction: 0.0,
    }
}

/// `job_vacuum` reads the table's statistics and runs a pass only past its thresholds;
/// the pass clears the dead rows the claims and completions left, and the session goes
/// back to the pool with its notices on.
#[tokio::test]
async fn a_vacuum_runs_past_its_thresholds_and_clears_the_dead_rows() {
    let Some(db) = one_connection_db().await else {
        return;
    };
    let store = &db.store;
    let idle = store.job_vacuum(vacuum_past(10_000)).await.unwrap();
    assert!(
        matches!(idle, JobVacuumed::NotNeeded { dead_rows, .. } if dead_rows < 10_000),
        "{idle:?}"
    );
    store
        .job_enqueue(enqueue_params((0..300).map(|_| job("vac")).collect(), None))
        .await
        .unwrap();
    let claimed = store.job_claim(claim("vac", 300, None)).await.unwrap();
    assert_eq!(claimed.len(), 300);
    store
        .job_complete(JobCompleteParams {
            kept: Vec::new(),
            leases: claimed.iter().map(lease).collect(),
            now: None,
        })
        .await
        .unwrap();
    // The server's statistics arrive within a second or so of the commits: ask until
    // they show the dead rows (each claim and each completion left one).
    let deadline = Instant::now() + Duration::from_secs(60);
    let dead_before = loop {
        match store.job_vacuum(vacuum_past(300)).await.unwrap() {
            JobVacuumed::Vacuumed { dead_rows, .. } => break dead_rows,
            JobVacuumed::NotNeeded { .. } => {}
            other => panic!("the test's role owns its table: {other:?}"),
        }
        assert!(Instant::now() < deadline, "the dead rows never showed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(dead_before >= 300, "{dead_before}");
    match store.job_vacuum(vacuum_past(u64::MAX)).await.unwrap() {
        JobVacuumed::NotNeeded { dead_rows, .. } => assert!(
            dead_rows < dead_before,
            "{dead_rows} dead rows after the pass, {dead_before} before"
        ),
        other => panic!("{other:?}"),
    }
    let notices: String = sqlx::query_scalar("SELECT current_setting('client_min_messages')")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(notices, "notice");
    db.drop_schema().await;
}

/// With another vacuum of the table under way (here: its lock held), `job_vacuum`
/// returns `Busy` at once instead of queueing behind it; once it is gone, the pass runs.
#[tokio::test]
async fn a_vacuum_never_waits_for_another() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let mut other = support::admin().await.expect("a second connection");
    sqlx::raw_sql(&format!(
        "BEGIN; LOCK TABLE \"{}\".jobs IN SHARE UPDATE EXCLUSIVE MODE",
        db.schema
    ))
    .execute(&mut other)
    .await
    .unwrap();
    // A guard, not a measure: a vacuum that waited would wait for the lock forever.
    let busy = tokio::time::timeout(Duration::from_secs(60), db.store.job_vacuum(vacuum_past(0)))
        .await
        .expect("job_vacuum waited for the lock")
        .unwrap();
    assert_eq!(busy, JobVacuumed::Busy);
    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    let ran = db.store.job_vacuum(vacuum_past(0)).await.unwrap();
    assert!(matches!(ran, JobVacuumed::Vacuumed { .. }), "{ran:?}");
    db.drop_schema().await;
}

/// A role that may use the tables but does not own them cannot vacuum them (the
/// pool of a service whose tables a migration role owns):
/// `job_vacuum` says so instead of running a VACUUM that would only warn.
#[tokio::test]
async fn a_role_that_does_not_own_the_table_may_not_vacuum_it() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let role = format!("{}_user", db.schema);
    let mut admin = support::admin().await.expect("an admin connection");
    sqlx::raw_sql(&format!(
        "CREATE ROLE \"{role}\"; \
         GRANT USAGE ON SCHEMA \"{schema}\" TO \"{role}\"; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA \"{schema}\" TO \"{role}\"; \
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA \"{schema}\" TO \"{role}\"",
        schema = db.schema
    ))
    .execute(&mut admin)
    .await
    .unwrap();
    // Every connection of the store's pool takes the role (the test's own role is a
    // superuser, who may).
    let set_role = format!("SET ROLE \"{role}\"");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .after_connect(move |conn, _| {
            let set_role = set_role.clone();
            Box::pin(async move {
                sqlx::query(&set_role).execute(&mut *conn).await?;
                Ok(())
            })
        })
        .connect(&db.url)
        .await
        .unwrap();
    let outcome = async {
        let store = PgStore::from_pool(
            pool,
            PgStoreOptions {
                migrate: revenant_core::migration::MigrateMode::Never,
                ..PgStoreOptions::with_schema(&db.schema)
            },
        )
        .await?;
        let outcome = store.job_vacuum(vacuum_past(0)).await;
        store.pool().close().await;
        outcome
    }
    .await;
    db.drop_schema().await;
    let _ = sqlx::raw_sql(&format!("DROP ROLE IF EXISTS \"{role}\""))
        .execute(&mut admin)
        .await;
    assert_eq!(outcome.unwrap(), JobVacuumed::NotPermitted);
}

/// `append_error` since migration 10 appends without a query when the history has
/// room: the same answer as the query of migration 1 (kept here as the reference) for
/// every length of history around the kept count, for the kept counts at their edges,
/// and for NULLs (a negative count fails either way, as a negative `LIMIT`).
#[tokio::test]
async fn append_error_keeps_the_newest_entries_as_the_query_did() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let schema = format!("\"{}\"", db.schema);
    let mut conn = db.store.pool().acquire().await.unwrap();
    sqlx::raw_sql(
        "CREATE FUNCTION pg_temp.reference_append(history jsonb, entry jsonb, keep integer)
         RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
             SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb)
             FROM (
                 SELECT e, n
                 FROM jsonb_array_elements(history || jsonb_build_array(entry))
                      WITH ORDINALITY AS x(e, n)
                 ORDER BY n DESC
                 LIMIT keep
             ) newest
         $$",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    let (cases, differ, appended): (i64, i64, i64) = sqlx::query_as(&format!(
        "WITH cases AS (
             SELECT h.history, k.keep,
                    jsonb_build_object('attempt', 99, 'message', 'the newest') AS entry
             FROM (SELECT coalesce(jsonb_agg(jsonb_build_object('attempt', i))
                                   FILTER (WHERE i IS NOT NULL), '[]'::jsonb)
                          AS history
                   FROM generate_series(0, 25) AS len
                   LEFT JOIN LATERAL generate_series(1, len) AS i ON true
                   GROUP BY len
                   UNION ALL SELECT NULL) h
             CROSS JOIN (VALUES (0), (1), (2), (5), (19), (20), (21), (NULL::int)) k(keep)
         )
         SELECT count(*),
                count(*) FILTER (WHERE {schema}.append_error(history, entry, keep)
                                 IS DISTINCT FROM pg_temp.reference_append(history, entry, keep)),
                count(*) FILTER (WHERE jsonb_array_length(
                                           {schema}.append_error(history, entry, keep))
                                       = jsonb_array_length(history) + 1)
         FROM cases"
    ))
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    // 27 histories (lengths 0 to 25, and NULL) times 8 kept counts.
    assert_eq!(cases, 27 * 8);
    assert_eq!(differ, 0, "append_error differs from the query it replaces");
    // Every entry kept where there was room (a history shorter than the kept count: 1 +
    // 2 + 5 + 19 + 20 + 21 = 68 cases, the new path) or no limit (NULL: 26 histories).
    assert_eq!(appended, 68 + 26);
    drop(conn);
    db.drop_schema().await;
}
