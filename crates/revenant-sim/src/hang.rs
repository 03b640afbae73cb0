//! A provider that hangs beside one that answers in a fixed time, in one queue's
//! slots: what the bulkhead and slow-call counting are for (`revenant demo --hang`
//! measures the same scenario).
//!
//! The model plays what one worker does, in virtual time, event by event, with the
//! runtime's own state machine for each dependency
//! ([`DependencyRecord::acquire_bounded`] and [`DependencyRecord::report_calls`]: the
//! breaker's sliding window and minimum answers, slow calls, the bulkhead's turn-back
//! waits, the rate limit's turns, the retry budget), so it cannot drift from it:
//!
//! - `healthy` and `hanging` jobs are enqueued together, interleaved (healthy,
//!   hanging, healthy, ...); the store hands out due jobs in `(run_at, id)` order;
//! - **the fetcher** (`revenant_runtime`'s): it claims as many due jobs as it has free
//!   slots, once half the slots are free or once the claim cooldown since its last
//!   claim has passed with at least one free; a claim that finds fewer due jobs than
//!   free slots sleeps for the poll interval. Each claim and its permit calls take
//!   `claim_secs` (a store round trip) before the claimed jobs start;
//! - **the gate**: each claimed job asks its dependency's record for a permit, with
//!   the worker's own bulkhead (`local_free`: the key's limit for this queue minus its
//!   attempts in flight). Jobs past `local_free` wait in the worker, holding no slot,
//!   as many per key as its limit (for at most `hold_secs`); the rest ask the record
//!   and are turned back. A job turned back (bulkhead) or parked (breaker) frees its
//!   slot at once and is due again when the record says;
//! - **held jobs and the blocked fetcher**: when an attempt of a key with a bulkhead
//!   ends, the held jobs are offered the free slots first; one that gets its permit
//!   starts after the permit call (`permit_secs`, a store round trip). A claim whose jobs met a
//!   full bulkhead makes the fetcher *blocked*: it then claims only as many jobs as
//!   permits came back beyond what the held jobs took, plus the room left for held
//!   jobs of every key with a bulkhead it has gated, plus one per poll interval, until
//!   a claim's jobs all run;
//! - a healthy job holds its slot for the provider's `service_secs` plus
//!   `overhead_secs` (what an attempt costs the machine around the call: the HTTP
//!   round trip, the settle, the slot's release; see [`calibrate`]);
//! - a hanging job holds its slot for its rate-limit wait, then until its
//!   `timeout_secs`; it counts for the breaker at its timeout, or as slow at the
//!   slow-call duration if that comes first, and comes back `retry_secs` after it
//!   timed out;
//! - **the reporter** sends each dependency's answers, and the attempts that ended,
//!   every `report_secs` from the worker's start, as the runtime's reporter does;
//! - the breaker's fixed windows are aligned to the Unix epoch, as the stores' are, so
//!   the scenario says when, on the wall clock, it starts (`start_us`).
//!
//! The machine's jitter (timers, the store, the HTTP client) is modelled only as an
//! attempt's overhead that varies (`overhead_varies`, played over several seeds by
//! [`predict_typical`]); the claim's and the permit call's costs are fixed. Not
//! modelled: the HTTP client's connection setup beyond the calibrated overhead, and
//! retries' jitter (a hanging job's retry comes after the healthy jobs are done in
//! every scenario here).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use revenant_core::dependency::{Calls, Decision, DependencyPolicy, DependencyRecord, PermitInput};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How many seeds [`predict_typical`] plays when attempts' times vary.
pub const TYPICAL_SEEDS: u64 = 15;

