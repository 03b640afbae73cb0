//! Dependencies: the circuit breaker, the rate limit and the retry budget, shared
//! through the store (`dependency_acquire`, `dependency_report`, `dependency_set`,
//! `dependency_list`, `dependency_sweep`).

use revenant_core::dependency::{
    BreakerAction, BreakerPolicy, BreakerState, Bulkhead, DependencyPolicy, DependencyState,
    ProbeOutcome, RateLimit, RetryBudget, SlowCall, WaitReason,
};

use super::prelude::*;

const KEY: &str = "email-provider";

/// The breaker alone, with its defaults (50% over 10 s, at least 10 answers, 5 s
/// cool-down doubling to 15 s, parked for 1 h).
fn breaker() -> DependencyPolicy {
    DependencyPolicy {
        breaker: Some(BreakerPolicy::default()),
        ..DependencyPolicy::off()
    }
}

fn rate(per_second: f64) -> DependencyPolicy {
    DependencyPolicy::off().with_rate_limit(RateLimit::per_second(per_second))
}

fn request(job: &Job) -> PermitRequest {
    PermitRequest {
        lease: lease_of(job),
        retry_delay: secs(20),
    }
}

async fn acquire_as(
    store: &Arc<dyn Store>,
    policy: &DependencyPolicy,
    worker: &str,
    jobs: &[Job],
    now: Timestamp,
) -> Vec<Permit> {
    let acquired = store
        .dependency_acquire(DependencyAcquireParams {
            dependency: KEY.to_string(),
            policy: policy.clone(),
            worker: worker.to_string(),
            lease: LEASE,
            requests: jobs.iter().map(request).collect(),
            local_free: None,
            now: Some(now),
        })
        .await
        .expect("dependency_acquire");
    assert_eq!(acquired.now, now, "the pinned clock is the acquire's clock");
    assert_eq!(acquired.permits.len(), jobs.len(), "one permit per request");
    acquired.permits
}

async fn acquire(
    store: &Arc<dyn Store>,
    policy: &DependencyPolicy,
    jobs: &[Job],
    now: Timestamp,
) -> Vec<Permit> {
    acquire_as(store, policy, WORKER, jobs, now).await
}

async fn report(
    store: &Arc<dyn Store>,
    policy: &DependencyPolicy,
    successes: u64,
    failures: u64,
    probe: Option<(JobId, ProbeOutcome)>,
    now: Timestamp,
) -> DependencyState {
    store
        .dependency_report(DependencyReportParams {
            dependency: KEY.to_string(),
            policy: policy.clone(),
            successes,
            failures,
            probe: probe.map(|(job, outcome)| ProbeReport { job, outcome }),
            slow: 0,
            finished: vec![],
            now: Some(now),
        })
        .await
        .expect("dependency_report")
}

async fn current(store: &Arc<dyn Store>, now: Timestamp) -> DependencyState {
    let mut list = store
        .dependency_list(DependencyListParams {
            dependency: Some(KEY.to_string()),
            now: Some(now),
        })
        .await
        .expect("dependency_list");
    assert_eq!(list.len(), 1, "{KEY} is known");
    list.remove(0)
}

/// Enqueues `n` jobs in `queue` at `at` and claims them all then.
async fn claimed(stage: &Stage, queue: &str, n: usize, at: Timestamp) -> Vec<Job> {
    for _ in 0..n {
        stage.enqueue_at(job(queue, "send_receipt"), at).await;
    }
    let jobs = stage.claim(queue, n as u32, at).await;
    assert_eq!(jobs.len(), n, "staged {n} claimed jobs");
    jobs
}

/// Opens the breaker at `at` with ten transient failures.
async fn trip(store: &Arc<dyn Store>, policy: &DependencyPolicy, at: Timestamp) {
    let state = report(store, policy, 0, 10, None, at).await;
    assert_eq!(state.breaker, BreakerState::Open, "ten failures open it");
}

fn is_parked(permit: &Permit) -> bool {
    matches!(
        permit,
        Permit::Wait {
            reason: WaitReason::Breaker,
            ..
        }
    )
}

