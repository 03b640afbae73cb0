//! A dependency as people (and the dashboard) see it: `revenant breaker list`,
//! `revenant stats`, the gauges. Computed from a [`DependencyRecord`] at one instant.

use chrono::DateTime;
use serde::{Deserialize, Serialize};

use crate::dependency::record::{BreakerState, DependencyRecord};
use crate::job::{JobId, Timestamp};

/// One dependency's breaker, rate limit and retry budget, and the jobs waiting on it.
/// This is the JSON of `revenant breaker list --json` and of `GET /v1/dependencies`
/// (`revenant stats` shows it as a table under the queues; its `--json` keeps to the
/// queues).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DependencyState {
    /// The key (`email-provider`, a URL's host).
    pub dependency: String,
    /// `closed`, `open` or `half_open`.
    pub breaker: BreakerState,
    /// Held open by an operator (`revenant breaker open`).
    pub held_open: bool,
    /// When it last opened from closed.
    pub opened_at: Option<Timestamp>,
    /// While open: when the next probe may go (none while held open).
    pub probe_at: Option<Timestamp>,
    /// The current cool-down, seconds.
    pub cooldown_secs: f64,
    /// The probe in flight, while half-open.
    pub probe: Option<ProbeView>,
    /// Answers counted over the breaker's window.
    pub answers: Answers,
    /// Times it opened from closed.
    pub trips: u64,
    /// When its state last changed.
    pub changed_at: Option<Timestamp>,
    /// The rate limit, when one is set.
    pub rate_limit: Option<RateState>,
    /// The retry budget, when one is set.
    pub retry_budget: Option<BudgetState>,
    /// The bulkhead, when one is set.
    #[serde(default)]
    pub bulkhead: Option<BulkheadState>,
    /// Jobs waiting on it, by reason.
    pub waiting: WaitingCounts,
}

/// The probe in flight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeView {
    /// The job sent as the probe.
    pub job_id: JobId,
    /// The worker running it.
    pub worker: String,
    /// When it counts as lost.
    pub expires_at: Option<Timestamp>,
}

/// The breaker's window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Answers {
    /// Its length, seconds.
    pub window_secs: f64,
    /// Successes in it (the previous window weighted by its overlap).
    pub successes: f64,
    /// Transient failures in it.
    pub failures: f64,
    /// `failures / (successes + failures)`, 0 when there is none.
    pub failure_share: f64,
    /// The share that opens the breaker.
    pub threshold: f64,
    /// The fewest answers that can open it.
    pub min_requests: u32,
    /// Calls counted slow in it (each call counts once: a success, a failure or
    /// slow, so slow calls are not in `successes` or `failures`).
    #[serde(default)]
    pub slow: f64,
    /// `slow / (successes + failures + slow)`, 0 when there is none.
    #[serde(default)]
    pub slow_share: f64,
    /// The slow-call share that opens the breaker; none when slow calls are not
    /// counted.
    #[serde(default)]
    pub slow_threshold: Option<f64>,
    /// How long a call runs before it is slow, seconds.
    #[serde(default)]
    pub slow_call_secs: Option<f64>,
}

/// The bulkhead: attempts in flight and the limits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BulkheadState {
    /// Attempts holding a permit now, across every worker (as reported: an attempt
    /// that ended is counted until its worker's next report, within 200 ms).
    pub in_flight: u64,
    /// The limit across every worker, if one is set.
    pub shared_limit: Option<u32>,
    /// The limit per worker, if a fixed one is set.
    pub per_worker_limit: Option<u32>,
    /// Else the share of a queue's slots each worker gives it.
    pub per_worker_share: f64,
    /// Whether each worker adapts its limit (AIMD).
    pub adaptive: bool,
    /// Jobs turned back at a limit since the dependency was first seen.
    pub turned_back: u64,
}

/// The rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateState {
    /// Requests a second.
    pub per_second: f64,
    /// Requests at once.
    pub burst: u32,
    /// Requests that could start right now (0 to `burst`).
    pub tokens: f64,
    /// When a job claimed now would get its turn: later than now while released
    /// jobs queue on the schedule.
    pub next_turn_at: Option<Timestamp>,
    /// How far ahead the schedule is booked, seconds (0 when it is not).
    pub booked_secs: f64,
}

