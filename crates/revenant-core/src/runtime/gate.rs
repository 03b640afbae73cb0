//! The dependency gate: between a claim and the handler, claimed jobs that call a
//! dependency ask the store for a permit (one call per key per claimed batch); after
//! each attempt, its answer is reported for the breaker (batched by a reporter task).
//!
//! - A job's key comes from its handler ([`crate::runtime::Handler::dependency`]; the
//!   `http` kind says the URL's host) or from the kind's key given to
//!   [`crate::runtime::WorkerBuilder::dependency`]. A job without one runs as before.
//! - [`crate::Store::dependency_acquire`] answers per job: run (after a short wait
//!   when the rate limit paces it), run as the breaker's probe, or wait: the store has
//!   already put the job back in `ready` with its attempt given back.
//! - After the attempt, successes and transient failures (retry, retry-after,
//!   timeout) are counted for the key and sent every `report_interval` in one
//!   [`crate::Store::dependency_report`] per key; a probe's answer is sent at once, so
//!   the breaker closes as soon as the dependency is back. Permanent failures, panics,
//!   decode errors and cancels are not counted: they say nothing about the
//!   dependency.
//!
//! A storage error is retried like every other store call; if the gate gives up (at
//! shutdown), the batch's jobs are released (attempt given back), never run
//! unprotected.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::dependency::{DependencyPolicies, ProbeOutcome, RateLimit};
use crate::job::{Job, JobId};
use crate::names;
use crate::outcome::Outcome;
use crate::runtime::metrics;
use crate::runtime::store_retry::retry;
use crate::runtime::worker::Shared;
use crate::store::{
    DependencyAcquireParams, DependencyReportParams, LeaseRef, Permit, PermitRequest, ProbeReport,
    Store,
};

/// A worker's dependency settings (see [`crate::runtime::WorkerBuilder::dependencies`]).
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
    /// Per key: this process's next free send time (see [`Dependencies::pace`]).
    pub(crate) pacers: std::sync::Mutex<HashMap<String, tokio::time::Instant>>,
}

/// A job that may run, and what the runtime must do for its dependency.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ticket {
    pub(crate) key: String,
    /// Sent as the breaker's probe: its answer is reported at once.
    pub(crate) probe: bool,
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
    Skip,
}

impl Dependencies {
    /// This process's next send of `ticket`'s key, taken now: never closer to the
    /// previous one than the rate limit's interval (beyond its burst). The executor
    /// takes it when it wakes for the turn the store gave it (`Ticket::wait`), so a
    /// worker that was held up (a busy machine, a stalled runtime) and wakes several
    /// jobs at once sends them spaced out rather than in one burst. The store's
    /// schedule keeps every worker together to the rate; this only spreads one
    /// worker's sends, it never adds any. `None` without a rate limit.
    pub(crate) fn pace(&self, ticket: &Ticket) -> Option<tokio::time::Instant> {
        let rate = ticket.rate?;
        let now = tokio::time::Instant::now();
        let t = Duration::from_micros(u64::try_from(rate.interval_us()).unwrap_or(1));
        let tolerance = t * rate.burst.saturating_sub(1);
        let mut pacers = self
            .pacers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let next = pacers.entry(ticket.key.clone()).or_insert(now);
        let slot = now.max(next.checked_sub(tolerance).unwrap_or(now));
        *next = (*next).max(slot) + t;
        Some(slot)
    }

