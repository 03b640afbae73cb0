//! Schema migrations, applied by [`crate::PgStore::connect`] before it returns.
//!
//! revenant keeps its own ledger (`<schema>.migrations`) instead of sqlx's
//! `_sqlx_migrations`: that table lives in whatever schema comes first on the
//! `search_path`, and an application that shares the database (the point of
//! transactional enqueue) very likely keeps its own sqlx migrations there. Two ledgers
//! in one table would make each side refuse the other's versions.
//!
//! Safe when many processes start at once: the whole run is one transaction holding a
//! transaction-scoped advisory lock keyed on the schema, so one process migrates and
//! the others wait, then find nothing left to do. The lock is released with the
//! transaction, even if the process dies mid-way, and a failed migration rolls back
//! whole.

use std::future::Future;
use std::pin::Pin;

use sqlx::{Acquire, Executor, PgPool};

use crate::error::ResultExt;
use crate::sql::{quote_ident, render};
use revenant_core::StoreError;

/// One migration: its version (never reused), name and SQL.
struct Migration {
    version: i32,
    name: &'static str,
    sql: &'static str,
}

/// Every migration, oldest first. Append; never edit one that has shipped.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "jobs",
        sql: include_str!("../migrations/0001_jobs.sql"),
    },
    Migration {
        version: 2,
        name: "dead_letters",
        sql: include_str!("../migrations/0002_dead_letters.sql"),
    },
    Migration {
        version: 3,
        name: "dependencies",
        sql: include_str!("../migrations/0003_dependencies.sql"),
    },
    Migration {
        version: 4,
        name: "policies",
        sql: include_str!("../migrations/0004_policies.sql"),
    },
];

/// The first key of the advisory lock (`'rvnt'`); the second is the schema's hash.
const LOCK_CLASS: i32 = 0x7276_6e74;

/// Creates the schema if needed and applies every migration not yet applied.
///
/// Boxed with an explicit `Send` so callers can spawn it: without the box, rustc
/// cannot prove `Send` for futures holding `&mut PgConnection` across awaits (the
/// higher-ranked `Executor` bound).
pub(crate) fn run<'a>(
    pool: &'a PgPool,
    schema: &'a str,
) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'a>> {
    Box::pin(run_inner(pool, schema))
}

async fn run_inner(pool: &PgPool, schema: &str) -> Result<(), StoreError> {
    let quoted = quote_ident(schema);
    let mut conn = pool.acquire().await.classified()?;
    let mut tx = conn.begin().await.classified()?;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(LOCK_CLASS)
        .bind(schema)
        .execute(&mut *tx)
        .await
        .classified()?;

    // Checked first so a role without CREATE on the database can use a schema an
    // administrator made for it.
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(&mut *tx)
            .await
            .classified()?;
    if !exists {
        tx.execute(format!("CREATE SCHEMA {quoted}").as_str())
            .await
            .classified()?;
    }
    let ledger = format!(
        "CREATE TABLE IF NOT EXISTS {quoted}.migrations (
             version    integer     PRIMARY KEY,
             name       text        NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         )"
    );
    tx.execute(ledger.as_str()).await.classified()?;

    let applied: Vec<i32> = sqlx::query_scalar(&format!(
        "SELECT version FROM {quoted}.migrations ORDER BY version"
    ))
    .fetch_all(&mut *tx)
    .await
    .classified()?;

    for migration in MIGRATIONS {
        if applied.contains(&migration.version) {
            continue;
        }
        tracing::info!(
            schema,
            version = migration.version,
            name = migration.name,
            "applying migration"
        );
        // A string without arguments runs as a simple query: several statements at once.
        let sql = render(migration.sql, &quoted);
        tx.execute(sql.as_str()).await.classified()?;
        sqlx::query(&format!(
            "INSERT INTO {quoted}.migrations (version, name) VALUES ($1, $2)"
        ))
        .bind(migration.version)
        .bind(migration.name)
        .execute(&mut *tx)
        .await
        .classified()?;
    }
    if let Some(newest) = applied.last() {
        let known = MIGRATIONS.last().map_or(0, |m| m.version);
        if *newest > known {
            tracing::warn!(
                schema,
                database_version = newest,
                known_version = known,
                "the database was migrated by a newer revenant; running anyway"
            );
        }
    }
    tx.commit().await.classified()
}
