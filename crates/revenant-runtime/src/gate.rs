//! The dependency gate: between a claim and the handler, claimed jobs that call a
//! dependency ask the store for a permit (one call per key per claimed batch); after
//! each attempt, its answer is reported for the breaker (batched by a reporter task).
//!
//! - A job's key comes from its handler ([`crate::Handler::dependency`]; the
//!   `http` kind says the URL's host) or from the kind's key given to
//!   [`crate::WorkerBuilder::dependency`]. A job without one runs as before.
//! - [`revenant_core::Store::dependency_acquire`] answers per job: run (after a short wait
//!   when the rate limit paces it), run as the breaker's probe, or wait: the store has
//!   already put the job back in `ready` with its attempt given back.
//! - After the attempt, successes and transient failures (retry, retry-after,
//!   timeout) are counted for the key and sent every `report_interval` in one
//!   [`revenant_core::Store::dependency_report`] per key; a probe's answer is sent at once, so
//!   the breaker closes as soon as the dependency is back. Permanent failures, panics,
//!   decode errors and cancels are not counted: they say nothing about the
//!   dependency.
//!
//! A storage error is retried like every other store call; if the gate gives up (at
//! shutdown), the batch's jobs are released (attempt given back), never run
//! unprotected.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::metrics;
use crate::store_retry::retry;
use crate::worker::Shared;
use revenant_core::dependency::{Bulkhead, DependencyPolicies, ProbeOutcome, RateLimit};
use revenant_core::job::{ClaimedJob, JobId};
use revenant_core::names;
use revenant_core::outcome::Outcome;
use revenant_core::store::{
    DependencyAcquireParams, DependencyReportParams, LeaseRef, Permit, PermitRequest, ProbeReport,
    Store,
};

/// A worker's dependency settings (see [`crate::WorkerBuilder::dependencies`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyConfig {
    /// The policies: one for every key, overrides per key.
    pub policies: DependencyPolicies,
    /// How often counted answers are sent to the store. Default 200 ms: the breaker
    /// sees a failing dependency within about that much of the window filling up,
    /// and a busy worker makes five report calls a second per key, not one per job.
    /// A probe's answer is sent at once whatever this says.
    pub report_interval: Duration,
}

impl Default for DependencyConfig {
    fn default() -> Self {
        DependencyConfig {
            policies: DependencyPolicies::default(),
            report_interval: Duration::from_millis(200),
        }
    }
}

impl DependencyConfig {
    /// These policies with the default report interval.
    pub fn new(policies: DependencyPolicies) -> Self {
        DependencyConfig {
            policies,
            ..DependencyConfig::default()
        }
    }
}

/// What the runtime keeps for dependencies while it runs.
pub(crate) struct Dependencies {
    pub(crate) config: DependencyConfig,
    /// Per kind: the key jobs of that kind call when their handler does not say.
    pub(crate) kinds: HashMap<String, String>,
    pub(crate) reporter: Reporter,
    /// Per key: this process's pacing (see [`Dependencies::pace`]).
    pub(crate) pacers: std::sync::Mutex<HashMap<String, Pacer>>,
    /// Per key: this process's bulkhead (see [`Dependencies::reserve`]).
    pub(crate) bulkheads: std::sync::Mutex<HashMap<String, Local>>,
    /// Counts bulkhead permits given back (an attempt ended, or a reservation went
    /// unused): the fetchers offer the jobs they hold at a bulkhead again when it
    /// moves.
    pub(crate) freed: tokio::sync::watch::Sender<u64>,
}

/// One key's bulkhead in this process: the attempts in flight, and the adaptive
/// limit when the policy asks for one.
#[derive(Debug, Clone, Default)]
pub(crate) struct Local {
    /// Attempts holding a permit (reserved before the store call, given back for
    /// the jobs that did not run, and when each attempt ends).
    in_flight: u32,
    /// The adaptive (AIMD) limit, when the policy is adaptive: starts at the fixed
    /// limit, halves on a failure or a slow call, grows by one per limit's worth of
    /// fast successes, never above the fixed limit nor below 1.
    adaptive: Option<f64>,
    /// The fixed limit last used for this key (the adaptive limit's ceiling).
    ceiling: u32,
}

