//! [`PgStore`]: the [`Store`] trait on PostgreSQL.
//!
//! Every operation is one statement (batched operations pass arrays and `unnest`
//! them), except enqueue, which may need a second statement to find the holder of a
//! unique key. Time is `coalesce($now, now())` in SQL, truncated to milliseconds.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use foldhash::HashSetExt as _;
use revenant_core::dependency::{DependencyRecord, DependencyState, WaitReason, WaitingCounts};
use revenant_core::store::{held_delay, millis};
use revenant_core::store::{
    plan_acquire, DependencyAcquireParams, DependencyAcquired, DependencyListParams,
    DependencyReportParams, DependencySetParams, DependencySweepParams, GatedJob, JobGate,
};
use revenant_core::store::{
    CancelResult, CancelTarget, Capabilities, DeadFingerprintsParams, Enqueued, FailAction, Fenced,
    FingerprintGroup, JobCancelParams, JobClaimParams, JobCompleteParams, JobEnqueueParams,
    JobFailParams, JobFilter, JobGetParams, JobHeartbeatParams, JobListParams, JobPruneParams,
    JobPurgeParams, JobRedriveParams, JobReleaseParams, JobSnoozeParams, JobSweepParams,
    JobVacuumParams, JobVacuumed, KeptFailure, LeaseRef, PolicyDeleteParams, PolicyRecord,
    PolicySetParams, QueueHistoryParams, QueueHistoryPoint, QueuePauseParams, QueueStats,
    QueueStatsParams, RedriveHistoryParams, RedriveRecord, WorkerHeartbeatParams, WorkerInfo,
    WorkerRemoveParams,
};
use revenant_core::{fingerprint, DeadReason};
use revenant_core::{
    ClaimedJob, ErrorEntry, FailureClass, InputError, Job, JobId, JobState, NewJob, Store,
    StoreError, Timestamp,
};
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::query::Query;
use sqlx::{Acquire, Connection, PgConnection, PgPool, Postgres, Row};

use crate::error::ResultExt;
use crate::migrate;
use crate::row::{
    array_column, claimed_from_arrays, decodable_job, job_from_row, listed, policy_from_row,
    Columns,
};
use crate::sql::Queries;
use crate::wake::Wakeups;
use crate::warm::Warm;
use revenant_core::migration::MigrateMode;

/// What enqueueing a batch gives: the results in input order, and the distinct queues
/// that got a job due now.
mod schedule;

type EnqueueResult = Result<(Vec<Enqueued>, Vec<String>), StoreError>;

/// The most rows `job_list` returns, whatever the caller asks.
const LIST_LIMIT_CAP: u32 = 10_000;

/// The longest schema name accepted (the NOTIFY channel `<schema>.wakeup` must fit
/// PostgreSQL's 63-byte identifiers).
const MAX_SCHEMA_LEN: usize = 50;

/// How long a pooled connection may sit idle before it is pinged on acquire.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// How a [`PgStore`] connects. Every field has a default ([`PgStoreOptions::default`]).
#[derive(Debug, Clone)]
pub struct PgStoreOptions {
    /// The schema holding revenant's tables; created (with the tables) on connect if
    /// missing. Default `revenant`. ASCII letters, digits and `_`, starting with a
    /// letter or `_`, at most 50 bytes. Give each test its own to isolate tests.
    pub schema: String,
    /// The pool's size. Default 10. A worker uses about one connection per fetcher,
    /// one for the completer and one for maintenance at a time; the wake-up listener
    /// has its own connection outside the pool. Between a worker's claims and batch
    /// writes the store keeps the connections that ran them for the next ones (up to 4,
    /// at most half of this; a second unused and they go back to the pool).
    pub max_connections: u32,
    /// Connections the pool opens at start and keeps open, idle or not (at most
    /// `max_connections`). Default 0: the pool connects as operations need it, so a
    /// one-off command opens one or two. The cost of a pool that grows under load: the
    /// operation that finds every connection busy waits for a new one to connect (tens
    /// of milliseconds on a loaded machine), so the first claims of a burst start that
    /// much later (W3 in docs/benchmarks.md: 30 to 37 ms stalls at the step from 100 to
    /// 1,000 jobs/s, none with the pool held open). A worker that must pick up bursts
    /// quickly sets it to `max_connections`: a fixed-size pool, as HikariCP advises and
    /// Ecto opens by default. docs/deploy.md counts connections as if every pool were
    /// full, so this changes no sizing there.
    pub min_connections: u32,
    /// How long an operation waits for a pooled connection (including connecting)
    /// before failing with [`StoreError::Unavailable`]. Default 5 s: short, so a worker
    /// notices an outage quickly and backs off instead of hanging.
    pub acquire_timeout: Duration,
    /// At most one cross-process wake-up per queue per this interval, per process.
    /// Default 50 ms. See the `wake` module docs for why.
    pub notify_interval: Duration,
    /// While the LISTEN connection is down, `wait_for_jobs` returns after at most this
    /// long so workers poll. Default 1 s.
    pub fallback_poll: Duration,
    /// `application_name` of the connections (shown in `pg_stat_activity`). Default
    /// `revenant`.
    pub application_name: String,
    /// Whether connecting applies pending migrations. Default [`MigrateMode::Auto`]:
    /// concurrent starts take turns on an advisory lock and the first one migrates.
    /// [`MigrateMode::Never`] applies none and refuses to connect while one is pending
    /// (apply them with [`crate::migrate::apply`], `revenant migrate`).
    pub migrate: MigrateMode,
}

impl Default for PgStoreOptions {
    fn default() -> Self {
        PgStoreOptions {
            schema: "revenant".to_string(),
            max_connections: 10,
            min_connections: 0,
            acquire_timeout: Duration::from_secs(5),
            notify_interval: Duration::from_millis(50),
            fallback_poll: Duration::from_secs(1),
            application_name: "revenant".to_string(),
            migrate: MigrateMode::Auto,
        }
    }
}

impl PgStoreOptions {
    /// The defaults with another schema.
    pub fn with_schema(schema: impl Into<String>) -> Self {
        PgStoreOptions {
            schema: schema.into(),
            ..PgStoreOptions::default()
        }
    }

    fn validate(&self) -> Result<(), InputError> {
        let schema = &self.schema;
        let valid_start = schema
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !valid_start
            || schema.len() > MAX_SCHEMA_LEN
            || !schema
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(InputError::new(
                "schema",
                format!(
                    "{schema:?} is not accepted; use ASCII letters, digits and '_', starting \
                     with a letter or '_', at most {MAX_SCHEMA_LEN} bytes"
                ),
            ));
        }
        if self.max_connections == 0 {
            return Err(InputError::new("max_connections", "must be at least 1"));
        }
        if self.min_connections > self.max_connections {
            return Err(InputError::new(
                "min_connections",
                format!(
                    "{} is above max_connections ({}): the pool cannot keep open more \
                     connections than it may have",
                    self.min_connections, self.max_connections
                ),
            ));
        }
        Ok(())
    }
}

/// The PostgreSQL store. Cheap to clone (the clones share one pool).
///
/// Construct with [`PgStore::connect`], [`PgStore::connect_with_schema`],
/// [`PgStore::connect_with`] or [`PgStore::from_pool`]; each applies the migrations
/// before returning. Dropping the last clone stops the wake-up listener; the pool
/// closes its connections as they are dropped.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.inner.schema)
            .field("pool", &self.inner.pool)
            .finish_non_exhaustive()
    }
}

struct Inner {
    pool: PgPool,
    /// The worker's hot statements' connections (claims, batch writes, heartbeats).
    warm: Warm,
    schema: String,
    queries: Queries,
    wakeups: Arc<Wakeups>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.wakeups.stop();
    }
}

