//! What the torture tests share: the two backends (a temp SQLite file, a fresh schema
//! on the shared PostgreSQL server), a private throwaway cluster for restarts, the short
//! and long forms' sizes, a fleet of worker processes with its ledger, reading the
//! ledger, and the one summary line each test prints.
//!
//! The shared server is `REVENANT_TEST_DATABASE_URL`, else `DATABASE_URL`, else
//! `postgres://postgres@127.0.0.1:5432/postgres` (`scripts/ensure-postgres.sh` prints the
//! first). Under `CI=true` a server that does not answer fails the test; elsewhere the
//! test is skipped with a loud message.
//!
//! **Short and long forms.** Every test has a short form (seconds, what CI runs) and a
//! long form (minutes, RELIABILITY.md's sizes), picked by `REVENANT_TORTURE_LONG=1`
//! (`scripts/torture.sh --long` sets it). [`scale`] gives a count for each.

#![allow(dead_code, unused_imports, unused_macros)] // Each test file uses part of this module.

mod cluster;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use cluster::{Cluster, Server};
use revenant::Store;
use revenant_torture::behaviour::Plan;
use revenant_torture::checker::{self, Report};
use revenant_torture::fleet::{self, WorkerProcess, WorkerSpec};
use revenant_torture::ledger::{self, AckOp, AckResult, Event, LedgerWriter};
use revenant_torture::produce::{self, Shape};
use revenant_torture::worker;
use sqlx::{Connection, PgConnection};

/// The worker binary Cargo built for these tests.
pub const WORKER_EXE: &str = env!("CARGO_BIN_EXE_revenant-torture-worker");

/// Connections per process: with the listener's own, 4 workers and the driver take
/// about 30 of a shared server's 100, leaving room for other tests.
pub const POOL: u32 = 5;

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether this is the long form (`REVENANT_TORTURE_LONG=1`).
pub fn long() -> bool {
    std::env::var("REVENANT_TORTURE_LONG").is_ok_and(|v| v == "1" || v == "true")
}

/// `short` in the short form, `long` in the long form.
pub fn scale<T>(short: T, long_form: T) -> T {
    if long() {
        long_form
    } else {
        short
    }
}

