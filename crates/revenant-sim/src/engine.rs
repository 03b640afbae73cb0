//! The discrete-event loop: virtual time in microseconds, one heap of events, no
//! sleeping and no database.
//!
//! A job's life is the runtime's, in miniature: it arrives `ready` and due, is
//! claimed by a free worker slot (attempt counted at claim), sends one request to the
//! provider, and the answer goes through [`revenant_core::decide()`], the very function
//! the runtime calls, which says complete, retry after a delay, or dead. So the
//! simulator cannot drift from the runtime's retry arithmetic.
//!
//! With a [`revenant_core::dependency::DependencyPolicy`], a claimed job first asks
//! the provider's [`DependencyRecord`] for a permit, as the stores do: run (after the
//! rate limit's wait), run as the breaker's probe, or wait (its attempt given back),
//! parked until the breaker closes, until its rate-limit turn, or its backoff again
//! when over the retry budget. Every answer is reported to the record at once (the
//! runtime batches them every 200 ms), and a closing breaker releases the parked jobs
//! on the rate limit's turns. A sweep every 5 s makes a parked job due for a probe when
//! no new job comes, as the worker's maintenance does.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use revenant_core::dependency::{
    Decision, DependencyPolicy, DependencyRecord, PermitInput, ProbeOutcome, WaitReason,
};
use revenant_core::{decide, DeadReason, InputError, Outcome, Transition};

use crate::config::{SimConfig, Spacing};
use crate::report::{Report, Tally};
use crate::series::Second;

const MICROS: u64 = 1_000_000;

/// How often the dependency sweep runs: the worker's lease-sweep interval.
const SWEEP_EVERY: u64 = 5 * MICROS;

/// How long a probe may go unanswered: the default policy's lease.
const PROBE_LEASE: Duration = Duration::from_secs(60);

/// Runs the scenario to the end: until arrivals have stopped and every job is
/// completed or dead. Refuses a config that [`SimConfig::validate`] refuses.
///
/// Deterministic: the same config (seed included) gives the same report. The seed
/// story takes about 50 ms in a release build, a few tenths of a second in debug.
pub fn simulate(config: &SimConfig) -> Result<Report, InputError> {
    config.validate()?;
    let mut engine = Engine::new(config);
    engine.run();
    Ok(engine.into_report())
}

/// What happens at an instant. Ties are broken by insertion order, so the run is
/// deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The next job arrives.
    Arrive,
    /// A job's wait is over: it is due again (ignored unless the generation is the
    /// job's current one: a released parked job gets a new due time).
    Due(u32, u32),
    /// A job's rate-limit wait in its worker slot is over: send it (probe or not).
    Start(u32, bool),
    /// The provider answers an attempt sent `latency` ago (the probe's or not).
    Answer(u32, Answer, bool),
    /// The dependency sweep.
    Sweep,
}

/// The provider's answer to one attempt, before `decide` turns it into a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Answer {
    Success,
    /// A 503: the provider is down or shedding load.
    Unavailable,
    /// The job itself can never succeed; no request was sent.
    Poison,
}

#[derive(Debug, Clone, Copy)]
struct Job {
    arrived_us: u64,
    attempts: u32,
    poison: bool,
    /// Bumped whenever its due time changes, so older `Due` events are ignored.
    generation: u32,
    /// What it waits for on the dependency, while it waits.
    waiting_for: Option<WaitReason>,
    /// Its place among the parked jobs, while parked.
    parked: Option<u64>,
    /// When it completed or died.
    finished_us: Option<u64>,
}

/// The provider's protection: the state every store keeps, and the jobs parked on it.
struct Protection {
    policy: DependencyPolicy,
    record: DependencyRecord,
    /// Parked jobs in the order they were parked (claim order).
    parked: BTreeMap<u64, u32>,
    next_park: u64,
    sweep_scheduled: bool,
    probes: u64,
}