impl PgStore {
    /// One claim's statement (`query`: `job_claim.sql` or `job_claim_run.sql`, which
    /// differ only in how they read the claimed jobs back), bound to `params`. One
    /// statement, one round trip: the claim is a function (migration 0008) that carries
    /// its plan settings, the generic plan and no JIT compilation, and runs in a
    /// transaction of its own. None when the claim asks for no job.
    fn claim<'q>(
        query: &'q str,
        params: &'q JobClaimParams,
    ) -> Result<Option<Query<'q, Postgres, PgArguments>>, StoreError> {
        params.validate()?;
        if params.limit == 0 {
            return Ok(None);
        }
        Ok(Some(
            sqlx::query(query)
                .bind(params.now)
                .bind(&params.queue)
                .bind(i64::from(params.limit))
                .bind(&params.worker)
                .bind(millis(params.lease))
                .bind(history_limit())
                .bind(fingerprint::lease_expired())
                .bind(params.reclaim),
        ))
    }

    /// Connects to a `postgres://` or `postgresql://` URL with the default options
    /// (schema `revenant`) and applies the migrations.
    ///
    /// Fails with [`StoreError::UnsupportedUrl`] for another scheme or a URL that does
    /// not parse, [`StoreError::Unavailable`] when the server cannot be reached within
    /// the acquire timeout, and [`StoreError::Backend`] when a migration fails (for
    /// example, the role may not create the schema).
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        PgStore::connect_with(url, PgStoreOptions::default()).await
    }

    /// [`PgStore::connect`] with revenant's tables in `schema` (created if missing).
    pub async fn connect_with_schema(url: &str, schema: &str) -> Result<PgStore, StoreError> {
        PgStore::connect_with(url, PgStoreOptions::with_schema(schema)).await
    }

    /// [`PgStore::connect`] with every option given.
    pub async fn connect_with(url: &str, options: PgStoreOptions) -> Result<PgStore, StoreError> {
        let connect = parse_url(url)?.application_name(&options.application_name);
        options.validate()?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .min_connections(options.min_connections)
            .acquire_timeout(options.acquire_timeout)
            // sqlx's `test_before_acquire` pings every connection on every acquire: one
            // round trip more per claim and per batch of acks, on connections that were
            // in use a millisecond ago. Only a connection that sat idle long enough for
            // the server or a proxy to have dropped it is pinged; a fresh failure past
            // that is a store error the runtime retries.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for < PING_IF_IDLE_FOR {
                        return Ok(true);
                    }
                    match conn.ping().await {
                        Ok(()) => Ok(true),
                        Err(error) => {
                            tracing::info!(%error, "dropping a pooled connection that failed its ping");
                            Ok(false)
                        }
                    }
                })
            })
            .connect_with(connect)
            .await
            .classified()?;
        PgStore::from_pool(pool, options).await
    }

    /// Uses a pool the application already has (its `max_connections`,
    /// `min_connections`, timeouts and connect options are kept; the option fields for
    /// those are ignored). The wake-up listener opens one extra connection with the
    /// pool's connect options.
    pub async fn from_pool(pool: PgPool, options: PgStoreOptions) -> Result<PgStore, StoreError> {
        options.validate()?;
        migrate::run(&pool, &options.schema, options.migrate).await?;
        let listener_pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(true)
            .connect_lazy_with((*pool.connect_options()).clone());
        let queries = Queries::new(&options.schema);
        let wakeups = Arc::new(Wakeups::new(
            &options.schema,
            pool.clone(),
            listener_pool,
            queries.job_notify.clone(),
            options.notify_interval,
            options.fallback_poll,
        ));
        let store = PgStore {
            inner: Arc::new(Inner {
                warm: Warm::new(pool.clone()),
                pool,
                schema: options.schema,
                queries,
                wakeups,
            }),
        };
        store.backfill_fingerprints().await?;
        Ok(store)
    }

    /// Gives a fingerprint to dead jobs written before fingerprints existed (migration
    /// 2). One indexed query that finds nothing on every later connect.
    async fn backfill_fingerprints(&self) -> Result<(), StoreError> {
        loop {
            let rows = sqlx::query(&self.inner.queries.dead_unfingerprinted)
                .fetch_all(&self.inner.pool)
                .await
                .classified()?;
            let mut ids = Vec::with_capacity(rows.len());
            let mut prints = Vec::with_capacity(rows.len());
            for row in &rows {
                ids.push(row.try_get::<i64, _>("id").classified()?);
                let reason: Option<String> = row.try_get("dead_reason").classified()?;
                let message: String = row.try_get("message").classified()?;
                prints.push(
                    if reason.as_deref() == Some(DeadReason::LeaseExpired.as_str()) {
                        fingerprint::lease_expired()
                    } else {
                        fingerprint::fingerprint(&message)
                    },
                );
            }
            sqlx::query(&self.inner.queries.job_set_fingerprint)
                .bind(&ids)
                .bind(&prints)
                .execute(&self.inner.pool)
                .await
                .classified()?;
            if rows.len() < 500 {
                return Ok(());
            }
        }
    }

    /// The pool, to run the application's own queries or begin the transaction given
    /// to [`PgStore::job_enqueue_tx`].
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The schema holding revenant's tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Enqueues inside the caller's transaction (the outbox pattern): the jobs exist
    /// when, and only if, the caller commits. A worker cannot see them before, and a
    /// rollback leaves no trace (the only residue is skipped ids in the sequence).
    ///
    /// Pass `&mut *tx` for a `sqlx::Transaction<'_, Postgres>`. Same contract as
    /// [`Store::job_enqueue`], including unique keys; the wake-up notification is sent
    /// inside the transaction, so PostgreSQL delivers it only on commit.
    ///
    /// A database error aborts the caller's transaction (PostgreSQL's rule), so the
    /// caller must roll back; input errors are found before any statement runs and
    /// leave the transaction usable. Under REPEATABLE READ or SERIALIZABLE, a unique
    /// key taken by a transaction that committed after this one's snapshot is a
    /// serialization failure ([`StoreError::Unavailable`]): retry the transaction.
    /// Given a connection that is not in a transaction, each statement commits by
    /// itself (the batch is still one atomic insert).
    ///
    /// ```no_run
    /// # async fn example(store: revenant_postgres::PgStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use revenant_core::store::JobEnqueueParams;
    /// use revenant_core::NewJob;
    ///
    /// let mut tx = store.pool().begin().await?;
    /// sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
    /// let receipt = NewJob::new("emails", "send_receipt", serde_json::json!({"order": 42}));
    /// let params = JobEnqueueParams { jobs: vec![receipt], default_max_attempts: 10, now: None };
    /// store.job_enqueue_tx(&mut tx, params).await?;
    /// tx.commit().await?; // the order and its receipt job exist together, or neither does
    /// # Ok(()) }
    /// ```
    ///
    /// The future is boxed with an explicit `Send` so it can run inside
    /// `tokio::spawn` (rustc cannot prove `Send` for a plain `async fn` holding a
    /// `&mut PgConnection` across awaits).
    pub fn job_enqueue_tx<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        params: JobEnqueueParams,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Enqueued>, StoreError>> + Send + 'a>> {
        Box::pin(async move {
            params.validate()?;
            if params.jobs.is_empty() {
                return Ok(Vec::new());
            }
            let (results, due) = self.enqueue_on(conn, &params).await?;
            let admitted: Vec<String> = due
                .into_iter()
                .filter(|queue| self.inner.wakeups.admit(queue))
                .collect();
            if !admitted.is_empty() {
                sqlx::query(&self.inner.queries.job_notify)
                    .bind(self.inner.wakeups.channel())
                    .bind(&admitted)
                    .execute(&mut *conn)
                    .await
                    .classified()?;
            }
            Ok(results)
        })
    }

    /// Inserts a validated, non-empty batch on `conn`. Returns the results in input
    /// order and the distinct queues that got a job due now.
    fn enqueue_on<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        params: &'a JobEnqueueParams,
    ) -> Pin<Box<dyn Future<Output = EnqueueResult> + Send + 'a>> {
        Box::pin(self.enqueue_on_inner(conn, params))
    }

    async fn enqueue_on_inner(
        &self,
        conn: &mut PgConnection,
        params: &JobEnqueueParams,
    ) -> EnqueueResult {
        let jobs = &params.jobs;
        // A key repeated within the batch goes to its first job; later ones are
        // duplicates of it.
        let mut first_with_key: HashMap<&str, usize> = HashMap::new();
        let mut same_as: Vec<Option<usize>> = vec![None; jobs.len()];
        for (i, job) in jobs.iter().enumerate() {
            if let Some(key) = job.unique_key.as_deref() {
                match first_with_key.get(key) {
                    Some(&first) => same_as[i] = Some(first),
                    None => {
                        first_with_key.insert(key, i);
                    }
                }
            }
        }
        let mut results: Vec<Option<Enqueued>> = vec![None; jobs.len()];
        let mut pending: Vec<usize> = (0..jobs.len()).filter(|&i| same_as[i].is_none()).collect();
        let mut due_queues: Vec<String> = Vec::new();
        // A holder can be pruned or purged between the insert and the look-up; then the
        // insert is tried again. Three rounds make that race practically impossible.
        for _round in 0..3 {
            if pending.is_empty() {
                break;
            }
            let batch: Vec<&NewJob> = pending.iter().map(|&i| &jobs[i]).collect();
            let rows = bind_new_jobs(sqlx::query(&self.inner.queries.job_enqueue), &batch, params)?
                .fetch_all(&mut *conn)
                .await
                .classified()?;
            let mut taken: Vec<(usize, String)> = Vec::new();
            // By position, in the statement's order (ord, id, inserted, due, queue).
            let mut columns = Columns::new();
            for row in &rows {
                let ord: i64 = columns.get(row, 0)?;
                let index = pending[usize::try_from(ord - 1).map_err(StoreError::backend)?];
                if columns.get::<bool>(row, 2)? {
                    results[index] = Some(Enqueued {
                        id: columns.get(row, 1)?,
                        duplicate: false,
                    });
                    if columns.get::<bool>(row, 3)? {
                        due_queues.push(columns.get(row, 4)?);
                    }
                } else if let Some(key) = &jobs[index].unique_key {
                    taken.push((index, key.clone()));
                } else {
                    return Err(StoreError::Backend {
                        message: format!("job {index} of the batch was not inserted"),
                        source: None,
                    });
                }
            }
            pending.clear();
            if taken.is_empty() {
                break;
            }
            let keys: Vec<&str> = taken.iter().map(|(_, key)| key.as_str()).collect();
            let holders: HashMap<String, i64> =
                sqlx::query_as(&self.inner.queries.job_enqueue_holders)
                    .bind(&keys)
                    .fetch_all(&mut *conn)
                    .await
                    .classified()?
                    .into_iter()
                    .collect();
            for (index, key) in taken {
                match holders.get(&key) {
                    Some(&id) => {
                        results[index] = Some(Enqueued {
                            id,
                            duplicate: true,
                        })
                    }
                    None => pending.push(index),
                }
            }
        }
        if !pending.is_empty() {
            return Err(StoreError::Unavailable {
                message: "the holder of a unique key kept disappearing during enqueue; retry"
                    .to_string(),
                source: None,
            });
        }
        for (i, first) in same_as.iter().enumerate() {
            if let Some(first) = *first {
                let id = results[first]
                    .map(|r| r.id)
                    .ok_or_else(|| StoreError::Backend {
                        message: "a unique key's first job has no result".to_string(),
                        source: None,
                    })?;
                results[i] = Some(Enqueued {
                    id,
                    duplicate: true,
                });
            }
        }
        let results = results
            .into_iter()
            .map(|r| {
                r.ok_or_else(|| StoreError::Backend {
                    message: "a job of the batch has no result".to_string(),
                    source: None,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        due_queues.sort();
        due_queues.dedup();
        Ok((results, due_queues))
    }

    /// Locks the dependency's row for the transaction (creating it if missing) and
    /// returns its record and the transaction's clock.
    async fn dependency_lock(
        &self,
        conn: &mut PgConnection,
        key: &str,
        now: Option<Timestamp>,
    ) -> Result<(DependencyRecord, Timestamp), StoreError> {
        for _ in 0..2 {
            let row = sqlx::query(&self.inner.queries.dependency_lock)
                .bind(key)
                .bind(now)
                .fetch_optional(&mut *conn)
                .await
                .classified()?;
            if let Some(row) = row {
                let record: serde_json::Value = row.try_get("record").classified()?;
                let record = serde_json::from_value(record).map_err(|err| {
                    StoreError::Corrupt(format!("dependencies.record of {key:?}: {err}"))
                })?;
                return Ok((record, row.try_get("now").classified()?));
            }
            sqlx::query(&self.inner.queries.dependency_insert)
                .bind(key)
                .execute(&mut *conn)
                .await
                .classified()?;
        }
        Err(StoreError::Unavailable {
            message: format!("the row of dependency {key:?} vanished; retry"),
            source: None,
        })
    }

    async fn dependency_save(
        &self,
        conn: &mut PgConnection,
        key: &str,
        record: &DependencyRecord,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        sqlx::query(&self.inner.queries.dependency_put)
            .bind(key)
            .bind(record.state.as_str())
            .bind(serde_json::to_value(record).map_err(StoreError::backend)?)
            .bind(now)
            .execute(&mut *conn)
            .await
            .classified()?;
        Ok(())
    }

    /// Releases the jobs parked on `key` (its breaker closed), in claim order, on the
    /// record's rate-limit turns. Returns their queues.
    async fn dependency_release(
        &self,
        conn: &mut PgConnection,
        key: &str,
        record: &mut DependencyRecord,
        now: Timestamp,
    ) -> Result<Vec<String>, StoreError> {
        let ids: Vec<i64> = sqlx::query_scalar(&self.inner.queries.dependency_parked)
            .bind(key)
            .fetch_all(&mut *conn)
            .await
            .classified()?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let (first, spacing) = record.reserve_turns(now.timestamp_micros(), ids.len() as u64);
        let run_at: Vec<Timestamp> = (0..ids.len())
            .map(|i| {
                let at = first.saturating_add(spacing.saturating_mul(i as i64));
                // Whole milliseconds, rounded up: never due before its turn.
                let ms = at.div_euclid(1000) + i64::from(at.rem_euclid(1000) > 0);
                chrono::DateTime::from_timestamp_millis(ms).unwrap_or(now)
            })
            .collect();
        let wait = (spacing > 0).then_some(WaitReason::RateLimit.as_str());
        let mut queues: Vec<String> = sqlx::query_scalar(&self.inner.queries.dependency_release)
            .bind(&ids)
            .bind(&run_at)
            .bind(wait)
            .fetch_all(&mut *conn)
            .await
            .classified()?;
        queues.sort();
        queues.dedup();
        Ok(queues)
    }

    /// Jobs waiting per dependency (all, or `key`), by reason.
    async fn dependency_waiting(
        &self,
        key: Option<&str>,
    ) -> Result<HashMap<String, WaitingCounts>, StoreError> {
        let rows = sqlx::query(&self.inner.queries.dependency_waiting)
            .bind(key)
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        let mut counts: HashMap<String, WaitingCounts> = HashMap::new();
        for row in rows {
            let Some(dependency) = row
                .try_get::<Option<String>, _>("dependency")
                .classified()?
            else {
                continue;
            };
            let n: i64 = row.try_get("n").classified()?;
            let reason: String = row.try_get("dependency_wait").classified()?;
            let entry = counts.entry(dependency).or_default();
            match WaitReason::parse(&reason) {
                Some(WaitReason::Breaker) => entry.breaker += n,
                Some(WaitReason::RateLimit) => entry.rate_limit += n,
                Some(WaitReason::RetryBudget) => entry.retry_budget += n,
                Some(WaitReason::Bulkhead) | None => {}
            }
        }
        Ok(counts)
    }

    async fn dependency_view(
        &self,
        key: &str,
        record: &DependencyRecord,
        now: Timestamp,
    ) -> Result<DependencyState, StoreError> {
        let waiting = self.dependency_waiting(Some(key)).await?;
        Ok(record.view(
            key,
            now.timestamp_micros(),
            waiting.get(key).copied().unwrap_or_default(),
        ))
    }

    fn announce(&self, queues: Vec<String>) {
        if !queues.is_empty() {
            self.inner.wakeups.announce(queues);
        }
    }
}

/// Parses a `postgres://` or `postgresql://` URL.
pub(crate) fn parse_url(url: &str) -> Result<PgConnectOptions, StoreError> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(StoreError::UnsupportedUrl {
            url: url.to_string(),
            message: "the PostgreSQL backend takes postgres:// or postgresql:// URLs".to_string(),
        });
    }
    PgConnectOptions::from_str(url).map_err(|err| StoreError::UnsupportedUrl {
        url: url.to_string(),
        message: format!("not a valid PostgreSQL URL: {err}"),
    })
}

/// Text PostgreSQL can store: it refuses U+0000 in `text` and `jsonb`. A handler's
/// error message is whatever the failing code said, and refusing it would make the
/// failure impossible to record, so the character is replaced instead.
fn pg_text(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// [`pg_text`], keeping `text` as it is when it holds no U+0000 (nearly always).
fn pg_text_cow(text: Cow<'_, str>) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(pg_text(&text))
    } else {
        text
    }
}

/// Whether a JSON value holds U+0000 in a string or a key.
fn has_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(has_nul),
        serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// How many history entries a job keeps, as SQL takes it.
fn history_limit() -> i32 {
    i32::try_from(ErrorEntry::HISTORY_LIMIT).unwrap_or(i32::MAX)
}

fn bind_new_jobs<'q>(
    query: Query<'q, Postgres, PgArguments>,
    jobs: &[&NewJob],
    params: &JobEnqueueParams,
) -> Result<Query<'q, Postgres, PgArguments>, StoreError> {
    let mut queue = Vec::with_capacity(jobs.len());
    let mut kind = Vec::with_capacity(jobs.len());
    let mut payload = Vec::with_capacity(jobs.len());
    let mut priority = Vec::with_capacity(jobs.len());
    let mut run_at: Vec<Option<Timestamp>> = Vec::with_capacity(jobs.len());
    let mut delay: Vec<Option<i64>> = Vec::with_capacity(jobs.len());
    let mut max_attempts = Vec::with_capacity(jobs.len());
    let mut group_key = Vec::with_capacity(jobs.len());
    let mut unique_key = Vec::with_capacity(jobs.len());
    let mut correlation_id = Vec::with_capacity(jobs.len());
    let mut traceparent: Vec<Option<String>> = Vec::with_capacity(jobs.len());
    let mut tracestate: Vec<Option<String>> = Vec::with_capacity(jobs.len());
    for job in jobs {
        queue.push(job.queue.clone());
        kind.push(job.kind.clone());
        let json = serde_json::to_string(&job.payload).map_err(StoreError::backend)?;
        if has_nul(&job.payload) {
            return Err(InputError::new(
                "payload",
                "contains the character U+0000, which PostgreSQL's jsonb cannot store",
            )
            .into());
        }
        payload.push(json);
        priority.push(job.priority);
        run_at.push(job.run_at);
        delay.push(job.delay.map(millis));
        max_attempts.push(job.max_attempts.unwrap_or(params.default_max_attempts));
        group_key.push(job.group_key.clone());
        unique_key.push(job.unique_key.clone());
        correlation_id.push(job.correlation_id.clone());
        let trace = job.trace_context.as_ref();
        traceparent.push(trace.map(|t| t.traceparent().to_string()));
        tracestate.push(trace.and_then(|t| t.tracestate()).map(str::to_string));
    }
    Ok(query
        .bind(params.now)
        .bind(queue)
        .bind(kind)
        .bind(payload)
        .bind(priority)
        .bind(run_at)
        .bind(delay)
        .bind(max_attempts)
        .bind(group_key)
        .bind(unique_key)
        .bind(correlation_id)
        .bind(traceparent)
        .bind(tracestate))
}

