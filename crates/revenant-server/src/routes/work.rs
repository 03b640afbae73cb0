//! The remote workers' routes: claim, heartbeat, complete, fail, snooze.
//!
//! Every call after the claim carries the job's lease token and is fenced exactly as
//! the library's are: the store changes the job only if it is still running under that
//! token. A call that matches nothing (the lease expired and the job was reclaimed, or
//! it was cancelled, released or finished) answers 409 `lease_lost` and changes
//! nothing; the worker should drop the job, whose side effects may happen twice
//! (at-least-once).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, State};
use axum::http::Extensions;
use axum::Json;
use revenant::decide::Failure;
use revenant::store::{
    FailAction, Fenced, JobClaimParams, JobCompleteParams, JobFailParams, JobFailure, JobGetParams,
    JobHeartbeatParams, JobSnoozeParams, LeaseRef, WorkerHeartbeatParams,
};
use revenant::{decide, names, JobState, LeaseToken, NewJob, Outcome, Transition};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::extract::{JobIdPath, JsonBody};
use crate::input;
use crate::state::AppState;
use crate::views::ClaimedJob;

/// The lease unless a claim or heartbeat says otherwise: 60 s, the library's default.
/// Heartbeat every third of it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// The shortest lease accepted: shorter ones expire in network hiccups.
pub const MIN_LEASE: Duration = Duration::from_secs(1);
/// The longest lease accepted: a worker that dies holds its jobs this long.
pub const MAX_LEASE: Duration = Duration::from_secs(3600);
/// The longest a claim waits for a job (`wait`), below common proxy timeouts.
pub const MAX_WAIT: Duration = Duration::from_secs(30);
/// The most jobs one claim takes.
pub const MAX_CLAIM: u32 = 100;
/// The most queues a remote worker is recorded as serving in the registry.
const MAX_REGISTERED_QUEUES: usize = 64;

/// `POST /v1/claims`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    queue: String,
    worker: String,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default, deserialize_with = "input::opt_duration")]
    lease: Option<Duration>,
    #[serde(default, deserialize_with = "input::opt_duration")]
    wait: Option<Duration>,
}

/// The answer to a claim.
#[derive(Debug, Serialize)]
pub struct ClaimResponse {
    jobs: Vec<ClaimedJob>,
}

/// `POST /v1/claims`: leases up to `limit` due jobs of a queue, each with a fresh
/// lease token; an empty list when none is ready (after waiting up to `wait`).
///
/// The worker is recorded in the registry first (host: the address the request came
/// from; pid 0), so remote workers count in `workers_alive` like local ones. It is
/// seen as serving every queue it claimed from while it stays alive.
pub async fn claim(
    State(state): State<AppState>,
    extensions: Extensions,
    JsonBody(body): JsonBody<ClaimBody>,
) -> Result<Json<ClaimResponse>, ApiError> {
    names::validate_name("queue", &body.queue)?;
    names::validate_key("worker", &body.worker)?;
    let limit = match body.limit {
        None => 1,
        Some(n) if (1..=MAX_CLAIM).contains(&n) => n,
        Some(n) => {
            return Err(ApiError::field(
                "limit",
                format!("{n} is out of range; use 1..={MAX_CLAIM}"),
            ))
        }
    };
    let lease = input::duration_in(
        "lease",
        body.lease.unwrap_or(DEFAULT_LEASE),
        MIN_LEASE,
        MAX_LEASE,
    )?;
    let wait = input::duration_in(
        "wait",
        body.wait.unwrap_or_default(),
        Duration::ZERO,
        MAX_WAIT,
    )?;
    let host = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "remote".to_string(), |info| info.0.ip().to_string());
    register(&state, &body.worker, &body.queue, host).await?;

    let deadline = Instant::now() + wait;
    loop {
        let jobs = state
            .store
            .job_claim(JobClaimParams {
                queue: body.queue.clone(),
                worker: body.worker.clone(),
                limit,
                lease,
                reclaim: true,
                now: None,
            })
            .await?;
        let left = deadline.saturating_duration_since(Instant::now());
        if !jobs.is_empty() || left.is_zero() {
            let jobs: Vec<ClaimedJob> = jobs
                .into_iter()
                .filter_map(ClaimedJob::from_claim)
                .collect();
            for job in &jobs {
                tracing::debug!(job = job.id, queue = %job.queue, kind = %job.kind, attempt = job.attempt, worker = %body.worker, "claimed by a remote worker");
            }
            return Ok(Json(ClaimResponse { jobs }));
        }
        // A wake-up is a hint (another process's enqueue into SQLite sends none), so
        // look again at least every second.
        state
            .store
            .wait_for_jobs(&body.queue, left.min(Duration::from_secs(1)))
            .await;
    }
}

