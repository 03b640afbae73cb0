//! FIFO groups and unique keys under several processes (RELIABILITY.md tests 16 and
//! 17), on SQLite and PostgreSQL. The store-level cases (one process, pinned clocks)
//! are in the conformance suite (`cases/group.rs`, `cases/enqueue.rs`); these run the
//! same promises through worker and producer processes.
//!
//! - **FIFO groups** (16): jobs spread over groups, some failing transiently (their
//!   group waits while they back off), some permanently (a dead head unblocks its
//!   group), drained by three workers. Within a group no job is claimed before the one
//!   ahead of it has ended (by the database's clock: the claim's `attempted_at` is not
//!   before the other's `finished_at`; and by the ledger: the claim returned after the
//!   other's last result was sent), so jobs end in enqueue order; groups with a dead job still
//!   complete the jobs behind it; while a head backs off, other groups keep running.
//! - **Unique keys** (17): four producer processes enqueue the same keys at once while
//!   a worker runs them. Each key makes one job, and every producer's answer for a key
//!   is that job's id.

#[macro_use]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use revenant::JobState;
use revenant_torture::behaviour::Plan;
use revenant_torture::fleet;
use revenant_torture::ledger::{AckOp, AckResult, Event};
use revenant_torture::produce::Shape;
use support::*;

const QUEUE: &str = "torture";

