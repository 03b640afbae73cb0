//! revenant's core: the model every other crate shares, with no database, HTTP client,
//! TOML or metrics dependency. The worker runtime is `revenant-runtime`; the client
//! every door calls is in `revenant`.
//!
//! - [`job`]: the job model, its states and its error history;
//! - [`backoff`] and [`policy`]: the retry policy (exponential backoff with jitter,
//!   attempts, attempt timeout, lease), per kind, per queue and global;
//! - [`outcome`] and [`decide`](mod@decide): what a handler says, and the pure function that turns
//!   it into a state transition;
//! - [`store`]: the one trait every backend implements, with one params struct per
//!   operation;
//! - [`fingerprint`]: the stable fingerprint of an error message that groups dead jobs
//!   dying of one bug;
//! - [`names`], [`duration`] and [`rate`]: input validation shared by every entry point;
//! - [`migration`]: the schema migrations' shared words (`revenant migrate`);
//! - [`dependency`]: per-dependency circuit breakers, shared rate limits and retry
//!   budgets;
//! - [`trace`]: the W3C trace context a job carries from the code that enqueued it.
//!
//! Time: every store call takes an optional `now`. In production it is `None` and the
//! backend uses its own clock (PostgreSQL's `now()`, the owning process for SQLite);
//! tests pin it so nothing sleeps.

pub mod backoff;
pub mod decide;
pub mod dependency;
pub mod duration;
pub mod error;
pub mod fingerprint;
pub mod job;
pub mod migration;
pub mod names;
pub mod outcome;
pub mod policy;
pub mod rate;
pub mod schedule;
pub mod store;
pub mod trace;

pub use backoff::{Backoff, Jitter};
pub use decide::{decide, Transition};
pub use error::{InputError, StoreError};
pub use job::{
    ClaimedJob, DeadReason, ErrorEntry, FailureClass, Job, JobId, JobState, LeaseToken, NewJob,
    Timestamp,
};
pub use outcome::Outcome;
pub use policy::{PolicyError, PolicySet, RetryPolicy};
pub use rate::Rate;
pub use store::Store;
