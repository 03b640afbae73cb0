//! A seeded mix of 10,000 jobs on the real SQLite store, checked against a ledger the
//! test keeps: every job ends exactly where the seed predicts. None lost, none stuck,
//! none misclassified, no attempt run twice.

mod harness;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::*;
use revenant::{
    DeadReason, FailureClass, JobContext, JobError, JobId, JobState, NewJob, PolicySet, Worker,
};

/// The issue asks for at least 10,000, and that is what runs by default (about 20 s
/// in a debug build on 2 cores). `REVENANT_MIX_JOBS` changes it for local runs.
const JOBS: u64 = 10_000;
fn jobs() -> u64 {
    std::env::var("REVENANT_MIX_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(JOBS)
}
const MAX_ATTEMPTS: i32 = 3;

/// What a job does, as a pure function of (seed, index).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    Succeed,
    /// Transient failures on the first `k` attempts, then success.
    TransientThenSucceed(i32),
    AlwaysTransient,
    /// Transient failures, then a permanent one at attempt `j`.
    PermanentAt(i32),
    /// Runs past the attempt timeout on attempt 1, then succeeds.
    TimeoutOnce,
    /// Panics on attempt 1, then succeeds.
    PanicOnce,
    AlwaysPanic,
}

/// splitmix64: a tiny, well-mixed hash, so the test needs no RNG crate.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn behaviour(seed: u64, index: u64) -> Behaviour {
    let h = mix(seed ^ mix(index));
    let extra = ((h >> 32) % 2) as i32;
    match h % 100 {
        0..=49 => Behaviour::Succeed,
        50..=69 => Behaviour::TransientThenSucceed(1 + extra),
        70..=77 => Behaviour::AlwaysTransient,
        78..=87 => Behaviour::PermanentAt(1 + ((h >> 32) % 3) as i32),
        88 => Behaviour::TimeoutOnce,
        89..=96 => Behaviour::PanicOnce,
        _ => Behaviour::AlwaysPanic,
    }
}

/// Where a job must end: (state, attempts, dead reason, class of the last error).
type Expected = (JobState, i32, Option<DeadReason>, Option<FailureClass>);

fn expected(b: Behaviour) -> Expected {
    use FailureClass as C;
    use JobState::*;
    match b {
        Behaviour::Succeed => (Completed, 1, None, None),
        Behaviour::TransientThenSucceed(k) => (Completed, k + 1, None, Some(C::Transient)),
        Behaviour::AlwaysTransient => (
            Dead,
            MAX_ATTEMPTS,
            Some(DeadReason::AttemptsExhausted),
            Some(C::Transient),
        ),
        Behaviour::PermanentAt(j) => (Dead, j, Some(DeadReason::Permanent), Some(C::Permanent)),
        Behaviour::TimeoutOnce => (Completed, 2, None, Some(C::Timeout)),
        Behaviour::PanicOnce => (Completed, 2, None, Some(C::Panic)),
        Behaviour::AlwaysPanic => (
            Dead,
            MAX_ATTEMPTS,
            Some(DeadReason::AttemptsExhausted),
            Some(C::Panic),
        ),
    }
}

