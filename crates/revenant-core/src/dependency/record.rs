//! The state of one dependency and every transition it makes, as pure functions.
//!
//! Each backend keeps one [`DependencyRecord`] per key (a row, locked while a call
//! changes it) and calls these functions on it inside one transaction, so SQLite,
//! PostgreSQL, the in-memory store and the simulator run the very same state machine.
//! Times are microseconds since the Unix epoch on the store's clock.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::dependency::policy::{Bulkhead, DependencyPolicy, RateLimit, SlowCall};
use crate::job::JobId;

/// Where a breaker is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Requests go through; answers are counted.
    #[default]
    Closed,
    /// Nothing goes through until the cool-down is over.
    Open,
    /// One probe at a time goes through; its answer closes or reopens the breaker.
    HalfOpen,
}

impl BreakerState {
    /// The name used in SQL, the CLI, JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

impl std::fmt::Display for BreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a claimed job was sent back to wait instead of running. Stored on the job
/// (`dependency_wait`) while it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// The breaker is open (or a probe is in flight): parked until it closes.
    Breaker,
    /// The rate limit: the job holds a turn at its `run_at`.
    RateLimit,
    /// The retry budget is spent: the retry waits its backoff again.
    RetryBudget,
    /// The bulkhead: as many attempts of the dependency as its limit are in flight.
    /// Not stored on the job (see [`WaitReason::stored`]).
    Bulkhead,
}

impl WaitReason {
    /// Every reason stored on jobs (`dependency_wait`), so counted per reason.
    pub const ALL: [WaitReason; 3] = [
        WaitReason::Breaker,
        WaitReason::RateLimit,
        WaitReason::RetryBudget,
    ];

    /// The name used in SQL, the CLI, JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Breaker => "breaker",
            WaitReason::RateLimit => "rate_limit",
            WaitReason::RetryBudget => "retry_budget",
            WaitReason::Bulkhead => "bulkhead",
        }
    }

    /// What a job waiting for this reason has in `dependency_wait`. A bulkhead wait
    /// leaves it empty: the column's check (and releases before the bulkhead) know
    /// only the first three reasons, and the wait is short (the bulkhead's `wait`), so
    /// the job is an ordinary short snooze to anyone reading it; the record counts
    /// them instead ([`DependencyRecord::turned_back`]).
    pub fn stored(self) -> Option<&'static str> {
        match self {
            WaitReason::Bulkhead => None,
            other => Some(other.as_str()),
        }
    }

    /// The reason a stored name stands for.
    pub fn parse(text: &str) -> Option<WaitReason> {
        WaitReason::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl std::fmt::Display for WaitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The probe in flight while half-open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeLease {
    /// The job sent as the probe.
    pub job: JobId,
    /// The worker running it.
    pub worker: String,
    /// When the probe counts as lost (the job's lease): another may go then.
    pub expires_at_us: i64,
}

/// Two counts over a sliding window, approximated the way rate limiters usually do:
/// the current fixed window plus the previous one weighted by how much of it still
/// overlaps (`prev * (1 - elapsed / len) + cur`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Start of the current fixed window (a multiple of its length since the epoch).
    pub start_us: i64,
    /// The current window's counts.
    pub cur: [u64; 2],
    /// The previous window's counts.
    pub prev: [u64; 2],
}

impl Window {
    /// Moves the window up to `now`.
    pub fn roll(&mut self, now_us: i64, len_us: i64) {
        let len = len_us.max(1);
        if now_us < self.start_us + len {
            return;
        }
        let aligned = now_us - now_us.rem_euclid(len);
        self.prev = if aligned - self.start_us == len {
            self.cur
        } else {
            [0, 0]
        };
        self.cur = [0, 0];
        self.start_us = aligned;
    }

