//! `job_fail`: retry with backoff, dead with a reason, and the bounded history.

use rand::SeedableRng;
use revenant_core::{decide, Jitter, Outcome, RetryPolicy, Transition};

use super::prelude::*;

/// A retry sends the job back to ready at now + delay with the attempt still spent, and
/// records the failure.
pub async fn fail_retry_sets_run_at_and_keeps_the_attempt_spent(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage.running(job("q", "k"), t0()).await;
    let result = store
        .job_fail(JobFailParams {
            kept: Vec::new(),
            failures: vec![JobFailure {
                lease: lease_of(&running),
                failure: failure(FailureClass::Transient, "503 from provider"),
                action: FailAction::Retry { delay: secs(20) },
                worker: Some("w1".into()),
            }],
            now: Some(at(5)),
        })
        .await
        .unwrap();
    assert_eq!(result, vec![Fenced::Applied]);
    let job = stage.get(running.id).await;
    assert_eq!(job.status, JobState::Ready);
    assert_eq!(job.run_at, at(25));
    assert_eq!(job.attempts, 1);
    assert_eq!(job.lease_token, None);
    assert_eq!(job.lease_expires_at, None);
    assert_eq!(job.finished_at, None);
    assert_eq!(job.dead_reason, None);
    let expected = ErrorEntry {
        attempt: 1,
        at: at(5),
        class: FailureClass::Transient,
        message: "503 from provider".into(),
        worker: Some("w1".into()),
    };
    assert_eq!(job.errors, vec![expected.clone()]);
    assert_eq!(job.last_error, Some(expected));
    assert!(stage.claim("q", 10, at(24)).await.is_empty());
    let again = stage.claim("q", 10, at(25)).await;
    assert_eq!(ids(&again), vec![running.id]);
    assert_eq!(again[0].attempts, 2);
}

/// A kept retry, its next attempt due 20 ms later.
fn keep() -> FailAction {
    FailAction::Keep {
        delay: Duration::from_millis(20),
    }
}

/// Fails `job` transiently with `message` at `now`, kept ([`keep`]).
async fn fail_kept(stage: &Stage, job: &Job, message: &str, now: Timestamp) {
    stage
        .fail(job, failure(FailureClass::Transient, message), keep(), now)
        .await;
}

/// A kept retry ([`FailAction::Keep`]) leaves the job running under its lease, records
/// the failure, and counts the next attempt at once, due after the delay: the lease's
/// token fences the next attempt's result, no claim takes the job meanwhile, a stale
/// lease changes nothing, and a release gives the counted attempt back. A job with no
/// attempts left is retried instead.
pub async fn fail_keep_leaves_the_job_running_and_counts_its_next_attempt(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage
        .running(job("q", "k").with_max_attempts(3), t0())
        .await;
    let stale = JobFailure {
        lease: LeaseRef {
            id: running.id,
            lease_token: revenant_core::job::LeaseToken(
                running.lease_token.expect("a lease").0 ^ 1,
            ),
        },
        failure: failure(FailureClass::Transient, "stale"),
        action: keep(),
        worker: None,
    };
    let result = store
        .job_fail(JobFailParams {
            kept: Vec::new(),
            failures: vec![stale],
            now: Some(at(4)),
        })
        .await
        .unwrap();
    assert_eq!(result, vec![Fenced::LeaseLost]);
    assert_eq!(
        stage.get(running.id).await.attempts,
        1,
        "a stale lease changes nothing"
    );

    fail_kept(&stage, &running, "503 from provider", at(5)).await;
    let row = stage.get(running.id).await;
    assert_eq!(row.status, JobState::Running);
    assert_eq!(row.attempts, 2, "the next attempt is counted when kept");
    assert_eq!(row.lease_token, running.lease_token);
    assert_eq!(row.lease_expires_at, running.lease_expires_at);
    assert_eq!(row.run_at, running.run_at);
    assert_eq!(row.attempted_at, Some(at_ms(5_020)));
    assert_eq!(row.finished_at, None);
    assert_eq!(row.dead_reason, None);
    let entry = ErrorEntry {
        attempt: 1,
        at: at(5),
        class: FailureClass::Transient,
        message: "503 from provider".into(),
        worker: Some(WORKER.into()),
    };
    assert_eq!(row.errors, vec![entry.clone()]);
    assert!(
        stage.claim("q", 10, at(6)).await.is_empty(),
        "a kept job is not claimable while its lease holds"
    );

    // The second attempt fails and is kept again: the third is the last.
    fail_kept(&stage, &running, "503 again", at(7)).await;
    let row = stage.get(running.id).await;
    assert_eq!((row.status, row.attempts), (JobState::Running, 3));
    assert_eq!(row.errors.len(), 2);
    assert_eq!(row.errors[1].attempt, 2);

    // No attempts left: kept is retried instead, through the queue.
    fail_kept(&stage, &running, "503 once more", at(8)).await;
    let row = stage.get(running.id).await;
    assert_eq!(row.status, JobState::Ready);
    assert_eq!(row.attempts, 3);
    assert_eq!(row.run_at, at_ms(8_020));
    assert_eq!(row.lease_token, None);
    assert_eq!(row.errors.len(), 3);

    // A kept job completes under its lease, and one released gets its counted attempt
    // back.
    let completed = stage.running(job("q2", "k"), at(10)).await;
    fail_kept(&stage, &completed, "503", at(11)).await;
    stage.complete(&completed, at(12)).await;
    let row = stage.get(completed.id).await;
    assert_eq!((row.status, row.attempts), (JobState::Completed, 2));
    let released = stage.running(job("q3", "k"), at(10)).await;
    fail_kept(&stage, &released, "503", at(11)).await;
    let result = store
        .job_release(JobReleaseParams {
            leases: vec![lease_of(&released)],
            now: Some(at(12)),
        })
        .await
        .unwrap();
    assert_eq!(result, vec![Fenced::Applied]);
    let row = stage.get(released.id).await;
    assert_eq!((row.status, row.attempts), (JobState::Ready, 1));
    assert_eq!(row.errors.len(), 1, "the kept failure stays recorded");
}

