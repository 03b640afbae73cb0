//! Periodic jobs: a schedule (a cron expression or a fixed interval), a time zone, and
//! the job to enqueue at each tick.
//!
//! A schedule is stored in the database ([`crate::Store::schedule_set`]), so every
//! worker, the CLI and the HTTP server see the same ones. Every worker runs the
//! scheduler; which one enqueues a tick is settled by the store, not by a leader: the
//! schedule row holds its `next_tick`, and a worker enqueues tick `t` only by moving
//! `next_tick` from `t` to the tick after, compare-and-set, in the same transaction as
//! the insert ([`crate::Store::schedule_fire`]). The job also carries the unique key
//! `cron:<schedule>@<tick>` ([`tick_key`]), a second guard that makes a tick's job
//! impossible to insert twice even by hand.
//!
//! # Ticks
//!
//! - `cron`: five fields (minute hour day-of-month month day-of-week) or six with
//!   seconds first, as the `croner` crate parses them, evaluated in the schedule's
//!   time zone (IANA name, default `UTC`).
//! - `every`: a fixed interval of at least one second, counted from the Unix epoch in
//!   absolute time (`every 1h` ticks at each full UTC hour), so every worker computes
//!   the same ticks without any shared state. A time zone does not apply to it.
//!
//! # Daylight saving time
//!
//! Cron ticks follow Vixie cron's rules, which `croner` implements:
//!
//! - a fixed time (seconds, minutes and hours all single values, `30 2 * * *`) that
//!   falls in the hour skipped in spring runs once, at the first valid time after the
//!   gap (03:00 on the day New York jumps from 02:00 to 03:00); in the hour repeated in
//!   autumn it runs once, in the first pass (01:30 EDT, not 01:30 EST);
//! - a wildcard or stepped time (`*/15 * * * *`) has no tick in the skipped hour and
//!   ticks in both passes of the repeated one (01:00, 01:15, ... EDT, then the same
//!   wall times again in EST).
//!
//! # Missed ticks
//!
//! A tick is on time while it is at most `grace` old (default one minute): a worker
//! that looks late (a busy machine, a restart) still enqueues every on-time tick, one
//! job each, oldest first. Ticks older than that were missed (no worker ran); the
//! schedule's [`Misfire`] policy says what happens to them: `skip` drops them all,
//! `last` enqueues the newest missed tick once. Never one job per missed tick.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::{Deserialize, Serialize};

use crate::job::{Job, JobId, NewJob, Timestamp, MAX_TIMESTAMP_MILLIS};
use crate::{names, InputError};

/// The prefix of every unique key the scheduler writes; producers may not use it.
pub const KEY_PREFIX: &str = "cron:";

/// The longest cron expression accepted, in bytes.
pub const MAX_EXPRESSION_LEN: usize = 256;

/// The shortest interval accepted: one second.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The longest interval and the longest grace accepted: 365 days.
pub const MAX_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);

/// How late a tick may be enqueued and still count as on time, unless the schedule
/// says otherwise: one minute.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// What to do with ticks missed while no worker ran (older than the grace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    /// Drop them; the next job is the next on-time tick's. The default (as in Oban's
    /// cron and River's periodic jobs).
    #[default]
    Skip,
    /// Enqueue one job for the newest missed tick, then go on as usual.
    Last,
}

impl Misfire {
    /// `skip` or `last`.
    pub fn as_str(self) -> &'static str {
        match self {
            Misfire::Skip => "skip",
            Misfire::Last => "last",
        }
    }
}

impl FromStr for Misfire {
    type Err = InputError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "skip" => Ok(Misfire::Skip),
            "last" => Ok(Misfire::Last),
            other => Err(InputError::new(
                "misfire",
                format!("{other:?} is not a misfire policy; use skip or last"),
            )),
        }
    }
}

