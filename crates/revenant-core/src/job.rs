//! The job model: what a job is, the states it moves through, and the record of every
//! failed attempt.
//!
//! ```text
//!            enqueue
//!               │
//!               ▼
//!   ┌──────► ready ◄──────────────┐ retry (backoff) / snooze / release
//!   │           │ claim           │
//!   │           ▼                 │
//!   │        running ─────────────┘
//!   │        │  │  │
//!   │        │  │  └──► cancelled   (operator or handler; also from ready)
//!   │        │  └─────► completed
//!   │        ▼
//!   └────── dead     (permanent, attempts_exhausted, lease_expired,
//!  redrive           decode_error, unknown_kind)
//! ```

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::InputError;
use crate::names;

/// A point in time. Stored with millisecond precision by every backend, so tests that
/// pin the clock should pin whole milliseconds.
pub type Timestamp = DateTime<Utc>;

/// The earliest time a store writes or filters on: the Unix epoch (SQLite keeps
/// INTEGER milliseconds since it; nothing a queue schedules happened before it).
pub const MIN_TIMESTAMP_MILLIS: i64 = 0;

/// The latest time a store writes or filters on: 9999-12-31T23:59:59.999Z. Both
/// backends and every JSON reader can hold it; a time past it is a unit mistake (an
/// absurd spacing or delay), and written once it could make the row unreadable for
/// every later listing.
pub const MAX_TIMESTAMP_MILLIS: i64 = 253_402_300_799_999;

/// Checks that `t` lies in the years 1970 to 9999 ([`MIN_TIMESTAMP_MILLIS`] to
/// [`MAX_TIMESTAMP_MILLIS`]), the one range every store accepts. `field` names the
/// input in the error. Every params `validate` calls it for each time it carries.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use revenant_core::job::check_timestamp;
/// assert!(check_timestamp("run_at", Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap()).is_ok());
/// let err = check_timestamp("run_at", Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap()).unwrap_err();
/// assert_eq!(err.field, "run_at");
/// assert!(check_timestamp("since", Utc.with_ymd_and_hms(1969, 12, 31, 0, 0, 0).unwrap()).is_err());
/// ```
pub fn check_timestamp(field: &'static str, t: Timestamp) -> Result<(), InputError> {
    if (MIN_TIMESTAMP_MILLIS..=MAX_TIMESTAMP_MILLIS).contains(&t.timestamp_millis()) {
        return Ok(());
    }
    Err(InputError::new(
        field,
        format!("{t} is out of range; use a time in the years 1970 to 9999"),
    ))
}

/// A job's identifier, unique within one database.
pub type JobId = i64;

/// The proof that a worker holds a job's lease. Every transition of a running job is
/// fenced on it: a call with a stale token changes nothing.
///
/// Tokens are random and below 2^53 so they survive a round trip through JSON in any
/// language (JavaScript numbers lose precision above that).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseToken(pub i64);

impl LeaseToken {
    /// A fresh random token.
    pub fn random() -> Self {
        use rand::Rng;
        LeaseToken(rand::rng().random_range(1..(1_i64 << 53)))
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a job is in its life. See the module docs for the diagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for `run_at`: new, scheduled and retrying jobs alike.
    Ready,
    /// Claimed by a worker and leased until `lease_expires_at`.
    Running,
    /// The handler succeeded. Terminal.
    Completed,
    /// The dead-letter state: not tried again until redriven. Terminal.
    Dead,
    /// Cancelled by an operator or by the handler. Terminal.
    Cancelled,
}

impl JobState {
    /// Every state, in the order the docs list them.
    pub const ALL: [JobState; 5] = [
        JobState::Ready,
        JobState::Running,
        JobState::Completed,
        JobState::Dead,
        JobState::Cancelled,
    ];

    /// The name used in SQL, the CLI, JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Terminal states never change except by redrive (dead → ready).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Dead | JobState::Cancelled
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| InputError::new("status", format!("unknown status {s:?}; expected one of ready, running, completed, dead, cancelled")))
    }
}

/// Why a job is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadReason {
    /// The handler said the failure will never pass.
    Permanent,
    /// Transient failures used up every attempt.
    AttemptsExhausted,
    /// The last attempt's lease expired (the worker died or stalled) and no attempt was
    /// left. This is how a job that kills its worker stops killing workers.
    LeaseExpired,
    /// The payload did not decode into the handler's type.
    DecodeError,
    /// No handler is registered for the job's kind.
    UnknownKind,
}