impl Local {
    /// The limit now, for a queue whose fixed limit is `fixed`.
    pub(crate) fn limit(&self, fixed: u32) -> u32 {
        match self.adaptive {
            Some(limit) => (limit.floor() as u32).clamp(1, fixed.max(1)),
            None => fixed,
        }
    }

    /// Moves the adaptive limit after one answer (AIMD).
    pub(crate) fn adapt(&mut self, answer: Answer) {
        let ceiling = f64::from(self.ceiling.max(1));
        let limit = self.adaptive.unwrap_or(ceiling);
        self.adaptive = Some(match answer {
            Answer::Success => (limit + 1.0 / limit.max(1.0)).min(ceiling),
            Answer::Failure | Answer::Slow => (limit / 2.0).max(1.0),
            Answer::Neutral => limit,
        });
    }
}

/// One key's pacing in this process.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    /// The next free slot handed out.
    next: tokio::time::Instant,
    /// When the sends of the last window went, oldest first (at most
    /// [`RateLimit::window_requests`]).
    sent: VecDeque<tokio::time::Instant>,
}

impl Pacer {
    /// The next slot, taken at `now`: never closer to the previous one than the
    /// interval, beyond the burst.
    fn slot(&mut self, now: tokio::time::Instant, rate: &RateLimit) -> tokio::time::Instant {
        let (t, tolerance) = spacing(rate);
        let slot = now.max(self.next.checked_sub(tolerance).unwrap_or(now));
        self.next = self.next.max(slot) + t;
        slot
    }

    /// Whether a send may go at `now`, counted when it may: `None` when fewer than
    /// [`RateLimit::window_requests`] went in the last [`RateLimit::window`], else
    /// when the oldest of them leaves it. Slots are spaced by the interval, but timers
    /// that fire late (a busy machine, a runtime held up for a few milliseconds) wake
    /// several slots at once. Sent at once they could put more than the limit into
    /// one of the provider's seconds; spaced strictly, every late wake-up would lose
    /// its lateness for good and the worker would fall behind the rate. Counting the
    /// window lets a late worker catch up as far as the window allows, and no further.
    fn hold_back(
        &mut self,
        now: tokio::time::Instant,
        rate: &RateLimit,
    ) -> Option<tokio::time::Instant> {
        while let Some(&oldest) = self.sent.front() {
            if now.saturating_duration_since(oldest) >= rate.window {
                self.sent.pop_front();
            } else {
                break;
            }
        }
        if self.sent.len() >= rate.window_requests() {
            return self.sent.front().map(|&oldest| oldest + rate.window);
        }
        self.sent.push_back(now);
        None
    }
}

/// A job that may run, and what the runtime must do for its dependency.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ticket {
    pub(crate) key: String,
    /// Sent as the breaker's probe: its answer is reported at once.
    pub(crate) probe: bool,
    /// Holds one of this process's bulkhead permits for the key (given back when the
    /// attempt's answer is recorded), and a shared one in the store when the policy
    /// has a bulkhead (freed by the report).
    pub(crate) bulkhead: Option<Bulkhead>,
    /// Wait this long before running (the rate limit's pacing).
    pub(crate) wait: Duration,
    /// The key's rate limit: sends of this process are spaced by its interval.
    pub(crate) rate: Option<RateLimit>,
}

/// What the fetcher does with one claimed job.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Gate {
    /// Run it; with a ticket when it calls a protected dependency.
    Run(Option<Ticket>),
    /// Not now: the store sent it back to `ready` (or its lease was lost).
    /// `over_local`: it was past this process's bulkhead for its key.
    Skip { over_local: bool },
    /// Not now, and not the store's business: its key's bulkhead in this process is
    /// full, so the job waits in the fetcher (its lease held, no slot, no store write)
    /// until an attempt of a protected key ends. Carries the key.
    Hold(String),
}

/// The jobs waiting in a fetcher at their bulkhead ([`Gate::Hold`]), per key: how
/// many, and how many may (the key's limit in this process). `gate` adds the ones it
/// holds; the fetcher takes away the ones it offers again or gives back.
pub(crate) type Held = HashMap<String, HeldKey>;

/// One key's count in [`Held`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeldKey {
    pub(crate) waiting: u32,
    pub(crate) cap: u32,
}

