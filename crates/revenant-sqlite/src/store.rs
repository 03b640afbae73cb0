//! [`SqliteStore`]: the [`Store`] trait on one SQLite file.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use revenant_core::store::{
    CancelResult, CancelTarget, Capabilities, DeadFingerprintsParams, Enqueued, FailAction, Fenced,
    FingerprintGroup, JobCancelParams, JobClaimParams, JobCompleteParams, JobEnqueueParams,
    JobFailParams, JobFilter, JobGetParams, JobHeartbeatParams, JobListParams, JobPruneParams,
    JobPurgeParams, JobRedriveParams, JobReleaseParams, JobSnoozeParams, JobSweepParams,
    QueuePauseParams, QueueStats, QueueStatsParams, RedriveHistoryParams, RedriveRecord,
    WorkerHeartbeatParams, WorkerInfo, WorkerRemoveParams,
};
use revenant_core::{
    fingerprint, names, DeadReason, ErrorEntry, FailureClass, InputError, Job, JobId, JobState,
    LeaseToken, NewJob, Store, StoreError, Timestamp,
};
use sqlx::query::Query;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, Sqlite, Transaction};
use tokio::sync::{Mutex, MutexGuard, Notify};

use crate::error::{classify, migrate};

/// The SQL of every operation, from `queries/`.
mod sql {
    pub const QUEUE_ENSURE: &str = include_str!("../queries/queue_ensure.sql");
    pub const QUEUE_SET_PAUSED: &str = include_str!("../queries/queue_set_paused.sql");
    pub const QUEUE_PAUSED: &str = include_str!("../queries/queue_paused.sql");
    pub const QUEUE_STATS: &str = include_str!("../queries/queue_stats.sql");
    pub const JOB_UNIQUE_FIND: &str = include_str!("../queries/job_unique_find.sql");
    pub const JOB_ENQUEUE: &str = include_str!("../queries/job_enqueue.sql");
    pub const JOB_EXPIRED_EXHAUSTED: &str = include_str!("../queries/job_expired_exhausted.sql");
    pub const JOB_KILL_EXPIRED: &str = include_str!("../queries/job_kill_expired.sql");
    pub const JOB_CLAIM_CANDIDATES: &str = include_str!("../queries/job_claim_candidates.sql");
    pub const JOB_CLAIM: &str = include_str!("../queries/job_claim.sql");
    pub const JOB_HEARTBEAT: &str = include_str!("../queries/job_heartbeat.sql");
    pub const JOB_FENCED_GET: &str = include_str!("../queries/job_fenced_get.sql");
    pub const JOB_COMPLETE: &str = include_str!("../queries/job_complete.sql");
    pub const JOB_FAIL_RETRY: &str = include_str!("../queries/job_fail_retry.sql");
    pub const JOB_FAIL_DEAD: &str = include_str!("../queries/job_fail_dead.sql");
    pub const JOB_SNOOZE: &str = include_str!("../queries/job_snooze.sql");
    pub const JOB_CANCEL_GET: &str = include_str!("../queries/job_cancel_get.sql");
    pub const JOB_CANCEL: &str = include_str!("../queries/job_cancel.sql");
    pub const JOB_GET: &str = include_str!("../queries/job_get.sql");
    pub const JOB_LIST: &str = concat!(
        include_str!("../queries/job_list.sql"),
        include_str!("../queries/job_filter.sql"),
        include_str!("../queries/job_list_tail.sql"),
    );
    pub const JOB_REDRIVE_SELECT: &str = concat!(
        include_str!("../queries/job_redrive_select.sql"),
        include_str!("../queries/job_filter.sql"),
        include_str!("../queries/job_redrive_select_tail.sql"),
    );
    pub const JOB_REDRIVE: &str = include_str!("../queries/job_redrive.sql");
    pub const JOB_PURGE: &str = concat!(
        include_str!("../queries/job_purge.sql"),
        include_str!("../queries/job_filter.sql"),
        include_str!("../queries/job_purge_tail.sql"),
    );
    pub const JOB_PRUNE: &str = include_str!("../queries/job_prune.sql");
    pub const ATTEMPT_FAILURE_LOG: &str = include_str!("../queries/attempt_failure_log.sql");
    pub const ATTEMPT_FAILURE_PRUNE: &str = include_str!("../queries/attempt_failure_prune.sql");
    pub const REDRIVE_AUDIT: &str = include_str!("../queries/redrive_audit.sql");
    pub const REDRIVE_HISTORY: &str = include_str!("../queries/redrive_history.sql");
    pub const DEAD_FINGERPRINTS: &str = concat!(
        include_str!("../queries/dead_fingerprints.sql"),
        include_str!("../queries/job_filter.sql"),
        include_str!("../queries/dead_fingerprints_tail.sql"),
    );
    pub const DEAD_UNFINGERPRINTED: &str = include_str!("../queries/dead_unfingerprinted.sql");
    pub const JOB_SET_FINGERPRINT: &str = include_str!("../queries/job_set_fingerprint.sql");
    pub const WORKER_HEARTBEAT: &str = include_str!("../queries/worker_heartbeat.sql");
    pub const WORKER_LIST: &str = include_str!("../queries/worker_list.sql");
    pub const WORKER_REMOVE: &str = include_str!("../queries/worker_remove.sql");
    pub const WORKER_REMOVE_STALE: &str = include_str!("../queries/worker_remove_stale.sql");
}

/// How long a writer waits for another process's write lock before the call fails
/// with [`StoreError::Unavailable`].
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections in the pool of a file database: one writer at a time plus readers.
const POOL_SIZE: u32 = 4;

