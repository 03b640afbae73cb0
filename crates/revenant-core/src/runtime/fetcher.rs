//! The fetcher: one per queue. Claims jobs into the queue's free slots, in batches no
//! larger than the free slots, and starts an executor for each.
//!
//! Claims are at least the claim cooldown apart (default 20 ms), so slots that free up
//! one by one are refilled by one claim, unless half the queue's slots are free: then
//! it claims at once.
//!
//! It sleeps on [`Store::wait_for_jobs`] (an in-process signal on SQLite,
//! LISTEN/NOTIFY on PostgreSQL) with the poll interval as the fallback, and on a free
//! slot when every slot is taken. At the shutdown signal it stops at once; jobs from a
//! claim that was already in flight are released, not run.
//!
//! [`Store::wait_for_jobs`]: crate::store::Store::wait_for_jobs

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::runtime::completer::Ack;
use crate::runtime::executor;
use crate::runtime::gate::{self, Gate};
use crate::runtime::store_retry::retry;
use crate::runtime::worker::{QueueConfig, Shared};
use crate::store::{JobClaimParams, LeaseRef};

pub(crate) async fn run(shared: Arc<Shared>, queue: QueueConfig, slots: Arc<Semaphore>) {
    let stop = shared.stop_claiming.clone();
    // Claims use the queue's lease; an executor whose kind has its own lease sets it
    // with a heartbeat right after starting.
    let claim_lease = shared
        .policies
        .queues
        .get(&queue.name)
        .unwrap_or(&shared.policies.default)
        .lease();
    let mut last_claim: Option<tokio::time::Instant> = None;
    // Half the queue's slots: enough free slots to claim without waiting out the
    // cooldown.
    let enough = queue.concurrency.div_ceil(2).max(1);
    loop {
        // Gather free slots: claim once `enough` are free, or once the cooldown since the
        // last claim has passed and at least one is. The cooldown lets slots that free
        // up one by one be refilled by one claim instead of one store call each; ending
        // it early when half the slots are free keeps it from capping a fast queue at
        // `concurrency / cooldown` jobs a second, and keeps a newly enqueued job from
        // waiting out a cooldown when the worker is mostly idle.
        let cooled =
            last_claim.map_or_else(tokio::time::Instant::now, |at| at + shared.claim_cooldown);
        let mut permits: Vec<OwnedSemaphorePermit> = Vec::new();
        while permits.len() < enough {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(permit) => {
                        permits.push(permit);
                        while let Ok(permit) = slots.clone().try_acquire_owned() {
                            permits.push(permit);
                        }
                    }
                    Err(_) => break,
                },
                _ = tokio::time::sleep_until(cooled), if !permits.is_empty() => break,
            }
        }
        if stop.is_cancelled() || permits.is_empty() {
            break;
        }
        let limit = permits.len();
        last_claim = Some(tokio::time::Instant::now());
        let params = JobClaimParams {
            queue: queue.name.clone(),
            worker: shared.worker_id.clone(),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            lease: claim_lease,
            now: None,
        };
        let jobs = match retry("job_claim", &stop, || {
            shared.store.job_claim(params.clone())
        })
        .await
        {
            Ok(jobs) => jobs,
            // Stopped while the store was failing, or a fault retrying does not fix:
            // the retry helper has logged it; try again after the poll interval.
            Err(_) => {
                drop(permits);
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(shared.poll_interval) => continue,
                }
            }
        };
        let got = jobs.len();
        if stop.is_cancelled() || got > limit {
            // The signal came while the claim was in flight (or the store returned more
            // than asked): give these back now rather than run them after the signal.
            let keep = if stop.is_cancelled() { 0 } else { limit };
            let mut jobs = jobs;
            let extra = jobs.split_off(keep);
            release(&shared, extra).await;
            if stop.is_cancelled() {
                break;
            }
            start(&shared, claim_lease, jobs, permits).await;
            continue;
        }
        let used: Vec<OwnedSemaphorePermit> = permits.drain(..got).collect();
        drop(permits);
        start(&shared, claim_lease, jobs, used).await;
        if got < limit {
            // The queue had fewer due jobs than free slots: wait for a wake-up.
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = shared.store.wait_for_jobs(
                    &queue.name,
                    shared.due_soon.wait_for(&queue.name, shared.poll_interval),
                ) => {}
            }
        }
    }
    tracing::debug!(queue = %queue.name, "fetcher stopped");
}

/// Starts an executor for each claimed job the dependency gate lets run (every job
/// when the worker protects no dependency); a job sent back to wait frees its slot at
/// once.
async fn start(
    shared: &Arc<Shared>,
    claim_lease: std::time::Duration,
    jobs: Vec<crate::job::Job>,
    permits: Vec<OwnedSemaphorePermit>,
) {
    let gates = match &shared.dependencies {
        None => vec![Gate::Run(None); jobs.len()],
        Some(dependencies) => match gate::gate(shared, dependencies, claim_lease, &jobs).await {
            Ok(gates) => gates,
            Err(err) => {
                // Only at shutdown, or a fault retrying does not fix: the jobs go back.
                tracing::warn!(error = %err, jobs = jobs.len(), "could not ask for dependency permits; releasing the claimed jobs");
                release(shared, jobs).await;
                return;
            }
        },
    };
    for ((job, gate), permit) in jobs.into_iter().zip(gates).zip(permits) {
        match gate {
            Gate::Run(ticket) => {
                tokio::spawn(executor::run(
                    shared.clone(),
                    claim_lease,
                    job,
                    permit,
                    ticket,
                ));
            }
            Gate::Skip => drop(permit),
        }
    }
}

async fn release(shared: &Shared, jobs: Vec<crate::job::Job>) {
    for job in jobs {
        let Some(lease_token) = job.lease_token else {
            continue;
        };
        let lease = LeaseRef {
            id: job.id,
            lease_token,
        };
        match shared.completer.send(Ack::Release(lease)).await {
            Ok(fenced) => {
                tracing::info!(job_id = job.id, queue = %job.queue, result = ?fenced, "released a job claimed as shutdown began")
            }
            Err(err) => {
                tracing::warn!(job_id = job.id, queue = %job.queue, error = %err, "could not release a job claimed as shutdown began; it is reclaimed when its lease expires")
            }
        }
    }
}
