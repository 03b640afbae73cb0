//! Enqueueing torture jobs and recording every acknowledged batch in the ledger: used
//! by the driver (bulk enqueue before a run) and by worker processes that produce
//! while they work (`--produce`).

use std::time::Duration;

use revenant::store::JobEnqueueParams;
use revenant::{NewJob, Store, StoreError};

use crate::ledger::{now_micros, Event, LedgerWriter};
use crate::worker::KIND;

/// What the jobs look like.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Their queue.
    pub queue: String,
    /// Their `max_attempts`.
    pub max_attempts: i32,
    /// Job number i gets the unique key `u<i mod K>`; 0 for none.
    pub unique_keys: usize,
    /// Job number i joins the group `g<i mod G>`; 0 for none.
    pub groups: usize,
}

impl Shape {
    /// Plain jobs of `queue` with `max_attempts`.
    pub fn plain(queue: impl Into<String>, max_attempts: i32) -> Shape {
        Shape {
            queue: queue.into(),
            max_attempts,
            unique_keys: 0,
            groups: 0,
        }
    }

    /// Job number `i` of the producer `pid` (both go in the payload, so a row whose
    /// enqueue was never acknowledged can be traced to the call that wrote it).
    pub fn job(&self, i: usize, pid: u32) -> NewJob {
        let payload = serde_json::json!({ "n": i, "pid": pid });
        let mut job =
            NewJob::new(self.queue.clone(), KIND, payload).with_max_attempts(self.max_attempts);
        if self.unique_keys > 0 {
            job = job.with_unique_key(format!("u{}", i % self.unique_keys));
        }
        if self.groups > 0 {
            job = job.with_group(format!("g{}", i % self.groups));
        }
        job
    }
}

/// Enqueues jobs `0..count` of `shape`, `batch` per call (each call one transaction),
/// pausing `pause` between calls, and records every call in `ledger`: an `enqueuing`
/// line before it (the call may commit and the process die before it hears so) and an
/// `enqueued` line once the store answered (a job that certainly exists). Returns the
/// ids, in order (a held unique key gives the holder's id).
pub async fn produce(
    store: &dyn Store,
    shape: &Shape,
    count: usize,
    batch: usize,
    pause: Duration,
    ledger: Option<&LedgerWriter>,
) -> Result<Vec<i64>, StoreError> {
    let mut ids = Vec::with_capacity(count);
    let mut next = 0;
    let pid = std::process::id();
    while next < count {
        let n = (count - next).min(batch.max(1));
        let jobs: Vec<NewJob> = (next..next + n).map(|i| shape.job(i, pid)).collect();
        if let Some(ledger) = ledger {
            ledger
                .record(&Event::Enqueuing {
                    pid,
                    first: next,
                    count: n,
                    t: now_micros(),
                })
                .map_err(StoreError::unavailable)?;
        }
        let unique_keys: Vec<String> = jobs
            .iter()
            .filter_map(|job| job.unique_key.clone())
            .collect();
        let enqueued = store
            .job_enqueue(JobEnqueueParams {
                jobs,
                default_max_attempts: shape.max_attempts,
                now: None,
            })
            .await?;
        let batch_ids: Vec<i64> = enqueued.iter().map(|e| e.id).collect();
        if let Some(ledger) = ledger {
            ledger
                .record(&Event::Enqueued {
                    ids: batch_ids.clone(),
                    max_attempts: shape.max_attempts,
                    unique_keys,
                    t: now_micros(),
                })
                .map_err(StoreError::unavailable)?;
        }
        ids.extend(batch_ids);
        next += n;
        if !pause.is_zero() && next < count {
            tokio::time::sleep(pause).await;
        }
    }
    Ok(ids)
}