/// Binds a [`JobFilter`] as `$1..$11` (see `queries/job_filter.sql`).
fn bind_filter<'q>(
    query: Query<'q, Postgres, PgArguments>,
    filter: &JobFilter,
) -> Query<'q, Postgres, PgArguments> {
    query
        .bind(filter.ids.clone())
        .bind(filter.queue.clone())
        .bind(filter.kind.clone())
        .bind(
            filter
                .statuses
                .as_ref()
                .map(|states| states.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
        )
        .bind(filter.group_key.clone())
        .bind(filter.correlation_id.clone())
        .bind(filter.dead_reason.map(|r| r.as_str()))
        .bind(filter.error_contains.clone())
        .bind(filter.finished_after)
        .bind(filter.finished_before)
        .bind(filter.fingerprint.clone())
}

/// A batch's kept failures as `job_complete_v3` and `job_fail_v3` take them
/// (migration 16): beside each element, a JSON array of its job's history entries, or
/// NULL, and the attempt of its first (the fence on the job's stored attempts).
///
/// The entries are serialized straight into the statement's argument when it is
/// bound ([`KeptEntry`]). Built as `serde_json::Value` objects first, then serialized,
/// then dropped, they cost about 9,000 of the worker's instructions per kept failure
/// (callgrind, W2's failing drain of 20,000 jobs: a tenth of the worker's
/// instructions, more than a whole attempt of a no-op job).
struct KeptBeside<'a> {
    entries: Vec<Option<sqlx::types::Json<Vec<KeptEntry<'a>>>>>,
    firsts: Vec<Option<i32>>,
}

