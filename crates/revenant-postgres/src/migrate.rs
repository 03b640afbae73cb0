//! Schema migrations, applied by [`crate::PgStore::connect`] before it returns (unless
//! [`crate::PgStoreOptions::migrate`] is [`MigrateMode::Never`]), or on their own by
//! [`apply`] (`revenant migrate`).
//!
//! Migrations only add (tables, nullable columns or columns with defaults, indexes), so
//! a worker of the previous release keeps working on the new schema during a rolling
//! deploy; `tests/migrations.rs` refuses a file that drops, renames or retypes. See
//! docs/deploy.md.
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

use sqlx::postgres::PgPoolOptions;
use sqlx::{Acquire, Executor, PgPool};

use crate::error::ResultExt;
use crate::sql::{quote_ident, render};
use crate::store::parse_url;
use revenant_core::migration::{pending_error, MigrateMode, Migration};
use revenant_core::{StoreError, Timestamp};

/// One migration: its version (never reused), name and SQL.
struct Known {
    version: i32,
    name: &'static str,
    sql: &'static str,
}

/// Every migration, oldest first. Append; never edit one that has shipped.
const MIGRATIONS: &[Known] = &[
    Known {
        version: 1,
        name: "jobs",
        sql: include_str!("../migrations/0001_jobs.sql"),
    },
    Known {
        version: 2,
        name: "dead_letters",
        sql: include_str!("../migrations/0002_dead_letters.sql"),
    },
    Known {
        version: 3,
        name: "dependencies",
        sql: include_str!("../migrations/0003_dependencies.sql"),
    },
    Known {
        version: 4,
        name: "policies",
        sql: include_str!("../migrations/0004_policies.sql"),
    },
    // Versions apply in order of number whatever order they arrive in, each once: a
    // missing one is applied when it does.
    Known {
        version: 6,
        name: "schedules",
        sql: include_str!("../migrations/0006_schedules.sql"),
    },
    Known {
        version: 7,
        name: "trace_context",
        sql: include_str!("../migrations/0007_trace_context.sql"),
    },
    Known {
        version: 8,
        name: "job_claim",
        sql: include_str!("../migrations/0008_job_claim.sql"),
    },
    Known {
        version: 9,
        name: "jobs_vacuum",
        sql: include_str!("../migrations/0009_jobs_vacuum.sql"),
    },
    Known {
        version: 10,
        name: "append_error",
        sql: include_str!("../migrations/0010_append_error.sql"),
    },
    Known {
        version: 11,
        name: "jobs_fillfactor",
        sql: include_str!("../migrations/0011_jobs_fillfactor.sql"),
    },
    Known {
        version: 12,
        name: "attempt_failures_count",
        sql: include_str!("../migrations/0012_attempt_failures_count.sql"),
    },
    Known {
        version: 13,
        name: "job_claim_v2",
        sql: include_str!("../migrations/0013_job_claim_v2.sql"),
    },
    Known {
        version: 14,
        name: "job_writes",
        sql: include_str!("../migrations/0014_job_writes.sql"),
    },
    Known {
        version: 15,
        name: "kept_failures",
        sql: include_str!("../migrations/0015_kept_failures.sql"),
    },
    Known {
        version: 16,
        name: "kept_entries",
        sql: include_str!("../migrations/0016_kept_entries.sql"),
    },
];

/// The first key of the advisory lock (`'rvnt'`); the second is the schema's hash.
const LOCK_CLASS: i32 = 0x7276_6e74;

