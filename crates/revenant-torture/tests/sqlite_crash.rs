//! SQLite process crashes under load, many cycles (RELIABILITY.md test 3): a worker
//! process that enqueues (small batches, back to back) and works at once is SIGKILLed
//! at a random moment, started again, killed again. Every enqueue it heard
//! acknowledged must survive (the ledger's `enqueued` lines), `PRAGMA integrity_check`
//! must answer `ok` after the crashes, and once a last worker drains the queue the
//! checker must find nothing lost, stuck or misclassified.
//!
//! An enqueue the process sent but died before hearing the answer of may or may not
//! have committed; a row from one is accepted only when its payload (producer pid, job
//! number) traces back to the `enqueuing` line of a process that was killed.
//!
//! SQLite only: it is the backend that lives in the crashing process (WAL,
//! `synchronous=FULL`); PostgreSQL's crash is the server's, covered by test 5.

mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use nix::sys::signal::Signal;
use revenant::JobState;
use revenant_torture::behaviour::{mix64, Plan};
use revenant_torture::checker::{self, FinalJob};
use revenant_torture::fleet;
use revenant_torture::ledger::Event;
use sqlx::{Connection, SqliteConnection};
use support::*;

const QUEUE: &str = "torture";

async fn integrity_check(path: &std::path::Path) -> String {
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("open the database file");
    let answer: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await
        .expect("integrity_check");
    let _ = conn.close().await;
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_enqueue_survives_repeated_kill_9_and_the_file_stays_intact() {
    let db = Db::new(Backend::Sqlite).await.expect("sqlite");
    let path = db.sqlite_path().unwrap();
    let cycles = scale(12, 150);
    let seed = 303;
    let plan = Plan::new(seed, "succeed:70,transient:20,permanent:10");
    let mut fleet = Fleet::new(&db, QUEUE, plan).await;
    fleet.spec.lease_ms = 1_000;
    fleet.spec.sweep_ms = Some(500);
    fleet.spec.concurrency = 8;
    let producing = vec![
        "--produce".to_string(),
        "1000000".into(),
        "--produce-batch".into(),
        "10".into(),
        "--produce-pause-ms".into(),
        "25".into(),
    ];
    fleet.spec.extra_args = producing;
    let mut killed = HashSet::new();
    let mut checks = Vec::new();
    for cycle in 0..cycles {
        let mut worker = fleet.spec.spawn(0).unwrap();
        let life = 150 + mix64(seed ^ cycle as u64) % 600;
        tokio::time::sleep(Duration::from_millis(life)).await;
        assert!(
            worker.exited().is_none(),
            "cycle {cycle}: the worker died by itself: {:?}\n{}",
            worker.exited(),
            worker.log_tail(30)
        );
        worker.signal(Signal::SIGKILL).unwrap();
        killed.insert(worker.pid());
        assert!(worker.wait_exit(Duration::from_secs(10)).await.is_some());
        if cycle % 4 == 3 || cycle + 1 == cycles {
            let answer = integrity_check(&path).await;
            assert_eq!(answer, "ok", "integrity_check after crash {}", cycle + 1);
            checks.push(answer);
        }
    }

    // A last worker, producing nothing, drains what the crashes left.
    fleet.spec.extra_args.clear();
    let mut workers = fleet.spawn(1);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let rows = loop {
        let rows = fleet::all_jobs(fleet.store.as_ref(), QUEUE).await.unwrap();
        if rows.iter().all(|j| j.status.is_terminal()) {
            break rows;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} jobs not terminal\n{}",
            rows.iter().filter(|j| !j.status.is_terminal()).count(),
            logs(&workers)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    stop_all(&mut workers).await;
    assert_eq!(integrity_check(&path).await, "ok", "after the drain");

    let events = fleet.events();
    let acknowledged: HashSet<i64> = enqueued_ids(&events).into_iter().collect();
    // Calls that were sent and never answered: (pid, job numbers).
    let mut open: HashMap<u32, Vec<(usize, usize)>> = HashMap::new();
    for event in &events {
        if let Event::Enqueuing {
            pid, first, count, ..
        } = event
        {
            open.entry(*pid).or_default().push((*first, *count));
        }
    }
    let mut indeterminate = Vec::new();
    let mut unexplained = Vec::new();
    for row in &rows {
        if acknowledged.contains(&row.id) {
            continue;
        }
        let pid = row.payload["pid"].as_u64().unwrap_or(0) as u32;
        let n = row.payload["n"].as_u64().unwrap_or(u64::MAX) as usize;
        let traced = killed.contains(&pid)
            && open
                .get(&pid)
                .is_some_and(|calls| calls.iter().any(|(f, c)| (*f..f + c).contains(&n)));
        if traced {
            indeterminate.push((row.id, row.max_attempts));
        } else {
            unexplained.push(row.id);
        }
    }
    let finals: Vec<FinalJob> = rows.iter().map(FinalJob::from).collect();
    let report = checker::check_with(&plan, &events, &finals, &indeterminate);
    let measured = format!(
        "{cycles} SIGKILLs of a producing worker; {} acknowledged enqueues, all present; \
         {} rows from enqueues cut short by a kill; integrity_check ok {} times; \
         {} completed, {} dead, {} attempts cut short",
        acknowledged.len(),
        indeterminate.len(),
        checks.len() + 1,
        rows.iter()
            .filter(|j| j.status == JobState::Completed)
            .count(),
        rows.iter().filter(|j| j.status == JobState::Dead).count(),
        report.interrupted
    );
    summary(Summary {
        test: "3 SQLite process crash",
        backend: "sqlite",
        jobs: rows.len(),
        faults: cycles,
        fault_kind: "SIGKILL of a producing worker",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert!(
        acknowledged.len() > cycles * 20,
        "the producer got going: {measured}"
    );
    assert!(
        unexplained.is_empty(),
        "rows no enqueue accounts for: {unexplained:?}"
    );
    assert!(
        indeterminate.len() <= cycles * 10,
        "at most one batch in flight per kill: {measured}"
    );
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.lost, 0, "{report}");
}
