//! Workers that stall past their leases (RELIABILITY.md tests 7 and 8), on SQLite and
//! PostgreSQL, with real processes.
//!
//! - **Slow handler, no heartbeat** (7): a worker with heartbeats off runs N jobs whose
//!   handlers outlive the lease (each returns once another worker has claimed its job).
//!   The second worker claims every one of them, and only once its lease has expired
//!   by the database's clock (its `attempted_at` is not before the first claim's
//!   `lease_expires_at`). The stalled worker's N acks are all rejected (0 of N
//!   applied), and each job's history records the lost lease.
//! - **SIGSTOP** (8): a worker whose heartbeats are holding its leases is frozen with
//!   SIGSTOP. Another worker claims its jobs once the leases expire, and not before,
//!   and completes them. After SIGCONT the frozen worker's attempts are over: none of
//!   its handlers returns (they are cancelled), none of its acks is applied, and it
//!   lives on (exits 0 on SIGTERM).
//!
//! (Heartbeats holding a lease for ten lease lengths is
//! `crates/revenant/tests/runtime_leases.rs`.)

#[macro_use]
mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use nix::sys::signal::Signal;
use revenant::{FailureClass, JobState};
use revenant_torture::behaviour::Plan;
use revenant_torture::fleet;
use revenant_torture::ledger::{now_micros, AckOp, AckResult, Event};
use support::*;

const QUEUE: &str = "torture";

/// Whether another process can take the SQLite file's write lock within half a second.
async fn writable(path: &std::path::Path) -> bool {
    use sqlx::sqlite::SqliteConnectOptions;
    use sqlx::{ConnectOptions, Connection};
    let Ok(mut conn) = SqliteConnectOptions::new()
        .filename(path)
        .busy_timeout(Duration::from_millis(500))
        .connect()
        .await
    else {
        return false;
    };
    let ok = sqlx::raw_sql("BEGIN IMMEDIATE; ROLLBACK;")
        .execute(&mut conn)
        .await
        .is_ok();
    let _ = conn.close().await;
    ok
}