/// The job a schedule enqueues at each tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledJob {
    /// Queue name.
    pub queue: String,
    /// Kind name.
    pub kind: String,
    /// JSON payload (at most [`NewJob::MAX_PAYLOAD_BYTES`]).
    #[serde(default)]
    pub payload: serde_json::Value,
    /// Priority, within ±[`NewJob::MAX_PRIORITY`]. Default 0.
    #[serde(default)]
    pub priority: i32,
    /// Attempts allowed; `None` takes the retry policy's, resolved at each enqueue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i32>,
}

impl ScheduledJob {
    /// The job to enqueue for one tick (or a run by hand), with its unique key.
    pub fn new_job(&self, unique_key: String) -> NewJob {
        let mut job = NewJob::new(&self.queue, &self.kind, self.payload.clone());
        job.priority = self.priority;
        job.max_attempts = self.max_attempts;
        job.unique_key = Some(unique_key);
        job
    }
}

/// A periodic job as declared (in code, by `revenant cron set`, by
/// `PUT /v1/schedules/{name}`) and stored. Exactly one of `cron` and `every`.
///
/// ```
/// use revenant_core::schedule::ScheduleSpec;
/// let spec: ScheduleSpec = serde_json::from_value(serde_json::json!({
///     "name": "nightly-report",
///     "cron": "30 2 * * *",
///     "timezone": "America/New_York",
///     "misfire": "last",
///     "job": {"queue": "reports", "kind": "nightly_report", "payload": {"format": "pdf"}}
/// })).unwrap();
/// spec.validate().unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// The schedule's name (a queue-name alphabet, see [`names`]).
    pub name: String,
    /// A cron expression, five or six fields (seconds first when six).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// A fixed interval (`"30s"`, `"1h"`), counted from the Unix epoch.
    #[serde(
        default,
        with = "crate::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub every: Option<Duration>,
    /// The IANA time zone the cron expression is read in. Default `UTC`.
    #[serde(default = "utc")]
    pub timezone: String,
    /// What to do with ticks missed while no worker ran.
    #[serde(default)]
    pub misfire: Misfire,
    /// How old a tick may be and still be enqueued as on time. Default
    /// [`DEFAULT_GRACE`].
    #[serde(
        default,
        with = "crate::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub grace: Option<Duration>,
    /// The job to enqueue.
    pub job: ScheduledJob,
}

fn utc() -> String {
    "UTC".to_string()
}

impl ScheduleSpec {
    /// A schedule on a cron expression, in UTC, with the default misfire policy and
    /// grace. Check it with [`ScheduleSpec::validate`] (stores do).
    pub fn cron(name: &str, expression: &str, job: ScheduledJob) -> ScheduleSpec {
        ScheduleSpec {
            name: name.to_string(),
            cron: Some(expression.to_string()),
            every: None,
            timezone: utc(),
            misfire: Misfire::default(),
            grace: None,
            job,
        }
    }

    /// A schedule on a fixed interval.
    pub fn every(name: &str, interval: Duration, job: ScheduledJob) -> ScheduleSpec {
        ScheduleSpec {
            every: Some(interval),
            cron: None,
            ..ScheduleSpec::cron(name, "", job)
        }
    }

    /// The same schedule in another time zone (an IANA name).
    pub fn in_timezone(mut self, timezone: &str) -> ScheduleSpec {
        self.timezone = timezone.to_string();
        self
    }

    /// The same schedule with another misfire policy.
    pub fn with_misfire(mut self, misfire: Misfire) -> ScheduleSpec {
        self.misfire = misfire;
        self
    }

    /// The same schedule with another grace.
    pub fn with_grace(mut self, grace: Duration) -> ScheduleSpec {
        self.grace = Some(grace);
        self
    }

    /// The grace in effect.
    pub fn grace(&self) -> Duration {
        self.grace.unwrap_or(DEFAULT_GRACE)
    }

