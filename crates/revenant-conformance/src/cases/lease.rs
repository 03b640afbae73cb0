//! Fencing: heartbeat and complete, and what a stale worker's calls do (nothing).

use super::prelude::*;

async fn heartbeat(store: &Arc<dyn Store>, lease: LeaseRef, now: Timestamp) -> Fenced {
    store
        .job_heartbeat(JobHeartbeatParams {
            lease,
            lease_for: LEASE,
            now: Some(now),
        })
        .await
        .expect("heartbeat")
}

async fn complete(store: &Arc<dyn Store>, leases: Vec<LeaseRef>, now: Timestamp) -> Vec<Fenced> {
    store
        .job_complete(JobCompleteParams {
            kept: Vec::new(),
            leases,
            now: Some(now),
        })
        .await
        .expect("complete")
}

/// A heartbeat moves the lease to now + lease; the job is not reclaimed before that.
pub async fn heartbeat_extends_the_lease(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage.running(job("q", "k"), t0()).await;
    assert_eq!(
        heartbeat(&store, lease_of(&running), at(20)).await,
        Fenced::Applied
    );
    let job = stage.get(running.id).await;
    assert_eq!(job.lease_expires_at, Some(at(50)));
    assert_eq!(job.lease_token, running.lease_token);
    assert_eq!(job.attempts, 1);
    assert!(stage.claim("q", 10, at(40)).await.is_empty());
    let reclaimed = stage.claim("q", 10, at(50)).await;
    assert_eq!(ids(&reclaimed), vec![running.id]);
    assert_eq!(reclaimed[0].attempts, 2);
}

/// A heartbeat from a worker whose job was reclaimed reports the lease lost and leaves
/// the new lease alone.
pub async fn stale_heartbeat_reports_lease_lost(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let first = stage.running(job("q", "k"), t0()).await;
    let second = stage.claim_id(first.id, at(31), "w2").await;
    assert_eq!(
        heartbeat(&store, lease_of(&first), at(32)).await,
        Fenced::LeaseLost
    );
    let job = stage.get(first.id).await;
    assert_eq!(job.lease_token, second.lease_token);
    assert_eq!(job.lease_expires_at, Some(at(61)));
    assert_eq!(job.worker.as_deref(), Some("w2"));
}

/// A heartbeat for a finished job, or with a token never issued, reports the lease lost.
pub async fn heartbeat_of_a_finished_or_unknown_lease_reports_lease_lost(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let done = stage.running(job("q", "k"), t0()).await;
    stage.complete(&done, at(1)).await;
    assert_eq!(
        heartbeat(&store, lease_of(&done), at(2)).await,
        Fenced::LeaseLost
    );
    assert_eq!(stage.get(done.id).await.status, JobState::Completed);
    let running = stage.running(job("q", "k"), at(3)).await;
    let forged = LeaseRef {
        id: running.id,
        lease_token: revenant_core::LeaseToken(running.lease_token.unwrap().0 ^ 1),
    };
    assert_eq!(heartbeat(&store, forged, at(4)).await, Fenced::LeaseLost);
    assert_eq!(stage.get(running.id).await.lease_expires_at, Some(at(33)));
}

/// Complete moves a running job to completed and drops its lease.
pub async fn complete_marks_the_job_completed(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage.running(job("q", "k"), t0()).await;
    assert_eq!(
        complete(&store, vec![lease_of(&running)], at(5)).await,
        vec![Fenced::Applied]
    );
    let job = stage.get(running.id).await;
    assert_eq!(job.status, JobState::Completed);
    assert_eq!(job.finished_at, Some(at(5)));
    assert_eq!(job.attempts, 1);
    assert_eq!(job.lease_token, None);
    assert_eq!(job.lease_expires_at, None);
    assert_eq!(job.dead_reason, None);
    assert!(stage.claim("q", 10, at(100)).await.is_empty());
}

/// A late ack from the worker whose lease expired and was reclaimed is rejected and
/// changes nothing; the new holder's ack goes through.
pub async fn late_ack_after_reclaim_is_rejected(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let first = stage.running(job("q", "k"), t0()).await;
    let second = stage.claim_id(first.id, at(31), "w2").await;
    let before = stage.get(first.id).await;
    assert_eq!(
        complete(&store, vec![lease_of(&first)], at(32)).await,
        vec![Fenced::LeaseLost]
    );
    let after = stage.get(first.id).await;
    assert_eq!(after, before, "a rejected ack changed the job");
    assert_eq!(after.status, JobState::Running);
    assert_eq!(after.attempts, 2);
    assert_eq!(after.finished_at, None);
    assert_eq!(
        complete(&store, vec![lease_of(&second)], at(33)).await,
        vec![Fenced::Applied]
    );
    assert_eq!(stage.get(first.id).await.status, JobState::Completed);
}

