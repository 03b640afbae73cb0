//! Redrive while workers run (RELIABILITY.md test 18), on SQLite and PostgreSQL.
//!
//! A seeded mix leaves a third of the jobs dead (permanent failures). With two worker
//! processes still running, and a second batch of fresh jobs keeping them busy:
//!
//! 1. two redrives of the same dead jobs race (two calls at once); together they move
//!    each dead job back exactly once, and each redriven job runs exactly once more
//!    (then dies again: its behaviour is a function of its attempt, and a redrive
//!    resets attempts);
//! 2. a rate-limited redrive (25 ms apart, 40 jobs/s) of those jobs again: their
//!    `run_at`s are spaced exactly, no job is claimed before its `run_at` (database
//!    clock), and the redriven jobs start no faster than the rate.
//!
//! The checker holds every run to the usual rules; the runs the redrives add are the
//! only duplicates.

#[macro_use]
mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use revenant::store::{JobFilter, JobRedriveParams};
use revenant::{JobState, Store};
use revenant_torture::behaviour::Plan;
use revenant_torture::fleet;
use revenant_torture::ledger::{now_micros, Event};
use support::*;

const QUEUE: &str = "torture";

/// The jobs of the first batch that died (the store adds `status = dead`).
fn these(ids: &HashSet<i64>) -> JobFilter {
    JobFilter {
        queue: Some(QUEUE.to_string()),
        ids: Some(ids.iter().copied().collect()),
        ..JobFilter::default()
    }
}

/// Claims of `jobs` made at or after `after` on the store's clock (µs), per job.
///
/// On the store's clock, not by when the worker sent the claim: a claim sent just
/// before a redrive can wait for the write (SQLite's one writer, on a loaded machine)
/// and take a redriven job after it, and counted by its send time it is missed. The
/// likeliest cause of one loaded CI run where the paced-redrive check below saw 92
/// claims for 94 jobs, every other figure right (it passed on its own every time). The store's clock is at the
/// millisecond, so a claim in the cutoff's millisecond counts: every one of these jobs
/// was dead when the cutoff was read.
fn claims_after(
    events: &[Event],
    jobs: &HashSet<i64>,
    after: i64,
) -> HashMap<i64, Vec<(i64, i64)>> {
    let mut map: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    for event in events {
        if let Event::Claimed {
            job, run_at, db_t, ..
        } = event
        {
            if jobs.contains(job) && *db_t >= after {
                map.entry(*job).or_default().push((*run_at, *db_t));
            }
        }
    }
    map
}

/// Now on the store's clock, µs (the claims' `db_t` clock).
async fn store_micros(store: &dyn Store) -> i64 {
    store.now().await.unwrap().timestamp_micros()
}

