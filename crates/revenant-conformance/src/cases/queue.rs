//! Queues: pause, resume and the numbers.

use super::prelude::*;

fn pause(queue: &str, now: Timestamp) -> QueuePauseParams {
    QueuePauseParams {
        queue: queue.into(),
        now: Some(now),
    }
}

async fn stats(store: &Arc<dyn Store>, queue: Option<&str>, now: Timestamp) -> Vec<QueueStats> {
    store
        .queue_stats(QueueStatsParams {
            queue: queue.map(str::to_string),
            worker_alive_within: secs(60),
            interval: secs(60),
            now: Some(now),
        })
        .await
        .expect("queue_stats")
}

/// A paused queue hands out no jobs; resumed, it does again.
pub async fn queue_pause_stops_claims_and_resume_restarts_them(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let id = stage.enqueue(job("q", "k")).await;
    store.queue_pause(pause("q", at(1))).await.unwrap();
    assert!(stage.claim("q", 10, at(2)).await.is_empty());
    assert_eq!(stage.get(id).await.attempts, 0);
    assert!(stats(&store, Some("q"), at(2)).await[0].paused);
    store.queue_resume(pause("q", at(3))).await.unwrap();
    assert!(!stats(&store, Some("q"), at(3)).await[0].paused);
    assert_eq!(ids(&stage.claim("q", 10, at(4)).await), vec![id]);
}

/// Pausing a queue nobody has used yet creates it, paused, with every count at zero.
pub async fn pausing_an_unknown_queue_creates_it_paused(store: Arc<dyn Store>) {
    store.queue_pause(pause("fresh", t0())).await.unwrap();
    let all = stats(&store, None, t0()).await;
    assert_eq!(
        all,
        vec![QueueStats {
            queue: "fresh".into(),
            paused: true,
            ready: 0,
            scheduled: 0,
            retrying: 0,
            running: 0,
            completed: 0,
            dead: 0,
            dead_last_hour: 0,
            cancelled: 0,
            oldest_due_age_secs: 0.0,
            workers_alive: 0,
            last_completed_at: None,
            interval_secs: 60.0,
            completed_last_interval: 0,
            failed_last_interval: 0,
        }]
    );
    let bad = store.queue_pause(pause("no spaces allowed", t0())).await;
    assert!(matches!(bad, Err(StoreError::Input(_))), "{bad:?}");
}

/// The numbers count every state: depth, scheduled, retrying, running (expired leases
/// too), completed, dead and dead in the last hour, cancelled, the oldest due job's age
/// and the last completion.
pub async fn queue_stats_count_every_state(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let q = "emails";
    let now = at(10_000);
    stage
        .dead(job(q, "k"), DeadReason::Permanent, "old", at(1_000))
        .await;
    stage.retrying(job(q, "k"), at(9_000), secs(3_600)).await;
    stage.completed(job(q, "k"), at(9_100)).await;
    stage.completed(job(q, "k"), at(9_200)).await;
    stage
        .dead(job(q, "k"), DeadReason::Permanent, "recent", at(9_400))
        .await;
    // Staged last among the claims: its lease expires at 9_530 and it is not reclaimed.
    stage.running(job(q, "k"), at(9_500)).await;
    stage
        .cancelled(job(q, "k").with_run_at(at(50_000)), at(9_700))
        .await;
    stage
        .enqueue_at(job(q, "k").with_run_at(at(9_900)), at(9_800))
        .await;
    stage
        .enqueue_at(job(q, "k").with_run_at(at(9_960)), at(9_800))
        .await;
    stage
        .enqueue_at(job(q, "k").with_run_at(at(20_000)), at(9_800))
        .await;
    let all = stats(&store, Some(q), now).await;
    assert_eq!(
        all,
        vec![QueueStats {
            queue: q.into(),
            paused: false,
            ready: 2,
            scheduled: 1,
            retrying: 1,
            running: 1,
            completed: 2,
            dead: 2,
            dead_last_hour: 1,
            cancelled: 1,
            oldest_due_age_secs: 100.0,
            workers_alive: 0,
            last_completed_at: Some(at(9_200)),
            interval_secs: 60.0,
            completed_last_interval: 0,
            failed_last_interval: 0,
        }]
    );
}

