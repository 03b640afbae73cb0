//! The demo's figures, measured from the provider's ledger and the queue's depth, in
//! simulated time; the summary table beside the simulator's prediction; the chart.
//!
//! Figures are computed as `revenant_sim` computes its own (per whole simulated
//! second, the outage's window from its start to its end), so the two columns of the
//! table mean the same thing.

use std::path::Path;
use std::time::Duration;

use revenant::duration;
use revenant_sim::{chart, Report, Second, Series};
use serde::Serialize;

use super::provider::Ledger;
use super::scenario::Scenario;

/// What the demo measured, in simulated time. The poison receipt is left out of the
/// request figures and the share dead (the simulator's scenario has none), and
/// reported on its own.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// Receipts enqueued (the poison one included).
    pub receipts: u64,
    /// Receipts the provider accepted during the run (before the redrive).
    pub delivered: u64,
    /// Dead jobs at the end of the run (the poison one included).
    pub dead: u64,
    /// Of those, dead for `attempts_exhausted` (the outage's casualties).
    pub dead_attempts_exhausted: u64,
    /// Of those, dead as `permanent` (the poison receipt).
    pub dead_permanent: u64,
    /// Receipts other than the poison one dead, as a share of them.
    pub dead_share: f64,
    /// Attempts: requests the provider received, all receipts.
    pub provider_requests: u64,
    /// First attempts.
    pub fresh_requests: u64,
    /// Retries.
    pub retry_requests: u64,
    /// Requests per receipt over the whole run (the poison receipt left out).
    pub requests_per_receipt: f64,
    /// While the provider was down: requests received over receipts that arrived.
    pub outage_requests_per_fresh_receipt: f64,
    /// The most requests in one simulated second while the provider was down.
    pub outage_peak_rps: u64,
    /// Mean requests per simulated second while it was down.
    pub outage_mean_rps: f64,
    /// The most requests in one simulated second after it came back, as they reached
    /// the provider.
    pub recovery_peak_rps: u64,
    /// The same, by the second the worker sent them in.
    pub recovery_peak_sent_rps: u64,
    /// From the provider's recovery to the last delivery of a retried receipt,
    /// simulated seconds.
    pub drain_secs: f64,
    /// The most attempts any receipt used.
    pub max_attempts_used: u32,
    /// Duplicate deliveries the provider dropped by `Idempotency-Key`.
    pub duplicates_dropped: u64,
    /// Requests the provider received while it was down.
    pub outage_requests: u64,
    /// Requests it refused for being over its limit in their simulated second.
    pub over_limit: u64,
    /// Receipts that arrived before the provider came back and were not delivered
    /// by then (the poison receipt left out): the backlog the recovery drains.
    pub backlog_at_recovery: u64,
    /// From recovery until the last of that backlog was delivered, simulated seconds.
    pub backlog_drain_secs: f64,
    /// What the backlog should drain within: its size over the provider's limit,
    /// plus a minute. `None` without a limit.
    pub backlog_drain_bound_secs: Option<f64>,
}

/// Per simulated second: what the provider saw and how many jobs waited.
pub fn seconds(scenario: &Scenario, ledger: &Ledger, depth: &[(f64, i64)]) -> Vec<Second> {
    let mut seconds: Vec<Second> = ledger
        .seconds
        .iter()
        .map(|c| Second {
            fresh: c.fresh,
            retries: c.retries,
            completed: c.accepted,
            ..Second::default()
        })
        .collect();
    for k in 0..scenario.receipts {
        let at = scenario.arrival_secs(k) as usize;
        if seconds.len() <= at {
            seconds.resize(at + 1, Second::default());
        }
        seconds[at].arrived += 1;
    }
    // The depth was sampled a few times a real second; each second takes the last
    // sample taken at or before its end.
    let mut samples = depth.iter().peekable();
    let mut waiting = 0;
    for (i, second) in seconds.iter_mut().enumerate() {
        while let Some(&&(at, depth)) = samples.peek() {
            if at > (i + 1) as f64 {
                break;
            }
            waiting = depth.max(0) as u64;
            samples.next();
        }
        second.waiting = waiting;
    }
    seconds
}

