//! A provider that hangs beside one that answers at once, in one queue's slots: what
//! the bulkhead and slow-call counting are for (`revenant demo --hang` measures the
//! same scenario).
//!
//! The model, in virtual time, event by event:
//!
//! - one worker, `slots` slots; `healthy` and `hanging` jobs enqueued together,
//!   interleaved (healthy, hanging, healthy, ...), claimed in that order;
//! - a healthy job holds its slot for `service_secs` (calibrate it from a run of the
//!   healthy jobs alone: their time × slots / jobs);
//! - a hanging job holds its slot until its `timeout_secs`; its attempt then fails and
//!   it comes back after `retry_secs` (its backoff);
//! - the breaker: each hanging call is counted when it times out or, with slow calls
//!   counted, once it has run `slow_after_secs`; the count reaches the store
//!   `report_secs` later; at `min_requests` answers (all failures or slow: the share
//!   is 100%) it opens and every hanging job claimed after that is parked, its slot
//!   free at once;
//! - the bulkhead: at most `limit` hanging jobs in flight; one claimed past it goes
//!   back for `bulkhead_wait_secs`, its slot free at once.
//!
//! Claim latency, store round trips and the scheduler are not modelled: the
//! calibration from the run alone carries what a healthy job costs on the machine.

use serde::{Deserialize, Serialize};

/// The scenario.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HangScenario {
    /// The queue's slots.
    pub slots: u32,
    /// Jobs of the dependency that answers.
    pub healthy: u32,
    /// Jobs of the dependency that hangs.
    pub hanging: u32,
    /// How long a healthy job holds its slot, seconds.
    pub service_secs: f64,
    /// The hanging calls' timeout, seconds.
    pub timeout_secs: f64,
    /// When a timed-out hanging job is due again, seconds after it timed out.
    pub retry_secs: f64,
    /// Slow calls count for the breaker after this long (`None`: only timeouts).
    pub slow_after_secs: Option<f64>,
    /// Answers the breaker needs in its window before it opens (`None`: no breaker).
    pub min_requests: Option<u32>,
    /// How late answers reach the breaker, seconds (the report interval).
    pub report_secs: f64,
    /// The bulkhead: hanging jobs in flight at most (`None`: no bulkhead).
    pub limit: Option<u32>,
    /// How long a job turned back at the bulkhead waits, seconds.
    pub bulkhead_wait_secs: f64,
}

/// What the model predicts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HangPrediction {
    /// When the last healthy job is delivered, seconds from the start.
    pub healthy_done_secs: f64,
    /// The most slots hanging jobs held at once.
    pub hanging_peak_slots: u32,
    /// When the breaker opened, if it did before the healthy jobs were done.
    pub breaker_opened_secs: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Healthy,
    Hanging,
}

