//! The one place where sqlx and PostgreSQL errors are classified.
//!
//! The runtime retries [`StoreError::Unavailable`] with its own backoff and never
//! spends a job's attempt on it, so everything that a later retry can fix belongs
//! there: the server cannot be reached or dropped the connection (including an
//! administrator's shutdown or a restart), the pool had no connection in time, or the
//! transaction lost a race the database resolves by aborting it (serialization
//! failure, deadlock). Everything else is a real fault ([`StoreError::Backend`]), and
//! a value that does not decode is [`StoreError::Corrupt`].

use revenant_core::StoreError;

/// SQLSTATEs that a retry may get past. Class 08 (connection exception) is matched
/// by prefix in [`is_transient_sqlstate`].
const TRANSIENT_SQLSTATES: &[&str] = &[
    "40001", // serialization_failure
    "40P01", // deadlock_detected
    "53300", // too_many_connections
    "55P03", // lock_not_available
    "57P01", // admin_shutdown: the server is stopping (fast/immediate) or the backend was terminated
    "57P02", // crash_shutdown: another backend crashed and the server is resetting
    "57P03", // cannot_connect_now: the server is starting up or shutting down
    "57P05", // idle_session_timeout: the server closed an idle pooled connection
];

/// Whether a SQLSTATE is one a retry may get past.
pub(crate) fn is_transient_sqlstate(code: &str) -> bool {
    code.starts_with("08") || TRANSIENT_SQLSTATES.contains(&code)
}

/// Classifies a sqlx error. See the module docs.
pub(crate) fn classify(err: sqlx::Error) -> StoreError {
    match &err {
        // Protocol: the server's replies stopped making sense, which in practice is a
        // connection cut mid-message; sqlx drops that connection, so a retry gets a
        // fresh one.
        sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => StoreError::unavailable(err),
        sqlx::Error::Database(db) => match db.code() {
            Some(code) if is_transient_sqlstate(&code) => StoreError::unavailable(err),
            _ => StoreError::backend(err),
        },
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
            StoreError::Corrupt(err.to_string())
        }
        _ => StoreError::backend(err),
    }
}

/// `?` on a sqlx result inside this crate classifies the error.
pub(crate) trait ResultExt<T> {
    /// Maps the error through [`classify`].
    fn classified(self) -> Result<T, StoreError>;
}

impl<T> ResultExt<T> for Result<T, sqlx::Error> {
    fn classified(self) -> Result<T, StoreError> {
        self.map_err(classify)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_loss_and_lost_races_are_retryable() {
        for code in [
            "08006", "08001", "57P01", "57P03", "40001", "40P01", "53300",
        ] {
            assert!(is_transient_sqlstate(code), "{code}");
        }
        for code in ["23505", "42P01", "22P02", "42601"] {
            assert!(!is_transient_sqlstate(code), "{code}");
        }
    }

    #[test]
    fn io_errors_and_pool_timeouts_are_unavailable() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(classify(sqlx::Error::Io(io)).is_retryable());
        assert!(classify(sqlx::Error::PoolTimedOut).is_retryable());
        assert!(classify(sqlx::Error::PoolClosed).is_retryable());
        assert!(!classify(sqlx::Error::RowNotFound).is_retryable());
        assert!(matches!(
            classify(sqlx::Error::Decode("bad".into())),
            StoreError::Corrupt(_)
        ));
    }
}