/// The most rows one `job_list` returns, whatever the caller asks.
const LIST_LIMIT_CAP: u32 = 10_000;

/// A [`Store`] on one SQLite database.
///
/// Open it with [`SqliteStore::connect`] (a URL), [`SqliteStore::open`] (a path) or
/// [`SqliteStore::open_temporary`] (tests). Migrations are applied on open. See the
/// crate docs for durability, concurrency and the clock.
pub struct SqliteStore {
    pool: SqlitePool,
    /// Serializes this process's writers before they take SQLite's write lock.
    write_lock: Mutex<()>,
    /// Wake-ups for `wait_for_jobs`, per queue.
    signals: StdMutex<HashMap<String, Arc<Notify>>>,
    /// Keeps a temporary database's directory until the store is dropped.
    _temp_dir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the database a URL names, creating the file if it is missing:
    /// `sqlite://path/to/revenant.db` (relative to the working directory),
    /// `sqlite:///absolute/path.db`, or `sqlite::memory:` (a private in-memory database,
    /// gone when the store is dropped; no durability).
    ///
    /// Fails with [`StoreError::UnsupportedUrl`] for another scheme or a malformed URL,
    /// [`StoreError::Unavailable`] when the file cannot be opened, and
    /// [`StoreError::Backend`] when the migrations fail.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        if !url.starts_with("sqlite:") {
            return Err(StoreError::UnsupportedUrl {
                url: url.to_string(),
                message: "the SQLite backend opens sqlite://PATH and sqlite::memory:".into(),
            });
        }
        let options =
            SqliteConnectOptions::from_str(url).map_err(|err| StoreError::UnsupportedUrl {
                url: url.to_string(),
                message: err.to_string(),
            })?;
        let memory = url.starts_with("sqlite::memory:") || url.contains("mode=memory");
        Self::open_with(options, memory, None).await
    }

    /// Opens (creating if missing) the database file at `path`.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::new().filename(path.as_ref());
        Self::open_with(options, false, None).await
    }

    /// Opens a fresh database in a new temporary directory, deleted when the store is
    /// dropped. A real file in WAL mode, so it behaves as production does; for tests.
    pub async fn open_temporary() -> Result<Self, StoreError> {
        let dir = tempfile::Builder::new()
            .prefix("revenant-sqlite-")
            .tempdir()
            .map_err(StoreError::unavailable)?;
        let options = SqliteConnectOptions::new().filename(dir.path().join("revenant.db"));
        Self::open_with(options, false, Some(dir)).await
    }

    async fn open_with(
        options: SqliteConnectOptions,
        memory: bool,
        temp_dir: Option<tempfile::TempDir>,
    ) -> Result<Self, StoreError> {
        let options = options
            .create_if_missing(true)
            .journal_mode(if memory {
                SqliteJournalMode::Memory
            } else {
                SqliteJournalMode::Wal
            })
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        // An in-memory database lives in its connection: keep exactly one, forever.
        let pool = if memory {
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            SqlitePoolOptions::new().max_connections(POOL_SIZE)
        }
        .connect_with(options)
        .await
        .map_err(classify)?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(migrate)?;
        let store = SqliteStore {
            pool,
            write_lock: Mutex::new(()),
            signals: StdMutex::new(HashMap::new()),
            _temp_dir: temp_dir,
        };
        store.backfill_fingerprints().await?;
        Ok(store)
    }

    /// Gives a fingerprint to dead jobs written before fingerprints existed (migration
    /// 0002). Nothing to do, and one indexed query, on every later open.
    async fn backfill_fingerprints(&self) -> Result<(), StoreError> {
        loop {
            let (_turn, mut tx) = self.write().await?;
            let rows = sqlx::query(sql::DEAD_UNFINGERPRINTED)
                .fetch_all(&mut *tx)
                .await
                .map_err(classify)?;
            for row in &rows {
                let reason: Option<String> = get(row, "dead_reason")?;
                let errors = parse_errors(&get::<String>(row, "errors")?)?;
                let print = if reason.as_deref() == Some(DeadReason::LeaseExpired.as_str()) {
                    fingerprint::lease_expired()
                } else {
                    fingerprint::fingerprint(errors.last().map_or("", |e| e.message.as_str()))
                };
                sqlx::query(sql::JOB_SET_FINGERPRINT)
                    .bind(get::<i64>(row, "id")?)
                    .bind(print)
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?;
            }
            tx.commit().await.map_err(classify)?;
            if rows.len() < 500 {
                return Ok(());
            }
        }
    }

    /// Starts a write transaction: this process's turn first, then SQLite's write lock.
    async fn write(
        &self,
    ) -> Result<(MutexGuard<'_, ()>, Transaction<'static, Sqlite>), StoreError> {
        let guard = self.write_lock.lock().await;
        // BEGIN runs in its own task. A caller dropped half-way through `begin_with`
        // (a select that picked another branch, a timeout, an HTTP client gone) would
        // otherwise leave the BEGIN executed on a pooled connection with no
        // Transaction to roll it back: that connection keeps SQLite's write lock and
        // every later writer waits for good. In a task, the Transaction is always
        // built, and dropping it rolls back.
        let pool = self.pool.clone();
        let tx = tokio::spawn(async move { pool.begin_with("BEGIN IMMEDIATE").await })
            .await
            .map_err(|err| StoreError::Backend {
                message: format!("the task starting a write transaction failed: {err}"),
                source: Some(Box::new(err)),
            })?
            .map_err(classify)?;
        Ok((guard, tx))
    }

    fn notify(&self, queue: &str) -> Arc<Notify> {
        let mut signals = self
            .signals
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        signals.entry(queue.to_string()).or_default().clone()
    }

    /// Wakes `wait_for_jobs` callers of these queues. A permit is kept for the next
    /// waiter when none is waiting, so a wake-up between a fetcher's empty claim and
    /// its wait is not lost.
    fn signal<'a>(&self, queues: impl IntoIterator<Item = &'a String>) {
        for queue in queues {
            let notify = self.notify(queue);
            notify.notify_one();
            notify.notify_waiters();
        }
    }

    /// Makes dead (reason `lease_expired`) every running job whose lease expired with no
    /// attempt left, in `queue` or everywhere. Returns their ids.
    async fn kill_expired(
        tx: &mut Transaction<'static, Sqlite>,
        now: i64,
        queue: Option<&str>,
    ) -> Result<Vec<JobId>, StoreError> {
        let rows = sqlx::query(sql::JOB_EXPIRED_EXHAUSTED)
            .bind(now)
            .bind(queue)
            .fetch_all(&mut **tx)
            .await
            .map_err(classify)?;
        let mut ids = Vec::with_capacity(rows.len());
        for row in rows {
            let id: i64 = get(&row, "id")?;
            let attempts: i32 = get(&row, "attempts")?;
            let worker: Option<String> = get(&row, "worker")?;
            let expired_at: Option<i64> = get(&row, "lease_expires_at")?;
            let errors: String = get(&row, "errors")?;
            let queue: String = get(&row, "queue")?;
            let entry = lease_expired_entry(attempts, worker, expired_at, now, true)?;
            sqlx::query(sql::JOB_KILL_EXPIRED)
                .bind(id)
                .bind(now)
                .bind(push_entry(&errors, entry)?)
                .bind(fingerprint::lease_expired())
                .execute(&mut **tx)
                .await
                .map_err(classify)?;
            log_failure(tx, &queue, FailureClass::LeaseExpired, now).await?;
            ids.push(id);
        }
        Ok(ids)
    }
}

