//! The scheduler: enqueues the jobs of periodic schedules at their ticks.
//!
//! Every worker runs it (unless built with `.scheduler(false)`); there is no leader to
//! elect or lose. Each round reads the schedules, and for each one due plans its steps
//! ([`revenant_core::schedule::plan`]) and makes them with
//! [`Store::schedule_fire`]: a compare-and-set on the schedule's `next_tick` in the
//! transaction that inserts the job. When two workers race for a tick one wins and
//! the other's compare-and-set matches nothing ([`ScheduleFired::Lost`]), so each tick
//! is one job however many workers run. A worker that dies between two rounds leaves
//! `next_tick` where it was: the next worker to look enqueues the tick if it is still
//! within the schedule's grace, or applies its misfire policy.
//!
//! Jobs are enqueued like any other: their `max_attempts` is resolved from the retry
//! policies ([`Policies::enqueue_params`], the path [`Client`] enqueues through), and
//! they retry, die and are redriven like any other job. Their unique key
//! (`cron:<schedule>@<tick>`) names their schedule in `jobs show` and `dead list`.
//!
//! [`Client`]: https://docs.rs/revenant/latest/revenant/struct.Client.html

use std::sync::Arc;
use std::time::Duration;

use revenant_core::schedule::{self, run_key, tick_key, ScheduleRecord, ScheduleSpec};
use revenant_core::store::{
    Enqueued, ScheduleFireParams, ScheduleFired, SchedulePauseParams, ScheduleSetParams,
};
use revenant_core::{InputError, Store, StoreError, Timestamp};
use tokio_util::sync::CancellationToken;

use crate::policies::Policies;

/// The most on-time ticks one schedule enqueues in one round; the rest wait for the
/// next round (a tenth of a second later), so one schedule cannot hold a round.
pub const ROUND_LIMIT: usize = 100;

/// The longest a scheduler sleeps between rounds: one second, so a schedule set or
/// resumed elsewhere is picked up within a second.
pub const MAX_SLEEP: Duration = Duration::from_secs(1);

/// Stores a schedule (see [`revenant_core::store::ScheduleSetParams`]): new or changed,
/// its first tick is the first after the store's clock now; unchanged, nothing moves.
/// Refuses (field `cron`) a rule with no tick left before the year 9999.
pub async fn declare(store: &dyn Store, spec: ScheduleSpec) -> Result<(), StoreError> {
    spec.validate()?;
    let now = store.now().await?;
    let next_tick = first_tick(&spec, now)?;
    store
        .schedule_set(ScheduleSetParams {
            spec,
            next_tick,
            now: None,
        })
        .await
}

fn first_tick(spec: &ScheduleSpec, now: Timestamp) -> Result<Timestamp, InputError> {
    spec.ticks()?.next_after(now).ok_or_else(|| {
        InputError::new(
            "cron",
            format!("{} has no tick before the year 9999", spec.describe()),
        )
    })
}

/// Pauses (`paused`) or resumes a schedule; `false` when there is none of that name.
/// A resumed schedule's next tick is the first after now: ticks that fell while it was
/// paused are not enqueued.
pub async fn set_paused(store: &dyn Store, name: &str, paused: bool) -> Result<bool, StoreError> {
    let Some(record) = find(store, name).await? else {
        return Ok(false);
    };
    let now = store.now().await?;
    let resume_at = first_tick(&record.spec, now).unwrap_or_else(|_| schedule::end_of_time());
    store
        .schedule_pause(SchedulePauseParams {
            name: name.to_string(),
            paused,
            resume_at,
            now: None,
        })
        .await
}

/// Enqueues the schedule's job now, by hand, paused or not, leaving its ticks alone.
/// `None` when there is no schedule of that name.
pub async fn run_now(
    store: &dyn Store,
    policies: &Policies,
    name: &str,
) -> Result<Option<Enqueued>, StoreError> {
    let Some(record) = find(store, name).await? else {
        return Ok(None);
    };
    let now = store.now().await?;
    let job = record.spec.job.new_job(run_key(name, now));
    let enqueue = policies.enqueue_params(store, vec![job]).await;
    let fired = store
        .schedule_fire(ScheduleFireParams {
            name: name.to_string(),
            advance: None,
            tick: None,
            enqueue: Some(enqueue),
            now: None,
        })
        .await?;
    Ok(match fired {
        ScheduleFired::Fired { job } => {
            tracing::info!(
                schedule = name,
                job_id = job.map(|j| j.id),
                "periodic job run by hand"
            );
            job
        }
        ScheduleFired::Lost => None,
    })
}

