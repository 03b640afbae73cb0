//! Periodic jobs through the library: a schedule declared on the worker builder is
//! stored and enqueued; its job fails, retries and dies like any other, naming its
//! schedule; ticks missed while no worker ran follow the misfire policy; pause, resume
//! and a run by hand. SQLite (the multi-process test on PostgreSQL is the CLI's
//! `tests/cron_fleet.rs`; the store contract runs on both backends in the conformance
//! suite).

use std::time::Duration;

use revenant::runtime::scheduler;
use revenant::store::{JobFilter, ScheduleSetParams};
use revenant::{
    Backoff, Client, JobContext, JobError, JobState, Misfire, PolicySet, RetryPolicy, ScheduleSpec,
    ScheduledJob,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn client() -> (Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("periodic.db").display());
    (Client::connect(&url).await.unwrap(), dir)
}

fn job(queue: &str) -> ScheduledJob {
    ScheduledJob {
        queue: queue.into(),
        kind: "report".into(),
        payload: serde_json::json!({"format": "pdf"}),
        priority: 0,
        max_attempts: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_schedule_enqueues_and_its_failing_job_dies_naming_it() {
    let (client, _dir) = client().await;
    let policy = RetryPolicy::builder()
        .max_attempts(2)
        .backoff(Backoff::new(ms(50), 2.0, ms(100)).unwrap())
        .build()
        .unwrap();
    let worker = client
        .worker()
        .queue("reports", 2)
        .policies(PolicySet::new(policy))
        .poll_interval(ms(50))
        .schedule(ScheduleSpec::every(
            "every-second",
            Duration::from_secs(1),
            job("reports"),
        ))
        .handler_fn(
            "report",
            |_ctx: JobContext, _: serde_json::Value| async move {
                Err::<(), _>(JobError::retry("the report service is down"))
            },
        )
        .build()
        .unwrap();
    let watcher = client.clone();
    let dead = tokio::spawn(async move {
        loop {
            let dead = watcher
                .jobs(
                    JobFilter {
                        statuses: Some(vec![JobState::Dead]),
                        ..JobFilter::default()
                    },
                    None,
                    10,
                )
                .await
                .unwrap();
            if let Some(job) = dead.into_iter().next() {
                return job;
            }
            tokio::time::sleep(ms(50)).await;
        }
    });
    let dead = tokio::time::timeout(
        Duration::from_secs(60),
        worker.run_until(async {
            while !dead.is_finished() {
                tokio::time::sleep(ms(20)).await;
            }
        }),
    )
    .await
    .expect("a periodic job died within a minute")
    .map(|_| ());
    dead.unwrap();
    let job = client
        .jobs(
            JobFilter {
                statuses: Some(vec![JobState::Dead]),
                ..JobFilter::default()
            },
            None,
            10,
        )
        .await
        .unwrap()
        .remove(0);
    assert_eq!(job.schedule(), Some("every-second"));
    assert!(job.schedule_tick().is_some());
    assert_eq!(job.attempts, 2, "it retried like any job: {job:?}");
    assert_eq!(job.errors.len(), 2);
    let listed = client.schedules().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].spec.name, "every-second");
    assert!(listed[0].last_tick.is_some());
}

