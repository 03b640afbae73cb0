//! [`Client`]: the one way every door does a user-level operation.
//!
//! The CLI, the HTTP server, the demo and your own code all call these methods, so an
//! operation (enqueue with its policy, cancel, a paced and audited redrive, purge,
//! export, pause, breaker commands, settling a remote worker's attempt) behaves the
//! same whichever door it came through. Doors parse input and print output; the
//! workflow lives here once. (River's `Client.Insert` and Oban's `insert/2` are the
//! same idea: users never touch the driver.)

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use revenant_core::decide::Transition;
use revenant_core::dependency::{BreakerAction, DependencyState};
use revenant_core::schedule::{ScheduleRecord, ScheduleSpec};
use revenant_core::store::ScheduleDeleteParams;
use revenant_core::store::{
    CancelResult, CancelTarget, DeadFingerprintsParams, DependencySetParams, Enqueued,
    FingerprintGroup, JobCancelParams, JobEnqueueParams, JobFilter, JobGetParams, JobListParams,
    JobPurgeParams, JobRedriveParams, LeaseRef, PolicyDeleteParams, PolicyRecord, PolicyScope,
    PolicySetParams, QueuePauseParams, RedriveHistoryParams, RedriveRecord,
};
use revenant_core::{
    InputError, Job, JobId, JobState, LeaseToken, NewJob, Outcome, PolicySet, Rate, RetryPolicy,
    Store, StoreError,
};
use revenant_runtime::settle::{Settled, Settlement};
use revenant_runtime::{scheduler, Policies, WorkerBuilder};

/// The most dead jobs a dry run (and a redrive's progress total) counts.
pub const PREVIEW_SCAN: u32 = 10_000;

/// A redrive moves this many jobs per store call (one transaction each), so a large
/// redrive never holds one long transaction and its progress moves.
pub const REDRIVE_CHUNK: u32 = 500;

/// An export reads this many jobs per page, so memory stays flat.
pub const EXPORT_PAGE: u32 = 500;

/// The most job ids one redrive or purge may name.
pub const MAX_IDS: usize = 10_000;