/// A closed breaker lets a claimed job run, and the job records its dependency.
pub async fn acquire_lets_jobs_run_and_records_their_dependency(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let jobs = claimed(&stage, "q", 2, t0()).await;
    let permits = acquire(&store, &breaker(), &jobs, at(1)).await;
    assert_eq!(
        permits,
        vec![
            Permit::Run {
                wait: Duration::ZERO
            };
            2
        ]
    );
    for claimed in &jobs {
        let job = stage.get(claimed.id).await;
        assert_eq!(job.status, JobState::Running);
        assert_eq!(job.attempts, 1);
        assert_eq!(job.dependency.as_deref(), Some(KEY));
        assert_eq!(job.dependency_wait, None);
    }
    let state = current(&store, at(1)).await;
    assert_eq!(state.breaker, BreakerState::Closed);
    assert_eq!(state.trips, 0);
}

/// Ten transient failures in the window open the breaker; jobs claimed while it is
/// open go back to ready, parked, with their attempt given back.
pub async fn an_open_breaker_parks_jobs_without_spending_their_attempt(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let policy = breaker();
    let state = report(&store, &policy, 0, 9, None, t0()).await;
    assert_eq!(
        state.breaker,
        BreakerState::Closed,
        "nine answers are too few"
    );
    let state = report(&store, &policy, 1, 0, None, at(1)).await;
    assert_eq!(state.breaker, BreakerState::Open, "nine failures in ten");
    assert_eq!(state.trips, 1);
    assert_eq!(state.probe_at, Some(at(6)), "5 s cool-down");

    let jobs = claimed(&stage, "q", 3, at(2)).await;
    let permits = acquire(&store, &policy, &jobs, at(2)).await;
    assert!(permits.iter().all(is_parked), "{permits:?}");
    for claimed in &jobs {
        let job = stage.get(claimed.id).await;
        assert_eq!(job.status, JobState::Ready);
        assert_eq!(job.attempts, 0, "the attempt is given back");
        assert_eq!(job.lease_token, None);
        assert_eq!(job.dependency.as_deref(), Some(KEY));
        assert_eq!(job.dependency_wait, Some(WaitReason::Breaker));
        assert_eq!(job.run_at, at(2 + 3600), "parked for the policy's park_for");
        assert!(job.errors.is_empty(), "waiting is not a failure");
    }
    assert_eq!(current(&store, at(2)).await.waiting.breaker, 3);
    assert!(
        stage.claim("q", 10, at(100)).await.is_empty(),
        "parked jobs are not due"
    );
}

/// After the cool-down, among many workers asking at once, exactly one job is sent as
/// the probe; the others are parked.
pub async fn after_the_cooldown_exactly_one_probe_goes_among_concurrent_acquirers(
    store: Arc<dyn Store>,
) {
    let stage = Stage::new(store.clone());
    let policy = breaker();
    trip(&store, &policy, t0()).await;
    let mut batches = Vec::new();
    for n in 0..8 {
        batches.push(claimed(&stage, &format!("q{n}"), 3, at(5)).await);
    }
    let tasks: Vec<_> = batches
        .into_iter()
        .enumerate()
        .map(|(n, jobs)| {
            let store = store.clone();
            let policy = policy.clone();
            tokio::spawn(async move {
                acquire_as(&store, &policy, &format!("w{n}"), &jobs, at(6)).await
            })
        })
        .collect();
    let mut permits = Vec::new();
    for task in futures::future::join_all(tasks).await {
        permits.extend(task.expect("acquirer"));
    }
    let probes = permits.iter().filter(|p| **p == Permit::Probe).count();
    assert_eq!(probes, 1, "{permits:?}");
    assert_eq!(permits.iter().filter(|p| is_parked(p)).count(), 23);
    let state = current(&store, at(6)).await;
    assert_eq!(state.breaker, BreakerState::HalfOpen);
    assert!(state.probe.is_some());
    assert_eq!(state.waiting.breaker, 23);
    // While the probe is in flight, later askers wait too.
    let late = claimed(&stage, "late", 1, at(7)).await;
    assert!(is_parked(&acquire(&store, &policy, &late, at(7)).await[0]));
}

