//! `job_claim` and `job_sweep`: attempts at claim, leases, order, reclaim, concurrency.

use super::prelude::*;

/// A claim counts the attempt, leases the job to the worker and says until when.
pub async fn claim_counts_the_attempt_at_claim(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let id = stage.enqueue(job("q", "k")).await;
    let claimed = stage.claim_as("q", "w1", 5, at(5)).await;
    assert_eq!(ids(&claimed), vec![id]);
    let job = &claimed[0];
    assert_eq!(job.status, JobState::Running);
    assert_eq!(job.attempts, 1);
    assert!(job.lease_token.is_some());
    assert_eq!(job.lease_expires_at, Some(at(35)));
    assert_eq!(job.attempted_at, Some(at(5)));
    assert_eq!(job.worker.as_deref(), Some("w1"));
    assert_eq!(
        &stage.get(id).await,
        job,
        "the claim returns the stored row"
    );
}

/// A claim of several jobs returns each one as stored, every field: a payload of
/// awkward text and numbers, the optional keys, a trace context and a history. (A
/// store may hand a claimed batch over in another form than a row per job, as
/// SQLite's does; this holds it to the row.)
pub async fn claim_returns_every_field_of_every_job_as_stored(store: Arc<dyn Store>) {
    use revenant_core::trace::TraceContext;
    let stage = Stage::new(store);
    let payload = serde_json::json!({
        "name": "Zoë \"Ünï\" O'Brien \\ 客户 🧾",
        "control": "tab\tnew line\nend",
        "big": 9_007_199_254_740_993_i64,
        "negative": -42,
        "ratio": 0.1,
        "nested": [{"a": null}, [], {}],
        "empty": "",
    });
    let retried = stage
        .retrying(job("q", "k").with_priority(5), t0(), secs(1))
        .await;
    let full = stage
        .enqueue(
            NewJob::new("q", "send_receipt", payload.clone())
                .with_priority(5)
                .with_max_attempts(7)
                .with_group("customer \"42\"")
                .with_unique_key("receipt/42?x=1&y=2")
                .with_correlation_id("req-é")
                .with_trace_context(
                    TraceContext::new(
                        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                        Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
                    )
                    .unwrap(),
                ),
        )
        .await;
    let bare = stage.enqueue(job("q", "k")).await;

    let claimed = stage.claim_as("q", "wörker 1", 10, at(5)).await;
    // Priority 5 first, by run_at: `full` is due at t0, the retry at 1 s.
    assert_eq!(ids(&claimed), vec![full, retried.id, bare]);
    for job in &claimed {
        assert_eq!(
            &stage.get(job.id).await,
            job,
            "the claim returns the stored row"
        );
    }
    assert_eq!(claimed[0].payload, payload);
    assert_eq!(claimed[1].errors.len(), 1, "{:?}", claimed[1].errors);
    assert_eq!(claimed[1].attempts, 2);
}

/// Every attempt gets a new lease token.
pub async fn claim_gives_a_fresh_lease_token_each_attempt(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let id = stage.enqueue(job("q", "k")).await;
    let first = stage.claim_id(id, t0(), WORKER).await;
    stage
        .fail(
            &first,
            failure(FailureClass::Transient, "503"),
            FailAction::Retry { delay: secs(1) },
            t0(),
        )
        .await;
    let second = stage.claim_id(id, at(1), WORKER).await;
    assert_eq!(second.attempts, 2);
    assert_ne!(first.lease_token, second.lease_token);
}

/// A job whose lease is still live is not claimed again.
pub async fn claim_skips_jobs_with_a_live_lease(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let running = stage.running(job("q", "k"), t0()).await;
    assert!(stage.claim("q", 10, at(29)).await.is_empty());
    let job = stage.get(running.id).await;
    assert_eq!(job.attempts, 1);
    assert_eq!(job.lease_token, running.lease_token);
    assert_eq!(job.lease_expires_at, Some(at(30)));
}