impl Dependencies {
    /// This process's next slot for `ticket`'s key, taken now: never closer to the
    /// previous one than the rate limit's interval (beyond its burst). The executor
    /// takes it when it wakes for the turn the store gave it (`Ticket::wait`), so a
    /// worker that claimed several jobs late sends them spaced out rather than in one
    /// burst. The store's schedule keeps every worker together to the rate; this only
    /// spreads one worker's sends, it never adds any. `None` without a rate limit.
    pub(crate) fn pace(&self, ticket: &Ticket) -> Option<tokio::time::Instant> {
        let rate = ticket.rate?;
        Some(self.pacer(&ticket.key, |pacer, now| pacer.slot(now, &rate)))
    }

    /// Asked by a job woken for its slot, just before it sends: `None`, go now (the
    /// send is counted); `Some(at)`, sleep until `at` and ask again. See
    /// [`Pacer::hold_back`].
    pub(crate) fn hold_back(&self, ticket: &Ticket) -> Option<tokio::time::Instant> {
        let rate = ticket.rate?;
        self.pacer(&ticket.key, |pacer, now| pacer.hold_back(now, &rate))
    }

    fn pacer<T>(&self, key: &str, f: impl FnOnce(&mut Pacer, tokio::time::Instant) -> T) -> T {
        let now = tokio::time::Instant::now();
        let mut pacers = self
            .pacers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let pacer = pacers.entry(key.to_string()).or_insert_with(|| Pacer {
            next: now,
            sent: VecDeque::new(),
        });
        f(pacer, now)
    }

    /// Reserves up to `wanted` of this process's permits for `key` under `bulkhead`
    /// (its limit for a queue of `slots` slots, or the adaptive limit below it):
    /// returns how many were reserved. Give back the unused ones with
    /// [`Dependencies::release`].
    pub(crate) fn reserve(&self, key: &str, bulkhead: &Bulkhead, slots: usize, wanted: u32) -> u32 {
        let fixed = bulkhead.limit_for(slots);
        let mut locals = self
            .bulkheads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let local = locals.entry(key.to_string()).or_default();
        local.ceiling = fixed;
        if !bulkhead.adaptive {
            local.adaptive = None;
        }
        let limit = local.limit(fixed);
        let got = limit.saturating_sub(local.in_flight).min(wanted);
        local.in_flight += got;
        got
    }

    /// Takes one permit for `key` whatever the limit (the breaker's probe).
    pub(crate) fn force(&self, key: &str, bulkhead: &Bulkhead, slots: usize) {
        let mut locals = self
            .bulkheads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let local = locals.entry(key.to_string()).or_default();
        local.ceiling = bulkhead.limit_for(slots);
        local.in_flight += 1;
    }

    /// Gives back `n` of this process's permits for `key`.
    pub(crate) fn release(&self, key: &str, n: u32) {
        if n == 0 {
            return;
        }
        let mut locals = self
            .bulkheads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(local) = locals.get_mut(key) {
            local.in_flight = local.in_flight.saturating_sub(n);
        }
        drop(locals);
        self.freed
            .send_modify(|count| *count = count.wrapping_add(u64::from(n)));
    }

    /// Counts one answer for `key`'s adaptive limit.
    pub(crate) fn adapt(&self, key: &str, answer: Answer) {
        let mut locals = self
            .bulkheads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(local) = locals.get_mut(key) {
            if local.adaptive.is_some() || local.ceiling > 0 {
                local.adapt(answer);
            }
        }
    }

    /// The dependency a job calls: its handler's answer, else its kind's key. A key
    /// that is not a valid key is ignored (logged), so the job runs unprotected
    /// rather than not at all.
    fn key_of(&self, shared: &Shared, job: &ClaimedJob) -> Option<String> {
        let key = shared
            .registry
            .dependency(&job.kind, &job.payload)
            .or_else(|| self.kinds.get(&job.kind).cloned())?;
        match names::validate_key("dependency", &key) {
            Ok(()) => Some(key),
            Err(err) => {
                tracing::warn!(job_id = job.id, kind = %job.kind, error = %err, "the job's dependency key is not valid; it runs unprotected");
                None
            }
        }
    }
}

