//! `job_enqueue` inserts a batch in multi-row statements (chunks of up to 256 rows):
//! the result must be what enqueuing the jobs one after the other gives, across chunk
//! boundaries, unique keys included.

use std::time::Duration;

use revenant_conformance::stage::{job, t0};
use revenant_core::store::{Enqueued, JobEnqueueParams, JobGetParams};
use revenant_core::{NewJob, Store};
use revenant_sqlite::SqliteStore;

fn params(jobs: Vec<NewJob>) -> JobEnqueueParams {
    JobEnqueueParams {
        jobs,
        default_max_attempts: 3,
        now: Some(t0()),
    }
}

/// Job `i` of a batch: its own payload, priority, delay and attempts, and on every
/// seventh job a unique key that repeats every 210 jobs (30 keys, each repeated within
/// the batch and across chunks).
fn nth(i: usize) -> NewJob {
    let mut j = job(if i % 2 == 0 { "even" } else { "odd" }, "k");
    j.payload = serde_json::json!({ "i": i });
    j.priority = (i % 5) as i32;
    j.delay = Some(Duration::from_millis(i as u64));
    j.max_attempts = (i % 3 == 0).then_some(7);
    if i % 7 == 0 {
        j.unique_key = Some(format!("key-{}", i % 210));
    }
    j.group_key = (i % 11 == 0).then(|| format!("g{i}"));
    j.correlation_id = (i % 13 == 0).then(|| format!("c{i}"));
    j
}

#[tokio::test]
async fn a_large_batch_gives_what_one_job_at_a_time_gives() {
    let n = 1_000; // three full chunks and the rest in smaller ones
    let batch = SqliteStore::open_temporary().await.unwrap();
    let single = SqliteStore::open_temporary().await.unwrap();
    // A key already held before the batch.
    for store in [&batch, &single] {
        let mut held = job("even", "k");
        held.unique_key = Some("key-14".into());
        store.job_enqueue(params(vec![held])).await.unwrap();
    }
    let together = batch
        .job_enqueue(params((0..n).map(nth).collect()))
        .await
        .unwrap();
    let mut one_by_one: Vec<Enqueued> = Vec::new();
    for i in 0..n {
        one_by_one.extend(single.job_enqueue(params(vec![nth(i)])).await.unwrap());
    }
    assert_eq!(
        together, one_by_one,
        "the same ids and duplicates, in input order"
    );
    // 143 keyed jobs, 30 keys, one of them held before: 29 inserted, 114 duplicates.
    assert_eq!(together.iter().filter(|e| !e.duplicate).count(), n - 114);
    for e in together.iter().filter(|e| !e.duplicate) {
        let a = batch
            .job_get(JobGetParams { id: e.id })
            .await
            .unwrap()
            .unwrap();
        let b = single
            .job_get(JobGetParams { id: e.id })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                &a.queue,
                &a.payload,
                a.priority,
                a.max_attempts,
                a.run_at,
                a.created_at
            ),
            (
                &b.queue,
                &b.payload,
                b.priority,
                b.max_attempts,
                b.run_at,
                b.created_at
            ),
            "job {}",
            e.id
        );
        assert_eq!(
            (&a.group_key, &a.unique_key, &a.correlation_id),
            (&b.group_key, &b.unique_key, &b.correlation_id)
        );
    }
}

#[tokio::test]
async fn every_batch_size_up_to_two_chunks_inserts_each_job_once_in_order() {
    let store = SqliteStore::open_temporary().await.unwrap();
    let mut last = 0;
    for n in (1..=520).step_by(37).chain([255, 256, 257, 512, 513]) {
        let got = store
            .job_enqueue(params(
                (0..n)
                    .map(|i| {
                        let mut j = job("q", "k");
                        j.payload = serde_json::json!(i);
                        j
                    })
                    .collect(),
            ))
            .await
            .unwrap();
        assert_eq!(got.len(), n);
        for (i, e) in got.iter().enumerate() {
            assert!(!e.duplicate);
            assert!(e.id > last, "ids rise in input order");
            last = e.id;
            let stored = store
                .job_get(JobGetParams { id: e.id })
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                stored.payload,
                serde_json::json!(i),
                "batch of {n}, job {i}"
            );
        }
    }
}
