//! Hostile input at the library (RELIABILITY.md test 19), on SQLite and PostgreSQL:
//! thousands of seeded random jobs whose every field is drawn from good and hostile
//! values (empty, overlong, control characters, NUL, right-to-left marks, SQL and path
//! fragments, absurd priorities, delays, dates and attempt counts, payloads deep, huge,
//! or holding NUL).
//!
//! Every enqueue must either succeed, and the job read back equal and then be claimed
//! like any other (an accepted job that breaks a claim would stop its whole queue), or
//! fail with an input error naming the field `NewJob::validate` names: both backends
//! accept exactly the same jobs. A batch with one bad job writes nothing. No other
//! error, no panic.
//!
//! The CLI's bad input (exit 2, the problem named, nothing written) is
//! `crates/revenant-cli/tests/cli.rs`; the store's own table of bad fields is the
//! conformance suite's `enqueue_refuses_bad_input_and_writes_nothing`; the HTTP API's
//! is `crates/revenant-server/tests`.

#[macro_use]
mod support;

use std::time::Duration;

use chrono::{DateTime, Utc};
use revenant::store::{JobClaimParams, JobEnqueueParams, JobGetParams, QueueStatsParams};
use revenant::{NewJob, Store, StoreError};
use revenant_torture::behaviour::mix64;
use serde_json::{json, Value};
use support::*;

struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = mix64(self.0);
        self.0
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
    /// Hostile one time in `n`.
    fn hostile(&mut self, n: u64) -> bool {
        self.next() % n == 0
    }
}

fn deep(depth: usize) -> Value {
    (0..depth).fold(json!(1), |inner, _| json!([inner]))
}