/// One schedule by name.
pub async fn find(store: &dyn Store, name: &str) -> Result<Option<ScheduleRecord>, StoreError> {
    revenant_core::names::validate_name("name", name)?;
    Ok(store
        .schedule_list()
        .await?
        .into_iter()
        .find(|record| record.spec.name == name))
}

/// What one round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// The store's clock the round planned with.
    pub now: Timestamp,
    /// Jobs enqueued for ticks (missed-tick jobs included).
    pub enqueued: u32,
    /// Steps another worker made first (or the schedule was paused meanwhile).
    pub lost: u32,
    /// The earliest `next_tick` among unpaused schedules after the round, if any.
    pub next_due: Option<Timestamp>,
}

/// One round at the store's clock: every due, unpaused schedule's steps, oldest tick
/// first. Stops a schedule's steps at its first lost compare-and-set (another worker is
/// on it).
pub async fn fire_due(store: &dyn Store, policies: &Policies) -> Result<Round, StoreError> {
    let now = store.now().await?;
    let mut round = Round {
        now,
        enqueued: 0,
        lost: 0,
        next_due: None,
    };
    for record in store.schedule_list().await? {
        if record.paused {
            continue;
        }
        let mut next = record.next_tick;
        if next <= now {
            let name = record.spec.name.as_str();
            // Stored specs were checked when decoded; a failure here is a bug, not a
            // reason to stop the other schedules.
            let ticks = match record.spec.ticks() {
                Ok(ticks) => ticks,
                Err(err) => {
                    tracing::error!(schedule = name, error = %err, "a stored schedule cannot be read");
                    continue;
                }
            };
            let steps = schedule::plan(
                &ticks,
                record.spec.misfire,
                record.spec.grace(),
                record.next_tick,
                now,
                ROUND_LIMIT,
            );
            for step in steps {
                let enqueue = match step.tick {
                    Some(tick) => {
                        let job = record.spec.job.new_job(tick_key(name, tick));
                        Some(policies.enqueue_params(store, vec![job]).await)
                    }
                    None => None,
                };
                let fired = store
                    .schedule_fire(ScheduleFireParams {
                        name: name.to_string(),
                        advance: Some((step.expected, step.next)),
                        tick: step.tick,
                        enqueue,
                        now: None,
                    })
                    .await?;
                match fired {
                    ScheduleFired::Fired { job } => {
                        next = step.next;
                        if step.tick != Some(step.expected) {
                            tracing::warn!(
                                schedule = name,
                                missed_from = %step.expected,
                                resumed_at = %step.next,
                                enqueued_tick = step.tick.map(|t| t.to_string()),
                                misfire = record.spec.misfire.as_str(),
                                "ticks missed while no worker ran"
                            );
                        }
                        if let (Some(tick), Some(job)) = (step.tick, job) {
                            round.enqueued += 1;
                            tracing::info!(
                                schedule = name,
                                tick = %tick,
                                job_id = job.id,
                                duplicate = job.duplicate,
                                "periodic job enqueued"
                            );
                        }
                    }
                    ScheduleFired::Lost => {
                        round.lost += 1;
                        // Another worker is on this schedule; look again soon.
                        next = now;
                        break;
                    }
                }
            }
        }
        round.next_due = Some(round.next_due.map_or(next, |due| due.min(next)));
    }
    Ok(round)
}

/// The scheduler loop of a worker: rounds until `stop`, sleeping until the next tick
/// is due (at most [`MAX_SLEEP`], at least 10 ms). A store error is logged and the
/// round tried again a second later.
pub(crate) async fn run(store: Arc<dyn Store>, policies: Arc<Policies>, stop: CancellationToken) {
    loop {
        let pause = match fire_due(&*store, &policies).await {
            // Until the next tick by the round's clock; a round's own time is at most a
            // few milliseconds, and a tick found not yet due is looked at again 10 ms on.
            Ok(round) => match round.next_due {
                Some(due) => (due - round.now)
                    .to_std()
                    .unwrap_or(Duration::ZERO)
                    .clamp(Duration::from_millis(10), MAX_SLEEP),
                None => MAX_SLEEP,
            },
            Err(err) => {
                tracing::warn!(error = %err, "scheduler round failed; trying again");
                MAX_SLEEP
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}
