//! `wait_for_jobs`, the store's clock and its declared capabilities.

use super::prelude::*;

/// A waiter on a queue wakes soon after a job is enqueued there, well before its own
/// timeout.
pub async fn wait_for_jobs_wakes_on_enqueue(store: Arc<dyn Store>) {
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            store.wait_for_jobs("q", secs(60)).await;
            started.elapsed()
        })
    };
    let stage = Stage::new(store.clone());
    let deadline = std::time::Instant::now() + secs(20);
    let mut waiter = waiter;
    // The waiter may not be listening yet when the first job goes in, so keep
    // enqueueing until it wakes (polling with a deadline, not sleeping).
    let waited = loop {
        stage.enqueue(job("q", "k")).await;
        match tokio::time::timeout(Duration::from_millis(200), &mut waiter).await {
            Ok(waited) => break waited.expect("waiter"),
            Err(_) if std::time::Instant::now() < deadline => continue,
            Err(_) => panic!("wait_for_jobs did not wake on enqueue within 20 s"),
        }
    };
    assert!(waited < secs(30), "woke only after {waited:?}");
}

/// A waiter with nothing to wake it returns after its timeout.
pub async fn wait_for_jobs_returns_after_its_timeout(store: Arc<dyn Store>) {
    let result = tokio::time::timeout(
        secs(10),
        store.wait_for_jobs("idle", Duration::from_millis(50)),
    )
    .await;
    assert!(result.is_ok(), "wait_for_jobs outlived its timeout");
}

/// The store's clock is the real time (production passes `now: None`).
pub async fn store_clock_tells_the_real_time(store: Arc<dyn Store>) {
    let before = chrono::Utc::now() - chrono::Duration::seconds(60);
    let now = store.now().await.expect("now");
    let after = chrono::Utc::now() + chrono::Duration::seconds(60);
    assert!(before <= now && now <= after, "store clock says {now}");
}

/// A store names its backend, and the capabilities it does not declare are said aloud
/// so a reader of the test output knows what this run did not exercise.
pub async fn capabilities_not_declared_are_reported(store: Arc<dyn Store>) {
    let backend = store.backend();
    assert!(!backend.is_empty(), "a store names its backend");
    let caps = store.capabilities();
    for (name, declared) in [
        ("multi_process", caps.multi_process),
        ("transactional_enqueue", caps.transactional_enqueue),
        ("cross_process_wakeup", caps.cross_process_wakeup),
    ] {
        if declared {
            println!("conformance[{backend}]: declares {name}");
        } else {
            println!(
                "conformance[{backend}]: does not declare {name}; cases needing it were not exercised"
            );
        }
    }
}
