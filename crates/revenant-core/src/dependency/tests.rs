//! The state machine as tables, with pinned clocks. The same behaviours run against
//! every backend in the conformance suite.

use std::time::Duration;

use super::*;

const S: i64 = 1_000_000;
const T0: i64 = 1_767_225_600 * S;

fn input(job: i64) -> PermitInput {
    PermitInput {
        job,
        attempts: 1,
        reserved: false,
        retry_delay: Duration::from_secs(10),
    }
}

fn retry(job: i64) -> PermitInput {
    PermitInput {
        attempts: 2,
        ..input(job)
    }
}

fn breaker_only() -> DependencyPolicy {
    DependencyPolicy {
        retry_budget: None,
        ..DependencyPolicy::default()
    }
}

fn lease() -> Duration {
    Duration::from_secs(30)
}

fn trip(record: &mut DependencyRecord, policy: &DependencyPolicy, at: i64) {
    assert!(!record.report(policy, at, 0, 10, None));
    assert_eq!(record.state, BreakerState::Open);
}

#[test]
fn the_breaker_opens_at_the_threshold_and_not_below_the_minimum() {
    let policy = breaker_only();
    let mut record = DependencyRecord::default();
    // Nine failures: under min_requests.
    record.report(&policy, T0, 0, 9, None);
    assert_eq!(record.state, BreakerState::Closed);
    // One success makes ten answers, nine failed: 90% >= 50%.
    record.report(&policy, T0 + S, 1, 0, None);
    assert_eq!(record.state, BreakerState::Open);
    assert_eq!(record.trips, 1);
    assert_eq!(record.open_until_us, Some(T0 + 6 * S));

    // Below the threshold it stays closed.
    let mut healthy = DependencyRecord::default();
    healthy.report(&policy, T0, 60, 40, None);
    assert_eq!(healthy.state, BreakerState::Closed);
}

#[test]
fn old_answers_slide_out_of_the_window() {
    let policy = breaker_only();
    let mut record = DependencyRecord::default();
    record.report(&policy, T0, 0, 8, None);
    // 25 s later both earlier windows are gone: 8 old failures do not count.
    record.report(&policy, T0 + 25 * S, 0, 3, None);
    assert_eq!(record.state, BreakerState::Closed);
}

#[test]
fn while_open_jobs_wait_without_a_probe_until_the_cooldown_is_over() {
    let policy = breaker_only();
    let mut record = DependencyRecord::default();
    trip(&mut record, &policy, T0);
    let decisions = record.acquire(&policy, T0 + S, "w1", lease(), &[input(1), input(2)]);
    let park_until = T0 + S + 3600 * S;
    assert_eq!(
        decisions,
        vec![
            Decision::Wait {
                reason: WaitReason::Breaker,
                until_us: park_until
            };
            2
        ]
    );
    // Cool-down over: exactly one probe, the rest wait.
    let decisions = record.acquire(&policy, T0 + 5 * S, "w1", lease(), &[input(3), input(4)]);
    assert_eq!(decisions[0], Decision::Probe);
    assert!(matches!(
        decisions[1],
        Decision::Wait {
            reason: WaitReason::Breaker,
            ..
        }
    ));
    assert_eq!(record.state, BreakerState::HalfOpen);
    // Another worker asks while the probe is in flight: it waits.
    let other = record.acquire(&policy, T0 + 6 * S, "w2", lease(), &[input(5)]);
    assert!(matches!(other[0], Decision::Wait { .. }));
}

