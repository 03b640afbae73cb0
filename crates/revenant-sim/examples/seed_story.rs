//! Prints the seed story's figures under every jitter kind, for the seed policy and
//! for revenant's default policy: the tables in docs/simulator.md.
//!
//! `cargo run --release -p revenant-sim --example seed_story [CHART_DIR]`

use revenant_core::{Jitter, RetryPolicy};
use revenant_sim::{chart, compare, seed_policy, table, SimConfig, COMPARED_JITTERS};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let chart_dir = std::env::args().nth(1);
    for (name, policy) in [
        (
            "the seed policy (10 attempts, 10s x2 capped at 1h)",
            seed_policy(Jitter::None),
        ),
        (
            "revenant's default policy (12 attempts, 10s x2 capped at 1h)",
            RetryPolicy::default(),
        ),
    ] {
        let mut config = SimConfig::default();
        config.policy = policy;
        let reports = compare(&config, &COMPARED_JITTERS)?;
        println!("{name}:\n{}", table::compare_table(&reports));
        let start = config.provider.outage_start;
        for report in &reports {
            let (arrived, dead) =
                report.dead_among_arrivals(start, start + std::time::Duration::from_secs(60));
            println!(
                "  {}: {dead} of the {arrived} jobs that failed in the outage's first minute are dead ({:.1}%)",
                report.config.policy.jitter(),
                100.0 * dead as f64 / arrived as f64
            );
        }
        if let Some(dir) = &chart_dir {
            for report in &reports {
                let file = format!(
                    "{dir}/{}-{}.svg",
                    report.config.policy.max_attempts(),
                    chart::file_stem(report.config.policy.jitter())
                );
                std::fs::write(&file, chart::render_report(report))?;
                println!("wrote {file}");
            }
        }
    }
    Ok(())
}
