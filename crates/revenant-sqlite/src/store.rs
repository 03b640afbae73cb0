//! [`SqliteStore`]: the [`Store`] trait on one SQLite file.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use revenant_core::dependency::{DependencyRecord, DependencyState, WaitReason, WaitingCounts};
use revenant_core::migration::MigrateMode;
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
use revenant_core::{
    fingerprint, ClaimedJob, DeadReason, ErrorEntry, FailureClass, Job, JobId, JobState,
    LeaseToken, Store, StoreError, Timestamp,
};
use sqlx::query::Query;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};
use tokio::sync::{Mutex, MutexGuard};

use crate::error::classify;
use crate::migrate;
use crate::row::{
    claimed_from_json, decodable_job, get, get_time, group_from_row, job_from_row, jobs_from_json,
    listed, parse_errors, parse_record, policy_from_row, redrive_from_row, timestamp,
};
use crate::sql;
use crate::wake::Wakeups;
use group_commit::Settle;

mod group_commit;
mod schedule;

/// How long a writer waits for another process's write lock before the call fails
/// with [`StoreError::Unavailable`].
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Reader connections of a file database (reads: job_get, job_list, stats). Writes go
/// through one more connection of their own.
const POOL_SIZE: u32 = 4;

/// The writer connection's page cache, in KiB (SQLite's default is 2 MiB). Allocated
/// as pages are read, so a small database never uses it.
///
/// Why one writer connection with a large cache: in WAL mode a connection drops its
/// whole page cache whenever another connection has written since its last
/// transaction. With writes spread over a pool every write started cold and read its
/// index and table pages back from the operating system; that was the largest cost
/// of a busy worker after the statements themselves. Writes are serialized anyway
/// (`write_lock`), so one connection loses nothing and keeps its cache warm.
const WRITER_CACHE_KIB: i64 = 64 * 1024;

/// The most rows one `job_list` returns, whatever the caller asks.
const LIST_LIMIT_CAP: u32 = 10_000;

/// [`ErrorEntry::HISTORY_LIMIT`] as the statements that append to a history bind it.
const HISTORY_LIMIT: i64 = ErrorEntry::HISTORY_LIMIT as i64;

/// A [`Store`] on one SQLite database.
///
/// Open it with [`SqliteStore::connect`] (a URL), [`SqliteStore::open`] (a path) or
/// [`SqliteStore::open_temporary`] (tests). Migrations are applied on open. See the
/// crate docs for durability, concurrency and the clock.
pub struct SqliteStore {
    /// Readers.
    pool: SqlitePool,
    /// The one write connection (the same pool as `pool` for an in-memory database).
    writer: SqlitePool,
    /// Serializes this process's writers before they take SQLite's write lock.
    write_lock: Arc<Mutex<()>>,
    /// Enqueues and batches of results waiting for the writer, written together
    /// (group commit).
    waiting: group_commit::Queue,
    /// Wake-ups for `wait_for_jobs`, per queue.
    wakeups: Wakeups,
    /// Keeps a temporary database's directory until the store is dropped.
    _temp_dir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

/// The connect options a URL names (and whether it is in memory), configured as every
/// connection of the store is: WAL, `synchronous = FULL`, the busy timeout, foreign keys.
pub(crate) fn connect_options(url: &str) -> Result<(SqliteConnectOptions, bool), StoreError> {
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
    Ok((configured(options, memory), memory))
}

fn configured(options: SqliteConnectOptions, memory: bool) -> SqliteConnectOptions {
    options
        .create_if_missing(true)
        .journal_mode(if memory {
            SqliteJournalMode::Memory
        } else {
            SqliteJournalMode::Wal
        })
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT)
        .foreign_keys(true)
}

/// What a claim reads back: whole jobs ([`Store::job_claim`]) or what a worker runs them
/// with ([`Store::job_claim_run`]). The claim itself is the same; a reclaim (rare, one
/// statement per job) reads back the whole row and keeps what `Self` holds of it.
trait ClaimRead: Sized {
    /// The statement reading the claimed ready jobs back as one JSON array (`?1`: the
    /// claim's `[id, lease token]` pairs).
    const READ_BACK: &'static str;
    /// The jobs of that array, in its order.
    fn from_json(json: &str) -> Result<Vec<Self>, StoreError>;
    /// A whole job a reclaim read back.
    fn from_job(job: Job) -> Result<Self, StoreError>;
    /// The job's id.
    fn id(&self) -> JobId;
}

impl ClaimRead for Job {
    const READ_BACK: &'static str = sql::JOB_CLAIMED;
    fn from_json(json: &str) -> Result<Vec<Self>, StoreError> {
        jobs_from_json(json)
    }
    fn from_job(job: Job) -> Result<Self, StoreError> {
        Ok(job)
    }
    fn id(&self) -> JobId {
        self.id
    }
}

impl ClaimRead for ClaimedJob {
    const READ_BACK: &'static str = sql::JOB_CLAIMED_RUN;
    fn from_json(json: &str) -> Result<Vec<Self>, StoreError> {
        claimed_from_json(json)
    }
    fn from_job(job: Job) -> Result<Self, StoreError> {
        ClaimedJob::from_claimed(job)
    }
    fn id(&self) -> JobId {
        self.id
    }
}