#[test]
fn a_probe_success_closes_and_a_failure_reopens_with_a_doubled_cooldown() {
    let policy = breaker_only();
    let mut record = DependencyRecord::default();
    trip(&mut record, &policy, T0);
    record.acquire(&policy, T0 + 5 * S, "w1", lease(), &[input(3)]);
    assert!(!record.report(&policy, T0 + 6 * S, 0, 0, Some((3, ProbeOutcome::Failure))));
    assert_eq!(record.state, BreakerState::Open);
    assert_eq!(record.cooldown_us, 10 * S);
    assert_eq!(record.open_until_us, Some(T0 + 16 * S));
    // Doubling stops at max_cooldown (15 s).
    for n in 0..4 {
        let at = record.open_until_us.unwrap();
        assert_eq!(
            record.acquire(&policy, at, "w1", lease(), &[input(10 + n)]),
            vec![Decision::Probe]
        );
        record.report(&policy, at + S, 0, 0, Some((10 + n, ProbeOutcome::Failure)));
    }
    assert_eq!(record.cooldown_us, 15 * S);
    // A report for a job that is not the probe changes nothing.
    let at = record.open_until_us.unwrap();
    record.acquire(&policy, at, "w1", lease(), &[input(20)]);
    assert!(!record.report(&policy, at, 0, 0, Some((99, ProbeOutcome::Success))));
    assert_eq!(record.state, BreakerState::HalfOpen);
    // The probe's success closes it and says to release the parked jobs.
    assert!(record.report(&policy, at + S, 0, 0, Some((20, ProbeOutcome::Success))));
    assert_eq!(record.state, BreakerState::Closed);
    assert_eq!(record.trips, 1);
    assert_eq!(
        record.acquire(&policy, at + 2 * S, "w1", lease(), &[input(21)]),
        vec![Decision::Run { wait_us: 0 }]
    );
}

#[test]
fn a_neutral_or_lost_probe_lets_another_probe_go() {
    let policy = breaker_only();
    let mut record = DependencyRecord::default();
    trip(&mut record, &policy, T0);
    record.acquire(&policy, T0 + 5 * S, "w1", lease(), &[input(3)]);
    record.report(&policy, T0 + 6 * S, 0, 0, Some((3, ProbeOutcome::Neutral)));
    assert_eq!(record.state, BreakerState::HalfOpen);
    assert_eq!(
        record.acquire(&policy, T0 + 6 * S, "w2", lease(), &[input(4)]),
        vec![Decision::Probe]
    );
    // Its worker dies: after the probe's lease another may go.
    assert!(!record.wants_probe(T0 + 30 * S));
    assert!(record.wants_probe(T0 + 36 * S));
    assert_eq!(
        record.acquire(&policy, T0 + 36 * S, "w3", lease(), &[input(5)]),
        vec![Decision::Probe]
    );
}

#[test]
fn permanent_failures_are_not_reported_so_they_never_trip_it() {
    // The runtime reports only successes and transient failures; a run of successes
    // with permanent failures in between keeps the share at zero.
    let policy = breaker_only();
    let mut record = DependencyRecord::default();
    record.report(&policy, T0, 20, 0, None);
    assert_eq!(record.state, BreakerState::Closed);
    assert_eq!(
        record
            .view("k", T0, WaitingCounts::default())
            .answers
            .failures,
        0.0
    );
}

#[test]
fn an_operator_holds_it_open_and_closes_it() {
    let policy = breaker_only();
    let mut record = DependencyRecord::default();
    assert!(!record.set(BreakerAction::Open, T0));
    assert_eq!(record.state, BreakerState::Open);
    // Held open: no probe, ever, even long past any cool-down.
    let far = T0 + 3600 * S;
    assert!(!record.wants_probe(far));
    assert!(matches!(
        record.acquire(&policy, far, "w1", lease(), &[input(1)])[0],
        Decision::Wait {
            reason: WaitReason::Breaker,
            ..
        }
    ));
    // Answers do not move a held breaker.
    record.report(&policy, far, 100, 0, None);
    assert_eq!(record.state, BreakerState::Open);
    // Auto: it probes at once.
    record.set(BreakerAction::Auto, far);
    assert!(record.wants_probe(far));
    assert_eq!(
        record.acquire(&policy, far, "w1", lease(), &[input(2)]),
        vec![Decision::Probe]
    );
    // Close: closed now, parked jobs released.
    assert!(record.set(BreakerAction::Close, far + S));
    assert_eq!(record.state, BreakerState::Closed);
    assert_eq!(
        record.acquire(&policy, far + S, "w1", lease(), &[input(3)]),
        vec![Decision::Run { wait_us: 0 }]
    );
}

