//! revenant's torture suite (RELIABILITY.md): worker processes whose handlers behave as
//! a pure function of (seed, job id, attempt), driven by a chaos driver (kill -9,
//! SIGSTOP, SIGTERM, clock skew, database restarts), a ledger outside the queue, and a
//! checker that reads the ledger against the final job table. The tests are in
//! `tests/`; `scripts/torture.sh [--long]` runs them.
//!
//! - [`behaviour`]: the [`Plan`](behaviour::Plan): what each attempt of each job does,
//!   and how each job must end;
//! - [`ledger`]: append-only JSON-lines files, one per process;
//! - [`produce`]: enqueueing, each call recorded before and after;
//! - [`recording`]: a store wrapper that records claims (with lease tokens) and the
//!   answers to acks and heartbeats;
//! - [`worker`]: the `revenant-torture-worker` process;
//! - [`fleet`]: the driver's side: bulk enqueue, start and stop worker processes, wait
//!   for a drain, read the job table;
//! - [`proxy`]: a TCP fault proxy on loopback (pass, delay, black-hole, cut), one per
//!   worker, between it and PostgreSQL;
//! - [`checker`]: lost, unexpected, stuck, misclassified, late_ack_accepted,
//!   lease_overlap and duplicates.
//!
//! `docs/reliability.md` describes the harness for readers.

pub mod behaviour;
pub mod checker;
pub mod fleet;
pub mod ledger;
pub mod produce;
pub mod proxy;
pub mod recording;
pub mod worker;
