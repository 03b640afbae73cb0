//! `revenant-torture-report SUMMARY.jsonl`: the torture suite's summary lines (one JSON
//! object per test and backend, written by each test to `$REVENANT_TORTURE_SUMMARY`)
//! as the Markdown table of docs/reliability.md, ordered by RELIABILITY.md's test
//! number. `scripts/torture.sh` runs it after the suite.

use std::process::ExitCode;

use serde_json::Value;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: revenant-torture-report SUMMARY.jsonl");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) => {
            eprintln!("revenant-torture-report: {path}: {err}");
            return ExitCode::from(1);
        }
    };
    let mut rows: Vec<Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let number = |row: &Value| {
        row["test"]
            .as_str()
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(u32::MAX)
    };
    rows.sort_by(|a, b| {
        number(a)
            .cmp(&number(b))
            .then_with(|| a["test"].as_str().cmp(&b["test"].as_str()))
            .then_with(|| a["backend"].as_str().cmp(&b["backend"].as_str()))
    });
    println!(
        "| test | backend | jobs | faults injected | lost | stuck | misclassified | late acks accepted | lease overlaps | duplicates | measured |"
    );
    println!("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    for row in &rows {
        let n = |key: &str| row[key].as_u64().map_or("?".to_string(), |v| v.to_string());
        let s = |key: &str| row[key].as_str().unwrap_or("").replace('|', "\\|");
        println!(
            "| {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} |",
            s("test"),
            s("backend"),
            n("jobs"),
            n("faults"),
            s("fault_kind"),
            n("lost"),
            n("stuck"),
            n("misclassified"),
            n("late_ack_accepted"),
            n("lease_overlap"),
            n("duplicates"),
            s("measured"),
        );
    }
    ExitCode::SUCCESS
}
