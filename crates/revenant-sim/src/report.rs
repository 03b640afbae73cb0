//! What a simulation found: the figures the design's story is judged by.

use std::time::Duration;

use serde::Serialize;

use crate::config::SimConfig;
use crate::series::{Second, Series};

/// The result of one run. Rates are requests a second as the provider saw them,
/// counted per whole virtual second.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// The scenario that was run.
    pub config: SimConfig,
    /// Jobs enqueued.
    pub jobs: u64,
    /// Of those, poison jobs (see [`SimConfig::poison_share`]).
    pub poison: u64,
    /// Jobs completed.
    pub completed: u64,
    /// Jobs dead-lettered, for any reason.
    pub dead: u64,
    /// Dead because every attempt failed: good work lost to the outage.
    pub dead_attempts_exhausted: u64,
    /// Dead at once because they failed permanently (the poison jobs).
    pub dead_permanent: u64,
    /// `dead / jobs`.
    pub dead_share: f64,
    /// Attempts in all, poison jobs' included.
    pub attempts: u64,
    /// Requests the provider received in all (poison jobs send none).
    pub provider_requests: u64,
    /// Of those, first attempts.
    pub fresh_requests: u64,
    /// Of those, retries.
    pub retry_requests: u64,
    /// `provider_requests / jobs`: 1 is the floor, every retry adds to it.
    pub requests_per_job: f64,
    /// The provider's traffic while it was down.
    pub outage: Window,
    /// Its traffic from recovery to the end of the run (fresh arrivals included).
    pub recovery: Window,
    /// When the queue last became empty for good (no job in backoff, none due),
    /// seconds from the start; never before the outage ends.
    pub drained_at_secs: f64,
    /// Time to drain after recovery: from the outage's end until no job is waiting.
    /// Long backoffs make this long even with idle workers: a job that failed just
    /// before recovery waits out its whole delay.
    pub drain_secs: f64,
    /// The most attempts any job used.
    pub max_attempts_used: u32,
    /// Jobs that arrived before the provider came back and were not finished then:
    /// the backlog the recovery has to drain.
    pub backlog_at_recovery: u64,
    /// From the provider's recovery until the last of that backlog finished, seconds.
    pub backlog_drain_secs: f64,
    /// What issue 8 holds the drain to: the backlog over the provider's capacity, plus
    /// a minute. `None` without a capacity.
    pub backlog_drain_bound_secs: Option<f64>,
    /// Probes the breaker sent (0 without a breaker).
    pub probes: u64,
    /// Requests the provider refused for being over its capacity (each a 503 and, for
    /// the job, a failed attempt).
    pub over_capacity: u64,
    /// When the last event happened, seconds from the start.
    pub ended_at_secs: f64,
    /// Every second of the run; see [`Report::series`] for buckets.
    #[serde(skip)]
    pub seconds: Vec<Second>,
}

/// The provider's traffic over a window of whole seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Window {
    /// The window's start, seconds from the start of the run.
    pub from_secs: f64,
    /// Its end (exclusive).
    pub to_secs: f64,
    /// Jobs that arrived in it.
    pub arrived: u64,
    /// First attempts the provider received in it.
    pub fresh_requests: u64,
    /// Retries it received in it.
    pub retry_requests: u64,
    /// All requests: `fresh_requests + retry_requests`.
    pub requests: u64,
    /// `requests / arrived`: how many times over the fresh load the provider took.
    /// 0 when nothing arrived.
    pub requests_per_fresh_job: f64,
    /// The busiest second's requests.
    pub peak_rps: u64,
    /// `requests` over the window's length.
    pub mean_rps: f64,
}

