//! Poison (RELIABILITY.md tests 14 and 15), on SQLite and PostgreSQL, in worker
//! processes.
//!
//! - **Poison that panics** (14): about one job in fifty panics on every attempt. The
//!   worker processes survive every panic; each poison job is dead after its five
//!   attempts (`attempts_exhausted`, every error a `panic`); and the other jobs'
//!   throughput stays within 10% of a run without poison. Throughput is measured in
//!   the same test, alternating runs with and without poison (two pairs in the short
//!   form, three in the long one) and comparing the medians. On a two-core machine
//!   shared with compilers a few seconds' run varies by more than 10%, so the short
//!   form asserts within 25% and the long form (larger runs) the 10% of RELIABILITY.md;
//!   both print the figures.
//! - **Poison that aborts the process** (15): a few jobs call `abort()` on every
//!   attempt. The driver restarts each worker that dies. Each poison job causes at most
//!   max_attempts (5) crashes, then is dead with reason `lease_expired`; no other job
//!   is lost or dead.

#[macro_use]
mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use revenant::{DeadReason, FailureClass, JobState};
use revenant_torture::behaviour::{Behaviour, Plan};
use revenant_torture::fleet;
use revenant_torture::ledger::{Event, RunResult};
use support::*;

/// Jobs per second of the sleeping (non-poison) jobs: their count over the span from
/// the first handler start to the last of their handler ends.
fn throughput(plan: &Plan, events: &[Event]) -> f64 {
    let mut first = i64::MAX;
    let mut last = i64::MIN;
    let mut n = 0;
    for event in events {
        match event {
            Event::Start { t, .. } => first = first.min(*t),
            Event::End {
                job,
                result: RunResult::Ok,
                t,
                ..
            } if matches!(plan.behaviour(*job), Behaviour::Sleep { .. }) => {
                last = last.max(*t);
                n += 1;
            }
            _ => {}
        }
    }
    n as f64 / ((last - first).max(1) as f64 / 1e6)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

async fn poison_that_panics(backend: Backend) {
    let Some(db) = Db::new(backend).await else {
        return;
    };
    let jobs = scale(600, 4_000);
    let pairs = scale(2, 3);
    let clean = Plan::new(14, "sleep:1,sleep_ms:50");
    let poisoned = Plan::new(14, "sleep:49,poison_panic:1,sleep_ms:50");
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let mut poison_total = 0;
    let mut last_report = None;
    for round in 0..pairs * 2 {
        let plan = if round % 2 == 0 { clean } else { poisoned };
        let queue = format!("poison{round}");
        let mut fleet = Fleet::named(&db, &queue, plan, &queue).await;
        fleet.spec.concurrency = 8;
        fleet.spec.backoff_ms = 20;
        fleet.enqueue(jobs, 5).await;
        let mut workers = fleet.spawn(2);
        fleet
            .wait_finished(jobs, Duration::from_secs(scale(60, 300)), &workers)
            .await;
        assert_alive(&mut workers, "with poison panicking in it");
        stop_all(&mut workers).await;
        let (report, events) = fleet.check().await;
        assert!(report.is_safe(), "{report}");
        let rate = throughput(&plan, &events);
        if round % 2 == 0 {
            assert_eq!(report.completed, jobs, "{report}");
            without.push(rate);
            continue;
        }
        with.push(rate);
        let rows = fleet::all_jobs(fleet.store.as_ref(), &queue).await.unwrap();
        let poison: Vec<_> = rows
            .iter()
            .filter(|j| plan.behaviour(j.id) == Behaviour::AlwaysPanic)
            .collect();
        assert!(!poison.is_empty(), "the seed drew poison");
        for job in &poison {
            assert_eq!(
                (job.status, job.attempts, job.dead_reason),
                (JobState::Dead, 5, Some(DeadReason::AttemptsExhausted)),
                "{job:?}"
            );
            assert!(job.errors.iter().all(|e| e.class == FailureClass::Panic));
        }
        assert_eq!(report.completed, jobs - poison.len(), "{report}");
        poison_total += poison.len();
        last_report = Some(report);
    }
    let (base, poisoned_rate) = (median(&mut without), median(&mut with));
    let ratio = poisoned_rate / base;
    let bound = scale(0.75, 0.90);
    let report = last_report.expect("a poisoned round");
    let measured = format!(
        "other jobs' throughput {poisoned_rate:.0}/s with poison vs {base:.0}/s without \
         (ratio {ratio:.2}, asserted ≥ {bound}; runs without {without:.0?}, with {with:.0?}); \
         {poison_total} poison jobs dead after 5 panics each; no worker died"
    );
    summary(Summary {
        test: "14 poison that panics",
        backend: backend.name(),
        jobs: jobs * pairs * 2,
        faults: poison_total * 5,
        fault_kind: "panics",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert!(ratio >= bound, "{measured}");
    db.cleanup().await;
}
on_both_backends!(poison_that_panics);

async fn poison_that_aborts_the_process(backend: Backend) {
    let Some(db) = Db::new(backend).await else {
        return;
    };
    // Five attempts for every job: a job that shares a process with a poison on every
    // one of its attempts dies with it (docs/reliability.md), and with three attempts
    // the long form's 8 poison jobs (24 crashes) once took a neighbour along.
    const MAX_ATTEMPTS: i32 = 5;
    let jobs = scale(300, 3_000);
    // A few poison jobs in either form (the long form's first run, at 1% of 3,000,
    // had 38 of them crash the workers 113 times: a crash-loop no fleet sees, whose
    // collateral, jobs sharing a process with a poison on each of their attempts,
    // then died too).
    let plan = Plan::new(15, scale("succeed:99,abort:1", "succeed:499,abort:1"));
    let mut fleet = Fleet::new(&db, "torture", plan).await;
    fleet.spec.lease_ms = 1_000;
    fleet.spec.sweep_ms = Some(300);
    fleet.spec.concurrency = 4;
    let ids = fleet.enqueue(jobs, MAX_ATTEMPTS).await;
    let poison: HashSet<i64> = ids
        .iter()
        .copied()
        .filter(|id| plan.behaviour(*id) == Behaviour::Abort)
        .collect();
    assert!(!poison.is_empty(), "the seed drew poison");
    let mut workers = fleet.spawn(2);
    let mut crashed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(scale(60, 300));
    loop {
        for worker in workers.iter_mut() {
            if let Some(status) = worker.exited() {
                assert!(!status.success(), "a worker exited 0 by itself");
                crashed.push(worker.pid());
                *worker = fleet.spec.spawn(worker.index()).unwrap();
            }
        }
        let done = fleet::finished(fleet.store.as_ref(), "torture")
            .await
            .unwrap_or(0);
        if done >= jobs as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} done\n{}",
            logs(&workers)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop_all(&mut workers).await;
    let (report, events) = fleet.check().await;
    // The job each crashed process was running when it died: an abort job's start
    // with no end.
    let crashes_by_poison = crashed
        .iter()
        .filter(|pid| {
            events.iter().any(|e| {
                matches!(e, Event::Start { job, pid: p, .. } if p == *pid && poison.contains(job))
            })
        })
        .count();
    let rows = fleet::all_jobs(fleet.store.as_ref(), "torture")
        .await
        .unwrap();
    let dead_poison = rows
        .iter()
        .filter(|j| {
            poison.contains(&j.id)
                && j.status == JobState::Dead
                && j.dead_reason == Some(DeadReason::LeaseExpired)
                && j.attempts == MAX_ATTEMPTS
        })
        .count();
    let others_done = rows
        .iter()
        .filter(|j| !poison.contains(&j.id) && j.status == JobState::Completed)
        .count();
    let measured = format!(
        "{} poison jobs caused {} crashes (at most {} allowed), each crash by a poison job: \
         {}; poison dead lease_expired: {dead_poison}; other jobs completed: {others_done} \
         of {}",
        poison.len(),
        crashed.len(),
        poison.len() * MAX_ATTEMPTS as usize,
        crashes_by_poison == crashed.len(),
        jobs - poison.len()
    );
    summary(Summary {
        test: "15 poison that aborts",
        backend: backend.name(),
        jobs,
        faults: crashed.len(),
        fault_kind: "abort() in the handler",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert!(
        crashed.len() <= poison.len() * MAX_ATTEMPTS as usize,
        "{measured}"
    );
    assert!(crashed.len() >= MAX_ATTEMPTS as usize, "{measured}");
    assert_eq!(crashes_by_poison, crashed.len(), "{measured}");
    assert_eq!(dead_poison, poison.len(), "{measured}");
    assert_eq!(others_done, jobs - poison.len(), "{measured}");
    assert!(report.is_safe(), "{report}");
    db.cleanup().await;
}
on_both_backends!(poison_that_aborts_the_process);