/// A dead failure sets the reason, the last error and finished_at, and drops the lease.
pub async fn fail_dead_sets_reason_last_error_and_finished_at(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage
        .running(job("q", "k").with_max_attempts(5), t0())
        .await;
    stage
        .fail(
            &running,
            failure(FailureClass::Permanent, "template crashed on 'Café Ünï'"),
            FailAction::Dead {
                reason: DeadReason::Permanent,
            },
            at(5),
        )
        .await;
    let job = stage.get(running.id).await;
    assert_eq!(job.status, JobState::Dead);
    assert_eq!(job.dead_reason, Some(DeadReason::Permanent));
    assert_eq!(job.finished_at, Some(at(5)));
    assert_eq!(job.attempts, 1);
    assert_eq!(job.lease_token, None);
    assert_eq!(job.lease_expires_at, None);
    let last = job.last_error.expect("last error");
    assert_eq!(last.class, FailureClass::Permanent);
    assert_eq!(last.message, "template crashed on 'Café Ünï'");
    assert_eq!(last.attempt, 1);
    assert!(stage.claim("q", 10, at(1_000)).await.is_empty());
}

fn action(transition: Transition) -> (revenant_core::decide::Failure, FailAction) {
    match transition {
        Transition::Retry { delay, failure } => (failure, FailAction::Retry { delay }),
        Transition::Dead { reason, failure } => (failure, FailAction::Dead { reason }),
        other => panic!("not a failure: {other:?}"),
    }
}

