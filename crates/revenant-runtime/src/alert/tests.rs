//! Evaluation as a table: stats in, messages out, over pinned times.

use chrono::{TimeZone, Utc};

use super::*;
use revenant_core::job::Timestamp;
use revenant_core::store::QueueStats;

fn stats(queue: &str) -> QueueStats {
    QueueStats {
        queue: queue.into(),
        workers_alive: 1,
        ..QueueStats::default()
    }
}

fn at(secs: i64) -> Timestamp {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn config() -> AlertConfig {
    AlertConfig::from_toml(
        r#"
        repeat_interval = "1h"
        [default]
        dead_above = 10
        oldest_due_above = "5m"
        no_workers = true
        dead_per_hour_above = 3
        [queues.payments]
        critical = true
        "#,
    )
    .unwrap()
}

/// One line per message: `state rule queue severity value`.
fn lines(events: &[AlertEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {} {}{}",
                e.state.as_str(),
                e.rule,
                e.queue,
                e.severity,
                e.value,
                if e.repeat { " repeat" } else { "" }
            )
        })
        .collect()
}

#[test]
fn each_rule_fires_on_its_condition_with_the_queue_severity() {
    let dead = |q: &str, n| QueueStats {
        dead: n,
        ..stats(q)
    };
    let cases: Vec<(QueueStats, Vec<&str>)> = vec![
        (stats("emails"), vec![]),
        (dead("emails", 10), vec![]),
        (
            dead("emails", 11),
            vec!["firing dead_above emails warning 11"],
        ),
        (
            dead("payments", 1),
            vec!["firing dead_above payments critical 1"],
        ),
        (
            QueueStats {
                ready: 2,
                oldest_due_age_secs: 300.0,
                ..stats("emails")
            },
            vec![],
        ),
        (
            QueueStats {
                ready: 2,
                oldest_due_age_secs: 301.5,
                ..stats("emails")
            },
            vec!["firing oldest_due_above emails warning 301"],
        ),
        (
            QueueStats {
                ready: 2,
                workers_alive: 0,
                ..stats("emails")
            },
            vec!["firing no_workers emails warning 2"],
        ),
        // Nothing due: no worker needed yet.
        (
            QueueStats {
                scheduled: 5,
                workers_alive: 0,
                ..stats("emails")
            },
            vec![],
        ),
        // Paused: the jobs wait on purpose.
        (
            QueueStats {
                ready: 2,
                workers_alive: 0,
                paused: true,
                ..stats("emails")
            },
            vec![],
        ),
        (
            QueueStats {
                dead: 4,
                dead_last_hour: 4,
                ..stats("emails")
            },
            vec!["firing dead_per_hour_above emails warning 4"],
        ),
    ];
    for (queue, expected) in cases {
        let mut state = AlertState::default();
        let got = lines(&evaluate(
            &config(),
            std::slice::from_ref(&queue),
            at(0),
            &mut state,
        ));
        assert_eq!(got, expected, "{queue:?}");
    }
}

#[test]
fn one_incident_is_one_message_a_reminder_per_repeat_interval_and_one_resolved() {
    let config = config();
    let mut state = AlertState::default();
    let dead = QueueStats {
        dead: 1,
        ..stats("payments")
    };
    let script: Vec<(i64, QueueStats, Vec<&str>)> = vec![
        (0, stats("payments"), vec![]),
        (
            15,
            dead.clone(),
            vec!["firing dead_above payments critical 1"],
        ),
        (30, dead.clone(), vec![]),
        (
            45,
            QueueStats {
                dead: 7,
                ..dead.clone()
            },
            vec![],
        ),
        (3614, dead.clone(), vec![]),
        (
            3615,
            dead.clone(),
            vec!["firing dead_above payments critical 1 repeat"],
        ),
        (3630, dead.clone(), vec![]),
        (
            3645,
            stats("payments"),
            vec!["resolved dead_above payments critical 0"],
        ),
        (3660, stats("payments"), vec![]),
        (
            3675,
            dead.clone(),
            vec!["firing dead_above payments critical 1"],
        ),
    ];
    for (t, queue, expected) in script {
        let got = lines(&evaluate(&config, &[queue], at(t), &mut state));
        assert_eq!(got, expected, "at +{t}s");
    }
}

#[test]
fn a_failed_delivery_is_made_again_at_the_next_evaluation() {
    let config = config();
    let mut state = AlertState::default();
    let dead = [QueueStats {
        dead: 1,
        ..stats("payments")
    }];
    let ok = [stats("payments")];

    let first = evaluate(&config, &dead, at(0), &mut state);
    assert_eq!(first.len(), 1);
    state.delivery_failed(&first[0]);
    let again = evaluate(&config, &dead, at(15), &mut state);
    assert_eq!(lines(&again), ["firing dead_above payments critical 1"]);
    assert!(!again[0].repeat);
    assert_eq!(
        again[0].since,
        at(0),
        "the incident started at the first evaluation"
    );
    assert!(evaluate(&config, &dead, at(30), &mut state).is_empty());

    let resolved = evaluate(&config, &ok, at(45), &mut state);
    assert_eq!(
        lines(&resolved),
        ["resolved dead_above payments critical 0"]
    );
    state.delivery_failed(&resolved[0]);
    assert_eq!(
        lines(&evaluate(&config, &ok, at(60), &mut state)),
        ["resolved dead_above payments critical 0"]
    );
    assert!(evaluate(&config, &ok, at(75), &mut state).is_empty());
    assert!(state.is_empty());
}

#[test]
fn a_firing_never_delivered_is_not_resolved_and_a_queue_that_vanishes_is() {
    let config = config();
    let mut state = AlertState::default();
    let dead = [QueueStats {
        dead: 1,
        ..stats("payments")
    }];
    let first = evaluate(&config, &dead, at(0), &mut state);
    state.delivery_failed(&first[0]);
    assert!(evaluate(&config, &[stats("payments")], at(15), &mut state).is_empty());

    evaluate(&config, &dead, at(30), &mut state);
    let gone = evaluate(&config, &[], at(45), &mut state);
    assert_eq!(lines(&gone), ["resolved dead_above payments critical 0"]);
}

#[test]
fn worst_severity_decides_the_check() {
    let config = config();
    let warn = QueueStats {
        dead: 11,
        ..stats("emails")
    };
    let crit = QueueStats {
        dead: 1,
        ..stats("payments")
    };
    assert_eq!(worst(&breaches(&config, &[stats("emails")])), None);
    assert_eq!(
        worst(&breaches(&config, std::slice::from_ref(&warn))),
        Some(Severity::Warning)
    );
    assert_eq!(
        worst(&breaches(&config, &[warn, crit])),
        Some(Severity::Critical)
    );
}

#[test]
fn messages_read_well_in_a_chat() {
    let config = config();
    let mut state = AlertState::default();
    let q = QueueStats {
        ready: 3,
        oldest_due_age_secs: 754.2,
        workers_alive: 0,
        ..stats("emails")
    };
    let texts: Vec<String> = evaluate(&config, &[q], at(0), &mut state)
        .iter()
        .map(|e| e.text())
        .collect();
    assert_eq!(
        texts,
        [
            "[WARNING] revenant: queue emails: the oldest due job has waited 12m34s (alert above 5m)",
            "[WARNING] revenant: queue emails: 3 jobs due and no worker alive",
        ]
    );
}
