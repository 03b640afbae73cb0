//! revenant through its public API: `revenant::connect(url)` (`PgStore::connect_with`,
//! to hold the pool open, where W3 and W5 measure pickup on PostgreSQL under
//! `--profile tuned`), `Store::job_enqueue`, and a [`Worker`] with a no-op handler.
//! Also the store loop (`--system store`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use revenant::backoff::{Backoff, Jitter};
use revenant::policy::{PolicySet, RetryPolicy};
use revenant::runtime::{JobContext, JobError, Worker};
use revenant::store::{
    JobClaimParams, JobCompleteParams, JobEnqueueParams, JobFilter, JobListParams, LeaseRef,
};
use revenant::{JobState, NewJob, Store};
use serde_json::json;

use crate::ceiling::Conn;
use crate::protocol::{self, Io, Progress};
use crate::{Args, Profile, Task};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The kind of every benchmark job.
pub const KIND: &str = "noop";
/// W2's attempt budget.
const MAX_ATTEMPTS: i32 = 5;
/// How often a drain looks at the queue's counts (and so the resolution of its end)
/// while jobs keep starting, before any has, and in a long pause in starts.
pub const POLL: Duration = Duration::from_millis(50);
/// How long no job may have started in this process before a drain looks for its end
/// at [`END_POLL`] instead of [`POLL`] (see [`LastStart`]).
pub const QUIET: Duration = Duration::from_millis(5);
/// How long after the last start a drain keeps looking at [`END_POLL`]: a drain's
/// results are written within about 20 ms of its last start, while a pause in starts
/// that lasts longer is a retry's backoff (W2; graphile-worker's is seconds), which
/// would otherwise be polled every 2 ms throughout.
pub const QUIET_END: Duration = Duration::from_millis(100);
/// How often a drain looks at the queue's counts between [`QUIET`] and [`QUIET_END`]
/// after the last start.
pub const END_POLL: Duration = Duration::from_millis(2);

pub async fn connect(args: &Args) -> Result<Arc<dyn Store>, Error> {
    match pg_min_connections(args) {
        Some(min) => {
            let options = revenant::postgres::PgStoreOptions {
                min_connections: min,
                ..revenant::postgres::PgStoreOptions::default()
            };
            Ok(Arc::new(
                revenant::postgres::PgStore::connect_with(&args.url, options).await?,
            ))
        }
        None => Ok(revenant::connect(&args.url).await?),
    }
}

fn is_postgres(args: &Args) -> bool {
    matches!(
        revenant::Backend::from_url(&args.url),
        Ok(revenant::Backend::Postgres)
    )
}

/// `--profile tuned`'s PostgreSQL pool for the workloads that measure pickup (W3's
/// `latency`, W5's `scale`): held open at its size, as `PgStoreOptions::min_connections`'
/// docs advise for a worker that must pick up bursts quickly. `None`: the library's
/// default (a pool that connects as needed), for the drains (throughput, where those
/// docs advise nothing: in a drain of 20,000 jobs, 0.6 s, the ten connections opening
/// at its start cost about a tenth of its rate, medians of 3 pairs 30,755 against
/// 33,936 jobs/s) and every SQLite URL.
fn pg_min_connections(args: &Args) -> Option<u32> {
    let pickup = matches!(args.task, Task::Latency | Task::Scale);
    (is_postgres(args) && pickup && args.profile == Profile::Tuned)
        .then(|| revenant::postgres::PgStoreOptions::default().max_connections)
}