struct Engine<'a> {
    config: &'a SimConfig,
    outage: (u64, u64),
    arrivals_end_us: u64,
    latency_us: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    sequence: u64,
    /// Draws arrival gaps and poison jobs; apart from the jitter's source so that two
    /// policies compared under one seed see the very same jobs.
    arrival_rng: StdRng,
    jitter_rng: StdRng,
    jobs: Vec<Job>,
    /// Due jobs waiting for a worker slot, oldest due first.
    due: VecDeque<u32>,
    running: u32,
    /// Jobs in the `ready` state: due and waiting for a slot, or waiting out a backoff.
    waiting: u64,
    /// The whole second the provider's capacity is counted in, and requests served in it.
    capacity_window: (u64, f64),
    seconds: Vec<Second>,
    /// Seconds whose end-of-second depth has been recorded.
    closed: usize,
    /// When the queue last became empty (and stayed so), if it is empty.
    drained_at_us: Option<u64>,
    now: u64,
    dead_exhausted: u64,
    dead_permanent: u64,
    protection: Option<Protection>,
    /// Requests the provider refused for being over its capacity.
    over_capacity: u64,
}

impl<'a> Engine<'a> {
    fn new(config: &'a SimConfig) -> Self {
        let micros = |d: std::time::Duration| d.as_micros() as u64;
        let mut engine = Engine {
            config,
            outage: (
                micros(config.provider.outage_start),
                micros(config.provider.outage_end()),
            ),
            arrivals_end_us: micros(config.arrivals_for()),
            latency_us: micros(config.provider.latency),
            events: BinaryHeap::new(),
            sequence: 0,
            arrival_rng: StdRng::seed_from_u64(config.seed),
            // Any fixed, different stream will do; this one is the golden ratio.
            jitter_rng: StdRng::seed_from_u64(config.seed ^ 0x9E37_79B9_7F4A_7C15),
            jobs: Vec::with_capacity(
                (config.arrivals.rate * config.arrivals_for().as_secs_f64()) as usize + 16,
            ),
            due: VecDeque::new(),
            running: 0,
            waiting: 0,
            capacity_window: (0, 0.0),
            seconds: Vec::new(),
            closed: 0,
            drained_at_us: Some(0),
            now: 0,
            dead_exhausted: 0,
            dead_permanent: 0,
            // The bulkhead is not modelled here (the story's workers have no slots to
            // share; `hang` models it): without it the record tracks no permits.
            protection: (!config.dependency.is_off()).then(|| Protection {
                policy: DependencyPolicy {
                    bulkhead: None,
                    ..config.dependency.clone()
                },
                record: DependencyRecord::default(),
                parked: BTreeMap::new(),
                next_park: 0,
                sweep_scheduled: false,
                probes: 0,
            }),
            over_capacity: 0,
        };
        if engine.arrivals_end_us > 0 {
            engine.push(0, Event::Arrive);
        }
        engine
    }

    fn push(&mut self, at: u64, event: Event) {
        self.sequence += 1;
        self.events.push(Reverse((at, self.sequence, event)));
    }

    fn run(&mut self) {
        while let Some(Reverse((at, _, event))) = self.events.pop() {
            if let Event::Due(job, generation) = event {
                if self.jobs[job as usize].generation != generation {
                    // Superseded (a parked job released early): not an event at all,
                    // so it does not move the clock to a time nothing happens at.
                    continue;
                }
            }
            self.close_seconds_before(at);
            self.now = at;
            match event {
                Event::Arrive => self.arrive(),
                Event::Due(job, generation) => {
                    let record = &mut self.jobs[job as usize];
                    if record.generation == generation {
                        if let Some(place) = record.parked.take() {
                            if let Some(p) = self.protection.as_mut() {
                                p.parked.remove(&place);
                            }
                        }
                        self.due.push_back(job);
                        self.pump();
                    }
                }
                Event::Start(job, probe) => {
                    self.running -= 1;
                    self.send(job, probe);
                    self.pump();
                }
                Event::Answer(job, answer, probe) => {
                    self.running -= 1;
                    self.settle(job, answer, probe);
                    self.pump();
                }
                Event::Sweep => self.sweep(),
            }
            if self.waiting == 0 {
                self.drained_at_us.get_or_insert(self.now);
            } else {
                self.drained_at_us = None;
            }
        }
        // Record the depth through the end of the last second anything happened in.
        self.close_seconds_before((self.now / MICROS + 1) * MICROS);
    }

