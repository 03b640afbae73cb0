//! The shipped Prometheus rules and the metrics reference name only metrics that
//! exist, and the reference documents every one.

use std::collections::BTreeSet;
use std::path::PathBuf;

use revenant_runtime::metrics::{MetricType, METRICS};

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

/// Every `revenant_...` word in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("revenant_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// Whether `name` is a series some metric exposes (histograms add suffixes).
fn exists(name: &str) -> bool {
    METRICS.iter().any(|m| {
        name == m.name
            || (m.kind == MetricType::Histogram
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| name == format!("{}{suffix}", m.name)))
    })
}

#[test]
fn the_alerting_rules_parse_and_name_only_metrics_that_exist() {
    let path = docs().join("prometheus/alerts.yml");
    let text = std::fs::read_to_string(&path).expect("docs/prometheus/alerts.yml");
    let doc: serde_norway::Value = serde_norway::from_str(&text).expect("valid YAML");
    let groups = doc["groups"].as_sequence().expect("groups: [...]");
    let mut alerts = BTreeSet::new();
    for group in groups {
        assert!(group["name"].as_str().is_some(), "every group has a name");
        for rule in group["rules"].as_sequence().expect("rules: [...]") {
            let alert = rule["alert"].as_str().expect("every rule is an alert");
            assert!(alerts.insert(alert.to_string()), "{alert} is listed twice");
            let expr = rule["expr"].as_str().expect("expr");
            let used = metric_names(expr);
            assert!(!used.is_empty(), "{alert} names no revenant metric");
            for name in used {
                assert!(
                    exists(&name),
                    "{alert} names {name}, which revenant does not export"
                );
            }
            let severity = rule["labels"]["severity"]
                .as_str()
                .expect("labels.severity");
            assert!(
                ["warning", "critical"].contains(&severity),
                "{alert}: {severity}"
            );
            assert!(
                rule["annotations"]["summary"].as_str().is_some(),
                "{alert}: summary"
            );
        }
    }
    // One rule per built-in rule, plus the exporter's absence.
    for built_in in [
        "DeadJobs",
        "DeadJob",
        "OldestDueJobTooOld",
        "NoWorkers",
        "DeadLettersPerHour",
    ] {
        assert!(
            alerts.iter().any(|a| a.ends_with(built_in)),
            "no rule for the built-in {built_in} alert"
        );
    }

    // promtool, when installed (Debian's `prometheus` package), checks the PromQL too.
    if let Ok(out) = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .output()
    {
        assert!(
            out.status.success(),
            "promtool check rules: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_metrics_reference_documents_every_metric_and_no_other() {
    let text = std::fs::read_to_string(docs().join("metrics.md")).expect("docs/metrics.md");
    for m in METRICS {
        assert!(
            text.contains(&format!("`{}`", m.name)),
            "docs/metrics.md misses {}",
            m.name
        );
    }
    for name in metric_names(&text) {
        assert!(
            exists(&name),
            "docs/metrics.md names {name}, which revenant does not export"
        );
    }
}
