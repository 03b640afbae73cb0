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
use sqlx::postgres::{PgHasArrayType, PgRow, PgTypeInfo, PgValueFormat, PgValueRef, Postgres};
use sqlx::{Column as _, Row, TypeInfo as _};

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

/// Reads the claimed jobs of `queue` from the one row of `queries/job_claim_run.sql`
/// (an array a column), in the claim's order. A value this version cannot read, or an
/// array shorter or longer than the ids, is [`StoreError::Corrupt`], naming the job
/// and the column where there is one.
pub(crate) fn claimed_from_arrays(row: &PgRow, queue: &str) -> Result<Vec<ClaimedJob>, StoreError> {
    let ids: Vec<i64> = array_column(row, 0)?;
    let mut kinds = array_column::<String>(row, 1)?.into_iter();
    let mut payloads = array_column::<serde_json::Value>(row, 2)?.into_iter();
    let mut priorities = array_column::<i32>(row, 3)?.into_iter();
    let mut attempts = array_column::<i32>(row, 4)?.into_iter();
    let mut max_attempts = array_column::<i32>(row, 5)?.into_iter();
    let mut run_ats = array_column::<PgTimestamp>(row, 6)?.into_iter();
    let mut attempted_ats = array_column::<Option<PgTimestamp>>(row, 7)?.into_iter();
    let mut tokens = array_column::<Option<i64>>(row, 8)?.into_iter();
    let mut expiries = array_column::<Option<PgTimestamp>>(row, 9)?.into_iter();
    let mut correlation_ids = array_column::<Option<String>>(row, 10)?.into_iter();
    let mut dependencies = array_column::<Option<String>>(row, 11)?.into_iter();
    let mut traceparents = array_column::<Option<String>>(row, 12)?.into_iter();
    let mut tracestates = array_column::<Option<String>>(row, 13)?.into_iter();
    let mut reclaimed = array_column::<bool>(row, 14)?.into_iter();
    let lengths = [
        kinds.len(),
        payloads.len(),
        priorities.len(),
        attempts.len(),
        max_attempts.len(),
        run_ats.len(),
        attempted_ats.len(),
        tokens.len(),
        expiries.len(),
        correlation_ids.len(),
        dependencies.len(),
        traceparents.len(),
        tracestates.len(),
        reclaimed.len(),
    ];
    if let Some((index, len)) = lengths
        .iter()
        .enumerate()
        .find(|(_, &len)| len != ids.len())
    {
        let column = row.try_column(index + 1).map(|c| c.name()).unwrap_or("?");
        return Err(StoreError::Corrupt(format!(
            "a claim returned {} ids and {len} values of {column}",
            ids.len(),
        )));
    }
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        // Every array is as long as the ids (checked above): `next` is never None.
        let corrupt =
            |column: &str| StoreError::Corrupt(format!("job {id}: claimed with no {column}"));
        let missing = || StoreError::Corrupt(format!("job {id}: a claim's arrays fell short"));
        jobs.push(ClaimedJob {
            id,
            queue: queue.to_string(),
            kind: kinds.next().ok_or_else(missing)?,
            payload: payloads.next().ok_or_else(missing)?,
            priority: priorities.next().ok_or_else(missing)?,
            attempts: attempts.next().ok_or_else(missing)?,
            max_attempts: max_attempts.next().ok_or_else(missing)?,
            run_at: run_ats.next().ok_or_else(missing)?.0,
            attempted_at: attempted_ats
                .next()
                .ok_or_else(missing)?
                .ok_or_else(|| corrupt("attempted_at"))?
                .0,
            lease_token: tokens
                .next()
                .ok_or_else(missing)?
                .map(LeaseToken)
                .ok_or_else(|| corrupt("lease_token"))?,
            lease_expires_at: expiries
                .next()
                .ok_or_else(missing)?
                .ok_or_else(|| corrupt("lease_expires_at"))?
                .0,
            correlation_id: correlation_ids.next().ok_or_else(missing)?,
            dependency: dependencies.next().ok_or_else(missing)?,
            trace_context: revenant_core::trace::TraceContext::from_stored(
                traceparents.next().ok_or_else(missing)?,
                tracestates.next().ok_or_else(missing)?,
            ),
            reclaimed: reclaimed.next().ok_or_else(missing)?,
        });
    }
    Ok(jobs)
}

/// Column `index` of `row`, an array: a claim's or a batch write's answer, one row of
/// `array_agg`s (NULL, as an `array_agg` of no rows gives, is empty). A value this
/// version cannot read is [`StoreError::Corrupt`] naming the column.
pub(crate) fn array_column<'r, T>(row: &'r PgRow, index: usize) -> Result<Vec<T>, StoreError>
where
    Vec<T>: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    match row.try_get::<Option<Vec<T>>, _>(index).classified() {
        Ok(values) => Ok(values.unwrap_or_default()),
        Err(StoreError::Corrupt(message)) => {
            let column = row.try_column(index).map(|c| c.name()).unwrap_or("?");
            Err(StoreError::Corrupt(format!("column {column}: {message}")))
        }
        Err(other) => Err(other),
    }
}