/// A worker builder with the settings every task shares: `--concurrency` slots, a 2 s
/// shutdown grace, claiming ahead as many jobs as it has slots under `--profile tuned`
/// (the default), and the runtime's defaults unless `--claim-cooldown-ms`,
/// `--poll-interval-ms`, `--vacuum-interval-ms` or `--retention-s` say otherwise.
pub fn builder(store: Arc<dyn Store>, args: &Args) -> revenant::runtime::WorkerBuilder {
    let mut builder = Worker::builder(store)
        .queue(&args.queue, args.concurrency)
        .shutdown_grace(Duration::from_secs(2));
    if let Some(jobs) = claim_ahead(args) {
        builder = builder.claim_ahead(jobs);
    }
    if let Some(ms) = args.claim_cooldown_ms {
        builder = builder.claim_cooldown(Duration::from_millis(ms));
    }
    if let Some(ms) = args.poll_interval_ms {
        builder = builder.poll_interval(Duration::from_millis(ms.max(1)));
    }
    if args.vacuum_interval_ms.is_some() || args.retention_s.is_some() {
        let defaults = revenant::runtime::MaintenanceConfig::default();
        builder = builder.maintenance(revenant::runtime::MaintenanceConfig {
            vacuum_interval: args
                .vacuum_interval_ms
                .map_or(defaults.vacuum_interval, |ms| {
                    (ms > 0).then(|| Duration::from_millis(ms))
                }),
            retention: args
                .retention_s
                .map_or(defaults.retention, Duration::from_secs),
            ..defaults
        });
    }
    builder
}

/// `--profile tuned`'s claim-ahead buffer: what `WorkerBuilder::claim_ahead`'s docs
/// give for many short jobs, the most it allows. The buffer is refilled at half, so a
/// claim brings about 500 jobs, as graphile-worker's local queue of 500 does.
const TUNED_CLAIM_AHEAD: usize = revenant::runtime::MAX_CLAIM_AHEAD;

/// The claim-ahead buffer `--claim-ahead` or `--profile` gives, `None` for the
/// library's default.
fn claim_ahead(args: &Args) -> Option<usize> {
    if args.claim_ahead.is_some() {
        return args.claim_ahead;
    }
    match args.profile {
        Profile::Tuned => Some(TUNED_CLAIM_AHEAD),
        Profile::Defaults => None,
    }
}

/// The worker's settings, printed with a drain's figures so the results say what ran.
pub fn settings(args: &Args) -> serde_json::Value {
    let ms = |v: Option<u64>| v.map_or_else(|| json!("default"), |v| json!(v));
    let mut settings = json!({
        "profile": match args.profile {
            Profile::Tuned => "tuned",
            Profile::Defaults => "defaults",
        },
        "concurrency": args.concurrency,
        "claim_ahead": claim_ahead(args).map_or_else(|| json!("0 (default)"), |n| json!(n)),
        "claim_cooldown_ms": ms(args.claim_cooldown_ms),
        "poll_interval_ms": ms(args.poll_interval_ms),
        "job_ms": args.job_ms,
        "allocator": crate::ALLOCATOR_NAME,
    });
    if is_postgres(args) {
        settings["vacuum_interval_ms"] = match args.vacuum_interval_ms {
            None => json!("default"),
            Some(0) => json!("0 (off: autovacuum alone)"),
            Some(ms) => json!(ms),
        };
        if args.task == Task::Scale {
            settings["retention_s"] = args
                .retention_s
                .map_or_else(|| json!("default (24 h)"), |s| json!(s));
        }
        settings["min_connections"] =
            pg_min_connections(args).map_or_else(|| json!("0 (default)"), |n| json!(n));
    }
    settings
}

/// Enqueues `--jobs` jobs whose payloads `payload(i)` gives, `--batch` per call.
async fn enqueue_jobs(
    store: &dyn Store,
    args: &Args,
    max_attempts: i32,
    payload: impl Fn(usize) -> serde_json::Value,
    progress: &mut Progress,
    deadline: tokio::time::Instant,
) -> Result<usize, Error> {
    let batch = args.batch.max(1);
    let mut done = 0;
    while done < args.jobs && tokio::time::Instant::now() < deadline {
        let n = batch.min(args.jobs - done);
        store
            .job_enqueue(JobEnqueueParams {
                jobs: (done..done + n)
                    .map(|i| NewJob::new(&args.queue, KIND, payload(i)))
                    .collect(),
                default_max_attempts: max_attempts,
                now: None,
            })
            .await?;
        done += n;
        progress.tick(done as u64);
    }
    Ok(done)
}

