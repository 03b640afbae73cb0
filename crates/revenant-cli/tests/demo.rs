//! `revenant demo`, shortened, against `revenant_sim` on the same scenario: the
//! simulator's prediction and the demo's measurement agree within 10% on requests per
//! fresh receipt and on the share dead-lettered; no receipt is lost; each is delivered
//! exactly once; the poison receipt is dead as permanent, then redriven and delivered.
//! That one runs without the breaker (`--no-breaker`, and no provider limit), the
//! story as it was first told; the second test runs it with the breaker, the rate
//! limit and the retry budget, and checks issue 8's figures.
//!
//! The scenario is shortened so a debug build on two cores runs it in about 30 s: 2
//! receipts per simulated second, a 4-minute outage, 20 simulated seconds per real
//! second (about 14 simulated minutes in all). The receipts that arrive while the
//! provider is down still fail about four times each under the default policy's
//! backoff before it comes back. A lower rate and scale than the demo's keep the
//! worker's own latency (claims, SQLite commits, HTTP on a debug build, on a busy
//! machine) small next to the backoff's first delays: at 5 receipts/s and 30x a debug
//! build measured 3.6 requests per fresh receipt against 4.6 predicted, because
//! every retry came late, not because the policy differs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use revenant::RetryPolicy;
use revenant_sim::SimConfig;
use serde_json::Value;

const RATE: f64 = 2.0;
const OUTAGE_SECS: u64 = 240;
const SCALE: &str = "20";

fn revenant(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_revenant"))
        .args(args)
        .output()
        .expect("the revenant binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn f(value: &Value, path: &str) -> f64 {
    value
        .pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} missing in {value}"))
}

fn agree_within(name: &str, measured: f64, simulated: f64, share: f64) {
    let gap = (measured - simulated).abs() / simulated.abs().max(f64::EPSILON);
    assert!(
        gap <= share,
        "{name}: the demo measured {measured:.3}, the simulator predicts {simulated:.3} ({:.1}% apart, more than {:.0}%)",
        gap * 100.0,
        share * 100.0
    );
}

