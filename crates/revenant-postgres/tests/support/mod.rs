//! Test databases: one fresh schema per test on a shared PostgreSQL server.
//!
//! The server is `REVENANT_TEST_DATABASE_URL`, else `DATABASE_URL`, else
//! `postgres://postgres@127.0.0.1:5432/postgres` (`scripts/ensure-postgres.sh`
//! prints the first for a server it found or started). Under `CI=true` a server that
//! does not answer fails the test; elsewhere the test is skipped with a loud message.
//!
//! Each test gets a schema named `rv_test_<unix seconds>_<random>`. A test that ends
//! normally drops its schema ([`TestDb::drop_schema`]); one that panics leaves it, and
//! the first test of a later run drops every test schema older than an hour.

#![allow(dead_code)] // Each test file uses part of this module.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rand::Rng;
use revenant_postgres::{PgStore, PgStoreOptions};
use sqlx::{Connection, PgConnection};

/// The test server's URL.
pub fn database_url() -> String {
    std::env::var("REVENANT_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A fresh schema name.
pub fn fresh_schema() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let suffix: u64 = rand::rng().random();
    format!("rv_test_{secs}_{suffix:016x}")
}

static SWEPT: AtomicBool = AtomicBool::new(false);

/// Drops test schemas left by earlier runs (older than an hour, by their name).
async fn sweep_old_schemas(conn: &mut PgConnection) {
    if SWEPT.swap(true, Ordering::SeqCst) {
        return;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'rv\\_test\\_%'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap_or_default();
    for name in names {
        let born = name
            .split('_')
            .nth(2)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        if born + 3600 < now {
            let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                .execute(&mut *conn)
                .await;
        }
    }
}

/// Connects to the test server, or explains why not: `None` means skip (outside CI).
pub async fn admin() -> Option<PgConnection> {
    let url = database_url();
    match PgConnection::connect(&url).await {
        Ok(mut conn) => {
            sweep_old_schemas(&mut conn).await;
            Some(conn)
        }
        Err(err) => {
            let message = format!(
                "PostgreSQL test server {url} does not answer: {err}. \
                 Run `eval \"$(scripts/ensure-postgres.sh)\"` or set REVENANT_TEST_DATABASE_URL."
            );
            if in_ci() {
                panic!("{message} (CI=true: PostgreSQL tests fail instead of skipping)");
            }
            eprintln!("\n!!!!!!!! SKIPPING PostgreSQL test: {message}\n");
            None
        }
    }
}

/// A store on a fresh schema.
pub struct TestDb {
    pub store: PgStore,
    pub schema: String,
    pub url: String,
}

impl TestDb {
    /// A store on a fresh schema, or `None` to skip (see [`admin`]).
    pub async fn new() -> Option<TestDb> {
        TestDb::with_options(PgStoreOptions::default()).await
    }

    /// A store on a fresh schema with these options (the schema is replaced).
    pub async fn with_options(mut options: PgStoreOptions) -> Option<TestDb> {
        drop(admin().await?);
        let url = database_url();
        options.schema = fresh_schema();
        let store = PgStore::connect_with(&url, options.clone())
            .await
            .expect("connect to the test database");
        Some(TestDb {
            store,
            schema: options.schema,
            url,
        })
    }

    /// Another store (another pool, as another process would have) on the same schema.
    pub async fn another_store(&self) -> PgStore {
        PgStore::connect_with_schema(&self.url, &self.schema)
            .await
            .expect("second store")
    }

    /// Drops the schema.
    pub async fn drop_schema(self) {
        let TestDb { store, schema, url } = self;
        store.pool().close().await;
        drop(store);
        if let Ok(mut conn) = PgConnection::connect(&url).await {
            let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .execute(&mut conn)
                .await;
        }
    }
}

/// A [`PgStore`] that drops its schema when the last reference goes, for the
/// conformance suite (which holds stores as `Arc<dyn Store>` and has no teardown).
/// A test that panics keeps its schema, named on stderr, for a post-mortem.
pub struct SchemaStore {
    store: PgStore,
    schema: String,
    url: String,
}

impl SchemaStore {
    pub fn new(db: TestDb) -> SchemaStore {
        SchemaStore {
            store: db.store,
            schema: db.schema,
            url: db.url,
        }
    }
}

impl Drop for SchemaStore {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("keeping schema {} of the failed test", self.schema);
            return;
        }
        let schema = self.schema.clone();
        let url = self.url.clone();
        // Drop runs inside the test's runtime, which cannot block on its own futures:
        // do the drop on a thread with a runtime of its own, and wait for it.
        let done = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(mut conn) = PgConnection::connect(&url).await {
                    let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                        .execute(&mut conn)
                        .await;
                }
            });
        });
        let _ = done.join();
    }
}

mod delegate {
    use std::time::Duration;

    use async_trait::async_trait;
    use revenant_core::store::*;
    use revenant_core::{Job, JobId, Store, StoreError, Timestamp};

    use super::SchemaStore;

