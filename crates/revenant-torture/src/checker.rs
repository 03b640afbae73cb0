//! The checker: reads a ledger and the final job table, and counts what went wrong.
//!
//! | count | meaning |
//! | --- | --- |
//! | `lost` | an acknowledged enqueue with no row, or a row `completed` with no handler run that returned `Ok` |
//! | `unexpected` | a row, or a handler run, for a job never enqueued |
//! | `stuck` | a row not terminal when checked |
//! | `misclassified` | a terminal row whose state, dead reason and attempts no run of the [`Plan`] can give, even allowing for attempts cut short by a fault (below) |
//! | `late_ack_accepted` | an ack applied for an attempt after a newer attempt of the job had been claimed |
//! | `lease_overlap` | two handler runs of one job overlapping in time while both leases were live |
//! | `duplicates` | handler runs beyond the attempts the plan predicts |
//! | `extra_attempts` | attempts counted beyond the fault-free prediction, summed over terminal rows (a claim lost with its connection, a duplicate run); not a failure by itself |
//! | `interrupted` | attempts that ended with no recorded result although the plan gives them one (killed, stopped, lease lost); each test bounds it by the faults it injected |
//!
//! **Faults and the prediction.** A fault (kill -9, SIGSTOP past the lease, a claim
//! lost with its connection) spends an attempt whose result is never written. The
//! checker therefore does not demand the fault-free end ([`Plan::expected`]); it
//! demands an end the plan can give when some attempts are cut short, and only
//! attempts the ledger shows no applied result for may be cut short:
//!
//! - every attempt before the last must have let the job go on: its action fails
//!   transiently (or crashes the process), or it has no applied result in the ledger;
//! - the last attempt must end the job the way the row says: `completed` needs an
//!   action that succeeds (or one that blocks its thread past the timeout, whose late
//!   success may be written when no thread was free to fire the timeout), `dead`/`permanent` one that fails permanently,
//!   `dead`/`attempts_exhausted` the last allowed attempt failing transiently, and
//!   `dead`/`lease_expired` the last allowed attempt crashing or having no applied
//!   result.
//!
//! So a job predicted to fail permanently can never complete, and a job whose every
//! attempt succeeds can only die by losing every one of its leases.
//!
//! Lease overlap is approximate: a run's lease counts as live from its start until the
//! first of: its end (it returned, or it stopped: panicked or dropped by the runtime);
//! the start of an applied ack or release of its lease (a run cut
//! short by shutdown has no end line, but its release says when it stopped); a
//! heartbeat answered `lease_lost`; the later of the expiry its claim recorded and the
//! start of its last applied heartbeat call plus the lease length. The database set
//! the lease at some time inside those calls, so that is the earliest the lease can
//! have expired:
//! an overlap counted is one that certainly happened (up to the machine's clock, which
//! the database and every process share here). Late acks compare the ack call's start
//! with the newer claim's return, so an ack racing a claim is not counted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use revenant::{DeadReason, Job, JobState};
use serde::Serialize;

use crate::behaviour::{End, Plan};
use crate::ledger::{AckOp, AckResult, Event, RunResult};

/// What the checker needs of a job row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalJob {
    /// The id.
    pub id: i64,
    /// Its state.
    pub status: JobState,
    /// Attempts spent.
    pub attempts: i32,
    /// Why it is dead, if it is.
    pub dead_reason: Option<DeadReason>,
}

impl From<&Job> for FinalJob {
    fn from(job: &Job) -> Self {
        FinalJob {
            id: job.id,
            status: job.status,
            attempts: job.attempts,
            dead_reason: job.dead_reason,
        }
    }
}