impl DeadReason {
    /// Every reason, in the order the docs list them.
    pub const ALL: [DeadReason; 5] = [
        DeadReason::Permanent,
        DeadReason::AttemptsExhausted,
        DeadReason::LeaseExpired,
        DeadReason::DecodeError,
        DeadReason::UnknownKind,
    ];

    /// The name used in SQL, the CLI, JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::Permanent => "permanent",
            DeadReason::AttemptsExhausted => "attempts_exhausted",
            DeadReason::LeaseExpired => "lease_expired",
            DeadReason::DecodeError => "decode_error",
            DeadReason::UnknownKind => "unknown_kind",
        }
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeadReason {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeadReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == s)
            .ok_or_else(|| InputError::new("reason", format!("unknown dead reason {s:?}; expected one of permanent, attempts_exhausted, lease_expired, decode_error, unknown_kind")))
    }
}

/// The class of one failed attempt, as recorded in the error history and in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// An error that may pass by itself.
    Transient,
    /// An error that never will.
    Permanent,
    /// The handler panicked (treated as transient).
    Panic,
    /// The attempt ran past its timeout (treated as transient).
    Timeout,
    /// The lease expired before the attempt finished (worker died or stalled).
    LeaseExpired,
    /// The payload did not decode.
    DecodeError,
    /// No handler for the kind.
    UnknownKind,
}

impl FailureClass {
    /// The name used in JSON, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Transient => "transient",
            FailureClass::Permanent => "permanent",
            FailureClass::Panic => "panic",
            FailureClass::Timeout => "timeout",
            FailureClass::LeaseExpired => "lease_expired",
            FailureClass::DecodeError => "decode_error",
            FailureClass::UnknownKind => "unknown_kind",
        }
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One failed attempt in a job's error history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorEntry {
    /// Which attempt failed (1-based, as counted at claim).
    pub attempt: i32,
    /// When the failure was recorded (the store's clock).
    pub at: Timestamp,
    /// What kind of failure it was.
    pub class: FailureClass,
    /// The error message, truncated to [`ErrorEntry::MAX_MESSAGE_BYTES`].
    pub message: String,
    /// The worker that ran the attempt, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

impl ErrorEntry {
    /// Messages longer than this are cut (on a character boundary) with a marker, so
    /// one chatty error cannot bloat every row.
    pub const MAX_MESSAGE_BYTES: usize = 4096;

    /// How many entries a job keeps. The newest are kept; each entry carries its
    /// attempt number, so a cut history still says which attempts it covers.
    pub const HISTORY_LIMIT: usize = 25;

    /// Cuts a message to [`ErrorEntry::MAX_MESSAGE_BYTES`].
    pub fn truncate_message(message: &str) -> String {
        Self::truncated(message).into_owned()
    }

    /// [`ErrorEntry::truncate_message`], borrowing a message that fits (nearly all).
    pub fn truncated(message: &str) -> std::borrow::Cow<'_, str> {
        if message.len() <= Self::MAX_MESSAGE_BYTES {
            return std::borrow::Cow::Borrowed(message);
        }
        let mut end = Self::MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        std::borrow::Cow::Owned(format!("{}… [truncated]", &message[..end]))
    }
}

