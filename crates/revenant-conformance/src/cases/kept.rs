//! Kept failures ([`KeptFailure`]): the failed attempts of a job its worker kept for a
//! short retry, written with the job's next write instead of one write each.

use super::prelude::*;

/// A kept failure of `job`: its attempt `attempt`, failed at `at_ms_` (ms after t0).
fn kept(job: &Job, attempt: i32, at_ms_: i64, message: &str) -> KeptFailure {
    KeptFailure {
        id: job.id,
        attempt,
        at: at_ms(at_ms_),
        failure: failure(FailureClass::Transient, message),
        worker: Some(WORKER.into()),
    }
}

/// The history entry of a kept failure or of a failure written at once.
fn entry(attempt: i32, at_ms_: i64, class: FailureClass, message: &str) -> ErrorEntry {
    ErrorEntry {
        attempt,
        at: at_ms(at_ms_),
        class,
        message: message.into(),
        worker: Some(WORKER.into()),
    }
}

/// The failures queue `q` counted in the minute before `now`.
async fn failures_counted(store: &Arc<dyn Store>, now: Timestamp) -> i64 {
    store
        .queue_stats(QueueStatsParams {
            queue: Some("q".into()),
            worker_alive_within: secs(60),
            interval: secs(60),
            now: Some(now),
        })
        .await
        .expect("queue_stats")
        .first()
        .map_or(0, |s| s.failed_last_interval)
}

/// A completion that carries two kept failures records them first, in order, as the
/// worker numbered and timed them (from the attempt the claim counted), and counts an
/// attempt for each; the failure count has them. A job of the same batch without any
/// is completed as ever.
pub async fn kept_failures_are_written_with_the_completion(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage
        .running(job("q", "k").with_max_attempts(5), t0())
        .await;
    let plain = stage.running(job("q", "k"), t0()).await;
    let result = store
        .job_complete(JobCompleteParams {
            leases: vec![lease_of(&running), lease_of(&plain)],
            kept: vec![
                kept(&running, 1, 4_960, "503 from provider"),
                kept(&running, 2, 4_985, "503 again"),
            ],
            now: Some(at(5)),
        })
        .await
        .unwrap();
    assert_eq!(result, vec![Fenced::Applied, Fenced::Applied]);
    let row = stage.get(running.id).await;
    assert_eq!(row.status, JobState::Completed);
    assert_eq!(
        row.attempts, 3,
        "the attempt claimed and one for each kept failure"
    );
    assert_eq!(row.lease_token, None);
    assert_eq!(row.finished_at, Some(at(5)));
    assert_eq!(
        row.errors,
        vec![
            entry(1, 4_960, FailureClass::Transient, "503 from provider"),
            entry(2, 4_985, FailureClass::Transient, "503 again"),
        ]
    );
    let plain = stage.get(plain.id).await;
    assert_eq!((plain.status, plain.attempts), (JobState::Completed, 1));
    assert!(plain.errors.is_empty());
    assert_eq!(failures_counted(&store, at(6)).await, 2);
}