    /// Checks everything a producer controls, naming the field at fault: the name, the
    /// expression or interval, the time zone, the grace and the job (as
    /// [`NewJob::validate`] would check it).
    pub fn validate(&self) -> Result<(), InputError> {
        names::validate_name("name", &self.name)?;
        self.ticks()?;
        if let Some(grace) = self.grace {
            if grace < MIN_INTERVAL || grace > MAX_INTERVAL {
                return Err(InputError::new(
                    "grace",
                    format!(
                        "{} is out of range; use 1s to 365d",
                        crate::duration::format(grace)
                    ),
                ));
            }
        }
        self.job
            .new_job(tick_key(&self.name, DateTime::UNIX_EPOCH))
            .validate_fields()
    }

    /// The schedule's tick rule, parsed and checked.
    pub fn ticks(&self) -> Result<Ticks, InputError> {
        match (&self.cron, self.every) {
            (Some(_), Some(_)) => Err(InputError::new(
                "every",
                "give either cron or every, not both",
            )),
            (None, None) => Err(InputError::new(
                "cron",
                "give a cron expression or an interval (every)",
            )),
            (None, Some(interval)) => {
                if interval < MIN_INTERVAL || interval > MAX_INTERVAL {
                    return Err(InputError::new(
                        "every",
                        format!(
                            "{} is out of range; use 1s to 365d",
                            crate::duration::format(interval)
                        ),
                    ));
                }
                if self.timezone != "UTC" {
                    return Err(InputError::new(
                        "timezone",
                        "an interval counts absolute time; a time zone applies to cron only",
                    ));
                }
                Ok(Ticks::Every(crate::store::millis(interval)))
            }
            (Some(expression), None) => {
                let zone = parse_timezone(&self.timezone)?;
                Ok(Ticks::Cron(Box::new(parse_cron(expression)?), zone))
            }
        }
    }

    /// What the schedule looks like in one line: `cron "30 2 * * *" America/New_York`
    /// or `every 30s`.
    pub fn describe(&self) -> String {
        match (&self.cron, self.every) {
            (Some(expression), _) => format!("cron {expression:?} {}", self.timezone),
            (None, Some(interval)) => format!("every {}", crate::duration::format(interval)),
            (None, None) => "(none)".to_string(),
        }
    }
}

/// Parses an IANA time zone name (`Europe/Paris`, `UTC`).
pub fn parse_timezone(text: &str) -> Result<Tz, InputError> {
    if text.len() > 64 {
        return Err(InputError::new("timezone", "is longer than 64 bytes"));
    }
    Tz::from_str(text).map_err(|_| {
        InputError::new(
            "timezone",
            format!(
                "{:?} is not a known IANA time zone (e.g. UTC, Europe/Paris)",
                text.escape_debug().to_string()
            ),
        )
    })
}