/// The scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HangScenario {
    /// The queue's slots.
    pub slots: u32,
    /// Jobs of the dependency that answers.
    pub healthy: u32,
    /// Jobs of the dependency that hangs.
    pub hanging: u32,
    /// How long the healthy provider takes to answer, seconds.
    pub service_secs: f64,
    /// What one healthy attempt holds its slot for on top of the provider's answer,
    /// seconds: the HTTP round trip, the settle, the slot given back. Machine-bound;
    /// [`calibrate`] finds it from a run of the healthy jobs alone.
    pub overhead_secs: f64,
    /// Whether the overhead varies from one attempt to the next: drawn uniformly
    /// between none and twice `overhead_secs` (so its mean is `overhead_secs`), from
    /// `seed`. A real run's attempts never end in lockstep (timers, the store, the
    /// HTTP client); a model whose attempts all take the same time locks into the
    /// fetcher's claim cadence, and its prediction jumps by a fifth between two
    /// overheads a few milliseconds apart. [`predict_typical`] plays several seeds and
    /// keeps the median.
    pub overhead_varies: bool,
    /// The seed for `overhead_varies`.
    pub seed: u64,
    /// What one claim costs before its jobs start, seconds: the claim and the permit
    /// calls (store round trips).
    pub claim_secs: f64,
    /// What the permit call alone costs, seconds: a held job offered a slot starts
    /// after it. Without it, a run whose jobs mostly start from the held ones (the
    /// healthy jobs alone, past their own bulkhead) would pass that round trip to
    /// [`calibrate`]'s overhead, which then counts it again on claimed jobs.
    pub permit_secs: f64,
    /// The hanging calls' timeout, seconds.
    pub timeout_secs: f64,
    /// When a timed-out hanging job is due again, seconds after it timed out.
    pub retry_secs: f64,
    /// The healthy dependency's policy (breaker, bulkhead, ...).
    pub healthy_policy: DependencyPolicy,
    /// The hanging dependency's policy.
    pub hanging_policy: DependencyPolicy,
    /// How often answers are sent to the store, seconds (the report interval).
    pub report_secs: f64,
    /// The fetcher's claim cooldown, seconds.
    pub claim_cooldown_secs: f64,
    /// The fetcher's poll interval, seconds: how long it sleeps after a claim that
    /// found fewer due jobs than free slots.
    pub poll_secs: f64,
    /// The jobs' lease, seconds (a probe's and a bulkhead permit's lapse).
    pub lease_secs: f64,
    /// How long a job past its key's bulkhead may wait in the worker before it is
    /// given back unstarted, seconds (the runtime's: half of what is left of the lease
    /// after one heartbeat interval; 19.9 s with the default 60 s lease).
    pub hold_secs: f64,
    /// When the run starts, microseconds since the Unix epoch: the breaker's windows
    /// are aligned to it.
    pub start_us: i64,
}

impl HangScenario {
    /// The scenario of `revenant demo --hang` with `policy` for both dependencies (the
    /// hanging one's rate limit is its own): 10 slots, 5 s timeout, 10 s backoff, the
    /// runtime's 200 ms report interval and 20 ms claim cooldown, the demo's 20 ms
    /// poll, 30 s lease. No overhead, no claim cost.
    pub fn demo(
        healthy: u32,
        hanging: u32,
        service_secs: f64,
        healthy_policy: DependencyPolicy,
        hanging_policy: DependencyPolicy,
    ) -> HangScenario {
        HangScenario {
            slots: 10,
            healthy,
            hanging,
            service_secs,
            overhead_secs: 0.0,
            overhead_varies: false,
            seed: 0,
            claim_secs: 0.0,
            permit_secs: 0.0,
            timeout_secs: 5.0,
            retry_secs: 10.0,
            healthy_policy,
            hanging_policy,
            report_secs: 0.2,
            claim_cooldown_secs: 0.02,
            poll_secs: 0.02,
            lease_secs: 30.0,
            hold_secs: 19.875,
            start_us: 0,
        }
    }
}

