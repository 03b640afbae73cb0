//! Decoding rows into domain types. A value this version cannot read is
//! [`StoreError::Corrupt`], naming the column and the value.

use std::str::FromStr;

use serde::Deserialize;

use revenant_core::dependency::WaitReason;
use revenant_core::store::{PolicyRecord, PolicyScope};
use revenant_core::{
    ClaimedJob, DeadReason, ErrorEntry, Job, JobState, LeaseToken, RetryPolicy, StoreError,
    Timestamp,
};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::ResultExt;

/// Reads a job selected with `{job_columns}` (see [`crate::sql`]). A value this
/// version cannot read is [`StoreError::Corrupt`] naming the job and the column.
pub(crate) fn job_from_row(row: &PgRow) -> Result<Job, StoreError> {
    let id: i64 = row.try_get(0).classified()?;
    job_fields(row, id).map_err(|err| match err {
        StoreError::Corrupt(message) => StoreError::Corrupt(format!("job {id}: {message}")),
        other => other,
    })
}

/// Reads a claimed job of `queue` selected with `{claimed_columns}` (see
/// [`crate::sql`]). A value this version cannot read is [`StoreError::Corrupt`] naming
/// the job and the column.
pub(crate) fn claimed_from_row(row: &PgRow, queue: &str) -> Result<ClaimedJob, StoreError> {
    let id: i64 = row.try_get(0).classified()?;
    let corrupt = |column: &str| StoreError::Corrupt(format!("job {id}: claimed with no {column}"));
    Ok(ClaimedJob {
        id,
        queue: queue.to_string(),
        kind: row.try_get(1).classified()?,
        payload: row.try_get(2).classified()?,
        priority: row.try_get(3).classified()?,
        attempts: row.try_get(4).classified()?,
        max_attempts: row.try_get(5).classified()?,
        run_at: row.try_get::<Timestamp, _>(6).classified()?,
        attempted_at: row
            .try_get::<Option<Timestamp>, _>(7)
            .classified()?
            .ok_or_else(|| corrupt("attempted_at"))?,
        lease_token: row
            .try_get::<Option<i64>, _>(8)
            .classified()?
            .map(LeaseToken)
            .ok_or_else(|| corrupt("lease_token"))?,
        lease_expires_at: row
            .try_get::<Option<Timestamp>, _>(9)
            .classified()?
            .ok_or_else(|| corrupt("lease_expires_at"))?,
        correlation_id: row.try_get(10).classified()?,
        dependency: row.try_get(11).classified()?,
        trace_context: revenant_core::trace::TraceContext::from_stored(
            row.try_get(12).classified()?,
            row.try_get(13).classified()?,
        ),
        reclaimed: row.try_get(14).classified()?,
    })
}

/// The job a listed row holds, or `None` (logged with its id) when it cannot be
/// decoded: one bad row must not hide every other job from a listing. Errors other
/// than [`StoreError::Corrupt`] are not the row's fault and still fail the call.
pub(crate) fn decodable_job(row: &PgRow) -> Result<Option<Job>, StoreError> {
    match job_from_row(row) {
        Ok(job) => Ok(Some(job)),
        Err(err @ StoreError::Corrupt(_)) => {
            let job_id = row.try_get::<i64, _>(0).ok();
            tracing::error!(job_id, error = %err, "skipping a row that cannot be decoded");
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

/// Decodes the rows of a listing (`table` names them in the log), skipping a row that
/// holds a value this version cannot read ([`StoreError::Corrupt`]) with an error log
/// instead of failing the whole listing.
pub(crate) fn listed<T>(
    table: &'static str,
    rows: &[PgRow],
    decode: impl Fn(&PgRow) -> Result<T, StoreError>,
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

fn job_fields(row: &PgRow, id: i64) -> Result<Job, StoreError> {
    let status: String = row.try_get(4).classified()?;
    let status = JobState::from_str(&status)
        .map_err(|_| StoreError::Corrupt(format!("jobs.status: {status:?}")))?;
    let dead_reason: Option<String> = row.try_get(18).classified()?;
    let dead_reason = dead_reason
        .map(|reason| {
            DeadReason::from_str(&reason)
                .map_err(|_| StoreError::Corrupt(format!("jobs.dead_reason: {reason:?}")))
        })
        .transpose()?;
    let errors: serde_json::Value = row.try_get(19).classified()?;
    // From the value by reference: the value itself is kept only for the message.
    let errors = Vec::<ErrorEntry>::deserialize(&errors)
        .map_err(|err| StoreError::Corrupt(format!("jobs.errors: {err}: {errors}")))?;
    Ok(Job {
        id,
        queue: row.try_get(1).classified()?,
        kind: row.try_get(2).classified()?,
        payload: row.try_get(3).classified()?,
        status,
        priority: row.try_get(5).classified()?,
        attempts: row.try_get(6).classified()?,
        max_attempts: row.try_get(7).classified()?,
        run_at: row.try_get::<Timestamp, _>(8).classified()?,
        created_at: row.try_get::<Timestamp, _>(9).classified()?,
        attempted_at: row.try_get::<Option<Timestamp>, _>(10).classified()?,
        finished_at: row.try_get::<Option<Timestamp>, _>(11).classified()?,
        lease_token: row
            .try_get::<Option<i64>, _>(12)
            .classified()?
            .map(LeaseToken),
        lease_expires_at: row.try_get::<Option<Timestamp>, _>(13).classified()?,
        worker: row.try_get(14).classified()?,
        group_key: row.try_get(15).classified()?,
        unique_key: row.try_get(16).classified()?,
        correlation_id: row.try_get(17).classified()?,
        dead_reason,
        last_error: errors.last().cloned(),
        errors,
        redrives: row.try_get(20).classified()?,
        fingerprint: row.try_get(21).classified()?,
        trace_context: revenant_core::trace::TraceContext::from_stored(
            row.try_get(24).classified()?,
            row.try_get(25).classified()?,
        ),
        dependency: row.try_get(22).classified()?,
        dependency_wait: row
            .try_get::<Option<String>, _>(23)
            .classified()?
            .map(|text| {
                WaitReason::parse(&text)
                    .ok_or_else(|| StoreError::Corrupt(format!("jobs.dependency_wait: {text:?}")))
            })
            .transpose()?,
    })
}

/// Reads a stored retry policy (`policy_list.sql`). A scope this version does not know,
/// JSON that does not decode and a policy its builder would refuse are all
/// [`StoreError::Corrupt`].
pub(crate) fn policy_from_row(
    row: &PgRow,
    scope: &str,
    name: &str,
) -> Result<PolicyRecord, StoreError> {
    let parsed = PolicyScope::from_parts(scope, name).ok_or_else(|| {
        StoreError::Corrupt(format!("policies.scope {scope:?} with name {name:?}"))
    })?;
    let json: serde_json::Value = row.try_get("policy").classified()?;
    let policy: RetryPolicy = serde_json::from_value(json).map_err(|err| {
        StoreError::Corrupt(format!("policies.policy of {scope} {name:?}: {err}"))
    })?;
    policy.to_builder().build().map_err(|err| {
        StoreError::Corrupt(format!("policies.policy of {scope} {name:?}: {err}"))
    })?;
    Ok(PolicyRecord {
        scope: parsed,
        policy,
        updated_at: row.try_get("updated_at").classified()?,
    })
}