/// The store and the retry policies, shared by every door. Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let url = format!("sqlite://{}", dir.path().join("client.db").display());
/// use revenant::store::JobFilter;
/// use revenant::{Client, DeadSelection, JobState, NewJob, RedriveRequest};
///
/// let client = Client::connect(&url).await?;
/// let job = NewJob::new("emails", "send_receipt", serde_json::json!({"order": 42}));
/// let enqueued = client.enqueue(job).await?;
/// client.cancel(enqueued.id, Some("order refunded".into())).await?;
/// assert_eq!(client.job(enqueued.id).await?.unwrap().status, JobState::Cancelled);
///
/// // Every dead receipt back to the queue, 20 a second (none are dead here).
/// let selection = DeadSelection {
///     filter: JobFilter { kind: Some("send_receipt".into()), ..JobFilter::default() },
///     ..DeadSelection::default()
/// };
/// let request = RedriveRequest { selection, rate: Some("20/s".parse()?), ..RedriveRequest::default() };
/// let report = client.redrive(request, |p| eprintln!("{} of {}", p.done, p.expected)).await?;
/// assert!(report.ids.is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    store: Arc<dyn Store>,
    policies: Arc<Policies>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("backend", &self.store.backend())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client over an open store, with revenant's default policies under whatever
    /// the store holds (see [`Client::with_policies`]).
    pub fn new(store: Arc<dyn Store>) -> Client {
        Client {
            store,
            policies: Arc::new(Policies::new(PolicySet::default())),
        }
    }

    /// Opens the store a URL names (see [`crate::connect`]) and wraps it.
    pub async fn connect(url: &str) -> Result<Client, StoreError> {
        Ok(Client::new(crate::connect(url).await?))
    }

    /// Declares policies in code: the layer under the policies stored in the database
    /// (`revenant policy set`), which win at the same scope. Default: revenant's
    /// default policy for everything.
    pub fn with_policies(mut self, policies: PolicySet) -> Client {
        self.policies = Arc::new(Policies::new(policies));
        self
    }

    /// The store under this client: for the backend's own extras (a PostgreSQL
    /// transaction's enqueue) and for reads this client does not wrap.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The policies this client resolves against.
    pub fn policies(&self) -> &Arc<Policies> {
        &self.policies
    }

    /// A worker builder over this client's store that shares its policies.
    pub fn worker(&self) -> WorkerBuilder {
        revenant_runtime::Worker::builder(self.store.clone()).shared_policies(self.policies.clone())
    }

    // ---- enqueue -------------------------------------------------------------------

    /// Enqueues one job. Its `max_attempts`, unless set on the job, is its queue's and
    /// kind's policy's, resolved now and fixed on the job (as Oban and River do).
    pub async fn enqueue(&self, job: NewJob) -> Result<Enqueued, StoreError> {
        let mut enqueued = self.enqueue_many(vec![job]).await?;
        enqueued.pop().ok_or_else(|| StoreError::Backend {
            message: "the store enqueued nothing and said nothing".into(),
            source: None,
        })
    }

    /// Enqueues jobs in one transaction: every job is checked first, and one bad job
    /// writes none. Each job's policy is resolved as in [`Client::enqueue`].
    pub async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>, StoreError> {
        let params = self.enqueue_params(jobs).await?;
        self.store.job_enqueue(params).await
    }

    /// The store call an enqueue makes, with every job checked and its policy
    /// resolved, for the one enqueue that cannot go through [`Client::enqueue_many`]:
    /// PostgreSQL's enqueue inside your own transaction (the outbox pattern), where the
    /// jobs exist only if your transaction commits.
    ///
    /// With the `postgres` feature (on by default):
    ///
    /// ```no_run
    /// # #[cfg(feature = "postgres")]
    /// # async fn example(client: revenant::Client, pg: revenant::backends::postgres::PgStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use revenant::NewJob;
    ///
    /// let mut tx = pg.pool().begin().await?;
    /// // ... your own writes in `tx` ...
    /// let receipt = NewJob::new("emails", "send_receipt", serde_json::json!({"order": 42}));
    /// let params = client.enqueue_params(vec![receipt]).await?;
    /// pg.job_enqueue_tx(&mut tx, params).await?;
    /// tx.commit().await?; // your rows and the receipt job exist together, or neither does
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_params(&self, jobs: Vec<NewJob>) -> Result<JobEnqueueParams, StoreError> {
        for job in &jobs {
            job.validate()?;
        }
        Ok(self.policies.enqueue_params(&*self.store, jobs).await)
    }

    // ---- reads ---------------------------------------------------------------------

    /// One job with its whole history, or `None`.
    pub async fn job(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        self.store.job_get(JobGetParams { id }).await
    }

    /// A page of jobs matching `filter`, newest first, older than `before` when given.
    pub async fn jobs(
        &self,
        filter: JobFilter,
        before: Option<JobId>,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        self.store
            .job_list(JobListParams {
                filter,
                before_id: before,
                limit,
            })
            .await
    }

    // ---- cancel and queues -----------------------------------------------------------

    /// Cancels a ready or running job (a running job's handler finds its lease lost at
    /// its next heartbeat). A finished job is left alone and said so.
    pub async fn cancel(
        &self,
        id: JobId,
        message: Option<String>,
    ) -> Result<CancelResult, StoreError> {
        let result = self
            .store
            .job_cancel(JobCancelParams {
                target: CancelTarget::Id(id),
                message,
                now: None,
            })
            .await?;
        if result == CancelResult::Cancelled {
            tracing::info!(job_id = id, "job cancelled by an operator");
        }
        Ok(result)
    }

    /// Pauses a queue: workers claim nothing from it until it is resumed; running jobs
    /// finish.
    pub async fn pause(&self, queue: &str) -> Result<(), StoreError> {
        revenant_core::names::validate_name("queue", queue)?;
        self.store
            .queue_pause(QueuePauseParams {
                queue: queue.to_string(),
                now: None,
            })
            .await?;
        tracing::info!(queue, "queue paused");
        Ok(())
    }

    /// Resumes a paused queue.
    pub async fn resume(&self, queue: &str) -> Result<(), StoreError> {
        revenant_core::names::validate_name("queue", queue)?;
        self.store
            .queue_resume(QueuePauseParams {
                queue: queue.to_string(),
                now: None,
            })
            .await?;
        tracing::info!(queue, "queue resumed");
        Ok(())
    }

    // ---- breakers ----------------------------------------------------------------------

    /// Holds a dependency's breaker open, closes it, or gives it back to the
    /// automatic rules; returns its state after.
    pub async fn breaker(
        &self,
        dependency: &str,
        action: BreakerAction,
    ) -> Result<DependencyState, StoreError> {
        revenant_core::names::validate_key("dependency", dependency)?;
        let state = self
            .store
            .dependency_set(DependencySetParams {
                dependency: dependency.to_string(),
                action,
                now: None,
            })
            .await?;
        tracing::info!(dependency, action = ?action, breaker = %state.breaker, "breaker set by an operator");
        Ok(state)
    }

    // ---- policies ----------------------------------------------------------------------

    /// The policies stored in the database, default first, then queues and kinds by
    /// name.
    pub async fn stored_policies(&self) -> Result<Vec<PolicyRecord>, StoreError> {
        self.store.policy_list().await
    }

    /// The policies in effect: what code declared with the stored ones over it, read
    /// now.
    pub async fn effective_policies(&self) -> Result<Arc<PolicySet>, StoreError> {
        self.policies.reload(&*self.store).await
    }

    /// Stores a policy for a scope (the default, a queue or a kind), replacing the one
    /// there. Producers resolve `max_attempts` from it at their next enqueue, and
    /// workers and the server their backoff at their next settle: at once in this
    /// process, within [`Policies::DEFAULT_REFRESH`] elsewhere. Jobs already enqueued
    /// keep the `max_attempts` they were given.
    pub async fn set_policy(
        &self,
        scope: PolicyScope,
        policy: RetryPolicy,
    ) -> Result<(), StoreError> {
        self.store
            .policy_set(PolicySetParams {
                scope: scope.clone(),
                policy,
                now: None,
            })
            .await?;
        self.policies.invalidate();
        tracing::info!(scope = ?scope, "retry policy stored");
        Ok(())
    }

    /// Removes a scope's stored policy; `false` when there was none.
    pub async fn delete_policy(&self, scope: PolicyScope) -> Result<bool, StoreError> {
        let removed = self
            .store
            .policy_delete(PolicyDeleteParams {
                scope: scope.clone(),
            })
            .await?;
        self.policies.invalidate();
        Ok(removed)
    }

    // ---- periodic jobs (schedules) -----------------------------------------------------

    /// Every stored schedule, by name, with its next and last tick and whether it is
    /// paused.
    pub async fn schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.store.schedule_list().await
    }

    /// Stores a schedule, replacing the one of the same name. A new or changed
    /// schedule's first tick is the first after now; an unchanged one keeps its next
    /// tick and its pause. Every worker's scheduler sees it within a second. Refused,
    /// naming the field, for a bad cron expression, an unknown time zone, an interval
    /// out of range or a job that could not be enqueued.
    pub async fn set_schedule(&self, spec: ScheduleSpec) -> Result<(), StoreError> {
        let name = spec.name.clone();
        scheduler::declare(&*self.store, spec).await?;
        tracing::info!(schedule = name, "schedule stored");
        Ok(())
    }

    /// Removes a schedule; `false` when there was none. Jobs it enqueued stay.
    pub async fn delete_schedule(&self, name: &str) -> Result<bool, StoreError> {
        self.store
            .schedule_delete(ScheduleDeleteParams {
                name: name.to_string(),
            })
            .await
    }

    /// Pauses a schedule: no tick is enqueued until it is resumed. `false` when there
    /// is no such schedule.
    pub async fn pause_schedule(&self, name: &str) -> Result<bool, StoreError> {
        scheduler::set_paused(&*self.store, name, true).await
    }

    /// Resumes a schedule from its next tick after now (ticks that fell while it was
    /// paused are not enqueued). `false` when there is no such schedule.
    pub async fn resume_schedule(&self, name: &str) -> Result<bool, StoreError> {
        scheduler::set_paused(&*self.store, name, false).await
    }

    /// Enqueues a schedule's job now, by hand (paused or not; its ticks are left
    /// alone). `None` when there is no such schedule.
    pub async fn run_schedule(&self, name: &str) -> Result<Option<Enqueued>, StoreError> {
        scheduler::run_now(&*self.store, &self.policies, name).await
    }

    // ---- remote workers ----------------------------------------------------------------

    /// Settles an attempt a remote worker reports (its outcome for job `id` under
    /// `lease_token`), through the runtime's one settle step: the policy of the job's
    /// queue and kind, the store transition fenced on the lease, the log event and the
    /// metrics. A job that is not running under that token answers
    /// [`Settled::LeaseLost`], with no transition, and changes nothing.
    pub async fn settle(
        &self,
        id: JobId,
        lease_token: LeaseToken,
        outcome: Outcome,
    ) -> Result<SettleReport, StoreError> {
        let job = self
            .job(id)
            .await?
            .filter(|job| job.status == JobState::Running && job.lease_token == Some(lease_token));
        let Some(job) = job else {
            return Ok(SettleReport {
                transition: None,
                settled: Settled::LeaseLost,
            });
        };
        let policy = self
            .policies
            .resolve(&*self.store, &job.queue, &job.kind)
            .await;
        let worker = job.worker.clone().unwrap_or_default();
        let lease = LeaseRef { id, lease_token };
        let settlement =
            Settlement::decide(&job, lease, &outcome, &policy, &worker, &mut rand::rng());
        let settled = settlement.apply(&*self.store).await?;
        settlement.record(&job, &settled);
        Ok(SettleReport {
            transition: (settled == Settled::Applied).then(|| settlement.transition().clone()),
            settled,
        })
    }

    // ---- dead letters --------------------------------------------------------------

    /// Dead jobs grouped by the fingerprint of their last error, the largest first.
    pub async fn dead_fingerprints(
        &self,
        filter: JobFilter,
        limit: u32,
    ) -> Result<Vec<FingerprintGroup>, StoreError> {
        self.store
            .dead_fingerprints(DeadFingerprintsParams {
                filter: dead_only(filter),
                limit,
            })
            .await
    }

    /// The redrive audit, newest first.
    pub async fn redrive_history(&self, limit: u32) -> Result<Vec<RedriveRecord>, StoreError> {
        self.store
            .redrive_history(RedriveHistoryParams { limit })
            .await
    }

    /// What a redrive or purge of `selection` would take, without changing anything:
    /// up to [`PREVIEW_SCAN`] jobs (or the selection's limit), and whether the scan
    /// limit cut the count.
    pub async fn preview(&self, selection: &DeadSelection) -> Result<Preview, StoreError> {
        selection.check("look at")?;
        let cap = selection.limit.unwrap_or(PREVIEW_SCAN).min(PREVIEW_SCAN);
        let jobs = self
            .jobs(dead_only(selection.filter.clone()), None, cap)
            .await?;
        let at_least = jobs.len() as u32 == cap && selection.limit.is_none_or(|l| l > cap);
        Ok(Preview { jobs, at_least })
    }

    /// Redrives the selected dead jobs back to ready with a fresh attempt budget,
    /// history kept: in chunks of [`REDRIVE_CHUNK`] (one transaction each) under one
    /// audit record, the i-th job's `run_at` at `start + i / rate` when a rate is
    /// given, so workers take them no faster than the provider can bear. Only jobs dead
    /// before the redrive started are taken, so a job that dies again while it runs is
    /// not redriven twice. `progress` is called after each chunk.
    pub async fn redrive(
        &self,
        request: RedriveRequest,
        mut progress: impl FnMut(RedriveProgress),
    ) -> Result<RedriveReport, StoreError> {
        request.selection.check("redrive")?;
        for (field, value) in [("actor", &request.actor), ("note", &request.note)] {
            if let Some(value) = value {
                check_line(field, value)?;
            }
        }
        let limit = request.selection.limit;
        let spacing = request.rate.map_or(Duration::ZERO, Rate::spacing);
        let started = self.store.now().await?;
        let mut filter = dead_only(request.selection.filter.clone());
        let bound = started + chrono::Duration::milliseconds(1);
        filter.finished_before = Some(filter.finished_before.map_or(bound, |t| t.min(bound)));
        let expected = self
            .preview(&DeadSelection {
                filter: filter.clone(),
                all: true,
                limit,
            })
            .await?;
        let expected_count = expected.jobs.len();
        let audit_key = format!(
            "redrive-{}-{:016x}",
            started.timestamp_millis(),
            rand::random::<u64>()
        );
        let mut ids: Vec<JobId> = Vec::new();
        progress(RedriveProgress {
            done: 0,
            expected: expected_count,
            at_least: expected.at_least,
        });
        loop {
            let want = match limit {
                Some(limit) => REDRIVE_CHUNK.min(limit.saturating_sub(ids.len() as u32)),
                None => REDRIVE_CHUNK,
            };
            if want == 0 {
                break;
            }
            let offset = spacing.saturating_mul(u32::try_from(ids.len()).unwrap_or(u32::MAX));
            let offset = chrono::Duration::from_std(offset).map_err(|_| {
                InputError::new("rate", "spreads the jobs past any time a store can hold")
            })?;
            let chunk = self
                .store
                .job_redrive(JobRedriveParams {
                    filter: filter.clone(),
                    limit: Some(want),
                    spacing,
                    start_at: Some(started + offset),
                    actor: request.actor.clone(),
                    note: request.note.clone(),
                    audit_key: Some(audit_key.clone()),
                    now: None,
                })
                .await?;
            let moved = chunk.len();
            ids.extend(chunk);
            progress(RedriveProgress {
                done: ids.len(),
                expected: expected_count.max(ids.len()),
                at_least: expected.at_least,
            });
            if moved < want as usize {
                break;
            }
        }
        tracing::info!(
            count = ids.len(),
            actor = request.actor.as_deref().unwrap_or(""),
            rate_per_sec = request.rate.map(Rate::per_second),
            audit_key = %audit_key,
            "redrive"
        );
        Ok(RedriveReport {
            ids,
            rate: request.rate,
        })
    }

    /// Deletes the selected dead jobs for good (their payloads and histories with
    /// them); returns how many went.
    pub async fn purge(&self, selection: &DeadSelection) -> Result<u64, StoreError> {
        selection.check("purge")?;
        let count = self
            .store
            .job_purge(JobPurgeParams {
                filter: dead_only(selection.filter.clone()),
                limit: selection.limit,
            })
            .await?;
        tracing::info!(count, "purge");
        Ok(count)
    }

    /// Writes every dead job `filter` matches as one JSON line each, newest first,
    /// reading [`EXPORT_PAGE`] at a time so memory stays flat however many there are.
    /// Returns how many were written.
    pub async fn export(&self, filter: JobFilter, out: &mut dyn Write) -> Result<u64, ExportError> {
        let filter = dead_only(filter);
        let mut before = None;
        let mut count = 0_u64;
        loop {
            let page = self.jobs(filter.clone(), before, EXPORT_PAGE).await?;
            for job in &page {
                serde_json::to_writer(&mut *out, job).map_err(std::io::Error::from)?;
                out.write_all(b"\n")?;
                count += 1;
            }
            out.flush()?;
            match page.last() {
                Some(last) if page.len() == EXPORT_PAGE as usize => before = Some(last.id),
                _ => return Ok(count),
            }
        }
    }
}

