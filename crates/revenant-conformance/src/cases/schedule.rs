//! Periodic jobs: `schedule_set`, `schedule_list`, `schedule_pause`, `schedule_delete`
//! and `schedule_fire`, the compare-and-set that makes each tick one job however many
//! workers run.

use revenant_core::schedule::{run_key, tick_key, ScheduleRecord, ScheduleSpec, ScheduledJob};

use super::prelude::*;

fn spec(name: &str, every_secs: u64) -> ScheduleSpec {
    ScheduleSpec::every(
        name,
        Duration::from_secs(every_secs),
        ScheduledJob {
            queue: "reports".into(),
            kind: "tick".into(),
            payload: serde_json::json!({"from": name}),
            priority: 0,
            max_attempts: None,
        },
    )
}

async fn set(store: &Arc<dyn Store>, spec: ScheduleSpec, next_tick: Timestamp, now: Timestamp) {
    store
        .schedule_set(ScheduleSetParams {
            spec,
            next_tick,
            now: Some(now),
        })
        .await
        .expect("schedule_set");
}

async fn get(store: &Arc<dyn Store>, name: &str) -> ScheduleRecord {
    store
        .schedule_list()
        .await
        .expect("schedule_list")
        .into_iter()
        .find(|record| record.spec.name == name)
        .unwrap_or_else(|| panic!("schedule {name} is listed"))
}

/// The fire of one tick: move `next_tick` from `tick` to `next`, enqueue its job.
fn fire(name: &str, tick: Timestamp, next: Timestamp) -> ScheduleFireParams {
    ScheduleFireParams {
        name: name.into(),
        advance: Some((tick, next)),
        tick: Some(tick),
        enqueue: Some(JobEnqueueParams {
            jobs: vec![spec(name, 1).job.new_job(tick_key(name, tick))],
            default_max_attempts: 3,
            now: Some(tick),
        }),
        now: Some(tick),
    }
}

/// A schedule comes back as set, listed by name; setting the same spec again (a
/// worker's restart) moves nothing, not even after a pause; a changed spec takes the
/// new first tick and keeps the pause.
pub async fn schedule_set_keeps_the_tick_of_an_unchanged_spec(store: Arc<dyn Store>) {
    assert!(store.schedule_list().await.unwrap().is_empty());
    set(&store, spec("b-second", 1), at(10), at(1)).await;
    set(&store, spec("a-first", 60), at(60), at(1)).await;
    let names: Vec<String> = store
        .schedule_list()
        .await
        .unwrap()
        .into_iter()
        .map(|record| record.spec.name)
        .collect();
    assert_eq!(names, ["a-first", "b-second"]);
    let record = get(&store, "b-second").await;
    assert_eq!(record.spec, spec("b-second", 1));
    assert_eq!(record.next_tick, at(10));
    assert!(!record.paused);
    assert_eq!(record.last_tick, None);
    assert_eq!(record.updated_at, at(1));

    assert!(store
        .schedule_pause(SchedulePauseParams {
            name: "b-second".into(),
            paused: true,
            resume_at: at(99),
            now: Some(at(2)),
        })
        .await
        .unwrap());
    set(&store, spec("b-second", 1), at(500), at(3)).await;
    let record = get(&store, "b-second").await;
    assert_eq!(record.next_tick, at(10), "the same spec keeps its tick");
    assert!(record.paused, "the same spec keeps the pause");
    assert_eq!(record.updated_at, at(1));

    set(&store, spec("b-second", 5), at(600), at(4)).await;
    let record = get(&store, "b-second").await;
    assert_eq!(record.spec, spec("b-second", 5));
    assert_eq!(
        record.next_tick,
        at(600),
        "a changed spec takes the new tick"
    );
    assert!(record.paused);
    assert_eq!(record.updated_at, at(4));
}