impl SqliteStore {
    /// One claim (see [`JobClaimParams`]), read back as whole jobs or as what a worker
    /// runs them with ([`ClaimRead`]).
    async fn claim<T: ClaimRead>(&self, params: JobClaimParams) -> Result<Vec<T>, StoreError> {
        params.validate()?;
        if params.limit == 0 {
            return Ok(Vec::new());
        }
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
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
        let candidates = Self::claim_candidates(&mut tx, &params, now).await?;
        let lease_expires_at = now.saturating_add(millis(params.lease));
        // Ready candidates are claimed in one statement (the common case, and the one
        // that sets the pace under load: one round trip for the whole batch, not one per
        // job), and read back in one more as one value. A reclaim of an expired lease
        // also writes a history entry, so it stays one statement per job; it is rare.
        let mut order = Vec::with_capacity(candidates.len());
        let mut ready = Vec::new();
        let mut jobs = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            order.push(candidate.id);
            if !candidate.reclaim() {
                ready.push((candidate.id, LeaseToken::random().0));
                continue;
            }
            // A reclaim: the previous attempt's lease ran out. Say so in the history.
            let entry = lease_expired_entry(
                candidate.attempts,
                candidate.worker,
                candidate.lease_expires_at,
                now,
                false,
            )?;
            let errors = push_entry(candidate.errors.as_deref().unwrap_or("[]"), entry)?;
            log_failure(&mut tx, &params.queue, FailureClass::LeaseExpired, now).await?;
            let row = sqlx::query(sql::JOB_CLAIM)
                .bind(candidate.id)
                .bind(LeaseToken::random().0)
                .bind(lease_expires_at)
                .bind(now)
                .bind(&params.worker)
                .bind(errors)
                .fetch_one(&mut *tx)
                .await
                .map_err(classify)?;
            jobs.push(T::from_job(job_from_row(&row)?)?);
        }
        if !ready.is_empty() {
            let expected = ready.len();
            let ready = json_array(&ready)?;
            let claimed = sqlx::query(sql::JOB_CLAIM_READY)
                .bind(&ready)
                .bind(lease_expires_at)
                .bind(now)
                .bind(&params.worker)
                .execute(&mut *tx)
                .await
                .map_err(classify)?
                .rows_affected();
            let json: String = sqlx::query_scalar(T::READ_BACK)
                .bind(&ready)
                .fetch_one(&mut *tx)
                .await
                .map_err(classify)?;
            let read = T::from_json(&json)?;
            if claimed != expected as u64 || read.len() != expected {
                return Err(StoreError::Corrupt(format!(
                    "claimed {claimed} and read back {} of {expected} ready candidates in one transaction",
                    read.len()
                )));
            }
            jobs.extend(read);
        }
        // Claim order (priority, run_at, id), as the candidates came.
        let rank: HashMap<JobId, usize> =
            order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        jobs.sort_by_key(|job| rank.get(&job.id()).copied());
        tx.commit().await.map_err(classify)?;
        Ok(jobs)
    }

    /// Opens the database a URL names, creating the file if it is missing:
    /// `sqlite://path/to/revenant.db` (relative to the working directory),
    /// `sqlite:///absolute/path.db`, or `sqlite::memory:` (a private in-memory database,
    /// gone when the store is dropped; no durability).
    ///
    /// Fails with [`StoreError::UnsupportedUrl`] for another scheme or a malformed URL,
    /// [`StoreError::Unavailable`] when the file cannot be opened, and
    /// [`StoreError::Backend`] when the migrations fail.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, MigrateMode::Auto).await
    }

    /// [`SqliteStore::connect`], applying pending migrations or not: with
    /// [`MigrateMode::Never`] the store applies none and refuses to open a database
    /// that lacks one (apply them with [`crate::migrate::apply`], `revenant migrate`).
    pub async fn connect_with(url: &str, migrate: MigrateMode) -> Result<Self, StoreError> {
        let (options, memory) = connect_options(url)?;
        Self::open_with(options, memory, None, migrate).await
    }

    /// Opens (creating if missing) the database file at `path`.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::new().filename(path.as_ref());
        Self::open_with(options, false, None, MigrateMode::Auto).await
    }

    /// Opens a fresh database in a new temporary directory, deleted when the store is
    /// dropped. A real file in WAL mode, so it behaves as production does; for tests.
    pub async fn open_temporary() -> Result<Self, StoreError> {
        let dir = tempfile::Builder::new()
            .prefix("revenant-sqlite-")
            .tempdir()
            .map_err(StoreError::unavailable)?;
        let options = SqliteConnectOptions::new().filename(dir.path().join("revenant.db"));
        Self::open_with(options, false, Some(dir), MigrateMode::Auto).await
    }

    async fn open_with(
        options: SqliteConnectOptions,
        memory: bool,
        temp_dir: Option<tempfile::TempDir>,
        migrate: MigrateMode,
    ) -> Result<Self, StoreError> {
        let options = configured(options, memory);
        // An in-memory database lives in its connection: keep exactly one, forever, for
        // reads and writes alike.
        let one_forever = || {
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        };
        let (pool, writer) = if memory {
            let pool = one_forever()
                .connect_with(options)
                .await
                .map_err(classify)?;
            (pool.clone(), pool)
        } else {
            let writer = one_forever()
                .connect_with(
                    options
                        .clone()
                        .pragma("cache_size", format!("-{WRITER_CACHE_KIB}"))
                        // A statement that changes several rows inside a transaction
                        // of several statements keeps the pages it changes in a
                        // statement journal, to undo itself alone if it fails; past
                        // 64 KiB SQLite writes that journal to a temporary file. Every
                        // batch write here is such a statement (group commit): a
                        // failing drain of 50,000 jobs wrote 14,700 pages to temporary
                        // files. In memory they cost a copy. Temporary tables and
                        // sorts go there too; the writer's sorts are bounded by a
                        // LIMIT (purge, redrive and prune work in batches).
                        .pragma("temp_store", "memory"),
                )
                .await
                .map_err(classify)?;
            // Readers connect after the writer created the file, set WAL mode and
            // migrated: a reader connected before a migration keeps the old schema's
            // column list for `SELECT *` and fails on the new columns (found by
            // tests/upgrade.rs).
            migrate::run(&writer, migrate).await?;
            let pool = SqlitePoolOptions::new()
                .max_connections(POOL_SIZE)
                .connect_with(options)
                .await
                .map_err(classify)?;
            (pool, writer)
        };
        if memory {
            migrate::run(&writer, migrate).await?;
        }
        let store = SqliteStore {
            pool,
            writer,
            write_lock: Arc::new(Mutex::new(())),
            waiting: group_commit::Queue::default(),
            wakeups: Wakeups::default(),
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
    ///
    /// The `BEGIN IMMEDIATE` runs in its own task. A caller dropped half-way through
    /// `begin_with` (a select that picked another branch, a timeout, an HTTP client
    /// gone) would otherwise leave the BEGIN executed on the connection with no
    /// Transaction to roll it back: the connection keeps SQLite's write lock and every
    /// later writer waits for good. In a task, the Transaction is always built, and
    /// dropping it rolls back.
    async fn write(
        &self,
    ) -> Result<(MutexGuard<'_, ()>, Transaction<'static, Sqlite>), StoreError> {
        let guard = self.write_lock.lock().await;
        let writer = self.writer.clone();
        let tx = tokio::spawn(async move { begin_write(&writer).await })
            .await
            .map_err(|err| StoreError::Backend {
                message: format!("the task starting a write transaction failed: {err}"),
                source: Some(Box::new(err)),
            })??;
        Ok((guard, tx))
    }

    /// Completes `params`' jobs whose leases hold, in `tx`, at `now`: one read of the
    /// running rows for the batch, the fence checked in Rust, then one update for the
    /// jobs that hold, and one for those that carry kept failures (with the failure
    /// log). The write transaction keeps the rows from changing in between. Returns one
    /// result per lease and the queues whose grouped jobs it unblocked.
    async fn complete_in(
        tx: &mut Transaction<'static, Sqlite>,
        params: &JobCompleteParams,
        now: i64,
    ) -> Result<(Vec<Fenced>, BTreeSet<String>), StoreError> {
        let mut running = Self::running_by_ids(tx, params.leases.iter().map(|l| l.id)).await?;
        let kept = KeptByJob::of(&params.kept);
        let mut results = Vec::with_capacity(params.leases.len());
        let mut applied = Vec::with_capacity(params.leases.len());
        let mut with_kept: Vec<(JobId, Vec<ErrorEntry>, i32)> = Vec::new();
        let mut logged = FailureLog::default();
        let mut unblocked = BTreeSet::new();
        for lease in &params.leases {
            let Some((row, entries)) = take_fenced_kept(&mut running, lease, &kept)? else {
                results.push(Fenced::LeaseLost);
                continue;
            };
            if entries.is_empty() {
                applied.push(lease.id);
            } else {
                logged.count(&row.queue, &entries);
                let attempts = row.attempts + kept_count(&entries);
                with_kept.push((lease.id, entries, attempts));
            }
            if row.group_key.is_some() {
                unblocked.insert(row.queue);
            }
            results.push(Fenced::Applied);
        }
        if !applied.is_empty() {
            sqlx::query(sql::JOB_COMPLETE_BATCH)
                .bind(json_array(&applied)?)
                .bind(now)
                .execute(&mut **tx)
                .await
                .map_err(classify)?;
        }
        append_batch(tx, sql::JOB_COMPLETE_KEPT_BATCH, &with_kept, Some(now)).await?;
        logged.write(tx, now).await?;
        Ok((results, unblocked))
    }

    /// Records `params`' failed attempts whose leases hold, in `tx`, at `now`. As in
    /// [`Self::complete_in`]: one read for the batch, the fence checked in Rust, then
    /// one statement for every retry, one for every kept retry, one for every death
    /// and one for the failure log. Each statement appends the entries to the
    /// histories itself (history_append.sql says why), a job's kept failures
    /// ([`KeptFailure`]) before its own. Returns one result per failure and the
    /// queues to wake.
    async fn fail_in(
        tx: &mut Transaction<'static, Sqlite>,
        params: &JobFailParams,
        now: i64,
    ) -> Result<(Vec<Fenced>, BTreeSet<String>), StoreError> {
        let at = timestamp(now, "now")?;
        let mut running =
            Self::running_by_ids(tx, params.failures.iter().map(|f| f.lease.id)).await?;
        let kept_failures = KeptByJob::of(&params.kept);
        let mut results = Vec::with_capacity(params.failures.len());
        let mut retries: Vec<(JobId, i64, Vec<ErrorEntry>, i32)> = Vec::new();
        let mut kept: Vec<(JobId, i64, Vec<ErrorEntry>, i32)> = Vec::new();
        let mut dead: Vec<(JobId, &str, String, Vec<ErrorEntry>, i32)> = Vec::new();
        let mut logged = FailureLog::default();
        let mut wake = BTreeSet::new();
        for failure in &params.failures {
            let lease = failure.lease;
            let Some((row, mut entries)) = take_fenced_kept(&mut running, &lease, &kept_failures)?
            else {
                results.push(Fenced::LeaseLost);
                continue;
            };
            // The job's attempts with its kept failures counted, one each.
            let attempts = row.attempts + kept_count(&entries);
            let queue = row.queue;
            let grouped = row.group_key.is_some();
            let entry = ErrorEntry {
                attempt: attempts,
                at,
                class: failure.failure.class,
                message: ErrorEntry::truncate_message(&failure.failure.message),
                worker: failure.worker.clone().or(row.worker),
            };
            let print = matches!(failure.action, FailAction::Dead { .. })
                .then(|| fingerprint::fingerprint(&entry.message));
            entries.push(entry);
            logged.count(&queue, &entries);
            match &failure.action {
                FailAction::Retry { delay } | FailAction::Keep { delay } => {
                    let due = now.saturating_add(millis(held_delay(*delay)));
                    // A kept job with no attempts left is retried instead, as on
                    // PostgreSQL.
                    let keep = matches!(failure.action, FailAction::Keep { .. })
                        && attempts < row.max_attempts;
                    if keep {
                        kept.push((lease.id, due, entries, attempts + 1));
                    } else {
                        retries.push((lease.id, due, entries, attempts));
                        wake.insert(queue);
                    }
                }
                FailAction::Dead { reason } => {
                    let print = print.unwrap_or_default();
                    dead.push((lease.id, reason.as_str(), print, entries, attempts));
                    if grouped {
                        wake.insert(queue);
                    }
                }
            }
            results.push(Fenced::Applied);
        }
        append_batch(tx, sql::JOB_FAIL_RETRY_BATCH, &retries, None).await?;
        append_batch(tx, sql::JOB_FAIL_KEEP_BATCH, &kept, None).await?;
        append_batch(tx, sql::JOB_FAIL_DEAD_BATCH, &dead, Some(now)).await?;
        logged.write(tx, now).await?;
        Ok((results, wake))
    }

    /// Inserts `params`' jobs in `tx` (the one insert path of `job_enqueue` and of a
    /// schedule's tick), at `now`, in statements of up to
    /// [`ENQUEUE_CHUNK_JOBS`] jobs each (`job_enqueue.sql`); `payloads` are the jobs'
    /// payloads serialized, in order. Returns one result per job and the queues touched.
    pub(crate) async fn enqueue_in(
        tx: &mut Transaction<'static, Sqlite>,
        params: &JobEnqueueParams,
        payloads: &[String],
        now: i64,
    ) -> Result<(Vec<Enqueued>, BTreeSet<String>), StoreError> {
        // Which job is a duplicate, and of what: a key held by a job already in the
        // table, or by an earlier job of this call (the first one with the key is
        // inserted, as if the jobs were enqueued one after the other).
        let mut held = unique_holders(tx, &params.jobs).await?;
        let mut plan = Vec::with_capacity(params.jobs.len());
        let mut inserted = Vec::with_capacity(params.jobs.len());
        let mut queues = BTreeSet::new();
        for (index, job) in params.jobs.iter().enumerate() {
            if let Some(key) = &job.unique_key {
                if let Some(holder) = held.get(key) {
                    plan.push(*holder);
                    continue;
                }
                held.insert(key.clone(), Planned::Inserted(inserted.len()));
            }
            plan.push(Planned::Inserted(inserted.len()));
            inserted.push(index);
            queues.insert(job.queue.clone());
        }
        for queue in &queues {
            sqlx::query(sql::QUEUE_ENSURE)
                .bind(queue)
                .bind(now)
                .execute(&mut **tx)
                .await
                .map_err(classify)?;
        }
        let mut ids = Vec::with_capacity(inserted.len());
        let mut rest = &inserted[..];
        while !rest.is_empty() {
            let (rows, json) = enqueue_chunk(params, payloads, rest, now)?;
            rest = &rest[rows..];
            let done = sqlx::query(sql::JOB_ENQUEUE)
                .bind(json)
                .bind(now)
                .execute(&mut **tx)
                .await
                .map_err(classify)?;
            if done.rows_affected() != rows as u64 {
                return Err(StoreError::Corrupt(format!(
                    "inserted {} of {rows} jobs in one statement",
                    done.rows_affected()
                )));
            }
            // One statement inserts its rows in order, and AUTOINCREMENT gives each one
            // more than the largest id the table ever had, so under the write lock a
            // statement's ids run from its last one down, with no gap. Not `RETURNING`:
            // sqlx hands each returned row over from SQLite's thread as a message of its
            // own, and waking for a thousand of them cost more than the insert (a
            // profile of 100,000 jobs in batches of 1,000: most of the time in thread
            // hand-offs). The count over the range checks there was no gap.
            let last = done.last_insert_rowid();
            let first = last - (rows as i64 - 1);
            let in_range: i64 = sqlx::query_scalar(sql::JOB_COUNT_ID_RANGE)
                .bind(first)
                .bind(last)
                .fetch_one(&mut **tx)
                .await
                .map_err(classify)?;
            if in_range != rows as i64 {
                return Err(StoreError::Corrupt(format!(
                    "the {rows} jobs one statement inserted do not have consecutive ids ({in_range} of them in {first}..={last})"
                )));
            }
            ids.extend(first..=last);
        }
        let results = plan
            .into_iter()
            .enumerate()
            .map(|(index, planned)| match planned {
                Planned::Held(id) => Enqueued {
                    id,
                    duplicate: true,
                },
                // A later job with the key of one this call inserted is its duplicate.
                Planned::Inserted(k) => Enqueued {
                    id: ids[k],
                    duplicate: inserted[k] != index,
                },
            })
            .collect();
        Ok((results, queues))
    }

    /// Wakes `wait_for_jobs` callers of these queues (see [`Wakeups::wake`]).
    fn signal<'a>(&self, queues: impl IntoIterator<Item = &'a String>) {
        self.wakeups.wake(queues);
    }

    /// The running rows among `ids`, by id, for a batch's fence check.
    async fn running_by_ids(
        tx: &mut Transaction<'static, Sqlite>,
        ids: impl Iterator<Item = JobId>,
    ) -> Result<HashMap<JobId, Running>, StoreError> {
        let ids: Vec<JobId> = ids.collect();
        let json: String = sqlx::query_scalar(sql::JOB_RUNNING_BY_IDS)
            .bind(json_array(&ids)?)
            .fetch_one(&mut **tx)
            .await
            .map_err(classify)?;
        let rows: Vec<Running> = from_json(&json, "running jobs")?;
        Ok(rows.into_iter().map(|row| (row.id, row)).collect())
    }

    /// A claim's candidates, in claim order (priority, expired leases first, run_at, id),
    /// at most `params.limit`: one priority at a time, highest first, until the ready
    /// ones fill the claim or no priority is left (job_claim_candidates.sql says why).
    /// Only ready candidates count toward going on: an expired lease found by the first
    /// call may rank below jobs of a lower priority not looked at yet, and the final
    /// sort puts it where it belongs.
    async fn claim_candidates(
        tx: &mut Transaction<'static, Sqlite>,
        params: &JobClaimParams,
        now: i64,
    ) -> Result<Vec<Candidate>, StoreError> {
        let limit = usize::try_from(params.limit).unwrap_or(usize::MAX);
        let mut candidates = Vec::new();
        let mut ready = 0;
        // The priority below which the next call looks (an i64 above every i32).
        let mut below = i64::from(i32::MAX) + 1;
        let mut reclaim = params.reclaim;
        while ready < limit {
            let json: String = sqlx::query_scalar(sql::JOB_CLAIM_CANDIDATES)
                .bind(&params.queue)
                .bind(now)
                .bind(i64::try_from(limit - ready).unwrap_or(i64::MAX))
                .bind(i64::from(reclaim))
                .bind(below)
                .fetch_one(&mut **tx)
                .await
                .map_err(classify)?;
            reclaim = false;
            let mut level = None;
            for candidate in from_json::<Vec<Candidate>>(&json, "claim candidates")? {
                if !candidate.reclaim() {
                    ready += 1;
                    level = Some(candidate.priority);
                }
                candidates.push(candidate);
            }
            // No due job at that priority: find it, to look below it next.
            let level = match level {
                Some(level) => level,
                None => match sqlx::query_scalar::<_, i64>(sql::JOB_CLAIM_PRIORITY)
                    .bind(&params.queue)
                    .bind(below)
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(classify)?
                {
                    Some(level) => level,
                    None => break,
                },
            };
            below = level;
        }
        candidates.sort_by_key(|c| (std::cmp::Reverse(c.priority), !c.reclaim(), c.run_at, c.id));
        candidates.truncate(limit);
        Ok(candidates)
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

/// One dependency's record, or a fresh one for a key never seen.
async fn dependency_load(
    tx: &mut Transaction<'static, Sqlite>,
    key: &str,
) -> Result<DependencyRecord, StoreError> {
    let json: Option<String> = sqlx::query_scalar(sql::DEPENDENCY_GET)
        .bind(key)
        .fetch_optional(&mut **tx)
        .await
        .map_err(classify)?;
    json.map_or(Ok(DependencyRecord::default()), |json| {
        parse_record(key, &json)
    })
}

async fn dependency_save(
    tx: &mut Transaction<'static, Sqlite>,
    key: &str,
    record: &DependencyRecord,
    now: i64,
) -> Result<(), StoreError> {
    sqlx::query(sql::DEPENDENCY_PUT)
        .bind(key)
        .bind(record.state.as_str())
        .bind(serde_json::to_string(record).map_err(StoreError::backend)?)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(classify)?;
    Ok(())
}

/// Releases the jobs parked on `key` (its breaker closed), in claim order, on the
/// record's rate-limit turns. Returns their queues.
async fn dependency_release(
    tx: &mut Transaction<'static, Sqlite>,
    key: &str,
    record: &mut DependencyRecord,
    now: i64,
) -> Result<BTreeSet<String>, StoreError> {
    let ids: Vec<i64> = sqlx::query_scalar(sql::DEPENDENCY_PARKED)
        .bind(key)
        .fetch_all(&mut **tx)
        .await
        .map_err(classify)?;
    if ids.is_empty() {
        return Ok(BTreeSet::new());
    }
    let (first, spacing) = record.reserve_turns(now.saturating_mul(1000), ids.len() as u64);
    let turns: Vec<(i64, i64)> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let at = first.saturating_add(spacing.saturating_mul(i as i64));
            // Whole milliseconds, rounded up: never due before its turn.
            (id, at.div_euclid(1000) + i64::from(at.rem_euclid(1000) > 0))
        })
        .collect();
    let wait = (spacing > 0).then_some(WaitReason::RateLimit.as_str());
    let queues: Vec<String> = sqlx::query_scalar(sql::DEPENDENCY_RELEASE)
        .bind(json_array(&turns)?)
        .bind(wait)
        .fetch_all(&mut **tx)
        .await
        .map_err(classify)?;
    Ok(queues.into_iter().collect())
}