async fn redrive_while_workers_run(backend: Backend) {
    let Some(db) = Db::new(backend).await else {
        return;
    };
    let jobs = scale(300, 3_000);
    let plan = Plan::new(18, "succeed:67,permanent:33");
    let mut fleet = Fleet::new(&db, QUEUE, plan).await;
    fleet.spec.concurrency = 10;
    fleet.enqueue(jobs, 3).await;
    let mut workers = fleet.spawn(2);
    fleet
        .wait_finished(jobs, Duration::from_secs(60), &workers)
        .await;
    let dead: HashSet<i64> = fleet::all_jobs(fleet.store.as_ref(), QUEUE)
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.status == JobState::Dead)
        .map(|j| j.id)
        .collect();
    // Fresh work keeps the workers busy through both redrives.
    fleet.enqueue(jobs, 3).await;

    // 1. Two redrives at once: due a second from now, so no job can die again and be
    //    redriven twice before both calls have run.
    let store = fleet.store.clone();
    let first_at = store_micros(store.as_ref()).await;
    let start_at = Some(store.now().await.unwrap() + chrono::Duration::seconds(1));
    let redrive = |store: std::sync::Arc<dyn Store>, key: &'static str| {
        let filter = these(&dead);
        async move {
            store
                .job_redrive(JobRedriveParams {
                    filter,
                    start_at,
                    actor: Some("torture".into()),
                    audit_key: Some(format!("{key}-{}", now_micros())),
                    ..JobRedriveParams::default()
                })
                .await
                .unwrap()
        }
    };
    let (a, b) = tokio::join!(redrive(store.clone(), "a"), redrive(store.clone(), "b"));
    let both: Vec<i64> = a.iter().chain(&b).copied().collect();
    let distinct: HashSet<i64> = both.iter().copied().collect();
    fleet
        .wait_finished(2 * jobs, Duration::from_secs(60), &workers)
        .await;
    let after_first = claims_after(&fleet.events(), &dead, first_at);
    let ran_once_more = dead
        .iter()
        .filter(|id| after_first.get(id).map_or(0, Vec::len) == 1)
        .count();

    // 2. A paced redrive of the same jobs, 25 ms apart.
    let spacing = Duration::from_millis(25);
    let second_at = store_micros(store.as_ref()).await;
    let paced = store
        .job_redrive(JobRedriveParams {
            filter: these(&dead),
            spacing,
            actor: Some("torture".into()),
            ..JobRedriveParams::default()
        })
        .await
        .unwrap();
    fleet
        .wait_finished(2 * jobs, Duration::from_secs(60), &workers)
        .await;
    assert_alive(&mut workers, "during the redrives");
    stop_all(&mut workers).await;

    let (report, events) = fleet.check().await;
    let after_second = claims_after(&events, &dead, second_at);
    let mut paced_claims: Vec<(i64, i64)> = after_second
        .values()
        .flat_map(|list| list.iter().copied())
        .collect();
    paced_claims.sort_unstable();
    let early = paced_claims
        .iter()
        .filter(|(run_at, db_t)| db_t < run_at)
        .count();
    let spaced = paced_claims
        .windows(2)
        .all(|w| w[1].0 - w[0].0 == spacing.as_micros() as i64);
    let span = paced_claims
        .last()
        .zip(paced_claims.first())
        .map_or(0, |(last, first)| last.1 - first.0);
    let rate = (paced_claims.len().saturating_sub(1)) as f64 / (span.max(1) as f64 / 1e6);
    let rows = fleet::all_jobs(fleet.store.as_ref(), QUEUE).await.unwrap();
    let redrives_twice = rows
        .iter()
        .filter(|j| dead.contains(&j.id) && j.redrives == 2 && j.status == JobState::Dead)
        .count();
    let measured = format!(
        "{} dead jobs; racing redrives moved {} ({} distinct), each ran once more: \
         {ran_once_more}; paced redrive of {} at 25 ms: run_at spaced exactly: {spaced}, \
         {early} claimed before run_at, started at {rate:.1} jobs/s (limit 40/s); \
         redriven twice and dead again: {redrives_twice}",
        dead.len(),
        both.len(),
        distinct.len(),
        paced.len()
    );
    summary(Summary {
        test: "18 redrive while workers run",
        backend: backend.name(),
        jobs: 2 * jobs,
        faults: 0,
        fault_kind: "two racing redrives, one paced",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert!(!dead.is_empty());
    assert_eq!(both.len(), dead.len(), "{measured}");
    assert_eq!(distinct, dead, "{measured}");
    assert_eq!(ran_once_more, dead.len(), "{measured}");
    assert_eq!(paced.len(), dead.len(), "{measured}");
    assert_eq!(paced_claims.len(), dead.len(), "{measured}");
    assert!(spaced, "{measured}");
    assert_eq!(early, 0, "{measured}");
    assert!(rate <= 40.0 * 1.001, "{measured}");
    assert_eq!(redrives_twice, dead.len(), "{measured}");
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.duplicates, 2 * dead.len(), "{report}");
    db.cleanup().await;
}
on_both_backends!(redrive_while_workers_run);