impl Window {
    fn over(seconds: &[Second], from: f64, to: f64) -> Window {
        let start = (from.floor() as usize).min(seconds.len());
        let end = (to.ceil() as usize).clamp(start, seconds.len());
        let slice = &seconds[start..end];
        let sum = |f: fn(&Second) -> u64| slice.iter().map(f).sum::<u64>();
        let (arrived, fresh, retries) = (sum(|s| s.arrived), sum(|s| s.fresh), sum(|s| s.retries));
        let requests = fresh + retries;
        let length = (to.ceil() - from.floor()).max(1.0);
        Window {
            from_secs: from,
            to_secs: to,
            arrived,
            fresh_requests: fresh,
            retry_requests: retries,
            requests,
            requests_per_fresh_job: ratio(requests, arrived),
            peak_rps: slice.iter().map(|s| s.fresh + s.retries).max().unwrap_or(0),
            mean_rps: requests as f64 / length,
        }
    }
}

/// Totals the engine hands over at the end of a run.
pub(crate) struct Tally {
    pub jobs: u64,
    pub poison: u64,
    pub attempts: u64,
    pub max_attempts_used: u32,
    pub dead_exhausted: u64,
    pub dead_permanent: u64,
    pub drained_at_secs: f64,
    pub ended_at_secs: f64,
    pub backlog_at_recovery: u64,
    pub backlog_drain_secs: f64,
    pub probes: u64,
    pub over_capacity: u64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl Report {
    pub(crate) fn build(config: SimConfig, seconds: Vec<Second>, tally: Tally) -> Report {
        let outage_start = config.provider.outage_start.as_secs_f64();
        let outage_end = config.provider.outage_end().as_secs_f64();
        let sum = |f: fn(&Second) -> u64| seconds.iter().map(f).sum::<u64>();
        let (fresh, retries, completed) =
            (sum(|s| s.fresh), sum(|s| s.retries), sum(|s| s.completed));
        let dead = tally.dead_exhausted + tally.dead_permanent;
        let end = tally.ended_at_secs.max(outage_end);
        Report {
            outage: Window::over(&seconds, outage_start, outage_end),
            recovery: Window::over(&seconds, outage_end, end),
            jobs: tally.jobs,
            poison: tally.poison,
            completed,
            dead,
            dead_attempts_exhausted: tally.dead_exhausted,
            dead_permanent: tally.dead_permanent,
            dead_share: ratio(dead, tally.jobs),
            attempts: tally.attempts,
            provider_requests: fresh + retries,
            fresh_requests: fresh,
            retry_requests: retries,
            requests_per_job: ratio(fresh + retries, tally.jobs),
            drained_at_secs: tally.drained_at_secs,
            drain_secs: tally.drained_at_secs - outage_end,
            max_attempts_used: tally.max_attempts_used,
            backlog_at_recovery: tally.backlog_at_recovery,
            backlog_drain_secs: tally.backlog_drain_secs,
            backlog_drain_bound_secs: config
                .provider
                .capacity
                .map(|capacity| tally.backlog_at_recovery as f64 / capacity + 60.0),
            probes: tally.probes,
            over_capacity: tally.over_capacity,
            ended_at_secs: tally.ended_at_secs,
            seconds,
            config,
        }
    }

    /// The run in buckets of `bucket` (whole seconds; 1 s and 10 s read well).
    pub fn series(&self, bucket: Duration) -> Series {
        Series::from_seconds(&self.seconds, bucket)
    }

    /// Of the jobs that arrived in `[from, to)` (whole seconds from the start), how
    /// many arrived and how many ended dead. With `from` at the outage's start this
    /// is how the design's "a fifth of the jobs that fail in the outage's first
    /// seconds" is measured.
    pub fn dead_among_arrivals(&self, from: Duration, to: Duration) -> (u64, u64) {
        let start = (from.as_secs() as usize).min(self.seconds.len());
        let end = (to.as_secs() as usize).clamp(start, self.seconds.len());
        self.seconds[start..end]
            .iter()
            .fold((0, 0), |(arrived, dead), s| {
                (arrived + s.arrived, dead + s.dead_by_arrival)
            })
    }
}