    fn arrive(&mut self) {
        let index = self.jobs.len() as u32;
        let poison = self.config.poison_share > 0.0
            && self.arrival_rng.random::<f64>() < self.config.poison_share;
        self.jobs.push(Job {
            arrived_us: self.now,
            attempts: 0,
            poison,
            generation: 0,
            waiting_for: None,
            parked: None,
            finished_us: None,
        });
        self.second(self.now).arrived += 1;
        self.waiting += 1;
        self.due.push_back(index);

        let next = match self.config.arrivals.spacing {
            // From the index, not by adding gaps, so no rounding error piles up.
            Spacing::Even => {
                ((index as f64 + 1.0) * MICROS as f64 / self.config.arrivals.rate).round() as u64
            }
            Spacing::Poisson => {
                let u: f64 = self.arrival_rng.random_range(f64::EPSILON..1.0);
                self.now + (-u.ln() / self.config.arrivals.rate * MICROS as f64).round() as u64
            }
        };
        if next < self.arrivals_end_us {
            self.push(next, Event::Arrive);
        }
        self.pump();
    }

    /// Starts attempts for due jobs while there are free slots.
    fn pump(&mut self) {
        while self
            .config
            .workers
            .slots
            .is_none_or(|slots| self.running < slots)
        {
            let Some(job) = self.due.pop_front() else {
                break;
            };
            self.waiting -= 1;
            self.claim(job);
        }
    }

    /// One claim: the attempt is counted now; with a protected provider the job then
    /// asks for a permit, as the runtime's gate does.
    fn claim(&mut self, index: u32) {
        let job = &mut self.jobs[index as usize];
        job.attempts += 1;
        let (attempts, waited_for) = (job.attempts, job.waiting_for.take());
        let now = self.now;
        if self.protection.is_none() {
            self.send(index, false);
            return;
        }
        // Drawn only with a protection, so unprotected runs keep their jitter draws
        // (and their figures) as they were.
        let failures = attempts.saturating_sub(1).max(1);
        let retry_delay = self
            .config
            .policy
            .retry_delay(failures, None, &mut self.jitter_rng);
        let protection = self.protection.as_mut().expect("checked above");
        let request = PermitInput {
            job: i64::from(index),
            attempts: attempts as i32,
            reserved: waited_for == Some(WaitReason::RateLimit),
            retry_delay,
        };
        let decision = protection.record.acquire(
            &protection.policy,
            now as i64,
            "sim",
            PROBE_LEASE,
            &[request],
        )[0];
        match decision {
            Decision::Run { wait_us } if wait_us > 0 => {
                // It waits for its turn in its worker slot.
                self.running += 1;
                self.push(now + wait_us as u64, Event::Start(index, false));
            }
            Decision::Run { .. } => self.send(index, false),
            Decision::Probe => {
                protection.probes += 1;
                self.send(index, true);
            }
            Decision::Wait { reason, until_us } => {
                let mut sweep = false;
                let job = &mut self.jobs[index as usize];
                job.attempts -= 1;
                job.waiting_for = Some(reason);
                job.generation += 1;
                let generation = job.generation;
                if reason == WaitReason::Breaker {
                    job.parked = Some(protection.next_park);
                    protection.parked.insert(protection.next_park, index);
                    protection.next_park += 1;
                    if !protection.sweep_scheduled {
                        protection.sweep_scheduled = true;
                        sweep = true;
                    }
                }
                if sweep {
                    self.push(now + SWEEP_EVERY, Event::Sweep);
                }
                self.waiting += 1;
                self.push(
                    until_us.max(now as i64) as u64,
                    Event::Due(index, generation),
                );
            }
        }
    }