/// At connect: applies every pending migration (`Auto`), or refuses to connect while
/// one is pending (`Never`).
///
/// Boxed with an explicit `Send` so callers can spawn it: without the box, rustc
/// cannot prove `Send` for futures holding `&mut PgConnection` across awaits (the
/// higher-ranked `Executor` bound).
pub(crate) fn run<'a>(
    pool: &'a PgPool,
    schema: &'a str,
    mode: MigrateMode,
) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'a>> {
    Box::pin(async move {
        match mode {
            MigrateMode::Never => {
                let pending: Vec<Migration> = status(pool, schema)
                    .await?
                    .into_iter()
                    .filter(|m| m.applied_at.is_none())
                    .collect();
                if pending.is_empty() {
                    Ok(())
                } else {
                    Err(pending_error("PostgreSQL", &pending))
                }
            }
            // Non-exhaustive in core: a mode this version does not know migrates, the
            // default.
            _ => apply_inner(pool, schema, None).await.map(drop),
        }
    })
}

/// Every migration this version knows, oldest first, with when the database applied
/// it (`None`: pending). Reads only: creates neither the schema nor the ledger.
pub async fn status(pool: &PgPool, schema: &str) -> Result<Vec<Migration>, StoreError> {
    let ledger_exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'migrations')",
    )
    .bind(schema)
    .fetch_one(pool)
    .await
    .classified()?;
    let applied: Vec<(i32, Timestamp)> = if ledger_exists {
        sqlx::query_as(&format!(
            "SELECT version, applied_at FROM {}.migrations ORDER BY version",
            quote_ident(schema)
        ))
        .fetch_all(pool)
        .await
        .classified()?
    } else {
        Vec::new()
    };
    Ok(MIGRATIONS
        .iter()
        .map(|m| Migration {
            version: i64::from(m.version),
            name: m.name.to_string(),
            applied_at: applied
                .iter()
                .find(|(v, _)| *v == m.version)
                .map(|(_, at)| *at),
        })
        .collect())
}

/// Creates the schema if needed and applies the pending migrations up to `version`
/// inclusive (`None`: all), in one transaction under the advisory lock; returns those
/// it applied, oldest first.
pub async fn apply(
    pool: &PgPool,
    schema: &str,
    version: Option<i64>,
) -> Result<Vec<Migration>, StoreError> {
    apply_inner(pool, schema, version).await
}

/// [`status`] of the default schema (`revenant`) at a `postgres://` URL, over one
/// connection of its own.
pub async fn status_at(url: &str) -> Result<Vec<Migration>, StoreError> {
    let pool = one_connection(url).await?;
    let result = status(&pool, DEFAULT_SCHEMA).await;
    pool.close().await;
    result
}

/// [`apply`] to the default schema (`revenant`) at a `postgres://` URL, over one
/// connection of its own.
pub async fn apply_at(url: &str, version: Option<i64>) -> Result<Vec<Migration>, StoreError> {
    let pool = one_connection(url).await?;
    let result = apply(&pool, DEFAULT_SCHEMA, version).await;
    pool.close().await;
    result
}

/// The schema [`crate::PgStore::connect`] uses.
const DEFAULT_SCHEMA: &str = "revenant";

async fn one_connection(url: &str) -> Result<PgPool, StoreError> {
    let options = crate::PgStoreOptions::default();
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(options.acquire_timeout)
        .connect_with(parse_url(url)?.application_name(&options.application_name))
        .await
        .classified()
}

fn apply_inner<'a>(
    pool: &'a PgPool,
    schema: &'a str,
    version: Option<i64>,
) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, StoreError>> + Send + 'a>> {
    Box::pin(apply_locked(pool, schema, version))
}

async fn apply_locked(
    pool: &PgPool,
    schema: &str,
    version: Option<i64>,
) -> Result<Vec<Migration>, StoreError> {
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

    let mut done = Vec::new();
    for migration in MIGRATIONS {
        if applied.contains(&migration.version)
            || version.is_some_and(|v| i64::from(migration.version) > v)
        {
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
        done.push(migration);
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
    let now: Timestamp = sqlx::query_scalar("SELECT now()")
        .fetch_one(&mut *tx)
        .await
        .classified()?;
    tx.commit().await.classified()?;
    Ok(done
        .into_iter()
        .map(|m| Migration {
            version: i64::from(m.version),
            name: m.name.to_string(),
            applied_at: Some(now),
        })
        .collect())
}