fn names() -> Vec<String> {
    [
        "",
        " ",
        "-lead",
        "with space",
        "semi;colon",
        "名前",
        "tab\t",
        "nul\0",
        "rtl\u{202e}x",
        "DROP TABLE jobs;--",
        "../../etc/passwd",
        "%s%n",
        "q'\"`",
        "a.b-c:d_e",
        "9lives",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(["x".repeat(64), "x".repeat(65)])
    .collect()
}

fn keys() -> Vec<String> {
    [
        "",
        "line\nbreak",
        "nul\0",
        "🎉 party",
        " leading",
        "DROP TABLE jobs;--",
        "\u{202e}",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(["k".repeat(255), "k".repeat(256)])
    .collect()
}

fn payloads() -> Vec<Value> {
    let many: serde_json::Map<String, Value> =
        (0..1000).map(|i| (format!("k{i}"), json!(i))).collect();
    vec![
        json!(null),
        json!("\u{0}"),
        json!({"a": "b\u{0}c"}),
        json!({"k\u{0}": 1}),
        json!("🎉\u{fffd}\u{feff}\u{202e}"),
        json!(1e308),
        json!(-0.0),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(vec![0; 10_000]),
        Value::Object(many),
        deep(64),
        deep(200),
        json!("x".repeat(NewJob::MAX_PAYLOAD_BYTES - 2)),
        json!("x".repeat(NewJob::MAX_PAYLOAD_BYTES)),
    ]
}

fn dates() -> Vec<DateTime<Utc>> {
    let at = |secs: i64| DateTime::<Utc>::from_timestamp(secs, 0).unwrap();
    vec![
        at(0),
        at(-62_135_596_800),    // year 1
        at(253_402_300_799),    // 9999-12-31
        at(-8_000_000_000_000), // far before year 1
        at(8_000_000_000_000),  // far after 9999
        Utc::now() - chrono::Duration::days(365 * 1000),
        Utc::now() + chrono::Duration::days(366),
        DateTime::<Utc>::MIN_UTC,
        DateTime::<Utc>::MAX_UTC,
    ]
}

fn random_job(d: &mut Draw) -> NewJob {
    let names = names();
    let keys = keys();
    let queue = if d.hostile(6) {
        d.pick(&names).clone()
    } else {
        "hostile".into()
    };
    let kind = if d.hostile(6) {
        d.pick(&names).clone()
    } else {
        "k".into()
    };
    let payload = if d.hostile(4) {
        d.pick(&payloads()).clone()
    } else {
        json!({"ok": true})
    };
    let mut job = NewJob::new(queue, kind, payload);
    if d.hostile(6) {
        job.priority = *d.pick(&[1000, -1000, 1001, -1001, i32::MAX, i32::MIN]);
    }
    if d.hostile(6) {
        job.delay = Some(*d.pick(&[
            Duration::ZERO,
            Duration::from_millis(1),
            NewJob::MAX_DELAY,
            NewJob::MAX_DELAY + Duration::from_secs(1),
            Duration::MAX,
        ]));
    }
    if d.hostile(6) {
        job.run_at = Some(*d.pick(&dates()));
    }
    if d.hostile(6) {
        job.max_attempts = Some(*d.pick(&[1, 0, -1, 1000, 1001, i32::MAX, i32::MIN]));
    }
    for field in [
        &mut job.group_key,
        &mut job.unique_key,
        &mut job.correlation_id,
    ] {
        if d.hostile(8) {
            *field = Some(d.pick(&keys).clone());
        }
    }
    job
}

fn params(jobs: Vec<NewJob>) -> JobEnqueueParams {
    JobEnqueueParams {
        jobs,
        default_max_attempts: 3,
        now: None,
    }
}

async fn total_jobs(store: &dyn Store) -> i64 {
    store
        .queue_stats(QueueStatsParams::default())
        .await
        .unwrap()
        .iter()
        .map(|s| {
            s.ready + s.scheduled + s.retrying + s.running + s.completed + s.dead + s.cancelled
        })
        .sum()
}

async fn hostile_input_is_refused_by_name_or_stored_intact(backend: Backend) {
    let Some(db) = Db::new(backend).await else {
        return;
    };
    let store = db.store().await;
    let cases = scale(600, 6_000);
    let mut d = Draw(19);
    let (mut accepted, mut refused, mut batches) = (0, 0, 0);
    let mut wrong: Vec<String> = Vec::new();
    for n in 0..cases {
        let job = random_job(&mut d);
        // Each job alone: the validator is the oracle both backends must follow.
        let expected = job.validate().map_err(|e| e.field);
        let got = store.job_enqueue(params(vec![job.clone()])).await;
        match (&expected, &got) {
            (Ok(()), Ok(enqueued)) => {
                accepted += 1;
                let read = store.job_get(JobGetParams { id: enqueued[0].id }).await;
                match read {
                    Ok(Some(row))
                        if enqueued[0].duplicate
                            || (row.queue == job.queue
                                && row.kind == job.kind
                                && row.payload == job.payload) => {}
                    other => {
                        wrong.push(format!("case {n}: stored {job:?} reads back as {other:?}"))
                    }
                }
            }
            (Err(field), Err(StoreError::Input(err))) if err.field == *field => refused += 1,
            _ => wrong.push(format!(
                "case {n}: validate says {expected:?}, the store answered {:?} for {}",
                got.as_ref().map(|e| e.len()).map_err(|e| e.to_string()),
                format!("{job:?}").chars().take(300).collect::<String>()
            )),
        }
        // Now and then a batch with this job last behind two good ones: all or nothing.
        if expected.is_err() && n % 5 == 0 {
            batches += 1;
            let before = total_jobs(store.as_ref()).await;
            let good = NewJob::new("hostile", "k", json!({"batch": n}));
            let got = store
                .job_enqueue(params(vec![good.clone(), good, job]))
                .await;
            let after = total_jobs(store.as_ref()).await;
            if !matches!(got, Err(StoreError::Input(_))) || after != before {
                wrong.push(format!(
                    "case {n}: a bad batch answered {got:?} and wrote {} jobs",
                    after - before
                ));
            }
        }
        if wrong.len() > 20 {
            break;
        }
    }
    // Every accepted job can be claimed: a job that cannot be read back out of the
    // table would fail every claim of its queue.
    let mut claimed = 0;
    let mut claim_errors = Vec::new();
    let queues: Vec<String> = store
        .queue_stats(QueueStatsParams::default())
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.queue)
        .collect();
    for queue in &queues {
        loop {
            match store
                .job_claim(JobClaimParams {
                    queue: queue.clone(),
                    worker: "hostile".into(),
                    limit: 50,
                    lease: Duration::from_secs(60),
                    reclaim: true,
                    // The latest clock a store accepts: past every run_at it accepted.
                    now: DateTime::<Utc>::from_timestamp_millis(
                        revenant::job::MAX_TIMESTAMP_MILLIS,
                    ),
                })
                .await
            {
                Ok(jobs) if jobs.is_empty() => break,
                Ok(jobs) => claimed += jobs.len(),
                Err(err) => {
                    claim_errors.push(format!("queue {queue:?}: {err}"));
                    break;
                }
            }
        }
    }
    let report = revenant_torture::checker::Report {
        enqueued: accepted,
        misclassified: wrong.len() + claim_errors.len(),
        ..Default::default()
    };
    let measured = format!(
        "{cases} random jobs: {accepted} accepted and read back intact, {refused} refused \
         naming the field, {batches} bad batches wrote nothing; {claimed} claimed afterwards; \
         {} wrong answers, {} claims failing",
        wrong.len(),
        claim_errors.len()
    );
    summary(Summary {
        test: "19 hostile input (library)",
        backend: backend.name(),
        jobs: cases,
        faults: refused,
        fault_kind: "hostile field values",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}");
    assert!(wrong.is_empty(), "{measured}\n{}", wrong.join("\n"));
    assert!(
        claim_errors.is_empty(),
        "{measured}\n{}",
        claim_errors.join("\n")
    );
    assert!(accepted > cases / 10 && refused > cases / 10, "{measured}");
    db.cleanup().await;
}
on_both_backends!(hostile_input_is_refused_by_name_or_stored_intact);