    /// The request reaches the provider now (a poison job sends none); the answer
    /// comes now or after the provider's latency.
    fn send(&mut self, index: u32, probe: bool) {
        let job = &self.jobs[index as usize];
        let (attempt, poison) = (job.attempts, job.poison);
        let answer = if poison {
            Answer::Poison
        } else {
            let second = self.second(self.now);
            if attempt == 1 {
                second.fresh += 1;
            } else {
                second.retries += 1;
            }
            self.provider_answer()
        };
        if self.latency_us == 0 {
            self.settle(index, answer, probe);
        } else {
            self.running += 1;
            self.push(
                self.now + self.latency_us,
                Event::Answer(index, answer, probe),
            );
        }
    }

    /// The worker's dependency sweep: a breaker that wants a probe while every job of
    /// its key is parked gets its first parked job due now.
    fn sweep(&mut self) {
        let now = self.now;
        let mut pushes = Vec::new();
        if let Some(protection) = self.protection.as_mut() {
            protection.sweep_scheduled = false;
            if protection.record.wants_probe(now as i64) {
                if let Some((&place, &index)) = protection.parked.iter().next() {
                    protection.parked.remove(&place);
                    let job = &mut self.jobs[index as usize];
                    job.parked = None;
                    job.generation += 1;
                    pushes.push((now, Event::Due(index, job.generation)));
                }
            }
            if !protection.parked.is_empty() {
                protection.sweep_scheduled = true;
                pushes.push((now + SWEEP_EVERY, Event::Sweep));
            }
        }
        for (at, event) in pushes {
            self.push(at, event);
        }
    }

    /// The breaker closed: every parked job is due again, on the rate limit's turns
    /// when there is one, in the order they were parked.
    fn release_parked(&mut self) {
        let now = self.now;
        let Some(protection) = self.protection.as_mut() else {
            return;
        };
        let parked: Vec<u32> = std::mem::take(&mut protection.parked)
            .into_values()
            .collect();
        let (first, spacing) = protection
            .record
            .reserve_turns(now as i64, parked.len() as u64);
        let mut pushes = Vec::with_capacity(parked.len());
        for (i, index) in parked.into_iter().enumerate() {
            let job = &mut self.jobs[index as usize];
            job.parked = None;
            job.waiting_for = (spacing > 0).then_some(WaitReason::RateLimit);
            job.generation += 1;
            let at = (first + spacing * i as i64).max(now as i64) as u64;
            pushes.push((at, Event::Due(index, job.generation)));
        }
        for (at, event) in pushes {
            self.push(at, event);
        }
    }

    /// What the provider says to a request sent now.
    fn provider_answer(&mut self) -> Answer {
        if (self.outage.0..self.outage.1).contains(&self.now) {
            return Answer::Unavailable;
        }
        if let Some(capacity) = self.config.provider.capacity {
            let second = self.now / MICROS;
            if self.capacity_window.0 != second {
                self.capacity_window = (second, 0.0);
            }
            if self.capacity_window.1 + 1.0 > capacity {
                self.over_capacity += 1;
                return Answer::Unavailable;
            }
            self.capacity_window.1 += 1.0;
        }
        Answer::Success
    }

    /// Runs the answer through `decide`, as the runtime's completer does, and reports
    /// it to the provider's breaker.
    fn settle(&mut self, index: u32, answer: Answer, probe: bool) {
        self.report(index, answer, probe);
        let job = self.jobs[index as usize];
        let outcome = match answer {
            Answer::Success => Outcome::Success,
            Answer::Unavailable => match self.config.provider.retry_after {
                Some(after) => Outcome::RetryAfter {
                    message: "503 Service Unavailable".into(),
                    after,
                },
                None => Outcome::Retry {
                    message: "503 Service Unavailable".into(),
                },
            },
            Answer::Poison => Outcome::Permanent {
                message: "the template crashed".into(),
            },
        };
        let policy = &self.config.policy;
        let max_attempts = policy.max_attempts() as i32;
        match decide(
            &outcome,
            job.attempts as i32,
            max_attempts,
            policy,
            &mut self.jitter_rng,
        ) {
            Transition::Complete => {
                self.jobs[index as usize].finished_us = Some(self.now);
                self.second(self.now).completed += 1
            }
            Transition::Retry { delay, .. } => {
                self.waiting += 1;
                let generation = self.jobs[index as usize].generation;
                self.push(
                    self.now + delay.as_micros() as u64,
                    Event::Due(index, generation),
                );
            }
            Transition::Snooze { delay } => {
                // Not produced by the outcomes above; handled as the runtime does
                // (the attempt is given back).
                self.jobs[index as usize].attempts -= 1;
                self.waiting += 1;
                let generation = self.jobs[index as usize].generation;
                self.push(
                    self.now + delay.as_micros() as u64,
                    Event::Due(index, generation),
                );
            }
            Transition::Dead { reason, .. } => {
                self.jobs[index as usize].finished_us = Some(self.now);
                match reason {
                    DeadReason::Permanent => self.dead_permanent += 1,
                    _ => self.dead_exhausted += 1,
                }
                self.second(self.now).dead += 1;
                self.second(job.arrived_us).dead_by_arrival += 1;
            }
            Transition::Cancel { .. } => {
                unreachable!("the simulated provider never cancels a job")
            }
        }
    }

