//! Network faults between a worker and PostgreSQL (RELIABILITY.md tests 21 to 23),
//! through the torture crate's fault proxy (`revenant_torture::proxy`): one proxy per
//! worker process on loopback, switched while the workers run.
//!
//! - 21, a partition longer than the lease: the proxy black-holes one worker's
//!   connections (it reads and writes nothing and closes nothing, as a real network
//!   fails: no reset, so no call fails, it simply never answers) for 2.5 leases while
//!   its handlers run. The worker cannot renew its leases. Every handler it runs stops
//!   before its lease can run out: by its attempt timeout (always below the lease), or
//!   given up one lease after the last heartbeat it saw applied, and a claim answered
//!   only after the heal runs only if a heartbeat finds its lease still its own (the
//!   runtime's executor).
//!   The other worker reclaims those jobs only after their leases ran out by the
//!   database's clock; when the partition heals, the calls the partitioned worker had
//!   in flight arrive, and none of its late acks is applied.
//! - 22, a partition shorter than the lease: the worker rides through it; no attempt
//!   is cut short or spent twice.
//! - 23, latency of 200 ms to 2 s on every query of both workers for a while:
//!   throughput falls, nothing is lost, and no lease is lost while heartbeats are slow
//!   but in time.
//!
//! PostgreSQL only: SQLite has no network between a worker and its database.

mod support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use revenant_torture::behaviour::{Mix, Plan};
use revenant_torture::fleet::{self, WorkerProcess};
use revenant_torture::ledger::{now_micros, AckOp, AckResult, Event};
use revenant_torture::proxy::{FaultProxy, Mode};
use support::*;

const QUEUE: &str = "torture";

/// A handler run, from the ledger.
#[derive(Debug, Clone, Copy)]
struct RunSpan {
    job: i64,
    attempt: i32,
    pid: u32,
    token: i64,
    claim_t0: i64,
    start: i64,
    /// When it returned or stopped (a panic, dropped by the runtime).
    end: Option<i64>,
    /// Whether it returned (an `end` line), rather than stopped.
    returned: bool,
}

fn runs(events: &[Event]) -> Vec<RunSpan> {
    let mut claims: HashMap<(u32, i64, i32), (i64, i64)> = HashMap::new();
    let mut list: Vec<RunSpan> = Vec::new();
    let mut index: HashMap<(u32, i64, i32), usize> = HashMap::new();
    for event in events {
        match *event {
            Event::Claimed {
                job,
                attempt,
                token,
                pid,
                t0,
                ..
            } => {
                claims.insert((pid, job, attempt), (token, t0));
            }
            Event::Start {
                job,
                attempt,
                pid,
                t,
                ..
            } => {
                let (token, claim_t0) = claims.get(&(pid, job, attempt)).copied().unwrap_or((0, t));
                index.insert((pid, job, attempt), list.len());
                list.push(RunSpan {
                    job,
                    attempt,
                    pid,
                    token,
                    claim_t0,
                    start: t,
                    end: None,
                    returned: false,
                });
            }
            Event::End {
                job,
                attempt,
                pid,
                t,
                ..
            } => {
                if let Some(&i) = index.get(&(pid, job, attempt)) {
                    list[i].end = Some(t);
                    list[i].returned = true;
                }
            }
            Event::Stopped {
                job,
                attempt,
                pid,
                t,
                ..
            } => {
                if let Some(&i) = index.get(&(pid, job, attempt)) {
                    list[i].end = Some(t);
                }
            }
            _ => {}
        }
    }
    list
}

/// Runs of `pid` that had started and not ended at `at`.
fn running_at(runs: &[RunSpan], pid: u32, at: i64) -> Vec<RunSpan> {
    runs.iter()
        .filter(|r| r.pid == pid && r.start < at && r.end.is_none_or(|e| e >= at))
        .copied()
        .collect()
}

