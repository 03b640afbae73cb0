//! `job_cancel`: by an operator (id) or by the handler (lease).

use super::prelude::*;

async fn cancel(
    store: &Arc<dyn Store>,
    target: CancelTarget,
    message: Option<&str>,
    now: Timestamp,
) -> CancelResult {
    store
        .job_cancel(JobCancelParams {
            target,
            message: message.map(str::to_string),
            now: Some(now),
        })
        .await
        .expect("cancel")
}

/// An operator cancels a ready job: it is cancelled, finished, and never claimed.
pub async fn cancel_by_id_cancels_a_ready_job(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let id = stage.enqueue(job("q", "k")).await;
    assert_eq!(
        cancel(&store, CancelTarget::Id(id), None, at(5)).await,
        CancelResult::Cancelled
    );
    let job = stage.get(id).await;
    assert_eq!(job.status, JobState::Cancelled);
    assert_eq!(job.finished_at, Some(at(5)));
    assert_eq!(job.attempts, 0);
    assert!(stage.claim("q", 10, at(10)).await.is_empty());
}

/// An operator cancels a running job: its handler's lease is lost, so its heartbeat
/// and ack are refused; the reason is recorded.
pub async fn cancel_by_id_cancels_a_running_job_and_its_lease_is_lost(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage.running(job("q", "k"), t0()).await;
    assert_eq!(
        cancel(
            &store,
            CancelTarget::Id(running.id),
            Some("bad batch"),
            at(5)
        )
        .await,
        CancelResult::Cancelled
    );
    let heartbeat = store
        .job_heartbeat(JobHeartbeatParams {
            lease: lease_of(&running),
            lease_for: LEASE,
            now: Some(at(6)),
        })
        .await
        .unwrap();
    assert_eq!(heartbeat, Fenced::LeaseLost);
    let ack = store
        .job_complete(JobCompleteParams {
            kept: Vec::new(),
            leases: vec![lease_of(&running)],
            now: Some(at(7)),
        })
        .await
        .unwrap();
    assert_eq!(ack, vec![Fenced::LeaseLost]);
    let job = stage.get(running.id).await;
    assert_eq!(job.status, JobState::Cancelled);
    assert_eq!(job.finished_at, Some(at(5)));
    assert_eq!(job.lease_token, None);
    let last = job.last_error.expect("the reason is recorded");
    assert!(last.message.contains("bad batch"), "{last:?}");
}

/// The handler cancels its own running attempt through its lease.
pub async fn cancel_by_lease_cancels_the_running_attempt(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage.running(job("q", "k"), t0()).await;
    assert_eq!(
        cancel(
            &store,
            CancelTarget::Lease(lease_of(&running)),
            Some("order was refunded"),
            at(3)
        )
        .await,
        CancelResult::Cancelled
    );
    let job = stage.get(running.id).await;
    assert_eq!(job.status, JobState::Cancelled);
    assert_eq!(job.finished_at, Some(at(3)));
    assert!(job
        .last_error
        .expect("reason recorded")
        .message
        .contains("order was refunded"));
}

/// A cancel through a stale lease reports the lease lost and changes nothing.
pub async fn cancel_by_a_stale_lease_reports_lease_lost(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let first = stage.running(job("q", "k"), t0()).await;
    stage.claim_id(first.id, at(31), "w2").await;
    let before = stage.get(first.id).await;
    assert_eq!(
        cancel(
            &store,
            CancelTarget::Lease(lease_of(&first)),
            Some("x"),
            at(32)
        )
        .await,
        CancelResult::LeaseLost
    );
    assert_eq!(stage.get(first.id).await, before);
}

/// Completed, dead and cancelled jobs are not cancellable; the result names the state
/// and the job is left alone.
pub async fn cancel_of_a_terminal_job_reports_not_cancellable(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let completed = stage.completed(job("a", "k"), t0()).await;
    let dead = stage
        .dead(job("b", "k"), DeadReason::Permanent, "no", t0())
        .await;
    let cancelled = stage.cancelled(job("c", "k"), t0()).await;
    for (job, state) in [
        (completed, JobState::Completed),
        (dead, JobState::Dead),
        (cancelled, JobState::Cancelled),
    ] {
        assert_eq!(
            cancel(&store, CancelTarget::Id(job.id), Some("late"), at(50)).await,
            CancelResult::NotCancellable(state)
        );
        assert_eq!(
            stage.get(job.id).await,
            job,
            "a refused cancel changed the job"
        );
    }
}

/// Cancelling an id that does not exist reports not found.
pub async fn cancel_of_an_unknown_job_reports_not_found(store: Arc<dyn Store>) {
    assert_eq!(
        cancel(&store, CancelTarget::Id(987_654_321), None, t0()).await,
        CancelResult::NotFound
    );
}