/// A late failure report after a reclaim is rejected and changes nothing.
pub async fn late_fail_after_reclaim_is_rejected(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let first = stage.running(job("q", "k"), t0()).await;
    stage.claim_id(first.id, at(31), "w2").await;
    let before = stage.get(first.id).await;
    for action in [
        FailAction::Retry { delay: secs(5) },
        FailAction::Dead {
            reason: DeadReason::Permanent,
        },
    ] {
        let result = store
            .job_fail(JobFailParams {
                kept: Vec::new(),
                failures: vec![JobFailure {
                    lease: lease_of(&first),
                    failure: failure(FailureClass::Transient, "late"),
                    action,
                    worker: Some(WORKER.into()),
                }],
                now: Some(at(32)),
            })
            .await
            .unwrap();
        assert_eq!(result, vec![Fenced::LeaseLost]);
    }
    assert_eq!(
        stage.get(first.id).await,
        before,
        "a rejected failure changed the job"
    );
}

/// A batch of acks is fenced per job: one stale lease does not block the others.
pub async fn complete_reports_each_lease_on_its_own(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let a = stage.running(job("a", "k"), t0()).await;
    let b = stage.running(job("b", "k"), t0()).await;
    let c = stage.running(job("c", "k"), t0()).await;
    let stale_b = LeaseRef {
        id: b.id,
        lease_token: revenant_core::LeaseToken(b.lease_token.unwrap().0 ^ 1),
    };
    let result = complete(&store, vec![lease_of(&a), stale_b, lease_of(&c)], at(1)).await;
    assert_eq!(
        result,
        vec![Fenced::Applied, Fenced::LeaseLost, Fenced::Applied]
    );
    assert_eq!(stage.get(a.id).await.status, JobState::Completed);
    assert_eq!(stage.get(b.id).await.status, JobState::Running);
    assert_eq!(stage.get(c.id).await.status, JobState::Completed);
}

/// A second ack of the same attempt reports the lease lost and keeps the first result.
pub async fn a_second_ack_reports_lease_lost(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage.running(job("q", "k"), t0()).await;
    stage.complete(&running, at(1)).await;
    assert_eq!(
        complete(&store, vec![lease_of(&running)], at(2)).await,
        vec![Fenced::LeaseLost]
    );
    assert_eq!(stage.get(running.id).await.finished_at, Some(at(1)));
}

/// The same lease twice in one batch (complete, then fail) applies once: the first
/// result wins, the second reports the lease lost, as it would one call later. Batched
/// backends check every lease against the rows as the batch changes them.
pub async fn a_lease_repeated_in_one_batch_applies_once(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let a = stage.running(job("q", "k"), t0()).await;
    let b = stage.running(job("q", "k"), t0()).await;
    assert_eq!(
        complete(
            &store,
            vec![lease_of(&a), lease_of(&a), lease_of(&b)],
            at(1)
        )
        .await,
        vec![Fenced::Applied, Fenced::LeaseLost, Fenced::Applied]
    );
    let c = stage.running(job("q", "k"), t0()).await;
    let retry = |lease| JobFailure {
        lease,
        failure: failure(FailureClass::Transient, "503"),
        action: FailAction::Retry { delay: secs(5) },
        worker: Some(WORKER.into()),
    };
    let result = store
        .job_fail(JobFailParams {
            kept: Vec::new(),
            failures: vec![retry(lease_of(&c)), retry(lease_of(&c))],
            now: Some(at(2)),
        })
        .await
        .expect("fail");
    assert_eq!(result, vec![Fenced::Applied, Fenced::LeaseLost]);
    let after = stage.get(c.id).await;
    assert_eq!(after.status, JobState::Ready);
    assert_eq!(after.errors.len(), 1, "one history entry, not two");
    assert_eq!(after.run_at, at(7));
}

/// The fence is the lease token, not the clock: a lease that expired but was not yet
/// reclaimed still accepts its holder's heartbeat and ack (nobody else has the job).
pub async fn an_expired_lease_not_yet_reclaimed_still_accepts_its_holder(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let now = at(1_000);
    let slow = stage.running_expired(job("a", "k"), now, secs(60)).await;
    assert_eq!(slow.lease_expires_at, Some(at(940)));
    assert_eq!(
        heartbeat(&store, lease_of(&slow), now).await,
        Fenced::Applied
    );
    assert_eq!(stage.get(slow.id).await.lease_expires_at, Some(at(1_030)));
    let late = stage.running_expired(job("b", "k"), now, secs(60)).await;
    assert_eq!(
        complete(&store, vec![lease_of(&late)], now).await,
        vec![Fenced::Applied]
    );
    assert_eq!(stage.get(late.id).await.status, JobState::Completed);
}