/// Transient failures, decided by `decide()` with a three-attempt policy, retry with the
/// policy's backoff and end dead with `attempts_exhausted` after the third attempt.
pub async fn transient_failures_until_exhaustion_end_dead_with_attempts_exhausted(
    store: Arc<dyn Store>,
) {
    let stage = Stage::new(store);
    let policy = RetryPolicy::builder()
        .max_attempts(3)
        .jitter(Jitter::None)
        .build()
        .expect("policy");
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let id = stage.enqueue(job("q", "k")).await;
    let mut now = t0();
    for attempt in 1..=3 {
        let claimed = stage.claim("q", 1, now).await;
        assert_eq!(ids(&claimed), vec![id]);
        assert_eq!(claimed[0].attempts, attempt);
        let outcome = Outcome::Retry {
            message: format!("503 #{attempt}"),
        };
        let transition = decide(
            &outcome,
            attempt,
            claimed[0].max_attempts,
            &policy,
            &mut rng,
        );
        let (failure, action) = action(transition);
        stage.fail(&claimed[0], failure, action, now).await;
        let job = stage.get(id).await;
        if attempt < 3 {
            assert_eq!(job.status, JobState::Ready);
            let expected = policy.retry_delay(attempt as u32, None, &mut rng);
            assert_eq!(
                job.run_at - now,
                chrono::Duration::from_std(expected).unwrap(),
                "backoff for attempt {attempt}"
            );
            now = job.run_at;
        }
    }
    let job = stage.get(id).await;
    assert_eq!(job.status, JobState::Dead);
    assert_eq!(job.dead_reason, Some(DeadReason::AttemptsExhausted));
    assert_eq!(job.attempts, 3);
    assert_eq!(
        job.errors.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(job
        .errors
        .iter()
        .all(|e| e.class == FailureClass::Transient));
    assert_eq!(job.last_error.unwrap().message, "503 #3");
}

/// A permanent failure ends the job dead at once, with attempts left unused.
pub async fn permanent_failure_ends_dead_at_once(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let policy = RetryPolicy::default();
    let running = stage
        .running(job("q", "k").with_max_attempts(10), t0())
        .await;
    let outcome = Outcome::Permanent {
        message: "invalid address".into(),
    };
    let (failure, action) = action(decide(&outcome, 1, 10, &policy, &mut rand::rng()));
    stage.fail(&running, failure, action, at(1)).await;
    let job = stage.get(running.id).await;
    assert_eq!(job.status, JobState::Dead);
    assert_eq!(job.dead_reason, Some(DeadReason::Permanent));
    assert_eq!(job.attempts, 1);
    assert_eq!(job.max_attempts, 10);
    assert_eq!(job.last_error.unwrap().class, FailureClass::Permanent);
}

/// Undecodable payloads and unknown kinds are dead at once with their own reasons.
pub async fn decode_errors_and_unknown_kinds_end_dead_with_their_reason(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let policy = RetryPolicy::default();
    for (queue, outcome, reason, class) in [
        (
            "a",
            Outcome::DecodeError {
                message: "missing field `order`".into(),
            },
            DeadReason::DecodeError,
            FailureClass::DecodeError,
        ),
        (
            "b",
            Outcome::UnknownKind {
                kind: "send_fax".into(),
            },
            DeadReason::UnknownKind,
            FailureClass::UnknownKind,
        ),
    ] {
        let running = stage.running(job(queue, "k"), t0()).await;
        let (failure, action) = action(decide(&outcome, 1, 3, &policy, &mut rand::rng()));
        stage.fail(&running, failure, action, at(1)).await;
        let job = stage.get(running.id).await;
        assert_eq!(job.status, JobState::Dead);
        assert_eq!(job.dead_reason, Some(reason));
        assert_eq!(job.last_error.unwrap().class, class);
    }
}

/// A batch of failures is fenced per job.
pub async fn fail_reports_each_failure_on_its_own(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let a = stage.running(job("a", "k"), t0()).await;
    let b = stage.running(job("b", "k"), t0()).await;
    stage.complete(&b, at(1)).await;
    let result = store
        .job_fail(JobFailParams {
            kept: Vec::new(),
            failures: vec![
                JobFailure {
                    lease: lease_of(&a),
                    failure: failure(FailureClass::Panic, "panicked at 'oops'"),
                    action: FailAction::Retry { delay: secs(10) },
                    worker: None,
                },
                JobFailure {
                    lease: lease_of(&b),
                    failure: failure(FailureClass::Transient, "late"),
                    action: FailAction::Retry { delay: secs(10) },
                    worker: None,
                },
            ],
            now: Some(at(2)),
        })
        .await
        .unwrap();
    assert_eq!(result, vec![Fenced::Applied, Fenced::LeaseLost]);
    let a = stage.get(a.id).await;
    assert_eq!(a.status, JobState::Ready);
    assert_eq!(a.last_error.unwrap().class, FailureClass::Panic);
    let b = stage.get(b.id).await;
    assert_eq!(b.status, JobState::Completed);
    assert!(b.errors.is_empty());
}

/// The history keeps the newest `ErrorEntry::HISTORY_LIMIT` entries, oldest first.
pub async fn error_history_keeps_the_newest_entries(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let limit = ErrorEntry::HISTORY_LIMIT as i32;
    let total = limit + 5;
    let id = stage.enqueue(job("q", "k").with_max_attempts(100)).await;
    let mut now = t0();
    for attempt in 1..=total {
        let claimed = stage.claim_id(id, now, WORKER).await;
        stage
            .fail(
                &claimed,
                failure(FailureClass::Transient, &format!("failure {attempt}")),
                FailAction::Retry { delay: secs(1) },
                now,
            )
            .await;
        now += chrono::Duration::seconds(1);
    }
    let job = stage.get(id).await;
    assert_eq!(job.attempts, total);
    assert_eq!(job.errors.len(), ErrorEntry::HISTORY_LIMIT);
    let attempts: Vec<i32> = job.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, (total - limit + 1..=total).collect::<Vec<_>>());
    assert_eq!(
        job.errors[0].message,
        format!("failure {}", total - limit + 1)
    );
    assert_eq!(job.last_error.unwrap().message, format!("failure {total}"));
}

