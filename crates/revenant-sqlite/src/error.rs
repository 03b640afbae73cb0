//! The one place that classifies sqlx and SQLite errors into [`StoreError`].
//!
//! Retryable ([`StoreError::Unavailable`]): the database is busy or locked past the busy
//! timeout, an I/O error, a full disk, a file that cannot be opened, a pool timeout or a
//! closed pool. The runtime retries those with its own backoff; they never spend a job's
//! attempt. Everything else is [`StoreError::Backend`] (constraints, bad SQL, a failed
//! migration) or [`StoreError::Corrupt`] (a value this version cannot decode).

use revenant_core::StoreError;

/// SQLite primary result codes that mean "try again later".
/// <https://www.sqlite.org/rescode.html>
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;
const SQLITE_IOERR: i64 = 10;
const SQLITE_FULL: i64 = 13;
const SQLITE_CANTOPEN: i64 = 14;
const SQLITE_PROTOCOL: i64 = 15;

/// Classifies a driver error.
pub(crate) fn classify(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::WorkerCrashed => StoreError::unavailable(err),
        sqlx::Error::Database(db) => {
            // SQLite reports the extended result code; the primary code is its low byte.
            let primary = db
                .code()
                .and_then(|code| code.parse::<i64>().ok())
                .map(|code| code & 0xff);
            match primary {
                Some(
                    SQLITE_BUSY | SQLITE_LOCKED | SQLITE_IOERR | SQLITE_FULL | SQLITE_CANTOPEN
                    | SQLITE_PROTOCOL,
                ) => StoreError::unavailable(err),
                _ => StoreError::backend(err),
            }
        }
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
            StoreError::Corrupt(err.to_string())
        }
        _ => StoreError::backend(err),
    }
}

/// A failed migration: never retryable, the schema needs a person.
pub(crate) fn migrate(err: sqlx::migrate::MigrateError) -> StoreError {
    StoreError::Backend {
        message: format!("applying the SQLite migrations failed: {err}"),
        source: Some(Box::new(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_timeouts_are_retryable_and_bad_sql_is_not() {
        assert!(classify(sqlx::Error::PoolTimedOut).is_retryable());
        assert!(!classify(sqlx::Error::RowNotFound).is_retryable());
    }
}