async fn act(ctx: &JobContext, b: Behaviour) -> Result<(), JobError> {
    let attempt = ctx.attempt();
    match b {
        Behaviour::Succeed => Ok(()),
        Behaviour::TransientThenSucceed(k) if attempt <= k => Err(JobError::retry("503")),
        Behaviour::TransientThenSucceed(_) => Ok(()),
        Behaviour::AlwaysTransient => Err(std::io::Error::other("connection reset"))?,
        Behaviour::PermanentAt(j) if attempt == j => Err(JobError::permanent("bad template")),
        Behaviour::PermanentAt(_) => Err(JobError::retry("503")),
        Behaviour::TimeoutOnce if attempt == 1 => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(())
        }
        Behaviour::TimeoutOnce => Ok(()),
        Behaviour::PanicOnce if attempt == 1 => panic!("seeded panic"),
        Behaviour::PanicOnce => Ok(()),
        Behaviour::AlwaysPanic => panic!("seeded panic, always"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_mix_of_ten_thousand_jobs_ends_exactly_as_predicted() {
    let seed: u64 = std::env::var("REVENANT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_240_817);
    eprintln!("seed {seed} (set REVENANT_SEED to replay)");
    // Silence the default panic hook for the seeded panics; keep it for the rest.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let seeded = info
            .payload()
            .downcast_ref::<&str>()
            .is_some_and(|m| m.starts_with("seeded panic"));
        if !seeded {
            default_hook(info);
        }
    }));

    let db = Db::new();
    let store = db.store().await;
    let started = Instant::now();
    let n = jobs();
    let new_jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob::new("mix", "seeded", serde_json::json!(i)).with_max_attempts(MAX_ATTEMPTS))
        .collect();
    let ids = enqueue(store.as_ref(), new_jobs).await;
    // The ledger: what each job must become, and every attempt its handler started.
    let expect: HashMap<JobId, (u64, Behaviour)> = ids
        .iter()
        .zip(0..n)
        .map(|(id, i)| (*id, (i, behaviour(seed, i))))
        .collect();
    let starts: Arc<Mutex<HashMap<JobId, Vec<i32>>>> = Arc::default();

    let make = |name: &str| {
        let starts = starts.clone();
        Worker::builder(store.clone())
            .worker_id(name)
            .queue("mix", 16)
            // The lease is what a claim, heartbeat or ack may wait for SQLite's write
            // lock: 450 ms lost 48 to 146 leases a run with both cores kept busy by
            // other work (scripts/busy.sh), each a job ending `lease_expired` or with
            // an extra attempt the prediction does not allow. 1.5 s (a timeout of 1 s)
            // keeps the test about the runtime, not the machine's speed.
            .policies(PolicySet::new(policy(MAX_ATTEMPTS as u32, ms(1_500))))
            .poll_interval(ms(20))
            .handler_fn("seeded", move |ctx: JobContext, index: u64| {
                let starts = starts.clone();
                async move {
                    starts
                        .lock()
                        .unwrap()
                        .entry(ctx.id())
                        .or_default()
                        .push(ctx.attempt());
                    act(&ctx, behaviour(seed, index)).await
                }
            })
            .build()
            .unwrap()
    };
    let (stop_a, task_a) = start(make("a"));
    let (stop_b, task_b) = start(make("b"));
    wait_for_drain(store.as_ref(), "mix", Duration::from_secs(60 + n / 20)).await;
    stop_a.shutdown();
    stop_b.shutdown();
    task_a.await.unwrap();
    task_b.await.unwrap();
    let _ = std::panic::take_hook();
    eprintln!("{n} jobs drained in {:?}", started.elapsed());
    let jobs = all_jobs(store.as_ref()).await;

    let starts = starts.lock().unwrap();
    let mut lost = 0;
    let mut misclassified = Vec::new();
    let mut duplicates = 0;
    let mut tally: HashMap<String, usize> = HashMap::new();
    assert_eq!(jobs.len(), n as usize, "unexpected or lost jobs");
    for job in &jobs {
        let Some((index, b)) = expect.get(&job.id) else {
            panic!("unexpected job {job:#?}");
        };
        *tally
            .entry(format!("{b:?}").split('(').next().unwrap().to_string())
            .or_default() += 1;
        let want = expected(*b);
        let got = (
            job.status,
            job.attempts,
            job.dead_reason,
            job.last_error.as_ref().map(|e| e.class),
        );
        if got != want {
            misclassified.push(format!(
                "job {} (#{index}, {b:?}): want {want:?}, got {got:?}",
                job.id
            ));
        }
        let runs = starts.get(&job.id).cloned().unwrap_or_default();
        if runs.is_empty() {
            lost += 1;
        }
        let unique: std::collections::BTreeSet<_> = runs.iter().collect();
        duplicates += runs.len() - unique.len();
    }
    eprintln!("mix: {tally:?}");
    let stuck = jobs.iter().filter(|j| !j.status.is_terminal()).count();
    assert_eq!(stuck, 0, "stuck");
    assert_eq!(lost, 0, "never ran");
    assert!(
        misclassified.is_empty(),
        "{} misclassified, e.g. {:#?}",
        misclassified.len(),
        &misclassified[..misclassified.len().min(10)]
    );
    assert_eq!(duplicates, 0, "attempts run twice");
    assert!(tally.len() == 7, "every behaviour is in the mix: {tally:?}");
}
