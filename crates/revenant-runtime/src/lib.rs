//! revenant's worker runtime: where failures are handled for real.
//!
//! Users reach it through the facade crate `revenant` (`revenant::Worker`,
//! `revenant::runtime::...`); it depends on `revenant-core` only, never on a backend.
//!
//! ```text
//!            ┌──────────── Worker ─────────────────────────────────────┐
//!  store ──► │ fetcher (per queue) ──► executor (per job) ──► completer │ ──► store
//!            │   claims ≤ free slots     timeout, panic,        batches  │
//!            │   wakes on wait_for_jobs  heartbeat, decide()    acks     │
//!            │ maintenance: lease sweep, prune, worker registry, stats  │
//!            │   sampling (gauges), alert evaluation                    │
//!            └──────────────────────────────────────────────────────────┘
//! ```
//!
//! - [`handler`]: the [`Handler`] trait, [`JobError`] and its one-word actions
//!   ([`ResultExt`]);
//! - [`context`]: what a handler knows about its attempt ([`JobContext`]);
//! - [`worker`]: the [`Worker`], its builder and the checks that refuse a
//!   configuration that cannot work;
//! - [`maintenance`]: the lease sweep, pruning and the worker registry
//!   ([`MaintenanceConfig`]);
//! - the dependency gate: between claim and handler, jobs that call a dependency ask
//!   for a permit (breaker, rate limit, retry budget; [`DependencyConfig`]), and each
//!   attempt's answer is reported for the breaker;
//! - [`metrics`]: every metric the runtime records (names, labels, the calls);
//! - [`shutdown`]: SIGTERM / Ctrl-C and [`ShutdownHandle`].
//!
//! A handler in ten lines:
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use revenant_runtime::{JobContext, JobError, ResultExt, Worker};
//!
//! # async fn send(_to: &str) -> Result<(), std::io::Error> { Ok(()) }
//! # async fn f(store: Arc<dyn revenant_core::Store>) -> Result<(), Box<dyn std::error::Error>> {
//! #[derive(serde::Deserialize)]
//! struct Receipt { email: String }
//!
//! Worker::builder(store)
//!     .queue("emails", 10)
//!     .handler_fn("send_receipt", |ctx: JobContext, r: Receipt| async move {
//!         if r.email.is_empty() { return Err(JobError::permanent("no address")); }
//!         ctx.timeout(Duration::from_secs(10), send(&r.email)).await??; // timeout or error: retry
//!         Ok(())
//!     })
//!     .build()?
//!     .run()  // until SIGTERM / Ctrl-C; returns Ok after a graceful drain
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Guarantees kept here
//!
//! - A storage error is retried by the runtime with its own backoff (50 ms doubling to
//!   5 s, jittered); it never spends a job's attempt and never ends the worker.
//! - Every failed attempt is a `warn` event and every dead letter an `error` event,
//!   with `job_id`, `queue`, `kind`, `attempt`, `max_attempts`, `class`, `error`,
//!   `correlation_id` and `worker`.
//! - Results are written fenced on the lease: a result that comes after the lease was
//!   lost is rejected by the store and logged, never applied.

pub mod alert;
pub mod context;
pub mod handler;
pub mod maintenance;
pub mod metrics;
pub mod otel;
pub mod policies;
pub mod scheduler;
pub mod settle;
pub mod shutdown;
pub mod worker;

mod completer;
mod due_soon;
mod executor;
mod fetcher;
mod gate;
mod nudge;
mod registry;
mod store_retry;

#[cfg(test)]
pub(crate) mod faulty;
#[cfg(test)]
mod tests;

pub use context::{JobContext, JobContextParts};
pub use gate::DependencyConfig;
pub use handler::{Handler, JobAction, JobError, ResultExt};
pub use maintenance::MaintenanceConfig;
pub use policies::Policies;
pub use shutdown::{signal, ShutdownHandle};
pub use worker::{ConfigError, Worker, WorkerBuilder, WorkerError, MAX_CLAIM_AHEAD};
