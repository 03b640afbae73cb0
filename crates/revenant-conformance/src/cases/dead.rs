//! Dead letters: `job_redrive` and `job_purge`.

use super::prelude::*;

async fn redrive(store: &Arc<dyn Store>, params: JobRedriveParams) -> Vec<JobId> {
    store.job_redrive(params).await.expect("redrive")
}

fn by_ids(ids: Vec<JobId>) -> JobFilter {
    JobFilter {
        ids: Some(ids),
        ..JobFilter::default()
    }
}

/// A redrive moves a dead job to ready now: attempts reset to zero, history kept,
/// `redrives` counted, reason and finished_at cleared.
pub async fn redrive_resets_attempts_and_keeps_the_history(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let dead = stage.dead_after_attempts(job("q", "k"), t0()).await;
    assert_eq!(dead.status, JobState::Dead);
    assert_eq!(dead.errors.len(), 3);
    let redriven = redrive(
        &store,
        JobRedriveParams {
            filter: by_ids(vec![dead.id]),
            now: Some(at(1_000)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(redriven, vec![dead.id]);
    let job = stage.get(dead.id).await;
    assert_eq!(job.status, JobState::Ready);
    assert_eq!(job.attempts, 0);
    assert_eq!(job.max_attempts, 3);
    assert_eq!(job.redrives, 1);
    assert_eq!(job.dead_reason, None);
    assert_eq!(job.finished_at, None);
    assert_eq!(job.run_at, at(1_000));
    assert_eq!(job.errors, dead.errors, "the history is kept");
}

/// A redriven job gets its full attempt budget again, and the history keeps growing.
pub async fn a_redriven_job_gets_a_fresh_attempt_budget(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let dead = stage.dead_after_attempts(job("q", "k"), t0()).await;
    redrive(
        &store,
        JobRedriveParams {
            filter: by_ids(vec![dead.id]),
            now: Some(at(1_000)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    let mut now = at(1_000);
    for attempt in 1..=3 {
        let claimed = stage.claim_id(dead.id, now, WORKER).await;
        assert_eq!(claimed.attempts, attempt);
        let action = if attempt < 3 {
            FailAction::Retry { delay: secs(1) }
        } else {
            FailAction::Dead {
                reason: DeadReason::AttemptsExhausted,
            }
        };
        stage
            .fail(
                &claimed,
                failure(FailureClass::Transient, "still down"),
                action,
                now,
            )
            .await;
        now += chrono::Duration::seconds(1);
    }
    let job = stage.get(dead.id).await;
    assert_eq!(job.status, JobState::Dead);
    assert_eq!(job.redrives, 1);
    assert_eq!(job.errors.len(), 6);
    assert_eq!(job.dead_reason, Some(DeadReason::AttemptsExhausted));
}

/// A redrive takes only dead jobs matching its filter, lowest id first, up to its limit.
pub async fn redrive_honours_filter_and_limit(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let mut receipts = Vec::new();
    for _ in 0..3 {
        let job = stage
            .dead(
                job("emails", "send_receipt"),
                DeadReason::Permanent,
                "503 provider down",
                t0(),
            )
            .await;
        receipts.push(job.id);
    }
    let other_kind = stage
        .dead(
            job("emails", "newsletter"),
            DeadReason::Permanent,
            "503",
            t0(),
        )
        .await;
    let other_queue = stage
        .dead(
            job("sms", "send_receipt"),
            DeadReason::Permanent,
            "503",
            t0(),
        )
        .await;
    let first = redrive(
        &store,
        JobRedriveParams {
            filter: JobFilter {
                queue: Some("emails".into()),
                kind: Some("send_receipt".into()),
                ..JobFilter::default()
            },
            limit: Some(2),
            now: Some(at(100)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(first, receipts[..2].to_vec());
    assert_eq!(stage.get(receipts[2]).await.status, JobState::Dead);
    let rest = redrive(
        &store,
        JobRedriveParams {
            filter: JobFilter {
                queue: Some("emails".into()),
                error_contains: Some("provider down".into()),
                ..JobFilter::default()
            },
            now: Some(at(100)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(rest, vec![receipts[2]]);
    assert_eq!(stage.get(other_kind.id).await.status, JobState::Dead);
    assert_eq!(stage.get(other_queue.id).await.status, JobState::Dead);
}

/// A redrive by reason takes only jobs that died for that reason.
pub async fn redrive_by_dead_reason_takes_only_that_reason(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let permanent = stage
        .dead(job("a", "k"), DeadReason::Permanent, "bad", t0())
        .await;
    let decode = stage
        .dead(job("b", "k"), DeadReason::DecodeError, "bad json", t0())
        .await;
    let redriven = redrive(
        &store,
        JobRedriveParams {
            filter: JobFilter {
                dead_reason: Some(DeadReason::DecodeError),
                ..JobFilter::default()
            },
            now: Some(at(10)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(redriven, vec![decode.id]);
    assert_eq!(stage.get(permanent.id).await.status, JobState::Dead);
}

/// A spaced redrive spreads the jobs' `run_at`: the i-th gets now + i × spacing.
pub async fn redrive_spreads_run_at_by_spacing(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let mut dead = Vec::new();
    for _ in 0..3 {
        dead.push(
            stage
                .dead(job("q", "k"), DeadReason::Permanent, "x", t0())
                .await
                .id,
        );
    }
    let redriven = redrive(
        &store,
        JobRedriveParams {
            filter: JobFilter::default(),
            limit: None,
            spacing: secs(10),
            now: Some(at(1_000)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(redriven, dead);
    for (i, id) in dead.iter().enumerate() {
        assert_eq!(stage.get(*id).await.run_at, at(1_000 + 10 * i as i64));
    }
    assert_eq!(ids(&stage.claim("q", 10, at(1_000)).await), vec![dead[0]]);
    assert_eq!(ids(&stage.claim("q", 10, at(1_010)).await), vec![dead[1]]);
}

/// A redrive leaves alone jobs that are not dead, even when named by id.
pub async fn redrive_leaves_a_job_that_is_no_longer_dead_alone(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let dead = stage
        .dead(job("a", "k"), DeadReason::Permanent, "x", t0())
        .await;
    let ready = stage.retrying(job("b", "k"), t0(), secs(10)).await;
    let completed = stage.completed(job("c", "k"), t0()).await;
    let redriven = redrive(
        &store,
        JobRedriveParams {
            filter: by_ids(vec![dead.id, ready.id, completed.id]),
            now: Some(at(50)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(redriven, vec![dead.id]);
    assert_eq!(stage.get(ready.id).await, ready);
    assert_eq!(stage.get(completed.id).await, completed);
    let twice = redrive(
        &store,
        JobRedriveParams {
            filter: by_ids(vec![dead.id]),
            now: Some(at(51)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert!(twice.is_empty(), "a redriven job was redriven again");
    assert_eq!(stage.get(dead.id).await.redrives, 1);
}

/// A purge deletes only dead jobs that match its filter.
pub async fn purge_deletes_only_dead_jobs_matching_the_filter(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let dead_here = stage
        .dead(job("q1", "k"), DeadReason::Permanent, "x", t0())
        .await;
    let dead_there = stage
        .dead(job("q2", "k"), DeadReason::Permanent, "x", t0())
        .await;
    let completed = stage.completed(job("q1", "k"), t0()).await;
    let ready = stage.enqueue(job("q1", "k")).await;
    let purged = store
        .job_purge(JobPurgeParams {
            filter: JobFilter {
                queue: Some("q1".into()),
                ..JobFilter::default()
            },
            limit: None,
        })
        .await
        .unwrap();
    assert_eq!(purged, 1);
    assert!(stage.find(dead_here.id).await.is_none());
    assert!(stage.find(dead_there.id).await.is_some());
    assert!(stage.find(completed.id).await.is_some());
    assert!(stage.find(ready).await.is_some());
}

/// A purge deletes at most its limit.
pub async fn purge_honours_limit(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    for _ in 0..3 {
        stage
            .dead(job("q", "k"), DeadReason::Permanent, "x", t0())
            .await;
    }
    let purge = |limit| JobPurgeParams {
        filter: JobFilter::default(),
        limit,
    };
    assert_eq!(store.job_purge(purge(Some(2))).await.unwrap(), 2);
    assert_eq!(stage.all().await.len(), 1);
    assert_eq!(store.job_purge(purge(None)).await.unwrap(), 1);
    assert!(stage.all().await.is_empty());
}

fn dead_only() -> JobFilter {
    JobFilter {
        statuses: Some(vec![JobState::Dead]),
        ..JobFilter::default()
    }
}

/// A job that dies carries the fingerprint of its last error; a `lease_expired` death
/// (by claim or by sweep) carries the lease-expired fingerprint; a retried job carries
/// none; a redrive clears it.
pub async fn death_sets_a_fingerprint_and_redrive_clears_it(store: Arc<dyn Store>) {
    use revenant_core::fingerprint::{fingerprint, lease_expired};
    let stage = Stage::new(store.clone());
    let message = "HTTP 503 from provider after 1234ms";
    let dead = stage
        .dead(job("q", "k"), DeadReason::Permanent, message, at(10))
        .await;
    assert_eq!(dead.fingerprint, Some(fingerprint(message)));
    let retrying = stage.retrying(job("q", "k"), at(20), secs(3_600)).await;
    assert_eq!(retrying.fingerprint, None);

    let by_claim = stage
        .running_expired(job("q", "k").with_max_attempts(1), at(100), secs(1))
        .await;
    stage.claim("q", 10, at(100)).await;
    let by_sweep = stage
        .running_expired(job("s", "k").with_max_attempts(1), at(200), secs(1))
        .await;
    store
        .job_sweep(JobSweepParams { now: Some(at(200)) })
        .await
        .unwrap();
    for id in [by_claim.id, by_sweep.id] {
        let job = stage.get(id).await;
        assert_eq!(job.dead_reason, Some(DeadReason::LeaseExpired));
        assert_eq!(job.fingerprint, Some(lease_expired()), "job {id}");
    }

    redrive(
        &store,
        JobRedriveParams {
            filter: by_ids(vec![dead.id, by_claim.id]),
            now: Some(at(300)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(stage.get(dead.id).await.fingerprint, None);
    assert_eq!(stage.get(by_claim.id).await.fingerprint, None);
    assert_eq!(
        stage.get(by_sweep.id).await.fingerprint,
        Some(lease_expired())
    );
}

/// Listing, redriving and purging filter dead jobs by fingerprint: messages that differ
/// only in numbers and quoted values match one fingerprint, another error does not.
pub async fn job_filter_by_fingerprint_matches_one_error_across_its_variants(
    store: Arc<dyn Store>,
) {
    use revenant_core::fingerprint::fingerprint;
    let stage = Stage::new(store.clone());
    let a = stage
        .dead(
            job("q", "k"),
            DeadReason::Permanent,
            "timeout after 31s",
            at(1),
        )
        .await;
    let b = stage
        .dead(
            job("q", "k"),
            DeadReason::Permanent,
            "timeout after 95s",
            at(2),
        )
        .await;
    let other = stage
        .dead(
            job("q", "k"),
            DeadReason::Permanent,
            "template crashed on 'Bob''s'",
            at(3),
        )
        .await;
    let print = fingerprint("timeout after 1s");
    let filter = JobFilter {
        fingerprint: Some(print.clone()),
        ..dead_only()
    };
    let listed = store
        .job_list(JobListParams {
            filter: filter.clone(),
            ..JobListParams::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&listed), vec![b.id, a.id]);
    let purged = store
        .job_purge(JobPurgeParams {
            filter: JobFilter {
                fingerprint: Some(fingerprint("template crashed on 'Café Ünï'")),
                ..JobFilter::default()
            },
            limit: None,
        })
        .await
        .unwrap();
    assert_eq!(purged, 1);
    assert!(stage.find(other.id).await.is_none());
    let redriven = redrive(
        &store,
        JobRedriveParams {
            filter,
            now: Some(at(10)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(redriven, vec![a.id, b.id]);
}

/// `dead_fingerprints` groups dead jobs by fingerprint, largest group first, with the
/// count, the first and last death, the kinds and queues sorted, and the highest id as
/// the example with its last error; it honours the filter and the limit and ignores
/// jobs that are not dead.
pub async fn dead_fingerprints_group_dead_jobs_by_error(store: Arc<dyn Store>) {
    use revenant_core::fingerprint::{fingerprint, normalize};
    let stage = Stage::new(store.clone());
    let mut http = Vec::new();
    for (i, kind) in ["send_receipt", "send_invoice", "send_receipt"]
        .iter()
        .enumerate()
    {
        let message = format!("HTTP 503 from provider after {}ms", 100 + i);
        let secs_at = 100 + i64::try_from(i).unwrap() * 10;
        http.push(
            stage
                .dead(
                    job("emails", kind),
                    DeadReason::AttemptsExhausted,
                    &message,
                    at(secs_at),
                )
                .await,
        );
    }
    let crash1 = stage
        .dead(
            job("emails", "render"),
            DeadReason::Permanent,
            "template crashed on 'Café Ünï'",
            at(50),
        )
        .await;
    let crash2 = stage
        .dead(
            job("pdfs", "render"),
            DeadReason::Permanent,
            "template crashed on 'Bob''s'",
            at(300),
        )
        .await;
    stage
        .retrying(job("emails", "send_receipt"), at(400), secs(3_600))
        .await;

    let groups = store
        .dead_fingerprints(DeadFingerprintsParams::default())
        .await
        .unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    let first = &groups[0];
    assert_eq!(
        first.fingerprint,
        fingerprint("HTTP 503 from provider after 1ms")
    );
    assert_eq!(first.count, 3);
    assert_eq!(first.first_seen, at(100));
    assert_eq!(first.last_seen, at(120));
    assert_eq!(first.kinds, vec!["send_invoice", "send_receipt"]);
    assert_eq!(first.queues, vec!["emails"]);
    assert_eq!(first.example_id, http[2].id);
    assert_eq!(first.example_message, "HTTP 503 from provider after 102ms");
    assert_eq!(
        first.pattern,
        normalize("HTTP 503 from provider after 102ms")
    );
    let second = &groups[1];
    assert_eq!(second.fingerprint, fingerprint("template crashed on 'x'"));
    assert_eq!(second.count, 2);
    assert_eq!((second.first_seen, second.last_seen), (at(50), at(300)));
    assert_eq!(second.kinds, vec!["render"]);
    assert_eq!(second.queues, vec!["emails", "pdfs"]);
    assert_eq!(second.example_id, crash2.id);
    assert!(crash1.id < crash2.id);

    let narrowed = store
        .dead_fingerprints(DeadFingerprintsParams {
            filter: JobFilter {
                queue: Some("pdfs".into()),
                ..JobFilter::default()
            },
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(narrowed.len(), 1);
    assert_eq!((narrowed[0].count, narrowed[0].example_id), (1, crash2.id));
    let limited = store
        .dead_fingerprints(DeadFingerprintsParams {
            filter: JobFilter::default(),
            limit: 1,
        })
        .await
        .unwrap();
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0].count, 3);
}

/// Jobs refused by one host at different paths are one group: the URL's path is
/// parameterised and its host kept, so a webhook fan-out failing against one dead
/// endpoint reads as one row, shown with its grouped form; another host is another
/// group, and a filter by the group's fingerprint selects its jobs.
pub async fn dead_fingerprints_group_one_host_across_paths(store: Arc<dyn Store>) {
    use revenant_core::fingerprint::fingerprint;
    let stage = Stage::new(store.clone());
    let mut refused = Vec::new();
    for (i, path) in ["/a", "/b", "/c"].iter().enumerate() {
        let message = format!("POST https://h.example{path}: connection refused");
        let secs_at = 100 + i64::try_from(i).unwrap();
        refused.push(
            stage
                .dead(
                    job("hooks", "http"),
                    DeadReason::AttemptsExhausted,
                    &message,
                    at(secs_at),
                )
                .await
                .id,
        );
    }
    let other = stage
        .dead(
            job("hooks", "http"),
            DeadReason::AttemptsExhausted,
            "POST https://other.example/a: connection refused",
            at(200),
        )
        .await;

    let groups = store
        .dead_fingerprints(DeadFingerprintsParams::default())
        .await
        .unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    let print = fingerprint("POST https://h.example/a: connection refused");
    assert_eq!(groups[0].fingerprint, print);
    assert_eq!(groups[0].count, 3);
    assert_eq!(
        groups[0].pattern,
        "post https://h.example/<path>: connection refused"
    );
    assert_eq!(
        groups[0].example_message,
        "POST https://h.example/c: connection refused"
    );
    assert_eq!(groups[1].count, 1);
    assert_eq!(groups[1].example_id, other.id);
    assert_eq!(
        groups[1].pattern,
        "post https://other.example/<path>: connection refused"
    );

    let listed = store
        .job_list(JobListParams {
            filter: JobFilter {
                fingerprint: Some(print),
                ..JobFilter::default()
            },
            ..JobListParams::default()
        })
        .await
        .unwrap();
    let mut ids: Vec<_> = listed.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, refused);
}

/// Each redrive that moves jobs writes one audit record in the same transaction: when,
/// the filter, the spacing, how many, the first and last id, who and why. Newest first;
/// a redrive that moves nothing records nothing.
pub async fn redrive_writes_an_audit_record_readable_in_history(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let mut dead = Vec::new();
    for i in 0..3 {
        dead.push(
            stage
                .dead(job("q", "k"), DeadReason::Permanent, "boom", at(i))
                .await
                .id,
        );
    }
    let filter = JobFilter {
        queue: Some("q".into()),
        ..JobFilter::default()
    };
    let moved = redrive(
        &store,
        JobRedriveParams {
            filter: filter.clone(),
            spacing: Duration::from_millis(50),
            actor: Some("alice".into()),
            note: Some("provider fixed, INC-42".into()),
            now: Some(at(100)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(moved, dead);
    let nothing = redrive(
        &store,
        JobRedriveParams {
            filter: filter.clone(),
            now: Some(at(101)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert!(nothing.is_empty());
    // Another queue: the redriven jobs are now the head of "q".
    let again = stage
        .dead(job("r", "k"), DeadReason::Permanent, "boom", at(200))
        .await;
    redrive(
        &store,
        JobRedriveParams {
            filter: by_ids(vec![again.id]),
            now: Some(at(300)),
            ..JobRedriveParams::default()
        },
    )
    .await;

    let history = store
        .redrive_history(RedriveHistoryParams::default())
        .await
        .unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    let (newest, oldest) = (&history[0], &history[1]);
    assert!(newest.id > oldest.id);
    assert_eq!(newest.count, 1);
    assert_eq!(
        (newest.first_job_id, newest.last_job_id),
        (again.id, again.id)
    );
    assert_eq!(newest.filter, by_ids(vec![again.id]));
    assert_eq!(
        (newest.actor.as_deref(), newest.note.as_deref()),
        (None, None)
    );
    assert_eq!(oldest.at, at(100));
    assert_eq!(oldest.updated_at, at(100));
    assert_eq!(oldest.filter, filter);
    assert_eq!(oldest.spacing_ms, 50);
    assert_eq!(oldest.count, 3);
    assert_eq!(
        (oldest.first_job_id, oldest.last_job_id),
        (dead[0], dead[2])
    );
    assert_eq!(oldest.actor.as_deref(), Some("alice"));
    assert_eq!(oldest.note.as_deref(), Some("provider fixed, INC-42"));
    let one = store
        .redrive_history(RedriveHistoryParams { limit: 1 })
        .await
        .unwrap();
    assert_eq!(one, vec![newest.clone()]);

    let bad = store
        .job_redrive(JobRedriveParams {
            filter: JobFilter::default(),
            note: Some("two\nlines".into()),
            ..JobRedriveParams::default()
        })
        .await;
    assert!(
        matches!(bad, Err(StoreError::Input(ref e)) if e.field == "note"),
        "{bad:?}"
    );
}

/// The chunks of one large redrive share an audit key and so one record (counts
/// added, last id and time moved on), and `start_at` keeps the spacing even across
/// chunks; a `start_at` in the past means now.
pub async fn redrive_chunks_share_one_audit_record_and_keep_the_pace(store: Arc<dyn Store>) {
    let stage = Stage::new(store.clone());
    let mut dead = Vec::new();
    for i in 0..5 {
        dead.push(
            stage
                .dead(job("q", "k"), DeadReason::Permanent, "boom", at(i))
                .await
                .id,
        );
    }
    let chunk = |limit: u32, start: Timestamp, now: Timestamp| JobRedriveParams {
        filter: JobFilter::default(),
        limit: Some(limit),
        spacing: Duration::from_millis(100),
        start_at: Some(start),
        audit_key: Some("redrive-1".into()),
        now: Some(now),
        ..JobRedriveParams::default()
    };
    let first = redrive(&store, chunk(3, at(100), at(100))).await;
    // The second chunk starts where the first left off: 3 jobs x 100 ms later.
    let second = redrive(&store, chunk(3, at_ms(100_300), at_ms(100_050))).await;
    assert_eq!(first, dead[..3].to_vec());
    assert_eq!(second, dead[3..].to_vec());
    let mut run_at = Vec::new();
    for id in &dead {
        run_at.push(stage.get(*id).await.run_at);
    }
    assert_eq!(
        run_at,
        vec![
            at_ms(100_000),
            at_ms(100_100),
            at_ms(100_200),
            at_ms(100_300),
            at_ms(100_400)
        ]
    );
    let history = store
        .redrive_history(RedriveHistoryParams::default())
        .await
        .unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].count, 5);
    assert_eq!(
        (history[0].first_job_id, history[0].last_job_id),
        (dead[0], dead[4])
    );
    assert_eq!(
        (history[0].at, history[0].updated_at),
        (at(100), at_ms(100_050))
    );

    let late = stage
        .dead(job("r", "k"), DeadReason::Permanent, "boom", at(200))
        .await;
    redrive(&store, chunk(1, at(10), at(300))).await;
    assert_eq!(
        stage.get(late.id).await.run_at,
        at(300),
        "a past start means now"
    );
}

/// A spacing read in the wrong unit (`--rate 1e-15`: one job every 31 million years)
/// would write a `run_at` no store can read back. It is refused with field `spacing`,
/// as are a spacing over one hour and one whose last job would run past the year
/// 9999; nothing moves, no audit is written, and the dead jobs still list.
pub async fn redrive_refuses_a_spacing_that_would_leave_an_unreadable_run_at(
    store: Arc<dyn Store>,
) {
    let stage = Stage::new(store.clone());
    let mut dead = Vec::new();
    for _ in 0..3 {
        dead.push(
            stage
                .dead(job("q", "k"), DeadReason::Permanent, "x", t0())
                .await
                .id,
        );
    }
    let near_the_end = chrono::DateTime::parse_from_rfc3339("9999-12-31T22:00:00Z")
        .expect("a valid time")
        .to_utc();
    let refused = [
        (Duration::from_secs_f64(1.0 / 1e-15), None, None),
        (Duration::from_secs(3601), Some(2), None),
        (secs(3600), Some(3), Some(near_the_end)),
    ];
    for (spacing, limit, start_at) in refused {
        let result = store
            .job_redrive(JobRedriveParams {
                filter: JobFilter::default(),
                limit,
                spacing,
                start_at,
                now: Some(at(1_000)),
                ..JobRedriveParams::default()
            })
            .await;
        assert!(
            matches!(result, Err(StoreError::Input(ref err)) if err.field == "spacing"),
            "spacing {spacing:?} from {start_at:?}: {result:?}"
        );
    }
    let listed = store
        .job_list(JobListParams::default())
        .await
        .expect("the dead jobs still list");
    assert_eq!(listed.len(), 3);
    assert!(listed.iter().all(|job| job.status == JobState::Dead));
    let history = store
        .redrive_history(RedriveHistoryParams::default())
        .await
        .expect("history");
    assert!(history.is_empty(), "a refused redrive writes no audit");
    // The largest spacing that fits is accepted.
    let moved = redrive(
        &store,
        JobRedriveParams {
            spacing: MAX_SPACING,
            now: Some(at(1_000)),
            ..JobRedriveParams::default()
        },
    )
    .await;
    assert_eq!(moved, dead);
    assert_eq!(stage.get(dead[2]).await.run_at, at(1_000 + 2 * 3600));
}
