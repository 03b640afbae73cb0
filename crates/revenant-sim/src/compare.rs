//! `--compare`: one scenario under several jitter kinds, side by side.

use revenant_core::{InputError, Jitter};

use crate::config::SimConfig;
use crate::engine::simulate;
use crate::report::Report;

/// The jitter kinds `--compare` runs, in the order printed: none, full, equal,
/// decorrelated and proportional(0.2).
pub const COMPARED_JITTERS: [Jitter; 5] = [
    Jitter::None,
    Jitter::Full,
    Jitter::Equal,
    Jitter::Decorrelated,
    Jitter::Proportional(0.2),
];

/// Runs `config` once per jitter kind, changing nothing else (same seed, so the same
/// arrivals and the same poison jobs).
pub fn compare(config: &SimConfig, jitters: &[Jitter]) -> Result<Vec<Report>, InputError> {
    jitters
        .iter()
        .map(|&jitter| {
            let mut config = config.clone();
            config.policy = config.policy.to_builder().jitter(jitter).build()?;
            simulate(&config)
        })
        .collect()
}