/// Records a remote worker in the registry, keeping the other queues it serves.
async fn register(
    state: &AppState,
    worker: &str,
    queue: &str,
    host: String,
) -> Result<(), ApiError> {
    let now = state.store.now().await?;
    let alive_since = now - chrono::Duration::seconds(30);
    let mut queues: Vec<String> = state
        .store
        .worker_list()
        .await?
        .into_iter()
        .find(|w| w.worker == worker && w.last_seen_at >= alive_since)
        .map(|w| w.queues)
        .unwrap_or_default();
    if !queues.iter().any(|q| q == queue) {
        queues.push(queue.to_string());
    }
    if queues.len() > MAX_REGISTERED_QUEUES {
        queues.drain(..queues.len() - MAX_REGISTERED_QUEUES);
    }
    state
        .store
        .worker_heartbeat(WorkerHeartbeatParams {
            worker: worker.to_string(),
            host,
            pid: 0,
            queues,
            now: None,
        })
        .await?;
    Ok(())
}

/// The answer to a fenced call that was applied.
#[derive(Debug, Serialize)]
pub struct FencedResponse {
    id: i64,
    result: Fenced,
}

fn fenced(id: i64, result: Fenced) -> Result<Json<FencedResponse>, ApiError> {
    match result {
        Fenced::Applied => Ok(Json(FencedResponse { id, result })),
        Fenced::LeaseLost => Err(ApiError::lease_lost(id)),
    }
}

fn lease(id: i64, token: i64) -> LeaseRef {
    LeaseRef {
        id,
        lease_token: LeaseToken(token),
    }
}

/// `POST /v1/jobs/{id}/heartbeat`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    lease_token: i64,
    #[serde(default, deserialize_with = "input::opt_duration")]
    lease: Option<Duration>,
}

/// `POST /v1/jobs/{id}/heartbeat`: the lease now runs `lease` (default 60 s) from now.
pub async fn heartbeat(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    JsonBody(body): JsonBody<HeartbeatBody>,
) -> Result<Json<FencedResponse>, ApiError> {
    let lease_for = input::duration_in(
        "lease",
        body.lease.unwrap_or(DEFAULT_LEASE),
        MIN_LEASE,
        MAX_LEASE,
    )?;
    let result = state
        .store
        .job_heartbeat(JobHeartbeatParams {
            lease: lease(id, body.lease_token),
            lease_for,
            now: None,
        })
        .await?;
    fenced(id, result)
}

/// `POST /v1/jobs/{id}/complete`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    lease_token: i64,
}

/// `POST /v1/jobs/{id}/complete`: running → completed.
pub async fn complete(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    JsonBody(body): JsonBody<CompleteBody>,
) -> Result<Json<FencedResponse>, ApiError> {
    let results = state
        .store
        .job_complete(JobCompleteParams {
            leases: vec![lease(id, body.lease_token)],
            now: None,
        })
        .await?;
    fenced(id, results.first().copied().unwrap_or(Fenced::LeaseLost))
}

/// A failure's class, as a remote worker reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailClass {
    /// May pass by itself: retried with backoff while attempts are left.
    Transient,
    /// Never will: dead at once.
    Permanent,
}

/// `POST /v1/jobs/{id}/fail`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailBody {
    lease_token: i64,
    class: FailClass,
    message: String,
    #[serde(default, deserialize_with = "input::opt_duration")]
    retry_after: Option<Duration>,
}

/// The answer to an applied failure.
#[derive(Debug, Serialize)]
pub struct FailResponse {
    id: i64,
    result: Fenced,
    state: JobState,
    retry_in: Option<String>,
    dead_reason: Option<revenant::DeadReason>,
}