/// A rate limit's interval, and how far ahead of it its burst lets a send go.
fn spacing(rate: &RateLimit) -> (Duration, Duration) {
    let t = Duration::from_micros(u64::try_from(rate.interval_us()).unwrap_or(1));
    (t, t * rate.burst.saturating_sub(1))
}

/// Asks for permits for a claimed batch: one store call per key, in claim order.
/// Returns one [`Gate`] per job, in order. `Err` when the store could not be reached
/// before shutdown: the caller releases the batch.
///
/// With `held` (the fetcher's count of jobs waiting at their bulkhead), jobs past
/// this process's bulkhead for their key are held ([`Gate::Hold`]) rather than sent
/// to the store to be turned back, as many per key as the key's limit: the next
/// attempt of that key to end frees a permit for one of them, with no store write in
/// between. Jobs past that many still go to the store, which turns them back with
/// the bulkhead's wait.
pub(crate) async fn gate(
    shared: &Shared,
    deps: &Dependencies,
    slots: usize,
    lease: Duration,
    jobs: &[ClaimedJob],
    mut held: Option<&mut Held>,
) -> Result<Vec<Gate>, revenant_core::StoreError> {
    let mut gates: Vec<Gate> = vec![Gate::Run(None); jobs.len()];
    let retry_policies = shared.policies.cached();
    let mut by_key: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let Some(key) = deps.key_of(shared, job) else {
            continue;
        };
        if deps.config.policies.resolve(&key).is_off() {
            continue;
        }
        match by_key.iter_mut().find(|(k, _)| *k == key) {
            Some((_, indexes)) => indexes.push(i),
            None => by_key.push((key, vec![i])),
        }
    }
    for (key, indexes) in by_key {
        let policy = deps.config.policies.resolve(&key).clone();
        let rate = policy.rate_limit;
        let bulkhead = policy.bulkhead;
        // This process's permits, reserved before the store call so two fetchers
        // gating the same key at once cannot both take the last one.
        let reserved = bulkhead.map(|b| {
            deps.reserve(
                &key,
                &b,
                slots,
                u32::try_from(indexes.len()).unwrap_or(u32::MAX),
            )
        });
        // Past the reservation: held here while the key has room for waiting jobs.
        let within = reserved.map_or(indexes.len(), |r| r as usize);
        let mut holding = 0;
        if let (Some(b), Some(held)) = (&bulkhead, held.as_deref_mut()) {
            let count = held.entry(key.clone()).or_default();
            count.cap = b.limit_for(slots);
            let room = count.cap.saturating_sub(count.waiting) as usize;
            holding = indexes.len().saturating_sub(within).min(room);
            count.waiting += u32::try_from(holding).unwrap_or(u32::MAX);
        }
        for &i in &indexes[within..within + holding] {
            metrics::dependency_permit(&key, "hold");
            gates[i] = Gate::Hold(key.clone());
        }
        let indexes: Vec<usize> = indexes[..within]
            .iter()
            .chain(&indexes[within + holding..])
            .copied()
            .collect();
        if indexes.is_empty() {
            continue;
        }
        let requests: Vec<PermitRequest> = indexes
            .iter()
            .map(|&i| {
                let job = &jobs[i];
                let retry_policy = retry_policies.resolve(&job.queue, &job.kind);
                // The backoff its next retry would wait: what a retry over budget waits.
                let failures = u32::try_from(job.attempts.saturating_sub(1).max(1)).unwrap_or(1);
                PermitRequest {
                    lease: LeaseRef {
                        id: job.id,
                        lease_token: job.lease_token,
                    },
                    retry_delay: retry_policy.retry_delay(failures, None, &mut rand::rng()),
                }
            })
            .collect();
        let params = DependencyAcquireParams {
            dependency: key.clone(),
            policy,
            worker: shared.worker_id.clone(),
            lease,
            requests,
            local_free: reserved,
            now: None,
        };
        let acquired = match retry("dependency_acquire", &shared.stop_claiming, || {
            shared.store.dependency_acquire(params.clone())
        })
        .await
        {
            Ok(acquired) => acquired,
            Err(err) => {
                deps.release(&key, reserved.unwrap_or(0));
                return Err(err);
            }
        };
        let mut used = 0;
        for (n, (&i, permit)) in indexes.iter().zip(acquired.permits).enumerate() {
            let job = &jobs[i];
            gates[i] = match permit {
                Permit::Run { wait } => {
                    metrics::dependency_permit(&key, "run");
                    used += 1;
                    Gate::Run(Some(Ticket {
                        key: key.clone(),
                        probe: false,
                        bulkhead,
                        wait,
                        rate,
                    }))
                }
                Permit::Probe => {
                    metrics::dependency_permit(&key, "probe");
                    // A probe is let through whatever the limit (one at a time); it
                    // takes a permit like any attempt.
                    if reserved.is_some_and(|r| used >= r) {
                        if let Some(b) = &bulkhead {
                            deps.force(&key, b, slots);
                        }
                    } else {
                        used += 1;
                    }
                    tracing::info!(job_id = job.id, dependency = %key, worker = %shared.worker_id, "breaker half-open: sending this job as the probe");
                    Gate::Run(Some(Ticket {
                        key: key.clone(),
                        probe: true,
                        bulkhead,
                        wait: Duration::ZERO,
                        rate: None,
                    }))
                }
                Permit::Wait { reason, until } => {
                    metrics::dependency_permit(&key, reason.as_str());
                    tracing::debug!(job_id = job.id, queue = %job.queue, dependency = %key, reason = %reason, until = %until, "job waits on its dependency; attempt given back");
                    Gate::Skip {
                        over_local: n >= within,
                    }
                }
                Permit::LeaseLost => {
                    metrics::dependency_permit(&key, "lease_lost");
                    tracing::warn!(job_id = job.id, dependency = %key, "lease lost before the job could start");
                    Gate::Skip { over_local: false }
                }
            };
        }
        if let Some(reserved) = reserved {
            deps.release(&key, reserved.saturating_sub(used));
        }
    }
    Ok(gates)
}

