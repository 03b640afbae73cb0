//! Decoding rows into domain types. A value this version cannot read is
//! [`StoreError::Corrupt`], naming the row and the column; listings skip such a row
//! with an error log ([`listed`], [`decodable_job`]) instead of failing the page.
//!
//! Timestamps are INTEGER milliseconds since the Unix epoch; JSON columns are TEXT.

use std::str::FromStr;

use chrono::DateTime;
use revenant_core::dependency::{DependencyRecord, WaitReason};
use revenant_core::store::{FingerprintGroup, PolicyRecord, PolicyScope, RedriveRecord};
use revenant_core::{
    fingerprint, ClaimedJob, DeadReason, ErrorEntry, Job, JobState, LeaseToken, StoreError,
    Timestamp,
};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, Sqlite};

use crate::error::classify;

/// Reads a job selected with `SELECT *`. A value this version cannot read is
/// [`StoreError::Corrupt`] naming the job and the column.
pub(crate) fn job_from_row(row: &SqliteRow) -> Result<Job, StoreError> {
    let id: i64 = get(row, "id")?;
    JobColumns::from_row(row)
        .map_err(|err| match err {
            StoreError::Corrupt(message) => StoreError::Corrupt(format!("job {id}: {message}")),
            other => other,
        })?
        .into_job()
}