/// The probe's success closes the breaker and releases every parked job, due now;
/// its failure reopens it with a doubled cool-down.
pub async fn a_probe_success_closes_the_breaker_and_releases_parked_jobs(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let policy = breaker();
    trip(&store, &policy, t0()).await;
    let parked = claimed(&stage, "q", 3, at(1)).await;
    acquire(&store, &policy, &parked, at(1)).await;

    // First probe fails: open again, for 10 s.
    let probe = claimed(&stage, "p", 1, at(5)).await;
    assert_eq!(
        acquire(&store, &policy, &probe, at(5)).await,
        vec![Permit::Probe]
    );
    let state = report(
        &store,
        &policy,
        0,
        0,
        Some((probe[0].id, ProbeOutcome::Failure)),
        at(6),
    )
    .await;
    assert_eq!(state.breaker, BreakerState::Open);
    assert_eq!(state.cooldown_secs, 10.0);
    assert_eq!(state.probe_at, Some(at(16)));
    let early = claimed(&stage, "p", 1, at(15)).await;
    assert!(is_parked(
        &acquire(&store, &policy, &early, at(15)).await[0]
    ));

    // Second probe succeeds: closed, parked jobs due now, in the queue again.
    let probe = claimed(&stage, "p2", 1, at(16)).await;
    assert_eq!(
        acquire(&store, &policy, &probe, at(16)).await,
        vec![Permit::Probe]
    );
    let state = report(
        &store,
        &policy,
        0,
        0,
        Some((probe[0].id, ProbeOutcome::Success)),
        at(17),
    )
    .await;
    assert_eq!(state.breaker, BreakerState::Closed);
    assert_eq!(current(&store, at(17)).await.waiting.breaker, 0);
    for job in &parked {
        let job = stage.get(job.id).await;
        assert_eq!(job.status, JobState::Ready);
        assert_eq!(job.run_at, at(17));
        assert_eq!(job.dependency_wait, None);
    }
    let again = stage.claim("q", 10, at(17)).await;
    assert_eq!(id_set(&again), id_set(&parked));
    assert!(
        again.iter().all(|j| j.attempts == 1),
        "no attempt was spent waiting"
    );
}

/// Only the current probe's answer moves the breaker; a neutral answer lets another
/// probe go.
pub async fn only_the_current_probe_moves_the_breaker(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let policy = breaker();
    trip(&store, &policy, t0()).await;
    let probe = claimed(&stage, "p", 1, at(5)).await;
    assert_eq!(
        acquire(&store, &policy, &probe, at(5)).await,
        vec![Permit::Probe]
    );
    let state = report(
        &store,
        &policy,
        0,
        0,
        Some((probe[0].id + 1000, ProbeOutcome::Success)),
        at(6),
    )
    .await;
    assert_eq!(
        state.breaker,
        BreakerState::HalfOpen,
        "not the probe: ignored"
    );
    let state = report(
        &store,
        &policy,
        0,
        0,
        Some((probe[0].id, ProbeOutcome::Neutral)),
        at(6),
    )
    .await;
    assert_eq!(state.breaker, BreakerState::HalfOpen);
    assert!(
        state.probe.is_none(),
        "a neutral answer frees the probe's place"
    );
    let next = claimed(&stage, "p", 1, at(7)).await;
    assert_eq!(
        acquire(&store, &policy, &next, at(7)).await,
        vec![Permit::Probe]
    );
}

/// An operator holds a breaker open (nothing runs, no probe) and closes it (the parked
/// jobs are released); a key never seen can be opened ahead of any job.
pub async fn an_operator_holds_a_breaker_open_and_closes_it(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let policy = breaker();
    let state = store
        .dependency_set(DependencySetParams {
            dependency: KEY.to_string(),
            action: BreakerAction::Open,
            now: Some(t0()),
        })
        .await
        .unwrap();
    assert_eq!(state.breaker, BreakerState::Open);
    assert!(state.held_open);
    let jobs = claimed(&stage, "q", 2, at(3600)).await;
    let permits = acquire(&store, &policy, &jobs, at(3600)).await;
    assert!(
        permits.iter().all(is_parked),
        "held open: no probe, {permits:?}"
    );
    let swept = store
        .dependency_sweep(DependencySweepParams {
            now: Some(at(3600)),
        })
        .await
        .unwrap();
    assert!(swept.is_empty(), "a held breaker wants no probe");
    let state = store
        .dependency_set(DependencySetParams {
            dependency: KEY.to_string(),
            action: BreakerAction::Close,
            now: Some(at(3601)),
        })
        .await
        .unwrap();
    assert_eq!(state.breaker, BreakerState::Closed);
    assert!(!state.held_open);
    let again = stage.claim("q", 10, at(3601)).await;
    assert_eq!(id_set(&again), id_set(&jobs), "released by the close");
    assert_eq!(
        acquire(&store, &policy, &again, at(3601)).await,
        vec![
            Permit::Run {
                wait: Duration::ZERO
            };
            2
        ]
    );
}