#[test]
fn the_rate_limit_paces_requests_and_books_turns_further_off() {
    let policy = DependencyPolicy::off().with_rate_limit(RateLimit::per_second(10.0));
    let mut record = DependencyRecord::default();
    let requests: Vec<PermitInput> = (0..15).map(input).collect();
    let decisions = record.acquire(&policy, T0, "w1", lease(), &requests);
    // 100 ms apart; up to the 1 s max_wait they run (after their wait), past it they
    // go back to the queue holding their turn.
    for (i, decision) in decisions.iter().enumerate().take(11) {
        assert_eq!(
            *decision,
            Decision::Run {
                wait_us: i as i64 * S / 10
            },
            "{i}"
        );
    }
    for (i, decision) in decisions.iter().enumerate().skip(11) {
        assert_eq!(
            *decision,
            Decision::Wait {
                reason: WaitReason::RateLimit,
                until_us: T0 + i as i64 * S / 10
            }
        );
    }
    // A job coming back at its turn runs at once without booking another.
    let booked = record.reserved_until_us;
    let back = PermitInput {
        reserved: true,
        ..input(11)
    };
    assert_eq!(
        record.acquire(&policy, T0 + 11 * S / 10, "w1", lease(), &[back]),
        vec![Decision::Run { wait_us: 0 }]
    );
    assert_eq!(record.reserved_until_us, booked);
    // A new job queues behind every booked turn (1.5 s, within max_wait: it waits
    // in its slot).
    assert_eq!(
        record.acquire(&policy, T0 + 11 * S / 10, "w1", lease(), &[input(20)]),
        vec![Decision::Run {
            wait_us: 4 * S / 10
        }]
    );
    // Past max_wait it goes back to the queue holding its turn.
    assert_eq!(
        record.acquire(
            &policy,
            T0 + 11 * S / 10,
            "w1",
            lease(),
            &(21..28).map(input).collect::<Vec<_>>()
        )[6],
        Decision::Wait {
            reason: WaitReason::RateLimit,
            until_us: T0 + 22 * S / 10
        }
    );
}