/// Appends one failed attempt to the failure log (queue_stats' failure count).
async fn log_failure(
    tx: &mut Transaction<'static, Sqlite>,
    queue: &str,
    class: FailureClass,
    at: i64,
) -> Result<(), StoreError> {
    sqlx::query(sql::ATTEMPT_FAILURE_LOG)
        .bind(queue)
        .bind(class.as_str())
        .bind(at)
        .execute(&mut **tx)
        .await
        .map_err(classify)?;
    Ok(())
}

fn redrive_from_row(row: &SqliteRow) -> Result<RedriveRecord, StoreError> {
    let filter: String = get(row, "filter")?;
    Ok(RedriveRecord {
        id: get(row, "id")?,
        at: timestamp(get(row, "at")?, "at")?,
        updated_at: timestamp(get(row, "updated_at")?, "updated_at")?,
        filter: serde_json::from_str(&filter)
            .map_err(|err| StoreError::Corrupt(format!("redrives.filter: {err}")))?,
        spacing_ms: get(row, "spacing_ms")?,
        count: get(row, "count")?,
        first_job_id: get(row, "first_job_id")?,
        last_job_id: get(row, "last_job_id")?,
        actor: get(row, "actor")?,
        note: get(row, "note")?,
    })
}

fn group_from_row(row: &SqliteRow) -> Result<FingerprintGroup, StoreError> {
    let list = |column: &str| -> Result<Vec<String>, StoreError> {
        let json: String = get(row, column)?;
        let mut items: Vec<String> = serde_json::from_str(&json)
            .map_err(|err| StoreError::Corrupt(format!("{column} is not a list: {err}")))?;
        items.sort();
        Ok(items)
    };
    let example_message: String = get(row, "example_message")?;
    Ok(FingerprintGroup {
        fingerprint: get(row, "fingerprint")?,
        count: get(row, "count")?,
        first_seen: timestamp(get(row, "first_seen")?, "first_seen")?,
        last_seen: timestamp(get(row, "last_seen")?, "last_seen")?,
        kinds: list("kinds")?,
        queues: list("queues")?,
        example_id: get(row, "example_id")?,
        pattern: fingerprint::normalize(&example_message),
        example_message,
    })
}

/// The clock: pinned, or the process's, in whole milliseconds.
fn clock(now: Option<Timestamp>) -> i64 {
    now.unwrap_or_else(Utc::now).timestamp_millis()
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn timestamp(ms: i64, column: &str) -> Result<Timestamp, StoreError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::Corrupt(format!("{column} = {ms} is not a timestamp")))
}

fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("{ms} ms"))
}

fn get<'r, T>(row: &'r SqliteRow, column: &str) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite>,
{
    row.try_get(column).map_err(classify)
}

fn get_time(row: &SqliteRow, column: &str) -> Result<Option<Timestamp>, StoreError> {
    get::<Option<i64>>(row, column)?
        .map(|ms| timestamp(ms, column))
        .transpose()
}

fn parse_errors(json: &str) -> Result<Vec<ErrorEntry>, StoreError> {
    serde_json::from_str(json)
        .map_err(|err| StoreError::Corrupt(format!("errors is not an error history: {err}")))
}

/// Appends an entry to a stored history, keeping the newest
/// [`ErrorEntry::HISTORY_LIMIT`].
fn push_entry(json: &str, mut entry: ErrorEntry) -> Result<String, StoreError> {
    let mut errors = parse_errors(json)?;
    entry.message = ErrorEntry::truncate_message(&entry.message);
    errors.push(entry);
    if errors.len() > ErrorEntry::HISTORY_LIMIT {
        errors.drain(..errors.len() - ErrorEntry::HISTORY_LIMIT);
    }
    serde_json::to_string(&errors).map_err(StoreError::backend)
}

