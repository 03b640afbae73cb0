//! The behaviour cases, one public async function per behaviour, grouped by the part of
//! the contract they prove. Each takes a fresh, empty store.

pub mod cancel;
pub mod claim;
pub mod dead;
pub mod dependency;
pub mod enqueue;
pub mod fail;
pub mod group;
pub mod kept;
pub mod lease;
pub mod policy;
pub mod prune;
pub mod queue;
pub mod read;
pub mod schedule;
pub mod snooze;
pub mod wake;
pub mod worker;

/// What every case file uses.
mod prelude {
    pub use std::collections::BTreeSet;
    pub use std::sync::Arc;
    pub use std::time::Duration;

    pub use revenant_core::store::*;
    pub use revenant_core::{
        DeadReason, ErrorEntry, FailureClass, Job, JobId, JobState, NewJob, Store, StoreError,
        Timestamp,
    };

    pub use crate::stage::*;

    /// The ids of some jobs, in order.
    pub fn ids(jobs: &[Job]) -> Vec<JobId> {
        jobs.iter().map(|job| job.id).collect()
    }

    /// The ids of some jobs, as a set.
    pub fn id_set(jobs: &[Job]) -> BTreeSet<JobId> {
        jobs.iter().map(|job| job.id).collect()
    }
}
