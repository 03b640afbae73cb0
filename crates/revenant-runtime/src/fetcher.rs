//! The fetcher: one per queue. Claims jobs for the queue's slots, into a small local
//! buffer, and starts an executor for each as slots free up.
//!
//! **Claiming ahead.** A claim asks for the free slots plus room in the buffer: up to
//! `claim_ahead` jobs (default 0, off; see [`WorkerBuilder::claim_ahead`]) may be
//! claimed and not yet started. As a slot frees, it takes the next buffered job at
//! once, and the next claim is sent while the buffer still feeds the slots, so one
//! round trip serves many short jobs and slots do not sit idle while a claim is in
//! flight. At most one claim is in flight per queue, and the jobs claimed and not
//! started never exceed `claim_ahead`: a claim asks for at most the free slots plus
//! the buffer's room, and only this fetcher takes slots. Off, the fetcher claims only
//! into free slots, one claim in flight, as before.
//!
//! A buffered job holds its lease while it waits. It waits at most half of what is
//! left of its lease after one heartbeat interval (and the give-up margin): started
//! any later, its first heartbeat could come after the lease could have run out. Past
//! that it is released (fenced, back to `ready`, the attempt given back), and the
//! fetcher claims no more ahead until a slot frees. A worker that protects
//! dependencies never claims ahead: the dependency gate takes its permits at claim
//! time, and a buffered job must not hold a bulkhead permit.
//!
//! **Kept retries.** On a queue that claims ahead, a job whose retry is due within
//! milliseconds comes back here from its executor, still running under its lease
//! (see [`crate::executor`]), and waits, soonest due first, until it is due; then it
//! goes to the front of the buffer. It counts against the buffer's room, is held to the
//! same hold (counted from its claim), and is released with the buffer at shutdown.
//!
//! Claims are at least the claim cooldown apart (default 20 ms), so slots that free up
//! one by one are refilled by one claim, unless half of the slots and the buffer's room
//! together are free: then it claims at once.
//!
//! It sleeps on [`Store::wait_for_jobs`] (an in-process signal on SQLite,
//! LISTEN/NOTIFY on PostgreSQL) with the poll interval as the fallback when a claim
//! found fewer jobs than it asked for. At the shutdown signal it stops at once: the
//! buffered jobs, and those of a claim that was already in flight, are released, not
//! run.
//!
//! **Jobs at their bulkhead.** On a worker that protects dependencies, a claimed job
//! whose key's bulkhead in this process is full waits here (see [`gate::gate`]): its
//! lease and attempt kept, no slot, no store call, at most the key's limit of them,
//! for at most the buffer's hold. When an attempt of a protected key ends (the gate's
//! `freed` count moves), the held jobs are offered the free slots before any new
//! claim. A claim whose jobs met a full bulkhead makes the fetcher *blocked*: it then
//! claims only as many jobs as permits came back beyond what held jobs took, plus the
//! room left for held jobs, plus one per poll interval (jobs of other keys may wait
//! behind), until a claimed batch runs with none at its bulkhead. Without this a queue
//! whose one dependency is at its bulkhead claimed and turned back its backlog through
//! the store over and over.
//!
//! **The claim in flight is polled by the fetcher itself**, and the fetcher keeps
//! polling it while it waits on anything else ([`keep_claiming`]): the claim holds a
//! store connection until it is polled to its end (on SQLite, the one writer), so a
//! fetcher that waited on a permit call or a release without polling it would wait on
//! itself.
//!
//! **Reclaims.** A job claimed off an expired lease is a *suspect*: the process that
//! ran it may have died of it (a job that aborts its worker). The store hands out at
//! most one per claim, and while a suspect runs or waits in the buffer here the fetcher
//! claims with `reclaim: false`, so one process never holds two suspects at once and a
//! poison cannot take its former neighbours down with it again. When the suspect ends
//! the fetcher claims again at once, so the expired leases of an idle queue are taken
//! up one per suspect run, not one per poll interval. A suspect that runs longer than
//! the poll interval stops holding reclaims back (a slow job must not stall them).
//!
//! [`Store::wait_for_jobs`]: revenant_core::store::Store::wait_for_jobs
//! [`WorkerBuilder::claim_ahead`]: crate::WorkerBuilder::claim_ahead

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::completer::{Ack, Unwritten};
use crate::executor::{self, give_up_margin, Claimed, Kept};
use crate::gate::{self, Gate, Held};
use crate::store_retry::retry;
use crate::worker::{QueueConfig, Shared};
use revenant_core::error::StoreError;
use revenant_core::job::ClaimedJob;
use revenant_core::policy::RetryPolicy;
use revenant_core::store::{JobClaimParams, LeaseRef};