/// The figures, as the simulator defines them.
pub fn measure(
    scenario: &Scenario,
    ledger: &Ledger,
    seconds: &[Second],
    poison_receipt: u64,
    dead_exhausted: u64,
    dead_permanent: u64,
) -> Measured {
    let poison_requests = u64::from(ledger.requests.get(&poison_receipt).copied().unwrap_or(0));
    let fresh: u64 = seconds.iter().map(|s| s.fresh).sum();
    let retries: u64 = seconds.iter().map(|s| s.retries).sum();
    let others = scenario.receipts.saturating_sub(1);
    let (start, end) = (scenario.outage_start_secs, scenario.outage_end_secs());
    let outage = window(seconds, start, end);
    let recovery = window(seconds, end, seconds.len() as f64);
    // The backlog at recovery, as the simulator counts it: receipts that arrived
    // before the end of the outage and were not delivered by then.
    let backlog: Vec<u64> = (0..scenario.receipts)
        .filter(|&k| k != poison_receipt && scenario.arrival_secs(k) < end)
        .filter(|k| ledger.accepted_at.get(k).is_none_or(|&at| at >= end))
        .collect();
    let backlog_drained_at = backlog
        .iter()
        .map(|k| ledger.accepted_at.get(k).copied().unwrap_or(f64::INFINITY))
        .fold(end, f64::max);
    Measured {
        receipts: scenario.receipts,
        delivered: ledger.delivered(),
        dead: dead_exhausted + dead_permanent,
        dead_attempts_exhausted: dead_exhausted,
        dead_permanent,
        dead_share: ratio(dead_exhausted, others),
        provider_requests: fresh + retries,
        fresh_requests: fresh,
        retry_requests: retries,
        requests_per_receipt: ratio((fresh + retries).saturating_sub(poison_requests), others),
        outage_requests_per_fresh_receipt: ratio(outage.requests, outage.arrived),
        outage_peak_rps: outage.peak,
        outage_mean_rps: outage.requests as f64 / (end.ceil() - start.floor()).max(1.0),
        recovery_peak_rps: recovery.peak,
        recovery_peak_sent_rps: ledger
            .seconds
            .iter()
            .skip(end.floor() as usize)
            .map(|c| c.sent)
            .max()
            .unwrap_or(0),
        drain_secs: ledger
            .last_retry_accepted_at
            .map_or(0.0, |at| (at - end).max(0.0)),
        max_attempts_used: ledger.requests.values().copied().max().unwrap_or(0),
        duplicates_dropped: ledger.duplicates,
        outage_requests: outage.requests,
        over_limit: ledger.over_limit,
        backlog_at_recovery: backlog.len() as u64,
        backlog_drain_secs: backlog_drained_at - end,
        backlog_drain_bound_secs: scenario
            .provider_limit
            .map(|limit| backlog.len() as f64 / limit + 60.0),
    }
}

struct Window {
    arrived: u64,
    requests: u64,
    peak: u64,
}

