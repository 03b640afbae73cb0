//! Schema migrations, applied by every constructor of [`crate::SqliteStore`] before it
//! returns (unless opened with [`MigrateMode::Never`]), or on their own by
//! [`apply`] (`revenant migrate`).
//!
//! The files are `migrations/NNNN_<name>.sql`, embedded at compile time and applied
//! with sqlx's migrator on the writer connection, each in its own transaction, with
//! sqlx's ledger (`_sqlx_migrations`) in the same file: a SQLite database belongs to
//! revenant alone, so there is no application ledger to collide with (PostgreSQL keeps
//! its own, see that backend). Append a migration; never edit one that has shipped
//! (sqlx refuses a changed checksum). A failed migration is
//! [`revenant_core::StoreError::Backend`]: the schema needs a person.
//!
//! Migrations only add (tables, nullable columns or columns with defaults, indexes), so
//! a worker of the previous release keeps working on the new schema during a rolling
//! deploy; `tests/migrations.rs` refuses a file that drops, renames or retypes. See
//! docs/deploy.md.

use chrono::{NaiveDateTime, TimeZone, Utc};
use revenant_core::migration::{pending_error, MigrateMode, Migration};
use revenant_core::StoreError;
use sqlx::migrate::Migrator;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::SqlitePool;

use crate::error::{self, classify};
use crate::store::connect_options;

/// Every migration this version knows, embedded.
static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// At open: applies every pending migration (`Auto`), or refuses to open while one is
/// pending (`Never`).
pub(crate) async fn run(writer: &SqlitePool, mode: MigrateMode) -> Result<(), StoreError> {
    match mode {
        MigrateMode::Never => {
            let pending: Vec<Migration> = ledger(writer)
                .await?
                .into_iter()
                .filter(|m| m.applied_at.is_none())
                .collect();
            if pending.is_empty() {
                Ok(())
            } else {
                Err(pending_error("SQLite", &pending))
            }
        }
        // Non-exhaustive in core: any mode this version does not know migrates, the
        // default.
        _ => migrate_to(writer, None).await.map(drop),
    }
}

/// Every migration this version knows, oldest first, with when the database applied
/// it (`None`: pending). Opens the database named by `url` without migrating it.
pub async fn status(url: &str) -> Result<Vec<Migration>, StoreError> {
    ledger(&open(url).await?).await
}

/// Applies the pending migrations of the database named by `url`, up to `version`
/// inclusive (`None`: all), and returns those it applied, oldest first.
pub async fn apply(url: &str, version: Option<i64>) -> Result<Vec<Migration>, StoreError> {
    migrate_to(&open(url).await?, version).await
}

/// One connection, configured as the store's writer is.
async fn open(url: &str) -> Result<SqlitePool, StoreError> {
    let (options, _memory) = connect_options(url)?;
    SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .map_err(classify)
}

async fn migrate_to(
    writer: &SqlitePool,
    version: Option<i64>,
) -> Result<Vec<Migration>, StoreError> {
    let before = ledger(writer).await?;
    // ignore_missing: a database migrated by a newer revenant holds versions this one
    // does not know. sqlx would refuse to run; a previous release must keep working on
    // the new schema during a rolling deploy (PostgreSQL warns and runs, as here).
    let migrator = Migrator {
        migrations: MIGRATOR
            .migrations
            .iter()
            .filter(|m| version.is_none_or(|v| m.version <= v))
            .cloned()
            .collect(),
        ignore_missing: true,
        locking: MIGRATOR.locking,
        no_tx: MIGRATOR.no_tx,
    };
    migrator.run(writer).await.map_err(error::migrate)?;
    let after = ledger(writer).await?;
    Ok(after
        .into_iter()
        .filter(|m| {
            m.applied_at.is_some()
                && before
                    .iter()
                    .any(|b| b.version == m.version && b.applied_at.is_none())
        })
        .collect())
}

/// The known migrations joined with sqlx's ledger (absent before the first migration).
async fn ledger(pool: &SqlitePool) -> Result<Vec<Migration>, StoreError> {
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations')",
    )
    .fetch_one(pool)
    .await
    .map_err(classify)?;
    let applied: Vec<(i64, NaiveDateTime)> = if exists {
        sqlx::query_as("SELECT version, installed_on FROM _sqlx_migrations WHERE success")
            .fetch_all(pool)
            .await
            .map_err(classify)?
    } else {
        Vec::new()
    };
    Ok(MIGRATOR
        .iter()
        .map(|m| Migration {
            version: m.version,
            // sqlx turns the file name's `_` into spaces; keep the file's spelling.
            name: m.description.replace(' ', "_"),
            applied_at: applied
                .iter()
                .find(|(v, _)| *v == m.version)
                .map(|(_, at)| Utc.from_utc_datetime(at)),
        })
        .collect())
}