/// `enqueue`: no-op jobs, one at a time or in batches.
pub async fn enqueue(args: &Args) -> Result<serde_json::Value, Error> {
    let store = connect(args).await?;
    let deadline = args.deadline();
    let mut progress = Progress::new(args.jobs as u64);
    let started = Instant::now();
    let done = enqueue_jobs(
        store.as_ref(),
        args,
        3,
        |_| json!({}),
        &mut progress,
        deadline,
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(json!({
        "enqueued": done,
        "seconds": seconds,
        "per_sec": done as f64 / seconds,
        "partial": done < args.jobs,
    }))
}

/// The count queries this process ran (`polls` in a drain's figures and W2's: W4 takes
/// them out of the commits it charges to the system).
static POLLS: AtomicU64 = AtomicU64::new(0);

/// The harness's own look at a queue, on a connection of its own: whether any job is
/// not finished yet (two index probes, every poll: on PostgreSQL the ready one is the
/// first entry of the claim's index, in the claim's order, so the plan cannot be a
/// sequential scan; see below) and, once a second and at the end,
/// how many are not and how many are dead (through the indexes the claim and the
/// dead-letter list use). Not `Store::queue_stats`: that is the dashboard's query, a
/// dozen figures over every job the queue kept (completed ones included); polled
/// every 50 ms during a drain it took 47 ms a call on 60,000 jobs, half of one of
/// the machine's two cores, and the revenant figures were measured beside it. A
/// count of the unfinished jobs at every poll still took 10 ms a call.
pub struct Counter(Conn);

impl Counter {
    pub async fn open(url: &str) -> Result<Counter, Error> {
        Ok(Counter(crate::ceiling::connect(url).await?))
    }

    /// Whether any job of the queue is not finished.
    ///
    /// On PostgreSQL the ready probe is a scalar subquery in the claim index's order, not
    /// an `EXISTS`: the planner drops an `EXISTS` subquery's `ORDER BY` and `LIMIT`, and
    /// with statistics taken after the bulk enqueue (every row ready) it chose a
    /// sequential scan for the first ready row, which stops at the first match. During
    /// a drain the jobs at the table's start are the finished ones, so each poll walked
    /// every job finished so far: 136 scans reading 4.0 million rows in one drain of
    /// 100,000 jobs, about 5% of the server's CPU, taken from the system measured.
    async fn any_left(&self, queue: &str) -> Result<bool, Error> {
        POLLS.fetch_add(1, Ordering::Relaxed);
        let (left,): (bool,) = match &self.0 {
            Conn::Pg(pool) => {
                sqlx::query_as(
                    "SELECT (SELECT id FROM revenant.jobs WHERE status = 'ready' AND queue = $1
                             ORDER BY priority DESC, run_at, id LIMIT 1) IS NOT NULL
                         OR EXISTS (SELECT 1 FROM revenant.jobs WHERE status = 'running' AND queue = $1)",
                )
                .bind(queue)
                .fetch_one(pool)
                .await?
            }
            Conn::Sqlite(pool) => {
                // One probe per state, each by its partial index (`+queue` keeps the
                // running probe off `jobs_queue`, which holds every job of the queue).
                sqlx::query_as(
                    "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = ?1 AND status = 'ready')
                         OR EXISTS (SELECT 1 FROM jobs WHERE +queue = ?1 AND status = 'running')",
                )
                .bind(queue)
                .fetch_one(pool)
                .await?
            }
        };
        Ok(left)
    }

    /// Whether any job of the queue is due and not finished: ready with `run_at` past
    /// (at priority 0, every benchmark job's, so the probe walks only due entries of
    /// the claim index and none of the jobs scheduled for later), or running.
    pub async fn any_due_left(&self, queue: &str) -> Result<bool, Error> {
        POLLS.fetch_add(1, Ordering::Relaxed);
        let (left,): (bool,) = match &self.0 {
            Conn::Pg(pool) => {
                sqlx::query_as(
                    "SELECT (SELECT id FROM revenant.jobs WHERE status = 'ready' AND queue = $1
                             AND priority = 0 AND run_at <= now()
                             ORDER BY priority DESC, run_at, id LIMIT 1) IS NOT NULL
                         OR EXISTS (SELECT 1 FROM revenant.jobs WHERE status = 'running' AND queue = $1)",
                )
                .bind(queue)
                .fetch_one(pool)
                .await?
            }
            Conn::Sqlite(pool) => {
                sqlx::query_as(
                    "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = ?1 AND status = 'ready'
                                      AND priority = 0 AND run_at <= ?2)
                         OR EXISTS (SELECT 1 FROM jobs WHERE +queue = ?1 AND status = 'running')",
                )
                .bind(queue)
                .bind(chrono::Utc::now().timestamp_millis())
                .fetch_one(pool)
                .await?
            }
        };
        Ok(left)
    }

    /// (not finished, dead) jobs of the queue.
    async fn counts(&self, queue: &str) -> Result<(u64, u64), Error> {
        POLLS.fetch_add(1, Ordering::Relaxed);
        let (left, dead): (i64, i64) = match &self.0 {
            Conn::Pg(pool) => {
                sqlx::query_as(
                    "SELECT (SELECT count(*) FROM revenant.jobs WHERE status = 'ready' AND queue = $1)
                          + (SELECT count(*) FROM revenant.jobs WHERE status = 'running' AND queue = $1),
                            (SELECT count(*) FROM revenant.jobs WHERE status = 'dead' AND queue = $1)",
                )
                .bind(queue)
                .fetch_one(pool)
                .await?
            }
            Conn::Sqlite(pool) => {
                sqlx::query_as(
                    "SELECT (SELECT count(*) FROM jobs WHERE queue = ?1 AND status = 'ready')
                          + (SELECT count(*) FROM jobs WHERE +queue = ?1 AND status = 'running'),
                            (SELECT count(*) FROM jobs WHERE queue = ?1 AND status = 'dead')",
                )
                .bind(queue)
                .fetch_one(pool)
                .await?
            }
        };
        Ok((
            u64::try_from(left).unwrap_or(0),
            u64::try_from(dead).unwrap_or(0),
        ))
    }
}