/// A failure that carries kept failures is numbered after them, and each way it ends
/// the job (retry, death, kept again) counts them: a retry keeps its attempts spent,
/// a death records its reason after the kept entries, and a job kept again whose kept
/// failures used its attempts up is retried instead.
pub async fn kept_failures_come_before_the_failure_that_carries_them(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let retried = stage
        .running(job("q", "k").with_max_attempts(5), t0())
        .await;
    let dead = stage
        .running(job("q", "k").with_max_attempts(5), t0())
        .await;
    let exhausted = stage
        .running(job("q", "k").with_max_attempts(3), t0())
        .await;
    let again = stage
        .running(job("q", "k").with_max_attempts(5), t0())
        .await;
    let keep = || FailAction::Keep {
        delay: Duration::from_millis(20),
    };
    let result = store
        .job_fail(JobFailParams {
            failures: vec![
                failure_of(
                    &retried,
                    failure(FailureClass::Timeout, "timed out"),
                    FailAction::Retry { delay: secs(10) },
                ),
                failure_of(
                    &dead,
                    failure(FailureClass::Permanent, "no such mailbox"),
                    FailAction::Dead {
                        reason: DeadReason::Permanent,
                    },
                ),
                failure_of(&exhausted, failure(FailureClass::Transient, "503"), keep()),
                failure_of(&again, failure(FailureClass::Transient, "503"), keep()),
            ],
            kept: vec![
                kept(&retried, 1, 4_970, "first"),
                kept(&dead, 1, 4_970, "first"),
                kept(&exhausted, 1, 4_970, "first"),
                kept(&retried, 2, 4_990, "second"),
                kept(&exhausted, 2, 4_990, "second"),
                kept(&again, 1, 4_990, "first"),
            ],
            now: Some(at(5)),
        })
        .await
        .unwrap();
    assert_eq!(result, vec![Fenced::Applied; 4]);

    let row = stage.get(retried.id).await;
    assert_eq!((row.status, row.attempts), (JobState::Ready, 3));
    assert_eq!(row.run_at, at(15));
    assert_eq!(
        row.errors,
        vec![
            entry(1, 4_970, FailureClass::Transient, "first"),
            entry(2, 4_990, FailureClass::Transient, "second"),
            entry(3, 5_000, FailureClass::Timeout, "timed out"),
        ]
    );

    let row = stage.get(dead.id).await;
    assert_eq!((row.status, row.attempts), (JobState::Dead, 2));
    assert_eq!(row.dead_reason, Some(DeadReason::Permanent));
    assert_eq!(row.errors.len(), 2);
    assert_eq!(row.errors[0].message, "first");
    assert_eq!(row.last_error.as_ref().map(|e| e.attempt), Some(2));
    assert_eq!(
        row.last_error.map(|e| e.message),
        Some("no such mailbox".to_string())
    );

    // Claimed (1), two kept failures (2, 3): the third attempt was the last.
    let row = stage.get(exhausted.id).await;
    assert_eq!((row.status, row.attempts), (JobState::Ready, 3));
    assert_eq!(row.lease_token, None);
    assert_eq!(
        row.errors.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        [1, 2, 3]
    );

    let row = stage.get(again.id).await;
    assert_eq!(row.status, JobState::Running, "kept again");
    assert_eq!(
        row.attempts, 3,
        "its kept failure and its next attempt counted"
    );
    assert_eq!(
        row.errors.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        [1, 2]
    );

    assert_eq!(failures_counted(&store, at(6)).await, 4 + 6);
}

/// Kept failures go with their job's fence: a job that lost its lease gets none of
/// them, and its attempts stay as they were.
pub async fn kept_failures_of_a_lost_lease_are_not_written(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage.running(job("q", "k"), t0()).await;
    let mut stale = lease_of(&running);
    stale.lease_token = revenant_core::LeaseToken(stale.lease_token.0 ^ 1);
    let completed = store
        .job_complete(JobCompleteParams {
            leases: vec![stale],
            kept: vec![kept(&running, 1, 4_995, "lost")],
            now: Some(at(5)),
        })
        .await
        .unwrap();
    assert_eq!(completed, vec![Fenced::LeaseLost]);
    let failed = store
        .job_fail(JobFailParams {
            failures: vec![JobFailure {
                lease: stale,
                failure: failure(FailureClass::Transient, "lost too"),
                action: FailAction::Retry { delay: secs(1) },
                worker: None,
            }],
            kept: vec![kept(&running, 1, 4_995, "lost")],
            now: Some(at(5)),
        })
        .await
        .unwrap();
    assert_eq!(failed, vec![Fenced::LeaseLost]);
    let row = stage.get(running.id).await;
    assert_eq!((row.status, row.attempts), (JobState::Running, 1));
    assert!(row.errors.is_empty());
    assert_eq!(failures_counted(&store, at(6)).await, 0);
}

/// More kept failures than a history keeps: the newest are kept, in order, with the
/// job's own entry last.
pub async fn kept_failures_past_the_history_limit_keep_the_newest(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage
        .running(job("q", "k").with_max_attempts(100), t0())
        .await;
    let n = ErrorEntry::HISTORY_LIMIT + 5;
    let many: Vec<KeptFailure> = (1..=i32::try_from(n).unwrap())
        .map(|i| kept(&running, i, 4_000, &format!("failure {i}")))
        .collect();
    store
        .job_fail(JobFailParams {
            failures: vec![failure_of(
                &running,
                failure(FailureClass::Transient, "the last"),
                FailAction::Retry { delay: secs(1) },
            )],
            kept: many,
            now: Some(at(5)),
        })
        .await
        .unwrap();
    let row = stage.get(running.id).await;
    let limit = i32::try_from(ErrorEntry::HISTORY_LIMIT).unwrap();
    let total = i32::try_from(n).unwrap() + 1;
    assert_eq!(row.attempts, total);
    assert_eq!(
        row.errors.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        ((total - limit + 1)..=total).collect::<Vec<_>>()
    );
    assert_eq!(
        row.errors.last().map(|e| e.message.as_str()),
        Some("the last")
    );
    assert_eq!(
        row.errors[0].message,
        format!("failure {}", total - limit + 1)
    );
}