/// The start of the latest heartbeat of `token` whose applied answer came back before
/// `before`.
fn last_beat_seen(events: &[Event], job: i64, token: i64, before: i64) -> Option<i64> {
    events
        .iter()
        .filter_map(|e| match *e {
            Event::Ack {
                op: AckOp::Heartbeat,
                job: j,
                token: k,
                result: AckResult::Applied,
                t0,
                t,
                ..
            } if j == job && k == token && t < before => Some(t0),
            _ => None,
        })
        .max()
}

/// Starts the fleet's worker `index` through `proxy`.
fn spawn_through(fleet: &Fleet, proxy: &FaultProxy, index: usize) -> WorkerProcess {
    let mut spec = fleet.spec.clone();
    spec.url = proxy.url(&spec.url);
    spec.spawn(index).expect("spawn a worker")
}

/// Waits until `pid` has at least `n` handlers running (from the ledger).
async fn wait_running(fleet: &Fleet, pid: u32, n: usize, workers: &[WorkerProcess]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = now_micros();
        if running_at(&runs(&fleet.events()), pid, now).len() >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "worker {pid} never ran {n} handlers at once\n{}",
            logs(workers)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn proxy_for(db: &Db) -> FaultProxy {
    FaultProxy::for_url(&db.url)
        .await
        .expect("start the fault proxy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_partitioned_past_its_lease_gives_its_jobs_up_and_none_of_its_late_acks_applies() {
    let Some(db) = Db::new(Backend::Postgres).await else {
        return;
    };
    let lease_ms: u64 = scale(2_000, 5_000);
    let lease_us = i64::try_from(lease_ms).unwrap() * 1000;
    let jobs = scale(30, 200);
    // Half the jobs sleep most of an attempt timeout, half overrun it once (without
    // looking at their cancellation token): the partition finds handlers running, and
    // some that only the runtime can stop.
    let plan = Plan::new(
        21,
        &format!(
            "sleep:1,timeout:1,max_transient:1,sleep_ms:{}",
            lease_ms * 3 / 4
        ),
    );
    let mut fleet = Fleet::new(&db, QUEUE, plan).await;
    fleet.spec.lease_ms = lease_ms;
    fleet.spec.attempt_timeout_ms = Some(lease_ms * 9 / 10);
    fleet.spec.heartbeat_ms = Some(lease_ms / 4);
    fleet.spec.sweep_ms = Some(500);
    fleet.spec.concurrency = 4;
    fleet.enqueue(jobs, 3).await;
    let proxy = proxy_for(&db).await;
    let mut workers = vec![
        spawn_through(&fleet, &proxy, 0),
        fleet.spec.spawn(1).unwrap(),
    ];
    let cut_off = workers[0].pid();
    // Handlers running, and at least one heartbeat of theirs applied.
    wait_running(&fleet, cut_off, 2, &workers).await;
    tokio::time::sleep(Duration::from_millis(lease_ms / 2)).await;

    let partitioned_at = now_micros();
    proxy.set(Mode::Blackhole);
    let partition = Duration::from_millis(lease_ms * 5 / 2);
    tokio::time::sleep(partition).await;
    proxy.set(Mode::Pass);
    let healed_at = now_micros();
    fleet
        .wait_finished(jobs, Duration::from_secs(scale(120, 600)), &workers)
        .await;
    assert_alive(&mut workers, "during the partition");
    stop_all(&mut workers).await;

    let (report, events) = fleet.check().await;
    let spans = runs(&events);
    let held = running_at(&spans, cut_off, partitioned_at);
    assert!(!held.is_empty(), "the partition found no handler running");
    let mut noticed_after_partition = Vec::new();
    let mut past_lease = Vec::new();
    let mut reclaim_margin = i64::MAX;
    let mut beats_after_giving_up = 0;
    for run in &held {
        let end = run.end.unwrap_or_else(|| {
            panic!(
                "job {} attempt {}: the partitioned worker's handler never stopped\n{}",
                run.job,
                run.attempt,
                logs(&workers)
            )
        });
        // The lease's earliest end as the worker knew it: the last heartbeat it saw
        // applied (or its claim), plus the lease.
        let lease_from = last_beat_seen(&events, run.job, run.token, partitioned_at)
            .unwrap_or(run.claim_t0)
            .max(run.claim_t0);
        let lease_end = lease_from + lease_us;
        if !run.returned {
            noticed_after_partition.push(end - partitioned_at);
            past_lease.push(end - lease_end);
        }
        // Another worker's run of the job began only after this one had stopped, and
        // after the lease had run out.
        for other in spans
            .iter()
            .filter(|o| o.job == run.job && o.start > run.start)
        {
            assert!(
                other.start >= end,
                "job {}: attempt {} (pid {}) started at {} while attempt {} of the partitioned worker ran until {end}",
                run.job,
                other.attempt,
                other.pid,
                other.start,
                run.attempt
            );
            if other.pid != cut_off {
                reclaim_margin = reclaim_margin.min(other.start - lease_end);
            }
        }
        beats_after_giving_up += events
            .iter()
            .filter(|e| matches!(e, Event::Ack { op: AckOp::Heartbeat, job, token, pid, t0, .. } if *job == run.job && *token == run.token && *pid == cut_off && *t0 > end))
            .count();
    }
    // The acks the partitioned worker sent for the jobs it held, answered after the
    // heal: rejected when another worker had claimed the job; applied when nobody had
    // yet (its lease had run out, but the fence is the token: nobody else ran it).
    let held_tokens: HashSet<(i64, i64)> = held.iter().map(|r| (r.job, r.token)).collect();
    let (mut late_applied, mut late_rejected) = (0, 0);
    for event in &events {
        if let Event::Ack {
            op: AckOp::Complete | AckOp::Fail,
            job,
            token,
            result,
            t,
            ..
        } = event
        {
            if held_tokens.contains(&(*job, *token)) && *t > healed_at {
                match result {
                    AckResult::Applied => late_applied += 1,
                    AckResult::LeaseLost => late_rejected += 1,
                    AckResult::Error => {}
                }
            }
        }
    }
    // Claims sent before the partition and answered after the heal: their leases could
    // have run out, so a handler runs only once a heartbeat has confirmed the lease
    // (the fence matched: nobody else had claimed the job), never after another
    // worker's claim of the job.
    let claimed_before: HashSet<(i64, i32)> = events
        .iter()
        .filter_map(|e| match *e {
            Event::Claimed {
                job,
                attempt,
                pid,
                t0,
                t,
                ..
            } if pid == cut_off && t0 < partitioned_at && t > healed_at => Some((job, attempt)),
            _ => None,
        })
        .collect();
    let late_runs: Vec<&RunSpan> = spans
        .iter()
        .filter(|r| r.pid == cut_off && claimed_before.contains(&(r.job, r.attempt)))
        .collect();
    let late_starts = late_runs.len();
    let late_after_another = late_runs
        .iter()
        .filter(|r| {
            events.iter().any(|e| {
                matches!(*e, Event::Claimed { job, attempt, pid, t, .. }
                    if job == r.job && pid != cut_off && attempt > r.attempt && t < r.start)
            })
        })
        .count();
    let max_ms = |v: &[i64]| v.iter().copied().max().unwrap_or(0) as f64 / 1000.0;
    let measured = format!(
        "partitioned {partition:.1?} (lease {lease_ms} ms) with {} handlers running: {} \
         stopped by the worker (timeout or lease given up) at most {:.0} ms after the \
         partition began, {:.0} ms before the lease it last saw renewed ran out (at the \
         latest); the others returned; reclaimed by the other worker at least {:.0} ms \
         after that lease; {beats_after_giving_up} heartbeats after stopping; {} claims \
         answered after the heal, {late_starts} of them run after a heartbeat confirmed \
         the lease, {late_after_another} after another worker's claim; after the heal \
         {late_rejected} of its acks for those jobs rejected (reclaimed), {late_applied} \
         applied (not claimed by anyone yet), {} applied after a newer claim",
        held.len(),
        noticed_after_partition.len(),
        max_ms(&noticed_after_partition),
        -max_ms(&past_lease),
        if reclaim_margin == i64::MAX {
            0.0
        } else {
            reclaim_margin as f64 / 1000.0
        },
        claimed_before.len(),
        report.late_ack_accepted,
    );
    summary(Summary {
        test: "21 partition longer than the lease",
        backend: "postgres",
        jobs,
        faults: 1,
        fault_kind: "black-holed worker connections",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed, jobs, "{report}");
    // Stopped before its lease could run out: the attempt timeout is below the lease,
    // and the give-up aims at 5% (at most 250 ms) before it; 1 s of slack is for a
    // busy machine's scheduling.
    assert!(
        past_lease.iter().all(|&late| late < 1_000_000),
        "{measured}"
    );
    // Reclaimed after the lease ran out (1 ms: the database's clock is rounded to it).
    assert!(reclaim_margin >= -1_000, "{measured}");
    assert_eq!(late_after_another, 0, "{measured}");
    assert!(report.duplicates <= held.len(), "{report}");
    assert_eq!(beats_after_giving_up, 0, "{measured}");
    assert_eq!(report.late_ack_accepted, 0, "{report}");
    drop(proxy);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_partitioned_for_less_than_its_lease_rides_through() {
    let Some(db) = Db::new(Backend::Postgres).await else {
        return;
    };
    let lease_ms: u64 = 6_000;
    let jobs = scale(24, 200);
    let plan = Plan {
        seed: 22,
        mix: Mix::all_sleep(2_500),
    };
    let mut fleet = Fleet::new(&db, QUEUE, plan).await;
    fleet.spec.lease_ms = lease_ms;
    fleet.spec.attempt_timeout_ms = Some(5_000);
    fleet.spec.heartbeat_ms = Some(1_000);
    fleet.spec.concurrency = 4;
    fleet.enqueue(jobs, 3).await;
    let proxy = proxy_for(&db).await;
    let mut workers = vec![
        spawn_through(&fleet, &proxy, 0),
        fleet.spec.spawn(1).unwrap(),
    ];
    let cut_off = workers[0].pid();
    wait_running(&fleet, cut_off, 2, &workers).await;

    let partitions = scale(1, 5);
    let partition = Duration::from_millis(2_000);
    let mut held = Vec::new();
    for _ in 0..partitions {
        wait_running(&fleet, cut_off, 1, &workers).await;
        let at = now_micros();
        proxy.set(Mode::Blackhole);
        tokio::time::sleep(partition).await;
        proxy.set(Mode::Pass);
        held.extend(running_at(&runs(&fleet.events()), cut_off, at));
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    fleet
        .wait_finished(jobs, Duration::from_secs(scale(120, 600)), &workers)
        .await;
    assert_alive(&mut workers, "during the partition");
    stop_all(&mut workers).await;

    let (report, events) = fleet.check().await;
    let spans = runs(&events);
    let rode_through = held
        .iter()
        .filter(|h| {
            spans
                .iter()
                .any(|r| r.pid == h.pid && r.job == h.job && r.attempt == h.attempt && r.returned)
        })
        .count();
    let lease_lost = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Ack {
                    result: AckResult::LeaseLost,
                    ..
                }
            )
        })
        .count();
    let stopped = events
        .iter()
        .filter(|e| matches!(e, Event::Stopped { .. }))
        .count();
    let measured = format!(
        "{partitions} partitions of {partition:.1?} (lease {lease_ms} ms, heartbeat 1 s) with \
         {} handlers running: {rode_through} returned and were acknowledged; {lease_lost} \
         answers lease_lost, {stopped} handlers stopped; {} attempts cut short, {} \
         duplicates, {} extra attempts",
        held.len(),
        report.interrupted,
        report.duplicates,
        report.extra_attempts
    );
    summary(Summary {
        test: "22 partition shorter than the lease",
        backend: "postgres",
        jobs,
        faults: partitions,
        fault_kind: "black-holed worker connections",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert!(!held.is_empty(), "no partition found a handler running");
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed, jobs, "{report}");
    assert_eq!(rode_through, held.len(), "{measured}");
    assert_eq!((lease_lost, stopped), (0, 0), "{measured}");
    assert_eq!(
        (report.interrupted, report.duplicates, report.extra_attempts),
        (0, 0, 0),
        "{report}"
    );
    drop(proxy);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_on_every_query_slows_the_queue_and_loses_neither_jobs_nor_leases() {
    let Some(db) = Db::new(Backend::Postgres).await else {
        return;
    };
    let lease_ms: u64 = 10_000;
    let jobs = scale(300, 3_000);
    // A quarter of the jobs run 2.5 s, long enough to heartbeat (every second) through
    // the latency.
    let plan = Plan::new(23, "succeed:3,sleep:1,sleep_ms:2500");
    let mut fleet = Fleet::new(&db, QUEUE, plan).await;
    fleet.spec.lease_ms = lease_ms;
    fleet.spec.attempt_timeout_ms = Some(9_000);
    fleet.spec.heartbeat_ms = Some(1_000);
    fleet.spec.concurrency = 5;
    // Every query holds its connection for the delay: room for heartbeats beside the
    // claims and acks.
    fleet.spec.max_connections = Some(10);
    fleet.enqueue(jobs, 3).await;
    let proxies = [proxy_for(&db).await, proxy_for(&db).await];
    let mut workers = vec![
        spawn_through(&fleet, &proxies[0], 0),
        spawn_through(&fleet, &proxies[1], 1),
    ];
    let window = scale(Duration::from_secs(8), Duration::from_secs(60));
    let finished = || async {
        fleet::finished(fleet.store.as_ref(), QUEUE)
            .await
            .unwrap_or(0)
    };
    // A window at full speed first, for comparison, from the first job done.
    fleet
        .wait_finished(1, Duration::from_secs(60), &workers)
        .await;
    let before = finished().await;
    tokio::time::sleep(window).await;
    let at_full_speed = finished().await - before;
    let slow = Mode::Delay {
        min: Duration::from_millis(200),
        max: Duration::from_millis(2_000),
    };
    for proxy in &proxies {
        proxy.set(slow);
    }
    let slowed_at = finished().await;
    tokio::time::sleep(window).await;
    for proxy in &proxies {
        proxy.set(Mode::Pass);
    }
    let slowed = finished().await - slowed_at;
    assert!(
        slowed_at + slowed < jobs as u64,
        "the queue drained before the latency ended: nothing was measured (more jobs)"
    );
    fleet
        .wait_finished(jobs, Duration::from_secs(scale(120, 600)), &workers)
        .await;
    assert_alive(&mut workers, "under latency");
    stop_all(&mut workers).await;

    let (report, events) = fleet.check().await;
    let beats = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Ack {
                    op: AckOp::Heartbeat,
                    result: AckResult::Applied,
                    ..
                }
            )
        })
        .count();
    let slowest_beat = events
        .iter()
        .filter_map(|e| match e {
            Event::Ack {
                op: AckOp::Heartbeat,
                t0,
                t,
                ..
            } => Some(t - t0),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let lease_lost = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Ack {
                    result: AckResult::LeaseLost,
                    ..
                }
            )
        })
        .count();
    let stopped = events
        .iter()
        .filter(|e| matches!(e, Event::Stopped { .. }))
        .count();
    let secs = window.as_secs_f64();
    let measured = format!(
        "{:.0?} of 200 ms to 2 s on every query of both workers: {:.1} jobs/s against {:.1} \
         at full speed; {beats} heartbeats applied, the slowest in {:.2}s (lease {lease_ms} \
         ms); {lease_lost} answers lease_lost, {stopped} handlers stopped, {} attempts cut \
         short",
        window,
        slowed as f64 / secs,
        at_full_speed as f64 / secs,
        slowest_beat as f64 / 1e6,
        report.interrupted
    );
    summary(Summary {
        test: "23 latency on every query",
        backend: "postgres",
        jobs,
        faults: 1,
        fault_kind: "200 ms to 2 s per query",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed, jobs, "{report}");
    assert!(beats > 0, "no heartbeat to slow down: {measured}");
    assert_eq!((lease_lost, stopped), (0, 0), "{measured}");
    assert_eq!(
        (report.interrupted, report.duplicates, report.extra_attempts),
        (0, 0, 0),
        "{report}"
    );
    drop(proxies);
    db.cleanup().await;
}