/// An expired lease is reclaimed: a new attempt, token and worker, and a
/// `lease_expired` entry for the lost attempt naming the worker that held it.
pub async fn claim_reclaims_an_expired_lease_and_records_lease_expired(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let id = stage.enqueue(job("q", "k")).await;
    let first = stage.claim_id(id, t0(), "w1").await;
    let reclaimed = stage.claim_as("q", "w2", 10, at(31)).await;
    assert_eq!(ids(&reclaimed), vec![id]);
    let job = stage.get(id).await;
    assert_eq!(job.status, JobState::Running);
    assert_eq!(job.attempts, 2);
    assert_ne!(job.lease_token, first.lease_token);
    assert_eq!(job.worker.as_deref(), Some("w2"));
    assert_eq!(job.lease_expires_at, Some(at(61)));
    assert_eq!(job.errors.len(), 1, "{:?}", job.errors);
    let entry = &job.errors[0];
    assert_eq!(entry.attempt, 1);
    assert_eq!(entry.class, FailureClass::LeaseExpired);
    assert_eq!(entry.at, at(31));
    assert_eq!(entry.worker.as_deref(), Some("w1"));
    assert!(
        entry.message.contains("w1"),
        "message names the worker: {entry:?}"
    );
    assert_eq!(job.last_error.as_ref(), Some(entry));
}

/// A claim takes at most one expired lease, and none with `reclaim: false` (the
/// runtime's choice while it runs a job it reclaimed), while ready jobs still come.
pub async fn claim_takes_one_expired_lease_at_most_and_none_without_reclaim(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let mut held = Vec::new();
    for _ in 0..3 {
        let id = stage.enqueue(job("q", "k")).await;
        stage.claim_id(id, t0(), "w1").await;
        held.push(id);
    }
    let ready = stage.enqueue(job("q", "k")).await;
    let without = stage
        .store()
        .job_claim(JobClaimParams {
            reclaim: false,
            ..claim_params("q", "w2", 10, at(31))
        })
        .await
        .unwrap();
    assert_eq!(ids(&without), vec![ready], "ready jobs only");
    for id in &held {
        assert_eq!(stage.get(*id).await.attempts, 1, "not reclaimed");
    }
    let first = stage.claim_as("q", "w2", 10, at(31)).await;
    assert_eq!(ids(&first), vec![held[0]], "one expired lease per claim");
    let second = stage.claim_as("q", "w2", 10, at(31)).await;
    assert_eq!(ids(&second), vec![held[1]]);
}

/// A claim takes at most `limit` jobs.
pub async fn claim_takes_at_most_limit_jobs(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    for _ in 0..5 {
        stage.enqueue(job("q", "k")).await;
    }
    assert_eq!(stage.claim("q", 2, at(1)).await.len(), 2);
    assert_eq!(stage.claim("q", 10, at(1)).await.len(), 3);
    assert!(stage.claim("q", 10, at(1)).await.is_empty());
}

/// A claim with limit zero claims nothing and spends nothing.
pub async fn claim_with_limit_zero_claims_nothing(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let id = stage.enqueue(job("q", "k")).await;
    assert!(stage.claim("q", 0, at(1)).await.is_empty());
    let job = stage.get(id).await;
    assert_eq!(job.status, JobState::Ready);
    assert_eq!(job.attempts, 0);
}

/// Higher priority first, then earlier `run_at`, then lower id.
pub async fn claim_orders_by_priority_then_run_at_then_id(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let a = stage.enqueue(job("q", "a").with_run_at(t0())).await;
    let b = stage
        .enqueue(job("q", "b").with_priority(5).with_run_at(at(-10)))
        .await;
    let c = stage
        .enqueue(job("q", "c").with_priority(5).with_run_at(at(-20)))
        .await;
    let d = stage.enqueue(job("q", "d").with_run_at(at(-30))).await;
    let e = stage.enqueue(job("q", "e").with_run_at(t0())).await;
    let low = stage
        .enqueue(job("q", "low").with_priority(-5).with_run_at(at(-100)))
        .await;
    let mut order = Vec::new();
    for _ in 0..6 {
        order.extend(ids(&stage.claim("q", 1, at(1)).await));
    }
    assert_eq!(order, vec![c, b, d, a, e, low]);
}

/// Expired leases and ready jobs compete in one order: priority, then `run_at`, then id.
pub async fn claim_orders_reclaims_and_ready_jobs_together(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let expired = stage.running(job("q", "k"), t0()).await.id;
    let urgent = stage
        .enqueue(job("q", "k").with_priority(5).with_run_at(at(10)))
        .await;
    let later = stage.enqueue(job("q", "k").with_run_at(at(20))).await;
    let mut order = Vec::new();
    for _ in 0..3 {
        order.extend(ids(&stage.claim("q", 1, at(100)).await));
    }
    assert_eq!(order, vec![urgent, expired, later]);
    assert_eq!(stage.get(expired).await.attempts, 2);
}

