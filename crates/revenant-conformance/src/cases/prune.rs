//! `job_prune`: finished jobs past retention go; everything else stays.

use super::prelude::*;

fn prune(retention: Duration, limit: u32, now: Timestamp) -> JobPruneParams {
    JobPruneParams {
        retention,
        limit,
        now: Some(now),
    }
}

/// A prune deletes completed and cancelled jobs finished before now − retention, and
/// keeps dead, ready and running jobs and recently finished ones.
pub async fn prune_deletes_old_finished_jobs_and_keeps_the_rest(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let old_completed = stage.completed(job("a", "k"), at(10)).await;
    let old_cancelled = stage.cancelled(job("b", "k"), at(10)).await;
    let old_dead = stage
        .dead(job("c", "k"), DeadReason::Permanent, "x", at(10))
        .await;
    let old_ready = stage.enqueue_at(job("d", "k"), at(10)).await;
    let old_running = stage.running(job("e", "k"), at(10)).await;
    let recent = stage.completed(job("f", "k"), at(9_000)).await;
    let pruned = store
        .job_prune(prune(secs(3_600), 1_000, at(10_000)))
        .await
        .unwrap();
    assert_eq!(pruned, 2);
    assert!(stage.find(old_completed.id).await.is_none());
    assert!(stage.find(old_cancelled.id).await.is_none());
    assert!(
        stage.find(old_dead.id).await.is_some(),
        "dead jobs wait for an operator"
    );
    assert!(stage.find(old_ready).await.is_some());
    assert!(stage.find(old_running.id).await.is_some());
    assert!(stage.find(recent.id).await.is_some());
}

/// A prune deletes at most its limit per call.
pub async fn prune_honours_limit(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    for n in 0..3 {
        stage.completed(job(&format!("q{n}"), "k"), t0()).await;
    }
    let params = || prune(secs(60), 2, at(1_000));
    assert_eq!(store.job_prune(params()).await.unwrap(), 2);
    assert_eq!(store.job_prune(params()).await.unwrap(), 1);
    assert_eq!(store.job_prune(params()).await.unwrap(), 0);
    assert!(stage.all().await.is_empty());
}

/// `job_vacuum` refuses a fraction that is not one, and whatever a backend does for a
/// vacuum (a pass on PostgreSQL, nothing on SQLite), every job reads back as it was:
/// ready, running (its lease still good), completed, dead.
pub async fn vacuum_refuses_a_bad_fraction_and_changes_no_job(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let ready = stage.enqueue_at(job("a", "k"), at(10)).await;
    let running = stage.running(job("b", "k"), at(10)).await;
    let completed = stage.completed(job("c", "k"), at(10)).await;
    let dead = stage
        .dead(job("d", "k"), DeadReason::Permanent, "x", at(10))
        .await;
    let before = stage.all().await;
    for bad in [f64::NAN, -0.5, 2.0] {
        let refused = store
            .job_vacuum(JobVacuumParams {
                min_dead_rows: 0,
                min_dead_fraction: bad,
            })
            .await;
        assert!(
            matches!(refused, Err(StoreError::Input(ref e)) if e.field == "min_dead_fraction"),
            "{bad}: {refused:?}"
        );
    }
    let outcome = store
        .job_vacuum(JobVacuumParams {
            min_dead_rows: 0,
            min_dead_fraction: 0.0,
        })
        .await
        .unwrap();
    assert!(
        !matches!(outcome, JobVacuumed::NotNeeded { .. }),
        "no threshold, yet not needed: {outcome:?}"
    );
    assert_eq!(stage.all().await, before);
    for id in [ready, running.id, completed.id, dead.id] {
        assert!(stage.find(id).await.is_some(), "job {id} is gone");
    }
}
