//! The upgrade test, shared by every backend: a database built with the first schema
//! (migration 1 only) and filled by plain SQL of that schema with a job in every
//! state must, once the store connects and applies the rest, hold every job intact and
//! workable.
//!
//! A backend's `tests/upgrade.rs` applies migration 1, writes [`first_schema_jobs`]
//! with its own first-schema SQL (the columns of migration 1, nothing newer), connects
//! normally and calls [`check_upgraded`]. The jobs are pinned to [`crate::stage::t0`],
//! which is also the "now" of every call made here.

use std::sync::Arc;
use std::time::Duration;

use revenant_core::store::{
    Fenced, JobClaimParams, JobCompleteParams, JobFilter, JobGetParams, JobRedriveParams, LeaseRef,
};
use revenant_core::{
    fingerprint, DeadReason, ErrorEntry, FailureClass, Job, JobState, LeaseToken, Store, Timestamp,
};

use crate::stage::{at, t0};

/// The queues of the staged jobs: one per job, so each claim below meets one job.
pub const QUEUES: [&str; 6] = [
    "upgrade_ready",
    "upgrade_scheduled",
    "upgrade_running",
    "upgrade_completed",
    "upgrade_dead",
    "upgrade_cancelled",
];

fn base(id: i64, queue: &str, status: JobState) -> Job {
    Job {
        id,
        queue: queue.to_string(),
        kind: "send_receipt".to_string(),
        payload: serde_json::json!({ "order": id, "note": "written by the first schema" }),
        status,
        priority: 0,
        attempts: 0,
        max_attempts: 3,
        run_at: at(-600),
        created_at: at(-600),
        attempted_at: None,
        finished_at: None,
        lease_token: None,
        lease_expires_at: None,
        worker: None,
        group_key: None,
        unique_key: None,
        correlation_id: None,
        dead_reason: None,
        last_error: None,
        errors: Vec::new(),
        redrives: 0,
        fingerprint: None,
        trace_context: None,
        dependency: None,
        dependency_wait: None,
    }
}

fn entry(attempt: i32, at: Timestamp, message: &str) -> ErrorEntry {
    ErrorEntry {
        attempt,
        at,
        class: FailureClass::Transient,
        message: message.to_string(),
        worker: Some("old-worker".to_string()),
    }
}

/// One job in every state, as the first schema held them (ids 1 to 6, in [`QUEUES`]
/// order): ready and due, scheduled, running with a lease that expired 30 s before
/// `t0`, completed, dead after three failures, cancelled. The columns later migrations
/// added are `None`; a backend writes the rest with its first-schema SQL (the error
/// history as the JSON of `errors`).
pub fn first_schema_jobs() -> Vec<Job> {
    let ready = Job {
        unique_key: Some("receipt-1".to_string()),
        correlation_id: Some("order-1".to_string()),
        priority: 7,
        ..base(1, QUEUES[0], JobState::Ready)
    };
    let scheduled = Job {
        run_at: at(3600),
        ..base(2, QUEUES[1], JobState::Ready)
    };
    let running = Job {
        attempts: 1,
        attempted_at: Some(at(-120)),
        lease_token: Some(LeaseToken(42)),
        lease_expires_at: Some(at(-30)),
        worker: Some("old-worker".to_string()),
        group_key: Some("restaurant-9".to_string()),
        ..base(3, QUEUES[2], JobState::Running)
    };
    let completed = Job {
        attempts: 1,
        attempted_at: Some(at(-500)),
        finished_at: Some(at(-499)),
        worker: Some("old-worker".to_string()),
        ..base(4, QUEUES[3], JobState::Completed)
    };
    let errors = vec![
        entry(1, at(-400), "smtp: 503 service unavailable (try 1)"),
        entry(2, at(-300), "smtp: 503 service unavailable (try 2)"),
        entry(3, at(-200), "smtp: 503 service unavailable (try 3)"),
    ];
    let dead = Job {
        attempts: 3,
        attempted_at: Some(at(-200)),
        finished_at: Some(at(-200)),
        worker: Some("old-worker".to_string()),
        dead_reason: Some(DeadReason::AttemptsExhausted),
        last_error: errors.last().cloned(),
        errors,
        ..base(5, QUEUES[4], JobState::Dead)
    };
    let cancelled = Job {
        finished_at: Some(at(-100)),
        ..base(6, QUEUES[5], JobState::Cancelled)
    };
    vec![ready, scheduled, running, completed, dead, cancelled]
}