/// How an attempt's outcome counts for its dependency's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Success,
    Failure,
    /// Ran past the breaker's slow-call duration (counted while still running).
    Slow,
    Neutral,
}

impl Answer {
    /// Success counts as a success; a transient failure (retry, retry-after,
    /// timeout) as a failure; anything else (permanent, panic, decode error, unknown
    /// kind, snooze, cancel) says nothing about the dependency.
    pub(crate) fn of(outcome: &Outcome) -> Answer {
        match outcome {
            Outcome::Success => Answer::Success,
            Outcome::Retry { .. } | Outcome::RetryAfter { .. } | Outcome::Timeout { .. } => {
                Answer::Failure
            }
            _ => Answer::Neutral,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Answer::Success => "success",
            Answer::Failure => "failure",
            Answer::Slow => "slow",
            Answer::Neutral => "neutral",
        }
    }

    fn probe_outcome(self) -> ProbeOutcome {
        match self {
            Answer::Success => ProbeOutcome::Success,
            // A probe that is slow is a probe that failed: still not healthy.
            Answer::Failure | Answer::Slow => ProbeOutcome::Failure,
            Answer::Neutral => ProbeOutcome::Neutral,
        }
    }
}

struct Observation {
    key: String,
    answer: Answer,
    /// The probe's job, when the attempt was the probe (and this is its answer).
    probe: Option<JobId>,
    /// The job, when its attempt ended and held a shared bulkhead permit.
    finished: Option<JobId>,
}

/// The executors' side of the reporter.
#[derive(Clone)]
pub(crate) struct Reporter {
    tx: mpsc::UnboundedSender<Observation>,
}

impl Reporter {
    /// Counts one attempt's answer for `ticket`'s dependency: `ended` when the
    /// attempt is over (its bulkhead permits are freed), not when a running attempt
    /// is counted slow.
    pub(crate) fn record(&self, ticket: &Ticket, job: JobId, answer: Answer, ended: bool) {
        self.record_once(ticket, job, answer, ended, true);
    }

    /// [`Reporter::record`]; `count` false when the attempt's answer was counted
    /// already (slow, while it ran): it only ends now.
    pub(crate) fn record_once(
        &self,
        ticket: &Ticket,
        job: JobId,
        answer: Answer,
        ended: bool,
        count: bool,
    ) {
        if count {
            metrics::dependency_answer(&ticket.key, answer.label());
        }
        let counted = answer != Answer::Neutral || ended;
        let observation = Observation {
            key: ticket.key.clone(),
            answer,
            probe: (ticket.probe && counted).then_some(job),
            finished: (ended && ticket.bulkhead.is_some()).then_some(job),
        };
        // The reporter only stops after every executor has: nothing to do if gone.
        let _ = self.tx.send(observation);
    }
}