/// `POST /v1/jobs/{id}/fail`: records the failure in the job's history and decides
/// its fate with the library's own `decide()`: a transient failure with attempts left
/// goes back to ready after the policy's backoff (or at least `retry_after`, capped
/// at the backoff's cap); a transient failure on the last attempt, or a permanent one,
/// makes the job dead.
pub async fn fail(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    JsonBody(body): JsonBody<FailBody>,
) -> Result<Json<FailResponse>, ApiError> {
    if body.message.trim().is_empty() {
        return Err(ApiError::field(
            "message",
            "is empty; say what failed (it is what the dead-letter view shows)",
        ));
    }
    // A NUL cannot be stored (PostgreSQL): shown instead of refused, so a worker's
    // failure is never lost over one odd byte of diagnostic text.
    let message = body.message.replace('\0', "\\0");
    let outcome = match (body.class, body.retry_after) {
        (FailClass::Transient, None) => Outcome::Retry { message },
        (FailClass::Transient, Some(after)) => Outcome::RetryAfter {
            message,
            after: input::duration_in("retry_after", after, Duration::ZERO, NewJob::MAX_DELAY)?,
        },
        (FailClass::Permanent, None) => Outcome::Permanent { message },
        (FailClass::Permanent, Some(_)) => {
            return Err(ApiError::field(
                "retry_after",
                "only a transient failure is retried; leave it out for a permanent one",
            ))
        }
    };
    // The attempt count and budget decide between retry and dead. A job that is not
    // running under this token is answered as the fenced update would: lease lost.
    let job = state
        .store
        .job_get(JobGetParams { id })
        .await?
        .filter(|job| {
            job.status == JobState::Running && job.lease_token == Some(LeaseToken(body.lease_token))
        })
        .ok_or_else(|| ApiError::lease_lost(id))?;
    let transition = decide(
        &outcome,
        job.attempts,
        job.max_attempts,
        &state.policy,
        &mut rand::rng(),
    );
    let (failure, action, response_state, retry_in, dead_reason) = match transition {
        Transition::Retry { delay, failure } => (
            failure,
            FailAction::Retry { delay },
            JobState::Ready,
            Some(revenant::duration::format(delay)),
            None,
        ),
        Transition::Dead { reason, failure } => (
            failure,
            FailAction::Dead { reason },
            JobState::Dead,
            None,
            Some(reason),
        ),
        other => {
            // decide() maps a retry or a permanent failure to nothing else.
            return Err(ApiError::new(
                crate::error::ErrorCode::StoreError,
                format!("unexpected transition {other:?} for a failure"),
            ));
        }
    };
    log_failure(&job, &failure, &action);
    let results = state
        .store
        .job_fail(JobFailParams {
            failures: vec![JobFailure {
                lease: lease(id, body.lease_token),
                failure,
                action,
                worker: job.worker.clone(),
            }],
            now: None,
        })
        .await?;
    match results.first() {
        Some(Fenced::Applied) => Ok(Json(FailResponse {
            id,
            result: Fenced::Applied,
            state: response_state,
            retry_in,
            dead_reason,
        })),
        _ => Err(ApiError::lease_lost(id)),
    }
}

/// The structured event every failed attempt and dead letter gets (DESIGN.md: a
/// dead-letter queue of anonymous failures is barely better than none).
fn log_failure(job: &revenant::Job, failure: &Failure, action: &FailAction) {
    match action {
        FailAction::Retry { delay } => tracing::info!(
            job = job.id, queue = %job.queue, kind = %job.kind, attempt = job.attempts,
            max_attempts = job.max_attempts, class = %failure.class, error = %failure.message,
            correlation_id = job.correlation_id.as_deref().unwrap_or(""),
            worker = job.worker.as_deref().unwrap_or(""),
            retry_in = %revenant::duration::format(*delay),
            "attempt failed (remote worker)"
        ),
        FailAction::Dead { reason } => tracing::warn!(
            job = job.id, queue = %job.queue, kind = %job.kind, attempt = job.attempts,
            max_attempts = job.max_attempts, class = %failure.class, error = %failure.message,
            correlation_id = job.correlation_id.as_deref().unwrap_or(""),
            worker = job.worker.as_deref().unwrap_or(""),
            reason = %reason,
            "job dead (remote worker)"
        ),
    }
}

/// `POST /v1/jobs/{id}/snooze`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnoozeBody {
    lease_token: i64,
    #[serde(deserialize_with = "input::opt_duration")]
    delay: Option<Duration>,
}

/// `POST /v1/jobs/{id}/snooze`: back to ready after `delay`, the attempt given back.
pub async fn snooze(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    JsonBody(body): JsonBody<SnoozeBody>,
) -> Result<Json<FencedResponse>, ApiError> {
    let delay = body
        .delay
        .ok_or_else(|| ApiError::field("delay", "is required: how long to put the job back for"))?;
    let delay = input::duration_in("delay", delay, Duration::ZERO, NewJob::MAX_DELAY)?;
    let result = state
        .store
        .job_snooze(JobSnoozeParams {
            lease: lease(id, body.lease_token),
            delay,
            now: None,
        })
        .await?;
    fenced(id, result)
}