async fn get(store: &Arc<dyn Store>, id: i64) -> Job {
    store
        .job_get(JobGetParams { id })
        .await
        .expect("job_get")
        .unwrap_or_else(|| panic!("job {id} is gone after the upgrade"))
}

fn claim(queue: &str) -> JobClaimParams {
    JobClaimParams {
        queue: queue.to_string(),
        worker: "new-worker".to_string(),
        limit: 10,
        lease: Duration::from_secs(30),
        reclaim: true,
        now: Some(t0()),
    }
}

async fn complete(store: &Arc<dyn Store>, job: &Job) {
    let lease = LeaseRef {
        id: job.id,
        lease_token: job.lease_token.expect("a claimed job has a lease token"),
    };
    let done = store
        .job_complete(JobCompleteParams {
            kept: Vec::new(),
            leases: vec![lease],
            now: Some(at(1)),
        })
        .await
        .expect("job_complete");
    assert_eq!(done, vec![Fenced::Applied], "completing job {}", job.id);
    assert_eq!(get(store, job.id).await.status, JobState::Completed);
}

/// Checks a store opened (and migrated) on a database that [`first_schema_jobs`] were
/// written to under the first schema: every job reads back equal (the dead job with
/// the fingerprint the store fills in on open), the ready one is claimed and
/// completed, the scheduled one is not due, the running one's expired lease is
/// reclaimed (a second attempt) and completed, the dead one is redriven with its
/// history kept, and the finished ones stay as they were.
pub async fn check_upgraded(store: &Arc<dyn Store>) {
    let mut expected = first_schema_jobs();
    let dead = &mut expected[4];
    dead.fingerprint = Some(fingerprint::fingerprint(
        &dead
            .last_error
            .as_ref()
            .expect("dead has a last error")
            .message,
    ));
    for job in &expected {
        assert_eq!(
            &get(store, job.id).await,
            job,
            "job {} after the upgrade",
            job.id
        );
    }

    // Ready and due: claimed and completed.
    let claimed = store
        .job_claim(claim(QUEUES[0]))
        .await
        .expect("claim ready");
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(claimed[0].attempts, 1);
    complete(store, &claimed[0]).await;

    // Scheduled an hour ahead: not due.
    let claimed = store
        .job_claim(claim(QUEUES[1]))
        .await
        .expect("claim scheduled");
    assert!(
        claimed.is_empty(),
        "a scheduled job was claimed: {claimed:?}"
    );

    // Running under an expired lease: reclaimed, the stale token fenced out.
    let claimed = store.job_claim(claim(QUEUES[2])).await.expect("reclaim");
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![3]);
    assert_eq!(
        claimed[0].attempts, 2,
        "the reclaim spends the second attempt"
    );
    assert_ne!(
        claimed[0].lease_token,
        Some(LeaseToken(42)),
        "a fresh lease token"
    );
    let stale = store
        .job_complete(JobCompleteParams {
            kept: Vec::new(),
            leases: vec![LeaseRef {
                id: 3,
                lease_token: LeaseToken(42),
            }],
            now: Some(at(1)),
        })
        .await
        .expect("stale complete");
    assert_eq!(stale, vec![Fenced::LeaseLost]);
    complete(store, &claimed[0]).await;

    // Dead: redriven, attempts reset, history kept, then workable.
    let redriven = store
        .job_redrive(JobRedriveParams {
            filter: JobFilter {
                ids: Some(vec![5]),
                ..JobFilter::default()
            },
            limit: None,
            spacing: Duration::ZERO,
            start_at: None,
            actor: Some("upgrade-test".to_string()),
            note: None,
            audit_key: None,
            now: Some(t0()),
        })
        .await
        .expect("redrive");
    assert_eq!(redriven, vec![5]);
    let job = get(store, 5).await;
    assert_eq!(
        (job.status, job.attempts, job.redrives, job.errors.len()),
        (JobState::Ready, 0, 1, 3),
        "the redriven job: {job:?}"
    );
    let claimed = store
        .job_claim(claim(QUEUES[4]))
        .await
        .expect("claim redriven");
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![5]);
    complete(store, &claimed[0]).await;

    // Finished jobs stay as they were.
    assert_eq!(get(store, 4).await, expected[3]);
    assert_eq!(get(store, 6).await, expected[5]);
}