/// Starts the reporter; it ends when `stop` fires (after sending what it holds) or
/// every handle is dropped. `abandon` ends its store retries.
pub(crate) fn spawn_reporter(
    store: Arc<dyn Store>,
    config: DependencyConfig,
    stop: CancellationToken,
    abandon: CancellationToken,
) -> (Reporter, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(report_loop(store, config, rx, stop, abandon));
    (Reporter { tx }, task)
}

#[derive(Default)]
struct Counts {
    successes: u64,
    failures: u64,
    slow: u64,
    finished: Vec<JobId>,
}

impl Counts {
    fn count(&mut self, observation: &Observation) {
        match observation.answer {
            Answer::Success => self.successes += 1,
            Answer::Failure => self.failures += 1,
            Answer::Slow => self.slow += 1,
            Answer::Neutral => {}
        }
        self.finished.extend(observation.finished);
    }

    fn is_empty(&self) -> bool {
        self.successes + self.failures + self.slow == 0 && self.finished.is_empty()
    }
}

async fn report_loop(
    store: Arc<dyn Store>,
    config: DependencyConfig,
    mut rx: mpsc::UnboundedReceiver<Observation>,
    stop: CancellationToken,
    abandon: CancellationToken,
) {
    let mut pending: HashMap<String, Counts> = HashMap::new();
    let mut tick = tokio::time::interval(config.report_interval.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            observation = rx.recv() => {
                let Some(observation) = observation else {
                    flush_all(store.as_ref(), &config, &mut pending, &abandon).await;
                    return;
                };
                pending.entry(observation.key.clone()).or_default().count(&observation);
                if let Some(job) = observation.probe {
                    let counts = pending.remove(&observation.key).unwrap_or_default();
                    let probe = ProbeReport { job, outcome: observation.answer.probe_outcome() };
                    send(store.as_ref(), &config, &observation.key, counts, Some(probe), &abandon).await;
                }
            }
            _ = tick.tick() => flush_all(store.as_ref(), &config, &mut pending, &abandon).await,
            _ = stop.cancelled() => {
                while let Ok(observation) = rx.try_recv() {
                    pending.entry(observation.key.clone()).or_default().count(&observation);
                    if let Some(job) = observation.probe {
                        let counts = pending.remove(&observation.key).unwrap_or_default();
                        let probe = ProbeReport { job, outcome: observation.answer.probe_outcome() };
                        send(store.as_ref(), &config, &observation.key, counts, Some(probe), &abandon).await;
                    }
                }
                flush_all(store.as_ref(), &config, &mut pending, &abandon).await;
                return;
            }
        }
    }
}

async fn flush_all(
    store: &dyn Store,
    config: &DependencyConfig,
    pending: &mut HashMap<String, Counts>,
    abandon: &CancellationToken,
) {
    for (key, counts) in pending.drain() {
        if !counts.is_empty() {
            send(store, config, &key, counts, None, abandon).await;
        }
    }
}