    /// Reports an answer to the provider's breaker (at once; the runtime batches them):
    /// a success or a 503; a poison job's permanent failure is not counted.
    fn report(&mut self, index: u32, answer: Answer, probe: bool) {
        let now = self.now as i64;
        let Some(protection) = self.protection.as_mut() else {
            return;
        };
        let (successes, failures, outcome) = match answer {
            Answer::Success => (1, 0, ProbeOutcome::Success),
            Answer::Unavailable => (0, 1, ProbeOutcome::Failure),
            Answer::Poison => (0, 0, ProbeOutcome::Neutral),
        };
        let probe = probe.then_some((i64::from(index), outcome));
        if successes + failures == 0 && probe.is_none() {
            return;
        }
        let closed = protection
            .record
            .report(&protection.policy, now, successes, failures, probe);
        if closed {
            self.release_parked();
        }
    }

    /// The counters of the whole second `at` falls in.
    fn second(&mut self, at: u64) -> &mut Second {
        let index = (at / MICROS) as usize;
        if self.seconds.len() <= index {
            self.seconds.resize(index + 1, Second::default());
        }
        &mut self.seconds[index]
    }

    /// Records the end-of-second depth of every second that ends at or before `at`.
    fn close_seconds_before(&mut self, at: u64) {
        let until = (at / MICROS) as usize;
        while self.closed < until {
            let closed = self.closed as u64 * MICROS;
            let (waiting, due) = (self.waiting, self.due.len() as u64);
            let second = self.second(closed);
            second.waiting = waiting;
            second.due = due;
            self.closed += 1;
        }
    }

    fn into_report(self) -> Report {
        let drained_at = self.drained_at_us.unwrap_or(self.now).max(self.outage.1);
        let seconds = |us: u64| us as f64 / MICROS as f64;
        // The backlog at recovery: jobs that arrived before the provider came back and
        // were not finished by then; it has drained when the last of them finished.
        let end = self.outage.1;
        let backlog: Vec<&Job> = self
            .jobs
            .iter()
            .filter(|j| j.arrived_us < end && j.finished_us.is_none_or(|f| f >= end))
            .collect();
        let backlog_drained_at = backlog
            .iter()
            .map(|j| j.finished_us.unwrap_or(self.now))
            .max()
            .unwrap_or(end);
        Report::build(
            self.config.clone(),
            self.seconds,
            Tally {
                jobs: self.jobs.len() as u64,
                poison: self.jobs.iter().filter(|j| j.poison).count() as u64,
                attempts: self.jobs.iter().map(|j| u64::from(j.attempts)).sum(),
                max_attempts_used: self.jobs.iter().map(|j| j.attempts).max().unwrap_or(0),
                dead_exhausted: self.dead_exhausted,
                dead_permanent: self.dead_permanent,
                drained_at_secs: seconds(drained_at),
                ended_at_secs: seconds(self.now),
                backlog_at_recovery: backlog.len() as u64,
                backlog_drain_secs: seconds(backlog_drained_at.saturating_sub(end)),
                probes: self.protection.as_ref().map_or(0, |p| p.probes),
                over_capacity: self.over_capacity,
            },
        )
    }
}