/// A job's attempt budget as the store keeps it.
fn dead_only(mut filter: JobFilter) -> JobFilter {
    filter.statuses = Some(vec![JobState::Dead]);
    filter
}

fn check_line(field: &'static str, value: &str) -> Result<(), InputError> {
    if value.chars().any(char::is_control) || value.len() > 1024 {
        return Err(InputError::new(
            field,
            "must be one line without control characters, at most 1024 bytes",
        ));
    }
    Ok(())
}

/// What settling a remote worker's attempt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettleReport {
    /// The transition written; `None` when nothing was.
    pub transition: Option<Transition>,
    /// What the store answered.
    pub settled: Settled,
}

/// Which dead jobs a redrive, purge or preview takes.
#[derive(Debug, Clone, Default)]
pub struct DeadSelection {
    /// The jobs (the client adds `status = dead`).
    pub filter: JobFilter,
    /// Must be true to take every dead job with nothing narrowing the filter, so a
    /// forgotten flag never redrives or purges the whole dead-letter queue.
    pub all: bool,
    /// At most this many; `None` for all that match.
    pub limit: Option<u32>,
}

impl DeadSelection {
    /// Refuses a selection that nothing narrows (unless `all`), an empty or oversized
    /// id list, and a zero limit, naming the field.
    pub fn check(&self, verb: &str) -> Result<(), InputError> {
        let f = &self.filter;
        let narrowed = f.ids.is_some()
            || f.queue.is_some()
            || f.kind.is_some()
            || f.group_key.is_some()
            || f.correlation_id.is_some()
            || f.dead_reason.is_some()
            || f.error_contains.is_some()
            || f.finished_after.is_some()
            || f.finished_before.is_some()
            || f.fingerprint.is_some();
        if !narrowed && !self.all {
            return Err(InputError::new(
                "all",
                format!("nothing narrows the selection: give job ids or a filter (queue, kind, reason, error, fingerprint, since ...), or all to {verb} every dead job"),
            ));
        }
        if let Some(ids) = &f.ids {
            if ids.is_empty() {
                return Err(InputError::new(
                    "ids",
                    "is empty; give at least one id or leave it out",
                ));
            }
            if ids.len() > MAX_IDS {
                return Err(InputError::new(
                    "ids",
                    format!("has {} ids; the limit is {MAX_IDS}", ids.len()),
                ));
            }
            if let Some(bad) = ids.iter().find(|id| **id < 1) {
                return Err(InputError::new(
                    "ids",
                    format!("{bad} is not a job id (a positive whole number)"),
                ));
            }
        }
        if let Some(text) = &f.error_contains {
            if text.is_empty() {
                return Err(InputError::new(
                    "error_contains",
                    "is empty; leave it out to match every error",
                ));
            }
        }
        if self.limit == Some(0) {
            return Err(InputError::new("limit", "must be at least 1"));
        }
        Ok(())
    }
}

