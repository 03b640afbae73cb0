//! Evaluation: a pure function of (rules, queue stats, now, what was already said)
//! to the messages to send. No clock, no I/O, so it is tested as a table.
//!
//! An alert is one (queue, rule) pair. Its life:
//!
//! - the condition becomes true: one `firing` message;
//! - it stays true: nothing, until `repeat_interval` has passed since the last
//!   message, then one reminder (`repeat = true`);
//! - it becomes false (or the queue disappears): one `resolved` message, if a
//!   `firing` one was sent.
//!
//! A message whose delivery failed is handed back with [`AlertState::delivery_failed`]
//! and sent again at the next evaluation, if it still holds.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::alert::config::AlertConfig;
use revenant_core::job::Timestamp;
use revenant_core::store::QueueStats;

/// Which rule an alert comes from (the rules file's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// More jobs dead than the threshold.
    DeadAbove,
    /// The oldest due job waited longer than the limit.
    OldestDueAbove,
    /// Jobs due, no worker alive.
    NoWorkers,
    /// More jobs died in the last hour than the threshold.
    DeadPerHourAbove,
}

impl Rule {
    /// The rules file's key for this rule.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::DeadAbove => "dead_above",
            Rule::OldestDueAbove => "oldest_due_above",
            Rule::NoWorkers => "no_workers",
            Rule::DeadPerHourAbove => "dead_per_hour_above",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How bad. A critical queue's alerts are critical; every other alert is a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Someone should look today.
    Warning,
    /// Someone should look now.
    Critical,
}

impl Severity {
    /// `warning` or `critical`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a message opens (or repeats) an alert or closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertStatus {
    /// The condition holds.
    Firing,
    /// The condition no longer holds.
    Resolved,
}

impl AlertStatus {
    /// `firing` or `resolved`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }
}

/// A condition that holds right now (what `revenant check` prints).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Breach {
    /// The queue.
    pub queue: String,
    /// The rule.
    pub rule: Rule,
    /// How bad.
    pub severity: Severity,
    /// The measured value: dead jobs, seconds, ready jobs (for `no_workers`), dead
    /// jobs in the last hour.
    pub value: f64,
    /// The threshold it is above (0 for `no_workers`: workers alive must be above 0).
    pub threshold: f64,
}

impl Breach {
    /// One line for people: `queue payments: 1 dead job (alert above 0)`.
    pub fn describe(&self) -> String {
        let q = &self.queue;
        let (v, t) = (self.value, self.threshold);
        match self.rule {
            Rule::DeadAbove => format!("queue {q}: {v} dead {} (alert above {t})", jobs(v)),
            Rule::OldestDueAbove => format!(
                "queue {q}: the oldest due job has waited {} (alert above {})",
                secs(v),
                secs(t)
            ),
            Rule::NoWorkers => {
                format!("queue {q}: {v} {} due and no worker alive", jobs(v))
            }
            Rule::DeadPerHourAbove => {
                format!(
                    "queue {q}: {v} {} died in the last hour (alert above {t})",
                    jobs(v)
                )
            }
        }
    }
}

fn jobs(n: f64) -> &'static str {
    if n == 1.0 {
        "job"
    } else {
        "jobs"
    }
}

fn secs(s: f64) -> String {
    revenant_core::duration::format(std::time::Duration::from_secs_f64(s.max(0.0)))
}

/// One message to send: to the log, and to the webhook if there is one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertEvent {
    /// The queue.
    pub queue: String,
    /// The rule.
    pub rule: Rule,
    /// How bad.
    pub severity: Severity,
    /// Firing or resolved.
    pub state: AlertStatus,
    /// The value at the last evaluation where the condition held (for `resolved`,
    /// the value now).
    pub value: f64,
    /// The threshold.
    pub threshold: f64,
    /// When this message was made.
    pub at: Timestamp,
    /// When the condition started to hold.
    pub since: Timestamp,
    /// A reminder of an alert already sent (after `repeat_interval`).
    pub repeat: bool,
}

impl AlertEvent {
    /// The chat message: `[CRITICAL] revenant: queue payments: 1 dead job (alert above 0)`.
    pub fn text(&self) -> String {
        let breach = Breach {
            queue: self.queue.clone(),
            rule: self.rule,
            severity: self.severity,
            value: self.value,
            threshold: self.threshold,
        };
        match self.state {
            AlertStatus::Firing => format!(
                "[{}] revenant: {}{}",
                self.severity.as_str().to_uppercase(),
                breach.describe(),
                if self.repeat { " (still firing)" } else { "" }
            ),
            AlertStatus::Resolved => format!(
                "[RESOLVED] revenant: queue {}: {} no longer holds (now {}, threshold {})",
                self.queue,
                self.rule,
                match self.rule {
                    Rule::OldestDueAbove => secs(self.value),
                    _ => self.value.to_string(),
                },
                match self.rule {
                    Rule::OldestDueAbove => secs(self.threshold),
                    _ => self.threshold.to_string(),
                },
            ),
        }
    }
}

