//! The worker registry.

use super::prelude::*;

fn beat(worker: &str, pid: i64, queues: &[&str], now: Timestamp) -> WorkerHeartbeatParams {
    WorkerHeartbeatParams {
        worker: worker.into(),
        host: "host-1".into(),
        pid,
        queues: queues.iter().map(|q| q.to_string()).collect(),
        now: Some(now),
    }
}

/// A heartbeat registers a worker, and later ones refresh it while keeping when it
/// started.
pub async fn worker_heartbeat_registers_and_refreshes_a_worker(store: Arc<dyn Store>) {
    store
        .worker_heartbeat(beat("w1", 42, &["emails"], t0()))
        .await
        .unwrap();
    assert_eq!(
        store.worker_list().await.unwrap(),
        vec![WorkerInfo {
            worker: "w1".into(),
            host: "host-1".into(),
            pid: 42,
            queues: vec!["emails".into()],
            started_at: t0(),
            last_seen_at: t0(),
        }]
    );
    store
        .worker_heartbeat(beat("w1", 42, &["emails", "sms"], at(10)))
        .await
        .unwrap();
    let list = store.worker_list().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].started_at, t0());
    assert_eq!(list[0].last_seen_at, at(10));
    assert_eq!(
        list[0].queues,
        vec!["emails".to_string(), "sms".to_string()]
    );
}

/// The registry lists workers by id.
pub async fn worker_list_is_ordered_by_worker(store: Arc<dyn Store>) {
    for name in ["w3", "w1", "w2"] {
        store
            .worker_heartbeat(beat(name, 1, &["q"], t0()))
            .await
            .unwrap();
    }
    let names: Vec<String> = store
        .worker_list()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.worker)
        .collect();
    assert_eq!(names, vec!["w1", "w2", "w3"]);
}

/// Removing a worker by id drops that worker only.
pub async fn worker_remove_drops_one_worker(store: Arc<dyn Store>) {
    store
        .worker_heartbeat(beat("w1", 1, &["q"], t0()))
        .await
        .unwrap();
    store
        .worker_heartbeat(beat("w2", 2, &["q"], t0()))
        .await
        .unwrap();
    let removed = store
        .worker_remove(WorkerRemoveParams::Worker("w1".into()))
        .await
        .unwrap();
    assert_eq!(removed, 1);
    let names: Vec<String> = store
        .worker_list()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.worker)
        .collect();
    assert_eq!(names, vec!["w2"]);
    let again = store
        .worker_remove(WorkerRemoveParams::Worker("w1".into()))
        .await
        .unwrap();
    assert_eq!(again, 0);
}

/// Removing stale workers drops only those not seen within the window.
pub async fn worker_remove_stale_drops_only_workers_not_seen_recently(store: Arc<dyn Store>) {
    store
        .worker_heartbeat(beat("old", 1, &["q"], t0()))
        .await
        .unwrap();
    store
        .worker_heartbeat(beat("new", 2, &["q"], at(100)))
        .await
        .unwrap();
    let removed = store
        .worker_remove(WorkerRemoveParams::StaleFor {
            stale_after: secs(60),
            now: Some(at(120)),
        })
        .await
        .unwrap();
    assert_eq!(removed, 1);
    let names: Vec<String> = store
        .worker_list()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.worker)
        .collect();
    assert_eq!(names, vec!["new"]);
}
