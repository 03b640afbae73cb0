//! `revenant demo --hang` end to end (about 30 s): what it prints is asserted on the
//! parts that do not depend on the machine's speed. The hanging provider holds every
//! slot without the bulkhead and at most its limit with it; nothing dies of the hang;
//! its backlog is delivered once it recovers; the model's slot counts match, and each
//! figure is printed measured beside predicted. The times, and how close the model
//! comes to them, are figures the demo prints, not checks here: CI shares two cores.

use std::process::Command;

use serde_json::Value;

#[test]
fn the_hang_demo_keeps_the_hanging_provider_to_its_limit_and_kills_nothing() {
    let out = Command::new(env!("CARGO_BIN_EXE_revenant"))
        .args(["demo", "--hang", "--json"])
        .env_remove("REVENANT_LOG")
        .output()
        .expect("the revenant binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(&stdout).unwrap_or_else(|err| {
        panic!(
            "no JSON summary ({err}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let at = |path: &str| {
        summary
            .pointer(path)
            .unwrap_or_else(|| panic!("{path} missing: {summary}"))
            .clone()
    };
    assert_eq!(at("/backend"), "sqlite");
    assert!(at("/alone/healthy_secs").as_f64().unwrap() > 0.0);
    assert_eq!(at("/before/measured/hanging_peak_slots"), 10, "{summary}");
    assert_eq!(at("/before/predicted/hanging_peak_slots"), 10, "{summary}");
    let held = at("/with/measured/hanging_peak_slots").as_i64().unwrap();
    assert!((1..=5).contains(&held), "at most its limit of 5: {summary}");
    assert_eq!(at("/with/predicted/hanging_peak_slots"), 5, "{summary}");
    assert_eq!(at("/before/measured/dead"), 0, "{summary}");
    assert_eq!(at("/with/measured/dead"), 0, "{summary}");
    assert!(
        at("/with/measured/recovery_secs").as_f64().is_some(),
        "{summary}"
    );
    assert!(
        at("/with/measured/turned_back").as_u64().unwrap() > 0,
        "the hanging jobs past the limit were turned back: {summary}"
    );
    for run in ["before", "with"] {
        let figure = at(&format!("/{run}/healthy_secs"));
        let measured = figure["measured"].as_f64().unwrap();
        let predicted = figure["predicted"].as_f64().unwrap();
        assert!(measured > 0.0 && predicted > 0.0, "{run}: {summary}");
        let error = figure["error"].as_f64().unwrap();
        assert!(
            (error - (predicted - measured) / measured).abs() < 1e-9,
            "{run}: the difference is predicted against measured: {summary}"
        );
        assert_eq!(
            figure["within_ten_percent"].as_bool().unwrap(),
            error.abs() <= 0.10,
            "{summary}"
        );
    }
    assert_eq!(at("/with/hanging_slots/predicted"), 5.0, "{summary}");
    assert!(at("/claim_secs").as_f64().unwrap() > 0.0, "{summary}");
    assert!(at("/overhead_secs").as_f64().unwrap() >= 0.0, "{summary}");
    assert_eq!(at("/goals/hanging_held_at_most_its_limit"), true);
    assert_eq!(at("/goals/none_dead"), true);
}
