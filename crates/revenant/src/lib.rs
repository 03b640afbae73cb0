//! revenant: a background job queue whose reason to exist is failure handling.
//!
//! Work comes back when it fails (retries with exponential backoff and jitter,
//! honouring `Retry-After`), work that can never succeed is kept with its reason and
//! whole error history (dead letters), and an operator can bring it back once the
//! cause is fixed (redrive). It runs embedded on SQLite for one machine and on
//! PostgreSQL for many.
//!
//! This crate is the one to depend on. Its parts, all you need to hold in your head:
//!
//! - [`Client`]: every user-level operation (enqueue with the policy of the job's queue
//!   and kind, cancel, redrive paced and audited, purge, export, pause, breakers,
//!   stored policies). The CLI and the HTTP server call it too.
//! - [`Worker`] and [`Handler`]: the runtime that runs your handlers
//!   ([`Client::worker`] gives a builder sharing the client's store and policies).
//! - [`RetryPolicy`] and [`PolicySet`]: attempts, backoff, jitter, timeouts; stored in
//!   the database so every door and worker agrees ([`Client::set_policy`]).
//! - [`StoreError`], [`InputError`], [`JobError`]: what can go wrong.
//! - [`connect`]: a store from a URL (`sqlite://...`, `postgres://...`).
//!
//! Enqueue, run and see the job complete, on a SQLite file:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let url = format!("sqlite://{}", dir.path().join("doc.db").display());
//! use revenant::{Client, JobContext, JobError, JobState, NewJob, PolicyScope, RetryPolicy};
//!
//! let client = Client::connect(&url).await?;
//! // Every receipt gets 5 attempts, whichever door enqueues it.
//! let policy = RetryPolicy::builder().max_attempts(5).build()?;
//! client.set_policy(PolicyScope::Kind("send_receipt".into()), policy).await?;
//!
//! let job = NewJob::new("emails", "send_receipt", serde_json::json!({"order": 42}));
//! let id = client.enqueue(job).await?.id;
//! assert_eq!(client.job(id).await?.unwrap().max_attempts, 5);
//!
//! #[derive(serde::Deserialize)]
//! struct Receipt { order: u64 }
//! let worker = client
//!     .worker()
//!     .queue("emails", 4)
//!     .handler_fn("send_receipt", |_ctx: JobContext, r: Receipt| async move {
//!         assert_eq!(r.order, 42);
//!         Ok::<(), JobError>(())
//!     })
//!     .build()?;
//! // Run until the job is done (a service runs `worker.run()`: until SIGTERM).
//! let watcher = client.clone();
//! worker
//!     .run_until(async move {
//!         while watcher.job(id).await.unwrap().unwrap().status != JobState::Completed {
//!             tokio::time::sleep(std::time::Duration::from_millis(20)).await;
//!         }
//!     })
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Delivery is at-least-once, as with SQS, RabbitMQ, River and Oban: a job may run
//! more than once (a worker that dies after the handler's side effect but before the
//! ack), never zero times. Handlers that call the outside world should be idempotent,
//! or pass the job id along as an idempotency key.

use std::sync::Arc;

pub mod client;

pub use client::{
    Client, DeadSelection, ExportError, Preview, RedriveProgress, RedriveReport, RedriveRequest,
    SettleReport,
};
pub use revenant_core::migration::{MigrateMode, Migration};
pub use revenant_core::schedule;
pub use revenant_core::schedule::{Misfire, ScheduleRecord, ScheduleSpec, ScheduledJob};
pub use revenant_core::store::PolicyScope;
pub use revenant_core::{
    backoff, decide, dependency, duration, error, fingerprint, job, names, outcome, policy, rate,
    store, trace,
};
pub use revenant_core::{
    Backoff, ClaimedJob, DeadReason, ErrorEntry, FailureClass, InputError, Jitter, Job, JobId,
    JobState, LeaseToken, NewJob, Outcome, PolicyError, PolicySet, Rate, RetryPolicy, Store,
    StoreError, Timestamp, Transition,
};
pub use revenant_runtime::{alert, settle};
pub use revenant_runtime::{
    ConfigError, DependencyConfig, Handler, JobAction, JobContext, JobError, ResultExt,
    ShutdownHandle, Worker, WorkerBuilder, WorkerError,
};

/// The worker runtime, whole: handlers, the worker and its builder, maintenance,
/// metrics, the settle step. The common items are re-exported at the crate root.
pub mod runtime {
    pub use revenant_runtime::*;
}

/// The backends this build includes (the `sqlite` and `postgres` features, both on by
/// default), for what only one of them offers (a PostgreSQL transaction's enqueue,
/// `postgres::PgStore::job_enqueue_tx`) and for tests. Most code needs only
/// [`connect`].
pub mod backends {
    #[cfg(feature = "postgres")]
    pub use revenant_postgres as postgres;
    #[cfg(feature = "sqlite")]
    pub use revenant_sqlite as sqlite;
}
// Kept at the root for the crate's own tests and tools; users see `backends`.
#[cfg(feature = "postgres")]
#[doc(hidden)]
pub use backends::postgres;
#[cfg(feature = "sqlite")]
#[doc(hidden)]
pub use backends::sqlite;

