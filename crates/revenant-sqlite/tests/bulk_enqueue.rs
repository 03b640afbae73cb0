//! `job_enqueue` inserts a batch in statements of up to 4,096 jobs and 16 MiB, each
//! job an element of one JSON array: the result must be what enqueuing the jobs one
//! after the other gives, across statement boundaries, unique keys included, and every
//! text a producer gave must come back as given.

use std::time::Duration;

use revenant_conformance::stage::{job, t0};
use revenant_core::store::{Enqueued, JobEnqueueParams, JobGetParams};
use revenant_core::trace::TraceContext;
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
    let n = 1_000;
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
async fn every_batch_size_up_to_three_statements_inserts_each_job_once_in_order() {
    let store = SqliteStore::open_temporary().await.unwrap();
    let mut last = 0;
    for n in (1..=520).step_by(37).chain([4_095, 4_096, 4_097, 8_193]) {
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

#[tokio::test]
async fn a_batch_past_a_statements_bytes_is_split_and_each_payload_kept_whole() {
    // 40 payloads of half a MiB: 20 MiB of JSON, past one statement's 16.
    let store = SqliteStore::open_temporary().await.unwrap();
    let big = |i: usize| serde_json::json!({ "i": i, "s": "x".repeat(512 * 1024) });
    let got = store
        .job_enqueue(params(
            (0..40)
                .map(|i| {
                    let mut j = job("q", "k");
                    j.payload = big(i);
                    j
                })
                .collect(),
        ))
        .await
        .unwrap();
    assert_eq!(got.len(), 40);
    assert!(
        got.windows(2).all(|w| w[1].id == w[0].id + 1),
        "consecutive ids in input order: {got:?}"
    );
    for (i, e) in got.iter().enumerate() {
        let stored = store
            .job_get(JobGetParams { id: e.id })
            .await
            .unwrap()
            .unwrap();
        assert!(stored.payload == big(i), "job {i}'s payload changed");
    }
}

#[tokio::test]
async fn texts_that_json_escapes_come_back_as_given() {
    // Quotes, backslashes, escapes spelled out, non-ASCII and astral characters, tabs
    // and newlines in the payload: everything a producer may write, through the JSON
    // array the statement reads.
    let store = SqliteStore::open_temporary().await.unwrap();
    let text = "a \"quoted\" \\ back\\slash, \\u0041 spelled out, é, 日本, 🦀";
    let mut j = job("q", "k");
    j.payload = serde_json::json!({
        "text": text,
        "lines": "one\ttab\nnew line",
        "n": [1, -2, 3.5, 1e300, 9007199254740993_u64, i64::MIN],
        "nested": { "empty": {}, "none": null, "yes": true },
    });
    j.unique_key = Some(format!("unique {text}"));
    j.group_key = Some(format!("group {text}"));
    j.correlation_id = Some(format!("correlation {text}"));
    j.trace_context = Some(
        TraceContext::new(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("vendor=a\"b,other=c\\d"),
        )
        .unwrap(),
    );
    j.priority = -7;
    j.max_attempts = Some(25);
    let got = store.job_enqueue(params(vec![j.clone()])).await.unwrap();
    let stored = store
        .job_get(JobGetParams { id: got[0].id })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.payload, j.payload);
    assert_eq!(
        (
            &stored.unique_key,
            &stored.group_key,
            &stored.correlation_id,
            &stored.trace_context
        ),
        (
            &j.unique_key,
            &j.group_key,
            &j.correlation_id,
            &j.trace_context
        )
    );
    assert_eq!((stored.priority, stored.max_attempts), (-7, 25));
}
