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
//! **Reclaims.** A job claimed off an expired lease is a *suspect*: the process that
//! ran it may have died of it (a job that aborts its worker). The store hands out at
//! most one per claim, and while a suspect runs here the fetcher claims with
//! `reclaim: false`, so one process never holds two suspects at once and a poison
//! cannot take its former neighbours down with it again. When the suspect ends the
//! fetcher claims again at once, so the expired leases of an idle queue are taken up
//! one per suspect run, not one per poll interval. A suspect that runs longer than the
//! poll interval stops holding reclaims back (a slow job must not stall them).
//!
//! [`Store::wait_for_jobs`]: revenant_core::store::Store::wait_for_jobs

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::completer::Ack;
use crate::executor;
use crate::gate::{self, Gate};
use crate::store_retry::retry;
use crate::worker::{QueueConfig, Shared};
use revenant_core::store::{JobClaimParams, LeaseRef};

pub(crate) async fn run(shared: Arc<Shared>, queue: QueueConfig, slots: Arc<Semaphore>) {
    let stop = shared.stop_claiming.clone();
    // Claims use the queue's lease; an executor whose kind has its own lease sets it
    // with a heartbeat right after starting.
    let claim_lease = {
        let policies = shared.policies.cached();
        policies
            .queues
            .get(&queue.name)
            .unwrap_or(&policies.default)
            .lease()
    };
    let mut last_claim: Option<tokio::time::Instant> = None;
    let suspects = Arc::new(Suspects::default());
    // Until when the suspect started last holds reclaims back.
    let mut suspect_until: Option<Instant> = None;
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
        // The claimed leases last at least from here: the executors count from it.
        let sent = tokio::time::Instant::now();
        last_claim = Some(sent);
        let params = JobClaimParams {
            queue: queue.name.clone(),
            worker: shared.worker_id.clone(),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            lease: claim_lease,
            reclaim: suspects.running() == 0 || suspect_until.is_none_or(|t| Instant::now() >= t),
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
            if start(
                &shared,
                &queue,
                (claim_lease, sent),
                jobs,
                permits,
                &suspects,
            )
            .await
            {
                suspect_until = Some(Instant::now() + shared.poll_interval);
            }
            continue;
        }
        let used: Vec<OwnedSemaphorePermit> = permits.drain(..got).collect();
        drop(permits);
        if start(&shared, &queue, (claim_lease, sent), jobs, used, &suspects).await {
            suspect_until = Some(Instant::now() + shared.poll_interval);
        }
        if got < limit {
            // The queue had fewer due jobs than free slots: wait for a wake-up, or for
            // a suspect to end (an expired lease may be waiting for it).
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = suspects.ended.notified(), if suspects.running() > 0 => {}
                _ = shared.store.wait_for_jobs(
                    &queue.name,
                    shared.due_soon.wait_for(&queue.name, shared.poll_interval),
                ) => {}
            }
        }
    }
    tracing::debug!(queue = %queue.name, "fetcher stopped");
}

/// The suspects (jobs claimed off an expired lease) running in this process, for one
/// queue.
#[derive(Debug, Default)]
struct Suspects {
    running: AtomicUsize,
    /// Told when one ends.
    ended: Notify,
}

impl Suspects {
    fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    fn started(self: &Arc<Self>) -> SuspectRunning {
        self.running.fetch_add(1, Ordering::AcqRel);
        SuspectRunning(Arc::clone(self))
    }
}

/// Held by a suspect's executor task; dropped when it ends, however it ends.
struct SuspectRunning(Arc<Suspects>);

impl Drop for SuspectRunning {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
        // `notify_one` keeps a permit when no one waits yet, so an end that comes
        // between the claim and the fetcher's wait is not missed (at worst one extra
        // claim).
        self.0.ended.notify_one();
    }
}

/// True when the job was claimed off an expired lease: the claim wrote a
/// `lease_expired` entry for the attempt before this one.
fn is_reclaim(job: &revenant_core::job::Job) -> bool {
    job.errors.last().is_some_and(|e| {
        e.class == revenant_core::job::FailureClass::LeaseExpired && e.attempt == job.attempts - 1
    })
}

/// Starts an executor for each claimed job the dependency gate lets run (every job
/// when the worker protects no dependency); a job sent back to wait frees its slot at
/// once. Returns true when it started a suspect.
async fn start(
    shared: &Arc<Shared>,
    queue: &QueueConfig,
    (claim_lease, sent): (std::time::Duration, Instant),
    jobs: Vec<revenant_core::job::Job>,
    permits: Vec<OwnedSemaphorePermit>,
    suspects: &Arc<Suspects>,
) -> bool {
    let gates = match &shared.dependencies {
        None => vec![Gate::Run(None); jobs.len()],
        Some(dependencies) => {
            match gate::gate(shared, dependencies, queue.concurrency, claim_lease, &jobs).await {
                Ok(gates) => gates,
                Err(err) => {
                    // Only at shutdown, or a fault retrying does not fix: the jobs go back.
                    tracing::warn!(error = %err, jobs = jobs.len(), "could not ask for dependency permits; releasing the claimed jobs");
                    release(shared, jobs).await;
                    return false;
                }
            }
        }
    };
    let mut suspect = false;
    for ((job, gate), permit) in jobs.into_iter().zip(gates).zip(permits) {
        match gate {
            Gate::Run(ticket) => {
                let running = is_reclaim(&job).then(|| suspects.started());
                suspect |= running.is_some();
                let run = executor::run(shared.clone(), claim_lease, sent, job, permit, ticket);
                tokio::spawn(async move {
                    run.await;
                    drop(running);
                });
            }
            Gate::Skip => drop(permit),
        }
    }
    suspect
}

async fn release(shared: &Shared, jobs: Vec<revenant_core::job::Job>) {
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