/// With no job of the key arriving, the sweep makes one parked job due once the
/// breaker wants a probe, and only one.
pub async fn sweep_makes_one_parked_job_due_when_the_breaker_wants_a_probe(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let policy = breaker();
    trip(&store, &policy, t0()).await;
    let jobs = claimed(&stage, "q", 3, at(1)).await;
    acquire(&store, &policy, &jobs, at(1)).await;
    let sweep = |now| {
        let store = store.clone();
        async move {
            store
                .dependency_sweep(DependencySweepParams { now: Some(now) })
                .await
                .unwrap()
        }
    };
    assert!(sweep(at(4)).await.is_empty(), "still cooling down");
    assert_eq!(sweep(at(5)).await, vec![KEY.to_string()]);
    assert!(
        sweep(at(5)).await.is_empty(),
        "one parked job is due already"
    );
    let due = stage.claim("q", 10, at(5)).await;
    assert_eq!(
        ids(&due),
        vec![jobs[0].id],
        "the first parked job, in claim order"
    );
    assert_eq!(
        acquire(&store, &policy, &due, at(5)).await,
        vec![Permit::Probe]
    );
}

/// A rate limit paces the jobs it lets run (each waits for its turn, at most
/// `max_wait`) and sends the rest back to ready until their turn, which they keep.
pub async fn the_rate_limit_paces_jobs_and_books_turns_for_the_rest(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let policy = rate(10.0);
    let jobs = claimed(&stage, "q", 14, t0()).await;
    let permits = acquire(&store, &policy, &jobs, t0()).await;
    for (i, permit) in permits.iter().enumerate().take(11) {
        assert_eq!(
            *permit,
            Permit::Run {
                wait: Duration::from_millis(100 * i as u64)
            }
        );
    }
    for (i, permit) in permits.iter().enumerate().skip(11) {
        assert_eq!(
            *permit,
            Permit::Wait {
                reason: WaitReason::RateLimit,
                until: at_ms(100 * i as i64)
            }
        );
        let job = stage.get(jobs[i].id).await;
        assert_eq!(job.status, JobState::Ready);
        assert_eq!(job.attempts, 0);
        assert_eq!(job.run_at, at_ms(100 * i as i64));
        assert_eq!(job.dependency_wait, Some(WaitReason::RateLimit));
    }
    assert_eq!(current(&store, t0()).await.waiting.rate_limit, 3);
    // Back at its turn, a job runs at once: it does not queue behind later jobs.
    let late = claimed(&stage, "late", 1, at_ms(1100)).await;
    let back = stage.claim("q", 1, at_ms(1100)).await;
    assert_eq!(ids(&back), vec![jobs[11].id]);
    assert_eq!(
        acquire(&store, &policy, &back, at_ms(1100)).await,
        vec![Permit::Run {
            wait: Duration::ZERO
        }]
    );
    assert_eq!(
        acquire(&store, &policy, &late, at_ms(1100)).await,
        vec![Permit::Run {
            wait: Duration::from_millis(300)
        }],
        "a new job queues behind the turns already given (1.4 s)"
    );
}