/// A tick fires once: the first compare-and-set enqueues the job (with the tick's
/// unique key, naming its schedule) and records it; a second fire of the same tick is
/// lost and writes nothing.
pub async fn schedule_fire_enqueues_each_tick_once(store: Arc<dyn Store>) {
    set(&store, spec("every-second", 1), at(10), at(1)).await;
    let fired = store
        .schedule_fire(fire("every-second", at(10), at(11)))
        .await
        .unwrap();
    let ScheduleFired::Fired { job: Some(job) } = fired else {
        panic!("the first fire of a tick enqueues its job: {fired:?}");
    };
    assert!(!job.duplicate);
    let again = store
        .schedule_fire(fire("every-second", at(10), at(11)))
        .await
        .unwrap();
    assert_eq!(again, ScheduleFired::Lost);
    let record = get(&store, "every-second").await;
    assert_eq!(record.next_tick, at(11));
    assert_eq!(record.last_tick, Some(at(10)));
    assert_eq!(record.last_job, Some(job.id));
    let stored = store
        .job_get(JobGetParams { id: job.id })
        .await
        .unwrap()
        .expect("the tick's job exists");
    assert_eq!(stored.schedule(), Some("every-second"));
    assert_eq!(stored.schedule_tick(), Some(at(10)));
    assert_eq!(stored.max_attempts, 3);
    let all = store
        .job_list(JobListParams {
            filter: JobFilter {
                queue: Some("reports".into()),
                ..JobFilter::default()
            },
            limit: 100,
            before_id: None,
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 1, "one job for one tick: {all:?}");
}

/// Many workers firing the same tick at once: exactly one wins, one job exists.
pub async fn concurrent_fires_of_one_tick_enqueue_one_job(store: Arc<dyn Store>) {
    set(&store, spec("race", 1), at(10), at(1)).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.schedule_fire(fire("race", at(10), at(11))).await
        }));
    }
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap().expect("schedule_fire") {
            ScheduleFired::Fired { job: Some(_) } => won += 1,
            ScheduleFired::Lost => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(won, 1, "exactly one fire of the tick wins");
    let all = store
        .job_list(JobListParams {
            filter: JobFilter::default(),
            limit: 100,
            before_id: None,
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 1);
}

/// A paused schedule fires nothing; a run by hand still enqueues (and leaves the tick
/// alone); resuming starts from the tick given, not from the ticks the pause covered.
/// Skipping missed ticks advances without a job.
pub async fn pause_resume_skip_and_run_by_hand(store: Arc<dyn Store>) {
    set(&store, spec("nightly", 60), at(60), at(1)).await;
    assert!(store
        .schedule_pause(SchedulePauseParams {
            name: "nightly".into(),
            paused: true,
            resume_at: at(0),
            now: None,
        })
        .await
        .unwrap());
    assert_eq!(
        store
            .schedule_fire(fire("nightly", at(60), at(120)))
            .await
            .unwrap(),
        ScheduleFired::Lost,
        "a paused schedule fires nothing"
    );
    let by_hand = ScheduleFireParams {
        name: "nightly".into(),
        advance: None,
        tick: None,
        enqueue: Some(JobEnqueueParams {
            jobs: vec![spec("nightly", 60).job.new_job(run_key("nightly", at(70)))],
            default_max_attempts: 3,
            now: Some(at(70)),
        }),
        now: Some(at(70)),
    };
    let ScheduleFired::Fired { job: Some(job) } =
        store.schedule_fire(by_hand.clone()).await.unwrap()
    else {
        panic!("a run by hand enqueues even while paused");
    };
    let stored = store
        .job_get(JobGetParams { id: job.id })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.schedule(), Some("nightly"));
    assert_eq!(stored.schedule_tick(), None);
    assert_eq!(get(&store, "nightly").await.next_tick, at(60));

    assert!(store
        .schedule_pause(SchedulePauseParams {
            name: "nightly".into(),
            paused: false,
            resume_at: at(240),
            now: None,
        })
        .await
        .unwrap());
    let record = get(&store, "nightly").await;
    assert!(!record.paused);
    assert_eq!(record.next_tick, at(240));

    let skip = ScheduleFireParams {
        name: "nightly".into(),
        advance: Some((at(240), at(600))),
        tick: None,
        enqueue: None,
        now: None,
    };
    assert_eq!(
        store.schedule_fire(skip).await.unwrap(),
        ScheduleFired::Fired { job: None }
    );
    assert_eq!(get(&store, "nightly").await.next_tick, at(600));

    let unknown = ScheduleFireParams {
        name: "nobody".into(),
        enqueue: Some(JobEnqueueParams {
            jobs: vec![spec("nobody", 60).job.new_job(run_key("nobody", at(70)))],
            default_max_attempts: 3,
            now: None,
        }),
        ..by_hand
    };
    assert_eq!(
        store.schedule_fire(unknown).await.unwrap(),
        ScheduleFired::Lost
    );
    assert!(!store
        .schedule_pause(SchedulePauseParams {
            name: "nobody".into(),
            paused: true,
            resume_at: at(0),
            now: None,
        })
        .await
        .unwrap());
}