/// A paced, audited redrive (see [`Client::redrive`]).
#[derive(Debug, Clone, Default)]
pub struct RedriveRequest {
    /// Which dead jobs.
    pub selection: DeadSelection,
    /// The pace; `None` for all at once.
    pub rate: Option<Rate>,
    /// Who redrove (a user name, a ticket), for the audit. Default none.
    pub actor: Option<String>,
    /// Why, for the audit. Default none.
    pub note: Option<String>,
}

/// How far a redrive has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedriveProgress {
    /// Jobs redriven so far.
    pub done: usize,
    /// Jobs the redrive expects to move in all (counted before it began, up to
    /// [`PREVIEW_SCAN`]; never below `done`).
    pub expected: usize,
    /// True when the count before it began stopped at the scan limit.
    pub at_least: bool,
}

/// What a redrive did.
#[derive(Debug, Clone, PartialEq)]
pub struct RedriveReport {
    /// The jobs redriven, in `run_at` order.
    pub ids: Vec<JobId>,
    /// The pace they were spread at, if any.
    pub rate: Option<Rate>,
}

impl RedriveReport {
    /// How long the redriven jobs are spread over (zero without a rate).
    pub fn span(&self) -> Duration {
        self.rate
            .map_or(Duration::ZERO, |rate| rate.span(self.ids.len() as u64))
    }
}

/// What a dry run found.
#[derive(Debug, Clone)]
pub struct Preview {
    /// The jobs, newest first.
    pub jobs: Vec<Job>,
    /// True when the scan limit cut the count: there are at least this many.
    pub at_least: bool,
}

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The output could not be written.
    #[error("cannot write the export: {0}")]
    Write(#[from] std::io::Error),
}
