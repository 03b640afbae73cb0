//! Reads: `job_get` and `job_list` with filters and paging.

use super::prelude::*;

async fn list(store: &Arc<dyn Store>, filter: JobFilter) -> Vec<JobId> {
    let jobs = store
        .job_list(JobListParams {
            filter,
            before_id: None,
            limit: 1_000,
        })
        .await
        .expect("job_list");
    ids(&jobs)
}

/// `job_get` returns the whole history, each entry with its attempt, time, class,
/// message and worker, and `last_error` is the newest.
pub async fn job_get_returns_the_whole_history(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let id = stage.enqueue(job("q", "k").with_max_attempts(5)).await;
    // 1: transient failure.
    let a1 = stage.claim_id(id, t0(), "w1").await;
    stage
        .fail(
            &a1,
            failure(FailureClass::Transient, "503"),
            FailAction::Retry { delay: secs(10) },
            at(1),
        )
        .await;
    // 2: the worker dies; the lease expires and the job is reclaimed at 3.
    stage.claim_id(id, at(11), "w2").await;
    let a3 = stage.claim_id(id, at(50), "w3").await;
    // 3: panic.
    stage
        .fail(
            &a3,
            failure(FailureClass::Panic, "panicked at 'index out of bounds'"),
            FailAction::Retry { delay: secs(10) },
            at(51),
        )
        .await;
    // 4: timeout.
    let a4 = stage.claim_id(id, at(61), "w1").await;
    stage
        .fail(
            &a4,
            failure(FailureClass::Timeout, "attempt timed out after 10s"),
            FailAction::Retry { delay: secs(10) },
            at(71),
        )
        .await;
    // 5: permanent.
    let a5 = stage.claim_id(id, at(81), "w1").await;
    stage
        .fail(
            &a5,
            failure(FailureClass::Permanent, "bad address"),
            FailAction::Dead {
                reason: DeadReason::Permanent,
            },
            at(82),
        )
        .await;
    let job = stage.get(id).await;
    let summary: Vec<(i32, FailureClass, Option<&str>)> = job
        .errors
        .iter()
        .map(|e| (e.attempt, e.class, e.worker.as_deref()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, FailureClass::Transient, Some("w1")),
            (2, FailureClass::LeaseExpired, Some("w2")),
            (3, FailureClass::Panic, Some("w3")),
            (4, FailureClass::Timeout, Some("w1")),
            (5, FailureClass::Permanent, Some("w1")),
        ]
    );
    let times: Vec<Timestamp> = job.errors.iter().map(|e| e.at).collect();
    assert_eq!(times, vec![at(1), at(50), at(51), at(71), at(82)]);
    assert_eq!(job.errors[2].message, "panicked at 'index out of bounds'");
    assert_eq!(job.last_error.as_ref(), job.errors.last());
    assert_eq!(job.attempts, 5);
    assert_eq!(job.dead_reason, Some(DeadReason::Permanent));
}

/// `job_get` of an id that does not exist is `None`, not an error.
pub async fn job_get_of_an_unknown_id_is_none(store: Arc<dyn Store>) {
    let found = store.job_get(JobGetParams { id: 424_242 }).await.unwrap();
    assert!(found.is_none());
}

/// Each filter field narrows the list; results come newest id first.
pub async fn job_list_filters_by_queue_kind_status_group_and_correlation_id(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let a = stage
        .enqueue(
            job("emails", "receipt")
                .with_group("g1")
                .with_correlation_id("c1"),
        )
        .await;
    let b = stage.enqueue(job("emails", "newsletter")).await;
    let c = stage
        .enqueue(job("sms", "receipt").with_correlation_id("c1"))
        .await;
    let d = stage.completed(job("other", "receipt"), t0()).await.id;
    let f = |filter: JobFilter| list(&store, filter);
    assert_eq!(f(JobFilter::default()).await, vec![d, c, b, a]);
    assert_eq!(
        f(JobFilter {
            queue: Some("emails".into()),
            ..Default::default()
        })
        .await,
        vec![b, a]
    );
    assert_eq!(
        f(JobFilter {
            kind: Some("receipt".into()),
            ..Default::default()
        })
        .await,
        vec![d, c, a]
    );
    assert_eq!(
        f(JobFilter {
            statuses: Some(vec![JobState::Completed]),
            ..Default::default()
        })
        .await,
        vec![d]
    );
    assert_eq!(
        f(JobFilter {
            statuses: Some(vec![JobState::Ready, JobState::Completed]),
            kind: Some("receipt".into()),
            ..Default::default()
        })
        .await,
        vec![d, c, a]
    );
    assert_eq!(
        f(JobFilter {
            group_key: Some("g1".into()),
            ..Default::default()
        })
        .await,
        vec![a]
    );
    assert_eq!(
        f(JobFilter {
            correlation_id: Some("c1".into()),
            ..Default::default()
        })
        .await,
        vec![c, a]
    );
    assert_eq!(
        f(JobFilter {
            ids: Some(vec![a, c]),
            ..Default::default()
        })
        .await,
        vec![c, a]
    );
    assert!(f(JobFilter {
        ids: Some(vec![]),
        ..Default::default()
    })
    .await
    .is_empty());
}

