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
