//! The discrete-event loop: virtual time in microseconds, one heap of events, no
//! sleeping and no database.
//!
//! A job's life is the runtime's, in miniature: it arrives `ready` and due, is
//! claimed by a free worker slot (attempt counted at claim), sends one request to the
//! provider, and the answer goes through [`revenant_core::decide()`], the very function
//! the runtime calls, which says complete, retry after a delay, or dead. So the
//! simulator cannot drift from the runtime's retry arithmetic.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use revenant_core::{decide, DeadReason, InputError, Outcome, Transition};

use crate::config::{SimConfig, Spacing};
use crate::report::{Report, Tally};
use crate::series::Second;

const MICROS: u64 = 1_000_000;

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
    /// A job's backoff is over: it is due again.
    Due(u32),
    /// The provider answers an attempt sent `latency` ago.
    Answer(u32, Answer),
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
            self.close_seconds_before(at);
            self.now = at;
            match event {
                Event::Arrive => self.arrive(),
                Event::Due(job) => {
                    self.due.push_back(job);
                    self.pump();
                }
                Event::Answer(job, answer) => {
                    self.running -= 1;
                    self.settle(job, answer);
                    self.pump();
                }
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
    ///
    /// Issue 8's breaker, rate limit and retry budget go here: before a job is
    /// claimed, a gate may send it back to wait (a snooze: no attempt spent) instead.
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
            self.attempt(job);
        }
    }

    /// One attempt: claimed now, the request sent now, the answer now or after the
    /// provider's latency.
    fn attempt(&mut self, index: u32) {
        let job = &mut self.jobs[index as usize];
        job.attempts += 1;
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
            self.settle(index, answer);
        } else {
            self.running += 1;
            self.push(self.now + self.latency_us, Event::Answer(index, answer));
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
                return Answer::Unavailable;
            }
            self.capacity_window.1 += 1.0;
        }
        Answer::Success
    }

    /// Runs the answer through `decide`, as the runtime's completer does.
    fn settle(&mut self, index: u32, answer: Answer) {
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
            Transition::Complete => self.second(self.now).completed += 1,
            Transition::Retry { delay, .. } => {
                self.waiting += 1;
                self.push(self.now + delay.as_micros() as u64, Event::Due(index));
            }
            Transition::Snooze { delay } => {
                // Not produced by the outcomes above; handled as the runtime does
                // (the attempt is given back) so a future gate can use it.
                self.jobs[index as usize].attempts -= 1;
                self.waiting += 1;
                self.push(self.now + delay.as_micros() as u64, Event::Due(index));
            }
            Transition::Dead { reason, .. } => {
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
            },
        )
    }
}