/// When a rate-limited breaker closes, its parked jobs get consecutive turns in claim
/// order instead of all coming due at once.
pub async fn released_jobs_are_paced_by_the_rate_limit_in_claim_order(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let mut policy = breaker();
    policy.rate_limit = Some(RateLimit::per_second(10.0));
    trip(&store, &policy, t0()).await;
    let parked = claimed(&stage, "q", 4, at(1)).await;
    acquire(&store, &policy, &parked, at(1)).await;
    let probe = claimed(&stage, "p", 1, at(5)).await;
    assert_eq!(
        acquire(&store, &policy, &probe, at(5)).await,
        vec![Permit::Probe]
    );
    let state = report(
        &store,
        &policy,
        0,
        0,
        Some((probe[0].id, ProbeOutcome::Success)),
        at(6),
    )
    .await;
    assert_eq!(state.breaker, BreakerState::Closed);
    assert_eq!(current(&store, at(6)).await.waiting.rate_limit, 4);
    let run_at: Vec<Timestamp> = {
        let mut v = Vec::new();
        for job in &parked {
            let job = stage.get(job.id).await;
            assert_eq!(job.dependency_wait, Some(WaitReason::RateLimit));
            v.push(job.run_at);
        }
        v
    };
    assert_eq!(
        run_at,
        vec![at_ms(6000), at_ms(6100), at_ms(6200), at_ms(6300)],
        "one turn each, 100 ms apart, in claim order"
    );
}

/// Retries may not exceed the budget's share of first attempts: one over it waits its
/// backoff again with the attempt given back.
pub async fn the_retry_budget_holds_retries_to_a_share_of_first_attempts(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let policy = DependencyPolicy {
        retry_budget: Some(RetryBudget {
            ratio: 0.5,
            min_retries: 1,
            window: secs(10),
        }),
        ..DependencyPolicy::off()
    };
    // Four first attempts allow two retries.
    let fresh = claimed(&stage, "fresh", 4, t0()).await;
    assert!(acquire(&store, &policy, &fresh, t0())
        .await
        .iter()
        .all(|p| matches!(p, Permit::Run { .. })));
    // Three jobs on their second attempt.
    let mut retries = Vec::new();
    for n in 0..3 {
        let queue = format!("retry{n}");
        stage
            .retrying(job(&queue, "send_receipt"), t0(), secs(1))
            .await;
        retries.extend(stage.claim(&queue, 1, at(1)).await);
    }
    assert!(retries.iter().all(|j| j.attempts == 2));
    let permits = acquire(&store, &policy, &retries, at(1)).await;
    assert!(matches!(permits[0], Permit::Run { .. }));
    assert!(matches!(permits[1], Permit::Run { .. }));
    assert_eq!(
        permits[2],
        Permit::Wait {
            reason: WaitReason::RetryBudget,
            until: at(21)
        },
        "over budget: it waits its retry delay"
    );
    let waiting = stage.get(retries[2].id).await;
    assert_eq!(waiting.status, JobState::Ready);
    assert_eq!(waiting.attempts, 1, "the second attempt is given back");
    assert_eq!(waiting.dependency_wait, Some(WaitReason::RetryBudget));
    let state = current(&store, at(1)).await;
    let budget = state.retry_budget.expect("a budget is set");
    assert_eq!((budget.fresh, budget.retries), (4.0, 2.0));
}

/// A request whose lease is stale (or repeated in the call) is lease lost and changes
/// nothing.
pub async fn acquire_with_a_lost_lease_changes_nothing(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let policy = rate(1.0);
    let jobs = claimed(&stage, "q", 1, t0()).await;
    let mut stale = jobs[0].clone();
    stale.lease_token = Some(revenant_core::LeaseToken(
        jobs[0].lease_token.unwrap().0 ^ 1,
    ));
    let permits = acquire(
        &store,
        &policy,
        &[stale, jobs[0].clone(), jobs[0].clone()],
        t0(),
    )
    .await;
    assert_eq!(
        permits,
        vec![
            Permit::LeaseLost,
            Permit::Run {
                wait: Duration::ZERO
            },
            Permit::LeaseLost
        ]
    );
    // Only one turn was taken: the next job's turn is 1 s away.
    let next = claimed(&stage, "n", 1, t0()).await;
    assert_eq!(
        acquire(&store, &policy, &next, t0()).await,
        vec![Permit::Run {
            wait: Duration::from_secs(1)
        }]
    );
}

