//! Protecting a struggling dependency: a circuit breaker, a shared rate limit and a
//! retry budget per dependency key.
//!
//! Backoff spreads one job's retries out, but while jobs keep arriving during an
//! outage every fresh job adds its own retries, so the provider's load grows with the
//! outage's length, and every failed try spends an attempt. A job can say which
//! dependency it calls (a key such as `email-provider`; the `http` kind uses the
//! URL's host), and per key:
//!
//! ```text
//!             failure share >= threshold (at least min answers in the window)
//!   ┌────────┐ ─────────────────────────────────────────────────► ┌──────┐
//!   │ closed │                                                     │ open │ ◄──┐
//!   └────────┘ ◄──────────┐                                        └──────┘    │
//!      probe succeeded     │        cool-down over: one job is the probe │     │ probe failed:
//!                    ┌───────────┐ ◄─────────────────────────────────────┘     │ cool-down x2
//!                    │ half_open │ ────────────────────────────────────────────┘
//!                    └───────────┘
//! ```
//!
//! - **Breaker** ([`BreakerPolicy`]): while open, claimed jobs of the key go back to
//!   `ready` without spending their attempt ("parked", [`WaitReason::Breaker`]) and
//!   are released when the breaker closes; one probe at a time tests the dependency.
//!   Permanent failures are not counted.
//! - **Rate limit** ([`RateLimit`]): every request of the key, across every worker,
//!   gets a turn on one schedule; a job whose turn is far off goes back to `ready`
//!   until it ([`WaitReason::RateLimit`]), so jobs released after an outage are paced
//!   in order instead of stampeding.
//! - **Retry budget** ([`RetryBudget`]): retries may not exceed a share of the first
//!   attempts sent; a retry over budget waits its backoff again, attempt given back
//!   ([`WaitReason::RetryBudget`]).
//! - **Bulkhead** ([`Bulkhead`]): at most so many attempts of the key in flight, per
//!   worker and (optionally) across every worker; a job at the limit waits without
//!   spending its attempt or holding a slot ([`WaitReason::Bulkhead`]). The breaker
//!   also counts calls slower than [`SlowCall::duration`], so a provider that hangs
//!   trips it while the calls are still hanging.
//!
//! The state is shared through the store ([`crate::Store::dependency_acquire`] and
//! friends), so every worker process sees the same breaker: twenty machines send one
//! probe, not twenty. The transitions are pure functions on a [`DependencyRecord`]
//! that every backend (and the simulator) runs inside its own transaction.

mod policy;
mod record;
mod view;

#[cfg(test)]
mod tests;

pub use policy::{
    BreakerPolicy, Bulkhead, DependencyPolicies, DependencyPolicy, RateLimit, RetryBudget, SlowCall,
};
pub use record::{
    BreakerAction, BreakerState, Calls, Decision, DependencyRecord, InFlight, PermitInput,
    ProbeLease, ProbeOutcome, WaitReason, Window,
};
pub use view::{
    Answers, BudgetState, BulkheadState, DependencyState, ProbeView, RateState, WaitingCounts,
};

/// Microseconds since the epoch of a store timestamp.
pub fn micros(at: crate::Timestamp) -> i64 {
    at.timestamp_micros()
}