/// Runs the scenario until the last healthy job is delivered.
///
/// ```
/// use revenant_sim::hang::{predict, HangScenario};
/// let alone = HangScenario {
///     slots: 10, healthy: 200, hanging: 0, service_secs: 0.01, timeout_secs: 5.0,
///     retry_secs: 10.0, slow_after_secs: None, min_requests: Some(10),
///     report_secs: 0.2, limit: None, bulkhead_wait_secs: 0.5,
/// };
/// assert!((predict(&alone).healthy_done_secs - 0.2).abs() < 1e-9);
/// // Beside 200 hanging jobs, every slot waits out a timeout before the breaker opens.
/// let beside = HangScenario { hanging: 200, ..alone };
/// assert!(predict(&beside).healthy_done_secs > 5.0);
/// // With half the slots for the hanging dependency, the healthy one keeps the rest.
/// let bulkhead = HangScenario { limit: Some(5), ..beside };
/// let p = predict(&bulkhead);
/// assert!(p.healthy_done_secs <= 2.0 * 0.2 + 0.02, "{p:?}");
/// assert_eq!(p.hanging_peak_slots, 5);
/// ```
pub fn predict(s: &HangScenario) -> HangPrediction {
    // Ready jobs: (due at, order, kind). Claimed in (due, order) order.
    let mut ready: Vec<(f64, u64, Kind)> = Vec::new();
    let (mut h, mut g, mut order) = (0, 0, 0u64);
    while h < s.healthy || g < s.hanging {
        if h < s.healthy {
            ready.push((0.0, order, Kind::Healthy));
            h += 1;
            order += 1;
        }
        if g < s.hanging {
            ready.push((0.0, order, Kind::Hanging));
            g += 1;
            order += 1;
        }
    }
    // Running: (ends at, kind).
    let mut running: Vec<(f64, Kind)> = Vec::new();
    // When each hanging call counts for the breaker (as the store sees it).
    let mut counted_at: Vec<f64> = Vec::new();
    let mut breaker_opened: Option<f64> = None;
    let mut healthy_left = s.healthy;
    let mut healthy_done = 0.0;
    let mut peak = 0u32;
    let mut now = 0.0f64;
    let mut guard = 0u64;
    while healthy_left > 0 {
        guard += 1;
        if guard > 10_000_000 {
            break;
        }
        // The breaker opens once enough counts have reached the store.
        if breaker_opened.is_none() {
            if let Some(min) = s.min_requests {
                let mut seen: Vec<f64> = counted_at.iter().copied().filter(|t| *t <= now).collect();
                if seen.len() >= min as usize {
                    seen.sort_by(f64::total_cmp);
                    breaker_opened = Some(seen[min as usize - 1]);
                }
            }
        }
        // Fill free slots with due jobs, in order.
        ready.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        while running.len() < s.slots as usize {
            let Some(&(due, ord, kind)) = ready.first() else {
                break;
            };
            if due > now {
                break;
            }
            ready.remove(0);
            match kind {
                Kind::Healthy => running.push((now + s.service_secs, kind)),
                Kind::Hanging => {
                    if breaker_opened.is_some() {
                        // Parked until the breaker closes: out of this story.
                        continue;
                    }
                    let in_flight = running.iter().filter(|r| r.1 == Kind::Hanging).count();
                    if s.limit.is_some_and(|l| in_flight >= l as usize) {
                        ready.push((now + s.bulkhead_wait_secs, ord, kind));
                        ready.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                        continue;
                    }
                    running.push((now + s.timeout_secs, kind));
                    let counts = s
                        .slow_after_secs
                        .map_or(s.timeout_secs, |slow| slow.min(s.timeout_secs));
                    counted_at.push(now + counts + s.report_secs);
                }
            }
            let held = running.iter().filter(|r| r.1 == Kind::Hanging).count() as u32;
            peak = peak.max(held);
        }
        // The next event: a slot frees, a job comes due, or a count reaches the store.
        let next_end = running.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
        let next_due = ready
            .iter()
            .map(|r| r.0)
            .filter(|t| *t > now)
            .fold(f64::INFINITY, f64::min);
        let next_count = if breaker_opened.is_none() {
            counted_at
                .iter()
                .copied()
                .filter(|t| *t > now)
                .fold(f64::INFINITY, f64::min)
        } else {
            f64::INFINITY
        };
        let next = next_end.min(next_due).min(next_count);
        if !next.is_finite() {
            break;
        }
        now = next;
        let mut still = Vec::with_capacity(running.len());
        for (end, kind) in running.drain(..) {
            if end <= now {
                match kind {
                    Kind::Healthy => {
                        healthy_left -= 1;
                        healthy_done = end;
                    }
                    Kind::Hanging => ready.push((end + s.retry_secs, order, kind)),
                }
                if kind == Kind::Hanging {
                    order += 1;
                }
            } else {
                still.push((end, kind));
            }
        }
        running = still;
    }
    HangPrediction {
        healthy_done_secs: healthy_done,
        hanging_peak_slots: peak,
        breaker_opened_secs: breaker_opened.filter(|t| *t <= healthy_done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beside() -> HangScenario {
        HangScenario {
            slots: 10,
            healthy: 200,
            hanging: 200,
            service_secs: 0.01,
            timeout_secs: 5.0,
            retry_secs: 10.0,
            slow_after_secs: None,
            min_requests: Some(10),
            report_secs: 0.2,
            limit: None,
            bulkhead_wait_secs: 0.5,
        }
    }

    #[test]
    fn without_a_bulkhead_the_healthy_jobs_wait_for_the_breaker() {
        let p = predict(&beside());
        assert_eq!(p.hanging_peak_slots, 10);
        // The tenth hanging call starts within 0.05 s and times out 5 s later; the
        // breaker sees it 0.2 s after that; until then every slot is stuck.
        let opened = p.breaker_opened_secs.unwrap();
        assert!((5.2..5.3).contains(&opened), "{p:?}");
        assert!(p.healthy_done_secs > 5.2, "{p:?}");
    }

    #[test]
    fn slow_calls_open_the_breaker_before_the_timeouts() {
        let p = predict(&HangScenario {
            slow_after_secs: Some(1.0),
            ..beside()
        });
        let opened = p.breaker_opened_secs.unwrap();
        assert!((1.2..1.3).contains(&opened), "{p:?}");
        // The calls already hanging still hold their slots until they time out, but
        // no new one is sent: one timeout's wait, not two.
        let without = predict(&beside()).healthy_done_secs;
        assert!(p.healthy_done_secs < 5.5, "{p:?}");
        assert!(without > 9.0, "a second round of hanging calls: {without}");
    }

    #[test]
    fn the_bulkhead_keeps_the_hanging_dependency_to_its_limit() {
        let p = predict(&HangScenario {
            limit: Some(5),
            ..beside()
        });
        assert_eq!(p.hanging_peak_slots, 5);
        // 200 healthy jobs on the 5 slots left: 0.4 s, twice their time alone.
        assert!((p.healthy_done_secs - 0.4).abs() < 0.011, "{p:?}");
        assert_eq!(p.breaker_opened_secs, None, "done before any timeout");
    }
}