/// The checker's counts, and the first few problems in words.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Report {
    /// Jobs the ledger says were enqueued.
    pub enqueued: usize,
    /// Rows `completed`.
    pub completed: usize,
    /// Rows `dead`.
    pub dead: usize,
    /// Handler runs in the ledger.
    pub runs: usize,
    /// See the module docs.
    pub lost: usize,
    /// See the module docs.
    pub unexpected: usize,
    /// See the module docs.
    pub stuck: usize,
    /// See the module docs.
    pub misclassified: usize,
    /// See the module docs.
    pub late_ack_accepted: usize,
    /// See the module docs.
    pub lease_overlap: usize,
    /// See the module docs.
    pub duplicates: usize,
    /// See the module docs.
    pub extra_attempts: usize,
    /// See the module docs.
    pub interrupted: usize,
    /// Up to 20 problems, each naming its job.
    pub examples: Vec<String>,
}

impl Report {
    /// No job lost, unexpected, stuck or misclassified, no late ack accepted, no lease
    /// overlap. Duplicates are not counted here: at-least-once allows them, and a test
    /// asserts its own bound.
    pub fn is_safe(&self) -> bool {
        self.lost == 0
            && self.unexpected == 0
            && self.stuck == 0
            && self.misclassified == 0
            && self.late_ack_accepted == 0
            && self.lease_overlap == 0
    }

    fn problem(&mut self, message: String) {
        if self.examples.len() < 20 {
            self.examples.push(message);
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "enqueued={} completed={} dead={} runs={} lost={} unexpected={} stuck={} misclassified={} late_ack_accepted={} lease_overlap={} duplicates={} extra_attempts={} interrupted={}",
            self.enqueued,
            self.completed,
            self.dead,
            self.runs,
            self.lost,
            self.unexpected,
            self.stuck,
            self.misclassified,
            self.late_ack_accepted,
            self.lease_overlap,
            self.duplicates,
            self.extra_attempts,
            self.interrupted
        )?;
        for example in &self.examples {
            write!(f, "\n  - {example}")?;
        }
        Ok(())
    }
}

/// One handler run, joined from its start, end and claim lines.
#[derive(Debug, Clone)]
struct Run {
    pid: u32,
    attempt: i32,
    start: i64,
    end: Option<(i64, RunResult)>,
    /// When it stopped without returning (a panic, its future dropped).
    stopped: Option<i64>,
    lease_us: i64,
    token: Option<i64>,
    /// When the claim call started: the lease began no earlier.
    claimed: Option<i64>,
    /// The lease's expiry the claim set (the database's clock, which is the machine's
    /// for a local database), when the ledger has it.
    lease_until: Option<i64>,
}

/// Checks `events` (the whole ledger) against `jobs` (every row of the queue under
/// test) and the plan that drove the handlers.
pub fn check(plan: &Plan, events: &[Event], jobs: &[FinalJob]) -> Report {
    check_with(plan, events, jobs, &[])
}