#[test]
fn the_burst_lets_that_many_go_at_once_after_a_quiet_spell() {
    let policy = DependencyPolicy::off().with_rate_limit(RateLimit::per_second(10.0).with_burst(3));
    let mut record = DependencyRecord::default();
    let requests: Vec<PermitInput> = (0..4).map(input).collect();
    let waits: Vec<i64> = record
        .acquire(&policy, T0, "w1", lease(), &requests)
        .into_iter()
        .map(|d| match d {
            Decision::Run { wait_us } => wait_us,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(waits, vec![0, 0, 0, S / 10]);
}

#[test]
fn no_second_holds_more_than_the_rate_with_a_burst_of_one() {
    let policy = DependencyPolicy::off().with_rate_limit(RateLimit::per_second(50.0));
    let mut record = DependencyRecord::default();
    let mut starts = Vec::new();
    // Batches of 20 asked every 100 ms for 5 s: far more than 50 a second.
    for step in 0..50 {
        let now = T0 + step * S / 10;
        let requests: Vec<PermitInput> = (0..20).map(|j| input(step * 100 + j)).collect();
        for decision in record.acquire(&policy, now, "w1", lease(), &requests) {
            if let Decision::Run { wait_us } = decision {
                starts.push(now + wait_us);
            }
        }
    }
    let mut per_second = std::collections::BTreeMap::new();
    for start in starts {
        *per_second.entry(start.div_euclid(S)).or_insert(0) += 1;
    }
    assert!(per_second.values().all(|&n| n <= 50), "{per_second:?}");
    assert!(per_second.values().any(|&n| n == 50), "{per_second:?}");
}

#[test]
fn released_jobs_get_turns_in_a_row_and_later_jobs_queue_behind_them() {
    let policy = DependencyPolicy::off().with_rate_limit(RateLimit::per_second(50.0));
    let mut record = DependencyRecord::default();
    record.acquire(&policy, T0, "w1", lease(), &[]);
    let (first, spacing) = record.reserve_turns(T0, 1000);
    assert_eq!((first, spacing), (T0, S / 50));
    // A job claimed now gets the 1001st turn, 20 s away.
    assert_eq!(
        record.acquire(&policy, T0, "w1", lease(), &[input(1)]),
        vec![Decision::Wait {
            reason: WaitReason::RateLimit,
            until_us: T0 + 20 * S
        }]
    );
    // No rate limit: all at once.
    let mut plain = DependencyRecord::default();
    assert_eq!(plain.reserve_turns(T0, 1000), (T0, 0));
}

#[test]
fn the_retry_budget_holds_retries_to_a_share_of_first_attempts() {
    let policy = DependencyPolicy {
        breaker: None,
        rate_limit: None,
        retry_budget: Some(RetryBudget {
            ratio: 0.2,
            min_retries: 2,
            window: Duration::from_secs(10),
        }),
        bulkhead: None,
    };
    let mut record = DependencyRecord::default();
    // 20 first attempts allow 4 retries.
    let fresh: Vec<PermitInput> = (0..20).map(input).collect();
    record.acquire(&policy, T0, "w1", lease(), &fresh);
    let retries: Vec<PermitInput> = (100..106).map(retry).collect();
    let decisions = record.acquire(&policy, T0 + S, "w1", lease(), &retries);
    let ran = decisions
        .iter()
        .filter(|d| matches!(d, Decision::Run { .. }))
        .count();
    assert_eq!(ran, 4, "{decisions:?}");
    assert_eq!(
        decisions[5],
        Decision::Wait {
            reason: WaitReason::RetryBudget,
            until_us: T0 + S + 10 * S
        },
        "over budget: waits its backoff again"
    );
    // With no first attempts at all, the floor still lets a few retries through.
    let mut quiet = DependencyRecord::default();
    let decisions = quiet.acquire(&policy, T0, "w1", lease(), &[retry(1), retry(2), retry(3)]);
    assert_eq!(
        decisions
            .iter()
            .filter(|d| matches!(d, Decision::Run { .. }))
            .count(),
        2
    );
    // A job back at a rate-limit turn is not a retry for the budget.
    let back = PermitInput {
        reserved: true,
        ..retry(4)
    };
    assert!(matches!(
        quiet.acquire(&policy, T0, "w1", lease(), &[back])[0],
        Decision::Run { .. }
    ));
}

#[test]
fn the_view_says_what_the_record_holds() {
    let policy = breaker_only().with_rate_limit(RateLimit::per_second(10.0));
    let mut record = DependencyRecord::default();
    trip(&mut record, &policy, T0);
    let view = record.view(
        "email-provider",
        T0 + S,
        WaitingCounts {
            breaker: 7,
            ..WaitingCounts::default()
        },
    );
    assert_eq!(view.dependency, "email-provider");
    assert_eq!(view.breaker, BreakerState::Open);
    assert_eq!(view.answers.failures, 10.0);
    assert_eq!(view.answers.failure_share, 1.0);
    assert_eq!(view.waiting.breaker, 7);
    assert_eq!(view.rate_limit.unwrap().tokens, 1.0);
    assert_eq!(view.cooldown_secs, 5.0);
    assert!(view.probe_at.is_some());
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["breaker"], "open");
}

#[test]
fn windows_roll_by_whole_lengths() {
    let mut w = Window::default();
    w.roll(T0, 10 * S);
    w.cur = [3, 4];
    w.roll(T0 + 10 * S, 10 * S);
    assert_eq!(w.prev, [3, 4]);
    assert_eq!(w.weighted(T0 + 15 * S, 10 * S), (1.5, 2.0));
    w.roll(T0 + 40 * S, 10 * S);
    assert_eq!(w.prev, [0, 0]);
}

#[test]
fn slow_calls_open_the_breaker_on_their_own_share() {
    let policy = DependencyPolicy {
        breaker: Some(BreakerPolicy {
            slow_call: Some(crate::dependency::SlowCall::default()),
            ..BreakerPolicy::default()
        }),
        ..DependencyPolicy::off()
    };
    let mut record = DependencyRecord::default();
    let calls = |successes, slow| crate::dependency::Calls {
        successes,
        slow,
        ..Default::default()
    };
    assert!(!record.report_calls(&policy, T0, &calls(6, 3)));
    assert_eq!(record.state, BreakerState::Closed, "3 slow of 9");
    record.report_calls(&policy, T0 + S, &calls(0, 2));
    assert_eq!(
        record.state,
        BreakerState::Closed,
        "5 slow of 11: under half"
    );
    record.report_calls(&policy, T0 + S, &calls(0, 1));
    assert_eq!(record.state, BreakerState::Open, "6 slow of 12");
    assert_eq!(record.trips, 1);
}

#[test]
fn the_bulkhead_turns_back_jobs_past_the_local_and_the_shared_limit() {
    let policy = DependencyPolicy::off().with_bulkhead(crate::dependency::Bulkhead {
        shared: Some(3),
        ..Default::default()
    });
    let mut record = DependencyRecord::default();
    let waits = |decisions: &[Decision]| {
        decisions
            .iter()
            .filter(|d| {
                matches!(
                    d,
                    Decision::Wait {
                        reason: WaitReason::Bulkhead,
                        ..
                    }
                )
            })
            .count()
    };
    // This worker may start 2 more: the third waits.
    let first = record.acquire_bounded(
        &policy,
        T0,
        "w1",
        lease(),
        &[input(1), input(2), input(3)],
        Some(2),
    );
    assert_eq!(waits(&first), 1, "{first:?}");
    assert_eq!(
        first[2],
        Decision::Wait {
            reason: WaitReason::Bulkhead,
            until_us: T0 + 500_000
        }
    );
    // Another worker, no local limit: one shared permit is left of 3.
    let second = record.acquire_bounded(&policy, T0, "w2", lease(), &[input(4), input(5)], None);
    assert_eq!(waits(&second), 1, "{second:?}");
    assert_eq!(record.in_flight.len(), 3);
    assert_eq!(record.turned_back, 2);
    // Job 1 ends: its permit is free for the next.
    record.report_calls(
        &policy,
        T0 + S,
        &crate::dependency::Calls {
            successes: 1,
            finished: vec![1],
            ..Default::default()
        },
    );
    let third = record.acquire_bounded(&policy, T0 + S, "w2", lease(), &[input(6)], None);
    assert_eq!(waits(&third), 0, "{third:?}");
}

#[test]
fn the_bulkhead_wait_doubles_while_no_attempt_ends_and_starts_over_when_one_does() {
    let policy = DependencyPolicy::off().with_bulkhead(crate::dependency::Bulkhead {
        shared: Some(1),
        ..Default::default()
    });
    let mut record = DependencyRecord::default();
    let wait_at = |record: &mut DependencyRecord, at: i64, job: i64| match record.acquire_bounded(
        &policy,
        at,
        "w1",
        lease(),
        &[input(job)],
        None,
    )[0]
    {
        Decision::Wait {
            reason: WaitReason::Bulkhead,
            until_us,
        } => until_us - at,
        other => panic!("expected a bulkhead wait: {other:?}"),
    };
    // Job 1 holds the one permit (a hang); the others are turned back.
    record.acquire_bounded(&policy, T0, "w1", lease(), &[input(1)], None);
    let half = 500_000;
    assert_eq!(wait_at(&mut record, T0, 2), half);
    // Many acquires within one wait, as between two reports: still the base wait.
    assert_eq!(wait_at(&mut record, T0 + half / 2, 3), half);
    // One wait of quiet doubles it; three, eight times; it stops at sixteen.
    assert_eq!(wait_at(&mut record, T0 + half, 4), 2 * half);
    assert_eq!(wait_at(&mut record, T0 + 3 * half, 5), 8 * half);
    assert_eq!(wait_at(&mut record, T0 + 10 * S, 6), 16 * half);
    // An attempt ends (its permit is reported freed, and another takes it): the
    // next turned-back job waits the base again.
    let now = T0 + 11 * S;
    record.report_calls(
        &policy,
        now,
        &crate::dependency::Calls {
            successes: 1,
            finished: vec![1],
            ..Default::default()
        },
    );
    record.acquire_bounded(&policy, now, "w1", lease(), &[input(7)], None);
    assert_eq!(wait_at(&mut record, now, 8), half);
    // An idle hour later (job 7 ended, nothing in flight), a new busy spell counts
    // its quiet from its own start, not from job 7's end.
    let later = now + 3600 * S;
    record.report_calls(
        &policy,
        now + S,
        &crate::dependency::Calls {
            successes: 1,
            finished: vec![7],
            ..Default::default()
        },
    );
    record.acquire_bounded(&policy, later, "w1", lease(), &[input(9)], None);
    assert_eq!(wait_at(&mut record, later, 10), half);
}

#[test]
fn a_record_with_the_new_parts_keeps_its_policy_in_the_old_shape() {
    let policy = DependencyPolicy::default();
    let mut record = DependencyRecord::default();
    record.acquire(&policy, T0, "w1", lease(), &[input(1)]);
    let json = serde_json::to_value(&record).unwrap();
    let stored = json["policy"].to_string();
    assert!(
        !stored.contains("bulkhead") && !stored.contains("slow_call"),
        "an older release refuses unknown fields in the policy: {stored}"
    );
    let back: DependencyRecord = serde_json::from_value(json).unwrap();
    assert_eq!(back.full_policy(), Some(policy));
}