/// The job a listed row holds, or `None` (logged with its id) when it cannot be
/// decoded: one bad row must not hide every other job from a listing.
/// Errors other than [`StoreError::Corrupt`] (a lost connection, a column missing) are
/// not the row's fault and still fail the call.
pub(crate) fn decodable_job(row: &SqliteRow) -> Result<Option<Job>, StoreError> {
    match job_from_row(row) {
        Ok(job) => Ok(Some(job)),
        Err(err @ StoreError::Corrupt(_)) => {
            let job_id = get::<i64>(row, "id").ok();
            tracing::error!(job_id, error = %err, "skipping a row that cannot be decoded");
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

/// Decodes the rows of a listing (`table` names them in the log), skipping a row that
/// holds a value this version cannot read ([`StoreError::Corrupt`], which names the
/// row) with an error log instead of failing the whole listing.
pub(crate) fn listed<T>(
    table: &'static str,
    rows: &[SqliteRow],
    decode: impl Fn(&SqliteRow) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        match decode(row) {
            Ok(item) => out.push(item),
            Err(err @ StoreError::Corrupt(_)) => {
                tracing::error!(table, error = %err, "skipping a row that cannot be decoded");
            }
            Err(err) => return Err(err),
        }
    }
    Ok(out)
}

/// A job's columns as SQLite holds them, before they are checked and decoded into a
/// [`Job`] ([`JobColumns::into_job`]). Read from a row ([`JobColumns::from_row`]) or
/// from a JSON object with the column names as keys: a claim hands its whole batch over
/// as one JSON array of them (job_claimed.sql), one value instead of a row per job. The
/// table is STRICT, so a column's type is what it declares, in either form.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct JobColumns {
    id: i64,
    queue: String,
    kind: String,
    payload: String,
    status: String,
    priority: i32,
    attempts: i32,
    max_attempts: i32,
    run_at: i64,
    created_at: i64,
    attempted_at: Option<i64>,
    finished_at: Option<i64>,
    lease_token: Option<i64>,
    lease_expires_at: Option<i64>,
    worker: Option<String>,
    group_key: Option<String>,
    unique_key: Option<String>,
    correlation_id: Option<String>,
    dead_reason: Option<String>,
    errors: String,
    redrives: i32,
    fingerprint: Option<String>,
    dependency: Option<String>,
    dependency_wait: Option<String>,
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl JobColumns {
    fn from_row(row: &SqliteRow) -> Result<Self, StoreError> {
        Ok(Self {
            id: get(row, "id")?,
            queue: get(row, "queue")?,
            kind: get(row, "kind")?,
            payload: get(row, "payload")?,
            status: get(row, "status")?,
            priority: get(row, "priority")?,
            attempts: get(row, "attempts")?,
            max_attempts: get(row, "max_attempts")?,
            run_at: get(row, "run_at")?,
            created_at: get(row, "created_at")?,
            attempted_at: get(row, "attempted_at")?,
            finished_at: get(row, "finished_at")?,
            lease_token: get(row, "lease_token")?,
            lease_expires_at: get(row, "lease_expires_at")?,
            worker: get(row, "worker")?,
            group_key: get(row, "group_key")?,
            unique_key: get(row, "unique_key")?,
            correlation_id: get(row, "correlation_id")?,
            dead_reason: get(row, "dead_reason")?,
            errors: get(row, "errors")?,
            redrives: get(row, "redrives")?,
            fingerprint: get(row, "fingerprint")?,
            dependency: get(row, "dependency")?,
            dependency_wait: get(row, "dependency_wait")?,
            traceparent: get(row, "traceparent")?,
            tracestate: get(row, "tracestate")?,
        })
    }

    /// The job, or [`StoreError::Corrupt`] naming the job and the value this version
    /// cannot read.
    pub(crate) fn into_job(self) -> Result<Job, StoreError> {
        let id = self.id;
        self.decode().map_err(|err| match err {
            StoreError::Corrupt(message) => StoreError::Corrupt(format!("job {id}: {message}")),
            other => other,
        })
    }

    fn decode(self) -> Result<Job, StoreError> {
        let status = JobState::from_str(&self.status).map_err(|_| {
            StoreError::Corrupt(format!("status = {:?} is not a job state", self.status))
        })?;
        let dead_reason = self
            .dead_reason
            .map(|reason| {
                DeadReason::from_str(&reason).map_err(|_| {
                    StoreError::Corrupt(format!("dead_reason = {reason:?} is not a dead reason"))
                })
            })
            .transpose()?;
        let payload = serde_json::from_str(&self.payload)
            .map_err(|err| StoreError::Corrupt(format!("payload is not JSON: {err}")))?;
        let errors = parse_errors(&self.errors)?;
        let time = |ms: Option<i64>, column| ms.map(|ms| timestamp(ms, column)).transpose();
        Ok(Job {
            id: self.id,
            queue: self.queue,
            kind: self.kind,
            payload,
            status,
            priority: self.priority,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            run_at: timestamp(self.run_at, "run_at")?,
            created_at: timestamp(self.created_at, "created_at")?,
            attempted_at: time(self.attempted_at, "attempted_at")?,
            finished_at: time(self.finished_at, "finished_at")?,
            lease_token: self.lease_token.map(LeaseToken),
            lease_expires_at: time(self.lease_expires_at, "lease_expires_at")?,
            worker: self.worker,
            group_key: self.group_key,
            unique_key: self.unique_key,
            correlation_id: self.correlation_id,
            dead_reason,
            last_error: errors.last().cloned(),
            errors,
            redrives: self.redrives,
            fingerprint: self.fingerprint,
            trace_context: revenant_core::trace::TraceContext::from_stored(
                self.traceparent,
                self.tracestate,
            ),
            dependency: self.dependency,
            dependency_wait: self
                .dependency_wait
                .map(|text| {
                    WaitReason::parse(&text).ok_or_else(|| {
                        StoreError::Corrupt(format!("dependency_wait = {text:?} is not a reason"))
                    })
                })
                .transpose()?,
        })
    }
}

/// The jobs of a JSON array of [`JobColumns`] objects (job_claimed.sql), in its order.
/// A value this version cannot read is [`StoreError::Corrupt`] naming the job.
pub(crate) fn jobs_from_json(json: &str) -> Result<Vec<Job>, StoreError> {
    let objects: Vec<&serde_json::value::RawValue> = serde_json::from_str(json).map_err(|err| {
        StoreError::Corrupt(format!("a batch of jobs is not a JSON array: {err}"))
    })?;
    objects
        .into_iter()
        .map(|object| {
            serde_json::from_str::<JobColumns>(object.get())
                .map_err(|err| StoreError::Corrupt(format!("a job's columns: {err}")))?
                .into_job()
        })
        .collect()
}

/// A claimed job's columns as job_claimed_run.sql hands them over, before they are
/// checked and decoded into a [`ClaimedJob`]: the part of [`JobColumns`] a worker
/// runs the job with, and whether its last attempt was lost to an expired lease.
#[derive(Debug, serde::Deserialize)]
struct ClaimedColumns {
    id: i64,
    queue: String,
    kind: String,
    payload: String,
    priority: i32,
    attempts: i32,
    max_attempts: i32,
    run_at: i64,
    attempted_at: Option<i64>,
    lease_token: Option<i64>,
    lease_expires_at: Option<i64>,
    correlation_id: Option<String>,
    dependency: Option<String>,
    traceparent: Option<String>,
    tracestate: Option<String>,
    reclaimed: bool,
}

impl ClaimedColumns {
    fn decode(self) -> Result<ClaimedJob, StoreError> {
        let claimed = |ms: Option<i64>, column| {
            let ms = ms.ok_or_else(|| StoreError::Corrupt(format!("claimed with no {column}")))?;
            timestamp(ms, column)
        };
        let payload = serde_json::from_str(&self.payload)
            .map_err(|err| StoreError::Corrupt(format!("payload is not JSON: {err}")))?;
        Ok(ClaimedJob {
            id: self.id,
            queue: self.queue,
            kind: self.kind,
            payload,
            priority: self.priority,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            run_at: timestamp(self.run_at, "run_at")?,
            attempted_at: claimed(self.attempted_at, "attempted_at")?,
            lease_token: LeaseToken(
                self.lease_token
                    .ok_or_else(|| StoreError::Corrupt("claimed with no lease_token".into()))?,
            ),
            lease_expires_at: claimed(self.lease_expires_at, "lease_expires_at")?,
            correlation_id: self.correlation_id,
            dependency: self.dependency,
            trace_context: revenant_core::trace::TraceContext::from_stored(
                self.traceparent,
                self.tracestate,
            ),
            reclaimed: self.reclaimed,
        })
    }
}

/// The claimed jobs of a JSON array of [`ClaimedColumns`] objects
/// (job_claimed_run.sql), in its order. A value this version cannot read is
/// [`StoreError::Corrupt`] naming the job.
pub(crate) fn claimed_from_json(json: &str) -> Result<Vec<ClaimedJob>, StoreError> {
    let objects: Vec<&serde_json::value::RawValue> = serde_json::from_str(json).map_err(|err| {
        StoreError::Corrupt(format!(
            "a batch of claimed jobs is not a JSON array: {err}"
        ))
    })?;
    objects
        .into_iter()
        .map(|object| {
            let columns = serde_json::from_str::<ClaimedColumns>(object.get())
                .map_err(|err| StoreError::Corrupt(format!("a claimed job's columns: {err}")))?;
            let id = columns.id;
            columns.decode().map_err(|err| match err {
                StoreError::Corrupt(message) => StoreError::Corrupt(format!("job {id}: {message}")),
                other => other,
            })
        })
        .collect()
}

pub(crate) fn redrive_from_row(row: &SqliteRow) -> Result<RedriveRecord, StoreError> {
    let filter: String = get(row, "filter")?;
    Ok(RedriveRecord {
        id: get(row, "id")?,
        at: timestamp(get(row, "at")?, "at")?,
        updated_at: timestamp(get(row, "updated_at")?, "updated_at")?,
        filter: serde_json::from_str(&filter)
            .map_err(|err| StoreError::Corrupt(format!("redrives.filter: {err}")))?,
        spacing_ms: get(row, "spacing_ms")?,
        count: get(row, "count")?,
        first_job_id: get(row, "first_job_id")?,
        last_job_id: get(row, "last_job_id")?,
        actor: get(row, "actor")?,
        note: get(row, "note")?,
    })
}

/// Reads a stored retry policy. A scope this version does not know, JSON that does not
/// decode and a policy its builder would refuse are all [`StoreError::Corrupt`].
pub(crate) fn policy_from_row(
    row: &SqliteRow,
    scope: &str,
    name: &str,
) -> Result<PolicyRecord, StoreError> {
    let parsed = PolicyScope::from_parts(scope, name).ok_or_else(|| {
        StoreError::Corrupt(format!("policies.scope {scope:?} with name {name:?}"))
    })?;
    let json: String = get(row, "policy")?;
    let policy: revenant_core::RetryPolicy = serde_json::from_str(&json).map_err(|err| {
        StoreError::Corrupt(format!("policies.policy of {scope} {name:?}: {err}"))
    })?;
    policy.to_builder().build().map_err(|err| {
        StoreError::Corrupt(format!("policies.policy of {scope} {name:?}: {err}"))
    })?;
    Ok(PolicyRecord {
        scope: parsed,
        policy,
        updated_at: timestamp(get(row, "updated_at")?, "updated_at")?,
    })
}

pub(crate) fn group_from_row(row: &SqliteRow) -> Result<FingerprintGroup, StoreError> {
    let list = |column: &str| -> Result<Vec<String>, StoreError> {
        let json: String = get(row, column)?;
        let mut items: Vec<String> = serde_json::from_str(&json)
            .map_err(|err| StoreError::Corrupt(format!("{column} is not a list: {err}")))?;
        items.sort();
        Ok(items)
    };
    let example_message: String = get(row, "example_message")?;
    let print: String = get(row, "fingerprint")?;
    Ok(FingerprintGroup {
        // The pattern under the rules the stored fingerprint was made with.
        pattern: fingerprint::pattern(&print, &example_message),
        fingerprint: print,
        count: get(row, "count")?,
        first_seen: timestamp(get(row, "first_seen")?, "first_seen")?,
        last_seen: timestamp(get(row, "last_seen")?, "last_seen")?,
        kinds: list("kinds")?,
        queues: list("queues")?,
        example_id: get(row, "example_id")?,
        example_message,
    })
}

pub(crate) fn parse_record(key: &str, json: &str) -> Result<DependencyRecord, StoreError> {
    serde_json::from_str(json)
        .map_err(|err| StoreError::Corrupt(format!("dependencies.record of {key:?}: {err}")))
}

pub(crate) fn parse_errors(json: &str) -> Result<Vec<ErrorEntry>, StoreError> {
    serde_json::from_str(json)
        .map_err(|err| StoreError::Corrupt(format!("errors is not an error history: {err}")))
}

pub(crate) fn get<'r, T>(row: &'r SqliteRow, column: &str) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite>,
{
    row.try_get(column).map_err(classify)
}

pub(crate) fn get_time(row: &SqliteRow, column: &str) -> Result<Option<Timestamp>, StoreError> {
    get::<Option<i64>>(row, column)?
        .map(|ms| timestamp(ms, column))
        .transpose()
}

pub(crate) fn timestamp(ms: i64, column: &str) -> Result<Timestamp, StoreError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::Corrupt(format!("{column} = {ms} is not a timestamp")))
}