/// [`check`], counting `indeterminate` (id, max_attempts) as enqueued too: rows written
/// by an enqueue whose process died before it heard the answer (an `enqueuing` line
/// with no `enqueued` line; the test traces each such row to its call by payload).
/// They are held to every other rule; they are not counted in `enqueued`.
pub fn check_with(
    plan: &Plan,
    events: &[Event],
    jobs: &[FinalJob],
    indeterminate: &[(i64, i32)],
) -> Report {
    let mut report = Report::default();

    let mut enqueued: HashMap<i64, i32> = HashMap::new();
    // (pid, job, attempt) -> (token, call start, lease expiry), and (job, token) ->
    // (attempt, returned at).
    let mut claim_tokens: HashMap<(u32, i64, i32), (i64, i64, i64)> = HashMap::new();
    let mut claims: HashMap<(i64, i64), (i32, i64)> = HashMap::new();
    let mut claims_by_job: HashMap<i64, Vec<(i32, i64)>> = HashMap::new();
    let mut runs: BTreeMap<i64, Vec<Run>> = BTreeMap::new();
    let mut run_index: HashMap<(u32, i64, i32), (i64, usize)> = HashMap::new();
    let mut last_beat: HashMap<(i64, i64), i64> = HashMap::new();
    let mut lease_ended: HashMap<(i64, i64), i64> = HashMap::new();
    let mut acks = Vec::new();

    for event in events {
        match event {
            Event::Enqueued {
                ids, max_attempts, ..
            } => {
                for id in ids {
                    enqueued.insert(*id, *max_attempts);
                }
            }
            Event::Claimed {
                job,
                attempt,
                token,
                pid,
                t0,
                t,
                lease_until,
                ..
            } => {
                claim_tokens.insert((*pid, *job, *attempt), (*token, *t0, *lease_until));
                claims.insert((*job, *token), (*attempt, *t));
                claims_by_job.entry(*job).or_default().push((*attempt, *t));
            }
            Event::Start {
                job,
                attempt,
                pid,
                lease_ms,
                t,
            } => {
                let list = runs.entry(*job).or_default();
                run_index.insert((*pid, *job, *attempt), (*job, list.len()));
                // A process's file is in its own order: the latest claim of this
                // (job, attempt) read so far is the one this run holds, even when a
                // released attempt is claimed again by the same process. An attempt
                // with no claim of its own is a kept retry (see revenant-runtime's
                // executor): it runs under the lease of the attempt before it in the
                // same process.
                let claim = claim_tokens
                    .get(&(*pid, *job, *attempt))
                    .or_else(|| claim_tokens.get(&(*pid, *job, *attempt - 1)))
                    .copied();
                if let Some(claim) = claim {
                    claim_tokens.entry((*pid, *job, *attempt)).or_insert(claim);
                }
                list.push(Run {
                    pid: *pid,
                    attempt: *attempt,
                    start: *t,
                    end: None,
                    stopped: None,
                    lease_us: i64::try_from(*lease_ms).unwrap_or(i64::MAX / 2) * 1000,
                    token: claim.map(|(token, _, _)| token),
                    claimed: claim.map(|(_, t0, _)| t0),
                    lease_until: claim.map(|(_, _, until)| until).filter(|until| *until > 0),
                });
            }
            Event::End {
                job,
                attempt,
                pid,
                result,
                t,
            } => {
                if let Some((job, i)) = run_index.get(&(*pid, *job, *attempt)) {
                    if let Some(run) = runs.get_mut(job).and_then(|l| l.get_mut(*i)) {
                        run.end = Some((*t, *result));
                    }
                }
            }
            Event::Stopped {
                job,
                attempt,
                pid,
                t,
                ..
            } => {
                if let Some((job, i)) = run_index.get(&(*pid, *job, *attempt)) {
                    if let Some(run) = runs.get_mut(job).and_then(|l| l.get_mut(*i)) {
                        run.stopped = Some(*t);
                    }
                }
            }
            Event::Ack {
                op: AckOp::Heartbeat,
                job,
                token,
                result: AckResult::Applied,
                t0,
                ..
            } => {
                // The database renewed the lease at some time in [t0, t]; the lower
                // bound keeps the overlap count free of false alarms.
                let beat = last_beat.entry((*job, *token)).or_insert(*t0);
                *beat = (*beat).max(*t0);
            }
            Event::Ack {
                op: AckOp::Heartbeat,
                job,
                token,
                result: AckResult::LeaseLost,
                t,
                ..
            } => {
                // The runtime cancels the handler as soon as it learns this.
                let end = lease_ended.entry((*job, *token)).or_insert(*t);
                *end = (*end).min(*t);
            }
            Event::Ack {
                op,
                job,
                token,
                result: AckResult::Applied,
                t0,
                ..
            } => {
                // The handler had stopped before its result (or release) was sent.
                let end = lease_ended.entry((*job, *token)).or_insert(*t0);
                *end = (*end).min(*t0);
                acks.push((*op, *job, *token, *t0));
            }
            Event::Ack { .. } | Event::Process { .. } | Event::Enqueuing { .. } => {}
        }
    }
    report.enqueued = enqueued.len();
    for (id, max_attempts) in indeterminate {
        enqueued.entry(*id).or_insert(*max_attempts);
    }
    report.runs = runs.values().map(Vec::len).sum();
    // Attempts whose result (a complete or a fail) the store applied, per job: the
    // claimed attempt of the ack's lease, and the kept attempts that ran under it
    // before the ack, whose failures a worker writes with the job's next result.
    let mut acked_attempts: HashMap<i64, HashSet<i32>> = HashMap::new();
    for (op, job, token, t0) in &acks {
        if matches!(op, AckOp::Complete | AckOp::Fail) {
            let acked = acked_attempts.entry(*job).or_default();
            if let Some(&(attempt, _)) = claims.get(&(*job, *token)) {
                acked.insert(attempt);
            }
            let under_lease = runs
                .get(job)
                .into_iter()
                .flatten()
                .filter(|run| run.token == Some(*token) && run.start <= *t0);
            acked.extend(under_lease.map(|run| run.attempt));
        }
    }

    // Rows against enqueues and the plan.
    let mut seen = HashSet::new();
    for row in jobs {
        seen.insert(row.id);
        match row.status {
            JobState::Completed => report.completed += 1,
            JobState::Dead => report.dead += 1,
            _ => {}
        }
        let Some(&max_attempts) = enqueued.get(&row.id) else {
            report.unexpected += 1;
            report.problem(format!("job {}: in the table, never enqueued", row.id));
            continue;
        };
        if !row.status.is_terminal() {
            report.stuck += 1;
            report.problem(format!(
                "job {}: stuck {} after {} attempts",
                row.id,
                row.status.as_str(),
                row.attempts
            ));
            continue;
        }
        let expected = plan.expected(row.id, max_attempts);
        let acked = acked_attempts.get(&row.id);
        let (matches, interrupted) = consistent(plan, row, max_attempts, |attempt| {
            acked.is_some_and(|set| set.contains(&attempt))
        });
        report.interrupted += interrupted;
        report.extra_attempts +=
            usize::try_from(row.attempts.saturating_sub(expected.attempts())).unwrap_or(0);
        if !matches {
            report.misclassified += 1;
            report.problem(format!(
                "job {}: {} ({:?}) after {} attempts; the plan predicts {expected:?}",
                row.id,
                row.status.as_str(),
                row.dead_reason.map(DeadReason::as_str),
                row.attempts
            ));
        }
        let ran_ok = runs.get(&row.id).is_some_and(|list| {
            list.iter()
                .any(|r| matches!(r.end, Some((_, RunResult::Ok))))
        });
        if row.status == JobState::Completed && !ran_ok {
            report.lost += 1;
            report.problem(format!(
                "job {}: completed, but no handler run returned Ok",
                row.id
            ));
        }
    }
    let mut missing: Vec<i64> = enqueued
        .keys()
        .filter(|id| !seen.contains(id))
        .copied()
        .collect();
    missing.sort_unstable();
    for id in missing {
        report.lost += 1;
        report.problem(format!("job {id}: enqueued, not in the table"));
    }

    // Runs: unexpected, duplicates, overlaps.
    for (job, list) in &mut runs {
        let Some(&max_attempts) = enqueued.get(job) else {
            report.unexpected += list.len();
            report.problem(format!(
                "job {job}: {} handler runs, never enqueued",
                list.len()
            ));
            continue;
        };
        let expected = usize::try_from(plan.expected(*job, max_attempts).attempts()).unwrap_or(0);
        if list.len() > expected {
            report.duplicates += list.len() - expected;
            report.problem(format!(
                "job {job}: {} handler runs, {expected} expected (attempts {:?})",
                list.len(),
                list.iter().map(|r| r.attempt).collect::<Vec<_>>()
            ));
        }
        list.sort_by_key(|r| r.start);
        let live_until = |r: &Run| {
            // The claim's lease runs to the expiry it recorded (or, for a ledger
            // without it, the policy's lease from the claim call's start); each
            // applied heartbeat extends it by the run's lease from the call's start.
            let leased = r.claimed.unwrap_or(r.start);
            let claimed_until = r
                .lease_until
                .unwrap_or_else(|| leased.saturating_add(r.lease_us));
            let renewed = r
                .token
                .and_then(|token| last_beat.get(&(*job, token)).copied())
                .map_or(claimed_until, |beat| beat.saturating_add(r.lease_us));
            let mut lease_end = claimed_until.max(renewed);
            if let Some(&ended) = r.token.and_then(|token| lease_ended.get(&(*job, token))) {
                lease_end = lease_end.min(ended.max(r.start));
            }
            let lease_end = r
                .stopped
                .map_or(lease_end, |stopped| stopped.min(lease_end));
            r.end.map_or(lease_end, |(end, _)| end.min(lease_end))
        };
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if b.start < live_until(a) && a.start < live_until(b) {
                    report.lease_overlap += 1;
                    report.problem(format!(
                        "job {job}: attempt {} (pid {}) and attempt {} (pid {}) ran at once under live leases",
                        a.attempt, a.pid, b.attempt, b.pid
                    ));
                }
            }
        }
    }

    // Acks applied after a newer attempt was claimed.
    for (op, job, token, t0) in acks {
        let Some(&(attempt, _)) = claims.get(&(job, token)) else {
            continue;
        };
        let newer = claims_by_job
            .get(&job)
            .into_iter()
            .flatten()
            .any(|&(a, claimed)| a > attempt && claimed < t0);
        if newer {
            report.late_ack_accepted += 1;
            report.problem(format!(
                "job {job}: {op:?} of attempt {attempt} applied after a newer attempt was claimed"
            ));
        }
    }
    report
}