/// Jobs waiting per dependency (all, or `key`), by reason.
async fn dependency_waiting(
    pool: &SqlitePool,
    key: Option<&str>,
) -> Result<HashMap<String, WaitingCounts>, StoreError> {
    let rows = sqlx::query(sql::DEPENDENCY_WAITING)
        .bind(key)
        .fetch_all(pool)
        .await
        .map_err(classify)?;
    let mut counts: HashMap<String, WaitingCounts> = HashMap::new();
    for row in rows {
        let Some(dependency) = get::<Option<String>>(&row, "dependency")? else {
            continue;
        };
        let n: i64 = get(&row, "n")?;
        let entry = counts.entry(dependency).or_default();
        match WaitReason::parse(&get::<String>(&row, "dependency_wait")?) {
            Some(WaitReason::Breaker) => entry.breaker += n,
            Some(WaitReason::RateLimit) => entry.rate_limit += n,
            Some(WaitReason::RetryBudget) => entry.retry_budget += n,
            Some(WaitReason::Bulkhead) | None => {}
        }
    }
    Ok(counts)
}

/// The running row `lease` fences, taken out of `running` so a second result for the
/// same lease in one batch finds it gone (lease lost), as it would one call later.
fn take_fenced(running: &mut HashMap<JobId, Running>, lease: &LeaseRef) -> Option<Running> {
    let holds = running
        .get(&lease.id)
        .is_some_and(|row| row.lease_token == Some(lease.lease_token.0));
    if holds {
        running.remove(&lease.id)
    } else {
        None
    }
}