/// A job as stored, with its bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The job's id.
    pub id: JobId,
    /// The queue it belongs to.
    pub queue: String,
    /// The kind: the name its handler is registered under.
    pub kind: String,
    /// The JSON payload handed to the handler.
    pub payload: serde_json::Value,
    /// Where the job is in its life.
    pub status: JobState,
    /// Higher runs first among due jobs of a queue. Default 0.
    pub priority: i32,
    /// Attempts made so far, counted at claim.
    pub attempts: i32,
    /// Attempts allowed before the job is dead (fixed at enqueue).
    pub max_attempts: i32,
    /// When the job becomes claimable.
    pub run_at: Timestamp,
    /// When it was enqueued.
    pub created_at: Timestamp,
    /// When the current or last attempt was claimed.
    pub attempted_at: Option<Timestamp>,
    /// When it reached a terminal state.
    pub finished_at: Option<Timestamp>,
    /// The current lease token while running.
    pub lease_token: Option<LeaseToken>,
    /// When the current lease runs out.
    pub lease_expires_at: Option<Timestamp>,
    /// The worker holding (or that last held) the lease.
    pub worker: Option<String>,
    /// FIFO ordering key: jobs of one group run one at a time, in enqueue order.
    pub group_key: Option<String>,
    /// Idempotency key: a second enqueue with it returns this job.
    pub unique_key: Option<String>,
    /// A caller's id to follow one piece of work across systems.
    pub correlation_id: Option<String>,
    /// Why the job is dead, while it is.
    pub dead_reason: Option<DeadReason>,
    /// The newest entry of the error history.
    pub last_error: Option<ErrorEntry>,
    /// Every failed attempt, oldest first (bounded; the newest are kept).
    pub errors: Vec<ErrorEntry>,
    /// How many times the job has been redriven out of `dead`.
    pub redrives: i32,
    /// While the job is dead: the [`crate::fingerprint`] of the error it died of (for
    /// `lease_expired`, [`crate::fingerprint::lease_expired`]). Cleared on redrive.
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// The trace context of the code that enqueued it (see [`crate::trace`]): each
    /// attempt's span is linked to it when tracing is on. `None` for a job enqueued
    /// without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_context: Option<crate::trace::TraceContext>,
    /// The dependency (the service it calls) a worker found for it, recorded the first
    /// time a worker protecting dependencies claimed it. See [`crate::dependency`].
    #[serde(default)]
    pub dependency: Option<String>,
    /// While `ready`: why it is waiting on its dependency (parked by an open breaker,
    /// holding a rate-limit turn, over the retry budget); `None` otherwise.
    #[serde(default)]
    pub dependency_wait: Option<crate::dependency::WaitReason>,
}

/// A job as a claim hands it to a worker: what running it and settling its attempt
/// need, and nothing else ([`crate::Store::job_claim_run`]).
///
/// A claimed job's history, its enqueue bookkeeping and what only a dead or a finished
/// job carries are left in the store: a drain of short jobs decoded every column of
/// every claimed row, and reading them back was a fifth of the worker's CPU
/// (docs/benchmarks.md, "Where a drain's CPU goes"). [`crate::Store::job_get`] has
/// the whole job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimedJob {
    /// The job's id.
    pub id: JobId,
    /// The queue it belongs to.
    pub queue: String,
    /// The kind: the name its handler is registered under.
    pub kind: String,
    /// The JSON payload handed to the handler.
    pub payload: serde_json::Value,
    /// Its priority (the claim's order: higher first, then `run_at`, then `id`).
    pub priority: i32,
    /// Attempts made so far, this one included.
    pub attempts: i32,
    /// Attempts allowed before the job is dead.
    pub max_attempts: i32,
    /// When it became claimable.
    pub run_at: Timestamp,
    /// When this claim took it (the store's clock).
    pub attempted_at: Timestamp,
    /// This attempt's lease token: every write about the attempt is fenced on it.
    pub lease_token: LeaseToken,
    /// When this attempt's lease runs out unless a heartbeat extends it.
    pub lease_expires_at: Timestamp,
    /// A caller's id to follow one piece of work across systems.
    pub correlation_id: Option<String>,
    /// The enqueuing code's trace context, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_context: Option<crate::trace::TraceContext>,
    /// The dependency a worker found for it, once one has (see [`crate::dependency`]).
    #[serde(default)]
    pub dependency: Option<String>,
    /// The claim took it off an expired lease: its previous attempt's worker died or
    /// stalled, and the claim wrote a `lease_expired` entry for that attempt.
    pub reclaimed: bool,
}

impl ClaimedJob {
    /// The claimed part of a job a claim returned whole, or
    /// [`StoreError::Corrupt`](crate::StoreError::Corrupt)
    /// when it lacks what every claimed job has (a lease and the claim's time). For a
    /// store that implements only [`crate::Store::job_claim`].
    pub fn from_claimed(job: Job) -> Result<Self, crate::StoreError> {
        let missing = |what: &str| {
            crate::StoreError::Corrupt(format!("job {}: claimed without {what}", job.id))
        };
        let lease_token = job.lease_token.ok_or_else(|| missing("a lease token"))?;
        let lease_expires_at = job.lease_expires_at.ok_or_else(|| missing("a lease"))?;
        let attempted_at = job.attempted_at.ok_or_else(|| missing("its claim time"))?;
        let reclaimed = job.errors.last().is_some_and(|entry| {
            entry.class == FailureClass::LeaseExpired && entry.attempt == job.attempts - 1
        });
        Ok(ClaimedJob {
            id: job.id,
            queue: job.queue,
            kind: job.kind,
            payload: job.payload,
            priority: job.priority,
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            run_at: job.run_at,
            attempted_at,
            lease_token,
            lease_expires_at,
            correlation_id: job.correlation_id,
            trace_context: job.trace_context,
            dependency: job.dependency,
            reclaimed,
        })
    }
}

