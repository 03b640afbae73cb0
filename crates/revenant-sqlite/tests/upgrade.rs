//! Upgrading a database of the first schema: migration 1 applied, jobs in every state
//! written with that schema's SQL, then a normal open applies the rest and every job
//! is intact and workable (`revenant_conformance::upgrade`). Also: a store opened with
//! `MigrateMode::Never` refuses a database with a pending migration.

use std::sync::Arc;

use revenant_conformance::upgrade::{check_upgraded, first_schema_jobs, QUEUES};
use revenant_core::migration::MigrateMode;
use revenant_core::{Store, StoreError};
use revenant_sqlite::{migrate, SqliteStore};
use sqlx::SqlitePool;

fn ms(at: chrono::DateTime<chrono::Utc>) -> i64 {
    at.timestamp_millis()
}

/// Writes the staged jobs with the first schema's columns, as revenant 0001 did.
async fn fill_first_schema(url: &str) {
    let pool = SqlitePool::connect(url)
        .await
        .expect("open the old database");
    for queue in QUEUES {
        sqlx::query(
            "INSERT INTO queues (name, paused, created_at, updated_at) VALUES (?, 0, ?, ?)",
        )
        .bind(queue)
        .bind(0_i64)
        .bind(0_i64)
        .execute(&pool)
        .await
        .expect("insert queue");
    }
    for job in first_schema_jobs() {
        sqlx::query(include_str!("upgrade/0001_insert_job.sql"))
            .bind(job.id)
            .bind(&job.queue)
            .bind(&job.kind)
            .bind(job.payload.to_string())
            .bind(job.status.as_str())
            .bind(job.priority)
            .bind(job.attempts)
            .bind(job.max_attempts)
            .bind(ms(job.run_at))
            .bind(ms(job.created_at))
            .bind(job.attempted_at.map(ms))
            .bind(job.finished_at.map(ms))
            .bind(job.lease_token.map(|t| t.0))
            .bind(job.lease_expires_at.map(ms))
            .bind(&job.worker)
            .bind(&job.group_key)
            .bind(&job.unique_key)
            .bind(&job.correlation_id)
            .bind(job.dead_reason.map(|r| r.as_str()))
            .bind(serde_json::to_string(&job.errors).expect("errors as JSON"))
            .bind(job.redrives)
            .execute(&pool)
            .await
            .unwrap_or_else(|err| panic!("insert job {} with the first schema: {err}", job.id));
    }
    pool.close().await;
}

fn versions(migrations: &[revenant_core::migration::Migration], applied: bool) -> Vec<i64> {
    migrations
        .iter()
        .filter(|m| m.applied_at.is_some() == applied)
        .map(|m| m.version)
        .collect()
}

#[tokio::test]
async fn a_first_schema_database_upgrades_with_every_job_intact_and_workable() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("old.db").display());

    let applied = migrate::apply(&url, Some(1))
        .await
        .expect("apply migration 1");
    assert_eq!(versions(&applied, true), vec![1]);
    let status = migrate::status(&url).await.unwrap();
    assert_eq!(versions(&status, true), vec![1]);
    assert!(
        !versions(&status, false).is_empty(),
        "later migrations are pending"
    );
    fill_first_schema(&url).await;

    let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await.expect("upgrade"));
    let status = migrate::status(&url).await.unwrap();
    assert_eq!(
        versions(&status, false),
        Vec::<i64>::new(),
        "all applied: {status:?}"
    );
    check_upgraded(&store).await;
}

#[tokio::test]
async fn never_refuses_a_pending_migration_and_opens_once_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("old.db").display());
    migrate::apply(&url, Some(1)).await.unwrap();

    match SqliteStore::connect_with(&url, MigrateMode::Never).await {
        Err(StoreError::Backend { message, .. }) => {
            assert!(message.contains("revenant migrate"), "{message}");
            assert!(message.contains("0002_dead_letters"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Refusing changed nothing.
    assert_eq!(
        versions(&migrate::status(&url).await.unwrap(), true),
        vec![1]
    );

    let applied = migrate::apply(&url, None).await.unwrap();
    assert_eq!(applied.first().map(|m| m.version), Some(2));
    assert!(
        migrate::apply(&url, None).await.unwrap().is_empty(),
        "nothing left"
    );
    SqliteStore::connect_with(&url, MigrateMode::Never)
        .await
        .expect("a current schema opens with never");
}
