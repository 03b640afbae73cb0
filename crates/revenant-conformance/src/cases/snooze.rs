//! `job_snooze` and `job_release`: back to ready with the attempt given back.

use super::prelude::*;

/// A snooze sends the job back to ready at now + delay and gives the attempt back,
/// without recording a failure.
pub async fn snooze_gives_the_attempt_back(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage.running(job("q", "k"), t0()).await;
    let result = store
        .job_snooze(JobSnoozeParams {
            lease: lease_of(&running),
            delay: secs(60),
            now: Some(at(5)),
        })
        .await
        .unwrap();
    assert_eq!(result, Fenced::Applied);
    let job = stage.get(running.id).await;
    assert_eq!(job.status, JobState::Ready);
    assert_eq!(job.attempts, 0);
    assert_eq!(job.run_at, at(65));
    assert_eq!(job.lease_token, None);
    assert_eq!(job.lease_expires_at, None);
    assert!(job.errors.is_empty());
    assert!(stage.claim("q", 10, at(64)).await.is_empty());
    let again = stage.claim("q", 10, at(65)).await;
    assert_eq!(again[0].attempts, 1);
}

/// Snoozing on the last attempt does not use up the budget: the job runs again.
pub async fn snooze_on_the_last_attempt_keeps_the_job_alive(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let running = stage
        .running(job("q", "k").with_max_attempts(1), t0())
        .await;
    store
        .job_snooze(JobSnoozeParams {
            lease: lease_of(&running),
            delay: secs(10),
            now: Some(at(1)),
        })
        .await
        .unwrap();
    let again = stage.claim("q", 10, at(11)).await;
    assert_eq!(ids(&again), vec![running.id]);
    assert_eq!(again[0].attempts, 1);
    assert_eq!(again[0].status, JobState::Running);
}

/// Release (graceful shutdown) puts jobs back to ready at once with their attempts
/// given back.
pub async fn release_gives_the_attempt_back_and_the_job_runs_again_at_once(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    stage.enqueue(job("q", "k")).await;
    stage.enqueue(job("q", "k")).await;
    let claimed = stage.claim("q", 10, t0()).await;
    assert_eq!(claimed.len(), 2);
    let result = store
        .job_release(JobReleaseParams {
            leases: claimed.iter().map(lease_of).collect(),
            now: Some(at(5)),
        })
        .await
        .unwrap();
    assert_eq!(result, vec![Fenced::Applied, Fenced::Applied]);
    for claimed in &claimed {
        let job = stage.get(claimed.id).await;
        assert_eq!(job.status, JobState::Ready);
        assert_eq!(job.attempts, 0);
        assert_eq!(job.run_at, at(5));
        assert_eq!(job.lease_token, None);
        assert!(job.errors.is_empty());
    }
    let again = stage.claim("q", 10, at(5)).await;
    assert_eq!(id_set(&again), id_set(&claimed));
    assert!(again.iter().all(|job| job.attempts == 1));
}

/// Snooze and release with a stale lease report it lost and change nothing.
pub async fn stale_snooze_and_release_report_lease_lost(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let first = stage.running(job("q", "k"), t0()).await;
    stage.claim_id(first.id, at(31), "w2").await;
    let before = stage.get(first.id).await;
    let snooze = store
        .job_snooze(JobSnoozeParams {
            lease: lease_of(&first),
            delay: secs(10),
            now: Some(at(32)),
        })
        .await
        .unwrap();
    assert_eq!(snooze, Fenced::LeaseLost);
    let release = store
        .job_release(JobReleaseParams {
            leases: vec![lease_of(&first)],
            now: Some(at(32)),
        })
        .await
        .unwrap();
    assert_eq!(release, vec![Fenced::LeaseLost]);
    let after = stage.get(first.id).await;
    assert_eq!(after, before);
    assert_eq!(after.attempts, 2);
}