/// Queues are listed by name; a queue filter returns that queue only; an unknown queue
/// returns nothing.
pub async fn queue_stats_list_queues_by_name_and_filter_by_queue(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    stage.enqueue(job("zeta", "k")).await;
    stage.enqueue(job("alpha", "k")).await;
    stage.enqueue(job("alpha", "k")).await;
    let all = stats(&store, None, at(1)).await;
    let names: Vec<&str> = all.iter().map(|s| s.queue.as_str()).collect();
    assert_eq!(names, vec!["alpha", "zeta"]);
    assert_eq!(all[0].ready, 2);
    assert_eq!(all[0].oldest_due_age_secs, 1.0);
    let zeta = stats(&store, Some("zeta"), at(1)).await;
    assert_eq!(zeta.len(), 1);
    assert_eq!(zeta[0].ready, 1);
    assert!(stats(&store, Some("nothing-here"), at(1)).await.is_empty());
}

/// Workers alive are those serving the queue and seen within the window.
pub async fn queue_stats_count_live_workers_per_queue(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    stage.enqueue(job("emails", "k")).await;
    stage.enqueue(job("sms", "k")).await;
    for (worker, queues, seen) in [
        ("w1", vec!["emails"], at(990)),
        ("w2", vec!["emails", "sms"], at(900)),
        ("w3", vec!["sms", "other"], at(1_000)),
        ("w4", vec!["emails", "sms"], at(950)),
    ] {
        store
            .worker_heartbeat(WorkerHeartbeatParams {
                worker: worker.into(),
                host: "host-1".into(),
                pid: 100,
                queues: queues.into_iter().map(String::from).collect(),
                now: Some(seen),
            })
            .await
            .unwrap();
    }
    let all = stats(&store, None, at(1_000)).await;
    let alive: Vec<(&str, i64)> = all
        .iter()
        .map(|s| (s.queue.as_str(), s.workers_alive))
        .collect();
    // w2 was last seen 100 s ago: not alive with a 60 s window. w4, seen 50 s ago, is.
    assert_eq!(alive, vec![("emails", 2), ("sms", 2)]);
}

/// Completions and failed attempts are counted in `(now - interval, now]`, per queue:
/// every `job_fail` (retried or dead) and every expired lease (reclaimed or made dead by
/// claim or sweep) is one failure. Pruning drops failure records past the retention.
pub async fn queue_stats_count_completions_and_failures_in_the_interval(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let q = "emails";
    // Outside a 60 s window ending at 1_000.
    stage.completed(job(q, "k"), at(900)).await;
    stage.retrying(job(q, "k"), at(930), secs(3_600)).await;
    // Inside it.
    stage.completed(job(q, "k"), at(950)).await;
    stage.completed(job(q, "k"), at(1_000)).await;
    stage.retrying(job(q, "k"), at(945), secs(3_600)).await;
    stage
        .dead(job(q, "k"), DeadReason::Permanent, "boom", at(990))
        .await;
    // An expired lease reclaimed at 980 (attempts left) and one made dead at 985.
    let reclaimed = stage.running_expired(job(q, "k"), at(980), secs(1)).await;
    stage.claim_id(reclaimed.id, at(980), "worker-b").await;
    stage
        .running_expired(job(q, "k").with_max_attempts(1), at(985), secs(1))
        .await;
    store
        .job_sweep(JobSweepParams { now: Some(at(985)) })
        .await
        .unwrap();
    // Another queue's numbers stay its own; a completion after `now` is not counted.
    stage
        .dead(job("other", "k"), DeadReason::Permanent, "boom", at(990))
        .await;
    stage.completed(job(q, "k"), at(1_005)).await;

    let window = |interval: u64| {
        let store = store.clone();
        async move {
            let all = store
                .queue_stats(QueueStatsParams {
                    queue: Some(q.into()),
                    interval: secs(interval),
                    now: Some(at(1_000)),
                    ..QueueStatsParams::default()
                })
                .await
                .unwrap();
            (
                all[0].completed_last_interval,
                all[0].failed_last_interval,
                all[0].interval_secs,
            )
        }
    };
    assert_eq!(window(60).await, (2, 4, 60.0));
    assert_eq!(window(1_000).await, (3, 5, 1_000.0));
    assert_eq!(window(0).await, (0, 0, 0.0));

    // Prune with a 30 s retention at 1_000: failure records before 970 go.
    store
        .job_prune(JobPruneParams {
            retention: secs(30),
            limit: 1_000,
            now: Some(at(1_000)),
        })
        .await
        .unwrap();
    assert_eq!(
        window(1_000).await.1,
        3,
        "failures at 980, 985 and 990 are left"
    );
}

