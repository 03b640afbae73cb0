//! Three `revenant work` processes on one PostgreSQL database run one every-second
//! schedule for more than a minute, and the jobs table holds exactly one job per tick:
//! no tick twice, none missed while the workers ran, even across a worker killed with
//! SIGKILL half-way and a replacement started.
//!
//! The check is on the table, not on timing: every periodic job carries its tick in
//! its unique key (`cron:<schedule>@<tick>`), so the test reads every tick enqueued and
//! asserts they are the consecutive seconds from the schedule's first tick to the
//! newest, each once, and that the schedule's `next_tick` is the second after the
//! newest (the compare-and-set and the insert commit together, even for a process
//! killed mid-round).
//!
//! The CLI keeps its tables in the `revenant` schema, so the test isolates itself with
//! a fresh database, dropped at the end. The server is `REVENANT_TEST_DATABASE_URL`;
//! without one the test says so and stops, except under `CI=true`, where a missing
//! PostgreSQL fails it.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::{Connection, Executor, PgConnection, Row};

/// Ticks to wait for: more than a minute of them.
const TICKS: usize = 65;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn worker(url: &str, id: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_revenant"))
        .args([
            "--database-url",
            url,
            "work",
            // The ticks' queue is not served: their jobs stay in the table to be
            // counted.
            "-q",
            "elsewhere",
            "--worker-id",
            id,
            "--grace",
            "1s",
        ])
        .env("REVENANT_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start revenant work")
}

fn revenant(url: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_revenant"))
        .args(["--database-url", url])
        .args(args)
        .output()
        .expect("run revenant");
    assert!(
        out.status.success(),
        "revenant {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

fn time(value: &serde_json::Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a time: {value}"))
}

/// Every tick enqueued for schedule `every-second`, in the order of the table, and the
/// number of its jobs.
async fn ticks(db: &mut PgConnection) -> (Vec<DateTime<Utc>>, usize) {
    let rows = db
        .fetch_all("SELECT unique_key FROM revenant.jobs WHERE queue = 'ticks' ORDER BY id")
        .await
        .unwrap();
    let ticks: Vec<DateTime<Utc>> = rows
        .iter()
        .map(|row| {
            let key: String = row.get(0);
            let tick = key
                .strip_prefix("cron:every-second@")
                .unwrap_or_else(|| panic!("a periodic job's key: {key}"));
            time(&serde_json::Value::from(tick))
        })
        .collect();
    let n = ticks.len();
    (ticks, n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_worker_processes_enqueue_exactly_one_job_per_tick() {
    let Ok(server) = std::env::var("REVENANT_TEST_DATABASE_URL") else {
        let message =
            "REVENANT_TEST_DATABASE_URL is not set: the multi-process cron test was NOT exercised";
        assert!(
            !in_ci(),
            "{message} (CI=true: PostgreSQL tests fail instead of skipping)"
        );
        eprintln!("\n!!!!!!!! {message}\n");
        return;
    };
    let mut admin = match PgConnection::connect(&server).await {
        Ok(conn) => conn,
        Err(err) => {
            let message = format!("PostgreSQL test server {server} does not answer: {err}");
            assert!(
                !in_ci(),
                "{message} (CI=true: PostgreSQL tests fail instead of skipping)"
            );
            eprintln!("\n!!!!!!!! SKIPPING: {message}\n");
            return;
        }
    };
    let name = format!(
        "rv_cron_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    let base = server
        .rsplit_once('/')
        .map_or(server.as_str(), |(base, _)| base);
    let url = format!("{base}/{name}");

    // A grace of 30 s: on a busy machine a round can be late by seconds, and a late
    // tick must still be enqueued, not treated as missed.
    let set = revenant(
        &url,
        &[
            "cron",
            "set",
            "every-second",
            "--cron",
            "* * * * * *",
            "--queue",
            "ticks",
            "--kind",
            "tick",
            "--grace",
            "30s",
            "--json",
        ],
    );
    let first = time(&set["next_tick"]);

    let mut workers = Workers((0..3).map(|i| worker(&url, &format!("cron-{i}"))).collect());
    let mut db = PgConnection::connect(&url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut killed = false;
    loop {
        let (_, n) = ticks(&mut db).await;
        if n >= TICKS {
            break;
        }
        if !killed && n >= TICKS / 3 {
            // A worker dies mid-run, as a crash would; another takes its place.
            let _ = workers.0[0].kill();
            let _ = workers.0[0].wait();
            workers.0[0] = worker(&url, "cron-3");
            killed = true;
        }
        assert!(
            Instant::now() < deadline,
            "only {n} ticks enqueued after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for child in &mut workers.0 {
        let _ = child.kill();
        let _ = child.wait();
    }

    let (ticks, n) = ticks(&mut db).await;
    let distinct: BTreeSet<DateTime<Utc>> = ticks.iter().copied().collect();
    assert_eq!(distinct.len(), n, "a tick enqueued twice: {ticks:?}");
    let newest = *distinct.last().unwrap();
    let expected: BTreeSet<DateTime<Utc>> = (0..)
        .map(|s| first + TimeDelta::seconds(s))
        .take_while(|t| *t <= newest)
        .collect();
    let missed: Vec<_> = expected.difference(&distinct).collect();
    assert!(
        missed.is_empty(),
        "ticks missed while workers ran: {missed:?}"
    );
    assert_eq!(distinct, expected, "ticks outside the schedule: {ticks:?}");
    assert!(n >= TICKS, "{n} ticks");

    let listed = revenant(&url, &["cron", "list", "--json"]);
    let record = &listed[0];
    assert_eq!(record["name"], "every-second");
    assert_eq!(time(&record["last_tick"]), newest);
    assert_eq!(
        time(&record["next_tick"]),
        newest + TimeDelta::seconds(1),
        "the schedule's next tick is the one after the newest job's, no more, no less"
    );
    eprintln!(
        "{n} ticks from {first} to {newest}, each enqueued once by three worker processes (one killed and replaced)"
    );

    drop(db);
    drop(workers);
    let _ = admin
        .execute(format!("DROP DATABASE {name} WITH (FORCE)").as_str())
        .await;
}
