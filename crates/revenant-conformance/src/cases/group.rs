//! FIFO groups: one job of a group at a time, in enqueue order.

use super::prelude::*;

/// A group's jobs are claimed one at a time, in enqueue order.
pub async fn group_jobs_run_one_at_a_time_in_enqueue_order(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let g: Vec<JobId> = {
        let mut g = Vec::new();
        for _ in 0..3 {
            g.push(stage.enqueue(job("q", "k").with_group("customer-1")).await);
        }
        g
    };
    for expected in &g {
        let claimed = stage.claim("q", 10, at(1)).await;
        assert_eq!(ids(&claimed), vec![*expected]);
        assert!(
            stage.claim("q", 10, at(1)).await.is_empty(),
            "a second job of the group ran"
        );
        stage.complete(&claimed[0], at(1)).await;
    }
    assert!(stage.claim("q", 10, at(1)).await.is_empty());
}

/// A group waits for its head while the head waits out a backoff.
pub async fn a_retrying_group_head_blocks_its_group(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let head = stage.enqueue(job("q", "k").with_group("g")).await;
    let next = stage.enqueue(job("q", "k").with_group("g")).await;
    let claimed = stage.claim_id(head, t0(), WORKER).await;
    stage
        .fail(
            &claimed,
            failure(FailureClass::Transient, "503"),
            FailAction::Retry { delay: secs(60) },
            t0(),
        )
        .await;
    assert!(stage.claim("q", 10, at(30)).await.is_empty());
    assert_eq!(ids(&stage.claim("q", 10, at(60)).await), vec![head]);
    assert_eq!(stage.get(next).await.status, JobState::Ready);
}

/// A head that dies unblocks its group: the next job runs.
pub async fn a_dead_group_head_unblocks_its_group(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let head = stage.enqueue(job("q", "k").with_group("g")).await;
    let next = stage.enqueue(job("q", "k").with_group("g")).await;
    let claimed = stage.claim_id(head, t0(), WORKER).await;
    stage
        .fail(
            &claimed,
            failure(FailureClass::Permanent, "bad template"),
            FailAction::Dead {
                reason: DeadReason::Permanent,
            },
            t0(),
        )
        .await;
    assert_eq!(ids(&stage.claim("q", 10, at(1)).await), vec![next]);
}

/// Other groups and ungrouped jobs never wait on a blocked group.
pub async fn other_groups_never_wait_on_a_blocked_group(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let a1 = stage.enqueue(job("q", "k").with_group("a")).await;
    let a2 = stage.enqueue(job("q", "k").with_group("a")).await;
    let b1 = stage.enqueue(job("q", "k").with_group("b")).await;
    let free = stage.enqueue(job("q", "k")).await;
    let claimed = stage.claim("q", 10, at(1)).await;
    assert_eq!(id_set(&claimed), BTreeSet::from([a1, b1, free]));
    assert!(stage.claim("q", 10, at(2)).await.is_empty());
    let b = claimed.iter().find(|j| j.id == b1).unwrap();
    stage.complete(b, at(3)).await;
    assert!(
        stage.claim("q", 10, at(4)).await.is_empty(),
        "a2 ran beside a1"
    );
    let a = claimed.iter().find(|j| j.id == a1).unwrap();
    stage.complete(a, at(5)).await;
    assert_eq!(ids(&stage.claim("q", 10, at(6)).await), vec![a2]);
}

/// Enqueue order within a group wins over priority.
pub async fn group_order_wins_over_priority(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let first = stage.enqueue(job("q", "k").with_group("g")).await;
    stage
        .enqueue(job("q", "k").with_group("g").with_priority(100))
        .await;
    assert_eq!(ids(&stage.claim("q", 10, at(1)).await), vec![first]);
}

/// An expired group head is reclaimed before the rest of its group.
pub async fn an_expired_group_head_is_reclaimed_before_its_group(store: Arc<dyn Store>) {
    let stage = Stage::new(store);
    let head = stage.enqueue(job("q", "k").with_group("g")).await;
    stage.enqueue(job("q", "k").with_group("g")).await;
    stage.claim_id(head, t0(), WORKER).await;
    let reclaimed = stage.claim("q", 10, at(31)).await;
    assert_eq!(ids(&reclaimed), vec![head]);
    assert_eq!(reclaimed[0].attempts, 2);
}