/// Deleting a schedule removes it (and says so), and leaves its jobs.
pub async fn schedule_delete_removes_only_the_schedule(store: Arc<dyn Store>) {
    set(&store, spec("gone", 1), at(10), at(1)).await;
    set(&store, spec("kept", 1), at(10), at(1)).await;
    store
        .schedule_fire(fire("gone", at(10), at(11)))
        .await
        .unwrap();
    assert!(store
        .schedule_delete(ScheduleDeleteParams {
            name: "gone".into()
        })
        .await
        .unwrap());
    assert!(!store
        .schedule_delete(ScheduleDeleteParams {
            name: "gone".into()
        })
        .await
        .unwrap());
    let names: Vec<String> = store
        .schedule_list()
        .await
        .unwrap()
        .into_iter()
        .map(|record| record.spec.name)
        .collect();
    assert_eq!(names, ["kept"]);
    let jobs = store
        .job_list(JobListParams {
            filter: JobFilter::default(),
            limit: 10,
            before_id: None,
        })
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1, "the schedule's job stays");
}

/// Bad input is refused by name before anything is written: a bad cron expression, an
/// unknown time zone, a zero interval; a producer's unique key in the scheduler's
/// namespace; a tick's job keyed for another schedule.
pub async fn schedule_input_is_refused_by_name(store: Arc<dyn Store>) {
    let refused = |err: StoreError| match err {
        StoreError::Input(input) => input.field,
        other => panic!("expected an input error, got {other:?}"),
    };
    let mut bad_cron = spec("x", 1);
    bad_cron.every = None;
    bad_cron.cron = Some("every tuesday".into());
    let mut bad_zone = spec("x", 1);
    bad_zone.every = None;
    bad_zone.cron = Some("0 3 * * *".into());
    bad_zone.timezone = "Atlantis/Capital".into();
    let mut zero = spec("x", 1);
    zero.every = Some(Duration::ZERO);
    for (bad, field) in [(bad_cron, "cron"), (bad_zone, "timezone"), (zero, "every")] {
        let err = store
            .schedule_set(ScheduleSetParams {
                spec: bad,
                next_tick: at(1),
                now: None,
            })
            .await
            .unwrap_err();
        assert_eq!(refused(err), field);
    }
    assert!(store.schedule_list().await.unwrap().is_empty());

    let mut forged = NewJob::new("reports", "tick", serde_json::json!({}));
    forged.unique_key = Some(tick_key("x", at(10)));
    let err = store
        .job_enqueue(JobEnqueueParams {
            jobs: vec![forged],
            default_max_attempts: 3,
            now: None,
        })
        .await
        .unwrap_err();
    assert_eq!(refused(err), "unique_key");

    set(&store, spec("mine", 1), at(10), at(1)).await;
    let mut theirs = fire("mine", at(10), at(11));
    if let Some(enqueue) = &mut theirs.enqueue {
        enqueue.jobs[0].unique_key = Some(tick_key("other", at(10)));
    }
    let err = store.schedule_fire(theirs).await.unwrap_err();
    assert_eq!(refused(err), "unique_key");
    assert_eq!(get(&store, "mine").await.next_tick, at(10), "nothing moved");
}