/// `name` from the environment, else `default`. Only for shrinking a run locally: CI
/// leaves these unset.
pub fn count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The shared test server's URL.
pub fn database_url() -> String {
    std::env::var("REVENANT_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// A fresh schema on the shared server, named like revenant-postgres's test schemas
/// (`rv_test_<unix seconds>_<suffix>`) so its sweep of old schemas removes ours too.
pub struct PgSchema {
    pub url: String,
    pub schema: String,
}

impl PgSchema {
    /// `None`: skip (no server, outside CI). Panics under CI when no server answers.
    pub async fn new() -> Option<PgSchema> {
        let url = database_url();
        if let Err(err) = PgConnection::connect(&url).await {
            let message = format!(
                "PostgreSQL test server {url} does not answer: {err}. \
                 Run `eval \"$(scripts/ensure-postgres.sh)\"` or set REVENANT_TEST_DATABASE_URL."
            );
            if in_ci() {
                panic!("{message} (CI=true: PostgreSQL tests fail instead of skipping)");
            }
            eprintln!("\n!!!!!!!! SKIPPING PostgreSQL test: {message}\n");
            return None;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let schema = format!(
            "rv_test_{}_{:08x}{:08x}",
            now.as_secs(),
            std::process::id(),
            now.subsec_nanos()
        );
        Some(PgSchema { url, schema })
    }

    /// Drops the schema.
    pub async fn drop_schema(&self) {
        if let Ok(mut conn) = PgConnection::connect(&self.url).await {
            let _ = sqlx::raw_sql(&format!(
                "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
                self.schema
            ))
            .execute(&mut conn)
            .await;
        }
    }
}

/// The two backends every test runs on unless it says why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// One test's database and scratch directory (ledger, logs, the SQLite file).
pub struct Db {
    pub backend: Backend,
    pub url: String,
    pub schema: Option<String>,
    pub dir: tempfile::TempDir,
    pg: Option<PgSchema>,
}

impl Db {
    /// A fresh database; `None` when PostgreSQL is skipped (outside CI).
    pub async fn new(backend: Backend) -> Option<Db> {
        let dir = tempfile::tempdir().expect("a temp dir");
        match backend {
            Backend::Sqlite => Some(Db {
                backend,
                url: format!("sqlite://{}", dir.path().join("torture.db").display()),
                schema: None,
                dir,
                pg: None,
            }),
            Backend::Postgres => {
                let pg = PgSchema::new().await?;
                Some(Db {
                    backend,
                    url: pg.url.clone(),
                    schema: Some(pg.schema.clone()),
                    dir,
                    pg: Some(pg),
                })
            }
        }
    }

    /// The SQLite file, for SQLite.
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        if self.backend != Backend::Sqlite {
            return None;
        }
        let path = self.url.strip_prefix("sqlite://").map(PathBuf::from);
        Some(path.unwrap_or_else(|| self.dir.path().join("torture.db")))
    }

    /// Moves the SQLite database to `path` (another filesystem), before anything
    /// opens it; the ledger and logs stay in the scratch directory.
    pub fn sqlite_at(&mut self, path: &Path) {
        assert_eq!(self.backend, Backend::Sqlite);
        self.url = format!("sqlite://{}", path.display());
    }

    /// A connection of the test's own.
    pub async fn store(&self) -> Arc<dyn Store> {
        worker::connect(&self.url, self.schema.as_deref(), Some(POOL))
            .await
            .expect("connect")
    }

    /// Drops the PostgreSQL schema (the SQLite file goes with the directory).
    pub async fn cleanup(self) {
        if let Some(pg) = &self.pg {
            pg.drop_schema().await;
        }
    }
}

impl Drop for Db {
    /// `REVENANT_TORTURE_KEEP=1` keeps the ledger, logs and SQLite file of every test
    /// (failed ones included) for a post-mortem, and says where.
    fn drop(&mut self) {
        if std::env::var_os("REVENANT_TORTURE_KEEP").is_some() {
            let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("a temp dir"));
            eprintln!("kept {}", dir.keep().display());
        }
    }
}

/// Declares `mod $name { sqlite, postgres }`: one `#[tokio::test]` per backend, each
/// calling `async fn $name(Backend)` of the test file, so a failure names both.
macro_rules! on_both_backends {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(super::support::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(super::support::Backend::Postgres).await
            }
        }
    };
}

/// A fleet on one database: the driver's ledger, the test's store, and a worker spec
/// ready to spawn (concurrency 10, the test's pool size), with its ledger and logs in
/// the database's scratch directory.
pub struct Fleet {
    pub ledger_dir: PathBuf,
    pub driver: Arc<LedgerWriter>,
    pub store: Arc<dyn Store>,
    pub spec: WorkerSpec,
    pub queue: String,
}

impl Fleet {
    pub async fn new(db: &Db, queue: &str, plan: Plan) -> Fleet {
        Fleet::named(db, queue, plan, "ledger").await
    }

    /// A fleet with its own ledger directory `ledger` (several fleets on one database).
    pub async fn named(db: &Db, queue: &str, plan: Plan, ledger: &str) -> Fleet {
        let ledger_dir = db.dir.path().join(ledger);
        let driver = fleet::driver_ledger(&ledger_dir).expect("the driver's ledger");
        let store = db.store().await;
        let mut spec = WorkerSpec::new(WORKER_EXE, &db.url, queue);
        spec.schema = db.schema.clone();
        spec.max_connections = Some(POOL);
        spec.plan = plan;
        spec.concurrency = 10;
        spec.poll_ms = 100;
        spec.ledger_dir = Some(ledger_dir.clone());
        spec.log_dir = db.dir.path().join("logs");
        Fleet {
            ledger_dir,
            driver,
            store,
            spec,
            queue: queue.to_string(),
        }
    }

