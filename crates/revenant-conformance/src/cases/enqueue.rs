//! `job_enqueue`: ids, stored fields, validation, unique keys.

use super::prelude::*;

fn params(jobs: Vec<NewJob>) -> JobEnqueueParams {
    JobEnqueueParams {
        jobs,
        default_max_attempts: DEFAULT_MAX_ATTEMPTS,
        now: Some(t0()),
    }
}

/// Each input job gets its own id, returned in input order.
pub async fn enqueue_returns_one_id_per_job_in_input_order(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let out = store
        .job_enqueue(params(vec![
            job("emails", "first"),
            job("emails", "second"),
            job("sms", "third"),
        ]))
        .await
        .unwrap();
    assert_eq!(out.len(), 3);
    assert!(out.iter().all(|e| !e.duplicate));
    let distinct: BTreeSet<JobId> = out.iter().map(|e| e.id).collect();
    assert_eq!(distinct.len(), 3, "ids must be distinct: {out:?}");
    for (enqueued, kind) in out.iter().zip(["first", "second", "third"]) {
        assert_eq!(stage.get(enqueued.id).await.kind, kind);
    }
}

/// Every field of the new job is stored as given, with fresh bookkeeping.
pub async fn enqueue_stores_every_field(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let payload = serde_json::json!({"order": 42, "name": "Café Ünï", "items": [1, 2]});
    let id = stage
        .enqueue(
            NewJob::new("emails", "send_receipt", payload.clone())
                .with_priority(7)
                .with_run_at(at(60))
                .with_max_attempts(5)
                .with_group("customer 42")
                .with_unique_key("receipt-42")
                .with_correlation_id("req-abc"),
        )
        .await;
    let job = stage.get(id).await;
    assert_eq!(job.id, id);
    assert_eq!(job.queue, "emails");
    assert_eq!(job.kind, "send_receipt");
    assert_eq!(job.payload, payload);
    assert_eq!(job.status, JobState::Ready);
    assert_eq!(job.priority, 7);
    assert_eq!(job.attempts, 0);
    assert_eq!(job.max_attempts, 5);
    assert_eq!(job.run_at, at(60));
    assert_eq!(job.created_at, t0());
    assert_eq!(job.attempted_at, None);
    assert_eq!(job.finished_at, None);
    assert_eq!(job.lease_token, None);
    assert_eq!(job.lease_expires_at, None);
    assert_eq!(job.worker, None);
    assert_eq!(job.group_key.as_deref(), Some("customer 42"));
    assert_eq!(job.unique_key.as_deref(), Some("receipt-42"));
    assert_eq!(job.correlation_id.as_deref(), Some("req-abc"));
    assert_eq!(job.dead_reason, None);
    assert_eq!(job.last_error, None);
    assert!(job.errors.is_empty());
    assert_eq!(job.redrives, 0);
}

/// A job enqueued with a trace context keeps it (traceparent and tracestate) through
/// claim and listing; one enqueued without reads as none; a batch mixes both.
pub async fn enqueue_keeps_the_trace_context(store: Arc<dyn Store>) {
    use revenant_core::trace::TraceContext;
    let stage = Stage::new(store.clone());
    let ctx = TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
    )
    .unwrap();
    let bare = TraceContext::new(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        None,
    )
    .unwrap();
    let enqueued = store
        .job_enqueue(JobEnqueueParams {
            jobs: vec![
                job("q", "k").with_trace_context(ctx.clone()),
                job("q", "k"),
                job("q", "k").with_trace_context(bare.clone()),
            ],
            default_max_attempts: 3,
            now: Some(at(0)),
        })
        .await
        .unwrap();
    assert_eq!(
        stage.get(enqueued[0].id).await.trace_context,
        Some(ctx.clone())
    );
    assert_eq!(stage.get(enqueued[1].id).await.trace_context, None);
    assert_eq!(stage.get(enqueued[2].id).await.trace_context, Some(bare));
    let claimed = stage.claim("q", 10, at(1)).await;
    assert_eq!(claimed.len(), 3);
    let first = claimed.iter().find(|j| j.id == enqueued[0].id).unwrap();
    assert_eq!(first.trace_context, Some(ctx));
}