/// A kept failure of a job that is not in the batch, numbered below 1 or out of turn
/// (a job's are consecutive), or at a time out of range, is refused by name, and
/// nothing of the batch is written.
pub async fn kept_failures_of_jobs_not_in_the_batch_are_refused(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage.running(job("q", "k"), t0()).await;
    let other = stage.running(job("q", "k"), t0()).await;
    let err = store
        .job_complete(JobCompleteParams {
            leases: vec![lease_of(&running)],
            kept: vec![kept(&other, 1, 4_995, "not of this batch")],
            now: Some(at(5)),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Input(e) if e.field == "kept" && e.message.contains(&other.id.to_string())),
        "{err:?}"
    );
    let mut out_of_range = kept(&running, 1, 4_995, "when?");
    out_of_range.at = chrono::DateTime::<chrono::Utc>::MAX_UTC;
    let refused = [
        (vec![kept(&running, 0, 4_995, "zero")], "from 1"),
        (
            vec![
                kept(&running, 1, 4_990, "one"),
                kept(&running, 3, 4_995, "three"),
            ],
            "consecutive",
        ),
        (vec![out_of_range], "out of range"),
    ];
    for (kept, why) in refused {
        let err = store
            .job_fail(JobFailParams {
                failures: vec![failure_of(
                    &running,
                    failure(FailureClass::Transient, "503"),
                    FailAction::Retry { delay: secs(1) },
                )],
                kept,
                now: Some(at(5)),
            })
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Input(e) if e.field == "kept" && e.message.contains(why)),
            "{why}: {err:?}"
        );
    }
    for job in [&running, &other] {
        let row = stage.get(job.id).await;
        assert_eq!((row.status, row.attempts), (JobState::Running, 1));
        assert!(row.errors.is_empty());
    }
}

/// Kept failures are fenced on the job's stored attempts as its result is on its
/// lease: a completion or a failure whose kept failures do not start at the attempt
/// the store counted is not written (a lost lease), and changes nothing of the job,
/// while the rest of its batch is written.
pub async fn kept_failures_not_numbered_from_the_stored_attempts_are_not_written(
    store: Arc<dyn Store>,
) {
    let stage = Stage::new(store.clone());
    let off = stage
        .running(job("q", "k").with_max_attempts(5), t0())
        .await;
    let fine = stage
        .running(job("q", "k").with_max_attempts(5), t0())
        .await;
    let completed = store
        .job_complete(JobCompleteParams {
            leases: vec![lease_of(&off), lease_of(&fine)],
            kept: vec![
                kept(&off, 2, 4_990, "numbered past the claim"),
                kept(&fine, 1, 4_990, "numbered from the claim"),
            ],
            now: Some(at(5)),
        })
        .await
        .unwrap();
    assert_eq!(completed, vec![Fenced::LeaseLost, Fenced::Applied]);
    let failed = store
        .job_fail(JobFailParams {
            failures: vec![failure_of(
                &off,
                failure(FailureClass::Transient, "503"),
                FailAction::Retry { delay: secs(1) },
            )],
            kept: vec![kept(&off, 2, 4_990, "numbered past the claim")],
            now: Some(at(5)),
        })
        .await
        .unwrap();
    assert_eq!(failed, vec![Fenced::LeaseLost]);
    let row = stage.get(off.id).await;
    assert_eq!((row.status, row.attempts), (JobState::Running, 1));
    assert!(row.errors.is_empty());
    let row = stage.get(fine.id).await;
    assert_eq!((row.status, row.attempts), (JobState::Completed, 2));
    assert_eq!(
        row.errors,
        vec![entry(
            1,
            4_990,
            FailureClass::Transient,
            "numbered from the claim"
        )]
    );
    assert_eq!(failures_counted(&store, at(6)).await, 1);
}
