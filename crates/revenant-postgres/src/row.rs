//! Decoding rows into domain types. A value this version cannot read is
//! [`StoreError::Corrupt`], naming the column and the value.

use std::str::FromStr;

use revenant_core::dependency::WaitReason;
use revenant_core::{DeadReason, ErrorEntry, Job, JobState, LeaseToken, StoreError, Timestamp};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::ResultExt;

/// Reads a job selected with `{job_columns}` (see [`crate::sql`]).
pub(crate) fn job_from_row(row: &PgRow) -> Result<Job, StoreError> {
    let id: i64 = row.try_get(0).classified()?;
    let status: String = row.try_get(4).classified()?;
    let status = JobState::from_str(&status)
        .map_err(|_| StoreError::Corrupt(format!("jobs.status of job {id}: {status:?}")))?;
    let dead_reason: Option<String> = row.try_get(18).classified()?;
    let dead_reason = dead_reason
        .map(|reason| {
            DeadReason::from_str(&reason).map_err(|_| {
                StoreError::Corrupt(format!("jobs.dead_reason of job {id}: {reason:?}"))
            })
        })
        .transpose()?;
    let errors: serde_json::Value = row.try_get(19).classified()?;
    let errors: Vec<ErrorEntry> = serde_json::from_value(errors.clone())
        .map_err(|err| StoreError::Corrupt(format!("jobs.errors of job {id}: {err}: {errors}")))?;
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
        dependency: row.try_get(22).classified()?,
        dependency_wait: row
            .try_get::<Option<String>, _>(23)
            .classified()?
            .map(|text| {
                WaitReason::parse(&text).ok_or_else(|| {
                    StoreError::Corrupt(format!("jobs.dependency_wait of job {id}: {text:?}"))
                })
            })
            .transpose()?,
    })
}