/// A claimed job not started yet.
struct Buffered {
    job: ClaimedJob,
    /// The claim that leased it.
    claimed: Claimed,
    /// Held while it is a suspect, waiting or running.
    suspect: Option<SuspectRunning>,
    /// A kept job's failed attempts, written with its next result.
    unwritten: Unwritten,
}

/// A claim in flight: its send time, how many jobs it asked for, whether it could take
/// an expired lease, and the store's answer. Polled by the fetcher itself, not spawned:
/// the jobs start in the same wake-up that brings the answer, so a runtime whose
/// threads are busy (a handler blocking its thread) does not leave claimed jobs
/// waiting for a second wake-up while their leases run.
type Claim = Pin<Box<dyn Future<Output = Landed> + Send>>;

/// A claim's answer: its send time, how many jobs it asked for, whether it could take
/// an expired lease, and the store's answer.
type Landed = (Instant, usize, bool, Result<Vec<ClaimedJob>, StoreError>);

/// Awaits `work` while polling the claim in flight, keeping its answer in `landed`:
/// a claim holds a store connection (on SQLite, the one writer) until it is polled to
/// its end, so the fetcher must not wait on a store call, or on the completer's, and
/// leave it unpolled.
async fn keep_claiming<T>(
    claim: &mut Option<Claim>,
    landed: &mut Option<Landed>,
    work: impl Future<Output = T>,
) -> T {
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return out,
            answer = async { claim.as_mut().expect("a claim in flight").await }, if claim.is_some() => {
                *claim = None;
                *landed = Some(answer);
            }
        }
    }
}

/// How long a claimed job may wait in the buffer: half of what is left of the lease
/// after one heartbeat interval and the give-up margin. A job started by then has its
/// first heartbeat sent with half that room left before the lease could run out. Zero
/// when the heartbeat interval leaves no room (then the queue does not claim ahead).
pub(crate) fn buffer_hold(policy: &RetryPolicy) -> Duration {
    policy
        .lease()
        .saturating_sub(give_up_margin(policy.lease()))
        .saturating_sub(policy.heartbeat())
        / 2
}