impl<'a> KeptBeside<'a> {
    /// `kept` beside the batch's elements, one per id in `ids` (a job repeated in a
    /// batch gets them once); `None` when there are none, and the batch goes to the
    /// statements of migration 14, which have less to do.
    fn of(kept: &'a [KeptFailure], ids: &[JobId]) -> Option<Self> {
        if kept.is_empty() {
            return None;
        }
        let mut by_job: foldhash::HashMap<JobId, Vec<KeptEntry<'a>>> = foldhash::HashMap::default();
        for failure in kept {
            by_job
                .entry(failure.id)
                .or_default()
                .push(KeptEntry::of(failure));
        }
        let mut entries = Vec::with_capacity(ids.len());
        let mut firsts = Vec::with_capacity(ids.len());
        for id in ids {
            let job = by_job.remove(id);
            firsts.push(job.as_ref().and_then(|e| e.first()).map(|e| e.attempt));
            entries.push(job.map(sqlx::types::Json));
        }
        Some(KeptBeside { entries, firsts })
    }
}

/// A kept failure's history entry, as job_fail writes one: its time to the
/// millisecond, in the form PostgreSQL gives a `timestamptz` in JSON on a session in
/// UTC; without a worker, no such key. Its texts are borrowed from the failure unless
/// they must change (cut to the longest message kept, or holding U+0000: [`pg_text`]).
#[derive(serde::Serialize)]
struct KeptEntry<'a> {
    attempt: i32,
    at: String,
    class: &'static str,
    message: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker: Option<Cow<'a, str>>,
}

impl<'a> KeptEntry<'a> {
    fn of(failure: &'a KeptFailure) -> Self {
        KeptEntry {
            attempt: failure.attempt,
            at: failure
                .at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, false),
            class: failure.failure.class.as_str(),
            message: pg_text_cow(ErrorEntry::truncated(&failure.failure.message)),
            worker: failure
                .worker
                .as_deref()
                .map(|w| pg_text_cow(Cow::Borrowed(w))),
        }
    }
}

/// Splits leases into id and token arrays, each (id, token) pair once. A pair given
/// twice is applied once; its later copies report a lost lease (they change nothing).
/// Sized for the batch up front: grown one insert at a time, the set rehashed every
/// pair at each doubling (with the batch's rows, then read by name, 3% of the worker's
/// instructions per job in a drain of no-op jobs, callgrind). Hashed with foldhash, as
/// `batch_rows`' set: the pairs are the store's own ids and tokens, and SipHash cost
/// 600 instructions a job here.
fn lease_arrays(leases: &[LeaseRef]) -> (Vec<i64>, Vec<i64>, Vec<bool>) {
    let mut seen = foldhash::HashSet::with_capacity(leases.len());
    let mut ids = Vec::with_capacity(leases.len());
    let mut tokens = Vec::with_capacity(leases.len());
    let mut first = Vec::with_capacity(leases.len());
    for lease in leases {
        let fresh = seen.insert((lease.id, lease.lease_token.0));
        if fresh {
            ids.push(lease.id);
            tokens.push(lease.lease_token.0);
        }
        first.push(fresh);
    }
    (ids, tokens, first)
}

/// One result per lease, in order: applied when its pair came back from the update
/// (and it is that pair's first copy).
fn fenced_results(
    leases: &[LeaseRef],
    first: &[bool],
    applied: &foldhash::HashSet<(i64, i64)>,
) -> Vec<Fenced> {
    leases
        .iter()
        .zip(first)
        .map(|(lease, &first)| {
            if first && applied.contains(&(lease.id, lease.lease_token.0)) {
                Fenced::Applied
            } else {
                Fenced::LeaseLost
            }
        })
        .collect()
}

/// What a batch write's answer says (see [`batch_rows`]).
struct BatchRows {
    /// The (id, lease token) pairs the write applied.
    applied: foldhash::HashSet<(i64, i64)>,
    /// The queues to wake.
    wake: Vec<String>,
}