    /// The two counts over the last `len` (call [`Window::roll`] first).
    pub fn weighted(&self, now_us: i64, len_us: i64) -> (f64, f64) {
        let len = len_us.max(1) as f64;
        let elapsed = ((now_us - self.start_us) as f64 / len).clamp(0.0, 1.0);
        let w = 1.0 - elapsed;
        (
            self.prev[0] as f64 * w + self.cur[0] as f64,
            self.prev[1] as f64 * w + self.cur[1] as f64,
        )
    }
}

/// One claimed job asking to run, as the store read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitInput {
    /// The job.
    pub job: JobId,
    /// Its attempts, this claim included: above 1 means it is a retry.
    pub attempts: i32,
    /// It comes back at a rate-limit turn it was given earlier (it waited with
    /// [`WaitReason::RateLimit`]): it has its turn and is not counted again.
    pub reserved: bool,
    /// How long it waits if the retry budget turns it back (its backoff).
    pub retry_delay: Duration,
}

/// What one job may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Run, after `wait_us` (the rate limit's pacing; 0 for most).
    Run {
        /// Microseconds to wait before sending.
        wait_us: i64,
    },
    /// Run as the breaker's probe.
    Probe,
    /// Go back to ready until `until_us`, the attempt given back.
    Wait {
        /// Why.
        reason: WaitReason,
        /// Until when.
        until_us: i64,
    },
}

/// The answer of a probe, as far as the breaker cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// It succeeded: the dependency is back.
    Success,
    /// It failed transiently: still down.
    Failure,
    /// It told us nothing about the dependency (a permanent failure, a decode error,
    /// a cancel): another probe may go.
    Neutral,
}

/// What an operator asks of a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerAction {
    /// Hold it open: nothing runs, no probe goes, until `close` or `auto`.
    Open,
    /// Close it now (parked jobs are released, paced by the rate limit) and let it
    /// work by itself from there.
    Close,
    /// Release a hold: an open breaker probes at once, then works by itself.
    Auto,
}

/// The persisted state of one dependency. Stored as JSON (the backends add the key
/// and a copy of the state for people reading the table).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DependencyRecord {
    /// The breaker's state.
    pub state: BreakerState,
    /// Held open by an operator.
    pub held_open: bool,
    /// When it last opened from closed.
    pub opened_at_us: Option<i64>,
    /// While open: when a probe may go.
    pub open_until_us: Option<i64>,
    /// The current cool-down (doubles after each failed probe).
    pub cooldown_us: i64,
    /// The probe in flight.
    pub probe: Option<ProbeLease>,
    /// Answers in the breaker's window: `[successes, transient failures]`.
    pub outcomes: Window,
    /// Requests sent in the budget's window: `[first attempts, retries]`.
    pub traffic: Window,
    /// The rate limit's schedule: the turn after the last one given out.
    pub reserved_until_us: i64,
    /// The rate limit's pacing: the earliest next start.
    pub next_start_us: i64,
    /// Times it opened from closed.
    pub trips: u64,
    /// When its state last changed.
    pub changed_at_us: Option<i64>,
    /// The policy of the last call that changed it (shown by `revenant breaker list`;
    /// its rate paces the jobs an operator's `close` releases), without the parts
    /// below ([`DependencyPolicy::without_new_parts`]): older releases decode it.
    pub policy: Option<DependencyPolicy>,
    /// That policy's bulkhead.
    pub bulkhead: Option<Bulkhead>,
    /// That policy's slow-call setting.
    pub slow_call: Option<SlowCall>,
    /// Slow calls in the breaker's window (`[slow, unused]`), counted apart from
    /// `outcomes`: a call counts once, as a success, a failure or slow.
    pub slow: Window,
    /// The attempts holding a permit of the bulkhead, across every worker (tracked
    /// while the policy has a bulkhead).
    pub in_flight: Vec<InFlight>,
    /// Jobs turned back at the bulkhead's limit (local or shared), since the record
    /// was created.
    pub turned_back: u64,
    /// When an attempt of the key last ended (reported ended), or when one started
    /// with none in flight, or when a job was turned back with neither before: the bulkhead's wait doubles for every
    /// `wait` of quiet since (up to 16 times the `wait`), so the backlog of a
    /// dependency that hangs is not claimed and turned back twice a second, at the
    /// expense of everything else the workers could claim, while a busy dependency
    /// whose attempts keep ending turns its jobs back for the `wait` alone. Time, not
    /// a count of acquires: answers are reported in batches (every 200 ms by
    /// default), and a count would grow between two reports of a healthy key.
    pub last_ended_us: Option<i64>,
}