pub(crate) async fn run(shared: Arc<Shared>, queue: QueueConfig, slots: Arc<Semaphore>) {
    let stop = shared.stop_claiming.clone();
    // Claims use the queue's lease; an executor whose kind has its own lease sets it
    // with a heartbeat right after starting.
    let policy = {
        let policies = shared.policies.cached();
        *policies
            .queues
            .get(&queue.name)
            .unwrap_or(&policies.default)
    };
    let claim_lease = policy.lease();
    let hold = buffer_hold(&policy);
    let ahead = if hold.is_zero() {
        0
    } else {
        shared.claim_ahead
    };
    // A queue that claims ahead keeps its jobs' short retries (crate::executor): the
    // same trade of a crash window for throughput, within the same hold. Kept jobs come
    // back on `kept_rx` and wait in `kept`, soonest due first, then go to the front of
    // the buffer.
    let (back, mut kept_rx) = mpsc::unbounded_channel::<Kept>();
    let keeping = (ahead > 0 && shared.dependencies.is_none()).then(|| Keeping { hold, back });
    let mut kept: VecDeque<(Instant, Buffered)> = VecDeque::new();
    let suspects = Arc::new(Suspects::default());
    // Until when the suspect started last holds reclaims back.
    let mut suspect_until: Option<Instant> = None;
    // Half the slots and the buffer's room: enough to claim without waiting out the
    // cooldown.
    let enough = (queue.concurrency + ahead).div_ceil(2).max(1);
    // The free slots this fetcher has taken and not handed out yet.
    let mut free: Vec<OwnedSemaphorePermit> = Vec::new();
    let mut buffer: VecDeque<Buffered> = VecDeque::new();
    let mut claim: Option<Claim> = None;
    // A claim's answer that came while the fetcher waited on something else.
    let mut landed: Option<Landed> = None;
    let mut last_claim: Option<Instant> = None;
    // No claim before this (the store failed in a way retrying did not fix).
    let mut retry_at: Option<Instant> = None;
    // A buffered job was released unstarted: claim no more ahead until a slot frees.
    let mut stalled = false;
    // The last claim found fewer jobs than it asked for: wait for a wake-up (or a
    // suspect's end) before the next.
    let mut wake: Option<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = None;
    // Jobs past their key's bulkhead in this process (see the module's docs): they
    // wait here without a slot, oldest first, and how many per key.
    let mut held: VecDeque<(Buffered, String)> = VecDeque::new();
    let mut held_keys: Option<Held> =
        (shared.dependencies.is_some() && !hold.is_zero()).then(Held::new);
    // Moves when a bulkhead permit is given back in this process.
    let mut freed = shared.dependencies.as_ref().map(|d| d.freed.subscribe());
    // The count of permits given back, when last looked at.
    let mut seen_freed = 0_u64;
    // A permit was given back since the held jobs were last offered slots.
    let mut offer_held = false;
    // The last claimed jobs all waited at a bulkhead in this process: until a claimed
    // job runs, claim only as many jobs as permits were given back since (each may
    // let one more run), or once the poll interval has passed. Since when, and how
    // many.
    let mut blocked: Option<(Instant, usize)> = None;
    loop {
        while let Ok(permit) = slots.clone().try_acquire_owned() {
            free.push(permit);
            stalled = false;
        }
        // Kept jobs that are due go first, in the order they came due; they were
        // claimed before any job in the buffer, so it stays in claim order.
        let now = Instant::now();
        let due = kept.partition_point(|(at, _)| *at <= now);
        for (_, job) in kept.drain(..due).rev() {
            buffer.push_front(job);
        }
        // Buffered jobs that waited their longest go back, unstarted.
        let overdue = buffer
            .iter()
            .take_while(|b| b.claimed.sent + hold <= now)
            .count();
        if overdue > 0 {
            let jobs: Vec<Buffered> = buffer.drain(..overdue).collect();
            tracing::debug!(queue = %queue.name, jobs = jobs.len(), hold_ms = hold.as_millis() as u64, "claimed jobs waited too long for a slot: released");
            let jobs = jobs.into_iter().map(|b| (b.job, b.unwritten)).collect();
            let why = "released a claimed job that waited too long for a slot";
            keep_claiming(&mut claim, &mut landed, release(&shared, jobs, why)).await;
            stalled = true;
        }
        // Held jobs that waited their longest go back too.
        let overdue = held
            .iter()
            .take_while(|(b, _)| b.claimed.sent + hold <= now)
            .count();
        if overdue > 0 {
            let jobs = unhold(held_keys.as_mut(), held.drain(..overdue));
            tracing::debug!(queue = %queue.name, jobs = jobs.len(), hold_ms = hold.as_millis() as u64, "jobs held at their bulkhead waited too long: released");
            let jobs = jobs.into_iter().map(|b| (b.job, b.unwritten)).collect();
            let why = "released a job that waited too long at its bulkhead";
            keep_claiming(&mut claim, &mut landed, release(&shared, jobs, why)).await;
        }
        // A permit came back: the held jobs are offered the free slots first.
        if offer_held && !held.is_empty() && !free.is_empty() {
            offer_held = false;
            let n = held.len().min(free.len());
            let jobs = unhold(held_keys.as_mut(), held.drain(..n));
            let permits: Vec<OwnedSemaphorePermit> = free.drain(..n).collect();
            let started = keep_claiming(
                &mut claim,
                &mut landed,
                start(
                    &shared,
                    &queue,
                    claim_lease,
                    jobs,
                    permits,
                    &suspects,
                    held_keys.as_mut(),
                    keeping.as_ref(),
                ),
            )
            .await;
            if started.suspect {
                suspect_until = Some(Instant::now() + shared.poll_interval);
            }
            // The permits these took are not there for new claims.
            if let Some((_, allowed)) = &mut blocked {
                *allowed = allowed.saturating_sub(started.ran);
            }
            // Still held: back to the front, in their order.
            for (job, key, permit) in started.held.into_iter().rev() {
                held.push_front((job, key));
                free.push(permit);
            }
        }
        // Free slots take buffered jobs, oldest claim first.
        if !buffer.is_empty() && !free.is_empty() {
            let n = buffer.len().min(free.len());
            let jobs: Vec<Buffered> = buffer.drain(..n).collect();
            let permits: Vec<OwnedSemaphorePermit> = free.drain(..n).collect();
            let started = keep_claiming(
                &mut claim,
                &mut landed,
                start(
                    &shared,
                    &queue,
                    claim_lease,
                    jobs,
                    permits,
                    &suspects,
                    held_keys.as_mut(),
                    keeping.as_ref(),
                ),
            )
            .await;
            if started.suspect {
                suspect_until = Some(Instant::now() + shared.poll_interval);
            }
            if started.at_bulkhead > 0 {
                // Permits given back while these were gated and not seen yet count:
                // the wake-up below sees them at once.
                if blocked.is_none() {
                    blocked = Some((Instant::now(), 0));
                }
            } else if started.ran > 0 {
                blocked = None;
            }
            for (job, key, permit) in started.held {
                held.push_back((job, key));
                free.push(permit);
            }
        }
        // Claim for the free slots and the buffer's room.
        let room = if stalled { 0 } else { ahead };
        let mut want = (free.len() + room).saturating_sub(buffer.len() + kept.len());
        if let Some((since, allowed)) = &mut blocked {
            if now >= *since + shared.poll_interval {
                // No permit came back for a poll interval: claim one job anyway, in
                // case jobs of other keys wait behind the blocked ones.
                *since = now;
                *allowed += 1;
            }
            // As many as permits came back for beyond the held jobs, and as many as
            // fit beside the held ones: while it is blocked, a claimed job is most
            // likely of a blocked key, and one that finds no room goes back through
            // the store.
            let room: u32 = held_keys
                .iter()
                .flat_map(|keys| keys.values())
                .map(|k| k.cap.saturating_sub(k.waiting))
                .sum();
            want = want.min(*allowed + room as usize);
        }
        let cooled = last_claim.map_or(now, |at| at + shared.claim_cooldown);
        let claim_at = if claim.is_some()
            || landed.is_some()
            || wake.is_some()
            || want == 0
            || retry_at.is_some_and(|t| t > now)
        {
            None
        } else if want >= enough {
            Some(now)
        } else if free.len() > buffer.len() {
            // Slots would go without: the cooldown lets more free up first.
            Some(cooled)
        } else {
            None
        };
        if claim_at.is_some_and(|at| at <= now) {
            retry_at = None;
            last_claim = Some(now);
            if let Some((_, allowed)) = &mut blocked {
                *allowed = allowed.saturating_sub(want);
            }
            let params = JobClaimParams {
                queue: queue.name.clone(),
                worker: shared.worker_id.clone(),
                limit: u32::try_from(want).unwrap_or(u32::MAX),
                lease: claim_lease,
                reclaim: suspects.running() == 0
                    || suspect_until.is_none_or(|t| Instant::now() >= t),
                now: None,
            };
            let shared = shared.clone();
            claim = Some(Box::pin(async move {
                // The claimed leases last at least from here: the executors count from it.
                let sent = Instant::now();
                let jobs = retry("job_claim", &shared.stop_claiming, || {
                    shared.store.job_claim_run(params.clone())
                })
                .await;
                (sent, want, params.reclaim, jobs)
            }));
            continue;
        }
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            // Before a landed claim: a permit given back goes to a held job first.
            changed = async { freed.as_mut().expect("a dependency gate").changed().await }, if freed.is_some() && (!held.is_empty() || blocked.is_some()) => {
                match changed {
                    Ok(()) => {
                        offer_held = true;
                        let count = *freed.as_mut().expect("a dependency gate").borrow_and_update();
                        if let Some((_, allowed)) = &mut blocked {
                            *allowed += usize::try_from(count.wrapping_sub(seen_freed)).unwrap_or(usize::MAX);
                        }
                        seen_freed = count;
                    }
                    Err(_) => freed = None,
                }
            }
            answer = async {
                match landed.take() {
                    Some(answer) => answer,
                    None => claim.as_mut().expect("a claim in flight").await,
                }
            }, if claim.is_some() || landed.is_some() => {
                claim = None;
                let (sent, asked, reclaim, jobs) = answer;
                let jobs = match jobs {
                    Ok(jobs) => jobs,
                    // Stopped while the store was failing, or a fault retrying does not
                    // fix: the retry helper has logged it; try again after the poll
                    // interval.
                    Err(_) => {
                        retry_at = Some(Instant::now() + shared.poll_interval);
                        continue;
                    }
                };
                if stop.is_cancelled() {
                    // The signal came while the claim was in flight: give these back now
                    // rather than run them after the signal.
                    release(&shared, fresh(jobs), "released a job claimed as shutdown began").await;
                    break;
                }
                let got = jobs.len();
                let mut jobs = jobs;
                // Only a store bug returns more than asked: those go back. What was
                // asked fits: the claim asked for the free slots plus the buffer's room
                // when it was sent, and since then every slot that freed took a
                // buffered job first.
                if got > asked {
                    let extra = jobs.split_off(asked);
                    release(&shared, fresh(extra), "released a job claimed beyond what was asked").await;
                }
                let claimed = Claimed { sent, answered: Instant::now() };
                for job in jobs {
                    let suspect = job.reclaimed.then(|| suspects.started());
                    buffer.push_back(Buffered {
                        job,
                        claimed,
                        suspect,
                        unwritten: Unwritten::default(),
                    });
                }
                if got < asked && (reclaim || suspects.running() > 0) {
                    // The queue had fewer due jobs than asked: wait for a wake-up, or
                    // for a suspect to end (an expired lease may be waiting for it). A
                    // claim that held reclaims back for a suspect that has ended since
                    // is made again at once instead.
                    let queue = &queue.name;
                    let poll = shared.poll_interval;
                    let woken = shared.store.wait_for_jobs(queue, poll);
                    wake = Some(Box::pin(shared.due_soon.wait(queue, poll, woken)));
                }
            }
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => {
                    free.push(permit);
                    while let Ok(permit) = slots.clone().try_acquire_owned() {
                        free.push(permit);
                    }
                    stalled = false;
                }
                Err(_) => break,
            },
            Some(back) = kept_rx.recv() => {
                // The fetcher answers for them from here (they are released with the
                // buffer). Every kept job that has come back is taken in this turn: a
                // batch write's failures come back together, and a turn of this loop
                // for each cost about 1,300 instructions of a failed attempt's 29,000
                // (callgrind, W2's failing drain of 20,000 jobs).
                let mut next = Some(back);
                while let Some(Kept { job, due, claimed, waiting, unwritten }) = next {
                    drop(waiting);
                    let at = kept.partition_point(|(d, _)| *d <= due);
                    let job = Buffered {
                        job,
                        claimed,
                        suspect: None,
                        unwritten,
                    };
                    kept.insert(at, (due, job));
                    next = kept_rx.try_recv().ok();
                }
            }
            _ = tokio::time::sleep_until(kept.front().map_or(now, |(due, _)| *due)), if !kept.is_empty() => {}
            _ = async { wake.as_mut().expect("waiting for a wake-up").await }, if wake.is_some() => wake = None,
            // Not guarded by `running() > 0`: the suspect's slot may come back (the
            // branch above) before this branch is polled, and the end must still wake
            // the fetcher. A stale notification costs one extra claim at most.
            _ = suspects.ended.notified(), if wake.is_some() => wake = None,
            _ = tokio::time::sleep_until(buffer.front().map_or(now, |b| b.claimed.sent + hold)), if !buffer.is_empty() => {}
            _ = tokio::time::sleep_until(claim_at.unwrap_or(now)), if claim_at.is_some() => {}
            _ = tokio::time::sleep_until(retry_at.unwrap_or(now)), if retry_at.is_some() => retry_at = None,
            _ = tokio::time::sleep_until(held.front().map_or(now, |(b, _)| b.claimed.sent + hold)), if !held.is_empty() => {}
            _ = tokio::time::sleep_until(blocked.map_or(now, |(since, _)| since + shared.poll_interval)), if blocked.is_some() => {}
        }
    }
    // Stopped: what is buffered or still being claimed goes back unstarted.
    let answer = match (landed.take(), claim.take()) {
        (Some(answer), _) => Some(answer),
        (None, Some(claim)) => Some(claim.await),
        (None, None) => None,
    };
    if let Some((_, _, _, Ok(jobs))) = answer {
        let now = Instant::now();
        buffer.extend(jobs.into_iter().map(|job| Buffered {
            job,
            claimed: Claimed {
                sent: now,
                answered: now,
            },
            suspect: None,
            unwritten: Unwritten::default(),
        }));
    }
    drop(free);
    buffer.extend(held.into_iter().map(|(b, _)| b));
    // Kept jobs, and those on their way back: a job sent after this is released by its
    // own task (the send fails).
    kept_rx.close();
    while let Ok(back) = kept_rx.try_recv() {
        buffer.push_back(Buffered {
            job: back.job,
            claimed: back.claimed,
            suspect: None,
            unwritten: back.unwritten,
        });
    }
    buffer.extend(kept.into_iter().map(|(_, b)| b));
    if !buffer.is_empty() {
        release(
            &shared,
            buffer.into_iter().map(|b| (b.job, b.unwritten)).collect(),
            "released a claimed job not started when shutdown began",
        )
        .await;
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

/// A queue's kept retries (see [`crate::executor`]): how long a kept job may wait,
/// counted from its claim, and where its task sends it back.
struct Keeping {
    hold: Duration,
    back: mpsc::UnboundedSender<Kept>,
}

/// What [`start`] did with the jobs it was given.
#[derive(Default)]
struct Started {
    /// A suspect was among the jobs started.
    suspect: bool,
    /// Jobs started.
    ran: usize,
    /// Jobs held or turned back at their key's bulkhead in this process.
    at_bulkhead: usize,
    /// The held jobs, each with its key and the slot it was offered (the fetcher
    /// keeps them).
    held: Vec<(Buffered, String, OwnedSemaphorePermit)>,
}

/// Starts an executor for each job the dependency gate lets run (every job when the
/// worker protects no dependency); a job sent back to wait frees its slot at once,
/// and a job held at its bulkhead (`held` given) comes back with its slot.
///
/// `keeping`: on a queue that claims ahead, its jobs' short retries may be kept (see
/// [`crate::executor`]) and come back to the fetcher.
#[allow(clippy::too_many_arguments)]
async fn start(
    shared: &Arc<Shared>,
    queue: &QueueConfig,
    claim_lease: Duration,
    jobs: Vec<Buffered>,
    permits: Vec<OwnedSemaphorePermit>,
    suspects: &Arc<Suspects>,
    held: Option<&mut Held>,
    keeping: Option<&Keeping>,
) -> Started {
    let gates = match &shared.dependencies {
        None => vec![Gate::Run(None); jobs.len()],
        Some(dependencies) => {
            // Never a job claimed ahead: a worker that protects dependencies claims
            // only into free slots (its held jobs were claimed for slots too).
            let claimed: Vec<ClaimedJob> = jobs.iter().map(|b| b.job.clone()).collect();
            match gate::gate(
                shared,
                dependencies,
                queue.concurrency,
                claim_lease,
                &claimed,
                held,
            )
            .await
            {
                Ok(gates) => gates,
                Err(err) => {
                    // Only at shutdown, or a fault retrying does not fix: the jobs go back.
                    tracing::warn!(error = %err, jobs = jobs.len(), "could not ask for dependency permits; releasing the claimed jobs");
                    release(shared, fresh(claimed), "released a claimed job").await;
                    return Started::default();
                }
            }
        }
    };
    let mut started = Started::default();
    for ((buffered, gate), permit) in jobs.into_iter().zip(gates).zip(permits) {
        match gate {
            Gate::Run(ticket) => {
                let Buffered {
                    job,
                    claimed,
                    suspect: running,
                    unwritten,
                } = buffered;
                let running = running.or_else(|| job.reclaimed.then(|| suspects.started()));
                started.suspect |= running.is_some();
                started.ran += 1;
                // Boxed: an attempt's future is about 2.5 KB, and a task copies its
                // future when it is spawned and again when it ends; a box is copied as a
                // pointer (the copies were a tenth of the runtime's CPU in a drain of
                // no-op jobs). Its retry may be kept while the claim's buffer hold lasts
                // (see crate::executor); the kept job comes back here.
                let keep_until = keeping.map(|k| claimed.sent + k.hold);
                let run = Box::pin(executor::run(
                    shared.clone(),
                    claim_lease,
                    claimed,
                    job,
                    shared.completer.slot(permit),
                    ticket,
                    keep_until,
                    unwritten,
                ));
                let back = keeping.map(|k| k.back.clone());
                let shared = shared.clone();
                tokio::spawn(async move {
                    if let (Some(kept), Some(back)) = (run.await, back) {
                        if let Err(unsent) = back.send(kept) {
                            // The fetcher has stopped: the job goes back unstarted.
                            // Boxed: the task holds what its future may hold at once,
                            // and a release's future is the larger part of it.
                            let Kept {
                                job,
                                waiting,
                                unwritten,
                                ..
                            } = unsent.0;
                            let why = "released a kept job as shutdown began";
                            Box::pin(release(&shared, vec![(job, unwritten)], why)).await;
                            drop(waiting);
                        }
                    }
                    drop(running);
                });
            }
            Gate::Skip { over_local } => {
                started.at_bulkhead += usize::from(over_local);
                drop(permit);
            }
            Gate::Hold(key) => {
                started.at_bulkhead += 1;
                started.held.push((buffered, key, permit));
            }
        }
    }
    started
}

/// Takes held jobs out of the count per key (they are offered slots again, or given
/// back) and returns them.
fn unhold(
    mut counts: Option<&mut Held>,
    jobs: impl Iterator<Item = (Buffered, String)>,
) -> Vec<Buffered> {
    jobs.map(|(job, key)| {
        if let Some(count) = counts.as_deref_mut().and_then(|c| c.get_mut(&key)) {
            count.waiting = count.waiting.saturating_sub(1);
        }
        job
    })
    .collect()
}

/// Claimed jobs with no failures unwritten, to [`release`].
fn fresh(jobs: Vec<ClaimedJob>) -> Vec<(ClaimedJob, Unwritten)> {
    jobs.into_iter()
        .map(|job| (job, Unwritten::default()))
        .collect()
}

/// Gives claimed, unstarted jobs back (fenced, back to `ready`, the attempt given
/// back; a kept job's unwritten failures written with it), all at once so the
/// completer writes them in one call.
async fn release(shared: &Shared, jobs: Vec<(ClaimedJob, Unwritten)>, why: &'static str) {
    let sends = jobs.into_iter().map(|(job, unwritten)| {
        let lease = LeaseRef {
            id: job.id,
            lease_token: job.lease_token,
        };
        async move {
            match shared.completer.send(Ack::Release(lease, unwritten)).await {
                Ok(fenced) => {
                    tracing::info!(job_id = job.id, queue = %job.queue, result = ?fenced, "{why}")
                }
                Err(err) => {
                    tracing::warn!(job_id = job.id, queue = %job.queue, error = %err, "{why}: could not release it; it is reclaimed when its lease expires")
                }
            }
        }
    });
    futures::future::join_all(sends).await;
}