/// Without `run_at` a job runs now; with a delay, at now + delay (the store's clock).
pub async fn enqueue_runs_now_or_after_the_delay(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let now_id = stage.enqueue_at(job("q", "k"), at(10)).await;
    let delayed = stage
        .enqueue_at(job("q", "k").with_delay(secs(90)), at(10))
        .await;
    assert_eq!(stage.get(now_id).await.run_at, at(10));
    assert_eq!(stage.get(delayed).await.run_at, at(100));
}

/// A job without its own `max_attempts` takes the call's default.
pub async fn enqueue_without_max_attempts_takes_the_default(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let out = store
        .job_enqueue(JobEnqueueParams {
            jobs: vec![job("q", "k"), job("q", "k").with_max_attempts(2)],
            default_max_attempts: 7,
            now: Some(t0()),
        })
        .await
        .unwrap();
    assert_eq!(stage.get(out[0].id).await.max_attempts, 7);
    assert_eq!(stage.get(out[1].id).await.max_attempts, 2);
}

/// Timestamps survive a round trip at millisecond precision.
pub async fn timestamps_keep_millisecond_precision(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let id = stage
        .enqueue_at(job("q", "k").with_run_at(at_ms(1_234)), at_ms(567))
        .await;
    let job = stage.get(id).await;
    assert_eq!(job.run_at, at_ms(1_234));
    assert_eq!(job.created_at, at_ms(567));
}

/// Each kind of bad input is refused with an error naming the field, and nothing is
/// written.
pub async fn enqueue_refuses_bad_input_and_writes_nothing(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let huge = serde_json::json!("x".repeat(NewJob::MAX_PAYLOAD_BYTES + 1));
    let cases: Vec<(NewJob, &str)> = vec![
        (job("", "k"), "queue"),
        (job("with space", "k"), "queue"),
        (job(&"q".repeat(65), "k"), "queue"),
        (job("q", "semi;colon"), "kind"),
        (job("q", "k\n"), "kind"),
        (NewJob::new("q", "k", huge), "payload"),
        (job("q", "k").with_priority(5000), "priority"),
        (job("q", "k").with_max_attempts(0), "max_attempts"),
        (job("q", "k").with_max_attempts(-3), "max_attempts"),
        (job("q", "k").with_delay(secs(400 * 24 * 3600)), "delay"),
        (
            job("q", "k").with_delay(secs(1)).with_run_at(at(5)),
            "delay",
        ),
        (job("q", "k").with_group(""), "group_key"),
        (job("q", "k").with_unique_key("a\u{7}b"), "unique_key"),
        (
            job("q", "k").with_correlation_id("c".repeat(300)),
            "correlation_id",
        ),
    ];
    for (bad, field) in cases {
        match store.job_enqueue(params(vec![bad.clone()])).await {
            Err(StoreError::Input(err)) => assert_eq!(err.field, field, "for {bad:?}"),
            other => panic!("expected an input error on {field} for {bad:?}, got {other:?}"),
        }
    }
    let bad_default = store
        .job_enqueue(JobEnqueueParams {
            jobs: vec![job("q", "k")],
            default_max_attempts: 0,
            now: Some(t0()),
        })
        .await;
    assert!(
        matches!(bad_default, Err(StoreError::Input(_))),
        "default_max_attempts 0 must be refused: {bad_default:?}"
    );
    assert!(stage.all().await.is_empty(), "bad input wrote a job");
}

/// One bad job in a batch fails the whole call: no job, no queue is written.
pub async fn enqueue_batch_with_one_bad_job_writes_nothing(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let result = store
        .job_enqueue(params(vec![
            job("fresh", "good"),
            job("fresh", "good"),
            job("fresh", "bad kind"),
        ]))
        .await;
    match result {
        Err(StoreError::Input(err)) => assert_eq!(err.field, "kind"),
        other => panic!("expected an input error, got {other:?}"),
    }
    assert!(stage.all().await.is_empty(), "a bad batch wrote jobs");
    let stats = store
        .queue_stats(QueueStatsParams {
            queue: None,
            worker_alive_within: secs(60),
            interval: secs(60),
            now: Some(t0()),
        })
        .await
        .unwrap();
    assert!(stats.is_empty(), "a bad batch created a queue: {stats:?}");
}