/// An attempt holding one of the bulkhead's permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    /// The job.
    pub job: JobId,
    /// When the permit lapses if its answer is never reported (the job's lease).
    pub expires_at_us: i64,
}

/// The answers of [`DependencyRecord::report_calls`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Calls {
    /// Attempts that succeeded.
    pub successes: u64,
    /// Attempts that failed transiently.
    pub failures: u64,
    /// Attempts counted slow (while still running).
    pub slow: u64,
    /// A probe's answer.
    pub probe: Option<(JobId, ProbeOutcome)>,
    /// Attempts that ended, whatever their answer: their bulkhead permits are freed.
    pub finished: Vec<JobId>,
}

/// The most times the bulkhead's wait doubles: 16 times its `wait` (8 s by default).
const MAX_DOUBLINGS: i64 = 4;

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl DependencyRecord {
    /// Decides, in order, what each claimed job may do, and updates the state: the
    /// breaker first (open: wait; half-open: the first job without a live probe is
    /// the probe), then the retry budget (retries only), then the rate limit.
    ///
    /// `probe_lease` is how long a probe may stay unanswered before another goes
    /// (the job's lease: a worker that died with it has lost it by then).
    pub fn acquire(
        &mut self,
        policy: &DependencyPolicy,
        now_us: i64,
        worker: &str,
        probe_lease: Duration,
        requests: &[PermitInput],
    ) -> Vec<Decision> {
        self.acquire_bounded(policy, now_us, worker, probe_lease, requests, None)
    }

    /// [`DependencyRecord::acquire`], with the bulkhead: after the breaker, a job
    /// goes back to wait ([`WaitReason::Bulkhead`], for the bulkhead's `wait`) when
    /// the caller has no permit of its own left (`local_free`: how many more of the
    /// key this worker may start) or when the attempts in flight across every worker
    /// reach the shared limit. A job that runs (or probes) holds a shared permit until
    /// its answer is reported or its lease (`probe_lease`) ends.
    pub fn acquire_bounded(
        &mut self,
        policy: &DependencyPolicy,
        now_us: i64,
        worker: &str,
        probe_lease: Duration,
        requests: &[PermitInput],
        local_free: Option<u32>,
    ) -> Vec<Decision> {
        self.remember(policy);
        self.in_flight.retain(|held| held.expires_at_us > now_us);
        let mut local_free = local_free;
        requests
            .iter()
            .map(|request| {
                let decision = self.acquire_one(
                    policy,
                    now_us,
                    worker,
                    probe_lease,
                    request,
                    &mut local_free,
                );
                if policy.bulkhead.is_some()
                    && matches!(decision, Decision::Run { .. } | Decision::Probe)
                {
                    if self.in_flight.is_empty() {
                        // A busy spell starts: its quiet is counted from here, not from
                        // an end before an idle hour.
                        self.last_ended_us = Some(now_us);
                    }
                    self.in_flight.push(InFlight {
                        job: request.job,
                        expires_at_us: now_us.saturating_add(us(probe_lease).max(1)),
                    });
                }
                decision
            })
            .collect()
    }

    /// Keeps the caller's policy: the old shape in `policy`, the new parts beside it.
    fn remember(&mut self, policy: &DependencyPolicy) {
        self.policy = Some(policy.without_new_parts());
        self.bulkhead = policy.bulkhead;
        self.slow_call = policy.breaker.and_then(|b| b.slow_call);
    }

    /// The last caller's whole policy, the new parts put back.
    pub fn full_policy(&self) -> Option<DependencyPolicy> {
        let mut policy = self.policy.clone()?;
        policy.bulkhead = self.bulkhead;
        if let Some(breaker) = &mut policy.breaker {
            breaker.slow_call = self.slow_call;
        }
        Some(policy)
    }

    fn acquire_one(
        &mut self,
        policy: &DependencyPolicy,
        now_us: i64,
        worker: &str,
        probe_lease: Duration,
        request: &PermitInput,
        local_free: &mut Option<u32>,
    ) -> Decision {
        let park = |p: &DependencyPolicy| Decision::Wait {
            reason: WaitReason::Breaker,
            until_us: now_us + us(p.breaker.map_or(Duration::from_secs(3600), |b| b.park_for)),
        };
        if self.held_open {
            return park(policy);
        }
        if policy.breaker.is_some() {
            match self.state {
                BreakerState::Closed => {}
                BreakerState::Open if self.open_until_us.is_some_and(|t| now_us < t) => {
                    return park(policy);
                }
                BreakerState::HalfOpen
                    if self
                        .probe
                        .as_ref()
                        .is_some_and(|p| p.expires_at_us > now_us) =>
                {
                    return park(policy);
                }
                BreakerState::Open | BreakerState::HalfOpen => {
                    // The cool-down is over (or the last probe was lost): this job is
                    // the probe. It skips the budget and takes a turn of the rate
                    // limit without waiting for it (one request per cool-down).
                    self.state = BreakerState::HalfOpen;
                    self.probe = Some(ProbeLease {
                        job: request.job,
                        worker: worker.to_string(),
                        expires_at_us: now_us + us(probe_lease).max(1),
                    });
                    if let Some(rate) = &policy.rate_limit {
                        let t = rate.interval_us();
                        self.next_start_us = self.next_start_us.max(now_us) + t;
                        self.reserved_until_us = self.reserved_until_us.max(now_us) + t;
                    }
                    self.count_traffic(policy, now_us, request.attempts > 1);
                    return Decision::Probe;
                }
            }
        }
        if let Some(bulkhead) = &policy.bulkhead {
            let shared_full = bulkhead
                .shared
                .is_some_and(|limit| self.in_flight.len() >= limit as usize);
            if shared_full || *local_free == Some(0) {
                self.turned_back += 1;
                let base = us(bulkhead.wait).max(1);
                let quiet_since = *self.last_ended_us.get_or_insert(now_us);
                let doublings = ((now_us - quiet_since).max(0) / base).min(MAX_DOUBLINGS);
                let wait = base << doublings;
                return Decision::Wait {
                    reason: WaitReason::Bulkhead,
                    until_us: now_us + wait,
                };
            }
        }
        let retry = request.attempts > 1 && !request.reserved;
        if let (true, Some(budget)) = (retry, &policy.retry_budget) {
            let len = us(budget.window);
            self.traffic.roll(now_us, len);
            let (fresh, retries) = self.traffic.weighted(now_us, len);
            let allowed = (budget.ratio * fresh).max(f64::from(budget.min_retries));
            if retries + 1.0 > allowed {
                return Decision::Wait {
                    reason: WaitReason::RetryBudget,
                    until_us: now_us + us(request.retry_delay).max(1),
                };
            }
        }
        let mut wait_us = 0;
        if let Some(rate) = &policy.rate_limit {
            let t = rate.interval_us();
            let tolerance = t * (i64::from(rate.burst) - 1);
            // Never wait in the slot longer than a third of the lease: the lease is
            // not heartbeated before the handler starts.
            let max_wait = us(rate.max_wait).min(us(probe_lease) / 3);
            // A new job takes the next turn on the schedule, behind every turn already
            // given out; a job back at its turn has one.
            let turn = if request.reserved {
                now_us
            } else {
                let turn = now_us.max(self.reserved_until_us - tolerance);
                self.reserved_until_us = self.reserved_until_us.max(turn) + t;
                if turn - now_us > max_wait {
                    return Decision::Wait {
                        reason: WaitReason::RateLimit,
                        until_us: turn,
                    };
                }
                turn
            };
            if turn > now_us {
                // A turn ahead on the schedule: it waits for it in its slot.
                wait_us = turn - now_us;
            } else {
                // Its turn has come (or passed: the worker claims late). Starts that
                // are due now are paced on their own clock, so jobs claimed late (a slow
                // or stalled worker) do not all go at once when it catches up.
                let start = now_us.max(self.next_start_us - tolerance);
                if start - now_us > max_wait {
                    return Decision::Wait {
                        reason: WaitReason::RateLimit,
                        until_us: start,
                    };
                }
                self.next_start_us = self.next_start_us.max(start) + t;
                wait_us = start - now_us;
            }
        }
        self.count_traffic(policy, now_us, retry);
        if let Some(free) = local_free {
            *free = free.saturating_sub(1);
        }
        Decision::Run { wait_us }
    }

    fn count_traffic(&mut self, policy: &DependencyPolicy, now_us: i64, retry: bool) {
        if let Some(budget) = &policy.retry_budget {
            self.traffic.roll(now_us, us(budget.window));
            self.traffic.cur[usize::from(retry)] += 1;
        }
    }

    /// Counts answers and moves the breaker: a probe's answer closes it (success),
    /// reopens it with a doubled cool-down (failure) or frees the probe's place
    /// (neutral); while closed, a failure share at or above the threshold over at
    /// least `min_requests` answers opens it. Returns true when it closed, so the
    /// caller releases the jobs parked on it.
    pub fn report(
        &mut self,
        policy: &DependencyPolicy,
        now_us: i64,
        successes: u64,
        failures: u64,
        probe: Option<(JobId, ProbeOutcome)>,
    ) -> bool {
        self.report_calls(
            policy,
            now_us,
            &Calls {
                successes,
                failures,
                probe,
                ..Calls::default()
            },
        )
    }

    /// [`DependencyRecord::report`], with slow calls and the attempts that ended:
    /// their bulkhead permits are freed, and while closed a share of slow calls at or
    /// above the slow-call threshold (over at least `min_requests` answers, slow ones
    /// included) opens the breaker too.
    pub fn report_calls(&mut self, policy: &DependencyPolicy, now_us: i64, calls: &Calls) -> bool {
        self.remember(policy);
        if !calls.finished.is_empty() {
            self.in_flight
                .retain(|held| !calls.finished.contains(&held.job));
            // A permit came free: the bulkhead's wait starts over from its base.
            self.last_ended_us = Some(now_us);
        }
        let Calls {
            successes,
            failures,
            slow,
            probe,
            ..
        } = *calls;
        let Some(breaker) = policy.breaker else {
            return false;
        };
        let len = us(breaker.window);
        self.outcomes.roll(now_us, len);
        self.outcomes.cur[0] += successes;
        self.outcomes.cur[1] += failures;
        self.slow.roll(now_us, len);
        self.slow.cur[0] += slow;
        if let Some((job, outcome)) = probe {
            let ours = self.state == BreakerState::HalfOpen
                && self.probe.as_ref().is_some_and(|p| p.job == job);
            if ours && !self.held_open {
                self.probe = None;
                match outcome {
                    ProbeOutcome::Success => {
                        self.close(now_us);
                        return true;
                    }
                    ProbeOutcome::Failure => {
                        let doubled = self.cooldown_us.max(us(breaker.cooldown)).saturating_mul(2);
                        self.cooldown_us = doubled.min(us(breaker.max_cooldown));
                        self.state = BreakerState::Open;
                        self.open_until_us = Some(now_us + self.cooldown_us);
                        self.changed_at_us = Some(now_us);
                    }
                    ProbeOutcome::Neutral => {}
                }
                return false;
            }
        }
        if self.state == BreakerState::Closed && !self.held_open {
            let (ok, failed) = self.outcomes.weighted(now_us, len);
            let (slow, _) = self.slow.weighted(now_us, len);
            let total = ok + failed + slow;
            let too_slow = breaker
                .slow_call
                .is_some_and(|s| total > 0.0 && slow / total >= s.threshold);
            if total >= f64::from(breaker.min_requests)
                && (failed / total >= breaker.failure_threshold || too_slow)
            {
                self.state = BreakerState::Open;
                self.trips += 1;
                self.opened_at_us = Some(now_us);
                self.cooldown_us = us(breaker.cooldown);
                self.open_until_us = Some(now_us + self.cooldown_us);
                self.probe = None;
                self.changed_at_us = Some(now_us);
            }
        }
        false
    }

    fn close(&mut self, now_us: i64) {
        self.state = BreakerState::Closed;
        self.held_open = false;
        self.open_until_us = None;
        self.probe = None;
        self.cooldown_us = 0;
        self.outcomes = Window::default();
        self.slow = Window::default();
        self.changed_at_us = Some(now_us);
    }

    /// An operator's action. Returns true when the breaker closed (release the parked
    /// jobs).
    pub fn set(&mut self, action: BreakerAction, now_us: i64) -> bool {
        match action {
            BreakerAction::Open => {
                if !self.held_open || self.state != BreakerState::Open {
                    self.changed_at_us = Some(now_us);
                }
                self.held_open = true;
                if self.state == BreakerState::Closed {
                    self.trips += 1;
                    self.opened_at_us = Some(now_us);
                }
                self.state = BreakerState::Open;
                self.probe = None;
                self.open_until_us = None;
                false
            }
            BreakerAction::Close => {
                self.close(now_us);
                true
            }
            BreakerAction::Auto => {
                if self.held_open {
                    self.held_open = false;
                    if self.state == BreakerState::Open {
                        self.open_until_us = Some(now_us);
                    }
                    self.changed_at_us = Some(now_us);
                }
                false
            }
        }
    }

    /// Turns for `n` released jobs: the first at the returned time, the others
    /// `spacing` apart (microseconds), reserved on the rate limit's schedule so later
    /// jobs queue behind them. Without a rate limit in the stored policy: all at once.
    pub fn reserve_turns(&mut self, now_us: i64, n: u64) -> (i64, i64) {
        let Some(rate) = self.rate_limit() else {
            return (now_us, 0);
        };
        let t = rate.interval_us();
        let tolerance = t * (i64::from(rate.burst) - 1);
        let first = now_us.max(self.reserved_until_us - tolerance);
        let last = first.saturating_add(
            t.saturating_mul(i64::try_from(n.saturating_sub(1)).unwrap_or(i64::MAX)),
        );
        self.reserved_until_us = self.reserved_until_us.max(last).saturating_add(t);
        (first, t)
    }

    fn rate_limit(&self) -> Option<RateLimit> {
        self.policy.as_ref().and_then(|p| p.rate_limit)
    }

    /// Whether the breaker wants a probe and none is in flight: open past its
    /// cool-down, or half-open with its probe lost, and not held open. The sweep makes
    /// one parked job due for it when no other job of the key is coming.
    pub fn wants_probe(&self, now_us: i64) -> bool {
        if self.held_open {
            return false;
        }
        match self.state {
            BreakerState::Closed => false,
            BreakerState::Open => self.open_until_us.is_none_or(|t| now_us >= t),
            BreakerState::HalfOpen => self
                .probe
                .as_ref()
                .is_none_or(|p| p.expires_at_us <= now_us),
        }
    }
}
