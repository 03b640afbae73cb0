//! Upgrading a schema of the first migration: migration 1 applied, jobs in every state
//! written with that schema's SQL, then a normal connect applies the rest and every
//! job is intact and workable (`revenant_conformance::upgrade`). Also: a store with
//! `MigrateMode::Never` refuses a schema with a pending migration.

mod support;

use std::sync::Arc;

use revenant_conformance::upgrade::{check_upgraded, first_schema_jobs, QUEUES};
use revenant_core::migration::{MigrateMode, Migration};
use revenant_core::{Store, StoreError};
use revenant_postgres::{migrate, PgStore, PgStoreOptions};
use sqlx::PgPool;

use support::{admin, database_url, fresh_schema};

/// Writes the staged jobs with the first schema's columns, as revenant 0001 did.
async fn fill_first_schema(pool: &PgPool, schema: &str) {
    let quoted = format!("\"{schema}\"");
    for queue in QUEUES {
        sqlx::query(&format!(
            "INSERT INTO {quoted}.queues (name, paused, created_at, updated_at) VALUES ($1, false, now(), now())"
        ))
        .bind(queue)
        .execute(pool)
        .await
        .expect("insert queue");
    }
    let insert = include_str!("upgrade/0001_insert_job.sql").replace("{schema}", &quoted);
    for job in first_schema_jobs() {
        sqlx::query(&insert)
            .bind(job.id)
            .bind(&job.queue)
            .bind(&job.kind)
            .bind(&job.payload)
            .bind(job.status.as_str())
            .bind(job.priority)
            .bind(job.attempts)
            .bind(job.max_attempts)
            .bind(job.run_at)
            .bind(job.created_at)
            .bind(job.attempted_at)
            .bind(job.finished_at)
            .bind(job.lease_token.map(|t| t.0))
            .bind(job.lease_expires_at)
            .bind(&job.worker)
            .bind(&job.group_key)
            .bind(&job.unique_key)
            .bind(&job.correlation_id)
            .bind(job.dead_reason.map(|r| r.as_str()))
            .bind(serde_json::to_value(&job.errors).expect("errors as JSON"))
            .bind(job.redrives)
            .execute(pool)
            .await
            .unwrap_or_else(|err| panic!("insert job {} with the first schema: {err}", job.id));
    }
}

fn versions(migrations: &[Migration], applied: bool) -> Vec<i64> {
    migrations
        .iter()
        .filter(|m| m.applied_at.is_some() == applied)
        .map(|m| m.version)
        .collect()
}

async fn drop_schema(pool: &PgPool, schema: &str) {
    let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .execute(pool)
        .await;
}

#[tokio::test]
async fn a_first_schema_database_upgrades_with_every_job_intact_and_workable() {
    let Some(_admin) = admin().await else { return };
    let url = database_url();
    let schema = fresh_schema();
    let pool = PgPool::connect(&url).await.expect("connect");

    let applied = migrate::apply(&pool, &schema, Some(1))
        .await
        .expect("migration 1");
    assert_eq!(versions(&applied, true), vec![1]);
    let status = migrate::status(&pool, &schema).await.unwrap();
    assert_eq!(versions(&status, true), vec![1]);
    assert!(
        !versions(&status, false).is_empty(),
        "later migrations are pending"
    );
    fill_first_schema(&pool, &schema).await;

    let store = PgStore::connect_with_schema(&url, &schema)
        .await
        .expect("upgrade");
    let status = migrate::status(&pool, &schema).await.unwrap();
    assert_eq!(
        versions(&status, false),
        Vec::<i64>::new(),
        "all applied: {status:?}"
    );
    let store: Arc<dyn Store> = Arc::new(store);
    check_upgraded(&store).await;

    drop(store);
    drop_schema(&pool, &schema).await;
}

#[tokio::test]
async fn never_refuses_a_pending_migration_and_connects_once_migrated() {
    let Some(_admin) = admin().await else { return };
    let url = database_url();
    let schema = fresh_schema();
    let pool = PgPool::connect(&url).await.expect("connect");
    migrate::apply(&pool, &schema, Some(1)).await.unwrap();
    let never = PgStoreOptions {
        migrate: MigrateMode::Never,
        ..PgStoreOptions::with_schema(&schema)
    };

    match PgStore::connect_with(&url, never.clone()).await {
        Err(StoreError::Backend { message, .. }) => {
            assert!(message.contains("revenant migrate"), "{message}");
            assert!(message.contains("0002_dead_letters"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        versions(&migrate::status(&pool, &schema).await.unwrap(), true),
        vec![1]
    );

    let applied = migrate::apply(&pool, &schema, None).await.unwrap();
    assert_eq!(applied.first().map(|m| m.version), Some(2));
    assert!(
        migrate::apply(&pool, &schema, None)
            .await
            .unwrap()
            .is_empty(),
        "nothing left"
    );
    let store = PgStore::connect_with(&url, never)
        .await
        .expect("a current schema connects with never");
    drop(store);
    drop_schema(&pool, &schema).await;
}