/// Reads the columns of one statement's rows by position, checking each column's type
/// against the Rust type it is read as once for the whole result, not for every row as
/// `Row::try_get` does: every row of a result has the same columns (one row
/// description). For an enqueue's rows, one a job; when a claim came back as a row a
/// job, the check per value was a fifth of the instructions of reading it (callgrind).
///
/// The check is of the column's declared type, so it holds for a NULL in the first
/// row as well. A mismatch is [`StoreError::Corrupt`] naming the column, as from
/// `try_get`.
pub(crate) struct Columns {
    /// Columns checked so far, by position (a statement's first row checks each).
    checked: u64,
}

impl Columns {
    pub(crate) fn new() -> Self {
        Columns { checked: 0 }
    }

    /// Column `index` of `row`, as a `T`. (A column past the 64th is checked every
    /// time; no statement here has that many.)
    pub(crate) fn get<'r, T>(&mut self, row: &'r PgRow, index: usize) -> Result<T, StoreError>
    where
        T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
    {
        let bit = u32::try_from(index)
            .ok()
            .and_then(|index| 1_u64.checked_shl(index))
            .unwrap_or(0);
        if self.checked & bit == 0 {
            let column = row.try_column(index).classified()?;
            let declared = column.type_info();
            if !declared.is_null() && !T::compatible(declared) {
                return Err(StoreError::Corrupt(format!(
                    "column {index} ({}): a {} where this version reads a {}",
                    column.name(),
                    declared.name(),
                    T::type_info().name(),
                )));
            }
            self.checked |= bit;
        }
        row.try_get_unchecked(index).classified()
    }
}

/// A `timestamptz` read as [`Timestamp`] without sqlx's calendar arithmetic: in the
/// binary format (every statement here) the value is microseconds since 2000-01-01
/// UTC, which chrono turns into a time directly. sqlx builds the year 2000 from its
/// date for every value and adds a duration to it (about 400 instructions a value,
/// three a claimed job); this is a tenth of that. A value past chrono's range is an
/// error here, where sqlx's addition would panic. The text format goes through sqlx.
pub(crate) struct PgTimestamp(pub(crate) Timestamp);

/// 2000-01-01T00:00:00Z, PostgreSQL's epoch, in microseconds since the Unix epoch.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

impl PgTimestamp {
    /// The time `micros` microseconds after PostgreSQL's epoch, if chrono can hold it.
    fn from_pg_micros(micros: i64) -> Option<Timestamp> {
        Timestamp::from_timestamp_micros(micros.checked_add(PG_EPOCH_MICROS)?)
    }
}

impl sqlx::Type<Postgres> for PgTimestamp {
    fn type_info() -> PgTypeInfo {
        <Timestamp as sqlx::Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Timestamp as sqlx::Type<Postgres>>::compatible(ty)
    }
}

impl PgHasArrayType for PgTimestamp {
    fn array_type_info() -> PgTypeInfo {
        <Timestamp as PgHasArrayType>::array_type_info()
    }

    fn array_compatible(ty: &PgTypeInfo) -> bool {
        <Timestamp as PgHasArrayType>::array_compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, Postgres> for PgTimestamp {
    fn decode(value: PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        match value.format() {
            PgValueFormat::Binary => {
                let micros = <i64 as sqlx::Decode<Postgres>>::decode(value)?;
                Self::from_pg_micros(micros)
                    .map(PgTimestamp)
                    .ok_or_else(|| {
                        format!("timestamp {micros} µs from 2000-01-01 is out of range").into()
                    })
            }
            PgValueFormat::Text => {
                <Timestamp as sqlx::Decode<Postgres>>::decode(value).map(PgTimestamp)
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeDelta};

    /// What sqlx's decode gives for `micros`: PostgreSQL's epoch as a date, plus the
    /// microseconds (None where that addition overflows).
    fn as_sqlx_reads_it(micros: i64) -> Option<Timestamp> {
        let epoch = NaiveDate::from_ymd_opt(2000, 1, 1)?.and_hms_opt(0, 0, 0)?;
        let naive = epoch.checked_add_signed(TimeDelta::microseconds(micros))?;
        Some(naive.and_utc())
    }

    #[test]
    fn a_timestamp_reads_as_sqlx_reads_it() {
        let day = 86_400_000_000_i64;
        let values = [
            0,
            1,
            -1,
            999_999,
            -PG_EPOCH_MICROS,     // 1970-01-01
            -PG_EPOCH_MICROS - 1, // just before 1970
            850_000_000_000_000,  // 2026
            36_524 * day,         // 2100
            -730_000 * day,       // about the year 1
            i64::MAX,             // PostgreSQL's 'infinity'
            i64::MIN,             // '-infinity'
        ];
        for micros in values {
            assert_eq!(
                PgTimestamp::from_pg_micros(micros),
                as_sqlx_reads_it(micros),
                "{micros} µs from 2000-01-01"
            );
        }
        assert_eq!(
            PgTimestamp::from_pg_micros(0).map(|t| t.to_rfc3339()),
            Some("2000-01-01T00:00:00+00:00".to_string())
        );
    }
}