/// When a job last started in this process. A drain's last jobs finish a few
/// milliseconds after the last one starts (their completion writes), so the drain looks
/// for its end every [`END_POLL`] from [`QUIET`] to [`QUIET_END`] after the last start,
/// rather than every [`POLL`]: at 50 ms, a drain of 20,000 jobs that takes 0.4 s is
/// measured up to 50 ms (12%) long, 25 ms on average, and W2's clean drains of 5,000
/// jobs (0.12 to 0.21 s) up to a third long, while the ceilings, which know when their
/// loop ends, are not. Past [`QUIET_END`] it is back to [`POLL`]: a pause in starts that
/// long is a retry's backoff, not the end, and costs at most about 50 quick looks.
/// Every peer's driver does the same (`bench/node/common.mjs`, `bench/python`,
/// `bench/rust-peers`). Polling every 2 ms all along would load the server under test
/// with the harness's own queries.
#[derive(Debug, Default)]
pub struct LastStart(AtomicU64);

impl LastStart {
    /// A job started now.
    pub fn mark(&self) {
        self.mark_at(micros());
    }

    /// A job started at `now` ([`micros`]); 0 in the atomic means none has yet.
    fn mark_at(&self, now: u64) {
        self.0.store(now + 1, Ordering::Relaxed);
    }

    /// Whether a drain that last looked at its counts `since_look` ago looks again at
    /// `now` ([`micros`]): every [`END_POLL`] from [`QUIET`] to [`QUIET_END`] after the
    /// last start, else every [`POLL`] (before any start, while jobs keep starting, and
    /// in a longer pause).
    fn look_at(&self, now: u64, since_look: Duration) -> bool {
        let last = self.0.load(Ordering::Relaxed);
        let since_start = Duration::from_micros(now.saturating_sub(last.saturating_sub(1)));
        let near_end = last != 0 && (QUIET..QUIET_END).contains(&since_start);
        since_look >= POLL || (near_end && since_look >= END_POLL)
    }
}