/// The history entry for an attempt whose lease ran out.
fn lease_expired_entry(
    attempt: i32,
    worker: Option<String>,
    expired_at: Option<i64>,
    now: i64,
    last: bool,
) -> Result<ErrorEntry, StoreError> {
    let holder = worker.as_deref().unwrap_or("unknown");
    let when = expired_at
        .map(rfc3339)
        .unwrap_or_else(|| "an unknown time".into());
    let message = if last {
        format!(
            "lease held by worker {holder} expired at {when} and no attempt is left; \
             the worker died or stalled"
        )
    } else {
        format!(
            "lease held by worker {holder} expired at {when}; the attempt was lost and the \
             job was claimed again"
        )
    };
    Ok(ErrorEntry {
        attempt,
        at: timestamp(now, "now")?,
        class: FailureClass::LeaseExpired,
        message,
        worker,
    })
}

fn job_from_row(row: &SqliteRow) -> Result<Job, StoreError> {
    let status: String = get(row, "status")?;
    let status = JobState::from_str(&status)
        .map_err(|_| StoreError::Corrupt(format!("status = {status:?} is not a job state")))?;
    let dead_reason = get::<Option<String>>(row, "dead_reason")?
        .map(|reason| {
            DeadReason::from_str(&reason).map_err(|_| {
                StoreError::Corrupt(format!("dead_reason = {reason:?} is not a dead reason"))
            })
        })
        .transpose()?;
    let payload: String = get(row, "payload")?;
    let payload = serde_json::from_str(&payload)
        .map_err(|err| StoreError::Corrupt(format!("payload is not JSON: {err}")))?;
    let errors = parse_errors(&get::<String>(row, "errors")?)?;
    Ok(Job {
        id: get(row, "id")?,
        queue: get(row, "queue")?,
        kind: get(row, "kind")?,
        payload,
        status,
        priority: get(row, "priority")?,
        attempts: get(row, "attempts")?,
        max_attempts: get(row, "max_attempts")?,
        run_at: timestamp(get(row, "run_at")?, "run_at")?,
        created_at: timestamp(get(row, "created_at")?, "created_at")?,
        attempted_at: get_time(row, "attempted_at")?,
        finished_at: get_time(row, "finished_at")?,
        lease_token: get::<Option<i64>>(row, "lease_token")?.map(LeaseToken),
        lease_expires_at: get_time(row, "lease_expires_at")?,
        worker: get(row, "worker")?,
        group_key: get(row, "group_key")?,
        unique_key: get(row, "unique_key")?,
        correlation_id: get(row, "correlation_id")?,
        dead_reason,
        last_error: errors.last().cloned(),
        errors,
        redrives: get(row, "redrives")?,
        fingerprint: get(row, "fingerprint")?,
    })
}

fn validate_filter(filter: &JobFilter) -> Result<(), InputError> {
    if let Some(queue) = &filter.queue {
        names::validate_name("queue", queue)?;
    }
    if let Some(kind) = &filter.kind {
        names::validate_name("kind", kind)?;
    }
    Ok(())
}

fn validate_lease(field: &'static str, lease: Duration) -> Result<(), InputError> {
    if lease.is_zero() {
        return Err(InputError::new(field, "must be longer than zero"));
    }
    if lease > NewJob::MAX_DELAY {
        return Err(InputError::new(field, "must be at most 365 days"));
    }
    Ok(())
}

/// Binds a [`JobFilter`] as parameters ?1 to ?11 (see `queries/job_filter.sql`).
fn bind_filter<'q>(
    query: Query<'q, Sqlite, SqliteArguments<'q>>,
    filter: &JobFilter,
) -> Result<Query<'q, Sqlite, SqliteArguments<'q>>, StoreError> {
    let ids = filter
        .ids
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(StoreError::backend)?;
    let statuses = filter
        .statuses
        .as_ref()
        .map(|states| serde_json::to_string(&states.iter().map(|s| s.as_str()).collect::<Vec<_>>()))
        .transpose()
        .map_err(StoreError::backend)?;
    Ok(query
        .bind(ids)
        .bind(filter.queue.clone())
        .bind(filter.kind.clone())
        .bind(statuses)
        .bind(filter.group_key.clone())
        .bind(filter.correlation_id.clone())
        .bind(filter.dead_reason.map(|reason| reason.as_str()))
        .bind(filter.error_contains.clone())
        .bind(filter.finished_after.map(|t| t.timestamp_millis()))
        .bind(filter.finished_before.map(|t| t.timestamp_millis()))
        .bind(filter.fingerprint.clone()))
}