    /// Enqueues `n` jobs with `max_attempts`, recorded in the driver's ledger.
    pub async fn enqueue(&self, n: usize, max_attempts: i32) -> Vec<i64> {
        self.enqueue_shaped(&Shape::plain(&self.queue, max_attempts), n)
            .await
    }

    pub async fn enqueue_shaped(&self, shape: &Shape, n: usize) -> Vec<i64> {
        produce::produce(
            self.store.as_ref(),
            shape,
            n,
            1000,
            Duration::ZERO,
            Some(&self.driver),
        )
        .await
        .expect("enqueue")
    }

    /// Starts processes `0..n`.
    pub fn spawn(&self, n: usize) -> Vec<WorkerProcess> {
        (0..n)
            .map(|i| self.spec.spawn(i).expect("spawn a worker"))
            .collect()
    }

    /// Polls until `target` jobs are terminal; fails the test past `limit`, with the
    /// workers' logs.
    pub async fn wait_finished(&self, target: usize, limit: Duration, workers: &[WorkerProcess]) {
        let done = fleet::wait_finished(
            self.store.as_ref(),
            &self.queue,
            target as u64,
            Instant::now() + limit,
            Duration::from_millis(100),
            |_| {},
        )
        .await;
        assert!(
            done >= target as u64,
            "only {done} of {target} jobs terminal after {limit:?}\n{}",
            logs(workers)
        );
    }

    pub fn events(&self) -> Vec<Event> {
        ledger::read_dir(&self.ledger_dir).expect("read the ledger")
    }

    /// The checker's report over the whole ledger and the queue's rows.
    pub async fn check(&self) -> (Report, Vec<Event>) {
        let events = self.events();
        let rows = fleet::final_jobs(self.store.as_ref(), &self.queue)
            .await
            .expect("read the job table");
        (checker::check(&self.spec.plan, &events, &rows), events)
    }
}

/// The last lines of every worker's log.
pub fn logs(workers: &[WorkerProcess]) -> String {
    workers
        .iter()
        .map(|w| format!("--- worker pid {}:\n{}", w.pid(), w.log_tail(20)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts no worker has exited.
pub fn assert_alive(workers: &mut [WorkerProcess], when: &str) {
    for worker in workers.iter_mut() {
        assert!(
            worker.exited().is_none(),
            "worker {} exited {when}: {:?}\n{}",
            worker.pid(),
            worker.exited(),
            worker.log_tail(30)
        );
    }
}

/// SIGTERMs every worker; each must exit 0.
pub async fn stop_all(workers: &mut [WorkerProcess]) {
    let statuses = fleet::terminate_all(workers, Duration::from_secs(30)).await;
    for (worker, status) in workers.iter().zip(&statuses) {
        assert!(
            status.is_some_and(|s| s.success()),
            "worker {} after SIGTERM: {status:?}\n{}",
            worker.pid(),
            worker.log_tail(30)
        );
    }
}

/// Polls `events` of the ledger until `done` holds, or fails past `limit`.
pub async fn wait_ledger(
    ledger_dir: &Path,
    what: &str,
    limit: Duration,
    done: impl Fn(&[Event]) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        let events = ledger::read_dir(ledger_dir).unwrap_or_default();
        if done(&events) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Handler starts by `pid`.
pub fn starts_by(events: &[Event], pid: u32) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::Start { pid: p, .. } if *p == pid))
        .count()
}

/// The claims `pid` held at the end of its ledger: (job, attempt, token) claimed with
/// no applied complete, fail or release of that lease.
pub fn held_by(events: &[Event], pid: u32) -> Vec<(i64, i32, i64)> {
    let settled: HashSet<(i64, i64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Ack {
                op: AckOp::Complete | AckOp::Fail | AckOp::Release,
                job,
                token,
                result: AckResult::Applied,
                ..
            } => Some((*job, *token)),
            _ => None,
        })
        .collect();
    events
        .iter()
        .filter_map(|e| match e {
            Event::Claimed {
                job,
                attempt,
                token,
                pid: p,
                ..
            } if *p == pid && !settled.contains(&(*job, *token)) => Some((*job, *attempt, *token)),
            _ => None,
        })
        .collect()
}