/// What holds now, per queue and rule, worst first within a queue.
pub fn breaches(config: &AlertConfig, stats: &[QueueStats]) -> Vec<Breach> {
    let mut out = Vec::new();
    for q in stats {
        let rules = config.rules_for(&q.queue);
        let severity = if rules.critical {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let mut push = |rule, value: f64, threshold: f64| {
            out.push(Breach {
                queue: q.queue.clone(),
                rule,
                severity,
                value,
                threshold,
            })
        };
        if let Some(limit) = rules.dead_above {
            if q.dead > 0 && q.dead as u64 > limit {
                push(Rule::DeadAbove, q.dead as f64, limit as f64);
            }
        }
        if let Some(limit) = rules.oldest_due_above {
            if q.ready > 0 && q.oldest_due_age_secs > limit.as_secs_f64() {
                push(
                    Rule::OldestDueAbove,
                    q.oldest_due_age_secs.floor(),
                    limit.as_secs_f64(),
                );
            }
        }
        if rules.no_workers && !q.paused && q.ready > 0 && q.workers_alive == 0 {
            push(Rule::NoWorkers, q.ready as f64, 0.0);
        }
        if let Some(limit) = rules.dead_per_hour_above {
            if q.dead_last_hour > 0 && q.dead_last_hour as u64 > limit {
                push(
                    Rule::DeadPerHourAbove,
                    q.dead_last_hour as f64,
                    limit as f64,
                );
            }
        }
    }
    out
}

/// The worst severity among `breaches`, or `None` when all is well.
pub fn worst(breaches: &[Breach]) -> Option<Severity> {
    breaches.iter().map(|b| b.severity).max()
}

#[derive(Debug, Clone, PartialEq)]
struct Active {
    since: Timestamp,
    severity: Severity,
    threshold: f64,
    /// When the last message went out; `None` until the first is sent (or after its
    /// delivery failed).
    last_sent: Option<Timestamp>,
}

/// What was already said, per (queue, rule). Start with `AlertState::default()`; keep
/// it between evaluations. Lost at restart: a worker that restarts during an incident
/// sends its `firing` message once more.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlertState {
    active: BTreeMap<(String, Rule), Active>,
}

impl AlertState {
    /// How many alerts are open (firing, or resolved but not yet delivered).
    pub fn len(&self) -> usize {
        self.active.len()
    }

    /// Whether no alert is open.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    /// A message could not be delivered: it is made again at the next evaluation if
    /// it still holds (a `firing` whose condition still holds, a `resolved` whose
    /// condition has not come back; if it has, the alert simply goes on).
    pub fn delivery_failed(&mut self, event: &AlertEvent) {
        let key = (event.queue.clone(), event.rule);
        match event.state {
            AlertStatus::Firing => {
                if let Some(active) = self.active.get_mut(&key) {
                    active.last_sent = None;
                }
            }
            AlertStatus::Resolved => {
                self.active.entry(key).or_insert(Active {
                    since: event.since,
                    severity: event.severity,
                    threshold: event.threshold,
                    last_sent: Some(event.at),
                });
            }
        }
    }
}

/// Evaluates the rules against `stats` at `now`, updating `state`, and returns the
/// messages to send. See the [module docs](self) for when a message is made.
pub fn evaluate(
    config: &AlertConfig,
    stats: &[QueueStats],
    now: Timestamp,
    state: &mut AlertState,
) -> Vec<AlertEvent> {
    let repeat_after =
        chrono::Duration::from_std(config.repeat_interval).unwrap_or(chrono::Duration::MAX);
    let mut events = Vec::new();
    let mut holding = std::collections::BTreeSet::new();
    for breach in breaches(config, stats) {
        let key = (breach.queue.clone(), breach.rule);
        holding.insert(key.clone());
        let active = state.active.entry(key).or_insert_with(|| Active {
            since: now,
            severity: breach.severity,
            threshold: breach.threshold,
            last_sent: None,
        });
        active.severity = breach.severity;
        active.threshold = breach.threshold;
        let due = match active.last_sent {
            None => Some(false),
            Some(sent) if now - sent >= repeat_after => Some(true),
            Some(_) => None,
        };
        if let Some(repeat) = due {
            active.last_sent = Some(now);
            events.push(AlertEvent {
                queue: breach.queue,
                rule: breach.rule,
                severity: breach.severity,
                state: AlertStatus::Firing,
                value: breach.value,
                threshold: breach.threshold,
                at: now,
                since: active.since,
                repeat,
            });
        }
    }
    let values: BTreeMap<&str, &QueueStats> = stats.iter().map(|q| (q.queue.as_str(), q)).collect();
    state.active.retain(|(queue, rule), active| {
        if holding.contains(&(queue.clone(), *rule)) {
            return true;
        }
        // Nothing to resolve for an alert whose `firing` never got out.
        if active.last_sent.is_some() {
            events.push(AlertEvent {
                queue: queue.clone(),
                rule: *rule,
                severity: active.severity,
                state: AlertStatus::Resolved,
                value: values
                    .get(queue.as_str())
                    .map_or(0.0, |q| current(*rule, q)),
                threshold: active.threshold,
                at: now,
                since: active.since,
                repeat: false,
            });
        }
        false
    });
    events
}

fn current(rule: Rule, q: &QueueStats) -> f64 {
    match rule {
        Rule::DeadAbove => q.dead as f64,
        Rule::OldestDueAbove => q.oldest_due_age_secs.floor(),
        Rule::NoWorkers => q.workers_alive as f64,
        Rule::DeadPerHourAbove => q.dead_last_hour as f64,
    }
}