/// A job to enqueue. Build one with [`NewJob::new`] and the `with_*` methods; every
/// store validates it with [`NewJob::validate`] before writing anything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewJob {
    /// Queue name (see [`names`] for what is allowed).
    pub queue: String,
    /// Kind name (see [`names`]).
    pub kind: String,
    /// JSON payload; at most [`NewJob::MAX_PAYLOAD_BYTES`] when serialized.
    #[serde(default)]
    pub payload: serde_json::Value,
    /// Higher runs first. Default 0; must be within ±1000.
    #[serde(default)]
    pub priority: i32,
    /// When to run it. `None` means now (the store's clock), unless `delay` is set.
    #[serde(default)]
    pub run_at: Option<Timestamp>,
    /// Run after this long (the store's clock). Exclusive with `run_at`.
    #[serde(default, with = "crate::duration::serde_opt")]
    pub delay: Option<std::time::Duration>,
    /// Attempts allowed. `None` takes the policy's `max_attempts`.
    #[serde(default)]
    pub max_attempts: Option<i32>,
    /// FIFO group key.
    #[serde(default)]
    pub group_key: Option<String>,
    /// Idempotency key.
    #[serde(default)]
    pub unique_key: Option<String>,
    /// Correlation id.
    #[serde(default)]
    pub correlation_id: Option<String>,
    /// The enqueuing code's W3C trace context (checked when built or decoded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_context: Option<crate::trace::TraceContext>,
}

/// Refuses a payload deeper than [`NewJob::MAX_PAYLOAD_DEPTH`] or holding U+0000 in a
/// string or a key (PostgreSQL's jsonb cannot store it, and a job accepted by one
/// backend must be accepted by the other). Walks without recursion, so any depth is
/// safe to check. The depth limit and the backends' disagreement over U+0000 were found
/// by the torture suite's hostile-input test (seed 19).
fn check_payload(payload: &serde_json::Value) -> Result<(), InputError> {
    let mut stack = vec![(payload, 0_usize)];
    while let Some((value, depth)) = stack.pop() {
        let nul = || InputError::new("payload", "contains the character U+0000 (NUL)");
        match value {
            serde_json::Value::String(text) if text.contains('\0') => return Err(nul()),
            serde_json::Value::Array(_) | serde_json::Value::Object(_)
                if depth >= NewJob::MAX_PAYLOAD_DEPTH =>
            {
                return Err(InputError::new(
                    "payload",
                    format!(
                        "nests deeper than {} levels of arrays and objects",
                        NewJob::MAX_PAYLOAD_DEPTH
                    ),
                ));
            }
            serde_json::Value::Array(items) => {
                stack.extend(items.iter().map(|item| (item, depth + 1)));
            }
            serde_json::Value::Object(map) => {
                if map.keys().any(|key| key.contains('\0')) {
                    return Err(nul());
                }
                stack.extend(map.values().map(|item| (item, depth + 1)));
            }
            _ => {}
        }
    }
    Ok(())
}