/// Waits until the `target` jobs of the queue (all its jobs: each task's queue holds
/// only the jobs it enqueued) are finished or the deadline passes; returns the last
/// (completed, dead) counts and when the queue was first seen finished (the drain's
/// end: the counts read after it are not timed, as a peer's driver reads its counts in
/// the look that sees it finished). Nothing cancels a benchmark job, so what is
/// finished and not dead is completed. The counts are looked at when
/// [`LastStart::look_at`] says.
async fn wait_finished(
    counter: &Counter,
    queue: &str,
    target: u64,
    deadline: tokio::time::Instant,
    progress: &mut Progress,
    starts: &LastStart,
) -> Result<(u64, u64, Instant), Error> {
    let mut counted = Instant::now();
    loop {
        let done = !counter.any_left(queue).await? || tokio::time::Instant::now() >= deadline;
        let looked = Instant::now();
        if done || counted.elapsed() >= Duration::from_secs(1) {
            counted = Instant::now();
            let (left, dead) = counter.counts(queue).await?;
            let finished = target.saturating_sub(left);
            progress.tick(finished);
            if done {
                return Ok((finished.saturating_sub(dead), dead, looked));
            }
        }
        let polled = Instant::now();
        loop {
            tokio::time::sleep(END_POLL).await;
            if starts.look_at(micros(), polled.elapsed()) {
                break;
            }
        }
    }
}

/// A started worker and the handle that stops it.
pub struct Running {
    handle: revenant::runtime::ShutdownHandle,
    task: tokio::task::JoinHandle<Result<(), revenant::runtime::WorkerError>>,
}

impl Running {
    pub fn start(worker: Worker) -> Running {
        let handle = worker.shutdown_handle();
        let task = tokio::spawn(worker.run_until(std::future::pending()));
        Running { handle, task }
    }

    pub async fn stop(self) -> Result<(), Error> {
        self.handle.shutdown();
        self.task.await??;
        Ok(())
    }
}

/// `drain`: a worker with `--concurrency` slots and a handler that does nothing (or
/// waits `--job-ms`) until `--jobs` jobs of the queue are finished.
pub async fn drain(args: &Args) -> Result<serde_json::Value, Error> {
    let store = connect(args).await?;
    let counts = Counter::open(&args.url).await?;
    let deadline = args.deadline();
    let mut progress = Progress::new(args.jobs as u64);
    let handled = Arc::new(AtomicU64::new(0));
    let counter = handled.clone();
    let starts = Arc::new(LastStart::default());
    let last_start = starts.clone();
    let job_time = Duration::from_millis(args.job_ms);
    let io = Io::now();
    let started_at = unix_seconds();
    let started = Instant::now();
    let worker = builder(store.clone(), args)
        .handler_fn(KIND, move |_ctx: JobContext, _p: serde_json::Value| {
            counter.fetch_add(1, Ordering::Relaxed);
            last_start.mark();
            async move {
                if !job_time.is_zero() {
                    tokio::time::sleep(job_time).await;
                }
                Ok(())
            }
        })
        .build()?;
    let running = Running::start(worker);
    let (completed, dead, ended) = wait_finished(
        &counts,
        &args.queue,
        args.jobs as u64,
        deadline,
        &mut progress,
        &starts,
    )
    .await?;
    let seconds = ended.duration_since(started).as_secs_f64();
    // On the same clock as `started_at`, at the same end as `seconds`.
    let ended_at = unix_seconds() - ended.elapsed().as_secs_f64();
    running.stop().await?;
    Ok(protocol::merge(
        json!({
            "completed": completed,
            "dead": dead,
            "handled_here": handled.load(Ordering::Relaxed),
            "polls": POLLS.load(Ordering::Relaxed),
            "seconds": seconds,
            "per_sec": completed as f64 / seconds,
            "started_at": started_at,
            "ended_at": ended_at,
            "partial": completed + dead < args.jobs as u64,
            "settings": settings(args),
        }),
        Io::now().since(io),
    ))
}

