//! Several worker processes drain one queue: every job completes exactly once, checked
//! against the ledger the processes wrote (issue 4: "four worker processes on one
//! database drain 50,000 jobs: every job completes exactly once, none is claimed by two
//! live leases"). The SQLite variant proves the harness on the other backend.
//!
//! `REVENANT_TORTURE_DRAIN_JOBS` / `REVENANT_TORTURE_SQLITE_JOBS` shrink the counts
//! for a quick local run; CI leaves them unset.

mod support;

use std::time::Duration;

use revenant_torture::behaviour::Plan;
use support::{count, drain, Backend, Db};

fn assert_exactly_once(report: &revenant_torture::checker::Report, jobs: usize) {
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.enqueued, jobs, "{report}");
    assert_eq!(report.completed, jobs, "every job completed: {report}");
    assert_eq!(report.runs, jobs, "one handler run per job: {report}");
    assert_eq!(report.duplicates, 0, "{report}");
    assert_eq!(report.extra_attempts, 0, "one attempt per job: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_drain_50000_jobs_exactly_once() {
    let Some(db) = Db::new(Backend::Postgres).await else {
        return;
    };
    let jobs = count("REVENANT_TORTURE_DRAIN_JOBS", 50_000);
    let drained = drain(&db, 4, jobs, Plan::default(), Duration::from_secs(300)).await;
    eprintln!(
        "postgres, 4 processes, {jobs} jobs: enqueue {:?}, drain {:?} ({:.0} jobs/s, debug build)\n{}",
        drained.enqueue,
        drained.drain,
        jobs as f64 / drained.drain.as_secs_f64(),
        drained.report
    );
    assert_exactly_once(&drained.report, jobs);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_processes_drain_a_sqlite_queue_exactly_once() {
    let db = Db::new(Backend::Sqlite).await.expect("sqlite");
    let jobs = count("REVENANT_TORTURE_SQLITE_JOBS", 10_000);
    let drained = drain(&db, 2, jobs, Plan::default(), Duration::from_secs(180)).await;
    eprintln!(
        "sqlite, 2 processes, {jobs} jobs: enqueue {:?}, drain {:?} ({:.0} jobs/s, debug build)\n{}",
        drained.enqueue,
        drained.drain,
        jobs as f64 / drained.drain.as_secs_f64(),
        drained.report
    );
    assert_exactly_once(&drained.report, jobs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_processes_end_a_seeded_mix_where_the_seed_predicts() {
    let Some(db) = Db::new(Backend::Postgres).await else {
        return;
    };
    let jobs = count("REVENANT_TORTURE_MIX_JOBS", 3_000);
    // max_transient 3 with 3 attempts: a third of the transient jobs die exhausted.
    let plan = Plan {
        seed: 11,
        mix: "succeed:80,transient:15,permanent:5,max_transient:3"
            .parse()
            .unwrap(),
    };
    let drained = drain(&db, 2, jobs, plan, Duration::from_secs(180)).await;
    let report = &drained.report;
    eprintln!(
        "postgres, 2 processes, seeded mix of {jobs}: drain {:?}\n{report}",
        drained.drain
    );
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed + report.dead, jobs, "{report}");
    assert!(
        report.dead > jobs / 20,
        "permanent and exhausted jobs died: {report}"
    );
    assert!(
        report.runs > jobs,
        "transient jobs ran more than once: {report}"
    );
    assert_eq!(report.duplicates, 0, "{report}");
    assert_eq!(report.extra_attempts, 0, "{report}");
    db.cleanup().await;
}