/// A second enqueue with a held unique key returns the first job's id and inserts
/// nothing.
pub async fn unique_key_returns_the_first_jobs_id(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let first = store
        .job_enqueue(params(
            vec![job("q", "original").with_unique_key("order-1")],
        ))
        .await
        .unwrap();
    let second = store
        .job_enqueue(params(vec![
            job("q", "other").with_unique_key("order-1"),
            job("q", "unrelated"),
        ]))
        .await
        .unwrap();
    assert!(!first[0].duplicate);
    assert_eq!(second[0].id, first[0].id);
    assert!(second[0].duplicate);
    assert!(!second[1].duplicate);
    assert_ne!(second[1].id, first[0].id);
    assert_eq!(stage.get(first[0].id).await.kind, "original");
    assert_eq!(stage.all().await.len(), 2);
}

/// A key repeated inside one batch yields one job; the repeat is its duplicate.
pub async fn unique_key_repeated_in_one_batch_yields_one_job(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let out = store
        .job_enqueue(params(vec![
            job("q", "k").with_unique_key("same"),
            job("q", "k").with_unique_key("same"),
        ]))
        .await
        .unwrap();
    assert!(!out[0].duplicate);
    assert!(out[1].duplicate);
    assert_eq!(out[0].id, out[1].id);
    assert_eq!(stage.all().await.len(), 1);
}

/// Twenty concurrent enqueues with one key create exactly one job; every caller gets
/// its id.
pub async fn unique_key_under_concurrent_enqueues_yields_one_job(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .job_enqueue(params(vec![job("q", "k").with_unique_key("race")]))
                    .await
                    .expect("enqueue")[0]
            })
        })
        .collect();
    let results: Vec<Enqueued> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    let ids: BTreeSet<JobId> = results.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), 1, "callers got different ids: {results:?}");
    assert_eq!(results.iter().filter(|e| !e.duplicate).count(), 1);
    assert_eq!(stage.all().await.len(), 1);
}

/// The key is held for the job's whole life (dead included) and free again once the
/// job is purged.
pub async fn unique_key_is_held_until_the_job_is_purged(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let dead = stage
        .dead(
            job("q", "k").with_unique_key("once"),
            DeadReason::Permanent,
            "no",
            t0(),
        )
        .await;
    let again = store
        .job_enqueue(params(vec![job("q", "k").with_unique_key("once")]))
        .await
        .unwrap();
    assert_eq!(
        again[0],
        Enqueued {
            id: dead.id,
            duplicate: true
        }
    );
    let purged = store
        .job_purge(JobPurgeParams {
            filter: JobFilter {
                ids: Some(vec![dead.id]),
                ..JobFilter::default()
            },
            limit: None,
        })
        .await
        .unwrap();
    assert_eq!(purged, 1);
    let fresh = store
        .job_enqueue(params(vec![job("q", "k").with_unique_key("once")]))
        .await
        .unwrap();
    assert!(!fresh[0].duplicate);
    assert_ne!(fresh[0].id, dead.id);
}

/// A paused queue still accepts jobs; they wait, ready, for the resume.
pub async fn enqueue_into_a_paused_queue_is_accepted(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    store
        .queue_pause(QueuePauseParams {
            queue: "q".into(),
            now: Some(t0()),
        })
        .await
        .unwrap();
    let id = stage.enqueue(job("q", "k")).await;
    assert_eq!(stage.get(id).await.status, JobState::Ready);
    assert!(stage.claim("q", 10, at(1)).await.is_empty());
}

/// A `run_at` outside the years 1970 to 9999 is refused with field `run_at` and writes
/// nothing; the edges of the range are accepted and read back as written.
pub async fn enqueue_refuses_a_run_at_out_of_range(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let time = |text: &str| {
        chrono::DateTime::parse_from_rfc3339(text)
            .expect("a valid time")
            .to_utc()
    };
    for bad in [
        chrono::TimeZone::with_ymd_and_hms(&chrono::Utc, 10_000, 1, 1, 0, 0, 0).unwrap(),
        time("1969-12-31T23:59:59.999Z"),
        time("0001-01-01T00:00:00Z"),
    ] {
        match store
            .job_enqueue(params(vec![job("q", "k").with_run_at(bad)]))
            .await
        {
            Err(StoreError::Input(err)) => assert_eq!(err.field, "run_at", "for {bad}"),
            other => panic!("expected an input error on run_at for {bad}, got {other:?}"),
        }
    }
    assert!(stage.all().await.is_empty(), "nothing was written");
    for edge in [
        time("1970-01-01T00:00:00Z"),
        time("9999-12-31T23:59:59.999Z"),
    ] {
        let id = stage.enqueue(job("q", "k").with_run_at(edge)).await;
        assert_eq!(stage.get(id).await.run_at, edge);
    }
}