/// `drain` with `--system store`: `job_claim_run(concurrency)` (the claim the runtime
/// makes) then `job_complete` of what was claimed, in a loop, until a claim comes back
/// empty. No runtime.
pub async fn store_drain(args: &Args) -> Result<serde_json::Value, Error> {
    let store = connect(args).await?;
    let deadline = args.deadline();
    let mut progress = Progress::new(args.jobs as u64);
    let io = Io::now();
    let started_at = unix_seconds();
    let started = Instant::now();
    let worker = format!("store-loop-{}", std::process::id());
    let mut done = 0_u64;
    while tokio::time::Instant::now() < deadline {
        let claimed = store
            .job_claim_run(JobClaimParams {
                queue: args.queue.clone(),
                worker: worker.clone(),
                limit: u32::try_from(args.concurrency.max(1)).unwrap_or(u32::MAX),
                lease: Duration::from_secs(60),
                reclaim: true,
                now: None,
            })
            .await?;
        if claimed.is_empty() {
            break;
        }
        let leases = claimed
            .iter()
            .map(|j| LeaseRef {
                id: j.id,
                lease_token: j.lease_token,
            })
            .collect::<Vec<_>>();
        done += leases.len() as u64;
        store
            .job_complete(JobCompleteParams {
                leases,
                kept: Vec::new(),
                now: None,
            })
            .await?;
        progress.tick(done);
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(protocol::merge(
        json!({
            "completed": done,
            "seconds": seconds,
            "per_sec": done as f64 / seconds,
            "started_at": started_at,
            "ended_at": unix_seconds(),
            "partial": done < args.jobs as u64,
        }),
        Io::now().since(io),
    ))
}

/// Whether attempt `attempt` of job `i` fails: poison jobs always; the others in
/// `fail_percent` of attempts, decided by a hash of (i, attempt) so every run and every
/// system sees the same pattern, and never on the last allowed attempt, so that only
/// the poison jobs can end dead.
pub fn attempt_fails(i: u64, attempt: u32, fail_percent: u32, poison_every: u64) -> bool {
    if poison_every > 0 && i % poison_every == 0 {
        return true;
    }
    attempt < MAX_ATTEMPTS as u32
        && splitmix(i.wrapping_mul(31).wrapping_add(u64::from(attempt))) % 100
            < u64::from(fail_percent)
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `failures` (W2): enqueue `--jobs` jobs, then drain them while attempts fail: backoff
/// `--backoff-base-ms` doubling to `--backoff-cap-ms` (1 ms and 1 ms by default), equal
/// jitter, at most 5 attempts. Checks that the dead jobs are exactly the poison ones.
pub async fn failures(args: &Args) -> Result<serde_json::Value, Error> {
    // Built first: a backoff it refuses is refused before anything is enqueued.
    let policy = RetryPolicy::builder()
        .max_attempts(MAX_ATTEMPTS as u32)
        .backoff(Backoff::new(
            Duration::from_millis(backoff_base_ms(args)),
            2.0,
            Duration::from_millis(backoff_cap_ms(args)),
        )?)
        .jitter(Jitter::Equal)
        .build()?;
    let store = connect(args).await?;
    let counts = Counter::open(&args.url).await?;
    let deadline = args.deadline();
    let mut progress = Progress::new(args.jobs as u64);
    enqueue_jobs(
        store.as_ref(),
        args,
        MAX_ATTEMPTS,
        |i| json!({ "i": i }),
        &mut Progress::new(args.jobs as u64),
        deadline,
    )
    .await?;
    crate::ceiling::analyze(&args.url).await?;
    let attempts = Arc::new(AtomicU64::new(0));
    let counter = attempts.clone();
    let starts = Arc::new(LastStart::default());
    let last_start = starts.clone();
    let (fail_percent, poison_every) = (args.fail_percent, args.poison_every as u64);
    let started = Instant::now();
    let worker = builder(store.clone(), args)
        .policies(PolicySet::new(policy))
        .handler_fn(KIND, move |ctx: JobContext, p: serde_json::Value| {
            counter.fetch_add(1, Ordering::Relaxed);
            last_start.mark();
            let i = p["i"].as_u64().unwrap_or(0);
            let attempt = u32::try_from(ctx.attempt()).unwrap_or(0);
            let fails = attempt_fails(i, attempt, fail_percent, poison_every);
            async move {
                if fails {
                    Err(JobError::retry("planned transient failure"))
                } else {
                    Ok(())
                }
            }
        })
        .build()?;
    let running = Running::start(worker);
    let (completed, dead, ended) = wait_finished(
        &counts,
        &args.queue,
        args.jobs as u64,
        deadline,
        &mut progress,
        &starts,
    )
    .await?;
    let seconds = ended.duration_since(started).as_secs_f64();
    running.stop().await?;

    let dead_ids = dead_payload_indexes(store.as_ref(), &args.queue).await?;
    let expected_dead = if poison_every == 0 {
        0
    } else {
        (0..args.jobs as u64)
            .filter(|i| i % poison_every == 0)
            .count() as u64
    };
    let dead_ok = dead_ids.len() as u64 == expected_dead
        && dead_ids
            .iter()
            .all(|i| poison_every > 0 && i % poison_every == 0);
    Ok(json!({
        "completed": completed,
        "dead": dead,
        "expected_dead": expected_dead,
        "dead_are_exactly_the_poison_jobs": dead_ok,
        "attempts": attempts.load(Ordering::Relaxed),
        "polls": POLLS.load(Ordering::Relaxed),
        "seconds": seconds,
        "per_sec": completed as f64 / seconds,
        "partial": completed + dead < args.jobs as u64,
        "settings": failure_settings(args),
    }))
}

/// W2's settings: the drain's, and the retry backoff.
fn failure_settings(args: &Args) -> serde_json::Value {
    let mut settings = settings(args);
    settings["backoff"] = json!(format!(
        "{} ms doubling to {} ms, equal jitter",
        backoff_base_ms(args),
        backoff_cap_ms(args)
    ));
    settings
}

/// W2's backoff base: 1 ms unless `--backoff-base-ms` says otherwise, the shortest the
/// library allows (a base must be above zero).
fn backoff_base_ms(args: &Args) -> u64 {
    args.backoff_base_ms.unwrap_or(1)
}

/// W2's backoff cap: the base unless `--backoff-cap-ms` says otherwise.
fn backoff_cap_ms(args: &Args) -> u64 {
    args.backoff_cap_ms.unwrap_or_else(|| backoff_base_ms(args))
}

/// The payload index `i` of every dead job of the queue.
async fn dead_payload_indexes(store: &dyn Store, queue: &str) -> Result<Vec<u64>, Error> {
    let mut out = Vec::new();
    let mut before_id = None;
    loop {
        let page = store
            .job_list(JobListParams {
                filter: JobFilter {
                    queue: Some(queue.to_string()),
                    statuses: Some(vec![JobState::Dead]),
                    ..JobFilter::default()
                },
                before_id,
                limit: 10_000,
            })
            .await?;
        let Some(last) = page.last() else {
            return Ok(out);
        };
        before_id = Some(last.id);
        out.extend(page.iter().filter_map(|j| j.payload["i"].as_u64()));
    }
}

/// Microseconds since the first call in this process: the clock of W3's payloads.
pub fn micros() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_micros() as u64
}

pub fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `latency` (W3): a worker with `--concurrency` slots; for each rate, jobs arrive
/// open-loop (each enqueue its own task at its scheduled time, whether or not the last
/// one returned) for `--seconds`; each job carries the time just before its enqueue
/// call, and the handler records its start minus that.
pub async fn latency(args: &Args) -> Result<serde_json::Value, Error> {
    let store = connect(args).await?;
    let deadline = args.deadline();
    let samples: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::new()));
    let sink = samples.clone();
    micros();
    let worker = builder(store.clone(), args)
        .handler_fn(KIND, move |_ctx: JobContext, p: serde_json::Value| {
            let started = micros();
            let enqueued = p["t"].as_u64().unwrap_or(started);
            if let Ok(mut samples) = sink.lock() {
                samples.push(started.saturating_sub(enqueued) as f64 / 1000.0);
            }
            async { Ok(()) }
        })
        .build()?;
    let running = Running::start(worker);
    // Let the worker register and start listening before the first arrival.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let total: u64 = args
        .rates
        .iter()
        .map(|r| (r * args.seconds).round() as u64)
        .sum();
    let mut progress = Progress::new(total);
    let mut results = Vec::new();
    let mut expected = 0_u64;
    for &rate in &args.rates {
        let n = (rate * args.seconds).round() as u64;
        let first = expected as usize;
        expected += n;
        let start = tokio::time::Instant::now();
        let mut producers = Vec::new();
        for k in 0..n {
            let at = start + Duration::from_secs_f64(k as f64 / rate);
            if at >= deadline {
                break;
            }
            tokio::time::sleep_until(at).await;
            let store = store.clone();
            let queue = args.queue.clone();
            producers.push(tokio::spawn(async move {
                let job = NewJob::new(queue, KIND, json!({ "t": micros() }));
                store
                    .job_enqueue(JobEnqueueParams {
                        jobs: vec![job],
                        default_max_attempts: 3,
                        now: None,
                    })
                    .await
            }));
            progress.tick(samples.lock().map(|s| s.len() as u64).unwrap_or(0));
        }
        let arrivals = start.elapsed().as_secs_f64();
        for producer in producers {
            producer.await??;
        }
        // Wait for this rate's jobs to start (or the time limit).
        loop {
            let seen = samples.lock().map(|s| s.len() as u64).unwrap_or(0);
            progress.tick(seen);
            if seen >= expected || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut mine = samples
            .lock()
            .map(|s| s.get(first..).unwrap_or_default().to_vec())
            .unwrap_or_default();
        mine.sort_by(f64::total_cmp);
        results.push(json!({
            "rate": rate,
            "jobs": n,
            "started": mine.len(),
            "achieved_rate": n as f64 / arrivals.max(1e-9),
            "p50_ms": protocol::percentile(&mine, 50.0),
            "p99_ms": protocol::percentile(&mine, 99.0),
            "max_ms": mine.last().copied().unwrap_or(0.0),
        }));
    }
    running.stop().await?;
    Ok(json!({ "rates": results }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_looks_quickly_only_between_quiet_and_quiet_end_after_the_last_start() {
        let ms = Duration::from_millis;
        let at = |since_start: Duration| 1_000_000 + since_start.as_micros() as u64;
        let starts = LastStart::default();
        // No job has started yet: every POLL.
        assert!(!starts.look_at(at(ms(50)), END_POLL));
        assert!(!starts.look_at(at(ms(50)), POLL - ms(1)));
        assert!(starts.look_at(at(ms(50)), POLL));

        starts.mark_at(at(ms(0)));
        for since_start in [ms(0), ms(4), QUIET_END, ms(101), ms(2_000)] {
            // Jobs still starting, or a pause past QUIET_END (a retry's backoff): every POLL.
            assert!(
                !starts.look_at(at(since_start), END_POLL),
                "{since_start:?}"
            );
            assert!(
                !starts.look_at(at(since_start), POLL - ms(1)),
                "{since_start:?}"
            );
            assert!(starts.look_at(at(since_start), POLL), "{since_start:?}");
        }
        for since_start in [QUIET, ms(20), QUIET_END - ms(1)] {
            // Near the drain's end: every END_POLL.
            assert!(!starts.look_at(at(since_start), ms(1)), "{since_start:?}");
            assert!(starts.look_at(at(since_start), END_POLL), "{since_start:?}");
        }

        // A new start moves the window.
        starts.mark_at(at(ms(1_000)));
        assert!(!starts.look_at(at(ms(1_002)), END_POLL));
        assert!(starts.look_at(at(ms(1_010)), END_POLL));
        assert!(!starts.look_at(at(ms(1_100)), END_POLL));
    }

    #[test]
    fn only_poison_jobs_fail_their_last_attempt_and_about_30_percent_of_others_fail() {
        let (mut attempts, mut failed) = (0_u32, 0_u32);
        for i in 1..10_000_u64 {
            if i % 100 == 0 {
                assert!((1..=5).all(|a| attempt_fails(i, a, 30, 100)));
                continue;
            }
            assert!(!attempt_fails(i, 5, 30, 100));
            for a in 1..=5 {
                attempts += 1;
                if attempt_fails(i, a, 30, 100) {
                    failed += 1;
                } else {
                    break;
                }
            }
        }
        let share = f64::from(failed) / f64::from(attempts);
        assert!((0.27..0.33).contains(&share), "{share}");
    }
}