/// A job is not claimed before its `run_at`, and is claimed at it.
pub async fn claim_skips_jobs_not_yet_due(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let id = stage.enqueue(job("q", "k").with_run_at(at(60))).await;
    assert!(stage.claim("q", 10, at(59)).await.is_empty());
    assert_eq!(ids(&stage.claim("q", 10, at(60)).await), vec![id]);
}

/// A claim asking for more jobs than are due takes every due job, of every priority, in
/// claim order, past jobs scheduled later at the same and at higher priorities (and
/// past another queue's jobs). PostgreSQL walks the claim index one priority at a time
/// for this, so a priority that holds only scheduled jobs must not end the walk.
pub async fn claim_takes_due_jobs_of_every_priority_past_scheduled_ones(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let _top_later = stage
        .enqueue(job("q", "k").with_priority(9).with_run_at(at(60)))
        .await;
    let _other_queue = stage
        .enqueue(job("other", "k").with_priority(7).with_run_at(at(-5)))
        .await;
    let five = stage
        .enqueue(job("q", "k").with_priority(5).with_run_at(at(-1)))
        .await;
    let _five_later = stage
        .enqueue(job("q", "k").with_priority(5).with_run_at(at(30)))
        .await;
    let _zero_later = stage.enqueue(job("q", "k").with_run_at(at(10))).await;
    let zero_b = stage.enqueue(job("q", "k").with_run_at(at(-2))).await;
    let zero_a = stage.enqueue(job("q", "k").with_run_at(at(-3))).await;
    let low = stage
        .enqueue(job("q", "k").with_priority(-5).with_run_at(at(-50)))
        .await;
    assert_eq!(
        ids(&stage.claim("q", 2, at(1)).await),
        vec![five, zero_a],
        "a claim of 2 takes the first two due jobs in claim order"
    );
    assert_eq!(
        ids(&stage.claim("q", 10, at(1)).await),
        vec![zero_b, low],
        "a claim of 10 takes every due job left, and no scheduled one"
    );
    assert!(stage.claim("q", 10, at(2)).await.is_empty());
}

/// A claim only takes jobs of its own queue.
pub async fn claim_takes_only_jobs_of_its_queue(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let mine = stage.enqueue(job("mine", "k")).await;
    let theirs = stage.enqueue(job("theirs", "k")).await;
    assert_eq!(ids(&stage.claim("mine", 10, at(1)).await), vec![mine]);
    assert_eq!(stage.get(theirs).await.status, JobState::Ready);
}

/// Claims are refused with a clear error for a bad queue name or a zero lease.
pub async fn claim_refuses_bad_input(store: Arc<dyn Store>) {
    let bad_queue = store
        .job_claim(claim_params("bad queue", "w", 1, t0()))
        .await;
    assert!(
        matches!(bad_queue, Err(StoreError::Input(ref e)) if e.field == "queue"),
        "{bad_queue:?}"
    );
    let mut zero_lease = claim_params("q", "w", 1, t0());
    zero_lease.lease = Duration::ZERO;
    let zero = store.job_claim(zero_lease).await;
    assert!(matches!(zero, Err(StoreError::Input(_))), "{zero:?}");
}

/// Eight claimers racing over 200 jobs never get the same job, and every job ends
/// leased to the claimer that got it.
pub async fn concurrent_claimers_never_get_the_same_job(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let jobs: Vec<NewJob> = (0..200).map(|_| job("q", "k")).collect();
    store
        .job_enqueue(JobEnqueueParams {
            jobs,
            default_max_attempts: 3,
            now: Some(t0()),
        })
        .await
        .unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let mut params = claim_params("q", &format!("w{n}"), 3, at(1));
                    params.lease = secs(600);
                    let claimed = store.job_claim(params).await.expect("claim");
                    if claimed.is_empty() {
                        return got;
                    }
                    got.extend(claimed);
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in futures::future::join_all(tasks).await {
        all.extend(task.expect("claimer"));
    }
    assert_eq!(all.len(), 200, "every job claimed exactly once");
    assert_eq!(id_set(&all).len(), 200, "a job was claimed twice");
    for claimed in &all {
        let job = stage.get(claimed.id).await;
        assert_eq!(job.attempts, 1);
        assert_eq!(job.lease_token, claimed.lease_token);
        assert_eq!(job.worker, claimed.worker);
    }
}