/// Messages a handler could produce, written verbatim into a history: quotes,
/// backslashes, control characters, JSON and JSON-path look-alikes, SQL, emoji.
const HOSTILE_MESSAGES: [&str; 8] = [
    r#"provider said "no" \ and 'no'"#,
    "line one\nline two\ttab\r\u{0}nul",
    r#"{"attempt": 99, "class": "permanent"}"#,
    "$[#] $[0] $.errors",
    "]}, {\"injected\": true}, [",
    "'); DELETE FROM jobs; --",
    "né, 日本語, 🚀\u{7f}",
    "",
];

/// Every way a failure is written (a kept retry, a retry through the queue, a death;
/// several of them in one call) appends its entry to the history as it was given and
/// keeps the newest `ErrorEntry::HISTORY_LIMIT`: the history is read back whole, each
/// message byte for byte.
pub async fn every_way_a_failure_is_written_keeps_its_entry_verbatim(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let limit = ErrorEntry::HISTORY_LIMIT as i32;
    let message = |attempt: i32| {
        format!(
            "{} (attempt {attempt})",
            HOSTILE_MESSAGES[attempt as usize % HOSTILE_MESSAGES.len()]
        )
    };
    let kept = stage
        .running(job("q", "kept").with_max_attempts(100), t0())
        .await;
    let retried = stage
        .running(job("q", "retried").with_max_attempts(100), t0())
        .await;
    let dead = stage
        .running(job("q", "dead").with_max_attempts(100), t0())
        .await;
    // Past the limit, kept: the job stays running under its lease, so the same lease
    // fails it again.
    for attempt in 1..=limit + 3 {
        for running in [&kept, &retried, &dead] {
            fail_kept(&stage, running, &message(attempt), at(i64::from(attempt))).await;
        }
    }
    // The next failure of each in one call: one kept, one retried, one dead.
    let next = limit + 4;
    let failed = |running: &Job, action| JobFailure {
        lease: lease_of(running),
        failure: failure(FailureClass::Transient, &message(next)),
        action,
        worker: Some(WORKER.into()),
    };
    let result = store
        .job_fail(JobFailParams {
            kept: Vec::new(),
            failures: vec![
                failed(&kept, keep()),
                failed(&retried, FailAction::Retry { delay: secs(5) }),
                failed(
                    &dead,
                    FailAction::Dead {
                        reason: DeadReason::AttemptsExhausted,
                    },
                ),
            ],
            now: Some(at(100)),
        })
        .await
        .unwrap();
    assert_eq!(result, vec![Fenced::Applied; 3]);
    for (id, status) in [
        (kept.id, JobState::Running),
        (retried.id, JobState::Ready),
        (dead.id, JobState::Dead),
    ] {
        let job = stage.get(id).await;
        assert_eq!(job.status, status, "job {id}");
        assert_eq!(job.errors.len(), ErrorEntry::HISTORY_LIMIT, "job {id}");
        let first = next - limit + 1;
        let attempts: Vec<i32> = job.errors.iter().map(|e| e.attempt).collect();
        assert_eq!(
            attempts,
            (first..=next).collect::<Vec<_>>(),
            "job {id}: the newest, in order"
        );
        for entry in &job.errors {
            // Verbatim, but for U+0000: PostgreSQL stores no such character in text or
            // jsonb, and its store writes U+FFFD instead rather than lose the failure.
            let given = message(entry.attempt);
            assert!(
                entry.message == given || entry.message == given.replace('\0', "\u{FFFD}"),
                "job {id}, attempt {}: {:?} written as {:?}",
                entry.attempt,
                given,
                entry.message
            );
        }
        assert!(job
            .errors
            .iter()
            .all(|e| e.class == FailureClass::Transient && e.worker.as_deref() == Some(WORKER)));
        assert_eq!(job.errors.last().unwrap().at, at(100));
        assert_eq!(job.last_error.as_ref(), job.errors.last());
    }
}

/// An error message longer than `ErrorEntry::MAX_MESSAGE_BYTES` is cut as
/// `ErrorEntry::truncate_message` cuts it.
pub async fn long_error_messages_are_truncated(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let running = stage.running(job("q", "k"), t0()).await;
    let long = "é".repeat(ErrorEntry::MAX_MESSAGE_BYTES);
    stage
        .fail(
            &running,
            failure(FailureClass::Transient, &long),
            FailAction::Retry { delay: secs(1) },
            at(1),
        )
        .await;
    let job = stage.get(running.id).await;
    assert_eq!(
        job.last_error.unwrap().message,
        ErrorEntry::truncate_message(&long)
    );
}