/// [`take_fenced`] for a write that carries kept failures: the row and the history
/// entries of its kept failures, or `None` when the lease does not hold or the kept
/// failures are not numbered from the row's attempts ([`KeptByJob::entries`]).
fn take_fenced_kept(
    running: &mut HashMap<JobId, Running>,
    lease: &LeaseRef,
    kept: &KeptByJob,
) -> Result<Option<(Running, Vec<ErrorEntry>)>, StoreError> {
    let Some(row) = take_fenced(running, lease) else {
        return Ok(None);
    };
    Ok(kept.entries(&row)?.map(|entries| (row, entries)))
}

/// A claim candidate as job_claim_candidates.sql gives it (a JSON array per job).
#[derive(Debug, serde::Deserialize)]
struct Candidate {
    id: JobId,
    status: String,
    attempts: i32,
    worker: Option<String>,
    lease_expires_at: Option<i64>,
    /// The history, read for a reclaim only (it writes an entry).
    errors: Option<String>,
    priority: i64,
    run_at: i64,
}

impl Candidate {
    /// A running job whose lease expired, not a ready one.
    fn reclaim(&self) -> bool {
        self.status != JobState::Ready.as_str()
    }
}

/// A running job as job_running_by_ids.sql gives it (a JSON array per job), for a
/// batch's fence check and the history entry of a failure.
#[derive(Debug, serde::Deserialize)]
struct Running {
    id: JobId,
    lease_token: Option<i64>,
    queue: String,
    group_key: Option<String>,
    attempts: i32,
    max_attempts: i32,
    worker: Option<String>,
}

/// Runs one of the statements that write a batch's failures into the histories
/// (history_append.sql), unless the batch is empty: ?1 the batch as a JSON array, ?2
/// how many entries a history keeps, ?3 `now` for those that take it.
async fn append_batch<T: serde::Serialize>(
    tx: &mut Transaction<'static, Sqlite>,
    statement: &'static str,
    batch: &[T],
    now: Option<i64>,
) -> Result<(), StoreError> {
    if batch.is_empty() {
        return Ok(());
    }
    let query = sqlx::query(statement)
        .bind(json_array(&batch)?)
        .bind(HISTORY_LIMIT);
    let query = match now {
        Some(now) => query.bind(now),
        None => query,
    };
    query.execute(&mut **tx).await.map_err(classify)?;
    Ok(())
}

/// How many attempts a job's kept failures' `entries` count: one each.
fn kept_count(entries: &[ErrorEntry]) -> i32 {
    i32::try_from(entries.len()).unwrap_or(i32::MAX)
}

/// A batch's kept failures ([`KeptFailure`]) by job, in the order given.
struct KeptByJob<'a> {
    by_job: HashMap<JobId, Vec<&'a KeptFailure>>,
}

impl<'a> KeptByJob<'a> {
    fn of(kept: &'a [KeptFailure]) -> Self {
        let mut by_job: HashMap<JobId, Vec<&KeptFailure>> = HashMap::new();
        for failure in kept {
            by_job.entry(failure.id).or_default().push(failure);
        }
        KeptByJob { by_job }
    }

