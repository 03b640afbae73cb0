//! Dead letters: `job_redrive` and `job_purge`.

use super::prelude::*;

async fn redrive(store: &Arc<dyn Store>, params: JobRedriveParams) -> Vec<JobId> {
    store.job_redrive(params).await.expect("redrive")
}

fn by_ids(ids: Vec<JobId>) -> JobFilter {
    JobFilter {
        ids: Some(ids),
        ..JobFilter::default()
    }
}

/// A redrive moves a dead job to ready now: attempts reset to zero, history kept,
/// `redrives` counted, reason and finished_at cleared.
pub async fn redrive_resets_attempts_and_keeps_the_history(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let dead = stage.dead_after_attempts(job("q", "k"), t0()).await;
    assert_eq!(dead.status, JobState::Dead);
    assert_eq!(dead.errors.len(), 3);
    let redriven = redrive(
        &store,
        JobRedriveParams {
            filter: by_ids(vec![dead.id]),
            now: Some(at(1_000)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(redriven, vec![dead.id]);
    let job = stage.get(dead.id).await;
    assert_eq!(job.status, JobState::Ready);
    assert_eq!(job.attempts, 0);
    assert_eq!(job.max_attempts, 3);
    assert_eq!(job.redrives, 1);
    assert_eq!(job.dead_reason, None);
    assert_eq!(job.finished_at, None);
    assert_eq!(job.run_at, at(1_000));
    assert_eq!(job.errors, dead.errors, "the history is kept");
}

/// A redriven job gets its full attempt budget again, and the history keeps growing.
pub async fn a_redriven_job_gets_a_fresh_attempt_budget(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let dead = stage.dead_after_attempts(job("q", "k"), t0()).await;
    redrive(
        &store,
        JobRedriveParams {
            filter: by_ids(vec![dead.id]),
            now: Some(at(1_000)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    let mut now = at(1_000);
    for attempt in 1..=3 {
        let claimed = stage.claim_id(dead.id, now, WORKER).await;
        assert_eq!(claimed.attempts, attempt);
        let action = if attempt < 3 {
            FailAction::Retry { delay: secs(1) }
        } else {
            FailAction::Dead {
                reason: DeadReason::AttemptsExhausted,
            }
        };
        stage
            .fail(
                &claimed,
                failure(FailureClass::Transient, "still down"),
                action,
                now,
            )
            .await;
        now += chrono::Duration::seconds(1);
    }
    let job = stage.get(dead.id).await;
    assert_eq!(job.status, JobState::Dead);
    assert_eq!(job.redrives, 1);
    assert_eq!(job.errors.len(), 6);
    assert_eq!(job.dead_reason, Some(DeadReason::AttemptsExhausted));
}

/// A redrive takes only dead jobs matching its filter, lowest id first, up to its limit.
pub async fn redrive_honours_filter_and_limit(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let mut receipts = Vec::new();
    for _ in 0..3 {
        let job = stage
            .dead(
                job("emails", "send_receipt"),
                DeadReason::Permanent,
                "503 provider down",
                t0(),
            )
            .await;
        receipts.push(job.id);
    }
    let other_kind = stage
        .dead(
            job("emails", "newsletter"),
            DeadReason::Permanent,
            "503",
            t0(),
        )
        .await;
    let other_queue = stage
        .dead(
            job("sms", "send_receipt"),
            DeadReason::Permanent,
            "503",
            t0(),
        )
        .await;
    let first = redrive(
        &store,
        JobRedriveParams {
            filter: JobFilter {
                queue: Some("emails".into()),
                kind: Some("send_receipt".into()),
                ..JobFilter::default()
            },
            limit: Some(2),
            now: Some(at(100)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(first, receipts[..2].to_vec());
    assert_eq!(stage.get(receipts[2]).await.status, JobState::Dead);
    let rest = redrive(
        &store,
        JobRedriveParams {
            filter: JobFilter {
                queue: Some("emails".into()),
                error_contains: Some("provider down".into()),
                ..JobFilter::default()
            },
            now: Some(at(100)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(rest, vec![receipts[2]]);
    assert_eq!(stage.get(other_kind.id).await.status, JobState::Dead);
    assert_eq!(stage.get(other_queue.id).await.status, JobState::Dead);
}

/// A redrive by reason takes only jobs that died for that reason.
pub async fn redrive_by_dead_reason_takes_only_that_reason(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let permanent = stage
        .dead(job("a", "k"), DeadReason::Permanent, "bad", t0())
        .await;
    let decode = stage
        .dead(job("b", "k"), DeadReason::DecodeError, "bad json", t0())
        .await;
    let redriven = redrive(
        &store,
        JobRedriveParams {
            filter: JobFilter {
                dead_reason: Some(DeadReason::DecodeError),
                ..JobFilter::default()
            },
            now: Some(at(10)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(redriven, vec![decode.id]);
    assert_eq!(stage.get(permanent.id).await.status, JobState::Dead);
}

/// A spaced redrive spreads the jobs' `run_at`: the i-th gets now + i × spacing.
pub async fn redrive_spreads_run_at_by_spacing(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let mut dead = Vec::new();
    for _ in 0..3 {
        dead.push(
            stage
                .dead(job("q", "k"), DeadReason::Permanent, "x", t0())
                .await
                .id,
        );
    }
    let redriven = redrive(
        &store,
        JobRedriveParams {
            filter: JobFilter::default(),
            limit: None,
            spacing: secs(10),
            now: Some(at(1_000)),
        },
    )
    .await;
    assert_eq!(redriven, dead);
    for (i, id) in dead.iter().enumerate() {
        assert_eq!(stage.get(*id).await.run_at, at(1_000 + 10 * i as i64));
    }
    assert_eq!(ids(&stage.claim("q", 10, at(1_000)).await), vec![dead[0]]);
    assert_eq!(ids(&stage.claim("q", 10, at(1_010)).await), vec![dead[1]]);
}

/// A redrive leaves alone jobs that are not dead, even when named by id.
pub async fn redrive_leaves_a_job_that_is_no_longer_dead_alone(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let dead = stage
        .dead(job("a", "k"), DeadReason::Permanent, "x", t0())
        .await;
    let ready = stage.retrying(job("b", "k"), t0(), secs(10)).await;
    let completed = stage.completed(job("c", "k"), t0()).await;
    let redriven = redrive(
        &store,
        JobRedriveParams {
            filter: by_ids(vec![dead.id, ready.id, completed.id]),
            now: Some(at(50)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(redriven, vec![dead.id]);
    assert_eq!(stage.get(ready.id).await, ready);
    assert_eq!(stage.get(completed.id).await, completed);
    let twice = redrive(
        &store,
        JobRedriveParams {
            filter: by_ids(vec![dead.id]),
            now: Some(at(51)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert!(twice.is_empty(), "a redriven job was redriven again");
    assert_eq!(stage.get(dead.id).await.redrives, 1);
}

/// A purge deletes only dead jobs that match its filter.
pub async fn purge_deletes_only_dead_jobs_matching_the_filter(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let dead_here = stage
        .dead(job("q1", "k"), DeadReason::Permanent, "x", t0())
        .await;
    let dead_there = stage
        .dead(job("q2", "k"), DeadReason::Permanent, "x", t0())
        .await;
    let completed = stage.completed(job("q1", "k"), t0()).await;
    let ready = stage.enqueue(job("q1", "k")).await;
    let purged = store
        .job_purge(JobPurgeParams {
            filter: JobFilter {
                queue: Some("q1".into()),
                ..JobFilter::default()
            },
            limit: None,
        })
        .await
        .unwrap();
    assert_eq!(purged, 1);
    assert!(stage.find(dead_here.id).await.is_none());
    assert!(stage.find(dead_there.id).await.is_some());
    assert!(stage.find(completed.id).await.is_some());
    assert!(stage.find(ready).await.is_some());
}

/// A purge deletes at most its limit.
pub async fn purge_honours_limit(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    for _ in 0..3 {
        stage
            .dead(job("q", "k"), DeadReason::Permanent, "x", t0())
            .await;
    }
    let purge = |limit| JobPurgeParams {
        filter: JobFilter::default(),
        limit,
    };
    assert_eq!(store.job_purge(purge(Some(2))).await.unwrap(), 2);
    assert_eq!(stage.all().await.len(), 1);
    assert_eq!(store.job_purge(purge(None)).await.unwrap(), 1);
    assert!(stage.all().await.is_empty());
}
