//! Errors of the core layer: bad input, and what a store can fail with.
//!
//! A lost race is not here: a fenced update that matched nothing is a value
//! ([`crate::store::Fenced::LeaseLost`]), not an error.

use std::error::Error as StdError;

/// Input that cannot be accepted. `field` names the input; the message says what is
/// wrong with it and, where it helps, what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {message}")]
pub struct InputError {
    /// The field, flag or parameter at fault (`queue`, `payload`, `max_attempts`, ...).
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl InputError {
    /// An error for `field`.
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        InputError {
            field,
            message: message.into(),
        }
    }
}

/// What a [`crate::Store`] operation can fail with.
///
/// Backends classify their driver's errors into these variants in exactly one place
/// (their `error.rs`), so the runtime can tell a passing outage from a real fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The input was refused before anything was written.
    #[error(transparent)]
    Input(#[from] InputError),

    /// The database could not be reached or dropped the connection, or is busy
    /// (locked, serialization failure, pool timeout). Retrying later may succeed; the
    /// runtime does so with its own backoff.
    #[error("database unavailable: {message}")]
    Unavailable {
        /// What happened, for people.
        message: String,
        /// The driver's error.
        #[source]
        source: Option<Box<dyn StdError + Send + Sync>>,
    },

    /// The database answered with an error that retrying will not fix (a constraint,
    /// a bad migration, corrupted data).
    #[error("database error: {message}")]
    Backend {
        /// What happened, for people.
        message: String,
        /// The driver's error.
        #[source]
        source: Option<Box<dyn StdError + Send + Sync>>,
    },

    /// The database holds a value this version cannot read (a state name it does not
    /// know, a history that is not JSON). Names the column and the value.
    #[error("corrupt row: {0}")]
    Corrupt(String),

    /// The URL is not one this build can open.
    #[error("unsupported database URL {url:?}: {message}")]
    UnsupportedUrl {
        /// The URL as given (credentials are not included by the callers that log it).
        url: String,
        /// Why, with the schemes that are supported.
        message: String,
    },

    /// The backend does not offer this capability.
    #[error("the {backend} backend does not support {capability}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// What is missing.
        capability: &'static str,
    },
}

impl StoreError {
    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }

    /// A retryable error from a driver error.
    pub fn unavailable(source: impl StdError + Send + Sync + 'static) -> Self {
        StoreError::Unavailable {
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }

    /// A non-retryable error from a driver error.
    pub fn backend(source: impl StdError + Send + Sync + 'static) -> Self {
        StoreError::Backend {
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }
}
