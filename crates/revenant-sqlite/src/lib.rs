//! revenant's embedded SQLite backend: the default store, one file on disk.
//!
//! ```no_run
//! # async fn demo() -> Result<(), revenant_core::StoreError> {
//! let store = revenant_sqlite::SqliteStore::connect("sqlite://revenant.db").await?;
//! # Ok(()) }
//! ```
//!
//! # Durability
//!
//! The database runs in WAL mode with `synchronous = FULL`. In WAL mode, `FULL` syncs the
//! WAL on every commit, so every committed transaction (every acknowledged enqueue, ack
//! or failure) survives a process crash, an OS crash and a power loss. `NORMAL` would
//! only survive a process crash: the last transactions before an OS crash or power loss
//! could roll back, and a job acknowledged at enqueue could vanish. A queue promises not
//! to lose acknowledged work, so we pay the extra fsync per commit.
//!
//! # Concurrency
//!
//! Reads run on a small pool (WAL lets them run beside a writer). Every write is one
//! `BEGIN IMMEDIATE` transaction, so it takes SQLite's write lock before reading
//! anything and never fails half-way on a lock upgrade. Writers of one process queue on
//! an in-process mutex first (fair, no busy polling); writers of other processes (the
//! `revenant` CLI beside a worker) wait on SQLite's busy timeout of 5 s, after which the
//! call fails with [`revenant_core::StoreError::Unavailable`] and the runtime retries it.
//! SQLite serializes writers, so one database serves one machine: for many worker
//! machines use PostgreSQL.
//!
//! Enqueue calls and batches of results (`job_complete`, `job_fail`) that wait for the
//! writer share one transaction, and so one commit and one sync (group commit): the
//! call that gets the writer's turn writes every call queued by then, each as it would
//! be alone, and answers each after the commit. An idle writer writes a call alone, as
//! before; a busy one writes more calls per commit instead of falling behind its
//! producers, and the runtime's completions and failures of one batch, sent together,
//! are one commit. A call that fails fails alone: the turn's calls are then written
//! one at a time, each with its own answer.
//!
//! # Clock
//!
//! The clock is the owning process's (`now.unwrap_or_else(Utc::now)`, truncated to
//! milliseconds); timestamps are stored as INTEGER milliseconds since the Unix epoch.
//!
//! # Unique keys
//!
//! A unique key is held for the job's whole life, whatever its state (completed, dead
//! or cancelled included), until the job is pruned or purged. A second enqueue with
//! the key returns the holder's id with `duplicate = true`.
//!
//! # Groups
//!
//! A group key is global to the database, not scoped to a queue: two jobs with the same
//! group key in different queues still run one at a time, in enqueue order.
//!
//! # Layout
//!
//! The same files as the PostgreSQL backend: `migrations/` (applied automatically at
//! connect, `migrate.rs`), `queries/<op>.sql` (all the SQL, loaded by `sql.rs`),
//! [`store`] (the [`SqliteStore`]), `row.rs` (decoding rows), `wake.rs` (wake-ups),
//! `error.rs` (the one place driver errors are classified), `tests/conformance.rs`
//! (the shared behaviour suite).

mod error;
pub mod migrate;
mod row;
mod sql;
pub mod store;
mod wake;

pub use store::SqliteStore;
