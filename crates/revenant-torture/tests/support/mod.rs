//! What the torture tests share: the test PostgreSQL server and its fresh schemas, a
//! private throwaway cluster for restarts, counts that a local run may shrink, and the
//! drain scenario itself.
//!
//! The shared server is `REVENANT_TEST_DATABASE_URL`, else `DATABASE_URL`, else
//! `postgres://postgres@127.0.0.1:5432/postgres` (`scripts/ensure-postgres.sh` prints the
//! first). Under `CI=true` a server that does not answer fails the test; elsewhere the
//! test is skipped with a loud message.

#![allow(dead_code)] // Each test file uses part of this module.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use revenant_torture::behaviour::Plan;
use revenant_torture::checker::{self, Report};
use revenant_torture::fleet::{self, WorkerSpec};
use revenant_torture::{ledger, worker};
use sqlx::{Connection, PgConnection};

/// The worker binary Cargo built for these tests.
pub const WORKER_EXE: &str = env!("CARGO_BIN_EXE_revenant-torture-worker");

/// Connections per process: with the listener's own, 4 workers and the driver take
/// about 30 of a shared server's 100, leaving room for other tests.
pub const POOL: u32 = 5;

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `name` from the environment, else `default`. Only for shrinking a run locally: CI
/// leaves these unset and runs the figures.
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
    url: &str,
    schema: Option<&str>,
    processes: usize,
    jobs: usize,
    plan: Plan,
    deadline: Duration,
    dir: &Path,
) -> Drained {
    let ledger_dir = dir.join("ledger");
    let driver = fleet::driver_ledger(&ledger_dir).expect("the driver's ledger");
    let store = worker::connect(url, schema, Some(POOL))
        .await
        .expect("connect");
    let queue = "torture";

    let started = Instant::now();
    fleet::enqueue(store.as_ref(), queue, jobs, 1000, 3, Some(&driver))
        .await
        .expect("enqueue");
    let enqueue = started.elapsed();

    let mut spec = WorkerSpec::new(WORKER_EXE, url, queue);
    spec.schema = schema.map(str::to_string);
    spec.max_connections = Some(POOL);
    spec.plan = plan;
    spec.ledger_dir = Some(ledger_dir.clone());
    spec.log_dir = dir.join("logs");
    spec.poll_ms = 100;
    let started = Instant::now();
    let mut workers: Vec<_> = (0..processes)
        .map(|i| spec.spawn(i).expect("spawn a worker"))
        .collect();
    let done = fleet::wait_finished(
        store.as_ref(),
        queue,
        jobs as u64,
        started + deadline,
        Duration::from_millis(100),
        |_| {},
    )
    .await;
    let drain = started.elapsed();
    let logs = |workers: &[fleet::WorkerProcess]| {
        workers
            .iter()
            .map(|w| format!("--- worker pid {}:\n{}", w.pid(), w.log_tail(20)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for worker in &mut workers {
        assert!(
            worker.exited().is_none(),
            "worker {} exited during the run: {:?}\n{}",
            worker.pid(),
            worker.exited(),
            worker.log_tail(30)
        );
    }
    assert_eq!(
        done,
        jobs as u64,
        "only {done} of {jobs} jobs terminal after {drain:?}\n{}",
        logs(&workers)
    );
    let statuses = fleet::terminate_all(&mut workers, Duration::from_secs(30)).await;
    for (worker, status) in workers.iter().zip(&statuses) {
        assert!(
            status.is_some_and(|s| s.success()),
            "worker {} after SIGTERM: {status:?}\n{}",
            worker.pid(),
            worker.log_tail(30)
        );
    }

    let events = ledger::read_dir(&ledger_dir).expect("read the ledger");
    let rows = fleet::final_jobs(store.as_ref(), queue)
        .await
        .expect("read the job table");
    let report = checker::check(&plan, &events, &rows);
    Drained {
        report,
        enqueue,
        drain,
    }
}

/// Where a private cluster lives and how to drive it.
#[derive(Clone)]
pub struct Server {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
}

/// A private PostgreSQL cluster (initdb + pg_ctl, run as the `postgres` user when we
/// are root), stopped and removed on drop. Never the shared server: restarting that
/// would break every other test running against it. Same approach as
/// crates/revenant-postgres/tests/restart.rs.
pub struct Cluster(pub Server);

fn find_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .filter(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Runs a PostgreSQL binary, as the `postgres` user when we are root (initdb and the
/// server refuse to run as root).
fn run(bin: &Path, args: &[&str]) -> bool {
    let mut command = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    command
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Cluster {
    /// A started private cluster, or `None` when initdb/pg_ctl are missing or initdb
    /// fails.
    pub fn create() -> Option<Cluster> {
        let bin = find_bin()?;
        let dir = std::env::temp_dir().join(format!(
            "revenant-torture-pg-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).ok()?;
        if is_root() {
            Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status()
                .ok()?;
        }
        let data = dir.join("data");
        let ok = run(
            &bin.join("initdb"),
            &[
                "-D",
                data.to_str()?,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        );
        if !ok {
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
        let cluster = Cluster(Server {
            dir,
            bin,
            port: free_port(),
        });
        assert!(cluster.0.start(), "the private cluster starts");
        Some(cluster)
    }
}

impl Server {
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server and waits until it accepts connections (`pg_ctl -w`).
    pub fn start(&self) -> bool {
        let data = self.dir.join("data");
        let log = self.dir.join("server.log");
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        run(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap_or_default(),
                "-l",
                log.to_str().unwrap_or_default(),
                "-w",
                "-o",
                &options,
                "start",
            ],
        )
    }

    /// Stops the server (`fast`: disconnect everyone, roll back, shut down cleanly).
    pub fn stop(&self, mode: &str) -> bool {
        let data = self.dir.join("data");
        run(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap_or_default(),
                "-m",
                mode,
                "-w",
                "stop",
            ],
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.0.stop("immediate");
        let _ = std::fs::remove_dir_all(&self.0.dir);
    }
}

/// A fleet scenario on a fresh schema: jobs enqueued (three attempts each, recorded in
/// the driver's ledger) and a worker spec ready to spawn, at concurrency 10, with its
/// ledger and logs in a temporary directory.
pub struct Fleet {
    /// Holds the ledger and logs; removed when the fleet is dropped.
    pub dir: tempfile::TempDir,
    /// Where every process writes its ledger.
    pub ledger_dir: PathBuf,
    /// The test's own connection to the queue.
    pub store: std::sync::Arc<dyn revenant::Store>,
    /// The workers to spawn; tests adjust it before spawning.
    pub spec: WorkerSpec,
}

impl Fleet {
    /// Enqueues `jobs` jobs on `queue` and prepares the workers that run `plan`.
    pub async fn enqueue(db: &PgSchema, queue: &str, jobs: usize, plan: Plan) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let ledger_dir = dir.path().join("ledger");
        let driver = fleet::driver_ledger(&ledger_dir).unwrap();
        let store = worker::connect(&db.url, Some(&db.schema), Some(POOL))
            .await
            .unwrap();
        fleet::enqueue(store.as_ref(), queue, jobs, 1000, 3, Some(&driver))
            .await
            .unwrap();
        let mut spec = WorkerSpec::new(WORKER_EXE, &db.url, queue);
        spec.schema = Some(db.schema.clone());
        spec.max_connections = Some(POOL);
        spec.plan = plan;
        spec.concurrency = 10;
        spec.ledger_dir = Some(ledger_dir.clone());
        spec.log_dir = dir.path().join("logs");
        Fleet {
            dir,
            ledger_dir,
            store,
            spec,
        }
    }
}