async fn fifo_groups_hold_their_order_across_processes(backend: Backend) {
    let Some(db) = Db::new(backend).await else {
        return;
    };
    let groups = scale(20, 200);
    let jobs = scale(400, 6_000);
    let plan = Plan::new(
        16,
        "succeed:75,transient:12,permanent:8,sleep:5,sleep_ms:30,max_transient:2",
    );
    let mut fleet = Fleet::new(&db, QUEUE, plan).await;
    fleet.spec.backoff_ms = 100;
    let shape = Shape {
        groups,
        ..Shape::plain(QUEUE, 3)
    };
    fleet.enqueue_shaped(&shape, jobs).await;
    let mut workers = fleet.spawn(3);
    fleet
        .wait_finished(jobs, Duration::from_secs(scale(120, 900)), &workers)
        .await;
    assert_alive(&mut workers, "during the run");
    stop_all(&mut workers).await;

    let (report, events) = fleet.check().await;
    let rows = fleet::all_jobs(fleet.store.as_ref(), QUEUE).await.unwrap();
    let group_of: HashMap<i64, String> = rows
        .iter()
        .map(|j| (j.id, j.group_key.clone().unwrap_or_default()))
        .collect();
    let first_claim: HashMap<i64, (i64, i64)> = claims_by_job(&events)
        .into_iter()
        .map(|(job, list)| {
            let first = list.iter().min_by_key(|c| c.2).expect("a claim");
            (job, (first.3, first.2))
        })
        .collect();
    // The start of each job's last applied result (its end) on the machine's clock.
    let mut last_result: HashMap<i64, i64> = HashMap::new();
    for event in &events {
        if let Event::Ack {
            op: AckOp::Complete | AckOp::Fail,
            job,
            result: AckResult::Applied,
            t0,
            ..
        } = event
        {
            let at = last_result.entry(*job).or_insert(*t0);
            *at = (*at).max(*t0);
        }
    }
    let mut by_group: BTreeMap<&str, Vec<&revenant::Job>> = BTreeMap::new();
    for job in &rows {
        by_group
            .entry(job.group_key.as_deref().unwrap_or(""))
            .or_default()
            .push(job);
    }
    let (mut out_of_order, mut unblocked, mut dead_heads) = (Vec::new(), 0, 0);
    for list in by_group.values_mut() {
        list.sort_by_key(|j| j.id);
        for pair in list.windows(2) {
            let (ahead, behind) = (pair[0], pair[1]);
            let ended = ahead.finished_at.map_or(i64::MAX, |t| t.timestamp_micros());
            let (db_t, returned) = first_claim.get(&behind.id).copied().unwrap_or((0, 0));
            let sent = last_result.get(&ahead.id).copied().unwrap_or(i64::MAX);
            if db_t < ended || returned < sent {
                out_of_order.push((ahead.id, behind.id));
            }
            if ahead.status == JobState::Dead {
                dead_heads += 1;
                if behind.status.is_terminal() {
                    unblocked += 1;
                }
            }
        }
    }
    // While a job backed off (its failure written, its retry not yet claimed), did
    // other groups' jobs start?
    let mut fails: HashMap<(i64, i64), i64> = HashMap::new();
    let mut claims: Vec<(i64, i32, i64, i64)> = Vec::new();
    for event in &events {
        match event {
            Event::Ack {
                op: AckOp::Fail,
                job,
                token,
                result: AckResult::Applied,
                t,
                ..
            } => {
                fails.insert((*job, *token), *t);
            }
            Event::Claimed {
                job,
                attempt,
                token,
                t,
                ..
            } => claims.push((*job, *attempt, *token, *t)),
            _ => {}
        }
    }
    let retry_at: HashMap<(i64, i32), i64> =
        claims.iter().map(|(j, a, _, t)| ((*j, *a), *t)).collect();
    let (mut waits, mut waits_with_progress) = (0, 0);
    for (job, attempt, token, _) in &claims {
        let (Some(failed), Some(next)) = (
            fails.get(&(*job, *token)),
            retry_at.get(&(*job, attempt + 1)),
        ) else {
            continue;
        };
        waits += 1;
        if claims
            .iter()
            .any(|(j, _, _, t)| t > failed && t < next && group_of.get(j) != group_of.get(job))
        {
            waits_with_progress += 1;
        }
    }
    let measured = format!(
        "{groups} groups, {jobs} jobs; {} claimed before the job ahead of them ended; \
         {dead_heads} dead jobs each followed by a finished one: {unblocked}; other groups \
         ran during {waits_with_progress} of {waits} backoffs",
        out_of_order.len()
    );
    summary(Summary {
        test: "16 FIFO groups",
        backend: backend.name(),
        jobs,
        faults: 0,
        fault_kind: "transient and permanent group heads",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert!(
        out_of_order.is_empty(),
        "{measured}: {:?}",
        &out_of_order[..out_of_order.len().min(10)]
    );
    assert!(dead_heads > 0 && unblocked == dead_heads, "{measured}");
    // Near the end of the run other groups may have nothing left to do.
    assert!(
        waits > 0 && waits_with_progress * 10 >= waits * 8,
        "{measured}"
    );
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed + report.dead, jobs, "{report}");
    db.cleanup().await;
}
on_both_backends!(fifo_groups_hold_their_order_across_processes);

async fn concurrent_producers_of_one_key_get_one_job(backend: Backend) {
    let Some(db) = Db::new(backend).await else {
        return;
    };
    let keys = scale(50, 500);
    let per_producer = scale(300, 3_000);
    let producers = 4;
    let mut fleet = Fleet::new(&db, QUEUE, Plan::default()).await;
    let mut workers = fleet.spawn(1);
    fleet.spec.extra_args = vec![
        "--no-work".into(),
        format!("--produce={per_producer}"),
        "--produce-batch=10".into(),
        format!("--unique-keys={keys}"),
    ];
    let mut racing: Vec<_> = (0..producers)
        .map(|i| fleet.spec.spawn(10 + i).unwrap())
        .collect();
    for producer in &mut racing {
        let status = producer.wait_exit(Duration::from_secs(120)).await;
        assert!(
            status.is_some_and(|s| s.success()),
            "producer: {status:?}\n{}",
            producer.log_tail(20)
        );
    }
    fleet
        .wait_finished(keys, Duration::from_secs(60), &workers)
        .await;
    stop_all(&mut workers).await;

    let (report, events) = fleet.check().await;
    let rows = fleet::all_jobs(fleet.store.as_ref(), QUEUE).await.unwrap();
    let row_of_key: HashMap<String, i64> = rows
        .iter()
        .filter_map(|j| Some((j.unique_key.clone()?, j.id)))
        .collect();
    let (mut answers, mut wrong) = (0, Vec::new());
    for event in &events {
        if let Event::Enqueued {
            ids, unique_keys, ..
        } = event
        {
            for (id, key) in ids.iter().zip(unique_keys) {
                answers += 1;
                if row_of_key.get(key) != Some(id) {
                    wrong.push((key.clone(), *id));
                }
            }
        }
    }
    let measured = format!(
        "{producers} producers × {per_producer} enqueues over {keys} keys: {} jobs; {answers} \
         answers, {} naming another job than the key's",
        rows.len(),
        wrong.len()
    );
    summary(Summary {
        test: "17 unique keys",
        backend: backend.name(),
        jobs: producers * per_producer,
        faults: 0,
        fault_kind: "concurrent enqueues of one key",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert_eq!(rows.len(), keys, "{measured}");
    assert_eq!(row_of_key.len(), keys, "{measured}");
    assert_eq!(answers, producers * per_producer, "{measured}");
    assert!(
        wrong.is_empty(),
        "{measured}: {:?}",
        &wrong[..wrong.len().min(10)]
    );
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed, keys, "{report}");
    db.cleanup().await;
}
on_both_backends!(concurrent_producers_of_one_key_get_one_job);