    /// The dependency a job calls: its handler's answer, else its kind's key. A key
    /// that is not a valid key is ignored (logged), so the job runs unprotected
    /// rather than not at all.
    fn key_of(&self, shared: &Shared, job: &Job) -> Option<String> {
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

/// Asks for permits for a claimed batch: one store call per key, in claim order.
/// Returns one [`Gate`] per job, in order. `Err` when the store could not be reached
/// before shutdown: the caller releases the batch.
pub(crate) async fn gate(
    shared: &Shared,
    deps: &Dependencies,
    lease: Duration,
    jobs: &[Job],
) -> Result<Vec<Gate>, crate::StoreError> {
    let mut gates: Vec<Gate> = vec![Gate::Run(None); jobs.len()];
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
        let requests: Vec<PermitRequest> = indexes
            .iter()
            .map(|&i| {
                let job = &jobs[i];
                let retry_policy = shared.policies.resolve(&job.queue, &job.kind);
                // The backoff its next retry would wait: what a retry over budget waits.
                let failures = u32::try_from(job.attempts.saturating_sub(1).max(1)).unwrap_or(1);
                PermitRequest {
                    lease: LeaseRef {
                        id: job.id,
                        lease_token: job.lease_token.unwrap_or(crate::LeaseToken(0)),
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
            now: None,
        };
        let acquired = retry("dependency_acquire", &shared.stop_claiming, || {
            shared.store.dependency_acquire(params.clone())
        })
        .await?;
        for (&i, permit) in indexes.iter().zip(acquired.permits) {
            let job = &jobs[i];
            gates[i] = match permit {
                Permit::Run { wait } => {
                    metrics::dependency_permit(&key, "run");
                    Gate::Run(Some(Ticket {
                        key: key.clone(),
                        probe: false,
                        wait,
                        rate,
                    }))
                }
                Permit::Probe => {
                    metrics::dependency_permit(&key, "probe");
                    tracing::info!(job_id = job.id, dependency = %key, worker = %shared.worker_id, "breaker half-open: sending this job as the probe");
                    Gate::Run(Some(Ticket {
                        key: key.clone(),
                        probe: true,
                        wait: Duration::ZERO,
                        rate: None,
                    }))
                }
                Permit::Wait { reason, until } => {
                    metrics::dependency_permit(&key, reason.as_str());
                    tracing::debug!(job_id = job.id, queue = %job.queue, dependency = %key, reason = %reason, until = %until, "job waits on its dependency; attempt given back");
                    Gate::Skip
                }
                Permit::LeaseLost => {
                    metrics::dependency_permit(&key, "lease_lost");
                    tracing::warn!(job_id = job.id, dependency = %key, "lease lost before the job could start");
                    Gate::Skip
                }
            };
        }
    }
    Ok(gates)
}

/// How an attempt's outcome counts for its dependency's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Success,
    Failure,
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
            Answer::Neutral => "neutral",
        }
    }

    fn probe_outcome(self) -> ProbeOutcome {
        match self {
            Answer::Success => ProbeOutcome::Success,
            Answer::Failure => ProbeOutcome::Failure,
            Answer::Neutral => ProbeOutcome::Neutral,
        }
    }
}

struct Observation {
    key: String,
    answer: Answer,
    /// The probe's job, when the attempt was the probe.
    probe: Option<JobId>,
}

/// The executors' side of the reporter.
#[derive(Clone)]
pub(crate) struct Reporter {
    tx: mpsc::UnboundedSender<Observation>,
}

impl Reporter {
    /// Counts one attempt's answer for `ticket`'s dependency.
    pub(crate) fn record(&self, ticket: &Ticket, job: JobId, answer: Answer) {
        metrics::dependency_answer(&ticket.key, answer.label());
        let observation = Observation {
            key: ticket.key.clone(),
            answer,
            probe: ticket.probe.then_some(job),
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
                let counts = pending.entry(observation.key.clone()).or_default();
                match observation.answer {
                    Answer::Success => counts.successes += 1,
                    Answer::Failure => counts.failures += 1,
                    Answer::Neutral => {}
                }
                if let Some(job) = observation.probe {
                    let counts = pending.remove(&observation.key).unwrap_or_default();
                    let probe = ProbeReport { job, outcome: observation.answer.probe_outcome() };
                    send(store.as_ref(), &config, &observation.key, counts, Some(probe), &abandon).await;
                }
            }
            _ = tick.tick() => flush_all(store.as_ref(), &config, &mut pending, &abandon).await,
            _ = stop.cancelled() => {
                while let Ok(observation) = rx.try_recv() {
                    let counts = pending.entry(observation.key.clone()).or_default();
                    match observation.answer {
                        Answer::Success => counts.successes += 1,
                        Answer::Failure => counts.failures += 1,
                        Answer::Neutral => {}
                    }
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
        if counts.successes + counts.failures > 0 {
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