/// The URL used when none is given: a SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://revenant.db";

/// The URL schemes [`connect`] understands.
pub const SUPPORTED_SCHEMES: &[&str] = &["sqlite://", "sqlite:", "postgres://", "postgresql://"];

/// Opens the store a URL names, applying migrations: `sqlite://path.db` (created if
/// missing) or `postgres://user@host/db`.
///
/// Fails with [`StoreError::UnsupportedUrl`] for any other scheme, listing the
/// supported ones, or for a backend this build leaves out (the message names the
/// cargo feature to turn on), and with [`StoreError::Unavailable`] when the database
/// cannot be reached.
pub async fn connect(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    match Backend::from_url(url)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => Ok(Arc::new(sqlite::SqliteStore::connect(url).await?)),
        #[cfg(feature = "postgres")]
        Backend::Postgres => Ok(Arc::new(postgres::PgStore::connect(url).await?)),
        #[allow(
            unreachable_patterns,
            reason = "reached only when a backend feature is off"
        )]
        backend => Err(backend.left_out(url)),
    }
}

/// [`connect`], applying pending migrations or not: with [`MigrateMode::Never`] no
/// migration is applied and a database that lacks one is refused (apply them with
/// [`migrate`] first). See docs/deploy.md for which to choose.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(unused_variables, reason = "with no backend every URL is refused")
)]
pub async fn connect_with(url: &str, mode: MigrateMode) -> Result<Arc<dyn Store>, StoreError> {
    match Backend::from_url(url)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => Ok(Arc::new(
            sqlite::SqliteStore::connect_with(url, mode).await?,
        )),
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            let options = postgres::PgStoreOptions {
                migrate: mode,
                ..postgres::PgStoreOptions::default()
            };
            Ok(Arc::new(
                postgres::PgStore::connect_with(url, options).await?,
            ))
        }
        #[allow(
            unreachable_patterns,
            reason = "reached only when a backend feature is off"
        )]
        backend => Err(backend.left_out(url)),
    }
}

/// Applies the pending schema migrations of the database a URL names, up to `version`
/// inclusive (`None`: all), and returns those applied, oldest first (none: the schema
/// was current). What [`connect`] does at start, on its own.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(unused_variables, reason = "with no backend every URL is refused")
)]
pub async fn migrate(url: &str, version: Option<i64>) -> Result<Vec<Migration>, StoreError> {
    match Backend::from_url(url)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlite::migrate::apply(url, version).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres => postgres::migrate::apply_at(url, version).await,
        #[allow(
            unreachable_patterns,
            reason = "reached only when a backend feature is off"
        )]
        backend => Err(backend.left_out(url)),
    }
}

/// Every migration this version knows, oldest first, with when the database named by
/// the URL applied it (`None`: pending). Changes nothing.
pub async fn migration_status(url: &str) -> Result<Vec<Migration>, StoreError> {
    match Backend::from_url(url)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlite::migrate::status(url).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres => postgres::migrate::status_at(url).await,
        #[allow(
            unreachable_patterns,
            reason = "reached only when a backend feature is off"
        )]
        backend => Err(backend.left_out(url)),
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
    /// The cargo feature of this crate that builds the backend in.
    pub fn feature(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// The error of [`connect`] for a backend this build leaves out.
    fn left_out(self, url: &str) -> StoreError {
        let url = redact(url);
        let scheme = url.split(':').next().unwrap_or_default();
        StoreError::UnsupportedUrl {
            message: format!(
                "{scheme}:// needs revenant's {:?} feature, which this build leaves out",
                self.feature()
            ),
            url,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of a refused URL, or a panic if the URL was not refused as
    /// unsupported.
    #[cfg(not(all(feature = "sqlite", feature = "postgres")))]
    async fn refusal(url: &str) -> String {
        match connect(url).await {
            Err(StoreError::UnsupportedUrl { message, .. }) => message,
            Err(other) => panic!("{url}: expected UnsupportedUrl, got {other:?}"),
            Ok(_) => panic!("{url}: expected UnsupportedUrl, got a store"),
        }
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn a_postgres_url_without_the_postgres_feature_names_the_feature() {
        let message = refusal("postgres://app:s3cret@db.example/app").await;
        assert_eq!(
            message,
            r#"postgres:// needs revenant's "postgres" feature, which this build leaves out"#
        );
        // The `postgresql://` spelling names its own scheme.
        let message = refusal("postgresql://db.example/app").await;
        assert!(message.starts_with("postgresql:// needs"), "{message}");
    }

    #[cfg(not(feature = "sqlite"))]
    #[tokio::test]
    async fn a_sqlite_url_without_the_sqlite_feature_names_the_feature() {
        let message = refusal("sqlite://revenant.db").await;
        assert_eq!(
            message,
            r#"sqlite:// needs revenant's "sqlite" feature, which this build leaves out"#
        );
    }

    #[test]
    fn every_backend_names_its_feature() {
        assert_eq!(Backend::Sqlite.feature(), "sqlite");
        assert_eq!(Backend::Postgres.feature(), "postgres");
    }
}
