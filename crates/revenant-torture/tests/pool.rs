//! The connection pool exhausted by handlers (RELIABILITY.md test 6), on SQLite and
//! PostgreSQL.
//!
//! PostgreSQL: two worker processes with a pool of 3 connections each run 12 handlers
//! at a time, and every handler takes a connection of that same pool (the one
//! `PgStore::pool()` hands the application for its own queries) and keeps it while it
//! works. Handlers queue for connections; heartbeats and acks must still get through:
//! no heartbeat or ack answered `lease_lost`, no attempt cut short, no job run twice.
//!
//! SQLite: the store has one writer connection and a few readers; handlers keep every
//! reader busy with their own reads the whole time. Heartbeats and acks are writes and
//! must get through the same way.

#[macro_use]
mod support;

use std::time::Duration;

use revenant_torture::behaviour::Plan;
use revenant_torture::ledger::{AckOp, AckResult, Event};
use support::*;

const QUEUE: &str = "torture";

async fn heartbeats_and_acks_get_through_a_pool_exhausted_by_handlers(backend: Backend) {
    let Some(db) = Db::new(backend).await else {
        return;
    };
    let jobs = scale(300, 5_000);
    let plan = Plan::new(6, "hold:1,hold_ms:100");
    let mut fleet = Fleet::new(&db, QUEUE, plan).await;
    fleet.spec.max_connections = Some(3);
    fleet.spec.concurrency = 12;
    // Heartbeats every 50 ms compete with the handlers for the pool all the time. The
    // lease is what a heartbeat may take to get through: at 800 ms, SQLite on a
    // machine kept busy by other work (scripts/busy.sh) lost 1 to 5 leases a run to
    // writes that waited that long, with the pool doing its job; 4 s keeps the test
    // about the pool, not about the machine's speed.
    fleet.spec.lease_ms = 4_000;
    fleet.spec.attempt_timeout_ms = Some(3_000);
    fleet.spec.heartbeat_ms = Some(50);
    fleet.enqueue(jobs, 3).await;
    let mut workers = fleet.spawn(2);
    fleet
        .wait_finished(jobs, Duration::from_secs(scale(120, 900)), &workers)
        .await;
    assert_alive(&mut workers, "during the run");
    stop_all(&mut workers).await;

    let (report, events) = fleet.check().await;
    let count = |op: AckOp, result: AckResult| {
        events
            .iter()
            .filter(
                |e| matches!(e, Event::Ack { op: o, result: r, .. } if *o == op && *r == result),
            )
            .count()
    };
    let beats = count(AckOp::Heartbeat, AckResult::Applied);
    let lost = count(AckOp::Heartbeat, AckResult::LeaseLost)
        + count(AckOp::Complete, AckResult::LeaseLost)
        + count(AckOp::Fail, AckResult::LeaseLost);
    let errors = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Ack {
                    result: AckResult::Error,
                    ..
                }
            )
        })
        .count();
    let measured = format!(
        "{beats} heartbeats applied, {lost} heartbeats or acks answered lease_lost, {errors} \
         store errors retried; {} attempts cut short, {} duplicates",
        report.interrupted, report.duplicates
    );
    summary(Summary {
        test: "6 pool exhausted by handlers",
        backend: backend.name(),
        jobs,
        faults: jobs,
        fault_kind: "handlers holding pool connections",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert!(
        beats > 0,
        "handlers ran long enough to heartbeat: {measured}"
    );
    assert_eq!(lost, 0, "no false lease expiry: {measured}");
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed, jobs, "{report}");
    assert_eq!(
        (report.interrupted, report.duplicates, report.extra_attempts),
        (0, 0, 0),
        "{report}"
    );
    db.cleanup().await;
}
on_both_backends!(heartbeats_and_acks_get_through_a_pool_exhausted_by_handlers);
