//! The remote workers' routes: claim, heartbeat, complete, fail, snooze.
//!
//! Every call after the claim carries the job's lease token and is fenced exactly as
//! the library's are: the store changes the job only if it is still running under that
//! token. A call that matches nothing (the lease expired and the job was reclaimed, or
//! it was cancelled, released or finished) answers 409 `lease_lost` and changes
//! nothing; the worker should drop the job, whose side effects may happen twice
//! (at-least-once).
//!
//! A token limited to queues ([`Reach`]) claims only from them, registers its workers
//! as `TOKEN_NAME/worker`, and settles only their jobs: a job of another queue
//! answers 404 exactly as a job that does not exist (nothing changed, nothing shown).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, State};
use axum::http::Extensions;
use axum::Json;
use revenant::settle::Settled;
use revenant::store::{
    Fenced, JobClaimParams, JobHeartbeatParams, LeaseRef, WorkerHeartbeatParams,
};
use revenant::{names, JobState, LeaseToken, NewJob, Outcome, Transition};
use serde::{Deserialize, Serialize};

use crate::auth::Reach;
use crate::error::{ApiError, ErrorCode};
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
/// seen as serving every queue it claimed from while it stays alive. A token limited
/// to queues claims only from them (403 naming `queue` otherwise, nothing recorded),
/// and its worker is recorded as `TOKEN_NAME/worker`.
pub async fn claim(
    State(state): State<AppState>,
    extensions: Extensions,
    reach: Reach,
    JsonBody(mut body): JsonBody<ClaimBody>,
) -> Result<Json<ClaimResponse>, ApiError> {
    names::validate_name("queue", &body.queue)?;
    reach.check("queue", &body.queue)?;
    body.worker = reach.worker_name(&body.worker);
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
            .store()
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
            .store()
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
    let now = state.store().now().await?;
    let alive_since = now - chrono::Duration::seconds(30);
    let mut queues: Vec<String> = state
        .store()
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
        .store()
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

/// For a token limited to queues: 404 unless job `id` exists and is in one of them,
/// the answer a job that does not exist gets, so its queue, state and payload stay
/// unseen. Unlimited callers are not asked to pay the read.
async fn in_reach(state: &AppState, reach: &Reach, id: i64) -> Result<(), ApiError> {
    if !reach.is_limited() {
        return Ok(());
    }
    match state.client.job(id).await? {
        Some(job) if reach.allows(&job.queue) => Ok(()),
        _ => Err(ApiError::not_found(format!(
            "no job with id {id} in this token's queues"
        ))),
    }
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

/// Settles a remote worker's attempt through the client's one settle step (the job's
/// policy, the fenced write, the log event, the counters) under this server's
/// counters. Answers the transition written, or 409 `lease_lost` when nothing was.
async fn settle(
    state: &AppState,
    id: i64,
    token: i64,
    outcome: Outcome,
) -> Result<Transition, ApiError> {
    let report = state
        .counters
        .scope(state.client.settle(id, LeaseToken(token), outcome))
        .await?;
    match (report.settled, report.transition) {
        (Settled::Applied, Some(transition)) => Ok(transition),
        (Settled::LeaseLost, _) => Err(ApiError::lease_lost(id)),
        (settled, _) => {
            // A remote worker reports neither a cancel nor a write the step could not
            // make without an error: the client answers applied or lease lost.
            tracing::error!(job_id = id, settled = ?settled, "unexpected settle result");
            Err(ApiError::new(
                ErrorCode::StoreError,
                "the store failed to settle the attempt; the server's log has the details",
            ))
        }
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
    reach: Reach,
    JobIdPath(id): JobIdPath,
    JsonBody(body): JsonBody<HeartbeatBody>,
) -> Result<Json<FencedResponse>, ApiError> {
    in_reach(&state, &reach, id).await?;
    let lease_for = input::duration_in(
        "lease",
        body.lease.unwrap_or(DEFAULT_LEASE),
        MIN_LEASE,
        MAX_LEASE,
    )?;
    let result = state
        .store()
        .job_heartbeat(JobHeartbeatParams {
            lease: LeaseRef {
                id,
                lease_token: LeaseToken(body.lease_token),
            },
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
    reach: Reach,
    JobIdPath(id): JobIdPath,
    JsonBody(body): JsonBody<CompleteBody>,
) -> Result<Json<FencedResponse>, ApiError> {
    in_reach(&state, &reach, id).await?;
    settle(&state, id, body.lease_token, Outcome::Success).await?;
    fenced(id, Fenced::Applied)
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
/// its fate in the library's one settle step, with the policy stored for the job's
/// queue and kind: a transient failure with attempts left
/// goes back to ready after the policy's backoff (or at least `retry_after`, capped
/// at the backoff's cap); a transient failure on the last attempt, or a permanent one,
/// makes the job dead.
pub async fn fail(
    State(state): State<AppState>,
    reach: Reach,
    JobIdPath(id): JobIdPath,
    JsonBody(body): JsonBody<FailBody>,
) -> Result<Json<FailResponse>, ApiError> {
    in_reach(&state, &reach, id).await?;
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
    let (state, retry_in, dead_reason) = match settle(&state, id, body.lease_token, outcome).await?
    {
        Transition::Retry { delay, .. } => (
            JobState::Ready,
            Some(revenant::duration::format(delay)),
            None,
        ),
        Transition::Dead { reason, .. } => (JobState::Dead, None, Some(reason)),
        other => {
            // decide() maps a retry or a permanent failure to nothing else.
            return Err(ApiError::new(
                ErrorCode::StoreError,
                format!("unexpected transition {other:?} for a failure"),
            ));
        }
    };
    Ok(Json(FailResponse {
        id,
        result: Fenced::Applied,
        state,
        retry_in,
        dead_reason,
    }))
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
    reach: Reach,
    JobIdPath(id): JobIdPath,
    JsonBody(body): JsonBody<SnoozeBody>,
) -> Result<Json<FencedResponse>, ApiError> {
    in_reach(&state, &reach, id).await?;
    let delay = body
        .delay
        .ok_or_else(|| ApiError::field("delay", "is required: how long to put the job back for"))?;
    let delay = input::duration_in("delay", delay, Duration::ZERO, NewJob::MAX_DELAY)?;
    settle(
        &state,
        id,
        body.lease_token,
        Outcome::Snooze { after: delay },
    )
    .await?;
    fenced(id, Fenced::Applied)
}