/// The retry budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BudgetState {
    /// Retries per first attempt.
    pub ratio: f64,
    /// Retries the window allows whatever the ratio.
    pub min_retries: u32,
    /// Its window, seconds.
    pub window_secs: f64,
    /// First attempts sent in the window.
    pub fresh: f64,
    /// Retries sent in the window.
    pub retries: f64,
    /// Retries the window allows now.
    pub allowed: f64,
}

/// Jobs `ready` and waiting on a dependency, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingCounts {
    /// Parked by the breaker until it closes.
    pub breaker: i64,
    /// Holding a turn of the rate limit.
    pub rate_limit: i64,
    /// Retries over budget, waiting their backoff again.
    pub retry_budget: i64,
}

fn time(us: i64) -> Option<Timestamp> {
    DateTime::from_timestamp_micros(us)
}

impl DependencyRecord {
    /// The record as seen at `now`.
    pub fn view(&self, key: &str, now_us: i64, waiting: WaitingCounts) -> DependencyState {
        let policy = self.full_policy().unwrap_or_default();
        let breaker = policy.breaker.unwrap_or_default();
        let len = i64::try_from(breaker.window.as_micros()).unwrap_or(i64::MAX);
        let mut outcomes = self.outcomes;
        outcomes.roll(now_us, len);
        let (successes, failures) = outcomes.weighted(now_us, len);
        let mut slow_window = self.slow;
        slow_window.roll(now_us, len);
        let (slow, _) = slow_window.weighted(now_us, len);
        let total = successes + failures + slow;
        let bulkhead = policy.bulkhead.map(|b| BulkheadState {
            in_flight: self
                .in_flight
                .iter()
                .filter(|held| held.expires_at_us > now_us)
                .count() as u64,
            shared_limit: b.shared,
            per_worker_limit: b.max_in_flight,
            per_worker_share: b.share,
            adaptive: b.adaptive,
            turned_back: self.turned_back,
        });
        let rate_limit = policy.rate_limit.map(|rate| {
            let t = rate.interval_us() as f64;
            let behind = (self.next_start_us - now_us).max(0) as f64;
            let booked = (self.reserved_until_us - now_us).max(0);
            let tolerance = rate.interval_us() * (i64::from(rate.burst) - 1);
            RateState {
                per_second: rate.per_second,
                burst: rate.burst,
                tokens: (f64::from(rate.burst) - behind / t).clamp(0.0, f64::from(rate.burst)),
                next_turn_at: time(now_us.max(self.reserved_until_us - tolerance)),
                booked_secs: booked as f64 / 1e6,
            }
        });
        let retry_budget = policy.retry_budget.map(|budget| {
            let len = i64::try_from(budget.window.as_micros()).unwrap_or(i64::MAX);
            let mut traffic = self.traffic;
            traffic.roll(now_us, len);
            let (fresh, retries) = traffic.weighted(now_us, len);
            BudgetState {
                ratio: budget.ratio,
                min_retries: budget.min_retries,
                window_secs: budget.window.as_secs_f64(),
                fresh,
                retries,
                allowed: (budget.ratio * fresh).max(f64::from(budget.min_retries)),
            }
        });
        DependencyState {
            dependency: key.to_string(),
            breaker: self.state,
            held_open: self.held_open,
            opened_at: self.opened_at_us.and_then(time),
            probe_at: if self.held_open || self.state != BreakerState::Open {
                None
            } else {
                self.open_until_us.and_then(time)
            },
            cooldown_secs: self.cooldown_us as f64 / 1e6,
            probe: self.probe.as_ref().map(|p| ProbeView {
                job_id: p.job,
                worker: p.worker.clone(),
                expires_at: time(p.expires_at_us),
            }),
            answers: Answers {
                window_secs: breaker.window.as_secs_f64(),
                successes,
                failures,
                failure_share: if total > 0.0 { failures / total } else { 0.0 },
                threshold: breaker.failure_threshold,
                min_requests: breaker.min_requests,
                slow,
                slow_share: if total > 0.0 { slow / total } else { 0.0 },
                slow_threshold: breaker.slow_call.map(|s| s.threshold),
                slow_call_secs: breaker.slow_call.map(|s| s.duration.as_secs_f64()),
            },
            trips: self.trips,
            changed_at: self.changed_at_us.and_then(time),
            rate_limit,
            retry_budget,
            bulkhead,
            waiting,
        }
    }
}
