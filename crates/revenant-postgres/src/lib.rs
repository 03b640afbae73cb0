//! revenant's PostgreSQL backend: many worker processes on many machines sharing one
//! database.
//!
//! - Claims take batches with `FOR UPDATE SKIP LOCKED`, so concurrent workers never
//!   wait on each other's rows.
//! - All lease, `run_at` and backoff arithmetic uses the database clock (`now()`), or
//!   the `now` a test pins, so machines with skewed clocks agree.
//! - [`PgStore::job_enqueue_tx`] enqueues inside the caller's own transaction (the
//!   outbox pattern): a job enqueued in a transaction that rolls back never existed.
//! - Wake-ups use LISTEN/NOTIFY, coalesced, with polling as the fallback (see
//!   [Wake-ups](#wake-ups)).
//! - Connection loss is [`revenant_core::StoreError::Unavailable`] from every
//!   operation, never a panic; the pool and the listener reconnect by themselves.
//!
//! Everything lives in one schema (default `revenant`): tables `jobs`, `queues`,
//! `workers`, `attempt_failures`, `redrives`, `dependencies`, `policies`, `migrations`
//! and the function `append_error`. Migrations run when the
//! store connects.
//!
//! ```no_run
//! # async fn example() -> Result<(), revenant_core::StoreError> {
//! use revenant_postgres::PgStore;
//! let store = PgStore::connect("postgres://app@db.internal/app").await?;
//! # Ok(()) }
//! ```
//!
//! # Wake-ups
//!
//! `wait_for_jobs` returns when a job of the queue may have become claimable: made due
//! by this process (at once, in process) or by any other (a NOTIFY on the channel
//! `<schema>.wakeup`, payload the queue name, received on a dedicated LISTEN
//! connection). When that connection drops it reconnects with backoff, and meanwhile
//! waits last at most [`PgStoreOptions::fallback_poll`] so workers keep polling.
//!
//! PostgreSQL serializes the commits of transactions that sent a NOTIFY, so
//! notifications are coalesced: one per statement and queue, never per row; none for
//! jobs not due now (scheduled, or retrying after a backoff); sent after the store's own
//! commit in a separate statement, so an enqueue's commit never waits for the
//! notification lock; and at most one per queue per [`PgStoreOptions::notify_interval`]
//! per process (the first at once, the rest of the window folded into one trailing
//! notification). A transactional enqueue notifies inside the caller's transaction, so
//! the notification is delivered only if it commits.
//!
//! LISTEN needs a session: behind PgBouncer in transaction-pooling mode the listener
//! receives nothing, and workers fall back to polling at their own interval.
//!
//! # Tests
//!
//! The tests need a server: `eval "$(scripts/ensure-postgres.sh)"` finds one (or starts
//! a throwaway cluster) and exports `REVENANT_TEST_DATABASE_URL`; without it the tests
//! use `DATABASE_URL`, then `postgres://postgres@127.0.0.1:5432/postgres`. Each test
//! works in a schema of its own (`rv_test_<time>_<random>`), dropped when it ends, so
//! tests run in parallel on one server. Under `CI=true` a test that cannot connect
//! fails; elsewhere the store tests skip with a loud message (the conformance cases
//! cannot skip, and fail saying how to start a server).

mod error;
pub mod migrate;
mod row;
mod sql;
mod store;
mod wake;
mod warm;

pub use store::{PgStore, PgStoreOptions};