/// Reads the one row of a batch write (`queries/job_complete.sql` and the others): the
/// (id, lease token) pairs it applied, and the queues to wake.
fn batch_rows(row: &PgRow) -> Result<BatchRows, StoreError> {
    let ids: Vec<i64> = array_column(row, 0)?;
    let tokens: Vec<i64> = array_column(row, 1)?;
    if ids.len() != tokens.len() {
        return Err(StoreError::Corrupt(format!(
            "a batch write returned {} ids and {} lease tokens",
            ids.len(),
            tokens.len()
        )));
    }
    Ok(BatchRows {
        applied: ids.into_iter().zip(tokens).collect(),
        wake: array_column(row, 2)?,
    })
}

/// Runs `vacuum` with the session's notices off (and back on after).
async fn vacuum_quietly(conn: &mut sqlx::PgConnection, vacuum: &str) -> Result<(), sqlx::Error> {
    for statement in [
        "SET client_min_messages = error",
        vacuum,
        "RESET client_min_messages",
    ] {
        sqlx::query(statement)
            .persistent(false)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The jobs table as `job_vacuum` sees it (`queries/job_vacuum_state.sql`).
struct VacuumState {
    live_rows: u64,
    dead_rows: u64,
    passes: i64,
    permitted: bool,
}

impl VacuumState {
    async fn read(conn: &mut sqlx::PgConnection, query: &str) -> Result<Self, StoreError> {
        let row = sqlx::query(query).fetch_one(conn).await.classified()?;
        let count = |column: &str| -> Result<u64, StoreError> {
            let n: i64 = row.try_get(column).classified()?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        Ok(VacuumState {
            live_rows: count("live_rows")?,
            dead_rows: count("dead_rows")?,
            passes: row.try_get("passes").classified()?,
            permitted: row.try_get("permitted").classified()?,
        })
    }
}

fn fenced(applied: bool) -> Fenced {
    if applied {
        Fenced::Applied
    } else {
        Fenced::LeaseLost
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            multi_process: true,
            transactional_enqueue: true,
            cross_process_wakeup: true,
        }
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        sqlx::query_scalar(&self.inner.queries.store_now)
            .fetch_one(&self.inner.pool)
            .await
            .classified()
    }

    async fn wait_for_jobs(&self, queue: &str, timeout: Duration) {
        self.inner.wakeups.wait(queue, timeout).await;
    }

    async fn job_enqueue(&self, params: JobEnqueueParams) -> Result<Vec<Enqueued>, StoreError> {
        params.validate()?;
        if params.jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.inner.pool.acquire().await.classified()?;
        // Without unique keys the batch is one INSERT statement, atomic by itself: skip
        // BEGIN and COMMIT (two round trips). With them, a lost race may need a second
        // insert round, and the batch must stay all-or-nothing across rounds.
        let (results, due) = if params.jobs.iter().any(|job| job.unique_key.is_some()) {
            let mut tx = conn.begin().await.classified()?;
            let done = self.enqueue_on(&mut tx, &params).await?;
            tx.commit().await.classified()?;
            done
        } else {
            self.enqueue_on(&mut conn, &params).await?
        };
        self.announce(due);
        Ok(results)
    }

    async fn job_claim(&self, params: JobClaimParams) -> Result<Vec<Job>, StoreError> {
        let Some(claim) = Self::claim(&self.inner.queries.job_claim, &params)? else {
            return Ok(Vec::new());
        };
        let rows = self.inner.warm.fetch_all(claim).await.classified()?;
        let mut jobs = rows
            .iter()
            .map(job_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        jobs.sort_by_key(|job| (Reverse(job.priority), job.run_at, job.id));
        Ok(jobs)
    }

    async fn job_claim_run(&self, params: JobClaimParams) -> Result<Vec<ClaimedJob>, StoreError> {
        let Some(claim) = Self::claim(&self.inner.queries.job_claim_run, &params)? else {
            return Ok(Vec::new());
        };
        let row = self.inner.warm.fetch_one(claim).await.classified()?;
        let mut jobs = claimed_from_arrays(&row, &params.queue)?;
        jobs.sort_by_key(|job| (Reverse(job.priority), job.run_at, job.id));
        Ok(jobs)
    }

    async fn job_heartbeat(&self, params: JobHeartbeatParams) -> Result<Fenced, StoreError> {
        params.validate()?;
        let query = sqlx::query(&self.inner.queries.job_heartbeat)
            .bind(params.now)
            .bind(params.lease.id)
            .bind(params.lease.lease_token.0)
            .bind(millis(params.lease_for));
        let row = self.inner.warm.fetch_optional(query).await.classified()?;
        Ok(fenced(row.is_some()))
    }

    async fn job_complete(&self, params: JobCompleteParams) -> Result<Vec<Fenced>, StoreError> {
        params.validate()?;
        if params.leases.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, tokens, first) = lease_arrays(&params.leases);
        let kept = KeptBeside::of(&params.kept, &ids);
        let query = match &kept {
            None => sqlx::query(&self.inner.queries.job_complete)
                .bind(params.now)
                .bind(&ids)
                .bind(&tokens),
            Some(kept) => sqlx::query(&self.inner.queries.job_complete_kept)
                .bind(params.now)
                .bind(&ids)
                .bind(&tokens)
                .bind(&kept.entries)
                .bind(&kept.firsts)
                .bind(history_limit()),
        };
        let row = self.inner.warm.fetch_one(query).await.classified()?;
        // A finished grouped job lets the next of its group run.
        let BatchRows { applied, wake } = batch_rows(&row)?;
        self.announce(wake);
        Ok(fenced_results(&params.leases, &first, &applied))
    }

    async fn job_fail(&self, params: JobFailParams) -> Result<Vec<Fenced>, StoreError> {
        params.validate()?;
        if params.failures.is_empty() {
            return Ok(Vec::new());
        }
        let leases: Vec<LeaseRef> = params.failures.iter().map(|f| f.lease).collect();
        let (_, _, first) = lease_arrays(&leases);
        let n = params.failures.len();
        let mut ids = Vec::with_capacity(n);
        let mut tokens = Vec::with_capacity(n);
        let mut classes = Vec::with_capacity(n);
        let mut messages = Vec::with_capacity(n);
        let mut workers = Vec::with_capacity(n);
        let mut delays: Vec<Option<i64>> = Vec::with_capacity(n);
        let mut reasons: Vec<Option<&str>> = Vec::with_capacity(n);
        let mut prints: Vec<Option<String>> = Vec::with_capacity(n);
        let mut keeps = Vec::with_capacity(n);
        for (failure, &first) in params.failures.iter().zip(&first) {
            if !first {
                continue;
            }
            ids.push(failure.lease.id);
            tokens.push(failure.lease.lease_token.0);
            classes.push(failure.failure.class.as_str());
            let message = ErrorEntry::truncate_message(&failure.failure.message);
            prints.push(match failure.action {
                FailAction::Dead { .. } => Some(fingerprint::fingerprint(&message)),
                FailAction::Retry { .. } | FailAction::Keep { .. } => None,
            });
            messages.push(pg_text(&message));
            workers.push(failure.worker.as_deref().map(pg_text));
            match &failure.action {
                FailAction::Retry { delay } | FailAction::Keep { delay } => {
                    delays.push(Some(millis(held_delay(*delay))));
                    reasons.push(None);
                }
                FailAction::Dead { reason } => {
                    delays.push(None);
                    reasons.push(Some(reason.as_str()));
                }
            }
            keeps.push(matches!(failure.action, FailAction::Keep { .. }));
        }
        let kept = KeptBeside::of(&params.kept, &ids);
        let statement = match kept {
            None => &self.inner.queries.job_fail,
            Some(_) => &self.inner.queries.job_fail_kept,
        };
        let query = sqlx::query(statement)
            .bind(params.now)
            .bind(&ids)
            .bind(&tokens)
            .bind(&classes)
            .bind(&messages)
            .bind(&workers)
            .bind(&delays)
            .bind(&reasons)
            .bind(history_limit())
            .bind(&prints)
            .bind(&keeps);
        let query = match &kept {
            None => query,
            Some(kept) => query.bind(&kept.entries).bind(&kept.firsts),
        };
        let row = self.inner.warm.fetch_one(query).await.classified()?;
        let BatchRows { applied, wake } = batch_rows(&row)?;
        self.announce(wake);
        Ok(fenced_results(&leases, &first, &applied))
    }

    async fn job_snooze(&self, params: JobSnoozeParams) -> Result<Fenced, StoreError> {
        params.validate()?;
        let row = sqlx::query(&self.inner.queries.job_snooze)
            .bind(params.now)
            .bind(params.lease.id)
            .bind(params.lease.lease_token.0)
            .bind(millis(held_delay(params.delay)))
            .fetch_optional(&self.inner.pool)
            .await
            .classified()?;
        if let Some(row) = &row {
            if row.try_get::<bool, _>("due").classified()? {
                self.announce(vec![row.try_get("queue").classified()?]);
            }
        }
        Ok(fenced(row.is_some()))
    }

    async fn job_release(&self, params: JobReleaseParams) -> Result<Vec<Fenced>, StoreError> {
        params.validate()?;
        if params.leases.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, tokens, first) = lease_arrays(&params.leases);
        let query = sqlx::query(&self.inner.queries.job_release)
            .bind(params.now)
            .bind(&ids)
            .bind(&tokens);
        let row = self.inner.warm.fetch_one(query).await.classified()?;
        // Every released job is ready again.
        let BatchRows { applied, wake } = batch_rows(&row)?;
        self.announce(wake);
        Ok(fenced_results(&params.leases, &first, &applied))
    }

    async fn job_cancel(&self, params: JobCancelParams) -> Result<CancelResult, StoreError> {
        params.validate()?;
        let (id, token) = match params.target {
            CancelTarget::Id(id) => (id, None),
            CancelTarget::Lease(lease) => (lease.id, Some(lease.lease_token.0)),
        };
        // The history has no class for a cancellation; it is recorded as permanent (the
        // job will not run again) with the reason in the message.
        let message = params
            .message
            .as_deref()
            .map(|m| pg_text(&ErrorEntry::truncate_message(&format!("cancelled: {m}"))));
        // A job seen as ready or running after a cancel by id matched nothing was
        // claimed or redriven in between; try again (twice is plenty).
        for _ in 0..3 {
            let row = sqlx::query(&self.inner.queries.job_cancel)
                .bind(params.now)
                .bind(id)
                .bind(token)
                .bind(&message)
                .bind(history_limit())
                .bind(FailureClass::Permanent.as_str())
                .bind(token.is_some())
                .fetch_optional(&self.inner.pool)
                .await
                .classified()?;
            if let Some(row) = row {
                if row.try_get::<bool, _>("grouped").classified()? {
                    self.announce(vec![row.try_get("queue").classified()?]);
                }
                return Ok(CancelResult::Cancelled);
            }
            if token.is_some() {
                return Ok(CancelResult::LeaseLost);
            }
            let status: Option<String> = sqlx::query_scalar(&self.inner.queries.job_status)
                .bind(id)
                .fetch_optional(&self.inner.pool)
                .await
                .classified()?;
            let Some(status) = status else {
                return Ok(CancelResult::NotFound);
            };
            let status = JobState::from_str(&status)
                .map_err(|_| StoreError::Corrupt(format!("jobs.status of job {id}: {status:?}")))?;
            if status.is_terminal() {
                return Ok(CancelResult::NotCancellable(status));
            }
        }
        Err(StoreError::Unavailable {
            message: format!("job {id} kept changing state during cancel; retry"),
            source: None,
        })
    }

    async fn job_get(&self, params: JobGetParams) -> Result<Option<Job>, StoreError> {
        sqlx::query(&self.inner.queries.job_get)
            .bind(params.id)
            .fetch_optional(&self.inner.pool)
            .await
            .classified()?
            .map(|row| job_from_row(&row))
            .transpose()
    }

    async fn job_list(&self, params: JobListParams) -> Result<Vec<Job>, StoreError> {
        params.validate()?;
        if params.limit == 0 {
            return Ok(Vec::new());
        }
        let rows = bind_filter(sqlx::query(&self.inner.queries.job_list), &params.filter)
            .bind(params.before_id)
            .bind(i64::from(params.limit.min(LIST_LIMIT_CAP)))
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        let mut jobs = Vec::with_capacity(rows.len());
        for row in &rows {
            jobs.extend(decodable_job(row)?);
        }
        Ok(jobs)
    }

    async fn job_sweep(&self, params: JobSweepParams) -> Result<Vec<JobId>, StoreError> {
        params.validate()?;
        let mut ids: Vec<JobId> = sqlx::query_scalar(&self.inner.queries.job_sweep)
            .bind(params.now)
            .bind(history_limit())
            .bind(fingerprint::lease_expired())
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        ids.sort_unstable();
        Ok(ids)
    }

    async fn job_redrive(&self, params: JobRedriveParams) -> Result<Vec<JobId>, StoreError> {
        params.validate()?;
        let filter = serde_json::to_string(&params.filter).map_err(StoreError::backend)?;
        let rows = bind_filter(sqlx::query(&self.inner.queries.job_redrive), &params.filter)
            .bind(params.limit.map(i64::from))
            .bind(millis(params.spacing))
            .bind(params.now)
            .bind(params.start_at)
            .bind(&params.audit_key)
            .bind(pg_text(&filter))
            .bind(&params.actor)
            .bind(&params.note)
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        let mut ids = Vec::with_capacity(rows.len());
        let mut wake = Vec::new();
        for row in &rows {
            ids.push(row.try_get::<i64, _>("id").classified()?);
            if row.try_get::<bool, _>("due").classified()? {
                wake.push(row.try_get("queue").classified()?);
            }
        }
        ids.sort_unstable();
        self.announce(wake);
        Ok(ids)
    }

    async fn job_purge(&self, params: JobPurgeParams) -> Result<u64, StoreError> {
        params.validate()?;
        let done = bind_filter(sqlx::query(&self.inner.queries.job_purge), &params.filter)
            .bind(params.limit.map(i64::from))
            .execute(&self.inner.pool)
            .await
            .classified()?;
        Ok(done.rows_affected())
    }

    async fn dead_fingerprints(
        &self,
        params: DeadFingerprintsParams,
    ) -> Result<Vec<FingerprintGroup>, StoreError> {
        params.validate()?;
        if params.limit == 0 {
            return Ok(Vec::new());
        }
        let rows = bind_filter(
            sqlx::query(&self.inner.queries.dead_fingerprints),
            &params.filter,
        )
        .bind(i64::from(params.limit.min(LIST_LIMIT_CAP)))
        .fetch_all(&self.inner.pool)
        .await
        .classified()?;
        listed("jobs", &rows, |row| {
            let example_message: String = row.try_get("example_message").classified()?;
            let print: String = row.try_get("fingerprint").classified()?;
            Ok(FingerprintGroup {
                // The pattern under the rules the stored fingerprint was made with.
                pattern: fingerprint::pattern(&print, &example_message),
                fingerprint: print,
                count: row.try_get("count").classified()?,
                first_seen: row.try_get("first_seen").classified()?,
                last_seen: row.try_get("last_seen").classified()?,
                kinds: row.try_get("kinds").classified()?,
                queues: row.try_get("queues").classified()?,
                example_id: row.try_get("example_id").classified()?,
                example_message,
            })
        })
    }

    async fn redrive_history(
        &self,
        params: RedriveHistoryParams,
    ) -> Result<Vec<RedriveRecord>, StoreError> {
        let rows = sqlx::query(&self.inner.queries.redrive_history)
            .bind(i64::from(params.limit.min(LIST_LIMIT_CAP)))
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        listed("redrives", &rows, |row| {
            let filter: serde_json::Value = row.try_get("filter").classified()?;
            Ok(RedriveRecord {
                id: row.try_get("id").classified()?,
                at: row.try_get("at").classified()?,
                updated_at: row.try_get("updated_at").classified()?,
                filter: serde_json::from_value(filter)
                    .map_err(|err| StoreError::Corrupt(format!("redrives.filter: {err}")))?,
                spacing_ms: row.try_get("spacing_ms").classified()?,
                count: row.try_get("count").classified()?,
                first_job_id: row.try_get("first_job_id").classified()?,
                last_job_id: row.try_get("last_job_id").classified()?,
                actor: row.try_get("actor").classified()?,
                note: row.try_get("note").classified()?,
            })
        })
    }

    async fn job_prune(&self, params: JobPruneParams) -> Result<u64, StoreError> {
        params.validate()?;
        let done = sqlx::query(&self.inner.queries.job_prune)
            .bind(params.now)
            .bind(millis(params.retention))
            .bind(i64::from(params.limit))
            .execute(&self.inner.pool)
            .await
            .classified()?;
        Ok(done.rows_affected())
    }

    async fn job_vacuum(&self, params: JobVacuumParams) -> Result<JobVacuumed, StoreError> {
        params.validate()?;
        let queries = &self.inner.queries;
        // One connection throughout: the session setting below must meet the VACUUM.
        let mut conn = self.inner.pool.acquire().await.classified()?;
        let before = VacuumState::read(&mut conn, &queries.job_vacuum_state).await?;
        if !before.permitted {
            return Ok(JobVacuumed::NotPermitted);
        }
        if !params.wants_vacuum(before.live_rows, before.dead_rows) {
            return Ok(JobVacuumed::NotNeeded {
                live_rows: before.live_rows,
                dead_rows: before.dead_rows,
            });
        }
        // A VACUUM that skips a locked table says so in a WARNING, which the driver
        // would log as a warning each time autovacuum got there first; the count of
        // passes below tells instead. VACUUM cannot run in a transaction block, so these
        // are three statements on this session, not one.
        let ran = vacuum_quietly(&mut conn, &queries.job_vacuum).await;
        if ran.is_err() {
            // The session's settings are unknown: it goes rather than back to the pool.
            conn.close_on_drop();
        }
        ran.classified()?;
        let after = VacuumState::read(&mut conn, &queries.job_vacuum_state).await?;
        if after.passes > before.passes {
            Ok(JobVacuumed::Vacuumed {
                live_rows: before.live_rows,
                dead_rows: before.dead_rows,
            })
        } else {
            Ok(JobVacuumed::Busy)
        }
    }

    async fn queue_pause(&self, params: QueuePauseParams) -> Result<(), StoreError> {
        params.validate()?;
        sqlx::query(&self.inner.queries.queue_set_paused)
            .bind(params.now)
            .bind(&params.queue)
            .bind(true)
            .execute(&self.inner.pool)
            .await
            .classified()?;
        Ok(())
    }

    async fn queue_resume(&self, params: QueuePauseParams) -> Result<(), StoreError> {
        params.validate()?;
        sqlx::query(&self.inner.queries.queue_set_paused)
            .bind(params.now)
            .bind(&params.queue)
            .bind(false)
            .execute(&self.inner.pool)
            .await
            .classified()?;
        self.announce(vec![params.queue]);
        Ok(())
    }

    async fn queue_stats(&self, params: QueueStatsParams) -> Result<Vec<QueueStats>, StoreError> {
        params.validate()?;
        let rows = sqlx::query(&self.inner.queries.queue_stats)
            .bind(params.now)
            .bind(&params.queue)
            .bind(millis(params.worker_alive_within))
            .bind(millis(params.interval))
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        rows.iter()
            .map(|row| {
                Ok(QueueStats {
                    queue: row.try_get("queue").classified()?,
                    paused: row.try_get("paused").classified()?,
                    ready: row.try_get("ready").classified()?,
                    scheduled: row.try_get("scheduled").classified()?,
                    retrying: row.try_get("retrying").classified()?,
                    running: row.try_get("running").classified()?,
                    completed: row.try_get("completed").classified()?,
                    dead: row.try_get("dead").classified()?,
                    dead_last_hour: row.try_get("dead_last_hour").classified()?,
                    cancelled: row.try_get("cancelled").classified()?,
                    oldest_due_age_secs: row.try_get("oldest_due_age_secs").classified()?,
                    workers_alive: row.try_get("workers_alive").classified()?,
                    last_completed_at: row.try_get("last_completed_at").classified()?,
                    interval_secs: params.interval.as_secs_f64(),
                    completed_last_interval: row.try_get("completed_last_interval").classified()?,
                    failed_last_interval: row.try_get("failed_last_interval").classified()?,
                })
            })
            .collect()
    }

    async fn queue_history(
        &self,
        params: QueueHistoryParams,
    ) -> Result<Vec<QueueHistoryPoint>, StoreError> {
        params.validate()?;
        let now = match params.now {
            Some(now) => now,
            None => self.now().await?,
        }
        .timestamp_millis();
        let step = i64::try_from(params.step.as_millis()).unwrap_or(i64::MAX);
        let first = now.saturating_sub(step.saturating_mul(i64::from(params.points) - 1));
        let rows = sqlx::query(&self.inner.queries.queue_history)
            .bind(&params.queue)
            .bind(first)
            .bind(step)
            .bind(now)
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        let counts = rows
            .iter()
            .map(|row| {
                Ok((
                    row.try_get::<String, _>("edge").classified()?,
                    row.try_get::<i64, _>("bucket").classified()?,
                    row.try_get::<i64, _>("n").classified()?,
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let now = chrono::DateTime::from_timestamp_millis(now)
            .ok_or_else(|| StoreError::Corrupt(format!("now = {now} ms is not a timestamp")))?;
        params.assemble(now, &counts)
    }

    async fn dependency_acquire(
        &self,
        params: DependencyAcquireParams,
    ) -> Result<DependencyAcquired, StoreError> {
        params.validate()?;
        let mut conn = self.inner.pool.acquire().await.classified()?;
        let mut tx = conn.begin().await.classified()?;
        // The dependency's row first, then the jobs: every caller locks in that order.
        let (mut record, now) = self
            .dependency_lock(&mut tx, &params.dependency, params.now)
            .await?;
        let ids: Vec<i64> = params.requests.iter().map(|r| r.lease.id).collect();
        let rows = sqlx::query(&self.inner.queries.job_gate_running)
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await
            .classified()?;
        let mut running = HashMap::new();
        for row in &rows {
            let id: i64 = row.try_get("id").classified()?;
            let Some(token) = row.try_get::<Option<i64>, _>("lease_token").classified()? else {
                continue;
            };
            let waited: Option<String> = row.try_get("dependency_wait").classified()?;
            running.insert(
                id,
                GatedJob {
                    lease_token: revenant_core::LeaseToken(token),
                    attempts: row.try_get("attempts").classified()?,
                    waited_for: waited.as_deref().and_then(WaitReason::parse),
                },
            );
        }
        let plan = plan_acquire(&mut record, &params, now, &running);
        let mut gate_ids = Vec::new();
        let mut gate_run_at: Vec<Option<Timestamp>> = Vec::new();
        let mut gate_reason: Vec<Option<&str>> = Vec::new();
        let mut permits = Vec::with_capacity(plan.len());
        for (request, (permit, gate)) in params.requests.iter().zip(plan) {
            match gate {
                JobGate::Run => {
                    gate_ids.push(request.lease.id);
                    gate_run_at.push(None);
                    gate_reason.push(None);
                }
                JobGate::Defer { run_at, reason } => {
                    gate_ids.push(request.lease.id);
                    gate_run_at.push(Some(run_at));
                    gate_reason.push(reason.stored());
                }
                JobGate::Nothing => {}
            }
            permits.push(permit);
        }
        let mut wake = Vec::new();
        if !gate_ids.is_empty() {
            let rows = sqlx::query(&self.inner.queries.job_gate)
                .bind(&gate_ids)
                .bind(&gate_run_at)
                .bind(&gate_reason)
                .bind(&params.dependency)
                .fetch_all(&mut *tx)
                .await
                .classified()?;
            for row in &rows {
                if row.try_get::<bool, _>("deferred").classified()? {
                    wake.push(row.try_get::<String, _>("queue").classified()?);
                }
            }
        }
        self.dependency_save(&mut tx, &params.dependency, &record, now)
            .await?;
        tx.commit().await.classified()?;
        // A job sent back until later needs no wake-up, but a grouped one may have been
        // holding its group: let the fetchers look again.
        wake.sort();
        wake.dedup();
        self.announce(wake);
        Ok(DependencyAcquired { now, permits })
    }

    async fn dependency_report(
        &self,
        params: DependencyReportParams,
    ) -> Result<DependencyState, StoreError> {
        params.validate()?;
        let mut conn = self.inner.pool.acquire().await.classified()?;
        let mut tx = conn.begin().await.classified()?;
        let (mut record, now) = self
            .dependency_lock(&mut tx, &params.dependency, params.now)
            .await?;
        let closed = record.report_calls(&params.policy, now.timestamp_micros(), &params.calls());
        let wake = if closed {
            self.dependency_release(&mut tx, &params.dependency, &mut record, now)
                .await?
        } else {
            Vec::new()
        };
        self.dependency_save(&mut tx, &params.dependency, &record, now)
            .await?;
        tx.commit().await.classified()?;
        self.announce(wake);
        Ok(record.view(
            &params.dependency,
            now.timestamp_micros(),
            WaitingCounts::default(),
        ))
    }

    async fn dependency_set(
        &self,
        params: DependencySetParams,
    ) -> Result<DependencyState, StoreError> {
        params.validate()?;
        let mut conn = self.inner.pool.acquire().await.classified()?;
        let mut tx = conn.begin().await.classified()?;
        let (mut record, now) = self
            .dependency_lock(&mut tx, &params.dependency, params.now)
            .await?;
        let wake = if record.set(params.action, now.timestamp_micros()) {
            self.dependency_release(&mut tx, &params.dependency, &mut record, now)
                .await?
        } else {
            Vec::new()
        };
        self.dependency_save(&mut tx, &params.dependency, &record, now)
            .await?;
        tx.commit().await.classified()?;
        self.announce(wake);
        self.dependency_view(&params.dependency, &record, now).await
    }

    async fn dependency_list(
        &self,
        params: DependencyListParams,
    ) -> Result<Vec<DependencyState>, StoreError> {
        params.validate()?;
        let now = match params.now {
            Some(now) => now,
            None => self.now().await?,
        };
        let rows = sqlx::query(&self.inner.queries.dependency_list)
            .bind(&params.dependency)
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        let waiting = self
            .dependency_waiting(params.dependency.as_deref())
            .await?;
        listed("dependencies", &rows, |row| {
            let key: String = row.try_get("key").classified()?;
            let record: serde_json::Value = row.try_get("record").classified()?;
            let record: DependencyRecord = serde_json::from_value(record).map_err(|err| {
                StoreError::Corrupt(format!("dependencies.record of {key:?}: {err}"))
            })?;
            let counts = waiting.get(&key).copied().unwrap_or_default();
            Ok(record.view(&key, now.timestamp_micros(), counts))
        })
    }

    async fn dependency_sweep(
        &self,
        params: DependencySweepParams,
    ) -> Result<Vec<String>, StoreError> {
        params.validate()?;
        let now = match params.now {
            Some(now) => now,
            None => self.now().await?,
        };
        let rows = sqlx::query(&self.inner.queries.dependency_list)
            .bind(None::<String>)
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        let mut released = Vec::new();
        let mut wake = Vec::new();
        for row in &rows {
            let key: String = row.try_get("key").classified()?;
            let record: serde_json::Value = row.try_get("record").classified()?;
            let record: DependencyRecord = serde_json::from_value(record).map_err(|err| {
                StoreError::Corrupt(format!("dependencies.record of {key:?}: {err}"))
            })?;
            if !record.wants_probe(now.timestamp_micros()) {
                continue;
            }
            let queue: Option<String> =
                sqlx::query_scalar(&self.inner.queries.dependency_sweep_release)
                    .bind(&key)
                    .bind(now)
                    .fetch_optional(&self.inner.pool)
                    .await
                    .classified()?;
            if let Some(queue) = queue {
                wake.push(queue);
                released.push(key);
            }
        }
        self.announce(wake);
        Ok(released)
    }

    async fn worker_heartbeat(&self, params: WorkerHeartbeatParams) -> Result<(), StoreError> {
        params.validate()?;
        sqlx::query(&self.inner.queries.worker_heartbeat)
            .bind(params.now)
            .bind(&params.worker)
            .bind(&params.host)
            .bind(params.pid)
            .bind(&params.queues)
            .execute(&self.inner.pool)
            .await
            .classified()?;
        Ok(())
    }

    async fn worker_list(&self) -> Result<Vec<WorkerInfo>, StoreError> {
        let rows = sqlx::query(&self.inner.queries.worker_list)
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        listed("workers", &rows, |row| {
            Ok(WorkerInfo {
                worker: row.try_get("worker").classified()?,
                host: row.try_get("host").classified()?,
                pid: row.try_get("pid").classified()?,
                queues: row.try_get("queues").classified()?,
                started_at: row.try_get("started_at").classified()?,
                last_seen_at: row.try_get("last_seen_at").classified()?,
            })
        })
    }

    async fn worker_remove(&self, params: WorkerRemoveParams) -> Result<u64, StoreError> {
        params.validate()?;
        let done = match params {
            WorkerRemoveParams::Worker(worker) => {
                sqlx::query(&self.inner.queries.worker_remove)
                    .bind(worker)
                    .execute(&self.inner.pool)
                    .await
            }
            WorkerRemoveParams::StaleFor { stale_after, now } => {
                sqlx::query(&self.inner.queries.worker_remove_stale)
                    .bind(now)
                    .bind(millis(stale_after))
                    .execute(&self.inner.pool)
                    .await
            }
        }
        .classified()?;
        Ok(done.rows_affected())
    }

    async fn policy_list(&self) -> Result<Vec<PolicyRecord>, StoreError> {
        let rows = sqlx::query(&self.inner.queries.policy_list)
            .fetch_all(&self.inner.pool)
            .await
            .classified()?;
        let mut records = Vec::with_capacity(rows.len());
        for row in &rows {
            let scope: String = row.try_get("scope").classified()?;
            let name: String = row.try_get("name").classified()?;
            match policy_from_row(row, &scope, &name) {
                Ok(record) => records.push(record),
                Err(err) => tracing::warn!(
                    scope,
                    name,
                    error = %err,
                    "skipping a stored retry policy that cannot be decoded"
                ),
            }
        }
        Ok(records)
    }

    async fn policy_set(&self, params: PolicySetParams) -> Result<(), StoreError> {
        params.validate()?;
        let policy = serde_json::to_string(&params.policy).map_err(StoreError::backend)?;
        let (scope, name) = params.scope.as_parts();
        sqlx::query(&self.inner.queries.policy_set)
            .bind(scope)
            .bind(name)
            .bind(policy)
            .bind(params.now)
            .execute(&self.inner.pool)
            .await
            .classified()?;
        Ok(())
    }

    async fn policy_delete(&self, params: PolicyDeleteParams) -> Result<bool, StoreError> {
        params.validate()?;
        let (scope, name) = params.scope.as_parts();
        let done = sqlx::query(&self.inner.queries.policy_delete)
            .bind(scope)
            .bind(name)
            .execute(&self.inner.pool)
            .await
            .classified()?;
        Ok(done.rows_affected() > 0)
    }

    async fn schedule_list(
        &self,
    ) -> Result<Vec<revenant_core::schedule::ScheduleRecord>, StoreError> {
        self.schedules().await
    }

    async fn schedule_set(
        &self,
        params: revenant_core::store::ScheduleSetParams,
    ) -> Result<(), StoreError> {
        self.schedule_put(params).await
    }

    async fn schedule_delete(
        &self,
        params: revenant_core::store::ScheduleDeleteParams,
    ) -> Result<bool, StoreError> {
        self.schedule_remove(params).await
    }

    async fn schedule_pause(
        &self,
        params: revenant_core::store::SchedulePauseParams,
    ) -> Result<bool, StoreError> {
        self.schedule_set_paused(params).await
    }

    async fn schedule_fire(
        &self,
        params: revenant_core::store::ScheduleFireParams,
    ) -> Result<revenant_core::store::ScheduleFired, StoreError> {
        self.schedule_tick(params).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wake;

    #[test]
    fn the_longest_schema_still_makes_a_valid_channel() {
        assert!(wake::channel_for(&"s".repeat(MAX_SCHEMA_LEN)).len() <= 63);
        assert!(PgStoreOptions::with_schema("s".repeat(MAX_SCHEMA_LEN))
            .validate()
            .is_ok());
        assert!(PgStoreOptions::with_schema("s".repeat(MAX_SCHEMA_LEN + 1))
            .validate()
            .is_err());
        assert!(PgStoreOptions::with_schema("bad-name").validate().is_err());
        assert!(PgStoreOptions::with_schema("1abc").validate().is_err());
        assert!(PgStoreOptions::with_schema("").validate().is_err());
    }

    #[test]
    fn non_postgres_urls_are_refused() {
        assert!(matches!(
            parse_url("sqlite://revenant.db"),
            Err(StoreError::UnsupportedUrl { .. })
        ));
        assert!(parse_url("postgresql://u@localhost/db").is_ok());
    }
}
