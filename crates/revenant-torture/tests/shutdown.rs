//! Graceful shutdown mid-run (RELIABILITY.md test 4), on SQLite and PostgreSQL:
//! SIGTERM one of two worker processes while its handlers are running, with a grace
//! period shorter than the jobs. It claims nothing after the signal, releases the
//! leases of the jobs it cancelled (back to `ready`, the attempt given back: released,
//! not left to expire), and exits 0; the other process finishes every job, none lost,
//! none with an attempt spent by the shutdown.

#[macro_use]
mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use revenant_torture::behaviour::{Mix, Plan};
use revenant_torture::fleet;
use revenant_torture::ledger::{self, now_micros, AckOp, AckResult, Event};
use support::*;

const QUEUE: &str = "torture";

async fn sigterm_mid_run_releases_running_leases_and_claims_nothing_after(backend: Backend) {
    let Some(db) = Db::new(backend).await else {
        return;
    };
    let jobs = scale(200, 2_000);
    let plan = Plan {
        seed: 2,
        mix: Mix::all_sleep(400),
    };
    let Fleet {
        ledger_dir,
        store,
        mut spec,
        ..
    } = {
        let fleet = Fleet::new(&db, QUEUE, plan).await;
        fleet.enqueue(jobs, 3).await;
        fleet
    };
    // Shorter than a job: the signalled worker must cancel and release.
    spec.grace_ms = 100;
    let mut stopping = spec.spawn(0).unwrap();
    let mut staying = spec.spawn(1).unwrap();

    // Wait until the worker to be stopped has handlers running.
    let deadline = Instant::now() + Duration::from_secs(60);
    let stopping_pid = stopping.pid();
    loop {
        let events = ledger::read_dir(&ledger_dir).unwrap();
        let running = events
            .iter()
            .filter(|e| matches!(e, Event::Start { pid, .. } if *pid == stopping_pid))
            .count();
        if running >= 10 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "worker {stopping_pid} never started jobs"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let signalled_at = now_micros();
    stopping.signal(Signal::SIGTERM).unwrap();
    let status = stopping.wait_exit(Duration::from_secs(30)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "after SIGTERM: {status:?}\n{}",
        stopping.log_tail(30)
    );

    let done = fleet::wait_finished(
        store.as_ref(),
        QUEUE,
        jobs as u64,
        Instant::now() + Duration::from_secs(120),
        Duration::from_millis(100),
        |_| {},
    )
    .await;
    assert_eq!(done, jobs as u64, "{}", staying.log_tail(30));
    let statuses =
        fleet::terminate_all(std::slice::from_mut(&mut staying), Duration::from_secs(30)).await;
    assert!(statuses[0].is_some_and(|s| s.success()));

    let events = ledger::read_dir(&ledger_dir).unwrap();
    let late_claims = events
        .iter()
        .filter(|e| matches!(e, Event::Claimed { pid, t0, .. } if *pid == stopping_pid && *t0 > signalled_at))
        .count();
    let ended: HashSet<(i64, i32)> = events
        .iter()
        .filter_map(|e| match e {
            Event::End {
                job, attempt, pid, ..
            } if *pid == stopping_pid => Some((*job, *attempt)),
            _ => None,
        })
        .collect();
    let cut_short = events
        .iter()
        .filter(|e| matches!(e, Event::Start { job, attempt, pid, .. } if *pid == stopping_pid && !ended.contains(&(*job, *attempt))))
        .count();
    // A claim in flight at the signal is released without starting: count claims.
    let unfinished = events
        .iter()
        .filter(|e| matches!(e, Event::Claimed { job, attempt, pid, .. } if *pid == stopping_pid && !ended.contains(&(*job, *attempt))))
        .count();
    let released = events
        .iter()
        .filter(|e| {
            matches!(e, Event::Ack { op: AckOp::Release, result: AckResult::Applied, pid, .. } if *pid == stopping_pid)
        })
        .count();
    let rows = fleet::final_jobs(store.as_ref(), QUEUE).await.unwrap();
    let report = revenant_torture::checker::check(&plan, &events, &rows);
    let measured = format!(
        "{cut_short} handlers cut short, {released} of {unfinished} unfinished leases released, \
         {late_claims} claims after the signal, {} extra attempts",
        report.extra_attempts
    );
    summary(Summary {
        test: "4 graceful shutdown",
        backend: backend.name(),
        jobs,
        faults: 1,
        fault_kind: "SIGTERM",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("shutdown: {measured}; {report}");
    assert_eq!(late_claims, 0, "claims after SIGTERM");
    assert!(
        cut_short > 0,
        "the grace period was shorter than the jobs: some were cut short"
    );
    assert_eq!(
        released, unfinished,
        "every unfinished claim's lease released"
    );
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed, jobs, "{report}");
    assert_eq!(
        report.extra_attempts, 0,
        "the shutdown spent no attempt: {report}"
    );
    assert_eq!(
        report.duplicates, cut_short,
        "each cut-short job ran once more: {report}"
    );
    db.cleanup().await;
}
on_both_backends!(sigterm_mid_run_releases_running_leases_and_claims_nothing_after);