/// Six claimers racing over 60 expired leases reclaim each job once: one live lease per
/// job, and every old token is refused.
pub async fn concurrent_reclaimers_take_each_expired_job_once(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let jobs: Vec<NewJob> = (0..60).map(|_| job("q", "k")).collect();
    store
        .job_enqueue(JobEnqueueParams {
            jobs,
            default_max_attempts: 3,
            now: Some(t0()),
        })
        .await
        .unwrap();
    let old = stage.claim_as("q", "w-old", 100, t0()).await;
    assert_eq!(old.len(), 60);
    let tasks: Vec<_> = (0..6)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let claimed = store
                        .job_claim(claim_params("q", &format!("w{n}"), 4, at(100)))
                        .await
                        .expect("claim");
                    if claimed.is_empty() {
                        return got;
                    }
                    got.extend(claimed);
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in futures::future::join_all(tasks).await {
        all.extend(task.expect("reclaimer"));
    }
    assert_eq!(all.len(), 60);
    assert_eq!(id_set(&all), id_set(&old));
    for claimed in &all {
        let job = stage.get(claimed.id).await;
        assert_eq!(job.attempts, 2);
        assert_eq!(job.lease_token, claimed.lease_token);
    }
    let stale = store
        .job_complete(JobCompleteParams {
            kept: Vec::new(),
            leases: old.iter().map(lease_of).collect(),
            now: Some(at(101)),
        })
        .await
        .unwrap();
    assert!(stale.iter().all(|r| *r == Fenced::LeaseLost), "{stale:?}");
}

/// An expired job with no attempt left is not claimed but made dead, reason
/// `lease_expired`, with the lost attempt in its history.
pub async fn claim_makes_an_expired_job_with_no_attempts_left_dead(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let id = stage.enqueue(job("q", "k").with_max_attempts(1)).await;
    stage.claim_id(id, t0(), "w1").await;
    assert!(stage.claim("q", 10, at(31)).await.is_empty());
    let job = stage.get(id).await;
    assert_eq!(job.status, JobState::Dead);
    assert_eq!(job.dead_reason, Some(DeadReason::LeaseExpired));
    assert_eq!(job.attempts, 1);
    assert_eq!(job.finished_at, Some(at(31)));
    assert_eq!(job.lease_token, None);
    let last = job.last_error.expect("a history entry");
    assert_eq!(last.class, FailureClass::LeaseExpired);
    assert_eq!(last.attempt, 1);
    assert_eq!(last.worker.as_deref(), Some("w1"));
}

/// A job that kills its worker every time spends an attempt per claim and ends dead
/// with `lease_expired` instead of running forever.
pub async fn a_job_that_kills_its_worker_ends_dead_with_lease_expired(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let id = stage.enqueue(job("q", "poison")).await;
    for (attempt, now) in [(1, t0()), (2, at(31)), (3, at(62))] {
        let claimed = stage.claim("q", 10, now).await;
        assert_eq!(ids(&claimed), vec![id]);
        assert_eq!(claimed[0].attempts, attempt);
    }
    assert!(stage.claim("q", 10, at(93)).await.is_empty());
    let job = stage.get(id).await;
    assert_eq!(job.status, JobState::Dead);
    assert_eq!(job.dead_reason, Some(DeadReason::LeaseExpired));
    assert_eq!(job.attempts, 3);
    let attempts: Vec<i32> = job.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 3]);
    assert!(job
        .errors
        .iter()
        .all(|e| e.class == FailureClass::LeaseExpired));
}

/// The sweep makes dead every expired job with no attempt left, and leaves live leases
/// and jobs with attempts left alone.
pub async fn sweep_makes_expired_jobs_with_no_attempts_left_dead(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let spent = stage
        .running(job("a", "k").with_max_attempts(1), t0())
        .await;
    let has_more = stage
        .running(job("b", "k").with_max_attempts(3), t0())
        .await;
    let live = stage
        .running(job("c", "k").with_max_attempts(1), at(20))
        .await;
    let swept = store
        .job_sweep(JobSweepParams { now: Some(at(40)) })
        .await
        .unwrap();
    assert_eq!(swept, vec![spent.id]);
    let spent = stage.get(spent.id).await;
    assert_eq!(spent.status, JobState::Dead);
    assert_eq!(spent.dead_reason, Some(DeadReason::LeaseExpired));
    assert_eq!(spent.finished_at, Some(at(40)));
    assert_eq!(
        spent.last_error.map(|e| e.class),
        Some(FailureClass::LeaseExpired)
    );
    assert_eq!(stage.get(has_more.id).await.status, JobState::Running);
    assert_eq!(stage.get(live.id).await.status, JobState::Running);
    let again = store
        .job_sweep(JobSweepParams { now: Some(at(40)) })
        .await
        .unwrap();
    assert!(again.is_empty());
}