/// `dependency_list` shows every dependency by key, with its policy's limits.
pub async fn dependency_list_shows_every_dependency_by_key(store: Arc<dyn Store>) {
    for key in ["b-host", "a-host"] {
        store
            .dependency_report(DependencyReportParams {
                dependency: key.to_string(),
                policy: rate(50.0),
                successes: 3,
                failures: 0,
                probe: None,
                slow: 0,
                finished: vec![],
                now: Some(t0()),
            })
            .await
            .unwrap();
    }
    let list = store
        .dependency_list(DependencyListParams {
            dependency: None,
            now: Some(t0()),
        })
        .await
        .unwrap();
    let keys: Vec<&str> = list.iter().map(|d| d.dependency.as_str()).collect();
    assert_eq!(keys, vec!["a-host", "b-host"]);
    let rate = list[0].rate_limit.expect("the rate limit of the last call");
    assert_eq!((rate.per_second, rate.burst), (50.0, 1));
    assert!(store
        .dependency_list(DependencyListParams {
            dependency: Some("nobody".into()),
            now: None,
        })
        .await
        .unwrap()
        .is_empty());
    let err = store
        .dependency_set(DependencySetParams {
            dependency: "bad\u{7}key".into(),
            action: BreakerAction::Open,
            now: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Input(_)), "{err}");
}

/// A bulkhead alone: `shared` across every worker, `wait` 500 ms.
fn bulkhead(shared: Option<u32>) -> DependencyPolicy {
    DependencyPolicy::off().with_bulkhead(Bulkhead {
        shared,
        ..Bulkhead::default()
    })
}

async fn acquire_bounded(
    store: &Arc<dyn Store>,
    policy: &DependencyPolicy,
    worker: &str,
    jobs: &[Job],
    local_free: Option<u32>,
    now: Timestamp,
) -> Vec<Permit> {
    store
        .dependency_acquire(DependencyAcquireParams {
            dependency: KEY.to_string(),
            policy: policy.clone(),
            worker: worker.to_string(),
            lease: LEASE,
            requests: jobs.iter().map(request).collect(),
            local_free,
            now: Some(now),
        })
        .await
        .expect("dependency_acquire")
        .permits
}

async fn finished(
    store: &Arc<dyn Store>,
    policy: &DependencyPolicy,
    jobs: &[JobId],
    now: Timestamp,
) -> DependencyState {
    store
        .dependency_report(DependencyReportParams {
            dependency: KEY.to_string(),
            policy: policy.clone(),
            successes: jobs.len() as u64,
            failures: 0,
            probe: None,
            slow: 0,
            finished: jobs.to_vec(),
            now: Some(now),
        })
        .await
        .expect("dependency_report")
}

fn is_bulkhead_wait(permit: &Permit) -> bool {
    matches!(
        permit,
        Permit::Wait {
            reason: WaitReason::Bulkhead,
            ..
        }
    )
}

/// Jobs past the worker's own bulkhead limit go back to ready for the bulkhead's
/// wait, their attempt given back and their worker slot free; nothing marks them
/// as waiting on the breaker, and the dependency counts them as turned back.
pub async fn a_job_at_its_bulkhead_limit_spends_no_attempt_and_holds_no_lease(
    store: Arc<dyn Store>,
) {
    let stage = Stage::new(store.clone());
    let policy = bulkhead(None);
    let jobs = claimed(&stage, "q", 3, t0()).await;
    let permits = acquire_bounded(&store, &policy, WORKER, &jobs, Some(1), at(1)).await;
    assert_eq!(
        permits[0],
        Permit::Run {
            wait: Duration::ZERO
        }
    );
    assert!(permits[1..].iter().all(is_bulkhead_wait), "{permits:?}");
    let running = stage.get(jobs[0].id).await;
    assert_eq!(running.status, JobState::Running);
    for claimed in &jobs[1..] {
        let job = stage.get(claimed.id).await;
        assert_eq!(job.status, JobState::Ready);
        assert_eq!(job.attempts, 0, "the attempt is given back");
        assert_eq!(job.lease_token, None, "no lease: no slot is held");
        assert_eq!(job.dependency.as_deref(), Some(KEY));
        assert_eq!(job.dependency_wait, None, "a short wait, not stored");
        // The bulkhead's wait, the jobs turned back together spread over one more.
        let wait = job.run_at - at(1);
        assert!(
            wait >= chrono::Duration::milliseconds(500) && wait < chrono::Duration::seconds(1),
            "back after the bulkhead's wait: {wait}"
        );
        assert!(job.errors.is_empty(), "waiting is not a failure");
    }
    let state = current(&store, at(1)).await;
    let bulkhead = state.bulkhead.expect("the bulkhead is shown");
    assert_eq!(bulkhead.turned_back, 2);
    assert_eq!(bulkhead.in_flight, 1);
    assert_eq!(state.waiting.breaker, 0);
    let again = stage.claim("q", 10, at(2)).await;
    assert_eq!(again.len(), 2, "due again after the wait");
    assert!(again.iter().all(|job| job.attempts == 1), "{again:?}");
}