    #[async_trait]
    impl Store for SchemaStore {
        fn backend(&self) -> &'static str {
            self.store.backend()
        }
        fn capabilities(&self) -> Capabilities {
            self.store.capabilities()
        }
        async fn now(&self) -> Result<Timestamp, StoreError> {
            self.store.now().await
        }
        async fn wait_for_jobs(&self, queue: &str, timeout: Duration) {
            self.store.wait_for_jobs(queue, timeout).await
        }
        async fn job_enqueue(&self, p: JobEnqueueParams) -> Result<Vec<Enqueued>, StoreError> {
            self.store.job_enqueue(p).await
        }
        async fn job_claim(&self, p: JobClaimParams) -> Result<Vec<Job>, StoreError> {
            self.store.job_claim(p).await
        }
        async fn job_heartbeat(&self, p: JobHeartbeatParams) -> Result<Fenced, StoreError> {
            self.store.job_heartbeat(p).await
        }
        async fn job_complete(&self, p: JobCompleteParams) -> Result<Vec<Fenced>, StoreError> {
            self.store.job_complete(p).await
        }
        async fn job_fail(&self, p: JobFailParams) -> Result<Vec<Fenced>, StoreError> {
            self.store.job_fail(p).await
        }
        async fn job_snooze(&self, p: JobSnoozeParams) -> Result<Fenced, StoreError> {
            self.store.job_snooze(p).await
        }
        async fn job_release(&self, p: JobReleaseParams) -> Result<Vec<Fenced>, StoreError> {
            self.store.job_release(p).await
        }
        async fn job_cancel(&self, p: JobCancelParams) -> Result<CancelResult, StoreError> {
            self.store.job_cancel(p).await
        }
        async fn job_get(&self, p: JobGetParams) -> Result<Option<Job>, StoreError> {
            self.store.job_get(p).await
        }
        async fn job_list(&self, p: JobListParams) -> Result<Vec<Job>, StoreError> {
            self.store.job_list(p).await
        }
        async fn job_sweep(&self, p: JobSweepParams) -> Result<Vec<JobId>, StoreError> {
            self.store.job_sweep(p).await
        }
        async fn job_redrive(&self, p: JobRedriveParams) -> Result<Vec<JobId>, StoreError> {
            self.store.job_redrive(p).await
        }
        async fn job_purge(&self, p: JobPurgeParams) -> Result<u64, StoreError> {
            self.store.job_purge(p).await
        }
        async fn dead_fingerprints(
            &self,
            p: DeadFingerprintsParams,
        ) -> Result<Vec<FingerprintGroup>, StoreError> {
            self.store.dead_fingerprints(p).await
        }
        async fn redrive_history(
            &self,
            p: RedriveHistoryParams,
        ) -> Result<Vec<RedriveRecord>, StoreError> {
            self.store.redrive_history(p).await
        }
        async fn job_prune(&self, p: JobPruneParams) -> Result<u64, StoreError> {
            self.store.job_prune(p).await
        }
        async fn job_vacuum(&self, p: JobVacuumParams) -> Result<JobVacuumed, StoreError> {
            self.store.job_vacuum(p).await
        }
        async fn queue_pause(&self, p: QueuePauseParams) -> Result<(), StoreError> {
            self.store.queue_pause(p).await
        }
        async fn queue_resume(&self, p: QueuePauseParams) -> Result<(), StoreError> {
            self.store.queue_resume(p).await
        }
        async fn queue_stats(&self, p: QueueStatsParams) -> Result<Vec<QueueStats>, StoreError> {
            self.store.queue_stats(p).await
        }
        async fn queue_history(
            &self,
            p: QueueHistoryParams,
        ) -> Result<Vec<QueueHistoryPoint>, StoreError> {
            self.store.queue_history(p).await
        }
        async fn worker_heartbeat(&self, p: WorkerHeartbeatParams) -> Result<(), StoreError> {
            self.store.worker_heartbeat(p).await
        }
        async fn worker_list(&self) -> Result<Vec<WorkerInfo>, StoreError> {
            self.store.worker_list().await
        }
        async fn worker_remove(&self, p: WorkerRemoveParams) -> Result<u64, StoreError> {
            self.store.worker_remove(p).await
        }
        async fn dependency_acquire(
            &self,
            p: DependencyAcquireParams,
        ) -> Result<DependencyAcquired, StoreError> {
            self.store.dependency_acquire(p).await
        }
        async fn dependency_report(
            &self,
            p: DependencyReportParams,
        ) -> Result<revenant_core::dependency::DependencyState, StoreError> {
            self.store.dependency_report(p).await
        }
        async fn dependency_set(
            &self,
            p: DependencySetParams,
        ) -> Result<revenant_core::dependency::DependencyState, StoreError> {
            self.store.dependency_set(p).await
        }
        async fn dependency_list(
            &self,
            p: DependencyListParams,
        ) -> Result<Vec<revenant_core::dependency::DependencyState>, StoreError> {
            self.store.dependency_list(p).await
        }
        async fn dependency_sweep(
            &self,
            p: DependencySweepParams,
        ) -> Result<Vec<String>, StoreError> {
            self.store.dependency_sweep(p).await
        }
        async fn policy_list(&self) -> Result<Vec<PolicyRecord>, StoreError> {
            self.store.policy_list().await
        }
        async fn policy_set(&self, p: PolicySetParams) -> Result<(), StoreError> {
            self.store.policy_set(p).await
        }
        async fn policy_delete(&self, p: PolicyDeleteParams) -> Result<bool, StoreError> {
            self.store.policy_delete(p).await
        }
        async fn schedule_list(
            &self,
        ) -> Result<Vec<revenant_core::schedule::ScheduleRecord>, StoreError> {
            self.store.schedule_list().await
        }
        async fn schedule_set(
            &self,
            p: revenant_core::store::ScheduleSetParams,
        ) -> Result<(), StoreError> {
            self.store.schedule_set(p).await
        }
        async fn schedule_delete(
            &self,
            p: revenant_core::store::ScheduleDeleteParams,
        ) -> Result<bool, StoreError> {
            self.store.schedule_delete(p).await
        }
        async fn schedule_pause(
            &self,
            p: revenant_core::store::SchedulePauseParams,
        ) -> Result<bool, StoreError> {
            self.store.schedule_pause(p).await
        }
        async fn schedule_fire(
            &self,
            p: revenant_core::store::ScheduleFireParams,
        ) -> Result<revenant_core::store::ScheduleFired, StoreError> {
            self.store.schedule_fire(p).await
        }
    }
}