    /// The history entries of `row`'s kept failures, as given (their times to the
    /// millisecond, as the store keeps every time); `None` when the first is not
    /// numbered as the row's stored attempts: the job's result is then not written, and
    /// is a lost lease (see [`KeptFailure`]).
    fn entries(&self, row: &Running) -> Result<Option<Vec<ErrorEntry>>, StoreError> {
        let Some(kept) = self.by_job.get(&row.id) else {
            return Ok(Some(Vec::new()));
        };
        if kept.first().map(|failure| failure.attempt) != Some(row.attempts) {
            return Ok(None);
        }
        kept.iter()
            .map(|failure| {
                Ok(ErrorEntry {
                    attempt: failure.attempt,
                    at: timestamp(failure.at.timestamp_millis(), "kept")?,
                    class: failure.failure.class,
                    message: ErrorEntry::truncate_message(&failure.failure.message),
                    worker: failure.worker.clone().or_else(|| row.worker.clone()),
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

/// A batch's failed attempts per queue and class, for the failure log (queue_stats'
/// failure count): one row for each.
#[derive(Default)]
struct FailureLog {
    counts: BTreeMap<(String, &'static str), i64>,
}

impl FailureLog {
    fn count(&mut self, queue: &str, entries: &[ErrorEntry]) {
        for entry in entries {
            *self
                .counts
                .entry((queue.to_string(), entry.class.as_str()))
                .or_default() += 1;
        }
    }

    async fn write(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        now: i64,
    ) -> Result<(), StoreError> {
        if self.counts.is_empty() {
            return Ok(());
        }
        let logged: Vec<(&str, &str, i64)> = self
            .counts
            .iter()
            .map(|((queue, class), n)| (queue.as_str(), *class, *n))
            .collect();
        sqlx::query(sql::ATTEMPT_FAILURE_LOG_BATCH)
            .bind(json_array(&logged)?)
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(classify)?;
        Ok(())
    }
}

/// One value a statement built with `json_group_array` (`what` names it in the error).
/// The tables are STRICT, so a value of the wrong type here is a defect of the
/// statement or a database this version cannot read: [`StoreError::Corrupt`].
fn from_json<T: serde::de::DeserializeOwned>(json: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_str(json).map_err(|err| StoreError::Corrupt(format!("{what}: {err}")))
}

/// A batch as a JSON array, the one parameter of the `json_each` statements.
fn json_array<T: serde::Serialize>(items: &T) -> Result<String, StoreError> {
    serde_json::to_string(items).map_err(StoreError::backend)
}

/// Where `job_enqueue` puts one job: a duplicate of a job already in the table, or the
/// `k`-th row it inserts (a duplicate of that row when another job of the call has it).
#[derive(Debug, Clone, Copy)]
enum Planned {
    Held(JobId),
    Inserted(usize),
}

/// `BEGIN IMMEDIATE` on the writer connection. Call it holding the writer's turn, from
/// a future nobody drops half-way (see [`SqliteStore::write`]).
async fn begin_write(writer: &SqlitePool) -> Result<Transaction<'static, Sqlite>, StoreError> {
    match writer.begin_with("BEGIN IMMEDIATE").await {
        Err(sqlx::Error::InvalidSavePointStatement) => {
            clear_stale_transaction(writer).await?;
            writer.begin_with("BEGIN IMMEDIATE").await
        }
        begun => begun,
    }
    .map_err(classify)
}

/// Brings the writer connection's count of open transactions back to zero when SQLite
/// has none open. A statement or COMMIT that fails with `SQLITE_FULL` (a full disk) or
/// an I/O error may make SQLite roll the transaction back by itself; the driver's
/// ROLLBACK (when the Transaction is dropped) then fails with "no transaction is
/// active" and its count stays at one, so every later BEGIN on the connection failed
/// ("begin_with at non-zero transaction depth") until the process restarted: a full
/// disk wedged every write for good, even after space came back (found by the torture
/// suite's full-disk test). A raw BEGIN gives the driver a transaction to roll back (it
/// fails harmlessly if one is really open), and the driver's own ROLLBACK then ends it
/// and brings its count down.
async fn clear_stale_transaction(writer: &SqlitePool) -> Result<(), StoreError> {
    use sqlx::{Executor, TransactionManager};
    let mut conn = writer.acquire().await.map_err(classify)?;
    let conn: &mut sqlx::SqliteConnection = &mut conn;
    let _ = conn.execute("BEGIN").await;
    sqlx::sqlite::SqliteTransactionManager::rollback(conn)
        .await
        .map_err(classify)?;
    tracing::warn!("SQLite had rolled back a failed write by itself; the writer connection's transaction count was reset");
    Ok(())
}

/// Each job's payload as the JSON text the `payload` column holds, in order.
pub(crate) fn serialize_payloads(params: &JobEnqueueParams) -> Result<Vec<String>, StoreError> {
    params
        .jobs
        .iter()
        .map(|job| serde_json::to_string(&job.payload).map_err(StoreError::backend))
        .collect()
}

/// The jobs already holding any unique key of `jobs`, by key, in one statement.
async fn unique_holders(
    tx: &mut Transaction<'static, Sqlite>,
    jobs: &[revenant_core::NewJob],
) -> Result<HashMap<String, Planned>, StoreError> {
    let keys: BTreeSet<&str> = jobs
        .iter()
        .filter_map(|j| j.unique_key.as_deref())
        .collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query(sql::JOB_UNIQUE_FIND_MANY)
        .bind(json_array(&keys)?)
        .fetch_all(&mut **tx)
        .await
        .map_err(classify)?;
    rows.iter()
        .map(|row| {
            Ok((
                get::<String>(row, "unique_key")?,
                Planned::Held(get::<i64>(row, "id")?),
            ))
        })
        .collect()
}

/// The most jobs one insert statement of `job_enqueue` takes, and the bytes of JSON
/// past which it takes no more: a statement holds at least one job, and at most one
/// job's size (a payload is at most 1 MiB) past the bound, far below the 1 GB SQLite
/// takes in one text.
const ENQUEUE_CHUNK_JOBS: usize = 4096;
const ENQUEUE_CHUNK_BYTES: usize = 16 * 1024 * 1024;

/// One job as an element of `job_enqueue.sql`'s JSON array, which serde writes as an
/// array in the order of the fields.
#[derive(serde::Serialize)]
struct EnqueueRow<'a>(
    /* queue */ &'a str,
    /* kind */ &'a str,
    /* payload, its JSON text */ &'a str,
    /* priority */ i32,
    /* max_attempts */ i32,
    /* run_at (ms) */ i64,
    /* group_key */ Option<&'a str>,
    /* unique_key */ Option<&'a str>,
    /* correlation_id */ Option<&'a str>,
    /* traceparent */ Option<&'a str>,
    /* tracestate */ Option<&'a str>,
);

/// The first jobs of `rest` (indexes into `params.jobs`) that one insert statement
/// takes, as `job_enqueue.sql`'s JSON array: returns how many it holds, and the array.
fn enqueue_chunk(
    params: &JobEnqueueParams,
    payloads: &[String],
    rest: &[usize],
    now: i64,
) -> Result<(usize, String), StoreError> {
    let mut json = Vec::with_capacity(256 * rest.len().min(ENQUEUE_CHUNK_JOBS));
    json.push(b'[');
    let mut rows = 0;
    for &index in rest.iter().take(ENQUEUE_CHUNK_JOBS) {
        if rows > 0 && json.len() >= ENQUEUE_CHUNK_BYTES {
            break;
        }
        let job = &params.jobs[index];
        let run_at = match (job.run_at, job.delay) {
            (Some(at), _) => at.timestamp_millis(),
            (None, Some(delay)) => now.saturating_add(millis(delay)),
            (None, None) => now,
        };
        let trace = job.trace_context.as_ref();
        let row = EnqueueRow(
            &job.queue,
            &job.kind,
            &payloads[index],
            job.priority,
            job.max_attempts.unwrap_or(params.default_max_attempts),
            run_at,
            job.group_key.as_deref(),
            job.unique_key.as_deref(),
            job.correlation_id.as_deref(),
            trace.map(|t| t.traceparent()),
            trace.and_then(|t| t.tracestate()),
        );
        if rows > 0 {
            json.push(b',');
        }
        serde_json::to_writer(&mut json, &row).map_err(StoreError::backend)?;
        rows += 1;
    }
    json.push(b']');
    let json = String::from_utf8(json).map_err(StoreError::backend)?;
    Ok((rows, json))
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

/// The clock: pinned, or the process's, in whole milliseconds.
///
/// A write reads it *after* taking the write turn: read before, it is stale by however
/// long the turn took to come (seconds, when other processes hold SQLite's write lock),
/// and a claim would hand out a lease shortened by that wait (already expired, if the
/// wait outlasted it) and stamp `attempted_at` before the end of the job ahead of it
/// in its group. Found by the torture suite's FIFO group test (seed 16).
fn clock(now: Option<Timestamp>) -> i64 {
    now.unwrap_or_else(Utc::now).timestamp_millis()
}

fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("{ms} ms"))
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
        self.wakeups.wait(queue, timeout).await;
    }

    async fn job_enqueue(&self, params: JobEnqueueParams) -> Result<Vec<Enqueued>, StoreError> {
        params.validate()?;
        if params.jobs.is_empty() {
            return Ok(Vec::new());
        }
        // The payloads are serialized before the write lock is taken: nothing about them
        // depends on the database.
        let payloads = serialize_payloads(&params)?;
        // Written with the other enqueue calls waiting for the writer, in one
        // transaction (group commit: see `group_commit`).
        let (results, queues) = self.enqueue_grouped(params, payloads).await?;
        self.signal(&queues);
        Ok(results)
    }

    async fn job_claim(&self, params: JobClaimParams) -> Result<Vec<Job>, StoreError> {
        self.claim(params).await
    }

    async fn job_claim_run(&self, params: JobClaimParams) -> Result<Vec<ClaimedJob>, StoreError> {
        self.claim(params).await
    }

    async fn job_heartbeat(&self, params: JobHeartbeatParams) -> Result<Fenced, StoreError> {
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
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
        params.validate()?;
        if params.leases.is_empty() {
            return Ok(Vec::new());
        }
        // Written with the other results and enqueues waiting for the writer, in one
        // transaction (group commit: see `group_commit`).
        let (results, unblocked) = self.settle_grouped(Settle::Complete(params)).await?;
        self.signal(&unblocked);
        Ok(results)
    }

    async fn job_fail(&self, params: JobFailParams) -> Result<Vec<Fenced>, StoreError> {
        params.validate()?;
        if params.failures.is_empty() {
            return Ok(Vec::new());
        }
        let (results, wake) = self.settle_grouped(Settle::Fail(params)).await?;
        self.signal(&wake);
        Ok(results)
    }

    async fn job_snooze(&self, params: JobSnoozeParams) -> Result<Fenced, StoreError> {
        params.validate()?;
        let delay = held_delay(params.delay);
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
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
        params.validate()?;
        if params.leases.is_empty() {
            return Ok(Vec::new());
        }
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
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
        params.validate()?;
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
        params.validate()?;
        if params.limit == 0 {
            return Ok(Vec::new());
        }
        let rows = bind_filter(sqlx::query(sql::JOB_LIST), &params.filter)?
            .bind(params.before_id)
            .bind(i64::from(params.limit.min(LIST_LIMIT_CAP)))
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        let mut jobs = Vec::with_capacity(rows.len());
        for row in &rows {
            jobs.extend(decodable_job(row)?);
        }
        Ok(jobs)
    }

    async fn job_sweep(&self, params: JobSweepParams) -> Result<Vec<JobId>, StoreError> {
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
        let ids = Self::kill_expired(&mut tx, now, None).await?;
        tx.commit().await.map_err(classify)?;
        Ok(ids)
    }

    async fn job_redrive(&self, params: JobRedriveParams) -> Result<Vec<JobId>, StoreError> {
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
        params.validate()?;
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
        params.validate()?;
        if params.limit == 0 {
            return Ok(Vec::new());
        }
        let rows = bind_filter(sqlx::query(sql::DEAD_FINGERPRINTS), &params.filter)?
            .bind(i64::from(params.limit.min(LIST_LIMIT_CAP)))
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        listed("jobs", &rows, group_from_row)
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
        listed("redrives", &rows, redrive_from_row)
    }

    /// SQLite reuses the pages of deleted rows without a vacuum, and a claim reads no
    /// dead index entries: there is nothing for workers to do.
    async fn job_vacuum(&self, params: JobVacuumParams) -> Result<JobVacuumed, StoreError> {
        params.validate()?;
        Ok(JobVacuumed::NotApplicable)
    }

    async fn job_prune(&self, params: JobPruneParams) -> Result<u64, StoreError> {
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
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
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
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
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
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
        params.validate()?;
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

    async fn queue_history(
        &self,
        params: QueueHistoryParams,
    ) -> Result<Vec<QueueHistoryPoint>, StoreError> {
        params.validate()?;
        let now = clock(params.now);
        let step = millis(params.step).max(1);
        let first = now.saturating_sub(step.saturating_mul(i64::from(params.points) - 1));
        let rows = sqlx::query(sql::QUEUE_HISTORY)
            .bind(&params.queue)
            .bind(first)
            .bind(step)
            .bind(now)
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        let counts = rows
            .iter()
            .map(|row| {
                Ok((
                    get::<String>(row, "edge")?,
                    get(row, "bucket")?,
                    get(row, "n")?,
                ))
            })
            .collect::<Result<Vec<(String, i64, i64)>, StoreError>>()?;
        params.assemble(timestamp(now, "now")?, &counts)
    }

    async fn dependency_acquire(
        &self,
        params: DependencyAcquireParams,
    ) -> Result<DependencyAcquired, StoreError> {
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
        let at = timestamp(now, "now")?;
        let ids: Vec<i64> = params.requests.iter().map(|r| r.lease.id).collect();
        let rows = sqlx::query(sql::JOB_GATE_RUNNING)
            .bind(json_array(&ids)?)
            .fetch_all(&mut *tx)
            .await
            .map_err(classify)?;
        let mut running = HashMap::new();
        for row in &rows {
            let id: i64 = get(row, "id")?;
            let Some(token) = get::<Option<i64>>(row, "lease_token")? else {
                continue;
            };
            let waited: Option<String> = get(row, "dependency_wait")?;
            running.insert(
                id,
                GatedJob {
                    lease_token: LeaseToken(token),
                    attempts: get(row, "attempts")?,
                    waited_for: waited.as_deref().and_then(WaitReason::parse),
                },
            );
        }
        let mut record = dependency_load(&mut tx, &params.dependency).await?;
        let plan = plan_acquire(&mut record, &params, at, &running);
        let mut run = Vec::new();
        let mut defer: Vec<(i64, i64, Option<&str>)> = Vec::new();
        let mut permits = Vec::with_capacity(plan.len());
        for (request, (permit, gate)) in params.requests.iter().zip(plan) {
            match gate {
                JobGate::Run => run.push(request.lease.id),
                JobGate::Defer { run_at, reason } => {
                    defer.push((request.lease.id, run_at.timestamp_millis(), reason.stored()))
                }
                JobGate::Nothing => {}
            }
            permits.push(permit);
        }
        if !run.is_empty() {
            sqlx::query(sql::JOB_GATE_RUN)
                .bind(json_array(&run)?)
                .bind(&params.dependency)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
        }
        let mut wake = BTreeSet::new();
        if !defer.is_empty() {
            let queues: Vec<String> = sqlx::query_scalar(sql::JOB_GATE_DEFER)
                .bind(json_array(&defer)?)
                .bind(&params.dependency)
                .fetch_all(&mut *tx)
                .await
                .map_err(classify)?;
            wake.extend(queues);
        }
        dependency_save(&mut tx, &params.dependency, &record, now).await?;
        tx.commit().await.map_err(classify)?;
        // A job sent back until later needs no wake-up, but a grouped one may have
        // been holding its group: let the fetchers look again.
        self.signal(&wake);
        Ok(DependencyAcquired { now: at, permits })
    }

    async fn dependency_report(
        &self,
        params: DependencyReportParams,
    ) -> Result<DependencyState, StoreError> {
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
        let mut record = dependency_load(&mut tx, &params.dependency).await?;
        let closed = record.report_calls(&params.policy, now.saturating_mul(1000), &params.calls());
        let wake = if closed {
            dependency_release(&mut tx, &params.dependency, &mut record, now).await?
        } else {
            BTreeSet::new()
        };
        dependency_save(&mut tx, &params.dependency, &record, now).await?;
        tx.commit().await.map_err(classify)?;
        self.signal(&wake);
        Ok(record.view(
            &params.dependency,
            now.saturating_mul(1000),
            WaitingCounts::default(),
        ))
    }

    async fn dependency_set(
        &self,
        params: DependencySetParams,
    ) -> Result<DependencyState, StoreError> {
        params.validate()?;
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
        let mut record = dependency_load(&mut tx, &params.dependency).await?;
        let wake = if record.set(params.action, now.saturating_mul(1000)) {
            dependency_release(&mut tx, &params.dependency, &mut record, now).await?
        } else {
            BTreeSet::new()
        };
        dependency_save(&mut tx, &params.dependency, &record, now).await?;
        tx.commit().await.map_err(classify)?;
        self.signal(&wake);
        let waiting = dependency_waiting(&self.pool, Some(&params.dependency)).await?;
        Ok(record.view(
            &params.dependency,
            now.saturating_mul(1000),
            waiting.get(&params.dependency).copied().unwrap_or_default(),
        ))
    }

    async fn dependency_list(
        &self,
        params: DependencyListParams,
    ) -> Result<Vec<DependencyState>, StoreError> {
        params.validate()?;
        let now = clock(params.now).saturating_mul(1000);
        let rows = sqlx::query(sql::DEPENDENCY_LIST)
            .bind(&params.dependency)
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        let waiting = dependency_waiting(&self.pool, params.dependency.as_deref()).await?;
        listed("dependencies", &rows, |row| {
            let key: String = get(row, "key")?;
            let record = parse_record(&key, &get::<String>(row, "record")?)?;
            let counts = waiting.get(&key).copied().unwrap_or_default();
            Ok(record.view(&key, now, counts))
        })
    }

    async fn dependency_sweep(
        &self,
        params: DependencySweepParams,
    ) -> Result<Vec<String>, StoreError> {
        params.validate()?;
        let now = clock(params.now);
        let rows = sqlx::query(sql::DEPENDENCY_LIST)
            .bind(None::<String>)
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        let mut wanting = Vec::new();
        for row in &rows {
            let key: String = get(row, "key")?;
            if parse_record(&key, &get::<String>(row, "record")?)?.wants_probe(now * 1000) {
                wanting.push(key);
            }
        }
        if wanting.is_empty() {
            return Ok(Vec::new());
        }
        let (_turn, mut tx) = self.write().await?;
        let mut released = Vec::new();
        let mut wake = BTreeSet::new();
        for key in wanting {
            let queue: Option<String> = sqlx::query_scalar(sql::DEPENDENCY_SWEEP_RELEASE)
                .bind(&key)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await
                .map_err(classify)?;
            if let Some(queue) = queue {
                wake.insert(queue);
                released.push(key);
            }
        }
        tx.commit().await.map_err(classify)?;
        self.signal(&wake);
        Ok(released)
    }

    async fn worker_heartbeat(&self, params: WorkerHeartbeatParams) -> Result<(), StoreError> {
        params.validate()?;
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
        listed("workers", &rows, |row| {
            let worker: String = get(row, "worker")?;
            let queues: String = get(row, "queues")?;
            Ok(WorkerInfo {
                host: get(row, "host")?,
                pid: get(row, "pid")?,
                queues: serde_json::from_str(&queues).map_err(|err| {
                    StoreError::Corrupt(format!(
                        "workers.queues of {worker:?} is not a list: {err}"
                    ))
                })?,
                started_at: timestamp(get(row, "started_at")?, "started_at")?,
                last_seen_at: timestamp(get(row, "last_seen_at")?, "last_seen_at")?,
                worker,
            })
        })
    }

    async fn worker_remove(&self, params: WorkerRemoveParams) -> Result<u64, StoreError> {
        params.validate()?;
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

    async fn policy_list(&self) -> Result<Vec<PolicyRecord>, StoreError> {
        let rows = sqlx::query(sql::POLICY_LIST)
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
        let mut records = Vec::with_capacity(rows.len());
        for row in &rows {
            let scope: String = get(row, "scope")?;
            let name: String = get(row, "name")?;
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
        let (_turn, mut tx) = self.write().await?;
        let now = clock(params.now);
        sqlx::query(sql::POLICY_SET)
            .bind(scope)
            .bind(name)
            .bind(policy)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(())
    }

    async fn policy_delete(&self, params: PolicyDeleteParams) -> Result<bool, StoreError> {
        params.validate()?;
        let (scope, name) = params.scope.as_parts();
        let (_turn, mut tx) = self.write().await?;
        let done = sqlx::query(sql::POLICY_DELETE)
            .bind(scope)
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
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
    use sqlx::Row;

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
        let mut writer = store.writer.acquire().await.unwrap();
        let cache: i64 = sqlx::query_scalar("PRAGMA cache_size")
            .fetch_one(&mut *writer)
            .await
            .unwrap();
        let temp_store: i64 = sqlx::query_scalar("PRAGMA temp_store")
            .fetch_one(&mut *writer)
            .await
            .unwrap();
        assert_eq!(cache, -WRITER_CACHE_KIB, "the writer's page cache");
        assert_eq!(temp_store, 2, "the writer's statement journals in memory");
        assert_eq!(mode, "wal");
        assert_eq!(sync, 2, "synchronous = FULL");
        assert_eq!(busy, 5_000);
        assert_eq!(fk, 1);
    }

    /// The batch statements look each id up by primary key. Without statistics SQLite
    /// once preferred walking every running job through the `jobs_finished` index and
    /// probing the batch for each: correct, and ten times slower as the table grew (the
    /// demo's worker fell to a fifth of its pace). Pin the plans.
    #[tokio::test]
    async fn batch_statements_look_jobs_up_by_primary_key() {
        let store = SqliteStore::open_temporary().await.unwrap();
        let mut conn = store.pool.acquire().await.unwrap();
        for (name, statement) in [
            ("job_claim_ready", sql::JOB_CLAIM_READY),
            ("job_claimed", sql::JOB_CLAIMED),
            ("job_running_by_ids", sql::JOB_RUNNING_BY_IDS),
            ("job_complete_batch", sql::JOB_COMPLETE_BATCH),
            ("job_complete_kept_batch", sql::JOB_COMPLETE_KEPT_BATCH),
            ("job_fail_retry_batch", sql::JOB_FAIL_RETRY_BATCH),
            ("job_fail_keep_batch", sql::JOB_FAIL_KEEP_BATCH),
            ("job_fail_dead_batch", sql::JOB_FAIL_DEAD_BATCH),
            ("job_gate_running", sql::JOB_GATE_RUNNING),
            ("job_gate_run", sql::JOB_GATE_RUN),
            ("job_gate_defer", sql::JOB_GATE_DEFER),
            ("dependency_release", sql::DEPENDENCY_RELEASE),
        ] {
            let plan = explain(&mut conn, statement).await;
            let jobs: Vec<&String> = plan.iter().filter(|row| row.contains("jobs")).collect();
            assert!(
                !jobs.is_empty() && jobs.iter().all(|row| row.contains("INTEGER PRIMARY KEY")),
                "{name}: every access to jobs goes by primary key; plan: {plan:#?}"
            );
        }
    }

    /// The claim's ready half walks one priority of the claim index, bounded by
    /// `run_at`, in index order: no sort, and no walk through jobs scheduled for later
    /// (job_claim_candidates.sql). The expired half sorts what `jobs_lease` finds (the
    /// expired leases, few), and the merge of the two sorts.
    #[tokio::test]
    async fn the_claim_walks_one_priority_bounded_by_run_at() {
        let store = SqliteStore::open_temporary().await.unwrap();
        let mut conn = store.pool.acquire().await.unwrap();
        let plan = explain(&mut conn, sql::JOB_CLAIM_CANDIDATES).await;
        assert!(
            plan.iter()
                .any(|row| row.contains("jobs_ready (queue=? AND priority=? AND run_at<?)")),
            "the ready half bounds its walk; plan: {plan:#?}"
        );
        let union = plan
            .iter()
            .position(|row| row == "UNION ALL")
            .expect("two halves");
        assert!(
            !plan[..union].iter().any(|row| row.contains("TEMP B-TREE")),
            "the ready half does not sort; plan: {plan:#?}"
        );
        let sorts = plan
            .iter()
            .filter(|row| row.contains("TEMP B-TREE"))
            .count();
        assert!(
            sorts <= 2,
            "only the expired half and the merge sort; plan: {plan:#?}"
        );
    }

    /// Every statement that reads jobs finds them by an index: none walks the table.
    /// The indexes are partial by state (migration 15) and SQLite plans without
    /// statistics, so a statement can fall back to reading the whole table in id order
    /// (an `ORDER BY id`) or to walking every job of a queue (`jobs_queue`) where a
    /// partial index would find the few it wants. The listing is the one exception: its
    /// filters are all optional, and it reads newest first up to its limit.
    #[tokio::test]
    async fn every_read_by_state_goes_by_an_index() {
        let store = SqliteStore::open_temporary().await.unwrap();
        let mut conn = store.pool.acquire().await.unwrap();
        let statements = [
            ("queue_stats", sql::QUEUE_STATS),
            ("queue_history", sql::QUEUE_HISTORY),
            ("job_count_id_range", sql::JOB_COUNT_ID_RANGE),
            ("job_unique_find_many", sql::JOB_UNIQUE_FIND_MANY),
            ("job_expired_exhausted", sql::JOB_EXPIRED_EXHAUSTED),
            ("job_kill_expired", sql::JOB_KILL_EXPIRED),
            ("job_claim_candidates", sql::JOB_CLAIM_CANDIDATES),
            ("job_claim_priority", sql::JOB_CLAIM_PRIORITY),
            ("job_claim", sql::JOB_CLAIM),
            ("job_heartbeat", sql::JOB_HEARTBEAT),
            ("job_fail_dead_batch", sql::JOB_FAIL_DEAD_BATCH),
            ("job_snooze", sql::JOB_SNOOZE),
            ("job_cancel_get", sql::JOB_CANCEL_GET),
            ("job_cancel", sql::JOB_CANCEL),
            ("job_get", sql::JOB_GET),
            ("job_redrive_select", sql::JOB_REDRIVE_SELECT),
            ("job_redrive", sql::JOB_REDRIVE),
            ("job_purge", sql::JOB_PURGE),
            ("job_prune", sql::JOB_PRUNE),
            ("job_claim_ready", sql::JOB_CLAIM_READY),
            ("job_claimed", sql::JOB_CLAIMED),
            ("job_claimed_run", sql::JOB_CLAIMED_RUN),
            ("job_running_by_ids", sql::JOB_RUNNING_BY_IDS),
            ("job_complete_batch", sql::JOB_COMPLETE_BATCH),
            ("job_complete_kept_batch", sql::JOB_COMPLETE_KEPT_BATCH),
            ("job_fail_retry_batch", sql::JOB_FAIL_RETRY_BATCH),
            ("job_fail_keep_batch", sql::JOB_FAIL_KEEP_BATCH),
            ("dead_fingerprints", sql::DEAD_FINGERPRINTS),
            ("dead_unfingerprinted", sql::DEAD_UNFINGERPRINTED),
            ("job_set_fingerprint", sql::JOB_SET_FINGERPRINT),
            ("dependency_waiting", sql::DEPENDENCY_WAITING),
            ("dependency_parked", sql::DEPENDENCY_PARKED),
            ("dependency_release", sql::DEPENDENCY_RELEASE),
            ("dependency_sweep_release", sql::DEPENDENCY_SWEEP_RELEASE),
            ("job_gate_running", sql::JOB_GATE_RUNNING),
            ("job_gate_run", sql::JOB_GATE_RUN),
            ("job_gate_defer", sql::JOB_GATE_DEFER),
        ];
        for (name, statement) in statements {
            let names = jobs_names(statement);
            assert!(!names.is_empty(), "{name} reads jobs");
            let plan = explain(&mut conn, statement).await;
            let walks: Vec<&String> = plan
                .iter()
                .filter(|row| {
                    let mut words = row.split_whitespace();
                    words.next() == Some("SCAN")
                        && words.next().is_some_and(|table| names.contains(&table))
                        && !row.contains("USING")
                })
                .collect();
            assert!(
                walks.is_empty(),
                "{name} walks the jobs table: {walks:?}; plan: {plan:#?}"
            );
            // Every job of a queue is what the queue's views read, and nothing else.
            if !matches!(name, "queue_stats" | "queue_history") {
                assert!(
                    !plan.iter().any(|row| row.contains("jobs_queue")),
                    "{name} walks every job of the queue; plan: {plan:#?}"
                );
            }
        }
        // The check can fail: a walk in id order is what the listing does.
        let plan = explain(&mut conn, sql::JOB_LIST).await;
        assert!(
            plan.iter().any(|row| row == "SCAN jobs"),
            "the listing reads in id order; plan: {plan:#?}"
        );
    }

    /// The names a statement gives the jobs table: `jobs` and its aliases
    /// (`FROM jobs j`, `JOIN jobs AS g`), comments left out.
    fn jobs_names(statement: &str) -> Vec<&str> {
        let words: Vec<&str> = statement
            .lines()
            .map(|line| line.split("--").next().unwrap_or(""))
            .flat_map(str::split_whitespace)
            .collect();
        let mut names = Vec::new();
        for (i, pair) in words.windows(2).enumerate() {
            if !matches!(pair[0], "FROM" | "JOIN" | "UPDATE" | "INTO")
                || pair[1].trim_end_matches([',', ')']) != "jobs"
            {
                continue;
            }
            names.push("jobs");
            if pair[1] != "jobs" {
                // `jobs)` or `jobs,`: no alias follows.
                continue;
            }
            let mut next = words.get(i + 2).copied();
            if next == Some("AS") {
                next = words.get(i + 3).copied();
            }
            if let Some(alias) = next.map(|w| w.trim_end_matches([',', ')'])) {
                if !alias.is_empty() && alias.chars().all(|c| c.is_ascii_lowercase()) {
                    names.push(alias);
                }
            }
        }
        names
    }

    /// The `detail` column of `EXPLAIN QUERY PLAN`, every parameter bound to a small
    /// JSON batch (SQLite picks the plan without looking at the values).
    async fn explain(conn: &mut sqlx::SqliteConnection, statement: &str) -> Vec<String> {
        let params = (1..=20)
            .filter(|n| statement.contains(&format!("?{n}")))
            .max()
            .unwrap_or(0);
        let explain = format!("EXPLAIN QUERY PLAN {statement}");
        let mut query = sqlx::query(&explain);
        for _ in 0..params {
            query = query.bind(r#"[[1, 2, "[]"]]"#);
        }
        query
            .fetch_all(conn)
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<String, _>("detail"))
            .collect()
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