/// Parses a cron expression: five fields, or six with seconds first; no year field.
pub fn parse_cron(expression: &str) -> Result<Cron, InputError> {
    if expression.len() > MAX_EXPRESSION_LEN {
        return Err(InputError::new(
            "cron",
            format!("is longer than {MAX_EXPRESSION_LEN} bytes"),
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(expression)
        .map_err(|err| {
            InputError::new(
                "cron",
                format!(
                    "{:?} is not a cron expression: {err}",
                    expression.escape_debug().to_string()
                ),
            )
        })
}

/// A schedule's tick rule, parsed.
#[derive(Debug, Clone)]
pub enum Ticks {
    /// A cron expression in a time zone.
    Cron(Box<Cron>, Tz),
    /// A fixed interval in milliseconds from the Unix epoch.
    Every(i64),
}

impl Ticks {
    /// The first tick strictly after `t`, or `None` when there is none before the
    /// year 9999 (or the expression never matches).
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let next = match self {
            Ticks::Every(period) => {
                let ms = t.timestamp_millis();
                let next = (ms.div_euclid(*period) + 1).checked_mul(*period)?;
                DateTime::from_timestamp_millis(next)?
            }
            Ticks::Cron(cron, zone) => cron
                .find_next_occurrence(&t.with_timezone(zone), false)
                .ok()?
                .with_timezone(&Utc),
        };
        (next.timestamp_millis() <= MAX_TIMESTAMP_MILLIS).then_some(next)
    }

    /// The newest tick at or before `t`, if any.
    pub fn latest_at_or_before(&self, t: Timestamp) -> Option<Timestamp> {
        match self {
            Ticks::Every(period) => {
                let ms = t.timestamp_millis();
                DateTime::from_timestamp_millis(ms.div_euclid(*period) * period)
            }
            Ticks::Cron(cron, zone) => cron
                .find_previous_occurrence(&t.with_timezone(zone), true)
                .ok()
                .map(|at| at.with_timezone(&Utc)),
        }
    }

    /// The ticks strictly after `after`, at most `limit` of them (for listings).
    pub fn upcoming(&self, after: Timestamp, limit: usize) -> Vec<Timestamp> {
        let mut out = Vec::new();
        let mut at = after;
        while out.len() < limit {
            match self.next_after(at) {
                Some(next) => {
                    out.push(next);
                    at = next;
                }
                None => break,
            }
        }
        out
    }
}

/// One compare-and-set a worker makes on a due schedule: move `next_tick` from
/// `expected` to `next`, and enqueue the job of `tick` when there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The `next_tick` the row must still hold.
    pub expected: Timestamp,
    /// What `next_tick` becomes.
    pub next: Timestamp,
    /// The tick whose job is enqueued; `None` when missed ticks are skipped.
    pub tick: Option<Timestamp>,
}

/// The year-9999 end of time: the `next_tick` of a schedule with no tick left.
pub fn end_of_time() -> Timestamp {
    DateTime::from_timestamp_millis(MAX_TIMESTAMP_MILLIS).unwrap_or(DateTime::UNIX_EPOCH)
}

/// What a worker does with a schedule whose stored `next_tick` is `next_tick` at time
/// `now`: the steps, oldest first, at most `limit` on-time ticks (the rest are left
/// for the next round). Nothing when `next_tick` is in the future.
///
/// Ticks older than the grace (at or before `now - grace`) were missed: one step
/// jumps over them all, enqueueing the newest of them when the policy is
/// [`Misfire::Last`]. Every on-time tick then gets a step of its own.
pub fn plan(
    ticks: &Ticks,
    misfire: Misfire,
    grace: Duration,
    next_tick: Timestamp,
    now: Timestamp,
    limit: usize,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut expected = next_tick;
    if expected > now {
        return steps;
    }
    let cutoff = now - TimeDelta::milliseconds(crate::store::millis(grace));
    if expected <= cutoff {
        let resume = ticks.next_after(cutoff).unwrap_or_else(end_of_time);
        let tick = match misfire {
            Misfire::Skip => None,
            Misfire::Last => ticks
                .latest_at_or_before(cutoff)
                .filter(|&tick| tick >= expected),
        };
        steps.push(Step {
            expected,
            next: resume,
            tick,
        });
        expected = resume;
    }
    let mut on_time = 0;
    while expected <= now && on_time < limit {
        let next = ticks.next_after(expected).unwrap_or_else(end_of_time);
        steps.push(Step {
            expected,
            next,
            tick: Some(expected),
        });
        expected = next;
        on_time += 1;
    }
    steps
}

/// The unique key of the job of `schedule`'s tick at `tick`:
/// `cron:<schedule>@<tick, RFC 3339 UTC with milliseconds>`.
pub fn tick_key(schedule: &str, tick: Timestamp) -> String {
    format!(
        "{KEY_PREFIX}{schedule}@{}",
        tick.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
}

/// The unique key of a run by hand (`revenant cron run`) at `at`:
/// `cron:<schedule>@run:<at>`. Two runs in the same millisecond are one.
pub fn run_key(schedule: &str, at: Timestamp) -> String {
    format!(
        "{KEY_PREFIX}{schedule}@run:{}",
        at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
}

/// What a scheduler's unique key says: the schedule, and the tick (`None` for a run by
/// hand). `None` for any other key.
pub fn parse_key(key: &str) -> Option<(&str, Option<Timestamp>)> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let (name, when) = rest.split_once('@')?;
    if when.starts_with("run:") {
        return Some((name, None));
    }
    let tick = DateTime::parse_from_rfc3339(when).ok()?.with_timezone(&Utc);
    Some((name, Some(tick)))
}

impl Job {
    /// The schedule that enqueued this job, if a periodic job (read from its unique
    /// key, [`tick_key`]).
    pub fn schedule(&self) -> Option<&str> {
        self.unique_key
            .as_deref()
            .and_then(parse_key)
            .map(|(name, _)| name)
    }

    /// The tick this periodic job was enqueued for (`None` for other jobs and runs by
    /// hand).
    pub fn schedule_tick(&self) -> Option<Timestamp> {
        self.unique_key
            .as_deref()
            .and_then(parse_key)
            .and_then(|(_, tick)| tick)
    }
}

/// A stored schedule, as `schedule_list` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// What was declared.
    pub spec: ScheduleSpec,
    /// While paused, no tick is enqueued (a run by hand still is).
    pub paused: bool,
    /// The next tick to enqueue: the oldest not yet handled.
    pub next_tick: Timestamp,
    /// The newest tick a job was enqueued for.
    pub last_tick: Option<Timestamp>,
    /// The job enqueued for it.
    pub last_job: Option<JobId>,
    /// When the spec was last set (the store's clock).
    pub updated_at: Timestamp,
}

/// A schedule as every door lists it (`revenant cron list --json`,
/// `GET /v1/schedules`): its name and rule in one line, the stored record, and the
/// misfire policy and grace in effect.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleListing {
    /// The schedule's name.
    pub name: String,
    /// Its rule in one line ([`ScheduleSpec::describe`]).
    pub rule: String,
    /// What was declared.
    pub spec: ScheduleSpec,
    /// While paused, no tick is enqueued.
    pub paused: bool,
    /// The next tick to enqueue.
    pub next_tick: Timestamp,
    /// The newest tick a job was enqueued for.
    pub last_tick: Option<Timestamp>,
    /// The job enqueued for it.
    pub last_job: Option<JobId>,
    /// When the spec was last set.
    pub updated_at: Timestamp,
    /// The misfire policy.
    pub misfire: Misfire,
    /// The grace in effect (`1m` unless set).
    pub grace: String,
}