/// `None` means no limit, which SQLite spells `LIMIT -1`.
fn sql_limit(limit: Option<u32>) -> i64 {
    limit.map_or(-1, i64::from)
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    /// One process owns the database (the CLI may write beside it, but wake-ups and
    /// the clock are the owning process's); no transactional enqueue.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        timestamp(clock(None), "now")
    }

    async fn wait_for_jobs(&self, queue: &str, timeout: Duration) {
        let notify = self.notify(queue);
        let _ = tokio::time::timeout(timeout, notify.notified()).await;
    }

    async fn job_enqueue(&self, params: JobEnqueueParams) -> Result<Vec<Enqueued>, StoreError> {
        if !(1..=NewJob::MAX_ATTEMPTS).contains(&params.default_max_attempts) {
            return Err(InputError::new(
                "max_attempts",
                format!(
                    "default {} is out of range; use 1..={}",
                    params.default_max_attempts,
                    NewJob::MAX_ATTEMPTS
                ),
            )
            .into());
        }
        for job in &params.jobs {
            job.validate()?;
        }
        if params.jobs.is_empty() {
            return Ok(Vec::new());
        }
        let now = clock(params.now);
        let (_turn, mut tx) = self.write().await?;
        let mut results = Vec::with_capacity(params.jobs.len());
        let mut queues = BTreeSet::new();
        for job in &params.jobs {
            if let Some(key) = &job.unique_key {
                let holder: Option<i64> = sqlx::query_scalar(sql::JOB_UNIQUE_FIND)
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(classify)?;
                if let Some(id) = holder {
                    results.push(Enqueued {
                        id,
                        duplicate: true,
                    });
                    continue;
                }
            }
            if queues.insert(job.queue.clone()) {
                sqlx::query(sql::QUEUE_ENSURE)
                    .bind(&job.queue)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?;
            }
            let run_at = match (job.run_at, job.delay) {
                (Some(at), _) => at.timestamp_millis(),
                (None, Some(delay)) => now.saturating_add(millis(delay)),
                (None, None) => now,
            };
            let payload = serde_json::to_string(&job.payload).map_err(StoreError::backend)?;
            let id: i64 = sqlx::query_scalar(sql::JOB_ENQUEUE)
                .bind(&job.queue)
                .bind(&job.kind)
                .bind(payload)
                .bind(job.priority)
                .bind(job.max_attempts.unwrap_or(params.default_max_attempts))
                .bind(run_at)
                .bind(now)
                .bind(&job.group_key)
                .bind(&job.unique_key)
                .bind(&job.correlation_id)
                .fetch_one(&mut *tx)
                .await
                .map_err(classify)?;
            results.push(Enqueued {
                id,
                duplicate: false,
            });
        }
        tx.commit().await.map_err(classify)?;
        self.signal(&queues);
        Ok(results)
    }

    async fn job_claim(&self, params: JobClaimParams) -> Result<Vec<Job>, StoreError> {
        names::validate_name("queue", &params.queue)?;
        names::validate_key("worker", &params.worker)?;
        validate_lease("lease", params.lease)?;
        if params.limit == 0 {
            return Ok(Vec::new());
        }
        let now = clock(params.now);
        let (_turn, mut tx) = self.write().await?;
        Self::kill_expired(&mut tx, now, Some(&params.queue)).await?;
        let paused: Option<i64> = sqlx::query_scalar(sql::QUEUE_PAUSED)
            .bind(&params.queue)
            .fetch_optional(&mut *tx)
            .await
            .map_err(classify)?;
        if paused == Some(1) {
            tx.commit().await.map_err(classify)?;
            return Ok(Vec::new());
        }
        let candidates = sqlx::query(sql::JOB_CLAIM_CANDIDATES)
            .bind(&params.queue)
            .bind(now)
            .bind(i64::from(params.limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(classify)?;
        let lease_expires_at = now.saturating_add(millis(params.lease));
        let mut jobs = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            let id: i64 = get(&candidate, "id")?;
            let status: String = get(&candidate, "status")?;
            let mut errors: String = get(&candidate, "errors")?;
            if status == JobState::Running.as_str() {
                // A reclaim: the previous attempt's lease ran out. Say so in the history.
                let entry = lease_expired_entry(
                    get(&candidate, "attempts")?,
                    get(&candidate, "worker")?,
                    get(&candidate, "lease_expires_at")?,
                    now,
                    false,
                )?;
                errors = push_entry(&errors, entry)?;
                log_failure(&mut tx, &params.queue, FailureClass::LeaseExpired, now).await?;
            }
            let row = sqlx::query(sql::JOB_CLAIM)
                .bind(id)
                .bind(LeaseToken::random().0)
                .bind(lease_expires_at)
                .bind(now)
                .bind(&params.worker)
                .bind(errors)
                .fetch_one(&mut *tx)
                .await
                .map_err(classify)?;
            jobs.push(job_from_row(&row)?);
        }
        tx.commit().await.map_err(classify)?;
        Ok(jobs)
    }

    async fn job_heartbeat(&self, params: JobHeartbeatParams) -> Result<Fenced, StoreError> {
        validate_lease("lease_for", params.lease_for)?;
        let now = clock(params.now);
        let (_turn, mut tx) = self.write().await?;
        let done = sqlx::query(sql::JOB_HEARTBEAT)
            .bind(params.lease.id)
            .bind(params.lease.lease_token.0)
            .bind(now.saturating_add(millis(params.lease_for)))
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(if done.rows_affected() == 1 {
            Fenced::Applied
        } else {
            Fenced::LeaseLost
        })
    }

    async fn job_complete(&self, params: JobCompleteParams) -> Result<Vec<Fenced>, StoreError> {
        if params.leases.is_empty() {
            return Ok(Vec::new());
        }
        let now = clock(params.now);
        let (_turn, mut tx) = self.write().await?;
        let mut results = Vec::with_capacity(params.leases.len());
        let mut unblocked = BTreeSet::new();
        for lease in &params.leases {
            let row = sqlx::query(sql::JOB_COMPLETE)
                .bind(lease.id)
                .bind(lease.lease_token.0)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await
                .map_err(classify)?;
            results.push(match row {
                Some(row) => {
                    if get::<Option<String>>(&row, "group_key")?.is_some() {
                        unblocked.insert(get::<String>(&row, "queue")?);
                    }
                    Fenced::Applied
                }
                None => Fenced::LeaseLost,
            });
        }
        tx.commit().await.map_err(classify)?;
        self.signal(&unblocked);
        Ok(results)
    }

    async fn job_fail(&self, params: JobFailParams) -> Result<Vec<Fenced>, StoreError> {
        if params.failures.is_empty() {
            return Ok(Vec::new());
        }
        let now = clock(params.now);
        let at = timestamp(now, "now")?;
        let (_turn, mut tx) = self.write().await?;
        let mut results = Vec::with_capacity(params.failures.len());
        let mut wake = BTreeSet::new();
        for failure in &params.failures {
            let lease = failure.lease;
            let Some(row) = sqlx::query(sql::JOB_FENCED_GET)
                .bind(lease.id)
                .bind(lease.lease_token.0)
                .fetch_optional(&mut *tx)
                .await
                .map_err(classify)?
            else {
                results.push(Fenced::LeaseLost);
                continue;
            };
            let queue: String = get(&row, "queue")?;
            let grouped = get::<Option<String>>(&row, "group_key")?.is_some();
            let entry = ErrorEntry {
                attempt: get(&row, "attempts")?,
                at,
                class: failure.failure.class,
                message: failure.failure.message.clone(),
                worker: failure
                    .worker
                    .clone()
                    .or(get::<Option<String>>(&row, "worker")?),
            };
            let print = fingerprint::fingerprint(&ErrorEntry::truncate_message(&entry.message));
            let errors = push_entry(&get::<String>(&row, "errors")?, entry)?;
            log_failure(&mut tx, &queue, failure.failure.class, now).await?;
            match &failure.action {
                FailAction::Retry { delay } => {
                    // A delay past the longest accepted one is a unit mistake or an
                    // unbounded cap; hold it at 365 days rather than refuse the failure.
                    let delay = (*delay).min(NewJob::MAX_DELAY);
                    sqlx::query(sql::JOB_FAIL_RETRY)
                        .bind(lease.id)
                        .bind(lease.lease_token.0)
                        .bind(now.saturating_add(millis(delay)))
                        .bind(errors)
                        .execute(&mut *tx)
                        .await
                        .map_err(classify)?;
                    wake.insert(queue);
                }
                FailAction::Dead { reason } => {
                    sqlx::query(sql::JOB_FAIL_DEAD)
                        .bind(lease.id)
                        .bind(lease.lease_token.0)
                        .bind(reason.as_str())
                        .bind(now)
                        .bind(errors)
                        .bind(&print)
                        .execute(&mut *tx)
                        .await
                        .map_err(classify)?;
                    if grouped {
                        wake.insert(queue);
                    }
                }
            }
            results.push(Fenced::Applied);
        }
        tx.commit().await.map_err(classify)?;
        self.signal(&wake);
        Ok(results)
    }

    async fn job_snooze(&self, params: JobSnoozeParams) -> Result<Fenced, StoreError> {
        let now = clock(params.now);
        let delay = params.delay.min(NewJob::MAX_DELAY);
        let (_turn, mut tx) = self.write().await?;
        let queue: Option<String> = sqlx::query_scalar(sql::JOB_SNOOZE)
            .bind(params.lease.id)
            .bind(params.lease.lease_token.0)
            .bind(now.saturating_add(millis(delay)))
            .fetch_optional(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        self.signal(&queue);
        Ok(if queue.is_some() {
            Fenced::Applied
        } else {
            Fenced::LeaseLost
        })
    }

    async fn job_release(&self, params: JobReleaseParams) -> Result<Vec<Fenced>, StoreError> {
        if params.leases.is_empty() {
            return Ok(Vec::new());
        }
        let now = clock(params.now);
        let (_turn, mut tx) = self.write().await?;
        let mut results = Vec::with_capacity(params.leases.len());
        let mut wake = BTreeSet::new();
        for lease in &params.leases {
            let queue: Option<String> = sqlx::query_scalar(sql::JOB_SNOOZE)
                .bind(lease.id)
                .bind(lease.lease_token.0)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await
                .map_err(classify)?;
            results.push(match queue {
                Some(queue) => {
                    wake.insert(queue);
                    Fenced::Applied
                }
                None => Fenced::LeaseLost,
            });
        }
        tx.commit().await.map_err(classify)?;
        self.signal(&wake);
        Ok(results)
    }

    async fn job_cancel(&self, params: JobCancelParams) -> Result<CancelResult, StoreError> {
        if let Some(message) = &params.message {
            if message
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
            {
                return Err(
                    InputError::new("message", "must not contain control characters").into(),
                );
            }
        }
        let now = clock(params.now);
        let (id, token) = match params.target {
            CancelTarget::Id(id) => (id, None),
            CancelTarget::Lease(lease) => (lease.id, Some(lease.lease_token.0)),
        };
        let (_turn, mut tx) = self.write().await?;
        let Some(row) = sqlx::query(sql::JOB_CANCEL_GET)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(classify)?
        else {
            return Ok(if token.is_some() {
                CancelResult::LeaseLost
            } else {
                CancelResult::NotFound
            });
        };
        let status: String = get(&row, "status")?;
        let status = JobState::from_str(&status)
            .map_err(|_| StoreError::Corrupt(format!("status = {status:?} is not a job state")))?;
        match token {
            Some(token) => {
                let held: Option<i64> = get(&row, "lease_token")?;
                if status != JobState::Running || held != Some(token) {
                    return Ok(CancelResult::LeaseLost);
                }
            }
            None => {
                if status.is_terminal() {
                    return Ok(CancelResult::NotCancellable(status));
                }
            }
        }
        let mut errors: String = get(&row, "errors")?;
        if let Some(message) = &params.message {
            // The history has no class for a cancellation; it is recorded as permanent
            // (the job will not run again) with the reason in the message.
            let entry = ErrorEntry {
                attempt: get(&row, "attempts")?,
                at: timestamp(now, "now")?,
                class: FailureClass::Permanent,
                message: format!("cancelled: {message}"),
                worker: if token.is_some() {
                    get(&row, "worker")?
                } else {
                    None
                },
            };
            errors = push_entry(&errors, entry)?;
        }
        let done = sqlx::query(sql::JOB_CANCEL)
            .bind(id)
            .bind(now)
            .bind(errors)
            .bind(token)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        if get::<Option<String>>(&row, "group_key")?.is_some() {
            self.signal([&get::<String>(&row, "queue")?]);
        }
        Ok(if done.rows_affected() == 1 {
            CancelResult::Cancelled
        } else {
            // Unreachable under the write lock; kept so a surprise is a lost race, not a lie.
            CancelResult::LeaseLost
        })
    }

    async fn job_get(&self, params: JobGetParams) -> Result<Option<Job>, StoreError> {
        sqlx::query(sql::JOB_GET)
            .bind(params.id)
            .fetch_optional(&self.pool)
            .await
            .map_err(classify)?
            .map(|row| job_from_row(&row))
            .transpose()
    }

    async fn job_list(&self, params: JobListParams) -> Result<Vec<Job>, StoreError> {
        validate_filter(&params.filter)?;
        if params.limit == 0 {
            return Ok(Vec::new());
        }
        let rows = bind_filter(sqlx::query(sql::JOB_LIST), &params.filter)?
            .bind(params.before_id)
            .bind(i64::from(params.limit.min(LIST_LIMIT_CAP)))
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        rows.iter().map(job_from_row).collect()
    }

    async fn job_sweep(&self, params: JobSweepParams) -> Result<Vec<JobId>, StoreError> {
        let now = clock(params.now);
        let (_turn, mut tx) = self.write().await?;
        let ids = Self::kill_expired(&mut tx, now, None).await?;
        tx.commit().await.map_err(classify)?;
        Ok(ids)
    }

    async fn job_redrive(&self, params: JobRedriveParams) -> Result<Vec<JobId>, StoreError> {
        validate_filter(&params.filter)?;
        params.validate()?;
        let now = clock(params.now);
        let start = params
            .start_at
            .map_or(now, |at| at.timestamp_millis().max(now));
        let spacing = millis(params.spacing);
        let (_turn, mut tx) = self.write().await?;
        let rows = bind_filter(sqlx::query(sql::JOB_REDRIVE_SELECT), &params.filter)?
            .bind(sql_limit(params.limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(classify)?;
        let mut ids = Vec::with_capacity(rows.len());
        let mut queues = BTreeSet::new();
        for (i, row) in rows.iter().enumerate() {
            let id: i64 = get(row, "id")?;
            let offset = spacing.saturating_mul(i64::try_from(i).unwrap_or(i64::MAX));
            sqlx::query(sql::JOB_REDRIVE)
                .bind(id)
                .bind(start.saturating_add(offset))
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            ids.push(id);
            queues.insert(get::<String>(row, "queue")?);
        }
        if let (Some(first), Some(last)) = (ids.first(), ids.last()) {
            let filter = serde_json::to_string(&params.filter).map_err(StoreError::backend)?;
            sqlx::query(sql::REDRIVE_AUDIT)
                .bind(&params.audit_key)
                .bind(now)
                .bind(filter)
                .bind(spacing)
                .bind(i64::try_from(ids.len()).unwrap_or(i64::MAX))
                .bind(first)
                .bind(last)
                .bind(&params.actor)
                .bind(&params.note)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
        }
        tx.commit().await.map_err(classify)?;
        self.signal(&queues);
        Ok(ids)
    }

    async fn job_purge(&self, params: JobPurgeParams) -> Result<u64, StoreError> {
        validate_filter(&params.filter)?;
        let (_turn, mut tx) = self.write().await?;
        let done = bind_filter(sqlx::query(sql::JOB_PURGE), &params.filter)?
            .bind(sql_limit(params.limit))
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(done.rows_affected())
    }

    async fn dead_fingerprints(
        &self,
        params: DeadFingerprintsParams,
    ) -> Result<Vec<FingerprintGroup>, StoreError> {
        validate_filter(&params.filter)?;
        if params.limit == 0 {
            return Ok(Vec::new());
        }
        let rows = bind_filter(sqlx::query(sql::DEAD_FINGERPRINTS), &params.filter)?
            .bind(i64::from(params.limit.min(LIST_LIMIT_CAP)))
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        rows.iter().map(group_from_row).collect()
    }

    async fn redrive_history(
        &self,
        params: RedriveHistoryParams,
    ) -> Result<Vec<RedriveRecord>, StoreError> {
        let rows = sqlx::query(sql::REDRIVE_HISTORY)
            .bind(i64::from(params.limit.min(LIST_LIMIT_CAP)))
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        rows.iter().map(redrive_from_row).collect()
    }

    async fn job_prune(&self, params: JobPruneParams) -> Result<u64, StoreError> {
        let now = clock(params.now);
        let (_turn, mut tx) = self.write().await?;
        let cutoff = now.saturating_sub(millis(params.retention));
        let done = sqlx::query(sql::JOB_PRUNE)
            .bind(cutoff)
            .bind(i64::from(params.limit))
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        sqlx::query(sql::ATTEMPT_FAILURE_PRUNE)
            .bind(cutoff)
            .bind(i64::from(params.limit))
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(done.rows_affected())
    }

    async fn queue_pause(&self, params: QueuePauseParams) -> Result<(), StoreError> {
        names::validate_name("queue", &params.queue)?;
        let now = clock(params.now);
        let (_turn, mut tx) = self.write().await?;
        sqlx::query(sql::QUEUE_SET_PAUSED)
            .bind(&params.queue)
            .bind(1_i64)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(())
    }

    async fn queue_resume(&self, params: QueuePauseParams) -> Result<(), StoreError> {
        names::validate_name("queue", &params.queue)?;
        let now = clock(params.now);
        let (_turn, mut tx) = self.write().await?;
        sqlx::query(sql::QUEUE_SET_PAUSED)
            .bind(&params.queue)
            .bind(0_i64)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        self.signal([&params.queue]);
        Ok(())
    }

    async fn queue_stats(&self, params: QueueStatsParams) -> Result<Vec<QueueStats>, StoreError> {
        if let Some(queue) = &params.queue {
            names::validate_name("queue", queue)?;
        }
        let now = clock(params.now);
        let rows = sqlx::query(sql::QUEUE_STATS)
            .bind(now)
            .bind(&params.queue)
            .bind(now.saturating_sub(millis(params.worker_alive_within)))
            .bind(now.saturating_sub(millis(params.interval)))
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        rows.iter()
            .map(|row| {
                let oldest: Option<i64> = get(row, "oldest_due_run_at")?;
                Ok(QueueStats {
                    queue: get(row, "queue")?,
                    paused: get::<i64>(row, "paused")? != 0,
                    ready: get(row, "ready")?,
                    scheduled: get(row, "scheduled")?,
                    retrying: get(row, "retrying")?,
                    running: get(row, "running")?,
                    completed: get(row, "completed")?,
                    dead: get(row, "dead")?,
                    dead_last_hour: get(row, "dead_last_hour")?,
                    cancelled: get(row, "cancelled")?,
                    // Milliseconds to seconds; an f64 holds any real age exactly enough.
                    oldest_due_age_secs: oldest
                        .map_or(0.0, |run_at| (now - run_at).max(0) as f64 / 1000.0),
                    workers_alive: get(row, "workers_alive")?,
                    last_completed_at: get_time(row, "last_completed_at")?,
                    interval_secs: params.interval.as_secs_f64(),
                    completed_last_interval: get(row, "completed_last_interval")?,
                    failed_last_interval: get(row, "failed_last_interval")?,
                })
            })
            .collect()
    }

    async fn worker_heartbeat(&self, params: WorkerHeartbeatParams) -> Result<(), StoreError> {
        names::validate_key("worker", &params.worker)?;
        if params.host.chars().any(char::is_control) {
            return Err(InputError::new("host", "must not contain control characters").into());
        }
        for queue in &params.queues {
            names::validate_name("queue", queue)?;
        }
        let now = clock(params.now);
        let queues = serde_json::to_string(&params.queues).map_err(StoreError::backend)?;
        let (_turn, mut tx) = self.write().await?;
        sqlx::query(sql::WORKER_HEARTBEAT)
            .bind(&params.worker)
            .bind(&params.host)
            .bind(params.pid)
            .bind(queues)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(())
    }

    async fn worker_list(&self) -> Result<Vec<WorkerInfo>, StoreError> {
        let rows = sqlx::query(sql::WORKER_LIST)
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        rows.iter()
            .map(|row| {
                let queues: String = get(row, "queues")?;
                Ok(WorkerInfo {
                    worker: get(row, "worker")?,
                    host: get(row, "host")?,
                    pid: get(row, "pid")?,
                    queues: serde_json::from_str(&queues).map_err(|err| {
                        StoreError::Corrupt(format!("workers.queues is not a list: {err}"))
                    })?,
                    started_at: timestamp(get(row, "started_at")?, "started_at")?,
                    last_seen_at: timestamp(get(row, "last_seen_at")?, "last_seen_at")?,
                })
            })
            .collect()
    }

    async fn worker_remove(&self, params: WorkerRemoveParams) -> Result<u64, StoreError> {
        let (_turn, mut tx) = self.write().await?;
        let done = match params {
            WorkerRemoveParams::Worker(worker) => sqlx::query(sql::WORKER_REMOVE)
                .bind(worker)
                .execute(&mut *tx)
                .await
                .map_err(classify)?,
            WorkerRemoveParams::StaleFor { stale_after, now } => {
                sqlx::query(sql::WORKER_REMOVE_STALE)
                    .bind(clock(now).saturating_sub(millis(stale_after)))
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?
            }
        };
        tx.commit().await.map_err(classify)?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_database_runs_in_wal_mode_with_full_sync_and_a_busy_timeout() {
        let store = SqliteStore::open_temporary().await.unwrap();
        let mut conn = store.pool.acquire().await.unwrap();
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(mode, "wal");
        assert_eq!(sync, 2, "synchronous = FULL");
        assert_eq!(busy, 5_000);
        assert_eq!(fk, 1);
    }

    #[test]
    fn the_history_keeps_the_newest_entries_and_cuts_long_messages() {
        let mut json = "[]".to_string();
        for attempt in 1..=30 {
            let entry = ErrorEntry {
                attempt,
                at: timestamp(0, "at").unwrap(),
                class: FailureClass::Transient,
                message: "x".repeat(5_000),
                worker: None,
            };
            json = push_entry(&json, entry).unwrap();
        }
        let errors = parse_errors(&json).unwrap();
        assert_eq!(errors.len(), ErrorEntry::HISTORY_LIMIT);
        assert_eq!(errors[0].attempt, 6);
        assert!(errors[0].message.len() < 5_000);
    }
}
