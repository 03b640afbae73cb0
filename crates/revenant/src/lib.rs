//! revenant: a background job queue whose reason to exist is failure handling.
//!
//! Work comes back when it fails (retries with exponential backoff and jitter,
//! honouring `Retry-After`), work that can never succeed is kept with its reason and
//! whole error history (dead letters), and an operator can bring it back once the
//! cause is fixed (redrive). It runs embedded on SQLite for one machine and on
//! PostgreSQL for many.
//!
//! This crate is the one to depend on: it re-exports the core types and picks a
//! backend from a database URL.
//!
//! ```no_run
//! # async fn example() -> Result<(), revenant::StoreError> {
//! use revenant::store::JobEnqueueParams;
//! use revenant::NewJob;
//!
//! let store = revenant::connect("sqlite://revenant.db").await?;
//! let job = NewJob::new("emails", "send_receipt", serde_json::json!({"order": 42}));
//! let ids = store
//!     .job_enqueue(JobEnqueueParams { jobs: vec![job], default_max_attempts: 12, now: None })
//!     .await?;
//! println!("enqueued job {}", ids[0].id);
//! # Ok(()) }
//! ```
//!
//! Delivery is at-least-once, as with SQS, RabbitMQ, River and Oban: a job may run
//! more than once (a worker that dies after the handler's side effect but before the
//! ack), never zero times. Handlers that call the outside world should be idempotent,
//! or pass the job id along as an idempotency key.

use std::sync::Arc;

pub use revenant_core::*;
pub use revenant_postgres as postgres;
pub use revenant_sqlite as sqlite;

/// The URL used when none is given: a SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://revenant.db";

/// The URL schemes [`connect`] understands.
pub const SUPPORTED_SCHEMES: &[&str] = &["sqlite://", "sqlite:", "postgres://", "postgresql://"];

/// Opens the store a URL names, applying migrations: `sqlite://path.db` (created if
/// missing) or `postgres://user@host/db`.
///
/// Fails with [`StoreError::UnsupportedUrl`] for any other scheme, listing the
/// supported ones, and with [`StoreError::Unavailable`] when the database cannot be
/// reached.
pub async fn connect(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    match Backend::from_url(url)? {
        Backend::Sqlite => Ok(Arc::new(sqlite::SqliteStore::connect(url).await?)),
        Backend::Postgres => Ok(Arc::new(postgres::PgStore::connect(url).await?)),
    }
}

/// The backends a URL can select.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Embedded SQLite: one machine, one file.
    Sqlite,
    /// PostgreSQL: many processes on many machines.
    Postgres,
}

impl Backend {
    /// Picks the backend from the URL's scheme, or says which schemes are supported.
    ///
    /// ```
    /// use revenant::Backend;
    /// assert_eq!(Backend::from_url("sqlite://revenant.db").unwrap(), Backend::Sqlite);
    /// assert_eq!(Backend::from_url("postgres://localhost/app").unwrap(), Backend::Postgres);
    /// assert!(Backend::from_url("mysql://localhost/app").is_err());
    /// ```
    pub fn from_url(url: &str) -> Result<Backend, StoreError> {
        let lower = url.trim().to_ascii_lowercase();
        if lower.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            let scheme = lower.split(':').next().unwrap_or_default();
            Err(StoreError::UnsupportedUrl {
                url: redact(url),
                message: format!(
                    "scheme {scheme:?} is not supported; use sqlite://PATH (embedded, the default) or postgres://USER@HOST/DB"
                ),
            })
        }
    }
}

/// A URL fit for logs and errors: the password, if any, replaced by `***`.
///
/// ```
/// assert_eq!(revenant::redact("postgres://app:s3cret@db/app"), "postgres://app:***@db/app");
/// assert_eq!(revenant::redact("sqlite://revenant.db"), "sqlite://revenant.db");
/// ```
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}
