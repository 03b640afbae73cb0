//! The retry policies every door resolves against: those declared in code, overlaid
//! by those stored in the database (`revenant policy set`, `PUT /v1/policies/...`).
//!
//! The store is the one source of truth that ten workers on five machines, the CLI
//! and the server all read; code may declare policies too (`WorkerBuilder::policies`,
//! `Client::with_policies`), and a stored policy of the same scope wins over them.
//!
//! Reads are cached: a snapshot is taken at most every [`Policies::DEFAULT_REFRESH`]
//! (5 s), so a change reaches every producer and worker within that. A worker reads
//! the table once before its first claim and then in its maintenance loop, so a
//! running attempt never waits on a store read for its policy (with the pool busy, that
//! wait could outlast the lease); a producer's enqueue or a remote worker's settle
//! reads it at most once per refresh. A store that cannot be read keeps the last
//! snapshot in use (logged), never failing a job for it.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use revenant_core::store::JobEnqueueParams;
use revenant_core::{NewJob, PolicySet, RetryPolicy, Store, StoreError};
use tokio::time::Instant;

/// A cached view of the effective policies. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Policies {
    base: PolicySet,
    refresh: Duration,
    current: RwLock<Snapshot>,
}

#[derive(Debug)]
struct Snapshot {
    set: Arc<PolicySet>,
    read_at: Option<Instant>,
}

impl Policies {
    /// How long a snapshot of the stored policies is used before it is read again.
    pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5);

    /// Policies over `base` (what code declared), refreshed from the store every
    /// [`Policies::DEFAULT_REFRESH`]. Nothing is read until the first use.
    pub fn new(base: PolicySet) -> Self {
        Policies::with_refresh(base, Self::DEFAULT_REFRESH)
    }

    /// As [`Policies::new`], with another refresh interval. Zero reads the store at
    /// every use by a producer or a remote worker's settle; a worker's maintenance loop
    /// reads it at most every 100 ms.
    pub fn with_refresh(base: PolicySet, refresh: Duration) -> Self {
        Policies {
            current: RwLock::new(Snapshot {
                set: Arc::new(base.clone()),
                read_at: None,
            }),
            base,
            refresh,
        }
    }

    /// How often the snapshot is read again.
    pub fn refresh_interval(&self) -> Duration {
        self.refresh
    }

    /// What code declared, before the store's policies are laid over it.
    pub fn base(&self) -> &PolicySet {
        &self.base
    }

    /// The last snapshot, without reading the store.
    pub fn cached(&self) -> Arc<PolicySet> {
        self.lock_read().set.clone()
    }

    /// Reads the stored policies now and makes them the snapshot.
    pub async fn reload(&self, store: &dyn Store) -> Result<Arc<PolicySet>, StoreError> {
        let stored = store.policy_list().await?;
        let set = Arc::new(self.base.overlay(&stored));
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        current.set = set.clone();
        current.read_at = Some(Instant::now());
        Ok(set)
    }

    /// The snapshot, read again from the store when it is older than the refresh
    /// interval. A failed read keeps the previous snapshot (and is logged): a job is
    /// never held up because its policy could not be re-read.
    pub async fn current(&self, store: &dyn Store) -> Arc<PolicySet> {
        let stale = {
            let current = self.lock_read();
            current
                .read_at
                .is_none_or(|at| at.elapsed() >= self.refresh)
        };
        if !stale {
            return self.cached();
        }
        match self.reload(store).await {
            Ok(set) => set,
            Err(err) => {
                tracing::warn!(error = %err, "could not read the stored retry policies; using the last ones read");
                self.cached()
            }
        }
    }

    /// The policy of a job of `kind` on `queue`, as [`Policies::current`] resolves it.
    pub async fn resolve(&self, store: &dyn Store, queue: &str, kind: &str) -> RetryPolicy {
        *self.current(store).await.resolve(queue, kind)
    }

    /// The store call that enqueues `jobs`: each job without its own `max_attempts`
    /// gets its queue's and kind's policy's, resolved now and fixed on the job. The one
    /// way jobs are enqueued with their policy (the `Client`'s enqueue and the
    /// scheduler's ticks). The jobs are not checked here; the store checks them.
    pub async fn enqueue_params(
        &self,
        store: &dyn Store,
        mut jobs: Vec<NewJob>,
    ) -> JobEnqueueParams {
        let policies = self.current(store).await;
        for job in &mut jobs {
            if job.max_attempts.is_none() {
                job.max_attempts = Some(attempts(policies.resolve(&job.queue, &job.kind)));
            }
        }
        JobEnqueueParams {
            jobs,
            default_max_attempts: attempts(&policies.default),
            now: None,
        }
    }

    /// Forgets the snapshot's age, so the next use reads the store (after a local
    /// change, so this process sees it at once).
    pub fn invalidate(&self) {
        self.current
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .read_at = None;
    }

    fn lock_read(&self) -> std::sync::RwLockReadGuard<'_, Snapshot> {
        self.current.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// A policy's `max_attempts` as a job stores it.
fn attempts(policy: &RetryPolicy) -> i32 {
    i32::try_from(policy.max_attempts()).unwrap_or(i32::MAX)
}