impl From<&ScheduleRecord> for ScheduleListing {
    fn from(record: &ScheduleRecord) -> Self {
        ScheduleListing {
            name: record.spec.name.clone(),
            rule: record.spec.describe(),
            spec: record.spec.clone(),
            paused: record.paused,
            next_tick: record.next_tick,
            last_tick: record.last_tick,
            last_job: record.last_job,
            updated_at: record.updated_at,
            misfire: record.spec.misfire,
            grace: crate::duration::format(record.spec.grace()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn job() -> ScheduledJob {
        ScheduledJob {
            queue: "reports".into(),
            kind: "nightly".into(),
            payload: serde_json::json!({}),
            priority: 0,
            max_attempts: None,
        }
    }

    fn new_york(expression: &str) -> Ticks {
        ScheduleSpec::cron("n", expression, job())
            .in_timezone("America/New_York")
            .ticks()
            .unwrap()
    }

    #[test]
    fn a_fixed_time_in_the_spring_gap_runs_once_right_after_it() {
        // 2026-03-08: New York jumps from 02:00 EST to 03:00 EDT; 02:30 never happens.
        let ticks = new_york("30 2 * * *");
        let day = ticks.upcoming(at("2026-03-07T12:00:00Z"), 3);
        assert_eq!(
            day,
            vec![
                at("2026-03-08T07:00:00Z"), // 03:00 EDT, the first time after the gap
                at("2026-03-09T06:30:00Z"), // 02:30 EDT the next day
                at("2026-03-10T06:30:00Z"),
            ]
        );
    }

    #[test]
    fn a_fixed_time_in_the_repeated_hour_runs_once_in_the_first_pass() {
        // 2026-11-01: New York falls back from 02:00 EDT to 01:00 EST; 01:30 happens
        // twice, at 05:30Z (EDT) and 06:30Z (EST).
        let ticks = new_york("30 1 * * *");
        let days = ticks.upcoming(at("2026-10-31T12:00:00Z"), 2);
        assert_eq!(
            days,
            vec![at("2026-11-01T05:30:00Z"), at("2026-11-02T06:30:00Z")]
        );
    }

    #[test]
    fn a_stepped_time_skips_the_gap_and_ticks_in_both_passes_of_the_repeated_hour() {
        let ticks = new_york("*/30 * * * *");
        // Spring: 01:30 EST (06:30Z), then 03:00 EDT (07:00Z); nothing for 02:xx.
        assert_eq!(
            ticks.upcoming(at("2026-03-08T06:00:00Z"), 3),
            vec![
                at("2026-03-08T06:30:00Z"),
                at("2026-03-08T07:00:00Z"),
                at("2026-03-08T07:30:00Z")
            ]
        );
        // Autumn: 01:00 and 01:30 EDT, then 01:00 and 01:30 again in EST.
        assert_eq!(
            ticks.upcoming(at("2026-11-01T04:45:00Z"), 5),
            vec![
                at("2026-11-01T05:00:00Z"),
                at("2026-11-01T05:30:00Z"),
                at("2026-11-01T06:00:00Z"),
                at("2026-11-01T06:30:00Z"),
                at("2026-11-01T07:00:00Z"),
            ]
        );
    }

    #[test]
    fn seconds_are_optional() {
        let every_second = ScheduleSpec::cron("s", "* * * * * *", job())
            .ticks()
            .unwrap();
        assert_eq!(
            every_second.next_after(at("2026-01-01T00:00:00.400Z")),
            Some(at("2026-01-01T00:00:01Z"))
        );
        let every_minute = ScheduleSpec::cron("m", "* * * * *", job()).ticks().unwrap();
        assert_eq!(
            every_minute.next_after(at("2026-01-01T00:00:01Z")),
            Some(at("2026-01-01T00:01:00Z"))
        );
    }

    #[test]
    fn intervals_count_from_the_epoch() {
        let ticks = ScheduleSpec::every("i", Duration::from_secs(3600), job())
            .ticks()
            .unwrap();
        assert_eq!(
            ticks.next_after(at("2026-01-01T10:20:00Z")),
            Some(at("2026-01-01T11:00:00Z"))
        );
        assert_eq!(
            ticks.next_after(at("2026-01-01T11:00:00Z")),
            Some(at("2026-01-01T12:00:00Z"))
        );
        assert_eq!(
            ticks.latest_at_or_before(at("2026-01-01T11:00:00Z")),
            Some(at("2026-01-01T11:00:00Z"))
        );
    }

    #[test]
    fn bad_input_is_refused_by_name() {
        let field = |spec: ScheduleSpec| spec.validate().unwrap_err().field;
        assert_eq!(field(ScheduleSpec::cron("x", "61 * * * *", job())), "cron");
        assert_eq!(
            field(ScheduleSpec::cron("x", "* * * * * * *", job())),
            "cron"
        );
        assert_eq!(
            field(ScheduleSpec::cron("x", "* * * * *", job()).in_timezone("Mars/Olympus")),
            "timezone"
        );
        assert_eq!(
            field(ScheduleSpec::every("x", Duration::ZERO, job())),
            "every"
        );
        assert_eq!(
            field(
                ScheduleSpec::every("x", Duration::from_secs(5), job()).in_timezone("Europe/Paris")
            ),
            "timezone"
        );
        assert_eq!(
            field(ScheduleSpec::cron("bad name", "* * * * *", job())),
            "name"
        );
        let mut big = job();
        big.payload = serde_json::json!("x".repeat(NewJob::MAX_PAYLOAD_BYTES + 1));
        assert_eq!(field(ScheduleSpec::cron("x", "* * * * *", big)), "payload");
        assert_eq!(
            field(ScheduleSpec::cron("x", "* * * * *", job()).with_grace(Duration::ZERO)),
            "grace"
        );
        let mut both = ScheduleSpec::cron("x", "* * * * *", job());
        both.every = Some(Duration::from_secs(1));
        assert_eq!(field(both), "every");
    }

    #[test]
    fn keys_round_trip() {
        let tick = at("2026-03-08T07:00:00Z");
        let key = tick_key("nightly:v2", tick);
        assert_eq!(key, "cron:nightly:v2@2026-03-08T07:00:00.000Z");
        assert_eq!(parse_key(&key), Some(("nightly:v2", Some(tick))));
        assert_eq!(
            parse_key(&run_key("nightly", tick)),
            Some(("nightly", None))
        );
        assert_eq!(parse_key("order-42"), None);
    }

    #[test]
    fn on_time_ticks_each_get_a_step() {
        let ticks = ScheduleSpec::cron("s", "* * * * * *", job())
            .ticks()
            .unwrap();
        let steps = plan(
            &ticks,
            Misfire::Skip,
            Duration::from_secs(60),
            at("2026-01-01T00:00:01Z"),
            at("2026-01-01T00:00:03.500Z"),
            100,
        );
        let fired: Vec<_> = steps.iter().map(|s| s.tick).collect();
        assert_eq!(
            fired,
            vec![
                Some(at("2026-01-01T00:00:01Z")),
                Some(at("2026-01-01T00:00:02Z")),
                Some(at("2026-01-01T00:00:03Z")),
            ]
        );
        // The steps chain: each expects what the one before wrote.
        assert!(steps.windows(2).all(|w| w[0].next == w[1].expected));
        assert_eq!(steps.last().unwrap().next, at("2026-01-01T00:00:04Z"));
        // Nothing is due before next_tick.
        assert!(plan(
            &ticks,
            Misfire::Last,
            Duration::from_secs(60),
            at("2026-01-01T00:00:05Z"),
            at("2026-01-01T00:00:04.999Z"),
            100
        )
        .is_empty());
    }

    #[test]
    fn missed_ticks_are_skipped_or_enqueued_once_never_one_each() {
        // Hourly; no worker ran from 01:00 to 05:10. Grace one minute.
        let ticks = ScheduleSpec::cron("h", "0 * * * *", job()).ticks().unwrap();
        let now = at("2026-01-01T05:10:00Z");
        let grace = Duration::from_secs(60);
        let skip = plan(
            &ticks,
            Misfire::Skip,
            grace,
            at("2026-01-01T01:00:00Z"),
            now,
            100,
        );
        assert_eq!(
            skip,
            vec![Step {
                expected: at("2026-01-01T01:00:00Z"),
                next: at("2026-01-01T06:00:00Z"),
                tick: None
            }]
        );
        let last = plan(
            &ticks,
            Misfire::Last,
            grace,
            at("2026-01-01T01:00:00Z"),
            now,
            100,
        );
        assert_eq!(
            last,
            vec![Step {
                expected: at("2026-01-01T01:00:00Z"),
                next: at("2026-01-01T06:00:00Z"),
                tick: Some(at("2026-01-01T05:00:00Z"))
            }]
        );
        // Every second for a day missed, with ten seconds of grace: one jump over the
        // missed ones, then the ten on-time ticks.
        let every = ScheduleSpec::cron("s", "* * * * * *", job())
            .ticks()
            .unwrap();
        let steps = plan(
            &every,
            Misfire::Last,
            Duration::from_secs(10),
            at("2026-01-01T00:00:00Z"),
            at("2026-01-02T00:00:00Z"),
            1000,
        );
        assert_eq!(steps.len(), 11);
        assert_eq!(steps[0].tick, Some(at("2026-01-01T23:59:50Z")));
        assert_eq!(steps[0].next, at("2026-01-01T23:59:51Z"));
        assert_eq!(steps[10].tick, Some(at("2026-01-02T00:00:00Z")));
    }

    #[test]
    fn a_pattern_that_never_matches_has_no_next_tick() {
        let ticks = ScheduleSpec::cron("never", "0 0 30 2 *", job())
            .ticks()
            .unwrap();
        assert_eq!(ticks.next_after(at("2026-01-01T00:00:00Z")), None);
    }
}
