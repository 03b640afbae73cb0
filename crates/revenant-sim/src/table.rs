//! Plain-text renderings of reports for people: one run's summary, and the
//! `--compare` table. The CLI prints these and docs/simulator.md pastes them.

use std::fmt::Write as _;
use std::time::Duration;

use revenant_core::duration;

use revenant_core::dependency::DependencyPolicy;

use crate::config::{SimConfig, Spacing};
use crate::report::Report;

/// The `--compare` table: one row per report, columns padded to fit.
pub fn compare_table(reports: &[Report]) -> String {
    let headers = [
        "JITTER",
        "REQ/JOB",
        "OUTAGE REQ/JOB",
        "OUTAGE PEAK/S",
        "OUTAGE MEAN/S",
        "AFTER PEAK/S",
        "AFTER MEAN/S",
        "DEAD",
        "DEAD %",
        "DRAIN",
        "MAX ATTEMPTS",
    ];
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                r.config.policy.jitter().to_string(),
                format!("{:.2}", r.requests_per_job),
                format!("{:.2}", r.outage.requests_per_fresh_job),
                r.outage.peak_rps.to_string(),
                format!("{:.1}", r.outage.mean_rps),
                r.recovery.peak_rps.to_string(),
                format!("{:.1}", r.recovery.mean_rps),
                r.dead.to_string(),
                format!("{:.2}", r.dead_share * 100.0),
                secs(r.drain_secs),
                format!(
                    "{} of {}",
                    r.max_attempts_used,
                    r.config.policy.max_attempts()
                ),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(text.join("  ").trim_end());
        out.push('\n');
    };
    line(headers.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// The scenario in two lines: arrivals and outage, then the policy (its jitter
/// left out when `with_jitter` is false, for `--compare`).
pub fn scenario(c: &SimConfig, with_jitter: bool) -> String {
    let p = &c.policy;
    let b = p.backoff();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scenario: {} jobs/s ({}) for {}; provider down from {} for {}{}{}{}; seed {}",
        c.arrivals.rate,
        match c.arrivals.spacing {
            Spacing::Even => "evenly spaced",
            Spacing::Poisson => "Poisson",
        },
        duration::format(c.arrivals_for()),
        duration::format(c.provider.outage_start),
        duration::format(c.provider.outage_length),
        c.provider
            .retry_after
            .map(|d| format!(", Retry-After {}", duration::format(d)))
            .unwrap_or_default(),
        c.provider
            .capacity
            .map(|n| format!(", serving {n} requests/s when up"))
            .unwrap_or_default(),
        c.workers
            .slots
            .map(|n| format!(
                ", {n} worker slots, {} per request",
                duration::format(c.provider.latency)
            ))
            .unwrap_or_default(),
        c.seed
    );
    let _ = writeln!(out, "{}", protection(&c.dependency));
    let _ = writeln!(
        out,
        "policy: {} attempts; backoff {} x{} capped at {}{}",
        p.max_attempts(),
        duration::format(b.base),
        b.multiplier,
        duration::format(b.cap),
        if with_jitter {
            format!("; jitter {}", p.jitter())
        } else {
            String::new()
        }
    );
    out
}

/// The provider's protection in one line.
pub fn protection(d: &DependencyPolicy) -> String {
    if d.is_off() {
        return "protection: none (no breaker, rate limit or retry budget)".to_string();
    }
    let mut parts = Vec::new();
    if let Some(b) = &d.breaker {
        parts.push(format!(
            "breaker at {:.0}% transient failures over {} (at least {} answers), cool-down {} doubling to {}",
            b.failure_threshold * 100.0,
            duration::format(b.window),
            b.min_requests,
            duration::format(b.cooldown),
            duration::format(b.max_cooldown),
        ));
    }
    if let Some(r) = &d.rate_limit {
        parts.push(format!(
            "rate limit {}/s (burst {})",
            trim(r.per_second),
            r.burst
        ));
    }
    if let Some(b) = &d.retry_budget {
        parts.push(format!(
            "retry budget {:.0}% of first attempts (at least {} per {})",
            b.ratio * 100.0,
            b.min_retries,
            duration::format(b.window),
        ));
    }
    format!("protection: {}", parts.join("; "))
}

fn trim(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// One run in a few lines: the scenario, then the figures.
pub fn summary(r: &Report) -> String {
    let p = &r.config.policy;
    let mut out = scenario(&r.config, true);
    let _ = writeln!(
        out,
        "jobs: {} ({} poison); completed {}; dead {} ({:.2}%: {} attempts exhausted, {} permanent)",
        r.jobs,
        r.poison,
        r.completed,
        r.dead,
        r.dead_share * 100.0,
        r.dead_attempts_exhausted,
        r.dead_permanent
    );
    let _ = writeln!(
        out,
        "provider requests: {} ({} fresh, {} retries), {:.2} per job; most attempts used {} of {}",
        r.provider_requests,
        r.fresh_requests,
        r.retry_requests,
        r.requests_per_job,
        r.max_attempts_used,
        p.max_attempts()
    );
    let w = &r.outage;
    let length = (w.to_secs - w.from_secs).max(1.0);
    let _ = writeln!(
        out,
        "during the outage: {:.2} requests per fresh job; {} requests/s peak, {:.1} mean ({:.1} fresh + {:.1} retries)",
        w.requests_per_fresh_job,
        w.peak_rps,
        w.mean_rps,
        w.fresh_requests as f64 / length,
        w.retry_requests as f64 / length,
    );
    let w = &r.recovery;
    let length = (w.to_secs - w.from_secs).max(1.0);
    let _ = writeln!(
        out,
        "after recovery (to the end of the run, {}): {} requests/s peak, {:.1} mean ({:.1} fresh + {:.1} retries)",
        secs(length),
        w.peak_rps,
        w.mean_rps,
        w.fresh_requests as f64 / length,
        w.retry_requests as f64 / length,
    );
    let _ = writeln!(
        out,
        "drained {} after recovery (the last retry at {} from the start)",
        secs(r.drain_secs),
        secs(r.drained_at_secs)
    );
    let _ = writeln!(
        out,
        "backlog at recovery: {} jobs, the last of them done {} after recovery{}",
        r.backlog_at_recovery,
        secs(r.backlog_drain_secs),
        r.backlog_drain_bound_secs
            .map(|bound| format!(
                " (backlog / {} per second + 1 minute = {})",
                trim(r.config.provider.capacity.unwrap_or(0.0)),
                secs(bound)
            ))
            .unwrap_or_default()
    );
    if let Some(capacity) = r.config.provider.capacity {
        let _ = writeln!(
            out,
            "the provider refused {} requests over its {}/s",
            r.over_capacity,
            trim(capacity)
        );
    }
    if r.config.dependency.breaker.is_some() {
        let _ = writeln!(out, "breaker probes sent: {}", r.probes);
    }
    out
}

/// Seconds as `1h2m3s`, rounded to the second.
fn secs(seconds: f64) -> String {
    duration::format(Duration::from_secs(seconds.max(0.0).round() as u64))
}