/// Claims per job: (attempt, pid, return time, database time), in ledger order.
pub fn claims_by_job(events: &[Event]) -> HashMap<i64, Vec<(i32, u32, i64, i64)>> {
    let mut map: HashMap<i64, Vec<(i32, u32, i64, i64)>> = HashMap::new();
    for event in events {
        if let Event::Claimed {
            job,
            attempt,
            pid,
            t,
            db_t,
            ..
        } = event
        {
            map.entry(*job)
                .or_default()
                .push((*attempt, *pid, *t, *db_t));
        }
    }
    map
}

/// Jobs a row of the driver's `Enqueued` lines covers, in order.
pub fn enqueued_ids(events: &[Event]) -> Vec<i64> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Enqueued { ids, .. } => Some(ids.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Microseconds as a Duration (negative as zero).
pub fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// The figures one test reports: one line `TORTURE-SUMMARY {json}` on stderr, also
/// appended to `$REVENANT_TORTURE_SUMMARY` when set (scripts/torture.sh collects them
/// into the table of docs/reliability.md).
pub struct Summary<'a> {
    /// RELIABILITY.md's test number and a short name.
    pub test: &'a str,
    pub backend: &'a str,
    pub jobs: usize,
    /// Faults injected, and what they were.
    pub faults: usize,
    pub fault_kind: &'a str,
    pub report: &'a Report,
    /// Figures particular to the test, in words.
    pub measured: String,
}

pub fn summary(s: Summary<'_>) {
    let r = s.report;
    let line = serde_json::json!({
        "test": s.test,
        "backend": s.backend,
        "form": if long() { "long" } else { "short" },
        "jobs": s.jobs,
        "faults": s.faults,
        "fault_kind": s.fault_kind,
        "lost": r.lost,
        "unexpected": r.unexpected,
        "stuck": r.stuck,
        "misclassified": r.misclassified,
        "late_ack_accepted": r.late_ack_accepted,
        "lease_overlap": r.lease_overlap,
        "duplicates": r.duplicates,
        "interrupted": r.interrupted,
        "measured": s.measured,
    });
    eprintln!("TORTURE-SUMMARY {line}");
    if let Ok(path) = std::env::var("REVENANT_TORTURE_SUMMARY") {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "{line}");
        }
    }
}

/// What a drain run measured.
pub struct Drained {
    pub report: Report,
    pub enqueue: Duration,
    pub drain: Duration,
}

/// The drain scenario on any backend: enqueue `jobs` jobs of `plan` in bulk (recorded
/// in the ledger), start `processes` worker processes, poll until every job is terminal
/// (or `deadline` passes: the test fails, naming what is missing), stop the workers with
/// SIGTERM (each must exit 0), and check the ledger against the job table.
pub async fn drain(
    db: &Db,
    processes: usize,
    jobs: usize,
    plan: Plan,
    deadline: Duration,
) -> Drained {
    let mut fleet = Fleet::new(db, "torture", plan).await;
    fleet.spec.concurrency = 50;
    let started = Instant::now();
    fleet.enqueue(jobs, 3).await;
    let enqueue = started.elapsed();
    let started = Instant::now();
    let mut workers = fleet.spawn(processes);
    fleet.wait_finished(jobs, deadline, &workers).await;
    let drain = started.elapsed();
    assert_alive(&mut workers, "during the run");
    stop_all(&mut workers).await;
    let (report, _) = fleet.check().await;
    Drained {
        report,
        enqueue,
        drain,
    }
}