/// Whether `row` is an end the plan can give when the attempts without an applied
/// result (`acked(attempt)` false) may have been cut short, and how many attempts were
/// cut short (attempts the plan gives a result that the ledger has none for; the last
/// attempt of a row that ended as that attempt's action says is not counted, since a
/// kill between the store's answer and the ledger line looks the same).
fn consistent(
    plan: &Plan,
    row: &FinalJob,
    max_attempts: i32,
    acked: impl Fn(i32) -> bool,
) -> (bool, usize) {
    let last = row.attempts;
    if last < 1 || last > max_attempts {
        return (false, 0);
    }
    let end = |attempt: i32| plan.action(row.id, attempt).end();
    let mut ok = true;
    let mut interrupted = 0;
    for attempt in 1..last {
        match end(attempt) {
            End::Crash => {}
            End::Transient | End::Late if acked(attempt) => {}
            End::Transient | End::Late => interrupted += 1,
            End::Ok | End::Permanent if acked(attempt) => ok = false,
            End::Ok | End::Permanent => interrupted += 1,
        }
    }
    let last_ok = match (row.status, row.dead_reason) {
        (JobState::Completed, _) => matches!(end(last), End::Ok | End::Late),
        (JobState::Dead, Some(DeadReason::Permanent)) => end(last) == End::Permanent,
        (JobState::Dead, Some(DeadReason::AttemptsExhausted)) => {
            last == max_attempts && matches!(end(last), End::Transient | End::Late)
        }
        (JobState::Dead, Some(DeadReason::LeaseExpired)) => {
            if last != max_attempts {
                false
            } else if end(last) == End::Crash {
                true
            } else if acked(last) {
                false
            } else {
                interrupted += 1;
                true
            }
        }
        _ => false,
    };
    (ok && last_ok, interrupted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::behaviour::Mix;
    use crate::ledger::StopCause;

    fn plan() -> Plan {
        Plan {
            seed: 3,
            mix: Mix::default(),
        }
    }

    fn run(job: i64, attempt: i32, pid: u32, start: i64, end: Option<i64>) -> Vec<Event> {
        let mut events = vec![
            Event::Claimed {
                job,
                attempt,
                token: job * 100 + i64::from(attempt),
                pid,
                t0: start - 2,
                t: start - 1,
                run_at: 0,
                db_t: start - 1,
                lease_until: start + 1000,
            },
            Event::Start {
                job,
                attempt,
                pid,
                lease_ms: 1,
                t: start,
            },
        ];
        if let Some(t) = end {
            events.push(Event::End {
                job,
                attempt,
                pid,
                result: RunResult::Ok,
                t,
            });
        }
        events
    }

    fn done(id: i64, attempts: i32) -> FinalJob {
        FinalJob {
            id,
            status: JobState::Completed,
            attempts,
            dead_reason: None,
        }
    }

    fn enqueued(ids: Vec<i64>) -> Event {
        Event::Enqueued {
            ids,
            max_attempts: 3,
            unique_keys: Vec::new(),
            t: 0,
        }
    }

    /// A kept retry runs under its job's lease with no claim of its own, and its
    /// failure is written with the job's next result: that ack answers for every
    /// attempt run under the lease before it, so none of them counts as interrupted.
    #[test]
    fn a_completion_answers_for_the_kept_attempts_under_its_lease() {
        let plan = Plan {
            seed: 3,
            mix: "transient:100".parse().unwrap(),
        };
        let job = (1..10_000)
            .find(|id| {
                (1..=3).map(|attempt| plan.action(*id, attempt).end()).eq([
                    End::Transient,
                    End::Transient,
                    End::Ok,
                ])
            })
            .expect("a job failing twice, then completing");
        let ended = |attempt: i32, result: RunResult, t: i64| Event::End {
            job,
            attempt,
            pid: 10,
            result,
            t,
        };
        let started = |attempt: i32, t: i64| Event::Start {
            job,
            attempt,
            pid: 10,
            lease_ms: 1_000,
            t,
        };
        let mut events = vec![enqueued(vec![job])];
        events.extend(run(job, 1, 10, 100, None));
        events.extend([
            ended(1, RunResult::Transient, 110),
            started(2, 120),
            ended(2, RunResult::Transient, 130),
            started(3, 140),
            ended(3, RunResult::Ok, 150),
            Event::Ack {
                op: AckOp::Complete,
                job,
                token: job * 100 + 1,
                result: AckResult::Applied,
                pid: 10,
                t0: 160,
                t: 170,
            },
        ]);
        let report = check(&plan, &events, &[done(job, 3)]);
        assert!(report.is_safe(), "{report}");
        assert_eq!((report.interrupted, report.duplicates), (0, 0), "{report}");
    }

    #[test]
    fn a_clean_run_is_safe_with_no_duplicates() {
        let mut events = vec![enqueued(vec![1, 2])];
        events.extend(run(1, 1, 10, 100, Some(200)));
        events.extend(run(2, 1, 11, 100, Some(200)));
        let report = check(&plan(), &events, &[done(1, 1), done(2, 1)]);
        assert!(report.is_safe(), "{report}");
        assert_eq!(
            (report.duplicates, report.runs, report.completed),
            (0, 2, 2)
        );
    }

    #[test]
    fn lost_stuck_unexpected_and_misclassified_jobs_are_counted() {
        let mut events = vec![enqueued(vec![1, 2, 3, 4])];
        events.extend(run(2, 1, 10, 100, Some(200)));
        events.extend(run(9, 1, 10, 100, Some(200)));
        let stuck = FinalJob {
            status: JobState::Running,
            ..done(3, 1)
        };
        let dead = FinalJob {
            status: JobState::Dead,
            dead_reason: Some(DeadReason::LeaseExpired),
            ..done(4, 1)
        };
        // 1: missing; 2: fine; 3: stuck; 4: dead although it succeeds; 5: never enqueued.
        let report = check(&plan(), &events, &[done(2, 1), stuck, dead, done(5, 1)]);
        assert_eq!(report.lost, 1, "{report}");
        assert_eq!(report.stuck, 1, "{report}");
        assert_eq!(report.misclassified, 1, "{report}");
        assert_eq!(report.unexpected, 2, "a row and a run: {report}");
        assert!(!report.is_safe());
    }

    #[test]
    fn a_completed_row_without_a_successful_run_is_lost() {
        let events = vec![enqueued(vec![1])];
        let report = check(&plan(), &events, &[done(1, 1)]);
        assert_eq!(report.lost, 1, "{report}");
    }

    #[test]
    fn overlapping_runs_under_live_leases_count_and_sequential_ones_do_not() {
        // Lease 1 ms = 1000 µs. Job 1: second run starts while the first still runs.
        let mut events = vec![enqueued(vec![1, 2])];
        events.extend(run(1, 1, 10, 1_000, Some(1_800)));
        events.extend(run(1, 2, 11, 1_500, Some(1_900)));
        // Job 2: the first run's lease ran out (no heartbeat) before the second began.
        events.extend(run(2, 1, 10, 1_000, None));
        events.extend(run(2, 2, 11, 2_500, Some(2_600)));
        let report = check(&plan(), &events, &[done(1, 2), done(2, 2)]);
        assert_eq!(report.lease_overlap, 1, "{report}");
        assert_eq!(report.duplicates, 2, "{report}");
        assert_eq!(
            report.misclassified, 0,
            "completed, with more attempts than predicted"
        );
        assert_eq!(report.extra_attempts, 2, "{report}");
    }

    #[test]
    fn a_heartbeat_keeps_a_lease_live_past_its_first_length() {
        let mut events = vec![enqueued(vec![1])];
        events.extend(run(1, 1, 10, 1_000, None));
        events.push(Event::Ack {
            op: AckOp::Heartbeat,
            job: 1,
            token: 101,
            result: AckResult::Applied,
            pid: 10,
            t0: 1_700,
            t: 1_800,
        });
        events.extend(run(1, 2, 11, 2_500, Some(2_600)));
        let report = check(&plan(), &events, &[done(1, 2)]);
        assert_eq!(report.lease_overlap, 1, "{report}");
    }

    #[test]
    fn a_run_cut_short_and_released_does_not_overlap_the_next_one() {
        let mut events = vec![enqueued(vec![1])];
        // Lease 1 ms; cut short (no end), released at 1_200, reclaimed at 1_500.
        events.extend(run(1, 1, 10, 1_000, None));
        events.push(Event::Ack {
            op: AckOp::Release,
            job: 1,
            token: 101,
            result: AckResult::Applied,
            pid: 10,
            t0: 1_200,
            t: 1_300,
        });
        events.extend(run(1, 2, 11, 1_500, Some(1_600)));
        let report = check(&plan(), &events, &[done(1, 2)]);
        assert_eq!(report.lease_overlap, 0, "{report}");
        assert_eq!(report.duplicates, 1, "{report}");
    }

    /// The soak's intermittent `lease_overlap=2` on PostgreSQL: a run that panicked (or
    /// whose timeout dropped it) has no end line; the failure its process then wrote
    /// was applied, and the process was killed before the ack's ledger line. Without
    /// the `stopped` line the run counted as live until its lease ran out, and the next
    /// attempt, claimed after the backoff, as an overlap.
    #[test]
    fn a_run_that_stopped_without_returning_is_over_even_when_its_ack_line_was_lost() {
        for cause in [StopCause::Panicked, StopCause::Dropped] {
            let mut events = vec![enqueued(vec![1, 2])];
            // Lease 1 ms from the claim: live until 2_000 unless the run ended.
            events.extend(run(1, 1, 10, 1_000, None));
            events.push(Event::Stopped {
                job: 1,
                attempt: 1,
                pid: 10,
                cause,
                t: 1_100,
            });
            events.extend(run(1, 2, 11, 1_500, Some(1_600)));
            // Job 2: the same without the stopped line, a run still going for all the
            // ledger knows: an overlap.
            events.extend(run(2, 1, 10, 1_000, None));
            events.extend(run(2, 2, 11, 1_500, Some(1_600)));
            let report = check(&plan(), &events, &[done(1, 2), done(2, 2)]);
            assert_eq!(report.lease_overlap, 1, "{cause:?}: {report}");
            assert!(
                report.examples.iter().any(|e| e.starts_with("job 2:")),
                "{report}"
            );
        }
    }

    #[test]
    fn an_ack_applied_after_a_newer_claim_is_a_late_ack() {
        let mut events = vec![enqueued(vec![1])];
        events.extend(run(1, 1, 10, 1_000, Some(1_100)));
        events.extend(run(1, 2, 11, 3_000, Some(3_100)));
        for (token, t0) in [(101, 5_000), (102, 3_200)] {
            events.push(Event::Ack {
                op: AckOp::Complete,
                job: 1,
                token,
                result: AckResult::Applied,
                pid: 10,
                t0,
                t: t0 + 10,
            });
        }
        let report = check(&plan(), &events, &[done(1, 2)]);
        assert_eq!(report.late_ack_accepted, 1, "{report}");
    }

    fn ack(op: AckOp, job: i64, attempt: i32, t0: i64) -> Event {
        Event::Ack {
            op,
            job,
            token: job * 100 + i64::from(attempt),
            result: AckResult::Applied,
            pid: 10,
            t0,
            t: t0 + 1,
        }
    }

    #[test]
    fn an_attempt_cut_short_by_a_fault_may_spend_an_attempt_but_never_change_the_end() {
        // Plan: every attempt succeeds. Attempt 1 was killed (no ack), attempt 2
        // completed: consistent, one interruption, one extra attempt.
        let mut events = vec![enqueued(vec![1, 2, 3, 4])];
        events.extend(run(1, 1, 10, 100, None));
        events.extend(run(1, 2, 11, 5_000, Some(5_100)));
        events.push(ack(AckOp::Complete, 1, 2, 5_200));
        // Job 2: attempt 1 completed (acked) and yet the row shows attempt 2: wrong.
        events.extend(run(2, 1, 10, 100, Some(200)));
        events.push(ack(AckOp::Complete, 2, 1, 300));
        events.extend(run(2, 2, 11, 5_000, Some(5_100)));
        // Job 3: every attempt lost its lease: dead lease_expired, explained.
        // Job 4: dead lease_expired although its last attempt's result was applied.
        events.extend(run(4, 3, 10, 100, Some(200)));
        events.push(ack(AckOp::Complete, 4, 3, 300));
        let dead = |id| FinalJob {
            status: JobState::Dead,
            dead_reason: Some(DeadReason::LeaseExpired),
            ..done(id, 3)
        };
        let report = check(
            &plan(),
            &events,
            &[done(1, 2), done(2, 2), dead(3), dead(4)],
        );
        assert_eq!(report.misclassified, 2, "{report}");
        assert!(
            report.examples.iter().any(|e| e.starts_with("job 2:")),
            "{report}"
        );
        assert!(
            report.examples.iter().any(|e| e.starts_with("job 4:")),
            "{report}"
        );
        // Job 1: attempt 1; job 3: all three; job 4: attempts 1 and 2.
        assert_eq!(report.interrupted, 1 + 3 + 2, "{report}");
    }

    #[test]
    fn a_job_predicted_to_fail_permanently_never_completes_whatever_the_faults() {
        let plan = Plan::new(3, "permanent:1");
        let events = vec![enqueued(vec![1])];
        for attempts in 1..=3 {
            let report = check(&plan, &events, &[done(1, attempts)]);
            assert_eq!(report.misclassified, 1, "{report}");
        }
    }
}