/// The whole seconds from `from` to `to`, as the simulator's `Window` takes them.
fn window(seconds: &[Second], from: f64, to: f64) -> Window {
    let start = (from.floor() as usize).min(seconds.len());
    let end = (to.ceil() as usize).clamp(start, seconds.len());
    let slice = &seconds[start..end];
    Window {
        arrived: slice.iter().map(|s| s.arrived).sum(),
        requests: slice.iter().map(|s| s.fresh + s.retries).sum(),
        peak: slice.iter().map(|s| s.fresh + s.retries).max().unwrap_or(0),
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Seconds as `1h2m3s`, rounded; `never` for infinity.
pub fn secs(s: f64) -> String {
    if !s.is_finite() {
        return "never".to_string();
    }
    duration::format(Duration::from_secs(s.max(0.0).round() as u64))
}

/// The summary table: measured beside simulated, in simulated units.
pub fn table(scenario: &Scenario, m: &Measured, sim: &Report) -> String {
    let rows: Vec<(&str, String, String)> = vec![
        ("receipts", m.receipts.to_string(), sim.jobs.to_string()),
        (
            "delivered",
            m.delivered.to_string(),
            sim.completed.to_string(),
        ),
        (
            "attempts (provider requests)",
            m.provider_requests.to_string(),
            sim.provider_requests.to_string(),
        ),
        (
            "dead: the outage (attempts_exhausted)",
            format!(
                "{} ({:.2}%)",
                m.dead_attempts_exhausted,
                m.dead_share * 100.0
            ),
            format!(
                "{} ({:.2}%)",
                sim.dead_attempts_exhausted,
                sim.dead_share * 100.0
            ),
        ),
        (
            "dead: the poison receipt (permanent)",
            m.dead_permanent.to_string(),
            "-".to_string(),
        ),
        (
            "requests per receipt, whole run",
            format!("{:.2}", m.requests_per_receipt),
            format!("{:.2}", sim.requests_per_job),
        ),
        (
            "requests per fresh receipt, provider down",
            format!("{:.2}", m.outage_requests_per_fresh_receipt),
            format!("{:.2}", sim.outage.requests_per_fresh_job),
        ),
        (
            "peak requests/s, provider down",
            m.outage_peak_rps.to_string(),
            sim.outage.peak_rps.to_string(),
        ),
        (
            "mean requests/s, provider down",
            format!("{:.1}", m.outage_mean_rps),
            format!("{:.1}", sim.outage.mean_rps),
        ),
        (
            "peak requests/s, after recovery",
            m.recovery_peak_rps.to_string(),
            sim.recovery.peak_rps.to_string(),
        ),
        (
            "  as the worker sent them",
            m.recovery_peak_sent_rps.to_string(),
            sim.recovery.peak_rps.to_string(),
        ),
        (
            "time to drain after recovery",
            secs(m.drain_secs),
            secs(sim.drain_secs),
        ),
        (
            "backlog at recovery (receipts)",
            m.backlog_at_recovery.to_string(),
            sim.backlog_at_recovery.to_string(),
        ),
        (
            "backlog delivered after recovery",
            secs(m.backlog_drain_secs),
            secs(sim.backlog_drain_secs),
        ),
        (
            "  bound: backlog / limit + 1 minute",
            m.backlog_drain_bound_secs.map_or("-".to_string(), secs),
            sim.backlog_drain_bound_secs.map_or("-".to_string(), secs),
        ),
        (
            "requests refused over the provider's limit",
            m.over_limit.to_string(),
            sim.over_capacity.to_string(),
        ),
        (
            "most attempts by one receipt",
            m.max_attempts_used.to_string(),
            sim.max_attempts_used.to_string(),
        ),
        (
            "duplicates dropped by Idempotency-Key",
            m.duplicates_dropped.to_string(),
            "-".to_string(),
        ),
    ];
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let mwidth = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(8);
    let mut out = format!(
        "in simulated time ({}); rates per simulated second\n",
        scenario.scale_text()
    );
    out.push_str(&format!(
        "{:<width$}  {:<mwidth$}  SIMULATED\n",
        "", "MEASURED"
    ));
    for (name, measured, simulated) in rows {
        out.push_str(&format!(
            "{name:<width$}  {measured:<mwidth$}  {simulated}\n"
        ));
    }
    out
}

/// Writes the chart of the measured run to `path`.
pub fn write_chart(
    path: &Path,
    scenario: &Scenario,
    m: &Measured,
    seconds: &[Second],
) -> std::io::Result<()> {
    let p = &scenario.policy;
    let b = p.backoff();
    let subtitle = format!(
        "measured on SQLite, {}; {} receipts/s; {}; {} attempts, {} x{} capped at {}, jitter {}; {:.2} requests per fresh receipt while down; {} dead; drained {} after recovery",
        scenario.scale_text(),
        scenario.rate,
        if scenario.protection.is_some() {
            "breaker on"
        } else {
            "no breaker"
        },
        p.max_attempts(),
        duration::format(b.base),
        b.multiplier,
        duration::format(b.cap),
        p.jitter(),
        m.outage_requests_per_fresh_receipt,
        m.dead,
        secs(m.drain_secs),
    );
    let chart = chart::traffic(
        "Provider requests and queue depth through the outage (revenant demo, measured)",
        Some(subtitle),
        &Series::from_seconds(seconds, Duration::from_secs(10)),
        (
            Duration::from_secs_f64(scenario.outage_start_secs),
            Duration::from_secs_f64(scenario.outage_end_secs()),
        ),
        Some(Duration::from_secs_f64(
            scenario.outage_end_secs() + m.drain_secs,
        )),
    );
    std::fs::write(path, chart::render(&chart))
}