async fn send(
    store: &dyn Store,
    config: &DependencyConfig,
    key: &str,
    counts: Counts,
    probe: Option<ProbeReport>,
    abandon: &CancellationToken,
) {
    let params = DependencyReportParams {
        dependency: key.to_string(),
        policy: config.policies.resolve(key).clone(),
        successes: counts.successes,
        failures: counts.failures,
        slow: counts.slow,
        finished: counts.finished,
        probe,
        now: None,
    };
    match retry("dependency_report", abandon, || {
        store.dependency_report(params.clone())
    })
    .await
    {
        Ok(state) => {
            if probe.is_some() {
                tracing::info!(dependency = %key, breaker = %state.breaker, "probe answered");
            }
            metrics::breaker_gauges(&state);
        }
        Err(err) => {
            tracing::warn!(dependency = %key, error = %err, "could not report answers to the dependency's breaker; they are not counted")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends woken on their slots go at once; sends that woke late together catch up
    /// as far as the window allows and no further: no window ever holds more than the
    /// limit, and the worker is back on schedule within a window.
    #[test]
    fn a_late_wake_up_catches_up_within_the_window_and_no_further() {
        // 100 a second: 10 ms apart, at most 10 in any 100 ms.
        let rate = RateLimit {
            window: Duration::from_millis(100),
            ..RateLimit::per_second(100.0)
        };
        assert_eq!(rate.window_requests(), 10);
        let t0 = tokio::time::Instant::now();
        let mut pacer = Pacer {
            next: t0,
            sent: VecDeque::new(),
        };
        let slots: Vec<_> = (0..60).map(|_| pacer.slot(t0, &rate)).collect();
        for (i, slot) in slots.iter().enumerate() {
            assert_eq!(*slot - t0, Duration::from_millis(10) * i as u32);
        }
        // Each wakes 0.5 ms after its slot, except slots 20..30: the runtime is held
        // up and they all wake at once, 95 ms after the first of them was due.
        let mut waiting: Vec<tokio::time::Instant> = slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if (20..30).contains(&i) {
                    slots[20] + Duration::from_millis(95)
                } else {
                    *s + Duration::from_micros(500)
                }
            })
            .collect();
        let mut sent = vec![];
        while !waiting.is_empty() {
            waiting.sort();
            let now = waiting.remove(0);
            match pacer.hold_back(now, &rate) {
                None => sent.push(now),
                Some(at) => {
                    assert!(at > now);
                    waiting.push(at);
                }
            }
        }
        sent.sort();
        for (i, start) in sent.iter().enumerate() {
            let within = sent[i..]
                .iter()
                .take_while(|s| **s - *start < rate.window)
                .count();
            assert!(
                within <= 10,
                "{within} sends in 100 ms from {:?}",
                *start - t0
            );
        }
        assert_eq!(sent.len(), 60);
        // Caught up: the last send within a window of its slot. Strict spacing (one
        // interval after the previous send) would have lost the 95 ms for good and
        // sent the last at 685 ms or later.
        let last = *sent.last().unwrap() - t0;
        assert!(last < Duration::from_millis(600), "last send at {last:?}");
    }

    /// AIMD: halves on a failure or a slow call (never below 1), grows back by one
    /// per limit's worth of fast successes (never above the fixed limit).
    #[test]
    fn the_adaptive_limit_halves_on_trouble_and_grows_back_by_one_per_limit() {
        let mut local = Local {
            ceiling: 8,
            ..Local::default()
        };
        assert_eq!(local.limit(8), 8, "not adapting yet: the fixed limit");
        local.adapt(Answer::Success);
        assert_eq!(local.limit(8), 8, "never above the fixed limit");
        local.adapt(Answer::Slow);
        assert_eq!(local.limit(8), 4);
        local.adapt(Answer::Failure);
        local.adapt(Answer::Failure);
        local.adapt(Answer::Failure);
        assert_eq!(local.limit(8), 1, "never below 1");
        local.adapt(Answer::Neutral);
        assert_eq!(local.limit(8), 1, "a neutral answer moves nothing");
        // From 1 to 4: about one per limit's worth (1 + 2 + 3), a little more as
        // each success adds 1 / the limit so far (7).
        let mut successes = 0;
        while local.limit(8) < 4 {
            local.adapt(Answer::Success);
            successes += 1;
        }
        assert!((6..=8).contains(&successes), "{successes}");
        for _ in 0..100 {
            local.adapt(Answer::Success);
        }
        assert_eq!(local.limit(8), 8, "back to the fixed limit");
        assert_eq!(local.limit(5), 5, "a smaller fixed limit caps it");
    }

    #[test]
    fn the_window_counts_the_rate_and_the_burst() {
        let rate = RateLimit::per_second(47.0);
        assert_eq!(rate.window_requests(), 47);
        assert_eq!(rate.with_burst(4).window_requests(), 50);
        let scaled = revenant_core::dependency::DependencyPolicy::off()
            .with_rate_limit(rate)
            .time_scaled(30.0)
            .rate_limit
            .unwrap();
        assert_eq!(scaled.window_requests(), 47, "{scaled:?}");
        assert_eq!(RateLimit::per_second(0.5).window_requests(), 1);
    }
}