/// The shared limit holds across workers: what one worker holds, the other cannot
/// take, until the first reports its attempts finished or their leases end.
pub async fn the_shared_bulkhead_limit_holds_across_workers(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let policy = bulkhead(Some(2));
    let first = claimed(&stage, "q", 2, t0()).await;
    let permits = acquire_bounded(&store, &policy, "worker-a", &first, None, at(1)).await;
    assert!(
        permits.iter().all(|p| matches!(p, Permit::Run { .. })),
        "{permits:?}"
    );
    let second = claimed(&stage, "q", 2, at(1)).await;
    let permits = acquire_bounded(&store, &policy, "worker-b", &second, None, at(1)).await;
    assert!(permits.iter().all(is_bulkhead_wait), "{permits:?}");
    assert_eq!(current(&store, at(1)).await.bulkhead.unwrap().in_flight, 2);

    let state = finished(&store, &policy, &[first[0].id], at(2)).await;
    assert_eq!(state.bulkhead.unwrap().in_flight, 1, "one permit freed");
    let retried = stage.claim("q", 10, at(3)).await;
    assert_eq!(retried.len(), 2);
    let permits = acquire_bounded(&store, &policy, "worker-b", &retried, None, at(3)).await;
    assert!(matches!(permits[0], Permit::Run { .. }), "{permits:?}");
    assert!(is_bulkhead_wait(&permits[1]), "{permits:?}");

    // worker-a dies holding first[1]: its permit lapses with the job's lease.
    let later = at(3) + chrono::Duration::from_std(LEASE).unwrap() + chrono::Duration::seconds(1);
    let state = current(&store, later).await;
    assert_eq!(state.bulkhead.unwrap().in_flight, 0, "every permit lapsed");
}

/// Slow calls open the breaker on their own share, with no failure at all; a
/// breaker without the slow-call setting ignores them.
pub async fn slow_calls_open_the_breaker(store: Arc<dyn Store>) {
    let slow_policy = DependencyPolicy {
        breaker: Some(BreakerPolicy {
            slow_call: Some(SlowCall::default()),
            ..BreakerPolicy::default()
        }),
        ..DependencyPolicy::off()
    };
    let report_slow = |policy: DependencyPolicy, successes: u64, slow: u64, now: Timestamp| {
        let store = store.clone();
        async move {
            store
                .dependency_report(DependencyReportParams {
                    dependency: KEY.to_string(),
                    policy,
                    successes,
                    failures: 0,
                    probe: None,
                    slow,
                    finished: vec![],
                    now: Some(now),
                })
                .await
                .expect("dependency_report")
        }
    };
    let state = report_slow(slow_policy.clone(), 5, 4, t0()).await;
    assert_eq!(state.breaker, BreakerState::Closed, "4 slow of 9: too few");
    let state = report_slow(slow_policy.clone(), 0, 1, at(1)).await;
    assert_eq!(state.breaker, BreakerState::Open, "5 slow of 10: half");
    assert_eq!(state.answers.slow, 5.0);
    assert_eq!(state.answers.slow_share, 0.5);
    assert_eq!(state.answers.failures, 0.0);

    let blind = DependencyPolicy {
        breaker: Some(BreakerPolicy {
            slow_call: None,
            ..BreakerPolicy::default()
        }),
        ..DependencyPolicy::off()
    };
    store
        .dependency_set(DependencySetParams {
            dependency: KEY.to_string(),
            action: BreakerAction::Close,
            now: Some(at(2)),
        })
        .await
        .unwrap();
    let state = report_slow(blind, 0, 20, at(3)).await;
    assert_eq!(
        state.breaker,
        BreakerState::Closed,
        "slow calls not counted"
    );
}
