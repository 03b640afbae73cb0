//! The operator's read-outs: the worker registry, the alert rules' state, and the
//! stats as `revenant stats --json` prints them.

use std::time::Duration;

use axum::extract::State;
use axum::Json;
use revenant::alert::{self, AlertConfig, Breach, EffectiveRules, Severity};
use revenant::store::{QueueStats, QueueStatsParams};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::extract::QueryParams;
use crate::input;
use crate::state::AppState;
use crate::views::WorkerView;

/// A worker seen within this long counts as alive, as in `revenant stats`.
const ALIVE_WITHIN: Duration = Duration::from_secs(30);

/// The answer to `GET /v1/workers`.
#[derive(Debug, Serialize)]
pub struct WorkerList {
    workers: Vec<WorkerView>,
}

/// `GET /v1/workers`: the registry, local workers and remote ones alike.
pub async fn workers(State(state): State<AppState>) -> Result<Json<WorkerList>, ApiError> {
    let now = state.store().now().await?;
    let alive_since = now - chrono::Duration::from_std(ALIVE_WITHIN).unwrap_or_default();
    let workers = state.store().worker_list().await?;
    Ok(Json(WorkerList {
        workers: workers
            .into_iter()
            .map(|info| WorkerView::new(info, alive_since))
            .collect(),
    }))
}

/// One queue's rules, as the rules file and `[default]` merge them (schema
/// `AlertRule`).
#[derive(Debug, Serialize)]
pub struct RuleView {
    queue: String,
    critical: bool,
    dead_above: Option<u64>,
    oldest_due_above: Option<String>,
    no_workers: bool,
    dead_per_hour_above: Option<u64>,
}

impl RuleView {
    fn new(queue: &str, rules: EffectiveRules) -> Self {
        RuleView {
            queue: queue.to_string(),
            critical: rules.critical,
            dead_above: rules.dead_above,
            oldest_due_above: rules.oldest_due_above.map(revenant::duration::format),
            no_workers: rules.no_workers,
            dead_per_hour_above: rules.dead_per_hour_above,
        }
    }
}

/// A condition that holds now (schema `Breach`).
#[derive(Debug, Serialize)]
pub struct BreachView {
    queue: String,
    rule: alert::Rule,
    severity: Severity,
    value: f64,
    threshold: f64,
    text: String,
}

impl From<Breach> for BreachView {
    fn from(b: Breach) -> Self {
        BreachView {
            text: b.describe(),
            queue: b.queue,
            rule: b.rule,
            severity: b.severity,
            value: b.value,
            threshold: b.threshold,
        }
    }
}

/// The answer to `GET /v1/alerts`.
#[derive(Debug, Serialize)]
pub struct Alerts {
    configured: bool,
    status: &'static str,
    rules: Vec<RuleView>,
    firing: Vec<BreachView>,
}

/// `GET /v1/alerts`: the configured rules (`*` for `[default]`, then each listed
/// queue) and which hold now, worst first, evaluated against the store's numbers now
/// with the same pure function `revenant check` uses. The server keeps no alert
/// state: delivery (log, webhook) and repeat intervals belong to the worker given the
/// rules, or to `revenant check`. Without rules: nothing configured, nothing firing.
pub async fn alerts(State(state): State<AppState>) -> Result<Json<Alerts>, ApiError> {
    let Some(config) = state.alerts.as_deref() else {
        return Ok(Json(Alerts {
            configured: false,
            status: "ok",
            rules: Vec::new(),
            firing: Vec::new(),
        }));
    };
    let stats = state
        .store()
        .queue_stats(QueueStatsParams {
            worker_alive_within: ALIVE_WITHIN,
            ..QueueStatsParams::default()
        })
        .await?;
    Ok(Json(evaluate(config, &stats)))
}

fn evaluate(config: &AlertConfig, stats: &[QueueStats]) -> Alerts {
    let mut breaches = alert::breaches(config, stats);
    breaches.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then_with(|| a.queue.cmp(&b.queue))
    });
    let status = match alert::worst(&breaches) {
        None => "ok",
        Some(Severity::Warning) => "warning",
        Some(Severity::Critical) => "critical",
    };
    // `[default]` alone, as "*": what any queue not listed gets. An empty name is
    // never a queue, so rules_for gives exactly the defaults.
    let mut rules = vec![RuleView::new("*", config.rules_for(""))];
    rules.extend(
        config
            .queues
            .keys()
            .map(|queue| RuleView::new(queue, config.rules_for(queue))),
    );
    Alerts {
        configured: true,
        status,
        rules,
        firing: breaches.into_iter().map(BreachView::from).collect(),
    }
}

/// `GET /v1/stats`'s query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsQuery {
    queue: Option<String>,
}

/// `GET /v1/stats`: exactly what `revenant stats --json` prints (the core's
/// `QueueStats`, one per queue; counts of the last minute; alive within 30 s).
pub async fn stats(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<StatsQuery>,
) -> Result<Json<Vec<QueueStats>>, ApiError> {
    input::name("queue", query.queue.as_deref())?;
    let stats = state
        .store()
        .queue_stats(QueueStatsParams {
            queue: query.queue,
            worker_alive_within: ALIVE_WITHIN,
            ..QueueStatsParams::default()
        })
        .await?;
    Ok(Json(stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerts_list_default_and_queue_rules_and_what_fires_worst_first() {
        let config = AlertConfig::from_toml(
            "[default]\ndead_above = 10\n[queues.payments]\ncritical = true\n",
        )
        .unwrap();
        let queue = |name: &str, dead| QueueStats {
            queue: name.into(),
            dead,
            ..QueueStats::default()
        };
        let alerts = evaluate(
            &config,
            &[queue("emails", 11), queue("payments", 1), queue("ok", 3)],
        );
        assert_eq!(alerts.status, "critical");
        let rules: Vec<(&str, Option<u64>)> = alerts
            .rules
            .iter()
            .map(|r| (r.queue.as_str(), r.dead_above))
            .collect();
        assert_eq!(rules, vec![("*", Some(10)), ("payments", Some(0))]);
        let firing: Vec<&str> = alerts.firing.iter().map(|b| b.queue.as_str()).collect();
        assert_eq!(firing, vec!["payments", "emails"]);
        assert!(alerts.firing[0].text.contains("1 dead job"));
    }
}