/// A batch of failures (one `job_fail` call, as the runtime's completer writes them)
/// counts each failed attempt once, per queue, whatever the store keeps per failure
/// (one row per queue and class of a batch, since migration 12); a failure whose lease
/// was lost counts nothing, and pruning drops a batch's failures with its time.
pub async fn a_batch_of_failures_counts_each_failure(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let mut emails = Vec::new();
    for _ in 0..7 {
        emails.push(stage.running(job("emails", "k"), at(900)).await);
    }
    let sms = stage.running(job("sms", "k"), at(900)).await;
    let failed = |job: &Job, class: FailureClass, action: FailAction| {
        failure_of(job, failure(class, "the provider said 503"), action)
    };
    let retry = || FailAction::Retry { delay: secs(3_600) };
    let mut stale = lease_of(&emails[6]);
    stale.lease_token = revenant_core::LeaseToken(stale.lease_token.0 ^ 1);
    let first = store
        .job_fail(JobFailParams {
            kept: Vec::new(),
            failures: vec![
                failed(&emails[0], FailureClass::Transient, retry()),
                failed(&emails[1], FailureClass::Transient, retry()),
                failed(&emails[2], FailureClass::Transient, retry()),
                failed(&emails[3], FailureClass::Timeout, retry()),
                failed(
                    &emails[4],
                    FailureClass::Permanent,
                    FailAction::Dead {
                        reason: DeadReason::Permanent,
                    },
                ),
                failed(&sms, FailureClass::Transient, retry()),
                JobFailure {
                    lease: stale,
                    failure: failure(FailureClass::Transient, "a lease this worker lost"),
                    action: retry(),
                    worker: None,
                },
            ],
            now: Some(at(990)),
        })
        .await
        .unwrap();
    assert_eq!(first.iter().filter(|f| **f == Fenced::Applied).count(), 6);
    assert_eq!(first[6], Fenced::LeaseLost);
    let second = store
        .job_fail(JobFailParams {
            kept: Vec::new(),
            failures: vec![
                failed(&emails[5], FailureClass::Transient, retry()),
                failed(&emails[6], FailureClass::Transient, retry()),
            ],
            now: Some(at(995)),
        })
        .await
        .unwrap();
    assert_eq!(second, vec![Fenced::Applied, Fenced::Applied]);

    let failures = |now: Timestamp| {
        let store = store.clone();
        async move {
            stats(&store, None, now)
                .await
                .iter()
                .map(|s| (s.queue.clone(), s.failed_last_interval))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        failures(at(1_000)).await,
        vec![("emails".to_string(), 7), ("sms".to_string(), 1)]
    );
    // Prune with an 8 s retention at 1_000: the first batch (990) goes, the second stays.
    store
        .job_prune(JobPruneParams {
            retention: secs(8),
            limit: 1_000,
            now: Some(at(1_000)),
        })
        .await
        .unwrap();
    assert_eq!(
        failures(at(1_000)).await,
        vec![("emails".to_string(), 2), ("sms".to_string(), 0)]
    );
}

/// A queue's history is rebuilt from the jobs' times: each point counts the jobs due
/// and not yet claimed or finished by then (ready jobs while they stay ready), and the
/// jobs dead by then; a time exactly on a point counts at that point.
pub async fn queue_history_rebuilds_depth_and_dead_from_job_times(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    // Chronological, with priorities so that each claim takes the job it means to.
    let ready = stage.enqueue_at(job("h", "k"), at(-100)).await;
    stage
        .dead(
            job("h", "k").with_priority(10),
            DeadReason::Permanent,
            "boom",
            at(-50),
        )
        .await;
    let completed = stage
        .enqueue_at(job("h", "k").with_priority(6), at(-30))
        .await;
    let cancelled = stage.enqueue_at(job("h", "k"), at(20)).await;
    let running = stage
        .enqueue_at(job("h", "k").with_priority(7), at(30))
        .await;
    stage
        .enqueue_at(job("h", "k").with_delay(secs(10)), at(50))
        .await;
    stage
        .enqueue_at(job("h", "k").with_delay(secs(1000)), at(0))
        .await;
    stage.enqueue_at(job("other", "k"), at(-100)).await;
    let result = store
        .job_cancel(JobCancelParams {
            target: CancelTarget::Id(cancelled),
            message: None,
            now: Some(at(120)),
        })
        .await
        .unwrap();
    assert_eq!(result, CancelResult::Cancelled);
    // A lease long enough to still hold at the last claim below.
    let claimed = store
        .job_claim(JobClaimParams {
            lease: secs(3600),
            reclaim: true,
            ..claim_params("h", "w", 1, at(150))
        })
        .await
        .unwrap();
    assert_eq!(ids(&claimed), vec![running]);
    stage
        .dead(
            job("h", "k").with_priority(9),
            DeadReason::Permanent,
            "boom",
            at(170),
        )
        .await;
    let claimed = stage.claim_id(completed, at(200), "w").await;
    stage.complete(&claimed, at(200)).await;
    assert_eq!(stage.get(ready).await.status, JobState::Ready);

    let history = store
        .queue_history(QueueHistoryParams {
            queue: "h".into(),
            step: secs(60),
            points: 5,
            now: Some(at(240)),
        })
        .await
        .expect("queue_history");
    let expected =
        [(0, 2, 1), (60, 5, 1), (120, 4, 1), (180, 3, 2), (240, 2, 2)].map(|(t, depth, dead)| {
            QueueHistoryPoint {
                at: at(t),
                depth,
                dead,
            }
        });
    assert_eq!(history, expected.to_vec());

    let unknown = store
        .queue_history(QueueHistoryParams {
            queue: "nobody".into(),
            step: secs(60),
            points: 2,
            now: Some(at(240)),
        })
        .await
        .unwrap();
    assert_eq!(
        unknown,
        vec![
            QueueHistoryPoint {
                at: at(180),
                depth: 0,
                dead: 0
            },
            QueueHistoryPoint {
                at: at(240),
                depth: 0,
                dead: 0
            },
        ]
    );
    for (queue, step, points, field) in [
        ("", secs(60), 5, "queue"),
        ("h", Duration::ZERO, 5, "step"),
        ("h", secs(60), 0, "points"),
        ("h", secs(60), QueueHistoryParams::MAX_POINTS + 1, "points"),
    ] {
        let err = store
            .queue_history(QueueHistoryParams {
                queue: queue.into(),
                step,
                points,
                now: Some(at(240)),
            })
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Input(input) if input.field == field),
            "{queue:?} {step:?} {points}: {err}"
        );
    }
}
