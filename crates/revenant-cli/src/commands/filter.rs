//! Turning filter flags into a [`JobFilter`], with errors that name the flag.

use chrono::{DateTime, Utc};
use revenant::store::JobFilter;
use revenant::{names, InputError, Timestamp};

use crate::cli::FilterArgs;

/// The filter the flags describe. Names are checked the way enqueue checks them, so a
/// typo'd queue is an error rather than an empty list.
pub fn build(args: &FilterArgs, now: Timestamp) -> Result<JobFilter, InputError> {
    if let Some(queue) = &args.queue {
        names::validate_name("queue", queue)?;
    }
    if let Some(kind) = &args.kind {
        names::validate_name("kind", kind)?;
    }
    if let Some(print) = &args.fingerprint {
        if print.len() != 12 || !print.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(InputError::new(
                "fingerprint",
                format!("{print:?} is not a fingerprint; it is 12 hex digits, as `revenant dead fingerprints` prints"),
            ));
        }
    }
    Ok(JobFilter {
        fingerprint: args.fingerprint.as_ref().map(|p| p.to_ascii_lowercase()),
        queue: args.queue.clone(),
        kind: args.kind.clone(),
        group_key: args.group.clone(),
        correlation_id: args.correlation_id.clone(),
        error_contains: args.error.clone(),
        finished_after: args
            .since
            .as_deref()
            .map(|t| point_in_time("since", t, now))
            .transpose()?,
        finished_before: args
            .until
            .as_deref()
            .map(|t| point_in_time("until", t, now))
            .transpose()?,
        ..JobFilter::default()
    })
}

/// Reads `1h` (that long ago) or an RFC 3339 time.
pub fn point_in_time(
    field: &'static str,
    text: &str,
    now: Timestamp,
) -> Result<Timestamp, InputError> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let ago = revenant::duration::parse(field, text).map_err(|_| {
        InputError::new(field, format!("{text:?} is neither a duration ago (1h) nor an RFC 3339 time (2026-11-30T08:00:00Z)"))
    })?;
    let ago =
        chrono::Duration::from_std(ago).map_err(|_| InputError::new(field, "is too far back"))?;
    Ok(now - ago)
}

/// Checks a `--limit`.
pub fn limit(value: u32) -> Result<u32, InputError> {
    if (1..=10_000).contains(&value) {
        Ok(value)
    } else {
        Err(InputError::new(
            "limit",
            format!("{value} is out of range; use 1..=10000"),
        ))
    }
}