/// Ticks missed while no worker ran: `skip` enqueues none of them, `last` enqueues the
/// newest once; the on-time ones (within the grace) are enqueued each.
#[tokio::test]
async fn missed_ticks_follow_the_misfire_policy() {
    let (client, _dir) = client().await;
    let store = client.store().clone();
    let now = store.now().await.unwrap();
    // An hour of every-minute ticks missed, as if no worker had run since.
    let hour_ago = now - chrono::TimeDelta::hours(1);
    let start = chrono::DateTime::from_timestamp(hour_ago.timestamp() / 60 * 60, 0).unwrap();
    for (name, misfire) in [("skipper", Misfire::Skip), ("catcher", Misfire::Last)] {
        let spec = ScheduleSpec::cron(name, "* * * * *", job(name))
            .with_misfire(misfire)
            .with_grace(Duration::from_secs(1));
        store
            .schedule_set(ScheduleSetParams {
                spec,
                next_tick: start,
                now: None,
            })
            .await
            .unwrap();
    }
    let policies = client.policies().clone();
    let round = scheduler::fire_due(&*store, &policies).await.unwrap();
    let count = |queue: &str| {
        let client = client.clone();
        let queue = queue.to_string();
        async move {
            client
                .jobs(
                    JobFilter {
                        queue: Some(queue),
                        ..JobFilter::default()
                    },
                    None,
                    1000,
                )
                .await
                .unwrap()
        }
    };
    let skipped = count("skipper").await;
    let caught = count("catcher").await;
    // A minute tick may fall within the one-second grace: then it is on time for both.
    let on_time = skipped.len();
    assert!(on_time <= 1, "skip enqueues no missed tick: {skipped:?}");
    assert_eq!(
        caught.len(),
        on_time + 1,
        "last enqueues one missed tick: {caught:?}"
    );
    assert_eq!(round.enqueued as usize, 2 * on_time + 1);
    let missed_tick = caught[caught.len() - 1].schedule_tick().unwrap();
    assert!(missed_tick > now - chrono::TimeDelta::minutes(2));
    for record in client.schedules().await.unwrap() {
        assert!(record.next_tick > now, "{record:?}");
    }
    // A second round right away enqueues no tick the first one handled. Only a minute
    // boundary passing between the two rounds may bring a new tick, on time for both.
    let again = scheduler::fire_due(&*store, &policies).await.unwrap();
    let fresh: Vec<_> = [count("skipper").await, count("catcher").await]
        .into_iter()
        .flatten()
        .filter(|job| !skipped.iter().chain(&caught).any(|seen| seen.id == job.id))
        .collect();
    assert_eq!(again.enqueued as usize, fresh.len());
    assert!(fresh.len() <= 2, "{fresh:?}");
    for job in &fresh {
        assert!(job.schedule_tick().unwrap() > now, "{job:?}");
    }
}

#[tokio::test]
async fn pause_resume_and_run_by_hand() {
    let (client, _dir) = client().await;
    client
        .set_schedule(
            ScheduleSpec::cron("nightly", "30 2 * * *", job("reports"))
                .in_timezone("America/New_York"),
        )
        .await
        .unwrap();
    assert!(client.pause_schedule("nightly").await.unwrap());
    assert!(client.schedules().await.unwrap()[0].paused);
    let run = client
        .run_schedule("nightly")
        .await
        .unwrap()
        .expect("run by hand");
    let ran = client.job(run.id).await.unwrap().unwrap();
    assert_eq!(ran.schedule(), Some("nightly"));
    assert_eq!(ran.schedule_tick(), None);
    assert!(client.resume_schedule("nightly").await.unwrap());
    assert!(!client.schedules().await.unwrap()[0].paused);
    assert_eq!(client.run_schedule("nobody").await.unwrap(), None);
    assert!(!client.pause_schedule("nobody").await.unwrap());
    let err = client
        .set_schedule(ScheduleSpec::cron("bad", "30 2 * *", job("reports")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cron"), "{err}");
    assert!(client.delete_schedule("nightly").await.unwrap());
    assert!(client.schedules().await.unwrap().is_empty());
}

#[test]
fn a_worker_refuses_a_bad_or_twice_declared_schedule() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (client, _dir) = runtime.block_on(client());
    let build = |specs: Vec<ScheduleSpec>| {
        let mut builder = client.worker().queue("q", 1).handler_fn(
            "report",
            |_ctx: JobContext, _: serde_json::Value| async move { Ok::<(), JobError>(()) },
        );
        for spec in specs {
            builder = builder.schedule(spec);
        }
        builder.build().err().map(|err| err.to_string())
    };
    let every = |name: &str| ScheduleSpec::every(name, Duration::from_secs(5), job("q"));
    assert!(build(vec![every("a")]).is_none());
    let twice = build(vec![every("a"), every("a")]).expect("refused");
    assert!(twice.contains("declared twice"), "{twice}");
    let zero = build(vec![ScheduleSpec::every("z", Duration::ZERO, job("q"))]).expect("refused");
    assert!(zero.contains("every"), "{zero}");
}
