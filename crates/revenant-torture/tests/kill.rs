//! A worker process killed with SIGKILL mid-run (RELIABILITY.md test 1, a first cut):
//! the jobs it held are reclaimed by the other process once their leases expire, and not
//! before (no lease overlap); nothing is lost, every job completes, and the only extra
//! attempts and runs are those of the jobs the killed process held.

mod support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use revenant_torture::behaviour::{Mix, Plan};
use revenant_torture::checker;
use revenant_torture::fleet;
use revenant_torture::ledger::{self, now_micros, Event};
use support::{count, Fleet, PgSchema};

const QUEUE: &str = "torture";
const LEASE_MS: u64 = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_loses_no_job_and_its_jobs_are_reclaimed_after_their_leases() {
    let Some(db) = PgSchema::new().await else {
        return;
    };
    let jobs = count("REVENANT_TORTURE_KILL_JOBS", 400);
    let plan = Plan {
        seed: 9,
        mix: Mix::all_sleep(200),
    };
    let Fleet {
        dir: _dir,
        ledger_dir,
        store,
        mut spec,
    } = Fleet::enqueue(&db, QUEUE, jobs, plan).await;
    spec.lease_ms = LEASE_MS;
    let mut victim = spec.spawn(0).unwrap();
    let mut survivor = spec.spawn(1).unwrap();
    let victim_pid = victim.pid();

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let starts = ledger::read_dir(&ledger_dir)
            .unwrap()
            .iter()
            .filter(|e| matches!(e, Event::Start { pid, .. } if *pid == victim_pid))
            .count();
        if starts >= 20 {
            break;
        }
        assert!(Instant::now() < deadline, "the victim never ran jobs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    victim.signal(Signal::SIGKILL).unwrap();
    let killed_at = now_micros();
    assert!(victim.wait_exit(Duration::from_secs(10)).await.is_some());

    let done = fleet::wait_finished(
        store.as_ref(),
        QUEUE,
        jobs as u64,
        Instant::now() + Duration::from_secs(120),
        Duration::from_millis(100),
        |_| {},
    )
    .await;
    assert_eq!(done, jobs as u64, "{}", survivor.log_tail(30));
    let statuses =
        fleet::terminate_all(std::slice::from_mut(&mut survivor), Duration::from_secs(30)).await;
    assert!(statuses[0].is_some_and(|s| s.success()));

    let events = ledger::read_dir(&ledger_dir).unwrap();
    let ended: HashSet<(i64, i32)> = events
        .iter()
        .filter_map(|e| match e {
            Event::End {
                job, attempt, pid, ..
            } if *pid == victim_pid => Some((*job, *attempt)),
            _ => None,
        })
        .collect();
    // Jobs the victim held when it died: claimed, never ended.
    let held: HashSet<i64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Claimed {
                job, attempt, pid, ..
            } if *pid == victim_pid && !ended.contains(&(*job, *attempt)) => Some(*job),
            _ => None,
        })
        .collect();
    let mut reclaimed_at: HashMap<i64, i64> = HashMap::new();
    for event in &events {
        if let Event::Start { job, pid, t, .. } = event {
            if *pid != victim_pid && held.contains(job) {
                let first = reclaimed_at.entry(*job).or_insert(*t);
                *first = (*first).min(*t);
            }
        }
    }
    let latest = reclaimed_at.values().max().copied().unwrap_or(killed_at);
    let reclaim = Duration::from_micros(u64::try_from(latest - killed_at).unwrap_or(0));
    let rows = fleet::final_jobs(store.as_ref(), QUEUE).await.unwrap();
    let report = checker::check(&plan, &events, &rows);
    eprintln!(
        "kill -9: the victim held {} jobs; all reclaimed {reclaim:?} after the kill (lease {LEASE_MS} ms); {report}",
        held.len()
    );
    assert!(!held.is_empty(), "the victim held jobs when it died");
    assert_eq!(reclaimed_at.len(), held.len(), "every held job ran again");
    assert!(
        reclaim < Duration::from_millis(LEASE_MS) + Duration::from_secs(2),
        "reclaimed {reclaim:?} after the kill"
    );
    assert!(report.is_safe(), "{report}");
    assert_eq!(report.completed, jobs, "{report}");
    assert_eq!(report.extra_attempts, held.len(), "{report}");
    assert!(report.duplicates <= held.len(), "{report}");
    db.drop_schema().await;
}
