//! revenant's retry-policy simulator: the Friday outage of the design in virtual time.
//!
//! Jobs arrive at a rate; the provider they call is down for a while, answering
//! transient failures (optionally with a `Retry-After`); every answer goes through
//! [`revenant_core::decide()`], the function the runtime itself uses, with the policy
//! under test. No database, no sleeping: a 30-minute outage at 11 jobs a second
//! (about 24 000 jobs) runs in well under a second.
//!
//! ```
//! use revenant_sim::{simulate, SimConfig};
//! let report = simulate(&SimConfig::default()).unwrap();
//! // revenant's default policy rides out the seed story's 30-minute outage.
//! assert_eq!(report.dead, 0);
//! // ...but backoff alone still multiplies the provider's load while it is down.
//! assert!(report.outage.requests_per_fresh_job > 3.0);
//! ```
//!
//! - [`config`]: the scenario ([`SimConfig`]), with the seed story as its default;
//! - [`simulate`]: runs it; [`compare()`] runs it under several jitter kinds;
//! - [`report`] and [`series`]: the figures and the time series;
//! - [`table`]: the text the CLI prints; [`chart`]: the SVG chart;
//! - [`hang`]: a provider that hangs beside a healthy one, in one queue's slots, with
//!   and without the bulkhead and slow-call counting.
//!
//! The model's assumptions and limits are in docs/simulator.md.

pub mod chart;
pub mod compare;
pub mod config;
mod engine;
pub mod hang;
pub mod report;
pub mod series;
pub mod table;

pub use compare::{compare, COMPARED_JITTERS};
pub use config::{seed_policy, Arrivals, Provider, SimConfig, Spacing, Workers};
pub use engine::simulate;
pub use report::{Report, Window};
pub use series::{Point, Second, Series};