#[test]
fn the_demo_agrees_with_the_simulator_loses_nothing_and_redrives_the_poison_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("demo.svg");
    let started = Instant::now();
    let (ok, stdout, stderr) = revenant(&[
        "demo",
        "--json",
        "--keep",
        "--rate",
        &RATE.to_string(),
        "--outage",
        &format!("{OUTAGE_SECS}s"),
        "--scale",
        SCALE,
        "--no-breaker",
        "--provider-limit",
        "0",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    let wall = started.elapsed();
    assert!(ok, "revenant demo failed:\n{stdout}\n{stderr}");
    let summary: Value = serde_json::from_str(&stdout).expect("demo --json prints JSON");
    let database = summary["database"]
        .as_str()
        .expect("--keep names the database")
        .to_string();
    let _cleanup = KeptDir(Path::new(&database).parent().unwrap().to_path_buf());

    // The chart is there and is an SVG.
    let svg = std::fs::read_to_string(&chart).expect("the chart was written");
    assert!(svg.starts_with("<?xml") && svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("retries") && svg.contains("provider down"));

    // The simulator, run here on the same scenario: rate, outage, arrivals, policy.
    let mut config = SimConfig::default();
    config.arrivals.rate = RATE;
    config.arrivals.duration = Some(Duration::from_secs_f64(f(
        &summary,
        "/scenario/arrivals_for_secs",
    )));
    config.provider.outage_start = Duration::from_secs(60);
    config.provider.outage_length = Duration::from_secs(OUTAGE_SECS);
    config.policy = RetryPolicy::default();
    let sim = revenant_sim::simulate(&config).unwrap();
    assert!(
        sim.outage.requests_per_fresh_job > 2.0,
        "the scenario must retry: {}",
        sim.outage.requests_per_fresh_job
    );

    let measured = &summary["measured"];
    eprintln!(
        "demo wall time {:.1} s; requests per fresh receipt while down: measured {:.3}, simulated {:.3}; whole run: measured {:.3}, simulated {:.3}; dead share: measured {:.4}, simulated {:.4}",
        wall.as_secs_f64(),
        f(measured, "/outage_requests_per_fresh_receipt"),
        sim.outage.requests_per_fresh_job,
        f(measured, "/requests_per_receipt"),
        sim.requests_per_job,
        f(measured, "/dead_share"),
        sim.dead_share,
    );
    agree_within(
        "requests per fresh receipt while the provider is down",
        f(measured, "/outage_requests_per_fresh_receipt"),
        sim.outage.requests_per_fresh_job,
        0.10,
    );
    agree_within(
        "requests per receipt over the whole run",
        f(measured, "/requests_per_receipt"),
        sim.requests_per_job,
        0.10,
    );
    // The share dead-lettered by the outage (the poison receipt is counted apart):
    // both are about zero under the default policy, so compare in absolute terms.
    let (dead_measured, dead_simulated) = (f(measured, "/dead_share"), sim.dead_share);
    if dead_measured < 0.01 && dead_simulated < 0.01 {
        assert!((dead_measured - dead_simulated).abs() < 0.01);
    } else {
        agree_within("share dead-lettered", dead_measured, dead_simulated, 0.10);
    }

    // No receipt lost; each delivered exactly once.
    let receipts = f(&summary, "/scenario/receipts") as u64;
    assert!(
        receipts.abs_diff(sim.jobs) <= 1,
        "the demo enqueues as many receipts as the simulator, to one: {receipts} against {}",
        sim.jobs
    );
    assert_eq!(summary["checks"]["every_receipt_completed"], true);
    assert_eq!(
        summary["checks"]["every_receipt_delivered_exactly_once"],
        true
    );
    assert_eq!(summary["checks"]["undelivered"], serde_json::json!([]));
    assert_eq!(summary["checks"]["delivered_twice"], serde_json::json!([]));
    assert_eq!(
        f(measured, "/delivered") as u64,
        receipts - 1,
        "all but the poison receipt during the run"
    );

    // The poison receipt: dead as permanent with the provider's 422, then completed.
    let poison = &summary["poison"];
    assert_eq!(poison["status_before_redrive"], "dead");
    assert_eq!(poison["dead_reason_before_redrive"], "permanent");
    assert!(poison["last_error_before_redrive"]
        .as_str()
        .unwrap()
        .contains("422"));
    assert_eq!(poison["status_after_redrive"], "completed");
    assert_eq!(poison["deliveries_after_redrive"], 1);
    assert_eq!(f(measured, "/dead_permanent"), 1.0);

    // The same, read back from the kept database by the CLI an operator would use.
    let url = format!("sqlite://{database}");
    let id = poison["job_id"].as_i64().unwrap().to_string();
    let (ok, job, stderr) = revenant(&["--database-url", &url, "jobs", "show", &id, "--json"]);
    assert!(ok, "{stderr}");
    let job: Value = serde_json::from_str(&job).unwrap();
    assert_eq!(job["status"], "completed");
    assert_eq!(job["redrives"], 1);
    assert!(
        job.to_string().contains("422"),
        "the 422 stays in its history: {job}"
    );
    let (ok, completed, stderr) = revenant(&[
        "--database-url",
        &url,
        "jobs",
        "list",
        "--status",
        "completed",
        "--limit",
        "10000",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let completed: Value = serde_json::from_str(&completed).unwrap();
    assert_eq!(completed.as_array().map(Vec::len), Some(receipts as usize));
}

/// Removes the directory `--keep` left behind.
struct KeptDir(std::path::PathBuf);

impl Drop for KeptDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Issue 8's figures, measured on a shortened story (5 receipts a second, a 4-minute
/// outage, 20x) and predicted by the simulator on the same scenario: while the
/// provider is down it gets at most 0.1 requests per fresh receipt (the requests
/// before the breaker opened, then probes), nothing is dead-lettered, every receipt
/// is delivered once; after recovery the provider refuses nothing for load and the
/// backlog waits for it, then is delivered (how long it took, against its size over
/// the provider's 50 a second plus a minute, is printed: it is the machine's speed).
#[test]
fn the_breaker_holds_an_outage_to_probes_and_the_recovery_to_the_providers_limit() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("demo.svg");
    let (ok, stdout, stderr) = revenant(&[
        "demo",
        "--json",
        "--rate",
        "5",
        "--outage",
        "4m",
        "--scale",
        SCALE,
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(ok, "revenant demo failed:\n{stdout}\n{stderr}");
    let summary: Value = serde_json::from_str(&stdout).expect("demo --json prints JSON");
    let measured = &summary["measured"];
    let simulated = &summary["simulated"];
    eprintln!(
        "with the breaker: requests per fresh receipt while down {:.3} (simulated {:.3}); busiest second after recovery {} (sent {}, simulated {}); refused for load {}; backlog {} delivered in {:.0} s (simulated {:.0} s, bound {:.0} s)",
        f(measured, "/outage_requests_per_fresh_receipt"),
        f(simulated, "/outage/requests_per_fresh_job"),
        f(measured, "/recovery_peak_rps"),
        f(measured, "/recovery_peak_sent_rps"),
        f(simulated, "/recovery/peak_rps"),
        f(measured, "/over_limit"),
        f(measured, "/backlog_at_recovery"),
        f(measured, "/backlog_drain_secs"),
        f(simulated, "/backlog_drain_secs"),
        f(measured, "/backlog_drain_bound_secs"),
    );

    // The simulator, on the same scenario, predicts the same figures.
    assert!(f(simulated, "/outage/requests_per_fresh_job") <= 0.1);
    assert!(f(simulated, "/recovery/peak_rps") <= 50.0);
    assert!(f(simulated, "/backlog_drain_secs") <= f(simulated, "/backlog_drain_bound_secs"));

    // Measured: while down, the requests before the breaker opened and the probes.
    assert!(
        f(measured, "/outage_requests_per_fresh_receipt") <= 0.1,
        "{measured}"
    );
    assert_eq!(f(measured, "/dead_attempts_exhausted"), 0.0);
    let protection = &summary["protection"];
    assert_eq!(
        protection["outage_at_most_a_tenth_of_a_request_per_receipt"],
        true
    );
    assert_eq!(protection["none_dead_of_the_outage"], true);
    assert!(f(protection, "/breaker_trips") >= 1.0, "the breaker opened");
    // After recovery: paced at the rate limit, nothing refused for load.
    assert_eq!(f(measured, "/over_limit"), 0.0, "{measured}");
    // Counted raw per simulated second, the busiest one may hold a few more than the
    // limit when the machine bunches paced requests by a few milliseconds (at 20x a
    // millisecond is 2% of a simulated second); a stampede holds twice the limit.
    assert!(f(measured, "/recovery_peak_rps") <= 60.0, "{measured}");
    assert_eq!(protection["recovery_within_the_providers_limit"], true);
    assert!(
        f(measured, "/backlog_at_recovery") >= 1100.0,
        "the receipts that came while it was down wait for it: {measured}"
    );
    // How fast the backlog drains is the machine's speed as much as revenant's: on a
    // machine busy with other work the worker delivers it later (106 s against a bound
    // of 84 s with both cores kept busy), never faster than the limit (asserted above).
    // The drain time and its bound are printed, not asserted.
    // And nothing is lost or delivered twice.
    assert_eq!(summary["checks"]["every_receipt_completed"], true);
    assert_eq!(
        summary["checks"]["every_receipt_delivered_exactly_once"],
        true
    );
}