/// Dead letters can be found by reason, by text in the last error, and by when they
/// died.
pub async fn job_list_filters_dead_jobs_by_reason_error_text_and_finished_range(
    store: Arc<dyn Store>,
) {
    let stage = Stage::new(store.clone());
    let early = stage
        .dead(
            job("a", "k"),
            DeadReason::Permanent,
            "Template crashed",
            at(100),
        )
        .await
        .id;
    let middle = stage
        .dead(
            job("b", "k"),
            DeadReason::DecodeError,
            "missing field `order`",
            at(200),
        )
        .await
        .id;
    let late = stage
        .dead(
            job("c", "k"),
            DeadReason::Permanent,
            "HTTP 404 from 50%_off",
            at(300),
        )
        .await
        .id;
    let f = |filter: JobFilter| list(&store, filter);
    assert_eq!(
        f(JobFilter {
            dead_reason: Some(DeadReason::Permanent),
            ..Default::default()
        })
        .await,
        vec![late, early]
    );
    assert_eq!(
        f(JobFilter {
            error_contains: Some("crashed".into()),
            ..Default::default()
        })
        .await,
        vec![early]
    );
    // Case-sensitive, and `%` and `_` are plain text.
    assert!(f(JobFilter {
        error_contains: Some("template".into()),
        ..Default::default()
    })
    .await
    .is_empty());
    assert_eq!(
        f(JobFilter {
            error_contains: Some("50%_off".into()),
            ..Default::default()
        })
        .await,
        vec![late]
    );
    assert_eq!(
        f(JobFilter {
            error_contains: Some("%".into()),
            ..Default::default()
        })
        .await,
        vec![late]
    );
    assert_eq!(
        f(JobFilter {
            finished_after: Some(at(200)),
            finished_before: Some(at(300)),
            ..Default::default()
        })
        .await,
        vec![middle]
    );
    assert_eq!(
        f(JobFilter {
            finished_before: Some(at(200)),
            ..Default::default()
        })
        .await,
        vec![early]
    );
}

/// Pages run newest first; `before_id` is the last id of the previous page.
pub async fn job_list_pages_newest_first_by_before_id(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let mut all = Vec::new();
    for _ in 0..7 {
        all.push(stage.enqueue(job("q", "k")).await);
    }
    all.reverse();
    let page = |before_id| JobListParams {
        filter: JobFilter::default(),
        before_id,
        limit: 3,
    };
    let p1 = ids(&store.job_list(page(None)).await.unwrap());
    assert_eq!(p1, all[0..3].to_vec());
    let p2 = ids(&store.job_list(page(Some(p1[2]))).await.unwrap());
    assert_eq!(p2, all[3..6].to_vec());
    let p3 = ids(&store.job_list(page(Some(p2[2]))).await.unwrap());
    assert_eq!(p3, all[6..].to_vec());
    assert!(store.job_list(page(Some(p3[0]))).await.unwrap().is_empty());
}

/// A filter with a malformed queue name is refused, not silently empty.
pub async fn job_list_refuses_a_malformed_queue_name(store: Arc<dyn Store>) {
    let result = store
        .job_list(JobListParams {
            filter: JobFilter {
                queue: Some("emails; drop table jobs".into()),
                ..Default::default()
            },
            before_id: None,
            limit: 10,
        })
        .await;
    assert!(
        matches!(result, Err(StoreError::Input(ref e)) if e.field == "queue"),
        "{result:?}"
    );
}