async fn a_stalled_handler_loses_its_lease_and_its_late_ack_is_rejected(backend: Backend) {
    let Some(db) = Db::new(backend).await else {
        return;
    };
    let jobs = scale(20, 200);
    // Attempt 1 stalls until the job is claimed again; attempt 2 succeeds.
    let plan = Plan::new(7, "stall:1");
    let mut fleet = Fleet::new(&db, QUEUE, plan).await;
    fleet.enqueue(jobs, 3).await;
    // Claims lease 600 ms; the kind's own lease (attempt timeout half of it) is set by
    // the first heartbeat, so a worker without heartbeats keeps the 600 ms lease and
    // overruns it, and its attempts do not time out before the rescue.
    fleet.spec.lease_ms = 600;
    // A claim takes at most one expired lease, and a worker whose claim came back
    // short waits a poll interval before the next: 200 stalled leases take the rescuer
    // about 200 × 100 ms (docs/reliability.md, open issues), hence the long timeout.
    fleet.spec.kind_lease_ms = Some(scale(20_000, 80_000));
    fleet.spec.concurrency = jobs;
    let mut stalled_spec = fleet.spec.clone();
    stalled_spec.heartbeats = false;
    let stalled = stalled_spec.spawn(0).unwrap();
    let stalled_pid = stalled.pid();
    wait_ledger(
        &fleet.ledger_dir,
        "the stalled worker to start every job",
        Duration::from_secs(30),
        |events| starts_by(events, stalled_pid) >= jobs,
    )
    .await;
    let rescuer = fleet.spec.spawn(1).unwrap();
    let mut both = [stalled, rescuer];
    fleet
        .wait_finished(jobs, Duration::from_secs(60), &both)
        .await;
    wait_ledger(
        &fleet.ledger_dir,
        "the stalled worker's late acks",
        Duration::from_secs(30),
        |events| {
            let stalled: HashSet<i64> = events
                .iter()
                .filter_map(|e| match e {
                    Event::Claimed { attempt: 1, token, pid, .. } if *pid == stalled_pid => {
                        Some(*token)
                    }
                    _ => None,
                })
                .collect();
            events
                .iter()
                .filter(|e| matches!(e, Event::Ack { op: AckOp::Complete | AckOp::Fail, token, result: AckResult::LeaseLost | AckResult::Applied, .. } if stalled.contains(token)))
                .count()
                >= jobs
        },
    )
    .await;
    assert_alive(&mut both, "during the run");
    stop_all(&mut both).await;

    let (report, events) = fleet.check().await;
    // The stalled attempts: attempt 1 of each job, claimed by the stalled worker (once
    // its stalls end it claims like any worker, and those later acks are its own).
    let mut first_lease: HashMap<i64, i64> = HashMap::new();
    let mut stalled_tokens = HashSet::new();
    for event in &events {
        if let Event::Claimed {
            job,
            attempt: 1,
            token,
            pid,
            lease_until,
            ..
        } = event
        {
            if *pid == stalled_pid {
                first_lease.insert(*job, *lease_until);
                stalled_tokens.insert(*token);
            }
        }
    }
    let mut late = (0, 0);
    for event in &events {
        if let Event::Ack {
            op: AckOp::Complete | AckOp::Fail,
            token,
            result,
            ..
        } = event
        {
            if stalled_tokens.contains(token) {
                match result {
                    AckResult::Applied => late.0 += 1,
                    _ => late.1 += 1,
                }
            }
        }
    }
    let mut early = Vec::new();
    let mut margin = i64::MAX;
    for event in &events {
        if let Event::Claimed {
            job,
            attempt: 2,
            db_t,
            ..
        } = event
        {
            {
                let expired = first_lease.get(job).copied().unwrap_or(i64::MAX);
                margin = margin.min(db_t - expired);
                if *db_t < expired {
                    early.push(*job);
                }
            }
        }
    }
    let rows = fleet::all_jobs(fleet.store.as_ref(), QUEUE).await.unwrap();
    let recorded = rows
        .iter()
        .filter(|j| {
            j.errors
                .iter()
                .any(|e| e.attempt == 1 && e.class == FailureClass::LeaseExpired)
        })
        .count();
    let measured = format!(
        "{} of {jobs} stale acks applied, {} rejected; reclaims at least {:.0?} after the \
         lease expired by database time; {recorded} histories record the lost lease",
        late.0,
        late.1,
        micros(margin)
    );
    summary(Summary {
        test: "7 slow handler past its lease",
        backend: backend.name(),
        jobs,
        faults: jobs,
        fault_kind: "handler runs 2.5 leases without heartbeat",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert_eq!(late, (0, jobs), "{measured}");
    assert!(
        early.is_empty(),
        "claimed before the lease expired: {early:?}"
    );
    assert_eq!(first_lease.len(), jobs);
    assert_eq!(recorded, jobs, "{measured}");
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed, jobs, "{report}");
    assert!(rows
        .iter()
        .all(|j| j.status == JobState::Completed && j.attempts == 2));
    assert_eq!(report.duplicates, jobs, "each job ran twice: {report}");
    db.cleanup().await;
}
on_both_backends!(a_stalled_handler_loses_its_lease_and_its_late_ack_is_rejected);

async fn a_sigstopped_worker_loses_its_leases_and_after_sigcont_its_acks_are_rejected(
    backend: Backend,
) {
    let Some(db) = Db::new(backend).await else {
        return;
    };
    // A handful in the long form too: on SQLite every heartbeat is a write, and a few
    // hundred of them must not push the freeze past the attempts' timeout.
    let jobs = scale(10, 30);
    // Attempt 1 runs until the runtime stops it; attempt 2 succeeds.
    let plan = Plan::new(8, "timeout:1,max_transient:1");
    let mut fleet = Fleet::new(&db, QUEUE, plan).await;
    fleet.enqueue(jobs, 3).await;
    const LEASE_MS: u64 = 3_000;
    fleet.spec.lease_ms = LEASE_MS;
    fleet.spec.heartbeat_ms = Some(300);
    // Frozen well before its attempts could time out, even on a loaded machine.
    fleet.spec.attempt_timeout_ms = Some(LEASE_MS - 100);
    fleet.spec.concurrency = jobs;
    let frozen = fleet.spec.spawn(0).unwrap();
    let frozen_pid = frozen.pid();
    // Freeze it once its handlers run and a heartbeat has renewed every lease.
    wait_ledger(
        &fleet.ledger_dir,
        "the worker to start every job and beat once",
        Duration::from_secs(30),
        |events| {
            starts_by(events, frozen_pid) >= jobs
                && events
                    .iter()
                    .filter(|e| matches!(e, Event::Ack { op: AckOp::Heartbeat, result: AckResult::Applied, pid, .. } if *pid == frozen_pid))
                    .count()
                    >= jobs
        },
    )
    .await;
    // SQLite: a process frozen inside a write transaction holds the file's write lock,
    // and every other process waits until it resumes (SQLite's locking; see
    // docs/reliability.md). Freeze it at a moment it holds no lock, as a stall in the
    // handler would: if the database stays locked, thaw, let it finish, try again.
    let mut refrozen = 0;
    loop {
        frozen.signal(Signal::SIGSTOP).unwrap();
        match db.sqlite_path() {
            Some(path) if !writable(&path).await => {
                frozen.signal(Signal::SIGCONT).unwrap();
                refrozen += 1;
                assert!(refrozen < 50, "never caught the worker outside a write");
                tokio::time::sleep(Duration::from_millis(37)).await;
            }
            _ => break,
        }
    }
    let stopped_at = now_micros();
    let rescuer = fleet.spec.spawn(1).unwrap();
    let rescuer_pid = rescuer.pid();
    let mut both = [frozen, rescuer];
    fleet
        .wait_finished(jobs, Duration::from_secs(60), &both)
        .await;
    let stopped_for = micros(now_micros() - stopped_at);
    // Read before the signal: the resumed worker may run (and answer) before this
    // thread is scheduled again, and it can start nothing while it is stopped.
    let resumed_at = now_micros();
    both[0].signal(Signal::SIGCONT).unwrap();
    // Every one of its attempts must learn it is over: a rejected heartbeat or ack.
    let told = |events: &[Event]| -> HashSet<i64> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Ack {
                    job,
                    pid,
                    result: AckResult::LeaseLost,
                    t0,
                    ..
                } if *pid == frozen_pid && *t0 >= resumed_at => Some(*job),
                _ => None,
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let events = revenant_torture::ledger::read_dir(&fleet.ledger_dir).unwrap_or_default();
        if told(&events).len() >= jobs {
            break;
        }
        if std::time::Instant::now() >= deadline {
            // What the resumed worker did do, to tell a hang from a slow machine.
            let since: Vec<String> = events
                .iter()
                .filter(|e| match e {
                    Event::Ack { pid, t0, .. } => *pid == frozen_pid && *t0 >= resumed_at,
                    _ => false,
                })
                .map(|e| format!("{e:?}"))
                .collect();
            panic!(
                "timed out waiting for the resumed worker to find its leases lost: {} of {jobs} \
                 told; its acks since SIGCONT:\n{}\n{}",
                told(&events).len(),
                since.join("\n"),
                logs(&both)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_alive(&mut both, "after SIGSTOP and SIGCONT");
    stop_all(&mut both).await;

    let (report, events) = fleet.check().await;
    let last_beat: HashMap<i64, i64> = events.iter().fold(HashMap::new(), |mut map, e| {
        if let Event::Ack {
            op: AckOp::Heartbeat,
            job,
            pid,
            result: AckResult::Applied,
            t0,
            ..
        } = e
        {
            if *pid == frozen_pid {
                let at = map.entry(*job).or_insert(*t0);
                *at = (*at).max(*t0);
            }
        }
        map
    });
    let mut margin = i64::MAX;
    for event in &events {
        if let Event::Claimed { job, pid, t, .. } = event {
            if *pid == rescuer_pid {
                let expires = last_beat.get(job).copied().unwrap_or(0) + (LEASE_MS as i64) * 1000;
                margin = margin.min(t - expires);
            }
        }
    }
    let applied_after = events
        .iter()
        .filter(|e| matches!(e, Event::Ack { op: AckOp::Complete | AckOp::Fail, pid, result: AckResult::Applied, .. } if *pid == frozen_pid))
        .count();
    let ended = events
        .iter()
        .filter(|e| matches!(e, Event::End { pid, .. } if *pid == frozen_pid))
        .count();
    let measured = format!(
        "frozen {stopped_for:.1?}; the other worker's claims came at least {:.0?} after the \
         frozen worker's last heartbeat + lease; after SIGCONT {applied_after} of its acks \
         applied and {ended} of its handlers returned; {refrozen} freezes retried (SQLite \
         write lock held)",
        micros(margin)
    );
    summary(Summary {
        test: "8 SIGSTOP and SIGCONT",
        backend: backend.name(),
        jobs,
        faults: 1,
        fault_kind: "SIGSTOP past the lease",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert!(
        margin >= 0,
        "reclaimed before the lease expired: {measured}"
    );
    assert_eq!(applied_after, 0, "{measured}");
    assert_eq!(ended, 0, "the frozen handlers were cancelled: {measured}");
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed, jobs, "{report}");
    assert_eq!(report.interrupted, jobs, "{report}");
    db.cleanup().await;
}
on_both_backends!(a_sigstopped_worker_loses_its_leases_and_after_sigcont_its_acks_are_rejected);