/// The runtime's claim (`job_claim_run`) is the same claim, read back as only what a
/// worker runs each job with: the same jobs in the same order, each field what the
/// stored row holds, and `reclaimed` set where the job's last attempt was lost to an
/// expired lease (a reclaim; and a reclaimed job released since, whose next claim is
/// of a ready job) and nowhere else (a job retried after an ordinary failure). It
/// refuses what `job_claim` refuses.
pub async fn claim_run_returns_what_a_worker_runs_each_job_with(store: Arc<dyn Store>) {
    use revenant_core::trace::TraceContext;
    use revenant_core::ClaimedJob;
    let stage = Stage::new(store.clone());
    let payload =
        serde_json::json!({"name": "Zoë \"Ünï\" 客户 🧾", "big": 9_007_199_254_740_993_i64});
    let expired = stage.running(job("q", "k"), t0()).await.id;
    let released = stage.running(job("r", "k"), t0()).await.id;
    let retried = stage
        .retrying(job("q", "k").with_priority(5), t0(), secs(1))
        .await
        .id;
    let full = stage
        .enqueue(
            NewJob::new("q", "send_receipt", payload.clone())
                .with_priority(5)
                .with_max_attempts(7)
                .with_group("customer 42")
                .with_correlation_id("req-é")
                .with_trace_context(
                    TraceContext::new(
                        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                        Some("rojo=00f067aa0ba902b7"),
                    )
                    .unwrap(),
                ),
        )
        .await;
    let bare = stage.enqueue(job("q", "k")).await;

    let claim_run =
        |queue: &str, limit, now| store.job_claim_run(claim_params(queue, "wörker 1", limit, now));
    let claimed = claim_run("q", 10, at(100)).await.expect("job_claim_run");
    // Priority 5 first, by run_at (`full` due at t0, the retry at 1 s), then the
    // expired lease (run_at t0) before `bare` (enqueued at its own t0, a later id).
    assert_eq!(
        claimed.iter().map(|job| job.id).collect::<Vec<_>>(),
        vec![full, retried, expired, bare]
    );
    for job in &claimed {
        let stored = ClaimedJob::from_claimed(stage.get(job.id).await).expect("a claimed job");
        assert_eq!(job, &stored, "the claim returns the stored row's part");
        assert_eq!(job.attempted_at, at(100));
        assert_eq!(job.lease_expires_at, at(130));
        assert_eq!(job.reclaimed, job.id == expired, "job {}", job.id);
    }
    assert_eq!(claimed[0].payload, payload);
    assert_eq!(claimed[0].correlation_id.as_deref(), Some("req-é"));
    assert!(claimed[0].trace_context.is_some());
    assert_eq!(claimed[1].attempts, 2);

    // A reclaimed job given back unstarted: its next claim takes a ready job whose last
    // attempt was still lost to an expired lease.
    let reclaim = claim_run("r", 10, at(100)).await.expect("job_claim_run");
    assert_eq!(reclaim.len(), 1);
    assert!(reclaim[0].reclaimed);
    let release = store
        .job_release(JobReleaseParams {
            leases: vec![LeaseRef {
                id: released,
                lease_token: reclaim[0].lease_token,
            }],
            now: Some(at(101)),
        })
        .await
        .expect("job_release");
    assert_eq!(release, vec![Fenced::Applied]);
    let again = claim_run("r", 10, at(102)).await.expect("job_claim_run");
    assert_eq!(again.len(), 1);
    assert!(again[0].reclaimed);
    assert_eq!(
        again[0],
        ClaimedJob::from_claimed(stage.get(released).await).expect("a claimed job")
    );

    assert!(claim_run("q", 0, at(200)).await.unwrap().is_empty());
    let bad_queue = claim_run("bad queue", 1, t0()).await;
    assert!(
        matches!(bad_queue, Err(StoreError::Input(ref e)) if e.field == "queue"),
        "{bad_queue:?}"
    );
}