/// What the model predicts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HangPrediction {
    /// When the last healthy job is delivered, seconds from the start.
    pub healthy_done_secs: f64,
    /// The most slots hanging jobs held at once.
    pub hanging_peak_slots: u32,
    /// When the hanging dependency's breaker opened, if it did before the healthy
    /// jobs were done.
    pub breaker_opened_secs: Option<f64>,
    /// Hanging jobs turned back at the bulkhead until the healthy jobs were done.
    pub hanging_turned_back: u64,
    /// Healthy jobs turned back at the bulkhead (its own limit).
    pub healthy_turned_back: u64,
    /// Claims the fetcher made.
    pub claims: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Healthy,
    Hanging,
}

impl Kind {
    fn index(self) -> usize {
        match self {
            Kind::Healthy => 0,
            Kind::Hanging => 1,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Job {
    kind: Kind,
    /// Due at, seconds; `None` while claimed, parked or done.
    run_at: Option<f64>,
    attempts: i32,
}

#[derive(Debug, Clone, Copy)]
struct Running {
    job: usize,
    ends: f64,
    /// When it counts as slow (hanging calls with slow calls counted).
    slow_at: Option<f64>,
    /// Counted slow already.
    counted_slow: bool,
}

fn secs_us(s: f64) -> i64 {
    (s * 1e6).round() as i64
}

/// Runs the scenario until the last healthy job is delivered.
///
/// ```
/// use revenant_core::dependency::{Bulkhead, DependencyPolicy};
/// use revenant_sim::hang::{predict, HangScenario};
/// let without = DependencyPolicy { bulkhead: None, ..DependencyPolicy::default() };
/// let alone = HangScenario::demo(200, 0, 0.05, without.clone(), without.clone());
/// // 200 jobs of 50 ms on 10 slots: a second.
/// assert!((predict(&alone).healthy_done_secs - 1.0).abs() < 0.01);
/// // Beside 200 hanging jobs, every slot waits out a timeout before the breaker opens.
/// let beside = HangScenario { hanging: 200, ..alone };
/// assert!(predict(&beside).healthy_done_secs > 5.0);
/// // With the default bulkhead (half the slots), the hanging one holds at most 5.
/// let with = HangScenario::demo(200, 200, 0.05, DependencyPolicy::default(), DependencyPolicy::default());
/// let p = predict(&with);
/// assert_eq!(p.hanging_peak_slots, 5);
/// assert!(p.healthy_done_secs < 5.0, "{p:?}");
/// ```
pub fn predict(s: &HangScenario) -> HangPrediction {
    let slots = s.slots as usize;
    let policies = [&s.healthy_policy, &s.hanging_policy];
    let limits: [Option<u32>; 2] = [
        s.healthy_policy.bulkhead.map(|b| b.limit_for(slots)),
        s.hanging_policy.bulkhead.map(|b| b.limit_for(slots)),
    ];
    let mut records = [DependencyRecord::default(), DependencyRecord::default()];
    let mut pending = [Calls::default(), Calls::default()];
    let lease = Duration::from_secs_f64(s.lease_secs.max(0.001));
    let mut rng = StdRng::seed_from_u64(s.seed);

    let mut jobs: Vec<Job> = Vec::new();
    let (mut h, mut g) = (0, 0);
    while h < s.healthy || g < s.hanging {
        for (kind, n, total) in [
            (Kind::Healthy, &mut h, s.healthy),
            (Kind::Hanging, &mut g, s.hanging),
        ] {
            if *n < total {
                jobs.push(Job {
                    kind,
                    run_at: Some(0.0),
                    attempts: 0,
                });
                *n += 1;
            }
        }
    }

    let enough = slots.div_ceil(2).max(1);
    let mut running: Vec<Running> = Vec::new();
    // Slots reserved by a claim in flight (its jobs start at `claim_done`).
    let mut claim_in_flight: Option<(f64, Vec<usize>)> = None;
    let mut last_claim: Option<f64> = None;
    let mut asleep_until: Option<f64> = None;
    let mut next_report = s.report_secs;
    let mut healthy_left = s.healthy;
    let mut healthy_done = 0.0f64;
    let mut peak = 0u32;
    let mut turned_back = [0u64; 2];
    let mut claims = 0u64;
    let mut breaker_opened: Option<f64> = None;
    // Jobs past their key's bulkhead waiting in the worker (job, since), oldest
    // first; how many per key, and whether the gate has seen the key (the runtime
    // keeps a count for every key with a bulkhead it gated, held jobs or none).
    let mut held: Vec<(usize, f64)> = Vec::new();
    let mut held_n = [0u32; 2];
    let mut gated = [false; 2];
    // Permits given back (attempts of a key with a bulkhead ended) since last seen.
    let mut freed = 0usize;
    // The fetcher's blocked state: since when, and how many jobs it may claim.
    let mut blocked: Option<(f64, usize)> = None;
    let mut now = 0.0f64;
    let mut guard = 0u64;

    while healthy_left > 0 {
        guard += 1;
        if guard > 5_000_000 {
            break;
        }
        let now_us = s.start_us + secs_us(now);
        // Attempts that end now (healthy answers, hanging timeouts), and slow counts.
        let mut still = Vec::with_capacity(running.len());
        for mut r in running.drain(..) {
            let kind = jobs[r.job].kind;
            let k = kind.index();
            if r.slow_at.is_some_and(|at| at <= now) {
                pending[k].slow += 1;
                r.slow_at = None;
                r.counted_slow = true;
            }
            if r.ends <= now {
                pending[k].finished.push(r.job as i64);
                if limits[k].is_some() {
                    freed += 1;
                }
                match kind {
                    Kind::Healthy => {
                        pending[k].successes += 1;
                        healthy_left -= 1;
                        healthy_done = r.ends;
                        jobs[r.job].run_at = None;
                    }
                    Kind::Hanging => {
                        // A call counts once: slow while it ran, or failed now.
                        if !r.counted_slow {
                            pending[k].failures += 1;
                        }
                        jobs[r.job].run_at = Some(r.ends + s.retry_secs);
                    }
                }
            } else {
                still.push(r);
            }
        }
        running = still;
        if healthy_left == 0 {
            break;
        }
        // The reporter's tick.
        if now >= next_report {
            for k in 0..2 {
                let calls = std::mem::take(&mut pending[k]);
                if calls.successes + calls.failures + calls.slow > 0 || !calls.finished.is_empty() {
                    records[k].report_calls(policies[k], now_us, &calls);
                }
            }
            if breaker_opened.is_none() && records[1].trips > 0 {
                breaker_opened = Some(now);
            }
            while next_report <= now {
                next_report += s.report_secs;
            }
        }
        // Held jobs that waited their longest go back, their attempt given back.
        while held
            .first()
            .is_some_and(|(_, since)| since + s.hold_secs <= now)
        {
            let (i, _) = held.remove(0);
            held_n[jobs[i].kind.index()] -= 1;
            jobs[i].attempts -= 1;
            jobs[i].run_at = Some(now);
        }
        // Permits came back: the held jobs are offered the free slots first.
        if freed > 0 {
            if let Some((_, allowed)) = &mut blocked {
                *allowed += freed;
            }
            freed = 0;
            let free = slots.saturating_sub(running.len());
            let n = held.len().min(free);
            if n > 0 {
                let offered: Vec<usize> = held.drain(..n).map(|(i, _)| i).collect();
                for &i in &offered {
                    held_n[jobs[i].kind.index()] -= 1;
                }
                let (ran, _) = gate(
                    s,
                    &policies,
                    &limits,
                    &mut records,
                    &mut jobs,
                    &mut running,
                    &mut turned_back,
                    (&mut held, &mut held_n, &mut gated),
                    lease,
                    (now, s.permit_secs),
                    now_us,
                    &mut rng,
                    offered,
                );
                if let Some((_, allowed)) = &mut blocked {
                    *allowed = allowed.saturating_sub(ran);
                }
            }
        }
        // A claim in flight comes back: its jobs go through the gate.
        if let Some((done, claimed)) = claim_in_flight.take() {
            if done <= now {
                let (ran, at_bulkhead) = gate(
                    s,
                    &policies,
                    &limits,
                    &mut records,
                    &mut jobs,
                    &mut running,
                    &mut turned_back,
                    (&mut held, &mut held_n, &mut gated),
                    lease,
                    (now, 0.0),
                    now_us,
                    &mut rng,
                    claimed,
                );
                if at_bulkhead > 0 {
                    blocked.get_or_insert((now, 0));
                } else if ran > 0 {
                    blocked = None;
                }
                let held = running
                    .iter()
                    .filter(|r| jobs[r.job].kind == Kind::Hanging)
                    .count() as u32;
                peak = peak.max(held);
            } else {
                claim_in_flight = Some((done, claimed));
            }
        }
        // The fetcher.
        if claim_in_flight.is_none() && asleep_until.is_none_or(|t| t <= now) {
            asleep_until = None;
            let free = slots.saturating_sub(running.len());
            let mut want = free;
            if let Some((since, allowed)) = &mut blocked {
                if now >= *since + s.poll_secs - 1e-12 {
                    *since = now;
                    *allowed += 1;
                }
                let room: u32 = (0..2)
                    .filter(|&k| gated[k])
                    .map(|k| limits[k].unwrap_or(0).saturating_sub(held_n[k]))
                    .sum();
                want = want.min(*allowed + room as usize);
            }
            let cooled = last_claim.is_none_or(|t| now >= t + s.claim_cooldown_secs - 1e-12);
            if want >= enough || (want >= 1 && cooled) {
                claims += 1;
                last_claim = Some(now);
                if let Some((_, allowed)) = &mut blocked {
                    *allowed = allowed.saturating_sub(want);
                }
                let mut due: Vec<usize> = (0..jobs.len())
                    .filter(|&i| jobs[i].run_at.is_some_and(|t| t <= now + 1e-12))
                    .collect();
                due.sort_by(|&a, &b| {
                    let (ta, tb) = (jobs[a].run_at.unwrap_or(0.0), jobs[b].run_at.unwrap_or(0.0));
                    ta.total_cmp(&tb).then(a.cmp(&b))
                });
                due.truncate(want);
                let got = due.len();
                for &i in &due {
                    jobs[i].run_at = None;
                    jobs[i].attempts += 1;
                }
                if got < want {
                    asleep_until = Some(now + s.claim_secs + s.poll_secs);
                }
                // The claimed jobs hold their slots while the claim is in flight.
                for &i in &due {
                    running.push(Running {
                        job: i,
                        ends: f64::INFINITY,
                        slow_at: None,
                        counted_slow: false,
                    });
                }
                claim_in_flight = Some((now + s.claim_secs, due));
                if s.claim_secs <= 0.0 {
                    continue;
                }
            }
        }
        // The next event.
        let mut next = f64::INFINITY;
        for r in &running {
            next = next.min(r.ends);
            if let Some(at) = r.slow_at {
                next = next.min(at);
            }
        }
        next = next.min(next_report);
        if let Some((_, since)) = held.first() {
            next = next.min(since + s.hold_secs);
        }
        if let Some((since, _)) = blocked {
            if since + s.poll_secs > now {
                next = next.min(since + s.poll_secs);
            }
        }
        if let Some((done, _)) = &claim_in_flight {
            next = next.min(*done);
        } else if let Some(t) = asleep_until {
            next = next.min(t);
        } else {
            let free = slots.saturating_sub(running.len());
            if free >= 1 {
                // A claim the cooldown holds back; a blocked fetcher that may claim
                // nothing waits for an end or its poll instead (both above).
                let cooled = last_claim.map_or(now, |t| t + s.claim_cooldown_secs);
                if cooled > now {
                    next = next.min(cooled);
                }
            }
        }
        if !next.is_finite() {
            break;
        }
        now = next.max(now);
    }
    HangPrediction {
        healthy_done_secs: healthy_done,
        hanging_peak_slots: peak,
        breaker_opened_secs: breaker_opened.filter(|t| *t <= healthy_done),
        hanging_turned_back: turned_back[1],
        healthy_turned_back: turned_back[0],
        claims,
    }
}

/// The typical run: [`predict`] for [`TYPICAL_SEEDS`] seeds (from the scenario's),
/// the one with the median time for the healthy jobs. Only [`predict`] when attempts'
/// times do not vary (`overhead_varies` false).
pub fn predict_typical(s: &HangScenario) -> HangPrediction {
    if !s.overhead_varies {
        return predict(s);
    }
    let mut runs: Vec<HangPrediction> = (0..TYPICAL_SEEDS)
        .map(|n| {
            predict(&HangScenario {
                seed: s.seed.wrapping_add(n),
                ..s.clone()
            })
        })
        .collect();
    runs.sort_by(|a, b| a.healthy_done_secs.total_cmp(&b.healthy_done_secs));
    runs[runs.len() / 2]
}

/// The gate for one claimed batch, or for held jobs offered slots (their permit
/// call takes `permit_secs` before they start): one permit call per key, in the
/// order the keys first appear in the batch, as the runtime's gate asks.
#[allow(clippy::too_many_arguments)] // reason: the model's state, passed apart so each piece's borrow is plain
fn gate(
    s: &HangScenario,
    policies: &[&DependencyPolicy; 2],
    limits: &[Option<u32>; 2],
    records: &mut [DependencyRecord; 2],
    jobs: &mut [Job],
    running: &mut Vec<Running>,
    turned_back: &mut [u64; 2],
    (held, held_n, gated): (&mut Vec<(usize, f64)>, &mut [u32; 2], &mut [bool; 2]),
    lease: Duration,
    (now, permit_secs): (f64, f64),
    now_us: i64,
    rng: &mut StdRng,
    claimed: Vec<usize>,
) -> (usize, usize) {
    let (mut ran, mut at_bulkhead) = (0, 0);
    // The claimed jobs held their slots as placeholders until now.
    running.retain(|r| r.ends.is_finite() || !claimed.contains(&r.job));
    let mut order: Vec<Kind> = Vec::new();
    for &i in &claimed {
        if !order.contains(&jobs[i].kind) {
            order.push(jobs[i].kind);
        }
    }
    for kind in order {
        let k = kind.index();
        let batch: Vec<usize> = claimed
            .iter()
            .copied()
            .filter(|&i| jobs[i].kind == kind)
            .collect();
        let in_flight = running.iter().filter(|r| jobs[r.job].kind == kind).count() as u32;
        let local_free = limits[k].map(|l| l.saturating_sub(in_flight).min(batch.len() as u32));
        // Past the worker's bulkhead: held in the worker while the key has room for
        // waiting jobs (its limit), with no permit call; the rest ask the record,
        // which turns them back.
        let within = local_free.map_or(batch.len(), |f| f as usize);
        let holding = match limits[k] {
            Some(limit) => {
                gated[k] = true;
                (batch.len() - within).min(limit.saturating_sub(held_n[k]) as usize)
            }
            None => 0,
        };
        for &i in &batch[within..within + holding] {
            held.push((i, now));
            held_n[k] += 1;
            at_bulkhead += 1;
        }
        let batch: Vec<usize> = batch[..within]
            .iter()
            .chain(&batch[within + holding..])
            .copied()
            .collect();
        if batch.is_empty() {
            continue;
        }
        let requests: Vec<PermitInput> = batch
            .iter()
            .map(|&i| PermitInput {
                job: i as i64,
                attempts: jobs[i].attempts,
                reserved: false,
                retry_delay: Duration::from_secs_f64(s.retry_secs),
            })
            .collect();
        let decisions =
            records[k].acquire_bounded(policies[k], now_us, "sim", lease, &requests, local_free);
        for (n, (&i, decision)) in batch.iter().zip(decisions).enumerate() {
            let wait = match decision {
                Decision::Run { wait_us } => wait_us as f64 / 1e6,
                Decision::Probe => 0.0,
                Decision::Wait { reason, until_us } => {
                    if reason == revenant_core::dependency::WaitReason::Bulkhead {
                        turned_back[k] += 1;
                    }
                    at_bulkhead += usize::from(n >= within);
                    jobs[i].attempts -= 1;
                    jobs[i].run_at = Some((until_us - s.start_us) as f64 / 1e6);
                    continue;
                }
            };
            // A claimed batch's permit call is in the claim's cost; a held job's is
            // its own.
            let start = now + permit_secs + wait;
            let (ends, slow_at) = match kind {
                Kind::Healthy => {
                    let overhead = if s.overhead_varies && s.overhead_secs > 0.0 {
                        rng.random_range(0.0..=2.0 * s.overhead_secs)
                    } else {
                        s.overhead_secs
                    };
                    (start + s.service_secs + overhead, None)
                }
                Kind::Hanging => {
                    let slow = policies[k]
                        .breaker
                        .and_then(|b| b.slow_call)
                        .map(|c| c.duration.as_secs_f64())
                        .filter(|d| *d < s.timeout_secs);
                    (start + s.timeout_secs, slow.map(|d| start + d))
                }
            };
            ran += 1;
            running.push(Running {
                job: i,
                ends,
                slow_at,
                counted_slow: false,
            });
        }
    }
    (ran, at_bulkhead)
}

/// The per-attempt overhead that makes the model's time for the healthy jobs alone
/// (`alone`, with `hanging: 0`) equal `measured_secs`: what the machine adds to each
/// attempt, found on the run that has nothing else in it. Searched between 0 and
/// `measured_secs`; 0 when the model alone is already slower than measured.
pub fn calibrate(alone: &HangScenario, measured_secs: f64) -> f64 {
    let time = |overhead: f64| {
        predict_typical(&HangScenario {
            overhead_secs: overhead,
            hanging: 0,
            ..alone.clone()
        })
        .healthy_done_secs
    };
    if time(0.0) >= measured_secs {
        return 0.0;
    }
    let (mut lo, mut hi) = (0.0f64, measured_secs.max(0.001));
    for _ in 0..40 {
        let mid = (lo + hi) / 2.0;
        if time(mid) < measured_secs {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use revenant_core::dependency::{BreakerPolicy, RateLimit};

    fn before() -> DependencyPolicy {
        DependencyPolicy {
            bulkhead: None,
            breaker: Some(BreakerPolicy {
                slow_call: None,
                ..BreakerPolicy::default()
            }),
            ..DependencyPolicy::default()
        }
    }

    fn hanging(policy: DependencyPolicy) -> DependencyPolicy {
        DependencyPolicy {
            rate_limit: Some(RateLimit::per_second(50.0)),
            ..policy
        }
    }

    #[test]
    fn without_a_bulkhead_the_healthy_jobs_wait_for_the_breaker() {
        let p = predict(&HangScenario::demo(
            200,
            200,
            0.05,
            before(),
            hanging(before()),
        ));
        assert_eq!(p.hanging_peak_slots, 10);
        // Every slot ends up in a 5 s timeout; the breaker hears of them at the next
        // report, 5.2 s or so, and opens.
        let opened = p.breaker_opened_secs.unwrap();
        assert!((5.0..5.5).contains(&opened), "{p:?}");
        assert!(p.healthy_done_secs > 5.2, "{p:?}");
    }

    #[test]
    fn slow_calls_open_the_breaker_before_the_timeouts() {
        let slow = DependencyPolicy {
            breaker: Some(BreakerPolicy {
                slow_call: Some(revenant_core::dependency::SlowCall {
                    duration: Duration::from_secs(1),
                    threshold: 0.5,
                }),
                ..BreakerPolicy::default()
            }),
            ..before()
        };
        let p = predict(&HangScenario::demo(
            200,
            200,
            0.05,
            slow.clone(),
            hanging(slow),
        ));
        let opened = p.breaker_opened_secs.unwrap();
        assert!((1.0..1.5).contains(&opened), "{p:?}");
        let without = predict(&HangScenario::demo(
            200,
            200,
            0.05,
            before(),
            hanging(before()),
        ));
        assert!(
            p.healthy_done_secs < without.healthy_done_secs,
            "{p:?} {without:?}"
        );
    }

    #[test]
    fn the_bulkhead_keeps_the_hanging_dependency_to_its_limit() {
        let with = DependencyPolicy::default();
        let p = predict(&HangScenario::demo(
            200,
            200,
            0.05,
            with.clone(),
            hanging(with),
        ));
        assert_eq!(p.hanging_peak_slots, 5);
        assert!(p.hanging_turned_back > 0, "{p:?}");
        assert_eq!(p.breaker_opened_secs, None, "done before any timeout");
    }

    #[test]
    fn a_varying_overhead_keeps_the_prediction_from_jumping() {
        // Attempts that all take the same time lock into the claim cadence: a few
        // milliseconds more overhead moved the time beside the hang by a fifth.
        let with = DependencyPolicy::default();
        let at = |overhead_secs: f64, overhead_varies: bool| {
            predict_typical(&HangScenario {
                overhead_secs,
                overhead_varies,
                claim_secs: 0.0045,
                permit_secs: 0.002,
                ..HangScenario::demo(200, 200, 0.05, with.clone(), hanging(with.clone()))
            })
            .healthy_done_secs
        };
        let fixed: Vec<f64> = [0.004, 0.006, 0.008, 0.010, 0.012]
            .map(|o| at(o, false))
            .to_vec();
        let varying: Vec<f64> = [0.004, 0.006, 0.008, 0.010, 0.012]
            .map(|o| at(o, true))
            .to_vec();
        let worst_step = |times: &[f64]| {
            times
                .windows(2)
                .map(|w| (w[1] - w[0]).abs() / w[0])
                .fold(0.0f64, f64::max)
        };
        assert!(
            worst_step(&fixed) > 0.15,
            "the lockstep this guards against: {fixed:?}"
        );
        assert!(worst_step(&varying) < 0.08, "{varying:?}");
        // More overhead never makes the healthy jobs faster.
        assert!(
            varying.windows(2).all(|w| w[1] >= w[0] - 0.02),
            "{varying:?}"
        );
    }

    #[test]
    fn a_held_job_starts_after_its_permit_call() {
        // Alone, past their own bulkhead (5 of 10 slots), most healthy jobs start from
        // the held ones: each waits for its permit call.
        let alone = |permit_secs: f64| {
            predict(&HangScenario {
                permit_secs,
                ..HangScenario::demo(
                    200,
                    0,
                    0.05,
                    DependencyPolicy::default(),
                    DependencyPolicy::default(),
                )
            })
            .healthy_done_secs
        };
        let (without, with) = (alone(0.0), alone(0.005));
        // 40 rounds of 5; all but the first start from held jobs.
        assert!(with - without > 30.0 * 0.005, "{without} then {with}");
    }

    #[test]
    fn calibration_finds_the_overhead_it_was_given() {
        let alone = HangScenario {
            overhead_secs: 0.013,
            ..HangScenario::demo(
                200,
                0,
                0.05,
                DependencyPolicy::default(),
                DependencyPolicy::default(),
            )
        };
        let measured = predict(&alone).healthy_done_secs;
        let found = calibrate(&alone, measured);
        let again = predict(&HangScenario {
            overhead_secs: found,
            ..alone
        });
        assert!(
            (again.healthy_done_secs - measured).abs() < 0.01 * measured,
            "{found} gives {again:?}, want {measured}"
        );
    }
}