impl NewJob {
    /// The largest payload accepted, serialized: 1 MiB. A queue row is not a blob
    /// store; put large data elsewhere and enqueue a reference.
    pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
    /// The largest delay accepted: 365 days. Anything later is almost surely a unit
    /// mistake (milliseconds read as seconds).
    pub const MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);
    /// Priorities are kept small so they stay a hint, not a second scheduler.
    pub const MAX_PRIORITY: i32 = 1000;
    /// The most attempts a job may ask for.
    pub const MAX_ATTEMPTS: i32 = 1000;
    /// The deepest payload accepted: 100 levels of arrays and objects. A deeper one
    /// could be written but not read back (JSON readers, serde_json's included, stop at
    /// 128 levels), and a job that cannot be read fails every claim of its queue.
    pub const MAX_PAYLOAD_DEPTH: usize = 100;

    /// A job for `queue` and `kind` with this payload and every option at its default.
    pub fn new(
        queue: impl Into<String>,
        kind: impl Into<String>,
        payload: serde_json::Value,
    ) -> Self {
        NewJob {
            queue: queue.into(),
            kind: kind.into(),
            payload,
            priority: 0,
            run_at: None,
            delay: None,
            max_attempts: None,
            group_key: None,
            unique_key: None,
            correlation_id: None,
            trace_context: None,
        }
    }

    /// Sets the priority.
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Runs the job at `at`.
    pub fn with_run_at(mut self, at: Timestamp) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Runs the job after `delay`.
    pub fn with_delay(mut self, delay: std::time::Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Overrides the policy's attempt count for this job.
    pub fn with_max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Puts the job in a FIFO group.
    pub fn with_group(mut self, group_key: impl Into<String>) -> Self {
        self.group_key = Some(group_key.into());
        self
    }

    /// Sets an idempotency key.
    pub fn with_unique_key(mut self, unique_key: impl Into<String>) -> Self {
        self.unique_key = Some(unique_key.into());
        self
    }

    /// Sets a correlation id.
    pub fn with_correlation_id(mut self, correlation_id: impl Into<String>) -> Self {
        self.correlation_id = Some(correlation_id.into());
        self
    }

    /// Sets the trace context the job's attempts join (see [`crate::trace`]).
    pub fn with_trace_context(mut self, trace_context: crate::trace::TraceContext) -> Self {
        self.trace_context = Some(trace_context);
        self
    }

    /// Checks every field; the error names the first bad one. Stores call this before
    /// writing, so a bad job in a batch writes nothing.
    pub fn validate(&self) -> Result<(), InputError> {
        if let Some(key) = &self.unique_key {
            if key.starts_with(crate::schedule::KEY_PREFIX) {
                return Err(InputError::new(
                    "unique_key",
                    format!(
                        "keys starting with {:?} are reserved for periodic jobs",
                        crate::schedule::KEY_PREFIX
                    ),
                ));
            }
        }
        self.validate_fields()
    }

    /// [`NewJob::validate`] without the reserved-key check: for the scheduler's own
    /// jobs, whose unique key it writes itself.
    pub(crate) fn validate_fields(&self) -> Result<(), InputError> {
        names::validate_name("queue", &self.queue)?;
        names::validate_name("kind", &self.kind)?;
        let size = serde_json::to_vec(&self.payload)
            .map_err(|err| InputError::new("payload", format!("cannot be serialized: {err}")))?
            .len();
        if size > Self::MAX_PAYLOAD_BYTES {
            return Err(InputError::new(
                "payload",
                format!(
                    "is {size} bytes; the limit is {} bytes",
                    Self::MAX_PAYLOAD_BYTES
                ),
            ));
        }
        check_payload(&self.payload)?;
        if let Some(at) = self.run_at {
            check_timestamp("run_at", at)?;
        }
        // Not `priority.abs()`: i32::MIN has no absolute value (a panic in debug
        // builds, and in release it stayed negative and passed). Found by the torture
        // suite's hostile-input test (seed 19).
        if !(-Self::MAX_PRIORITY..=Self::MAX_PRIORITY).contains(&self.priority) {
            return Err(InputError::new(
                "priority",
                format!(
                    "{} is out of range; use -{max}..={max}",
                    self.priority,
                    max = Self::MAX_PRIORITY
                ),
            ));
        }
        if self.run_at.is_some() && self.delay.is_some() {
            return Err(InputError::new(
                "delay",
                "give either run_at or delay, not both",
            ));
        }
        if let Some(delay) = self.delay {
            if delay > Self::MAX_DELAY {
                return Err(InputError::new(
                    "delay",
                    format!(
                        "{} is longer than the limit of 365 days",
                        crate::duration::format(delay)
                    ),
                ));
            }
        }
        if let Some(max_attempts) = self.max_attempts {
            if !(1..=Self::MAX_ATTEMPTS).contains(&max_attempts) {
                return Err(InputError::new(
                    "max_attempts",
                    format!(
                        "{max_attempts} is out of range; use 1..={}",
                        Self::MAX_ATTEMPTS
                    ),
                ));
            }
        }
        if let Some(key) = &self.group_key {
            names::validate_key("group_key", key)?;
        }
        if let Some(key) = &self.unique_key {
            names::validate_key("unique_key", key)?;
        }
        if let Some(id) = &self.correlation_id {
            names::validate_key("correlation_id", id)?;
        }
        Ok(())
    }
}
